package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.WeightFormat;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;
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

    @Test
    void nonFiniteWeightsAreRefusedWithTheTensorAndFirstIndex() {
        float[] w = new float[2 * 2 * 32];
        w[2 * 32 + 32 + 5] = Float.NaN;
        w[2 * 32 + 32 + 9] = Float.POSITIVE_INFINITY;
        var e = assertThrows(IllegalArgumentException.class, () -> EncodedWeights.encode(WeightFormat.MXFP8,
                RowSource.of(w, 2, 32), 2, 2, 32, Projections.ONE, "model.layers.0.mlp.experts.down_proj"));
        assertEquals("tensor model.layers.0.mlp.experts.down_proj: NaN at [1, 1, 5]; weights to quantise must be finite",
                e.getMessage());
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
