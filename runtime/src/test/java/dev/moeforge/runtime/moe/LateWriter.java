package dev.moeforge.runtime.moe;

import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.kernel.ModuleResource;

/**
 * Writes a kernel's input late in a chain ({@code late_copy} in late_writer.cu): the next kernel,
 * launched overlapping this one, starts while its input still holds the old bytes, so a kernel that
 * reads its input before its wait for the previous kernel gives a different answer than alone. The
 * two run as one CUDA graph ({@link #chain}): launched eagerly on a stream, the H200 started the next
 * kernel only after the copy (LateWriterGpuTest), and the check could not fail.
 */
final class LateWriter {
    /** Long enough for the next kernel's blocks to be resident and past their first loads before the copy. */
    static final long DELAY_NS = 20_000;

    private final CudaFunction copy;
    private final CudaFunction earlyCopy;
    private final CudaFunction earlyCopyCluster;

    LateWriter(KernelRuntime runtime) {
        var module = runtime.loadResource(new ModuleResource(LateWriter.class, "late_writer.cu"));
        copy = module.function("late_copy");
        earlyCopy = module.function("early_copy");
        earlyCopyCluster = module.function("early_copy_cluster");
    }

    /**
     * A kernel that reads {@code src} before its wait on purpose and copies it to {@code dst},
     * launched overlapping the previous kernel; in clusters of 8 blocks with {@code clusters}.
     */
    void enqueueEarlyReader(CudaStream stream, DeviceBuffer src, DeviceBuffer dst, boolean clusters) {
        long words = src.bytes() / 4;
        int blocks = (int) Math.ceilDiv(Math.ceilDiv(words, 256L), 8) * 8;
        (clusters ? earlyCopyCluster : earlyCopy).launch(LaunchOrder.OVERLAPPING_PREVIOUS, blocks, 1, 1, 256, 1, 1, 0, stream, src,
                dst, words);
    }

    /**
     * Runs the late copy of {@code src} into {@code dst} and then what {@code next} enqueues (launched
     * overlapping the copy) as one graph, and waits for it.
     */
    void chain(CudaStream stream, DeviceBuffer src, DeviceBuffer dst, Runnable next) {
        try (CudaGraph graph = CudaGraph.capture(stream, () -> {
            enqueue(stream, src, dst);
            next.run();
        })) {
            graph.launch(stream);
            stream.synchronize();
        }
    }

    /** Enqueues the copy of {@code src} into {@code dst} (same size, whole 32-bit words), {@link #DELAY_NS} after it starts. */
    private void enqueue(CudaStream stream, DeviceBuffer src, DeviceBuffer dst) {
        if (src.bytes() != dst.bytes() || src.bytes() % 4 != 0) {
            throw new IllegalArgumentException("late copy of " + src + " into " + dst + ": same size in whole words");
        }
        long words = src.bytes() / 4;
        int blocks = (int) Math.clamp(Math.ceilDiv(words, 256L), 1, 1024);
        copy.launch(blocks, 1, 1, 256, 1, 1, 0, stream, src, dst, words, DELAY_NS);
    }
}
