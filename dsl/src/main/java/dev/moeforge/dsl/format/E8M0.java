package dev.moeforge.dsl.format;

/**
 * E8M0, the shared scale of the OCP MX formats: byte {@code b} is 2^(b-127), 0xFF is NaN; no sign,
 * no zero (byte 0 is 2^-127, a float subnormal).
 */
public final class E8M0 {
    public static final int NAN = 0xFF;

    private E8M0() {}

    public static float decode(int b) {
        if (b < 0 || b > 0xFF) {
            throw new IllegalArgumentException("E8M0 code " + b + " outside 0..255");
        }
        return b == NAN ? Float.NaN : Math.scalb(1.0f, b - 127);
    }

    /**
     * The shared scale of a block as in OCP MX v1.0 section 6.3: 2^(floor(log2(amax)) - emax), with
     * {@code emax} the element type's largest exponent (8 for E4M3, 2 for E2M1), clamped to the
     * E8M0 range; an all-zero block gets the smallest scale.
     */
    public static int sharedScale(float amax, int elementEmax) {
        if (!(amax >= 0) || Float.isInfinite(amax)) {
            throw new IllegalArgumentException("block amax " + amax + " is not a finite magnitude");
        }
        if (amax == 0) {
            return 0;
        }
        int exponent = Math.getExponent(amax);
        if (exponent < Float.MIN_EXPONENT) {  // subnormal amax
            exponent = Math.getExponent((double) amax);
        }
        return Math.clamp(exponent - elementEmax + 127, 0, 254);
    }

    /** The exponent of the largest finite value of an MX element type (OCP MX v1.0 table 1). */
    public static int emax(Minifloat element) {
        return switch (element) {
            case E4M3 -> 8;
            case E2M1 -> 2;
        };
    }
}
