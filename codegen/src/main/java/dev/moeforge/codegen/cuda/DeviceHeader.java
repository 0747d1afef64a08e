package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.schedule.DeviceLibrary;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The hand-written device library the generated kernels include, read from the classpath: the
 * core every kernel includes, and a family's own header on top of it. A kernel's headers are part
 * of its cache key, so a family's header changes the keys of that family's kernels alone.
 */
public enum DeviceHeader {
    CORE("moeforge_device.cuh"),
    EXPERT_CENTRIC("moeforge_expert_centric.cuh");

    /** The core header's file name. */
    public static final String FILE_NAME = "moeforge_device.cuh";

    private final String fileName;
    private final String text;

    DeviceHeader(String fileName) {
        this.fileName = fileName;
        this.text = load(fileName);
    }

    public String fileName() {
        return fileName;
    }

    public String text() {
        return text;
    }

    /** The core header's text. */
    public static String content() {
        return CORE.text;
    }

    /** The header a kernel of {@code library} includes. */
    public static DeviceHeader of(DeviceLibrary library) {
        return switch (library) {
            case CORE -> CORE;
            case EXPERT_CENTRIC -> EXPERT_CENTRIC;
        };
    }

    /** This header and those it includes, by file name: what a kernel including it compiles with. */
    public Map<String, String> files() {
        Map<String, String> files = new LinkedHashMap<>();
        files.put(CORE.fileName, CORE.text);
        if (this != CORE) {
            files.put(fileName, text);
        }
        return files;
    }

    private static String load(String file) {
        try (InputStream in = DeviceHeader.class.getResourceAsStream(file)) {
            if (in == null) {
                throw new IllegalStateException(file + " is missing from the codegen jar");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
