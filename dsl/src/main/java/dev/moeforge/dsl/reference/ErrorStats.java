package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import java.util.function.IntToDoubleFunction;

/**
 * How far a kernel's bf16 (or FP32) output is from the reference: {@code ||out - ref|| / ||ref||} (L2),
 * the largest absolute difference, the reference's peak {@code max |ref|}, and how many outputs are
 * not finite (an unwritten output, poisoned with NaN before the launch, counts here).
 *
 * <p>{@link #within} bounds both the relative L2 error and every element's error. The relative L2
 * error alone lets a handful of wrong outputs among many pass; the element bound is
 * {@code |out_i - ref_i| <= elementTolerance * max |ref|}. It is scaled to the peak rather than to
 * each element (a sum that cancels to near zero has no meaningful relative error) or to the RMS:
 * rounding to bf16 moves an output by at most 2^-8 of itself, so by at most 2^-8 of the peak
 * wherever it sits and however heavy the outputs' tails are, while the peak-to-RMS ratio (and with it
 * an RMS-scaled bound's rounding) grows with the number of outputs and the tails of gated products.
 * A wrong output (stale, misplaced, a slot added twice or left out) is off by about a typical
 * output, a sizeable fraction of the peak.
 */
public record ErrorStats(double relativeL2, double maxAbs, double referencePeak, long nonFinite, long count) {

    public static ErrorStats of(double[] reference, short[] output) {
        return of(reference, output.length, i -> Bf16.toFloat(output[i]));
    }

    /** The same for an FP32 output. */
    public static ErrorStats of(double[] reference, float[] output) {
        return of(reference, output.length, i -> output[i]);
    }

    private static ErrorStats of(double[] reference, int length, IntToDoubleFunction output) {
        if (reference.length != length) {
            throw new IllegalArgumentException("reference has " + reference.length + " values, output " + length);
        }
        double diff = 0;
        double norm = 0;
        double maxAbs = 0;
        double peak = 0;
        long nonFinite = 0;
        for (int i = 0; i < length; i++) {
            peak = Math.max(peak, Math.abs(reference[i]));
            double got = output.applyAsDouble(i);
            if (!Double.isFinite(got)) {
                nonFinite++;
                continue;
            }
            double d = got - reference[i];
            diff += d * d;
            norm += reference[i] * reference[i];
            maxAbs = Math.max(maxAbs, Math.abs(d));
        }
        double rel = norm > 0 ? Math.sqrt(diff / norm) : Math.sqrt(diff);
        return new ErrorStats(rel, maxAbs, peak, nonFinite, length);
    }

    /**
     * True when every output is finite, the relative L2 error is at most {@code relativeTolerance}
     * and no element is off by more than {@code elementTolerance} times the reference's peak.
     */
    public boolean within(double relativeTolerance, double elementTolerance) {
        return nonFinite == 0 && relativeL2 <= relativeTolerance && maxAbs <= elementTolerance * referencePeak;
    }

    /** The largest element error as a fraction of the reference's peak (what {@code elementTolerance} bounds). */
    public double maxAbsOfPeak() {
        return referencePeak > 0 ? maxAbs / referencePeak : maxAbs > 0 ? Double.POSITIVE_INFINITY : 0;
    }

    @Override
    public String toString() {
        return String.format(java.util.Locale.ROOT, "rel %.3e, max abs %.3e (%.3e of peak %.3e), non-finite %d of %d",
                relativeL2, maxAbs, maxAbsOfPeak(), referencePeak, nonFinite, count);
    }
}
