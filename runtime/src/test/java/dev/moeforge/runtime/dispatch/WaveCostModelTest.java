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

    static List<WaveCostModel.Sample> samples(WaveCostModel truth, long[] grids, double noise, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        List<WaveCostModel.Sample> out = new ArrayList<>();
        for (long g : grids) {
            out.add(new WaveCostModel.Sample(g, truth.predict(g, SMS) * (1 + noise * r.nextGaussian())));
        }
        return out;
    }

    @Test
    void recoversTheCoefficientsOfFourTermsUnderOneWave() {
        WaveCostModel truth = new WaveCostModel(20, 15, 0.05, 3, 4);
        long[] grids = {8, 16, 24, 40, 64, 80, 100, 120, 200, 400, 20, 30};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 4);
        assertEquals(4, fit.terms());
        assertEquals(20, fit.a(), 1e-6);
        assertEquals(15, fit.b(), 1e-6);
        assertEquals(0.05, fit.c(), 1e-9);
        assertEquals(3, fit.d(), 1e-6);
    }

    @Test
    void theSubWaveTermJoinsOnlyUnderOneWaveAndNoisyPointsStillPredictWithinAFewPercent() {
        WaveCostModel truth = new WaveCostModel(30, 40, 0.02, 0, 3);
        long[] grids = {300, 500, 700, 900, 1200, 1500, 2000, 2600, 3100, 4000, 5000, 6500};
        WaveCostModel fit = WaveCostModel.fit(samples(truth, grids, 0.01, 7), SMS, 4);
        assertEquals(3, fit.terms(), "the median grid is above one wave");
        assertEquals(0, fit.d());
        for (long g : new long[] {350, 1000, 3000, 6000}) {
            double expected = truth.predict(g, SMS);
            assertTrue(Math.abs(fit.predict(g, SMS) - expected) / expected < 0.03, g + ": " + fit.predict(g, SMS) + " vs " + expected);
        }
        assertEquals(2, WaveCostModel.fit(samples(truth, grids, 0, 7), SMS, 2).terms());
        assertThrows(IllegalArgumentException.class, () -> WaveCostModel.fit(samples(truth, new long[] {1, 2, 3}, 0, 1), SMS, 4));
        assertThrows(IllegalArgumentException.class, () -> WaveCostModel.fit(samples(truth, grids, 0, 1), SMS, 5));
    }

    @Test
    void expertCentricGridFollowsTheHistogramAndOutputCentricTheLaunch() {
        ExpertShape shape = new ExpertShape(2048, 768, 128, 8);
        Problem.ExpertGateUp gateUp = new Problem.ExpertGateUp(shape, WeightFormat.BF16, DType.BF16,
                dev.moeforge.dsl.ir.GateUpLayout.STACKED);
        int[] load = new int[128];
        load[0] = 33;  // 3 tiles of 16
        load[5] = 16;  // 1
        load[9] = 1;   // 1
        ExpertCentric ec = new ExpertCentric(16, 64, 64, 1, 4, 4, 1);
        assertEquals(5L * (768 / 64), ec.workBlocks(gateUp, 7, load));
        OutputCentric oc = new OutputCentric(4, 16, 4, 1, 1, 0);
        var g = oc.geometry(gateUp, 7);
        assertEquals((long) g.gridX() * g.gridY(), oc.workBlocks(gateUp, 7, load));
    }
}
