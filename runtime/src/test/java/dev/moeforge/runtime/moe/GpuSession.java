package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.kernel.KernelRuntime;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The base of the GPU test classes: a context, a stream and a kernel runtime on device 0 for the
 * class, compiling through the cache at {@code MOEFORGE_CACHE} (or the default one). Each subclass
 * carries {@link dev.moeforge.runtime.cuda.RequiresGpu}, so that without a CUDA device none of this
 * runs and its tests are reported as skipped.
 */
abstract class GpuSession {
    static CudaContext context;
    static CudaStream stream;
    static KernelRuntime runtime;

    @BeforeAll
    static void openGpu() {
        context = CudaContext.create(0);
        stream = CudaStream.create();
        String dir = System.getenv("MOEFORGE_CACHE");
        runtime = new KernelRuntime(context, dir != null ? new KernelCache(Path.of(dir)) : KernelCache.defaultCache());
    }

    /** Compiles (through the cache) every spec in parallel, so that the tests then load from the cache. */
    static void compileAll(List<KernelSpec> specs) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(2, Runtime.getRuntime().availableProcessors()));
        try {
            List<Future<?>> jobs = new ArrayList<>();
            for (KernelSpec spec : specs) {
                jobs.add(pool.submit(() -> runtime.load(spec)));
            }
            for (Future<?> f : jobs) {
                f.get();
            }
        } finally {
            pool.shutdown();
        }
    }

    /**
     * Runs {@code layer} on {@code x} and {@code routing} with its outputs poisoned first, checks
     * inter and y against the reference within {@code tolerance}, then checks that one graph replay
     * writes the same bytes. {@code where} names the case (and its seeds) in every message.
     */
    static void checkExpertLayer(String where, ExpertLayer layer, short[] x, Routing routing, DeviceWeights gateUp,
                                 DeviceWeights down, ExpertReference.LayerResult ref, double tolerance) {
        int tokens = routing.tokens();
        try (DeviceBuffer dx = DeviceBuffer.allocate(DType.BF16, x.length);
             DeviceBuffer dids = DeviceBuffer.allocate(DType.INT32, routing.ids().length);
             DeviceBuffer dw = DeviceBuffer.allocate(DType.FP32, routing.weights().length);
             DeviceBuffer dinter = DeviceBuffer.allocate(DType.BF16, ref.inter().stored().length);
             DeviceBuffer dy = DeviceBuffer.allocate(DType.BF16, ref.y().stored().length)) {
            dx.copyFrom(x);
            dids.copyFrom(routing.ids());
            dw.copyFrom(routing.weights());
            dinter.fillBytes16(Bf16.NAN);
            dy.fillBytes16(Bf16.NAN);
            layer.enqueue(stream, tokens, dx, gateUp, down, dids, dw, dinter, dy);
            stream.synchronize();
            short[] gotInter = download(dinter);
            short[] gotY = download(dy);
            ErrorStats ei = ErrorStats.of(ref.inter().exact(), gotInter);
            ErrorStats ey = ErrorStats.of(ref.y().exact(), gotY);
            System.out.println(where + ": gate_up " + ei + "; y " + ey);
            assertTrue(ei.within(tolerance), () -> "gate_up " + where + ": " + ei);
            assertTrue(ey.within(tolerance), () -> "down " + where + ": " + ey);

            // a graph replay computes the same bytes as the direct launch
            dinter.fillBytes16(Bf16.NAN);
            dy.fillBytes16(Bf16.NAN);
            try (CudaGraph graph = CudaGraph.capture(stream,
                    () -> layer.enqueue(stream, tokens, dx, gateUp, down, dids, dw, dinter, dy))) {
                graph.launch(stream);
                stream.synchronize();
            }
            assertArrayEquals(gotInter, download(dinter), () -> "graph replay of gate_up differs: " + where);
            assertArrayEquals(gotY, download(dy), () -> "graph replay of down differs: " + where);
        }
    }

    /** A bf16 buffer's contents. */
    static short[] download(DeviceBuffer b) {
        short[] out = new short[(int) b.elements()];
        b.copyTo(out);
        return out;
    }

    @AfterAll
    static void closeGpu() {
        if (runtime != null) {
            runtime.close();
            stream.close();
            context.close();
            runtime = null;
        }
    }
}
