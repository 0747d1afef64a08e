package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.reference.RouterReference.Result;
import dev.moeforge.dsl.reference.RouterReference.Selection;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The router's CPU reference ({@link RouterReference}) on the four routing rules of
 * {@link RoutingRules}: cases worked out by hand (expected weights computed here with
 * {@link Math#exp}, never by the production code), ties (the lower expert id wins and ranks first),
 * NaN and infinities as TopK's and Softmax's javadoc and the README ("Routers and routing rules")
 * document them, and metamorphic properties on random rows (weights sum to 1, or to the routed
 * scaling factor; ids distinct and in range; selection order as documented; permuting the experts
 * permutes the ids and keeps the weights).
 */
class RouterReferenceTest {
    private static final String BIAS = "router_bias";
    private static final String CORRECTION = "e_score_correction_bias";
    private static final double SCALING = 2.5;
    /** FP64 reference against FP64 expectations computed differently (e.g. without subtracting the max). */
    private static final double EXACT = 1e-12;
    /** Weights stored as FP32. */
    private static final double STORED = 1e-6;
    /** Hand cases put expert e's score in W_r[e][t] and x[t] = one-hot(t): H=8 holds up to 8 tokens. */
    private static final int HAND_HIDDEN = 8;

    // ---------------------------------------------------------------------------------------
    // helpers
    // ---------------------------------------------------------------------------------------

    private static double sigmoid(double x) {
        return 1.0 / (1.0 + Math.exp(-x));
    }

    private static KernelSpec spec(String name, int hidden, int experts, Store rule) {
        return KernelBuilder.named(name).router(hidden, experts).epilogue(rule).build();
    }

    /**
     * Runs {@code rule} end to end (scores from x and W_r) on tokens whose scores are given:
     * token t's x is one-hot at t and W_r[e][t] = scores[t][e], so every score is exact when it is
     * a bf16 value. Checks that the reference's scores are exactly those.
     */
    private static Result runOnScores(Store rule, double[][] scores, Map<String, float[]> params) {
        int tokens = scores.length;
        int experts = scores[0].length;
        short[] x = new short[tokens * HAND_HIDDEN];
        short[] w = new short[experts * HAND_HIDDEN];
        for (int t = 0; t < tokens; t++) {
            x[t * HAND_HIDDEN + t] = Bf16.fromDouble(1.0);
            for (int e = 0; e < experts; e++) {
                assertEquals(scores[t][e], Bf16.toFloat(Bf16.fromDouble(scores[t][e])), "test setup: score not a bf16 value");
                w[e * HAND_HIDDEN + t] = Bf16.fromDouble(scores[t][e]);
            }
        }
        Result r = RouterReference.run(spec("hand", HAND_HIDDEN, experts, rule), x, WeightRows.bf16(w, 1, experts, HAND_HIDDEN),
                params);
        for (int t = 0; t < tokens; t++) {
            assertArrayEquals(scores[t], r.scores()[t], 0.0, "scores of token " + t);
        }
        return r;
    }

    private static Selection eval(Store rule, double[] acc, Map<String, float[]> params) {
        return assertInstanceOf(Selection.class, RouterReference.evaluate(rule, acc, params));
    }

    private static Selection exact(Result r, int token) {
        return assertInstanceOf(Selection.class, r.exact()[token]);
    }

    private static Selection stored(Result r, int token) {
        return assertInstanceOf(Selection.class, r.stored()[token]);
    }

    /** Ids exactly, weights within {@code tol}, and the FP32 store equal to the exact weights rounded once. */
    private static void assertRouted(int[] ids, double[] weights, Result r, int token) {
        Selection s = exact(r, token);
        assertArrayEquals(ids, s.ids(), "ids of token " + token);
        assertArrayEquals(weights, s.values(), EXACT, "weights of token " + token);
        Selection st = stored(r, token);
        assertArrayEquals(ids, st.ids(), "stored ids of token " + token);
        for (int j = 0; j < ids.length; j++) {
            assertEquals((float) s.values()[j], st.values()[j], 0.0, "fp32 store of token " + token + " slot " + j);
        }
    }

    private static void assertAllNaN(double[] v, String what) {
        for (int j = 0; j < v.length; j++) {
            assertTrue(Double.isNaN(v[j]), what + ": slot " + j + " is " + v[j] + ", expected NaN; all: " + Arrays.toString(v));
        }
    }

    private static void assertAllFinite(double[] v, String what) {
        for (int j = 0; j < v.length; j++) {
            assertTrue(Double.isFinite(v[j]), what + ": slot " + j + " is " + v[j] + "; all: " + Arrays.toString(v));
        }
    }

    private static Map<String, float[]> bias(String name, float... values) {
        return Map.of(name, values);
    }

    // ---------------------------------------------------------------------------------------
    // one hand-computed case per rule
    // ---------------------------------------------------------------------------------------

    /**
     * Qwen3-MoE / Qwen3-Next / Mixtral, k=2 of E=4. Token 0 scores {1, 3, 2, 0.5}: experts 1 then 2,
     * weights e^3 / (e^3 + e^2) and e^2 / (e^3 + e^2). Token 1 scores {-1, 0.5, 0.25, 2}: experts 3
     * then 1. The softmax over all four cancels in the renormalisation.
     */
    @Test
    void softmaxTopKRenormalizedByHand() {
        Result r = runOnScores(RoutingRules.softmaxTopKRenormalized(2, DType.FP32),
                new double[][] {{1, 3, 2, 0.5}, {-1, 0.5, 0.25, 2}}, Map.of());
        double z0 = Math.exp(3) + Math.exp(2);
        assertRouted(new int[] {1, 2}, new double[] {Math.exp(3) / z0, Math.exp(2) / z0}, r, 0);
        double z1 = Math.exp(2) + Math.exp(0.5);
        assertRouted(new int[] {3, 1}, new double[] {Math.exp(2) / z1, Math.exp(0.5) / z1}, r, 1);
        assertEquals(1.0, exact(r, 0).values()[0] + exact(r, 0).values()[1], EXACT);
    }

    /** k=3 of E=6 with a BF16 store: the stored weights are the exact ones rounded to bf16 once. */
    @Test
    void softmaxTopKRenormalizedByHandK3Bf16() {
        double[] s = {0.5, -1, 1.5, 2, -0.25, 1};
        Result r = runOnScores(RoutingRules.softmaxTopKRenormalized(3, DType.BF16), new double[][] {s}, Map.of());
        double z = Math.exp(2) + Math.exp(1.5) + Math.exp(1);
        double[] w = {Math.exp(2) / z, Math.exp(1.5) / z, Math.exp(1) / z};
        Selection e = exact(r, 0);
        assertArrayEquals(new int[] {3, 2, 5}, e.ids());
        assertArrayEquals(w, e.values(), EXACT);
        Selection st = stored(r, 0);
        assertArrayEquals(new int[] {3, 2, 5}, st.ids());
        for (int j = 0; j < 3; j++) {
            float bf16 = Bf16.toFloat(Bf16.fromDouble(w[j]));
            assertEquals(bf16, st.values()[j], 0.0, "bf16 store slot " + j);
            assertNotEquals((float) w[j], bf16, "test setup: bf16 rounding should be visible");
        }
    }

    /**
     * OLMoE, k=3 of E=5, no renormalisation: scores {0.5, -1, 2, 1.5, 0} select 2, 3, 0 and keep
     * their probabilities over all five experts, which sum to less than 1.
     */
    @Test
    void softmaxTopKByHand() {
        double[] s = {0.5, -1, 2, 1.5, 0};
        Result r = runOnScores(RoutingRules.softmaxTopK(3, DType.FP32), new double[][] {s}, Map.of());
        double z = 0;
        for (double v : s) {
            z += Math.exp(v);
        }
        double[] w = {Math.exp(2) / z, Math.exp(1.5) / z, Math.exp(0.5) / z};
        assertRouted(new int[] {2, 3, 0}, w, r, 0);
        double sum = Arrays.stream(exact(r, 0).values()).sum();
        assertEquals((Math.exp(2) + Math.exp(1.5) + Math.exp(0.5)) / z, sum, EXACT);
        assertTrue(sum < 0.95, "OLMoE does not renormalise: sum " + sum);
    }

    /**
     * gpt-oss, k=2 of E=4: logits {2, 1, 0.5, 3} plus bias {-2, 1.5, 0, 0.25} = {0, 2.5, 0.5, 3.25}
     * select 3 then 1 (without the bias: 3 then 0), and the softmax is over the two selected biased
     * logits: e^3.25 / (e^3.25 + e^2.5), e^2.5 / (e^3.25 + e^2.5).
     */
    @Test
    void biasedTopKSoftmaxByHand() {
        Store rule = RoutingRules.biasedTopKSoftmax(2, BIAS, DType.FP32);
        double[][] logits = {{2, 1, 0.5, 3}};
        Result r = runOnScores(rule, logits, bias(BIAS, -2f, 1.5f, 0f, 0.25f));
        double z = Math.exp(3.25) + Math.exp(2.5);
        assertRouted(new int[] {3, 1}, new double[] {Math.exp(3.25) / z, Math.exp(2.5) / z}, r, 0);

        Result unbiased = runOnScores(rule, logits, bias(BIAS, 0f, 0f, 0f, 0f));
        double z0 = Math.exp(3) + Math.exp(2);
        assertRouted(new int[] {3, 0}, new double[] {Math.exp(3) / z0, Math.exp(2) / z0}, unbiased, 0);
    }

    /**
     * DeepSeek-V3, E=8 in 4 groups of 2, top-2 groups, k=2, scaling 2.5. Logits
     * {3, -1, 0, 0.5, 1.5, 1, -2, -0.5}; sigmoids about {.953, .269, .5, .622, .818, .731, .119, .378}.
     * Correction bias +0.3 on group 1 (experts 2, 3), selection scores about
     * {.953, .269, .8, .922, .818, .731, .119, .378}; group scores (sum of both) about
     * {1.22, 1.72, 1.55, .50}: groups 1 and 2 are kept, so expert 0 (the best selection score overall) is
     * out, and the selection is 3 (.922) then 4 (.818). The weights come from the UNBIASED sigmoids:
     * 2.5 * s3 / (s3 + s4) and 2.5 * s4 / (s3 + s4), which here are in ascending order (the order is
     * the selection score's). Without the bias: groups 2 and 0 are kept and the selection is 0 then 4.
     */
    @Test
    void groupLimitedSigmoidByHand() {
        Store rule = RoutingRules.groupLimitedSigmoid(2, 4, 2, SCALING, CORRECTION, DType.FP32);
        double[] logits = {3, -1, 0, 0.5, 1.5, 1, -2, -0.5};
        double[] s = Arrays.stream(logits).map(RouterReferenceTest::sigmoid).toArray();

        Result r = runOnScores(rule, new double[][] {logits}, bias(CORRECTION, 0f, 0f, 0.3f, 0.3f, 0f, 0f, 0f, 0f));
        double z = s[3] + s[4];
        assertRouted(new int[] {3, 4}, new double[] {SCALING * s[3] / z, SCALING * s[4] / z}, r, 0);
        // weighting with the biased selection scores would give a first weight this far off
        double b3 = s[3] + 0.3f;
        double wrong = SCALING * b3 / (b3 + s[4]);
        assertTrue(Math.abs(wrong - exact(r, 0).values()[0]) > 0.1, "test setup: the bias must matter to the weights");
        assertEquals(SCALING, Arrays.stream(exact(r, 0).values()).sum(), EXACT);
        assertTrue(exact(r, 0).values()[0] < exact(r, 0).values()[1], "order is by selection score, not by weight");

        Result unbiased = runOnScores(rule, new double[][] {logits}, bias(CORRECTION, new float[8]));
        double z0 = s[0] + s[4];
        assertRouted(new int[] {0, 4}, new double[] {SCALING * s[0] / z0, SCALING * s[4] / z0}, unbiased, 0);
    }

    /**
     * A group scores the sum of its TWO best selection scores, neither its best alone nor all of them:
     * E=8 in 2 groups of 4, one group kept, k=2. Sigmoids {.95, .2, .15, .1 | .6, .62, .1, .05}: two best
     * 1.15 vs 1.22 keeps group 1 (the maximum, .95 vs .62, and the sum of all, 1.40 vs 1.37, would keep
     * group 0), so the selection is 5 then 4.
     */
    @Test
    void groupLimitedSigmoidScoresAGroupByItsTwoBest() {
        double[] p = {0.95, 0.2, 0.15, 0.1, 0.6, 0.62, 0.1, 0.05};
        double[] logits = Arrays.stream(p).map(v -> Math.log(v / (1 - v))).toArray();
        double[] s = Arrays.stream(logits).map(RouterReferenceTest::sigmoid).toArray();
        Store rule = RoutingRules.groupLimitedSigmoid(2, 2, 1, SCALING, CORRECTION, DType.FP32);
        Selection sel = eval(rule, logits, bias(CORRECTION, new float[8]));
        assertArrayEquals(new int[] {5, 4}, sel.ids());
        double z = s[5] + s[4];
        assertArrayEquals(new double[] {SCALING * s[5] / z, SCALING * s[4] / z}, sel.values(), EXACT);
    }

    /** The routed scaling factor multiplies the renormalised weights: 1.0 gives them summing to 1, 16 to 16. */
    @Test
    void groupLimitedSigmoidScalesByTheFactor() {
        double[] logits = {0.25, -0.5, 1, 2};
        double z = sigmoid(2) + sigmoid(1);
        for (double f : new double[] {1.0, 16.0, 0.5}) {
            Selection sel = eval(RoutingRules.groupLimitedSigmoid(2, 1, 1, f, CORRECTION, DType.FP32), logits,
                    bias(CORRECTION, new float[4]));
            assertArrayEquals(new int[] {3, 2}, sel.ids());
            assertArrayEquals(new double[] {f * sigmoid(2) / z, f * sigmoid(1) / z}, sel.values(), EXACT, "factor " + f);
        }
    }

    // ---------------------------------------------------------------------------------------
    // ties: the lower expert id wins, and ranks first among equals
    // ---------------------------------------------------------------------------------------

    @Test
    void selectTiesGoToTheLowerIdFirst() {
        double[] s = {1, 3, 3, 2, 3};
        assertArrayEquals(new int[] {1, 2, 4}, RouterReference.select(s, 3, 1, 1));
        assertArrayEquals(new int[] {1, 2}, RouterReference.select(s, 2, 1, 1));
        assertArrayEquals(new int[] {1}, RouterReference.select(s, 1, 1, 1));
        assertArrayEquals(new int[] {1, 2, 4, 3, 0}, RouterReference.select(s, 5, 1, 1));
        assertArrayEquals(new int[] {0, 1, 2}, RouterReference.select(new double[] {7, 7, 7, 7}, 3, 1, 1));
    }

    /** Equal scores give equal probabilities: experts 1, 2, 4 of {1, 3, 3, 2, 3} at 1/3 each (bf16: 0.333984375). */
    @Test
    void softmaxRulesBreakTiesByLowerId() {
        double[][] s = {{1, 3, 3, 2, 3}};
        Result renorm = runOnScores(RoutingRules.softmaxTopKRenormalized(3, DType.BF16), s, Map.of());
        assertArrayEquals(new int[] {1, 2, 4}, exact(renorm, 0).ids());
        assertArrayEquals(new double[] {1.0 / 3, 1.0 / 3, 1.0 / 3}, exact(renorm, 0).values(), EXACT);
        assertArrayEquals(new double[] {0.333984375, 0.333984375, 0.333984375}, stored(renorm, 0).values(), 0.0);

        Result olmoe = runOnScores(RoutingRules.softmaxTopK(2, DType.FP32), s, Map.of());
        double z = Math.exp(1) + 3 * Math.exp(3) + Math.exp(2);
        assertRouted(new int[] {1, 2}, new double[] {Math.exp(3) / z, Math.exp(3) / z}, olmoe, 0);
    }

    /** gpt-oss: logits {1, 0, 2, 1, 1.5} plus bias {0, 1, -1, 0, -0.5} all equal 1: experts 0, 1 at 1/2 each. */
    @Test
    void biasedTopKSoftmaxBreaksTiesByLowerId() {
        Result r = runOnScores(RoutingRules.biasedTopKSoftmax(2, BIAS, DType.FP32), new double[][] {{1, 0, 2, 1, 1.5}},
                bias(BIAS, 0f, 1f, -1f, 0f, -0.5f));
        assertRouted(new int[] {0, 1}, new double[] {0.5, 0.5}, r, 0);
    }

    /**
     * DeepSeek-V3, E=8 in 4 groups of 2. Logits {-3, -3 | 1, -1 | -1, 1 | -2, -2}: groups 1 and 2 score
     * the same (sigmoid(1) + sigmoid(-1)) and are the best. With one group kept the lower group wins:
     * experts 2 then 3 (not 5 then 4). With both kept, experts 2 and 5 tie at sigmoid(1) and 3 and 4 at
     * sigmoid(-1): k=3 gives 2, 5, 3.
     */
    @Test
    void groupLimitedSigmoidBreaksGroupAndExpertTiesByLowerIndex() {
        double[] logits = {-3, -3, 1, -1, -1, 1, -2, -2};
        Map<String, float[]> zero = bias(CORRECTION, new float[8]);
        double hi = sigmoid(1);
        double lo = sigmoid(-1);

        Selection one = eval(RoutingRules.groupLimitedSigmoid(2, 4, 1, SCALING, CORRECTION, DType.FP32), logits, zero);
        assertArrayEquals(new int[] {2, 3}, one.ids());
        assertArrayEquals(new double[] {SCALING * hi / (hi + lo), SCALING * lo / (hi + lo)}, one.values(), EXACT);

        Selection two = eval(RoutingRules.groupLimitedSigmoid(3, 4, 2, SCALING, CORRECTION, DType.FP32), logits, zero);
        assertArrayEquals(new int[] {2, 5, 3}, two.ids());
        double z = 2 * hi + lo;
        assertArrayEquals(new double[] {SCALING * hi / z, SCALING * hi / z, SCALING * lo / z}, two.values(), EXACT);

        assertArrayEquals(new int[] {2, 3}, RouterReference.select(
                Arrays.stream(logits).map(RouterReferenceTest::sigmoid).toArray(), 2, 4, 1));
    }

    // ---------------------------------------------------------------------------------------
    // NaN and infinities
    // ---------------------------------------------------------------------------------------

    /** NaN ranks below every number, -inf included; NaNs among themselves go by id. */
    @Test
    void selectRanksNaNBelowEveryNumber() {
        double nan = Double.NaN;
        double ninf = Double.NEGATIVE_INFINITY;
        assertArrayEquals(new int[] {1, 3, 2}, RouterReference.select(new double[] {nan, 1, ninf, 0.5}, 3, 1, 1));
        assertArrayEquals(new int[] {1, 3, 2, 0}, RouterReference.select(new double[] {nan, 1, ninf, 0.5}, 4, 1, 1));
        assertArrayEquals(new int[] {2, 0, 1}, RouterReference.select(new double[] {nan, nan, 2, nan}, 3, 1, 1));
        assertArrayEquals(new int[] {4, 1}, RouterReference.select(new double[] {nan, 1, nan, -1, Double.POSITIVE_INFINITY}, 2, 1, 1));
    }

    /**
     * Softmax first (Qwen3 and OLMoE): a NaN or +inf anywhere in the row makes every probability NaN,
     * so the k lowest ids tie and are chosen, with NaN weights (README: "A row with a NaN or +inf still
     * gives NaN weights at experts 0..k-1, as the softmax over the whole row does").
     */
    @Test
    void softmaxRulesGiveNaNWeightsAtTheFirstKExpertsForNaNOrPlusInf() {
        double[] nanRow = {0.1, 0.2, 0.3, 0.4, 0.5, Double.NaN, 5, 6};
        double[] infRow = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, Double.POSITIVE_INFINITY, 6};
        for (Store rule : List.of(RoutingRules.softmaxTopKRenormalized(3, DType.FP32), RoutingRules.softmaxTopK(3, DType.FP32))) {
            for (double[] row : List.of(nanRow, infRow)) {
                Selection s = eval(rule, row, Map.of());
                assertArrayEquals(new int[] {0, 1, 2}, s.ids(), rule + " on " + Arrays.toString(row));
                assertAllNaN(s.values(), rule + " on " + Arrays.toString(row));
            }
        }
    }

    /** The same end to end: expert 5's router row is all NaN, so its score is NaN. */
    @Test
    void nanRouterWeightsGiveNaNWeightsAtTheFirstKExperts() {
        int hidden = 16;
        int experts = 8;
        short[] x = RandomInputs.bf16Normal(11, 2 * hidden, 1.0);
        short[] w = RandomInputs.bf16Normal(12, experts * hidden, 0.25);
        Arrays.fill(w, 5 * hidden, 6 * hidden, Bf16.NAN);
        Result r = RouterReference.run(spec("nan", hidden, experts, RoutingRules.softmaxTopKRenormalized(4, DType.BF16)), x,
                WeightRows.bf16(w, 1, experts, hidden), Map.of());
        for (int t = 0; t < 2; t++) {
            assertTrue(Double.isNaN(r.scores()[t][5]));
            assertArrayEquals(new int[] {0, 1, 2, 3}, exact(r, t).ids());
            assertAllNaN(exact(r, t).values(), "exact, token " + t);
            assertArrayEquals(new int[] {0, 1, 2, 3}, stored(r, t).ids());
            assertAllNaN(stored(r, t).values(), "bf16 store, token " + t);
        }
    }

    /** -inf is a number: it ranks last among numbers and its probability is exactly 0. */
    @Test
    void softmaxRulesTreatMinusInfAsZeroProbability() {
        Selection s = eval(RoutingRules.softmaxTopKRenormalized(4, DType.FP32), new double[] {Double.NEGATIVE_INFINITY, 1, 2, 0},
                Map.of());
        assertArrayEquals(new int[] {2, 1, 3, 0}, s.ids());
        double z = Math.exp(2) + Math.exp(1) + Math.exp(0);
        assertArrayEquals(new double[] {Math.exp(2) / z, Math.exp(1) / z, 1 / z, 0.0}, s.values(), EXACT);
    }

    /**
     * gpt-oss selects before its softmax, so a NaN logit or a NaN bias only drops that expert: the
     * weights stay finite. Logits {1, NaN, 2, 0.5, 3}: experts 4, 2. Bias NaN on expert 4: experts 2, 0.
     */
    @Test
    void biasedTopKSoftmaxSkipsNaNExperts() {
        Store rule = RoutingRules.biasedTopKSoftmax(2, BIAS, DType.FP32);
        double z = Math.exp(3) + Math.exp(2);
        Selection s = eval(rule, new double[] {1, Double.NaN, 2, 0.5, 3}, bias(BIAS, new float[5]));
        assertArrayEquals(new int[] {4, 2}, s.ids());
        assertArrayEquals(new double[] {Math.exp(3) / z, Math.exp(2) / z}, s.values(), EXACT);

        Selection b = eval(rule, new double[] {1, -1, 2, 0.5, 3}, bias(BIAS, 0f, 0f, 0f, 0f, Float.NaN));
        double z2 = Math.exp(2) + Math.exp(1);
        assertArrayEquals(new int[] {2, 0}, b.ids());
        assertArrayEquals(new double[] {Math.exp(2) / z2, Math.exp(1) / z2}, b.values(), EXACT);
    }

    /**
     * A NaN expert is chosen only when fewer than k others exist, and then a NaN is in the softmax's
     * input, so every weight is NaN (Softmax: "A NaN anywhere in the input makes every output NaN").
     * Logits {NaN, 1, NaN, 2}, k=3: experts 3, 1, then the lower NaN, 0.
     */
    @Test
    void biasedTopKSoftmaxWithTooFewNumbersGivesNaNWeights() {
        Selection s = eval(RoutingRules.biasedTopKSoftmax(3, BIAS, DType.FP32), new double[] {Double.NaN, 1, Double.NaN, 2},
                bias(BIAS, new float[4]));
        assertArrayEquals(new int[] {3, 1, 0}, s.ids());
        assertAllNaN(s.values(), "gpt-oss with a NaN selected");
    }

    /**
     * Not stated in words, but what Softmax's documented formula exp(x_i - max) / sum gives: a +inf
     * logit is selected first and exp(inf - inf) is NaN, so every weight is NaN.
     */
    @Test
    void biasedTopKSoftmaxWithPlusInfGivesNaNWeights() {
        Selection s = eval(RoutingRules.biasedTopKSoftmax(2, BIAS, DType.FP32), new double[] {0, Double.POSITIVE_INFINITY, 1, 2},
                bias(BIAS, new float[4]));
        assertArrayEquals(new int[] {1, 3}, s.ids());
        assertAllNaN(s.values(), "gpt-oss with +inf selected");
    }

    /**
     * DeepSeek-V3: sigmoid(NaN) is NaN and so is its selection score; the expert is not chosen while
     * k others remain, and the weights stay finite and sum to the scaling factor. E=8 in 2 groups of 4,
     * one kept, k=2; logits {NaN, 2, 1.5, -1 | 1, 0.5, 0, -2}: group 0's two best are sigmoid(2) and
     * sigmoid(1.5) (NaN ranks below them), so it is kept, and the selection is 1, 2.
     */
    @Test
    void groupLimitedSigmoidSkipsANaNExpert() {
        double[] logits = {Double.NaN, 2, 1.5, -1, 1, 0.5, 0, -2};
        Selection s = eval(RoutingRules.groupLimitedSigmoid(2, 2, 1, SCALING, CORRECTION, DType.FP32), logits,
                bias(CORRECTION, new float[8]));
        assertArrayEquals(new int[] {1, 2}, s.ids());
        double z = sigmoid(2) + sigmoid(1.5);
        assertArrayEquals(new double[] {SCALING * sigmoid(2) / z, SCALING * sigmoid(1.5) / z}, s.values(), EXACT);
    }

    /**
     * A group of two holding a NaN scores sigmoid + NaN = NaN, which ranks below every group score:
     * logits {NaN, 3 | 1, 0.5 | 2, -1 | -2, -1.5}, 4 groups of 2, 2 kept, k=2. Group 0 is dropped
     * although expert 1 has the best score of all; groups 1 (1.35) and 2 (1.15) are kept: experts 4, 2.
     * (The NaN ordering of group scores follows from "NaN ranks below every number"; the docs do
     * not spell out group scores.)
     */
    @Test
    void groupLimitedSigmoidDropsAGroupWhoseScoreIsNaN() {
        double[] logits = {Double.NaN, 3, 1, 0.5, 2, -1, -2, -1.5};
        Selection s = eval(RoutingRules.groupLimitedSigmoid(2, 4, 2, SCALING, CORRECTION, DType.FP32), logits,
                bias(CORRECTION, new float[8]));
        assertArrayEquals(new int[] {4, 2}, s.ids());
        double z = sigmoid(2) + sigmoid(1);
        assertArrayEquals(new double[] {SCALING * sigmoid(2) / z, SCALING * sigmoid(1) / z}, s.values(), EXACT);
    }

    /** A NaN correction bias makes that expert's selection score NaN: never chosen while k others exist. */
    @Test
    void groupLimitedSigmoidSkipsANaNCorrectionBias() {
        Selection s = eval(RoutingRules.groupLimitedSigmoid(2, 1, 1, SCALING, CORRECTION, DType.FP32), new double[] {2, 1, 0, -1},
                bias(CORRECTION, Float.NaN, 0f, 0f, 0f));
        assertArrayEquals(new int[] {1, 2}, s.ids());
        double z = sigmoid(1) + sigmoid(0);
        assertArrayEquals(new double[] {SCALING * sigmoid(1) / z, SCALING * sigmoid(0) / z}, s.values(), EXACT);
    }

    /**
     * With fewer than k numbers among the kept experts the NaN expert is chosen last, its value is NaN
     * (TopK: "its value is then NaN too"), and renormalising by a NaN sum makes every weight NaN.
     * E=4, k=4, logits {1, NaN, 0, 2}: experts 3, 0, 2, 1. Also within kept groups: E=8 in 2 groups
     * of 4, one kept, k=4, logits {3, NaN, 2, 1 | 0, 0, 0, 0}: group 0 (sigmoid(3) + sigmoid(2)) is kept,
     * and its NaN expert is chosen though group 1 has four numbers.
     */
    @Test
    void groupLimitedSigmoidChoosesANaNOnlyWhenTooFewNumbersAreLeft() {
        Selection s = eval(RoutingRules.groupLimitedSigmoid(4, 1, 1, SCALING, CORRECTION, DType.FP32),
                new double[] {1, Double.NaN, 0, 2}, bias(CORRECTION, new float[4]));
        assertArrayEquals(new int[] {3, 0, 2, 1}, s.ids());
        assertAllNaN(s.values(), "DeepSeek with a NaN selected");

        Selection g = eval(RoutingRules.groupLimitedSigmoid(4, 2, 1, SCALING, CORRECTION, DType.FP32),
                new double[] {3, Double.NaN, 2, 1, 0, 0, 0, 0}, bias(CORRECTION, new float[8]));
        assertArrayEquals(new int[] {0, 2, 3, 1}, g.ids());
        assertAllNaN(g.values(), "DeepSeek with a NaN selected in the kept group");
    }

    // ---------------------------------------------------------------------------------------
    // metamorphic properties on random rows
    // ---------------------------------------------------------------------------------------

    enum Rule { SOFTMAX_RENORM, SOFTMAX, BIASED_SOFTMAX, GROUP_SIGMOID }

    private static final int TOKENS = 200;
    private static final int HIDDEN = 32;

    /** Groups of the DeepSeek rule per E: 8 groups (4 of 2 for E=8), half of them kept. */
    private static int groups(int experts) {
        return experts == 8 ? 4 : 8;
    }

    private static Store rule(Rule rule, int k, int experts) {
        return switch (rule) {
            case SOFTMAX_RENORM -> RoutingRules.softmaxTopKRenormalized(k, DType.FP32);
            case SOFTMAX -> RoutingRules.softmaxTopK(k, DType.FP32);
            case BIASED_SOFTMAX -> RoutingRules.biasedTopKSoftmax(k, BIAS, DType.FP32);
            case GROUP_SIGMOID -> RoutingRules.groupLimitedSigmoid(k, groups(experts), groups(experts) / 2, SCALING, CORRECTION,
                    DType.FP32);
        };
    }

    static Stream<Arguments> metamorphicCases() {
        List<Arguments> out = new ArrayList<>();
        for (Rule r : Rule.values()) {
            for (int e : new int[] {8, 64, 128, 512}) {
                for (int k : new int[] {1, 2, 4, 8, 10, 16}) {
                    int limit = r == Rule.GROUP_SIGMOID ? groups(e) / 2 * (e / groups(e)) : e;
                    if (k <= limit) {
                        out.add(Arguments.of(r, e, k));
                    }
                }
            }
        }
        return out.stream();
    }

    /** The per-expert vector of the rule, if it has one. */
    private static Map<String, float[]> params(Rule rule, int experts, long seed) {
        return switch (rule) {
            case SOFTMAX_RENORM, SOFTMAX -> Map.of();
            case BIASED_SOFTMAX -> Map.of(BIAS, RandomInputs.floatNormal(seed, experts, 1.0));
            case GROUP_SIGMOID -> Map.of(CORRECTION, RandomInputs.floatNormal(seed, experts, 0.3));
        };
    }

    /** What the expert is ranked by, computed here from the scores: monotone in the rule's selection score. */
    private static double[] selectionScores(Rule rule, double[] acc, Map<String, float[]> params) {
        return switch (rule) {
            case SOFTMAX_RENORM, SOFTMAX -> acc.clone();
            case BIASED_SOFTMAX -> {
                float[] b = params.get(BIAS);
                double[] out = new double[acc.length];
                for (int e = 0; e < acc.length; e++) {
                    out[e] = acc[e] + b[e];
                }
                yield out;
            }
            case GROUP_SIGMOID -> {
                float[] b = params.get(CORRECTION);
                double[] out = new double[acc.length];
                for (int e = 0; e < acc.length; e++) {
                    out[e] = sigmoid(acc[e]) + b[e];
                }
                yield out;
            }
        };
    }

    /** The experts allowed by the group limit, computed here: groups ranked by the sum of their two best. */
    private static boolean[] allowed(Rule rule, double[] sel) {
        boolean[] allowed = new boolean[sel.length];
        if (rule != Rule.GROUP_SIGMOID) {
            Arrays.fill(allowed, true);
            return allowed;
        }
        int groups = groups(sel.length);
        int size = sel.length / groups;
        double[] groupScore = new double[groups];
        for (int g = 0; g < groups; g++) {
            double[] members = Arrays.copyOfRange(sel, g * size, (g + 1) * size);
            Arrays.sort(members);
            groupScore[g] = members[size - 1] + members[size - 2];
        }
        double[] sorted = groupScore.clone();
        Arrays.sort(sorted);
        assertTrue(Arrays.stream(sorted).distinct().count() == groups, "test data: group scores must not tie");
        double threshold = sorted[groups - groups / 2];  // the (groups/2)-th best group score
        for (int g = 0; g < groups; g++) {
            if (groupScore[g] >= threshold) {
                Arrays.fill(allowed, g * size, (g + 1) * size, true);
            }
        }
        return allowed;
    }

    /** The weights the rule documents, computed here from the scores and the selected ids. */
    private static double[] expectedWeights(Rule rule, double[] acc, int[] ids, Map<String, float[]> params) {
        int k = ids.length;
        double[] w = new double[k];
        switch (rule) {
            case SOFTMAX_RENORM -> {
                double z = 0;
                for (int id : ids) {
                    z += Math.exp(acc[id] - acc[ids[0]]);
                }
                for (int j = 0; j < k; j++) {
                    w[j] = Math.exp(acc[ids[j]] - acc[ids[0]]) / z;
                }
            }
            case SOFTMAX -> {
                double max = Arrays.stream(acc).max().orElseThrow();
                double z = Arrays.stream(acc).map(a -> Math.exp(a - max)).sum();
                for (int j = 0; j < k; j++) {
                    w[j] = Math.exp(acc[ids[j]] - max) / z;
                }
            }
            case BIASED_SOFTMAX -> {
                float[] b = params.get(BIAS);
                double top = acc[ids[0]] + b[ids[0]];
                double z = 0;
                for (int id : ids) {
                    z += Math.exp(acc[id] + b[id] - top);
                }
                for (int j = 0; j < k; j++) {
                    w[j] = Math.exp(acc[ids[j]] + b[ids[j]] - top) / z;
                }
            }
            case GROUP_SIGMOID -> {
                double z = 0;
                for (int id : ids) {
                    z += sigmoid(acc[id]);
                }
                for (int j = 0; j < k; j++) {
                    w[j] = SCALING * sigmoid(acc[ids[j]]) / z;
                }
            }
        }
        return w;
    }

    /** A random permutation; for the group-limited rule it keeps groups whole (it permutes groups, and experts within each). */
    private static int[] permutation(Rule rule, int experts, SplittableRandom r) {
        int groups = rule == Rule.GROUP_SIGMOID ? groups(experts) : 1;
        int size = experts / groups;
        int[] groupOrder = shuffled(groups, r);
        int[] p = new int[experts];
        for (int g = 0; g < groups; g++) {
            int[] within = shuffled(size, r);
            for (int i = 0; i < size; i++) {
                p[g * size + i] = groupOrder[g] * size + within[i];
            }
        }
        return p;
    }

    private static int[] shuffled(int n, SplittableRandom r) {
        int[] a = new int[n];
        for (int i = 0; i < n; i++) {
            a[i] = i;
        }
        for (int i = n - 1; i > 0; i--) {
            int j = r.nextInt(i + 1);
            int t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
        return a;
    }

    private static WeightRows fp32Rows(float[] w, int experts) {
        return WeightRows.of(RowSource.of(w, experts, HIDDEN), 1, experts, HIDDEN);
    }

    @ParameterizedTest(name = "{0} E={1} k={2}")
    @MethodSource("metamorphicCases")
    void metamorphicProperties(Rule rule, int experts, int k) {
        long seed = 1000L * experts + 17L * k + rule.ordinal();
        KernelSpec spec = spec("m", HIDDEN, experts, rule(rule, k, experts));
        short[] x = RandomInputs.bf16Normal(seed, TOKENS * HIDDEN, 1.0);
        // FP32 router rows (the reference does not care about the format): continuous scores, so that no two
        // experts tie and the permutation property is exact. bf16 rows with H=32 do tie now and then.
        float[] w = RandomInputs.floatNormal(seed + 1, experts * HIDDEN, 1.0 / Math.sqrt(HIDDEN));
        Map<String, float[]> params = params(rule, experts, seed + 2);
        Result r = RouterReference.run(spec, x, fp32Rows(w, experts), params);

        int unsortedWeights = 0;
        for (int t = 0; t < TOKENS; t++) {
            String at = "token " + t + " (seed " + seed + ")";
            double[] acc = r.scores()[t];
            Selection s = exact(r, t);
            int[] ids = s.ids();
            double[] v = s.values();
            assertEquals(k, ids.length, at);
            assertEquals(k, v.length, at);

            // ids distinct and in range
            boolean[] seen = new boolean[experts];
            for (int id : ids) {
                assertTrue(id >= 0 && id < experts, at + ": id " + id + " out of range");
                assertFalse(seen[id], at + ": id " + id + " twice in " + Arrays.toString(ids));
                seen[id] = true;
            }

            // the k best allowed experts, best first (no ties in the data)
            double[] sel = selectionScores(rule, acc, params);
            assertEquals(experts, Arrays.stream(sel).distinct().count(), at + ": test data must not tie");
            boolean[] allowed = allowed(rule, sel);
            for (int j = 1; j < k; j++) {
                assertTrue(sel[ids[j - 1]] > sel[ids[j]], at + ": not in descending selection order: " + Arrays.toString(ids));
            }
            for (int id : ids) {
                assertTrue(allowed[id], at + ": expert " + id + " is outside the kept groups");
            }
            double worstChosen = sel[ids[k - 1]];
            for (int e = 0; e < experts; e++) {
                if (!seen[e] && allowed[e]) {
                    assertTrue(sel[e] < worstChosen, at + ": expert " + e + " beats chosen expert " + ids[k - 1]);
                }
            }

            // weights: the documented formula, their sum, their order
            assertArrayEquals(expectedWeights(rule, acc, ids, params), v, EXACT, at);
            assertAllFinite(v, at);
            double sum = Arrays.stream(v).sum();
            switch (rule) {
                case SOFTMAX_RENORM, BIASED_SOFTMAX -> assertEquals(1.0, sum, EXACT, at);
                case GROUP_SIGMOID -> assertEquals(SCALING, sum, EXACT * SCALING, at);
                case SOFTMAX -> {
                    if (k == experts) {
                        assertEquals(1.0, sum, EXACT, at);
                    } else {
                        assertTrue(sum > 0 && sum < 1, at + ": OLMoE's top-" + k + " of " + experts + " sums to " + sum);
                    }
                }
            }
            for (int j = 1; j < k; j++) {
                if (rule == Rule.GROUP_SIGMOID) {
                    unsortedWeights += v[j - 1] < v[j] ? 1 : 0;  // ordered by the biased score, weighted by the unbiased one
                } else {
                    assertTrue(v[j - 1] > v[j], at + ": weights not descending: " + Arrays.toString(v));
                }
            }

            // the FP32 store: the same ids, each weight rounded once; the sum within FP32 rounding
            Selection st = stored(r, t);
            assertArrayEquals(ids, st.ids(), at);
            double storedSum = 0;
            for (int j = 0; j < k; j++) {
                assertEquals((float) v[j], st.values()[j], 0.0, at);
                storedSum += st.values()[j];
            }
            assertEquals(sum, storedSum, STORED * sum, at);
        }
        if (rule == Rule.GROUP_SIGMOID && k >= 2) {
            assertTrue(unsortedWeights > 0, "test data: the correction bias should reorder some selection against the weights");
        }

        // permuting the experts (W_r's rows and the per-expert vector) permutes the ids and keeps the weights
        int[] p = permutation(rule, experts, new SplittableRandom(seed + 3));
        assertFalse(IntStream.range(0, experts).allMatch(e -> p[e] == e), "test setup: identity permutation");
        float[] wp = new float[w.length];
        for (int e = 0; e < experts; e++) {
            System.arraycopy(w, e * HIDDEN, wp, p[e] * HIDDEN, HIDDEN);
        }
        Map<String, float[]> pp = new HashMap<>();
        params.forEach((name, vec) -> {
            float[] q = new float[experts];
            for (int e = 0; e < experts; e++) {
                q[p[e]] = vec[e];
            }
            pp.put(name, q);
        });
        Result rp = RouterReference.run(spec, x, fp32Rows(wp, experts), pp);
        for (int t = 0; t < TOKENS; t++) {
            String at = "permuted, token " + t + " (seed " + seed + ")";
            double[] unpermuted = new double[experts];
            for (int e = 0; e < experts; e++) {
                unpermuted[e] = rp.scores()[t][p[e]];
            }
            assertArrayEquals(r.scores()[t], unpermuted, 0.0, at + ": scores");
            Selection s = exact(r, t);
            Selection sp = exact(rp, t);
            int[] mapped = Arrays.stream(s.ids()).map(id -> p[id]).toArray();
            assertArrayEquals(mapped, sp.ids(), at);
            assertArrayEquals(s.values(), sp.values(), EXACT, at);
        }
    }
}
