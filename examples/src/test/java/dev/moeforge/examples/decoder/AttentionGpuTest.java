package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The decoder's attention kernels against attention in FP64 on fresh random q, k and v: the
 * prompt's on the tensor cores ({@code attention_prefill_<head_dim>}: causal over a chunk's rows)
 * and the decode steps' ({@code attention_decode_<head_dim>} by head, {@code
 * attention_decode_group_<head_dim>} by kv group on the tensor cores: one row per sequence, its
 * positions cut into slices that the last block to finish merges). Every head size each is built
 * for, GQA groups of 1 to 16, windows and sinks.
 */
@RequiresGpu
class AttentionGpuTest extends dev.moeforge.runtime.cuda.GpuTestSession {
    /** q and P enter the tensor cores as bf16 and the output leaves as bf16. */
    private static final double RELATIVE_L2 = 1e-2;
    /** Inputs are drawn afresh each run; a failure names its case's seed. */
    private static final long RUN_SEED = System.nanoTime();

    /** Chunks that start at position 0 and past it, q tiles cut short. */
    @ParameterizedTest
    @CsvSource({
        // head_dim, heads, kv_heads, rows, first position, window, sinks
        "16, 4, 2, 70, 0, 0, false",
        "32, 4, 2, 100, 37, 0, false",
        "64, 8, 1, 130, 10, 16, true",
        "64, 64, 8, 65, 0, 128, true",
        "128, 4, 4, 200, 64, 0, false",
        "128, 32, 4, 150, 300, 0, false",
        "128, 8, 2, 1, 90, 5, true",
    })
    void promptChunk(int headDim, int heads, int kvHeads, int rows, int firstPosition, int window, boolean sinks) {
        long seed = RUN_SEED + headDim * 1_000_003L + rows * 31L + firstPosition;
        SplittableRandom random = new SplittableRandom(seed);
        int positions = firstPosition + rows;
        int kn = kvHeads * headDim;
        float[] q = gaussian(random, rows * heads * headDim);
        short[] k = bf16(gaussian(random, positions * kn));
        short[] v = bf16(gaussian(random, positions * kn));
        float[] sink = gaussian(random, heads);
        double scale = 1 / Math.sqrt(headDim);

        double[] want = new double[rows * heads * headDim];
        for (int t = 0; t < rows; t++) {  // the kernel rounds q to bf16 for the tensor cores
            attendRow(q, t, true, k, v, 0, firstPosition + t, headDim, heads, kvHeads, window, sinks ? sink : null, want);
        }

        CudaFunction attention = runtime.loadResource(GpuDecoder.MODULE).function("attention_prefill_" + headDim);
        int shared = GpuDecoder.promptAttentionBytes(headDim);
        if (shared > 48 * 1024) {
            attention.setMaxDynamicSharedBytes(shared);
        }
        try (DeviceBuffer dq = DeviceBuffer.allocate(DType.FP32, q.length);
             DeviceBuffer dk = DeviceBuffer.allocate(DType.BF16, k.length);
             DeviceBuffer dv = DeviceBuffer.allocate(DType.BF16, v.length);
             DeviceBuffer ds = DeviceBuffer.allocate(DType.FP32, heads);
             DeviceBuffer out = DeviceBuffer.allocate(DType.BF16, want.length)) {
            dq.copyFrom(q);
            dk.copyFrom(k);
            dv.copyFrom(v);
            ds.copyFrom(sink);
            out.fillBytes16(Bf16.NAN);
            attention.launch(heads, Math.ceilDiv(rows, GpuDecoder.PROMPT_ATTENTION_ROWS), 1, 128, 1, 1, shared, stream, dq, dk, dv,
                    sinks ? ds : (Object) 0L, out, rows, firstPosition, heads, kvHeads, window, (float) scale);
            stream.synchronize();
            short[] got = new short[want.length];
            out.copyTo(got);
            ErrorStats e = ErrorStats.of(want, got);
            assertTrue(e.nonFinite() == 0 && e.relativeL2() < RELATIVE_L2, "head_dim " + headDim + ", " + rows + " rows from position "
                    + firstPosition + ", seed " + seed + ": " + e);
        }
    }

    /**
     * Sequences at different positions (the batch's rows), with one slice, several (some empty
     * where the slices outnumber the positions) and more slices than positions; each sequence
     * its own cache.
     */
    @ParameterizedTest
    @CsvSource({
        // head_dim, heads, kv_heads, batch, context, slices, window, sinks
        "16, 4, 2, 3, 40, 1, 0, false",
        "32, 4, 2, 2, 70, 5, 0, true",
        "64, 64, 8, 2, 300, 16, 128, true",
        "128, 32, 4, 1, 600, 16, 0, false",
        "128, 8, 1, 4, 130, 64, 0, false",
        "256, 4, 2, 2, 90, 3, 7, true",
    })
    void decodeStep(int headDim, int heads, int kvHeads, int batch, int context, int slices, int window, boolean sinks) {
        checkDecode("attention_decode_" + headDim, heads, 0, false, headDim, heads, kvHeads, batch, context, slices, window, sinks);
    }

    /**
     * The same in clusters of the head's 8 slices, merged in distributed shared memory: fewer positions
     * than slices, one round of the cluster's loads and a full one (512), several sequences, windows and sinks.
     */
    @ParameterizedTest
    @CsvSource({
        // head_dim, heads, kv_heads, batch, context, window, sinks
        "16, 4, 2, 3, 5, 0, false",
        "32, 4, 2, 2, 70, 0, true",
        "64, 64, 8, 2, 300, 128, true",
        "128, 32, 4, 1, 512, 0, false",
        "128, 8, 1, 4, 130, 0, false",
        "128, 32, 4, 3, 512, 100, true",
        "256, 4, 2, 2, 90, 7, true",
    })
    void decodeStepInClusters(int headDim, int heads, int kvHeads, int batch, int context, int window, boolean sinks) {
        checkDecode("attention_decode_cluster_" + headDim, heads, 0, false, headDim, heads, kvHeads, batch, context,
                GpuDecoder.CLUSTER_ATTENTION_SLICES, window, sinks);
    }

    /**
     * The same by kv group on the tensor cores: groups of 2 to 16 heads (16 fills the tile, 3 pads
     * it), one slice, several with partial and empty 64-key tiles, a slice of five tiles (the
     * two-stage pipeline), a window and sinks; q is rounded to bf16 as the kernel's tiles take it.
     */
    @ParameterizedTest
    @CsvSource({
        // head_dim, heads, kv_heads, batch, context, slices, window, sinks
        "16, 4, 2, 3, 40, 1, 0, false",
        "32, 8, 2, 2, 70, 5, 0, true",
        "64, 64, 8, 2, 300, 16, 128, true",
        "128, 32, 4, 1, 600, 16, 0, false",
        "128, 32, 2, 4, 130, 64, 0, false",
        "128, 12, 4, 2, 200, 3, 0, true",
        "64, 16, 8, 1, 1000, 64, 0, false",
        "128, 32, 4, 3, 520, 2, 0, false",
    })
    void decodeStepByKvGroup(int headDim, int heads, int kvHeads, int batch, int context, int slices, int window, boolean sinks) {
        checkDecode("attention_decode_group_" + headDim, kvHeads, GpuDecoder.groupAttentionBytes(headDim), true, headDim, heads, kvHeads,
                batch, context, slices, window, sinks);
    }

    private void checkDecode(String kernel, int blocks, int shared, boolean roundQ, int headDim, int heads, int kvHeads, int batch,
                             int context, int slices, int window, boolean sinks) {
        long seed = RUN_SEED + headDim * 7_000_003L + context * 31L + slices;
        SplittableRandom random = new SplittableRandom(seed);
        int kn = kvHeads * headDim;
        float[] q = gaussian(random, batch * heads * headDim);
        short[] k = bf16(gaussian(random, batch * context * kn));
        short[] v = bf16(gaussian(random, batch * context * kn));
        float[] sink = gaussian(random, heads);
        int[] positions = random.ints(batch, 0, context).toArray();
        positions[0] = context - 1;
        double scale = 1 / Math.sqrt(headDim);
        double[] want = new double[batch * heads * headDim];
        for (int b = 0; b < batch; b++) {
            attendRow(q, b, roundQ, k, v, b * context, positions[b], headDim, heads, kvHeads, window, sinks ? sink : null, want);
        }
        CudaFunction attention = runtime.loadResource(GpuDecoder.MODULE).function(kernel);
        if (shared > 48 * 1024) {
            attention.setMaxDynamicSharedBytes(shared);
        }
        try (DeviceBuffer dq = DeviceBuffer.allocate(DType.FP32, q.length);
             DeviceBuffer dk = DeviceBuffer.allocate(DType.BF16, k.length);
             DeviceBuffer dv = DeviceBuffer.allocate(DType.BF16, v.length);
             DeviceBuffer dpos = DeviceBuffer.allocate(DType.INT32, batch);
             DeviceBuffer ds = DeviceBuffer.allocate(DType.FP32, heads);
             DeviceBuffer parts = DeviceBuffer.allocate(DType.FP32, (long) batch * heads * slices * (headDim + 2));
             DeviceBuffer tickets = DeviceBuffer.allocate(DType.INT32, (long) batch * heads);
             DeviceBuffer out = DeviceBuffer.allocate(DType.BF16, want.length)) {
            dq.copyFrom(q);
            dk.copyFrom(k);
            dv.copyFrom(v);
            dpos.copyFrom(positions);
            ds.copyFrom(sink);
            tickets.fillWords32(0);
            for (int run = 0; run < 2; run++) {  // the second run finds the tickets the first left at zero
                out.fillBytes16(Bf16.NAN);
                attention.launch(blocks, slices, batch, GpuDecoder.DECODE_ATTENTION_THREADS, 1, 1, shared, stream, dq, dk, dv, dpos, sinks ? ds : (Object) 0L, parts, tickets, out,
                        heads, kvHeads, context, window, (float) scale);
                stream.synchronize();
                short[] got = new short[want.length];
                out.copyTo(got);
                ErrorStats e = ErrorStats.of(want, got);
                assertTrue(e.nonFinite() == 0 && e.relativeL2() < RELATIVE_L2, kernel + ", " + heads + " heads, " + slices + " slices, seed "
                        + seed + ", run " + run + ": " + e);
            }
        }
    }

    /**
     * Row {@code row}'s attention for every head, in FP64, into {@code want}: its q (rounded to bf16
     * where {@code roundQ}) against the cache rows from {@code firstCacheRow} at positions
     * max(0, pos - window + 1) .. pos (window 0: all), scaled by 1/sqrt(head_dim), each head's sink
     * in the denominator where {@code sinks} is given.
     */
    private static void attendRow(float[] q, int row, boolean roundQ, short[] k, short[] v, int firstCacheRow, int pos, int headDim,
                                  int heads, int kvHeads, int window, float[] sinks, double[] want) {
        int kn = kvHeads * headDim;
        double scale = 1 / Math.sqrt(headDim);
        int lo = window > 0 ? Math.max(0, pos - window + 1) : 0;
        for (int h = 0; h < heads; h++) {
            int kvh = h / (heads / kvHeads);
            double[] scores = new double[pos - lo + 1];
            double top = sinks != null ? sinks[h] : Double.NEGATIVE_INFINITY;
            for (int j = lo; j <= pos; j++) {
                double dot = 0;
                for (int d = 0; d < headDim; d++) {
                    float qd = q[(row * heads + h) * headDim + d];
                    dot += (roundQ ? Bf16.toFloat(Bf16.fromFloat(qd)) : qd) * Bf16.toFloat(k[(firstCacheRow + j) * kn + kvh * headDim + d]);
                }
                scores[j - lo] = dot * scale;
                top = Math.max(top, scores[j - lo]);
            }
            double denominator = sinks != null ? Math.exp(sinks[h] - top) : 0;
            double[] sum = new double[headDim];
            for (int j = lo; j <= pos; j++) {
                double p = Math.exp(scores[j - lo] - top);
                denominator += p;
                for (int d = 0; d < headDim; d++) {
                    sum[d] += p * Bf16.toFloat(v[(firstCacheRow + j) * kn + kvh * headDim + d]);
                }
            }
            for (int d = 0; d < headDim; d++) {
                want[(row * heads + h) * headDim + d] = sum[d] / denominator;
            }
        }
    }

    private static float[] gaussian(SplittableRandom random, int n) {
        float[] out = new float[n];
        for (int i = 0; i < n; i++) {
            // Box-Muller from two uniforms
            out[i] = (float) (Math.sqrt(-2 * Math.log(1 - random.nextDouble())) * Math.cos(2 * Math.PI * random.nextDouble()));
        }
        return out;
    }

    private static short[] bf16(float[] values) {
        short[] out = new short[values.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = Bf16.fromFloat(values[i]);
        }
        return out;
    }
}
