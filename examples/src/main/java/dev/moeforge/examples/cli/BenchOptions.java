package dev.moeforge.examples.cli;

import dev.moeforge.runtime.cuda.Gpu;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/** The options every benchmark takes: warm-up, at least 50 timed repetitions (for a stable median), JSON out. */
final class BenchOptions {
    @Option(names = "--warmup", defaultValue = "10", description = "Warm-up graph replays (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--reps", defaultValue = "60", description = "Timed graph replays, at least 50 (default: ${DEFAULT-VALUE}).")
    int reps;

    @Option(names = "--out", defaultValue = "bench/results", description = "Directory of the JSON result (default: ${DEFAULT-VALUE}).")
    Path out;

    /**
     * Refuses too few repetitions, then a machine without a CUDA device, naming the command. Each
     * benchmark calls it after checking its own options, so that a bad option is named on any machine.
     */
    void require(String command) {
        if (reps < 50) {
            throw new IllegalArgumentException("--reps " + reps + ": at least 50 timed repetitions");
        }
        if (warmup < 0) {
            throw new IllegalArgumentException("--warmup " + warmup + ": at least 0");
        }
        if (!Gpu.available()) {
            throw new IllegalStateException(command + " needs a CUDA device: " + Gpu.unavailableReason());
        }
    }
}
