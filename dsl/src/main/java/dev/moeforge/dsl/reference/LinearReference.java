package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import java.util.stream.IntStream;

/**
 * The CPU oracle of the linear kernels: {@code y[m][n] = epilogue(W[n] . x[m] + b[n])} in FP64
 * from the decoded weights, whatever schedule lowers it.
 */
public final class LinearReference {
    private LinearReference() {}

    /**
     * The exact outputs {@code [M][N]} for {@code x [M][K]} (bf16 bits), weights {@code [N][K]} as
     * the reference sees them, and the bias ({@code null} without one).
     */
    public static double[] run(KernelSpec spec, short[] x, WeightRows w, float[] bias) {
        Problem.Linear p = (Problem.Linear) spec.problem();
        return run(p, spec.epilogue(), widen(x), w, bias);
    }

    /** The same on exact activations, for a problem and its epilogue (the decoder's CPU path). */
    public static double[] run(Problem.Linear p, EpilogueNode epilogue, double[] x, WeightRows w, float[] bias) {
        int k = p.inputs();
        int n = p.outputs();
        if (x.length % k != 0) {
            throw new IllegalArgumentException("x has " + x.length + " elements, not a whole number of rows of " + k);
        }
        if (w.experts() != 1 || w.rows() != n || w.rowLength() != k) {
            throw new IllegalArgumentException("weights are [" + w.experts() + ", " + w.rows() + ", " + w.rowLength()
                    + "], the problem needs [1, " + n + ", " + k + "]");
        }
        if (p.bias() != (bias != null) || (bias != null && bias.length != n)) {
            throw new IllegalArgumentException(p.bias() ? "the problem has bias=true: give " + n + " values"
                    : "the problem has no bias, but one was given");
        }
        int tokens = x.length / k;
        double[] y = new double[tokens * n];
        IntStream.range(0, n).parallel().forEach(o -> {
            double[] row = new double[k];
            w.decode(0, o, row);
            for (int m = 0; m < tokens; m++) {
                double acc = bias == null ? 0 : bias[o];
                for (int i = 0; i < k; i++) {
                    acc += row[i] * x[m * k + i];
                }
                y[m * n + o] = EpilogueEvaluator.evaluate(epilogue, one(acc), 0);
            }
        });
        return y;
    }

    private static EpilogueEvaluator.Accumulators one(double acc) {
        return new EpilogueEvaluator.Accumulators() {
            @Override
            public int slots() {
                return 1;
            }

            @Override
            public double value(Acc a, int slot) {
                return acc;
            }

            @Override
            public double routingWeight(int slot) {
                throw new IllegalStateException("a linear projection does not combine");
            }
        };
    }

    private static double[] widen(short[] bf16) {
        double[] out = new double[bf16.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = dev.moeforge.dsl.format.Bf16.toFloat(bf16[i]);
        }
        return out;
    }
}
