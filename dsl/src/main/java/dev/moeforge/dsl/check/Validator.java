package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.ScheduleKind;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * Checks a spec before any code is generated. Every rule names the field path, the value and what
 * is allowed; all problems are collected, not just the first. The problem's own rules live here,
 * the schedule's in its kind's {@link Schedule#check}, the epilogue's in {@link EpilogueTypes}.
 */
public final class Validator {
    private static final Pattern IDENTIFIER = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,99}");

    private Validator() {}

    /** Throws {@link SpecException} listing every problem of {@code spec}; returns it, paired, when valid. */
    public static ValidatedSpec<?> check(KernelSpec spec) {
        List<SpecError> errors = errors(spec);
        if (!errors.isEmpty()) {
            throw new SpecException(spec.name(), errors);
        }
        return pair(spec, spec.schedule()).orElseThrow();
    }

    public static List<SpecError> errors(KernelSpec spec) {
        List<SpecError> errors = new ArrayList<>();
        if (!IDENTIFIER.matcher(spec.name()).matches() || CudaNames.isReserved(spec.name())) {
            errors.add(new SpecError("name", "'" + spec.name() + "'",
                    "a C identifier: a letter or '_', then letters, digits or '_', at most 100 characters, not a C++ "
                            + "keyword and not a name reserved to the implementation ('__' or '_' and a capital first)"));
        }
        // every check of the epilogue recurses over its tree: a tree too deep is refused before any runs
        boolean epilogueShallow = checkDepth(spec.epilogue(), errors);
        errors.addAll(problemErrors(spec.problem()));
        checkSchedule(spec, spec.schedule(), epilogueShallow, errors);
        if (epilogueShallow) {
            EpilogueTypes.check(spec.problem(), spec.epilogue(), errors);
        }
        return errors;
    }

    /** Whether the epilogue is at most {@link Limits#MAX_NESTING_DEPTH} nodes deep; else records why not. */
    private static boolean checkDepth(EpilogueNode epilogue, List<SpecError> errors) {
        int depth = EpilogueTypes.depth(epilogue);
        if (depth <= Limits.MAX_NESTING_DEPTH) {
            return true;
        }
        errors.add(new SpecError("epilogue", "a tree " + depth + " nodes deep", "at most " + Limits.MAX_NESTING_DEPTH
                + " nodes from the root to the deepest leaf; fold repeated nodes (e.g. one scale by the product of the factors)"));
        return false;
    }

    /** The problem's own errors: sizes, formats and what its weights' scale blocks require. */
    public static List<SpecError> problemErrors(Problem problem) {
        List<SpecError> errors = new ArrayList<>();
        switch (problem) {
            case Problem.ExpertProblem p -> checkShape(p.shape(), errors);
            case Problem.ExpertMlp m -> checkShape(m.shape(), errors);
            case Problem.Router r -> {
                range(errors, "problem.hidden", r.hidden(), 1, Limits.MAX_DIMENSION);
                range(errors, "problem.experts", r.experts(), 1, Limits.MAX_EXPERTS);
                r.inputNorm().ifPresent(n -> checkInputNorm(n, r.hidden(), "problem.hidden", errors));
            }
            case Problem.Linear l -> {
                range(errors, "problem.inputs", l.inputs(), 1, Limits.MAX_DIMENSION);
                range(errors, "problem.outputs", l.outputs(), 1, Limits.MAX_LINEAR_OUTPUTS);
                l.inputNorm().ifPresent(n -> checkInputNorm(n, l.inputs(), "problem.inputs", errors));
            }
        }
        checkFormats(problem, errors);
        return errors;
    }

    /** What an input norm needs whatever the schedule: an addend of bf16 or fp32, eps in (0, 1), rows of whole loads. */
    private static void checkInputNorm(InputNorm n, int rowLength, String rowField, List<SpecError> errors) {
        if (n.addend() != DType.BF16 && n.addend() != DType.FP32) {
            errors.add(new SpecError(InputNorm.FIELD + ".addend", n.addend().text(), "bf16 or fp32 (what the residual branch stores)"));
        }
        if (!(n.eps() < 1 && (float) n.eps() >= Float.MIN_NORMAL)) {
            errors.add(new SpecError(InputNorm.FIELD + ".eps", Double.toString(n.eps()), "a number in (0, 1) that FP32 holds "
                    + "as a normal number (at least " + Float.MIN_NORMAL + "), e.g. 1e-06: the kernels add it in FP32"));
        }
        if (rowLength >= 1 && rowLength % InputNorm.ELEMENTS_PER_LOAD != 0) {
            errors.add(new SpecError(rowField, Integer.toString(rowLength), "a multiple of " + InputNorm.ELEMENTS_PER_LOAD
                    + " with input_norm: the norm reads and writes a row " + InputNorm.ELEMENTS_PER_LOAD + " elements at a time"));
        }
    }

    /** The schedule's rules, once it is known to lower this problem; else why not, with the kinds that do. */
    private static <P extends Problem> void checkSchedule(KernelSpec spec, Schedule<P> schedule, boolean epilogueShallow,
                                                          List<SpecError> errors) {
        ScheduleKind<?, P> kind = schedule.kind();
        if (!kind.lowers(spec.problem())) {
            List<String> takers = Schedule.kinds().stream().filter(k -> k.lowers(spec.problem())).map(ScheduleKind::name).toList();
            errors.add(new SpecError("schedule", kind.name(), kind.name() + " lowers "
                    + either(Problem.kindNames(kind.problemType())) + "; " + spec.problem().kindName() + " takes " + either(takers)));
            return;
        }
        P problem = kind.problemType().cast(spec.problem());
        if (problem.inputNorm().isPresent() && !kind.normsInputs()) {
            List<String> norming = Schedule.kinds().stream().filter(k -> k.lowers(problem) && k.normsInputs()).map(ScheduleKind::name).toList();
            errors.add(new SpecError(InputNorm.FIELD, "add_rms_norm", "absent under " + kind.name()
                    + ", which reads its rows as given: norm them in a kernel of their own, or lower the problem with "
                    + either(norming)));
        }
        schedule.check(problem, spec.target(), errors);
        if (epilogueShallow) {
            schedule.checkEpilogue(problem, spec.epilogue(), errors);
        }
    }

    private static <P extends Problem> Optional<ValidatedSpec<P>> pair(KernelSpec spec, Schedule<P> schedule) {
        Class<P> type = schedule.kind().problemType();
        if (!type.isInstance(spec.problem()) || !(spec.epilogue() instanceof Store store)) {
            return Optional.empty();
        }
        return Optional.of(new ValidatedSpec<>(spec, type.cast(spec.problem()), schedule, store));
    }

    private static void checkShape(ExpertShape s, List<SpecError> errors) {
        range(errors, "problem.hidden", s.hidden(), 1, Limits.MAX_DIMENSION);
        range(errors, "problem.intermediate", s.intermediate(), 1, Limits.MAX_DIMENSION);
        range(errors, "problem.experts", s.experts(), 1, Limits.MAX_EXPERTS);
        int maxTopk = Math.min(Limits.MAX_TOPK, Math.max(1, s.experts()));
        if (s.topk() < 1 || s.topk() > maxTopk) {
            errors.add(new SpecError("problem.topk", Integer.toString(s.topk()),
                    "1.." + maxTopk + " (at most the number of experts, " + s.experts() + ", and at most " + Limits.MAX_TOPK + ")"));
        }
    }

    private static void checkFormats(Problem problem, List<SpecError> errors) {
        switch (problem) {
            case Problem.Router r -> {
                if (!(r.weights() instanceof WeightFormat.Bf16)) {
                    errors.add(new SpecError("problem.weights", r.weights().text(),
                            "bf16: routers stay unquantised in every checkpoint format"));
                }
            }
            case Problem.Linear l -> {
                if (!(l.weights() instanceof WeightFormat.Bf16)) {
                    errors.add(new SpecError("problem.weights", l.weights().text(),
                            "bf16: the linear kernels read unquantised weights (quantised formats are for the routed experts)"));
                }
            }
            case Problem.ExpertGateUp g -> {
                checkBlocks(g.weights(), "problem.hidden", g.shape().hidden(), errors);
                if (g.weights().blockScale().blockRows() && g.layout() == GateUpLayout.STACKED
                        && g.shape().intermediate() % g.weights().blockScale().block() != 0) {
                    errors.add(new SpecError("problem.intermediate", Integer.toString(g.shape().intermediate()),
                            "a multiple of " + g.weights().blockScale().block() + " for " + g.weights().text()
                                    + " with stacked gate/up rows: otherwise gate's last block of rows would share "
                                    + "its scales with up's first"));
                }
            }
            case Problem.ExpertDown d -> checkBlocks(d.weights(), "problem.intermediate", d.shape().intermediate(), errors);
            case Problem.ExpertMlp m -> {  // gate_up's rows run along hidden, down's along intermediate
                checkBlocks(m.weights(), "problem.hidden", m.shape().hidden(), errors);
                checkBlocks(m.weights(), "problem.intermediate", m.shape().intermediate(), errors);
            }
        }
        if (problem.activations() != DType.BF16) {
            errors.add(new SpecError("problem.activations", problem.activations().text(), "bf16"));
        }
    }

    /** A row of {@code k} elements must hold whole scale blocks (128 x 128 blocks allow a ragged edge). */
    private static void checkBlocks(WeightFormat format, String field, int k, List<SpecError> errors) {
        WeightFormat.BlockScale scale = format.blockScale();
        if (scale.block() > 0 && !scale.blockRows() && k >= 1 && k % scale.block() != 0) {
            errors.add(new SpecError(field, Integer.toString(k), "a multiple of " + scale.block() + " for "
                    + format.text() + ": each row holds whole blocks of " + scale.block() + " elements, one scale each"));
        }
    }

    /** {@code a}, {@code a or b}, {@code a, b or c}. */
    private static String either(List<String> names) {
        return names.size() <= 1 ? String.join("", names)
                : String.join(", ", names.subList(0, names.size() - 1)) + " or " + names.getLast();
    }

    private static void range(List<SpecError> errors, String path, int value, int min, int max) {
        if (value < min || value > max) {
            errors.add(new SpecError(path, Integer.toString(value), min + ".." + max));
        }
    }
}
