package dev.moeforge.dsl.text;

import dev.moeforge.dsl.ir.ExpertShape;
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
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.ScheduleKind;
import java.util.List;
import java.util.Locale;
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
                + "  schedule " + printSchedule(spec.schedule()) + "\n"
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
            case Scale s -> "scale(" + printEpilogue(s.input()) + ", " + number(s.factor()) + ")";
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

    /**
     * A scale factor as the textual form writes it: an integer without a decimal point, else Java's
     * shortest repeatable digits. -0 keeps its sign, which the kernels' FP32 product keeps too.
     */
    public static String number(double v) {
        if (Double.doubleToRawLongBits(v) == Double.doubleToRawLongBits(-0.0)) {
            return "-0";
        }
        if (v == Math.rint(v) && Math.abs(v) < 1e15) {
            return Long.toString((long) v);
        }
        return Double.toString(v).toLowerCase(Locale.ROOT);
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
                    + ", expert_counts=" + r.expertCounts() + inputNorm(r) + ")";
            case Problem.Linear l -> "linear(inputs=" + l.inputs() + ", outputs=" + l.outputs() + ", " + formats
                    + (l.bias() ? ", bias=true" : "") + inputNorm(l) + ")";
        };
    }

    /** {@code , input_norm=add_rms_norm(...)} where the problem has one (absent: rows read as given). */
    private static String inputNorm(Problem p) {
        return p.inputNorm().map(n -> ", input_norm=add_rms_norm(addend=" + n.addend().text() + ", eps=" + number(n.eps()) + ")")
                .orElse("");
    }

    private static String bias(Problem.ExpertProblem p) {
        return p.bias() ? ", bias=true" : "";
    }

    private static String expertShape(ExpertShape s) {
        return "hidden=" + s.hidden() + ", intermediate=" + s.intermediate() + ", experts=" + s.experts() + ", topk=" + s.topk();
    }

    /** {@code kind(param=value, ...)}: every parameter of the kind, in declared order. */
    public static String printSchedule(Schedule<?> schedule) {
        ScheduleKind<?, ?> kind = schedule.kind();
        List<Object> values = kind.values(schedule);
        StringBuilder b = new StringBuilder(kind.name()).append('(');
        for (int i = 0; i < values.size(); i++) {
            b.append(i == 0 ? "" : ", ").append(kind.params().get(i).name()).append('=').append(values.get(i));
        }
        return b.append(')').toString();
    }
}
