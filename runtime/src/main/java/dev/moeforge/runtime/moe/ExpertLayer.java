package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;

/**
 * The MoE expert layer with routing given: gate_up then down, enqueued back to back on one
 * stream with nothing read back to the host, so a decode loop can capture it in a CUDA graph.
 * By default both kernels overlap the kernel before them (programmatic dependent launch).
 */
public final class ExpertLayer {
    private final KernelHandle gateUp;
    private final KernelHandle down;
    private final ExpertShape shape;
    private final LaunchOrder order;

    public ExpertLayer(KernelHandle gateUp, KernelHandle down) {
        this(gateUp, down, LaunchOrder.OVERLAPPING_PREVIOUS);
    }

    public ExpertLayer(KernelHandle gateUp, KernelHandle down, LaunchOrder order) {
        if (!(gateUp.spec().problem() instanceof Problem.ExpertGateUp g)) {
            throw new IllegalArgumentException("kernel " + gateUp.spec().name() + " is not a gate_up kernel");
        }
        if (!(down.spec().problem() instanceof Problem.ExpertDown d)) {
            throw new IllegalArgumentException("kernel " + down.spec().name() + " is not a down kernel");
        }
        if (!g.shape().equals(d.shape())) {
            throw new IllegalArgumentException("gate_up " + gateUp.spec().name() + " has shape " + g.shape()
                    + " but down " + down.spec().name() + " has " + d.shape());
        }
        this.gateUp = gateUp;
        this.down = down;
        this.shape = g.shape();
        this.order = order;
    }

    /** How each kernel is ordered after the one before it. */
    public LaunchOrder order() {
        return order;
    }

    public ExpertShape shape() {
        return shape;
    }

    public KernelHandle gateUp() {
        return gateUp;
    }

    public KernelHandle down() {
        return down;
    }

    public int maxTokens() {
        return Math.min(gateUp.maxTokens(), down.maxTokens());
    }

    /** Enqueues {@code y = down(gate_up(x))} for {@code tokens} tokens; {@code inter} is the scratch [M][k][I]. */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceBuffer wGateUp, DeviceBuffer wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        gateUp.launch(stream, order, tokens, x, wGateUp, topkIds, inter);
        down.launch(stream, order, tokens, inter, wDown, topkIds, topkWeights, y);
    }
}
