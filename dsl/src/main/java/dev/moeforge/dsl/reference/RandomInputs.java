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

    /** How close to the requested balancedness {@link #skewedRouting} lands. */
    public static final double BALANCEDNESS_TOLERANCE = 0.02;

    /**
     * A routing whose expert load has the requested balancedness ({@link Routing#balancedness}),
     * within {@link #BALANCEDNESS_TOLERANCE}: each expert gets a popularity logit z_e ~ N(0, 1), and
     * each token takes the top k of z_e / t + g (fresh Gumbel noise g per token and expert): k
     * distinct experts drawn without replacement with probabilities softmax(z / t). The temperature t
     * is found by bisection on the drawn routing's own balancedness (the same draws for every t, so
     * the search is deterministic), hot t spreading the load, cold t piling it onto the same experts.
     * Weights as in {@link #uniformRouting}. A balancedness no temperature reaches for this batch
     * (above what uniform draws give, or below every token on the same experts) is refused with the
     * reachable range.
     */
    public static Routing skewedRouting(long seed, int tokens, int experts, int topk, double balancedness) {
        if (topk < 1 || topk > experts || tokens < 1) {
            throw new IllegalArgumentException("routing of " + tokens + " tokens x top-" + topk + " over " + experts
                    + " experts: needs tokens >= 1 and 1 <= topk <= experts");
        }
        Draws d = Draws.of(seed, tokens, experts, topk);
        double hot = HOT;
        double cold = COLD;
        Routing high = d.routing(hot);
        Routing low = d.routing(cold);
        double max = high.balancedness(experts);
        double min = low.balancedness(experts);
        if (balancedness > max + BALANCEDNESS_TOLERANCE || balancedness < min - BALANCEDNESS_TOLERANCE) {
            throw new IllegalArgumentException(String.format(java.util.Locale.ROOT, "balancedness %.3f: %d tokens x top-%d over %d "
                    + "experts reach %.3f..%.3f", balancedness, tokens, topk, experts, min, max));
        }
        Routing best = Math.abs(max - balancedness) < Math.abs(min - balancedness) ? high : low;
        for (int step = 0; step < 60 && Math.abs(best.balancedness(experts) - balancedness) > BALANCEDNESS_TOLERANCE / 4; step++) {
            double t = Math.sqrt(hot * cold);  // bisection in log t
            Routing mid = d.routing(t);
            double b = mid.balancedness(experts);
            if (Math.abs(b - balancedness) < Math.abs(best.balancedness(experts) - balancedness)) {
                best = mid;
            }
            if (b > balancedness) {
                hot = t;
            } else {
                cold = t;
            }
        }
        return best;
    }

    /** The temperatures that bound {@link #skewedRouting}'s search: nearly uniform draws, nearly the same experts for every token. */
    private static final double HOT = 1e3;
    private static final double COLD = 1e-3;

    /** The balancedness {@link #skewedRouting} can reach for this seed and batch: {@code [min, max]}. */
    public record BalancednessRange(double min, double max) {
        /** {@code requested}, moved into the range. */
        public double clamp(double requested) {
            return Math.max(min, Math.min(max, requested));
        }
    }

    /** What {@link #skewedRouting} reaches with this seed for {@code tokens} x top-{@code topk} over {@code experts}. */
    public static BalancednessRange reachableBalancedness(long seed, int tokens, int experts, int topk) {
        Draws d = Draws.of(seed, tokens, experts, topk);
        return new BalancednessRange(d.routing(COLD).balancedness(experts), d.routing(HOT).balancedness(experts));
    }

    /** What one seed draws for {@link #skewedRouting}: each expert's popularity, each (token, expert)'s Gumbel noise, the weights. */
    private record Draws(double[] popularity, double[] gumbel, float[] weights, int tokens, int experts, int topk) {
        static Draws of(long seed, int tokens, int experts, int topk) {
            SplittableRandom r = new SplittableRandom(seed);
            double[] popularity = new double[experts];
            for (int e = 0; e < experts; e++) {
                popularity[e] = r.nextGaussian();
            }
            double[] gumbel = new double[tokens * experts];
            for (int i = 0; i < gumbel.length; i++) {
                gumbel[i] = -Math.log(-Math.log(Math.max(r.nextDouble(), Double.MIN_NORMAL)));
            }
            return new Draws(popularity, gumbel, uniformRouting(seed + 1, tokens, experts, topk).weights(), tokens, experts, topk);
        }

        Routing routing(double temperature) {
            return draw(popularity, gumbel, temperature, tokens, experts, topk, weights);
        }
    }

    /** Each token's top k of popularity / t + its Gumbel noise, in descending order. */
    private static Routing draw(double[] popularity, double[] gumbel, double t, int tokens, int experts, int topk, float[] weights) {
        int[] ids = new int[tokens * topk];
        double[] score = new double[experts];
        for (int m = 0; m < tokens; m++) {
            for (int e = 0; e < experts; e++) {
                score[e] = popularity[e] / t + gumbel[m * experts + e];
            }
            for (int j = 0; j < topk; j++) {
                int pick = 0;
                for (int e = 1; e < experts; e++) {
                    if (score[e] > score[pick]) {
                        pick = e;
                    }
                }
                ids[m * topk + j] = pick;
                score[pick] = Double.NEGATIVE_INFINITY;
            }
        }
        return new Routing(tokens, topk, ids, weights);
    }
}
