package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Warp decode: one warp owns one output scalar and streams the weight rows it needs straight from
 * memory; the routed experts are folded inside the warp, so there is no scatter, padding or
 * per-expert buffer. Lowers {@code expert_gate_up} and {@code expert_down}.
 *
 * @param warpsPerCta    warps per thread block; consecutive warps own consecutive outputs
 * @param loadBytes      bytes each lane loads per weight load instruction (16 = LDG.128)
 * @param kUnroll        loads per lane and weight row issued before the first is used
 *                       (memory-level parallelism)
 * @param tokensPerCta   1: each warp serves one token and reads its experts' rows for that token
 *                       alone. T > 1: the tokens of a tile of T share every weight row read: each
 *                       distinct routed expert of the tile is read once however many of its tokens
 *                       use it (the thread block builds the tile's routing table in shared memory first).
 * @param warpsPerOutput S warps of a block share one output: each takes every S-th piece of the
 *                       reduction (load blocks of a row, or distinct experts of a tile) and the S
 *                       partial sums are added in shared memory in warp order, so the result is
 *                       deterministic. More warps in flight where outputs are few (down: one per
 *                       hidden output). Divides warpsPerCta.
 * @param minBlocksPerSm the occupancy promise given to ptxas ({@code __launch_bounds__}'s second
 *                       argument): 0 leaves ptxas its own register heuristic (which may interleave
 *                       loads with their use to save registers); N >= 1 lets a thread use up to
 *                       65536 / (N * threads) registers, so the loads of an unrolled row stay in
 *                       flight together.
 */
public record OutputCentric(int warpsPerCta, int loadBytes, int kUnroll, int tokensPerCta, int warpsPerOutput,
                            int minBlocksPerSm) implements Schedule<Problem.ExpertProblem> {

    public static final ScheduleKind<OutputCentric, Problem.ExpertProblem> KIND = new ScheduleKind<>("output_centric",
            OutputCentric.class, Problem.ExpertProblem.class, OutputCentric::space);

    /** Largest token tile: a tile's tokens are one 32-bit mask. */
    public static final int MAX_TOKENS_PER_CTA = 32;

    /** Outputs (neurons or hidden units) one thread block computes. */
    public int outputsPerCta() {
        return warpsPerCta / warpsPerOutput;
    }

    @Override
    public ScheduleKind<OutputCentric, Problem.ExpertProblem> kind() {
        return KIND;
    }

    /** Powers of two for warps, loads in flight, token tiles and warps per output; every load width; promises 0-4. */
    private static List<OutputCentric> space(Problem.ExpertProblem problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)),
                ScheduleRules.LOAD_BYTES, ScheduleRules.powersOfTwo(1, 16), ScheduleRules.powersOfTwo(1, MAX_TOKENS_PER_CTA),
                ScheduleRules.powersOfTwo(1, 32), List.of(0, 1, 2, 4)));
    }

    @Override
    public void check(Problem.ExpertProblem p, Target target, List<SpecError> errors) {
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        ScheduleRules.loadBytes(errors, loadBytes);
        range(errors, "schedule.k_unroll", kUnroll, 1, 16);
        range(errors, "schedule.tokens_per_cta", tokensPerCta, 1, MAX_TOKENS_PER_CTA);
        ScheduleRules.warpSplit(errors, "schedule.warps_per_output", warpsPerCta, warpsPerOutput, minBlocksPerSm, target);
        if (warpsPerOutput > 1 && tokensPerCta > 1 && p instanceof Problem.ExpertGateUp) {
            errors.add(new SpecError("schedule.warps_per_output", Integer.toString(warpsPerOutput),
                    "1 for a token-tiled gate_up (tokens_per_cta > 1): each warp keeps its whole rows in "
                            + "registers across the tile's tokens"));
        }
        if (!ScheduleRules.dimensionsInRange(p.shape()) || !ScheduleRules.LOAD_BYTES.contains(loadBytes)) {
            return;
        }
        int epl = p.weights().elementsPerLoad(loadBytes);
        // Both the weight rows and the activation rows are read with loads of load_bytes,
        // so both row lengths must be whole loads (and thus load-aligned).
        ScheduleRules.wholeLoads(errors, "problem.hidden", p.shape().hidden(), epl, loadBytes);
        ScheduleRules.wholeLoads(errors, "problem.intermediate", p.shape().intermediate(), epl, loadBytes);
        if (tokensPerCta >= 1 && warpsPerCta >= 1 && kUnroll >= 1 && warpsPerOutput >= 1) {
            ScheduleRules.sharedLimit(errors, sharedBytes(p), target, "lower tokens_per_cta or warps_per_cta");
        }
    }

    /** down folds each routing weight into the FP32 accumulator, which needs {@code combine(acc)}. */
    @Override
    public void checkEpilogue(Problem.ExpertProblem problem, EpilogueNode epilogue, List<SpecError> errors) {
        foldedCombine(KIND.name(), problem, epilogue, errors);
    }

    static void foldedCombine(String kind, Problem.ExpertProblem problem, EpilogueNode epilogue, List<SpecError> errors) {
        if (problem instanceof Problem.ExpertDown && epilogue instanceof Store(Combine(EpilogueNode in), _)
                && !(in instanceof Acc)) {
            errors.add(new SpecError("epilogue.store.input.combine.input", SpecPrinter.printEpilogue(in),
                    kind + " folds each routing weight into the FP32 accumulator, which needs "
                            + "combine(acc) with the accumulator itself as input"));
        }
    }

    /**
     * The derived sizes of an output-centric kernel: how its reduction is cut into loads and
     * blocks, the most distinct experts a token tile can route to, and its shared memory. The
     * device header's token-tile and single-token bodies lay shared memory out the same way and
     * static_assert that their bytes equal these.
     */
    public record Layout(int reduceLength, int elementsPerLoad, int chunksPerRow, int blocksPerRow, int maxDistinctExperts,
                         long sharedBytes) {

        /**
         * Shared memory: the tile's routing table and per-lane accumulators (tokensPerCta > 1), then
         * the per-warp partial sums that the warps of one output add up (warpsPerOutput > 1).
         */
        public static Layout of(Problem.ExpertProblem problem, OutputCentric s) {
            ExpertShape shape = problem.shape();
            int reduce = ScheduleRules.reduceLength(problem);
            int epl = Math.max(1, problem.weights().elementsPerLoad(s.loadBytes()));
            int chunks = Math.ceilDiv(reduce, epl);
            int blocks = Math.ceilDiv(chunks, 32 * s.kUnroll());
            int t = s.tokensPerCta();
            int maxDistinct = (int) Math.min((long) t * shape.topk(), shape.experts());
            long shared = 0;
            if (t > 1) {
                int bitmapWords = Math.ceilDiv(shape.experts(), 32);
                long routing = align16(8L * bitmapWords + 4) + align16(8L * maxDistinct) + align16((long) maxDistinct * t);
                long accumulators = switch (problem) {
                    // one FP32 per (warp, token, gate|up, lane), needed only when the row takes several blocks
                    case Problem.ExpertGateUp _ -> blocks > 1 ? 4L * s.warpsPerCta() * t * 2 * 32 : 0;
                    // one FP32 per (warp, token, lane): the token of a routed entry is only known at run time
                    case Problem.ExpertDown _ -> 4L * s.warpsPerCta() * t * 32;
                };
                shared = routing + accumulators;
            }
            if (s.warpsPerOutput() > 1) {
                // one FP32 per (warp, value): gate and up per warp, or one per tile token for down
                int values = switch (problem) {
                    case Problem.ExpertGateUp _ -> 2;
                    case Problem.ExpertDown _ -> t;
                };
                shared += 4L * s.warpsPerCta() * values;
            }
            return new Layout(reduce, epl, chunks, blocks, maxDistinct, shared);
        }

        private static long align16(long bytes) {
            return (bytes + 15) & ~15L;
        }
    }

    public Layout layout(Problem.ExpertProblem problem) {
        return Layout.of(problem, this);
    }

    @Override
    public long sharedBytes(Problem.ExpertProblem problem) {
        return layout(problem).sharedBytes();
    }

    @Override
    public LaunchGeometry geometry(Problem.ExpertProblem problem, int tokens) {
        Layout layout = layout(problem);
        int tiles = Math.ceilDiv(tokens, tokensPerCta);
        int shared = Math.toIntExact(layout.sharedBytes());
        return switch (problem) {
            // one block per (neuron group, token and slot) or (neuron group, tile and distinct expert)
            case Problem.ExpertGateUp p -> new LaunchGeometry(Math.ceilDiv(p.shape().intermediate(), outputsPerCta()),
                    tokensPerCta == 1 ? tokens * p.shape().topk() : tiles * layout.maxDistinctExperts(),
                    ScheduleRules.threads(warpsPerCta), shared);
            // one block per (hidden group, token tile)
            case Problem.ExpertDown p -> new LaunchGeometry(Math.ceilDiv(p.shape().hidden(), outputsPerCta()), tiles,
                    ScheduleRules.threads(warpsPerCta), shared);
        };
    }

    /**
     * The (output group, token tile, routed expert) units that read weights: one token per warp
     * serves each (token, slot) pair; a tile of tokens reads each distinct expert of its tokens once,
     * estimated from the histogram as if the tile's T tokens were drawn at random from the batch of M
     * without replacement (expert e, on n_e tokens, misses the tile with probability C(M - n_e, T) / C(M, T)).
     */
    @Override
    public long workBlocks(Problem.ExpertProblem problem, int tokens, int[] expertLoad) {
        if (expertLoad.length != problem.shape().experts()) {
            throw new IllegalArgumentException("expert load of " + expertLoad.length + " experts for a problem of "
                    + problem.shape().experts());
        }
        int outputs = switch (problem) {
            case Problem.ExpertGateUp p -> p.shape().intermediate();
            case Problem.ExpertDown p -> p.shape().hidden();
        };
        long groups = Math.ceilDiv(outputs, outputsPerCta());
        if (tokensPerCta == 1) {
            long pairs = 0;
            for (int n : expertLoad) {
                pairs += n;
            }
            return groups * pairs;
        }
        int tiles = Math.ceilDiv(tokens, tokensPerCta);
        int perTile = Math.min(tokensPerCta, tokens);
        double distinct = 0;
        for (int n : expertLoad) {
            distinct += inTile(tokens, n, perTile);
        }
        return Math.max(1, Math.round(groups * tiles * distinct));
    }

    /**
     * The chance that an expert routed on {@code n} of {@code tokens} tokens is in a tile of
     * {@code per} of them drawn without replacement. In float, step by step: the dispatch's table of
     * it per token count (DispatchTable) holds these same values.
     */
    public static double inTile(int tokens, int n, int per) {
        float miss = 1.0f;
        for (int i = 0; i < per && miss > 0.0f; i++) {
            miss *= Math.max(0.0f, (float) (tokens - n - i) / (float) (tokens - i));
        }
        return 1.0 - miss;
    }

    @Override
    public int maxTokens(Problem.ExpertProblem problem) {
        int k = problem.shape().topk();
        return switch (problem) {
            case Problem.ExpertGateUp _ -> tokensPerCta == 1
                    ? LaunchGeometry.MAX_GRID_Y / k
                    : (LaunchGeometry.MAX_GRID_Y / layout(problem).maxDistinctExperts()) * tokensPerCta;
            case Problem.ExpertDown _ -> LaunchGeometry.MAX_GRID_Y * tokensPerCta;
        };
    }

    @Override
    public ScheduleModel model(Problem.ExpertProblem problem, Store epilogue) {
        Layout layout = layout(problem);
        boolean tiled = tokensPerCta > 1;
        List<String> own = new ArrayList<>();
        own.add("Each lane loads " + loadBytes + " bytes, " + kUnroll + " loads in flight per row; a row is "
                + layout.chunksPerRow() + " loads in " + layout.blocksPerRow() + " pass(es).");
        if (warpsPerOutput > 1) {
            own.add(warpsPerOutput + " warps share each output; their partial sums are added in shared memory in warp order.");
        }
        String unit = switch (problem) {
            case Problem.ExpertGateUp _ -> "one warp per (" + (tiled ? "tile of " + tokensPerCta + " tokens, distinct expert"
                    : "token, routed slot") + ", neuron)";
            case Problem.ExpertDown _ -> "one warp per (" + (tiled ? "tile of " + tokensPerCta + " tokens" : "token")
                    + ", hidden output); routing weights folded into one FP32 accumulator";
        };
        String body = switch (problem) {
            case Problem.ExpertGateUp _ -> tiled ? "gate_up_token_tile" : "gate_up_single_token";
            case Problem.ExpertDown _ -> tiled ? "down_token_tile" : "down_single_token";
        };
        return new ScheduleModel("expert.cu.ftl", body, List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kLoadBytes", loadBytes),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kTokensPerCta", tokensPerCta),
                ConfigConstant.integer("kWarpsPerOutput", warpsPerOutput)),
                ScheduleRules.expertNotes(problem, unit, false, own),
                minBlocksPerSm, 1, Optional.empty());
    }

    @Override
    public String spillAdvice() {
        return "fewer loads in flight (k_unroll " + kUnroll + "), fewer warps per block (warps_per_cta " + warpsPerCta
                + ") or no blocks-per-SM promise (min_blocks_per_sm " + minBlocksPerSm + ")";
    }
}
