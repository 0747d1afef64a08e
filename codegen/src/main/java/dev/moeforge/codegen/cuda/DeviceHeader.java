package dev.moeforge.codegen.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** The hand-written device library every generated kernel includes, read from the classpath. */
public final class DeviceHeader {
    public static final String FILE_NAME = "moeforge_device.cuh";
    private static final String CONTENT = load();

    private DeviceHeader() {}

    public static String content() {
        return CONTENT;
    }

    private static String load() {
        try (InputStream in = DeviceHeader.class.getResourceAsStream(FILE_NAME)) {
            if (in == null) {
                throw new IllegalStateException(FILE_NAME + " is missing from the codegen jar");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
