package dev.moeforge.dsl.ir.epilogue;

import java.util.Objects;

/**
 * Elementwise {@code input * factor}, e.g. DeepSeek-V3's routed scaling factor 2.5. Written
 * {@code scale(x, 2.5)}. The factor is a finite double, applied in FP32 by the kernels.
 */
public record Scale(EpilogueNode input, double factor) implements EpilogueNode {
    public Scale {
        Objects.requireNonNull(input, "input");
    }
}
