package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.SyntheticMoeCheckpoint;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
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
        assertMentions(error[0].getMessage(), "nvfp5", "allowed: " + String.join(", ", formats()));
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
        assertNotEquals(0, assertThrows(IllegalArgumentException.class,
                () -> QuantizeCommand.parseSize("5 potatoes")).getMessage().length());
    }
}
