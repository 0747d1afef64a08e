package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.SafetensorsFileTest.assertMentions;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CheckpointTest {

    private static final ObjectMapper JSON = new ObjectMapper();

    @TempDir
    Path dir;

    /** Six 64-byte tensors: with a 128-byte limit, two to a shard. */
    private static Map<String, byte[]> sixTensors() {
        Map<String, byte[]> m = new LinkedHashMap<>();
        for (int e = 0; e < 6; e++) {
            byte[] data = new byte[64];
            for (int i = 0; i < data.length; i++) {
                data[i] = (byte) (e * 64 + i);
            }
            m.put("model.layers.0.mlp.experts." + e + ".up_proj.weight", data);
        }
        return m;
    }

    private static CheckpointWriter writerOf(Map<String, byte[]> tensors, long maxShard) {
        CheckpointWriter w = new CheckpointWriter(maxShard).metadata(Map.of("format", "pt"));
        tensors.forEach((n, d) -> w.add(n, SafetensorsDType.F32, List.of(4L, 4L), d));
        return w;
    }

    private static List<String> listing(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    @Test
    void shardedRoundTrip() throws IOException {
        Map<String, byte[]> tensors = sixTensors();
        List<Path> written = writerOf(tensors, 128).write(dir);

        List<String> shards = List.of("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors");
        assertEquals(Stream.concat(shards.stream(), Stream.of("model.safetensors.index.json")).toList(),
                written.stream().map(p -> p.getFileName().toString()).toList());
        assertEquals(List.of("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors", "model.safetensors.index.json"), listing(dir));

        JsonNode index = JSON.readTree(dir.resolve("model.safetensors.index.json").toFile());
        assertEquals(6 * 64, index.get("metadata").get("total_size").asLong());
        Map<String, String> weightMap = new TreeMap<>();
        index.get("weight_map").properties().forEach(e -> weightMap.put(e.getKey(), e.getValue().asText()));
        Map<String, String> expected = new TreeMap<>();
        int i = 0;
        for (String name : tensors.keySet()) {
            expected.put(name, shards.get(i++ / 2)); // insertion order, two per shard
        }
        assertEquals(expected, weightMap);

        try (Checkpoint c = Checkpoint.open(dir)) {
            assertEquals(new java.util.TreeSet<>(tensors.keySet()), c.names());
            assertEquals(List.copyOf(c.names()), c.names().stream().sorted().toList());
            assertEquals(3, c.files().size());
            for (var e : tensors.entrySet()) {
                assertArrayEquals(e.getValue(), c.bytes(e.getKey()), e.getKey());
                assertEquals(expected.get(e.getKey()), c.fileOf(e.getKey()).path().getFileName().toString());
                assertEquals(List.of(4L, 4L), c.tensor(e.getKey()).shape());
                assertEquals(64, c.data(e.getKey()).byteSize());
                assertEquals(16, c.f32(e.getKey()).length);
                assertTrue(c.find(e.getKey()).isPresent());
            }
            for (SafetensorsFile f : c.files()) {
                assertEquals(Map.of("format", "pt"), f.metadata());
            }
            assertFalse(c.find("lm_head.weight").isPresent());
            var missing = assertThrows(CheckpointException.class, () -> c.tensor("lm_head.weight"));
            assertMentions(missing, dir, "'lm_head.weight'");
            assertMentions(assertThrows(CheckpointException.class, () -> c.f32("lm_head.weight")), dir,
                    "'lm_head.weight'");
            String first = tensors.keySet().iterator().next();
            assertMentions(assertThrows(CheckpointException.class, () -> c.i32(first)),
                    dir.resolve(shards.getFirst()), "'" + first + "'", "F32");
        }
    }

    @Test
    void indexNamingATensorItsShardLacks() throws IOException {
        writerOf(sixTensors(), 128).write(dir);
        Path indexFile = dir.resolve("model.safetensors.index.json");
        ObjectNode index = (ObjectNode) JSON.readTree(indexFile.toFile());
        String moved = "model.layers.0.mlp.experts.0.up_proj.weight";
        ((ObjectNode) index.get("weight_map")).put(moved, "model-00003-of-00003.safetensors");
        JSON.writeValue(indexFile.toFile(), index);

        var e = assertThrows(CheckpointException.class, () -> Checkpoint.open(dir));
        assertMentions(e, indexFile, "'" + moved + "'", "model-00003-of-00003.safetensors");

        ((ObjectNode) index.get("weight_map")).put(moved, "model-00009-of-00009.safetensors");
        JSON.writeValue(indexFile.toFile(), index);
        var absent = assertThrows(CheckpointException.class, () -> Checkpoint.open(dir));
        assertMentions(absent, indexFile, "model-00009-of-00009.safetensors", "does not exist");

        ((ObjectNode) index.get("weight_map")).put(moved, "../elsewhere.safetensors");
        JSON.writeValue(indexFile.toFile(), index);
        assertMentions(assertThrows(CheckpointException.class, () -> Checkpoint.open(dir)), indexFile,
                "'" + moved + "'", "../elsewhere.safetensors");
    }

    @Test
    void singleFileWhenEverythingFits() throws IOException {
        Map<String, byte[]> tensors = sixTensors();
        writerOf(tensors, 128).write(dir); // first a sharded save, to be replaced
        List<Path> written = writerOf(tensors, CheckpointWriter.DEFAULT_MAX_SHARD_BYTES).write(dir);
        assertEquals(List.of(dir.resolve("model.safetensors")), written);
        // The earlier save's shards and index would shadow the new file; they must be gone.
        assertEquals(List.of("model.safetensors"), listing(dir));
        try (Checkpoint c = Checkpoint.open(dir)) {
            assertEquals(tensors.keySet(), c.names());
            assertEquals(1, c.files().size());
            tensors.forEach((n, d) -> assertArrayEquals(d, c.bytes(n), n));
        }
    }

    @Test
    void oversizedTensorGetsAShardOfItsOwn() throws IOException {
        CheckpointWriter w = new CheckpointWriter(100)
                .add("a", SafetensorsDType.U8, List.of(64L), new byte[64])
                .add("big", SafetensorsDType.U8, List.of(200L), () -> MemorySegment.ofArray(new byte[200]))
                .add("b", SafetensorsDType.U8, List.of(64L), new byte[64])
                .add("c", SafetensorsDType.U8, List.of(30L), new byte[30])
                .add("d", SafetensorsDType.U8, List.of(10L), new byte[10]);
        w.write(dir);
        try (Checkpoint c = Checkpoint.open(dir)) {
            assertEquals(4, c.files().size());
            assertEquals("model-00001-of-00004.safetensors", c.fileOf("a").path().getFileName().toString());
            assertEquals("model-00002-of-00004.safetensors", c.fileOf("big").path().getFileName().toString());
            assertEquals("model-00003-of-00004.safetensors", c.fileOf("b").path().getFileName().toString());
            // c (30) still fits with b (64); d (10) would make 104 > 100.
            assertEquals("model-00003-of-00004.safetensors", c.fileOf("c").path().getFileName().toString());
            assertEquals("model-00004-of-00004.safetensors", c.fileOf("d").path().getFileName().toString());
        }
    }

    @Test
    void supplierOfTheWrongSizeFailsNamingTheTensor() throws IOException {
        CheckpointWriter w = new CheckpointWriter()
                .add("ok", SafetensorsDType.U8, List.of(4L), new byte[4])
                .add("bad", SafetensorsDType.F32, List.of(4L), () -> MemorySegment.ofArray(new byte[12]));
        var e = assertThrows(CheckpointException.class, () -> w.write(dir));
        assertMentions(e, dir.resolve("model.safetensors"), "'bad'", "12", "16");
        assertEquals(List.of(), listing(dir)); // no half-written file, no temporary left over
        assertThrows(IllegalArgumentException.class,
                () -> w.add("ok", SafetensorsDType.U8, List.of(4L), new byte[4]));
    }

    /** A tensor whose data cannot be produced, in the last shard: the earlier shards are written but never put in place. */
    @Test
    void failedSaveLeavesTheFolderAsItWas() throws IOException {
        Map<String, byte[]> tensors = sixTensors();
        writerOf(tensors, CheckpointWriter.DEFAULT_MAX_SHARD_BYTES).write(dir);
        byte[] before = Files.readAllBytes(dir.resolve("model.safetensors"));
        CheckpointWriter w = writerOf(tensors, 128).add("last", SafetensorsDType.U8, List.of(4L), () -> {
            throw new CheckpointException("no data for 'last'");
        });
        var e = assertThrows(CheckpointException.class, () -> w.write(dir));
        assertEquals("no data for 'last'", e.getMessage());
        assertEquals(List.of("model.safetensors"), listing(dir)); // no shard, index or temporary file
        assertArrayEquals(before, Files.readAllBytes(dir.resolve("model.safetensors")));
    }

    @Test
    void folderOfLooseFiles() throws IOException {
        new SafetensorsWriter().add("a", SafetensorsDType.I32, List.of(2L), SafetensorsTestFiles.i32(1, 2))
                .write(dir.resolve("part-a.safetensors"));
        new SafetensorsWriter().add("b", SafetensorsDType.I32, List.of(1L), SafetensorsTestFiles.i32(3))
                .write(dir.resolve("part-b.safetensors"));
        try (Checkpoint c = Checkpoint.open(dir)) {
            assertEquals(Set.of("a", "b"), c.names());
            assertArrayEquals(new int[] {1, 2}, c.i32("a"));
            assertArrayEquals(new int[] {3}, c.i32("b"));
        }
        new SafetensorsWriter().add("a", SafetensorsDType.U8, List.of(1L), new byte[1])
                .write(dir.resolve("part-c.safetensors"));
        var e = assertThrows(CheckpointException.class, () -> Checkpoint.open(dir));
        assertMentions(e, dir, "'a'", "part-a.safetensors", "part-c.safetensors");
    }

    @Test
    void emptyFolderAndMissingFolder() throws IOException {
        assertMentions(assertThrows(CheckpointException.class, () -> Checkpoint.open(dir)), dir, "model.safetensors");
        Path nowhere = dir.resolve("nowhere");
        assertMentions(assertThrows(CheckpointException.class, () -> Checkpoint.open(nowhere)), nowhere,
                "not a directory");
    }
}
