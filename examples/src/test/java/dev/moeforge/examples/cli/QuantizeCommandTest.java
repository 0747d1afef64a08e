package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.checkpoint.SyntheticMoeCheckpoint;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import picocli.CommandLine;

/**
 * {@code moeforge quantize}'s command line: the options, their refusals and the summary printed.
 * What the quantisation writes is {@code QuantizerTest}'s.
 */
class QuantizeCommandTest {

    @TempDir
    Path tmp;

    /** Runs the command; returns the exit code, and the exception of a failed run in {@code error[0]}. */
    static int quantize(Exception[] error, StringWriter out, String... args) {
        CommandLine cmd = new CommandLine(new QuantizeCommand());
        cmd.setOut(new PrintWriter(out, true));
        cmd.setErr(new PrintWriter(new StringWriter(), true));
        cmd.setExecutionExceptionHandler((e, c, parsed) -> {
            error[0] = e;
            return 1;
        });
        return cmd.execute(args);
    }

    static List<String> formats() {
        return WeightFormat.ALL.stream().map(WeightFormat::text).toList();
    }

    static void assertMentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), () -> "expected '" + p + "' in: " + message);
        }
    }

    static Path writeInput(Path dir) throws IOException {
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(dir, "mlp", "gate_proj", "up_proj", "down_proj");
        return dir;
    }

    @Test
    void printsWhatItDid() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        StringWriter stdout = new StringWriter();
        int rc = quantize(error, stdout, "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString(),
                "--shard-size", "20kB");
        assertEquals(0, rc, () -> "failed: " + error[0]);
        assertMentions(stdout.toString(), "quantised 24 routed expert tensors to nvfp4 as 72 tensors: ",
                "copied 6 other tensors unchanged", "and 3 other files", " shards in " + outDir);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertTrue(ckpt.files().size() >= 2, "sharded output");
        }
    }

    /** The quantiser's refusals reach the command line as a failed run with their message. */
    @Test
    void alreadyQuantisedExpertsAreRefused() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString()));
        int rc = quantize(error, new StringWriter(), "--in", outDir.toString(), "--format", "nvfp4", "--out", tmp.resolve("again").toString());
        assertEquals(1, rc);
        assertInstanceOf(CheckpointException.class, error[0]);
        assertMentions(error[0].getMessage(), "F8_E4M3", "already quantised", ".weight'");
    }

    @Test
    void unknownFormatListsTheAllowedOnes() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp5", "--out", tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertInstanceOf(IllegalArgumentException.class, error[0]);
        assertMentions(error[0].getMessage(), "nvfp5", "known: " + String.join(", ", formats()));
        assertFalse(Files.exists(tmp.resolve("out")));
    }

    @Test
    void helpListsEveryFormat() {
        assertEquals(String.join(", ", formats()), QuantizeCommand.ALLOWED);
        String usage = new CommandLine(new QuantizeCommand()).getUsageMessage();
        assertMentions(usage, "--in=DIR", "--format=FORMAT", "--out=DIR", "--shard-size=SIZE", "int4_group128");
    }

    @Test
    void outputFolderEqualToInputIsRefused() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Map<String, Long> before = sizes(in);
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", in + "/./");
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--out", "input folder");
        assertEquals(before, sizes(in));
    }

    static Map<String, Long> sizes(Path dir) throws IOException {
        try (var s = Files.list(dir)) {
            return s.collect(Collectors.toMap(p -> p.getFileName().toString(), p -> p.toFile().length()));
        }
    }

    @Test
    void notACheckpointIsRefused() throws IOException {
        Path empty = Files.createDirectories(tmp.resolve("empty"));
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", empty.toString(), "--format", "nvfp4", "--out", tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--in", "not a readable checkpoint", "safetensors");
        rc = quantize(error, new StringWriter(), "--in", tmp.resolve("missing").toString(), "--format", "nvfp4", "--out",
                tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--in", "not a directory");
    }

    @Test
    void shardSizes() {
        assertEquals(5_000_000_000L, QuantizeCommand.parseSize("5GB"));
        assertEquals(2L << 30, QuantizeCommand.parseSize("2GiB"));
        assertEquals(300_000L, QuantizeCommand.parseSize("300kB"));
        assertEquals(1234L, QuantizeCommand.parseSize("1234"));
        assertEquals(1500L, QuantizeCommand.parseSize("1.5kB"));
        assertEquals(Long.MAX_VALUE, QuantizeCommand.parseSize(Long.toString(Long.MAX_VALUE)));
        assertNotEquals(0, assertThrows(IllegalArgumentException.class,
                () -> QuantizeCommand.parseSize("5 potatoes")).getMessage().length());
    }

    /** A size past what a long holds is out of range, said so with the range; not "at least one byte". */
    @Test
    void shardSizeOutOfRangeStatesTheRange() {
        for (String text : List.of("99999999999999999999GB", "9223372036854775808", "10000000TiB")) {
            String message = assertThrows(IllegalArgumentException.class, () -> QuantizeCommand.parseSize(text)).getMessage();
            assertMentions(message, "--shard-size " + text, "out of range", "1 byte", Long.toString(Long.MAX_VALUE));
            assertFalse(message.contains("at least one byte"), message);
        }
        for (String text : List.of("0", "0.5", "0GB")) {
            String message = assertThrows(IllegalArgumentException.class, () -> QuantizeCommand.parseSize(text)).getMessage();
            assertMentions(message, "--shard-size " + text, "out of range", "1 byte", Long.toString(Long.MAX_VALUE));
        }
    }

    /** The entries of {@code dir} other than those named: what a run left behind. */
    static List<String> leftovers(Path dir, String... expected) throws IOException {
        try (var s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> !List.of(expected).contains(n)).sorted().toList();
        }
    }

    /** A malformed config.json is refused before any file is written: no --out, no staging. */
    @Test
    void malformedConfigIsRefusedBeforeAnythingIsWritten() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Files.writeString(in.resolve("config.json"), "{\"model_type\": \"qwen3_moe\",\n");
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), in.resolve("config.json").toString(), "JSON");
        assertFalse(Files.exists(outDir), "nothing written");
        assertEquals(List.of(), leftovers(tmp, "in"));
    }

    /** config.json must be an object to take a quantization_config; an array is refused up front too. */
    @Test
    void configThatIsNotAnObjectIsRefusedBeforeAnythingIsWritten() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Files.writeString(in.resolve("config.json"), "[1, 2]\n");
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        assertEquals(1, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString()));
        assertMentions(error[0].getMessage(), in.resolve("config.json").toString(), "not a JSON object");
        assertEquals(List.of(), leftovers(tmp, "in"));
    }

    /** An existing checkpoint in --out is not replaced silently: refused, naming the folder and --force. */
    @Test
    void nonEmptyOutIsRefusedWithoutForce() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString()));
        Map<String, Long> before = sizes(outDir);
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--out " + outDir, "not empty", "--force");
        assertEquals(before, sizes(outDir));
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertEquals("mxfp8", ckpt.files().getFirst().metadata().get("moeforge_format"));
        }
        // a plain file in the way is refused too, with or without --force
        Path file = Files.writeString(tmp.resolve("file"), "x");
        rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", file.toString(), "--force");
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--out " + file, "not a directory");
    }

    /**
     * --force writes over an earlier checkpoint: its shards and index go (here 5 shards become one
     * file), files the new checkpoint has are replaced, and the others are kept, with a note.
     */
    @Test
    void forceReplacesTheCheckpointInOut() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString(),
                "--shard-size", "20kB"));
        Files.writeString(outDir.resolve("README.md"), "notes\n");
        StringWriter stdout = new StringWriter();
        int rc = quantize(error, stdout, "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString(), "--force");
        assertEquals(0, rc, () -> "failed: " + error[0]);
        assertEquals(List.of("README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"),
                leftovers(outDir));
        assertMentions(stdout.toString(), "kept", "README.md");
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertEquals("nvfp4", ckpt.files().getFirst().metadata().get("moeforge_format"));
        }
        assertEquals(List.of(), leftovers(tmp, "in", "out"));
    }

    /** Edits of the synthetic checkpoint that break its MoE structure, and what the refusal must name. */
    static List<Arguments> brokenStructures() {
        String l0 = "model.layers.0.mlp.experts.";
        String l1 = "model.layers.1.mlp.experts.";
        return List.of(
                Arguments.of("missing expert", (Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>>) t ->
                        t.keySet().removeIf(n -> n.startsWith(l1 + "2.")), List.of("model.layers.1.mlp", "missing 2")),
                Arguments.of("missing up_proj", (Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>>) t ->
                        t.remove(l0 + "1.up_proj.weight"), List.of("'" + l0 + "1.up_proj.weight'", "not in this checkpoint")),
                Arguments.of("expert id 1000", (Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>>) t -> {
                    for (String proj : List.of("gate_proj", "up_proj", "down_proj")) {
                        t.put(l0 + "1000." + proj + ".weight", t.remove(l0 + "3." + proj + ".weight"));
                    }
                }, List.of("model.layers.0.mlp", "1000", "missing 3..999")),
                Arguments.of("last expert missing", (Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>>) t ->
                        t.keySet().removeIf(n -> n.startsWith(l1 + "3.")),
                        List.of("config.json: num_experts is 4 but 'model.layers.1.mlp' has 3 experts")),
                Arguments.of("experts of different shapes", (Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>>) t ->
                        t.put(l1 + "2.down_proj.weight", new SyntheticMoeCheckpoint.Tensor(SafetensorsDType.BF16, List.of(64L, 16L),
                                new byte[64 * 16 * 2])), List.of("'" + l1 + "2.down_proj.weight'", "[64, 16]", "[64, 32]")));
    }

    /** What CheckpointExperts would refuse on load is refused before anything is written, with the loader's message. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("brokenStructures")
    void brokenMoeStructureIsRefusedBeforeAnythingIsWritten(String what, Consumer<Map<String, SyntheticMoeCheckpoint.Tensor>> edit,
                                                           List<String> mentions) throws IOException {
        Path in = tmp.resolve("in");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, edit, "mlp", "gate_proj", "up_proj", "down_proj");
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString());
        assertEquals(1, rc, what + " was accepted");
        assertInstanceOf(CheckpointException.class, error[0]);
        assertMentions(error[0].getMessage(), mentions.toArray(String[]::new));
        assertEquals(List.of(), leftovers(tmp, "in"));
    }

    /** A NaN found midway (after shards were written) leaves no --out, not even an empty one, and no staging. */
    @Test
    void nanWeightLeavesNoOut() throws IOException {
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(64, 32);
        m.gateUp[1][(2 * 2 * 32 + 32 + 5) * 64 + 7] = Float.NaN;
        Path in = tmp.resolve("in");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Path outDir = tmp.resolve("new").resolve("out");
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString(),
                "--shard-size", "20kB");
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "NaN at [5, 7]");
        assertEquals(List.of(), leftovers(tmp, "in"), "neither --out nor the folder made for it is left");
        // an empty --out that was there before stays, empty
        Files.createDirectories(outDir);
        assertEquals(1, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString()));
        assertEquals(List.of(), leftovers(outDir));
        assertEquals(List.of("out"), leftovers(outDir.getParent()));
    }

    /** --dry-run prints the tensors, formats, bytes and files of the output, and writes nothing. */
    @Test
    void dryRunPrintsThePlanAndWritesNothing() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Exception[] error = new Exception[1];
        StringWriter stdout = new StringWriter();
        int rc = quantize(error, stdout, "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString(),
                "--shard-size", "20kB", "--dry-run");
        assertEquals(0, rc, () -> "failed: " + error[0]);
        assertFalse(Files.exists(outDir));
        assertEquals(List.of(), leftovers(tmp, "in"));
        String text = stdout.toString();
        assertMentions(text, "dry run", "would quantise 24 routed expert tensors to nvfp4 as 72 tensors",
                "model.layers.1.mlp.experts.3.up_proj.weight BF16 [32, 64]",
                "model.layers.1.mlp.experts.3.up_proj.weight_scale_2 F32 []",
                "copy model.embed_tokens.weight BF16 [16, 64]",
                "model-00001-of-0000", "model.safetensors.index.json", "config.json", "tokenizer.json");
        // the files and sizes it names are those a real run writes
        StringWriter real = new StringWriter();
        assertEquals(0, quantize(error, real, "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString(),
                "--shard-size", "20kB"));
        for (Map.Entry<String, Long> f : sizes(outDir).entrySet()) {
            if (f.getKey().endsWith(".safetensors") || f.getKey().endsWith(".index.json")) {
                assertMentions(text, f.getKey() + " (" + f.getValue() + " bytes");
            }
        }
    }

    /** --json writes the summary (and with --dry-run, the plan) as JSON. */
    @Test
    void jsonSummary() throws IOException {
        Path in = writeInput(tmp.resolve("in"));
        Path outDir = tmp.resolve("out");
        Path json = tmp.resolve("reports").resolve("summary.json");
        Exception[] error = new Exception[1];
        for (boolean dryRun : List.of(true, false)) {
            List<String> args = new ArrayList<>(List.of("--in", in.toString(), "--format", "int8_channel", "--out",
                    outDir.toString(), "--shard-size", "20kB", "--json", json.toString()));
            if (dryRun) {
                args.add("--dry-run");
            }
            assertEquals(0, quantize(error, new StringWriter(), args.toArray(String[]::new)), () -> "failed: " + error[0]);
            JsonNode doc = new ObjectMapper().readTree(json.toFile());
            assertEquals(dryRun, doc.get("dry_run").asBoolean());
            assertEquals("int8_channel", doc.get("format").asText());
            assertEquals(in.toString(), doc.get("in").asText());
            assertEquals(outDir.toString(), doc.get("out").asText());
            assertEquals(24, doc.get("expert_tensors").asInt());
            assertEquals(48, doc.get("tensors_written").asInt());
            assertEquals(6, doc.get("copied_tensors").asInt());
            assertEquals(3, doc.get("copied_files").asInt());
            assertTrue(doc.get("expert_bytes_after").asLong() < doc.get("expert_bytes_before").asLong());
            assertEquals(54, doc.get("tensors").size());
            JsonNode first = doc.get("tensors").get(0);
            assertTrue(first.has("name") && first.has("dtype") && first.has("shape") && first.has("bytes"), first::toString);
            List<String> files = new ArrayList<>();
            doc.get("files").forEach(f -> files.add(f.get("name").asText()));
            assertTrue(files.containsAll(List.of("model.safetensors.index.json", "config.json", "tokenizer.json")), files::toString);
            assertEquals(dryRun, !Files.exists(outDir));
        }
        // a dry run's plan does not go into --out: that would make --out non-empty for the real run
        Path newOut = tmp.resolve("new");
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "int8_channel", "--out", newOut.toString(),
                "--dry-run", "--json", newOut.resolve("plan.json").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--json", "inside --out", "dry run");
        assertFalse(Files.exists(newOut));
    }
}
