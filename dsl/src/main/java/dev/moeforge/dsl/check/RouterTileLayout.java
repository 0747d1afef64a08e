package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule.RouterTiled;

/**
 * The derived sizes of a router_tiled kernel, the single statement of them: validation, the CUDA
 * emitter (which static_asserts the device header agrees) and the launcher read them from here.
 *
 * <p>Warps form {@code warpRows = tokensPerCta / tokensPerWarp} row groups, {@code kGroups} k
 * groups and {@code warpColumns} column groups; the experts are padded with zero rows to
 * {@code paddedExperts}, a multiple of 16 per column group (one ldmatrix.x4 of W_r feeds two n8
 * mmas). Shared memory holds the pipeline's stages of x and W_r slices, and afterwards (reused)
 * the tile's FP32 scores, rows {@code scoreStride} floats apart; with a cluster split, an inbox
 * for the other blocks' partial sums of this block's {@code ownRows} rows (one slot per other
 * block) follows the pipeline.
 */
public record RouterTileLayout(int warpRows, int warpColumns, int paddedExperts, int columnsPerWarp, int scoreStride,
                               int slices, int ownRows, long stageBytes, long sharedBytes) {
    /** Largest accumulator count per thread: 4 FP32 per 16 x 8 mma tile, at most 64 registers. */
    public static final int MAX_ACCUMULATORS = 64;

    /** Registers a thread keeps besides its accumulators: fragments, addresses, the pipeline's counters. */
    static final int OTHER_REGISTERS = 32;

    /**
     * The accumulators a block of {@code warps} warps may hold per thread without spilling: at most
     * {@link #MAX_ACCUMULATORS}, and what __launch_bounds__'s register share (65536 per block, in
     * allocation units of 8, at most 255) leaves after {@link #OTHER_REGISTERS}.
     */
    public static int accumulatorLimit(int warps) {
        int share = Math.min(255, 65_536 / (32 * Math.max(1, warps))) & ~7;
        return Math.min(MAX_ACCUMULATORS, share - OTHER_REGISTERS);
    }

    /**
     * The block's expert histogram in static shared memory (the device header's BlockExpertCounts:
     * one int per expert) when the problem keeps expert counts, else 0. Not part of
     * {@link #sharedBytes()}, which is the dynamic shared memory the launch asks for.
     */
    public static long expertCountBytes(Problem.Router r) {
        return r.expertCounts() ? 4L * r.experts() : 0L;
    }

    /** Only meaningful for a schedule that passed the range checks (the divisibility rules of Validator). */
    public static RouterTileLayout of(Problem.Router r, RouterTiled s) {
        int warpRows = Math.max(1, s.tokensPerCta() / Math.max(16, s.tokensPerWarp()));
        int warpColumns = Math.max(1, s.warpsPerCta() / (warpRows * Math.max(1, s.kGroups())));
        int padded = ceilDiv(r.experts(), 16 * warpColumns) * 16 * warpColumns;
        int perWarp = padded / warpColumns;
        // scoreStride = 8 (mod 32): a quad's float2 stores of 8 rows fall into distinct banks
        int stride = ceilDiv(padded, 32) * 32 + 8;
        int split = Math.max(1, s.clusterSplit());
        int ownRows = s.tokensPerCta() / split;
        long stage = 2L * (s.tokensPerCta() + padded) * s.kTile();
        long pipelineOrTable = Math.max(stage * s.stages(), 4L * s.tokensPerCta() * stride);
        long inbox = 4L * (split - 1) * ownRows * stride;  // the other blocks' partials of this block's rows
        int slices = ceilDiv(r.hidden(), s.kTile());
        return new RouterTileLayout(warpRows, warpColumns, padded, perWarp, stride, slices, ownRows, stage,
                pipelineOrTable + inbox);
    }

    /** FP32 accumulators each thread holds: (tokensPerWarp / 16) x (columnsPerWarp / 8) mma tiles of 4. */
    public int accumulators(RouterTiled s) {
        return s.tokensPerWarp() / 16 * (columnsPerWarp / 8) * 4;
    }

    private static int ceilDiv(int a, int b) {
        return (a + b - 1) / b;
    }
}
