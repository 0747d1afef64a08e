package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.moeforge.dsl.format.Bf16;

/** Test data in bf16 that hand arithmetic can rely on: every value must be exactly representable. */
final class ExactBf16 {
    private ExactBf16() {}

    static short[] of(double... values) {
        short[] out = new short[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = Bf16.fromDouble(values[i]);
            assertEquals(values[i], Bf16.toFloat(out[i]), 0, "test value " + values[i] + " is not bf16-exact");
        }
        return out;
    }
}
