package dev.moeforge.runtime.kernel;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;

/**
 * The align entry points of an expert-centric kernel's module: two launches that turn
 * {@code topk_ids} into the {@link RoutingPlan} on the device, with nothing read back to the
 * host, so a layer captures in one CUDA graph.
 */
public final class RoutingAlign {
    private final CudaFunction count;
    private final CudaFunction scatter;
    private final int experts;
    private final int topk;

    RoutingAlign(CudaFunction count, CudaFunction scatter, int experts, int topk) {
        this.count = count;
        this.scatter = scatter;
        this.experts = experts;
        this.topk = topk;
    }

    /** Elements of the count table for up to {@code tokens} tokens: a row of E + 1 buckets per segment. */
    public long segmentCountsElements(int tokens) {
        return (long) RoutingPlan.segments((long) tokens * topk) * (experts + 1);
    }

    /** The plan's buffers for up to {@code tokens} tokens, and the align's scratch. */
    public PlanBuffers allocate(int tokens) {
        return new PlanBuffers(DeviceBuffer.allocate(DType.INT32, (long) tokens * topk),
                DeviceBuffer.allocate(DType.INT32, RoutingPlan.offsetsLength(experts)),
                DeviceBuffer.allocate(DType.INT32, segmentCountsElements(tokens)), tokens);
    }

    /** Enqueues the two launches that write {@code plan} from {@code topkIds} ([tokens][k]). */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer topkIds, PlanBuffers plan) {
        if (tokens < 1 || tokens > plan.capacity()) {
            throw new IllegalArgumentException("tokens = " + tokens + ": the routing plan holds 1.." + plan.capacity());
        }
        if (topkIds.dtype() != DType.INT32 || topkIds.elements() < (long) tokens * topk) {
            throw new IllegalArgumentException("topk_ids must be int32 [" + tokens + "][" + topk + "], got " + topkIds);
        }
        int pairs = tokens * topk;
        int segment = RoutingPlan.segmentLength(pairs);
        int segments = RoutingPlan.segments(pairs);
        count.launch(order, segments, 1, 1, 32, 1, 1, 0, stream, topkIds, plan.segmentCounts(), pairs, segment);
        scatter.launch(order, segments, 1, 1, 32, 1, 1, 0, stream, topkIds, plan.segmentCounts(), plan.sortedSlots(),
                plan.expertOffsets(), pairs, segment, segments);
    }

    /**
     * A routing plan on the device for up to {@code capacity} tokens: sorted_slots [capacity*k],
     * expert_offsets [E+2], and the align's per-segment counts.
     */
    public record PlanBuffers(DeviceBuffer sortedSlots, DeviceBuffer expertOffsets, DeviceBuffer segmentCounts, int capacity)
            implements AutoCloseable {
        @Override
        public void close() {
            sortedSlots.close();
            expertOffsets.close();
            segmentCounts.close();
        }
    }
}
