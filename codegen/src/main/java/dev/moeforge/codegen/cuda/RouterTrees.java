package dev.moeforge.codegen.cuda;

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
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;

/** Facts about a (validated) router epilogue tree that the signature and the emitter share. */
public final class RouterTrees {
    private RouterTrees() {}

    /** The names of the tree's {@code row(...)} parameters, in order of first appearance (post-order). */
    public static List<String> rowParams(EpilogueNode root) {
        Set<String> names = new LinkedHashSet<>();
        collect(root, names);
        return List.copyOf(names);
    }

    private static void collect(EpilogueNode node, Set<String> names) {
        switch (node) {
            case RowParam p -> names.add(p.name());
            case Acc _ -> { }
            case Add a -> {
                collect(a.left(), names);
                collect(a.right(), names);
            }
            case Scale s -> collect(s.input(), names);
            case Sigmoid s -> collect(s.input(), names);
            case Softmax s -> collect(s.input(), names);
            case TopK t -> {
                collect(t.input(), names);
                t.by().ifPresent(b -> collect(b, names));
            }
            case Renormalize r -> collect(r.input(), names);
            case Dense d -> collect(d.input(), names);
            case Store s -> collect(s.input(), names);
            case GatedActivation _, Combine _ -> throw new IllegalStateException("not a router tree: "
                    + dev.moeforge.dsl.check.EpilogueTypes.describe(node));
        }
    }

    /** Whether the tree selects anywhere (a top-k, possibly under a dense scatter). */
    public static boolean hasTopK(EpilogueNode node) {
        return switch (node) {
            case TopK _ -> true;
            case Acc _, RowParam _ -> false;
            case Add a -> hasTopK(a.left()) || hasTopK(a.right());
            case Scale s -> hasTopK(s.input());
            case Sigmoid s -> hasTopK(s.input());
            case Softmax s -> hasTopK(s.input());
            case Renormalize r -> hasTopK(r.input());
            case Dense d -> hasTopK(d.input());
            case Store s -> hasTopK(s.input());
            case GatedActivation _, Combine _ -> throw new IllegalStateException("not a router tree: "
                    + dev.moeforge.dsl.check.EpilogueTypes.describe(node));
        };
    }

    /** The k of the stored top-k selection, or empty when the router stores a dense row. */
    public static OptionalInt storedTopK(Store store) {
        return topKOf(store.input());
    }

    /** The k of a node's top-k value, or empty when the node is a row. */
    public static OptionalInt topKOf(EpilogueNode node) {
        return selection(node).map(t -> OptionalInt.of(t.k())).orElse(OptionalInt.empty());
    }

    /** The top-k under a node's chain of selection-valued nodes, or empty when the node is a row. */
    public static Optional<TopK> selection(EpilogueNode node) {
        return switch (node) {
            case TopK t -> Optional.of(t);
            case Softmax s -> selection(s.input());
            case Renormalize r -> selection(r.input());
            case Scale s -> selection(s.input());
            case Sigmoid s -> selection(s.input());
            case Store s -> selection(s.input());
            case Acc _, RowParam _, Add _, Dense _, GatedActivation _, Combine _ -> Optional.empty();
        };
    }

    /** Whether a row is elementwise in the scores (acc, row, add, scale, sigmoid): each expert's value alone. */
    public static boolean elementwise(EpilogueNode node) {
        return switch (node) {
            case Acc _, RowParam _ -> true;
            case Add a -> elementwise(a.left()) && elementwise(a.right());
            case Scale s -> elementwise(s.input());
            case Sigmoid s -> elementwise(s.input());
            case Softmax _, TopK _, Renormalize _, Dense _, Store _, GatedActivation _, Combine _ -> false;
        };
    }
}
