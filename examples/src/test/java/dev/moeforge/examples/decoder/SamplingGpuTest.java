package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.HashSet;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Top-k and top-p on the device against the host's {@link Sampler#kept}: {@code sample_cut}'s prefix
 * of each sequence's logits on fresh random rows (ties planted where the cut falls, a NaN, rows
 * narrower than the cluster's blocks and as wide as Qwen3's vocabulary), and {@code pick_next}'s draws through
 * that cut: every pick inside it, a cut of one the argmax, and the draws' frequencies those of the
 * kept tokens' renormalised softmax.
 */
@RequiresGpu
class SamplingGpuTest extends dev.moeforge.runtime.cuda.GpuTestSession {
    private static final int BATCH = 3;
    /** The device sums 40-bit fixed-point masses of float exponentials: its top-p is the host's for some p' this close to p. */
    private static final double TOP_P_SLACK = 1e-5;

    @ParameterizedTest(name = "vocab {0}, sd {1}, T {2}, top-k {3}, top-p {4}")
    @CsvSource({
        "151936, 1, 1.0, 50, 1",
        "151936, 4, 0.7, 0, 0.9",
        "151936, 2, 1.3, 40, 0.5",
        "151936, 3, 1.0, 1, 1",
        "151936, 1, 1.0, 0, 0.001",
        "151936, 1, 0.8, 200000, 0.95",
        "1000, 2, 1.0, 7, 1",
        "1000, 0.5, 2.0, 0, 0.3",
        "33, 1, 1.0, 5, 0.8",
        "33, 1, 1.0, 40, 0.99",
    })
    void theCutIsTheHostSamplersPrefix(int vocab, double sd, double temperature, int topK, double topP) {
        long seed = System.nanoTime();
        SplittableRandom random = new SplittableRandom(seed);
        float[] logits = new float[BATCH * vocab];
        for (int b = 0; b < BATCH; b++) {
            float[] row = randomRow(random, vocab, sd, topK);
            System.arraycopy(row, 0, logits, b * vocab, vocab);
        }
        Sampler.Options options = new Sampler.Options(temperature, topK, topP, 1);
        int[] cut = cut(logits, vocab, options);
        for (int b = 0; b < BATCH; b++) {
            float[] row = java.util.Arrays.copyOfRange(logits, b * vocab, (b + 1) * vocab);
            Sampler.Kept host = Sampler.kept(row, options);
            int count = 0;
            for (int i = 0; i < vocab; i++) {
                count += inside(row[i], i, cut[2 * b], cut[2 * b + 1]) ? 1 : 0;
            }
            Set<Integer> prefix = new HashSet<>();
            for (int i = 0; i < count; i++) {
                prefix.add(host.order()[i]);
            }
            for (int i = 0; i < vocab; i++) {
                assertEquals(prefix.contains(i), inside(row[i], i, cut[2 * b], cut[2 * b + 1]),
                        "seed " + seed + ", sequence " + b + ": the device keeps a prefix of the host's order; token " + i);
            }
            if (topP == 1) {
                assertEquals(host.count(), count, "seed " + seed + ", sequence " + b + ": top-" + topK + " keeps exactly the host's tokens");
            } else {
                int fewest = Sampler.kept(row, new Sampler.Options(temperature, topK, topP * (1 - TOP_P_SLACK), 1)).count();
                int most = Sampler.kept(row, new Sampler.Options(temperature, topK, Math.min(1, topP * (1 + TOP_P_SLACK)), 1)).count();
                assertTrue(count >= fewest && count <= most, "seed " + seed + ", sequence " + b + ": the device keeps " + count
                        + " tokens, the host " + host.count() + " (" + fewest + " to " + most + " within the slack)");
            }
        }
    }

    @Test
    void picksStayInsideTheCutAndFollowTheKeptSoftmax() {
        int vocab = 4096;
        float[] row = new float[vocab];
        java.util.Arrays.fill(row, -2);
        row[17] = 3;
        row[4000] = 2;
        row[5] = 1;
        row[6] = 1;  // tied with 5: top-3 keeps 5, the lower index
        row[9] = Float.NaN;
        float[] logits = new float[BATCH * vocab];
        for (int b = 0; b < BATCH; b++) {
            System.arraycopy(row, 0, logits, b * vocab, vocab);
        }
        long seed = System.nanoTime();  // the draws' (a fresh one each run; the bounds are over 4.7 standard deviations)
        Sampler.Options options = new Sampler.Options(1.0, 3, 1, seed);
        int draws = 2000;
        int[][] counts = new int[BATCH][vocab];
        int[][] picks = draw(logits, vocab, options, draws);
        for (int b = 0; b < BATCH; b++) {
            for (int p : picks[b]) {
                assertTrue(p == 17 || p == 4000 || p == 5, "seed " + seed + ", sequence " + b + " drew " + p + ", outside top-3 {17, 4000, 5}");
                counts[b][p]++;
            }
            double z = Math.exp(3) + Math.exp(2) + Math.exp(1);
            int[] tokens = {17, 4000, 5};
            double[] want = {Math.exp(3) / z, Math.exp(2) / z, Math.exp(1) / z};
            for (int t = 0; t < 3; t++) {
                double got = counts[b][tokens[t]] / (double) draws;
                assertTrue(Math.abs(got - want[t]) < 0.05, "seed " + seed + ", sequence " + b + ", token " + tokens[t] + ": drawn " + got
                        + ", softmax " + want[t]);
            }
        }
        int[][] argmax = draw(logits, vocab, new Sampler.Options(1.7, 0, 1e-4, seed + 1), 50);
        for (int[] seq : argmax) {
            for (int p : seq) {
                assertEquals(17, p, "a tiny top-p keeps the largest logit alone");
            }
        }
    }

    /** N(0, sd) logits, with the value at rank topK (where the cut falls) copied to a few other tokens, and one NaN. */
    private static float[] randomRow(SplittableRandom random, int vocab, double sd, int topK) {
        float[] row = new float[vocab];
        for (int i = 0; i < vocab; i++) {
            row[i] = (float) (random.nextGaussian() * sd);
        }
        float[] sorted = row.clone();
        java.util.Arrays.sort(sorted);
        float tied = sorted[Math.max(0, vocab - Math.max(1, Math.min(topK, vocab)))];
        for (int j = 0; j < 3; j++) {
            row[random.nextInt(vocab)] = tied;
        }
        row[random.nextInt(vocab)] = Float.NaN;
        return row;
    }

    /** inside_cut on the host: above the cut's key, or equal to it at an index no later than its index. */
    private static boolean inside(float v, int i, int cutKey, int cutIndex) {
        int key = logitKey(v);
        return Integer.compareUnsigned(key, cutKey) > 0 || (key == cutKey && i <= cutIndex);
    }

    private static int logitKey(float v) {
        if (Float.isNaN(v)) {
            return 0;
        }
        int u = Float.floatToRawIntBits(v);
        return u < 0 ? ~u : u | 0x80000000;
    }

    private int[] cut(float[] logits, int vocab, Sampler.Options options) {
        CudaFunction sampleCut = runtime.loadResource(GpuDecoder.MODULE).function("sample_cut");
        try (DeviceBuffer in = DeviceBuffer.allocate(DType.FP32, logits.length);
             DeviceBuffer out = DeviceBuffer.allocate(DType.INT32, 2L * BATCH)) {
            in.copyFrom(logits);
            out.fillWords32(0xdeadbeef);
            sampleCut.launch(GpuDecoder.CUT_BLOCKS, BATCH, 1, GpuDecoder.CUT_THREADS, 1, 1, 0, stream, in, vocab, (float) options.temperature(),
                    options.topK(), (float) options.topP(), out);
            stream.synchronize();
            int[] cut = new int[2 * BATCH];
            out.copyTo(cut);
            return cut;
        }
    }

    /** draws picks per sequence through sample_cut and pick_next, one step counter value per draw. */
    private int[][] draw(float[] logits, int vocab, Sampler.Options options, int draws) {
        var module = runtime.loadResource(GpuDecoder.MODULE);
        CudaFunction sampleCut = module.function("sample_cut");
        CudaFunction pick = module.function("pick_next");
        try (DeviceBuffer in = DeviceBuffer.allocate(DType.FP32, logits.length);
             DeviceBuffer cut = DeviceBuffer.allocate(DType.INT32, 2L * BATCH);
             DeviceBuffer next = DeviceBuffer.allocate(DType.INT32, BATCH);
             DeviceBuffer positions = DeviceBuffer.allocate(DType.INT32, BATCH);
             DeviceBuffer step = DeviceBuffer.allocate(DType.INT32, 1);
             DeviceBuffer history = DeviceBuffer.allocate(DType.INT32, BATCH);
             DeviceBuffer best = DeviceBuffer.allocate(DType.INT32, 2L * BATCH);
             DeviceBuffer tickets = DeviceBuffer.allocate(DType.INT32, BATCH)) {
            in.copyFrom(logits);
            positions.fillWords32(0);
            best.fillWords32(0);
            tickets.fillWords32(0);
            sampleCut.launch(GpuDecoder.CUT_BLOCKS, BATCH, 1, GpuDecoder.CUT_THREADS, 1, 1, 0, stream, in, vocab, (float) options.temperature(),
                    options.topK(), (float) options.topP(), cut);
            int[][] picks = new int[BATCH][draws];
            int[] got = new int[BATCH];
            for (int d = 0; d < draws; d++) {
                step.copyFrom(new int[] {d});
                next.fillWords32Async(-1, stream);  // poisoned: a pick that is not written fails the checks
                pick.launch(64, BATCH, 1, 256, 1, 1, 0, stream, in, vocab, (float) options.temperature(), options.seed(), cut, next,
                        positions, step, history, 1, best, tickets);
                stream.synchronize();
                next.copyTo(got);
                for (int b = 0; b < BATCH; b++) {
                    picks[b][d] = got[b];
                }
            }
            return picks;
        }
    }
}
