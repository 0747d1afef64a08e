package dev.moeforge.codegen.cuda;

import dev.moeforge.codegen.cuda.KernelParam.Role;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;

/** The parameters of the kernel generated for a spec, in launch order. */
public record KernelSignature(List<KernelParam> params) {
    public static final String TOKEN_COUNT = "num_tokens";

    public KernelSignature {
        params = List.copyOf(params);
    }

    public static KernelSignature of(KernelSpec spec) {
        int m = KernelParam.TOKENS;
        KernelParam tokens = new KernelParam(TOKEN_COUNT, Role.TOKEN_COUNT, DType.INT32, List.of(), "tokens M");
        DType weightElements = switch (spec.problem().weights()) {
            case WeightFormat.Bf16 _ -> DType.BF16;
        };
        DType act = spec.problem().activations();
        return switch (spec.problem()) {
            case Problem.ExpertProblem p -> expert(p, weightElements, act, tokens);
            case Problem.Router r -> router(spec, r, weightElements, act, tokens);
        };
    }

    private static KernelSignature expert(Problem.ExpertProblem p, DType weightElements, DType act, KernelParam tokens) {
        ExpertShape s = p.shape();
        int m = KernelParam.TOKENS;
        KernelParam ids = new KernelParam("topk_ids", Role.ROUTING, DType.INT32, List.of(m, s.topk()),
                "routed expert of each (token, slot)");
        return new KernelSignature(switch (p) {
            case Problem.ExpertGateUp _ -> List.of(
                    new KernelParam("x", Role.INPUT, act, List.of(m, s.hidden()), "activations"),
                    new KernelParam("w_gate_up", Role.WEIGHTS, weightElements,
                            List.of(s.experts(), 2 * s.intermediate(), s.hidden()), "gate and up rows of every expert"),
                    ids,
                    new KernelParam("inter", Role.OUTPUT, act, List.of(m, s.topk(), s.intermediate()),
                            "activation of each (token, slot, neuron)"),
                    tokens);
            case Problem.ExpertDown _ -> List.of(
                    new KernelParam("inter", Role.INPUT, act, List.of(m, s.topk(), s.intermediate()),
                            "gate_up's output"),
                    new KernelParam("w_down", Role.WEIGHTS, weightElements,
                            List.of(s.experts(), s.hidden(), s.intermediate()), "down rows of every expert"),
                    ids,
                    new KernelParam("topk_weights", Role.ROUTING, DType.FP32, List.of(m, s.topk()),
                            "routing weight of each (token, slot)"),
                    new KernelParam("y", Role.OUTPUT, act, List.of(m, s.hidden()), "the layer's output"),
                    tokens);
        });
    }

    /**
     * x, the router weights, one FP32 vector per {@code row(name)} of the tree (in order of first
     * appearance), the workspace (scores [M][E], tickets [M]), then the outputs: a compact top-k
     * ({@code topk_weights}, {@code topk_ids}) or a dense row ({@code router_out}).
     */
    private static KernelSignature router(KernelSpec spec, Problem.Router r, DType weightElements, DType act,
                                          KernelParam tokens) {
        int m = KernelParam.TOKENS;
        List<KernelParam> params = new ArrayList<>();
        params.add(new KernelParam("x", Role.INPUT, act, List.of(m, r.hidden()), "activations"));
        params.add(new KernelParam("w_router", Role.WEIGHTS, weightElements, List.of(r.experts(), r.hidden()),
                "router rows, one per expert"));
        for (String name : RouterTrees.rowParams(spec.epilogue())) {
            params.add(new KernelParam(name, Role.INPUT, DType.FP32, List.of(r.experts()), "per-expert vector row(" + name + ")"));
        }
        if (spec.schedule() instanceof Schedule.RouterGemv) {  // a cluster keeps its scores in shared memory
            params.add(new KernelParam("scores", Role.WORKSPACE, DType.FP32, List.of(m, r.experts()),
                    "scratch: each token's expert scores"));
            params.add(new KernelParam("counters", Role.WORKSPACE, DType.INT32, List.of(m),
                    "scratch: blocks done per token; zero before the first launch, left zero"));
        }
        Store store = (Store) spec.epilogue();
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
