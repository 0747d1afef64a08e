package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** precompile's refusals of bad input, before any nvcc runs. */
class PrecompileCommandTest {

    @TempDir
    Path tmp;

    private static Exception refusal(String... args) {
        Exception[] error = new Exception[1];
        CommandLine cmd = new CommandLine(new PrecompileCommand());
        cmd.setErr(new PrintWriter(new StringWriter(), true));
        cmd.setExecutionExceptionHandler((e, c, parsed) -> {
            error[0] = e;
            return 1;
        });
        assertEquals(1, cmd.execute(args));
        return error[0];
    }

    @Test
    void refusesNothingToCompileAMissingFileABadTargetAndAFileForDir() throws Exception {
        assertTrue(refusal().getMessage().contains("nothing to compile: give .moe files, --catalogue or --modules"));
        assertTrue(refusal(tmp.resolve("none.moe").toString()).getMessage().endsWith("none.moe: no such spec file"));
        assertTrue(refusal("--catalogue", "--target", "sm_99").getMessage()
                .contains("--target sm_99: unknown target; allowed: sm_90a, sm_100a, sm_120a"));
        Path file = Files.writeString(tmp.resolve("cache"), "");
        assertEquals("--into " + file + ": not a directory", refusal("--catalogue", "--into", file.toString()).getMessage());
    }

    @Test
    void anInvalidSpecIsRefusedWithItsField() throws Exception {
        Path bad = Files.writeString(tmp.resolve("bad.moe"), "kernel k {\n  problem router(hidden=0, experts=8, weights=bf16, "
                + "activations=bf16, expert_counts=false)\n  schedule router_gemv(warps_per_cta=4, load_bytes=16, k_unroll=8, "
                + "experts_per_cta=4)\n  epilogue store(topk(acc, 2), dtype=fp32)\n  target sm_90a\n}\n");
        Exception e = refusal(bad.toString());
        assertInstanceOf(SpecFiles.Invalid.class, e);
        assertTrue(e.getMessage().contains("problem.hidden = 0"), e.getMessage());
    }
}
