package dev.moeforge.dsl.format;

/**
 * Activations quantised for FP8 x FP8 (W8A8) tensor-core kernels: each row's values, rounded to
 * bf16 first (what such a kernel holds), in groups of 128 consecutive columns with one FP32 scale
 * per group (amax / 448, so the largest value lands on E4M3's largest), the codes rounded to nearest
 * even. This is DeepSeek-V3's 1 x 128 activation grouping.
 *
 * <p>On the device a quantised row is {@link #rowBytes(int)} bytes: its E4M3 codes, then its group
 * scales (FP32), padded to 16 bytes so that every row starts 16-byte aligned.
 */
public final class Fp8ActivationRows {
    /** Columns per scale. */
    public static final int GROUP = 128;

    private Fp8ActivationRows() {}

    /** Bytes of one quantised row of {@code columns} (a multiple of {@link #GROUP}): codes, then scales, padded to 16. */
    public static int rowBytes(int columns) {
        requireGroups(columns);
        int scaleBytes = columns / GROUP * Float.BYTES;
        return columns + (scaleBytes + 15) / 16 * 16;
    }

    /** The scale of a group whose largest magnitude is {@code amax} (1 for an all-zero group). */
    public static float scale(float amax) {
        return amax > 0 ? amax / Minifloat.E4M3.maxFinite() : 1f;
    }

    /**
     * {@code values} ({@code rows x columns}) as a W8A8 kernel quantises them, returned as the exact
     * values the kernel multiplies: code x scale. A row's last group may be shorter than
     * {@link #GROUP} (the kernels take whole groups; an accuracy study may not).
     */
    public static double[] quantise(double[] values, int rows, int columns) {
        if (columns < 1 || values.length != (long) rows * columns) {
            throw new IllegalArgumentException(values.length + " values for " + rows + " x " + columns);
        }
        double[] out = new double[values.length];
        float[] group = new float[GROUP];
        for (int r = 0; r < rows; r++) {
            for (int c0 = 0; c0 < columns; c0 += GROUP) {
                int at = r * columns + c0;
                int n = Math.min(GROUP, columns - c0);
                float amax = 0;
                for (int i = 0; i < n; i++) {
                    group[i] = Bf16.toFloat(Bf16.fromDouble(values[at + i]));
                    amax = Math.max(amax, Math.abs(group[i]));
                }
                float scale = scale(amax);
                for (int i = 0; i < n; i++) {
                    out[at + i] = (double) Minifloat.E4M3.decode(Minifloat.E4M3.encode(group[i] / scale)) * scale;
                }
            }
        }
        return out;
    }

    /** The exact values of {@code rows} quantised rows of {@code columns}, as the device stores them ({@link #rowBytes(int)} each). */
    public static double[] decode(byte[] stored, int rows, int columns) {
        int stride = rowBytes(columns);
        if (stored.length < (long) rows * stride) {
            throw new IllegalArgumentException(stored.length + " bytes for " + rows + " rows of " + stride);
        }
        double[] out = new double[rows * columns];
        for (int r = 0; r < rows; r++) {
            int row = r * stride;
            for (int c = 0; c < columns; c++) {
                int at = row + columns + c / GROUP * Float.BYTES;
                float scale = Float.intBitsToFloat((stored[at] & 0xff) | (stored[at + 1] & 0xff) << 8
                        | (stored[at + 2] & 0xff) << 16 | (stored[at + 3] & 0xff) << 24);
                out[r * columns + c] = (double) Minifloat.E4M3.decode(stored[row + c] & 0xff) * scale;
            }
        }
        return out;
    }

    private static void requireGroups(int columns) {
        if (columns < GROUP || columns % GROUP != 0) {
            throw new IllegalArgumentException(columns + " columns: FP8 activation rows take a multiple of " + GROUP);
        }
    }
}
