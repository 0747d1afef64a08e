package dev.moeforge.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.WeightFormat;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A quantisation killed midway, for real: {@link QuantizeChild} runs in a JVM of its own on this
 * test's class path and is killed once it has written half of its tensors. Whatever the kill left,
 * the output is absent or complete, and the next run leaves no staging behind and writes the same
 * checkpoint as an undisturbed run.
 */
class QuantizerKillTest {

    static final WeightFormat FORMAT = WeightFormat.MXFP8;
    static final long SHARD_BYTES = 20_000;

    @TempDir
    Path tmp;

    /** Hidden entries (staging, temporary files) of {@code dir} and, if it exists, of {@code out}. */
    static List<String> leftovers(Path dir, Path out) throws IOException {
        List<String> found = new ArrayList<>();
        for (Path d : List.of(dir, out)) {
            if (Files.isDirectory(d)) {
                try (Stream<Path> s = Files.list(d)) {
                    s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith(".")).sorted().forEach(found::add);
                }
            }
        }
        return found;
    }

    /** {@code out} holds the same files, byte for byte, as {@code reference}. */
    static void assertSameCheckpoint(Path reference, Path out) throws IOException {
        List<String> names;
        try (Stream<Path> s = Files.list(reference)) {
            names = s.map(p -> p.getFileName().toString()).sorted().toList();
        }
        try (Stream<Path> s = Files.list(out)) {
            assertEquals(names, s.map(p -> p.getFileName().toString()).sorted().toList());
        }
        for (String n : names) {
            assertArrayEquals(Files.readAllBytes(reference.resolve(n)), Files.readAllBytes(out.resolve(n)), n);
        }
    }

    /** SIGKILL (nothing of the JVM runs) and SIGTERM (its shutdown hooks run, as on Ctrl-C). */
    @ParameterizedTest(name = "killed forcibly: {0}")
    @ValueSource(booleans = {true, false})
    @Timeout(120)
    void killedRunLeavesNoPartialOutputAndTheNextRunCleansUp(boolean forcibly) throws Exception {
        Path in = tmp.resolve("in");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Path runs = Files.createDirectories(tmp.resolve("runs"));
        Path out = runs.resolve("out");

        Process child = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"),
                QuantizeChild.class.getName(), in.toString(), FORMAT.text(), out.toString(), Long.toString(SHARD_BYTES), "40")
                .redirectErrorStream(true).start();
        List<String> heard = new ArrayList<>();
        int total = -1;
        try (BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                heard.add(line);
                if (line.startsWith("writing ")) {
                    total = Integer.parseInt(line.substring("writing ".length()));
                }
                if (total > 0 && line.equals("tensor " + total / 2)) {
                    break;
                }
            }
            assertTrue(total > 0 && heard.getLast().equals("tensor " + total / 2), () -> "the child never got midway: " + heard);
            if (forcibly) {
                child.destroyForcibly();
            } else {
                child.destroy();
            }
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child did not die");
        }
        assertNotEquals(0, child.exitValue());

        // the output of a killed run is absent, or (killed after the last move) complete
        if (Files.exists(out)) {
            try (Checkpoint ckpt = Checkpoint.open(out)) {
                assertEquals(24, ckpt.names().stream().filter(n -> n.endsWith(".weight") && n.contains(".experts.")).count());
            }
        }
        if (forcibly) {
            assertFalse(leftovers(runs, out).isEmpty(), "a SIGKILL midway leaves the run's staging behind");
        } else {
            assertEquals(List.of(), leftovers(runs, out), "on SIGTERM the run removes its own staging");
        }

        // the next run: cleans what the killed one left, and writes what an undisturbed run writes
        List<String> notes = new ArrayList<>();
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            Quantizer.quantize(ckpt, FORMAT, out, SHARD_BYTES, new Quantizer.Listener() {
                @Override
                public void note(String message) {
                    notes.add(message);
                }
            });
        }
        assertEquals(List.of(), leftovers(runs, out));
        try (Stream<Path> s = Files.list(runs)) {
            assertEquals(List.of("out"), s.map(p -> p.getFileName().toString()).toList());
        }
        if (forcibly) {
            assertTrue(notes.stream().anyMatch(n -> n.contains("removed the staging folder") && n.contains("killed")),
                    notes::toString);
        }
        Path reference = tmp.resolve("reference");
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            Quantizer.quantize(ckpt, FORMAT, reference, SHARD_BYTES, new Quantizer.Listener() {});
        }
        assertSameCheckpoint(reference, out);
    }

    /** An owner file as a run writes it, for {@code pid} started at {@code started} on {@code host}. */
    static void writeOwner(Path parent, String id, long pid, String started, String host) throws IOException {
        Files.writeString(parent.resolve(id + StagingFolder.OWNER_SUFFIX),
                "pid=" + pid + "\nstarted=" + started + "\nhost=" + host + "\nout=" + parent.resolve("out") + "\n");
    }

    /**
     * Only the staging of a run provably gone (its process not running on this host) is removed; a live
     * run's, another host's, one without an owner file, or one holding what a run never writes (a
     * folder) stay, as does every other file.
     */
    @Test
    void onlyProvablyStaleStagingIsRemoved() throws Exception {
        Path in = tmp.resolve("in");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Path runs = Files.createDirectories(tmp.resolve("runs"));
        Process gone = new ProcessBuilder("true").start();
        String goneStart = gone.info().startInstant().map(Object::toString).orElse("");
        assertEquals(0, gone.waitFor());
        ProcessHandle self = ProcessHandle.current();
        String selfStart = self.info().startInstant().orElseThrow().toString();
        String host = StagingFolder.hostName();

        for (String id : List.of(".quantize-out-dead", ".quantize-out-live", ".quantize-out-elsewhere", ".quantize-out-nomarker",
                ".quantize-out-foreign", ".quantize-other-reused")) {
            Files.createDirectories(runs.resolve(id));
            Files.writeString(runs.resolve(id).resolve("model-00001-of-00002.safetensors"), "partial");
        }
        Files.createDirectories(runs.resolve(".quantize-out-foreign").resolve("subfolder"));
        writeOwner(runs, ".quantize-out-dead", gone.pid(), goneStart, host);
        writeOwner(runs, ".quantize-out-live", self.pid(), selfStart, host);
        writeOwner(runs, ".quantize-out-elsewhere", gone.pid(), goneStart, host + "-elsewhere");
        writeOwner(runs, ".quantize-out-foreign", gone.pid(), goneStart, host);
        // this JVM's pid, but a start an hour earlier: the pid now belongs to another process
        writeOwner(runs, ".quantize-other-reused", self.pid(), Instant.parse(selfStart).minusSeconds(3600).toString(), host);
        Files.writeString(runs.resolve(".quantize-notes"), "not a staging folder");

        List<String> notes = new ArrayList<>();
        Path out = runs.resolve("out");
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            Quantizer.quantize(ckpt, FORMAT, out, SHARD_BYTES, new Quantizer.Listener() {
                @Override
                public void note(String message) {
                    notes.add(message);
                }
            });
        }
        assertEquals(List.of(".quantize-notes", ".quantize-out-elsewhere", ".quantize-out-elsewhere.owner",
                ".quantize-out-foreign", ".quantize-out-foreign.owner", ".quantize-out-live", ".quantize-out-live.owner",
                ".quantize-out-nomarker"), leftovers(runs, out));
        assertTrue(Files.exists(runs.resolve(".quantize-out-foreign").resolve("model-00001-of-00002.safetensors")));
        assertTrue(notes.stream().anyMatch(n -> n.contains(".quantize-out-dead") && n.contains("pid " + gone.pid())
                && n.contains("no longer running")), notes::toString);
        assertTrue(notes.stream().anyMatch(n -> n.contains(".quantize-other-reused") && n.contains("now another process")),
                notes::toString);
        assertTrue(notes.stream().anyMatch(n -> n.contains("left " + runs.resolve(".quantize-out-foreign")) && n.contains("subfolder")),
                notes::toString);
        try (Checkpoint ckpt = Checkpoint.open(out)) {
            assertEquals(FORMAT.text(), ckpt.files().getFirst().metadata().get(ExpertTensors.FORMAT_METADATA_KEY));
        }
    }
}
