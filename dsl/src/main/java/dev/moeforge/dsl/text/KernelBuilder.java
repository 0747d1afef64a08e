package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Builds the {@link KernelSpec} of one {@code kernel} block from its parse tree, resolving names
 * through {@link FunctionRegistry}. Collects every semantic error of the block and throws them
 * together; it does not validate (the caller passes the spec through the Validator).
 */
final class KernelBuilder extends MoeSpecBaseVisitor<Void> {
    private static final List<String> SECTIONS = List.of("problem", "schedule", "epilogue", "target");

    private final List<SpecError> errors = new ArrayList<>();
    /** The line of each section seen so far, to name the first one when it is repeated. */
    private final Map<String, Integer> sectionLines = new HashMap<>();
    private Problem problem;
    private Schedule<?> schedule;
    private EpilogueNode epilogue;
    private Target target;

    private KernelBuilder() {}

    static KernelSpec build(MoeSpecParser.KernelContext kernel) {
        KernelBuilder builder = new KernelBuilder();
        kernel.section().forEach(builder::visit);
        return builder.finish(kernel.name().getText());
    }

    @Override
    public Void visitProblemSection(MoeSpecParser.ProblemSectionContext ctx) {
        if (isFirst(ctx)) {
            problem = FunctionRegistry.PROBLEMS.resolve(Expr.of(ctx.call()), "problem", errors);
        }
        return null;
    }

    @Override
    public Void visitScheduleSection(MoeSpecParser.ScheduleSectionContext ctx) {
        if (isFirst(ctx)) {
            schedule = FunctionRegistry.SCHEDULES.resolve(Expr.of(ctx.call()), "schedule", errors);
        }
        return null;
    }

    @Override
    public Void visitEpilogueSection(MoeSpecParser.EpilogueSectionContext ctx) {
        if (isFirst(ctx)) {
            epilogue = FunctionRegistry.EPILOGUE.resolve(Expr.of(ctx.expr()), "epilogue", errors);
        }
        return null;
    }

    @Override
    public Void visitTargetSection(MoeSpecParser.TargetSectionContext ctx) {
        if (isFirst(ctx)) {
            target = FunctionRegistry.TARGETS.read(ctx.name().getText(), "target", errors);
        }
        return null;
    }

    /** Records the section; a repeated one is an error and is not read. */
    private boolean isFirst(MoeSpecParser.SectionContext ctx) {
        String section = ctx.getStart().getText();
        int line = ctx.getStart().getLine();
        Integer firstLine = sectionLines.putIfAbsent(section, line);
        if (firstLine != null) {
            errors.add(new SpecError(section, "a second " + section + " section at line " + line,
                    "one per kernel (the first is at line " + firstLine + ")"));
        }
        return firstLine == null;
    }

    private KernelSpec finish(String name) {
        for (String section : SECTIONS) {
            if (!sectionLines.containsKey(section)) {
                errors.add(new SpecError(section, "(missing)", "every kernel has the sections " + String.join(", ", SECTIONS)));
            }
        }
        if (!errors.isEmpty()) {
            throw new SpecException(name, errors);
        }
        return new KernelSpec(name, problem, schedule, epilogue, target);
    }
}
