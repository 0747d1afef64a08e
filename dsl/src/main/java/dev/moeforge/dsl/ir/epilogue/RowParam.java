package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * A per-expert FP32 vector given at launch, e.g. gpt-oss's router bias or DeepSeek-V3's
 * {@code e_score_correction_bias}; it becomes a kernel parameter of that name with E values.
 * Written {@code row(name)}.
 */
public record RowParam(String name) implements EpilogueNode {
    public RowParam {
        Objects.requireNonNull(name, "name");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of();
    }
}
