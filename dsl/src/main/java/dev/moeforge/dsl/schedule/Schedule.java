package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Optional;

/**
 * How a {@link Problem} of type {@code P} is mapped onto the GPU; one problem can be lowered with
 * several schedules. Each kind of schedule is one record in one file, which states everything
 * about it: its parameters (the record's components, which are also its textual form), the rules
 * a valid one obeys, its shared-memory layout, its launch geometry, the model its CUDA template is
 * rendered from, and what to tell an author whose kernel spilled. Everything else finds a schedule
 * through this interface; a kind missing from {@link #kinds()} fails ScheduleKindsTest.
 *
 * @param <P> the problems this kind lowers
 */
public sealed interface Schedule<P extends Problem>
        permits OutputCentric, OutputTensorCore, SplitDown, ExpertCentric, RouterGemv, RouterCluster, RouterTiled, LinearSchedule {

    /** Every kind, in the order the textual form lists them and enumeration visits them. */
    static List<ScheduleKind<?, ?>> kinds() {
        return Kinds.ALL;
    }

    /** Initialised on first use, after the records: a record's initialisation initialises this interface first. */
    final class Kinds {
        private static final List<ScheduleKind<?, ?>> ALL = List.of(OutputCentric.KIND, OutputTensorCore.KIND, SplitDown.KIND,
                ExpertCentric.KIND, RouterGemv.KIND, RouterCluster.KIND, RouterTiled.KIND, LinearGemv.KIND, LinearMma.KIND);

        private Kinds() {}
    }

    /** This schedule's kind: its name, parameters, the problems it lowers and its enumeration. */
    ScheduleKind<?, P> kind();

    /**
     * Appends every way this schedule is invalid for {@code problem} on {@code target}: the paths are
     * {@code schedule.<parameter>} (or {@code problem.<field>} where the problem's size is what
     * does not fit), each with what is allowed. Called only with a problem whose own fields passed
     * the Validator's ranges; this is the one feasibility predicate that validation and
     * enumeration share.
     */
    void check(P problem, Target target, List<SpecError> errors);

    /** Appends what this schedule requires of the epilogue beyond its type (none by default). */
    default void checkEpilogue(P problem, EpilogueNode epilogue, List<SpecError> errors) {}

    /** Dynamic shared memory one thread block asks for, in bytes. */
    long sharedBytes(P problem);

    /**
     * Grid and block for {@code tokens} tokens (1..{@link #maxTokens}). The grid is sized for the
     * worst-case routing (every routed expert distinct); blocks with nothing to do exit at once, so
     * nothing is read back to the host between kernels.
     */
    LaunchGeometry geometry(P problem, int tokens);

    /** The largest token count one launch takes. */
    int maxTokens(P problem);

    /**
     * The thread blocks that have work for {@code tokens} tokens whose routed pairs fall on the
     * experts as {@code expertLoad} counts them (pairs per expert): the grid G of the dispatch cost
     * model. By default the launched grid, which does not depend on the routing; a kind whose work
     * follows the routing counts its own.
     */
    default long workBlocks(P problem, int tokens, int[] expertLoad) {
        LaunchGeometry g = geometry(problem, tokens);
        return (long) g.gridX() * g.gridY();
    }

    /**
     * Whether the kernel also takes the routing grouped by expert ({@link RoutingPlan}: sorted_slots
     * and expert_offsets, after the routing tables), which its module's align entry points build.
     */
    default boolean takesRoutingPlan() {
        return false;
    }

    /**
     * Whether the kernel multiplies FP8 activations by FP8 weights (W8A8): gate_up reads x as its
     * module's quantise entry point left it in the kernel's workspace, and the intermediate gate_up
     * hands to down is quantised rows ({@link dev.moeforge.dsl.format.Fp8ActivationRows}). False by default.
     */
    default boolean quantisesActivations(P problem) {
        return false;
    }

    /**
     * Whether the kernel leaves each token's slot rows in its workspace for its module's combine entry
     * point to add into y, which must run right after it. False by default.
     */
    default boolean combinesAfter(P problem) {
        return false;
    }

    /** Scratch tensors the kernel owns beyond the problem's inputs and outputs (none by default). */
    default List<Workspace> workspace(P problem) {
        return List.of();
    }

    /**
     * The tensor map through which the kernel's copy engine reads its weight, which the runtime
     * encodes from the weight's buffer and passes after the weight's parts; none by default.
     */
    default Optional<WeightTileMap> weightTileMap(P problem) {
        return Optional.empty();
    }

    /** What this schedule contributes to its kernel's CUDA: template, device body, named constants, notes, launch facts. */
    ScheduleModel model(P problem, Store epilogue);

    /**
     * The parameters that give ptxas more registers per thread, with their values, for a warning
     * about a kernel that spilled, e.g. {@code fewer loads in flight (k_unroll 8)}.
     */
    String spillAdvice();
}
