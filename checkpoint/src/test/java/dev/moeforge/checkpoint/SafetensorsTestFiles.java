package dev.moeforge.checkpoint;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/** Byte-level file builders for tests that must not trust the writer under test. */
final class SafetensorsTestFiles {

    private SafetensorsTestFiles() {}

    /** Writes {@code u64 len(header) | header | bufferLength zero bytes}. */
    static Path raw(Path file, String header, long bufferLength) throws IOException {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        return raw(file, h.length, h, new byte[Math.toIntExact(bufferLength)]);
    }

    /** Writes {@code u64 declaredLength | header | buffer}; the declared length may lie. */
    static Path raw(Path file, long declaredLength, byte[] header, byte[] buffer) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(8 + header.length + buffer.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(declaredLength).put(header).put(buffer);
        Files.write(file, b.array());
        return file;
    }

    /** Little-endian bytes of floats. */
    static byte[] f32(float... values) {
        ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : values) {
            b.putFloat(v);
        }
        return b.array();
    }

    /** Little-endian bytes of ints. */
    static byte[] i32(int... values) {
        ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
        for (int v : values) {
            b.putInt(v);
        }
        return b.array();
    }

    /** Little-endian bytes of 16-bit values. */
    static byte[] i16(short... values) {
        ByteBuffer b = ByteBuffer.allocate(2 * values.length).order(ByteOrder.LITTLE_ENDIAN);
        for (short v : values) {
            b.putShort(v);
        }
        return b.array();
    }

    /** The header length field and header text of a file, read directly. */
    record RawHeader(long length, String text) {}

    static RawHeader header(Path file) throws IOException {
        byte[] all = Files.readAllBytes(file);
        long n = ByteBuffer.wrap(all, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        return new RawHeader(n, new String(all, 8, Math.toIntExact(n), StandardCharsets.UTF_8));
    }
}
