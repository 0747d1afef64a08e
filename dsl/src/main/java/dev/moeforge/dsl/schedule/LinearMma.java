package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Optional;

/**
 * A linear projection for a batch of a few to a few dozen tokens on the tensor cores
 * ({@code mma.sync} m16n8k16, every target): block (slice, token group) computes
 * {@code outputsPerCta} outputs for {@code tokensPerCta} tokens. The weight rows are the MMA's
 * 16-row side and the tokens its 8-column side, so a batch of 8 pads nothing, and each lane's two
 * 16-byte loads of a 32-input step (rows g and g + 8) are its A fragments as they are: both
 * operands take the inputs in the same permuted order, which leaves the dot products unchanged. The
 * block's warps split the inputs (warp w takes steps w, w + warps, ...), {@code kUnroll} steps of
 * weight loads in flight per lane, and their sums meet in shared memory, added in warp order. The
 * weights are read once per token group (the groups of a slice are neighbours in the grid and share
 * it in L2). Lowers {@code linear}.
 *
 * @param warpsPerCta   warps per thread block, each on its share of the inputs
 * @param kUnroll       32-input steps of weight loads each lane has in flight
 * @param outputsPerCta outputs per block: 16, 32, 48 or 64 (tiles of 16 rows)
 * @param tokensPerCta  tokens per block: 8 to 64 (tiles of 8)
 */
public record LinearMma(int warpsPerCta, int kUnroll, int outputsPerCta, int tokensPerCta) implements LinearSchedule {

    public static final ScheduleKind<LinearMma, Problem.Linear> KIND = new ScheduleKind<>("linear_mma", LinearMma.class,
            Problem.Linear.class, LinearMma::space);

    @Override
    public ScheduleKind<LinearMma, Problem.Linear> kind() {
        return KIND;
    }

    /** Rows of one MMA tile: its M side. */
    public static final int ROW_TILE = 16;
    /** Tokens of one MMA tile: its N side. */
    public static final int TOKEN_TILE = 8;
    /** Inputs of one step: two MMAs of k = 16, each lane loading 8 inputs of each of its two rows. */
    public static final int STEP_INPUTS = 32;
    /** Token tiles a block may take. */
    public static final int MAX_TOKEN_TILES = 8;
    /** Row tiles times token tiles: each takes 4 registers of sums per thread. */
    public static final int MAX_ACCUMULATOR_TILES = 16;
    /** Row tiles times steps in flight: each takes 8 registers per thread. */
    public static final int MAX_ROW_TILE_STEPS = 8;
    /** Static shared memory a block may hold for its warps' sums. */
    static final int MAX_PARTS_BYTES = 48 << 10;

    private static List<LinearMma> space(Problem.Linear problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(ScheduleRules.powersOfTwo(1, 16), ScheduleRules.powersOfTwo(1, 8),
                List.of(16, 32, 64), List.of(8, 16, 32, 64)));
    }

    @Override
    public void check(Problem.Linear l, Target target, List<SpecError> errors) {
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        range(errors, "schedule.k_unroll", kUnroll, 1, MAX_ROW_TILE_STEPS);
        if (l.inputs() % 8 != 0) {
            errors.add(new SpecError("problem.inputs", Integer.toString(l.inputs()),
                    "a multiple of 8 for linear_mma (each lane loads 16 bytes = 8 inputs of a row); linear_gemv takes any width"));
        }
        if (outputsPerCta % ROW_TILE != 0 || outputsPerCta < ROW_TILE || outputsPerCta > 4 * ROW_TILE) {
            errors.add(new SpecError("schedule.outputs_per_cta", Integer.toString(outputsPerCta), "16, 32, 48 or 64 (tiles of 16 rows)"));
        }
        if (tokensPerCta % TOKEN_TILE != 0 || tokensPerCta < TOKEN_TILE || tokensPerCta > MAX_TOKEN_TILES * TOKEN_TILE) {
            errors.add(new SpecError("schedule.tokens_per_cta", Integer.toString(tokensPerCta),
                    "a multiple of 8 from 8 to " + MAX_TOKEN_TILES * TOKEN_TILE + " (tiles of 8 tokens)"));
        }
        if (outputsPerCta % ROW_TILE == 0 && tokensPerCta % TOKEN_TILE == 0 && rowTiles() * (tokensPerCta / TOKEN_TILE) > MAX_ACCUMULATOR_TILES) {
            errors.add(new SpecError("schedule.tokens_per_cta", Integer.toString(tokensPerCta), "at most "
                    + MAX_ACCUMULATOR_TILES / Math.max(1, rowTiles()) * TOKEN_TILE + " with " + outputsPerCta
                    + " outputs per block (row tiles x token tiles at most " + MAX_ACCUMULATOR_TILES + ": each holds 4 FP32 sums per thread)"));
        }
        if (outputsPerCta % ROW_TILE == 0 && kUnroll >= 1 && rowTiles() * kUnroll > MAX_ROW_TILE_STEPS) {
            errors.add(new SpecError("schedule.k_unroll", Integer.toString(kUnroll), "at most " + MAX_ROW_TILE_STEPS / Math.max(1, rowTiles())
                    + " with " + outputsPerCta + " outputs per block (row tiles x steps in flight at most " + MAX_ROW_TILE_STEPS
                    + ": each holds 8 registers per thread)"));
        }
        if (warpsPerCta >= 1 && partsBytes() > MAX_PARTS_BYTES) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(warpsPerCta), "at most "
                    + MAX_PARTS_BYTES / (4 * outputsPerCta * tokensPerCta) + " with " + outputsPerCta + " outputs and " + tokensPerCta
                    + " tokens per block (each warp's sums take " + 4 * outputsPerCta * tokensPerCta + " bytes of shared memory, at most "
                    + MAX_PARTS_BYTES + ")"));
        }
    }

    private int rowTiles() {
        return outputsPerCta / ROW_TILE;
    }

    private long partsBytes() {
        return 4L * warpsPerCta * outputsPerCta * tokensPerCta;
    }

    @Override
    public ScheduleModel model(Problem.Linear l, Store epilogue) {
        List<ConfigConstant> config = List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kOutputsPerCta", outputsPerCta),
                ConfigConstant.integer("kTokensPerCta", tokensPerCta));
        List<String> notes = List.of(
                "linear on mma.sync m16n8k16: " + blocksPerToken(l) + " blocks per group of " + tokensPerCta + " tokens, "
                        + rowTiles() + (rowTiles() == 1 ? " tile" : " tiles") + " of 16 rows by " + tokensPerCta / TOKEN_TILE
                        + (tokensPerCta == TOKEN_TILE ? " tile" : " tiles") + " of 8 tokens; " + warpsPerCta
                        + (warpsPerCta == 1 ? " warp" : " warps, each on every " + warpsPerCta + "th step of 32 inputs, their sums added in warp order") + ".",
                "Each lane has " + kUnroll + (kUnroll == 1 ? " step" : " steps") + " of weight loads (16 bytes per row tile and row) in flight, "
                        + "the first before the wait for the previous kernel.");
        return new ScheduleModel("expert.cu.ftl", "linear_mma", config, notes, 1, 1, Optional.empty(), DeviceLibrary.CORE, true);
    }

    @Override
    public String spillAdvice() {
        return "fewer steps in flight (k_unroll " + kUnroll + "), fewer outputs (outputs_per_cta " + outputsPerCta
                + ") or fewer tokens per block (tokens_per_cta " + tokensPerCta + ")";
    }
}
