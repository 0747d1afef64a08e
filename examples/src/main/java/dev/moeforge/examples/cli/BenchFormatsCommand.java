package dev.moeforge.examples.cli;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.build.OutputTensorCoreBuilder;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.reference.FormatAccuracy;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.SplitDown;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.ExpertLayerBenchmark;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.examples.bench.HostLayer;
import dev.moeforge.generated.BuiltinKernel;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.ExpertMlpLayer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code moeforge bench formats}: the expert layer in every weight format at the Qwen3-30B-A3B
 * geometry, and NVFP4 at the Qwen3-Next-80B-A3B geometry, each with a few schedules, weights
 * rotated over many layers; writes {@code <out>/<date>-<device>-formats.json}.
 */
@Command(name = "formats", mixinStandardHelpOptions = true,
        description = "Times the expert layer (gate_up + down, routing given) in every weight format: Qwen3-30B-A3B "
                + "(H=2048, I=768, E=128, top-8) for each format, and Qwen3-Next-80B-A3B (H=2048, I=512, E=512, top-10) in "
                + "NVFP4; one layer quantised on the host, copied to every layer of the rotation.")
public final class BenchFormatsCommand implements Callable<Integer> {
    static final ExpertShape QWEN3_30B = new ExpertShape(2048, 768, 128, 8);
    static final ExpertShape QWEN3_NEXT = new ExpertShape(2048, 512, 512, 10);

    @Mixin
    BenchOptions options;

    @Option(names = "--layers", defaultValue = "16", description = "Layers of weights to rotate over (default: ${DEFAULT-VALUE}).")
    int layers;

    @Option(names = "--tokens", split = ",", defaultValue = "1,8", description = "Token counts (default: ${DEFAULT-VALUE}).")
    List<Integer> tokens;

    @Option(names = "--formats", split = ",", description = "Formats to time (default: all): "
            + "bf16, fp8_e4m3_channel, fp8_e4m3_block128, mxfp8, nvfp4, mxfp4, int8_channel, int8_group128, int4_channel, int4_group128.")
    List<String> formats;

    @Option(names = "--sweep", description = "Also time every neighbour of each catalogue pair's schedules (the valid "
            + "schedules of the same kind with one parameter changed), each half beside the catalogue's other half.")
    boolean sweep;

    @Option(names = "--seed", defaultValue = "20261122", description = "Seed of weights and routing (default: ${DEFAULT-VALUE}).")
    long seed;

    /** One timed configuration: a geometry in a format, and the catalogue's pair for it (timed first). */
    record Workload(String model, ExpertShape shape, WeightFormat format, BuiltinKernel gateUp, BuiltinKernel down) {
        KernelSpec catalogueGateUp() {
            return gateUp.spec();
        }

        KernelSpec catalogueDown() {
            return down.spec();
        }
    }

    /** Every workload: each format at the Qwen3-30B-A3B geometry, and NVFP4 at Qwen3-Next-80B-A3B's. */
    private static final List<Workload> WORKLOADS = List.of(
            qwen3(WeightFormat.BF16, BuiltinKernel.QWEN3_30B_A3B_GATE_UP, BuiltinKernel.QWEN3_30B_A3B_DOWN),
            qwen3(WeightFormat.FP8_CHANNEL, BuiltinKernel.QWEN3_30B_A3B_FP8_E4M3_CHANNEL_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_FP8_E4M3_CHANNEL_DOWN),
            qwen3(WeightFormat.FP8_BLOCK128, BuiltinKernel.QWEN3_30B_A3B_FP8_E4M3_BLOCK128_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_FP8_E4M3_BLOCK128_DOWN),
            qwen3(WeightFormat.MXFP8, BuiltinKernel.QWEN3_30B_A3B_MXFP8_GATE_UP, BuiltinKernel.QWEN3_30B_A3B_MXFP8_DOWN),
            qwen3(WeightFormat.NVFP4, BuiltinKernel.QWEN3_30B_A3B_NVFP4_GATE_UP, BuiltinKernel.QWEN3_30B_A3B_NVFP4_DOWN),
            qwen3(WeightFormat.MXFP4, BuiltinKernel.QWEN3_30B_A3B_MXFP4_GATE_UP, BuiltinKernel.QWEN3_30B_A3B_MXFP4_DOWN),
            qwen3(WeightFormat.INT8_CHANNEL, BuiltinKernel.QWEN3_30B_A3B_INT8_CHANNEL_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_INT8_CHANNEL_DOWN),
            qwen3(WeightFormat.INT8_GROUP128, BuiltinKernel.QWEN3_30B_A3B_INT8_GROUP128_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_INT8_GROUP128_DOWN),
            qwen3(WeightFormat.INT4_CHANNEL, BuiltinKernel.QWEN3_30B_A3B_INT4_CHANNEL_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_INT4_CHANNEL_DOWN),
            qwen3(WeightFormat.INT4_GROUP128, BuiltinKernel.QWEN3_30B_A3B_INT4_GROUP128_GATE_UP,
                    BuiltinKernel.QWEN3_30B_A3B_INT4_GROUP128_DOWN),
            new Workload("qwen3_next_80b", QWEN3_NEXT, WeightFormat.NVFP4, BuiltinKernel.QWEN3_NEXT_80B_NVFP4_GATE_UP,
                    BuiltinKernel.QWEN3_NEXT_80B_NVFP4_DOWN));

    private static Workload qwen3(WeightFormat format, BuiltinKernel gateUp, BuiltinKernel down) {
        return new Workload("qwen3_30b_a3b", QWEN3_30B, format, gateUp, down);
    }

    @Override
    public Integer call() throws Exception {
        LayerBenchOptions.require(layers, tokens);
        List<Workload> workloads = workloads();
        options.require("bench formats");
        int maxTokens = tokens.stream().mapToInt(Integer::intValue).max().orElse(1);
        KernelCache cache = KernelCache.defaultCache();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime)) {
            System.out.println("device: " + ctx.deviceName() + ", " + ctx.smCount() + " SMs, L2 " + ctx.l2Bytes() / (1 << 20) + " MiB");
            long readBytes = 4L << 30;
            GpuTimer.Timing read = kernels.timeRead(stream, readBytes, 5, 50);
            double readBw = readBytes / (read.medianMicros() * 1e-6);
            System.out.printf(Locale.ROOT, "read bandwidth: %.0f GB/s%n", readBw / 1e9);
            // every workload's kernels compiled in parallel up front; the runtime's cache serves them below
            ExecutorService pool = Executors.newFixedThreadPool(Math.max(2, Runtime.getRuntime().availableProcessors()));
            Map<Workload, Future<List<ExpertLayerBenchmark.Variant>>> loaded = new LinkedHashMap<>();
            Map<Workload, Future<List<ExpertLayerBenchmark.MlpVariant>>> loadedMlp = new LinkedHashMap<>();
            Map<Workload, List<ExpertLayerBenchmark.MlpVariant>> mlpVariants = new LinkedHashMap<>();
            try {
                for (Workload w : workloads) {
                    loaded.put(w, pool.submit(() -> variants(runtime, w, maxTokens, sweep)));
                    loadedMlp.put(w, pool.submit(() -> mlpVariants(runtime, w)));
                }
                for (Future<?> f : loaded.values()) {
                    f.get();
                }
                for (Workload w : workloads) {
                    mlpVariants.put(w, loadedMlp.get(w).get());
                }
            } finally {
                pool.shutdown();
            }
            List<Map<String, Object>> sections = new ArrayList<>();
            for (Workload w : workloads) {
                List<ExpertLayerBenchmark.Variant> variants = loaded.get(w).get();
                long t0 = System.nanoTime();
                HostLayer host = HostLayer.quantise(w.format(), w.shape(), Projections.STACKED_GATE_UP, seed);
                EncodedWeights gateUp = host.gateUp();
                EncodedWeights down = host.down();
                System.out.printf(Locale.ROOT, "%s %s: quantised one layer in %.1f s%n", w.model(), w.format().text(),
                        (System.nanoTime() - t0) / 1e9);
                List<ExpertLayerBenchmark.Result> results = new ArrayList<>();
                FormatAccuracy.Errors errors;
                try (ExpertLayerBenchmark bench = new ExpertLayerBenchmark(stream, w.shape(), layers, maxTokens, seed, gateUp, down)) {
                    System.out.printf(Locale.ROOT, "  %d layers = %.1f GB of weights (%.0f bytes per expert)%n", layers,
                            bench.weightBytes() / 1e9, (double) gateUp.bytesPerExpert() + down.bytesPerExpert());
                    for (int m : tokens) {
                        results.addAll(bench.run(stream, variants, m, seed, options.warmup, options.reps, readBw,
                                msg -> System.out.println("  timing " + w.format().text() + " " + msg)));
                        if (bench.hasSplitDown()) {
                            results.addAll(bench.runMlp(stream, mlpVariants.get(w), m, seed, options.warmup, options.reps, readBw,
                                    msg -> System.out.println("  timing " + w.format().text() + " " + msg)));
                        }
                    }
                    // accuracy on the last run's layer 0: the kernel's y against the FP64 references
                    ExpertLayer first = variants.getFirst().layer();
                    short[] y = bench.firstLayerOutput(stream, first);
                    Routing routing = bench.firstLayerRouting();
                    FormatAccuracy.References refs = FormatAccuracy.references(
                            new ExpertLayerSpecs(first.gateUp().spec(), first.down().spec()), bench.activations(routing.tokens()),
                            host.gateUpRows(), host.downRows(), gateUp, down, routing);
                    errors = FormatAccuracy.errors(refs, y);
                    System.out.printf(Locale.ROOT, "  accuracy at M=%d (relative L2 of y): kernel %.2e, format %.2e, "
                                    + "BF16-activation path %.2e, %s-activation path %.2e: ratio %.2f%n", routing.tokens(),
                            errors.kernel(), errors.format(), errors.bf16ActivationPath(), w.format().text(),
                            errors.quantisedActivationPath(), errors.ratio());
                }
                BenchCommand.printTable(results);
                Map<String, Object> section = new LinkedHashMap<>();
                section.put("model", w.model());
                section.put("format", w.format().text());
                section.put("shape", Map.of("hidden", w.shape().hidden(), "intermediate", w.shape().intermediate(),
                        "experts", w.shape().experts(), "topk", w.shape().topk()));
                section.put("bytes_per_expert", gateUp.bytesPerExpert() + down.bytesPerExpert());
                section.put("accuracy", Map.of("tokens", maxTokens, "kernel", errors.kernel(), "format", errors.format(),
                        "bf16_activation_path", errors.bf16ActivationPath(), "quantised_activation_path",
                        errors.quantisedActivationPath(), "ratio", errors.ratio(), "variant", variants.getFirst().name()));
                List<Map<String, Object>> variantRows = new ArrayList<>(BenchCommand.variantRows(variants));
                variantRows.addAll(BenchCommand.mlpVariantRows(mlpVariants.get(w)));
                section.put("variants", variantRows);
                section.put("results", BenchCommand.resultRows(results, readBw));
                sections.add(section);
            }
            Map<String, Object> doc = BenchReports.header("formats", ctx);
            doc.put("method", Map.of("layers", layers, "warmup", options.warmup, "reps", options.reps, "timing",
                    "CUDA events around each replay of one graph running all layers; per-layer = replay / layers; median",
                    "bytes", "distinct routed experts' codes and scales (gate_up and down) per layer", "seed", seed,
                    "weights", "one layer quantised on the host from N(0, 1/K) with the reference quantiser, copied to every layer",
                    "accuracy", "relative L2 of y at the largest token count on layer 0, first variant: kernel = against FP64 on the "
                            + "dequantised weights; format = FP64 dequantised against FP64 original; bf16_activation_path = kernel "
                            + "against FP64 original; quantised_activation_path = FP64 with x and the intermediate quantised to the "
                            + "format, against FP64 original; ratio = quantised / bf16 path"));
            doc.put("read_bandwidth", Map.of("bytes_per_second", readBw, "probe_bytes", readBytes,
                    "median_us", read.medianMicros()));
            doc.put("workloads", sections);
            Path file = BenchReports.write(options.out, ctx, "formats", doc);
            System.out.println("wrote " + file);
        }
        return 0;
    }

    List<Workload> workloads() {
        List<WeightFormat> chosen = new ArrayList<>();
        if (formats == null || formats.isEmpty()) {
            chosen.addAll(WeightFormat.ALL);
        } else {
            for (String name : formats) {
                try {
                    chosen.add(WeightFormat.fromText(name));
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException("--formats: " + e.getMessage(), e);
                }
            }
        }
        return WORKLOADS.stream().filter(w -> chosen.contains(w.format())).toList();
    }

    /**
     * The catalogue's pair (first: the accuracy study runs on it), then single-token schedules with 2 and 4 loads in
     * flight (and gate_up split over 2 warps), and 8-token tiles.
     */
    private static List<ExpertLayerBenchmark.Variant> variants(KernelRuntime runtime, Workload w, int maxTokens, boolean sweep)
            throws Exception {
        List<ExpertLayerBenchmark.Variant> v = new ArrayList<>();
        v.add(new ExpertLayerBenchmark.Variant(w.format().text() + " catalogue",
                new ExpertLayer(runtime.load(w.catalogueGateUp()), runtime.load(w.catalogueDown()))));
        for (int t : maxTokens > 1 ? new int[] {1, 8} : new int[] {1}) {
            for (int u : new int[] {2, 4}) {
                v.add(variant(runtime, w, "t" + t + "_u" + u, OutputCentricBuilder.create().kUnroll(u).tokensPerCta(t).build(),
                        OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(2).kUnroll(u).tokensPerCta(t).build()));
            }
        }
        // two warps per gate_up output: won for four of the 8-bit formats in the sweep (bench/NOTES.md)
        v.add(variant(runtime, w, "t1_u2_s2", OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(2).kUnroll(2).build(),
                OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(2).kUnroll(2).build()));
        if (w.format().element().bits() == 4) {
            // tensor-core decode (bench/probes/tensor_core_probe.cu picked gate_up 8 warps, 4 per tile, 2 steps in
            // flight; decode_pipeline_probe.cu down 24 warps on one tile, groups of one step), and each half of it
            // beside the warp decode
            Schedule<?> tcGateUp = OutputTensorCoreBuilder.create().build();
            Schedule<?> tcDown = OutputTensorCoreBuilder.create().warpsPerCta(24).warpsPerTile(24).kUnroll(1).build();
            Schedule<?> gateUp = OutputCentricBuilder.create().kUnroll(2).build();
            Schedule<?> down = OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(2).kUnroll(2).build();
            v.add(variant(runtime, w, "tc", tcGateUp, tcDown));
            v.add(variant(runtime, w, "tc_gate_up", tcGateUp, down));
            v.add(variant(runtime, w, "tc_down", gateUp, tcDown));
        }
        if (sweep) {
            v.addAll(neighbours(runtime, w));
        }
        return v;
    }

    /**
     * The one-kernel layer (expert_mlp under split_down, bench/NOTES.md "down split along its K") for the 4-bit
     * formats: 8 warps, 4 per gate_up tile, 2 steps in flight, 3 blocks per SM promised; for NVFP4 also with
     * gate_up's loads ordered before its decode.
     */
    private static List<ExpertLayerBenchmark.MlpVariant> mlpVariants(KernelRuntime runtime, Workload w) {
        List<ExpertLayerBenchmark.MlpVariant> v = new ArrayList<>();
        if (w.format().element().bits() != 4) {
            return v;
        }
        for (boolean ordered : w.format() == WeightFormat.NVFP4 ? new boolean[] {false, true} : new boolean[] {false}) {
            String name = "split_down" + (ordered ? "_ordered" : "");
            KernelSpec spec = new KernelSpec("fmt_" + w.model() + "_" + w.format().text() + "_" + name,
                    new Problem.ExpertMlp(w.shape(), w.format(), DType.BF16, GateUpLayout.STACKED),
                    new SplitDown(8, 2, 4, 3, ordered),
                    new Store(new GatedActivation(GateFunction.SILU, Acc.GATE, Acc.UP), DType.BF16), runtime.target());
            v.add(new ExpertLayerBenchmark.MlpVariant(w.format().text() + " " + name, new ExpertMlpLayer(runtime.load(spec))));
        }
        return v;
    }

    /**
     * The sweep: every neighbour of the catalogue pair's gate_up schedule (the valid schedules of its
     * kind with one parameter changed) beside the catalogue's down, and every neighbour of its down
     * beside its gate_up.
     */
    private static List<ExpertLayerBenchmark.Variant> neighbours(KernelRuntime runtime, Workload w) {
        KernelSpec gateUp = w.catalogueGateUp();
        KernelSpec down = w.catalogueDown();
        List<ExpertLayerBenchmark.Variant> v = new ArrayList<>();
        for (Schedule<?> g : Candidates.neighbours(gateUp.schedule(), gateUp.problem(), runtime.target())) {
            v.add(variant(runtime, w, "gu_" + Candidates.name(g), g, down.schedule()));
        }
        for (Schedule<?> d : Candidates.neighbours(down.schedule(), down.problem(), runtime.target())) {
            v.add(variant(runtime, w, "dn_" + Candidates.name(d), gateUp.schedule(), d));
        }
        return v;
    }

    private static ExpertLayerBenchmark.Variant variant(KernelRuntime runtime, Workload w, String name, Schedule<?> gateUp,
                                                        Schedule<?> down) {
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("fmt_" + w.model() + "_" + w.format().text() + "_" + name, w.shape(),
                GateUpLayout.STACKED, w.format(), gateUp, down, runtime.target());
        return new ExpertLayerBenchmark.Variant(w.format().text() + " " + name,
                new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down())));
    }
}
