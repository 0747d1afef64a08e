package dev.moeforge.examples.cli;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.PtxasReport;
import java.util.Locale;

/**
 * What a compiled kernel uses, as the CLI lists it: registers per thread, bytes spilled to local
 * memory (stores and loads) and shared memory per block (static, from ptxas, plus the dynamic bytes
 * its launch asks for).
 */
record KernelResources(int registers, long spillBytes, long sharedBytes) {

    /** Generates and compiles {@code spec} for its target through {@code cache}. */
    static KernelResources compile(KernelSpec spec, KernelCache cache) {
        return of(spec, cache.getOrCompile(CudaSource.of(CudaEmitter.emit(spec)), spec.target()));
    }

    static KernelResources of(KernelSpec spec, CompileResult compiled) {
        PtxasReport.FunctionResources f = compiled.report().function(spec.name());
        return new KernelResources(f.registers(), f.spillStoreBytes() + f.spillLoadBytes(),
                f.sharedBytes() + LaunchGeometry.of(spec, 1).sharedBytes());
    }

    /** One line of a listing: the kernel's name and target, then its resources. */
    String line(String name, String target) {
        return String.format(Locale.ROOT, "   %-32s %-8s %3d registers, %d spill bytes, %6d B shared", name, target, registers,
                spillBytes, sharedBytes);
    }
}
