package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The late writer's own check: a kernel that reads its input before its wait, launched
 * overlapping the late writer in one graph, must see the input as it was before the write. If it
 * saw the new bytes, the chain checks of the router and linear tests could not fail.
 */
@RequiresGpu
class LateWriterGpuTest extends GpuSession {

    @ParameterizedTest(name = "clusters of 8: {0}")
    @ValueSource(booleans = {false, true})
    void aKernelReadingBeforeItsWaitSeesTheOldInput(boolean clusters) {
        int words = 4096;
        SplittableRandom r = new SplittableRandom(System.nanoTime());
        int[] before = r.ints(words).toArray();
        int[] after = r.ints(words).toArray();
        LateWriter writer = new LateWriter(runtime);
        try (DeviceBuffer input = DeviceBuffer.allocate(DType.INT32, words);
             DeviceBuffer fresh = DeviceBuffer.allocate(DType.INT32, words);
             DeviceBuffer out = DeviceBuffer.allocate(DType.INT32, words)) {
            input.copyFrom(before);
            fresh.copyFrom(after);
            writer.chain(stream, fresh, input, () -> writer.enqueueEarlyReader(stream, input, out, clusters));
            int[] seen = new int[words];
            out.copyTo(seen);
            assertArrayEquals(before, seen, "the early reader saw the late writer's bytes: the kernel after it did not overlap it");
            int[] written = new int[words];
            input.copyTo(written);
            assertArrayEquals(after, written, "the late writer wrote its bytes");
        }
    }
}
