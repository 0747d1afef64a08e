package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/** Elementwise {@code left + right} of two values of the same type. Written {@code add(a, b)}. */
public record Add(EpilogueNode left, EpilogueNode right) implements EpilogueNode {
    public Add {
        Objects.requireNonNull(left, "left");
        Objects.requireNonNull(right, "right");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(left, right);
    }
}
