package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * {@code exp(x_i - max) / sum_j exp(x_j - max)} over a row of expert scores, or over the k
 * values of a {@link TopK} (gpt-oss: softmax of the selected logits). A NaN anywhere in the input
 * makes every output NaN. Written {@code softmax(x)}.
 */
public record Softmax(EpilogueNode input) implements EpilogueNode {
    public Softmax {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
