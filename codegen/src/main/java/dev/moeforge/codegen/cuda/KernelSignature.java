package dev.moeforge.codegen.cuda;

import static dev.moeforge.codegen.cuda.KernelParam.WeightPart.BIAS;
import static dev.moeforge.codegen.cuda.KernelParam.WeightPart.BLOCK_SCALES;
import static dev.moeforge.codegen.cuda.KernelParam.WeightPart.CODES;
import static dev.moeforge.codegen.cuda.KernelParam.WeightPart.ROW_SCALES;

import dev.moeforge.codegen.cuda.KernelParam.Role;
import dev.moeforge.dsl.check.ValidatedSpec;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.dsl.schedule.SplitDown;
import dev.moeforge.dsl.schedule.Workspace;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;

/** The parameters of the kernel generated for a spec, in launch order. */
public record KernelSignature(List<KernelParam> params) {
    public static final String TOKEN_COUNT = "num_tokens";
    /** The activations a kernel reads as given. */
    public static final String X = "x";
    /** With an input norm ({@link InputNorm}): the residual stream, the branch output added to it, the norm's weight. */
    public static final String RESIDUAL = "residual";
    public static final String ADDEND = "addend";
    public static final String NORM_WEIGHT = "norm_weight";
    /** With an input norm: the residual after the add, and the normed rows, each token's written by one block. */
    public static final String RESIDUAL_OUT = "residual_out";
    public static final String NORMED_OUT = "normed_out";

    public KernelSignature {
        params = List.copyOf(params);
    }

    /** The signature of a spec; refuses an invalid one (as the Validator does). */
    public static KernelSignature of(KernelSpec spec) {
        return of(Validator.check(spec));
    }

    public static KernelSignature of(ValidatedSpec<?> spec) {
        KernelParam tokens = new KernelParam(TOKEN_COUNT, Role.TOKEN_COUNT, DType.INT32, List.of(), "tokens M");
        DType act = spec.problem().activations();
        return switch (spec.problem()) {
            case Problem.ExpertProblem p -> expert(spec, p, act, tokens);
            case Problem.ExpertMlp m -> mlp(m, act, tokens);
            case Problem.Router r -> router(spec, r, act, tokens);
            case Problem.Linear l -> linear(spec, l, act, tokens);
        };
    }

    /**
     * The arguments a kernel passes on to its device body: every parameter in launch order, the
     * parts of each weight gathered into one {@code mf::WeightArgs{codes, block scales, row scales[, bias[, &tensor map]]}}
     * ({@code nullptr} for a part the format lacks).
     */
    public String callArguments() {
        List<String> args = new ArrayList<>();
        for (int i = 0; i < params.size(); i++) {
            KernelParam p = params.get(i);
            if (NORM_GROUP.contains(p.name())) {
                if (p.name().equals(RESIDUAL)) {
                    args.add(inputArgument());
                }
                continue;
            }
            if (p.weightPart() != KernelParam.WeightPart.CODES) {
                args.add(p.name());
                continue;
            }
            String block = "nullptr";
            String row = "nullptr";
            String bias = "nullptr";
            String map = null;
            while (i + 1 < params.size() && params.get(i + 1).weightPart().compareTo(KernelParam.WeightPart.CODES) > 0) {
                KernelParam part = params.get(++i);
                switch (part.weightPart()) {
                    case BLOCK_SCALES -> block = part.name();
                    case ROW_SCALES -> row = part.name();
                    case BIAS -> bias = part.name();
                    case TENSOR_MAP -> map = "&" + part.name();
                    case NONE, CODES -> throw new IllegalStateException("not a part of " + p.name() + ": " + part.name());
                }
            }
            String tail = map != null ? ", " + bias + ", " + map : bias.equals("nullptr") ? "" : ", " + bias;
            args.add("mf::WeightArgs{" + p.name() + ", " + block + ", " + row + tail + "}");
        }
        return String.join(", ", args);
    }

    /** The parameters the device header takes together as {@code mf::AddRmsNormRows}, where the kernel norms its input. */
    private static final List<String> NORM_GROUP = List.of(RESIDUAL, ADDEND, NORM_WEIGHT, RESIDUAL_OUT, NORMED_OUT);

    /**
     * What the kernel passes its device body for the input rows: {@code x}, or where it norms them
     * itself {@code mf::AddRmsNormRows<addend type>{residual, addend, norm_weight, residual_out, normed_out}}.
     */
    public String inputArgument() {
        if (params.stream().noneMatch(p -> p.name().equals(RESIDUAL))) {
            return X;
        }
        return "mf::AddRmsNormRows<" + param(ADDEND).cudaElement() + ">{" + String.join(", ", NORM_GROUP) + "}";
    }

    /** The input rows as given ({@code x [M][width]}), or where the kernel norms them the tensors it makes them from. */
    private static List<KernelParam> inputRows(Problem problem, int width) {
        int m = KernelParam.TOKENS;
        return problem.inputNorm().map(n -> List.of(
                new KernelParam(RESIDUAL, Role.INPUT, DType.FP32, List.of(m, width), "the residual stream"),
                new KernelParam(ADDEND, Role.INPUT, n.addend(), List.of(m, width), "the branch output added to it"),
                new KernelParam(NORM_WEIGHT, Role.INPUT, DType.FP32, List.of(width), "the RMSNorm's weight")))
                .orElse(List.of(new KernelParam(X, Role.INPUT, problem.activations(), List.of(m, width), "activations")));
    }

    /** Where the kernel norms its input: residual + addend and the normed rows, each token's stored by one block. */
    private static List<KernelParam> normedOutputs(Problem problem, int width) {
        int m = KernelParam.TOKENS;
        return problem.inputNorm().isEmpty() ? List.of() : List.of(
                new KernelParam(RESIDUAL_OUT, Role.OUTPUT, DType.FP32, List.of(m, width), "residual + addend (not the residual's buffer)"),
                new KernelParam(NORMED_OUT, Role.OUTPUT, problem.activations(), List.of(m, width), "the normed rows the kernel multiplied"));
    }

    /**
     * x or inter, the weights, the routing tables, the routing grouped by expert where the schedule
     * takes it ({@link RoutingPlan}), the output, then the schedule's workspace.
     */
    private static KernelSignature expert(ValidatedSpec<?> spec, Problem.ExpertProblem p, DType act, KernelParam tokens) {
        ExpertShape s = p.shape();
        int m = KernelParam.TOKENS;
        List<KernelParam> params = new ArrayList<>();
        switch (p) {
            case Problem.ExpertGateUp g -> {
                params.add(new KernelParam("x", Role.INPUT, act, List.of(m, s.hidden()), "activations"));
                params.addAll(weights("w_gate_up", p.weights(), s.experts(), 2 * s.intermediate(), s.hidden(), 2, p.bias(),
                        "gate and up rows of every expert"));
                params.addAll(tensorMap(spec, "w_gate_up"));
                params.add(topkIds(s));
                params.addAll(routingPlan(spec, s));
                params.add(inter(spec, Role.OUTPUT, act, s, "activation of each (token, slot, neuron)"));
            }
            case Problem.ExpertDown _ -> {
                params.add(inter(spec, Role.INPUT, act, s, "gate_up's output"));
                params.addAll(weights("w_down", p.weights(), s.experts(), s.hidden(), s.intermediate(), 1, p.bias(),
                        "down rows of every expert"));
                params.addAll(tensorMap(spec, "w_down"));
                params.add(topkIds(s));
                params.add(new KernelParam("topk_weights", Role.ROUTING, DType.FP32, List.of(m, s.topk()),
                        "routing weight of each (token, slot)"));
                params.addAll(routingPlan(spec, s));
                params.add(new KernelParam("y", Role.OUTPUT, act, List.of(m, s.hidden()), "the layer's output"));
            }
        }
        params.addAll(workspace(spec));
        params.add(tokens);
        return new KernelSignature(params);
    }

    /**
     * The intermediate gate_up hands to down: [M][k][I] in the activation type, or with FP8
     * activations (W8A8) each (token, slot)'s row quantised ({@link Fp8ActivationRows}: codes, then scales).
     */
    private static KernelParam inter(ValidatedSpec<?> spec, Role role, DType act, ExpertShape s, String description) {
        if (spec.quantisesActivations()) {
            return new KernelParam("inter", role, DType.U8, List.of(KernelParam.TOKENS, s.topk(),
                    Fp8ActivationRows.rowBytes(s.intermediate())), description + ", quantised to FP8 in groups of "
                    + Fp8ActivationRows.GROUP + " (each row's codes, then its FP32 scales)");
        }
        return new KernelParam("inter", role, act, List.of(KernelParam.TOKENS, s.topk(), s.intermediate()), description);
    }

    /** The copy engine's view of weight {@code weight}, where the schedule reads it through one; none otherwise. */
    private static List<KernelParam> tensorMap(ValidatedSpec<?> spec, String weight) {
        return spec.weightTileMap().map(m -> List.of(new KernelParam(tensorMapName(weight), Role.TENSOR_MAP, DType.U8,
                List.of(TENSOR_MAP_BYTES), "the copy engine's view of " + weight + " (boxes of " + m.box() + "), encoded by the runtime",
                KernelParam.WeightPart.TENSOR_MAP))).orElse(List.of());
    }

    /** Bytes of a tensor map (CUDA's CUtensorMap), passed by value. */
    public static final int TENSOR_MAP_BYTES = 128;

    /** The name of the tensor map parameter of weight {@code name}. */
    public static String tensorMapName(String name) {
        return name + "_map";
    }

    private static KernelParam topkIds(ExpertShape s) {
        return new KernelParam("topk_ids", Role.ROUTING, DType.INT32, List.of(KernelParam.TOKENS, s.topk()),
                "routed expert of each (token, slot)");
    }

    /** The routing grouped by expert, for a schedule that takes it; none otherwise. */
    private static List<KernelParam> routingPlan(ValidatedSpec<?> spec, ExpertShape s) {
        if (!spec.takesRoutingPlan()) {
            return List.of();
        }
        return List.of(
                new KernelParam(RoutingPlan.SORTED_SLOTS, Role.ROUTING, DType.INT32, List.of(KernelParam.TOKENS, s.topk()),
                        "the (token, slot) pairs m*k + j grouped by expert, ascending within each"),
                new KernelParam(RoutingPlan.EXPERT_OFFSETS, Role.ROUTING, DType.INT32, List.of(RoutingPlan.offsetsLength(s.experts())),
                        "where each expert's pairs start in sorted_slots (bucket E: ids outside [0, E)), then the end"));
    }

    private static List<KernelParam> workspace(ValidatedSpec<?> spec) {
        return spec.workspace().stream().map(w -> new KernelParam(w.name(), Role.WORKSPACE, w.elementType(),
                w.shape().stream().map(d -> d == Workspace.TOKENS ? KernelParam.TOKENS : d).toList(), w.description())).toList();
    }

    /**
     * The whole expert MLP (split_down): x, gate_up's weights as gate_up takes them, down's weights
     * repacked in 16-column tiles ({@code SplitDownWeights}: codes, K-block scales per 64-row quad,
     * row or tensor scales as loaded), the routing, then y (FP32, added to) and the buffer the
     * kernel zeroes for a later launch.
     */
    private static KernelSignature mlp(Problem.ExpertMlp p, DType act, KernelParam tokens) {
        ExpertShape s = p.shape();
        WeightFormat f = p.weights();
        int m = KernelParam.TOKENS;
        int tiles = s.intermediate() / SplitDown.TILE_COLUMNS;
        int quads = s.hidden() / SplitDown.QUAD_ROWS;
        int quadCodeBytes = SplitDown.QUAD_ROWS * SplitDown.TILE_COLUMNS / 2;
        int quadScales = SplitDown.QUAD_ROWS;
        List<KernelParam> params = new ArrayList<>();
        params.add(new KernelParam("x", Role.INPUT, act, List.of(m, s.hidden()), "activations"));
        params.addAll(weights("w_gate_up", f, s.experts(), 2 * s.intermediate(), s.hidden(), 2, false,
                "gate and up rows of every expert"));
        params.add(new KernelParam("w_down", Role.WEIGHTS, DType.U8, List.of(s.experts(), tiles, quads, quadCodeBytes),
                "down's columns in tiles of 16, 64 rows per 512 bytes (" + f.text() + " codes repacked: SplitDownWeights)", CODES));
        WeightFormat.BlockScale bs = f.blockScale();
        switch (bs) {
            case NONE -> { }
            case E4M3_PER_16, E8M0_PER_32 -> params.add(new KernelParam(blockScalesName("w_down"), Role.WEIGHTS, DType.U8,
                    List.of(s.experts(), s.intermediate() / bs.block(), quads, quadScales), "down's K-block scales per 64-row quad (repacked)",
                    BLOCK_SCALES));
            case F32_GROUP_128 -> params.add(new KernelParam(blockScalesName("w_down"), Role.WEIGHTS, DType.FP32,
                    List.of(s.experts(), s.intermediate() / bs.block(), quads, quadScales), "down's K-block scales per 64-row quad (repacked)",
                    BLOCK_SCALES));
            case F32_BLOCK_128X128 -> throw new IllegalArgumentException("split_down takes 4-bit formats, not " + f.text());
        }
        switch (f.rowScale()) {
            case NONE -> { }
            case PER_ROW -> params.add(new KernelParam(rowScalesName("w_down", f), Role.WEIGHTS, DType.FP32,
                    List.of(s.experts(), s.hidden()), "one scale per down row", ROW_SCALES));
            case PER_TENSOR -> params.add(new KernelParam(rowScalesName("w_down", f), Role.WEIGHTS, DType.FP32,
                    List.of(s.experts(), 1), "down's per-tensor scale", ROW_SCALES));
        }
        params.add(new KernelParam("topk_ids", Role.ROUTING, DType.INT32, List.of(m, s.topk()), "routed expert of each (token, slot)"));
        params.add(new KernelParam("topk_weights", Role.ROUTING, DType.FP32, List.of(m, s.topk()),
                "routing weight of each (token, slot)"));
        params.add(new KernelParam("y", Role.OUTPUT, DType.FP32, List.of(m, s.hidden()),
                "the layer's output, added to: zero before the launch"));
        params.add(new KernelParam("y_zero", Role.OUTPUT, DType.FP32, List.of(m, s.hidden()),
                "set to zero by this launch, for a later one to add into (not y)"));
        params.add(tokens);
        return new KernelSignature(params);
    }

    /**
     * An expert weight {@code [E][N][K]} in {@code format}: the codes, then its K-block scales and its
     * row (or per-tensor) scales where the format has them, then the FP32 bias {@code [E][N]} if
     * {@code bias}. {@code projections}: per-tensor scales per expert (gate and up keep their own).
     */
    public static List<KernelParam> weights(String name, WeightFormat format, int experts, int rows, int cols,
                                            int projections, boolean bias, String description) {
        List<KernelParam> params = new ArrayList<>();
        params.add(switch (format.element()) {
            case BF16 -> new KernelParam(name, Role.WEIGHTS, DType.BF16, List.of(experts, rows, cols), description, CODES);
            case E4M3, E2M1, INT8, INT4 -> new KernelParam(name, Role.WEIGHTS, DType.U8,
                    List.of(experts, rows, Math.toIntExact(format.rowBytes(cols))),
                    description + " (" + format.text() + " codes)", CODES);
        });
        WeightFormat.BlockScale bs = format.blockScale();
        switch (bs) {
            case NONE -> { }
            case F32_BLOCK_128X128 -> params.add(new KernelParam(blockScalesName(name), Role.WEIGHTS, DType.FP32,
                    List.of(experts, Math.ceilDiv(rows, bs.block()), Math.ceilDiv(cols, bs.block())), "one scale per 128 x 128 block",
                    BLOCK_SCALES));
            case F32_GROUP_128 -> params.add(new KernelParam(blockScalesName(name), Role.WEIGHTS, DType.FP32,
                    List.of(experts, rows, cols / bs.block()), "one scale per 128 elements of a row", BLOCK_SCALES));
            case E4M3_PER_16 -> params.add(new KernelParam(blockScalesName(name), Role.WEIGHTS, DType.U8,
                    List.of(experts, rows, cols / bs.block()), "one E4M3 scale per 16 elements of a row", BLOCK_SCALES));
            case E8M0_PER_32 -> params.add(new KernelParam(blockScalesName(name), Role.WEIGHTS, DType.U8,
                    List.of(experts, rows, cols / bs.block()), "one E8M0 scale per 32 elements of a row", BLOCK_SCALES));
        }
        switch (format.rowScale()) {
            case NONE -> { }
            case PER_ROW -> params.add(new KernelParam(rowScalesName(name, format), Role.WEIGHTS, DType.FP32,
                    List.of(experts, rows), "one scale per row", ROW_SCALES));
            case PER_TENSOR -> params.add(new KernelParam(rowScalesName(name, format), Role.WEIGHTS, DType.FP32,
                    List.of(experts, projections), projections == 2 ? "per-tensor scale of gate and of up" : "per-tensor scale",
                    ROW_SCALES));
        }
        if (bias) {
            params.add(new KernelParam(biasName(name), Role.WEIGHTS, DType.FP32, List.of(experts, rows), "bias of each row", BIAS));
        }
        return params;
    }

    /** The name of the K-block scale parameter of weight {@code name}. */
    public static String blockScalesName(String name) {
        return name + "_scales";
    }

    /** The name of the bias parameter of weight {@code name}. */
    public static String biasName(String name) {
        return name + "_bias";
    }

    /** The name of the row-scale parameter of weight {@code name}, for a format that has one. */
    public static String rowScalesName(String name, WeightFormat format) {
        return switch (format.rowScale()) {
            case NONE, PER_ROW -> name + "_row_scales";
            case PER_TENSOR -> name + "_tensor_scales";
        };
    }

    /**
     * x, the router weights, one FP32 vector per {@code row(name)} of the tree (in order of first
     * appearance), the workspace (scores [M][E], tickets [M]), then the outputs: a compact top-k
     * ({@code topk_weights}, {@code topk_ids}) or a dense row ({@code router_out}).
     */
    private static KernelSignature router(ValidatedSpec<?> spec, Problem.Router r, DType act, KernelParam tokens) {
        int m = KernelParam.TOKENS;
        List<KernelParam> params = new ArrayList<>(inputRows(r, r.hidden()));
        params.add(new KernelParam("w_router", Role.WEIGHTS, DType.BF16, List.of(r.experts(), r.hidden()),
                "router rows, one per expert"));
        for (String name : RouterTrees.rowParams(spec.epilogue())) {
            params.add(new KernelParam(name, Role.INPUT, DType.FP32, List.of(r.experts()), "per-expert vector row(" + name + ")"));
        }
        params.addAll(workspace(spec));
        Store store = spec.epilogue();
        OptionalInt k = RouterTrees.storedTopK(store);
        if (k.isPresent()) {
            params.add(new KernelParam("topk_weights", Role.OUTPUT, store.dtype(), List.of(m, k.getAsInt()),
                    "routing weight of each (token, slot)"));
            params.add(new KernelParam("topk_ids", Role.OUTPUT, DType.INT32, List.of(m, k.getAsInt()),
                    "routed expert of each (token, slot)"));
            if (r.expertCounts()) {
                params.add(new KernelParam("expert_counts", Role.OUTPUT, DType.INT32, List.of(r.experts()),
                        "tokens routed to each expert, added to (zero it before the step)"));
            }
        } else {
            params.add(new KernelParam("router_out", Role.OUTPUT, store.dtype(), List.of(m, r.experts()),
                    "each token's row of expert values"));
        }
        params.addAll(normedOutputs(r, r.hidden()));
        params.add(tokens);
        return new KernelSignature(params);
    }

    /**
     * x (or what an input norm makes it from), the weights {@code [N][K]} (with their FP32 bias
     * {@code [N]}), then y in the epilogue's store type (and the input norm's outputs).
     */
    private static KernelSignature linear(ValidatedSpec<?> spec, Problem.Linear l, DType act, KernelParam tokens) {
        int m = KernelParam.TOKENS;
        List<KernelParam> params = new ArrayList<>(inputRows(l, l.inputs()));
        params.add(new KernelParam("w", Role.WEIGHTS, DType.BF16, List.of(l.outputs(), l.inputs()), "one row per output", CODES));
        if (l.bias()) {
            params.add(new KernelParam(biasName("w"), Role.WEIGHTS, DType.FP32, List.of(l.outputs()), "bias of each output", BIAS));
        }
        params.add(new KernelParam("y", Role.OUTPUT, spec.epilogue().dtype(), List.of(m, l.outputs()), "each token's outputs"));
        params.addAll(normedOutputs(l, l.inputs()));
        params.add(tokens);
        return new KernelSignature(params);
    }

    public KernelParam param(String name) {
        for (KernelParam p : params) {
            if (p.name().equals(name)) {
                return p;
            }
        }
        throw new IllegalArgumentException("no parameter '" + name + "' in " + params);
    }

    /** The tensor parameters, in launch order (everything but the token count). */
    public List<KernelParam> tensors() {
        return params.stream().filter(KernelParam::isTensor).toList();
    }
}
