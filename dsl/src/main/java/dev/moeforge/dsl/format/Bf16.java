package dev.moeforge.dsl.format;

/**
 * bfloat16: the upper 16 bits of an IEEE binary32. Widening is exact; narrowing rounds to nearest
 * even, keeps infinities, and turns any NaN into a quiet NaN of the same sign.
 */
public final class Bf16 {
    /** The canonical quiet NaN, used to poison outputs before a launch. */
    public static final short NAN = (short) 0x7FC0;

    private Bf16() {}

    public static float toFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    public static short fromFloat(float value) {
        int bits = Float.floatToRawIntBits(value);
        if (Float.isNaN(value)) {
            return (short) ((bits >>> 16) | 0x0040);
        }
        int roundingBias = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + roundingBias) >>> 16);
    }

    /** Rounds a double to the nearest bf16 through FP32 (the rounding a kernel's FP32 value sees). */
    public static short fromDouble(double value) {
        return fromFloat((float) value);
    }

    public static boolean isFinite(short bits) {
        return (bits & 0x7F80) != 0x7F80;
    }
}
