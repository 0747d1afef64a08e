package dev.moeforge.runtime.dispatch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The cost model's fit recovers known coefficients, picks its terms as documented, and the grids it reads. */
class WaveCostModelTest {
    static final int SMS = 132;

    /** The routed pairs of a sample with {@code g} blocks: any function of g not linear in it, as a batch's pairs are not. */
    static long pairsOf(long g) {
        return 3 * g + (g * g) % 97;
    }

    static List<WaveCostModel.Sample> samples(WaveCostModel truth, long[] grids, double noise, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        List<WaveCostModel.Sample> out = new ArrayList<>();
        for (long g : grids) {
            out.add(new WaveCostModel.Sample(g, pairsOf(g), truth.predict(g, pairsOf(g), SMS) * (1 + noise * r.nextGaussian())));
        }
        return out;
    }

    @Test
    void recoversTheCoefficientsOfFourTermsUnderOneWave() {
        WaveCostModel truth = new WaveCostModel(20, 15, 0.05, 3, 0, 4);
        long[] grids = {8, 16, 24, 40, 64, 80, 100, 120, 200, 400, 20, 30};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 4);
        assertEquals(4, fit.terms());
        assertEquals(20, fit.a(), 1e-6);
        assertEquals(15, fit.b(), 1e-6);
        assertEquals(0.05, fit.c(), 1e-9);
        assertEquals(3, fit.d(), 1e-6);
    }

    @Test
    void recoversThePairsTerm() {
        WaveCostModel truth = new WaveCostModel(10, 25, 0.03, 0, 0.004, 4);
        long[] grids = {300, 500, 700, 900, 1200, 1500, 2000, 2600, 3100, 4000, 5000, 6500};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 5);
        assertEquals(4, fit.terms(), "a, b, c and e: the median grid is above one wave");
        assertEquals(0.004, fit.e(), 1e-9);
        assertEquals(0.03, fit.c(), 1e-9);
        assertEquals(0, WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 4).e(), "no pairs term below five");
    }

    /** A small geometry's tiles: every grid in one wave, where the wave term is the constant again and drops out. */
    @Test
    void gridsOfOneWaveLeaveTheWaveTermOut() {
        WaveCostModel truth = new WaveCostModel(12, 0, 0.2, 2, 0.01, 5);
        long[] grids = {2, 5, 8, 13, 21, 34, 55, 89, 120, 131};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 5);
        assertEquals(4, fit.terms(), "a, c, d and e: no b");
        assertEquals(0, fit.b());
        assertEquals(12, fit.a(), 1e-6);
        assertEquals(0.2, fit.c(), 1e-9);
        assertEquals(2, fit.d(), 1e-6);
        assertEquals(0.01, fit.e(), 1e-9);
    }

    @Test
    void theSubWaveTermJoinsOnlyUnderOneWaveAndNoisyPointsStillPredictWithinAFewPercent() {
        WaveCostModel truth = new WaveCostModel(30, 40, 0.02, 0, 0, 3);
        long[] grids = {300, 500, 700, 900, 1200, 1500, 2000, 2600, 3100, 4000, 5000, 6500};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0.01, 7), SMS, 4);
        assertEquals(3, fit.terms(), "the median grid is above one wave");
        assertEquals(0, fit.d());
        for (long g : new long[] {350, 1000, 3000, 6000}) {
            double expected = truth.predict(g, pairsOf(g), SMS);
            double got = fit.predict(g, pairsOf(g), SMS);
            assertTrue(Math.abs(got - expected) / expected < 0.03, g + ": " + got + " vs " + expected);
        }
        assertEquals(2, WaveCostModel.fit(samples(truth, grids, 0, 7), SMS, 2).terms());
        assertThrows(IllegalArgumentException.class, () -> WaveCostModel.fit(samples(truth, new long[] {1, 2, 3}, 0, 1), SMS, 4));
        assertThrows(IllegalArgumentException.class, () -> WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 6));
        assertThrows(IllegalArgumentException.class, () -> WaveCostModel.fit(List.of(new WaveCostModel.Sample(1, 1, 0),
                new WaveCostModel.Sample(2, 2, 1), new WaveCostModel.Sample(3, 3, 1), new WaveCostModel.Sample(4, 4, 1)), SMS, 2));
    }

    @Test
    void workBlocksFollowTheHistogram() {
        ExpertShape shape = new ExpertShape(2048, 768, 128, 8);
        Problem.ExpertGateUp gateUp = new Problem.ExpertGateUp(shape, WeightFormat.BF16, DType.BF16,
                dev.moeforge.dsl.ir.GateUpLayout.STACKED);
        int[] load = new int[128];
        load[0] = 33;  // 3 tiles of 16
        load[5] = 16;  // 1
        load[9] = 1;   // 1
        ExpertCentric ec = new ExpertCentric(16, 64, 64, 1, 4, 4, 1);
        assertEquals(5L * (768 / 64), ec.workBlocks(gateUp, 7, load));
        // 7 tokens: expert 0 on all of them, 3 on four, 9 on one
        int[] few = new int[128];
        few[0] = 7;
        few[3] = 4;
        few[9] = 1;
        // one token per warp: each routed pair's neuron groups
        OutputCentric perToken = new OutputCentric(4, 16, 4, 1, 1, 0);
        int groups = Math.ceilDiv(768, perToken.outputsPerCta());
        assertEquals(12L * groups, perToken.workBlocks(gateUp, 7, few));
        // one tile of all 7 tokens: each of the 3 experts read once
        OutputCentric tile = new OutputCentric(4, 16, 4, 8, 1, 0);
        assertEquals(3L * Math.ceilDiv(768, tile.outputsPerCta()), tile.workBlocks(gateUp, 7, few));
        // 16 tokens in two tiles of 8: expert 0 (on every token) in both, expert 5 (on one) in either with chance 1/2
        int[] two = new int[128];
        two[0] = 16;
        two[5] = 1;
        assertEquals(3L * Math.ceilDiv(768, tile.outputsPerCta()), tile.workBlocks(gateUp, 16, two));
    }
}
