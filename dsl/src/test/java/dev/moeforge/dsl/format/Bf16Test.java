package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * bfloat16 conversions on every code point: widening is exact, narrowing rounds to nearest even,
 * keeps infinities and turns a NaN into a quiet NaN of the same sign.
 */
class Bf16Test {
    private static final int CODE_POINTS = 1 << 16;

    @Test
    void toFloatIsTheUpperHalfOfAnFp32ForEveryCodePoint() {
        for (int b = 0; b < CODE_POINTS; b++) {
            final int bits = b;
            float got = Bf16.toFloat((short) b);
            float want = Float.intBitsToFloat(b << 16);
            assertEquals(Float.floatToRawIntBits(want), Float.floatToRawIntBits(got),
                    () -> String.format("toFloat(0x%04X)", bits));
            if (!Float.isNaN(want)) {
                assertEquals(b << 16, Float.floatToRawIntBits(got), () -> String.format("toFloat(0x%04X)", bits));
            }
        }
    }

    @Test
    void fromFloatOfToFloatIsTheIdentityOnEveryNonNanCodePoint() {
        for (int b = 0; b < CODE_POINTS; b++) {
            if (isNanPattern(b)) {
                continue;
            }
            final int bits = b;
            short back = Bf16.fromFloat(Bf16.toFloat((short) b));
            assertEquals(b, back & 0xFFFF, () -> String.format("fromFloat(toFloat(0x%04X)) = 0x%04X", bits, back & 0xFFFF));
        }
    }

    @Test
    void everyNanCodePointNarrowsToAQuietNanOfTheSameSign() {
        int nans = 0;
        for (int b = 0; b < CODE_POINTS; b++) {
            if (!isNanPattern(b)) {
                continue;
            }
            nans++;
            int back = Bf16.fromFloat(Bf16.toFloat((short) b)) & 0xFFFF;
            assertNanOfSign(back, b & 0x8000, String.format("fromFloat(toFloat(0x%04X))", b));
        }
        assertEquals(2 * 127, nans, "NaN code points: exponent all ones, mantissa non-zero, either sign");
    }

    /** A NaN whose payload lies only in the 16 bits that narrowing drops must not become an infinity. */
    @ParameterizedTest(name = "fp32 0x{0} -> bf16 NaN of sign bit {1}")
    @CsvSource({"7F800001, 0", "7F80FFFF, 0", "FF800001, 8000", "7FC00000, 0", "FFFFFFFF, 8000", "7FBFFFFF, 0"})
    void fp32NanWithLowPayloadNarrowsToQuietNan(String fp32Hex, String signHex) {
        float nan = Float.intBitsToFloat(Integer.parseUnsignedInt(fp32Hex, 16));
        assertTrue(Float.isNaN(nan));
        int got = Bf16.fromFloat(nan) & 0xFFFF;
        assertNanOfSign(got, Integer.parseInt(signHex, 16), "fromFloat(0x" + fp32Hex + ")");
    }

    @Test
    void canonicalNanConstantIsAQuietPositiveNan() {
        assertNanOfSign(Bf16.NAN & 0xFFFF, 0, "Bf16.NAN");
        assertTrue(Float.isNaN(Bf16.toFloat(Bf16.NAN)));
        assertFalse(Bf16.isFinite(Bf16.NAN));
    }

    /**
     * Hand-picked roundings. Around 1.0 a bf16 ulp is 2^-7, so fp32 bit 15 (0x8000 in the low half)
     * is exactly half an ulp: 1 + 2^-8 is a tie between 0x3F80 (even) and 0x3F81 (odd).
     */
    @ParameterizedTest(name = "{2}: fp32 0x{0} -> bf16 0x{1}")
    @CsvSource({
        // exact ties go to the even neighbour, downwards and upwards
        "3F808000, 3F80, 1 + 2^-8 ties down to 1.0 (even)",
        "3F818000, 3F82, 1 + 3*2^-8 ties up to 1 + 2^-6 (even)",
        "BF808000, BF80, -(1 + 2^-8) ties to -1.0 (even)",
        "BF818000, BF82, -(1 + 3*2^-8) ties to -(1 + 2^-6) (even)",
        // one fp32 ulp either side of a tie is not a tie
        "3F808001, 3F81, just above the 1 + 2^-8 tie rounds up",
        "3F807FFF, 3F80, just below the 1 + 2^-8 tie rounds down",
        "3F818001, 3F82, just above the 1 + 3*2^-8 tie rounds up",
        "3F817FFF, 3F81, just below the 1 + 3*2^-8 tie rounds down",
        // a tie whose rounding carries into the exponent
        "3FFF8000, 4000, 1.99609375 + 2^-8 ties up to 2.0",
        "3FFF7FFF, 3FFF, just below that tie stays below 2.0",
        // exact values and zeros
        "3F800000, 3F80, 1.0 is exact",
        "00000000, 0000, +0",
        "80000000, 8000, -0 keeps its sign",
        // subnormals
        "00000001, 0000, the smallest fp32 subnormal rounds to +0",
        "00008000, 0000, a subnormal tie rounds to +0 (even)",
        "00018000, 0002, a subnormal tie rounds up to even",
        "807FFFFF, 8080, the largest negative fp32 subnormal rounds to the smallest negative normal",
        // the top of the range
        "7F7F0000, 7F7F, the largest finite bf16 stays finite",
        "7F7F7FFF, 7F7F, just below the last tie stays at the largest finite bf16",
        "7F7F8000, 7F80, the tie between the largest finite bf16 (odd) and infinity (even) overflows",
        "7F7FFFFF, 7F80, Float.MAX_VALUE overflows to +inf",
        "FF7FFFFF, FF80, -Float.MAX_VALUE overflows to -inf",
        "7F800000, 7F80, +inf stays +inf",
        "FF800000, FF80, -inf stays -inf",
    })
    void roundsToNearestEven(String fp32Hex, String bf16Hex, String what) {
        float value = Float.intBitsToFloat(Integer.parseUnsignedInt(fp32Hex, 16));
        assertEquals(Integer.parseInt(bf16Hex, 16), Bf16.fromFloat(value) & 0xFFFF, what);
    }

    @Test
    void decimalLiteralsRoundAsExpected() {
        assertEquals(0x3F80, Bf16.fromFloat(1.0f + 0x1p-8f) & 0xFFFF, "1 + 2^-8 is a tie: to even, 1.0");
        assertEquals(0x3F82, Bf16.fromFloat(1.0f + 3 * 0x1p-8f) & 0xFFFF, "1 + 3*2^-8 is a tie: to even, 1 + 2^-6");
        assertEquals(0x7F7F, Bf16.fromFloat(Bf16.toFloat((short) 0x7F7F)) & 0xFFFF, "max finite stays");
        assertEquals(3.3895314e38f, Bf16.toFloat((short) 0x7F7F));
        assertEquals(0x7F80, Bf16.fromFloat(3.4e38f) & 0xFFFF, "3.4e38 is past the last tie: +inf");
        assertEquals(0xFF80, Bf16.fromFloat(-3.4e38f) & 0xFFFF, "-3.4e38: -inf");
        assertEquals(0x4049, Bf16.fromFloat((float) Math.PI) & 0xFFFF, "pi = 3.140625 in bf16");
        assertEquals(0x3DCD, Bf16.fromFloat(0.1f) & 0xFFFF, "0.1 (fp32 0x3DCCCCCD) rounds up");
    }

    /**
     * Every fp32 whose low half is 0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001 or 0xFFFF (every tie and
     * both sides of it, for every high half), plus seeded random fp32s, against an independent
     * nearest-even oracle working on the values.
     */
    @Test
    void agreesWithAValueBasedNearestEvenOracle() {
        int[] lows = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
        for (int high = 0; high < CODE_POINTS; high++) {
            for (int low : lows) {
                checkAgainstOracle((high << 16) | low);
            }
        }
        SplittableRandom random = new SplittableRandom(20240917L);
        for (int i = 0; i < 1_000_000; i++) {
            checkAgainstOracle(random.nextInt());
        }
    }

    @Test
    void fromDoubleRoundsThroughFp32() {
        assertEquals(0x3FC0, Bf16.fromDouble(1.5) & 0xFFFF);
        assertEquals(0xC0A0, Bf16.fromDouble(-5.0) & 0xFFFF);
        assertEquals(0x7F80, Bf16.fromDouble(1e300) & 0xFFFF, "beyond fp32 range: +inf");
        assertEquals(0x0000, Bf16.fromDouble(1e-300) & 0xFFFF, "below fp32 range: +0");
    }

    @Test
    void isFiniteMatchesFloatIsFiniteOnEveryCodePoint() {
        for (int b = 0; b < CODE_POINTS; b++) {
            final int bits = b;
            assertEquals(Float.isFinite(Float.intBitsToFloat(b << 16)), Bf16.isFinite((short) b),
                    () -> String.format("isFinite(0x%04X)", bits));
        }
        assertTrue(Bf16.isFinite((short) 0x7F7F), "largest finite");
        assertTrue(Bf16.isFinite((short) 0x0001), "smallest subnormal");
        assertTrue(Bf16.isFinite((short) 0x8000), "-0");
        assertFalse(Bf16.isFinite((short) 0x7F80), "+inf");
        assertFalse(Bf16.isFinite((short) 0xFF80), "-inf");
        assertFalse(Bf16.isFinite((short) 0x7FC0), "quiet NaN");
        assertFalse(Bf16.isFinite((short) 0xFF81), "negative signalling NaN");
    }

    private static void checkAgainstOracle(int fp32Bits) {
        float value = Float.intBitsToFloat(fp32Bits);
        if (Float.isNaN(value)) {
            return;
        }
        int got = Bf16.fromFloat(value) & 0xFFFF;
        int want = nearestEven(value);
        if (got != want) {
            fail(String.format("fromFloat(fp32 0x%08X = %s) = 0x%04X, nearest even is 0x%04X",
                    fp32Bits, Float.toString(value), got, want));
        }
    }

    /**
     * The nearest bf16 by value: the two bf16 neighbours of |value| are the truncation and the next
     * code up (whose value is 2^128 when that code is infinity, as IEEE rounding treats it); the
     * differences are exact in FP64.
     */
    private static int nearestEven(float value) {
        int bits = Float.floatToRawIntBits(value);
        int sign = (bits >>> 16) & 0x8000;
        int magnitudeBits = bits & 0x7FFFFFFF;
        if (magnitudeBits >= 0x7F800000) {
            return sign | 0x7F80;
        }
        int down = magnitudeBits >>> 16;
        int up = down + 1;
        double x = Math.abs((double) value);
        double downValue = Float.intBitsToFloat(down << 16);
        double upValue = up == 0x7F80 ? 0x1p128 : Float.intBitsToFloat(up << 16);
        double below = x - downValue;
        double above = upValue - x;
        int chosen;
        if (below < above) {
            chosen = down;
        } else if (above < below) {
            chosen = up;
        } else {
            chosen = (down & 1) == 0 ? down : up;
        }
        return sign | chosen;
    }

    private static boolean isNanPattern(int b) {
        return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
    }

    private static void assertNanOfSign(int bf16, int signBit, String what) {
        assertTrue(isNanPattern(bf16), () -> String.format("%s = 0x%04X is not a NaN", what, bf16));
        assertEquals(0x0040, bf16 & 0x0040, () -> String.format("%s = 0x%04X is not a quiet NaN", what, bf16));
        assertEquals(signBit, bf16 & 0x8000, () -> String.format("%s = 0x%04X has the wrong sign", what, bf16));
    }
}
