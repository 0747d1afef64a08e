package dev.moeforge.runtime.cuda;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import java.util.Arrays;
import java.util.Optional;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Compile, load, launch, capture and time a tiny kernel on the real device. Skipped where there is
 * no GPU; on a GPU host a missing nvcc or a device MoeForge has no target for fails it, as it would
 * fail every other GPU test.
 */
@RequiresGpu
class GpuSmokeTest {

    private static final String KERNELS = """
            extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            extern "C" __global__ void iota(int* out, long long base, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) out[i] = (int) (base + i);
            }
            // Reverses each block's slice through dynamic shared memory placed past 48 KiB,
            // which only works after the opt-in attribute is set.
            extern "C" __global__ void reverse_blocks(const float* in, float* out) {
                extern __shared__ float smem[];
                float* slot = smem + 12288;
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                slot[threadIdx.x] = in[i];
                __syncthreads();
                out[i] = slot[blockDim.x - 1 - threadIdx.x];
            }
            """;
    private static final int N = 1000;
    private static final int BLOCK = 128;
    private static final int GRID = (N + BLOCK - 1) / BLOCK;

    private static CudaContext context;
    private static CudaModule module;

    @BeforeAll
    static void setUp() {
        assertTrue(NvccCompiler.locate().isPresent(), "nvcc not found on a GPU host");
        context = CudaContext.create(0);
        Optional<Target> target = context.target();
        assertTrue(target.isPresent(), "no MoeForge target for compute capability " + context.computeCapability());
        CompileResult compiled = new NvccCompiler().compile(CudaSource.of("smoke.cu", KERNELS), target.get());
        module = CudaModule.load(compiled.cubin());
    }

    @AfterAll
    static void tearDown() {
        if (module != null) {
            module.close();
        }
        if (context != null) {
            context.close();
        }
    }

    @Test
    void deviceProperties() {
        assertTrue(!context.deviceName().isBlank());
        assertTrue(context.computeCapability() >= 90, () -> "cc " + context.computeCapability());
        assertTrue(context.smCount() > 0);
        assertTrue(context.l2Bytes() > 0);
        assertTrue(context.totalMemory() > 1L << 30);
        assertTrue(context.clockKhz() > 0);
        assertTrue(context.memoryClockKhz() > 0);
        assertTrue(context.driverVersion().matches("\\d+\\.\\d+"), context.driverVersion());
    }

    @Test
    void launchGraphReplayAndTiming() {
        float[] x = new float[N];
        float[] y = new float[N];
        for (int i = 0; i < N; i++) {
            x[i] = i;
            y[i] = 1;
        }
        float[] expected = new float[N];
        for (int i = 0; i < N; i++) {
            expected[i] = 2f * x[i] + 1f;
        }
        CudaFunction axpy = module.function("axpy");
        assertTrue(axpy.registers() > 0);
        assertTrue(axpy.maxThreadsPerBlock() >= BLOCK);

        try (CudaStream stream = CudaStream.create();
             DeviceBuffer dx = DeviceBuffer.allocate(DType.FP32, N);
             DeviceBuffer dy = DeviceBuffer.allocate(DType.FP32, N)) {
            dx.copyFrom(x);
            dy.copyFrom(y);
            axpy.launch(GRID, 1, 1, BLOCK, 1, 1, 0, stream, 2f, dx, dy, N);
            stream.synchronize();
            float[] out = new float[N];
            dy.copyTo(out);
            assertArrayEquals(expected, out);

            dy.copyFrom(y);
            try (CudaGraph graph = CudaGraph.capture(stream, () -> axpy.launch(GRID, 1, 1, BLOCK, 1, 1, 0, stream, 2f, dx, dy, N))) {
                // Capturing records only: y is untouched until the graph is launched.
                stream.synchronize();
                dy.copyTo(out);
                assertArrayEquals(y, out);

                graph.launch(stream);
                stream.synchronize();
                dy.copyTo(out);
                assertArrayEquals(expected, out);

                try (CudaEvent start = CudaEvent.create(); CudaEvent end = CudaEvent.create()) {
                    start.record(stream);
                    for (int i = 0; i < 10; i++) {
                        graph.launch(stream);
                    }
                    end.record(stream);
                    end.synchronize();
                    assertTrue(CudaEvent.elapsedMillis(start, end) > 0);
                }
                stream.synchronize();
                dy.copyTo(out);
                for (int i = 0; i < N; i++) {
                    assertEquals(1f + 11 * 2f * x[i], out[i], "element " + i);
                }
            }
        }
    }

    @Test
    void failedCaptureLeavesTheStreamUsable() {
        CudaFunction iota = module.function("iota");
        try (CudaStream stream = CudaStream.create(); DeviceBuffer out = DeviceBuffer.allocate(DType.INT32, N)) {
            IllegalStateException thrown = assertThrows(IllegalStateException.class, () -> CudaGraph.capture(stream, () -> {
                iota.launch(GRID, 1, 1, BLOCK, 1, 1, 0, stream, out, 0L, N);
                throw new IllegalStateException("enqueue failed");
            }));
            assertEquals("enqueue failed", thrown.getMessage());

            iota.launch(GRID, 1, 1, BLOCK, 1, 1, 0, stream, out, 7L, N);
            stream.synchronize();
            int[] host = new int[N];
            out.copyTo(host);
            assertEquals(7, host[0]);
            assertEquals(7 + N - 1, host[N - 1]);
        }
    }

    @Test
    void longArgumentAndIntCopies() {
        CudaFunction iota = module.function("iota");
        try (CudaStream stream = CudaStream.create(); DeviceBuffer out = DeviceBuffer.allocate(DType.INT32, N)) {
            out.fillWords32(-1);
            long base = (1L << 32) + 5; // the high word must be dropped by the (int) cast, not by packing
            iota.launch(GRID, 1, 1, BLOCK, 1, 1, 0, stream, out, base, N);
            stream.synchronize();
            int[] host = new int[N];
            out.copyTo(host);
            for (int i = 0; i < N; i++) {
                assertEquals(5 + i, host[i]);
            }
        }
    }

    @Test
    void dynamicSharedMemoryAboveDefaultLimit() {
        CudaFunction reverse = module.function("reverse_blocks");
        int shared = 12288 * Float.BYTES + BLOCK * Float.BYTES; // 48 KiB + one slice
        float[] in = new float[BLOCK * 4];
        for (int i = 0; i < in.length; i++) {
            in[i] = i;
        }
        try (CudaStream stream = CudaStream.create();
             DeviceBuffer din = DeviceBuffer.allocate(DType.FP32, in.length);
             DeviceBuffer dout = DeviceBuffer.allocate(DType.FP32, in.length)) {
            LaunchFailure refused = assertThrows(LaunchFailure.class,
                    () -> reverse.launch(4, 1, 1, BLOCK, 1, 1, shared, stream, din, dout));
            assertTrue(refused.getMessage().contains("reverse_blocks") && refused.getMessage().contains("block (128, 1, 1)"),
                    refused.getMessage());

            reverse.setMaxDynamicSharedBytes(shared);
            din.copyFrom(in);
            reverse.launch(4, 1, 1, BLOCK, 1, 1, shared, stream, din, dout);
            stream.synchronize();
            float[] out = new float[in.length];
            dout.copyTo(out);
            for (int b = 0; b < 4; b++) {
                for (int t = 0; t < BLOCK; t++) {
                    assertEquals(in[b * BLOCK + BLOCK - 1 - t], out[b * BLOCK + t]);
                }
            }
        }
    }

    @Test
    void bf16PoisonAndBufferChecks() {
        DeviceBuffer buffer = DeviceBuffer.allocate(DType.BF16, 5);
        buffer.fillBytes16((short) 0x7FC0);
        short[] host = new short[5];
        buffer.copyTo(host);
        short[] nan = new short[5];
        Arrays.fill(nan, (short) 0x7FC0);
        assertArrayEquals(nan, host);
        assertTrue(buffer.devicePointerValue() != 0);

        // a shorter host array covers the buffer's prefix; a longer one is refused
        buffer.copyFrom(new short[] {1, 2, 3});
        short[] prefix = new short[3];
        buffer.copyTo(prefix);
        assertArrayEquals(new short[] {1, 2, 3}, prefix);
        IllegalArgumentException tooLong = assertThrows(IllegalArgumentException.class, () -> buffer.copyFrom(new short[6]));
        assertTrue(tooLong.getMessage().contains("short[6]"), tooLong.getMessage());
        assertThrows(IllegalArgumentException.class, () -> buffer.fillWords32(0)); // 10 bytes
        assertThrows(IllegalArgumentException.class, () -> module.function("axpy").launch(1, 1, 1, 1, 1, 1, 0, null, "x"));

        buffer.close();
        buffer.close();
        assertThrows(IllegalStateException.class, () -> buffer.copyTo(host));
        assertThrows(IllegalStateException.class, buffer::pointer);
    }
}
