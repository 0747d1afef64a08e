package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Map;
import java.util.stream.IntStream;

/**
 * The CPU oracle of a router spec, in FP64: the scores {@code acc[e] = W_r[e] . x[m]} from the
 * decoded weights, then the epilogue tree on rows and top-k selections (the host twin of every
 * router node). Ties go to the lower expert id; NaN ranks below every number.
 */
public final class RouterReference {

    /** A value of a router tree: a row of E scores, or k selected experts with their values. */
    public sealed interface Value permits Row, Selection {}

    public record Row(double[] values) implements Value {}

    /** Selected expert ids and their values, best first. */
    public record Selection(int[] ids, double[] values) implements Value {}

    /**
     * The router's output per token: the FP64 scores, and the stored routing table (a compact top-k
     * or a dense row), exact and rounded to the stored type.
     */
    public record Result(double[][] scores, Value[] exact, Value[] stored) {}

    private RouterReference() {}

    /**
     * Runs {@code spec} (a router) on {@code x [M][H]} bf16 with router weights {@code w [E][H]} and the
     * named per-expert vectors of its {@code row(...)} nodes.
     */
    public static Result run(KernelSpec spec, short[] x, WeightRows w, Map<String, float[]> rowParams) {
        Problem.Router r = (Problem.Router) spec.problem();
        if (w.experts() != 1 || w.rows() != r.experts() || w.rowLength() != r.hidden()) {
            throw new IllegalArgumentException("router weights are [" + w.experts() + ", " + w.rows() + ", " + w.rowLength()
                    + "], the spec needs [1, " + r.experts() + ", " + r.hidden() + "] (one matrix of E rows)");
        }
        if (x.length % r.hidden() != 0 || x.length == 0) {
            throw new IllegalArgumentException("x has " + x.length + " elements, not a whole number of rows of " + r.hidden());
        }
        for (Map.Entry<String, float[]> p : rowParams.entrySet()) {
            if (p.getValue().length != r.experts()) {
                throw new IllegalArgumentException("row(" + p.getKey() + ") has " + p.getValue().length + " values, the router "
                        + r.experts() + " experts");
            }
        }
        int m = x.length / r.hidden();
        double[][] rows = new double[r.experts()][];
        for (int e = 0; e < r.experts(); e++) {
            rows[e] = new double[r.hidden()];
            w.decode(0, e, rows[e]);
        }
        double[][] scores = new double[m][r.experts()];
        Value[] exact = new Value[m];
        Value[] stored = new Value[m];
        DType type = ((Store) spec.epilogue()).dtype();
        IntStream.range(0, m).parallel().forEach(t -> {
            for (int e = 0; e < r.experts(); e++) {
                double s = 0;
                for (int h = 0; h < r.hidden(); h++) {
                    s += rows[e][h] * Bf16.toFloat(x[t * r.hidden() + h]);
                }
                scores[t][e] = s;
            }
            exact[t] = evaluate(spec.epilogue(), scores[t], rowParams);
            stored[t] = round(exact[t], type);
        });
        return new Result(scores, exact, stored);
    }

    /** The host twin of every router node. */
    public static Value evaluate(EpilogueNode node, double[] acc, Map<String, float[]> params) {
        return switch (node) {
            case Acc _ -> new Row(acc.clone());
            case RowParam p -> {
                float[] v = params.get(p.name());
                if (v == null) {
                    throw new IllegalArgumentException("no values given for row(" + p.name() + ")");
                }
                yield new Row(IntStream.range(0, v.length).mapToDouble(i -> v[i]).toArray());
            }
            case Add a -> {
                double[] l = row(evaluate(a.left(), acc, params));
                double[] r = row(evaluate(a.right(), acc, params));
                yield new Row(IntStream.range(0, l.length).mapToDouble(i -> l[i] + r[i]).toArray());
            }
            case Scale s -> map(evaluate(s.input(), acc, params), v -> v * s.factor());
            case Sigmoid s -> map(evaluate(s.input(), acc, params), EpilogueEvaluator::sigmoid);
            case Softmax s -> switch (evaluate(s.input(), acc, params)) {
                case Row(double[] v) -> new Row(softmax(v));
                case Selection(int[] ids, double[] v) -> new Selection(ids, softmax(v));
            };
            case TopK t -> {
                double[] values = row(evaluate(t.input(), acc, params));
                double[] by = t.by().map(b -> row(evaluate(b, acc, params))).orElse(values);
                int[] ids = select(by, t.k(), t.groups(), t.topkGroups());
                yield new Selection(ids, Arrays.stream(ids).mapToDouble(i -> values[i]).toArray());
            }
            case Renormalize r -> {
                Selection s = (Selection) evaluate(r.input(), acc, params);
                double sum = Arrays.stream(s.values()).sum();
                yield new Selection(s.ids(), Arrays.stream(s.values()).map(v -> v / sum).toArray());
            }
            case Dense d -> {
                Selection s = (Selection) evaluate(d.input(), acc, params);
                double[] out = new double[acc.length];
                for (int j = 0; j < s.ids().length; j++) {
                    out[s.ids()[j]] = s.values()[j];
                }
                yield new Row(out);
            }
            case Store s -> evaluate(s.input(), acc, params);
            case GatedActivation _, Combine _ -> throw new IllegalStateException("expert node "
                    + SpecPrinter.printEpilogue(node) + " in a router epilogue; the type checker rejects such trees");
        };
    }

    /**
     * The k experts with the highest scores, best first; ties to the lower id; NaN below every
     * number. With groups > 1: each group of E / groups consecutive experts scores the sum of its
     * two best, the topkGroups best groups (ties to the lower group) are kept, and the k are chosen
     * among their experts.
     */
    public static int[] select(double[] scores, int k, int groups, int topkGroups) {
        int e = scores.length;
        boolean[] allowed = new boolean[e];
        if (groups <= 1) {
            Arrays.fill(allowed, true);
        } else {
            int size = e / groups;
            double[] groupScore = new double[groups];
            for (int g = 0; g < groups; g++) {
                int[] best = best(Arrays.copyOfRange(scores, g * size, (g + 1) * size), 2, null);
                groupScore[g] = scores[g * size + best[0]] + scores[g * size + best[1]];
            }
            for (int g : best(groupScore, topkGroups, null)) {
                Arrays.fill(allowed, g * size, (g + 1) * size, true);
            }
        }
        return best(scores, k, allowed);
    }

    /** The k best indices of {@code v} among the allowed ones (all when null). */
    private static int[] best(double[] v, int k, boolean[] allowed) {
        Comparator<Integer> order = (a, b) -> {
            boolean na = Double.isNaN(v[a]);
            boolean nb = Double.isNaN(v[b]);
            if (na != nb) {
                return na ? 1 : -1;  // NaN ranks last
            }
            int c = na ? 0 : Double.compare(v[b], v[a]);
            return c != 0 ? c : Integer.compare(a, b);
        };
        return IntStream.range(0, v.length).filter(i -> allowed == null || allowed[i]).boxed().sorted(order)
                .limit(k).mapToInt(Integer::intValue).toArray();
    }

    private static double[] softmax(double[] v) {
        double max = Arrays.stream(v).max().orElse(0);
        double[] out = Arrays.stream(v).map(x -> Math.exp(x - max)).toArray();
        double sum = Arrays.stream(out).sum();
        return Arrays.stream(out).map(x -> x / sum).toArray();
    }

    private static double[] row(Value v) {
        return switch (v) {
            case Row(double[] values) -> values;
            case Selection s -> throw new IllegalStateException("expected a row, got a selection of " + s.ids().length);
        };
    }

    private static Value map(Value v, java.util.function.DoubleUnaryOperator f) {
        return switch (v) {
            case Row(double[] values) -> new Row(Arrays.stream(values).map(f).toArray());
            case Selection(int[] ids, double[] values) -> new Selection(ids, Arrays.stream(values).map(f).toArray());
        };
    }

    private static Value round(Value v, DType type) {
        java.util.function.DoubleUnaryOperator r = switch (type) {
            case FP32 -> x -> (float) x;
            case BF16 -> x -> Bf16.toFloat(Bf16.fromDouble(x));
            case FP16, INT32, U8 -> throw new IllegalArgumentException("a router stores fp32 or bf16, not " + type.text());
        };
        return map(v, r);
    }
}
