package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.generated.BuiltinKernel;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The whole built-in catalogue compiled by nvcc for every target through the production path
 * ({@code moeforge gen}, a fresh kernel cache): every kernel compiles, ptxas reports no spills
 * and no stack frame (no local memory), and catalogue.json describes exactly what was written.
 */
@Tag("nvcc")
class GenCommandNvccTest {

    @Test
    void catalogueCompilesForAllTargetsWithoutSpills(@TempDir Path out, @TempDir Path cacheDir) throws Exception {
        Assumptions.assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        List<Target> targets = List.of(Target.values());
        // every core: the compiles are independent, CPU-bound nvcc processes (most of each is cicc
        // parsing the device header), so the wall time falls with the core count
        List<GenCommand.Entry> entries = GenCommand.generate(Catalogue.specs(), targets, out, Runtime.getRuntime().availableProcessors(), null,
                new KernelCache(cacheDir));
        int kernels = Catalogue.specs().size();
        assertEquals(kernels * targets.size(), entries.size());

        JsonNode json = new ObjectMapper().readTree(out.resolve("catalogue.json").toFile());
        assertEquals(entries.size(), json.get("kernels").size());
        Set<String> seen = new HashSet<>();
        for (JsonNode k : json.get("kernels")) {
            String where = k.get("name").asText() + " for " + k.get("target").asText();
            assertTrue(seen.add(where), "listed twice: " + where);
            assertEquals(0, k.get("spill_bytes").asLong(), "spills in " + where);
            int registers = k.get("registers").asInt();
            assertTrue(registers > 0 && registers <= 255, where + " uses " + registers + " registers");
            assertTrue(Files.size(out.resolve(k.get("cubin").asText())) > 0, "empty cubin for " + where);
            String source = Files.readString(out.resolve(k.get("source").asText()));
            assertTrue(source.contains("kernel " + k.get("name").asText() + " {"), "the source of " + where + " does not start with its spec");
            assertTrue(source.contains("target " + k.get("target").asText()), "the spec in " + where + " names another target");
            String family = k.get("family").asText();
            assertTrue(dev.moeforge.dsl.schedule.Schedule.kinds().stream().anyMatch(kind -> family.startsWith(kind.name())),
                    "family of " + where + ": " + family);
            assertEquals(BuiltinKernel.valueOf(k.get("name").asText().toUpperCase(java.util.Locale.ROOT)).spec().problem().weights().text(),
                    k.get("format").asText(),
                    "format of " + where);
        }
        for (dev.moeforge.codegen.cuda.DeviceHeader header : dev.moeforge.codegen.cuda.DeviceHeader.values()) {
            assertTrue(Files.exists(out.resolve(header.fileName())), "the device headers are written beside the sources");
        }

        // no local memory at all: the cached ptxas reports show no stack frame (no LDL/STL in SASS)
        KernelCache cache = new KernelCache(cacheDir);
        for (var spec : Catalogue.specs()) {
            for (Target t : targets) {
                GeneratedKernel k = CudaEmitter.emit(spec.withTarget(t));
                var report = cache.getOrCompile(CudaSource.of(k), t).report();
                assertEquals(0, report.function(spec.name()).stackFrameBytes(), "stack frame in " + spec.name() + " for " + t.text());
            }
        }
        assertEquals(0, cache.misses(), "gen should have left every kernel in the cache");
    }
}
