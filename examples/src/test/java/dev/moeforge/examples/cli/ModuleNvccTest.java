package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.compile.PtxasReport;
import dev.moeforge.runtime.kernel.ModuleResource;
import java.nio.file.Path;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The hand-written modules the commands load (the decoder's kernels, the benchmarks' helpers, the
 * dispatch kernel), each compiled by nvcc for every target through a fresh kernel cache: every
 * function compiles with no spills.
 */
@Tag("nvcc")
class ModuleNvccTest {

    @Test
    void modulesCompileForAllTargetsWithoutSpills(@TempDir Path cacheDir) {
        Assumptions.assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        KernelCache cache = new KernelCache(cacheDir);
        for (ModuleResource module : PrecompileCommand.MODULES) {
            for (Target target : Target.values()) {
                CompileResult compiled = cache.getOrCompile(module.source(), target);
                PtxasReport report = compiled.report();
                assertFalse(report.functions().isEmpty(), module.fileName() + " for " + target.text() + ": no functions");
                String spilled = report.functions().stream().filter(PtxasReport.FunctionResources::spills)
                        .map(f -> f.name() + " (" + (f.spillStoreBytes() + f.spillLoadBytes()) + " bytes)").collect(Collectors.joining(", "));
                assertTrue(spilled.isEmpty(), module.fileName() + " for " + target.text() + " spills in " + spilled);
            }
        }
    }
}
