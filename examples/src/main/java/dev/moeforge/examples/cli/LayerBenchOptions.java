package dev.moeforge.examples.cli;

import java.util.List;
import picocli.CommandLine.Option;

/** The workload options of the layer benchmarks ({@code bench}, {@code bench layer}): weight copies and token counts. */
final class LayerBenchOptions {
    @Option(names = "--layers", defaultValue = "16", description = "Layers of weights to rotate over (default: ${DEFAULT-VALUE}; 16 = 19 GB).")
    int layers;

    @Option(names = "--tokens", split = ",", defaultValue = "1,2,4,8,16,32", description = "Token counts (default: ${DEFAULT-VALUE}).")
    List<Integer> tokens;

    /** Refuses empty workloads, naming the option. */
    void require() {
        require(layers, tokens);
    }

    /** The same rule for commands with other defaults ({@code bench formats}). */
    static void require(int layers, List<Integer> tokens) {
        if (layers < 1) {
            throw new IllegalArgumentException("--layers " + layers + ": at least 1");
        }
        for (int m : tokens) {
            if (m < 1) {
                throw new IllegalArgumentException("--tokens " + tokens + ": each token count at least 1, got " + m);
            }
        }
    }

    int maxTokens() {
        return tokens.stream().mapToInt(Integer::intValue).max().orElse(1);
    }
}
