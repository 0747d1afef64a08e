package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.schedule.TreeEvaluation;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * Turns a router's epilogue tree into straight-line CUDA over the token's row of scores: one
 * {@code const} temporary per distinct subtree ({@code mf::Row<Config::kExperts>} or {@code mf::TopK<k>}),
 * named {@code v0, v1, ...} in post-order, ending in the store. Equal subtrees share one temporary
 * (DeepSeek-V3's {@code sigmoid(acc)} is computed once).
 */
public final class RouterEpilogueEmitter {

    private final String scores;
    private final TreeEvaluation.Mode evaluation;
    private final List<String> lines = new ArrayList<>();
    private final Map<EpilogueNode, String> bound = new HashMap<>();
    private int next;

    private RouterEpilogueEmitter(String scores, TreeEvaluation.Mode evaluation) {
        this.scores = scores;
        this.evaluation = evaluation;
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
     * The tree under {@code evaluation}: its mode says who evaluates a token's row (one warp of the
     * block with a shared selection scratch, {@code mf::select_top}; every warp its own rows,
     * {@code mf::select_top_rounds}; or every warp of the block its group of experts, warp w the
     * group [w kSlice, (w + 1) kSlice) as a {@code mf::Row<kSlice>}, the top-k within the groups,
     * then warp 0 among the kept groups' candidates, {@code mf::block_topk}); its scores expression
     * loads the token's row (with BLOCK_GROUPS the warp's group from {@code slice} on).
     */
    public static Code emit(Store root, boolean expertCounts, TreeEvaluation treeEvaluation) {
        TreeEvaluation.Mode evaluation = treeEvaluation.mode();
        RouterEpilogueEmitter e = new RouterEpilogueEmitter(treeEvaluation.scores(), evaluation);
        switch (evaluation) {
            case ONE_WARP -> {
                if (RouterTrees.hasTopK(root)) {
                    e.lines.add("__shared__ mf::TopKScratch topk_scratch;  // the top-k's candidates");
                }
            }
            case WARP_PER_ROW -> { }
            case BLOCK_GROUPS -> {
                e.lines.add("__shared__ mf::BlockTopKScratch<" + RouterTrees.storedTopK(root).getAsInt()
                        + ", Config::kWarpsPerCta> topk_scratch;  // the warps' candidates");
                e.lines.add("const int slice = (threadIdx.x >> 5) * Config::kSlice;  // this warp's group of experts");
            }
        }
        // the row parameters first: they do not depend on the scores, so their loads are in flight
        // while the decode routers' tail block awaits the scores
        for (String row : RouterTrees.rowParams(root.input())) {
            e.value(new RowParam(row));
        }
        String value = e.value(root.input());
        OptionalInt k = RouterTrees.storedTopK(root);
        List<String> stores = new ArrayList<>();
        stores.add(k.isPresent()
                ? "mf::store_topk(" + value + ", topk_weights + static_cast<size_t>(token) * " + k.getAsInt()
                        + ", topk_ids + static_cast<size_t>(token) * " + k.getAsInt() + ");"
                : "mf::store_row(" + value + ", router_out + static_cast<size_t>(token) * Config::kExperts);");
        if (expertCounts) {
            // the tiled router's blocks gather their rows' counts in shared memory (its template flushes them)
            stores.add("mf::count_experts(" + value + (evaluation == TreeEvaluation.Mode.WARP_PER_ROW ? ", block_counts);" : ", expert_counts);"));
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
            case RowParam p -> evaluation == TreeEvaluation.Mode.BLOCK_GROUPS
                    ? "mf::load_row<Config::kSlice>(" + p.name() + " + slice)" : "mf::load_row<Config::kExperts>(" + p.name() + ")";
            case Add a -> "mf::add(" + value(a.left()) + ", " + value(a.right()) + ")";
            case Scale s -> "mf::scale(" + value(s.input()) + ", " + floatLiteral(s.factor()) + ")";
            case Sigmoid s -> "mf::sigmoid(" + value(s.input()) + ")";
            case Softmax s -> s.input() instanceof TopK t && t.by().isEmpty()
                    // a selection of its own scores is best first: the maximum is lane 0's
                    ? "mf::softmax_best_first(" + value(t) + ")"
                    : "mf::softmax(" + value(s.input()) + ")";
            case TopK t -> {
                String input = value(t.input());
                String by = t.by().map(this::value).orElse(input);
                yield evaluation == TreeEvaluation.Mode.BLOCK_GROUPS
                        ? "mf::block_topk<" + t.k() + ", " + t.groups() + ", " + t.topkGroups() + ", Config::kSlice, Config::kWarpsPerCta>("
                                + by + ", " + input + ", topk_scratch)"
                        : "mf::topk<" + t.k() + ", " + t.groups() + ", " + t.topkGroups() + ">(" + by + ", " + input
                                + scratchArgument() + ")";
            }
            // softmax is monotone and its normaliser cancels: the softmax of the best k
            case Renormalize r -> softmaxThenTopK(r.input())
                    .map(t -> "mf::softmax_topk<" + t.k() + ">(" + value(((Softmax) t.input()).input()) + scratchArgument() + ")")
                    .orElseGet(() -> "mf::renormalize(" + value(r.input()) + ")");
            case Dense d -> "mf::dense<Config::kExperts>(" + value(d.input()) + ")";
            case Store _, GatedActivation _, Combine _ -> throw new IllegalStateException(
                    SpecPrinter.printEpilogue(node) + " cannot appear inside a router tree; the type checker rejects it");
        };
        String type = RouterTrees.topKOf(node).isPresent()
                ? "mf::TopK<" + RouterTrees.topKOf(node).getAsInt() + ">"
                : evaluation == TreeEvaluation.Mode.BLOCK_GROUPS ? "mf::Row<Config::kSlice>" : "mf::Row<Config::kExperts>";
        String name = "v" + next++;
        lines.add("const " + type + " " + name + " = " + expr + ";");
        if (node instanceof TopK && evaluation == TreeEvaluation.Mode.BLOCK_GROUPS) {
            lines.add("if (threadIdx.x >= 32) return;  // warp 0 holds the selection and finishes the tree");
        }
        bound.put(node, name);
        return name;
    }

    private String scratchArgument() {
        return evaluation == TreeEvaluation.Mode.ONE_WARP ? ", &topk_scratch" : "";
    }

    /**
     * {@code topk(softmax(x), k)} without groups or {@code by=}, whose renormalisation
     * {@code mf::softmax_topk} computes as the softmax of x's k best (the same selection and, up to
     * rounding, the same weights; a row with a NaN or +inf gives NaN at experts 0..k-1 either way).
     */
    private static Optional<TopK> softmaxThenTopK(EpilogueNode node) {
        return node instanceof TopK t && t.groups() == 1 && t.by().isEmpty() && t.input() instanceof Softmax
                ? Optional.of(t) : Optional.empty();
    }

    /** The FP32 literal of a factor, e.g. {@code 2.5f}. */
    static String floatLiteral(double v) {
        String s = Float.toString((float) v);
        return s + "f";
    }
}
