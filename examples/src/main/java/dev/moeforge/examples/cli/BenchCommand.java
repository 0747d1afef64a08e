package dev.moeforge.examples.cli;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.ExpertLayerBenchmark;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.generated.BuiltinKernel;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertLayer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code moeforge bench}: the device's read bandwidth and the expert layer (gate_up + down,
 * routing given) at the Qwen3-30B-A3B geometry, graph-replayed over many workload.layers of weights, in
 * one run; prints a table and writes {@code <out>/<date>-<device>-expert-layer.json}.
 */
@Command(name = "bench", mixinStandardHelpOptions = true, subcommands = {BenchRouterCommand.class, BenchLayerCommand.class, BenchFormatsCommand.class, BenchDispatchCommand.class,
        BenchPrefillCommand.class, BenchDecodeCommand.class},
        description = "Measures the GPU's read bandwidth and the BF16 expert layer (H=2048, I=768, E=128, top-8) "
                + "at several token counts, weights rotated over many layers, CUDA graphs, CUDA events, medians.")
public final class BenchCommand implements Callable<Integer> {

    @Mixin
    LayerBenchOptions workload;

    @Mixin
    BenchOptions options;


    @Option(names = "--read-gib", defaultValue = "4", description = "Size of the read-bandwidth probe in GiB (default: ${DEFAULT-VALUE}).")
    int readGib;

    @Option(names = "--sweep", description = "Also time every neighbour of the catalogue pairs' schedules (the valid "
            + "schedules of the same kind with one parameter changed), each half beside the pair's other half.")
    boolean sweep;


    @Option(names = "--seed", defaultValue = "20261122", description = "Seed of weights and routing (default: ${DEFAULT-VALUE}).")
    long seed;

    @Override
    public Integer call() throws Exception {
        workload.require();
        if (readGib < 1) {
            throw new IllegalArgumentException("--read-gib " + readGib + ": at least 1");
        }
        options.require("bench");
        int maxTokens = workload.maxTokens();
        KernelCache cache = KernelCache.defaultCache();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime)) {
            System.out.println("device: " + ctx.deviceName() + ", " + ctx.smCount() + " SMs, L2 " + ctx.l2Bytes() / (1 << 20)
                    + " MiB, SM clock " + ctx.clockKhz() / 1000 + " MHz, memory clock " + ctx.memoryClockKhz() / 1000
                    + " MHz, driver " + ctx.driverVersion());
            long readBytes = (long) readGib << 30;
            GpuTimer.Timing read = kernels.timeRead(stream, readBytes, 5, 50);
            double readBw = readBytes / (read.medianMicros() * 1e-6);
            System.out.printf(Locale.ROOT, "read bandwidth: %.0f GB/s (%d GiB read, median %.1f us of 50)%n",
                    readBw / 1e9, readGib, read.medianMicros());

            List<ExpertLayerBenchmark.Variant> variants = variants(runtime);
            ExpertShape shape = variants.getFirst().layer().shape();
            List<ExpertLayerBenchmark.Result> results = new ArrayList<>();
            try (ExpertLayerBenchmark bench = new ExpertLayerBenchmark(kernels, stream, shape, workload.layers, maxTokens, seed)) {
                System.out.printf(Locale.ROOT, "expert layer H=%d I=%d E=%d top-%d BF16, %d layers = %.1f GB of weights%n",
                        shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), workload.layers, bench.weightBytes() / 1e9);
                for (int m : workload.tokens) {
                    results.addAll(bench.run(stream, variants, m, seed, options.warmup, options.reps, readBw,
                            msg -> System.out.println("  timing " + msg)));
                }
            }
            printTable(results);
            Path file = writeJson(ctx, readBw, read, shape, variants, results);
            System.out.println("wrote " + file);
        }
        return 0;
    }

    private List<ExpertLayerBenchmark.Variant> variants(KernelRuntime runtime) {
        List<ExpertLayerBenchmark.Variant> v = new ArrayList<>();
        // the catalogue's three Qwen3-30B-A3B layers: one token per warp, tiles of 8 and of 32 tokens
        // each overlapping its predecessor (programmatic dependent launch), and serial for comparison
        for (LaunchOrder order : List.of(LaunchOrder.OVERLAPPING_PREVIOUS, LaunchOrder.AFTER_PREVIOUS)) {
            for (CataloguePair pair : PAIRS) {
                v.add(new ExpertLayerBenchmark.Variant(pair.name() + (order == LaunchOrder.AFTER_PREVIOUS ? "_serial" : ""),
                        new ExpertLayer(runtime.load(pair.gateUp().spec()), runtime.load(pair.down().spec()), order)));
            }
        }
        if (sweep) {
            // every neighbour of each pair's schedules, each half beside the pair's other half
            for (CataloguePair pair : PAIRS) {
                KernelSpec gateUp = pair.gateUp().spec();
                KernelSpec down = pair.down().spec();
                ExpertShape shape = ((Problem.ExpertProblem) gateUp.problem()).shape();
                for (Schedule<?> g : Candidates.neighbours(gateUp.schedule(), gateUp.problem(), runtime.target())) {
                    v.add(sweepVariant(runtime, pair.name() + "_gu_" + Candidates.name(g), shape, g, down.schedule()));
                }
                for (Schedule<?> d : Candidates.neighbours(down.schedule(), down.problem(), runtime.target())) {
                    v.add(sweepVariant(runtime, pair.name() + "_dn_" + Candidates.name(d), shape, gateUp.schedule(), d));
                }
            }
        }
        return v;
    }

    /** A built-in gate_up and down that form one expert layer, by the name the bench tables use. */
    record CataloguePair(String name, BuiltinKernel gateUp, BuiltinKernel down) {}

    /** The catalogue's Qwen3-30B-A3B BF16 layers: one token per warp, tiles of 8 and of 32 tokens. */
    static final List<CataloguePair> PAIRS = List.of(
            new CataloguePair("t1", BuiltinKernel.QWEN3_30B_A3B_GATE_UP, BuiltinKernel.QWEN3_30B_A3B_DOWN),
            new CataloguePair("t8", BuiltinKernel.QWEN3_30B_A3B_GATE_UP_T8, BuiltinKernel.QWEN3_30B_A3B_DOWN_T8),
            new CataloguePair("t32", BuiltinKernel.QWEN3_30B_A3B_GATE_UP_T32, BuiltinKernel.QWEN3_30B_A3B_DOWN_T32));

    private static ExpertLayerBenchmark.Variant sweepVariant(KernelRuntime runtime, String name, ExpertShape shape,
                                                             Schedule<?> gateUp, Schedule<?> down) {
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("sweep_" + name, shape, GateUpLayout.STACKED, gateUp, down, runtime.target());
        return new ExpertLayerBenchmark.Variant(name, new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down())));
    }

    static void printTable(List<ExpertLayerBenchmark.Result> results) {
        System.out.println();
        System.out.printf(Locale.ROOT, "%-24s %4s %10s %10s %10s %9s %11s %8s %8s%n", "variant", "M", "layer us", "gate_up us",
                "down us", "experts", "MB distinct", "GB/s", "of read");
        for (ExpertLayerBenchmark.Result r : results) {
            System.out.printf(Locale.ROOT, "%-24s %4d %10.2f %10s %10s %9.1f %11.1f %8.0f %7.1f%%%n", r.variant(), r.tokens(),
                    r.layer().medianMicros(), micros(r.gateUp()), micros(r.down()), r.distinctExpertsPerLayer(),
                    r.distinctBytesPerLayer() / 1e6, r.gbPerSecond(), 100 * r.fractionOfRead());
        }
    }

    /** A half's median, or "-" for a one-kernel layer (no halves). */
    private static String micros(GpuTimer.Timing t) {
        return t == null ? "-" : String.format(Locale.ROOT, "%.2f", t.medianMicros());
    }

    private Path writeJson(CudaContext ctx, double readBw, GpuTimer.Timing read, ExpertShape shape,
                           List<ExpertLayerBenchmark.Variant> variants, List<ExpertLayerBenchmark.Result> results) throws Exception {
        Map<String, Object> doc = BenchReports.header("expert-layer", ctx);
        doc.put("method", Map.of("layers", workload.layers, "warmup", options.warmup, "reps", options.reps, "timing",
                "CUDA events around each replay of one graph running all layers; per-layer = replay / layers; median",
                "bytes", "distinct routed experts' gate_up and down weights per layer", "seed", seed));
        doc.put("read_bandwidth", Map.of("bytes_per_second", readBw, "probe_bytes", (long) readGib << 30,
                "median_us", read.medianMicros(), "p10_us", read.p10Micros(), "p90_us", read.p90Micros()));
        doc.put("shape", Map.of("hidden", shape.hidden(), "intermediate", shape.intermediate(),
                "experts", shape.experts(), "topk", shape.topk(), "weights", "bf16"));
        doc.put("variants", variantRows(variants));
        doc.put("results", resultRows(results, readBw));
        return BenchReports.write(options.out, ctx, "expert-layer", doc);
    }

    /** The variants' kernels: spec text, registers and spills of each half. */
    static List<Map<String, Object>> variantRows(List<ExpertLayerBenchmark.Variant> variants) {
        List<Map<String, Object>> vs = new ArrayList<>();
        for (ExpertLayerBenchmark.Variant v : variants) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", v.name());
            for (KernelHandle h : List.of(v.layer().gateUp(), v.layer().down())) {
                String half = h.spec().problem() instanceof Problem.ExpertGateUp ? "gate_up" : "down";
                m.put(half + "_spec", SpecPrinter.print(h.spec()));
                m.put(half + "_registers", h.resources().registers());
                m.put(half + "_spill_bytes", h.resources().spillStoreBytes() + h.resources().spillLoadBytes());
            }
            vs.add(m);
        }
        return vs;
    }

    /** One-kernel layers' kernels: spec text, registers and spills. */
    static List<Map<String, Object>> mlpVariantRows(List<ExpertLayerBenchmark.MlpVariant> variants) {
        List<Map<String, Object>> vs = new ArrayList<>();
        for (ExpertLayerBenchmark.MlpVariant v : variants) {
            KernelHandle h = v.mlp().kernel();
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", v.name());
            m.put("mlp_spec", SpecPrinter.print(h.spec()));
            m.put("mlp_registers", h.resources().registers());
            m.put("mlp_spill_bytes", h.resources().spillStoreBytes() + h.resources().spillLoadBytes());
            vs.add(m);
        }
        return vs;
    }

    /** One JSON row per timed (variant, token count). */
    static List<Map<String, Object>> resultRows(List<ExpertLayerBenchmark.Result> results, double readBw) {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (ExpertLayerBenchmark.Result r : results) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("variant", r.variant());
            m.put("tokens", r.tokens());
            m.put("layer_us", BenchReports.timing(r.layer()));
            if (r.gateUp() != null) {  // a one-kernel layer has no halves
                m.put("gate_up_us", BenchReports.timing(r.gateUp()));
                m.put("down_us", BenchReports.timing(r.down()));
            }
            m.put("distinct_experts_per_layer", r.distinctExpertsPerLayer());
            m.put("balancedness", r.balancedness());
            m.put("distinct_bytes_per_layer", r.distinctBytesPerLayer());
            m.put("gb_per_second", r.gbPerSecond());
            m.put("fraction_of_read_bandwidth", r.fractionOfRead());
            m.put("floor_us", r.distinctBytesPerLayer() / readBw * 1e6);
            rows.add(m);
        }
        return rows;
    }
}
