package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Builds the {@link KernelSpec} of one {@code kernel} block from its parse tree, resolving names
 * through {@link FunctionRegistry}. Collects every semantic error of the block and throws them
 * together, each at its place in the text; it does not validate (the caller passes the spec through
 * the Validator, and places its errors with the {@link BuildLog} it returns).
 */
final class KernelBuilder extends MoeSpecBaseVisitor<Void> {
    private static final List<String> SECTIONS = List.of("problem", "schedule", "epilogue", "target");

    /** A kernel block's spec and where the text wrote each of its fields. */
    record Built(KernelSpec spec, BuildLog log) {}

    private final BuildLog log;
    /** The line of each section seen so far, to name the first one when it is repeated. */
    private final Map<String, Integer> sectionLines = new HashMap<>();
    private Problem problem;
    private Schedule<?> schedule;
    private EpilogueNode epilogue;
    private Target target;

    private KernelBuilder(BuildLog log) {
        this.log = log;
    }

    /** {@code sourceName} (nullable) is named in the errors' places. */
    static Built build(MoeSpecParser.KernelContext kernel, String sourceName) {
        KernelBuilder builder = new KernelBuilder(new BuildLog(sourceName, SourcePosition.of(kernel.getStart())));
        builder.log.wrote("name", SourcePosition.of(kernel.name().getStart()));
        kernel.section().forEach(builder::visit);
        return new Built(builder.finish(kernel.name().getText()), builder.log);
    }

    @Override
    public Void visitProblemSection(MoeSpecParser.ProblemSectionContext ctx) {
        if (isFirst(ctx)) {
            problem = FunctionRegistry.PROBLEMS.resolve(Expr.of(ctx.call()), "problem", log);
        }
        return null;
    }

    @Override
    public Void visitScheduleSection(MoeSpecParser.ScheduleSectionContext ctx) {
        if (isFirst(ctx)) {
            schedule = FunctionRegistry.SCHEDULES.resolve(Expr.of(ctx.call()), "schedule", log);
        }
        return null;
    }

    @Override
    public Void visitEpilogueSection(MoeSpecParser.EpilogueSectionContext ctx) {
        if (isFirst(ctx)) {
            epilogue = FunctionRegistry.EPILOGUE.resolve(Expr.of(ctx.expr()), "epilogue", log);
        }
        return null;
    }

    @Override
    public Void visitTargetSection(MoeSpecParser.TargetSectionContext ctx) {
        if (isFirst(ctx)) {
            log.wrote("target", SourcePosition.of(ctx.name().getStart()));
            target = FunctionRegistry.TARGETS.read(ctx.name().getText(), "target", log.errors());
        }
        return null;
    }

    /** Records the section; a repeated one is an error and is not read. */
    private boolean isFirst(MoeSpecParser.SectionContext ctx) {
        String section = ctx.getStart().getText();
        int line = ctx.getStart().getLine();
        Integer firstLine = sectionLines.putIfAbsent(section, line);
        if (firstLine != null) {
            log.error(new SpecError(section, "a second " + section + " section at line " + line,
                    "one per kernel (the first is at line " + firstLine + ")"), SourcePosition.of(ctx.getStart()));
        } else {
            log.wrote(section, SourcePosition.of(ctx.getStart()));
        }
        return firstLine == null;
    }

    private KernelSpec finish(String name) {
        for (String section : SECTIONS) {
            if (!sectionLines.containsKey(section)) {
                log.error(new SpecError(section, "(missing)", "every kernel has the sections " + String.join(", ", SECTIONS)));
            }
        }
        if (!log.errors().isEmpty()) {
            throw new SpecException(name, log.located(log.errors()));
        }
        return new KernelSpec(name, problem, schedule, epilogue, target);
    }
}
