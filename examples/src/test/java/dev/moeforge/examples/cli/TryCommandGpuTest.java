package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.runtime.cuda.RequiresGpu;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code try} on a GPU: the small layer's outputs within tolerance of the reference, and timed. */
@RequiresGpu
class TryCommandGpuTest {

    @Test
    void theSmallLayerPassesOnTheDevice(@TempDir Path tmp) throws Exception {
        Path file = CliRun.resource(tmp, "small_layer.moe");
        CliRun run = CliRun.of("try", file.toString(), "--tokens", "1,8", "--reps", "20", "--sweep");
        assertEquals(0, run.exitCode(), run.out() + run.err());
        assertTrue(run.out().matches("(?s).*small_gate_up \\+ small_down +[0-9.]+ us  PASS  inter rel .*"), run.out());
        assertTrue(run.out().contains("neighbour small_gate_up @ output_centric_"), run.out());
        assertFalse(run.out().contains("FAIL"), run.out());
    }
}
