package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.InputNorm;
import org.junit.jupiter.api.Test;

class InputNormReferenceTest {

    /** Worked by hand: row 0 sums to (3, 0, -4, 0), mean square 25/4, so it is divided by 2.5 (eps 0). */
    @Test
    void addsThenNormsEachRow() {
        InputNorm norm = new InputNorm(DType.FP32, 1e-300);
        float[] residual = {1, 0, -1, 0, 2, 2, 2, 2};
        float[] addend = {2, 0, -3, 0, 0, 0, 0, 0};
        float[] weight = {1, 2, 0.5f, 1};
        InputNormReference.Rows rows = InputNormReference.apply(norm, residual, addend, weight);
        assertArrayEquals(new float[] {3, 0, -4, 0, 2, 2, 2, 2}, rows.residualOut());
        float[] normed = new float[8];
        for (int i = 0; i < 8; i++) {
            normed[i] = Bf16.toFloat(rows.normed()[i]);
        }
        // row 0: (3, 0, -4, 0) / 2.5 times the weight; row 1: all 2 over an rms of 2
        assertArrayEquals(new float[] {Bf16.toFloat(Bf16.fromDouble(1.2)), 0, Bf16.toFloat(Bf16.fromDouble(-0.8)), 0, 1, 2, 0.5f, 1}, normed);
    }

    @Test
    void epsEntersTheMeanSquare() {
        InputNorm norm = new InputNorm(DType.BF16, 0.75);
        InputNormReference.Rows rows = InputNormReference.apply(norm, new float[] {0.5f, 0.5f}, new float[] {0, 0}, new float[] {1, 1});
        // mean square 0.25, plus 0.75: divided by 1
        assertEquals(0.5f, Bf16.toFloat(rows.normed()[0]));
    }

    @Test
    void refusesRowsThatAreNotTheWeightsLength() {
        InputNorm norm = new InputNorm(DType.FP32, 1e-6);
        assertThrows(IllegalArgumentException.class,
                () -> InputNormReference.apply(norm, new float[5], new float[5], new float[2]));
    }
}
