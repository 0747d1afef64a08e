package dev.moeforge.dsl.format;

import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.WeightFormat.BlockScale;

/**
 * The reference quantiser behind {@link EncodedWeights#encode}: a first pass per expert finds
 * non-finite values and the maxima that span several rows (NVFP4's per-tensor amax, the 128 x 128
 * block amax), the second encodes row by row. Each expert writes only its own part of the arrays.
 */
final class Encoder {
    /** Largest magnitudes of the integer grids: symmetric scales map amax to them. */
    private static final float INT8_MAX = 127f;
    private static final float INT4_MAX = 7f;
    /** NVFP4's per-tensor scale maps amax to the largest E2M1 times the largest E4M3 (ModelOpt). */
    private static final float NVFP4_RANGE = 6f * 448f;

    private final WeightFormat format;
    private final RowSource source;
    private final int rows;
    private final int cols;
    private final Projections projections;
    private final byte[] codes;
    private final byte[] blockScales;
    private final float[] rowScales;
    private final float[][] spanAmax;  // per expert: per projection (NVFP4) or per 128 x 128 block

    Encoder(WeightFormat format, RowSource source, int experts, int rows, int cols, Projections projections,
            byte[] codes, byte[] blockScales, float[] rowScales) {
        this.format = format;
        this.source = source;
        this.rows = rows;
        this.cols = cols;
        this.projections = projections;
        this.codes = codes;
        this.blockScales = blockScales;
        this.rowScales = rowScales;
        this.spanAmax = new float[experts][];
    }

    /** First pass over expert {@code e}: returns the first non-finite index (row-major within the expert), or -1. */
    long amaxes(int e) {
        BlockScale bs = format.blockScale();
        int rowBlocks = Math.ceilDiv(rows, 128);
        int colBlocks = Math.ceilDiv(cols, 128);
        float[] span = switch (format.rowScale()) {
            case PER_TENSOR -> new float[projections.count()];
            case NONE, PER_ROW -> bs.blockRows() ? new float[rowBlocks * colBlocks] : new float[0];
        };
        float[] w = new float[cols];
        for (int n = 0; n < rows; n++) {
            source.row(e, n, w);
            for (int k = 0; k < cols; k++) {
                float a = Math.abs(w[k]);
                if (!Float.isFinite(a)) {
                    return (long) n * cols + k;
                }
                if (format.rowScale() == WeightFormat.RowScale.PER_TENSOR) {
                    int p = projections.of(n, rows);
                    span[p] = Math.max(span[p], a);
                } else if (bs.blockRows()) {
                    int b = (n / 128) * colBlocks + k / 128;
                    span[b] = Math.max(span[b], a);
                }
            }
        }
        spanAmax[e] = span;
        return -1;
    }

    float valueAt(int e, long index) {
        float[] w = new float[cols];
        source.row(e, (int) (index / cols), w);
        return w[(int) (index % cols)];
    }

    void encodeExpert(int e) {
        float[] w = new float[cols];
        int[] q = new int[cols];
        for (int n = 0; n < rows; n++) {
            source.row(e, n, w);
            encodeRow(e, n, w, q);
            pack(((long) e * rows + n) * format.rowBytes(cols), q);
        }
    }

    private void encodeRow(int e, int n, float[] w, int[] q) {
        long row = (long) e * rows + n;
        switch (format) {
            case WeightFormat.Bf16 _ -> {
                for (int k = 0; k < cols; k++) {
                    q[k] = Bf16.fromFloat(w[k]) & 0xFFFF;
                }
            }
            case WeightFormat.Fp8 f -> {
                switch (f.scaling()) {
                    case CHANNEL -> {
                        float s = symmetricScale(amax(w, 0, cols), 448f);
                        rowScales[(int) row] = s;
                        minifloat(Minifloat.E4M3, w, q, 0, cols, s);
                    }
                    case BLOCK_128X128 -> {
                        int colBlocks = Math.ceilDiv(cols, 128);
                        int rowBlocks = Math.ceilDiv(rows, 128);
                        for (int cb = 0; cb < colBlocks; cb++) {
                            float s = symmetricScale(spanAmax[e][(n / 128) * colBlocks + cb], 448f);
                            long index = ((long) e * rowBlocks + n / 128) * colBlocks + cb;
                            EncodedWeights.putF32(blockScales, index, s);  // rows of a block write the same value
                            minifloat(Minifloat.E4M3, w, q, cb * 128, Math.min(cols, cb * 128 + 128), s);
                        }
                    }
                }
            }
            case WeightFormat.Mxfp8 _ -> mx(Minifloat.E4M3, row, w, q);
            case WeightFormat.Mxfp4 _ -> mx(Minifloat.E2M1, row, w, q);
            case WeightFormat.Nvfp4 _ -> {
                int p = projections.of(n, rows);
                float tensorScale = symmetricScale(spanAmax[e][p], NVFP4_RANGE);
                rowScales[e * projections.count() + p] = tensorScale;
                for (int b = 0; b < cols / 16; b++) {
                    float blockAmax = amax(w, 16 * b, 16 * b + 16);
                    int scaleCode = Minifloat.E4M3.encode(blockAmax / 6f / tensorScale);
                    blockScales[(int) (row * (cols / 16) + b)] = (byte) scaleCode;
                    float s = Minifloat.E4M3.decode(scaleCode) * tensorScale;
                    for (int k = 16 * b; k < 16 * b + 16; k++) {
                        q[k] = s == 0 ? 0 : Minifloat.E2M1.encode(w[k] / s);
                    }
                }
            }
            case WeightFormat.Int8 i -> integers(i.scaling(), INT8_MAX, -128, 127, row, w, q);
            case WeightFormat.Int4 i -> integers(i.scaling(), INT4_MAX, -8, 7, row, w, q);
        }
    }

    /** OCP MX: per 32 elements, the E8M0 shared exponent, then the elements divided by it (exact: a power of two). */
    private void mx(Minifloat element, long row, float[] w, int[] q) {
        for (int b = 0; b < cols / 32; b++) {
            int scaleCode = E8M0.sharedScale(amax(w, 32 * b, 32 * b + 32), E8M0.emax(element));
            blockScales[(int) (row * (cols / 32) + b)] = (byte) scaleCode;
            for (int k = 32 * b; k < 32 * b + 32; k++) {
                q[k] = element.encode((float) Math.scalb((double) w[k], 127 - scaleCode));
            }
        }
    }

    private void integers(WeightFormat.IntScaling scaling, float max, int lo, int hi, long row, float[] w, int[] q) {
        switch (scaling) {
            case CHANNEL -> {
                float s = symmetricScale(amax(w, 0, cols), max);
                rowScales[(int) row] = s;
                round(w, q, 0, cols, s, lo, hi);
            }
            case GROUP_128 -> {
                for (int g = 0; g < cols / 128; g++) {
                    float s = symmetricScale(amax(w, 128 * g, 128 * g + 128), max);
                    EncodedWeights.putF32(blockScales, row * (cols / 128) + g, s);
                    round(w, q, 128 * g, 128 * g + 128, s, lo, hi);
                }
            }
        }
    }

    /** amax / max, or 1 for an all-zero span (whose codes are then all zero). */
    private static float symmetricScale(float amax, float max) {
        float s = amax / max;
        return s > 0 ? s : 1f;
    }

    private static float amax(float[] w, int from, int to) {
        float a = 0;
        for (int k = from; k < to; k++) {
            a = Math.max(a, Math.abs(w[k]));
        }
        return a;
    }

    private static void minifloat(Minifloat element, float[] w, int[] q, int from, int to, float scale) {
        for (int k = from; k < to; k++) {
            q[k] = element.encode(w[k] / scale);
        }
    }

    private static void round(float[] w, int[] q, int from, int to, float scale, int lo, int hi) {
        for (int k = from; k < to; k++) {
            q[k] = (int) Math.clamp(Math.rint(w[k] / scale), lo, hi);
        }
    }

    /** Writes a row's codes: bf16 little-endian, one byte, or two nibbles per byte (element 2j low). */
    private void pack(long base, int[] q) {
        int b = (int) base;
        switch (format.element()) {
            case BF16 -> {
                for (int k = 0; k < cols; k++) {
                    codes[b + 2 * k] = (byte) q[k];
                    codes[b + 2 * k + 1] = (byte) (q[k] >>> 8);
                }
            }
            case E4M3, INT8 -> {
                for (int k = 0; k < cols; k++) {
                    codes[b + k] = (byte) q[k];
                }
            }
            case E2M1, INT4 -> {
                for (int j = 0; j < cols / 2; j++) {
                    codes[b + j] = (byte) ((q[2 * j] & 0xF) | (q[2 * j + 1] & 0xF) << 4);
                }
            }
        }
    }
}
