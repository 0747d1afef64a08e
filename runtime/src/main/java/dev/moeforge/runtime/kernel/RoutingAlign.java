package dev.moeforge.runtime.kernel;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;

/**
 * The align entry points of an expert-centric kernel's module: two launches (one for a batch of
 * one segment) that turn {@code topk_ids} into the {@link RoutingPlan} on the device, with nothing read back to the
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

    /**
     * Elements of the count table: a row of E + 1 buckets for each of the most segments any batch
     * takes ({@link RoutingPlan#MAX_SEGMENTS}; fewer tokens can cut more segments than more tokens do,
     * 4,096 pairs 128 of 32 where 4,104 take 65 of 64, so the table is not sized by the capacity).
     */
    public long segmentCountsElements() {
        return (long) RoutingPlan.MAX_SEGMENTS * (experts + 1);
    }

    /** The plan's buffers for up to {@code tokens} tokens, and the align's scratch. */
    public PlanBuffers allocate(int tokens) {
        return new PlanBuffers(DeviceBuffer.allocate(DType.INT32, (long) tokens * topk),
                DeviceBuffer.allocate(DType.INT32, RoutingPlan.offsetsLength(experts)),
                DeviceBuffer.allocate(DType.INT32, segmentCountsElements()), tokens);
    }

    /**
     * Enqueues the launches that write {@code plan} from {@code topkIds} ([tokens][k]): the count and
     * the scatter, or for pairs of one segment the scatter alone (it counts them itself).
     */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer topkIds, PlanBuffers plan) {
        checkRouting(tokens, topkIds, plan);
        Segments s = Segments.of(tokens * topk);
        if (s.segments() > 1) {
            launchCount(stream, order, s, topkIds, plan);
        }
        scatter.launch(order, s.segments(), 1, 1, 32, 1, 1, 0, stream, topkIds, plan.segmentCounts(), plan.sortedSlots(),
                plan.expertOffsets(), s.pairs(), s.segment(), s.segments());
    }

    /**
     * The first of the two launches alone, for a caller whose own second launch places the pairs
     * (one warp a block, {@link Segments#segments()} blocks, as the align's scatter does). It runs for
     * one segment as well, where {@link #enqueue} skips it: such a caller may read the counts (the
     * dispatched layer's choice does).
     */
    public Segments enqueueCount(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer topkIds, PlanBuffers plan) {
        checkRouting(tokens, topkIds, plan);
        Segments s = Segments.of(tokens * topk);
        launchCount(stream, order, s, topkIds, plan);
        return s;
    }

    private void launchCount(CudaStream stream, LaunchOrder order, Segments s, DeviceBuffer topkIds, PlanBuffers plan) {
        count.launch(order, s.segments(), 1, 1, 32, 1, 1, 0, stream, topkIds, plan.segmentCounts(), s.pairs(), s.segment());
    }

    private void checkRouting(int tokens, DeviceBuffer topkIds, PlanBuffers plan) {
        if (tokens < 1 || tokens > plan.capacity()) {
            throw new IllegalArgumentException("tokens = " + tokens + ": the routing plan holds 1.." + plan.capacity());
        }
        if (topkIds.dtype() != DType.INT32 || topkIds.elements() < (long) tokens * topk) {
            throw new IllegalArgumentException("topk_ids must be int32 [" + tokens + "][" + topk + "], got " + topkIds);
        }
    }

    /** How the align splits {@code pairs} routed pairs: {@code segments} blocks of {@code segment} pairs. */
    public record Segments(int pairs, int segment, int segments) {
        static Segments of(int pairs) {
            return new Segments(pairs, RoutingPlan.segmentLength(pairs), RoutingPlan.segments(pairs));
        }
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
