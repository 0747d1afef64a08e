package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.WeightFormat;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.stream.Stream;

/** The reference quantiser and decoder: layouts, error bounds, the checkpoints' conventions, bad input. */
class EncodedWeightsTest {

    static Stream<WeightFormat> formats() {
        return WeightFormat.ALL.stream();
    }

    /** Largest quantisation error of one element relative to its scale span's amax. */
    static double relativeBound(WeightFormat f) {
        return switch (f.element()) {
            case BF16 -> 1.0 / 256;
            case E4M3 -> 1.0 / 16;       // 3 mantissa bits: half a step is 1/16 of the binade
            case INT8 -> 0.5 / 127 + 1e-6;
            case E2M1 -> 0.25;           // steps of 1 between 2 and 4 (of max 6 in the block): 0.5 / 2
            case INT4 -> 0.5 / 7 + 1e-6;
        };
    }

    @ParameterizedTest
    @MethodSource("formats")
    void decodedWeightsAreWithinHalfAStep(WeightFormat f) {
        int experts = 3, rows = 130, cols = 256;
        RowSource src = RowSource.normal(7, rows, 0.05);
        EncodedWeights w = EncodedWeights.encode(f, src, experts, rows, cols, Projections.STACKED_GATE_UP, "w");
        float[] row = new float[cols];
        double[] dq = new double[cols];
        for (int e = 0; e < experts; e++) {
            for (int n = 0; n < rows; n++) {
                src.row(e, n, row);
                w.decodeRow(e, n, dq);
                double amax = 0;
                for (float v : row) {
                    amax = Math.max(amax, Math.abs(v));
                }
                for (int k = 0; k < cols; k++) {
                    double err = Math.abs(dq[k] - row[k]);
                    // per row amax bounds every block's amax from above; E2M1/E4M3 near zero are finer
                    assertTrue(err <= relativeBound(f) * amax * 2 + 1e-30,
                            f.text() + " [" + e + "," + n + "," + k + "]: " + row[k] + " -> " + dq[k]);
                }
            }
        }
    }

    @Test
    void nvfp4KeepsGateAndUpTensorScalesApart() {
        int rows = 4, cols = 16;
        // gate rows (0, 1) have amax 6 * 448 * 2, up rows (2, 3) amax 6 * 448 * 0.5
        float[] w = new float[rows * cols];
        for (int k = 0; k < cols; k++) {
            w[k] = (k - 8) * 2 * 448 * 6 / 8f;
            w[cols + k] = 1f;
            w[2 * cols + k] = (k - 8) * 0.5f * 448 * 6 / 8f;
            w[3 * cols + k] = -0.5f;
        }
        EncodedWeights q = EncodedWeights.encode(WeightFormat.NVFP4, RowSource.of(w, rows, cols), 1, rows, cols,
                Projections.STACKED_GATE_UP, "gate_up");
        assertArrayEquals(new float[] {2f, 0.5f}, q.rowScales());
        // row 0's block amax is 6 * 448 * 2 = 6 * 448 * s2: block scale 448 (0x7E); element -8 * ... = -6 * 2 * 448 -> code 0xF
        assertEquals(0x7E, q.blockScales()[0] & 0xFF);
        assertEquals(0xF, q.codes()[0] & 0xF);
        double[] out = new double[cols];
        q.decodeRow(0, 0, out);
        assertEquals(w[0], out[0]);
        // row 3 (up, s2 = 0.5): block scale 0.5 / 6 / 0.5 rounds to E4M3 11/64; -0.5 / (11/128) rounds to E2M1 -6
        q.decodeRow(0, 3, out);
        assertEquals(-6 * (11 / 64.0) * 0.5, out[5]);
        // interleaved rows take their projection from the row's parity
        EncodedWeights inter = EncodedWeights.encode(WeightFormat.NVFP4, RowSource.of(w, rows, cols), 1, rows, cols,
                Projections.INTERLEAVED_GATE_UP, "gate_up");
        assertEquals(2f, inter.rowScales()[0]);  // rows 0 and 2
        assertEquals(1f / 448 / 6 * 1 , inter.rowScales()[1], 1e-9);  // rows 1 and 3: amax 1
    }

    @Test
    void mxfp4PacksElement2jInTheLowNibbleWithOneE8M0Per32() {
        float[] w = new float[32];
        w[0] = 1f;    // code 2
        w[1] = -6f;   // code 15
        w[31] = 0.5f; // code 1
        EncodedWeights q = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(w, 1, 32), 1, 1, 32, Projections.ONE, "blocks");
        assertEquals(127, q.blockScales()[0] & 0xFF);  // amax 6: floor(log2 6) - 2 = 0
        assertEquals((byte) 0xF2, q.codes()[0]);
        assertEquals((byte) 0x10, q.codes()[15]);
    }

    @Test
    void fp8Block128ScalesSpan128RowsWithCeilAtRaggedEdges() {
        int rows = 130, cols = 200;
        EncodedWeights q = EncodedWeights.encode(WeightFormat.FP8_BLOCK128, RowSource.normal(3, rows, 1), 2, rows, cols,
                Projections.ONE, "w");
        assertEquals(2 * 2 * 2 * 4, q.blockScales().length);  // [2][ceil(130/128)][ceil(200/128)] fp32
        // amax of the 2 x 72 corner block of expert 1, over 448
        float[] row = new float[cols];
        float amax = 0;
        for (int n = 128; n < 130; n++) {
            RowSource.normal(3, rows, 1).row(1, n, row);
            for (int k = 128; k < 200; k++) {
                amax = Math.max(amax, Math.abs(row[k]));
            }
        }
        assertEquals(amax / 448f, EncodedWeights.f32(q.blockScales(), (1 * 2 + 1) * 2 + 1));
    }

    @Test
    void int4IsTwosComplementNibbles() {
        float[] w = new float[128];
        w[0] = -7f;
        w[1] = 7f;
        w[2] = -3f;
        EncodedWeights q = EncodedWeights.encode(WeightFormat.INT4_CHANNEL, RowSource.of(w, 1, 128), 1, 1, 128, Projections.ONE, "w");
        assertEquals(1f, q.rowScales()[0]);
        assertEquals((byte) 0x79, q.codes()[0]);  // -7 = 0x9 low, 7 high
        assertEquals((byte) 0x0D, q.codes()[1]);  // -3 = 0xD
    }

    // ---------------------------------------------------------------- the reference decoder on every code

    /** Little-endian FP32 bytes, as the F32 scale tensors hold them (written here without EncodedWeights' helpers). */
    static byte[] f32Bytes(float... v) {
        ByteBuffer b = ByteBuffer.allocate(4 * v.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) {
            b.putFloat(x);
        }
        return b.array();
    }

    /**
     * INT8: row 0 holds the bytes 0..255 in order, row 1 the same bytes reversed; decodeRow gives the
     * two's complement value (-128..127) times the row's (channel) or the 128-group's scale, exactly.
     */
    @ParameterizedTest
    @MethodSource("int8Formats")
    void int8DecodesEveryByteAsTwosComplementTimesItsScale(WeightFormat f) {
        int rows = 2, cols = 256;
        byte[] codes = new byte[rows * cols];
        for (int k = 0; k < cols; k++) {
            codes[k] = (byte) k;
            codes[cols + k] = (byte) (255 - k);
        }
        float[][] scale = {{0.0123f, 3.5f}, {1.7e-5f, 250.25f}};  // [row][group]; channel: group 0 for the whole row
        boolean channel = f.equals(WeightFormat.INT8_CHANNEL);
        EncodedWeights w = integerRows(f, cols, codes, scale, channel);
        double[] out = new double[cols];
        for (int n = 0; n < rows; n++) {
            w.decodeRow(0, n, out);
            for (int k = 0; k < cols; k++) {
                int b = n == 0 ? k : 255 - k;
                int value = b < 128 ? b : b - 256;
                double s = scale[n][channel ? 0 : k / 128];
                assertEquals(value * s, out[k], f.text() + " row " + n + " byte 0x" + Integer.toHexString(b));
            }
        }
        w.decodeRow(0, 0, out);
        double upper = channel ? scale[0][0] : scale[0][1];  // the scale of elements 128..255 of row 0
        assertEquals(-128 * upper, out[0x80], "0x80 is -128");
        assertEquals(-1 * upper, out[0xFF], "0xFF is -1");
        assertEquals(127 * (double) 0.0123f, out[0x7F], "0x7F is 127");
    }

    /**
     * One expert of two integer rows of {@code cols} codes with {@code scale[row][group]}: per channel
     * group 0 is the row's scale (FP32 row scales), per group of 128 the two groups' FP32 block scales.
     */
    private static EncodedWeights integerRows(WeightFormat f, int cols, byte[] codes, float[][] scale, boolean channel) {
        return new EncodedWeights(f, 1, 2, cols, Projections.ONE, codes,
                channel ? new byte[0] : f32Bytes(scale[0][0], scale[0][1], scale[1][0], scale[1][1]),
                channel ? new float[] {scale[0][0], scale[1][0]} : new float[0]);
    }

    static Stream<WeightFormat> int8Formats() {
        return Stream.of(WeightFormat.INT8_CHANNEL, WeightFormat.INT8_GROUP128);
    }

    static Stream<WeightFormat> int4Formats() {
        return Stream.of(WeightFormat.INT4_CHANNEL, WeightFormat.INT4_GROUP128);
    }

    /**
     * INT4: element k of row 0 holds nibble k % 16 (element 2j in the low nibble of byte j), row 1
     * nibble 15 - k % 16; decodeRow gives the two's complement value (-8..7) times its scale, exactly.
     */
    @ParameterizedTest
    @MethodSource("int4Formats")
    void int4DecodesEveryNibbleAsTwosComplementLowNibbleFirst(WeightFormat f) {
        int rows = 2, cols = 256;
        byte[] codes = new byte[rows * cols / 2];
        for (int j = 0; j < cols / 2; j++) {
            int lo = (2 * j) % 16, hi = (2 * j + 1) % 16;
            codes[j] = (byte) (lo | hi << 4);
            codes[cols / 2 + j] = (byte) ((15 - lo) | (15 - hi) << 4);
        }
        assertEquals((byte) 0x10, codes[0]);  // elements 0 and 1: 0 low, 1 high
        float[][] scale = {{0.375f, 1.1f}, {3e-3f, 77.5f}};
        boolean channel = f.equals(WeightFormat.INT4_CHANNEL);
        EncodedWeights w = integerRows(f, cols, codes, scale, channel);
        double[] out = new double[cols];
        for (int n = 0; n < rows; n++) {
            w.decodeRow(0, n, out);
            for (int k = 0; k < cols; k++) {
                int nibble = n == 0 ? k % 16 : 15 - k % 16;
                int value = nibble < 8 ? nibble : nibble - 16;
                double s = scale[n][channel ? 0 : k / 128];
                assertEquals(value * s, out[k], f.text() + " row " + n + " element " + k + " nibble " + nibble);
            }
        }
        w.decodeRow(0, 0, out);
        assertEquals(-8 * (double) 0.375f, out[8], "nibble 8 is -8");
        assertEquals(-1 * (double) 0.375f, out[15], "nibble 15 is -1");
        assertEquals(7 * (double) 0.375f, out[7], "nibble 7 is 7");
        assertEquals(1 * (double) 0.375f, out[1], "element 1 is the high nibble of byte 0");
    }

    /** Codes 0..15 in every block (element 2j in the low nibble of byte j), for FP4 rows of {@code blocks * block} elements. */
    static byte[] everyFp4Code(int cols) {
        byte[] codes = new byte[cols / 2];
        for (int j = 0; j < cols / 2; j++) {
            codes[j] = (byte) ((2 * j) % 16 | ((2 * j + 1) % 16) << 4);
        }
        return codes;
    }

    /**
     * NVFP4: every E2M1 code under E4M3 block scales that include the smallest and largest
     * subnormal, the smallest normal, 1 and the largest (448), times the FP32 per-tensor scale.
     */
    @Test
    void nvfp4DecodesEveryCodeUnderSubnormalAndMaxBlockScales() {
        int[] scaleBytes = {0x01, 0x07, 0x08, 0x38, 0x7E};
        double[] scaleValues = {0x1p-9, 7 * 0x1p-9, 0x1p-6, 1, 448};
        float tensorScale = 1.3e-3f;
        int cols = 16 * scaleBytes.length;
        byte[] blockScales = new byte[scaleBytes.length];
        for (int b = 0; b < scaleBytes.length; b++) {
            blockScales[b] = (byte) scaleBytes[b];
        }
        EncodedWeights w = new EncodedWeights(WeightFormat.NVFP4, 1, 1, cols, Projections.ONE, everyFp4Code(cols),
                blockScales, new float[] {tensorScale});
        double[] out = new double[cols];
        w.decodeRow(0, 0, out);
        for (int k = 0; k < cols; k++) {
            double expected = MinifloatTest.E2M1_TABLE[k % 16] * scaleValues[k / 16] * (double) tensorScale;
            assertEquals(expected, out[k], "nvfp4 code " + k % 16 + " scale 0x" + Integer.toHexString(scaleBytes[k / 16]));
        }
        assertEquals(-6 * 448 * (double) tensorScale, out[4 * 16 + 15], "largest magnitude");
        assertEquals(0.5 * 0x1p-9 * tensorScale, out[1], "smallest nonzero");
    }

    /** MXFP4: every E2M1 code under E8M0 scales 2^-127 (a float subnormal), 2^-126, 1 and 2^127 (the largest). */
    @Test
    void mxfp4DecodesEveryCodeUnderTheExtremeE8M0Scales() {
        int[] scaleBytes = {0, 1, 127, 254};
        int cols = 32 * scaleBytes.length;
        byte[] blockScales = new byte[scaleBytes.length];
        for (int b = 0; b < scaleBytes.length; b++) {
            blockScales[b] = (byte) scaleBytes[b];
        }
        EncodedWeights w = new EncodedWeights(WeightFormat.MXFP4, 1, 1, cols, Projections.ONE, everyFp4Code(cols),
                blockScales, new float[0]);
        double[] out = new double[cols];
        w.decodeRow(0, 0, out);
        for (int k = 0; k < cols; k++) {
            double expected = MinifloatTest.E2M1_TABLE[k % 16] * Math.pow(2, scaleBytes[k / 32] - 127);
            assertEquals(expected, out[k], "mxfp4 code " + k % 16 + " scale byte " + scaleBytes[k / 32]);
        }
        assertEquals(0.5 * 0x1p-127, out[1], "2^-128");
        assertEquals(-6 * 0x1p127, out[3 * 32 + 15], "-1.5 * 2^129, beyond FP32");
    }

    @Test
    void nonFiniteWeightsAreRefusedWithTheTensorAndFirstIndex() {
        float[] w = new float[2 * 2 * 32];
        w[2 * 32 + 32 + 5] = Float.NaN;
        w[2 * 32 + 32 + 9] = Float.POSITIVE_INFINITY;
        var e = assertThrows(EncodedWeights.NonFiniteWeightException.class, () -> EncodedWeights.encode(WeightFormat.MXFP8,
                RowSource.of(w, 2, 32), 2, 2, 32, Projections.ONE, "model.layers.0.mlp.experts.down_proj"));
        assertEquals("tensor model.layers.0.mlp.experts.down_proj: NaN at [1, 1, 5]; weights to quantise must be finite",
                e.getMessage());
        // the index in the source's [E][N][K], for a caller that maps it to the tensor it read the rows from
        assertEquals(List.of(1, 1, 5), List.of(e.expert(), e.row(), e.col()));
        assertTrue(Float.isNaN(e.value()));
        assertEquals("tensor gate_up: NaN at [1, 7, 33]; weights to quantise must be finite", e.messageAt("gate_up", 1, 7, 33));
    }

    @ParameterizedTest
    @MethodSource("formats")
    void infinitiesAreRefusedWithTheirSign(WeightFormat f) {
        int cols = 256;
        float[] w = new float[3 * 2 * cols];
        w[(2 * 2 + 1) * cols + 200] = Float.NaN;                // expert 2: after the infinities
        w[(1 * 2 + 1) * cols + 130] = Float.POSITIVE_INFINITY;  // expert 1, row 1
        w[(1 * 2 + 1) * cols + 140] = Float.NEGATIVE_INFINITY;
        var pos = assertThrows(EncodedWeights.NonFiniteWeightException.class,
                () -> EncodedWeights.encode(f, RowSource.of(w, 2, cols), 3, 2, cols, Projections.ONE, "w"));
        assertEquals("tensor w: +Inf at [1, 1, 130]; weights to quantise must be finite", pos.getMessage(), f.text());
        assertEquals(Float.POSITIVE_INFINITY, pos.value());
        w[(1 * 2 + 1) * cols + 130] = 0f;
        var neg = assertThrows(EncodedWeights.NonFiniteWeightException.class,
                () -> EncodedWeights.encode(f, RowSource.of(w, 2, cols), 3, 2, cols, Projections.ONE, "w"));
        assertEquals("tensor w: -Inf at [1, 1, 140]; weights to quantise must be finite", neg.getMessage(), f.text());
        assertEquals(List.of(1, 1, 140), List.of(neg.expert(), neg.row(), neg.col()));
    }

    @Test
    void rowsOfPartialBlocksAreRefused() {
        var e = assertThrows(IllegalArgumentException.class, () -> EncodedWeights.encode(WeightFormat.NVFP4,
                RowSource.normal(1, 1, 1), 1, 1, 40, Projections.ONE, "w"));
        assertTrue(e.getMessage().contains("tensor w: rows of 40 elements are not whole blocks of 16 (nvfp4)"), e.getMessage());
    }

    @Test
    void bf16IsLittleEndianBits() {
        EncodedWeights q = EncodedWeights.bf16(new short[] {(short) 0x3F80, (short) 0xC000}, 1, 1, 2);
        assertArrayEquals(new byte[] {(byte) 0x80, 0x3F, 0x00, (byte) 0xC0}, q.codes());
        double[] out = new double[2];
        q.decodeRow(0, 0, out);
        assertArrayEquals(new double[] {1, -2}, out);
    }
}
