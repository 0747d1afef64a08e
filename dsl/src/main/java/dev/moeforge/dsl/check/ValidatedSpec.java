package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.ScheduleModel;
import dev.moeforge.dsl.schedule.WeightTileMap;
import dev.moeforge.dsl.schedule.Workspace;
import java.util.List;
import java.util.Optional;

/**
 * A spec that passed {@link Validator#check}, with its problem and schedule typed as a pair: the
 * schedule lowers exactly this kind of problem, and the epilogue's root is a store. Only the
 * Validator makes one, so holding one means code may be generated for it.
 *
 * @param <P> the problem kind the schedule lowers
 */
public final class ValidatedSpec<P extends Problem> {
    private final KernelSpec spec;
    private final P problem;
    private final Schedule<P> schedule;
    private final Store epilogue;

    ValidatedSpec(KernelSpec spec, P problem, Schedule<P> schedule, Store epilogue) {
        this.spec = spec;
        this.problem = problem;
        this.schedule = schedule;
        this.epilogue = epilogue;
    }

    public KernelSpec spec() {
        return spec;
    }

    public P problem() {
        return problem;
    }

    public Schedule<P> schedule() {
        return schedule;
    }

    public Store epilogue() {
        return epilogue;
    }

    public String name() {
        return spec.name();
    }

    /** Grid, block and shared memory for {@code tokens} tokens; refuses a count outside 1..{@link #maxTokens()}. */
    public LaunchGeometry geometry(int tokens) {
        int max = maxTokens();
        if (tokens < 1 || tokens > max) {
            throw new IllegalArgumentException("tokens = " + tokens + ": kernel " + spec.name() + " takes 1.." + max);
        }
        return schedule.geometry(problem, tokens);
    }

    public int maxTokens() {
        return schedule.maxTokens(problem);
    }

    /** Dynamic shared memory one block asks for. */
    public long sharedBytes() {
        return schedule.sharedBytes(problem);
    }

    public List<Workspace> workspace() {
        return schedule.workspace(problem);
    }

    /** The tensor map the kernel reads its weight through, where its schedule has one. */
    public Optional<WeightTileMap> weightTileMap() {
        return schedule.weightTileMap(problem);
    }

    /** Whether the kernel takes the routing grouped by expert (see {@code RoutingPlan}). */
    public boolean takesRoutingPlan() {
        return schedule.takesRoutingPlan();
    }

    /** Whether the kernel multiplies FP8 activations (W8A8; see {@code Schedule.quantisesActivations}). */
    public boolean quantisesActivations() {
        return schedule.quantisesActivations(problem);
    }

    /**
     * Whether the kernel reads x as its module's quantise entry point leaves it in its workspace (a
     * W8A8 gate_up), so the entry point must run before it.
     */
    public boolean takesQuantisedX() {
        return quantisesActivations() && problem instanceof Problem.ExpertGateUp;
    }

    /** Whether the kernel's module adds the slot rows it leaves into y by its combine entry point, right after it. */
    public boolean combinesAfter() {
        return schedule.combinesAfter(problem);
    }

    public ScheduleModel model() {
        return schedule.model(problem, epilogue);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ValidatedSpec<?> v && v.spec.equals(spec);
    }

    @Override
    public int hashCode() {
        return spec.hashCode();
    }

    @Override
    public String toString() {
        return spec.name();
    }
}
