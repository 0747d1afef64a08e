package dev.moeforge.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A tensor past 2 GB, in a sparse file so the test costs neither time nor disk. */
class SafetensorsLargeFileTest {

    private static final long SIZE = (1L << 31) + 4096;

    @TempDir
    Path dir;

    @Test
    void offsetsPastTwoGigabytes() throws IOException {
        String json = "{\"big\":{\"dtype\":\"U8\",\"shape\":[" + SIZE + "],\"data_offsets\":[0," + SIZE + "]}}";
        byte[] header = (json + " ".repeat((8 - json.length() % 8) % 8)).getBytes(StandardCharsets.UTF_8);
        long dataStart = 8 + header.length;
        Path file = dir.resolve("big.safetensors");
        long[] marks = {0, (1L << 31) - 1, 1L << 31, (1L << 31) + 5, SIZE - 1};
        try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
            raf.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(header.length).array());
            raf.write(header);
            raf.setLength(dataStart + SIZE); // the rest reads as zeros and takes no disk
            for (int i = 0; i < marks.length; i++) {
                raf.seek(dataStart + marks[i]);
                raf.write(0x40 + i);
            }
        }
        assertEquals(dataStart + SIZE, Files.size(file));

        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            TensorInfo t = f.tensor("big");
            assertEquals(List.of(SIZE), t.shape());
            assertEquals(SIZE, t.byteSize());
            assertEquals(SIZE, t.end());
            MemorySegment data = f.data("big");
            assertEquals(SIZE, data.byteSize());
            for (int i = 0; i < marks.length; i++) {
                assertEquals(0x40 + i, data.get(ValueLayout.JAVA_BYTE, marks[i]), "byte at " + marks[i]);
            }
            assertEquals(0, data.get(ValueLayout.JAVA_BYTE, (1L << 31) + 4));
            byte[] tail = data.asSlice(SIZE - 8, 8).toArray(ValueLayout.JAVA_BYTE);
            assertEquals(0x40 + marks.length - 1, tail[7]);
            // Too big for an array: the copying helper must refuse, not try to allocate 2 GB.
            var e = assertThrows(CheckpointException.class, () -> f.bytes("big"));
            assertTrue(e.getMessage().contains("'big'") && e.getMessage().contains("data()"), e.getMessage());
        }
    }
}
