package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;

/**
 * The expert half of a {@link MoeLayer}, routing given: one (gate_up, down) pair
 * ({@link ExpertLayer}), or a tuned pool's pair chosen per token count ({@link TokenKeyedLayer}).
 */
public sealed interface Experts permits ExpertLayer, TokenKeyedLayer {
    /** How the layer's first kernel is ordered after the one before it (the router follows the same). */
    LaunchOrder order();

    ExpertShape shape();

    /** The most tokens one call takes. */
    int maxTokens();

    /** A buffer for the intermediate gate_up hands to down, for up to {@code tokens} tokens. */
    DeviceBuffer allocateInter(int tokens);

    /** Enqueues {@code y = down(gate_up(x))} for {@code tokens} tokens, nothing read back to the host. */
    void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown, DeviceBuffer topkIds,
                 DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y);
}
