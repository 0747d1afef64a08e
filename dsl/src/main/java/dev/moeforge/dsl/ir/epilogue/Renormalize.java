package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * Divides the k values of a {@link TopK} by their sum, so they add up to 1 (Qwen3-MoE with
 * {@code norm_topk_prob}, Mixtral, DeepSeek-V3). Written {@code renormalize(x)}.
 */
public record Renormalize(EpilogueNode input) implements EpilogueNode {
    public Renormalize {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
