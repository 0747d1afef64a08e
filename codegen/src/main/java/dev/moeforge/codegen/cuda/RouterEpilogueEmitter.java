package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.check.EpilogueTypes;
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
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;

/**
 * Turns a router's epilogue tree into straight-line CUDA run by one warp over the token's row of
 * scores: one {@code const} temporary per distinct subtree ({@code mf::Row<kExperts>} or
 * {@code mf::TopK<k>}), named {@code v0, v1, ...} in post-order, ending in the store. Equal
 * subtrees share one temporary (DeepSeek-V3's {@code sigmoid(acc)} is computed once).
 */
public final class RouterEpilogueEmitter {
    private final String scores;
    private final boolean oneWarp;
    private final List<String> lines = new ArrayList<>();
    private final Map<EpilogueNode, String> bound = new HashMap<>();
    private int next;

    private RouterEpilogueEmitter(String scores, boolean oneWarp) {
        this.scores = scores;
        this.oneWarp = oneWarp;
    }

    /**
     * The tree as CUDA: {@code values}, one const temporary per distinct subtree, then
     * {@code stores}, which write the token's outputs (a template may guard them).
     */
    public record Code(List<String> values, List<String> stores) {
        public Code {
            values = List.copyOf(values);
            stores = List.copyOf(stores);
        }
    }

    /**
     * {@code scores}: the expression that loads the token's row of scores (global or shared memory).
     * {@code oneWarp}: one warp of the block evaluates the tree (the decode routers), so its top-k
     * selections may use a block-wide shared scratch ({@code mf::select_top}); otherwise every warp
     * evaluates rows and they take {@code mf::select_top_rounds}.
     */
    public static Code emit(Store root, boolean expertCounts, String scores, boolean oneWarp) {
        RouterEpilogueEmitter e = new RouterEpilogueEmitter(scores, oneWarp);
        if (oneWarp && RouterTrees.hasTopK(root)) {
            e.lines.add("__shared__ mf::TopKScratch topk_scratch;  // the top-k's candidates");
        }
        String value = e.value(root.input());
        OptionalInt k = RouterTrees.storedTopK(root);
        List<String> stores = new ArrayList<>();
        stores.add(k.isPresent()
                ? "mf::store_topk(" + value + ", topk_weights + static_cast<size_t>(token) * " + k.getAsInt()
                        + ", topk_ids + static_cast<size_t>(token) * " + k.getAsInt() + ");"
                : "mf::store_row(" + value + ", router_out + static_cast<size_t>(token) * kExperts);");
        if (expertCounts) {
            stores.add("mf::count_experts(" + value + ", expert_counts);");
        }
        return new Code(e.lines, stores);
    }

    private String value(EpilogueNode node) {
        String known = bound.get(node);
        if (known != null) {
            return known;
        }
        String expr = switch (node) {
            case Acc _ -> scores;
            case RowParam p -> "mf::load_row<kExperts>(" + p.name() + ")";
            case Add a -> "mf::add(" + value(a.left()) + ", " + value(a.right()) + ")";
            case Scale s -> "mf::scale(" + value(s.input()) + ", " + floatLiteral(s.factor()) + ")";
            case Sigmoid s -> "mf::sigmoid(" + value(s.input()) + ")";
            case Softmax s -> "mf::softmax(" + value(s.input()) + ")";
            case TopK t -> {
                String input = value(t.input());
                String by = t.by().map(this::value).orElse(input);
                yield "mf::topk<" + t.k() + ", " + t.groups() + ", " + t.topkGroups() + ">(" + by + ", " + input
                        + (oneWarp ? ", &topk_scratch" : "") + ")";
            }
            case Renormalize r -> "mf::renormalize(" + value(r.input()) + ")";
            case Dense d -> "mf::dense<kExperts>(" + value(d.input()) + ")";
            case Store _, GatedActivation _, Combine _ -> throw new IllegalStateException(
                    EpilogueTypes.describe(node) + " cannot appear inside a router tree; the type checker rejects it");
        };
        String type = RouterTrees.topKOf(node).isPresent()
                ? "mf::TopK<" + RouterTrees.topKOf(node).getAsInt() + ">" : "mf::Row<kExperts>";
        String name = "v" + next++;
        lines.add("const " + type + " " + name + " = " + expr + ";");
        bound.put(node, name);
        return name;
    }

    /** The FP32 literal of a factor, e.g. {@code 2.5f}. */
    static String floatLiteral(double v) {
        String s = Float.toString((float) v);
        return s + "f";
    }
}
