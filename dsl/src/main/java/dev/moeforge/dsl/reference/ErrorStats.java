package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import java.util.function.IntToDoubleFunction;

/**
 * How far a kernel's bf16 (or FP32) output is from the reference: {@code ||out - ref|| / ||ref||} (L2),
 * the largest absolute difference, and how many outputs are not finite (an unwritten output,
 * poisoned with NaN before the launch, counts here).
 */
public record ErrorStats(double relativeL2, double maxAbs, long nonFinite, long count) {

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
        long nonFinite = 0;
        for (int i = 0; i < length; i++) {
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
        return new ErrorStats(rel, maxAbs, nonFinite, length);
    }

    /** True when every output is finite and the relative error is at most {@code tolerance}. */
    public boolean within(double tolerance) {
        return nonFinite == 0 && relativeL2 <= tolerance;
    }

    @Override
    public String toString() {
        return String.format(java.util.Locale.ROOT, "rel %.3e, max abs %.3e, non-finite %d of %d",
                relativeL2, maxAbs, nonFinite, count);
    }
}
