package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** Greedy picks, the temperature, top-k and top-p cuts, seeding, and the options' refusals. */
class SamplerTest {
    private static final float NAN = Float.NaN;

    @Test
    void argmaxTakesTheFirstOfEqualMaxima() {
        assertEquals(1, Sampler.argmax(new float[] {0, 3, 1, 3, 3}));
        assertEquals(0, Sampler.argmax(new float[] {2, 2}));
        assertEquals(3, Sampler.argmax(new float[] {-5, -4, -3, -1}));
        assertEquals(0, Sampler.argmax(new float[] {Float.NEGATIVE_INFINITY, Float.NEGATIVE_INFINITY}));
        assertEquals(2, Sampler.argmax(new float[] {1, Float.NEGATIVE_INFINITY, Float.POSITIVE_INFINITY, 7}));
        assertEquals(0, Sampler.argmax(new float[] {4}));
    }

    @Test
    void nanNeverWins() {
        assertEquals(1, Sampler.argmax(new float[] {NAN, 1, NAN, 0}));
        assertEquals(0, Sampler.argmax(new float[] {1, NAN}));
        assertEquals(2, Sampler.argmax(new float[] {NAN, NAN, -100}));
        assertEquals(1, Sampler.argmax(new float[] {-1, 5, NAN, 5, NAN}));
        int allNan = Sampler.argmax(new float[] {NAN, NAN, NAN});
        assertTrue(allNan >= 0 && allNan < 3);
    }

    @Test
    void greedyOptionsPickTheArgmax() {
        Sampler.Options greedy = Sampler.Options.greedy();
        assertTrue(greedy.isGreedy());
        Sampler s = new Sampler(greedy);
        SplittableRandom r = new SplittableRandom(3);
        for (int t = 0; t < 50; t++) {
            float[] logits = logits(r, 1000);
            assertEquals(Sampler.argmax(logits), s.next(logits));
        }
        assertEquals(2, s.next(new float[] {0, 1, 9, 9}));
        // temperature 0 is greedy whatever top-k, top-p and seed say
        assertEquals(2, new Sampler(new Sampler.Options(0, 3, 0.5, 99)).next(new float[] {0, 1, 9, 9}));
    }

    @Test
    void topKOfOneIsTheArgmaxAtAnyTemperature() {
        SplittableRandom r = new SplittableRandom(4);
        for (double temperature : new double[] {0.1, 1, 5, 1000}) {
            Sampler s = new Sampler(new Sampler.Options(temperature, 1, 1, 7));
            for (int t = 0; t < 30; t++) {
                float[] logits = logits(r, 500);
                assertEquals(Sampler.argmax(logits), s.next(logits), "temperature " + temperature);
            }
            assertEquals(1, s.next(new float[] {0, 5, 5}), "ties: the first");
        }
    }

    @Test
    void tinyTopPIsTheArgmax() {
        SplittableRandom r = new SplittableRandom(5);
        Sampler s = new Sampler(new Sampler.Options(2, 0, 1e-9, 8));
        for (int t = 0; t < 30; t++) {
            float[] logits = logits(r, 500);
            assertEquals(Sampler.argmax(logits), s.next(logits));
        }
        assertEquals(0, s.next(new float[] {3, 3, 3, 3}), "ties: the first");
    }

    @Test
    void aNanIsNeverKeptOrDrawn() {
        float[] logits = {Float.NaN, 1, 2, Float.NaN, 0};
        Sampler.Kept kept = Sampler.kept(logits, new Sampler.Options(1, 10, 1, 0));
        assertEquals(3, kept.count(), "top-10 of three numbers keeps the three");
        assertArrayEquals(new int[] {2, 1, 4, 0, 3}, kept.order(), "NaNs last, in index order");
        Sampler s = new Sampler(new Sampler.Options(5, 0, 1, 3));
        for (int t = 0; t < 50; t++) {
            int p = s.next(logits);
            assertTrue(p == 1 || p == 2 || p == 4, "drew " + p);
        }
        assertEquals(0, s.next(new float[] {Float.NaN, Float.NaN}), "all NaN: token 0");
    }

    @Test
    void seedsDecideTheDraws() {
        float[] flat = new float[100];
        int[] a = draws(1, flat, 50);
        int[] b = draws(1, flat, 50);
        int[] c = draws(2, flat, 50);
        assertArrayEquals(a, b);
        assertFalse(java.util.Arrays.equals(a, c), "seeds 1 and 2 drew the same 50 tokens");
        assertTrue(java.util.Arrays.stream(a).distinct().count() > 20, "a flat distribution of 100 tokens is spread");
    }

    private static int[] draws(long seed, float[] logits, int n) {
        Sampler s = new Sampler(new Sampler.Options(1, 0, 1, seed));
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            out[i] = s.next(logits);
        }
        return out;
    }

    /** softmax([0, 1, 2]) = [0.0900, 0.2447, 0.6652]; 20000 draws land within 1.5 points (about 4 sigma). */
    @Test
    void frequenciesFollowTheSoftmax() {
        float[] logits = {0, 1, 2};
        double[] p = softmax(logits, 1);
        assertEquals(0.6652, p[2], 1e-4);
        assertFrequencies(p, counts(new Sampler.Options(1, 0, 1, 42), logits, 20000), 0.015);
        // the logits are divided by the temperature: at 2 the distribution is softmax([0, 0.5, 1])
        assertFrequencies(softmax(logits, 2), counts(new Sampler.Options(2, 0, 1, 43), logits, 20000), 0.015);
        // the order of the logits does not matter
        float[] shuffled = {2, 0, 1};
        int[] n = counts(new Sampler.Options(1, 0, 1, 44), shuffled, 20000);
        assertFrequencies(new double[] {p[2], p[0], p[1]}, n, 0.015);
    }

    /** top-k 2 and top-p 0.7 both leave out the least likely token, and renormalise the other two. */
    @Test
    void topKAndTopPCutTheTail() {
        float[] logits = {0, 1, 2};
        double[] p = softmax(logits, 1);
        double[] two = {0, p[1] / (p[1] + p[2]), p[2] / (p[1] + p[2])};
        int[] topK = counts(new Sampler.Options(1, 2, 1, 5), logits, 20000);
        assertEquals(0, topK[0]);
        assertFrequencies(two, topK, 0.015);
        // 0.665 < 0.7, so the second token is needed; 0.910 >= 0.7, so the third is not
        int[] topP = counts(new Sampler.Options(1, 0, 0.7, 6), logits, 20000);
        assertEquals(0, topP[0]);
        assertFrequencies(two, topP, 0.015);
        // top-p 0.6 keeps the first alone
        assertEquals(20000, counts(new Sampler.Options(1, 0, 0.6, 7), logits, 20000)[2]);
        // top-k larger than the vocabulary keeps everything
        assertFrequencies(p, counts(new Sampler.Options(1, 10, 1, 8), logits, 20000), 0.015);
    }

    @Test
    void invalidOptionsAreRefused() {
        assertMessage(() -> new Sampler.Options(-0.1, 0, 1, 0), "--temperature");
        assertMessage(() -> new Sampler.Options(Double.NaN, 0, 1, 0), "--temperature");
        assertMessage(() -> new Sampler.Options(Double.POSITIVE_INFINITY, 0, 1, 0), "--temperature");
        assertMessage(() -> new Sampler.Options(1, -1, 1, 0), "--top-k");
        assertMessage(() -> new Sampler.Options(1, 0, 0, 0), "--top-p");
        assertMessage(() -> new Sampler.Options(1, 0, 1.01, 0), "--top-p");
        assertMessage(() -> new Sampler.Options(1, 0, -0.5, 0), "--top-p");
        assertMessage(() -> new Sampler.Options(1, 0, Double.NaN, 0), "--top-p");
        // the edges that are allowed
        assertNotEquals(null, new Sampler.Options(0, 0, 1, -1));
        assertNotEquals(null, new Sampler.Options(1e-3, 1, 1e-12, Long.MAX_VALUE));
    }

    private static void assertMessage(org.junit.jupiter.api.function.Executable e, String part) {
        String m = assertThrows(IllegalArgumentException.class, e).getMessage();
        assertTrue(m.contains(part), () -> "expected '" + part + "' in: " + m);
    }

    private static int[] counts(Sampler.Options o, float[] logits, int draws) {
        Sampler s = new Sampler(o);
        int[] n = new int[logits.length];
        for (int i = 0; i < draws; i++) {
            n[s.next(logits)]++;
        }
        return n;
    }

    private static void assertFrequencies(double[] p, int[] counts, double tolerance) {
        int total = java.util.Arrays.stream(counts).sum();
        for (int i = 0; i < p.length; i++) {
            assertEquals(p[i], (double) counts[i] / total, tolerance, "token " + i + " of " + java.util.Arrays.toString(counts));
        }
    }

    private static double[] softmax(float[] logits, double temperature) {
        double[] p = new double[logits.length];
        double sum = 0;
        for (int i = 0; i < p.length; i++) {
            p[i] = Math.exp(logits[i] / temperature);
            sum += p[i];
        }
        for (int i = 0; i < p.length; i++) {
            p[i] /= sum;
        }
        return p;
    }

    private static float[] logits(SplittableRandom r, int n) {
        float[] l = new float[n];
        for (int i = 0; i < n; i++) {
            l[i] = (float) (3 * r.nextGaussian());
        }
        return l;
    }
}
