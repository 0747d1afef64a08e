package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Optional;

/**
 * A linear projection for a few tokens (decode): block (slice, token group) computes
 * {@code outputsPerCta} outputs for {@code tokensPerCta} tokens, one warp per output row (or
 * several warps per row, their parts added in shared memory in warp order, when the block has at
 * least twice as many warps as outputs). A warp streams its weight row once, {@code kUnroll} loads
 * in flight per lane, and multiplies each load by every token of the group (their rows re-read from
 * L1), so a batch reads the weights once per token group; lane t adds the bias to token t's sum,
 * applies the epilogue and stores. The groups of a slice are neighbours in the grid, so they run together and
 * share the slice's weights in L2. Under programmatic dependent launch the first weight loads are
 * issued before the wait for the previous kernel (the weights are the step's constants; the
 * activations are its input). Lowers {@code linear}.
 *
 * @param warpsPerCta   warps per thread block
 * @param loadBytes     bytes each lane loads per load of a weight row (16 = LDG.128)
 * @param kUnroll       loads per lane issued before the first is used
 * @param outputsPerCta outputs of one token group per thread block
 * @param tokensPerCta  tokens per thread block, each with its own sums (up to 16)
 */
public record LinearGemv(int warpsPerCta, int loadBytes, int kUnroll, int outputsPerCta, int tokensPerCta) implements LinearSchedule {

    public static final ScheduleKind<LinearGemv, Problem.Linear> KIND = new ScheduleKind<>("linear_gemv", LinearGemv.class,
            Problem.Linear.class, LinearGemv::space, true);

    @Override
    public ScheduleKind<LinearGemv, Problem.Linear> kind() {
        return KIND;
    }

    /** The most tokens one block keeps sums for: every token's row is re-read from L1 per weight load. */
    public static final int MAX_TOKENS_PER_CTA = 16;

    /** Warps, loads in flight, outputs and tokens per block in powers of two; every load width. */
    private static List<LinearGemv> space(Problem.Linear problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)),
                ScheduleRules.LOAD_BYTES, ScheduleRules.powersOfTwo(1, 16), ScheduleRules.powersOfTwo(1, 64),
                ScheduleRules.powersOfTwo(1, MAX_TOKENS_PER_CTA)));
    }

    @Override
    public void check(Problem.Linear l, Target target, List<SpecError> errors) {
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        ScheduleRules.rowLoads(errors, "problem.inputs", l.inputs(), l.weights(), loadBytes);
        range(errors, "schedule.k_unroll", kUnroll, 1, 16);
        range(errors, "schedule.outputs_per_cta", outputsPerCta, 1, Math.max(1, Math.min(l.outputs(), 1024)));
        range(errors, "schedule.tokens_per_cta", tokensPerCta, 1, MAX_TOKENS_PER_CTA);
        ScheduleRules.normedRows(errors, l.inputNorm(), tokensPerCta, "schedule.tokens_per_cta", l.inputs(), "problem.inputs");
    }

    @Override
    public ScheduleModel model(Problem.Linear l, Store epilogue) {
        int split = RouterGemv.warpsPerScore(warpsPerCta, outputsPerCta);
        List<ConfigConstant> config = List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kLoadBytes", loadBytes),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kOutputsPerCta", outputsPerCta),
                ConfigConstant.integer("kWarpsPerOutput", split),
                ConfigConstant.integer("kTokensPerCta", tokensPerCta));
        List<String> notes = List.of(
                "linear: " + blocksPerToken(l) + " blocks per group of " + tokensPerCta + (tokensPerCta == 1 ? " token, " : " tokens, ")
                        + (split == 1 ? "one warp per output" : "each output split over " + split + " warps (parts added in warp order)")
                        + "; lane t adds the bias to token t's sum, applies the epilogue and stores.",
                "Each lane loads " + loadBytes + " bytes, " + kUnroll + " loads in flight per row, the first before the wait for the previous kernel.");
        // A minimum of one block per SM (always true) only steers ptxas: without it, token groups left
        // a few bytes of spills at 80 registers.
        return new ScheduleModel("expert.cu.ftl", "linear_gemv", config, notes, 1, 1, Optional.empty(), DeviceLibrary.CORE, true);
    }

    @Override
    public String spillAdvice() {
        return RouterGemv.fewerLoadsOrWarps(kUnroll, warpsPerCta);
    }
}
