package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/** Elementwise {@code 1 / (1 + exp(-x))}. Written {@code sigmoid(x)}. */
public record Sigmoid(EpilogueNode input) implements EpilogueNode {
    public Sigmoid {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
