package dev.moeforge.runtime.compile;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.runtime.compile.PtxasReport.FunctionResources;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.NoSuchElementException;
import org.junit.jupiter.api.Test;

/**
 * Parses nvcc 13.0 output captured on the build machine. Each {@code ptxas/NAME_ARCH.txt} resource
 * is the complete output of
 * {@code nvcc -cubin -gencode=arch=compute_X,code=sm_X -O3 -std=c++17 -Xptxas -v -lineinfo NAME.cu}
 * for the {@code NAME.cu} beside it ({@code spill.cu} with {@code -maxrregcount=16} added).
 */
class PtxasReportTest {

    private static String resource(String name) throws IOException {
        try (InputStream in = PtxasReportTest.class.getResourceAsStream("/ptxas/" + name)) {
            if (in == null) {
                throw new IOException("missing test resource ptxas/" + name);
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void entryFunctionsAndNonInlinedDeviceFunction() throws IOException {
        PtxasReport report = PtxasReport.parse(resource("simple_sm90a.txt"));

        assertEquals(List.of("_Z4tmplILi4EEvPf", "_Z6helperf", "smem_reduce", "add_one"),
                report.functions().stream().map(FunctionResources::name).toList());
        assertEquals(new FunctionResources("smem_reduce", 12, 0, 0, 0, 1024, 0), report.function("smem_reduce"));
        assertEquals(new FunctionResources("add_one", 8, 0, 0, 0, 0, 0), report.function("add_one"));
        // A __noinline__ device function gets a properties block but no register line.
        assertEquals(new FunctionResources("_Z6helperf", 0, 0, 0, 0, 0, 0), report.function("_Z6helperf"));
        assertFalse(report.anySpills());
    }

    @Test
    void spillingKernel() throws IOException {
        PtxasReport report = PtxasReport.parse(resource("spill_sm90a.txt"));

        FunctionResources spiller = report.function("spiller");
        assertEquals(new FunctionResources("spiller", 24, 1020, 1284, 736, 0, 0), spiller);
        assertTrue(spiller.spills());
        assertTrue(report.anySpills());
    }

    @Test
    void stackFrameWithoutSpills() throws IOException {
        PtxasReport report = PtxasReport.parse(resource("stack_sm90a.txt"));

        FunctionResources f = report.function("runtime_indexed");
        assertEquals(192, f.stackFrameBytes());
        assertEquals(32, f.registers());
        assertFalse(report.anySpills());
    }

    @Test
    void blackwellConsumerTarget() throws IOException {
        PtxasReport report = PtxasReport.parse(resource("mixed_sm120a.txt"));

        assertEquals(3, report.functions().size());
        assertEquals(40, report.function("local_arr").registers());
        assertEquals(10, report.function("dyn_smem").registers());
        assertEquals(8, report.function("use_const").registers());
    }

    /** The register line of older toolkits, which listed constant banks; taken from CUDA 12 era output. */
    @Test
    void olderFormatWithConstantBanks() {
        String log = """
                ptxas info    : Compiling entry function 'k' for 'sm_80'
                ptxas info    : Function properties for k
                    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
                ptxas info    : Used 64 registers, 8192 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]
                """;
        assertEquals(new FunctionResources("k", 64, 0, 0, 0, 8192, 368), PtxasReport.parse(log).function("k"));
    }

    @Test
    void unknownFunctionNamesTheReportedOnes() throws IOException {
        PtxasReport report = PtxasReport.parse(resource("spill_sm90a.txt"));

        NoSuchElementException e = assertThrows(NoSuchElementException.class, () -> report.function("nope"));
        assertTrue(e.getMessage().contains("spiller"), e.getMessage());
    }

    @Test
    void jsonRoundTrip() throws IOException {
        for (String name : List.of("simple_sm90a.txt", "spill_sm90a.txt", "stack_sm90a.txt", "mixed_sm120a.txt")) {
            PtxasReport report = PtxasReport.parse(resource(name));
            PtxasReport back = PtxasReport.fromJson(report.toJson());
            assertEquals(report, back, name);
            assertEquals(List.copyOf(report.functions()), List.copyOf(back.functions()), name);
        }
    }

    @Test
    void emptyLogHasNoFunctions() {
        PtxasReport report = PtxasReport.parse("");
        assertTrue(report.functions().isEmpty());
        assertFalse(report.anySpills());
    }
}
