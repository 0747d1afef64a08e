package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;

/**
 * The accuracy study of a weight format: the expert layer's output
 * against an FP64 reference on the original FP32 weights, for MoeForge's path (quantised weights,
 * BF16 activations, FP32 accumulation) and for the path of tensor-core kernels that quantise the
 * activations to the weight format too (FP4 x FP4, MXFP8 x MXFP8, ...).
 */
public final class FormatAccuracy {
    private FormatAccuracy() {}

    /**
     * Relative L2 errors of the layer output y.
     *
     * @param kernel                  the kernel's y against FP64 on the same dequantised weights
     * @param format                  FP64 on the dequantised weights against FP64 on the original weights
     * @param bf16ActivationPath      the kernel's y against FP64 on the original weights
     * @param quantisedActivationPath FP64 with activations (x, and the intermediate before down) also
     *                                quantised to the format, against FP64 on the original weights
     */
    public record Errors(double kernel, double format, double bf16ActivationPath, double quantisedActivationPath) {
        /** How many times further from the original the quantised-activation path lands (above 1: BF16 activations win). */
        public double ratio() {
            return quantisedActivationPath / bf16ActivationPath;
        }
    }

    /** The three FP64 layer outputs the errors are measured between. */
    public record References(double[] original, double[] dequantised, double[] quantisedActivations) {}

    /**
     * FP64 references of the layer {@code specs} on {@code x}: on the original weights, on the
     * quantised weights, and on the quantised weights with quantised activations.
     */
    public static References references(ExpertLayerSpecs specs, short[] x, RowSource gateUp, RowSource down,
                                        EncodedWeights quantisedGateUp, EncodedWeights quantisedDown, Routing routing) {
        Problem.ExpertGateUp p = (Problem.ExpertGateUp) specs.gateUp().problem();
        ExpertShape s = p.shape();
        WeightRows originalGateUp = WeightRows.of(gateUp, s.experts(), 2 * s.intermediate(), s.hidden());
        WeightRows originalDown = WeightRows.of(down, s.experts(), s.hidden(), s.intermediate());
        double[] original = ExpertReference.layer(specs.gateUp(), specs.down(), x, originalGateUp, originalDown, routing).y().exact();
        WeightRows qgu = WeightRows.of(quantisedGateUp);
        WeightRows qdn = WeightRows.of(quantisedDown);
        double[] dequantised = ExpertReference.layer(specs.gateUp(), specs.down(), x, qgu, qdn, routing).y().exact();
        WeightFormat f = p.weights();
        int tokens = routing.tokens();
        double[] xq = quantiseActivations(f, widen(x), tokens, s.hidden());
        double[] inter = ExpertReference.gateUp(specs.gateUp(), xq, qgu, routing).exact();
        double[] interQ = quantiseActivations(f, inter, tokens * s.topk(), s.intermediate());
        double[] quantisedActivations = ExpertReference.down(specs.down(), interQ, qdn, routing).exact();
        return new References(original, dequantised, quantisedActivations);
    }

    /** The errors of a kernel's stored output {@code y} (bf16 bits) against the references. */
    public static Errors errors(References r, short[] y) {
        double[] kernel = widen(y);
        return new Errors(relativeL2(kernel, r.dequantised()), relativeL2(r.dequantised(), r.original()),
                relativeL2(kernel, r.original()), relativeL2(r.quantisedActivations(), r.original()));
    }

    /**
     * Activations as a tensor-core path of the format quantises them, per row (token): first to BF16
     * (what such a kernel receives), then to the format: the MX and NVFP4 formats with their own
     * blocks (NVFP4's per-tensor scale from this tensor's amax), per-channel formats with one scale
     * per row, FP8 128 x 128 with DeepSeek-V3's 1 x 128 activation groups, INT groups of 128.
     */
    public static double[] quantiseActivations(WeightFormat f, double[] values, int rows, int cols) {
        float[] v = new float[values.length];
        for (int i = 0; i < v.length; i++) {
            v[i] = Bf16.toFloat(Bf16.fromDouble(values[i]));
        }
        double[] out = new double[values.length];
        if (f instanceof WeightFormat.Bf16) {
            for (int i = 0; i < v.length; i++) {
                out[i] = v[i];
            }
            return out;
        }
        if (f instanceof WeightFormat.Fp8(WeightFormat.Fp8Scaling scaling) && scaling == WeightFormat.Fp8Scaling.BLOCK_128X128) {
            return Fp8ActivationRows.quantise(values, rows, cols);
        }
        EncodedWeights q = EncodedWeights.encode(f, RowSource.of(v, rows, cols), 1, rows, cols, Projections.ONE, "activations");
        double[] row = new double[cols];
        for (int r = 0; r < rows; r++) {
            q.decodeRow(0, r, row);
            System.arraycopy(row, 0, out, r * cols, cols);
        }
        return out;
    }

    static double relativeL2(double[] a, double[] reference) {
        double num = 0, den = 0;
        for (int i = 0; i < a.length; i++) {
            double d = a[i] - reference[i];
            num += d * d;
            den += reference[i] * reference[i];
        }
        return Math.sqrt(num / den);
    }

    private static double[] widen(short[] bf16) {
        double[] out = new double[bf16.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = Bf16.toFloat(bf16[i]);
        }
        return out;
    }
}
