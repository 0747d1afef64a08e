package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The decode router: the experts of a token are spread over {@code ceil(E / expertsPerCta)} thread
 * blocks, one warp per expert score (or several, see below; {@code W_r[e] . x[m]}, FP32); the
 * token's block that took the last start ticket (an atomic at its start, so every other block of
 * the token has begun) awaits the token's E scores as they land in L2 and evaluates the routing
 * rule (softmax, top-k, biases, renormalisation) in registers before storing the routing table.
 * One launch per router call, no host synchronisation. With at least twice as many warps as
 * experts per block, each score's row is split over {@code warpsPerCta / expertsPerCta} warps
 * (fewer dependent load rounds for long rows), their parts added in shared memory in warp order.
 * Lowers {@code router}.
 *
 * @param warpsPerCta   warps per thread block, each computing every warpsPerCta-th expert of the
 *                      block (or a part of one expert's score, see above)
 * @param loadBytes     bytes each lane loads per load of a router row (16 = LDG.128)
 * @param kUnroll       loads per lane issued before the first is used
 * @param expertsPerCta experts of one token per thread block: fewer means more blocks in flight
 */
public record RouterGemv(int warpsPerCta, int loadBytes, int kUnroll, int expertsPerCta) implements Schedule<Problem.Router> {

    public static final ScheduleKind<RouterGemv, Problem.Router> KIND = new ScheduleKind<>("router_gemv", RouterGemv.class,
            Problem.Router.class, RouterGemv::space, true);

    /**
     * The decode routers (one wave, latency-bound) declare one block per SM enough: without it ptxas
     * held them to 32 registers and issued their loads two at a time (bench/NOTES.md, "The grouped tail").
     */
    static final int DECODE_MIN_BLOCKS_PER_SM = 1;

    @Override
    public ScheduleKind<RouterGemv, Problem.Router> kind() {
        return KIND;
    }

    /** Warps, loads in flight and experts per block in powers of two; every load width. */
    private static List<RouterGemv> space(Problem.Router problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)),
                ScheduleRules.LOAD_BYTES, ScheduleRules.powersOfTwo(1, 16), ScheduleRules.powersOfTwo(1, Limits.MAX_EXPERTS)));
    }

    @Override
    public void check(Problem.Router r, Target target, List<SpecError> errors) {
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        decodeLoads(r, loadBytes, errors);
        range(errors, "schedule.k_unroll", kUnroll, 1, 16);
        range(errors, "schedule.experts_per_cta", expertsPerCta, 1, Math.max(1, r.experts()));
        ScheduleRules.normedRows(errors, r.inputNorm(), 1, null, r.hidden(), "problem.hidden");
    }

    /** The load width, and hidden a whole number of loads, of the decode routers. */
    static void decodeLoads(Problem.Router r, int loadBytes, List<SpecError> errors) {
        ScheduleRules.rowLoads(errors, "problem.hidden", r.hidden(), r.weights(), loadBytes);
    }

    /** Thread blocks per token. */
    public int blocksPerToken(Problem.Router problem) {
        return Math.ceilDiv(problem.experts(), expertsPerCta);
    }

    /** Warps that share one expert score of this block (see {@link #warpsPerScore(int, int)}). */
    public int warpsPerScore(Problem.Router problem) {
        return warpsPerScore(warpsPerCta, expertsPerCta);
    }

    /**
     * Warps that share one expert score: with at least twice as many warps as the block's experts,
     * each row is split over {@code warps / experts} warps (fewer dependent load rounds for long
     * rows); otherwise one warp per score.
     */
    static int warpsPerScore(int warps, int expertsPerBlock) {
        return warps >= 2 * expertsPerBlock ? warps / expertsPerBlock : 1;
    }

    /**
     * Whether the block's warps can share the routing rule ({@link TreeEvaluation.Mode#BLOCK_GROUPS}):
     * it selects with one expert group per warp, each group whole lanes of 32, over elementwise rows.
     */
    public static boolean blockGroups(Store root, int experts, int warps) {
        Optional<TopK> top = RouterTrees.selection(root);
        return top.isPresent() && top.get().groups() == warps && warps > 1 && experts % warps == 0
                && (experts / warps) % 32 == 0 && RouterTrees.elementwise(top.get().input())
                && top.get().by().map(RouterTrees::elementwise).orElse(true);
    }

    @Override
    public long sharedBytes(Problem.Router problem) {
        return 0;
    }

    /** One block per (slice of experts, token); the token's tail block (last start ticket) evaluates the rule. */
    @Override
    public LaunchGeometry geometry(Problem.Router problem, int tokens) {
        return new LaunchGeometry(blocksPerToken(problem), tokens, ScheduleRules.threads(warpsPerCta), 0);
    }

    @Override
    public int maxTokens(Problem.Router problem) {
        return LaunchGeometry.MAX_GRID_Y;
    }

    @Override
    public List<Workspace> workspace(Problem.Router r) {
        return List.of(
                new Workspace("scores", DType.FP32, List.of(Workspace.TOKENS, r.experts()), "scratch: each token's expert scores"),
                new Workspace("counters", DType.INT32, List.of(Workspace.TOKENS),
                        "scratch: blocks done per token; zero before the first launch, left zero"));
    }

    @Override
    public ScheduleModel model(Problem.Router r, Store epilogue) {
        int split = warpsPerScore(r);
        boolean block = blockGroups(epilogue, r.experts(), warpsPerCta);
        List<ConfigConstant> config = new ArrayList<>(List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kLoadBytes", loadBytes),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kExpertsPerCta", expertsPerCta),
                ConfigConstant.integer("kWarpsPerScore", split)));
        if (block) {
            config.add(ConfigConstant.integer("kSlice", r.experts() / warpsPerCta));
        }
        List<String> notes = List.of(
                "router: " + blocksPerToken(r) + " blocks per token, " + scoreWarps(split)
                        + "; the block with the token's last start ticket awaits the scores as they land and evaluates the epilogue"
                        + (block ? ", warp w on group w (its best k and the group's score), then each kept candidate "
                                + "ranked against the other kept groups', warp 0 on the rest of the tree."
                                : " in warp 0."),
                "Each lane loads " + loadBytes + " bytes, " + kUnroll + " loads in flight per row.",
                "Ties go to the lower expert id; NaN ranks below every number.",
                "Workspace: scores [M][E] (each score's bits complemented; zero: not yet written), counters [M] int32; "
                        + "both zero before the first launch and left zero.");
        TreeEvaluation evaluation = block
                ? new TreeEvaluation(TreeEvaluation.Mode.BLOCK_GROUPS,
                        "mf::await_scores<Config::kSlice>(scores + static_cast<size_t>(token) * Config::kExperts + slice)")
                : new TreeEvaluation(TreeEvaluation.Mode.ONE_WARP,
                        "mf::await_scores<Config::kExperts>(scores + static_cast<size_t>(token) * Config::kExperts)");
        return new ScheduleModel("router_gemv.cu.ftl", "router_scores", config, notes, DECODE_MIN_BLOCKS_PER_SM, 1,
                Optional.of(evaluation));
    }

    /** How a decode router's warps share the scores. */
    static String scoreWarps(int split) {
        return split == 1 ? "one warp per expert score"
                : "each expert score split over " + split + " warps (parts added in warp order)";
    }

    @Override
    public String spillAdvice() {
        return fewerLoadsOrWarps(kUnroll, warpsPerCta);
    }

    static String fewerLoadsOrWarps(int kUnroll, int warpsPerCta) {
        return "fewer loads in flight (k_unroll " + kUnroll + ") or fewer warps per block (warps_per_cta " + warpsPerCta + ")";
    }
}
