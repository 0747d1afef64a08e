package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule.OutputCentric;

/**
 * The derived sizes of an output-centric kernel: how its reduction dimension is cut into loads
 * and blocks, and how much shared memory its thread block needs. The single statement of these
 * facts: validation, the CUDA emitter and the launcher all read them from here, so the
 * shared-memory limit checked is the one the kernel asks for.
 */
public record OutputCentricLayout(
        int reduceLength,
        int elementsPerLoad,
        int chunksPerRow,
        int blocksPerRow,
        int maxDistinctExperts,
        long sharedBytes) {

    /**
     * Shared memory: the tile's routing table and per-lane accumulators (tokensPerCta > 1), then the
     * per-warp partial sums that the warps of one output add up (warpsPerOutput > 1).
     */
    public static OutputCentricLayout of(Problem.ExpertProblem problem, OutputCentric s) {
        ExpertShape shape = problem.shape();
        int reduce = switch (problem) {
            case Problem.ExpertGateUp _ -> shape.hidden();
            case Problem.ExpertDown _ -> shape.intermediate();
        };
        int epl = Math.max(1, problem.weights().elementsPerLoad(s.loadBytes()));
        int chunks = ceilDiv(reduce, epl);
        int blocks = ceilDiv(chunks, 32 * s.kUnroll());
        int t = s.tokensPerCta();
        int maxDistinct = (int) Math.min((long) t * shape.topk(), shape.experts());
        long shared = 0;
        if (t > 1) {
            int bitmapWords = ceilDiv(shape.experts(), 32);
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
        return new OutputCentricLayout(reduce, epl, chunks, blocks, maxDistinct, shared);
    }

    private static int ceilDiv(int a, int b) {
        return (a + b - 1) / b;
    }

    private static long align16(long bytes) {
        return (bytes + 15) & ~15L;
    }
}
