package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.SafetensorsTestFiles.raw;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class SafetensorsFileTest {

    @TempDir
    Path dir;

    private static List<Long> shapeFor(SafetensorsDType t) {
        return switch (t) {
            case F4 -> List.of(2L, 3L); // 6 x 4 bits = 3 bytes
            case F6_E2M3, F6_E3M2 -> List.of(4L, 2L); // 8 x 6 bits = 6 bytes
            default -> List.of(3L, 2L);
        };
    }

    @Test
    void roundTripOfEveryDtypeScalarEmptyAndMetadata() throws IOException {
        Random rnd = new Random(42);
        Map<String, byte[]> written = new LinkedHashMap<>();
        Map<String, SafetensorsDType> dtypes = new LinkedHashMap<>();
        Map<String, List<Long>> shapes = new LinkedHashMap<>();
        SafetensorsWriter w = new SafetensorsWriter();
        for (SafetensorsDType t : SafetensorsDType.values()) {
            String name = "t." + t.text().toLowerCase();
            List<Long> shape = shapeFor(t);
            byte[] data = new byte[(int) t.byteSize(shape.stream().reduce(1L, (a, b) -> a * b))];
            rnd.nextBytes(data);
            w.add(name, t, shape, data);
            written.put(name, data);
            dtypes.put(name, t);
            shapes.put(name, shape);
        }
        byte[] scalar = SafetensorsTestFiles.f32(3.5f);
        w.add("scalar", SafetensorsDType.F32, List.of(), scalar);
        w.add("empty", SafetensorsDType.BF16, List.of(0L, 5L), new byte[0]);
        // A native segment larger than the writer's 8 MiB streaming chunk, through the segment overload.
        try (Arena arena = Arena.ofConfined()) {
            long bigSize = (8L << 20) + 3;
            MemorySegment big = arena.allocate(bigSize);
            for (long i = 0; i < bigSize; i += 4093) {
                big.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 31));
            }
            big.set(ValueLayout.JAVA_BYTE, bigSize - 1, (byte) 0x5a);
            w.add("big", SafetensorsDType.U8, List.of(bigSize), big);
            w.metadata(Map.of("format", "pt"));

            Path file = dir.resolve("all.safetensors");
            long size = w.write(file);
            assertEquals(Files.size(file), size);

            var raw = SafetensorsTestFiles.header(file);
            assertEquals(0, raw.length() % 8, "header length " + raw.length());
            assertTrue(raw.text().startsWith("{"), raw.text());
            assertTrue(raw.text().substring(raw.text().stripTrailing().length()).chars().allMatch(c -> c == ' '));

            // The layout, checked on the raw header JSON: descending alignment, then name, contiguous from 0.
            JsonNode header = new ObjectMapper().readTree(raw.text());
            assertEquals("pt", header.get("__metadata__").get("format").asText());
            List<String> expectedOrder = new ArrayList<>(written.keySet());
            expectedOrder.addAll(List.of("scalar", "empty", "big"));
            Map<String, Integer> align = new LinkedHashMap<>();
            dtypes.forEach((n, t) -> align.put(n, Math.max(1, t.bits() / 8)));
            align.put("scalar", 4);
            align.put("empty", 2);
            align.put("big", 1);
            expectedOrder.sort(Comparator.comparing((String n) -> -align.get(n)).thenComparing(n -> n));
            List<String> byOffset = new ArrayList<>();
            header.properties().forEach(e -> {
                if (!e.getKey().equals("__metadata__")) {
                    byOffset.add(e.getKey());
                }
            });
            byOffset.sort(Comparator.comparingLong((String n) -> header.get(n).get("data_offsets").get(0).asLong())
                    .thenComparingLong(n -> header.get(n).get("data_offsets").get(1).asLong()));
            assertEquals(expectedOrder, byOffset);
            assertEquals("t.c64", byOffset.getFirst());
            long pos = 0;
            for (String n : byOffset) {
                JsonNode off = header.get(n).get("data_offsets");
                assertEquals(pos, off.get(0).asLong(), n);
                assertEquals(0, off.get(0).asLong() % align.get(n), n + " misaligned");
                pos = off.get(1).asLong();
            }
            assertEquals(size - 8 - raw.length(), pos);

            try (SafetensorsFile f = SafetensorsFile.open(file)) {
                assertEquals(Map.of("format", "pt"), f.metadata());
                assertEquals(expectedOrder, f.tensors().stream().map(TensorInfo::name).toList());
                for (var e : written.entrySet()) {
                    TensorInfo t = f.tensor(e.getKey());
                    assertEquals(dtypes.get(e.getKey()), t.dtype());
                    assertEquals(shapes.get(e.getKey()), t.shape());
                    assertEquals(e.getValue().length, t.byteSize());
                    assertArrayEquals(e.getValue(), f.bytes(e.getKey()), e.getKey());
                    assertArrayEquals(e.getValue(), f.data(e.getKey()).toArray(ValueLayout.JAVA_BYTE), e.getKey());
                }
                TensorInfo s = f.tensor("scalar");
                assertEquals(List.of(), s.shape());
                assertEquals(1, s.numel());
                assertArrayEquals(new float[] {3.5f}, f.f32("scalar"));
                TensorInfo empty = f.tensor("empty");
                assertEquals(0, empty.numel());
                assertEquals(empty.begin(), empty.end());
                assertEquals(0, f.bf16("empty").length);
                assertEquals(-1, f.data("big").mismatch(big), "big tensor bytes differ");
                assertTrue(f.data("big").isReadOnly());
            }
        }
    }

    @Test
    void typedCopiesAndLittleEndianSlices() throws IOException {
        float[] floats = {1.0f, -2.5f, Float.MIN_VALUE, Float.NaN};
        int[] ints = {1, -1, Integer.MAX_VALUE, 0x01020304};
        short[] bf = {(short) 0x3f80, (short) 0xc020, 0x7fc0};
        Path file = dir.resolve("typed.safetensors");
        new SafetensorsWriter()
                .add("f", SafetensorsDType.F32, List.of(2L, 2L), SafetensorsTestFiles.f32(floats))
                .add("i", SafetensorsDType.I32, List.of(4L), SafetensorsTestFiles.i32(ints))
                .add("b", SafetensorsDType.BF16, List.of(3L), SafetensorsTestFiles.i16(bf))
                .write(file);
        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            assertArrayEquals(floats, f.f32("f"));
            assertArrayEquals(ints, f.i32("i"));
            assertArrayEquals(bf, f.bf16("b"));
            MemorySegment i = f.data("i");
            assertEquals(16, i.byteSize());
            assertEquals(0x01020304, i.get(ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 12));
            assertEquals(0x04, i.get(ValueLayout.JAVA_BYTE, 12));
            assertTrue(f.find("f").isPresent());
            assertFalse(f.find("nope").isPresent());

            var wrongType = assertThrows(CheckpointException.class, () -> f.f32("i"));
            assertMentions(wrongType, file, "'i'", "I32", "F32");
            assertMentions(assertThrows(CheckpointException.class, () -> f.bf16("f")), file, "'f'", "BF16");
            assertMentions(assertThrows(CheckpointException.class, () -> f.i32("b")), file, "'b'", "I32");
            assertMentions(assertThrows(CheckpointException.class, () -> f.tensor("nope")), file, "'nope'");
            assertMentions(assertThrows(CheckpointException.class, () -> f.data("nope")), file, "'nope'");
        }
    }

    @Test
    void readsUnalignedTensorsFromOtherWriters() throws IOException {
        // A U8 tensor of 1 byte puts the F32 tensor at offset 1: legal, if unusual.
        String header = """
                {"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},\
                "f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}}""";
        byte[] buf = new byte[9];
        buf[0] = 7;
        System.arraycopy(SafetensorsTestFiles.f32(1.5f, -4f), 0, buf, 1, 8);
        Path file = raw(dir.resolve("odd.safetensors"), header.length(), header.getBytes(StandardCharsets.UTF_8), buf);
        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            assertEquals(List.of("u", "f"), f.tensors().stream().map(TensorInfo::name).toList());
            assertArrayEquals(new float[] {1.5f, -4f}, f.f32("f"));
            assertArrayEquals(new byte[] {7}, f.bytes("u"));
            assertEquals(Map.of(), f.metadata());
        }
    }

    @Test
    void closeReleasesTheMapping() throws IOException {
        Path file = dir.resolve("c.safetensors");
        new SafetensorsWriter().add("x", SafetensorsDType.U8, List.of(4L), new byte[] {1, 2, 3, 4}).write(file);
        SafetensorsFile f = SafetensorsFile.open(file);
        MemorySegment x = f.data("x");
        assertEquals(3, x.get(ValueLayout.JAVA_BYTE, 2));
        f.close();
        f.close(); // idempotent
        assertThrows(IllegalStateException.class, () -> x.get(ValueLayout.JAVA_BYTE, 2));
        assertThrows(IllegalStateException.class, () -> f.data("x"));
    }

    @Test
    void writerRejectsBadTensorsNamingThem() {
        SafetensorsWriter w = new SafetensorsWriter().add("a", SafetensorsDType.F32, List.of(2L), new byte[8]);
        var dup = assertThrows(IllegalArgumentException.class,
                () -> w.add("a", SafetensorsDType.F32, List.of(2L), new byte[8]));
        assertTrue(dup.getMessage().contains("'a'"), dup.getMessage());
        var size = assertThrows(IllegalArgumentException.class,
                () -> w.add("b", SafetensorsDType.F32, List.of(2L, 3L), new byte[20]));
        assertTrue(size.getMessage().contains("'b'") && size.getMessage().contains("24")
                && size.getMessage().contains("20"), size.getMessage());
        var odd = assertThrows(IllegalArgumentException.class,
                () -> w.add("c", SafetensorsDType.F4, List.of(3L), new byte[2]));
        assertTrue(odd.getMessage().contains("'c'") && odd.getMessage().contains("whole number of bytes"),
                odd.getMessage());
        var neg = assertThrows(IllegalArgumentException.class,
                () -> w.add("d", SafetensorsDType.U8, List.of(-1L), new byte[0]));
        assertTrue(neg.getMessage().contains("'d'"), neg.getMessage());
        var seg = assertThrows(IllegalArgumentException.class,
                () -> w.add("e", SafetensorsDType.I64, List.of(1L), MemorySegment.ofArray(new byte[4])));
        assertTrue(seg.getMessage().contains("'e'"), seg.getMessage());
        assertThrows(IllegalArgumentException.class,
                () -> w.add("__metadata__", SafetensorsDType.U8, List.of(0L), new byte[0]));
    }

    @Test
    void emptyFileRoundTrips() throws IOException {
        Path file = dir.resolve("none.safetensors");
        long size = new SafetensorsWriter().write(file);
        assertEquals(16, size); // "{}" padded to 8
        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            assertEquals(List.of(), f.tensors());
        }
    }

    static Stream<Arguments> badHeaders() {
        String a16 = "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}";
        return Stream.of(
                Arguments.of("truncated buffer",
                        "{" + a16 + ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 24,
                        List.of("'b'", "[16, 32]", "24 bytes", "truncated")),
                Arguments.of("overlap",
                        "{" + a16 + ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24,
                        List.of("tensor 'b'", "[8, 24] overlap 'a' [0, 16]")),
                Arguments.of("hole",
                        "{" + a16 + ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[20,36]}}", 36,
                        List.of("tensor 'b'", "hole", "[16, 20)", "'a'")),
                Arguments.of("first tensor not at 0",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
                        List.of("tensor 'a'", "hole", "[0, 4)")),
                Arguments.of("size mismatch",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 12,
                        List.of("tensor 'a'", "12 bytes", "F32", "[4]", "needs 16")),
                Arguments.of("unknown dtype",
                        "{\"a\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                        List.of("tensor 'a'", "'F33'", "BF16", "F8_E4M3FNUZ", "F6_E2M3")),
                Arguments.of("lower-case dtype",
                        "{\"a\":{\"dtype\":\"f32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                        List.of("tensor 'a'", "'f32'")),
                Arguments.of("non-object header", "[1, 2]", 0, List.of("JSON object", "'[1, 2]'")),
                Arguments.of("invalid JSON", "{\"a\": ", 0, List.of("not valid JSON")),
                Arguments.of("trailing garbage", "{} {}", 0, List.of("not valid JSON")),
                Arguments.of("entry not an object", "{\"a\": 3}", 0, List.of("tensor 'a'", "object")),
                Arguments.of("negative dim",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1,4],\"data_offsets\":[0,0]}}", 0,
                        List.of("tensor 'a'", "negative", "-1")),
                Arguments.of("fractional dim",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0,
                        List.of("tensor 'a'", "'shape'", "integers")),
                Arguments.of("missing shape",
                        "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0]}}", 0,
                        List.of("tensor 'a'", "missing field 'shape'")),
                Arguments.of("dtype not a string",
                        "{\"a\":{\"dtype\":8,\"shape\":[],\"data_offsets\":[0,1]}}", 1,
                        List.of("tensor 'a'", "'dtype' must be a string")),
                Arguments.of("three offsets",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
                        List.of("tensor 'a'", "'data_offsets'", "2 non-negative integers")),
                Arguments.of("end before begin",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
                        List.of("tensor 'a'", "[4, 0]")),
                Arguments.of("odd number of F4",
                        "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1,
                        List.of("tensor 'a'", "whole number of bytes")),
                Arguments.of("trailing bytes",
                        "{" + a16 + "}", 20, List.of("20 bytes", "4 bytes belong to no tensor", "'a'")),
                Arguments.of("duplicate tensor",
                        "{" + a16 + "," + a16 + "}", 16, List.of("Duplicate", "'a'")),
                Arguments.of("metadata not strings",
                        "{\"__metadata__\":{\"format\":1}}", 0, List.of("__metadata__", "'format'")),
                Arguments.of("huge offsets",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 1,
                        List.of("tensor 'a'", "out of range")),
                Arguments.of("too many elements",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 1,
                        List.of("tensor 'a'", "2^63")));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("badHeaders")
    void malformedHeadersAreRejectedNamingFileAndTensor(String what, String header, int bufferLength,
            List<String> expected) throws IOException {
        Path file = raw(dir.resolve("model-00002-of-00003.safetensors"), header, bufferLength);
        var e = assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file).close());
        assertMentions(e, file, expected.toArray(String[]::new));
    }

    @Test
    void paddedHeadersAreAccepted() throws IOException {
        Path file = raw(dir.resolve("p.safetensors"),
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}        ", 2);
        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            assertEquals(2, f.tensor("a").byteSize());
        }
    }

    @Test
    void headerLengthPastTheEndOfTheFile() throws IOException {
        byte[] h = "{}".getBytes(StandardCharsets.UTF_8);
        Path file = raw(dir.resolve("short.safetensors"), 1000, h, new byte[10]);
        var e = assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file));
        assertMentions(e, file, "header length 1000", "runs past the end of the file", "20");
    }

    @Test
    void headerLengthOverTheLimit() throws IOException {
        Path file = raw(dir.resolve("huge.safetensors"), 100_000_001L, new byte[0], new byte[0]);
        assertMentions(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file)), file,
                "100000001", "limit");
        Path negative = raw(dir.resolve("neg.safetensors"), -1L, new byte[0], new byte[0]);
        assertMentions(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(negative)), negative,
                "18446744073709551615");
    }

    @Test
    void fileShorterThanTheLengthField() throws IOException {
        Path file = Files.write(dir.resolve("tiny.safetensors"), new byte[5]);
        assertMentions(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file)), file, "5 bytes");
        Path missing = dir.resolve("missing.safetensors");
        assertMentions(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(missing)), missing,
                "cannot read");
    }

    @Test
    void headerNotUtf8() throws IOException {
        byte[] h = {'{', '"', (byte) 0xff, '"', ':', '1', '}', ' '};
        Path file = raw(dir.resolve("latin.safetensors"), h.length, h, new byte[0]);
        assertMentions(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file)), file, "UTF-8");
    }

    @Test
    void dtypeTable() {
        // The format's table, written out independently of the enum.
        Map<String, Integer> spec = new LinkedHashMap<>();
        spec.put("BOOL", 8);
        spec.put("F4", 4);
        spec.put("F6_E2M3", 6);
        spec.put("F6_E3M2", 6);
        for (String t : List.of("U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")) {
            spec.put(t, 8);
        }
        for (String t : List.of("I16", "U16", "F16", "BF16")) {
            spec.put(t, 16);
        }
        for (String t : List.of("I32", "U32", "F32")) {
            spec.put(t, 32);
        }
        for (String t : List.of("C64", "F64", "I64", "U64")) {
            spec.put(t, 64);
        }
        Map<String, Integer> actual = new LinkedHashMap<>();
        for (SafetensorsDType t : SafetensorsDType.values()) {
            actual.put(t.text(), t.bits());
        }
        assertEquals(spec, actual);
        assertEquals(8, SafetensorsDType.C64.alignment());
        assertEquals(1, SafetensorsDType.F4.alignment());
        assertEquals(1, SafetensorsDType.F6_E2M3.alignment());
        assertEquals(2, SafetensorsDType.BF16.alignment());
        assertEquals(SafetensorsDType.F8_E5M2FNUZ, SafetensorsDType.fromText("F8_E5M2FNUZ"));
        assertEquals(3, SafetensorsDType.F4.byteSize(6));
        assertEquals(3, SafetensorsDType.F6_E2M3.byteSize(4));
        assertEquals(0, SafetensorsDType.F6_E2M3.byteSize(0));
        assertEquals(8L << 32, SafetensorsDType.U64.byteSize(1L << 32));
        assertThrows(IllegalArgumentException.class, () -> SafetensorsDType.F4.byteSize(5));
        assertThrows(IllegalArgumentException.class, () -> SafetensorsDType.F6_E3M2.byteSize(2));
        assertThrows(IllegalArgumentException.class, () -> SafetensorsDType.F64.byteSize(Long.MAX_VALUE / 4));
        var e = assertThrows(IllegalArgumentException.class, () -> SafetensorsDType.fromText("float32"));
        for (SafetensorsDType t : SafetensorsDType.values()) {
            assertTrue(e.getMessage().contains(t.text()), t + " in " + e.getMessage());
            assertEquals(t, SafetensorsDType.fromText(t.text()));
        }
    }

    static void assertMentions(Throwable e, Path file, String... fragments) {
        String m = e.getMessage();
        assertTrue(m.contains(file.toString()), "file " + file + " not in: " + m);
        for (String f : fragments) {
            assertTrue(m.contains(f), "'" + f + "' not in: " + m);
        }
    }
}
