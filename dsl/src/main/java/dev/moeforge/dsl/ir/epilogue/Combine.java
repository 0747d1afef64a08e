package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * The routing-weighted sum over a token's routed experts: {@code sum_j topk_weights[m][j] * input_j}.
 * Its input is a per-(token, slot) value; its result is per token. In the output-centric down
 * kernel each routing weight is folded into the one FP32 accumulator, so the per-expert values
 * never reach memory. Written {@code combine(acc)}.
 */
public record Combine(EpilogueNode input) implements EpilogueNode {
    public Combine {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
