package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.List;

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
        enqueue(stream, tokens, x, DeviceWeights.bf16(wGateUp), DeviceWeights.bf16(wDown), topkIds, topkWeights, inter, y);
    }

    /** As above, with the weights in the kernels' format (codes and scales). */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        enqueueGateUp(stream, tokens, x, wGateUp, topkIds, inter);
        enqueueDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** gate_up alone: {@code inter = act(x W_gu^T)} for each routed (token, slot). */
    public void enqueueGateUp(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceBuffer topkIds,
                              DeviceBuffer inter) {
        launchGateUp(gateUp, order, stream, tokens, x, wGateUp, topkIds, inter);
    }

    /** down alone: {@code y = sum_j topk_weights[j] * (inter_j W_down^T)}. */
    public void enqueueDown(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                            DeviceBuffer topkWeights, DeviceBuffer y) {
        launchDown(down, order, stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** A gate_up kernel on its own (one with no down to form a layer with), as {@link #enqueueGateUp} launches it. */
    public static void launchGateUp(KernelHandle gateUp, LaunchOrder order, CudaStream stream, int tokens, DeviceBuffer x,
                                    DeviceWeights wGateUp, DeviceBuffer topkIds, DeviceBuffer inter) {
        wGateUp.requireLayout(DeviceWeights.Layout.NATURAL, "gate_up's weights");
        gateUp.launch(stream, order, tokens, args(List.of(x), List.of(wGateUp), List.of(topkIds, inter)));
    }

    /** A down kernel on its own, as {@link #enqueueDown} launches it. */
    public static void launchDown(KernelHandle down, LaunchOrder order, CudaStream stream, int tokens, DeviceBuffer inter,
                                  DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer y) {
        wDown.requireLayout(DeviceWeights.Layout.NATURAL, "down's weights");
        down.launch(stream, order, tokens, args(List.of(inter), List.of(wDown), List.of(topkIds, topkWeights, y)));
    }

    /** A kernel's buffers in launch order: {@code before}, each weight's buffers, then {@code after}. */
    static DeviceBuffer[] args(List<DeviceBuffer> before, List<DeviceWeights> weights, List<DeviceBuffer> after) {
        List<DeviceBuffer> all = new ArrayList<>(before);
        for (DeviceWeights w : weights) {
            all.addAll(w.buffers());
        }
        all.addAll(after);
        return all.toArray(DeviceBuffer[]::new);
    }
}
