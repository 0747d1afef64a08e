package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;

/**
 * How far a kernel's bf16 output is from the reference: {@code ||out - ref|| / ||ref||} (L2),
 * the largest absolute difference, and how many outputs are not finite (an unwritten output,
 * poisoned with NaN before the launch, counts here).
 */
public record ErrorStats(double relativeL2, double maxAbs, long nonFinite, long count) {

    public static ErrorStats of(double[] reference, short[] output) {
        if (reference.length != output.length) {
            throw new IllegalArgumentException("reference has " + reference.length + " values, output " + output.length);
        }
        double diff = 0;
        double norm = 0;
        double maxAbs = 0;
        long nonFinite = 0;
        for (int i = 0; i < output.length; i++) {
            double got = Bf16.toFloat(output[i]);
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
        return new ErrorStats(rel, maxAbs, nonFinite, output.length);
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
