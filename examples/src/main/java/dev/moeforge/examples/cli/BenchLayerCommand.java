package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.ExpertLayerBenchmark;
import dev.moeforge.generated.BuiltinKernel;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.RouterKernel;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/**
 * {@code moeforge bench layer}: the whole MoE layer (router, gate_up, down) of the Qwen3-30B-A3B
 * geometry in BF16, one CUDA graph over many workload.layers of weights (each layer with its own router and
 * expert weights), at several token counts; the expert kernels are the catalogue's best for each M.
 */
@Command(name = "layer", mixinStandardHelpOptions = true,
        description = "Times router + gate_up + down as one graph per decode step at the Qwen3-30B-A3B geometry, weights "
                + "rotated over many workload.layers; writes <out>/<date>-<device>-moe-layer.json.")
public final class BenchLayerCommand implements Callable<Integer> {

    @Mixin
    LayerBenchOptions workload;

    @Mixin
    BenchOptions options;



    @Override
    public Integer call() throws Exception {
        workload.require();
        options.require("bench layer");
        int maxTokens = workload.maxTokens();
        KernelCache cache = KernelCache.defaultCache();
        List<ExpertLayerBenchmark.LayerResult> results = new ArrayList<>();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime)) {
            long readBytes = 4L << 30;
            double readBw = readBytes / (kernels.timeRead(stream, readBytes, 5, 50).medianMicros() * 1e-6);
            RouterKernel router = new RouterKernel(runtime.load(BuiltinKernel.QWEN3_30B_A3B_ROUTER.spec()), maxTokens);
            ExpertShape shape = ((Problem.ExpertProblem) BuiltinKernel.QWEN3_30B_A3B_GATE_UP.spec().problem()).shape();
            List<DeviceBuffer> routerWeights = new ArrayList<>();
            try (ExpertLayerBenchmark bench = new ExpertLayerBenchmark(kernels, stream, shape, workload.layers, maxTokens, 20261122)) {
                for (int l = 0; l < workload.layers; l++) {
                    DeviceBuffer w = DeviceBuffer.allocate(DType.BF16, (long) shape.experts() * shape.hidden());
                    kernels.fillUniform(stream, w, 5000L + l, (float) Math.sqrt(3.0 / shape.hidden()));
                    routerWeights.add(w);
                }
                System.out.printf(Locale.ROOT, "MoE layer H=%d I=%d E=%d top-%d BF16, %d layers, read bandwidth %.0f GB/s%n",
                        shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), workload.layers, readBw / 1e9);
                for (int m : workload.tokens) {
                    BenchCommand.CataloguePair pair = BenchCommand.PAIRS.get(m <= 4 ? 0 : m <= 8 ? 1 : 2);
                    // each layer twice: kernels overlapping their predecessor (programmatic dependent launch), then serial
                    for (LaunchOrder order : List.of(LaunchOrder.OVERLAPPING_PREVIOUS, LaunchOrder.AFTER_PREVIOUS)) {
                        ExpertLayer experts = new ExpertLayer(runtime.load(pair.gateUp().spec()), runtime.load(pair.down().spec()), order);
                        String name = "router+" + pair.name()
                                + (order == LaunchOrder.AFTER_PREVIOUS ? " serial" : "");
                        results.add(bench.runWithRouter(stream, name, router, experts, routerWeights, Map.of(), m, options.warmup,
                                options.reps, readBw));
                    }
                }
            } finally {
                routerWeights.forEach(DeviceBuffer::close);
                router.close();
            }
            System.out.println();
            System.out.printf(Locale.ROOT, "%-20s %4s %10s %10s %9s %11s %8s %8s%n", "variant", "M", "layer us", "router us",
                    "experts", "MB read", "GB/s", "of read");
            for (ExpertLayerBenchmark.LayerResult r : results) {
                System.out.printf(Locale.ROOT, "%-20s %4d %10.2f %10.2f %9.1f %11.1f %8.0f %7.1f%%%n", r.variant(), r.tokens(),
                        r.layer().medianMicros(), r.router().medianMicros(), r.distinctExpertsPerLayer(), r.bytesPerLayer() / 1e6,
                        r.gbPerSecond(), 100 * r.fractionOfRead());
            }
            Map<String, Object> doc = BenchReports.header("moe-layer", ctx);
            doc.put("method", Map.of("layers", workload.layers, "warmup", options.warmup, "reps", options.reps, "timing",
                    "CUDA events around each replay of one graph running router, gate_up and down for every layer; "
                            + "per layer = replay / layers; median; the router alone timed the same way",
                    "bytes", "distinct routed experts' weights (counted from the routing the router wrote) plus the router weights"));
            doc.put("read_bandwidth_bytes_per_second", readBw);
            List<Map<String, Object>> rows = new ArrayList<>();
            for (ExpertLayerBenchmark.LayerResult r : results) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("variant", r.variant());
                m.put("tokens", r.tokens());
                m.put("layer_us", BenchReports.timing(r.layer()));
                m.put("router_us", BenchReports.timing(r.router()));
                m.put("distinct_experts_per_layer", r.distinctExpertsPerLayer());
                m.put("bytes_per_layer", r.bytesPerLayer());
                m.put("gb_per_second", r.gbPerSecond());
                m.put("fraction_of_read_bandwidth", r.fractionOfRead());
                rows.add(m);
            }
            doc.put("results", rows);
            System.out.println("wrote " + BenchReports.write(options.out, ctx, "moe-layer", doc));
        }
        return 0;
    }
}
