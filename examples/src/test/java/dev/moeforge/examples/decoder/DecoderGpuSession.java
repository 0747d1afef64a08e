package dev.moeforge.examples.decoder;

import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The base of the decoder's GPU test classes: a context, a stream and a kernel runtime on device 0
 * for the class, compiling through the cache at {@code MOEFORGE_CACHE} (or the default one). Each
 * subclass carries {@link dev.moeforge.runtime.cuda.RequiresGpu}, so that without a CUDA device
 * none of this runs and its tests are reported as skipped.
 */
abstract class DecoderGpuSession {
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

    @AfterAll
    static void closeGpu() {
        if (runtime != null) {
            runtime.close();
            stream.close();
            context.close();
        }
    }
}
