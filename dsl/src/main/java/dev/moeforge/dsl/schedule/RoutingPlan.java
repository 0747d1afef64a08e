package dev.moeforge.dsl.schedule;

import java.util.Arrays;

/**
 * The routing grouped by expert, which expert-centric kernels take beside {@code topk_ids}: the
 * flat (token, slot) pairs {@code m*k + j} in expert order, ascending within each expert, and
 * where each expert's run starts. Bucket E (the last) collects ids outside [0, E). The plan
 * depends on the routing alone, not on a kernel's tile, so one serves gate_up and down.
 *
 * <p>On the GPU two launches build it from {@code topk_ids} with nothing read back to the host:
 * {@code <kernel>_align_count} counts each segment's pairs per bucket, {@code <kernel>_align_scatter}
 * places every pair (with one segment, up to {@link #ONE_SEGMENT_PAIRS}, the scatter counts them itself
 * and is the only launch); both are entry points of each expert-centric kernel's module. This class
 * names their parameters and is the host twin the tests compare them with.
 *
 * @param sortedSlots   the pairs in bucket order ({@code [M*k]})
 * @param expertOffsets bucket b's pairs are {@code sortedSlots[offsets[b] .. offsets[b+1])} ({@code [E+2]})
 */
public record RoutingPlan(int[] sortedSlots, int[] expertOffsets) {
    public static final String SORTED_SLOTS = "sorted_slots";
    public static final String EXPERT_OFFSETS = "expert_offsets";
    /** Suffixes of the align entry points after the kernel's name. */
    public static final String COUNT_ENTRY = "_align_count";
    public static final String SCATTER_ENTRY = "_align_scatter";
    /** Pairs one align warp ranks at a time. */
    public static final int WARP = 32;
    /** Segments (one warp each) the align splits the pairs into at most, so its count table stays small. */
    public static final int MAX_SEGMENTS = 128;

    /**
     * Up to this many pairs the align takes one segment, which its scatter counts itself: the plan is
     * one launch of one warp (a few rounds of 32 pairs cost less than a second launch).
     */
    public static final int ONE_SEGMENT_PAIRS = 512;

    /**
     * Pairs per align segment for {@code pairs} pairs: all of them up to {@link #ONE_SEGMENT_PAIRS},
     * else a whole number of warps' rounds, at most {@link #MAX_SEGMENTS} segments.
     */
    public static int segmentLength(long pairs) {
        if (pairs <= ONE_SEGMENT_PAIRS) {
            return Math.toIntExact(Math.max(1, Math.ceilDiv(pairs, WARP)) * WARP);
        }
        long rounds = Math.max(1, Math.ceilDiv(pairs, (long) WARP * MAX_SEGMENTS));
        return Math.toIntExact(rounds * WARP);
    }

    public static int segments(long pairs) {
        return Math.toIntExact(Math.max(1, Math.ceilDiv(pairs, segmentLength(pairs))));
    }

    /** Entries of {@code expert_offsets}: a start per bucket (E experts and the outside bucket) and the end. */
    public static int offsetsLength(int experts) {
        return experts + 2;
    }

    /** The plan of a routing table {@code topkIds [tokens][topk]}, as the align kernels write it. */
    public static RoutingPlan of(int[] topkIds, int tokens, int topk, int experts) {
        int pairs = tokens * topk;
        int buckets = experts + 1;
        int[] offsets = new int[buckets + 1];
        for (int i = 0; i < pairs; i++) {
            offsets[bucket(topkIds[i], experts) + 1]++;
        }
        for (int b = 0; b < buckets; b++) {
            offsets[b + 1] += offsets[b];
        }
        int[] next = Arrays.copyOf(offsets, buckets);
        int[] sorted = new int[pairs];
        for (int i = 0; i < pairs; i++) {
            sorted[next[bucket(topkIds[i], experts)]++] = i;
        }
        return new RoutingPlan(sorted, offsets);
    }

    private static int bucket(int id, int experts) {
        return id >= 0 && id < experts ? id : experts;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof RoutingPlan p && Arrays.equals(sortedSlots, p.sortedSlots) && Arrays.equals(expertOffsets, p.expertOffsets);
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(sortedSlots) + Arrays.hashCode(expertOffsets);
    }

    @Override
    public String toString() {
        return "RoutingPlan[sorted_slots=" + Arrays.toString(sortedSlots) + ", expert_offsets=" + Arrays.toString(expertOffsets) + "]";
    }
}
