package dev.moeforge.examples.cli;

import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.examples.decoder.Architecture;
import dev.moeforge.examples.decoder.ModelPreset;
import dev.moeforge.examples.decoder.RandomModel;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code moeforge init-model}: a Hugging Face model directory of a preset geometry with random weights. */
@Command(name = "init-model", mixinStandardHelpOptions = true,
        description = "Writes a model of a preset geometry with random weights as a Hugging Face directory (config.json, "
                + "safetensors as transformers' save_pretrained names them, the shipped Qwen3 tokenizer) that `decode` and "
                + "transformers both load. Its text is noise; its shapes and code paths are the architecture's.")
public final class InitModelCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Option(names = "--arch", required = true, paramLabel = "ARCH", description = "qwen3_moe, olmoe, mixtral or gpt_oss.")
    String arch;

    @Option(names = "--preset", defaultValue = "tiny", paramLabel = "NAME",
            description = "tiny (default; every path of the architecture, a few MB beside the 151,936-token vocabulary), or "
                    + "the released geometry: qwen3-30b-a3b, olmoe-1b-7b, mixtral-8x7b, gpt-oss-20b.")
    String preset;

    @Option(names = "--layers", paramLabel = "N", description = "Override the preset's layer count.")
    Integer layers;

    @Option(names = "--out", required = true, paramLabel = "DIR", description = "The model directory to write (must not hold a model).")
    Path out;

    @Option(names = "--seed", defaultValue = "0", paramLabel = "S", description = "Seed of the weights (default 0).")
    long seed;

    @Option(names = "--dtype", defaultValue = "bf16", paramLabel = "TYPE", description = "bf16 (default) or f32.")
    String dtype;

    @Option(names = "--shard-size", defaultValue = "5GB", paramLabel = "SIZE", description = "Largest shard, as quantize takes it (default 5GB).")
    String shardSize;

    @Override
    public Integer call() {
        PrintWriter stdout = spec.commandLine().getOut();
        ModelPreset p = ModelPreset.of(Architecture.fromName(arch), preset);
        if (layers != null) {
            p = p.withLayers(layers);
        }
        SafetensorsDType type = switch (dtype.toLowerCase(Locale.ROOT)) {
            case "bf16" -> SafetensorsDType.BF16;
            case "f32" -> SafetensorsDType.F32;
            default -> throw new IllegalArgumentException("--dtype " + dtype + ": allowed: bf16, f32");
        };
        long bytes = type.byteSize(p.parameters());
        stdout.printf(Locale.ROOT, "writing %s with random weights (seed %d): %,d parameters, %.2f GB in %s -> %s%n", p, seed,
                p.parameters(), bytes / 1e9, type.text(), out);
        stdout.flush();
        List<Path> files = RandomModel.write(p, seed, type, QuantizeCommand.parseSize(shardSize), out);
        for (Path f : files) {
            try {
                stdout.printf(Locale.ROOT, "  %-36s %,15d bytes%n", out.relativize(f), Files.size(f));
            } catch (IOException e) {
                throw new UncheckedIOException(f + ": " + e.getMessage(), e);
            }
        }
        return 0;
    }
}
