package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.cuda.Gpu;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code try} and {@code check} on a machine without a GPU: canonical form, compile listing, the reference, refusals. */
class TryCommandTest {
    /** Kept between runs of the tests, so that only the first compiles the small layer. */
    static final KernelCache CACHE = new KernelCache(Path.of("target", "test-kernel-cache"));

    @TempDir
    Path tmp;

    @Test
    void tryNoRunAndCheckPrintTheCanonicalForm() throws Exception {
        Path file = CliRun.resource(tmp, "small_layer.moe");
        String canonical = SpecPrinter.printAll(SpecParser.parseAll(Files.readString(file)));
        CliRun noRun = CliRun.of("try", "--no-run", file.toString());
        assertEquals(0, noRun.exitCode(), noRun.err());
        assertEquals(canonical, noRun.out());
        assertTrue(canonical.startsWith("kernel small_gate_up {"), canonical);
        CliRun check = CliRun.of("check", file.toString());
        assertEquals(0, check.exitCode(), check.err());
        assertEquals(canonical, check.out());
    }

    @Test
    void withoutAGpuTryCompilesRunsTheReferenceAndSaysWhatItSkipped() throws Exception {
        Assumptions.assumeFalse(Gpu.available(), "a GPU is here: TryCommandGpuTest runs the kernels");
        Assumptions.assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        Path file = CliRun.resource(tmp, "small_layer.moe");
        Path json = tmp.resolve("try.json");
        CliRun run = CliRun.of(cli -> CliRun.<TryCommand>command(cli, "try").cache = CACHE,
                "try", file.toString(), "--tokens", "1,8", "--seed", "5", "--json", json.toString());
        assertEquals(0, run.exitCode(), run.err());
        String out = run.out();
        for (String line : List.of("   small_gate_up +sm_90a +\\d+ registers, 0 spill bytes, +\\d+ B shared",
                "   small_down +sm_90a +\\d+ registers, 0 spill bytes, +\\d+ B shared",
                "   layer \\(H=256, I=128, E=16, top-4, gate_up bf16, down bf16\\): small_gate_up \\+ small_down",
                "     M=1: CPU reference \\(FP64\\) [0-9.]+ ms; GPU run skipped",
                "     M=8: CPU reference \\(FP64\\) [0-9.]+ ms; GPU run skipped",
                "Skipped, with no usable CUDA device here \\(.*\\): running the kernels on the device, .*")) {
            assertTrue(Pattern.compile("^" + line + "$", Pattern.MULTILINE).matcher(out).find(), line + " in:\n" + out);
        }

        JsonNode doc = new ObjectMapper().readTree(json.toFile());
        assertTrue(doc.get("device").isNull());
        assertFalse(doc.get("gpu_skipped").asText().isEmpty());
        assertEquals(2, doc.get("kernels").size());
        for (JsonNode k : doc.get("kernels")) {
            assertEquals("sm_90a", k.get("target").asText());
            assertTrue(k.get("registers").asInt() > 0, k.toString());
            assertEquals(2, k.get("runs").size(), k.toString());
            assertEquals("skipped", k.get("runs").get(0).get("gpu").asText());
        }
    }

    @Test
    void invalidSpecsExitTwoWithEveryErrorAtItsFileLineAndColumn() throws Exception {
        Path bad = CliRun.resource(tmp, "bad_layer.moe");
        for (String command : new String[] {"try", "check"}) {
            CliRun run = CliRun.of(command, bad.toString());
            assertEquals(2, run.exitCode(), run.out() + run.err());
            assertTrue(run.err().contains(bad + ":7:3: kernel 'bad_gate_up': target = sm_91: one of: sm_90a, sm_100a, sm_120a"),
                    run.err());
            assertTrue(run.err().contains(bad + ":11:3: kernel 'bad_down': problem.hidden = 250: a multiple of 8"), run.err());
            assertFalse(run.err().contains("Exception") || run.err().contains("\tat "), "no stack trace: " + run.err());
            assertEquals("", run.out(), "nothing is generated or compiled for an invalid file");
        }
        Path syntax = CliRun.resource(tmp, "syntax_error.moe");
        CliRun run = CliRun.of("check", syntax.toString());
        assertEquals(2, run.exitCode(), run.err());
        assertTrue(run.err().contains(syntax.toString()) && run.err().contains("2:34"), run.err());
        CliRun missing = CliRun.of("check", tmp.resolve("none.moe").toString());
        assertEquals(2, missing.exitCode());
        assertTrue(missing.err().contains("none.moe: no such spec file"), missing.err());
    }

    @Test
    void aKernelNameUsedTwiceIsRefusedWithBothPlaces() throws Exception {
        Path file = CliRun.resource(tmp, "small_layer.moe");
        Path again = Files.copy(file, tmp.resolve("again.moe"));
        CliRun run = CliRun.of("check", file.toString(), again.toString());
        assertEquals(2, run.exitCode());
        assertTrue(run.err().contains(again + ":2:1: kernel 'small_gate_up': name = 'small_gate_up': one kernel per name "
                + "(the first is at " + file + ":2:1)"), run.err());
    }
}
