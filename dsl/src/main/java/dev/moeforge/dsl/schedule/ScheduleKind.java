package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.RecordComponent;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.function.BiFunction;

/**
 * What all schedules of one kind share: the name the textual form calls it by, the problems it
 * lowers, its parameters, and the values enumeration tries for them. The parameters are the
 * record's components in declared order, named in the textual form by their snake_case spelling
 * ({@code warpsPerCta} is {@code warps_per_cta}); they are ints, or booleans that default to
 * false when a spec leaves them out.
 *
 * @param <S> the schedule record
 * @param <P> the problems it lowers
 */
public final class ScheduleKind<S extends Schedule<P>, P extends Problem> {

    /** One parameter: its name in the textual form and whether it is a boolean (else an int). */
    public record Param(String name, boolean isBoolean, RecordComponent component) {
        /** A boolean may be left out of a spec's text, meaning false. */
        public boolean optional() {
            return isBoolean;
        }
    }

    private final String name;
    private final Class<S> type;
    private final Class<P> problemType;
    private final BiFunction<P, Target, List<S>> space;
    private final List<Param> params;
    private final Constructor<S> constructor;
    private final boolean normsInputs;

    /**
     * @param name        the name in the textual form, e.g. {@code output_centric}
     * @param type        the schedule record
     * @param problemType the problems it lowers
     * @param space       the schedules enumeration tries for a problem and target, valid or not
     *                    (the kind's own check then keeps the valid ones)
     */
    public ScheduleKind(String name, Class<S> type, Class<P> problemType, BiFunction<P, Target, List<S>> space) {
        this(name, type, problemType, space, false);
    }

    /**
     * @param normsInputs whether its kernels can make their input rows from the residual stream
     *                    themselves (a problem's {@link dev.moeforge.dsl.ir.InputNorm}); such a kind
     *                    checks the shared memory for the rows in its schedules' {@code check}
     */
    public ScheduleKind(String name, Class<S> type, Class<P> problemType, BiFunction<P, Target, List<S>> space,
                        boolean normsInputs) {
        this.normsInputs = normsInputs;
        this.name = name;
        this.type = type;
        this.problemType = problemType;
        this.space = space;
        List<Param> ps = new ArrayList<>();
        List<Class<?>> types = new ArrayList<>();
        for (RecordComponent c : type.getRecordComponents()) {
            boolean bool = c.getType() == boolean.class;
            if (!bool && c.getType() != int.class) {
                throw new IllegalStateException(type.getSimpleName() + "." + c.getName() + ": a schedule parameter is an int or a boolean");
            }
            ps.add(new Param(snakeCase(c.getName()), bool, c));
            types.add(c.getType());
        }
        this.params = List.copyOf(ps);
        try {
            this.constructor = type.getDeclaredConstructor(types.toArray(Class<?>[]::new));
        } catch (NoSuchMethodException e) {
            throw new IllegalStateException(type + " has no canonical constructor", e);
        }
    }

    public String name() {
        return name;
    }

    public Class<S> type() {
        return type;
    }

    public Class<P> problemType() {
        return problemType;
    }

    public List<Param> params() {
        return params;
    }

    /** Whether this kind lowers {@code problem}. */
    public boolean normsInputs() {
        return normsInputs;
    }

    public boolean lowers(Problem problem) {
        return problemType.isInstance(problem);
    }

    /** The schedule with these parameter values, in {@link #params()} order (Integer or Boolean). */
    public S create(List<?> values) {
        if (values.size() != params.size()) {
            throw new IllegalArgumentException(name + " takes " + params.size() + " values, not " + values.size());
        }
        try {
            return constructor.newInstance(values.toArray());
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof RuntimeException r ? r : new IllegalStateException(e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The parameter values of {@code schedule} (of this kind), in {@link #params()} order. */
    public List<Object> values(Schedule<?> schedule) {
        List<Object> values = new ArrayList<>();
        for (Param p : params) {
            try {
                values.add(p.component().getAccessor().invoke(type.cast(schedule)));
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }
        return values;
    }

    /** The schedules enumeration tries for {@code problem} on {@code target}, before the kind's check. */
    public List<S> space(P problem, Target target) {
        return space.apply(problem, target);
    }

    /** {@code warpsPerCta} -> {@code warps_per_cta}. */
    static String snakeCase(String camel) {
        StringBuilder b = new StringBuilder();
        for (char c : camel.toCharArray()) {
            if (Character.isUpperCase(c)) {
                b.append('_').append(Character.toLowerCase(c));
            } else {
                b.append(c);
            }
        }
        return b.toString().toLowerCase(Locale.ROOT);
    }

    @Override
    public String toString() {
        return name;
    }
}
