package dev.moeforge.dsl.format;

import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.SplitDown;
import java.util.stream.IntStream;

/**
 * Down's 4-bit weights repacked once, on load, for the split_down schedule, which multiplies a
 * block's 16 neurons into down's 16 matching columns for every hidden row (the device header's
 * {@code mlp_split_down}). The row scales stay as loaded.
 *
 * <p>Codes {@code [E][I/16][H/64][32 lanes][16 bytes]}: tile j holds columns {@code [16j, 16j + 16)};
 * in quad q (64 rows) lane (g, t) holds four 32-bit words, word m being its m16n8k16 A fragment of
 * rows {@code 64q + 8g + m} (nibbles 0, 4, 2, 6) and {@code 64q + 8g + 4 + m} (nibbles 1, 5, 3, 7) at
 * columns {@code 16j + 2t, 2t + 1, 2t + 8, 2t + 9}; word bytes little-endian, nibble 2b the low one
 * of byte b. K-block scales per scale block of the intermediate and quad: E4M3 and E8M0 bytes
 * {@code [g][m][row 8g+m, row 8g+4+m]} (64 bytes), FP32 per 128 {@code [g][rows 8g .. 8g+7]}
 * (256 bytes, little-endian). Every byte of the source appears once, so the sizes are the source's.
 */
public record SplitDownWeights(WeightFormat format, int experts, int hidden, int intermediate, byte[] codes, byte[] blockScales,
                               float[] rowScales) {
    private static final int LANES = 32;
    private static final int QUAD_CODE_BYTES = LANES * 16;

    /** Sizes as {@link #of} makes them: the source's, in a layout split_down can read. */
    public SplitDownWeights {
        if (!SplitDown.fits(format, hidden, intermediate)) {
            throw new IllegalArgumentException("split_down weights are 4-bit with scales along K, whole quads and tiles; got "
                    + format.text() + " [" + experts + ", " + hidden + ", " + intermediate + "]");
        }
        long codeBytes = (long) experts * hidden * intermediate / 2;
        long scaleBytes = (long) experts * format.blockScale().perExpert(hidden, intermediate) * format.blockScale().bytes();
        if (codes.length != codeBytes || blockScales.length != scaleBytes) {
            throw new IllegalArgumentException("split_down weights [" + experts + ", " + hidden + ", " + intermediate + "] need "
                    + codeBytes + " code bytes and " + scaleBytes + " scale bytes, got " + codes.length + " and " + blockScales.length);
        }
    }

    /**
     * Repacks down {@code [E][H][I]} (rows: hidden outputs, columns: intermediate neurons).
     *
     * @throws IllegalArgumentException for a format that is not 4-bit with scales along K, or a shape
     *                                  that is not whole quads and tiles
     */
    public static SplitDownWeights of(EncodedWeights down) {
        WeightFormat format = down.format();
        int hidden = down.rows();
        int intermediate = down.cols();
        if (!SplitDown.fits(format, hidden, intermediate)) {
            throw new IllegalArgumentException("split_down repacks 4-bit down weights with scales along K, of whole 64-row "
                    + "quads and 16-column tiles; got " + format.text() + " with " + hidden + " rows x " + intermediate + " columns");
        }
        if (down.projections() != Projections.ONE) {
            throw new IllegalArgumentException("down is one projection; these weights have " + down.projections());
        }
        int quads = hidden / SplitDown.QUAD_ROWS;
        int tiles = intermediate / SplitDown.TILE_COLUMNS;
        byte[] codes = new byte[down.codes().length];
        IntStream.range(0, down.experts()).parallel().forEach(e -> {
            for (int j = 0; j < tiles; j++) {
                for (int q = 0; q < quads; q++) {
                    int base = ((e * tiles + j) * quads + q) * QUAD_CODE_BYTES;
                    for (int lane = 0; lane < LANES; lane++) {
                        for (int m = 0; m < 4; m++) {
                            int word = fragmentWord(down, e, j, q, lane, m);
                            int at = base + lane * 16 + 4 * m;
                            for (int b = 0; b < 4; b++) {
                                codes[at + b] = (byte) (word >>> (8 * b));
                            }
                        }
                    }
                }
            }
        });
        return new SplitDownWeights(format, down.experts(), hidden, intermediate, codes, scales(down, quads), down.rowScales().clone());
    }

    /** Word m of lane (g, t) in quad q of tile j: the A fragment described above. */
    private static int fragmentWord(EncodedWeights down, int e, int j, int q, int lane, int m) {
        int g = lane / 4;
        int t = lane % 4;
        int lo = 64 * q + 8 * g + m;
        int hi = lo + 4;
        int c = 16 * j + 2 * t;
        int[] nibbles = {code(down, e, lo, c), code(down, e, hi, c), code(down, e, lo, c + 8), code(down, e, hi, c + 8),
                code(down, e, lo, c + 1), code(down, e, hi, c + 1), code(down, e, lo, c + 9), code(down, e, hi, c + 9)};
        int word = 0;
        for (int i = 0; i < 8; i++) {
            word |= nibbles[i] << (4 * i);
        }
        return word;
    }

    /** The 4-bit code of row r, column n of expert e in the source's natural layout. */
    private static int code(EncodedWeights w, int e, int r, int n) {
        int b = w.codes()[(int) (((long) e * w.rows() + r) * (w.cols() / 2) + n / 2)] & 0xff;
        return (n & 1) == 0 ? b & 0xf : b >>> 4;
    }

    private static byte[] scales(EncodedWeights down, int quads) {
        WeightFormat.BlockScale bs = down.format().blockScale();
        byte[] src = down.blockScales();
        byte[] out = new byte[src.length];
        if (bs == WeightFormat.BlockScale.NONE) {
            return out;
        }
        int blocks = down.cols() / bs.block();
        int bytes = bs.bytes();
        int perQuad = 64 * bytes;
        for (int e = 0; e < down.experts(); e++) {
            for (int k = 0; k < blocks; k++) {
                for (int q = 0; q < quads; q++) {
                    int base = ((e * blocks + k) * quads + q) * perQuad;
                    for (int g = 0; g < 8; g++) {
                        for (int i = 0; i < 8; i++) {
                            // E4M3 / E8M0: [g][m][lo, hi]; FP32: [g][rows 8g .. 8g+7]
                            int row = bytes == 1 ? 64 * q + 8 * g + i / 2 + 4 * (i % 2) : 64 * q + 8 * g + i;
                            int from = (int) (((long) e * down.rows() + row) * blocks + k) * bytes;
                            System.arraycopy(src, from, out, base + (g * 8 + i) * bytes, bytes);
                        }
                    }
                }
            }
        }
        return out;
    }

    /** The code of row r (a hidden output), column n (a neuron) of expert e, read back from the repacked bytes. */
    public int code(int e, int r, int n) {
        int quads = hidden / SplitDown.QUAD_ROWS;
        int tiles = intermediate / SplitDown.TILE_COLUMNS;
        int q = r / 64;
        int g = (r % 64) / 8;
        int hi = (r % 8) / 4;
        int m = r % 4;
        int j = n / 16;
        int c = n % 16;
        int t = (c % 8) / 2;
        int nibble = (c >= 8 ? 2 : 0) + hi + ((c & 1) == 1 ? 4 : 0);
        int at = ((e * tiles + j) * quads + q) * QUAD_CODE_BYTES + (g * 4 + t) * 16 + 4 * m + nibble / 2;
        int b = codes[at] & 0xff;
        return (nibble & 1) == 0 ? b & 0xf : b >>> 4;
    }
}
