package dev.moeforge.runtime.cache;

import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.compile.PtxasReport;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Stands in for nvcc so cache behaviour is tested quickly and without a toolkit: counts compiles,
 * optionally takes a while (to make concurrent requests overlap) and returns a cubin that is a
 * deterministic function of its input.
 */
class CountingCompiler extends NvccCompiler {

    final AtomicInteger compiles = new AtomicInteger();
    private final Duration delay;

    CountingCompiler() {
        this(Duration.ZERO);
    }

    CountingCompiler(Duration delay) {
        super(Path.of("/nonexistent/nvcc"), Duration.ofSeconds(1));
        this.delay = delay;
    }

    @Override
    public String version() {
        return "Cuda compilation tools, release 0.0, V0.0.0 (fake)";
    }

    @Override
    public CompileResult compile(CudaSource source, Target target) {
        compiles.incrementAndGet();
        try {
            Thread.sleep(delay);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        byte[] cubin = ("fake cubin for " + target.text() + "\n" + source.code()).getBytes(StandardCharsets.UTF_8);
        String log = """
                ptxas info    : Compiling entry function 'k' for '%s'
                ptxas info    : Function properties for k
                    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
                ptxas info    : Used 10 registers, used 0 barriers
                """.formatted(target.text());
        return new CompileResult(cubin, PtxasReport.parse(log), log, List.of("fake-nvcc", source.fileName()));
    }
}
