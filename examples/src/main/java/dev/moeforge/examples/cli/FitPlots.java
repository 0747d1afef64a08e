package dev.moeforge.examples.cli;

import dev.moeforge.runtime.dispatch.PoolFit;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.jfree.chart.ChartUtils;
import org.jfree.chart.JFreeChart;
import org.jfree.chart.axis.LogAxis;
import org.jfree.chart.axis.NumberAxis;
import org.jfree.chart.plot.XYPlot;
import org.jfree.chart.renderer.xy.XYLineAndShapeRenderer;
import org.jfree.data.xy.XYSeries;
import org.jfree.data.xy.XYSeriesCollection;

/** The pictures `fit` writes: the regret CDF, the winning pair over (batch, balancedness), measured against predicted. */
final class FitPlots {
    private static final int WIDTH = 1000;
    private static final int HEIGHT = 650;

    /** The pictures, in the order {@link #write} draws them. */
    static final List<String> NAMES = List.of("regret-cdf.png", "winners.png", "predicted.png");

    private FitPlots() {}

    static List<Path> write(Path dir, PoolFit fit, Map<String, WaveCostModel> models, List<PoolFit.Choice> heldOut, int sms)
            throws IOException {
        System.setProperty("java.awt.headless", "true");
        // every picture drawn before any is written: a runtime that cannot draw leaves no half-written file
        Map<String, byte[]> drawn = new LinkedHashMap<>();
        drawn.put(NAMES.get(0), png(regretCdf(fit)));
        drawn.put(NAMES.get(1), png(winners(fit)));
        drawn.put(NAMES.get(2), png(predicted(fit, models, sms)));
        List<Path> files = new ArrayList<>();
        for (Map.Entry<String, byte[]> picture : drawn.entrySet()) {
            files.add(Files.write(dir.resolve(picture.getKey()), picture.getValue()));
        }
        return files;
    }

    /** Removes the pictures of an earlier fit from {@code dir}, which would no longer show this one. */
    static void removeStale(Path dir) throws IOException {
        for (String name : NAMES) {
            Files.deleteIfExists(dir.resolve(name));
        }
    }

    private static byte[] png(JFreeChart chart) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        ChartUtils.writeChartAsPNG(bytes, chart, WIDTH, HEIGHT);
        return bytes.toByteArray();
    }

    /** The held-out regret's cumulative distribution, one line per model size (the ablation). */
    private static JFreeChart regretCdf(PoolFit fit) {
        XYSeriesCollection data = new XYSeriesCollection();
        for (int terms = 2; terms <= WaveCostModel.MAX_TERMS; terms++) {
            double[] r = fit.choices(fit.fit(terms), fit.heldOut()).stream().mapToDouble(PoolFit.Choice::regret).sorted().toArray();
            XYSeries s = new XYSeries(terms + " terms");
            for (int i = 0; i < r.length; i++) {
                s.add(100 * r[i], (i + 1.0) / r.length);
            }
            data.addSeries(s);
        }
        XYPlot plot = new XYPlot(data, new NumberAxis("regret against the best measured pair (%)"),
                new NumberAxis("fraction of held-out points"), new XYLineAndShapeRenderer(true, true));
        return new JFreeChart("Regret of the cost model's choice, held-out points", plot);
    }

    /** Each profiled point at (batch, balancedness), one series per winning (gate_up + down) pair: which config wins where. */
    private static JFreeChart winners(PoolFit fit) {
        Map<String, XYSeries> byPair = new LinkedHashMap<>();
        for (PoolFit.Point p : fit.points()) {
            String pair = tile(fit.best(PoolFit.Half.GATE_UP, p)) + " + " + tile(fit.best(PoolFit.Half.DOWN, p));
            byPair.computeIfAbsent(pair, XYSeries::new).add(p.batch(), p.balancedness());
        }
        XYSeriesCollection data = new XYSeriesCollection();
        byPair.values().forEach(data::addSeries);
        LogAxis batch = new LogAxis("batch (tokens)");
        batch.setBase(2);
        NumberAxis balancedness = new NumberAxis("balancedness H(p) / ln E");
        balancedness.setAutoRangeIncludesZero(false);
        XYPlot plot = new XYPlot(data, batch, balancedness, new XYLineAndShapeRenderer(false, true));
        JFreeChart chart = new JFreeChart("Fastest measured pair per point (gate_up + down)", plot);
        chart.getLegend().setPosition(org.jfree.chart.ui.RectangleEdge.RIGHT);
        return chart;
    }

    /** Every timed (config, point): measured against the model's prediction, on log axes, with y = x. */
    private static JFreeChart predicted(PoolFit fit, Map<String, WaveCostModel> models, int sms) {
        XYSeries profiled = new XYSeries("profiled points");
        XYSeries heldOut = new XYSeries("held-out points");
        double lo = Double.POSITIVE_INFINITY;
        double hi = 0;
        for (PoolFit.Config c : fit.configs()) {
            for (PoolFit.Point p : fit.points()) {
                var t = fit.measured(c, p);
                if (t.isEmpty()) {
                    continue;
                }
                double predicted = c.predict(models.get(c.name()), p, sms);
                if (predicted <= 0) {
                    continue;  // a log axis has no place for it
                }
                (p.heldOut() ? heldOut : profiled).add(t.get().doubleValue(), predicted);
                lo = Math.min(lo, t.get());
                hi = Math.max(hi, t.get());
            }
        }
        XYSeries diagonal = new XYSeries("predicted = measured");
        for (double v : Arrays.asList(lo, hi).stream().mapToDouble(Double::doubleValue).toArray()) {
            diagonal.add(v, v);
        }
        XYSeriesCollection data = new XYSeriesCollection();
        data.addSeries(profiled);
        data.addSeries(heldOut);
        data.addSeries(diagonal);
        XYLineAndShapeRenderer renderer = new XYLineAndShapeRenderer(false, true);
        renderer.setSeriesLinesVisible(2, true);
        renderer.setSeriesShapesVisible(2, false);
        XYPlot plot = new XYPlot(data, new LogAxis("measured (us per layer)"), new LogAxis("predicted (us per layer)"), renderer);
        return new JFreeChart("Wave cost model: predicted against measured, every config and point", plot);
    }

    /**
     * A config's tile in a few characters: expert-centric pairs per tile (w: wgmma), output-centric
     * tokens per tile; the pictures group configs that differ only in stages, warps or GROUP_M.
     */
    static String tile(PoolFit.Config c) {
        return switch (c.schedule()) {
            case dev.moeforge.dsl.schedule.ExpertCentric ec -> "ec" + ec.blockM() + (ec.wgmma() ? "w" : "");
            case dev.moeforge.dsl.schedule.OutputCentric oc -> "oc" + oc.tokensPerCta();
            case dev.moeforge.dsl.schedule.OutputTensorCore _ -> "otc";
        };
    }
}
