package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;

/**
 * The host twin of every epilogue node, in FP64. Per-slot nodes read the accumulators of the
 * current slot; {@code combine} sums its input over all of the token's slots with their routing
 * weights. {@code store} returns its input unrounded; the caller rounds to the stored type.
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
                };
            }
            case Combine c -> {
                double sum = 0;
                for (int j = 0; j < accs.slots(); j++) {
                    sum += accs.routingWeight(j) * evaluate(c.input(), accs, j);
                }
                yield sum;
            }
            case Store s -> evaluate(s.input(), accs, slot);
        };
    }

    static double silu(double g) {
        return g / (1.0 + Math.exp(-g));
    }
}
