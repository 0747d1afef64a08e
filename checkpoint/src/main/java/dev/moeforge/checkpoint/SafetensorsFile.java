package dev.moeforge.checkpoint;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.channels.FileChannel.MapMode;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A safetensors file, memory-mapped read-only and validated on open the way the reference reader
 * validates it. Offsets are longs throughout, so files (and tensors) past 2 GB work. The mapping is
 * shared across threads and released by {@link #close()}; segments handed out become unusable then.
 */
public final class SafetensorsFile implements AutoCloseable {

    /** Largest header the reference implementation accepts; guards against absurd allocations. */
    public static final long MAX_HEADER_BYTES = 100_000_000L;

    static final String METADATA_KEY = "__metadata__";

    private static final ValueLayout.OfLong U64_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    // Unaligned: a file from another writer may put a tensor at any byte offset.
    static final ValueLayout.OfFloat F32_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfShort I16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt I32_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    // Java arrays stop a little short of Integer.MAX_VALUE on common VMs.
    static final long MAX_ARRAY_LENGTH = Integer.MAX_VALUE - 8;

    private final Path path;
    private final Arena arena;
    private final MemorySegment buffer;
    private final Map<String, String> metadata;
    private final List<TensorInfo> tensors;
    private final Map<String, TensorInfo> byName;
    private final AtomicBoolean closed = new AtomicBoolean();

    private SafetensorsFile(Path path, Arena arena, MemorySegment buffer, Map<String, String> metadata,
            List<TensorInfo> tensors) {
        this.path = path;
        this.arena = arena;
        this.buffer = buffer;
        this.metadata = metadata;
        this.tensors = tensors;
        Map<String, TensorInfo> m = new HashMap<>();
        for (TensorInfo t : tensors) {
            m.put(t.name(), t);
        }
        this.byName = m;
    }

    /**
     * Maps and validates {@code path}.
     *
     * @throws CheckpointException naming the file (and tensor) if it cannot be read or is malformed
     */
    public static SafetensorsFile open(Path path) {
        Objects.requireNonNull(path, "path");
        Arena arena = Arena.ofShared();
        try {
            MemorySegment file;
            try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
                long size = ch.size();
                if (size < 8) {
                    throw fail(path, "file is " + size + " bytes long, too short for the 8-byte header length");
                }
                // The mapping outlives the channel; it is released when the arena closes.
                file = ch.map(MapMode.READ_ONLY, 0, size, arena);
            }
            long size = file.byteSize();
            long n = file.get(U64_LE, 0);
            // n is an unsigned 64-bit value: a negative long is a length beyond 2^63.
            if (n < 0 || n > MAX_HEADER_BYTES) {
                throw fail(path, "header length " + Long.toUnsignedString(n) + " exceeds the limit of "
                        + MAX_HEADER_BYTES + " bytes");
            }
            if (n > size - 8) {
                throw fail(path, "header length " + n + " runs past the end of the file (8 + " + n + " > file size "
                        + size + ")");
            }
            byte[] header = file.asSlice(8, n).toArray(ValueLayout.JAVA_BYTE);
            MemorySegment buffer = file.asSlice(8 + n);
            Parsed parsed = parseHeader(path, header);
            List<TensorInfo> ordered = validateLayout(path, parsed.tensors(), buffer.byteSize());
            return new SafetensorsFile(path, arena, buffer, parsed.metadata(), ordered);
        } catch (IOException e) {
            arena.close();
            throw new CheckpointException(path + ": cannot read: " + e, e);
        } catch (RuntimeException | Error e) {
            arena.close();
            throw e;
        }
    }

    private record Parsed(Map<String, String> metadata, List<TensorInfo> tensors) {}

    private static Parsed parseHeader(Path path, byte[] header) {
        String text;
        try {
            text = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(header))
                    .toString();
        } catch (CharacterCodingException e) {
            throw fail(path, "header is not valid UTF-8 (" + e + ")");
        }
        if (!text.startsWith("{")) {
            throw fail(path, "header must be a JSON object starting with '{' but starts with "
                    + quoteStart(text));
        }
        JsonNode root;
        try {
            root = Json.MAPPER.readTree(text);
        } catch (JsonProcessingException e) {
            throw fail(path, "header is not valid JSON: " + e.getOriginalMessage());
        }
        if (root == null || !root.isObject()) {
            throw fail(path, "header is not a JSON object");
        }
        Map<String, String> metadata = Map.of();
        List<TensorInfo> tensors = new ArrayList<>();
        for (Map.Entry<String, JsonNode> field : root.properties()) {
            String name = field.getKey();
            JsonNode value = field.getValue();
            if (name.equals(METADATA_KEY)) {
                metadata = parseMetadata(path, value);
            } else {
                tensors.add(parseTensor(path, name, value));
            }
        }
        return new Parsed(metadata, tensors);
    }

    private static Map<String, String> parseMetadata(Path path, JsonNode node) {
        if (node.isNull()) {
            return Map.of();
        }
        if (!node.isObject()) {
            throw fail(path, METADATA_KEY + " must be an object of strings, got " + describe(node));
        }
        Map<String, String> m = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : node.properties()) {
            if (!e.getValue().isTextual()) {
                throw fail(path, METADATA_KEY + " value for key '" + e.getKey() + "' must be a string, got "
                        + describe(e.getValue()));
            }
            m.put(e.getKey(), e.getValue().textValue());
        }
        return Collections.unmodifiableMap(m);
    }

    private static TensorInfo parseTensor(Path path, String name, JsonNode node) {
        if (!node.isObject()) {
            throw fail(path, name, "entry must be an object with dtype, shape and data_offsets, got " + describe(node));
        }
        JsonNode dtypeNode = node.get("dtype");
        if (dtypeNode == null) {
            throw fail(path, name, "missing field 'dtype'");
        }
        if (!dtypeNode.isTextual()) {
            throw fail(path, name, "'dtype' must be a string, got " + describe(dtypeNode));
        }
        SafetensorsDType dtype;
        try {
            dtype = SafetensorsDType.fromText(dtypeNode.textValue());
        } catch (IllegalArgumentException e) {
            throw fail(path, name, e.getMessage());
        }
        List<Long> shape = longArray(path, name, node, "shape", -1);
        List<Long> offsets = longArray(path, name, node, "data_offsets", 2);
        long begin = offsets.get(0);
        long end = offsets.get(1);
        if (end < begin) {
            throw fail(path, name, "data_offsets [" + begin + ", " + end + "] end before they begin");
        }
        return new TensorInfo(name, dtype, shape, begin, end);
    }

    /** A field holding an array of non-negative integers; {@code length} -1 means any length. */
    private static List<Long> longArray(Path path, String name, JsonNode node, String field, int length) {
        JsonNode arr = node.get(field);
        if (arr == null) {
            throw fail(path, name, "missing field '" + field + "'");
        }
        String expected = length < 0 ? "an array of non-negative integers" : "an array of " + length
                + " non-negative integers";
        if (!arr.isArray() || (length >= 0 && arr.size() != length)) {
            throw fail(path, name, "'" + field + "' must be " + expected + ", got " + describe(arr));
        }
        List<Long> out = new ArrayList<>(arr.size());
        for (JsonNode v : arr) {
            if (!v.isIntegralNumber()) {
                throw fail(path, name, "'" + field + "' must be " + expected + ", got " + describe(arr));
            }
            if (!v.canConvertToLong() || v.longValue() < 0) {
                String what = v.canConvertToLong() ? "negative" : "out of range";
                throw fail(path, name, "'" + field + "' " + describe(arr) + ": " + v + " is " + what
                        + "; must be " + expected);
            }
            out.add(v.longValue());
        }
        return out;
    }

    /**
     * Checks the tensors tile the data buffer exactly, in offset order, and returns them in that order.
     * Each failure names the tensor where the tiling breaks.
     */
    private static List<TensorInfo> validateLayout(Path path, List<TensorInfo> tensors, long bufferLength) {
        List<TensorInfo> sorted = new ArrayList<>(tensors);
        sorted.sort(Comparator.comparingLong(TensorInfo::begin)
                .thenComparingLong(TensorInfo::end)
                .thenComparing(TensorInfo::name));
        long pos = 0;
        TensorInfo prev = null;
        for (TensorInfo t : sorted) {
            String range = range(t);
            if (t.begin() < pos) {
                throw fail(path, t.name(), "data_offsets " + range + " overlap '" + prev.name() + "' " + range(prev));
            }
            if (t.begin() > pos) {
                String after = prev == null ? "the start of the data buffer" : "'" + prev.name() + "' " + range(prev);
                throw fail(path, t.name(), "data_offsets " + range + " leave a hole of " + (t.begin() - pos)
                        + " bytes [" + pos + ", " + t.begin() + ") after " + after);
            }
            long need;
            try {
                need = t.dtype().byteSize(TensorInfo.numel(t.shape()));
            } catch (IllegalArgumentException e) {
                throw fail(path, t.name(), "dtype " + t.dtype() + " shape " + t.shape() + ": " + e.getMessage());
            }
            if (t.end() - t.begin() != need) {
                throw fail(path, t.name(), "data_offsets " + range + " span " + (t.end() - t.begin())
                        + " bytes but dtype " + t.dtype() + " with shape " + t.shape() + " needs " + need);
            }
            if (t.end() > bufferLength) {
                throw fail(path, t.name(), "data_offsets " + range + " run past the end of the data buffer, which "
                        + "holds only " + bufferLength + " bytes (truncated file?)");
            }
            pos = t.end();
            prev = t;
        }
        if (pos != bufferLength) {
            String last = prev == null ? "(there are no tensors)" : "after the last tensor '" + prev.name() + "' "
                    + range(prev);
            throw fail(path, "data buffer holds " + bufferLength + " bytes but tensors cover only " + pos + "; "
                    + (bufferLength - pos) + " bytes belong to no tensor " + last);
        }
        return List.copyOf(sorted);
    }

    /** The file this was opened from. */
    public Path path() {
        return path;
    }

    /** The header's {@code __metadata__} map; empty when absent. */
    public Map<String, String> metadata() {
        return metadata;
    }

    /** Every tensor, in data-offset order. */
    public List<TensorInfo> tensors() {
        return tensors;
    }

    /** The tensor called {@code name}, if the file has one. */
    public Optional<TensorInfo> find(String name) {
        return Optional.ofNullable(byName.get(name));
    }

    /**
     * The tensor called {@code name}.
     *
     * @throws CheckpointException naming the file and the tensor if there is none
     */
    public TensorInfo tensor(String name) {
        TensorInfo t = byName.get(name);
        if (t == null) {
            throw fail(path, name, "no such tensor in this file (it has " + tensors.size() + ")");
        }
        return t;
    }

    /**
     * The tensor's bytes, a read-only slice of the mapping (no copy). Multi-byte values are
     * little-endian and may be unaligned: read them with {@code *_UNALIGNED} layouts in
     * {@link ByteOrder#LITTLE_ENDIAN} order. Valid until this file is closed.
     */
    public MemorySegment data(String name) {
        return slice(tensor(name));
    }

    /** A copy of the tensor's raw bytes, whatever its dtype. */
    public byte[] bytes(String name) {
        TensorInfo t = tensor(name);
        checkArrayLength(t, t.byteSize());
        return slice(t).toArray(ValueLayout.JAVA_BYTE);
    }

    /** A copy of an F32 tensor's values. */
    public float[] f32(String name) {
        TensorInfo t = expect(name, SafetensorsDType.F32);
        checkArrayLength(t, t.numel());
        return slice(t).toArray(F32_LE);
    }

    /** A copy of a BF16, F16 or F32 tensor's values as FP32 (exact: every such value is a float). */
    public float[] floats(String name) {
        TensorInfo t = tensor(name);
        if (!FloatRows.isFloat(t.dtype())) {
            throw fail(path, name, "dtype " + t.dtype().text() + ", expected BF16, F16 or F32");
        }
        checkArrayLength(t, t.numel());
        MemorySegment data = slice(t);
        float[] out = new float[(int) t.numel()];
        for (int i = 0; i < out.length; i++) {
            out[i] = FloatRows.at(data, t.dtype(), i);
        }
        return out;
    }

    /** A copy of a BF16 tensor's raw 16-bit patterns (the high half of the equivalent float's bits). */
    public short[] bf16(String name) {
        TensorInfo t = expect(name, SafetensorsDType.BF16);
        checkArrayLength(t, t.numel());
        return slice(t).toArray(I16_LE);
    }

    /** A copy of an I32 tensor's values. */
    public int[] i32(String name) {
        TensorInfo t = expect(name, SafetensorsDType.I32);
        checkArrayLength(t, t.numel());
        return slice(t).toArray(I32_LE);
    }

    /** Releases the mapping. Idempotent; segments from {@link #data} throw once it has run. */
    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            arena.close();
        }
    }

    @Override
    public String toString() {
        return "SafetensorsFile[" + path + ", " + tensors.size() + " tensors]";
    }

    private TensorInfo expect(String name, SafetensorsDType dtype) {
        TensorInfo t = tensor(name);
        if (t.dtype() != dtype) {
            throw fail(path, name, "dtype is " + t.dtype() + ", not " + dtype);
        }
        return t;
    }

    private void checkArrayLength(TensorInfo t, long length) {
        if (length > MAX_ARRAY_LENGTH) {
            throw fail(path, t.name(), length + " elements are too many for a Java array; read it through data()");
        }
    }

    private MemorySegment slice(TensorInfo t) {
        if (closed.get()) {
            throw new IllegalStateException(path + ": file is closed");
        }
        return buffer.asSlice(t.begin(), t.end() - t.begin());
    }

    private static String range(TensorInfo t) {
        return "[" + t.begin() + ", " + t.end() + "]";
    }

    private static String describe(JsonNode node) {
        String s = node.toString();
        return s.length() > 80 ? s.substring(0, 77) + "..." : s;
    }

    private static String quoteStart(String text) {
        if (text.isEmpty()) {
            return "nothing (empty header)";
        }
        String s = text.length() > 20 ? text.substring(0, 20) + "..." : text;
        return "'" + s + "'";
    }

    static CheckpointException fail(Path file, String message) {
        return new CheckpointException(file + ": " + message);
    }

    static CheckpointException fail(Path file, String tensor, String message) {
        return new CheckpointException(file + ": tensor '" + tensor + "': " + message);
    }
}
