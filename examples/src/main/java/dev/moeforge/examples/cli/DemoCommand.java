package dev.moeforge.examples.cli;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertLayer;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code moeforge demo}, the main job: generates and nvcc-compiles the built-in catalogue, runs a
 * small expert layer on the CPU reference and, when a CUDA device is present, on the GPU with
 * both schedules, checking every output against the reference.
 */
@Command(name = "demo", mixinStandardHelpOptions = true,
        description = "Generates and compiles the built-in kernels, runs a small MoE expert layer on the CPU reference "
                + "and, with a GPU, on the device: prints the error against the reference and the time.")
public final class DemoCommand implements Callable<Integer> {
    /** Relative L2 error allowed for BF16 outputs. */
    static final double TOLERANCE = 1e-2;

    /** Each BF16 output's error allowed, as a fraction of the reference's peak (bf16 rounding alone moves it up to 2^-8). */
    static final double ELEMENT_TOLERANCE = 1e-2;

    @Option(names = "--out", defaultValue = "out/demo", description = "Where the catalogue goes (default: ${DEFAULT-VALUE}).")
    Path out;

    @Option(names = "--target", split = ",", defaultValue = "sm_90a,sm_100a,sm_120a",
            description = "Targets to compile the catalogue for (default: ${DEFAULT-VALUE}).")
    List<String> targets;

    @Option(names = "--tokens", defaultValue = "4", description = "Tokens in the demo batch, 1..32 (default: ${DEFAULT-VALUE}).")
    int tokens;

    @Option(names = "--seed", description = "Seed of the random inputs (default: from the clock; printed).")
    Long seed;

    @Override
    public Integer call() throws Exception {
        if (tokens < 1 || tokens > 32) {
            throw new IllegalArgumentException("--tokens " + tokens + ": allowed 1..32");
        }
        long s = seed != null ? seed : System.nanoTime();
        List<Target> ts = GenCommand.parseTargets(targets);
        System.out.println("1. Generating the built-in catalogue (" + Catalogue.specs().size() + " kernels) for "
                + targets + " and compiling it with nvcc into " + out);
        List<GenCommand.Entry> entries = GenCommand.generate(ts, out, 0, false, KernelCache.defaultCache());
        for (GenCommand.Entry e : entries) {
            System.out.printf(Locale.ROOT, "   %-32s %-8s %3d registers, %d spill bytes, %6d B shared%n",
                    e.name(), e.target(), e.registers(), e.spill_bytes(), e.smem_bytes());
        }

        ExpertShape shape = new ExpertShape(256, 128, 16, 4);
        System.out.printf(Locale.ROOT, "2. A small expert layer: H=%d, I=%d, E=%d, top-%d, M=%d tokens, BF16, seed %d%n",
                shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), tokens, s);
        List<ExpertLayerSpecs> variants = List.of(
                ExpertLayerSpecs.of("demo_single", shape, GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A),
                ExpertLayerSpecs.of("demo_tiled", shape, GateUpLayout.STACKED,
                        OutputCentricBuilder.create().tokensPerCta(Math.max(2, tokens)).build(), Target.SM_90A));
        short[] x = RandomInputs.bf16Normal(s, tokens * shape.hidden(), 1.0);
        short[] wGateUp = RandomInputs.bf16Normal(s + 1, shape.experts() * 2 * shape.intermediate() * shape.hidden(),
                1.0 / Math.sqrt(shape.hidden()));
        short[] wDown = RandomInputs.bf16Normal(s + 2, shape.experts() * shape.hidden() * shape.intermediate(),
                1.0 / Math.sqrt(shape.intermediate()));
        Routing routing = RandomInputs.uniformRouting(s + 3, tokens, shape.experts(), shape.topk());
        long t0 = System.nanoTime();
        ExpertLayerSpecs ref = variants.getFirst();
        ExpertReference.LayerResult layerRef = ExpertReference.layer(ref.gateUp(), ref.down(), x,
                WeightRows.bf16(wGateUp, shape.experts(), 2 * shape.intermediate(), shape.hidden()),
                WeightRows.bf16(wDown, shape.experts(), shape.hidden(), shape.intermediate()), routing);
        ExpertReference.Result inter = layerRef.inter();
        ExpertReference.Result y = layerRef.y();
        System.out.printf(Locale.ROOT, "   CPU reference (FP64): %.1f ms; token 0 routed to %s; y[0][0..3] = %s%n",
                (System.nanoTime() - t0) / 1e6, java.util.Arrays.toString(java.util.Arrays.copyOf(routing.ids(), shape.topk())),
                first(y.stored(), 4));

        if (!Gpu.available()) {
            System.out.println("3. No usable CUDA device here (" + Gpu.unavailableReason() + "): the GPU run is skipped.");
            return 0;
        }
        boolean ok = true;
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, KernelCache.defaultCache())) {
            System.out.println("3. On " + ctx.deviceName() + " (" + runtime.target().text() + "):");
            try (DeviceBuffer dx = DeviceBuffer.allocate(DType.BF16, x.length);
                 DeviceBuffer dgu = DeviceBuffer.allocate(DType.BF16, wGateUp.length);
                 DeviceBuffer ddn = DeviceBuffer.allocate(DType.BF16, wDown.length);
                 DeviceBuffer dids = DeviceBuffer.allocate(DType.INT32, routing.ids().length);
                 DeviceBuffer dw = DeviceBuffer.allocate(DType.FP32, routing.weights().length);
                 DeviceBuffer dinter = DeviceBuffer.allocate(DType.BF16, inter.stored().length);
                 DeviceBuffer dy = DeviceBuffer.allocate(DType.BF16, y.stored().length)) {
                dx.copyFrom(x);
                dgu.copyFrom(wGateUp);
                ddn.copyFrom(wDown);
                dids.copyFrom(routing.ids());
                dw.copyFrom(routing.weights());
                for (ExpertLayerSpecs v : variants) {
                    ExpertLayer layer = new ExpertLayer(runtime.load(v.gateUp()), runtime.load(v.down()));
                    dinter.fillBytes16(Bf16.NAN);
                    dy.fillBytes16(Bf16.NAN);
                    layer.enqueue(stream, tokens, dx, dgu, ddn, dids, dw, dinter, dy);
                    stream.synchronize();
                    short[] gotInter = new short[inter.stored().length];
                    short[] gotY = new short[y.stored().length];
                    dinter.copyTo(gotInter);
                    dy.copyTo(gotY);
                    ErrorStats ei = ErrorStats.of(inter.exact(), gotInter);
                    ErrorStats ey = ErrorStats.of(y.exact(), gotY);
                    GpuTimer.Timing t;
                    try (CudaGraph g = CudaGraph.capture(stream,
                            () -> layer.enqueue(stream, tokens, dx, dgu, ddn, dids, dw, dinter, dy))) {
                        t = GpuTimer.time(stream, g, 10, 100);
                    }
                    boolean pass = ei.within(TOLERANCE, ELEMENT_TOLERANCE) && ey.within(TOLERANCE, ELEMENT_TOLERANCE);
                    ok &= pass;
                    System.out.printf(Locale.ROOT, "   %-12s gate_up %s | y %s | %.2f us per layer (graph, median of 100) %s%n",
                            v.gateUp().name().replace("_gate_up", ""), ei, ey, t.medianMicros(), pass ? "PASS" : "FAIL");
                }
            }
        }
        return ok ? 0 : 1;
    }

    private static String first(short[] v, int n) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < Math.min(n, v.length); i++) {
            b.append(i > 0 ? ", " : "").append(String.format(Locale.ROOT, "%.4f", Bf16.toFloat(v[i])));
        }
        return b.append(']').toString();
    }
}
