package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Optional;

/**
 * The decode router on a thread-block cluster (sm_90 and later): a token's {@code clusterSize}
 * blocks each compute a slice of the expert scores (one warp per score, or several, see below) and
 * write them straight into block 0's shared memory (distributed shared memory); after
 * {@code cluster.sync()} one warp of block 0 evaluates the routing rule. The scores never reach
 * global memory and no fence or atomic ticket is needed. As in {@link RouterGemv}, a block with at
 * least twice as many warps as its {@code ceil(E / clusterSize)} experts splits each score over its
 * warps. Under programmatic dependent launch each warp issues its first router-weight loads before
 * it waits for the previous kernel (the weights are the step's constants). Lowers {@code router}.
 *
 * @param clusterSize blocks per token, 1..8 (the portable cluster size)
 * @param warpsPerCta warps per block
 * @param loadBytes   bytes each lane loads per load of a router row
 * @param kUnroll     loads per lane issued before the first is used
 */
public record RouterCluster(int clusterSize, int warpsPerCta, int loadBytes, int kUnroll) implements Schedule<Problem.Router> {

    public static final ScheduleKind<RouterCluster, Problem.Router> KIND = new ScheduleKind<>("router_cluster",
            RouterCluster.class, Problem.Router.class, RouterCluster::space, true);

    /** The portable cluster size. */
    static final int MAX_CLUSTER = 8;

    @Override
    public ScheduleKind<RouterCluster, Problem.Router> kind() {
        return KIND;
    }

    /** Every cluster size; warps and loads in flight in powers of two; every load width. */
    private static List<RouterCluster> space(Problem.Router problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(List.of(1, 2, 3, 4, 5, 6, 7, 8),
                ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)), ScheduleRules.LOAD_BYTES,
                ScheduleRules.powersOfTwo(1, 16)));
    }

    /** Warps that share one expert score of a block's ceil(E / clusterSize) experts. */
    public int warpsPerScore(Problem.Router problem) {
        return RouterGemv.warpsPerScore(warpsPerCta, Math.ceilDiv(problem.experts(), clusterSize));
    }

    @Override
    public void check(Problem.Router r, Target target, List<SpecError> errors) {
        range(errors, "schedule.cluster_size", clusterSize, 1, MAX_CLUSTER);
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        RouterGemv.decodeLoads(r, loadBytes, errors);
        range(errors, "schedule.k_unroll", kUnroll, 1, 16);
        ScheduleRules.normedRows(errors, r.inputNorm(), 1, null, r.hidden(), "problem.hidden");
    }

    /** The scores live in static shared memory (block 0's row of E floats); none is dynamic. */
    @Override
    public long sharedBytes(Problem.Router problem) {
        return 0;
    }

    /** One cluster of clusterSize blocks per token. */
    @Override
    public LaunchGeometry geometry(Problem.Router problem, int tokens) {
        return new LaunchGeometry(clusterSize, tokens, ScheduleRules.threads(warpsPerCta), 0);
    }

    @Override
    public int maxTokens(Problem.Router problem) {
        return LaunchGeometry.MAX_GRID_Y;
    }

    @Override
    public ScheduleModel model(Problem.Router r, Store epilogue) {
        int split = warpsPerScore(r);
        List<String> notes = List.of(
                "router: one cluster of " + clusterSize + " blocks per token, " + RouterGemv.scoreWarps(split) + ", the scores "
                        + "written into block 0's shared memory; block 0's warp 0 evaluates the epilogue after cluster.sync().",
                "Each lane loads " + loadBytes + " bytes, " + kUnroll + " loads in flight per row, the first before the wait for "
                        + "the previous kernel.",
                "Ties go to the lower expert id; NaN ranks below every number.");
        return new ScheduleModel("router_cluster.cu.ftl", "router_scores_cluster", List.of(
                ConfigConstant.integer("kClusterSize", clusterSize),
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kLoadBytes", loadBytes),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kWarpsPerScore", split)),
                notes, RouterGemv.DECODE_MIN_BLOCKS_PER_SM, clusterSize,
                Optional.of(new TreeEvaluation(TreeEvaluation.Mode.ONE_WARP, "mf::load_row_shared<Config::kExperts>(scores)")),
                DeviceLibrary.CORE, true);
    }

    @Override
    public String spillAdvice() {
        return RouterGemv.fewerLoadsOrWarps(kUnroll, warpsPerCta);
    }
}
