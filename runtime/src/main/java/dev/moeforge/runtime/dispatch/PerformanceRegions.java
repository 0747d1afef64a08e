package dev.moeforge.runtime.dispatch;

import dev.moeforge.dsl.ir.ExpertShape;
import java.util.ArrayList;
import java.util.List;

/**
 * Four variables of an expert layer's geometry that say, before anything is profiled, which kernel
 * optimisations can pay. They are stated for a reference gate_up tile of {@link #REFERENCE_ROWS}
 * weight rows and {@link #REFERENCE_K}-element K slices, so geometries compare with each other
 * rather than with one pool's tiles.
 *
 * <ul>
 *   <li><b>compute density</b> rho = n tiles x k slices of one expert's gate_up: the tile steps a
 *       block covering an expert's outputs performs. Below {@link #DENSITY_THRESHOLD} a block's fixed
 *       start (pipeline fill, epilogue) is a large share of its work, so the tile's shape (pairs per
 *       tile, stages) is the lever;</li>
 *   <li><b>L2 pressure</b> lambda = one expert's gate_up weight bytes over the part of L2 left to
 *       weights ({@link #L2_SHARE}). Above 1, tiles of one expert that run in different waves read
 *       its weights from memory again, and walking an expert's m tiles together (GROUP_M) pays;</li>
 *   <li><b>wave utilisation</b> omega = G / S, the tile grid of the step's expert load over the SMs:
 *       the only variable the routing moves. Below 1 part of the GPU idles;</li>
 *   <li><b>K depth</b> kappa = the k slices of gate_up's reduction. Splitting K over blocks fills
 *       idle SMs only where omega is under {@link #SPLIT_K_WAVES} and kappa is at least
 *       {@link #SPLIT_K_DEPTH} (enough reduction to split four ways and amortise the second pass).</li>
 * </ul>
 *
 * @param shape          the expert geometry
 * @param expertBytes    one expert's gate_up weights (codes and block scales)
 * @param sms            the device's SMs
 * @param l2Bytes        the device's L2
 * @param nTiles         reference n tiles of gate_up (2I weight rows)
 * @param kDepth         kappa: reference K slices of gate_up (H)
 * @param density        rho = nTiles x kDepth
 * @param l2Pressure     lambda = expertBytes / (L2_SHARE x l2Bytes)
 */
public record PerformanceRegions(ExpertShape shape, double expertBytes, int sms, long l2Bytes, long nTiles, long kDepth,
                                 long density, double l2Pressure) {
    public static final int REFERENCE_ROWS = 256;
    public static final int REFERENCE_K = 128;
    /** The share of L2 that holds weights while a layer runs (the rest: activations, the plan, partial sums). */
    public static final double L2_SHARE = 0.75;
    /** rho below which a block's fixed start is a large share of its work. */
    public static final long DENSITY_THRESHOLD = 512;
    /** Split-K needs at least this many reference K slices to split four ways. */
    public static final long SPLIT_K_DEPTH = 32;
    /** ... and a grid under a quarter wave, so that four times the blocks still fit one wave. */
    public static final double SPLIT_K_WAVES = 0.25;

    /** The variables of {@code shape} with {@code expertBytes} of gate_up weights per expert on a device of {@code sms} SMs. */
    public static PerformanceRegions of(ExpertShape shape, double expertBytes, int sms, long l2Bytes) {
        if (sms < 1 || l2Bytes < 1 || !(expertBytes > 0)) {
            throw new IllegalArgumentException("SMs, L2 bytes and expert bytes must be positive: " + sms + ", " + l2Bytes + ", " + expertBytes);
        }
        long nTiles = Math.ceilDiv(2L * shape.intermediate(), REFERENCE_ROWS);
        long kDepth = Math.ceilDiv(shape.hidden(), REFERENCE_K);
        return new PerformanceRegions(shape, expertBytes, sms, l2Bytes, nTiles, kDepth, nTiles * kDepth,
                expertBytes / (L2_SHARE * l2Bytes));
    }

    /** Region A (pipeline-dominated: rho under the threshold) or B. */
    public String region() {
        return pipelineDominated() ? "A" : "B";
    }

    public boolean pipelineDominated() {
        return density < DENSITY_THRESHOLD;
    }

    public boolean groupMPays() {
        return l2Pressure > 1.0;
    }

    /** omega for gate_up tiles of {@code blockM} pairs x {@link #REFERENCE_ROWS} weight rows on this expert load. */
    public double waveUtilisation(int[] expertLoad, int blockM) {
        if (expertLoad.length != shape.experts()) {
            throw new IllegalArgumentException("an expert load of " + expertLoad.length + " experts for a layer of " + shape.experts());
        }
        long tiles = 0;
        for (int n : expertLoad) {
            tiles += Math.ceilDiv(n, blockM);
        }
        return (double) (tiles * nTiles) / sms;
    }

    public boolean splitKPays(double omega) {
        return omega < SPLIT_K_WAVES && kDepth >= SPLIT_K_DEPTH;
    }

    /** The optimisations the geometry predicts at a wave utilisation of {@code omega}. */
    public List<String> predicted(double omega) {
        List<String> out = new ArrayList<>();
        out.add("tile shape");
        if (groupMPays()) {
            out.add("GROUP_M");
        }
        if (splitKPays(omega)) {
            out.add("split-K");
        }
        return out;
    }
}
