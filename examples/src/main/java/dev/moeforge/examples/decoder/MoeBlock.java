package dev.moeforge.examples.decoder;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;

/**
 * What one MoE layer computes, in the DSL's terms and without any schedule: the router's rule, and
 * the two expert problems with their epilogues. The CPU path evaluates it with the reference; a
 * kernel spec is this plus a schedule.
 *
 * @param routingRule the router epilogue over the logits {@code x . W_router}; its bias, if any, is the row parameter {@link #ROUTER_BIAS}
 */
public record MoeBlock(Store routingRule, Problem.ExpertGateUp gateUp, Store gateUpEpilogue, Problem.ExpertDown down,
                       Store downEpilogue) {

    /** The row parameter that carries gpt-oss's router bias. */
    public static final String ROUTER_BIAS = "router_bias";

    /** The block of an architecture for experts stored in {@code format} with {@code layout} (and biases where {@code bias}). */
    public static MoeBlock of(ModelConfig c, WeightFormat format, GateUpLayout layout, boolean bias) {
        ExpertShape shape = new ExpertShape(c.hidden(), c.expertIntermediate(), c.experts(), c.topk());
        Store rule = switch (c.arch()) {
            case GPT_OSS -> RoutingRules.biasedTopKSoftmax(c.topk(), ROUTER_BIAS, DType.FP32);
            case MIXTRAL, QWEN3_MOE, OLMOE -> c.normTopkProb() ? RoutingRules.softmaxTopKRenormalized(c.topk(), DType.FP32)
                    : RoutingRules.softmaxTopK(c.topk(), DType.FP32);
        };
        EpilogueNode gate = c.arch() == Architecture.GPT_OSS
                ? Epilogues.gated(Epilogues.clampedSwiglu(), Epilogues.gate(), Epilogues.up())
                : Epilogues.gated(Epilogues.silu(), Epilogues.gate(), Epilogues.up());
        return new MoeBlock(rule, new Problem.ExpertGateUp(shape, format, DType.BF16, layout, bias),
                Epilogues.store(gate, DType.BF16), new Problem.ExpertDown(shape, format, DType.BF16, bias),
                Epilogues.combinedStore(DType.BF16));
    }
}
