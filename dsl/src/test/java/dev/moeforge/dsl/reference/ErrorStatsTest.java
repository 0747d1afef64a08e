package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.Bf16;
import org.junit.jupiter.api.Test;

/** The relative L2 error, max abs error and non-finite count of a bf16 output against the reference. */
class ErrorStatsTest {

    @Test
    void identicalOutputHasNoError() {
        short[] out = RandomInputs.bf16Normal(1L, 500, 1.0);
        double[] ref = new double[out.length];
        for (int i = 0; i < out.length; i++) {
            ref[i] = Bf16.toFloat(out[i]);
        }
        ErrorStats s = ErrorStats.of(ref, out);
        assertEquals(0.0, s.relativeL2());
        assertEquals(0.0, s.maxAbs());
        assertEquals(0, s.nonFinite());
        assertEquals(500, s.count());
        assertTrue(s.within(0.0));
    }

    /** ref = [3, 4] (norm 5), out = [3, 4.5]: ||out - ref|| = 0.5, so rel = 0.5 / 5 = 0.1, max abs 0.5. */
    @Test
    void relativeErrorOfAHandExample() {
        ErrorStats s = ErrorStats.of(new double[] {3, 4}, ExactBf16.of(3, 4.5));
        assertEquals(0.1, s.relativeL2(), 1e-15);
        assertEquals(0.5, s.maxAbs(), 0);
        assertEquals(0, s.nonFinite());
        assertEquals(2, s.count());
        assertTrue(s.within(0.1));
        assertTrue(s.within(0.2));
        assertFalse(s.within(0.099));
    }

    /** ref = [1, -2, 2] (norm 3), out = [1.5, -2, 1]: diffs 0.5, 0, -1: ||d|| = sqrt(1.25), rel = sqrt(1.25) / 3. */
    @Test
    void relativeErrorSumsSquaresOverAllOutputs() {
        ErrorStats s = ErrorStats.of(new double[] {1, -2, 2}, ExactBf16.of(1.5, -2, 1));
        assertEquals(Math.sqrt(1.25) / 3, s.relativeL2(), 1e-15);
        assertEquals(1.0, s.maxAbs(), 0);
    }

    @Test
    void nanOutputCountsAsNonFiniteAndFailsWithin() {
        short[] out = ExactBf16.of(3, 4);
        out[1] = Bf16.NAN;
        ErrorStats s = ErrorStats.of(new double[] {3, 4}, out);
        assertEquals(1, s.nonFinite());
        assertEquals(2, s.count());
        assertFalse(s.within(1.0));
        assertFalse(s.within(Double.POSITIVE_INFINITY));
        assertTrue(s.toString().contains("non-finite 1 of 2"), s.toString());
    }

    @Test
    void infiniteOutputCountsAsNonFinite() {
        short[] out = {(short) 0x7F80, (short) 0xFF80, Bf16.fromFloat(1f)};
        ErrorStats s = ErrorStats.of(new double[] {1, 1, 1}, out);
        assertEquals(2, s.nonFinite());
        assertFalse(s.within(1.0));
    }

    @Test
    void allOutputsPoisonedIsNeverWithin() {
        short[] out = {Bf16.NAN, Bf16.NAN, Bf16.NAN};
        ErrorStats s = ErrorStats.of(new double[] {1, 2, 3}, out);
        assertEquals(3, s.nonFinite());
        assertFalse(s.within(1e9));
    }

    @Test
    void lengthMismatchIsRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ErrorStats.of(new double[3], new short[2]));
        assertEquals("reference has 3 values, output 2", e.getMessage());
    }

    @Test
    void toStringIsLocaleIndependent() {
        ErrorStats s = new ErrorStats(0.1, 0.5, 0, 2);
        assertEquals("rel 1.000e-01, max abs 5.000e-01, non-finite 0 of 2", s.toString());
    }

}
