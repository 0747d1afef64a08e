package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.InputNorm;

/**
 * The CPU oracle of an {@link InputNorm}: the residual add in FP32, as the kernels add, and the
 * norm in FP64, rounded once to bf16. The kernels' row then differs from this one only where their
 * FP32 norm lands on the other side of a bf16 rounding boundary (one unit in the last place).
 */
public final class InputNormReference {
    private InputNormReference() {}

    /**
     * The rows an input norm makes.
     *
     * @param residualOut {@code residual + addend} in FP32, {@code [M][K]}
     * @param normed      the rows the kernel multiplies, bf16 bits {@code [M][K]}
     */
    public record Rows(float[] residualOut, short[] normed) {}

    /**
     * Random inputs of an input norm and the rows it makes of them ({@link #random}).
     *
     * @param addend the addend's values (bf16 values where the norm's addend is bf16)
     */
    public record Drawn(InputNorm norm, float[] residual, float[] addend, float[] weight, Rows rows) {
        /** The addend's bf16 bits, for a norm whose addend is bf16. */
        public short[] addendBf16() {
            short[] bits = new short[addend.length];
            for (int i = 0; i < bits.length; i++) {
                bits[i] = Bf16.fromFloat(addend[i]);
            }
            return bits;
        }
    }

    /**
     * {@code tokens} rows of {@code width}: the residual N(0, 1), the addend N(0, 0.5) (rounded to
     * bf16 where the norm's addend is bf16), the norm's weight 1 + N(0, 0.2); and their rows.
     */
    public static Drawn random(InputNorm norm, int tokens, int width, long seed) {
        float[] residual = RandomInputs.floatNormal(seed, tokens * width, 1.0);
        float[] addend = RandomInputs.floatNormal(seed + 1, tokens * width, 0.5);
        if (norm.addend() == DType.BF16) {
            for (int i = 0; i < addend.length; i++) {
                addend[i] = Bf16.toFloat(Bf16.fromFloat(addend[i]));
            }
        }
        float[] weight = RandomInputs.floatNormal(seed + 2, width, 0.2);
        for (int i = 0; i < width; i++) {
            weight[i] += 1;
        }
        return new Drawn(norm, residual, addend, weight, apply(norm, residual, addend, weight));
    }

    /**
     * {@code residual} and {@code addend} are {@code [M][K]} (the addend's bf16 values widened when
     * it is bf16), {@code weight} is {@code [K]}.
     */
    public static Rows apply(InputNorm norm, float[] residual, float[] addend, float[] weight) {
        int k = weight.length;
        if (k == 0 || residual.length % k != 0 || addend.length != residual.length) {
            throw new IllegalArgumentException("residual (" + residual.length + ") and addend (" + addend.length
                    + ") must be the same whole number of rows of the weight's " + k + " elements");
        }
        float[] sum = new float[residual.length];
        short[] normed = new short[residual.length];
        for (int row = 0; row < residual.length / k; row++) {
            double squares = 0;
            for (int i = row * k; i < (row + 1) * k; i++) {
                sum[i] = residual[i] + addend[i];
                squares += (double) sum[i] * sum[i];
            }
            double r = 1 / Math.sqrt(squares / k + norm.eps());
            for (int i = 0; i < k; i++) {
                normed[row * k + i] = Bf16.fromDouble(weight[i] * (sum[row * k + i] * r));
            }
        }
        return new Rows(sum, normed);
    }
}
