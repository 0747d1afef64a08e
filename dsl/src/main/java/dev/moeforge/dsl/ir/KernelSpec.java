package dev.moeforge.dsl.ir;

import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.Objects;

/**
 * A kernel: what is computed ({@link Problem}), how it maps onto the GPU ({@link Schedule}), what
 * happens to the accumulator before it is stored (the epilogue tree) and which architecture it is
 * built for ({@link Target}). An immutable value: equal specs are {@code equals}, print the same
 * canonical text and generate the same CUDA bytes. The name becomes the CUDA kernel's name.
 * Construction checks nothing but nulls; {@link dev.moeforge.dsl.check.Validator} checks the rest
 * before any code is generated.
 */
public record KernelSpec(String name, Problem problem, Schedule<?> schedule, EpilogueNode epilogue, Target target) {
    public KernelSpec {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(problem, "problem");
        Objects.requireNonNull(schedule, "schedule");
        Objects.requireNonNull(epilogue, "epilogue");
        Objects.requireNonNull(target, "target");
    }

    public KernelSpec withTarget(Target newTarget) {
        return new KernelSpec(name, problem, schedule, epilogue, newTarget);
    }

    public KernelSpec withName(String newName) {
        return new KernelSpec(newName, problem, schedule, epilogue, target);
    }

    public KernelSpec withSchedule(Schedule<?> newSchedule) {
        return new KernelSpec(name, problem, newSchedule, epilogue, target);
    }

    public KernelSpec withProblem(Problem newProblem) {
        return new KernelSpec(name, newProblem, schedule, epilogue, target);
    }

    public KernelSpec withEpilogue(EpilogueNode newEpilogue) {
        return new KernelSpec(name, problem, schedule, newEpilogue, target);
    }
}
