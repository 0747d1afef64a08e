package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

/**
 * Fresh random inputs for checks and benchmarks (never zeros: they hide unwritten outputs and
 * wrong indexing). Seeded, so a failure can be replayed from the seed it prints.
 */
public final class RandomInputs {
    private RandomInputs() {}

    /** Values per independently seeded chunk: the output depends on the seed, not on the thread count. */
    private static final int CHUNK = 1 << 20;

    /**
     * {@code n} bf16 values drawn from N(0, std^2), generated in parallel chunks (a gigabyte of
     * expert weights takes well under a second on a many-core host).
     */
    public static short[] bf16Normal(long seed, int n, double std) {
        short[] out = new short[n];
        int chunks = (int) ((n + (long) CHUNK - 1) / CHUNK);
        IntStream.range(0, chunks).parallel().forEach(c -> {
            SplittableRandom r = new SplittableRandom(seed * 0x9E3779B97F4A7C15L + c);
            int end = (int) Math.min(n, (long) (c + 1) * CHUNK);
            for (int i = c * CHUNK; i < end; i++) {
                out[i] = Bf16.fromDouble(r.nextGaussian() * std);
            }
        });
        return out;
    }

    /** {@code n} FP32 values drawn from N(0, std^2) (e.g. an expert bias). */
    public static float[] floatNormal(long seed, int n, double std) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] out = new float[n];
        for (int i = 0; i < n; i++) {
            out[i] = (float) (r.nextGaussian() * std);
        }
        return out;
    }

    /**
     * Each token routes to {@code topk} distinct experts drawn uniformly; its weights are a softmax
     * of Gaussian logits over the chosen experts (positive, summing to 1, as after renormalisation).
     */
    public static Routing uniformRouting(long seed, int tokens, int experts, int topk) {
        SplittableRandom r = new SplittableRandom(seed);
        int[] ids = new int[tokens * topk];
        float[] weights = new float[tokens * topk];
        int[] pool = new int[experts];
        for (int m = 0; m < tokens; m++) {
            for (int e = 0; e < experts; e++) {
                pool[e] = e;
            }
            double sum = 0;
            double[] logits = new double[topk];
            for (int j = 0; j < topk; j++) {
                int pick = j + r.nextInt(experts - j);
                int t = pool[j];
                pool[j] = pool[pick];
                pool[pick] = t;
                ids[m * topk + j] = pool[j];
                logits[j] = Math.exp(r.nextGaussian());
                sum += logits[j];
            }
            for (int j = 0; j < topk; j++) {
                weights[m * topk + j] = (float) (logits[j] / sum);
            }
        }
        return new Routing(tokens, topk, ids, weights);
    }
}
