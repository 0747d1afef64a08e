package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
import dev.moeforge.dsl.ir.Schedule.OutputCentric;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Checks a spec before any code is generated. Every rule names the field path, the value and what
 * is allowed; all problems are collected, not just the first.
 */
public final class Validator {
    /** Largest expert count: the tile routing table keeps a bitmap of 32 words of 32 bits. */
    public static final int MAX_EXPERTS = 1024;
    /** Largest top-k: one token's routed slots fit one warp's lanes. */
    public static final int MAX_TOPK = 32;
    /** Largest token tile: a tile's tokens are one 32-bit mask. */
    public static final int MAX_TOKENS_PER_CTA = 32;
    public static final int MAX_DIMENSION = 1 << 16;
    public static final Set<Integer> LOAD_BYTES = Set.of(4, 8, 16);

    private static final Pattern IDENTIFIER = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,99}");


    private Validator() {}

    /** Throws {@link SpecException} listing every problem of {@code spec}; returns it when valid. */
    public static KernelSpec check(KernelSpec spec) {
        List<SpecError> errors = errors(spec);
        if (!errors.isEmpty()) {
            throw new SpecException(spec.name(), errors);
        }
        return spec;
    }

    public static List<SpecError> errors(KernelSpec spec) {
        List<SpecError> errors = new ArrayList<>();
        if (!IDENTIFIER.matcher(spec.name()).matches() || CudaNames.isReserved(spec.name())) {
            errors.add(new SpecError("name", quote(spec.name()),
                    "a C identifier: a letter or '_', then letters, digits or '_', at most 100 characters, not a C++ "
                            + "keyword and not a name reserved to the implementation ('__' or '_' and a capital first)"));
        }
        switch (spec.problem()) {
            case Problem.ExpertProblem p -> checkExpertProblem(p, errors);
            case Problem.ExpertMlp m -> {
                checkShape(m.shape(), errors);
                checkFormats(m, errors);
            }
            case Problem.Router r -> checkRouter(r, errors);
        }
        checkSchedule(spec, errors);
        EpilogueTypes.check(spec.problem(), spec.epilogue(), errors);
        checkEpilogueAgainstSchedule(spec, errors);
        return errors;
    }

    private static void checkExpertProblem(Problem.ExpertProblem problem, List<SpecError> errors) {
        checkShape(problem.shape(), errors);
        checkFormats(problem, errors);
    }

    private static void checkShape(ExpertShape s, List<SpecError> errors) {
        range(errors, "problem.hidden", s.hidden(), 1, MAX_DIMENSION);
        range(errors, "problem.intermediate", s.intermediate(), 1, MAX_DIMENSION);
        range(errors, "problem.experts", s.experts(), 1, MAX_EXPERTS);
        if (s.topk() < 1 || s.topk() > Math.min(MAX_TOPK, Math.max(1, s.experts()))) {
            errors.add(new SpecError("problem.topk", Integer.toString(s.topk()),
                    "1.." + Math.min(MAX_TOPK, Math.max(1, s.experts())) + " (at most the number of experts, "
                            + s.experts() + ", and at most " + MAX_TOPK + ")"));
        }
    }

    private static void checkRouter(Problem.Router r, List<SpecError> errors) {
        range(errors, "problem.hidden", r.hidden(), 1, MAX_DIMENSION);
        range(errors, "problem.experts", r.experts(), 1, MAX_EXPERTS);
        checkFormats(r, errors);
    }

    private static void checkFormats(Problem problem, List<SpecError> errors) {
        switch (problem) {
            case Problem.Router r -> {
                if (!(r.weights() instanceof WeightFormat.Bf16)) {
                    errors.add(new SpecError("problem.weights", r.weights().text(),
                            "bf16: routers stay unquantised in every checkpoint format (models-formats section 4)"));
                }
            }
            case Problem.ExpertGateUp g -> {
                checkBlocks(g.weights(), "problem.hidden", g.shape().hidden(), errors);
                if (g.weights().blockScale().blockRows() && g.layout() == GateUpLayout.STACKED
                        && g.shape().intermediate() % g.weights().blockScale().block() != 0) {
                    errors.add(new SpecError("problem.intermediate", Integer.toString(g.shape().intermediate()),
                            "a multiple of " + g.weights().blockScale().block() + " for " + g.weights().text()
                                    + " with stacked gate/up rows: otherwise gate's last block of rows would share "
                                    + "its scales with up's first"));
                }
            }
            case Problem.ExpertDown d -> checkBlocks(d.weights(), "problem.intermediate", d.shape().intermediate(), errors);
            case Problem.ExpertMlp m -> {  // gate_up's rows run along hidden, down's along intermediate
                checkBlocks(m.weights(), "problem.hidden", m.shape().hidden(), errors);
                checkBlocks(m.weights(), "problem.intermediate", m.shape().intermediate(), errors);
            }
        }
        if (problem.activations() != DType.BF16) {
            errors.add(new SpecError("problem.activations", problem.activations().text(), "bf16"));
        }
    }

    /** A row of {@code k} elements must hold whole scale blocks (128 x 128 blocks allow a ragged edge). */
    private static void checkBlocks(WeightFormat format, String field, int k, List<SpecError> errors) {
        WeightFormat.BlockScale scale = format.blockScale();
        if (scale.block() > 0 && !scale.blockRows() && k >= 1 && k % scale.block() != 0) {
            errors.add(new SpecError(field, Integer.toString(k), "a multiple of " + scale.block() + " for "
                    + format.text() + ": each row holds whole blocks of " + scale.block() + " elements, one scale each"));
        }
    }

    private static boolean dimensionsInRange(ExpertShape s) {
        return s.hidden() >= 1 && s.hidden() <= MAX_DIMENSION && s.intermediate() >= 1 && s.intermediate() <= MAX_DIMENSION
                && s.experts() >= 1 && s.experts() <= MAX_EXPERTS && s.topk() >= 1 && s.topk() <= MAX_TOPK;
    }

    private static void checkSchedule(KernelSpec spec, List<SpecError> errors) {
        Target target = spec.target();
        int maxWarps = target.maxThreadsPerBlock() / 32;
        switch (spec.schedule()) {
            case OutputCentric oc -> {
                if (!(spec.problem() instanceof Problem.ExpertProblem p)) {
                    errors.add(new SpecError("schedule", "output_centric", "output_centric lowers expert_gate_up and "
                            + "expert_down; expert_mlp takes split_down, a router router_gemv, router_cluster or router_tiled"));
                    return;
                }
                range(errors, "schedule.warps_per_cta", oc.warpsPerCta(), 1, maxWarps);
                if (!LOAD_BYTES.contains(oc.loadBytes())) {
                    errors.add(new SpecError("schedule.load_bytes", Integer.toString(oc.loadBytes()), "4, 8 or 16"));
                }
                range(errors, "schedule.k_unroll", oc.kUnroll(), 1, 16);
                range(errors, "schedule.tokens_per_cta", oc.tokensPerCta(), 1, MAX_TOKENS_PER_CTA);
                checkWarpSplit(errors, "schedule.warps_per_output", oc.warpsPerCta(), oc.warpsPerOutput(),
                        oc.minBlocksPerSm(), target, maxWarps);
                if (oc.warpsPerOutput() > 1 && oc.tokensPerCta() > 1 && p instanceof Problem.ExpertGateUp) {
                    errors.add(new SpecError("schedule.warps_per_output", Integer.toString(oc.warpsPerOutput()),
                            "1 for a token-tiled gate_up (tokens_per_cta > 1): each warp keeps its whole rows in "
                                    + "registers across the tile's tokens"));
                }
                if (!dimensionsInRange(p.shape()) || !LOAD_BYTES.contains(oc.loadBytes())) {
                    return;
                }
                int epl = p.weights().elementsPerLoad(oc.loadBytes());
                // Both the weight rows and the activation rows are read with loads of load_bytes,
                // so both row lengths must be whole loads (and thus load-aligned).
                divisible(errors, "problem.hidden", p.shape().hidden(), epl, oc.loadBytes());
                divisible(errors, "problem.intermediate", p.shape().intermediate(), epl, oc.loadBytes());
                if (oc.tokensPerCta() >= 1 && oc.warpsPerCta() >= 1 && oc.kUnroll() >= 1 && oc.warpsPerOutput() >= 1) {
                    long shared = OutputCentricLayout.of(p, oc).sharedBytes();
                    if (shared > target.maxSharedBytesPerBlock()) {
                        errors.add(new SpecError("schedule", shared + " bytes of shared memory",
                                "at most " + target.maxSharedBytesPerBlock() + " bytes per thread block on "
                                        + target.text() + " (lower tokens_per_cta or warps_per_cta)"));
                    }
                }
            }
            case Schedule.OutputTensorCore tc -> checkOutputTensorCore(spec, tc, target, maxWarps, errors);
            case Schedule.SplitDown sd -> checkSplitDown(spec, sd, target, maxWarps, errors);
            case Schedule.RouterGemv g -> {
                if (!(spec.problem() instanceof Problem.Router r)) {
                    errors.add(new SpecError("schedule", "router_gemv", "router_gemv lowers a router problem; expert "
                            + "kernels take output_centric"));
                    return;
                }
                range(errors, "schedule.warps_per_cta", g.warpsPerCta(), 1, maxWarps);
                if (!LOAD_BYTES.contains(g.loadBytes())) {
                    errors.add(new SpecError("schedule.load_bytes", Integer.toString(g.loadBytes()), "4, 8 or 16"));
                } else if (r.hidden() >= 1 && r.hidden() <= MAX_DIMENSION) {
                    divisible(errors, "problem.hidden", r.hidden(), r.weights().elementsPerLoad(g.loadBytes()), g.loadBytes());
                }
                range(errors, "schedule.k_unroll", g.kUnroll(), 1, 16);
                range(errors, "schedule.experts_per_cta", g.expertsPerCta(), 1, Math.max(1, r.experts()));
            }
            case Schedule.RouterCluster c -> {
                if (!(spec.problem() instanceof Problem.Router r)) {
                    errors.add(new SpecError("schedule", "router_cluster", "router_cluster lowers a router problem; expert "
                            + "kernels take output_centric"));
                    return;
                }
                range(errors, "schedule.cluster_size", c.clusterSize(), 1, 8);
                range(errors, "schedule.warps_per_cta", c.warpsPerCta(), 1, maxWarps);
                if (!LOAD_BYTES.contains(c.loadBytes())) {
                    errors.add(new SpecError("schedule.load_bytes", Integer.toString(c.loadBytes()), "4, 8 or 16"));
                } else if (r.hidden() >= 1 && r.hidden() <= MAX_DIMENSION) {
                    divisible(errors, "problem.hidden", r.hidden(), r.weights().elementsPerLoad(c.loadBytes()), c.loadBytes());
                }
                range(errors, "schedule.k_unroll", c.kUnroll(), 1, 16);
            }
            case Schedule.RouterTiled t -> checkRouterTiled(spec, t, target, maxWarps, errors);
        }
    }

    private static void checkRouterTiled(KernelSpec spec, Schedule.RouterTiled t, Target target, int maxWarps,
                                         List<SpecError> errors) {
        if (!(spec.problem() instanceof Problem.Router r)) {
            errors.add(new SpecError("schedule", "router_tiled", "router_tiled lowers a router problem; expert "
                    + "kernels take output_centric"));
            return;
        }
        int before = errors.size();
        if (t.tokensPerCta() < 16 || t.tokensPerCta() > 128 || t.tokensPerCta() % 16 != 0) {
            errors.add(new SpecError("schedule.tokens_per_cta", Integer.toString(t.tokensPerCta()),
                    "16, 32, 48, ... 128: a multiple of 16, the tensor-core tile's rows"));
        }
        if (t.tokensPerWarp() < 16 || t.tokensPerWarp() % 16 != 0 || t.tokensPerWarp() > t.tokensPerCta()
                || t.tokensPerCta() % t.tokensPerWarp() != 0) {
            errors.add(new SpecError("schedule.tokens_per_warp", Integer.toString(t.tokensPerWarp()),
                    "a multiple of 16 (the tensor-core tile's rows) that divides tokens_per_cta = " + t.tokensPerCta()));
        }
        range(errors, "schedule.warps_per_cta", t.warpsPerCta(), 1, maxWarps);
        if (t.kTile() != 32 && t.kTile() != 64) {
            errors.add(new SpecError("schedule.k_tile", Integer.toString(t.kTile()), "32 or 64"));
        }
        range(errors, "schedule.stages", t.stages(), 2, 4);
        if (t.kGroups() != 1 && t.kGroups() != 2 && t.kGroups() != 4 || t.kTile() >= 16 && t.kGroups() > t.kTile() / 16) {
            errors.add(new SpecError("schedule.k_groups", Integer.toString(t.kGroups()),
                    "1, 2 or 4, and at most k_tile / 16 = " + Math.max(1, t.kTile() / 16)
                            + " (each k group takes whole 16-wide steps of a slice)"));
        }
        if (t.clusterSplit() != 1 && t.clusterSplit() != 2 && t.clusterSplit() != 4 && t.clusterSplit() != 8) {
            errors.add(new SpecError("schedule.cluster_split", Integer.toString(t.clusterSplit()),
                    "1, 2, 4 or 8: the blocks of a portable cluster that split the hidden dimension"));
        }
        if (r.hidden() >= 1 && r.hidden() <= MAX_DIMENSION && r.hidden() % 8 != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(r.hidden()),
                    "a multiple of 8 for router_tiled: x and W_r rows are copied in 16-byte pieces"));
        }
        if (errors.size() > before || r.experts() < 1 || r.experts() > MAX_EXPERTS || r.hidden() < 1) {
            return;
        }
        int rowGroups = t.tokensPerCta() / t.tokensPerWarp();
        if (t.warpsPerCta() % (rowGroups * t.kGroups()) != 0) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(t.warpsPerCta()),
                    "a multiple of (tokens_per_cta / tokens_per_warp) x k_groups = " + rowGroups * t.kGroups()
                            + " (every warp owns tokens_per_warp tokens of the tile in one k group)"));
            return;
        }
        int ownRows = t.tokensPerCta() / t.clusterSplit();
        if (ownRows % t.warpsPerCta() != 0) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(t.warpsPerCta()),
                    "a divisor of tokens_per_cta / cluster_split = " + ownRows + " (each warp evaluates the rule for "
                            + "the same number of a block's rows)"));
            return;
        }
        RouterTileLayout layout = RouterTileLayout.of(r, t);
        if (t.clusterSplit() > layout.slices()) {
            errors.add(new SpecError("schedule.cluster_split", Integer.toString(t.clusterSplit()),
                    "at most the " + layout.slices() + " k_tile slices of hidden = " + r.hidden()
                            + " (more blocks than slices would leave some with nothing to sum)"));
        }
        int limit = RouterTileLayout.accumulatorLimit(t.warpsPerCta());
        if (layout.accumulators(t) > limit) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(t.warpsPerCta()),
                    "a warp tile of at most " + limit + " FP32 accumulators per thread with " + t.warpsPerCta()
                            + " warps (at most " + RouterTileLayout.MAX_ACCUMULATORS + ", and fewer above 16 warps, "
                            + "whose register share is smaller); here " + layout.accumulators(t) + " ("
                            + t.tokensPerWarp() + " tokens x " + layout.columnsPerWarp() + " of the "
                            + layout.paddedExperts() + " padded experts; change warps_per_cta or lower tokens_per_warp)"));
        }
        long shared = layout.sharedBytes() + RouterTileLayout.expertCountBytes(r);
        if (shared > target.maxSharedBytesPerBlock()) {
            errors.add(new SpecError("schedule", shared + " bytes of shared memory",
                    "at most " + target.maxSharedBytesPerBlock() + " bytes per thread block on " + target.text()
                            + " (lower stages, k_tile or tokens_per_cta)"));
        }
    }

    private static void checkEpilogueAgainstSchedule(KernelSpec spec, List<SpecError> errors) {
        String name = switch (spec.schedule()) {
            case OutputCentric _ -> "output_centric";
            case Schedule.OutputTensorCore _ -> "output_tensor_core";
            case Schedule.SplitDown _, Schedule.RouterGemv _, Schedule.RouterCluster _, Schedule.RouterTiled _ -> null;
        };
        if (name != null && spec.problem() instanceof Problem.ExpertDown
                && spec.epilogue() instanceof Store(Combine(EpilogueNode in), _)
                && !(in instanceof Acc)) {
            errors.add(new SpecError("epilogue.store.input.combine.input", EpilogueTypes.describe(in),
                    name + " folds each routing weight into the FP32 accumulator, which needs "
                            + "combine(acc) with the accumulator itself as input"));
        }
    }

    private static void checkOutputTensorCore(KernelSpec spec, Schedule.OutputTensorCore tc, Target target, int maxWarps,
                                              List<SpecError> errors) {
        if (!(spec.problem() instanceof Problem.ExpertProblem p)) {
            errors.add(new SpecError("schedule", "output_tensor_core", "output_tensor_core lowers expert_gate_up and "
                    + "expert_down; expert_mlp takes split_down, a router router_gemv, router_cluster or router_tiled"));
            return;
        }
        if (p.weights().element().bits() != 4) {
            errors.add(new SpecError("problem.weights", p.weights().text(), "a 4-bit format (nvfp4, mxfp4, int4_channel, "
                    + "int4_group128) under output_tensor_core; other formats take output_centric"));
        }
        range(errors, "schedule.warps_per_cta", tc.warpsPerCta(), 1, maxWarps);
        range(errors, "schedule.k_unroll", tc.kUnroll(), 1, 8);
        checkWarpSplit(errors, "schedule.warps_per_tile", tc.warpsPerCta(), tc.warpsPerTile(), tc.minBlocksPerSm(), target,
                maxWarps);
        if (!dimensionsInRange(p.shape())) {
            return;
        }
        String field = p instanceof Problem.ExpertGateUp ? "problem.hidden" : "problem.intermediate";
        int reduce = p instanceof Problem.ExpertGateUp ? p.shape().hidden() : p.shape().intermediate();
        if (reduce % TensorCoreTileLayout.CODES_PER_CHUNK != 0) {
            errors.add(new SpecError(field, Integer.toString(reduce), "a multiple of "
                    + TensorCoreTileLayout.CODES_PER_CHUNK + " under output_tensor_core: each lane reads whole 16-byte "
                    + "chunks of 32 codes"));
            return;
        }
        if (tc.warpsPerCta() >= 1 && tc.warpsPerTile() >= 1) {
            long shared = TensorCoreTileLayout.of(p, tc).sharedBytes();
            if (shared > target.maxSharedBytesPerBlock()) {
                errors.add(new SpecError("schedule", shared + " bytes of shared memory",
                        "at most " + target.maxSharedBytesPerBlock() + " bytes per thread block on " + target.text()
                                + " (the staged activations grow with the reduction and, for down, with topk)"));
            }
        }
    }

    private static void checkSplitDown(KernelSpec spec, Schedule.SplitDown sd, Target target, int maxWarps,
                                       List<SpecError> errors) {
        if (!(spec.problem() instanceof Problem.ExpertMlp m)) {
            errors.add(new SpecError("schedule", "split_down", "split_down lowers expert_mlp; expert_gate_up and "
                    + "expert_down take output_centric or output_tensor_core, a router router_gemv, router_cluster or router_tiled"));
            return;
        }
        if (m.weights().element().bits() != 4) {
            errors.add(new SpecError("problem.weights", m.weights().text(), "a 4-bit format (nvfp4, mxfp4, int4_channel, "
                    + "int4_group128) under split_down: down's columns are decoded on the tensor cores"));
        }
        range(errors, "schedule.warps_per_tile", sd.warpsPerTile(), 1, maxWarps / 2);
        if (sd.warpsPerTile() >= 1 && sd.warpsPerCta() != 2 * sd.warpsPerTile()) {
            errors.add(new SpecError("schedule.warps_per_cta", Integer.toString(sd.warpsPerCta()),
                    "2 x warps_per_tile = " + 2 * sd.warpsPerTile() + ": a block is two gate_up tiles of 8 neurons, the "
                            + SplitDownLayout.TILE_COLUMNS + " columns of down it multiplies"));
        }
        range(errors, "schedule.k_unroll", sd.kUnroll(), 1, 8);
        if (sd.orderLoads() && m.weights().blockScale() == WeightFormat.BlockScale.NONE) {
            errors.add(new SpecError("schedule.order_loads", "true", "false for " + m.weights().text() + ", which has no "
                    + "K-block scales to order the code loads after (true takes nvfp4, mxfp4 or int4_group128)"));
        }
        if (sd.warpsPerCta() >= 1 && sd.warpsPerCta() <= maxWarps) {
            range(errors, "schedule.min_blocks_per_sm", sd.minBlocksPerSm(), 0, target.maxWarpsPerSm() / sd.warpsPerCta());
        }
        if (!dimensionsInRange(m.shape())) {
            return;
        }
        if (m.shape().hidden() % SplitDownLayout.QUAD_ROWS != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(m.shape().hidden()), "a multiple of "
                    + SplitDownLayout.QUAD_ROWS + " under split_down: down's rows are multiplied in quads of 64 (one "
                    + "16-byte load per lane holds four mmas' fragments)"));
        }
        if (m.shape().intermediate() % SplitDownLayout.TILE_COLUMNS != 0) {
            errors.add(new SpecError("problem.intermediate", Integer.toString(m.shape().intermediate()), "a multiple of "
                    + SplitDownLayout.TILE_COLUMNS + " under split_down: a block multiplies 16 neurons into down"));
        }
        if (sd.warpsPerCta() >= 1 && sd.warpsPerTile() >= 1) {
            long shared = SplitDownLayout.of(m, sd).sharedBytes();
            if (shared > target.maxSharedBytesPerBlock()) {
                errors.add(new SpecError("schedule", shared + " bytes of shared memory",
                        "at most " + target.maxSharedBytesPerBlock() + " bytes per thread block on " + target.text()
                                + " (the token's staged x grows with hidden, the partial sums with warps_per_cta)"));
            }
        }
    }

    /**
     * The warps of an output-producing block: the S warps sharing one output (or tile) divide the
     * block's warps, and the occupancy promise fits the SM's warps.
     */
    private static void checkWarpSplit(List<SpecError> errors, String splitField, int warps, int split, int minBlocks,
                                       Target target, int maxWarps) {
        if (warps >= 1 && (split < 1 || warps % split != 0)) {
            errors.add(new SpecError(splitField, Integer.toString(split), "a divisor of warps_per_cta (" + warps + ")"));
        }
        if (warps >= 1 && warps <= maxWarps) {
            range(errors, "schedule.min_blocks_per_sm", minBlocks, 0, target.maxWarpsPerSm() / warps);
        }
    }

    private static void range(List<SpecError> errors, String path, int value, int min, int max) {
        if (value < min || value > max) {
            errors.add(new SpecError(path, Integer.toString(value), min + ".." + max));
        }
    }

    private static void divisible(List<SpecError> errors, String path, int value, int by, int loadBytes) {
        if (value % by != 0) {
            errors.add(new SpecError(path, Integer.toString(value), "a multiple of " + by
                    + " (each lane loads " + loadBytes + " bytes = " + by + " elements at a time); "
                    + "lower schedule.load_bytes or pad the dimension"));
        }
    }

    private static String quote(String s) {
        return "'" + s + "'";
    }
}
