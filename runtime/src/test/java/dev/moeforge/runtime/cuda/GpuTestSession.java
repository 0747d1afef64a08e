package dev.moeforge.runtime.cuda;

import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The base of GPU test classes: a context, a stream and a kernel runtime on device 0 for the
 * class, compiling through the cache at {@code MOEFORGE_CACHE} (or the default one). Each subclass
 * carries {@link RequiresGpu}, so that without a CUDA device none of this runs and its tests are
 * reported as skipped.
 */
public abstract class GpuTestSession {
    protected static CudaContext context;
    protected static CudaStream stream;
    protected static KernelRuntime runtime;

    @BeforeAll
    public static void openGpu() {
        context = CudaContext.create(0);
        stream = CudaStream.create();
        String dir = System.getenv("MOEFORGE_CACHE");
        runtime = new KernelRuntime(context, dir != null ? new KernelCache(Path.of(dir)) : KernelCache.defaultCache());
    }

    @AfterAll
    public static void closeGpu() {
        if (runtime != null) {
            runtime.close();
            stream.close();
            context.close();
            runtime = null;
        }
    }
}
