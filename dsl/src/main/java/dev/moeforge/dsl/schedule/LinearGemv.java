package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Optional;

/**
 * A linear projection for a few tokens (decode): the outputs of a token are spread over
 * {@code ceil(N / outputsPerCta)} thread blocks, one warp per output's dot product (or several
 * warps per output, their parts added in shared memory in warp order, when the block has at least
 * twice as many warps as outputs), each warp's lanes streaming the weight row with
 * {@code kUnroll} loads in flight; lane 0 adds the bias, applies the epilogue and stores. The
 * scores phase is the decode routers' own. Each token reads the weights again, from L2 after the
 * first. Lowers {@code linear}.
 *
 * @param warpsPerCta   warps per thread block
 * @param loadBytes     bytes each lane loads per load of a weight row (16 = LDG.128)
 * @param kUnroll       loads per lane issued before the first is used
 * @param outputsPerCta outputs of one token per thread block
 */
public record LinearGemv(int warpsPerCta, int loadBytes, int kUnroll, int outputsPerCta) implements Schedule<Problem.Linear> {

    public static final ScheduleKind<LinearGemv, Problem.Linear> KIND = new ScheduleKind<>("linear_gemv", LinearGemv.class,
            Problem.Linear.class, LinearGemv::space);

    @Override
    public ScheduleKind<LinearGemv, Problem.Linear> kind() {
        return KIND;
    }

    /** Warps, loads in flight and outputs per block in powers of two; every load width. */
    private static List<LinearGemv> space(Problem.Linear problem, Target target) {
        return ScheduleRules.grid(KIND, List.of(ScheduleRules.powersOfTwo(1, ScheduleRules.maxWarps(target)),
                ScheduleRules.LOAD_BYTES, ScheduleRules.powersOfTwo(1, 16), ScheduleRules.powersOfTwo(1, 64)));
    }

    @Override
    public void check(Problem.Linear l, Target target, List<SpecError> errors) {
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        ScheduleRules.rowLoads(errors, "problem.inputs", l.inputs(), l.weights(), loadBytes);
        range(errors, "schedule.k_unroll", kUnroll, 1, 16);
        range(errors, "schedule.outputs_per_cta", outputsPerCta, 1, Math.max(1, Math.min(l.outputs(), 1024)));
    }

    /** Thread blocks per token. */
    public int blocksPerToken(Problem.Linear problem) {
        return Math.ceilDiv(problem.outputs(), outputsPerCta);
    }

    @Override
    public long sharedBytes(Problem.Linear problem) {
        return 0;
    }

    /** One block per (slice of outputs, token). */
    @Override
    public LaunchGeometry geometry(Problem.Linear problem, int tokens) {
        return new LaunchGeometry(blocksPerToken(problem), tokens, ScheduleRules.threads(warpsPerCta), 0);
    }

    @Override
    public int maxTokens(Problem.Linear problem) {
        return LaunchGeometry.MAX_GRID_Y;
    }

    @Override
    public ScheduleModel model(Problem.Linear l, Store epilogue) {
        int split = RouterGemv.warpsPerScore(warpsPerCta, outputsPerCta);
        List<ConfigConstant> config = List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kLoadBytes", loadBytes),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kOutputsPerCta", outputsPerCta),
                ConfigConstant.integer("kWarpsPerOutput", split));
        List<String> notes = List.of(
                "linear: " + blocksPerToken(l) + " blocks per token, " + (split == 1 ? "one warp per output"
                        : "each output split over " + split + " warps (parts added in warp order)")
                        + "; lane 0 adds the bias, applies the epilogue and stores.",
                "Each lane loads " + loadBytes + " bytes, " + kUnroll + " loads in flight per row.");
        return new ScheduleModel("expert.cu.ftl", "linear_gemv", config, notes, 0, 1, Optional.empty());
    }

    @Override
    public String spillAdvice() {
        return RouterGemv.fewerLoadsOrWarps(kUnroll, warpsPerCta);
    }
}
