package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.text.SpecPrinter;

/**
 * The host twin of the expert kernels' epilogue nodes, in FP64. Per-slot nodes read the
 * accumulators of the current slot; {@code combine} sums its input over all of the token's slots
 * with their routing weights. {@code store} returns its input unrounded; the caller rounds to the
 * stored type. Router nodes (rows and top-k selections) are {@link RouterReference}'s.
 */
public final class EpilogueEvaluator {

    /** The accumulators of one output position, per routed slot. */
    public interface Accumulators {
        int slots();

        double value(Acc acc, int slot);

        double routingWeight(int slot);
    }

    private EpilogueEvaluator() {}

    public static double evaluate(EpilogueNode node, Accumulators accs, int slot) {
        return switch (node) {
            case Acc a -> accs.value(a, slot);
            case GatedActivation g -> {
                double gate = evaluate(g.gate(), accs, slot);
                double up = evaluate(g.up(), accs, slot);
                yield switch (g.function()) {
                    case GateFunction.Silu _ -> silu(gate) * up;
                    case GateFunction.ClampedSwiglu _ -> clampedSwiglu(gate, up);
                };
            }
            case Combine c -> {
                double sum = 0;
                for (int j = 0; j < accs.slots(); j++) {
                    sum += accs.routingWeight(j) * evaluate(c.input(), accs, j);
                }
                yield sum;
            }
            case Add a -> evaluate(a.left(), accs, slot) + evaluate(a.right(), accs, slot);
            case Scale s -> evaluate(s.input(), accs, slot) * s.factor();
            case Sigmoid s -> sigmoid(evaluate(s.input(), accs, slot));
            case Store s -> evaluate(s.input(), accs, slot);
            case RowParam _, Softmax _, TopK _, Renormalize _, Dense _ -> throw new IllegalStateException(
                    "router node " + SpecPrinter.printEpilogue(node) + " in an expert epilogue; "
                            + "the type checker rejects such trees");
        };
    }

    static double silu(double g) {
        return g / (1.0 + Math.exp(-g));
    }

    static double clampedSwiglu(double gate, double up) {
        double limit = GateFunction.ClampedSwiglu.LIMIT;
        double g = gate > limit ? limit : gate;
        double u = up > limit ? limit : up < -limit ? -limit : up;
        return (u + 1) * g * sigmoid(GateFunction.ClampedSwiglu.ALPHA * g);
    }

    static double sigmoid(double x) {
        return 1.0 / (1.0 + Math.exp(-x));
    }
}
