package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.examples.decoder.Architecture;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.ModelPreset;
import dev.moeforge.examples.decoder.RandomModelTest;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code moeforge init-model} through the command line. */
class InitModelCommandTest {

    @TempDir
    Path tmp;

    static void assertMentions(String text, String... parts) {
        for (String p : parts) {
            assertTrue(text.contains(p), () -> "expected '" + p + "' in: " + text);
        }
    }

    @Test
    void writesAModelDirectoryAndPrintsItsSize() throws IOException {
        Path out = tmp.resolve("qwen");
        CliRun run = CliRun.of("init-model", "--arch", "qwen3_moe", "--out", out.toString());
        assertEquals(0, run.exitCode(), run::err);
        for (String f : List.of("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")) {
            assertTrue(Files.isRegularFile(out.resolve(f)), f);
        }
        // 2 x 151936 x 64 (embedding, head) + 3 x 24576 (attention) + 2 x 49664 (MoE) + 24576 (dense layer 1)
        assertEquals(19_645_440L, ModelPreset.of(Architecture.QWEN3_MOE, "tiny").parameters());
        assertMentions(run.out(), "writing qwen3_moe tiny (H=64, I=32, E=8, top-2, 3 layers, 4/2 heads of 32)",
                "(seed 0)", "19,645,440 parameters", "0.04 GB", "-> " + out);
        for (String f : List.of("model.safetensors", "config.json", "generation_config.json", "tokenizer.json")) {
            assertTrue(run.out().lines().anyMatch(l -> l.trim().startsWith(f + " ")
                    && l.trim().endsWith(String.format(java.util.Locale.ROOT, "%,d bytes", size(out.resolve(f))))),
                    () -> f + " with its size in: " + run.out());
        }
        ModelConfig c = ModelConfig.read(out);
        assertEquals(Architecture.QWEN3_MOE, c.arch());
        assertEquals(List.of(true, false, true), c.moeLayers());
        // the defaults (seed 0, bf16, one shard) write what RandomModel writes for them
        Path reference = RandomModelTest.tiny(Architecture.QWEN3_MOE);
        assertEquals(-1, Files.mismatch(reference.resolve("model.safetensors"), out.resolve("model.safetensors")));

        // a directory holding a model is not written over
        CliRun again = CliRun.of("init-model", "--arch", "mixtral", "--out", out.toString());
        assertEquals(1, again.exitCode());
        assertMentions(again.err(), "init-model: ", "already holds a model");
        assertEquals(Architecture.QWEN3_MOE, ModelConfig.read(out).arch());
    }

    /** --layers and the hyphenated architecture name; layer 1, Qwen3's dense one, goes with the layers past 1. */
    @Test
    void layersAndSeed() throws IOException {
        Path out = tmp.resolve("one");
        CliRun run = CliRun.of("init-model", "--arch", "qwen3-moe", "--layers", "1", "--seed", "3", "--out", out.toString());
        assertEquals(0, run.exitCode(), run::err);
        assertMentions(run.out(), "1 layers", "(seed 3)",
                String.format(java.util.Locale.ROOT, "%,d parameters", 2L * 151936 * 64 + 24576 + 49664));
        JsonNode config = new ObjectMapper().readTree(out.resolve("config.json").toFile());
        assertEquals(1, config.get("num_hidden_layers").asInt());
        assertEquals(0, config.get("mlp_only_layers").size());
        assertEquals(List.of(true), ModelConfig.read(out).moeLayers());
    }

    @Test
    void unknownArchitectureIsRefusedWithTheKnownOnes() {
        Path out = tmp.resolve("llama");
        CliRun run = CliRun.of("init-model", "--arch", "llama", "--out", out.toString());
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), "unknown architecture 'llama'", "qwen3_moe (Qwen3MoeForCausalLM)",
                "olmoe (OlmoeForCausalLM)", "mixtral (MixtralForCausalLM)", "gpt_oss (GptOssForCausalLM)");
        assertFalse(Files.exists(out));
    }

    @Test
    void unknownPresetAndDtypeAreRefused() {
        Path out = tmp.resolve("model");
        CliRun preset = CliRun.of("init-model", "--arch", "gpt_oss", "--preset", "gpt-oss-120b", "--out", out.toString());
        assertEquals(1, preset.exitCode());
        assertMentions(preset.err(), "no preset 'gpt-oss-120b' for gpt_oss", "tiny, gpt-oss-20b");
        CliRun dtype = CliRun.of("init-model", "--arch", "olmoe", "--dtype", "f16", "--out", out.toString());
        assertEquals(1, dtype.exitCode());
        assertMentions(dtype.err(), "--dtype f16", "bf16, f32");
        CliRun layers = CliRun.of("init-model", "--arch", "olmoe", "--layers", "0", "--out", out.toString());
        assertEquals(1, layers.exitCode());
        assertMentions(layers.err(), "--layers must be positive");
        assertFalse(Files.exists(out));
        CliRun missing = CliRun.of("init-model", "--arch", "olmoe");
        assertEquals(2, missing.exitCode(), "picocli's exit code for a missing option");
        assertMentions(missing.err(), "--out");
    }

    private static long size(Path f) {
        try {
            return Files.size(f);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
