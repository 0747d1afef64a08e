package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.stream.IntStream;

/**
 * The CPU oracle for the expert kernels: computes a spec's function in FP64 from the decoded
 * weights, whatever schedule lowers it. Tokens are computed in parallel; each output is
 * independent, so the result does not depend on thread count.
 */
public final class ExpertReference {

    /** A kernel's output: the exact FP64 values and the same values rounded to the stored type. */
    public record Result(double[] exact, short[] stored) {}

    /** The layer's two outputs: gate_up's intermediate and the layer's output y. */
    public record LayerResult(Result inter, Result y) {}

    /**
     * The whole expert layer, {@code (x, topk_ids, topk_weights) -> y}: gate_up, its output stored
     * in the intermediate type as the kernels store it, then down on that stored intermediate. Where
     * the kernels multiply FP8 activations (W8A8), x and the intermediate are quantised as they
     * quantise them ({@link Fp8ActivationRows}), and {@code inter} holds the quantised values.
     */
    public static LayerResult layer(KernelSpec gateUpSpec, KernelSpec downSpec, short[] x, WeightRows gateUp,
                                    WeightRows down, Routing routing) {
        ExpertShape gateUpShape = ((Problem.ExpertProblem) gateUpSpec.problem()).shape();
        ExpertShape downShape = ((Problem.ExpertProblem) downSpec.problem()).shape();
        if (!gateUpShape.equals(downShape)) {
            throw new IllegalArgumentException("gate_up " + gateUpSpec.name() + " has shape " + gateUpShape
                    + " but down " + downSpec.name() + " has " + downShape);
        }
        boolean w8a8 = Validator.check(gateUpSpec).quantisesActivations();
        if (w8a8 != Validator.check(downSpec).quantisesActivations()) {
            throw new IllegalArgumentException("gate_up " + gateUpSpec.name() + " and down " + downSpec.name()
                    + " disagree on the intermediate: one multiplies FP8 activations (W8A8), the other does not");
        }
        if (w8a8) {  // x and inter as the kernels quantise them
            double[] interQ = quantisedInter((Problem.ExpertGateUp) gateUpSpec.problem(), gateUpSpec.epilogue(),
                    widen(x, 0, x.length), gateUp, routing);
            short[] interBf16 = new short[interQ.length];
            for (int i = 0; i < interQ.length; i++) {
                interBf16[i] = Bf16.fromDouble(interQ[i]);
            }
            return new LayerResult(new Result(interQ, interBf16), down(downSpec, interQ, down, routing));
        }
        Result inter = gateUp(gateUpSpec, x, gateUp, routing);
        return new LayerResult(inter, down(downSpec, inter.stored(), down, routing));
    }

    private ExpertReference() {}

    /**
     * gate_up: {@code inter[m][j][i] = epilogue(W[e][gateRow(i)] . x[m], W[e][upRow(i)] . x[m])}
     * with {@code e = ids[m][j]}; {@code x} is {@code [M][H]} bf16.
     */
    public static Result gateUp(KernelSpec spec, short[] x, WeightRows w, Routing routing) {
        return gateUp(spec, widen(x, 0, x.length), w, routing);
    }

    /** gate_up on activations given as exact values (e.g. activations quantised to a weight format). */
    public static Result gateUp(KernelSpec spec, double[] x, WeightRows w, Routing routing) {
        return gateUp((Problem.ExpertGateUp) spec.problem(), spec.epilogue(), x, w, routing);
    }

    /** gate_up of a problem and its epilogue, whatever kernel will compute it (the decoder's CPU path). */
    public static Result gateUp(Problem.ExpertGateUp p, EpilogueNode epilogue, double[] x, WeightRows w, Routing routing) {
        return gateUp(p.shape(), p.layout(), p.bias(), epilogue, x, w, routing);
    }

    /**
     * The intermediate a W8A8 gate_up hands down: x (exact values) quantised per token in groups of
     * 128, gate_up on it, and its output quantised per (token, slot) row ({@link Fp8ActivationRows}).
     */
    public static double[] quantisedInter(Problem.ExpertGateUp p, EpilogueNode epilogue, double[] x, WeightRows w, Routing routing) {
        ExpertShape s = p.shape();
        double[] xq = Fp8ActivationRows.quantise(x, routing.tokens(), s.hidden());
        return Fp8ActivationRows.quantise(gateUp(p, epilogue, xq, w, routing).exact(), routing.tokens() * s.topk(), s.intermediate());
    }

    /** gate_up of a shape and layout, its epilogue the tree {@code epilogue} (a store); x exact. */
    private static Result gateUp(ExpertShape s, GateUpLayout layout, boolean bias, EpilogueNode epilogue, double[] x,
                                 WeightRows w, Routing routing) {
        checkInputs(s, bias, routing, w, 2 * s.intermediate(), s.hidden());
        requireLength("x", x.length, (long) routing.tokens() * s.hidden());
        int k = s.topk();
        int n = s.intermediate();
        double[] exact = new double[routing.tokens() * k * n];
        IntStream.range(0, routing.tokens()).parallel().forEach(m -> {
            double[] xm = java.util.Arrays.copyOfRange(x, m * s.hidden(), (m + 1) * s.hidden());
            double[] gateRow = new double[s.hidden()];
            double[] upRow = new double[s.hidden()];
            for (int j = 0; j < k; j++) {
                int e = routing.id(m, j);
                for (int i = 0; i < n; i++) {
                    int g = layout.gateRow(i, n);
                    int u = layout.upRow(i, n);
                    w.decode(e, g, gateRow);
                    w.decode(e, u, upRow);
                    double gate = dot(gateRow, xm) + w.bias(e, g);
                    double up = dot(upRow, xm) + w.bias(e, u);
                    exact[(m * k + j) * n + i] = EpilogueEvaluator.evaluate(epilogue, perSlot(gate, up), 0);
                }
            }
        });
        return new Result(exact, round(exact, ((Store) epilogue).dtype()));
    }

    /** The whole expert MLP's outputs: the intermediate as stored, and y in FP64 (the kernel adds into FP32). */
    public record MlpResult(Result inter, double[] y) {}

    /**
     * expert_mlp: gate_up with the spec's epilogue, its output rounded to the epilogue's store type as
     * a stored intermediate would be, then {@code y[m][h] = sum_j topk_weights[m][j] * (W_down[e_j][h] .
     * inter[m][j])}; {@code x} is {@code [M][H]} bf16, the weights decoded in their natural layout.
     */
    public static MlpResult mlp(KernelSpec spec, short[] x, WeightRows gateUp, WeightRows down, Routing routing) {
        Problem.ExpertMlp p = (Problem.ExpertMlp) spec.problem();
        ExpertShape s = p.shape();
        Result inter = gateUp(s, p.layout(), false, spec.epilogue(), widen(x, 0, x.length), gateUp, routing);
        checkInputs(s, false, routing, down, s.hidden(), s.intermediate());
        double[] a = widen(inter.stored(), 0, inter.stored().length);
        int k = s.topk();
        int in = s.intermediate();
        double[] y = new double[routing.tokens() * s.hidden()];
        IntStream.range(0, routing.tokens()).parallel().forEach(m -> {
            double[] row = new double[in];
            for (int h = 0; h < s.hidden(); h++) {
                double sum = 0;
                for (int j = 0; j < k; j++) {
                    down.decode(routing.id(m, j), h, row);
                    double acc = 0;
                    for (int i = 0; i < in; i++) {
                        acc += row[i] * a[(m * k + j) * in + i];
                    }
                    sum += routing.weight(m, j) * acc;
                }
                y[m * s.hidden() + h] = sum;
            }
        });
        return new MlpResult(inter, y);
    }

    /**
     * down: {@code y[m][h] = epilogue over slots j of W[ids[m][j]][h] . inter[m][j]}, e.g.
     * {@code sum_j weights[m][j] * acc_j}; {@code inter} is {@code [M][k][I]} bf16.
     */
    public static Result down(KernelSpec spec, short[] inter, WeightRows w, Routing routing) {
        return down(spec, widen(inter, 0, inter.length), w, routing);
    }

    /** down on an intermediate given as exact values. */
    public static Result down(KernelSpec spec, double[] inter, WeightRows w, Routing routing) {
        return down((Problem.ExpertProblem) spec.problem(), spec.epilogue(), inter, w, routing);
    }

    /** down of a problem and its epilogue, whatever kernel will compute it (the decoder's CPU path). */
    public static Result down(Problem.ExpertProblem p, EpilogueNode epilogue, double[] inter, WeightRows w, Routing routing) {
        ExpertShape s = p.shape();
        checkInputs(s, p.bias(), routing, w, s.hidden(), s.intermediate());
        int k = s.topk();
        int in = s.intermediate();
        requireLength("inter", inter.length, (long) routing.tokens() * k * in);
        double[] exact = new double[routing.tokens() * s.hidden()];
        IntStream.range(0, routing.tokens()).parallel().forEach(m -> {
            double[][] a = new double[k][];
            for (int j = 0; j < k; j++) {
                a[j] = java.util.Arrays.copyOfRange(inter, (m * k + j) * in, (m * k + j + 1) * in);
            }
            double[] row = new double[in];
            double[] acc = new double[k];
            for (int h = 0; h < s.hidden(); h++) {
                for (int j = 0; j < k; j++) {
                    int e = routing.id(m, j);
                    w.decode(e, h, row);
                    acc[j] = dot(row, a[j]) + w.bias(e, h);
                }
                exact[m * s.hidden() + h] = EpilogueEvaluator.evaluate(epilogue, perToken(acc, routing, m), 0);
            }
        });
        return new Result(exact, round(exact, ((Store) epilogue).dtype()));
    }

    private static EpilogueEvaluator.Accumulators perSlot(double gate, double up) {
        return new EpilogueEvaluator.Accumulators() {
            @Override
            public int slots() {
                return 1;
            }

            @Override
            public double value(Acc acc, int slot) {
                return switch (acc.channel()) {
                    case GATE -> gate;
                    case UP -> up;
                    case MAIN -> throw new IllegalStateException("gate_up has no plain accumulator");
                };
            }

            @Override
            public double routingWeight(int slot) {
                throw new IllegalStateException("gate_up does not combine");
            }
        };
    }

    private static EpilogueEvaluator.Accumulators perToken(double[] acc, Routing routing, int m) {
        return new EpilogueEvaluator.Accumulators() {
            @Override
            public int slots() {
                return acc.length;
            }

            @Override
            public double value(Acc a, int slot) {
                return acc[slot];
            }

            @Override
            public double routingWeight(int slot) {
                return routing.weight(m, slot);
            }
        };
    }

    private static short[] round(double[] values, DType type) {
        if (type != DType.BF16) {
            throw new IllegalArgumentException("the expert reference stores bf16, not " + type.text());
        }
        short[] out = new short[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = Bf16.fromDouble(values[i]);
        }
        return out;
    }

    private static void checkInputs(ExpertShape s, boolean bias, Routing routing, WeightRows w, int rows,
                                    int rowLength) {
        if (bias != w.hasBias()) {
            throw new IllegalArgumentException(bias ? "the spec has bias=true but the weights carry no bias (WeightRows.withBias)"
                    : "the weights carry a bias but the spec has none (bias=true)");
        }
        if (routing.topk() != s.topk()) {
            throw new IllegalArgumentException("routing has top-" + routing.topk() + ", the spec top-" + s.topk());
        }
        routing.checkedFor(s.experts());
        if (w.experts() != s.experts() || w.rows() != rows || w.rowLength() != rowLength) {
            throw new IllegalArgumentException("weights are [" + w.experts() + ", " + w.rows() + ", " + w.rowLength()
                    + "], the spec needs [" + s.experts() + ", " + rows + ", " + rowLength + "]");
        }
    }

    private static void requireLength(String name, int length, long expected) {
        if (length != expected) {
            throw new IllegalArgumentException(name + " has " + length + " elements, expected " + expected);
        }
    }

    private static double[] widen(short[] bf16, int offset, int length) {
        double[] out = new double[length];
        for (int i = 0; i < length; i++) {
            out[i] = Bf16.toFloat(bf16[offset + i]);
        }
        return out;
    }

    private static double dot(double[] a, double[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) {
            s += a[i] * b[i];
        }
        return s;
    }
}
