package dev.moeforge.dsl.format;

/**
 * The small floating-point element types of the weight formats, with the reference rounding:
 * round to nearest even, saturate to the largest finite value (OCP MX v1.0 "satfinite"),
 * subnormals kept.
 */
public enum Minifloat {
    /** FP8 E4M3 ("fn"): bias 7, max 448, S.1111.111 is NaN, no infinity. */
    E4M3(4, 3, 7, true),
    /** FP4 E2M1: bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; no NaN, no infinity. */
    E2M1(2, 1, 1, false);

    private final int exponentBits;
    private final int mantissaBits;
    private final int bias;
    private final boolean hasNan;

    Minifloat(int exponentBits, int mantissaBits, int bias, boolean hasNan) {
        this.exponentBits = exponentBits;
        this.mantissaBits = mantissaBits;
        this.bias = bias;
        this.hasNan = hasNan;
    }

    /** Bits of one code, sign included. */
    public int bits() {
        return 1 + exponentBits + mantissaBits;
    }

    /** Number of codes, 2^bits. */
    public int codes() {
        return 1 << bits();
    }

    private int exponentMask() {
        return (1 << exponentBits) - 1;
    }

    private int mantissaMask() {
        return (1 << mantissaBits) - 1;
    }

    /** The largest finite value: 448 for E4M3 (its all-ones code is NaN), 6 for E2M1. */
    public float maxFinite() {
        int topMantissa = hasNan ? mantissaMask() - 1 : mantissaMask();
        return (float) ((1.0 + topMantissa / (double) (1 << mantissaBits)) * Math.scalb(1.0, exponentMask() - bias));
    }

    /** Whether {@code code} is NaN (E4M3's S.1111.111). */
    public boolean isNan(int code) {
        return hasNan && (code & ((1 << (bits() - 1)) - 1)) == (1 << (bits() - 1)) - 1;
    }

    /** The exact value of {@code code} (low {@link #bits()} bits used); -0 for the negative zero. */
    public float decode(int code) {
        if (code < 0 || code >= codes()) {
            throw new IllegalArgumentException(name() + " code " + code + " outside 0.." + (codes() - 1));
        }
        if (isNan(code)) {
            return Float.NaN;
        }
        boolean negative = (code >> (bits() - 1)) != 0;
        int exponent = (code >> mantissaBits) & exponentMask();
        int mantissa = code & mantissaMask();
        double magnitude = exponent == 0
                ? Math.scalb((double) mantissa, 1 - bias - mantissaBits)
                : Math.scalb((double) ((1 << mantissaBits) | mantissa), exponent - bias - mantissaBits);
        return (float) (negative ? -magnitude : magnitude);
    }

    /**
     * The code nearest {@code value}: ties to even, magnitudes at or above {@link #maxFinite()}
     * (infinity included) saturate to it. NaN becomes E4M3's NaN; E2M1 has none and refuses it.
     */
    public int encode(float value) {
        if (Float.isNaN(value)) {
            if (!hasNan) {
                throw new IllegalArgumentException(name() + " has no NaN");
            }
            return ((codes() - 1) >> 1) | (Float.floatToRawIntBits(value) < 0 ? 1 << (bits() - 1) : 0);
        }
        int sign = (Float.floatToRawIntBits(value) >>> 31) << (bits() - 1);
        double a = Math.abs((double) value);
        double max = maxFinite();
        double rounded;
        if (a >= max) {
            rounded = max;
        } else {
            int minNormal = 1 - bias;
            int exponent = a == 0 ? minNormal : Math.max(Math.getExponent(a), minNormal);
            double quantum = Math.scalb(1.0, exponent - mantissaBits);
            rounded = Math.rint(a / quantum) * quantum;  // exact: quantum is a power of two
        }
        return sign | magnitudeCode(rounded);
    }

    private int magnitudeCode(double value) {
        if (value == 0) {
            return 0;
        }
        int exponent = Math.getExponent(value);
        if (exponent < 1 - bias) {
            return (int) Math.scalb(value, bias - 1 + mantissaBits);  // subnormal: exponent field 0
        }
        int mantissa = (int) Math.scalb(value, mantissaBits - exponent) - (1 << mantissaBits);
        return (exponent + bias) << mantissaBits | mantissa;
    }
}
