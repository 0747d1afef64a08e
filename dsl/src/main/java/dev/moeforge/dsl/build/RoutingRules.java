package dev.moeforge.dsl.build;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import java.util.Optional;

/**
 * The routing rules of the models MoeForge runs, as router epilogue trees, each as the model's
 * router computes it in transformers 5.17 ({@code models/qwen3_moe}, {@code qwen3_next},
 * {@code mixtral}, {@code olmoe}, {@code gpt_oss}, {@code deepseek_v3}).
 */
public final class RoutingRules {
    private RoutingRules() {}

    /**
     * Softmax over all experts, top-k, then renormalised to sum to 1: Qwen3-MoE
     * ({@code norm_topk_prob=true}), Qwen3-Next, Mixtral.
     * {@code store(renormalize(topk(softmax(acc), k)), dtype)}.
     */
    public static Store softmaxTopKRenormalized(int k, DType dtype) {
        return new Store(new Renormalize(TopK.of(new Softmax(Acc.MAIN), k)), dtype);
    }

    /** Softmax over all experts, then top-k, not renormalised: OLMoE. {@code store(topk(softmax(acc), k), dtype)}. */
    public static Store softmaxTopK(int k, DType dtype) {
        return new Store(TopK.of(new Softmax(Acc.MAIN), k), dtype);
    }

    /**
     * gpt-oss: top-k of the logits plus the router bias, then softmax over the k selected.
     * {@code store(softmax(topk(add(acc, row(bias)), k)), dtype)}.
     */
    public static Store biasedTopKSoftmax(int k, String bias, DType dtype) {
        return new Store(new Softmax(TopK.of(new Add(Acc.MAIN, new RowParam(bias)), k)), dtype);
    }

    /**
     * DeepSeek-V3: sigmoid scores; the experts are selected on score + correction bias with the
     * group limit (groups scored by their two best, topkGroups kept), the selected scores
     * renormalised and multiplied by the routed scaling factor.
     * {@code store(scale(renormalize(topk(sigmoid(acc), k, groups=G, topk_groups=TG,
     * by=add(sigmoid(acc), row(bias)))), scaling), dtype)}.
     */
    public static Store groupLimitedSigmoid(int k, int groups, int topkGroups, double scaling, String correctionBias,
                                            DType dtype) {
        Sigmoid scores = new Sigmoid(Acc.MAIN);
        TopK selected = new TopK(scores, k, groups, topkGroups, Optional.of(new Add(scores, new RowParam(correctionBias))));
        return new Store(new Scale(new Renormalize(selected), scaling), dtype);
    }
}
