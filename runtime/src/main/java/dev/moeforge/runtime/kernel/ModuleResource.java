package dev.moeforge.runtime.kernel;

import dev.moeforge.codegen.cuda.DeviceHeader;
import dev.moeforge.runtime.compile.CudaSource;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;

/**
 * A hand-written CUDA module shipped as a resource beside the class that loads it, compiled
 * through the kernel cache like a generated kernel (so `moeforge precompile --modules` can put it in
 * a cache ahead of a run).
 *
 * @param owner    the class whose jar holds the file, next to it in its package
 * @param fileName the file's name, e.g. {@code moeforge_decoder.cu}
 * @param includes the device library the file includes (with the headers it includes), if any
 */
public record ModuleResource(Class<?> owner, String fileName, Optional<DeviceHeader> includes) {

    /** A self-contained file. */
    public ModuleResource(Class<?> owner, String fileName) {
        this(owner, fileName, Optional.empty());
    }

    /** The file's text as the cache compiles it. */
    public CudaSource source() {
        try (InputStream in = owner.getResourceAsStream(fileName)) {
            if (in == null) {
                throw new IllegalStateException(fileName + " is missing from the jar of " + owner.getName());
            }
            return new CudaSource(fileName, new String(in.readAllBytes(), StandardCharsets.UTF_8),
                    includes.map(DeviceHeader::files).orElse(Map.of()), "");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
