package dev.moeforge.runtime.compile;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.PtxasReport.FunctionResources;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Runs the real nvcc; skipped where there is none. */
@Tag("nvcc")
class NvccCompilerTest {

    static final String SCALE_KERNEL = """
            #include "moeforge_device.cuh"
            extern "C" __global__ void scale(float* x, float a, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) x[i] = moeforge_mul(x[i], a);
            }
            """;
    static final Map<String, String> HEADERS = Map.of("moeforge_device.cuh", """
            #pragma once
            __device__ __forceinline__ float moeforge_mul(float x, float a) { return x * a; }
            """);

    private static NvccCompiler nvcc;

    @BeforeAll
    static void findNvcc() {
        assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        nvcc = new NvccCompiler();
    }

    @Test
    void versionIsTheReleaseLine() {
        assertTrue(nvcc.version().startsWith("Cuda compilation tools, release "), nvcc.version());
    }

    @Test
    void flagsUseGencode() {
        assertEquals(List.of("-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                "-Xptxas", "-v", "-lineinfo"), nvcc.flags(Target.SM_90A));
    }

    @ParameterizedTest
    @EnumSource(Target.class)
    void compilesForEveryTarget(Target target) {
        CompileResult result = nvcc.compile(new CudaSource("scale.cu", SCALE_KERNEL, HEADERS, ""), target);

        // A cubin is an ELF image.
        assertTrue(result.cubin().length > 64);
        assertEquals(List.of((byte) 0x7f, (byte) 'E', (byte) 'L', (byte) 'F'),
                List.of(result.cubin()[0], result.cubin()[1], result.cubin()[2], result.cubin()[3]));
        FunctionResources scale = result.report().function("scale");
        assertTrue(scale.registers() > 0, scale::toString);
        assertFalse(scale.spills(), scale::toString);
        assertFalse(result.report().anySpills());
        assertTrue(result.log().contains("for '" + target.text() + "'"), result.log());
        assertTrue(result.command().contains("-gencode=arch=" + target.virtualArch() + ",code=" + target.text()));
    }

    @Test
    void compileErrorQuotesCommandSourceLineAndSpec() {
        String code = """
                #include "moeforge_device.cuh"
                extern "C" __global__ void broken(float* x, int n) {
                    int i = blockIdx.x * blockDim.x + threadIdx.x;
                    if (i < n) x[i] = moeforge_mul(x[i], undefined_scale);
                }
                """;
        String spec = "kernel broken {\n  target sm_90a\n}";
        CudaSource source = new CudaSource("broken_kernel.cu", code, HEADERS, spec);

        CompileFailure failure = assertThrows(CompileFailure.class, () -> nvcc.compile(source, Target.SM_90A));
        String message = failure.getMessage();

        assertTrue(message.contains("broken_kernel.cu(4): error: identifier \"undefined_scale\" is undefined"), message);
        assertTrue(message.contains("  > 4 |     if (i < n) x[i] = moeforge_mul(x[i], undefined_scale);"), message);
        assertTrue(message.contains("    2 | extern \"C\" __global__ void broken(float* x, int n) {"), message);
        assertTrue(message.contains("    5 | }"), message);
        assertTrue(message.contains(spec.lines().map(l -> "  " + l).reduce((a, b) -> a + "\n" + b).orElseThrow()), message);
        String commandLine = String.join(" ", failure.command());
        assertTrue(message.contains(commandLine), message);
        assertTrue(commandLine.endsWith("-o broken_kernel.cubin broken_kernel.cu"), commandLine);
        assertNotNull(failure.log());
    }

    @Test
    void errorInHeaderQuotesTheHeader() {
        Map<String, String> badHeader = Map.of("moeforge_device.cuh", """
                #pragma once
                __device__ __forceinline__ float moeforge_mul(float x, float a) { return x * a }
                """);
        CompileFailure failure = assertThrows(CompileFailure.class,
                () -> nvcc.compile(new CudaSource("scale.cu", SCALE_KERNEL, badHeader, ""), Target.SM_90A));

        assertTrue(failure.getMessage().contains("moeforge_device.cuh(2): error:"), failure.getMessage());
        assertTrue(failure.getMessage().contains("  > 2 | __device__ __forceinline__ float moeforge_mul"), failure.getMessage());
    }

    @Test
    void missingIncludeIsReported() {
        CompileFailure failure = assertThrows(CompileFailure.class,
                () -> nvcc.compile(new CudaSource("scale.cu", SCALE_KERNEL, Map.of(), ""), Target.SM_90A));

        assertTrue(failure.getMessage().contains("scale.cu(1)") || failure.getMessage().contains("scale.cu:1"),
                failure.getMessage());
        assertTrue(failure.getMessage().contains("moeforge_device.cuh"), failure.getMessage());
    }

    @Test
    void ptxasErrorFallsBackToRawLog() {
        String code = """
                extern "C" __global__ void bad_asm(float* x) { asm volatile("bogus.instr %0;" :: "f"(x[0])); }
                """;
        CompileFailure failure = assertThrows(CompileFailure.class,
                () -> nvcc.compile(CudaSource.of("bad_asm.cu", code), Target.SM_90A));

        assertTrue(failure.getMessage().contains("nvcc output:"), failure.getMessage());
        assertTrue(failure.getMessage().contains("bogus"), failure.getMessage());
    }

    @Test
    void sourceNamesMustStayInTheBuildDirectory() {
        assertThrows(IllegalArgumentException.class, () -> CudaSource.of("../x.cu", ""));
        assertThrows(IllegalArgumentException.class, () -> CudaSource.of("x.cpp", ""));
        assertThrows(IllegalArgumentException.class,
                () -> new CudaSource("x.cu", "", Map.of("/etc/passwd", ""), ""));
        assertEquals(List.of("a.cuh", "sub/h.cuh"),
                List.copyOf(new CudaSource("x.cu", "", Map.of("sub/h.cuh", "", "a.cuh", ""), "").headers().keySet()));
    }
}
