package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.dispatch.PerformanceRegions;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge regions}: the four performance-region variables of an expert layer's geometry
 * ({@link PerformanceRegions}) and the optimisations they predict; with {@code --profile DIR}, whether
 * the predictions held in that pool's profile.
 */
@Command(name = "regions", mixinStandardHelpOptions = true,
        description = "Prints an expert layer's performance-region variables (compute density, L2 pressure, wave utilisation, "
                + "K depth) and the optimisations they predict (tile shape, GROUP_M, split-K); with --profile DIR, whether each "
                + "prediction held in that pool's profile.")
public final class RegionsCommand implements Callable<Integer> {

    @ArgGroup(exclusive = true, multiplicity = "1")
    PoolCommand.Geometry geometry;

    @Option(names = "--format", defaultValue = "bf16", description = "Weight format (default: ${DEFAULT-VALUE}).")
    String format;

    @Option(names = "--sms", defaultValue = "132", description = "SMs of the device (default: ${DEFAULT-VALUE}, the H100 SXM).")
    int sms;

    @Option(names = "--l2-mb", defaultValue = "50", description = "L2 of the device in MB (default: ${DEFAULT-VALUE}).")
    int l2Mb;

    @Option(names = "--batches", split = ",", defaultValue = "1,8,32,128,512,2048,8192", description = "Tokens per step to "
            + "print the wave utilisation at (default: ${DEFAULT-VALUE}).")
    List<Integer> batches;

    @Option(names = "--balancedness", split = ",", defaultValue = "1.0,0.8,0.6", description = "Balancedness of the expert "
            + "load (entropy over ln E) at each batch, where the batch reaches it (default: ${DEFAULT-VALUE}).")
    List<Double> balancedness;

    @Option(names = "--profile", paramLabel = "DIR", description = "A pool directory with profile.json (`moeforge profile`): "
            + "check the predictions against its timings. Its geometry is the one analysed.")
    Path profile;

    @Spec
    CommandSpec command;

    /** Tile heights the wave utilisation is printed for. */
    static final int[] BLOCK_M = {16, 64, 128};
    /** Within this ratio two timings count as the same. */
    static final double SAME = 0.03;
    static final long SEED = 20261127;

    @Override
    public Integer call() throws Exception {
        PrintWriter out = command.commandLine().getOut();
        LayerGeometry chosen = LayerGeometry.of(geometry.model, geometry.shape);
        WeightFormat weights = QuantizeCommand.parseFormat("--format", format);
        requireAtLeast("--sms", sms, 1);
        requireAtLeast("--l2-mb", l2Mb, 1);
        for (int batch : batches) {
            requireAtLeast("--batches", batch, 1);
        }
        for (double beta : balancedness) {
            if (!(beta > 0 && beta <= 1)) {
                throw new IllegalArgumentException("--balancedness " + beta + ": from above 0 to 1 (entropy of the expert load over ln E)");
            }
        }
        ExpertShape shape = chosen.shape();
        PerformanceRegions r = PerformanceRegions.of(shape, gateUpBytes(weights, shape), sms, (long) l2Mb << 20);
        out.printf(Locale.ROOT, "%s: H=%d I=%d E=%d top-%d, %s; %d SMs, %d MB of L2 (%.1f MB of it for weights)%n", chosen.name(),
                shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), weights.text(), sms, l2Mb,
                PerformanceRegions.L2_SHARE * l2Mb);
        out.printf(Locale.ROOT, "  compute density  rho    = %d n tiles x %d k slices = %d   (%s %d: %s)%n", r.nTiles(), r.kDepth(),
                r.density(), r.pipelineDominated() ? "under" : "at least", PerformanceRegions.DENSITY_THRESHOLD,
                r.pipelineDominated() ? "region A, a block's fill and epilogue weigh: the tile shape is the lever"
                        : "region B, blocks long enough that their start is amortised");
        out.printf(Locale.ROOT, "  L2 pressure      lambda = %.1f MB per expert's gate_up / %.1f MB = %.2f   (%s)%n", r.expertBytes() / (1 << 20),
                PerformanceRegions.L2_SHARE * l2Mb, r.l2Pressure(), r.groupMPays()
                        ? "over 1: an expert's weights leave L2 between its tiles, GROUP_M pays"
                        : "at most 1: an expert's weights stay in L2, GROUP_M should not matter");
        out.printf(Locale.ROOT, "  K depth          kappa  = %d   (%s %d: split-K %s)%n", r.kDepth(),
                r.kDepth() >= PerformanceRegions.SPLIT_K_DEPTH ? "at least" : "under", PerformanceRegions.SPLIT_K_DEPTH,
                r.kDepth() >= PerformanceRegions.SPLIT_K_DEPTH ? "pays where omega < " + PerformanceRegions.SPLIT_K_WAVES
                        : "should not pay at any batch");
        out.printf(Locale.ROOT, "  wave utilisation omega  = G / S for gate_up tiles of bm pairs x %d weight rows:%n",
                PerformanceRegions.REFERENCE_ROWS);
        out.printf(Locale.ROOT, "    %6s %6s %8s %8s %8s   %s%n", "batch", "beta", "bm=16", "bm=64", "bm=128", "predicted");
        for (int batch : batches) {
            List<Routing> routings = new ArrayList<>();
            for (double beta : balancedness) {
                try {
                    routings.add(RandomInputs.skewedRouting(SEED, batch, shape.experts(), shape.topk(), beta));
                } catch (IllegalArgumentException unreachable) {
                    // this batch cannot reach this balancedness
                }
            }
            if (routings.isEmpty()) {  // none of the levels: the batch's own uniform draw
                routings.add(RandomInputs.uniformRouting(SEED, batch, shape.experts(), shape.topk()));
            }
            for (Routing routing : routings) {
                int[] load = routing.expertLoad(shape.experts());
                double[] omega = new double[BLOCK_M.length];
                for (int i = 0; i < BLOCK_M.length; i++) {
                    omega[i] = r.waveUtilisation(load, BLOCK_M[i]);
                }
                // split-K's condition read on the smallest tile's grid, the largest there is
                out.printf(Locale.ROOT, "    %6d %6.2f %8.2f %8.2f %8.2f   %s%n", batch, routing.balancedness(shape.experts()), omega[0],
                        omega[1], omega[2], String.join(" + ", r.predicted(omega[0])));
            }
        }
        if (profile != null) {
            check(out, r, PoolDirectory.load(profile).fit());
        }
        return 0;
    }

    private static void requireAtLeast(String option, int value, int least) {
        if (value < least) {
            throw new IllegalArgumentException(option + " " + value + ": at least " + least);
        }
    }

    /** One expert's gate_up weights in {@code f}: the codes and the block scales (a row's FP32 scale is left out: 4 bytes a row). */
    static double gateUpBytes(WeightFormat f, ExpertShape shape) {
        int rows = 2 * shape.intermediate();
        return (double) f.rowBytes(shape.hidden()) * rows + (double) f.blockScale().perExpert(rows, shape.hidden()) * f.blockScale().bytes();
    }

    /** Whether each prediction held in the profile's timings. */
    void check(PrintWriter out, PerformanceRegions r, PoolFit fit) {
        out.printf(Locale.ROOT, "against the profile in %s (%d points):%n", profile, fit.points().size());
        // GROUP_M: expert-centric configs that differ only in group_m, at every point both were timed
        List<Double> ratios = new ArrayList<>();
        int twins = 0;
        for (PoolFit.Config c : fit.configs()) {
            if (!(c.schedule() instanceof ExpertCentric ec) || ec.groupM() == 1) {
                continue;
            }
            ExpertCentric flat = ec.withGroupM(1);
            for (PoolFit.Config t : fit.configs()) {
                if (t.half() == c.half() && flat.equals(t.schedule())) {
                    twins++;
                    for (PoolFit.Point p : fit.points()) {
                        double grouped = fit.measured(c, p).orElse(Double.NaN), plain = fit.measured(t, p).orElse(Double.NaN);
                        if (!Double.isNaN(grouped) && !Double.isNaN(plain)) {
                            ratios.add(plain / grouped);
                        }
                    }
                }
            }
        }
        if (ratios.isEmpty()) {
            out.println("  GROUP_M: the pool has no configs that differ only in group_m: not testable");
        } else {
            Collections.sort(ratios);
            double median = quantile(ratios, 0.5);
            boolean pays = median > 1 + SAME;
            out.printf(Locale.ROOT, "  GROUP_M: %d pairs of configs that differ only in group_m, %d timings: time with group_m 1 over "
                    + "time with it on, median %.3fx (p10 %.3fx, p90 %.3fx): %s; predicted %s: %s%n", twins, ratios.size(), median,
                    quantile(ratios, 0.1), quantile(ratios, 0.9), pays ? "GROUP_M pays" : "GROUP_M does not matter",
                    r.groupMPays() ? "pays" : "does not matter", pays == r.groupMPays() ? "held" : "did not hold");
        }
        // tile shape: which tiles win somewhere
        Map<String, Set<String>> winnersByHalf = new LinkedHashMap<>();
        for (PoolFit.Half half : PoolFit.Half.values()) {
            Set<String> shapes = new LinkedHashSet<>();
            for (PoolFit.Point p : fit.points()) {
                shapes.add(tileOf(fit.best(half, p)));
            }
            winnersByHalf.put(half.name().toLowerCase(Locale.ROOT), shapes);
        }
        boolean several = winnersByHalf.values().stream().allMatch(s -> s.size() > 1);
        out.printf(Locale.ROOT, "  tile shape: the winning tiles over the points: %s: %s; predicted the lever%s: %s%n",
                winnersByHalf, several ? "the tile changes with the point" : "one tile wins everywhere in a half",
                r.pipelineDominated() ? " (region A)" : " (with the rest, region B)", several ? "held" : "did not hold");
        // wave utilisation: at a batch, does the winner change with the routing alone?
        Map<Integer, Set<String>> byBatch = new LinkedHashMap<>();
        for (PoolFit.Point p : fit.points()) {
            byBatch.computeIfAbsent(p.batch(), b -> new LinkedHashSet<>())
                    .add(fit.best(PoolFit.Half.GATE_UP, p).name() + "|" + fit.best(PoolFit.Half.DOWN, p).name());
        }
        long routed = byBatch.entrySet().stream().filter(e -> e.getValue().size() > 1).count();
        long multi = fit.points().stream().map(PoolFit.Point::batch).distinct()
                .filter(b -> fit.points().stream().filter(p -> p.batch() == b).count() > 1).count();
        out.printf(Locale.ROOT, "  wave utilisation: at %d of the %d batches profiled at more than one balancedness the winning pair "
                + "changes with the routing alone; predicted routing-dependent: %s%n", routed, multi, routed > 0 ? "held" : "did not hold");
        // the pool's schedules (output_centric, expert_centric) reduce each tile's K in one block
        out.printf(Locale.ROOT, "  split-K: no pool schedule splits K: not testable (predicted %s)%n",
                r.kDepth() >= PerformanceRegions.SPLIT_K_DEPTH ? "to pay under a quarter wave" : "not to pay");
    }

    /** An expert-centric config's tile (pairs x outputs, mma), or its family's name. */
    static String tileOf(PoolFit.Config c) {
        return c.schedule() instanceof ExpertCentric ec
                ? ec.blockM() + "x" + ec.blockN() + (ec.wgmma() ? " wgmma" : "")
                : c.schedule().kind().name();
    }

    static double quantile(List<Double> sorted, double q) {
        return sorted.get((int) Math.min(sorted.size() - 1, Math.round(q * (sorted.size() - 1))));
    }
}
