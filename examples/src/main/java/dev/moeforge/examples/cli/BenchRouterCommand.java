package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.generated.BuiltinKernel;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.RouterKernel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.function.Function;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code moeforge bench router}: the router kernels (scores + routing rule in one launch) on the
 * decode shapes of the catalogue and six synthetic GEMM shapes (M tokens x E experts x H hidden,
 * {@code gemm_512x8x128} to {@code gemm_4096x128x2048}, top-4 then softmax), router weights rotated over enough
 * copies to exceed L2 several times (up to 256), graph-replayed, CUDA events, medians; in the same
 * run, when python3 with torch is found, {@code bench/torch_router.py} times PyTorch's matmul +
 * softmax + top-k on the same shapes, eager and graph-captured.
 */
@Command(name = "router", mixinStandardHelpOptions = true,
        description = "Times the router kernels (decode shapes and six GEMM shapes) against PyTorch eager and "
                + "graph-captured in the same run; writes <out>/<date>-<device>-router.json.")
public final class BenchRouterCommand implements Callable<Integer> {

    @Mixin
    BenchOptions options;


    @Option(names = "--torch-script", defaultValue = "bench/torch_router.py",
            description = "The PyTorch baseline script (default: ${DEFAULT-VALUE}); skipped when it or python3 with torch is missing.")
    Path torchScript;


    @Option(names = "--sweep", description = "Also time every shape under each neighbour of its schedule (the valid "
            + "schedules of its kind with one parameter changed), and the prefill router without its histogram and with "
            + "the GEMM shapes' rule (top-4, softmax of the 4).")
    boolean sweep;

    @Option(names = "--shapes", split = ",", paramLabel = "NAME",
            description = "Only these shapes (names as in the table, e.g. gemm_2048x128x1024), with their sweep variants under --sweep; default: all.")
    List<String> only;

    /** A benchmarked router: the spec and the name of the same rule in the PyTorch script. */
    record Shape(String name, int tokens, KernelSpec spec, String torchRule) {}

    /**
     * One shape's timings: {@code timing} with plain launches (each call starts once the previous
     * one has finished), {@code overlapping} with programmatic dependent launch, as a MoeLayer
     * launches its router.
     */
    record Row(Shape shape, int copies, GpuTimer.Timing timing, GpuTimer.Timing overlapping) {}

    @Override
    public Integer call() throws Exception {
        List<Shape> base = selected(shapes(), only);  // a bad name fails before any GPU work
        options.require("bench router");
        KernelCache cache = KernelCache.defaultCache();
        List<Row> rows = new ArrayList<>();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime)) {
            System.out.println("device: " + ctx.deviceName());
            for (Shape s : sweep ? withSweep(base) : base) {
                rows.add(time(runtime, kernels, stream, s, ctx.l2Bytes()));
                System.out.printf(Locale.ROOT, "  %-28s %8.2f us, overlapping %8.2f us (%d weight copies)%n", s.name(),
                        rows.getLast().timing().medianMicros(), rows.getLast().overlapping().medianMicros(), rows.getLast().copies());
            }
            JsonNode torch = runTorch(rows.subList(0, base.size()));
            printTable(rows, torch);
            Path file = writeJson(ctx, rows, torch);
            System.out.println("wrote " + file);
        }
        return 0;
    }

    /** The shapes named in {@code names} (all when null), in table order; an unknown name is an error listing the known ones. */
    static List<Shape> selected(List<Shape> shapes, List<String> names) {
        if (names == null) {
            return shapes;
        }
        List<String> known = shapes.stream().map(Shape::name).toList();
        for (String n : names) {
            if (!known.contains(n)) {
                throw new IllegalArgumentException("--shapes: unknown shape '" + n + "'; known: " + known);
            }
        }
        return shapes.stream().filter(s -> names.contains(s.name())).toList();
    }

    static List<Shape> shapes() {
        List<Shape> s = new ArrayList<>();
        s.add(new Shape("decode_qwen3_30b_m1", 1, BuiltinKernel.QWEN3_30B_A3B_ROUTER.spec(), "softmax_renorm"));
        s.add(new Shape("decode_qwen3_next_m1", 1, BuiltinKernel.QWEN3_NEXT_80B_ROUTER.spec(), "softmax_renorm"));
        s.add(new Shape("decode_deepseek_v3_m1", 1, BuiltinKernel.DEEPSEEK_V3_ROUTER.spec(), "grouped_sigmoid"));
        s.add(new Shape("decode_gpt_oss_20b_m1", 1, BuiltinKernel.GPT_OSS_20B_ROUTER.spec(), "biased_topk_softmax"));
        s.add(new Shape("prefill_qwen3_30b_m4096", 4096, BuiltinKernel.QWEN3_30B_A3B_ROUTER_PREFILL.spec(), "softmax_renorm"));
        // each GEMM shape under the router_tiled schedule that won it: the two smallest from the --sweep
        // (bench/results/2026-11-22-nvidia-h100-80gb-hbm3-router-sweep-tiled.json), the mid two from the
        // sweep with k groups and splits (...-router-sweep-mid-shapes*.json), the M = 4096 two from the
        // router probe's k-group and split variants (bench/NOTES.md, "The M=4096 GEMM shapes: shared-memory
        // reads, k groups and a push exchange")
        RouterTiled small = tiled(16, 16, 8, 64, 4, 1, 1);
        for (GemmShape g : List.of(new GemmShape(512, 8, 128, small), new GemmShape(512, 16, 128, small),
                new GemmShape(1024, 64, 512, tiled(16, 16, 8, 64, 4, 2, 2)),
                new GemmShape(2048, 128, 1024, tiled(32, 32, 16, 64, 3, 4, 2)),
                new GemmShape(4096, 64, 2048, tiled(64, 32, 16, 64, 4, 4, 2)),
                new GemmShape(4096, 128, 2048, tiled(64, 32, 16, 64, 4, 2, 2)))) {
            String name = "gemm_" + g.tokens() + "x" + g.experts() + "x" + g.hidden();
            KernelSpec spec = KernelBuilder.named("bench_" + name).router(g.hidden(), g.experts()).schedule(g.schedule())
                    .epilogue(TOP4_SOFTMAX).build();
            s.add(new Shape(name, g.tokens(), spec, "topk_softmax"));
        }
        return s;
    }

    /** The GEMM shapes' rule: the top 4 of the logits, softmax over the 4. */
    private static final Store TOP4_SOFTMAX = new Store(new Softmax(TopK.of(Acc.MAIN, 4)), DType.FP32);

    /** A synthetic router GEMM shape (M tokens, N = experts, K = hidden) and the schedule the bench runs it under. */
    private record GemmShape(int tokens, int experts, int hidden, RouterTiled schedule) {}

    /** A router_tiled schedule, arguments in the textual form's order. */
    private static RouterTiled tiled(int tokensPerCta, int tokensPerWarp, int warps, int kTile, int stages,
                                              int kGroups, int clusterSplit) {
        return new RouterTiled(tokensPerCta, tokensPerWarp, warps, kTile, stages, kGroups, clusterSplit);
    }

    /**
     * The shapes, then each shape again under every neighbour of its schedule (the valid schedules
     * of the same kind with one parameter changed; names end in the schedule's), and the prefill
     * router without its histogram and with the GEMM shapes' rule (top-4, softmax of the 4).
     */
    static List<Shape> withSweep(List<Shape> shapes) {
        List<Shape> all = new ArrayList<>(shapes);
        for (Shape s : shapes) {
            if (s.name().startsWith("prefill_")) {
                // the catalogue kernel's schedule without the histogram, then also with the GEMM shapes' rule
                // (top-4, softmax of the 4): what the rule and the histogram each cost over the GEMM
                Problem.Router r = (Problem.Router) s.spec().problem();
                KernelSpec noCounts = s.spec().withName("sweep_" + s.name() + "_no_counts")
                        .withProblem(new Problem.Router(r.hidden(), r.experts(), r.weights(), r.activations(), false));
                KernelSpec top4Softmax = noCounts.withName("sweep_" + s.name() + "_top4_softmax").withEpilogue(TOP4_SOFTMAX);
                all.add(new Shape(s.name() + "_no_counts", s.tokens(), noCounts, s.torchRule()));
                all.add(new Shape(s.name() + "_top4_softmax", s.tokens(), top4Softmax, "topk_softmax"));
                continue;
            }
            // the schedule's neighbours: every valid schedule of its kind with one parameter changed
            for (Schedule<?> v : Candidates.neighbours(s.spec().schedule(), s.spec().problem(), s.spec().target())) {
                String name = s.name() + "_" + Candidates.name(v);
                all.add(new Shape(name, s.tokens(), s.spec().withSchedule(v).withName("sweep_" + name), s.torchRule()));
            }
        }
        return all;
    }

    private Row time(KernelRuntime runtime, BenchKernels kernels, CudaStream stream, Shape s, long l2Bytes) {
        Problem.Router r = (Problem.Router) s.spec().problem();
        long weightBytes = 2L * r.experts() * r.hidden();
        int copies = (int) Math.max(1, Math.min(256, (4 * l2Bytes + weightBytes - 1) / weightBytes));
        RouterKernel router = new RouterKernel(runtime.load(s.spec()), s.tokens());
        int k = router.topk().orElseThrow();
        List<DeviceBuffer> owned = new ArrayList<>();
        try {
            List<DeviceBuffer> weights = new ArrayList<>();
            for (int c = 0; c < copies; c++) {
                DeviceBuffer w = DeviceBuffer.allocate(DType.BF16, (long) r.experts() * r.hidden());
                kernels.fillUniform(stream, w, 1000L + c, (float) Math.sqrt(3.0 / r.hidden()));
                weights.add(w);
            }
            owned.addAll(weights);
            DeviceBuffer x = DeviceBuffer.allocate(DType.BF16, (long) s.tokens() * r.hidden());
            owned.add(x);
            x.copyFrom(RandomInputs.bf16Normal(7, s.tokens() * r.hidden(), 1.0));
            Map<String, DeviceBuffer> params = new LinkedHashMap<>();
            SplittableRandom random = new SplittableRandom(11);
            for (String name : router.rowParams()) {
                float[] v = new float[r.experts()];
                for (int e = 0; e < v.length; e++) {
                    v[e] = (float) (0.3 * random.nextGaussian());
                }
                DeviceBuffer b = DeviceBuffer.allocate(DType.FP32, r.experts());
                b.copyFrom(v);
                params.put(name, b);
                owned.add(b);
            }
            DeviceBuffer topkWeights = DeviceBuffer.allocate(DType.FP32, (long) s.tokens() * k);
            DeviceBuffer topkIds = DeviceBuffer.allocate(DType.INT32, (long) s.tokens() * k);
            owned.add(topkWeights);
            owned.add(topkIds);
            // a router with the expert histogram adds to it: zeroed once per replay (one memset per copies calls)
            DeviceBuffer counts = router.countsExperts() ? DeviceBuffer.allocate(DType.INT32, r.experts()) : null;
            DeviceBuffer[] outputs = counts == null ? new DeviceBuffer[] {topkWeights, topkIds}
                    : new DeviceBuffer[] {topkWeights, topkIds, counts};
            if (counts != null) {
                owned.add(counts);
            }
            stream.synchronize();
            // one graph of `copies` calls (the counts zeroed once per replay), per call = replay / copies
            Function<LaunchOrder, GpuTimer.Timing> perCall = order -> {
                try (CudaGraph g = CudaGraph.capture(stream, () -> {
                    if (counts != null) {
                        router.zeroCounts(stream, counts);
                    }
                    for (DeviceBuffer w : weights) {
                        router.enqueue(stream, order, s.tokens(), x, w, params, outputs);
                    }
                })) {
                    return GpuTimer.time(stream, g, options.warmup, options.reps).scaled(1.0 / copies);
                }
            };
            GpuTimer.Timing plain = perCall.apply(LaunchOrder.AFTER_PREVIOUS);
            GpuTimer.Timing overlapping = perCall.apply(LaunchOrder.OVERLAPPING_PREVIOUS);
            int[] ids = new int[s.tokens() * k];
            topkIds.copyTo(ids);
            for (int id : ids) {
                if (id < 0 || id >= r.experts()) {
                    throw new IllegalStateException(s.name() + ": the router wrote expert id " + id);
                }
            }
            return new Row(s, copies, plain, overlapping);
        } finally {
            owned.forEach(DeviceBuffer::close);
            router.close();
        }
    }

    /** Runs the PyTorch baseline on the same shapes; null (with a message) where it cannot run. */
    private JsonNode runTorch(List<Row> rows) throws Exception {
        List<Map<String, Object>> shapes = new ArrayList<>();
        for (Row row : rows) {
            Problem.Router r = (Problem.Router) row.shape().spec().problem();
            shapes.add(Map.of("name", row.shape().name(), "tokens", row.shape().tokens(), "experts", r.experts(),
                    "hidden", r.hidden(), "topk", RouterTrees.storedTopK((Store) row.shape().spec().epilogue()).orElseThrow(),
                    "rule", row.shape().torchRule(), "copies", row.copies()));
        }
        return TorchBaseline.run(torchScript, Map.of("shapes", shapes, "warmup", options.warmup, "reps", options.reps));
    }

    private static void printTable(List<Row> rows, JsonNode torch) {
        System.out.println();
        System.out.printf(Locale.ROOT, "%-28s %10s %12s %12s %12s %9s %9s%n", "shape (M x E x H)", "moeforge us", "overlapping",
                "torch eager", "torch graph", "vs eager", "vs graph");
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            double ours = r.timing().medianMicros();
            double overlapping = r.overlapping().medianMicros();
            if (torch != null && i < torch.get("results").size()) {
                JsonNode t = torch.get("results").get(i);
                double eager = t.get("eager_us").asDouble();
                double graph = t.get("graph_us").asDouble();
                System.out.printf(Locale.ROOT, "%-28s %10.2f %12.2f %12.2f %12.2f %8.1fx %8.1fx%n", r.shape().name(), ours, overlapping,
                        eager, graph, eager / ours, graph / ours);
            } else {
                System.out.printf(Locale.ROOT, "%-28s %10.2f %12.2f%n", r.shape().name(), ours, overlapping);
            }
        }
    }

    private Path writeJson(CudaContext ctx, List<Row> rows, JsonNode torch) throws Exception {
        Map<String, Object> doc = BenchReports.header("router", ctx);
        doc.put("method", Map.of("warmup", options.warmup, "reps", options.reps, "timing", "CUDA events around each replay of one graph "
                + "running one router call per weight copy; per call = replay / copies; median; moeforge_us with plain launches, "
                + "moeforge_overlapping_us with programmatic dependent launch (as a MoeLayer launches its router)",
                "torch", torch == null ? "not run" : torch.get("torch").asText()));
        List<Map<String, Object>> results = new ArrayList<>();
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("shape", r.shape().name());
            m.put("tokens", r.shape().tokens());
            m.put("spec", SpecPrinter.print(r.shape().spec()));
            m.put("weight_copies", r.copies());
            m.put("moeforge_us", BenchReports.timing(r.timing()));
            m.put("moeforge_overlapping_us", BenchReports.timing(r.overlapping()));
            if (torch != null && i < torch.get("results").size()) {
                JsonNode t = torch.get("results").get(i);
                m.put("torch_eager_us", t.get("eager_us").asDouble());
                m.put("torch_graph_us", t.get("graph_us").asDouble());
            }
            results.add(m);
        }
        doc.put("results", results);
        return BenchReports.write(options.out, ctx, "router", doc);
    }
}
