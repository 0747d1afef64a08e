package dev.moeforge.runtime.dispatch;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.commons.math3.stat.regression.OLSMultipleLinearRegression;

/**
 * One configuration's time as a function of the thread blocks G its launch has work for (from the
 * live expert histogram, {@code Schedule.workBlocks}) on S SMs, and of the routed (token, slot)
 * pairs P: {@code T = a + b·ceil(G/S) + c·G + d·sqrt(G) + e·P}. The wave term counts whole waves:
 * with S fixed a continuous G/S would be G times a constant, the same column as the per-block term.
 * The concave sub-wave term is fitted only for a configuration whose median profiled grid is under
 * one wave; the others keep {@code d = 0}. Where every profiled grid takes the same number of waves
 * (a small geometry's tiles) the wave term is the constant again and is left out ({@code b = 0}).
 * The pairs term carries the work that grows with the tokens however the blocks are cut: an
 * output-centric tile's multiply-adds per weight row it reads, an expert-centric layer's gathers and
 * combine; without it one slope per block cannot price a tile of 8 tokens and one of 32 alike.
 * Coefficients by least squares on the relative error (each sample's row divided by its time, then
 * ordinary least squares): a configuration's times span orders of magnitude across batches, and
 * dispatch compares times, so a 10 us miss at 100 us must weigh what a 1 ms miss does at 10 ms.
 *
 * @param terms how many terms the fit used: 2 (a, b), 3 (and c), 4 (and d, under one wave), 5 (and e, unless
 *              P is a fixed multiple of G); one fewer where b is left out
 */
public record WaveCostModel(double a, double b, double c, double d, double e, int terms) {

    /** The largest model: all five terms. */
    public static final int MAX_TERMS = 5;

    /** One profiled point: the blocks with work, the routed pairs, and the measured time. */
    public record Sample(long blocks, long pairs, double micros) {}

    /** The predicted time for {@code blocks} blocks with work and {@code pairs} routed pairs on {@code sms} SMs. */
    public double predict(long blocks, long pairs, int sms) {
        return a + b * waves(blocks, sms) + c * blocks + d * Math.sqrt(blocks) + e * pairs;
    }

    /**
     * The least-squares model of {@code samples} with up to {@code maxTerms} terms (2 to 5: the
     * ablation); the sub-wave term joins only when the samples' median grid is under {@code sms}.
     * Needs more samples than terms.
     */
    public static WaveCostModel fit(List<Sample> samples, int sms, int maxTerms) {
        if (maxTerms < 2 || maxTerms > MAX_TERMS) {
            throw new IllegalArgumentException("terms = " + maxTerms + ": 2 to " + MAX_TERMS);
        }
        long[] grids = samples.stream().mapToLong(Sample::blocks).sorted().toArray();
        boolean subWave = maxTerms >= 4 && grids.length > 0 && grids[grids.length / 2] < sms;
        // where every grid takes the same number of waves (a small geometry's tiles), the wave term is the constant again
        boolean waveTerm = Arrays.stream(grids).mapToDouble(g -> waves(g, sms)).distinct().count() > 1;
        // where every block serves a fixed share of the pairs (one token per warp), P is G again
        boolean pairs = maxTerms == 5 && !proportional(samples);
        int terms = Math.min(maxTerms, 3) - (waveTerm ? 0 : 1) + (subWave ? 1 : 0) + (pairs ? 1 : 0);
        if (samples.size() <= terms) {
            throw new IllegalArgumentException(samples.size() + " samples for a model of " + terms + " terms: at least "
                    + (terms + 1));
        }
        double[] y = new double[samples.size()];
        double[][] x = new double[samples.size()][];
        for (int i = 0; i < samples.size(); i++) {
            Sample s = samples.get(i);
            if (!(s.micros() > 0)) {
                throw new IllegalArgumentException("a sample of " + s.micros() + " us: times are positive");
            }
            double scale = 1 / s.micros();  // the row of the relative error
            y[i] = 1;
            x[i] = columns(s, sms, maxTerms, waveTerm, subWave, pairs).stream().mapToDouble(v -> v * scale).toArray();
        }
        OLSMultipleLinearRegression ols = new OLSMultipleLinearRegression();
        ols.setNoIntercept(true);  // a is the first column, scaled like the others
        ols.newSampleData(y, x);
        double[] beta = ols.estimateRegressionParameters();
        int at = 0;
        double a = beta[at++];
        double b = waveTerm ? beta[at++] : 0;
        double c = maxTerms >= 3 ? beta[at++] : 0;
        double d = subWave ? beta[at++] : 0;
        double e = pairs ? beta[at] : 0;
        return new WaveCostModel(a, b, c, d, e, terms);
    }

    private static List<Double> columns(Sample s, int sms, int maxTerms, boolean waveTerm, boolean subWave, boolean pairs) {
        List<Double> row = new ArrayList<>(List.of(1.0));
        if (waveTerm) {
            row.add(waves(s.blocks(), sms));
        }
        if (maxTerms >= 3) {
            row.add((double) s.blocks());
        }
        if (subWave) {
            row.add(Math.sqrt(s.blocks()));
        }
        if (pairs) {
            row.add((double) s.pairs());
        }
        return row;
    }

    /** Whether the samples' pairs are one multiple of their blocks (the two columns are the same). */
    private static boolean proportional(List<Sample> samples) {
        Sample first = samples.getFirst();
        return samples.stream().allMatch(s -> s.pairs() * first.blocks() == first.pairs() * s.blocks());
    }

    private static double waves(long blocks, int sms) {
        return Math.ceilDiv(blocks, sms);
    }
}
