package dev.moeforge.codegen.cuda;

import dev.moeforge.codegen.cuda.KernelParam.Role;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.List;

/** The parameters of the kernel generated for a spec, in launch order. */
public record KernelSignature(List<KernelParam> params) {
    public static final String TOKEN_COUNT = "num_tokens";

    public KernelSignature {
        params = List.copyOf(params);
    }

    public static KernelSignature of(KernelSpec spec) {
        Problem p = spec.problem();
        ExpertShape s = p.shape();
        int m = KernelParam.TOKENS;
        DType act = p.activations();
        DType weightElements = switch (p.weights()) {
            case WeightFormat.Bf16 _ -> DType.BF16;
        };
        KernelParam ids = new KernelParam("topk_ids", Role.ROUTING, DType.INT32, List.of(m, s.topk()),
                "routed expert of each (token, slot)");
        KernelParam tokens = new KernelParam(TOKEN_COUNT, Role.TOKEN_COUNT, DType.INT32, List.of(), "tokens M");
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
