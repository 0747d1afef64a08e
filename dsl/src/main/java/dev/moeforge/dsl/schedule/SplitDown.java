package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The expert MLP of 4-bit weights as one kernel with no wait between blocks (bench/NOTES.md,
 * "down split along its K inside gate_up's blocks"). A block takes one (token, routed slot) and 16
 * neurons: two gate_up tiles as in {@link OutputTensorCore} give their h; then the same warps
 * multiply the 16 h into down's 16 matching columns, for every hidden row, on the tensor cores, and
 * add the products, times the routing weight, into y with 16-byte atomic adds. Down's columns come
 * repacked in tiles of 16 (a one-time repack on load, {@code SplitDownWeights}), so one 16-byte load
 * per lane holds four mmas' fragments. Lowers {@code expert_mlp} of 4-bit formats.
 *
 * @param warpsPerCta    warps per thread block: twice warpsPerTile (two tiles of 8 neurons)
 * @param kUnroll        gate_up steps in a group, whose loads each lane issues before the first is used
 * @param warpsPerTile   warps that share a gate_up tile, as in {@link OutputTensorCore}
 * @param minBlocksPerSm the occupancy promise given to ptxas, as in {@link OutputCentric}
 * @param orderLoads     make every code word of a gate_up group depend on the group's scale loads,
 *                       so that ptxas issues all of them before the first decode (it helps where
 *                       ptxas otherwise decodes a group's first step before asking for its last
 *                       scales; bench/NOTES.md has the measurements)
 */
public record SplitDown(int warpsPerCta, int kUnroll, int warpsPerTile, int minBlocksPerSm, boolean orderLoads)
        implements Schedule<Problem.ExpertMlp> {

    public static final ScheduleKind<SplitDown, Problem.ExpertMlp> KIND = new ScheduleKind<>("split_down", SplitDown.class,
            Problem.ExpertMlp.class, SplitDown::space);

    /** Rows of down in one quad. */
    public static final int QUAD_ROWS = 64;
    /** Columns of down (neurons) in one tile: a block's two gate_up tiles of 8. */
    public static final int TILE_COLUMNS = 16;

    @Override
    public ScheduleKind<SplitDown, Problem.ExpertMlp> kind() {
        return KIND;
    }

    /** Blocks of two tiles of 1-16 warps, 1-8 steps in flight, promises 0-4, loads ordered or not. */
    private static List<SplitDown> space(Problem.ExpertMlp problem, Target target) {
        List<SplitDown> out = new ArrayList<>();
        for (int perTile : ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target) / 2)) {
            for (SplitDown s : ScheduleRules.grid(KIND, List.of(List.of(2 * perTile), List.of(1, 2, 3, 4, 6, 8),
                    List.of(perTile), List.of(0, 1, 2, 3, 4), List.of(false, true)))) {
                out.add(s);
            }
        }
        return out;
    }

    /**
     * Whether down weights {@code [E][hidden][intermediate]} in {@code format} can be repacked for
     * split_down: 4-bit codes with scales along K, whole quads and tiles (the same rule as
     * {@link #check} for weights).
     */
    public static boolean fits(WeightFormat format, int hidden, int intermediate) {
        return format.element().bits() == 4 && !format.blockScale().blockRows() && hidden % QUAD_ROWS == 0
                && intermediate % TILE_COLUMNS == 0;
    }

    @Override
    public void check(Problem.ExpertMlp m, Target target, List<SpecError> errors) {
        ScheduleRules.fourBit(errors, m.weights(), KIND.name(), ": down's columns are decoded on the tensor cores");
        int maxWarps = ScheduleRules.maxWarps(target);
        range(errors, "schedule.warps_per_tile", warpsPerTile, 1, maxWarps / 2);
        if (warpsPerTile >= 1 && warpsPerCta != 2 * warpsPerTile) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(warpsPerCta),
                    "2 x warps_per_tile = " + 2 * warpsPerTile + ": a block is two gate_up tiles of 8 neurons, the "
                            + TILE_COLUMNS + " columns of down it multiplies"));
        }
        range(errors, "schedule.k_unroll", kUnroll, 1, 8);
        if (orderLoads && m.weights().blockScale() == WeightFormat.BlockScale.NONE) {
            errors.add(new SpecError("schedule.order_loads", "true", "false for " + m.weights().text() + ", which has no "
                    + "K-block scales to order the code loads after (true takes nvfp4, mxfp4 or int4_group128)"));
        }
        ScheduleRules.minBlocks(errors, warpsPerCta, minBlocksPerSm, target);
        if (!ScheduleRules.dimensionsInRange(m.shape())) {
            return;
        }
        if (m.shape().hidden() % QUAD_ROWS != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(m.shape().hidden()), "a multiple of "
                    + QUAD_ROWS + " under split_down: down's rows are multiplied in quads of 64 (one "
                    + "16-byte load per lane holds four mmas' fragments)"));
        }
        if (m.shape().intermediate() % TILE_COLUMNS != 0) {
            errors.add(new SpecError("problem.intermediate", Integer.toString(m.shape().intermediate()), "a multiple of "
                    + TILE_COLUMNS + " under split_down: a block multiplies 16 neurons into down"));
        }
        if (warpsPerCta >= 1 && warpsPerTile >= 1) {
            ScheduleRules.sharedLimit(errors, sharedBytes(m), target,
                    "the token's staged x grows with hidden, the partial sums with warps_per_cta");
        }
    }

    /**
     * The derived sizes of a split_down kernel, the single statement of them for validation, the
     * launch and the repack of down ({@code SplitDownWeights}); the device header's
     * {@code mlp_split_down} lays memory out the same way and static_asserts that its bytes equal these.
     *
     * @param quads        64-row quads of down's hidden rows (one 16-byte load per lane is four mmas' A fragments)
     * @param tiles        16-column tiles of down's intermediate columns: one per thread block and slot
     * @param quadsPerWarp quads each warp of a block multiplies (the last warps may have one fewer)
     * @param sharedBytes  the token's staged x (padded to whole steps), the warps' partial sums, the 16 h
     */
    public record Layout(int quads, int tiles, int quadsPerWarp, long sharedBytes) {

        public static Layout of(Problem.ExpertMlp problem, SplitDown s) {
            int hidden = problem.shape().hidden();
            int quads = hidden / QUAD_ROWS;
            int tiles = problem.shape().intermediate() / TILE_COLUMNS;
            int steps = Math.ceilDiv(hidden / OutputTensorCore.CODES_PER_CHUNK, OutputTensorCore.CHUNKS_PER_STEP);
            long activations = OutputTensorCore.Layout.stagedBytes(1, steps);
            long partials = OutputTensorCore.Layout.partialBytes(s.warpsPerTile(), s.warpsPerCta());
            long h = 2L * TILE_COLUMNS;
            return new Layout(quads, tiles, Math.ceilDiv(quads, Math.max(1, s.warpsPerCta())), activations + partials + h);
        }
    }

    public Layout layout(Problem.ExpertMlp problem) {
        return Layout.of(problem, this);
    }

    @Override
    public long sharedBytes(Problem.ExpertMlp problem) {
        return layout(problem).sharedBytes();
    }

    /** One block per (16 neurons, token and routed slot). */
    @Override
    public LaunchGeometry geometry(Problem.ExpertMlp problem, int tokens) {
        Layout layout = layout(problem);
        return new LaunchGeometry(layout.tiles(), tokens * problem.shape().topk(), ScheduleRules.threads(warpsPerCta),
                Math.toIntExact(layout.sharedBytes()));
    }

    /** gridDim.y's bound, and the kernel zeroes M * H floats counted in an int. */
    @Override
    public int maxTokens(Problem.ExpertMlp m) {
        return Math.min(LaunchGeometry.MAX_GRID_Y / m.shape().topk(), Integer.MAX_VALUE / m.shape().hidden());
    }

    @Override
    public ScheduleModel model(Problem.ExpertMlp problem, Store epilogue) {
        Layout layout = layout(problem);
        List<String> notes = new ArrayList<>();
        notes.add("expert MLP: one block per (token, routed slot, 16 neurons): two gate_up tiles of 8 neurons (gate and up rows "
                + (problem.layout() == GateUpLayout.STACKED ? "stacked" : "interleaved") + ", " + warpsPerTile
                + " warps per tile, " + kUnroll + " steps in flight per lane) give the 16 h, rounded to "
                + epilogue.dtype().text() + "; the block then multiplies them into down's 16 matching columns "
                + "for all " + problem.shape().hidden() + " rows (" + layout.quads() + " quads of 64, at most "
                + layout.quadsPerWarp() + " per warp, mma.sync m16n8k16) and adds the products times the routing weight "
                + "into y with 16-byte atomic adds.");
        notes.add(ScheduleRules.formatNote(problem.weights(), true));
        notes.add("Down's codes and K-block scales come repacked in 16-column tiles (SplitDownWeights); its row or tensor "
                + "scales as loaded.");
        if (orderLoads) {
            notes.add("Each gate_up group's code words depend on its scale loads, so ptxas issues all of them before the "
                    + "first decode.");
        }
        notes.add("y (FP32) is added to and must be zero before the launch; y_zero's first M rows are set to zero for a later "
                + "launch. The order of the adds, and so y's last bits, vary from launch to launch.");
        notes.add("Each (token, slot) adds on its own: ids outside [0, E) contribute nothing.");
        return new ScheduleModel("expert.cu.ftl", "mlp_split_down", List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kWarpsPerTile", warpsPerTile),
                ConfigConstant.bool("kOrderLoads", orderLoads)),
                notes, minBlocksPerSm, 1, Optional.empty());
    }

    @Override
    public String spillAdvice() {
        return "more warps per tile (warps_per_tile " + warpsPerTile + "; each warp holds its quads of down's rows, 64 per "
                + "quad, in registers), fewer steps in flight (k_unroll " + kUnroll + ") or a lower blocks-per-SM promise "
                + "(min_blocks_per_sm " + minBlocksPerSm + "; 3 blocks of 8 warps leave 80 registers)";
    }
}
