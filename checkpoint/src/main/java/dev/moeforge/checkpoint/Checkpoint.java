package dev.moeforge.checkpoint;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * A Hugging Face checkpoint folder: one {@code model.safetensors}, or shards listed by
 * {@code model.safetensors.index.json}, opened together so tensors can be looked up by name alone.
 * Every shard stays mapped until {@link #close()}.
 */
public final class Checkpoint implements AutoCloseable {

    public static final String INDEX_FILE = "model.safetensors.index.json";
    public static final String SINGLE_FILE = "model.safetensors";

    private final Path dir;
    private final List<SafetensorsFile> files;
    private final NavigableMap<String, SafetensorsFile> byName;

    private Checkpoint(Path dir, List<SafetensorsFile> files, NavigableMap<String, SafetensorsFile> byName) {
        this.dir = dir;
        this.files = List.copyOf(files);
        this.byName = Collections.unmodifiableNavigableMap(byName);
    }

    /**
     * Opens the checkpoint in {@code dir}: through its index if it has one (the index's
     * {@code weight_map} is then the list of tensors), else its {@code model.safetensors}, else every
     * {@code *.safetensors} file in it.
     *
     * @throws CheckpointException naming the file and tensor at fault: an unreadable or malformed
     *     file, an index naming a tensor its shard lacks, a tensor in two files, or no weights at all
     */
    public static Checkpoint open(Path dir) {
        Objects.requireNonNull(dir, "dir");
        if (!Files.isDirectory(dir)) {
            throw new CheckpointException(dir + ": not a directory");
        }
        List<SafetensorsFile> opened = new ArrayList<>();
        try {
            NavigableMap<String, SafetensorsFile> byName = new TreeMap<>();
            Path index = dir.resolve(INDEX_FILE);
            Path single = dir.resolve(SINGLE_FILE);
            if (Files.exists(index)) {
                Map<String, String> weightMap = readWeightMap(index);
                Map<String, SafetensorsFile> shards = new LinkedHashMap<>();
                for (String shard : new TreeSet<>(weightMap.values())) {
                    Path file = dir.resolve(shard);
                    if (!Files.isRegularFile(file)) {
                        String example = weightMap.entrySet().stream().filter(e -> e.getValue().equals(shard))
                                .map(Map.Entry::getKey).findFirst().orElseThrow();
                        throw new CheckpointException(index + ": shard '" + shard + "' (holding e.g. tensor '"
                                + example + "') does not exist in " + dir);
                    }
                    SafetensorsFile f = SafetensorsFile.open(file);
                    opened.add(f);
                    shards.put(shard, f);
                }
                for (Map.Entry<String, String> e : weightMap.entrySet()) {
                    SafetensorsFile f = shards.get(e.getValue());
                    if (f.find(e.getKey()).isEmpty()) {
                        throw new CheckpointException(index + ": weight_map puts tensor '" + e.getKey()
                                + "' in shard '" + e.getValue() + "', which does not hold it");
                    }
                    byName.put(e.getKey(), f);
                }
            } else if (Files.exists(single)) {
                SafetensorsFile f = SafetensorsFile.open(single);
                opened.add(f);
                for (TensorInfo t : f.tensors()) {
                    byName.put(t.name(), f);
                }
            } else {
                List<Path> found = new ArrayList<>();
                try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*.safetensors")) {
                    ds.forEach(found::add);
                } catch (IOException e) {
                    throw new CheckpointException(dir + ": cannot list: " + e, e);
                }
                if (found.isEmpty()) {
                    throw new CheckpointException(dir + ": no " + INDEX_FILE + ", " + SINGLE_FILE
                            + " or other *.safetensors file");
                }
                found.sort(null);
                for (Path p : found) {
                    SafetensorsFile f = SafetensorsFile.open(p);
                    opened.add(f);
                    for (TensorInfo t : f.tensors()) {
                        SafetensorsFile other = byName.putIfAbsent(t.name(), f);
                        if (other != null) {
                            throw new CheckpointException(dir + ": tensor '" + t.name() + "' is in both "
                                    + other.path().getFileName() + " and " + p.getFileName());
                        }
                    }
                }
            }
            return new Checkpoint(dir, opened, byName);
        } catch (RuntimeException | Error e) {
            for (SafetensorsFile f : opened) {
                try {
                    f.close();
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    private static Map<String, String> readWeightMap(Path index) {
        JsonNode root;
        try {
            root = Json.MAPPER.readTree(index.toFile());
        } catch (IOException e) {
            throw new CheckpointException(index + ": cannot read as JSON: " + e.getMessage(), e);
        }
        JsonNode map = root == null ? null : root.get("weight_map");
        if (map == null || !map.isObject()) {
            throw new CheckpointException(index + ": needs a \"weight_map\" object of tensor name -> shard file");
        }
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : map.properties()) {
            JsonNode v = e.getValue();
            // A bare file name: the index must not point outside its own folder.
            if (!v.isTextual() || v.textValue().isEmpty() || v.textValue().contains("/")
                    || v.textValue().contains("\\") || v.textValue().equals(".") || v.textValue().equals("..")) {
                throw new CheckpointException(index + ": weight_map entry for tensor '" + e.getKey()
                        + "' must be a file name in the same folder, got " + v);
            }
            out.put(e.getKey(), v.textValue());
        }
        return out;
    }

    /** The folder this was opened from. */
    public Path dir() {
        return dir;
    }

    /** The safetensors files opened, in the order they were opened (sorted by file name). */
    public List<SafetensorsFile> files() {
        return files;
    }

    /** Every tensor name, sorted. */
    public Set<String> names() {
        return byName.navigableKeySet();
    }

    /** The tensor called {@code name}, if the checkpoint has one. */
    public Optional<TensorInfo> find(String name) {
        SafetensorsFile f = byName.get(name);
        return f == null ? Optional.empty() : f.find(name);
    }

    /**
     * The file holding tensor {@code name}.
     *
     * @throws CheckpointException naming the tensor and the folder if there is none
     */
    public SafetensorsFile fileOf(String name) {
        SafetensorsFile f = byName.get(name);
        if (f == null) {
            throw new CheckpointException(dir + ": no tensor '" + name + "' in this checkpoint (it has "
                    + byName.size() + " tensors in " + files.size() + " files)");
        }
        return f;
    }

    /** The tensor called {@code name}; throws like {@link #fileOf} if there is none. */
    public TensorInfo tensor(String name) {
        return fileOf(name).tensor(name);
    }

    /** The tensor's bytes, a read-only little-endian slice of its file's mapping; see {@link SafetensorsFile#data}. */
    public MemorySegment data(String name) {
        return fileOf(name).data(name);
    }

    /** A copy of the tensor's raw bytes, whatever its dtype. */
    public byte[] bytes(String name) {
        return fileOf(name).bytes(name);
    }

    /** A copy of an F32 tensor's values. */
    public float[] f32(String name) {
        return fileOf(name).f32(name);
    }

    /** A copy of a BF16, F16 or F32 tensor's values as FP32. */
    public float[] floats(String name) {
        return fileOf(name).floats(name);
    }

    /** A copy of a BF16 tensor's raw 16-bit patterns. */
    public short[] bf16(String name) {
        return fileOf(name).bf16(name);
    }

    /** A copy of an I32 tensor's values. */
    public int[] i32(String name) {
        return fileOf(name).i32(name);
    }

    /** Closes every file; segments from {@link #data} become unusable. */
    @Override
    public void close() {
        RuntimeException first = null;
        for (SafetensorsFile f : files) {
            try {
                f.close();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    @Override
    public String toString() {
        return "Checkpoint[" + dir + ", " + byName.size() + " tensors in " + files.size() + " files]";
    }
}
