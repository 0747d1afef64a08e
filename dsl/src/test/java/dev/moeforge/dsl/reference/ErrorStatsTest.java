package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.Bf16;
import org.junit.jupiter.api.Test;

/** The relative L2 error, max abs error, the reference's peak and non-finite count of an output against the reference. */
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
        assertTrue(s.within(0.0, 0.0));
    }

    /**
     * ref = [3, 4] (norm 5, peak 4), out = [3, 4.5]: ||out - ref|| = 0.5, so rel = 0.5 / 5 = 0.1,
     * max abs 0.5 = 0.125 of the peak.
     */
    @Test
    void relativeErrorOfAHandExample() {
        ErrorStats s = ErrorStats.of(new double[] {3, 4}, ExactBf16.of(3, 4.5));
        assertEquals(0.1, s.relativeL2(), 1e-15);
        assertEquals(0.5, s.maxAbs(), 0);
        assertEquals(4.0, s.referencePeak(), 0);
        assertEquals(0.125, s.maxAbsOfPeak(), 0);
        assertEquals(0, s.nonFinite());
        assertEquals(2, s.count());
        assertTrue(s.within(0.1, 0.125));
        assertTrue(s.within(0.2, 1));
        assertFalse(s.within(0.099, 1), "relative L2 over its bound");
        assertFalse(s.within(1, 0.124), "one element over its bound");
    }

    /** The peak is the reference's largest magnitude, negative values included. */
    @Test
    void peakIsTheLargestReferenceMagnitude() {
        ErrorStats s = ErrorStats.of(new double[] {1, -6, 2}, ExactBf16.of(1, -6, 2.25));
        assertEquals(6.0, s.referencePeak(), 0);
        assertEquals(0.25 / 6, s.maxAbsOfPeak(), 1e-15);
    }

    /** A reference of zeros leaves no room: any difference fails the element bound. */
    @Test
    void zeroReferenceAllowsNoElementError() {
        ErrorStats exact = ErrorStats.of(new double[] {0, 0}, ExactBf16.of(0, 0));
        assertTrue(exact.within(0, 0.5));
        ErrorStats off = ErrorStats.of(new double[] {0, 0}, ExactBf16.of(0, 0.5));
        assertEquals(Double.POSITIVE_INFINITY, off.maxAbsOfPeak());
        assertFalse(off.within(1, 0.5));
    }

    /**
     * A million outputs rounded to bf16, one of them wrong by half the peak: the relative L2 error
     * stays far under 1e-2 (the wrong element adds about 1e-3 to it), the element bound catches it.
     */
    @Test
    void oneWrongElementInAMillionFailsTheElementBound() {
        int n = 1_000_000;
        double[] ref = normal(7L, n);
        short[] out = roundedToBf16(ref);
        assertTrue(ErrorStats.of(ref, out).within(1e-2, 1e-2), "bf16 rounding alone passes");
        int wrong = 123_457;
        double peak = java.util.Arrays.stream(ref).map(Math::abs).max().orElseThrow();
        out[wrong] = Bf16.fromFloat((float) (ref[wrong] + 0.5 * peak));
        ErrorStats s = ErrorStats.of(ref, out);
        assertTrue(s.relativeL2() < 5e-3, "relative L2 alone would pass it: " + s);
        assertFalse(s.within(1e-2, 1e-2), s.toString());
        assertTrue(s.maxAbsOfPeak() > 0.4, s.toString());
    }

    /**
     * Rounding to bf16 moves each output by at most 2^-8 of itself, so by at most 2^-8 of the peak,
     * whatever the outputs' spread: normal values, the heavy-tailed products of a gated activation,
     * and values spread over twenty binades.
     */
    @Test
    void bf16RoundingStaysWithinTwoToTheMinusEightOfThePeak() {
        int n = 1_000_000;
        java.util.SplittableRandom r = new java.util.SplittableRandom(11L);
        double[] normal = normal(3L, n);
        double[] gated = new double[n];
        double[] spread = new double[n];
        for (int i = 0; i < n; i++) {
            double g = 3 * r.nextGaussian();
            gated[i] = g / (1 + Math.exp(-g)) * 3 * r.nextGaussian();
            spread[i] = (r.nextBoolean() ? 1 : -1) * Math.pow(2, r.nextDouble(-10, 10));
        }
        for (double[] ref : new double[][] {normal, gated, spread}) {
            ErrorStats s = ErrorStats.of(ref, roundedToBf16(ref));
            assertTrue(s.maxAbsOfPeak() <= 0x1p-8, s.toString());
            assertTrue(s.within(1e-2, 1e-2), s.toString());
            assertEquals(0, s.nonFinite());
        }
    }

    private static double[] normal(long seed, int n) {
        java.util.SplittableRandom r = new java.util.SplittableRandom(seed);
        double[] v = new double[n];
        for (int i = 0; i < n; i++) {
            v[i] = r.nextGaussian();
        }
        return v;
    }

    private static short[] roundedToBf16(double[] v) {
        short[] out = new short[v.length];
        for (int i = 0; i < v.length; i++) {
            out[i] = Bf16.fromFloat((float) v[i]);
        }
        return out;
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
        assertFalse(s.within(1.0, 1.0));
        assertFalse(s.within(Double.POSITIVE_INFINITY, Double.POSITIVE_INFINITY));
        assertTrue(s.toString().contains("non-finite 1 of 2"), s.toString());
    }

    @Test
    void infiniteOutputCountsAsNonFinite() {
        short[] out = {(short) 0x7F80, (short) 0xFF80, Bf16.fromFloat(1f)};
        ErrorStats s = ErrorStats.of(new double[] {1, 1, 1}, out);
        assertEquals(2, s.nonFinite());
        assertFalse(s.within(1.0, 1.0));
    }

    @Test
    void allOutputsPoisonedIsNeverWithin() {
        short[] out = {Bf16.NAN, Bf16.NAN, Bf16.NAN};
        ErrorStats s = ErrorStats.of(new double[] {1, 2, 3}, out);
        assertEquals(3, s.nonFinite());
        assertFalse(s.within(1e9, 1e9));
    }

    @Test
    void lengthMismatchIsRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ErrorStats.of(new double[3], new short[2]));
        assertEquals("reference has 3 values, output 2", e.getMessage());
    }

    @Test
    void toStringIsLocaleIndependent() {
        ErrorStats s = new ErrorStats(0.1, 0.5, 4.0, 0, 2);
        assertEquals("rel 1.000e-01, max abs 5.000e-01 (1.250e-01 of peak 4.000e+00), non-finite 0 of 2", s.toString());
    }

}
