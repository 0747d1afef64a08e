package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.ir.Problem;

/**
 * What the schedules of {@code linear} share: one thread block per (slice of {@link #outputsPerCta}
 * outputs, group of {@link #tokensPerCta} tokens), the groups of a slice consecutive along x so that
 * they run together and share the slice's weights in L2, and no dynamic shared memory.
 */
public sealed interface LinearSchedule extends Schedule<Problem.Linear> permits LinearGemv, LinearMma {

    int warpsPerCta();

    int outputsPerCta();

    int tokensPerCta();

    /** Thread blocks per token group: the slices of the outputs. */
    default int blocksPerToken(Problem.Linear problem) {
        return Math.ceilDiv(problem.outputs(), outputsPerCta());
    }

    @Override
    default long sharedBytes(Problem.Linear problem) {
        return 0;
    }

    @Override
    default LaunchGeometry geometry(Problem.Linear problem, int tokens) {
        return new LaunchGeometry(blocksPerToken(problem) * Math.ceilDiv(tokens, tokensPerCta()), 1,
                ScheduleRules.threads(warpsPerCta()), 0);
    }

    /** As many as keep the grid within CUDA's limit on gridDim.x. */
    @Override
    default int maxTokens(Problem.Linear problem) {
        return (int) Math.min(Integer.MAX_VALUE, (long) (Integer.MAX_VALUE / blocksPerToken(problem)) * tokensPerCta());
    }
}
