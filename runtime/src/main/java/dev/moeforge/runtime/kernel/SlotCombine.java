package dev.moeforge.runtime.kernel;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;

/**
 * The combine entry point of an expert_centric down with {@code combine_kernel}: one launch, right
 * after the kernel, that adds each token's k weighted partial rows (bf16 [M][k][H], which the kernel
 * left in its workspace) in slot order into y (bf16 [M][H]).
 */
public final class SlotCombine {
    private final CudaFunction combine;
    private final int hidden;
    private final int topk;

    SlotCombine(CudaFunction combine, int hidden, int topk) {
        this.combine = combine;
        this.hidden = hidden;
        this.topk = topk;
    }

    /** Enqueues {@code y = sum over slots of partials} for {@code tokens} tokens. */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer partials, DeviceBuffer y) {
        if (partials.dtype() != DType.BF16 || partials.elements() < (long) tokens * topk * hidden) {
            throw new IllegalArgumentException("partials must be bf16 [" + tokens + "][" + topk + "][" + hidden + "], got " + partials);
        }
        if (y.dtype() != DType.BF16 || y.elements() < (long) tokens * hidden) {
            throw new IllegalArgumentException("y must be bf16 [" + tokens + "][" + hidden + "], got " + y);
        }
        combine.launch(order, ExpertCentric.combineBlocks(tokens, hidden), 1, 1, ExpertCentric.COMBINE_THREADS, 1, 1, 0, stream,
                partials, y, tokens);
    }
}
