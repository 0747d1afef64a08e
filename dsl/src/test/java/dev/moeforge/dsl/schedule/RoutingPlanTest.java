package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** The host twin of the align kernels, against plans worked out by hand. */
class RoutingPlanTest {
    @Test
    void groupsPairsByExpertAscendingWithinEach() {
        // 4 tokens, top-2, 3 experts: pairs 0..7 are (m0: 2, 0) (m1: 0, 1) (m2: 2, 1) (m3: 0, 2)
        int[] ids = {2, 0, 0, 1, 2, 1, 0, 2};
        RoutingPlan plan = RoutingPlan.of(ids, 4, 2, 3);
        // expert 0: pairs 1, 2, 6; expert 1: 3, 5; expert 2: 0, 4, 7; bucket 3 (outside ids): none
        assertArrayEquals(new int[] {1, 2, 6, 3, 5, 0, 4, 7}, plan.sortedSlots());
        assertArrayEquals(new int[] {0, 3, 5, 8, 8}, plan.expertOffsets());
    }

    @Test
    void idsOutsideTheExpertsGoToTheLastBucket() {
        int[] ids = {1, -1, 5, 0, 1, 3};  // 3 tokens, top-2, 3 experts: -1, 5 and 3 name none
        RoutingPlan plan = RoutingPlan.of(ids, 3, 2, 3);
        assertArrayEquals(new int[] {3, 0, 4, 1, 2, 5}, plan.sortedSlots());
        assertArrayEquals(new int[] {0, 1, 3, 3, 6}, plan.expertOffsets());
    }

    /** The align's count table holds MAX_SEGMENTS rows for any batch up to its capacity, fewer pairs included. */
    @Test
    void noBatchCutsMoreSegmentsThanTheLimit() {
        for (long pairs = 1; pairs <= 70_000; pairs++) {
            long p = pairs;
            assertEquals(true, RoutingPlan.segments(pairs) <= RoutingPlan.MAX_SEGMENTS, () -> RoutingPlan.segments(p) + " segments for " + p);
        }
    }

    @Test
    void segmentsStayWithinTheirLimitAndCoverEveryPair() {
        for (long pairs : new long[] {1, 31, 32, 33, 64, 512, 513, 4096, 4097, 131_072, 524_288, 2_097_152}) {
            int length = RoutingPlan.segmentLength(pairs);
            int segments = RoutingPlan.segments(pairs);
            // a decode batch's plan is one launch: its scatter alone, over one segment
            assertEquals(pairs <= RoutingPlan.ONE_SEGMENT_PAIRS, segments == 1, () -> segments + " segments for " + pairs + " pairs");
            assertEquals(0, length % RoutingPlan.WARP, () -> "segment of " + length + " for " + pairs + " pairs");
            assertEquals(true, segments <= RoutingPlan.MAX_SEGMENTS && (long) segments * length >= pairs
                    && (long) (segments - 1) * length < pairs, () -> segments + " segments of " + length + " for " + pairs);
        }
    }
}
