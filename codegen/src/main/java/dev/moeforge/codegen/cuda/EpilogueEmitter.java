package dev.moeforge.codegen.cuda;

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
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Turns an epilogue tree into straight-line CUDA over FP32 values: one {@code const float}
 * temporary per computing node, named {@code v0, v1, ...} in post-order, ending in a
 * {@code return}. Values the schedule computes itself (the accumulators, and a combine that the
 * schedule folds into its accumulator) are passed in as bound parameter names.
 */
public final class EpilogueEmitter {
    private final Map<EpilogueNode, String> bound;
    private final List<String> lines = new ArrayList<>();
    private int next;

    private EpilogueEmitter(Map<EpilogueNode, String> bound) {
        this.bound = bound;
    }

    /** The body lines of the epilogue functor for the tree rooted at {@code root}. */
    public static List<String> emit(EpilogueNode root, Map<EpilogueNode, String> bound) {
        EpilogueEmitter e = new EpilogueEmitter(bound);
        String result = e.value(root);
        e.lines.add("return " + result + ";");
        return List.copyOf(e.lines);
    }

    private String value(EpilogueNode node) {
        String given = bound.get(node);
        if (given != null) {
            return given;
        }
        return switch (node) {
            case Acc a -> throw new IllegalStateException("accumulator " + SpecPrinter.printEpilogue(a) + " is not bound by the schedule");
            case Combine c -> throw new IllegalStateException(SpecPrinter.printEpilogue(c) + " must be folded by the schedule");
            case GatedActivation g -> {
                String gate = value(g.gate());
                String up = value(g.up());
                String expr = switch (g.function()) {
                    case GateFunction.Silu _ -> "mf::silu(" + gate + ") * " + up;
                    case GateFunction.ClampedSwiglu _ -> "mf::clamped_swiglu(" + gate + ", " + up + ")";
                };
                yield let(expr, SpecPrinter.printEpilogue(g));
            }
            case Add a -> {
                String l = value(a.left());
                String r = value(a.right());
                yield let(l + " + " + r, SpecPrinter.printEpilogue(a));
            }
            case Scale s -> let(value(s.input()) + " * " + RouterEpilogueEmitter.floatLiteral(s.factor()), SpecPrinter.printEpilogue(s));
            case Sigmoid s -> let("mf::sigmoid(" + value(s.input()) + ")", SpecPrinter.printEpilogue(s));
            // the schedule rounds to the stored type; the functor returns the FP32 value
            case Store s -> value(s.input());
            case RowParam _, Softmax _, TopK _, Renormalize _, Dense _ -> throw new IllegalStateException(
                    "router node " + SpecPrinter.printEpilogue(node) + " in an expert epilogue; the type checker rejects it");
        };
    }

    private String let(String expr, String comment) {
        String name = "v" + next++;
        lines.add("const float " + name + " = " + expr + ";  // " + comment);
        return name;
    }
}
