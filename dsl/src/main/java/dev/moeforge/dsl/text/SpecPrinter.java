package dev.moeforge.dsl.text;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
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
        };
    }

    private static String problem(Problem problem) {
        ExpertShape s = problem.shape();
        // ints concatenate through Integer.toString, which ignores the locale
        String common = "hidden=" + s.hidden() + ", intermediate=" + s.intermediate() + ", experts=" + s.experts()
                + ", topk=" + s.topk() + ", weights=" + problem.weights().text()
                + ", activations=" + problem.activations().text();
        return switch (problem) {
            case Problem.ExpertGateUp g -> "expert_gate_up(" + common + ", layout=" + g.layout().text() + ")";
            case Problem.ExpertDown _ -> "expert_down(" + common + ")";
        };
    }

    private static String schedule(Schedule schedule) {
        return switch (schedule) {
            case Schedule.OutputCentric oc -> "output_centric(warps_per_cta=" + oc.warpsPerCta()
                    + ", load_bytes=" + oc.loadBytes() + ", k_unroll=" + oc.kUnroll()
                    + ", tokens_per_cta=" + oc.tokensPerCta() + ", warps_per_output=" + oc.warpsPerOutput()
                    + ", min_blocks_per_sm=" + oc.minBlocksPerSm() + ")";
        };
    }
}
