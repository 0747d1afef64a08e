package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule.RouterTiled;

/**
 * The derived sizes of a router_tiled kernel, the single statement of them: validation, the CUDA
 * emitter (which static_asserts the device header agrees) and the launcher read them from here.
 *
 * <p>Warps form {@code warpRows = tokensPerCta / 16} row groups of 16 tokens (one mma M) and
 * {@code warpColumns} column groups; the experts are padded with zero rows to
 * {@code paddedExperts}, a multiple of 16 per column group (one ldmatrix.x4 of W_r feeds two
 * n8 mmas). Shared memory holds the pipeline's stages of x and W_r slices, and afterwards (reused)
 * the tile's FP32 scores, rows {@code scoreStride} floats apart.
 */
public record RouterTileLayout(int warpRows, int warpColumns, int paddedExperts, int columnsPerWarp, int scoreStride,
                               int slices, long stageBytes, long sharedBytes) {
    /** Largest columns per warp: 4 FP32 accumulators per thread per 8 columns, at most 64 registers. */
    public static final int MAX_COLUMNS_PER_WARP = 128;

    /** Only meaningful for a schedule that passed the range checks (tokensPerCta a multiple of 16, warps a multiple of the row groups). */
    public static RouterTileLayout of(Problem.Router r, RouterTiled s) {
        int warpRows = Math.max(1, s.tokensPerCta() / 16);
        int warpColumns = Math.max(1, s.warpsPerCta() / warpRows);
        int padded = ceilDiv(r.experts(), 16 * warpColumns) * 16 * warpColumns;
        int perWarp = padded / warpColumns;
        // scoreStride = 8 (mod 32): a quad's float2 stores of 8 rows fall into distinct banks
        int stride = ceilDiv(padded, 32) * 32 + 8;
        long stage = 2L * (s.tokensPerCta() + padded) * s.kTile();
        long shared = Math.max(stage * s.stages(), 4L * s.tokensPerCta() * stride);
        int slices = ceilDiv(r.hidden(), s.kTile());
        return new RouterTileLayout(warpRows, warpColumns, padded, perWarp, stride, slices, stage, shared);
    }

    private static int ceilDiv(int a, int b) {
        return (a + b - 1) / b;
    }
}
