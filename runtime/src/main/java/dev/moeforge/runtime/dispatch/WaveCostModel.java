package dev.moeforge.runtime.dispatch;

import java.util.Arrays;
import java.util.List;
import org.apache.commons.math3.stat.regression.OLSMultipleLinearRegression;

/**
 * One configuration's time as a function of the thread blocks G its launch has work for (from the
 * live expert histogram, {@code Schedule.workBlocks}) on S SMs:
 * {@code T = a + b·ceil(G/S) + c·G + d·sqrt(G)}. The wave term counts whole waves: with S fixed a
 * continuous G/S would be G times a constant, the same column as the per-block term. The concave
 * sub-wave term is fitted only for a configuration whose median profiled grid is under one wave;
 * the others keep {@code d = 0}. Coefficients by ordinary least squares.
 *
 * @param terms how many of the four terms the fit used: 2 (a, b), 3 (and c) or 4 (and d)
 */
public record WaveCostModel(double a, double b, double c, double d, int terms) {

    /** One profiled point: the blocks with work and the measured time. */
    public record Sample(long blocks, double micros) {}

    /** The predicted time for {@code blocks} blocks with work on {@code sms} SMs. */
    public double predict(long blocks, int sms) {
        return a + b * waves(blocks, sms) + c * blocks + d * Math.sqrt(blocks);
    }

    /**
     * The least-squares model of {@code samples} with up to {@code maxTerms} terms (2, 3 or 4: the
     * ablation); the sub-wave term joins only when the samples' median grid is under {@code sms}.
     * Needs more samples than terms.
     */
    public static WaveCostModel fit(List<Sample> samples, int sms, int maxTerms) {
        if (maxTerms < 2 || maxTerms > 4) {
            throw new IllegalArgumentException("terms = " + maxTerms + ": 2, 3 or 4");
        }
        long[] grids = samples.stream().mapToLong(Sample::blocks).sorted().toArray();
        int terms = maxTerms == 4 && grids.length > 0 && grids[grids.length / 2] >= sms ? 3 : maxTerms;
        int regressors = terms - 1;  // a is the intercept
        if (samples.size() <= terms) {
            throw new IllegalArgumentException(samples.size() + " samples for a model of " + terms + " terms: at least "
                    + (terms + 1));
        }
        double[] y = new double[samples.size()];
        double[][] x = new double[samples.size()][regressors];
        for (int i = 0; i < samples.size(); i++) {
            Sample s = samples.get(i);
            y[i] = s.micros();
            double[] row = {waves(s.blocks(), sms), s.blocks(), Math.sqrt(s.blocks())};
            x[i] = Arrays.copyOf(row, regressors);
        }
        OLSMultipleLinearRegression ols = new OLSMultipleLinearRegression();
        ols.newSampleData(y, x);
        double[] beta = ols.estimateRegressionParameters();
        double[] all = Arrays.copyOf(beta, 4);
        return new WaveCostModel(all[0], all[1], all[2], all[3], terms);
    }

    private static double waves(long blocks, int sms) {
        return Math.ceilDiv(blocks, sms);
    }
}
