package dev.moeforge.runtime.compile;

import java.nio.file.Path;
import java.util.Collections;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * One CUDA translation unit as handed to {@link NvccCompiler}: a {@code .cu} file, the headers it
 * {@code #include}s by quoted name, and the canonical spec text it was generated from.
 *
 * <p>The headers are written next to the source before nvcc runs, so {@code #include "name"}
 * resolves without include paths. Names are relative paths that must stay inside that directory.
 *
 * @param fileName the {@code .cu} file name nvcc sees and prints in its diagnostics, e.g. {@code moe_decode.cu}
 * @param code     the source text
 * @param headers  header name (e.g. {@code moeforge_device.cuh}) to content; kept sorted by name
 * @param specText the canonical spec the source came from, quoted in compile errors; empty for
 *                 hand-written sources
 */
public record CudaSource(String fileName, String code, Map<String, String> headers, String specText) {

    public CudaSource {
        Objects.requireNonNull(code, "code");
        Objects.requireNonNull(specText, "specText");
        requireRelativeName(fileName, "fileName");
        if (!fileName.endsWith(".cu")) {
            throw new IllegalArgumentException("fileName must end in .cu (nvcc picks the language from it): " + fileName);
        }
        if (fileName.contains("/")) {
            throw new IllegalArgumentException("fileName must be a plain file name: " + fileName);
        }
        // A sorted copy makes iteration order, and so the cache key, independent of the caller's map.
        TreeMap<String, String> sorted = new TreeMap<>();
        headers.forEach((name, content) -> {
            requireRelativeName(name, "header name");
            sorted.put(name, Objects.requireNonNull(content, () -> "content of header " + name));
        });
        headers = Collections.unmodifiableSortedMap(sorted);
    }

    /** A source with no headers and no spec, e.g. a hand-written test kernel. */
    public static CudaSource of(String fileName, String code) {
        return new CudaSource(fileName, code, Map.of(), "");
    }

    /** What the generator emitted for a spec: its file, source, headers and canonical spec text. */
    public static CudaSource of(dev.moeforge.codegen.cuda.GeneratedKernel kernel) {
        return new CudaSource(kernel.fileName(), kernel.source(), kernel.headers(), kernel.specText());
    }

    private static void requireRelativeName(String name, String what) {
        Objects.requireNonNull(name, what);
        Path p = Path.of(name);
        if (name.isBlank() || p.isAbsolute() || !p.normalize().equals(p) || p.startsWith("..")) {
            throw new IllegalArgumentException(what + " must be a relative path inside the build directory: '" + name + "'");
        }
    }
}
