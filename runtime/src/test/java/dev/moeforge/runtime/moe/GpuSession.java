package dev.moeforge.runtime.moe;

import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;

/**
 * What a GPU test class shares: a context, a stream and a kernel runtime on device 0, compiling
 * through the cache at {@code MOEFORGE_CACHE} (or the default one). Opening it skips the class by
 * assumption where no CUDA device is found.
 */
record GpuSession(CudaContext context, CudaStream stream, KernelRuntime runtime) implements AutoCloseable {

    static GpuSession open() {
        Assumptions.assumeTrue(Gpu.available(), () -> "no CUDA device: " + Gpu.unavailableReason());
        CudaContext context = CudaContext.create(0);
        CudaStream stream = CudaStream.create();
        String dir = System.getenv("MOEFORGE_CACHE");
        KernelRuntime runtime = new KernelRuntime(context, dir != null ? new KernelCache(Path.of(dir)) : KernelCache.defaultCache());
        return new GpuSession(context, stream, runtime);
    }

    @Override
    public void close() {
        runtime.close();
        stream.close();
        context.close();
    }
}
