package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.ir.DType;
import java.util.List;

/**
 * A scratch tensor a kernel owns beyond its problem's inputs and outputs: allocated zeroed once.
 * Counters in it are left zero by every launch, so graph replays need nothing; other scratch
 * holds values only within a launch.
 *
 * @param shape dimensions, with {@link #TOKENS} standing for the token count M
 */
public record Workspace(String name, DType elementType, List<Integer> shape, String description) {
    /** Marks the token-count dimension in {@link #shape()}. */
    public static final int TOKENS = -1;

    public Workspace {
        shape = List.copyOf(shape);
    }
}
