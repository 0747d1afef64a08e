package dev.moeforge.runtime.moe;

import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;

/**
 * The base of the GPU test classes: a context, a stream and a kernel runtime on device 0 for the
 * class, compiling through the cache at {@code MOEFORGE_CACHE} (or the default one). Where no CUDA
 * device is found the class is skipped by assumption.
 */
abstract class GpuSession {
    static CudaContext context;
    static CudaStream stream;
    static KernelRuntime runtime;

    @BeforeAll
    static void openGpu() {
        Assumptions.assumeTrue(Gpu.available(), () -> "no CUDA device: " + Gpu.unavailableReason());
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
