package dev.moeforge.checkpoint;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * Builds one safetensors file: collect tensors with {@code add}, then {@link #write(Path)}. The layout
 * follows the reference writer: header space-padded to a multiple of 8 bytes, tensors ordered by
 * descending element alignment then name, so every tensor starts aligned to its element size.
 */
public final class SafetensorsWriter {

    // Data goes to the channel in pieces this big: bounded temporary buffers, and no int-sized limit.
    private static final long CHUNK = 8L << 20;

    private final Map<String, Pending> tensors = new LinkedHashMap<>();
    private Map<String, String> metadata;

    /**
     * A tensor waiting to be written. Its data is fetched only when written, so a checkpoint writer
     * can produce shards without holding every tensor in memory.
     */
    record Pending(String name, SafetensorsDType dtype, List<Long> shape, long byteSize,
            Supplier<MemorySegment> data) {

        static Pending of(String name, SafetensorsDType dtype, List<Long> shape, Supplier<MemorySegment> data) {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(dtype, "dtype");
            Objects.requireNonNull(shape, "shape");
            Objects.requireNonNull(data, "data");
            if (name.equals(SafetensorsFile.METADATA_KEY)) {
                throw new IllegalArgumentException("tensor name '" + name + "' is reserved for the metadata map");
            }
            for (Long d : shape) {
                if (d == null) {
                    throw new IllegalArgumentException("tensor '" + name + "': null dimension in shape " + shape);
                }
                if (d < 0) {
                    throw new IllegalArgumentException("tensor '" + name + "': negative dimension in shape " + shape);
                }
            }
            long size;
            try {
                size = dtype.byteSize(TensorInfo.numel(shape));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("tensor '" + name + "': " + e.getMessage(), e);
            }
            return new Pending(name, dtype, List.copyOf(shape), size, data);
        }

        void checkLength(long length) {
            if (length != byteSize) {
                throw new IllegalArgumentException("tensor '" + name + "': data has " + length + " bytes but "
                        + dtype + " with shape " + shape + " needs " + byteSize);
            }
        }
    }

    /**
     * Adds a tensor whose bytes (row-major, little-endian) are in {@code data}. The array is not copied:
     * it is read when {@link #write} runs.
     *
     * @throws IllegalArgumentException naming the tensor if the name is taken or reserved, a dimension is
     *     negative, or data's length does not match dtype and shape
     */
    public SafetensorsWriter add(String name, SafetensorsDType dtype, List<Long> shape, byte[] data) {
        Objects.requireNonNull(data, "data");
        Pending p = Pending.of(name, dtype, shape, () -> MemorySegment.ofArray(data));
        p.checkLength(data.length);
        return add(p);
    }

    /**
     * Adds a tensor whose bytes are in {@code data} (any kind of segment, any size). It is read when
     * {@link #write} runs, so it must still be alive then.
     *
     * @throws IllegalArgumentException as for {@link #add(String, SafetensorsDType, List, byte[])}
     */
    public SafetensorsWriter add(String name, SafetensorsDType dtype, List<Long> shape, MemorySegment data) {
        Objects.requireNonNull(data, "data");
        Pending p = Pending.of(name, dtype, shape, () -> data);
        p.checkLength(data.byteSize());
        return add(p);
    }

    SafetensorsWriter add(Pending p) {
        if (tensors.putIfAbsent(p.name(), p) != null) {
            throw new IllegalArgumentException("tensor '" + p.name() + "' was already added");
        }
        return this;
    }

    /** Sets the header's {@code __metadata__} map (transformers writes {@code {"format": "pt"}}). */
    public SafetensorsWriter metadata(Map<String, String> metadata) {
        Map<String, String> copy = new LinkedHashMap<>();
        metadata.forEach((k, v) -> copy.put(Objects.requireNonNull(k, "metadata key"),
                Objects.requireNonNull(v, "metadata value for '" + k + "'")));
        this.metadata = copy;
        return this;
    }

    /** Bytes the tensors' data will take (not counting the header). */
    public long dataSize() {
        long total = 0;
        for (Pending p : tensors.values()) {
            total = Math.addExact(total, p.byteSize());
        }
        return total;
    }

    /**
     * Writes the file, replacing any file at {@code path}. The data is streamed to the file; the file
     * appears under its name only once complete.
     *
     * @return bytes written, i.e. the file's size
     * @throws CheckpointException naming the file (and tensor) on an I/O error or a supplied segment
     *     of the wrong size
     */
    public long write(Path path) {
        StagedFile file = stage(path, new ArrayList<>(tensors.values()), metadata);
        file.moveIntoPlace();
        return file.size();
    }

    /** Writes the file under a temporary name beside {@code path}, for the caller to move into place. */
    static StagedFile stage(Path path, List<Pending> tensors, Map<String, String> metadata) {
        List<Pending> order = order(tensors);
        ByteBuffer head = header(path, order, metadata);
        return StagedFile.write(path, ch -> {
            StagedFile.writeFully(ch, head);
            for (Pending p : order) {
                MemorySegment data = p.data().get();
                if (data == null || data.byteSize() != p.byteSize()) {
                    throw SafetensorsFile.fail(path, p.name(), "supplied data has "
                            + (data == null ? "no" : Long.toString(data.byteSize())) + " bytes but "
                            + p.dtype() + " with shape " + p.shape() + " needs " + p.byteSize());
                }
                for (long pos = 0; pos < data.byteSize(); pos += CHUNK) {
                    long len = Math.min(CHUNK, data.byteSize() - pos);
                    StagedFile.writeFully(ch, data.asSlice(pos, len).asByteBuffer());
                }
            }
        });
    }

    /** The size of the file {@link #stage} writes for these tensors and metadata: header and data. */
    static long fileSize(Path path, List<Pending> tensors, Map<String, String> metadata) {
        List<Pending> order = order(tensors);
        long size = header(path, order, metadata).remaining();
        for (Pending p : order) {
            size = Math.addExact(size, p.byteSize());
        }
        return size;
    }

    /** The reference writer's order: descending element alignment, then name. */
    private static List<Pending> order(List<Pending> tensors) {
        List<Pending> order = new ArrayList<>(tensors);
        order.sort(Comparator.comparingInt((Pending p) -> p.dtype().alignment()).reversed()
                .thenComparing(Pending::name));
        return order;
    }

    /** The file's first bytes: the header's length, the header, its space padding. */
    private static ByteBuffer header(Path path, List<Pending> order, Map<String, String> metadata) {
        ObjectNode header = Json.MAPPER.createObjectNode();
        if (metadata != null) {
            ObjectNode meta = header.putObject(SafetensorsFile.METADATA_KEY);
            metadata.forEach(meta::put);
        }
        long offset = 0;
        for (Pending p : order) {
            ObjectNode entry = header.putObject(p.name());
            entry.put("dtype", p.dtype().text());
            ArrayNode shape = entry.putArray("shape");
            p.shape().forEach(shape::add);
            long end = Math.addExact(offset, p.byteSize());
            entry.putArray("data_offsets").add(offset).add(end);
            offset = end;
        }
        byte[] json;
        try {
            json = Json.MAPPER.writeValueAsBytes(header);
        } catch (JsonProcessingException e) {
            throw new CheckpointException(path + ": cannot encode header: " + e.getOriginalMessage(), e);
        }
        // Padding to 8 makes the data buffer start 8-aligned in the file (and so in a mapping).
        long padded = (json.length + 7L) & ~7L;
        if (padded > SafetensorsFile.MAX_HEADER_BYTES) {
            throw SafetensorsFile.fail(path, "header would be " + padded + " bytes, over the limit of "
                    + SafetensorsFile.MAX_HEADER_BYTES);
        }
        ByteBuffer head = ByteBuffer.allocate(8 + (int) padded).order(ByteOrder.LITTLE_ENDIAN);
        head.putLong(padded).put(json);
        byte[] spaces = new byte[(int) padded - json.length];
        Arrays.fill(spaces, (byte) ' ');
        head.put(spaces).flip();
        return head;
    }
}
