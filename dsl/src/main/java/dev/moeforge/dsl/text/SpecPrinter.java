package dev.moeforge.dsl.text;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
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
import java.util.List;
import java.util.stream.Collectors;

/**
 * Writes the canonical text of specs, which {@link SpecParser} reads back to an equal spec: every
 * argument in declared order, by name for problems and schedules, positionally for epilogue nodes
 * (except {@code dtype}). Equal specs give the same bytes, whatever the default locale.
 */
public final class SpecPrinter {
    private SpecPrinter() {}

    public static String print(KernelSpec spec) {
        return "kernel " + spec.name() + " {\n"
                + "  problem " + problem(spec.problem()) + "\n"
                + "  schedule " + schedule(spec.schedule()) + "\n"
                + "  epilogue " + printEpilogue(spec.epilogue()) + "\n"
                + "  target " + spec.target().text() + "\n"
                + "}\n";
    }

    /** The specs, one blank line between two. */
    public static String printAll(List<KernelSpec> specs) {
        return specs.stream().map(SpecPrinter::print).collect(Collectors.joining("\n"));
    }

    public static String printEpilogue(EpilogueNode node) {
        return switch (node) {
            case Acc a -> switch (a.channel()) {
                case MAIN -> "acc";
                case GATE, UP -> "acc(" + a.channel().text() + ")";
            };
            case GatedActivation g -> "gated(" + g.function().text() + ", " + printEpilogue(g.gate()) + ", "
                    + printEpilogue(g.up()) + ")";
            case Combine c -> "combine(" + printEpilogue(c.input()) + ")";
            case Store s -> "store(" + printEpilogue(s.input()) + ", dtype=" + s.dtype().text() + ")";
            case RowParam p -> "row(" + p.name() + ")";
            case Add a -> "add(" + printEpilogue(a.left()) + ", " + printEpilogue(a.right()) + ")";
            case Scale s -> "scale(" + printEpilogue(s.input()) + ", " + EpilogueTypes.number(s.factor()) + ")";
            case Sigmoid s -> "sigmoid(" + printEpilogue(s.input()) + ")";
            case Softmax s -> "softmax(" + printEpilogue(s.input()) + ")";
            // the group limit is printed only when there is one (its default is no limit)
            case TopK t -> "topk(" + printEpilogue(t.input()) + ", " + t.k()
                    + (t.groups() != 1 || t.topkGroups() != 1 ? ", groups=" + t.groups() + ", topk_groups=" + t.topkGroups() : "")
                    + t.by().map(b -> ", by=" + printEpilogue(b)).orElse("") + ")";
            case Renormalize r -> "renormalize(" + printEpilogue(r.input()) + ")";
            case Dense d -> "dense(" + printEpilogue(d.input()) + ")";
        };
    }

    private static String problem(Problem problem) {
        // ints concatenate through Integer.toString, which ignores the locale
        String formats = "weights=" + problem.weights().text() + ", activations=" + problem.activations().text();
        return switch (problem) {
            // bias is printed only when there is one (its default is none), so biasless specs keep their text
            case Problem.ExpertGateUp g -> "expert_gate_up(" + expertShape(g.shape()) + ", " + formats
                    + ", layout=" + g.layout().text() + bias(g) + ")";
            case Problem.ExpertDown d -> "expert_down(" + expertShape(d.shape()) + ", " + formats + bias(d) + ")";
            case Problem.ExpertMlp m -> "expert_mlp(" + expertShape(m.shape()) + ", " + formats + ", layout=" + m.layout().text() + ")";
            case Problem.Router r -> "router(hidden=" + r.hidden() + ", experts=" + r.experts() + ", " + formats
                    + ", expert_counts=" + r.expertCounts() + ")";
        };
    }

    private static String bias(Problem.ExpertProblem p) {
        return p.bias() ? ", bias=true" : "";
    }

    private static String expertShape(ExpertShape s) {
        return "hidden=" + s.hidden() + ", intermediate=" + s.intermediate() + ", experts=" + s.experts() + ", topk=" + s.topk();
    }

    private static String schedule(Schedule schedule) {
        return switch (schedule) {
            case Schedule.OutputCentric oc -> "output_centric(warps_per_cta=" + oc.warpsPerCta()
                    + ", load_bytes=" + oc.loadBytes() + ", k_unroll=" + oc.kUnroll()
                    + ", tokens_per_cta=" + oc.tokensPerCta() + ", warps_per_output=" + oc.warpsPerOutput()
                    + ", min_blocks_per_sm=" + oc.minBlocksPerSm() + ")";
            case Schedule.OutputTensorCore tc -> "output_tensor_core(warps_per_cta=" + tc.warpsPerCta() + ", k_unroll="
                    + tc.kUnroll() + ", warps_per_tile=" + tc.warpsPerTile() + ", min_blocks_per_sm=" + tc.minBlocksPerSm() + ")";
            case Schedule.SplitDown sd -> "split_down(warps_per_cta=" + sd.warpsPerCta() + ", k_unroll=" + sd.kUnroll()
                    + ", warps_per_tile=" + sd.warpsPerTile() + ", min_blocks_per_sm=" + sd.minBlocksPerSm()
                    + ", order_loads=" + sd.orderLoads() + ")";
            case Schedule.RouterGemv g -> "router_gemv(warps_per_cta=" + g.warpsPerCta() + ", load_bytes=" + g.loadBytes()
                    + ", k_unroll=" + g.kUnroll() + ", experts_per_cta=" + g.expertsPerCta() + ")";
            case Schedule.RouterCluster c -> "router_cluster(cluster_size=" + c.clusterSize() + ", warps_per_cta="
                    + c.warpsPerCta() + ", load_bytes=" + c.loadBytes() + ", k_unroll=" + c.kUnroll() + ")";
            case Schedule.RouterTiled t -> "router_tiled(tokens_per_cta=" + t.tokensPerCta() + ", tokens_per_warp="
                    + t.tokensPerWarp() + ", warps_per_cta=" + t.warpsPerCta() + ", k_tile=" + t.kTile() + ", stages="
                    + t.stages() + ", k_groups=" + t.kGroups() + ", cluster_split=" + t.clusterSplit() + ")";
        };
    }
}
