package dev.moeforge.runtime.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

class KernelCacheTest {

    private static final CudaSource SOURCE = new CudaSource("k.cu",
            "#include \"moeforge_device.cuh\"\nextern \"C\" __global__ void k() {}\n",
            Map.of("moeforge_device.cuh", "#pragma once\n"), "kernel k {}");

    @TempDir
    Path dir;

    @Test
    void secondRequestIsAHit() {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();

        CompileResult first = cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);
        CompileResult second = cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);

        assertEquals(1, nvcc.compiles.get());
        assertEquals(1, cache.misses());
        assertEquals(1, cache.hits());
        assertEquals(0, cache.rebuilds());
        assertArrayEquals(first.cubin(), second.cubin());
        assertEquals(first.report(), second.report());
        assertEquals(first.log(), second.log());
        assertEquals(first.command(), second.command());
    }

    @Test
    void entryLayout() throws IOException {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);

        String key = cache.key(SOURCE, Target.SM_90A, nvcc);
        assertTrue(key.matches("[0-9a-f]{64}"), key);
        Path entry = cache.entryDir(key);
        assertEquals(dir.resolve(key.substring(0, 2)).resolve(key), entry);
        for (String file : List.of("kernel.cubin", "report.json", "meta.json", "source.cu")) {
            assertTrue(Files.isRegularFile(entry.resolve(file)), file);
        }
        assertEquals(SOURCE.code(), Files.readString(entry.resolve("source.cu")));
        String meta = Files.readString(entry.resolve("meta.json"));
        for (String expected : List.of(key, "sm_90a", "release 0.0", "-gencode=arch=compute_90a,code=sm_90a", "cubinSha256", "created")) {
            assertTrue(meta.contains(expected), expected + " in " + meta);
        }
        // Nothing is left over from building the entry.
        try (var shard = Files.list(entry.getParent())) {
            assertEquals(List.of(key, key + ".lock"), shard.map(p -> p.getFileName().toString()).sorted().toList());
        }
    }

    @Test
    void keyCoversEverythingThatChangesTheCubin() {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        String base = cache.key(SOURCE, Target.SM_90A, nvcc);

        Map<String, String> reordered = new LinkedHashMap<>();
        reordered.put("b.cuh", "B");
        reordered.put("a.cuh", "A");
        Map<String, String> ordered = new LinkedHashMap<>();
        ordered.put("a.cuh", "A");
        ordered.put("b.cuh", "B");
        assertEquals(cache.key(new CudaSource("k.cu", "x", reordered, ""), Target.SM_90A, nvcc),
                cache.key(new CudaSource("k.cu", "x", ordered, ""), Target.SM_90A, nvcc));
        // The spec text is for messages only and does not change the binary.
        assertEquals(base, cache.key(new CudaSource("k.cu", SOURCE.code(), SOURCE.headers(), "other"), Target.SM_90A, nvcc));

        assertNotEquals(base, cache.key(SOURCE, Target.SM_100A, nvcc));
        assertNotEquals(base, cache.key(new CudaSource("k.cu", SOURCE.code() + " int x;", SOURCE.headers(), ""), Target.SM_90A, nvcc));
        assertNotEquals(base, cache.key(new CudaSource("k.cu", SOURCE.code(), Map.of("moeforge_device.cuh", "#pragma once\nint y;"), ""),
                Target.SM_90A, nvcc));
        assertNotEquals(base, cache.key(new CudaSource("k2.cu", SOURCE.code(), SOURCE.headers(), ""), Target.SM_90A, nvcc));
        CountingCompiler otherVersion = new CountingCompiler() {
            @Override
            public String version() {
                return "Cuda compilation tools, release 0.1, V0.1.0 (fake)";
            }
        };
        assertNotEquals(base, cache.key(SOURCE, Target.SM_90A, otherVersion));
        CountingCompiler otherFlags = new CountingCompiler() {
            @Override
            public List<String> flags(Target target) {
                return List.of("-G");
            }
        };
        assertNotEquals(base, cache.key(SOURCE, Target.SM_90A, otherFlags));
    }

    /** Comments cannot change a cubin's code: rewording one, in the source or a header, keeps the key. */
    @Test
    void rewordedCommentsKeepTheKey() {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        String code = "// a note\nextern \"C\" __global__ void k() { /* why */ }\n";
        String header = "#pragma once\n// the header's note\n";
        String base = cache.key(new CudaSource("k.cu", code, Map.of("h.cuh", header), ""), Target.SM_90A, nvcc);
        String reworded = "// a longer note\n// on two lines\nextern \"C\" __global__ void k() { /* why, reworded */ }   \n\n";
        assertEquals(base, cache.key(new CudaSource("k.cu", reworded, Map.of("h.cuh", "#pragma once\n/* another\n note */\n"), ""),
                Target.SM_90A, nvcc));
        // a comment marker inside a string literal is code
        assertNotEquals(cache.key(new CudaSource("k.cu", "const char* s = \"// a\";\n", Map.of(), ""), Target.SM_90A, nvcc),
                cache.key(new CudaSource("k.cu", "const char* s = \"// b\";\n", Map.of(), ""), Target.SM_90A, nvcc));
    }

    @Test
    void copiesAnEntryIntoAnotherCache(@TempDir Path other) {
        KernelCache source = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        KernelCache bundle = new KernelCache(other);
        assertThrows(IllegalStateException.class, () -> bundle.copyEntryFrom(source, SOURCE, Target.SM_90A, nvcc),
                "nothing to copy before the source compiled it");
        source.getOrCompile(SOURCE, Target.SM_90A, nvcc);
        bundle.copyEntryFrom(source, SOURCE, Target.SM_90A, nvcc);
        bundle.copyEntryFrom(source, SOURCE, Target.SM_90A, nvcc);  // already there: nothing to do
        bundle.getOrCompile(SOURCE, Target.SM_90A, nvcc);
        assertEquals(1, nvcc.compiles.get(), "the copy is a hit");
        assertEquals(0, bundle.misses());
    }

    @Test
    void survivesRestart() {
        CompileResult first = new KernelCache(dir).getOrCompile(SOURCE, Target.SM_90A, new CountingCompiler());

        KernelCache restarted = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        CompileResult again = restarted.getOrCompile(SOURCE, Target.SM_90A, nvcc);

        assertEquals(0, nvcc.compiles.get());
        assertEquals(1, restarted.hits());
        assertEquals(0, restarted.misses());
        assertArrayEquals(first.cubin(), again.cubin());
        assertEquals(first.report(), again.report());
    }

    enum Corruption {
        TRUNCATED_CUBIN {
            @Override
            void apply(Path entry) throws IOException {
                byte[] cubin = Files.readAllBytes(entry.resolve("kernel.cubin"));
                Files.write(entry.resolve("kernel.cubin"), java.util.Arrays.copyOf(cubin, cubin.length / 2));
            }
        },
        FLIPPED_CUBIN_BYTE {
            @Override
            void apply(Path entry) throws IOException {
                byte[] cubin = Files.readAllBytes(entry.resolve("kernel.cubin"));
                cubin[cubin.length - 1] ^= 1;
                Files.write(entry.resolve("kernel.cubin"), cubin);
            }
        },
        MISSING_CUBIN {
            @Override
            void apply(Path entry) throws IOException {
                Files.delete(entry.resolve("kernel.cubin"));
            }
        },
        GARBAGE_META {
            @Override
            void apply(Path entry) throws IOException {
                Files.writeString(entry.resolve("meta.json"), "{\"key\": not json");
            }
        },
        EMPTY_META {
            @Override
            void apply(Path entry) throws IOException {
                Files.writeString(entry.resolve("meta.json"), "{}");
            }
        },
        GARBAGE_REPORT {
            @Override
            void apply(Path entry) throws IOException {
                Files.writeString(entry.resolve("report.json"), "[1, 2");
            }
        },
        MISSING_REPORT {
            @Override
            void apply(Path entry) throws IOException {
                Files.delete(entry.resolve("report.json"));
            }
        };

        abstract void apply(Path entry) throws IOException;
    }

    @ParameterizedTest
    @EnumSource(Corruption.class)
    void corruptEntryIsRebuilt(Corruption corruption) throws IOException {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler();
        CompileResult first = cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);
        corruption.apply(cache.entryDir(cache.key(SOURCE, Target.SM_90A, nvcc)));

        CompileResult rebuilt = cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);

        assertEquals(1, cache.rebuilds());
        assertEquals(2, nvcc.compiles.get());
        assertArrayEquals(first.cubin(), rebuilt.cubin());
        // The rebuilt entry is whole again.
        CompileResult third = cache.getOrCompile(SOURCE, Target.SM_90A, nvcc);
        assertEquals(2, nvcc.compiles.get());
        assertEquals(1, cache.hits());
        assertArrayEquals(first.cubin(), third.cubin());
    }

    @Test
    void concurrentRequestsForOneKeyCompileOnce() throws Exception {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler(Duration.ofMillis(300));

        List<CompileResult> results = runConcurrently(List.of(
                () -> cache.getOrCompile(SOURCE, Target.SM_90A, nvcc),
                () -> cache.getOrCompile(SOURCE, Target.SM_90A, nvcc)));

        assertEquals(1, nvcc.compiles.get());
        assertEquals(1, cache.misses());
        assertEquals(1, cache.hits());
        assertArrayEquals(results.get(0).cubin(), results.get(1).cubin());
    }

    /** Two cache instances on one directory stand in for two processes; FileChannel locks alone would throw here. */
    @Test
    void concurrentInstancesOnOneDirectoryCompileOnce() throws Exception {
        KernelCache a = new KernelCache(dir);
        KernelCache b = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler(Duration.ofMillis(300));

        List<CompileResult> results = runConcurrently(List.of(
                () -> a.getOrCompile(SOURCE, Target.SM_90A, nvcc),
                () -> b.getOrCompile(SOURCE, Target.SM_90A, nvcc)));

        assertEquals(1, nvcc.compiles.get());
        assertEquals(1, a.misses() + b.misses());
        assertEquals(1, a.hits() + b.hits());
        assertArrayEquals(results.get(0).cubin(), results.get(1).cubin());
    }

    @Test
    void differentKeysCompileInParallel() throws Exception {
        KernelCache cache = new KernelCache(dir);
        CountingCompiler nvcc = new CountingCompiler(Duration.ofMillis(300));
        List<Callable<CompileResult>> tasks = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            CudaSource source = CudaSource.of("k" + i + ".cu", "// kernel " + i + "\n");
            tasks.add(() -> cache.getOrCompile(source, Target.SM_90A, nvcc));
        }

        long start = System.nanoTime();
        List<CompileResult> results = runConcurrently(tasks);
        long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);

        assertEquals(4, nvcc.compiles.get());
        assertEquals(4, cache.misses());
        for (int i = 0; i < 4; i++) {
            assertTrue(new String(results.get(i).cubin()).contains("// kernel " + i));
        }
        // Locks are per key: four 300 ms compiles must overlap, not queue.
        assertTrue(millis < 1100, "took " + millis + " ms");
    }

    private static <T> List<T> runConcurrently(List<Callable<T>> tasks) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(tasks.size());
        try {
            CyclicBarrier start = new CyclicBarrier(tasks.size());
            List<Future<T>> futures = new ArrayList<>();
            for (Callable<T> task : tasks) {
                futures.add(pool.submit(() -> {
                    start.await();
                    return task.call();
                }));
            }
            List<T> results = new ArrayList<>();
            for (Future<T> f : futures) {
                results.add(f.get(30, TimeUnit.SECONDS));
            }
            return results;
        } finally {
            pool.shutdownNow();
        }
    }
}
