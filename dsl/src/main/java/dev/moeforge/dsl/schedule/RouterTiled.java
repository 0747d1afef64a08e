package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The prefill router: a thread block owns a tile of {@code tokensPerCta} tokens and every expert,
 * computes the tile's scores on the tensor cores ({@code mma.sync} m16n8k16, BF16 in, FP32 out)
 * from a {@code stages}-deep {@code cp.async} pipeline of {@code kTile}-wide slices of x and W_r in
 * shared memory, then puts the scores in shared memory, where each warp takes whole rows and
 * evaluates the routing rule in registers. The (M, E) scores never reach global memory; no
 * workspace. Lowers {@code router}.
 *
 * <p>Warps form {@code tokensPerCta / tokensPerWarp} row groups, {@code kGroups} k groups (each
 * takes every kGroups-th 16-wide step of a slice; their partial sums are added in group order) and
 * as many column groups as the remaining warps make. Shared memory reads bind this loop: a slice
 * is read once per row group (W_r) and once per column group (x), so larger warp tiles and k groups
 * read less for the same warps. With {@code clusterSplit > 1} a cluster of that many blocks shares
 * one tile, each summing ceil(slices / clusterSplit) of the slices (the last share may be shorter,
 * or empty); the blocks exchange partial sums through distributed shared memory and each evaluates
 * the rule for its share of the rows (each block then streams only its part of W_r).
 *
 * @param tokensPerCta  tokens per tile, a multiple of 16 (the mma's M), 16..128
 * @param tokensPerWarp tokens of a warp's tile, a multiple of 16 dividing tokensPerCta
 * @param warpsPerCta   warps per block: row groups x k groups x column groups
 * @param kTile         elements of the hidden dimension per pipeline stage, 32 or 64
 * @param stages        pipeline depth, 2..4
 * @param kGroups       warps that split a slice's 16-wide steps, 1, 2 or 4 (at most kTile / 16)
 * @param clusterSplit  blocks of a cluster that split the hidden dimension, 1, 2, 4 or 8, at most
 *                      the number of kTile slices
 */
public record RouterTiled(int tokensPerCta, int tokensPerWarp, int warpsPerCta, int kTile, int stages, int kGroups,
                          int clusterSplit) implements Schedule<Problem.Router> {

    public static final ScheduleKind<RouterTiled, Problem.Router> KIND = new ScheduleKind<>("router_tiled", RouterTiled.class,
            Problem.Router.class, RouterTiled::space);

    @Override
    public ScheduleKind<RouterTiled, Problem.Router> kind() {
        return KIND;
    }

    /** Every tile, warp tile, slice width, depth, k grouping and split the rules allow; warps in powers of two. */
    private static List<RouterTiled> space(Problem.Router problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(List.of(16, 32, 48, 64, 80, 96, 112, 128), List.of(16, 32, 48, 64, 80, 96, 112, 128),
                ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)), List.of(32, 64), List.of(2, 3, 4),
                List.of(1, 2, 4), List.of(1, 2, 4, 8)));
    }

    @Override
    public void check(Problem.Router r, Target target, List<SpecError> errors) {
        int before = errors.size();
        if (tokensPerCta < 16 || tokensPerCta > 128 || tokensPerCta % 16 != 0) {
            errors.add(new SpecError("schedule.tokens_per_cta", Integer.toString(tokensPerCta),
                    "16, 32, 48, ... 128: a multiple of 16, the tensor-core tile's rows"));
        }
        if (tokensPerWarp < 16 || tokensPerWarp % 16 != 0 || tokensPerWarp > tokensPerCta || tokensPerCta % tokensPerWarp != 0) {
            errors.add(new SpecError("schedule.tokens_per_warp", Integer.toString(tokensPerWarp),
                    "a multiple of 16 (the tensor-core tile's rows) that divides tokens_per_cta = " + tokensPerCta));
        }
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        if (kTile != 32 && kTile != 64) {
            errors.add(new SpecError("schedule.k_tile", Integer.toString(kTile), "32 or 64"));
        }
        range(errors, "schedule.stages", stages, 2, 4);
        if (kGroups != 1 && kGroups != 2 && kGroups != 4 || kTile >= 16 && kGroups > kTile / 16) {
            errors.add(new SpecError("schedule.k_groups", Integer.toString(kGroups),
                    "1, 2 or 4, and at most k_tile / 16 = " + Math.max(1, kTile / 16)
                            + " (each k group takes whole 16-wide steps of a slice)"));
        }
        if (clusterSplit != 1 && clusterSplit != 2 && clusterSplit != 4 && clusterSplit != 8) {
            errors.add(new SpecError("schedule.cluster_split", Integer.toString(clusterSplit),
                    "1, 2, 4 or 8: the blocks of a portable cluster that split the hidden dimension"));
        }
        if (r.hidden() >= 1 && r.hidden() <= Limits.MAX_DIMENSION && r.hidden() % 8 != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(r.hidden()),
                    "a multiple of 8 for router_tiled: x and W_r rows are copied in 16-byte pieces"));
        }
        if (errors.size() > before || r.experts() < 1 || r.experts() > Limits.MAX_EXPERTS || r.hidden() < 1) {
            return;
        }
        int rowGroups = tokensPerCta / tokensPerWarp;
        if (warpsPerCta % (rowGroups * kGroups) != 0) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(warpsPerCta),
                    "a multiple of (tokens_per_cta / tokens_per_warp) x k_groups = " + rowGroups * kGroups
                            + " (every warp owns tokens_per_warp tokens of the tile in one k group)"));
            return;
        }
        int ownRows = tokensPerCta / clusterSplit;
        if (ownRows % warpsPerCta != 0) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(warpsPerCta),
                    "a divisor of tokens_per_cta / cluster_split = " + ownRows + " (each warp evaluates the rule for "
                            + "the same number of a block's rows)"));
            return;
        }
        Layout layout = layout(r);
        if (clusterSplit > layout.slices()) {
            errors.add(new SpecError("schedule.cluster_split", Integer.toString(clusterSplit),
                    "at most the " + layout.slices() + " k_tile slices of hidden = " + r.hidden()
                            + " (more blocks than slices would leave some with nothing to sum)"));
        }
        int limit = Layout.accumulatorLimit(warpsPerCta);
        if (layout.accumulators(this) > limit) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(warpsPerCta),
                    "a warp tile of at most " + limit + " FP32 accumulators per thread with " + warpsPerCta
                            + " warps (at most " + Layout.MAX_ACCUMULATORS + ", and fewer above 16 warps, "
                            + "whose register share is smaller); here " + layout.accumulators(this) + " ("
                            + tokensPerWarp + " tokens x " + layout.columnsPerWarp() + " of the "
                            + layout.paddedExperts() + " padded experts; change warps_per_cta or lower tokens_per_warp)"));
        }
        ScheduleRules.sharedLimit(errors, layout.sharedBytes() + Layout.expertCountBytes(r), target,
                "lower stages, k_tile or tokens_per_cta");
    }

    /**
     * The derived sizes of a router_tiled kernel, the single statement of them for validation and
     * the launch; the device header's {@code RouterTile} computes the same and the kernel
     * static_asserts that both agree.
     *
     * <p>Warps form {@code warpRows = tokensPerCta / tokensPerWarp} row groups, {@code kGroups} k
     * groups and {@code warpColumns} column groups; the experts are padded with zero rows to
     * {@code paddedExperts}, a multiple of 16 per column group (one ldmatrix.x4 of W_r feeds two n8
     * mmas). Shared memory holds the pipeline's stages of x and W_r slices, and afterwards (reused)
     * the tile's FP32 scores, rows {@code scoreStride} floats apart; with a cluster split, an inbox
     * for the other blocks' partial sums of this block's {@code ownRows} rows (one slot per other
     * block) follows the pipeline.
     */
    public record Layout(int warpRows, int warpColumns, int paddedExperts, int columnsPerWarp, int scoreStride,
                         int slices, int ownRows, long stageBytes, long sharedBytes) {
        /** Largest accumulator count per thread: 4 FP32 per 16 x 8 mma tile, at most 64 registers. */
        public static final int MAX_ACCUMULATORS = 64;

        /** Registers a thread keeps besides its accumulators: fragments, addresses, the pipeline's counters. */
        static final int OTHER_REGISTERS = 32;

        /**
         * The accumulators a block of {@code warps} warps may hold per thread without spilling: at
         * most {@link #MAX_ACCUMULATORS}, and what __launch_bounds__'s register share (65536 per
         * block, in allocation units of 8, at most 255) leaves after {@link #OTHER_REGISTERS}.
         */
        public static int accumulatorLimit(int warps) {
            int share = Math.min(255, 65_536 / (32 * Math.max(1, warps))) & ~7;
            return Math.min(MAX_ACCUMULATORS, share - OTHER_REGISTERS);
        }

        /**
         * The block's expert histogram in static shared memory (the device header's
         * BlockExpertCounts: one int per expert) when the problem keeps expert counts, else 0. Not
         * part of {@link #sharedBytes()}, which is the dynamic shared memory the launch asks for.
         */
        public static long expertCountBytes(Problem.Router r) {
            return r.expertCounts() ? 4L * r.experts() : 0L;
        }

        /** Only meaningful for a schedule that passed the range checks of {@link RouterTiled#check}. */
        public static Layout of(Problem.Router r, RouterTiled s) {
            int warpRows = Math.max(1, s.tokensPerCta() / Math.max(16, s.tokensPerWarp()));
            int warpColumns = Math.max(1, s.warpsPerCta() / (warpRows * Math.max(1, s.kGroups())));
            int padded = Math.ceilDiv(r.experts(), 16 * warpColumns) * 16 * warpColumns;
            int perWarp = padded / warpColumns;
            // scoreStride = 8 (mod 32): a quad's float2 stores of 8 rows fall into distinct banks
            int stride = Math.ceilDiv(padded, 32) * 32 + 8;
            int split = Math.max(1, s.clusterSplit());
            int ownRows = s.tokensPerCta() / split;
            long stage = 2L * (s.tokensPerCta() + padded) * s.kTile();
            long pipelineOrTable = Math.max(stage * s.stages(), 4L * s.tokensPerCta() * stride);
            long inbox = 4L * (split - 1) * ownRows * stride;  // the other blocks' partials of this block's rows
            int slices = Math.ceilDiv(r.hidden(), s.kTile());
            return new Layout(warpRows, warpColumns, padded, perWarp, stride, slices, ownRows, stage, pipelineOrTable + inbox);
        }

        /** FP32 accumulators each thread holds: (tokensPerWarp / 16) x (columnsPerWarp / 8) mma tiles of 4. */
        public int accumulators(RouterTiled s) {
            return s.tokensPerWarp() / 16 * (columnsPerWarp / 8) * 4;
        }
    }

    public Layout layout(Problem.Router problem) {
        return Layout.of(problem, this);
    }

    @Override
    public long sharedBytes(Problem.Router problem) {
        return layout(problem).sharedBytes();
    }

    /** One block (or a cluster of clusterSplit blocks, declared in the kernel) per tile of tokensPerCta tokens. */
    @Override
    public LaunchGeometry geometry(Problem.Router problem, int tokens) {
        return new LaunchGeometry(Math.ceilDiv(tokens, tokensPerCta) * clusterSplit, 1, ScheduleRules.threads(warpsPerCta),
                Math.toIntExact(sharedBytes(problem)));
    }

    /** A tile's first token plus its row (< 128) must stay an int. */
    @Override
    public int maxTokens(Problem.Router problem) {
        return Integer.MAX_VALUE - 127;
    }

    @Override
    public ScheduleModel model(Problem.Router r, Store epilogue) {
        Layout layout = layout(r);
        List<String> notes = new ArrayList<>();
        notes.add("router: one " + (clusterSplit > 1 ? "cluster of " + clusterSplit + " blocks" : "block")
                + " per tile of " + tokensPerCta + " tokens x all " + r.experts() + " experts (padded to "
                + layout.paddedExperts() + "); each warp computes " + tokensPerWarp + " tokens x "
                + layout.columnsPerWarp() + " experts with mma.sync m16n8k16 (BF16 in, FP32 accumulate)"
                + (kGroups > 1 ? " in one of " + kGroups + " k groups (a slice's 16-wide steps dealt round-robin, "
                        + "the groups' partial sums added in group order)" : "")
                + ".");
        notes.add("x and W_r stream through a " + stages + "-stage cp.async pipeline of " + kTile
                + "-element slices, each tile starting at slice (tile mod share) of its share (the blocks do not all "
                + "read the same W_r lines at once); the scores stay in shared memory.");
        if (clusterSplit > 1) {
            int share = Math.ceilDiv(layout.slices(), clusterSplit);
            notes.add("Block q of a cluster sums slices [" + share + " q, " + share + " (q + 1)) of the " + layout.slices()
                    + ", sends the others their rows' partial sums through distributed shared memory, and after one "
                    + "cluster barrier adds its own " + layout.ownRows() + " rows' partials in block order.");
        }
        notes.add("Warp w evaluates the epilogue for rows w, w + " + warpsPerCta + ", ... of the block's " + layout.ownRows()
                + ", its " + layout.ownRows() / warpsPerCta + " rows interleaved (independent chains of shuffles and reductions).");
        notes.add("Ties go to the lower expert id; NaN ranks below every number.");
        return new ScheduleModel("router_tiled.cu.ftl", "router_tile_scores", List.of(
                ConfigConstant.integer("kTokensPerCta", tokensPerCta),
                ConfigConstant.integer("kTokensPerWarp", tokensPerWarp),
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kKTile", kTile),
                ConfigConstant.integer("kStages", stages),
                ConfigConstant.integer("kKGroups", kGroups),
                ConfigConstant.integer("kClusterSplit", clusterSplit),
                ConfigConstant.integer("kRowsPerWarp", layout.ownRows() / warpsPerCta)),
                notes, 0, clusterSplit,
                Optional.of(new TreeEvaluation(TreeEvaluation.Mode.WARP_PER_ROW,
                        "mf::load_row_shared<Config::kExperts>(scores + tile_row * Tile::kScoreStride)")));
    }

    @Override
    public String spillAdvice() {
        return "fewer tokens per warp (tokens_per_warp " + tokensPerWarp + ") or fewer warps per block (warps_per_cta "
                + warpsPerCta + ")";
    }
}
