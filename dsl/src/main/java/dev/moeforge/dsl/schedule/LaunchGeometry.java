package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.KernelSpec;

/**
 * Grid, block and dynamic shared memory of a kernel's launch for one token count, from
 * {@link Schedule#geometry}.
 */
public record LaunchGeometry(int gridX, int gridY, int blockX, int sharedBytes) {
    /** CUDA's limit on gridDim.y. */
    public static final int MAX_GRID_Y = 65_535;

    /** The launch of {@code spec} (validated first) for {@code tokens} tokens, 1..{@link #maxTokens}. */
    public static LaunchGeometry of(KernelSpec spec, int tokens) {
        return Validator.check(spec).geometry(tokens);
    }

    /** The largest token count one launch of {@code spec} takes. */
    public static int maxTokens(KernelSpec spec) {
        return Validator.check(spec).maxTokens();
    }
}
