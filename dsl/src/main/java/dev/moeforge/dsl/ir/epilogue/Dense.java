package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * Scatters a {@link TopK}'s values back into a row of E: the selected experts' values, zero
 * elsewhere: a dense (M, E) routing matrix. Written {@code dense(x)}.
 */
public record Dense(EpilogueNode input) implements EpilogueNode {
    public Dense {
        Objects.requireNonNull(input, "input");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(input);
    }
}
