package dev.moeforge.runtime.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.compile.PtxasReport.FunctionResources;
import java.util.Optional;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** What the runtime says when ptxas spills a kernel's registers (no GPU needed; the last case runs nvcc). */
class SpillWarningTest {

    /** The catalogue's Qwen3-30B-A3B NVFP4 down (32 warps on one tile) with six steps in flight instead of one. */
    static KernelSpec down(int kUnroll) {
        return SpecParser.parse("""
                kernel nvfp4_down_u%d {
                  problem expert_down(hidden=2048, intermediate=768, experts=128, topk=8, weights=nvfp4, activations=bf16)
                  schedule output_tensor_core(warps_per_cta=32, k_unroll=%d, warps_per_tile=32, min_blocks_per_sm=1)
                  epilogue store(combine(acc), dtype=bf16)
                  target sm_90a
                }
                """.formatted(kUnroll, kUnroll));
    }

    @Test
    void aSpillNamesTheKernelTheBytesAndTheFieldsToChange() {
        KernelSpec spec = down(6);
        FunctionResources spilled = new FunctionResources(spec.name(), 64, 332, 420, 336, 0, 0);

        String warning = KernelRuntime.spillWarning(spec, spilled).orElseThrow();

        assertTrue(warning.startsWith("nvfp4_down_u6 (sm_90a) spills 332 bytes of stores and 420 bytes of loads per thread"), warning);
        assertTrue(warning.contains("at 64 registers"), warning);
        assertTrue(warning.contains("k_unroll 6"), warning);
        assertTrue(warning.contains("warps_per_cta 32"), warning);
        assertTrue(warning.contains("min_blocks_per_sm 1"), warning);
    }

    @Test
    void noSpillNoWarning() {
        KernelSpec spec = down(1);
        assertEquals(Optional.empty(), KernelRuntime.spillWarning(spec, new FunctionResources(spec.name(), 59, 0, 0, 0, 0, 0)));
    }

    /** nvcc 13.0 holds a 32-warp block to 64 registers; two groups of six steps do not fit (bench/NOTES.md). */
    @Tag("nvcc")
    @Test
    void theCompilerSpillsSixStepsInFlightOnThirtyTwoWarpsAndTheRuntimeSaysSo() {
        assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        KernelSpec spec = down(6);
        CompileResult compiled = new NvccCompiler().compile(CudaSource.of(CudaEmitter.emit(spec)), Target.SM_90A);

        FunctionResources resources = compiled.report().function(spec.name());

        assertTrue(resources.spills(), resources::toString);
        assertTrue(KernelRuntime.spillWarning(spec, resources).isPresent());
    }
}
