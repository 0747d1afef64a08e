package dev.moeforge.dsl.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The element and scale encodings on every code point, against tables and values from the specs. */
class MinifloatTest {

    /** E2M1 codes 0..15 (OCP MX v1.0 table 5). */
    static final float[] E2M1_TABLE = {0f, 0.5f, 1f, 1.5f, 2f, 3f, 4f, 6f, -0f, -0.5f, -1f, -1.5f, -2f, -3f, -4f, -6f};

    @Test
    void e2m1DecodesEveryCodeAsTheTable() {
        for (int c = 0; c < 16; c++) {
            assertEquals(Float.floatToRawIntBits(E2M1_TABLE[c]), Float.floatToRawIntBits(Minifloat.E2M1.decode(c)), "code " + c);
        }
    }

    @Test
    void e4m3DecodesEveryCodeAsTheSpecFormula() {
        for (int c = 0; c < 256; c++) {
            int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
            float expected;
            if (e == 15 && m == 7) {
                expected = Float.NaN;
            } else {
                // spec: bias 7; e = 0 is m/8 * 2^-6, otherwise (1 + m/8) * 2^(e-7)
                double magnitude = e == 0 ? m / 8.0 * Math.pow(2, -6) : (1 + m / 8.0) * Math.pow(2, e - 7);
                expected = (float) (s == 1 ? -magnitude : magnitude);
            }
            assertEquals(Float.floatToRawIntBits(expected), Float.floatToRawIntBits(Minifloat.E4M3.decode(c)), "code " + c);
        }
    }

    @Test
    void e4m3LandmarksAndOrder() {
        assertEquals(448f, Minifloat.E4M3.decode(0x7E));
        assertEquals(-448f, Minifloat.E4M3.decode(0xFE));
        assertEquals(1f, Minifloat.E4M3.decode(0x38));
        assertEquals(0x1p-9f, Minifloat.E4M3.decode(0x01));
        assertEquals(0x1p-6f, Minifloat.E4M3.decode(0x08));
        assertTrue(Float.isNaN(Minifloat.E4M3.decode(0x7F)) && Float.isNaN(Minifloat.E4M3.decode(0xFF)));
        assertEquals(448f, Minifloat.E4M3.maxFinite());
        assertEquals(6f, Minifloat.E2M1.maxFinite());
        for (int c = 1; c < 0x7F; c++) {
            assertTrue(Minifloat.E4M3.decode(c) > Minifloat.E4M3.decode(c - 1), "codes ascend at " + c);
        }
    }

    @Test
    void encodeOfDecodeIsTheCodeOnEveryCodePoint() {
        for (Minifloat f : Minifloat.values()) {
            for (int c = 0; c < f.codes(); c++) {
                if (!f.isNan(c)) {
                    assertEquals(c, f.encode(f.decode(c)), f + " code " + c);
                }
            }
        }
        assertEquals(0x7F, Minifloat.E4M3.encode(Float.NaN));
    }

    @Test
    void roundsToNearestEvenAndSaturates() {
        // E2M1 ties: 0.25 between 0 and 0.5 -> 0; 0.75 -> 1; 2.5 -> 2; 5 -> 4 (even mantissas)
        assertEquals(0, Minifloat.E2M1.encode(0.25f));
        assertEquals(2, Minifloat.E2M1.encode(0.75f));
        assertEquals(4, Minifloat.E2M1.encode(2.5f));
        assertEquals(6, Minifloat.E2M1.encode(5f));
        assertEquals(5, Minifloat.E2M1.encode(2.5001f));
        assertEquals(7, Minifloat.E2M1.encode(7f));
        assertEquals(15, Minifloat.E2M1.encode(-1e30f));
        assertEquals(7, Minifloat.E2M1.encode(Float.POSITIVE_INFINITY));
        assertEquals(8, Minifloat.E2M1.encode(-0f));
        assertThrows(IllegalArgumentException.class, () -> Minifloat.E2M1.encode(Float.NaN));
        // E4M3: 448 is the top; 464 (midway to 480, which would be NaN's slot) saturates; subnormal ties
        assertEquals(0x7E, Minifloat.E4M3.encode(464f));
        assertEquals(0x7E, Minifloat.E4M3.encode(1e6f));
        assertEquals(0xFE, Minifloat.E4M3.encode(Float.NEGATIVE_INFINITY));
        assertEquals(0x00, Minifloat.E4M3.encode(0x1p-10f));         // half of the smallest subnormal: tie to 0
        assertEquals(0x02, Minifloat.E4M3.encode(0x1.8p-9f));        // 1.5 quanta: tie to even (2)
        assertEquals(0x3C, Minifloat.E4M3.encode(1.4375f));          // (1 + 3.5/8): tie to even mantissa 4
    }

    @Test
    void e8m0EveryCodeAndSharedScale() {
        for (int b = 0; b < 256; b++) {
            float v = E8M0.decode(b);
            if (b == 255) {
                assertTrue(Float.isNaN(v));
            } else {
                assertEquals((float) Math.pow(2, b - 127), v, "byte " + b);
            }
        }
        // OCP MX: X = floor(log2(amax)) - emax: amax 6 in E2M1 (emax 2) -> 2^0; amax 448 in E4M3 (emax 8) -> 2^0
        assertEquals(127, E8M0.sharedScale(6f, 2));
        assertEquals(127, E8M0.sharedScale(7.9f, 2));
        assertEquals(128, E8M0.sharedScale(8f, 2));
        assertEquals(127, E8M0.sharedScale(448f, 8));
        assertEquals(0, E8M0.sharedScale(0f, 8));
        assertEquals(0, E8M0.sharedScale(Float.MIN_VALUE, 2));
        assertEquals(254, E8M0.sharedScale(Float.MAX_VALUE, 0));
        for (int b = 2; b < 253; b++) {
            assertEquals(b, E8M0.sharedScale(E8M0.decode(b) * 4f, 2), "byte " + b);
        }
    }
}
