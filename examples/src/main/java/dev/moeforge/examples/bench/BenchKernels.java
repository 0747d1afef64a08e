package dev.moeforge.examples.bench;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaModule;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.kernel.ModuleResource;

/** The benchmark's hand-written helper kernels (bench_kernels.cu), compiled through the kernel cache. */
public final class BenchKernels implements AutoCloseable {
    /** The module of these kernels. */
    public static final ModuleResource MODULE = new ModuleResource(BenchKernels.class, "bench_kernels.cu");
    private final CudaFunction readBandwidth;
    private final CudaFunction fillUniformBf16;
    private final int smCount;

    public BenchKernels(KernelRuntime runtime) {
        CudaModule module = runtime.loadResource(MODULE);
        this.readBandwidth = module.function("read_bandwidth");
        this.fillUniformBf16 = module.function("fill_uniform_bf16");
        this.smCount = runtime.context().smCount();
    }

    /** Fills a bf16 buffer with values uniform in [-scale, scale) from (seed, index); no host transfer. */
    public void fillUniform(CudaStream stream, DeviceBuffer buffer, long seed, float scale) {
        if (buffer.dtype() != DType.BF16) {
            throw new IllegalArgumentException("fillUniform needs a bf16 buffer, got " + buffer.dtype().text());
        }
        fillUniformBf16.launch(smCount * 8, 1, 1, 256, 1, 1, 0, stream, buffer, buffer.elements(), seed, scale);
    }

    /** Enqueues one read of the first {@code bytes} of {@code source} (a multiple of 16). */
    public void read(CudaStream stream, DeviceBuffer source, long bytes, DeviceBuffer sink) {
        readBandwidth.launch(sinkBlocks(), 1, 1, 512, 1, 1, 0, stream, source, bytes / 16, sink);
    }

    /**
     * The device's read bandwidth in bytes per second: the median over {@code reps} timed reads
     * of a {@code bytes}-long random buffer (several times L2, so it streams from memory).
     */
    public GpuTimer.Timing timeRead(CudaStream stream, long bytes, int warmup, int reps) {
        try (DeviceBuffer source = DeviceBuffer.allocate(DType.BF16, bytes / 2);
             DeviceBuffer sink = DeviceBuffer.allocate(DType.INT32, sinkBlocks())) {
            fillUniform(stream, source, 0x8EADL, 1.0f);
            return GpuTimer.time(stream, () -> read(stream, source, bytes, sink), warmup, reps);
        }
    }

    /** Blocks of the read kernel: four per SM of 512 threads fill an H100 (2048 threads per SM). */
    public int sinkBlocks() {
        return smCount * 4;
    }

    /** The module is the runtime's, closed with it. */
    @Override
    public void close() {
    }
}
