package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
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
