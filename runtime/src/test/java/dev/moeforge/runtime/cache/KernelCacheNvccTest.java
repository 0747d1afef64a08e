package dev.moeforge.runtime.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The cache with the real nvcc: what a hit returns is byte for byte what nvcc produced. */
@Tag("nvcc")
class KernelCacheNvccTest {

    @Test
    void realCompileRoundTrip(@TempDir Path dir) throws Exception {
        assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        CudaSource source = CudaSource.of("copy.cu",
                "extern \"C\" __global__ void copy(const int* a, int* b) { b[threadIdx.x] = a[threadIdx.x]; }\n");
        KernelCache cache = new KernelCache(dir);

        CompileResult compiled = cache.getOrCompile(source, Target.SM_90A);
        CompileResult cached = new KernelCache(dir).getOrCompile(source, Target.SM_90A);

        assertEquals(1, cache.misses());
        assertArrayEquals(compiled.cubin(), cached.cubin());
        assertEquals(compiled.report(), cached.report());
        assertEquals(compiled.log(), cached.log());
        String meta = Files.readString(cache.entryDir(cache.key(source, Target.SM_90A)).resolve("meta.json"));
        assertEquals(true, meta.contains(new NvccCompiler().version()), meta);
    }
}
