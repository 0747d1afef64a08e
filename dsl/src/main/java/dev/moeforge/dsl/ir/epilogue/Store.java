package dev.moeforge.dsl.ir.epilogue;

import dev.moeforge.dsl.ir.DType;
import java.util.List;
import java.util.Objects;

/**
 * Writes its input to the kernel's output, rounded once to {@code dtype} (round to nearest
 * even). The root of every epilogue tree. Storing a {@link TopK} writes the compact routing
 * table: {@code topk_weights [M][k]} in {@code dtype} and {@code topk_ids [M][k]} int32; storing a
 * row writes {@code [M][E]}. Written {@code store(x, dtype=bf16)}.
 */
public record Store(EpilogueNode input, DType dtype) implements EpilogueNode {
    public Store {
        Objects.requireNonNull(input, "input");
        Objects.requireNonNull(dtype, "dtype");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
