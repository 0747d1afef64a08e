package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Enumeration: the valid schedules of a problem on a target, of every kind that lowers it. Each
 * kind proposes its grid of parameter values ({@link ScheduleKind#space}) and keeps those its own
 * {@link Schedule#check} accepts, the same predicate validation applies, so every candidate
 * validates and nothing validation refuses is ever proposed. The order is stable: kinds in
 * {@link Schedule#kinds()} order, each grid in the lexicographic order of its domains.
 */
public final class Candidates {
    private Candidates() {}

    /** Every valid schedule of every kind that lowers {@code problem}; refuses a problem that is itself invalid. */
    public static List<Schedule<?>> of(Problem problem, Target target) {
        requireValid(problem);
        List<Schedule<?>> out = new ArrayList<>();
        for (ScheduleKind<?, ?> kind : Schedule.kinds()) {
            if (kind.lowers(problem)) {
                out.addAll(valid(kind, problem, target));
            }
        }
        return out;
    }

    /** The valid schedules of one kind; empty when the kind does not lower {@code problem}. */
    public static <S extends Schedule<P>, P extends Problem> List<S> of(ScheduleKind<S, P> kind, Problem problem, Target target) {
        requireValid(problem);
        return kind.lowers(problem) ? valid(kind, problem, target) : List.of();
    }

    /**
     * The candidates of {@code schedule}'s kind that differ from it in exactly one parameter: the
     * neighbourhood a sweep times around a chosen schedule.
     */
    public static <P extends Problem> List<Schedule<P>> neighbours(Schedule<P> schedule, Problem problem, Target target) {
        ScheduleKind<?, P> kind = schedule.kind();
        List<Object> mine = kind.values(schedule);
        List<Schedule<P>> out = new ArrayList<>();
        for (Schedule<P> s : of(kind, problem, target)) {
            List<Object> theirs = kind.values(s);
            int differing = 0;
            for (int i = 0; i < mine.size(); i++) {
                if (!Objects.equals(mine.get(i), theirs.get(i))) {
                    differing++;
                }
            }
            if (differing == 1) {
                out.add(s);
            }
        }
        return out;
    }

    /**
     * A stable name for a schedule, usable as a kernel name: the kind, then each parameter's
     * initials and value, e.g. {@code output_centric_wpc4_lb16_ku8_tpc1_wpo1_mbps0}.
     */
    public static String name(Schedule<?> schedule) {
        ScheduleKind<?, ?> kind = schedule.kind();
        StringBuilder b = new StringBuilder(kind.name());
        List<Object> values = kind.values(schedule);
        for (int i = 0; i < values.size(); i++) {
            b.append('_');
            for (String word : kind.params().get(i).name().split("_")) {
                b.append(word.charAt(0));
            }
            b.append(values.get(i) instanceof Boolean flag ? (flag ? "1" : "0") : values.get(i));
        }
        return b.toString();
    }

    private static <S extends Schedule<P>, P extends Problem> List<S> valid(ScheduleKind<S, P> kind, Problem problem, Target target) {
        P typed = kind.problemType().cast(problem);
        List<S> out = new ArrayList<>();
        for (S s : kind.space(typed, target)) {
            List<SpecError> errors = new ArrayList<>();
            s.check(typed, target, errors);
            if (errors.isEmpty()) {
                out.add(s);
            }
        }
        return out;
    }

    private static void requireValid(Problem problem) {
        List<SpecError> errors = Validator.problemErrors(problem);
        if (!errors.isEmpty()) {
            throw new IllegalArgumentException("no schedule lowers an invalid problem: " + errors);
        }
    }
}
