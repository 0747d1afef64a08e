package dev.moeforge.checkpoint;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Supplier;
import java.util.regex.Pattern;

/**
 * Writes a Hugging Face checkpoint folder: tensors, in the order added, split into shards
 * {@code model-00001-of-0000N.safetensors} of at most a given data size plus
 * {@code model.safetensors.index.json}, or a single {@code model.safetensors} when they fit in one.
 */
public final class CheckpointWriter {

    /** transformers' default {@code max_shard_size} of "5GB" (decimal gigabytes). */
    public static final long DEFAULT_MAX_SHARD_BYTES = 5_000_000_000L;

    private static final Pattern OWN_FILES = Pattern.compile(
            "model(-\\d+-of-\\d+)?\\.safetensors|" + Pattern.quote(Checkpoint.INDEX_FILE));

    private final long maxShardBytes;
    private final Map<String, SafetensorsWriter.Pending> tensors = new LinkedHashMap<>();
    private Map<String, String> metadata;

    /** A writer with the default shard size, {@value #DEFAULT_MAX_SHARD_BYTES} bytes. */
    public CheckpointWriter() {
        this(DEFAULT_MAX_SHARD_BYTES);
    }

    /** A writer whose shards hold at most {@code maxShardBytes} bytes of tensor data, unless one tensor alone is bigger. */
    public CheckpointWriter(long maxShardBytes) {
        if (maxShardBytes <= 0) {
            throw new IllegalArgumentException("maxShardBytes must be positive, got " + maxShardBytes);
        }
        this.maxShardBytes = maxShardBytes;
    }

    /**
     * Adds a tensor held in {@code data} (row-major, little-endian; not copied).
     *
     * @throws IllegalArgumentException naming the tensor if the name is taken, or data's length does not
     *     match dtype and shape
     */
    public CheckpointWriter add(String name, SafetensorsDType dtype, List<Long> shape, byte[] data) {
        Objects.requireNonNull(data, "data");
        SafetensorsWriter.Pending p = SafetensorsWriter.Pending.of(name, dtype, shape, () -> MemorySegment.ofArray(data));
        p.checkLength(data.length);
        return add(p);
    }

    /**
     * Adds a tensor whose bytes {@code data} produces when its shard is written (called once), so a
     * large model need not be in memory all at once. A segment of the wrong size fails the write.
     */
    public CheckpointWriter add(String name, SafetensorsDType dtype, List<Long> shape, Supplier<MemorySegment> data) {
        return add(SafetensorsWriter.Pending.of(name, dtype, shape, data));
    }

    private CheckpointWriter add(SafetensorsWriter.Pending p) {
        if (tensors.putIfAbsent(p.name(), p) != null) {
            throw new IllegalArgumentException("tensor '" + p.name() + "' was already added");
        }
        return this;
    }

    /** The {@code __metadata__} of every file written, e.g. {@code {"format": "pt"}} as transformers writes. */
    public CheckpointWriter metadata(Map<String, String> metadata) {
        // Kept in the caller's order (Map.copyOf's order varies between runs), so output is reproducible.
        Map<String, String> copy = new LinkedHashMap<>();
        metadata.forEach((k, v) -> copy.put(Objects.requireNonNull(k, "metadata key"),
                Objects.requireNonNull(v, "metadata value for '" + k + "'")));
        this.metadata = copy;
        return this;
    }

    /**
     * Writes the checkpoint into {@code dir} (created if need be). Every file is written under a
     * temporary name first and moved into place only once all are written, so a failure (an I/O
     * error, a tensor's data that cannot be produced) leaves {@code dir} as it was. Files of an
     * earlier save there ({@code model.safetensors}, {@code model-*-of-*.safetensors}, the index) that
     * this save does not rewrite are then deleted, since a stale index or shard would otherwise be
     * read back with the new ones.
     *
     * @return the files written: the shards in order, then the index if there is one
     * @throws CheckpointException naming the file (and tensor) on failure
     */
    public List<Path> write(Path dir) {
        List<List<SafetensorsWriter.Pending>> shards = split();
        try {
            Files.createDirectories(dir);
        } catch (IOException e) {
            throw new CheckpointException(dir + ": cannot create: " + e, e);
        }
        List<StagedFile> staged = new ArrayList<>();
        try {
            int n = shards.size();
            for (int i = 0; i < Math.max(n, 1); i++) {
                staged.add(SafetensorsWriter.stage(dir.resolve(shardName(i, n)), n == 0 ? List.of() : shards.get(i), metadata));
            }
            if (n > 1) {
                staged.add(stageIndex(dir.resolve(Checkpoint.INDEX_FILE), indexText(shards)));
            }
            for (StagedFile f : staged) {
                f.moveIntoPlace();
            }
        } finally {
            staged.forEach(StagedFile::discard);
        }
        List<Path> written = staged.stream().map(StagedFile::path).toList();
        deleteStale(dir, written);
        return written;
    }

    /** A file {@link #write} writes: its name, the tensors it holds (none for the index) and its size in bytes. */
    public record PlannedFile(String name, List<String> tensors, long bytes) {
        public PlannedFile {
            tensors = List.copyOf(tensors);
        }
    }

    /** The files {@link #write} would write, in the same order and with their exact sizes; writes nothing. */
    public List<PlannedFile> plan() {
        List<List<SafetensorsWriter.Pending>> shards = split();
        List<PlannedFile> out = new ArrayList<>();
        int n = shards.size();
        for (int i = 0; i < Math.max(n, 1); i++) {
            List<SafetensorsWriter.Pending> shard = n == 0 ? List.of() : shards.get(i);
            String name = shardName(i, n);
            out.add(new PlannedFile(name, shard.stream().map(SafetensorsWriter.Pending::name).toList(),
                    SafetensorsWriter.fileSize(Path.of(name), shard, metadata)));
        }
        if (n > 1) {
            out.add(new PlannedFile(Checkpoint.INDEX_FILE, List.of(), indexText(shards).getBytes(StandardCharsets.UTF_8).length));
        }
        return out;
    }

    /** Whether {@code fileName} is one of the files a save writes (and a later save replaces or deletes). */
    static boolean isCheckpointFile(String fileName) {
        return OWN_FILES.matcher(fileName).matches();
    }

    /** {@code model.safetensors} for a single file, else {@code model-0000<i+1>-of-0000<n>.safetensors}. */
    private static String shardName(int i, int n) {
        return n <= 1 ? Checkpoint.SINGLE_FILE : String.format("model-%05d-of-%05d.safetensors", i + 1, n);
    }

    /**
     * Greedy split in insertion order, as huggingface_hub does it: a shard is closed when the next
     * tensor would push it past the limit, and a tensor bigger than the limit gets a shard of its own.
     */
    private List<List<SafetensorsWriter.Pending>> split() {
        List<List<SafetensorsWriter.Pending>> shards = new ArrayList<>();
        List<SafetensorsWriter.Pending> current = new ArrayList<>();
        long currentSize = 0;
        for (SafetensorsWriter.Pending p : tensors.values()) {
            if (p.byteSize() > maxShardBytes) {
                if (!current.isEmpty()) {
                    shards.add(current);
                    current = new ArrayList<>();
                    currentSize = 0;
                }
                shards.add(List.of(p));
                continue;
            }
            if (!current.isEmpty() && currentSize + p.byteSize() > maxShardBytes) {
                shards.add(current);
                current = new ArrayList<>();
                currentSize = 0;
            }
            current.add(p);
            currentSize += p.byteSize();
        }
        if (!current.isEmpty()) {
            shards.add(current);
        }
        return shards;
    }

    /** The index of {@code shards} as transformers writes it: total data size and tensor -> shard, by name. */
    private static String indexText(List<List<SafetensorsWriter.Pending>> shards) {
        Map<String, String> weightMap = new TreeMap<>();
        long totalSize = 0;
        for (int i = 0; i < shards.size(); i++) {
            for (SafetensorsWriter.Pending p : shards.get(i)) {
                weightMap.put(p.name(), shardName(i, shards.size()));
                totalSize += p.byteSize();
            }
        }
        ObjectNode root = Json.MAPPER.createObjectNode();
        root.putObject("metadata").put("total_size", totalSize);
        ObjectNode map = root.putObject("weight_map");
        weightMap.forEach(map::put);
        try {
            return Json.MAPPER.writer(Json.TRANSFORMERS_LAYOUT).writeValueAsString(root) + "\n";
        } catch (IOException e) {
            throw new CheckpointException(Checkpoint.INDEX_FILE + ": cannot encode: " + e, e);
        }
    }

    private static StagedFile stageIndex(Path index, String text) {
        return StagedFile.write(index, ch -> StagedFile.writeFully(ch, ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8))));
    }

    private static void deleteStale(Path dir, List<Path> written) {
        Set<Path> keep = new HashSet<>();
        for (Path p : written) {
            keep.add(p.getFileName());
        }
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir,
                p -> OWN_FILES.matcher(p.getFileName().toString()).matches() && !keep.contains(p.getFileName()))) {
            for (Path stale : ds) {
                Files.deleteIfExists(stale);
            }
        } catch (IOException e) {
            throw new CheckpointException(dir + ": cannot remove files of an earlier save: " + e, e);
        }
    }
}
