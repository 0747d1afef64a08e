package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * Elementwise {@code input * factor}, e.g. DeepSeek-V3's routed scaling factor 2.5. Written
 * {@code scale(x, 2.5)}. The factor is applied in FP32 by the kernels, so it must be finite as an FP32
 * (the validator says so).
 */
public record Scale(EpilogueNode input, double factor) implements EpilogueNode {
    public Scale {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
