package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** Activations quantised for W8A8 kernels: the row layout, the groups' scales and the rounding. */
class Fp8ActivationRowsTest {
    @Test
    void aRowIsItsCodesThenItsScalesPaddedTo16Bytes() {
        assertEquals(128 + 16, Fp8ActivationRows.rowBytes(128));
        assertEquals(768 + 32, Fp8ActivationRows.rowBytes(768));
        assertEquals(2048 + 64, Fp8ActivationRows.rowBytes(2048));
        assertThrows(IllegalArgumentException.class, () -> Fp8ActivationRows.rowBytes(200));
    }

    @Test
    void eachGroupsLargestLandsOnE4m3sLargestAndTheRestWithinAStep() {
        SplittableRandom r = new SplittableRandom(7);
        int rows = 3;
        int cols = 256;
        double[] v = new double[rows * cols];
        for (int i = 0; i < v.length; i++) {
            v[i] = r.nextGaussian() * (i < cols ? 1e-3 : 5.0);
        }
        v[cols + 200] = 0;
        double[] q = Fp8ActivationRows.quantise(v, rows, cols);
        for (int g = 0; g < v.length; g += Fp8ActivationRows.GROUP) {
            double amax = 0;
            for (int i = g; i < g + Fp8ActivationRows.GROUP; i++) {
                amax = Math.max(amax, Math.abs(Bf16.toFloat(Bf16.fromDouble(v[i]))));
            }
            for (int i = g; i < g + Fp8ActivationRows.GROUP; i++) {
                double bf16 = Bf16.toFloat(Bf16.fromDouble(v[i]));
                // E4M3 keeps 3 mantissa bits: half a step is 2^-4 of the value, and amax / 2^9 covers the subnormals
                assertTrue(Math.abs(q[i] - bf16) <= Math.abs(bf16) / 16 + amax / 512, "element " + i + ": " + q[i] + " for " + bf16);
                if (Math.abs(bf16) == amax) {
                    assertEquals(bf16, q[i], Math.ulp((float) amax) * 2, "the group's largest stays itself");
                }
            }
        }
        assertEquals(0.0, q[cols + 200]);
        double[] zeros = Fp8ActivationRows.quantise(new double[128], 1, 128);
        assertArrayEquals(new double[128], zeros, "an all-zero group (scale 1)");
    }

    @Test
    void decodeReadsCodesTimesTheirGroupsScale() {
        int cols = 256;
        ByteBuffer row = ByteBuffer.allocate(Fp8ActivationRows.rowBytes(cols)).order(ByteOrder.LITTLE_ENDIAN);
        row.put(0, (byte) Minifloat.E4M3.encode(1.5f));
        row.put(130, (byte) Minifloat.E4M3.encode(-448f));
        row.putFloat(cols, 0.25f);
        row.putFloat(cols + 4, 2f);
        double[] d = Fp8ActivationRows.decode(row.array(), 1, cols);
        assertEquals(0.375, d[0]);
        assertEquals(-896.0, d[130]);
        assertEquals(0.0, d[1]);
    }
}
