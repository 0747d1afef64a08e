package dev.moeforge.dsl.ir.epilogue;

import dev.moeforge.dsl.ir.DType;
import java.util.Objects;

/**
 * Writes its input to the kernel's output tensor, rounded once to {@code dtype} (round to
 * nearest even). The root of every epilogue tree. Written {@code store(x, dtype=bf16)}.
 */
public record Store(EpilogueNode input, DType dtype) implements EpilogueNode {
    public Store {
        Objects.requireNonNull(input, "input");
        Objects.requireNonNull(dtype, "dtype");
    }
}
