package dev.moeforge.dsl.check;

/** How many values an epilogue node has per output position: its type in the epilogue tree. */
public enum ValueScope {
    /** One FP32 value per (token, routed slot, output): the accumulators of the expert kernels. */
    PER_SLOT,
    /** One FP32 value per (token, output), after a {@code combine} over the routed slots. */
    PER_TOKEN,
    /** Written to global memory: only a {@code store} has it, and only at the root. */
    STORED
}
