package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.WeightFormat;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The split_down repack keeps every code and scale, at the place the device header reads it. */
class SplitDownWeightsTest {
    private static final int EXPERTS = 3;
    private static final int HIDDEN = 192;        // three quads
    private static final int INTERMEDIATE = 256;  // sixteen tiles, two FP32 groups

    static List<WeightFormat> formats() {
        return List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL, WeightFormat.INT4_GROUP128);
    }

    private static EncodedWeights down(WeightFormat f) {
        return EncodedWeights.encode(f, RowSource.normal(17, HIDDEN, 1.0 / 16), EXPERTS, HIDDEN, INTERMEDIATE, Projections.ONE, "down");
    }

    @ParameterizedTest
    @MethodSource("formats")
    void everyCodeReadsBackAtItsRowAndColumn(WeightFormat f) {
        EncodedWeights w = down(f);
        SplitDownWeights s = SplitDownWeights.of(w);
        assertEquals(w.codes().length, s.codes().length);
        for (int e = 0; e < EXPERTS; e++) {
            for (int r = 0; r < HIDDEN; r++) {
                for (int n = 0; n < INTERMEDIATE; n++) {
                    int b = w.codes()[(e * HIDDEN + r) * (INTERMEDIATE / 2) + n / 2] & 0xff;
                    assertEquals((n & 1) == 0 ? b & 0xf : b >>> 4, s.code(e, r, n), f.text() + " e " + e + " row " + r + " col " + n);
                }
            }
        }
        // a permutation of the source's bytes' nibbles: the same multiset of codes
        assertArrayEquals(nibbleCounts(w.codes()), nibbleCounts(s.codes()));
        assertArrayEquals(w.rowScales(), s.rowScales());
    }

    /** The device's word m of lane (g, t): nibble 0 is row 8g + m, column 2t of the tile (quad 0, tile 0, expert 0). */
    @ParameterizedTest
    @MethodSource("formats")
    void lanesHoldTheirMmaFragments(WeightFormat f) {
        EncodedWeights w = down(f);
        SplitDownWeights s = SplitDownWeights.of(w);
        ByteBuffer codes = ByteBuffer.wrap(s.codes()).order(ByteOrder.LITTLE_ENDIAN);
        for (int lane = 0; lane < 32; lane++) {
            int g = lane / 4;
            int t = lane % 4;
            for (int m = 0; m < 4; m++) {
                int word = codes.getInt(lane * 16 + 4 * m);
                int[][] at = {{8 * g + m, 2 * t}, {8 * g + 4 + m, 2 * t}, {8 * g + m, 2 * t + 8}, {8 * g + 4 + m, 2 * t + 8},
                        {8 * g + m, 2 * t + 1}, {8 * g + 4 + m, 2 * t + 1}, {8 * g + m, 2 * t + 9}, {8 * g + 4 + m, 2 * t + 9}};
                for (int i = 0; i < 8; i++) {
                    int b = w.codes()[at[i][0] * (INTERMEDIATE / 2) + at[i][1] / 2] & 0xff;
                    assertEquals((at[i][1] & 1) == 0 ? b & 0xf : b >>> 4, (word >>> (4 * i)) & 0xf, "lane " + lane + " word " + m + " nibble " + i);
                }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("formats")
    void everyScaleSitsWhereItsQuadReadsIt(WeightFormat f) {
        EncodedWeights w = down(f);
        SplitDownWeights s = SplitDownWeights.of(w);
        WeightFormat.BlockScale bs = f.blockScale();
        assertEquals(w.blockScales().length, s.blockScales().length);
        if (bs == WeightFormat.BlockScale.NONE) {
            return;
        }
        int blocks = INTERMEDIATE / bs.block();
        int quads = HIDDEN / 64;
        int bytes = bs.bytes();
        for (int e = 0; e < EXPERTS; e++) {
            for (int k = 0; k < blocks; k++) {
                for (int r = 0; r < HIDDEN; r++) {
                    int q = r / 64;
                    int g = (r % 64) / 8;
                    // E4M3 / E8M0: [g][m][row 8g+m, row 8g+4+m]; FP32: [g][rows 8g .. 8g+7]
                    int slot = bytes == 1 ? 2 * (r % 4) + (r % 8) / 4 : r % 8;
                    int at = ((e * blocks + k) * quads + q) * 64 * bytes + (g * 8 + slot) * bytes;
                    int from = ((e * HIDDEN + r) * blocks + k) * bytes;
                    assertArrayEquals(Arrays.copyOfRange(w.blockScales(), from, from + bytes), Arrays.copyOfRange(s.blockScales(), at, at + bytes),
                            f.text() + " e " + e + " block " + k + " row " + r);
                }
            }
        }
    }

    @Test
    void refusesWhatSplitDownCannotRead() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SplitDownWeights.of(down(WeightFormat.FP8_CHANNEL)))
                .getMessage().contains("4-bit"));
        EncodedWeights ragged = EncodedWeights.encode(WeightFormat.INT4_CHANNEL, RowSource.normal(1, 96, 0.1), 1, 96, 64,
                Projections.ONE, "down");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SplitDownWeights.of(ragged)).getMessage().contains("96 rows"));
    }

    private static int[] nibbleCounts(byte[] bytes) {
        int[] counts = new int[16];
        for (byte b : bytes) {
            counts[b & 0xf]++;
            counts[(b >>> 4) & 0xf]++;
        }
        return counts;
    }
}
