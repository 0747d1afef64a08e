package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import java.util.ArrayList;
import java.util.List;

/**
 * The configurations routing-aware dispatch chooses among for one half of the expert layer: a few
 * dozen schedules of each family, far fewer than the enumeration's grid ({@link Candidates}), each
 * chosen so that the pool spans the batch range rather than every parameter. Every entry passes its
 * kind's own check for the problem and target; the rest of the grid stays reachable by hand.
 *
 * <ul>
 *   <li>output_centric: 4 or 8 warps, 16-byte loads, 4 or 8 loads in flight, one token per warp or
 *       tiles of 8 or 32 tokens, with and without a one-block occupancy promise; one token per warp
 *       on 8 warps also with two warps an output (the decode step's single-token down at one
 *       sequence);</li>
 *   <li>expert_centric on mma.sync: six tile families from 16 pairs x 128 weight rows to 128 x 256
 *       (the shapes `bench prefill` found best per batch), 2-4 stages, GROUP_M 1 or 8; down's tiles
 *       also with the combine launch ({@code combine_kernel}), whose downs were the fastest at nearly
 *       every profiled point from 32 tokens (bench/NOTES.md);</li>
 *   <li>expert_centric on wgmma (sm_90a): one or two warpgroups x 128 or 256 weight rows, or two
 *       warpgroups side by side over 256, 3-5 stages, GROUP_M 1 or 8; those of up to 8 MMA warps
 *       also with a producer warpgroup (4 or 5 stages, GROUP_M 8), which beat their twins from
 *       256 tokens, and down's of those also with its slots added by the combine launch
 *       ({@code combine_kernel}), which was faster again from 256 tokens (bench/NOTES.md).</li>
 * </ul>
 * Tiles with 64-element slices take their weights by the tensor memory accelerator, faster than
 * cp.async at every batch measured; those with 128-element slices stay on cp.async. Swap-AB tiles
 * stay out: profiled in the pool they were almost never the fastest half (bench/NOTES.md, "Swap-AB").
 */
public final class ConfigPool {
    /** A tile family of the expert-centric pool: pairs, weight rows, slice width and warp grid. */
    private record Tile(int blockM, int weightRows, int blockK, int warpsM, int warpsN) {}

    private static final List<Tile> MMA_SYNC_TILES = List.of(new Tile(16, 128, 64, 1, 4), new Tile(16, 256, 128, 1, 8),
            new Tile(32, 128, 64, 2, 2), new Tile(32, 256, 128, 2, 4), new Tile(64, 128, 64, 2, 2), new Tile(128, 256, 64, 2, 4));
    private static final List<Tile> WGMMA_TILES = List.of(new Tile(64, 128, 64, 4, 1), new Tile(64, 256, 64, 4, 1),
            new Tile(128, 128, 64, 8, 1), new Tile(128, 256, 64, 8, 1), new Tile(64, 256, 64, 4, 2), new Tile(128, 256, 64, 8, 2));

    /**
     * The most MMA warps a pool tile takes beside a producer warpgroup: with 16 (20 warps in all) a
     * thread gets 96 registers, and those tiles spill.
     */
    private static final int MAX_FED_MMA_WARPS = 12;

    private ConfigPool() {}

    /** The pool for {@code problem} on {@code target}, output-centric first, in a stable order. */
    public static List<Schedule<Problem.ExpertProblem>> of(Problem.ExpertProblem problem, Target target) {
        List<Schedule<Problem.ExpertProblem>> proposed = new ArrayList<>();
        for (int warps : List.of(4, 8)) {
            for (int unroll : List.of(4, 8)) {
                for (int tokens : List.of(1, 8, 32)) {
                    for (int promise : List.of(0, 1)) {
                        proposed.add(new OutputCentric(warps, 16, unroll, tokens, 1, promise));
                        if (warps == 8 && tokens == 1) {  // two warps an output: half the reduction each, twice the blocks
                            proposed.add(new OutputCentric(warps, 16, unroll, tokens, 2, promise));
                        }
                    }
                }
            }
        }
        for (Tile t : MMA_SYNC_TILES) {
            for (int stages : List.of(2, 3, 4)) {
                for (int groupM : List.of(1, 8)) {
                    ExpertCentric tile = expertCentric(problem, t, stages, groupM, false);
                    proposed.add(tile);
                    if (problem instanceof Problem.ExpertDown) {
                        proposed.add(tile.withCombineKernel(true));
                    }
                }
            }
        }
        if (target == Target.SM_90A) {
            for (Tile t : WGMMA_TILES) {
                for (int stages : List.of(3, 4, 5)) {
                    for (int groupM : List.of(1, 8)) {
                        proposed.add(expertCentric(problem, t, stages, groupM, true));
                    }
                }
            }
            for (Tile t : WGMMA_TILES) {
                if (t.warpsM() * t.warpsN() <= MAX_FED_MMA_WARPS) {
                    for (int stages : List.of(4, 5)) {
                        ExpertCentric fed = expertCentric(problem, t, stages, 8, true).withProducer(true);
                        proposed.add(fed);
                        if (problem instanceof Problem.ExpertDown) {  // prefill tiles: the slots added by a launch of their own
                            proposed.add(fed.withCombineKernel(true));
                        }
                    }
                }
            }
        }
        List<Schedule<Problem.ExpertProblem>> pool = new ArrayList<>();
        for (Schedule<Problem.ExpertProblem> s : proposed) {
            List<SpecError> errors = new ArrayList<>();
            s.check(problem, target, errors);
            if (errors.isEmpty() && !pool.contains(s)) {
                pool.add(s);
            }
        }
        return pool;
    }

    /** gate_up's block_n counts neurons, two weight rows each; down's counts rows. */
    private static ExpertCentric expertCentric(Problem.ExpertProblem problem, Tile t, int stages, int groupM, boolean wgmma) {
        int blockN = switch (problem) {
            case Problem.ExpertGateUp _ -> t.weightRows() / 2;
            case Problem.ExpertDown _ -> t.weightRows();
        };
        // tiles of 128-byte rows take their weights by TMA; with FP8 weights those rows hold 128 codes
        boolean swizzled = t.blockK() == ExpertCentric.TMA_BLOCK_K;
        int blockK = swizzled ? ExpertCentric.swizzledSliceWidth(problem) : t.blockK();
        return new ExpertCentric(t.blockM(), blockN, blockK, t.warpsM(), t.warpsN(), stages, groupM, wgmma).withTma(swizzled);
    }
}
