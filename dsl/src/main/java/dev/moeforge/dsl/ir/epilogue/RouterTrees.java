package dev.moeforge.dsl.ir.epilogue;

import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;

/** Facts about a (validated) router epilogue tree that the signature, the schedules and the emitter share. */
public final class RouterTrees {
    private RouterTrees() {}

    /** The names of the tree's {@code row(...)} parameters, in order of first appearance (post-order). */
    public static List<String> rowParams(EpilogueNode root) {
        Set<String> names = new LinkedHashSet<>();
        collect(root, names);
        return List.copyOf(names);
    }

    private static void collect(EpilogueNode node, Set<String> names) {
        for (EpilogueNode child : node.children()) {
            collect(child, names);
        }
        if (node instanceof RowParam p) {
            names.add(p.name());
        }
    }

    /** Whether the tree selects anywhere (a top-k, possibly under a dense scatter). */
    public static boolean hasTopK(EpilogueNode node) {
        return node instanceof TopK || node.children().stream().anyMatch(RouterTrees::hasTopK);
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
            case Acc _, RowParam _, Add _, Scale _, Sigmoid _ -> node.children().stream().allMatch(RouterTrees::elementwise);
            case Softmax _, TopK _, Renormalize _, Dense _, Store _, GatedActivation _, Combine _ -> false;
        };
    }
}
