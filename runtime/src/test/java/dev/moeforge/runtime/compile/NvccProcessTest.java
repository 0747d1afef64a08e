package dev.moeforge.runtime.compile;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.Target;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Process handling, with shell scripts standing in for nvcc so no toolkit is needed. */
class NvccProcessTest {

    @TempDir
    Path dir;

    private Path script(String body) throws IOException {
        Path script = dir.resolve("fake-nvcc");
        Files.writeString(script, "#!/bin/sh\n" + body + "\n");
        Files.setPosixFilePermissions(script, PosixFilePermissions.fromString("rwxr-xr-x"));
        return script;
    }

    @Test
    void hangingCompilerIsKilledAtTheTimeout() throws IOException {
        NvccCompiler nvcc = new NvccCompiler(script("sleep 30"), Duration.ofMillis(300));
        long start = System.nanoTime();

        CompileFailure failure = assertThrows(CompileFailure.class,
                () -> nvcc.compile(new CudaSource("k.cu", "", Map.of(), "spec text"), Target.SM_90A));

        assertTrue(Duration.ofNanos(System.nanoTime() - start).toSeconds() < 15);
        assertTrue(failure.getMessage().startsWith("nvcc timed out after PT0.3S compiling k.cu for sm_90a"), failure.getMessage());
        assertTrue(failure.getMessage().contains("spec text"), failure.getMessage());
    }

    @Test
    void unparsableFailureQuotesTheRawOutput() throws IOException {
        NvccCompiler nvcc = new NvccCompiler(script("echo 'something odd happened'; exit 3"), Duration.ofSeconds(30));

        CompileFailure failure = assertThrows(CompileFailure.class,
                () -> nvcc.compile(CudaSource.of("k.cu", ""), Target.SM_100A));

        assertTrue(failure.getMessage().startsWith("nvcc failed (exit 3) compiling k.cu for sm_100a"), failure.getMessage());
        assertTrue(failure.getMessage().contains("nvcc output:\nsomething odd happened"), failure.getMessage());
        assertEquals("something odd happened\n", failure.log());
    }

    @Test
    void versionIsCachedReleaseLine() throws IOException {
        Path counter = dir.resolve("calls");
        NvccCompiler nvcc = new NvccCompiler(script("echo x >> " + counter + "\n"
                + "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release 13.0, V13.0.88'"),
                Duration.ofSeconds(30));

        assertEquals("Cuda compilation tools, release 13.0, V13.0.88", nvcc.version());
        assertEquals("Cuda compilation tools, release 13.0, V13.0.88", nvcc.version());
        assertEquals(1, Files.readAllLines(counter).size());
    }

    @Test
    void missingExecutableIsACompileFailure() {
        NvccCompiler nvcc = new NvccCompiler(dir.resolve("no-such-nvcc"), Duration.ofSeconds(5));

        CompileFailure failure = assertThrows(CompileFailure.class, () -> nvcc.compile(CudaSource.of("k.cu", ""), Target.SM_90A));
        assertTrue(failure.getMessage().contains("no-such-nvcc"), failure.getMessage());
        assertThrows(CompileFailure.class, nvcc::version);
    }
}
