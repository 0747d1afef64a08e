package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.moe.ExpertCentricGpuTest.Case;
import dev.moeforge.runtime.moe.ExpertCentricGpuTest.RoutingKind;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Swap-AB tiles (wgmma with the weight rows on the MMA's M side and 8 to 64 pairs on its N side)
 * against the FP64 reference, on the expert-centric suite's geometries and routings: fresh inputs
 * each run, outputs poisoned, graph replay and a second run byte-identical, the plan the host
 * twin's. sm_90a only.
 */
@RequiresGpu
class ExpertCentricSwapAbGpuTest extends GpuSession {
    /** (gate_up, down): 8 pairs; 32 with a producer warpgroup, two warpgroups on gate_up, down's slots by the combine launch; 64. */
    static final List<ExpertCentric[]> SCHEDULES = List.of(
            new ExpertCentric[] {new ExpertCentric(8, 64, 64, 1, 4, 4, 1, true).withTma(true).withSwapAb(true),
                    new ExpertCentric(8, 128, 64, 1, 4, 4, 1, true).withTma(true).withSwapAb(true)},
            new ExpertCentric[] {new ExpertCentric(32, 128, 64, 1, 8, 5, 8, true).withTma(true).withProducer(true).withSwapAb(true),
                    new ExpertCentric(32, 128, 64, 1, 4, 4, 8, true).withTma(true).withProducer(true).withSwapAb(true)
                            .withCombineKernel(true)},
            new ExpertCentric[] {new ExpertCentric(64, 32, 64, 1, 4, 3, 1, true).withTma(true).withSwapAb(true),
                    new ExpertCentric(64, 64, 64, 1, 4, 3, 1, true).withTma(true).withSwapAb(true)});

    static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (int s = 0; s < SCHEDULES.size(); s++) {
            cases.addAll(ExpertCentricGpuTest.baseCases(s));
            for (int m : new int[] {8, 64, 256}) {
                cases.add(new Case(ExpertCentricGpuTest.QWEN3_30B, s, m, RoutingKind.UNIFORM));
            }
            cases.add(new Case(ExpertCentricGpuTest.GPT_OSS, s, 48, RoutingKind.UNIFORM));
        }
        return cases;
    }

    static Stream<Arguments> arguments() {
        return cases().stream().map(Arguments::of);
    }

    static ExpertLayerSpecs specs(Case c) {
        return ExpertCentricGpuTest.specs("ec_swap_", SCHEDULES, c.geometry(), c.schedule());
    }

    static boolean runsHere() {
        return runsOnThisGpu(SCHEDULES.getFirst()[0]);
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        if (runsHere()) {
            compileLayers(cases().stream().map(ExpertCentricSwapAbGpuTest::specs).toList());
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("arguments")
    void layerMatchesReference(Case c) {
        Assumptions.assumeTrue(runsHere(), "wgmma schedules run on sm_90a only");
        ExpertCentricGpuTest.checkLayer(c, specs(c), SCHEDULES.get(c.schedule())[1].atomicCombine());
    }
}
