package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.check.OutputCentricLayout;
import dev.moeforge.dsl.check.RouterTileLayout;
import dev.moeforge.dsl.check.SplitDownLayout;
import dev.moeforge.dsl.check.TensorCoreTileLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
import dev.moeforge.dsl.ir.Schedule.OutputCentric;

/**
 * Grid, block and dynamic shared memory of a generated kernel for a token count. The grid is
 * sized for the worst case routing (every routed expert distinct); blocks with nothing to do
 * exit at once, so nothing has to be read back to the host between kernels.
 */
public record LaunchGeometry(int gridX, int gridY, int blockX, int sharedBytes) {
    /** CUDA's limit on gridDim.y. */
    public static final int MAX_GRID_Y = 65_535;

    public static LaunchGeometry of(KernelSpec spec, int tokens) {
        if (tokens < 1 || tokens > maxTokens(spec)) {
            throw new IllegalArgumentException("tokens = " + tokens + ": kernel " + spec.name() + " takes 1.." + maxTokens(spec));
        }
        return switch (spec.schedule()) {
            case OutputCentric oc -> {
                Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();  // validated pairing
                OutputCentricLayout layout = OutputCentricLayout.of(problem, oc);
                int w = oc.outputsPerCta();
                int t = oc.tokensPerCta();
                int tiles = ceilDiv(tokens, t);
                int k = problem.shape().topk();
                yield switch (problem) {
                    case Problem.ExpertGateUp p -> new LaunchGeometry(
                            ceilDiv(p.shape().intermediate(), w),
                            t == 1 ? tokens * k : tiles * layout.maxDistinctExperts(),
                            32 * oc.warpsPerCta(), (int) layout.sharedBytes());
                    case Problem.ExpertDown p -> new LaunchGeometry(
                            ceilDiv(p.shape().hidden(), w), tiles, 32 * oc.warpsPerCta(), (int) layout.sharedBytes());
                };
            }
            case Schedule.OutputTensorCore tc -> {
                Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();  // validated pairing
                TensorCoreTileLayout layout = TensorCoreTileLayout.of(problem, tc);
                int outputs = switch (problem) {
                    case Problem.ExpertGateUp p -> p.shape().intermediate();
                    case Problem.ExpertDown p -> p.shape().hidden();
                };
                int gridY = problem instanceof Problem.ExpertGateUp ? tokens * problem.shape().topk() : tokens;
                yield new LaunchGeometry(ceilDiv(outputs, layout.outputsPerTile() * tc.tilesPerCta()), gridY,
                        32 * tc.warpsPerCta(), Math.toIntExact(layout.sharedBytes()));
            }
            // one block per (16 neurons, token, routed slot)
            case Schedule.SplitDown sd -> {
                Problem.ExpertMlp problem = (Problem.ExpertMlp) spec.problem();  // validated pairing
                SplitDownLayout layout = SplitDownLayout.of(problem, sd);
                yield new LaunchGeometry(layout.tiles(), tokens * problem.shape().topk(), 32 * sd.warpsPerCta(),
                        Math.toIntExact(layout.sharedBytes()));
            }
            // one block per (slice of experts, token); the token's tail block (last start ticket) runs the epilogue
            case Schedule.RouterGemv g -> new LaunchGeometry(routerBlocksPerToken(spec), tokens, 32 * g.warpsPerCta(), 0);
            // one cluster of clusterSize blocks per token
            case Schedule.RouterCluster c -> new LaunchGeometry(c.clusterSize(), tokens, 32 * c.warpsPerCta(), 0);
            // one block (or cluster of clusterSplit blocks, declared in the kernel) per tile of tokensPerCta tokens
            case Schedule.RouterTiled t -> new LaunchGeometry(ceilDiv(tokens, t.tokensPerCta()) * t.clusterSplit(), 1,
                    32 * t.warpsPerCta(), Math.toIntExact(RouterTileLayout.of((Problem.Router) spec.problem(), t).sharedBytes()));
        };
    }

    /** Thread blocks per token of a router_gemv kernel. */
    public static int routerBlocksPerToken(KernelSpec spec) {
        Schedule.RouterGemv g = (Schedule.RouterGemv) spec.schedule();
        return ceilDiv(((Problem.Router) spec.problem()).experts(), g.expertsPerCta());
    }

    /**
     * Warps that share one expert score in a decode router block: with at least twice as many
     * warps as the block's experts, each row is split over {@code warps / experts} warps (fewer
     * dependent load rounds for long rows); otherwise one warp per score. The kernel takes this
     * as {@code kWarpsPerScore}.
     */
    public static int routerWarpsPerScore(KernelSpec spec) {
        int experts = ((Problem.Router) spec.problem()).experts();
        return switch (spec.schedule()) {
            case Schedule.RouterGemv g -> warpsPerScore(g.warpsPerCta(), g.expertsPerCta());
            case Schedule.RouterCluster c -> warpsPerScore(c.warpsPerCta(), ceilDiv(experts, c.clusterSize()));
            case Schedule.RouterTiled _, OutputCentric _, Schedule.OutputTensorCore _, Schedule.SplitDown _ ->
                    throw new IllegalArgumentException("only router_gemv and router_cluster score with warps: " + spec.name());
        };
    }

    private static int warpsPerScore(int warps, int expertsPerBlock) {
        return warps >= 2 * expertsPerBlock ? warps / expertsPerBlock : 1;
    }

    /** The largest token count one launch takes: gridDim.y's bound, and split_down's M * H that must stay an int. */
    public static int maxTokens(KernelSpec spec) {
        return switch (spec.schedule()) {
            case OutputCentric oc -> {
                Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();
                int t = oc.tokensPerCta();
                int k = problem.shape().topk();
                yield switch (problem) {
                    case Problem.ExpertGateUp _ -> t == 1
                            ? MAX_GRID_Y / k
                            : (MAX_GRID_Y / OutputCentricLayout.of(problem, oc).maxDistinctExperts()) * t;
                    case Problem.ExpertDown _ -> t == 1 ? MAX_GRID_Y : MAX_GRID_Y * t;
                };
            }
            case Schedule.OutputTensorCore _ -> spec.problem() instanceof Problem.ExpertGateUp g
                    ? MAX_GRID_Y / g.shape().topk() : MAX_GRID_Y;
            // the kernel zeroes M * H floats counted in an int
            case Schedule.SplitDown _ -> {
                Problem.ExpertMlp m = (Problem.ExpertMlp) spec.problem();
                yield Math.min(MAX_GRID_Y / m.shape().topk(), Integer.MAX_VALUE / m.shape().hidden());
            }
            case Schedule.RouterGemv _, Schedule.RouterCluster _ -> MAX_GRID_Y;
            // a tile's first token plus its row (< 128) must stay an int
            case Schedule.RouterTiled _ -> Integer.MAX_VALUE - 127;
        };
    }

    private static int ceilDiv(int a, int b) {
        return (a - 1) / b + 1;  // a >= 1; no overflow near Integer.MAX_VALUE
    }
}
