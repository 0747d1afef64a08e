package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.Bf16;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Seeded random inputs: valid routing tables and bf16 normals of the asked spread. */
class RandomInputsTest {

    @ParameterizedTest(name = "M={0}, E={1}, k={2}")
    @CsvSource({"200, 128, 8", "50, 8, 8", "64, 3, 2", "10, 1, 1", "300, 32, 1"})
    void uniformRoutingGivesDistinctInRangeIdsAndNormalisedPositiveWeights(int tokens, int experts, int topk) {
        Routing r = RandomInputs.uniformRouting(42L, tokens, experts, topk);
        assertEquals(tokens, r.tokens());
        assertEquals(topk, r.topk());
        assertEquals(tokens * topk, r.ids().length);
        assertEquals(tokens * topk, r.weights().length);
        for (int m = 0; m < tokens; m++) {
            boolean[] seen = new boolean[experts];
            double sum = 0;
            for (int j = 0; j < topk; j++) {
                int e = r.id(m, j);
                assertTrue(e >= 0 && e < experts, "id " + e + " out of range at [" + m + "][" + j + "]");
                assertFalse(seen[e], "expert " + e + " twice in row " + m);
                seen[e] = true;
                float w = r.weight(m, j);
                assertTrue(w > 0 && Float.isFinite(w), "weight " + w + " at [" + m + "][" + j + "]");
                sum += w;
            }
            assertEquals(1.0, sum, 1e-6, "weights of row " + m);
        }
        // and the reference's own check accepts it
        r.checkedFor(experts);
    }

    @Test
    void uniformRoutingIsDeterministicPerSeed() {
        Routing a = RandomInputs.uniformRouting(7L, 100, 64, 6);
        Routing b = RandomInputs.uniformRouting(7L, 100, 64, 6);
        assertEquals(a, b);
        assertArrayEquals(a.ids(), b.ids());
        assertArrayEquals(a.weights(), b.weights());
    }

    @Test
    void uniformRoutingDiffersAcrossSeeds() {
        Routing a = RandomInputs.uniformRouting(7L, 100, 64, 6);
        Routing b = RandomInputs.uniformRouting(8L, 100, 64, 6);
        assertFalse(Arrays.equals(a.ids(), b.ids()), "ids of seeds 7 and 8");
        assertFalse(Arrays.equals(a.weights(), b.weights()), "weights of seeds 7 and 8");
        assertNotEquals(a, b);
    }

    @Test
    void topkEqualToExpertsRoutesEveryTokenToEveryExpert() {
        Routing r = RandomInputs.uniformRouting(3L, 20, 5, 5);
        for (int m = 0; m < 20; m++) {
            int[] row = Arrays.copyOfRange(r.ids(), m * 5, m * 5 + 5);
            Arrays.sort(row);
            assertArrayEquals(new int[] {0, 1, 2, 3, 4}, row, "row " + m);
        }
        assertEquals(5, r.distinctExperts());
    }

    /** 20,000 tokens x top-2 over 8 experts: each expert expects 5,000 picks; allow 5%. */
    @Test
    void uniformRoutingPicksExpertsUniformly() {
        int tokens = 20_000;
        int experts = 8;
        Routing r = RandomInputs.uniformRouting(99L, tokens, experts, 2);
        int[] counts = new int[experts];
        for (int id : r.ids()) {
            counts[id]++;
        }
        double expected = tokens * 2.0 / experts;
        for (int e = 0; e < experts; e++) {
            assertEquals(expected, counts[e], 0.05 * expected, "picks of expert " + e + ": " + Arrays.toString(counts));
        }
    }

    @Test
    void bf16NormalHasTheAskedSpreadAndZeroMean() {
        int n = 200_000;
        double std = 0.02;
        short[] v = RandomInputs.bf16Normal(5L, n, std);
        assertEquals(n, v.length);
        double sum = 0;
        double sumSq = 0;
        for (short b : v) {
            assertTrue(Bf16.isFinite(b));
            double x = Bf16.toFloat(b);
            sum += x;
            sumSq += x * x;
        }
        double mean = sum / n;
        double sampleStd = Math.sqrt(sumSq / n - mean * mean);
        assertEquals(0.0, mean, 4 * std / Math.sqrt(n), "mean");
        assertEquals(std, sampleStd, 0.02 * std, "standard deviation");
    }

    @Test
    void bf16NormalIsDeterministicPerSeedAndNotConstant() {
        short[] a = RandomInputs.bf16Normal(5L, 1000, 1.0);
        assertArrayEquals(a, RandomInputs.bf16Normal(5L, 1000, 1.0));
        assertFalse(Arrays.equals(a, RandomInputs.bf16Normal(6L, 1000, 1.0)));
        long distinct = Arrays.stream(box(a)).distinct().count();
        assertTrue(distinct > 100, "only " + distinct + " distinct values");
    }

    @Test
    void bf16NormalScalesWithStd() {
        short[] one = RandomInputs.bf16Normal(9L, 1000, 1.0);
        short[] quarter = RandomInputs.bf16Normal(9L, 1000, 0.25);
        // the same Gaussian draws, scaled by a power of two: exact in bf16 (away from subnormals)
        for (int i = 0; i < one.length; i++) {
            assertEquals(Bf16.toFloat(one[i]) * 0.25f, Bf16.toFloat(quarter[i]), "element " + i);
        }
    }

    private static Short[] box(short[] a) {
        Short[] out = new Short[a.length];
        for (int i = 0; i < a.length; i++) {
            out[i] = a[i];
        }
        return out;
    }

    @ParameterizedTest(name = "M={0}, E={1}, k={2}")
    @CsvSource({"64, 128, 8", "256, 128, 8", "1024, 128, 8", "4096, 128, 8", "256, 512, 10", "512, 64, 8"})
    void skewedRoutingHitsTheRequestedBalancednessWithDistinctIds(int tokens, int experts, int topk) {
        for (double beta : new double[] {0.6, 0.7, 0.8, 0.9}) {
            long seed = 1000L * tokens + (long) (beta * 100);
            Routing r = RandomInputs.skewedRouting(seed, tokens, experts, topk, beta);
            double got = r.balancedness(experts);
            assertTrue(Math.abs(got - beta) <= RandomInputs.BALANCEDNESS_TOLERANCE,
                    () -> "asked " + beta + ", got " + got + " (M=" + tokens + ", E=" + experts + ", k=" + topk + ", seed " + seed + ")");
            for (int m = 0; m < tokens; m++) {
                boolean[] seen = new boolean[experts];
                for (int k = 0; k < topk; k++) {
                    int e = r.id(m, k);
                    assertTrue(e >= 0 && e < experts && !seen[e], "token " + m + " slot " + k + ": expert " + e);
                    seen[e] = true;
                }
            }
            assertArrayEquals(r.ids(), RandomInputs.skewedRouting(seed, tokens, experts, topk, beta).ids(), "the same seed, the same routing");
        }
    }

    @Test
    void balancednessIsOneForAnEvenLoadAndLowForOneHotSpot() {
        int[] even = new int[64];
        for (int i = 0; i < even.length; i++) {
            even[i] = i % 16;
        }
        assertEquals(1.0, new Routing(32, 2, even, new float[64]).balancedness(16), 1e-12);
        int[] piled = new int[64];
        for (int m = 0; m < 32; m++) {
            piled[2 * m] = 0;
            piled[2 * m + 1] = 1;
        }
        assertEquals(Math.log(2) / Math.log(16), new Routing(32, 2, piled, new float[64]).balancedness(16), 1e-12);
        assertEquals(1.0, new Routing(4, 1, new int[] {0, 0, 0, 0}, new float[4]).balancedness(1), "one expert: as even as it gets");
        assertThrows(IllegalArgumentException.class, () -> new Routing(4, 1, new int[] {0, 0, 0, 0}, new float[4]).balancedness(0));
    }

    @Test
    void anUnreachableBalancednessIsRefusedWithTheRange() {
        // 8 tokens x top-8 are 64 pairs over 128 experts: at most ln 64 / ln 128 = 0.857
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RandomInputs.skewedRouting(1, 8, 128, 8, 0.99));
        assertTrue(e.getMessage().startsWith("balancedness 0.990: 8 tokens x top-8 over 128 experts reach "), e.getMessage());
    }
}
