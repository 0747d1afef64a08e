package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.List;

/**
 * The MoE expert layer with routing given as one kernel (expert_mlp, schedule split_down): gate_up,
 * its activation and down in one launch, adding into an FP32 y. y must be zero before the launch;
 * the launch zeroes the first M rows of {@code yZero} for a later one. So a chain of layers needs no
 * memset: layer l adds into buffer {@code l % 3} and zeroes buffer {@code (l + 1) % 3}, as long as
 * no launch takes more tokens than the one before it zeroed, and a chain of L layers that is replayed
 * (a graph per decode step) either has L a multiple of 3 or clears buffer {@code L % 3} itself.
 */
public final class ExpertMlpLayer {
    private final KernelHandle kernel;
    private final ExpertShape shape;
    private final LaunchOrder order;

    public ExpertMlpLayer(KernelHandle kernel) {
        this(kernel, LaunchOrder.OVERLAPPING_PREVIOUS);
    }

    public ExpertMlpLayer(KernelHandle kernel, LaunchOrder order) {
        if (!(kernel.spec().problem() instanceof Problem.ExpertMlp m)) {
            throw new IllegalArgumentException("kernel " + kernel.spec().name() + " is not an expert_mlp kernel");
        }
        this.kernel = kernel;
        this.shape = m.shape();
        this.order = order;
    }

    public KernelHandle kernel() {
        return kernel;
    }

    public ExpertShape shape() {
        return shape;
    }

    public int maxTokens() {
        return kernel.maxTokens();
    }

    /**
     * Enqueues {@code y += mlp(x)} for {@code tokens} tokens and sets {@code yZero} to zero; {@code wDown}
     * is down repacked for split_down ({@code DeviceWeights.upload(SplitDownWeights)}).
     */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer y, DeviceBuffer yZero) {
        wGateUp.requireLayout(DeviceWeights.Layout.NATURAL, "gate_up's weights");
        wDown.requireLayout(DeviceWeights.Layout.SPLIT_DOWN, "down's weights");
        if (y == yZero) {
            throw new IllegalArgumentException("y and y_zero are the same buffer: the launch would zero the output it adds into");
        }
        kernel.launch(stream, order, tokens,
                ExpertLayer.args(List.of(x), List.of(wGateUp, wDown), List.of(topkIds, topkWeights, y, yZero)));
    }
}
