package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.runtime.cuda.Gpu;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What `moeforge tune` refuses before minutes of nvcc. */
class TuneCommandTest {
    @TempDir
    Path tmp;

    @Test
    void withoutAGpuItStopsBeforeThePool() {
        Assumptions.assumeFalse(Gpu.available(), "on a GPU host tune would run: its refusal is for machines without one");
        Path out = tmp.resolve("tuned");
        CliRun run = CliRun.of("tune", "--shape", "1024,512,40,6", "--out", out.toString());
        assertEquals(1, run.exitCode());
        assertTrue(run.err().contains("tune profiles on a GPU"), run.err());
        assertFalse(Files.exists(out), "nothing written");
    }

    @Test
    void aModelOrAShapeIsRequired() {
        CliRun neither = CliRun.of("tune", "--out", tmp.toString());
        assertEquals(2, neither.exitCode(), neither.err());
    }
}
