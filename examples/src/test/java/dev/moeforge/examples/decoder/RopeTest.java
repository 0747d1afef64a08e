package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** Rotary embedding: the inverse frequencies (plain and YaRN), the attention scaling, and the rotation. */
class RopeTest {

    /** gpt-oss's rope_scaling. */
    private static Rope gptOssYarn(double factor) {
        return new Rope(150000, Rope.YARN, factor, 4096, 32, 1, false, Double.NaN);
    }

    @Test
    void defaultInverseFrequencies() {
        for (double theta : new double[] {10000, 1e6, 150000}) {
            for (int dim : new int[] {16, 64, 128}) {
                float[] f = Rope.plain(theta).inverseFrequencies(dim);
                assertEquals(dim / 2, f.length);
                assertEquals(1f, f[0]);
                for (int i = 0; i < f.length; i++) {
                    double exact = 1 / Math.pow(theta, 2.0 * i / dim);
                    assertEquals(exact, f[i], 4e-6 * exact, "theta " + theta + ", dim " + dim + ", i " + i);
                    if (i > 0) {
                        assertTrue(f[i] < f[i - 1], "decreasing");
                    }
                }
            }
        }
        // exact where the float computation is exact: 10000^(1/2) = 100
        assertArrayEquals(new float[] {1f, 0.01f}, Rope.plain(10000).inverseFrequencies(4));
    }

    @Test
    void yarnOfFactorOneIsPlainRope() {
        float[] plain = Rope.plain(150000).inverseFrequencies(64);
        float[] yarn = gptOssYarn(1).inverseFrequencies(64);
        for (int i = 0; i < plain.length; i++) {
            assertEquals(plain[i], yarn[i], Math.ulp(plain[i]), "i " + i);
        }
        assertEquals(1f, gptOssYarn(1).attentionScaling());
    }

    /**
     * gpt-oss's YaRN (head_dim 64): the correction range is [8.09, 17.4] (not truncated), so the first
     * 9 frequencies are plain RoPE's, those from 18 on plain RoPE's divided by the factor, and those
     * between blend the two.
     */
    @Test
    void yarnInterpolatesTheLowFrequencies() {
        float[] plain = Rope.plain(150000).inverseFrequencies(64);
        float[] yarn = gptOssYarn(32).inverseFrequencies(64);
        for (int i = 0; i <= 8; i++) {
            assertEquals(plain[i], yarn[i], "high frequency " + i + " unchanged");
        }
        for (int i = 18; i < 32; i++) {
            assertEquals(plain[i] / 32, yarn[i], 2 * Math.ulp(yarn[i]), "low frequency " + i + " divided by the factor");
        }
        for (int i = 9; i <= 17; i++) {
            assertTrue(yarn[i] < plain[i] && yarn[i] > plain[i] / 32, "blended frequency " + i);
        }
        // truncation rounds the range outward to [8, 18]: frequency 8 is still plain, 17 is not yet fully interpolated
        float[] truncated = new Rope(150000, Rope.YARN, 32, 4096, 32, 1, true, Double.NaN).inverseFrequencies(64);
        assertEquals(plain[8], truncated[8]);
        assertNotEquals(yarn[12], truncated[12]);
    }

    @Test
    void attentionScaling() {
        assertEquals((float) (0.1 * Math.log(32) + 1), gptOssYarn(32).attentionScaling());
        assertEquals(1.3465736f, gptOssYarn(32).attentionScaling(), 1e-6f);
        assertEquals(1f, Rope.plain(10000).attentionScaling());
        assertEquals(0.5f, new Rope(150000, Rope.YARN, 32, 4096, 32, 1, false, 0.5).attentionScaling());
    }

    @Test
    void positionZeroIsTheIdentity() {
        int heads = 3;
        int dim = 16;
        double[] v = random(heads * dim, 1);
        double[] before = v.clone();
        Rope.apply(v, heads, dim, Rope.plain(10000).inverseFrequencies(dim), 1, 0);
        assertArrayEquals(before, v);
    }

    /** Each (i, i + d/2) pair of each head turns by pos * inverse frequency i and keeps its norm. */
    @Test
    void rotationKeepsEachPairsNormAndTurnsIt() {
        int heads = 2;
        int dim = 8;
        int half = dim / 2;
        float[] inv = Rope.plain(10000).inverseFrequencies(dim);
        int pos = 7;
        double[] v = random(heads * dim, 2);
        double[] before = v.clone();
        Rope.apply(v, heads, dim, inv, 1, pos);
        boolean neighboursKeptNorm = true;
        for (int h = 0; h < heads; h++) {
            for (int i = 0; i < half; i++) {
                int a = h * dim + i;
                int b = a + half;
                double n0 = Math.hypot(before[a], before[b]);
                assertEquals(n0, Math.hypot(v[a], v[b]), 1e-6 * n0, "head " + h + " pair " + i);
                double turned = Math.atan2(v[b], v[a]) - Math.atan2(before[b], before[a]);
                double want = inv[i] * pos;
                double diff = Math.IEEEremainder(turned - want, 2 * Math.PI);
                assertEquals(0, diff, 1e-6, "head " + h + " pair " + i + " angle");
            }
            // NeoX pairing, not (2i, 2i+1): adjacent values do not keep their norm
            double adjacentBefore = Math.hypot(before[h * dim], before[h * dim + 1]);
            neighboursKeptNorm &= Math.abs(adjacentBefore - Math.hypot(v[h * dim], v[h * dim + 1])) < 1e-6;
        }
        assertTrue(!neighboursKeptNorm, "rotation pairs i with i + d/2");
    }

    @Test
    void rotationOfOnePairAndScaling() {
        double[] v = {1, 0};
        Rope.apply(v, 1, 2, new float[] {1f}, 1, 1);
        assertEquals(Math.cos(1), v[0], 1e-7);
        assertEquals(Math.sin(1), v[1], 1e-7);
        double[] w = {3, 4};
        Rope.apply(w, 1, 2, new float[] {0.25f}, 2f, 5);
        assertEquals(10, Math.hypot(w[0], w[1]), 1e-5, "the scaling multiplies the norm");
    }

    @Test
    void unsupportedTypeAndBadParametersAreRefused() {
        String m = assertThrows(IllegalArgumentException.class,
                () -> new Rope(10000, "linear", 2, 4096, 32, 1, true, Double.NaN)).getMessage();
        assertTrue(m.contains("'linear'") && m.contains("supported: default, yarn"), m);
        assertThrows(IllegalArgumentException.class, () -> Rope.plain(1));
        assertThrows(IllegalArgumentException.class, () -> Rope.plain(Double.NaN));
        m = assertThrows(IllegalArgumentException.class,
                () -> new Rope(10000, Rope.YARN, 0.5, 4096, 32, 1, true, Double.NaN)).getMessage();
        assertTrue(m.contains("factor 0.5"), m);
        assertThrows(IllegalArgumentException.class, () -> new Rope(10000, Rope.YARN, 4, 0, 32, 1, true, Double.NaN));
    }

    private static double[] random(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        double[] v = new double[n];
        for (int i = 0; i < n; i++) {
            v[i] = r.nextGaussian();
        }
        return v;
    }
}
