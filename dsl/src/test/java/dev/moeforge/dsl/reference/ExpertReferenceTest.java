package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertThrowsExactly;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import java.util.Arrays;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The CPU oracle on cases small enough to work out by hand, on metamorphic relations over random
 * inputs, and on the routing tables it must reject.
 */
class ExpertReferenceTest {

    // ---------------------------------------------------------------------------------------
    // gate_up by hand
    // ---------------------------------------------------------------------------------------

    /**
     * H=4, I=2, E=2, top-1, one token x = [1, 2, 0, -1] routed to expert 1. Expert 1's rows:
     * gate0 = [1,0,0,0] -> 1; gate1 = [0,1,0,0] -> 2; up0 = [0,0,0,1] -> -1; up1 = [1,1,1,1] -> 1+2+0-1 = 2.
     * Expert 0 is all 3s, so reading the wrong expert shows.
     */
    private static final double[] X_TOP1 = {1, 2, 0, -1};
    private static final double[] EXPERT0_ROWS = {
        3, 3, 3, 3,
        3, 3, 3, 3,
        3, 3, 3, 3,
        3, 3, 3, 3,
    };
    private static final double[] GATE0 = {1, 0, 0, 0};
    private static final double[] GATE1 = {0, 1, 0, 0};
    private static final double[] UP0 = {0, 0, 0, 1};
    private static final double[] UP1 = {1, 1, 1, 1};

    /** silu(gate0) * up0 = silu(1) * -1, silu(gate1) * up1 = silu(2) * 2. */
    private static final double[] TOP1_EXPECTED = {
        1.0 / (1.0 + Math.exp(-1.0)) * -1.0,
        2.0 / (1.0 + Math.exp(-2.0)) * 2.0,
    };

    @Test
    void gateUpStackedReadsGateRowsThenUpRows() {
        // stacked: rows 0..I-1 are gate, rows I..2I-1 are up
        short[] w = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, GATE1, UP0, UP1));
        ExpertReference.Result r = ExpertReference.gateUp(layer(4, 2, 2, 1, GateUpLayout.STACKED).gateUp(),
                ExactBf16.of(X_TOP1), WeightRows.bf16(w, 2, 4, 4), routing(1, 1, new int[] {1}, new float[] {1f}));
        assertArrayEquals(TOP1_EXPECTED, r.exact(), 1e-15);
        assertStoredIsRoundedExact(r);
    }

    @Test
    void gateUpInterleavedReadsGateAtEvenAndUpAtOddRows() {
        // interleaved: gate i at row 2i, up i at row 2i+1
        short[] w = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, UP0, GATE1, UP1));
        ExpertReference.Result r = ExpertReference.gateUp(layer(4, 2, 2, 1, GateUpLayout.INTERLEAVED).gateUp(),
                ExactBf16.of(X_TOP1), WeightRows.bf16(w, 2, 4, 4), routing(1, 1, new int[] {1}, new float[] {1f}));
        assertArrayEquals(TOP1_EXPECTED, r.exact(), 1e-15);
        assertStoredIsRoundedExact(r);
    }

    @Test
    void gateUpLayoutDecidesWhichRowIsWhich() {
        // interleaved data read as stacked: gate0 = row0 = GATE0 -> 1, gate1 = row1 = UP0 -> -1,
        // up0 = row2 = GATE1 -> 2, up1 = row3 = UP1 -> 2
        short[] interleavedData = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, UP0, GATE1, UP1));
        ExpertReference.Result r = ExpertReference.gateUp(layer(4, 2, 2, 1, GateUpLayout.STACKED).gateUp(),
                ExactBf16.of(X_TOP1), WeightRows.bf16(interleavedData, 2, 4, 4), routing(1, 1, new int[] {1}, new float[] {1f}));
        double[] expected = {
            1.0 / (1.0 + Math.exp(-1.0)) * 2.0,
            -1.0 / (1.0 + Math.exp(1.0)) * 2.0,
        };
        assertArrayEquals(expected, r.exact(), 1e-15);
    }

    @Test
    void gateUpReadsTheRoutedExpert() {
        // routed to expert 0 (all 3s): gate = up = 3*(1+2+0-1) = 6 for both neurons
        short[] w = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, GATE1, UP0, UP1));
        ExpertReference.Result r = ExpertReference.gateUp(layer(4, 2, 2, 1, GateUpLayout.STACKED).gateUp(),
                ExactBf16.of(X_TOP1), WeightRows.bf16(w, 2, 4, 4), routing(1, 1, new int[] {0}, new float[] {1f}));
        double six = 6.0 / (1.0 + Math.exp(-6.0)) * 6.0;
        assertArrayEquals(new double[] {six, six}, r.exact(), 1e-13);
    }

    /**
     * H=2, I=2, E=3, top-2, two tokens. Expert e has gate0 = [e+1, 0], gate1 = [0, e+1],
     * up0 = [1, 0], up1 = [1, 1]. x0 = [1, 2], x1 = [-1, 2]; ids = [[2, 0], [1, 2]].
     * Output inter[m][j][i] at (m*k + j)*I + i.
     */
    @ParameterizedTest
    @EnumSource(GateUpLayout.class)
    void gateUpTop2TwoTokensByHand(GateUpLayout layout) {
        double[][] gate = new double[3][];
        double[][] up = new double[3][];
        for (int e = 0; e < 3; e++) {
            gate[e] = new double[] {e + 1, 0, 0, e + 1};
            up[e] = new double[] {1, 0, 1, 1};
        }
        short[] w = ExactBf16.of(gateUpWeights(layout, gate, up, 2, 2));
        double[] x = {1, 2, -1, 2};
        Routing routing = routing(2, 2, new int[] {2, 0, 1, 2}, new float[] {0.5f, 0.5f, 0.5f, 0.5f});

        ExpertReference.Result r = ExpertReference.gateUp(layer(2, 2, 3, 2, layout).gateUp(), ExactBf16.of(x),
                WeightRows.bf16(w, 3, 4, 2), routing);

        double[] expected = {
            // token 0, slot 0, expert 2: gate = [3*1, 3*2] = [3, 6]; up = [1, 1+2] = [1, 3]
            silu(3) * 1, silu(6) * 3,
            // token 0, slot 1, expert 0: gate = [1*1, 1*2] = [1, 2]; up = [1, 3]
            silu(1) * 1, silu(2) * 3,
            // token 1, slot 0, expert 1: gate = [2*-1, 2*2] = [-2, 4]; up = [-1, -1+2] = [-1, 1]
            silu(-2) * -1, silu(4) * 1,
            // token 1, slot 1, expert 2: gate = [3*-1, 3*2] = [-3, 6]; up = [-1, 1]
            silu(-3) * -1, silu(6) * 1,
        };
        assertArrayEquals(expected, r.exact(), 1e-14);
        assertStoredIsRoundedExact(r);
    }

    // ---------------------------------------------------------------------------------------
    // down by hand
    // ---------------------------------------------------------------------------------------

    /**
     * H=2, I=2, E=3, top-2, two tokens. W_down[e][h] rows: expert 0 = [[1,1],[0,2]],
     * expert 1 = [[1,2],[0.5,-1]], expert 2 = [[2,0],[1,-1]].
     */
    @Test
    void downIsTheRoutingWeightedSumOfDotProducts() {
        short[] w = ExactBf16.of(
                1, 1, 0, 2,          // expert 0
                1, 2, 0.5, -1,       // expert 1
                2, 0, 1, -1);        // expert 2
        short[] inter = ExactBf16.of(
                1, 2, 3, -1,         // token 0: slot 0, slot 1
                1, 1, 2, 0);         // token 1: slot 0, slot 1
        Routing routing = routing(2, 2, new int[] {2, 0, 1, 0}, new float[] {0.25f, 0.75f, 0.5f, 0.5f});

        ExpertReference.Result r = ExpertReference.down(layer(2, 2, 3, 2, GateUpLayout.STACKED).down(), inter,
                WeightRows.bf16(w, 3, 2, 2), routing);

        double[] expected = {
            // token 0: 0.25 * W[2][h].[1,2] + 0.75 * W[0][h].[3,-1]
            0.25 * (2 * 1 + 0 * 2) + 0.75 * (1 * 3 + 1 * -1),      // = 0.5 + 1.5 = 2
            0.25 * (1 * 1 + -1 * 2) + 0.75 * (0 * 3 + 2 * -1),     // = -0.25 - 1.5 = -1.75
            // token 1: 0.5 * W[1][h].[1,1] + 0.5 * W[0][h].[2,0]
            0.5 * (1 * 1 + 2 * 1) + 0.5 * (1 * 2 + 1 * 0),         // = 1.5 + 1 = 2.5
            0.5 * (0.5 * 1 + -1 * 1) + 0.5 * (0 * 2 + 2 * 0),      // = -0.25 + 0 = -0.25
        };
        assertArrayEquals(new double[] {2, -1.75, 2.5, -0.25}, expected, 0, "the hand arithmetic itself");
        assertArrayEquals(expected, r.exact(), 0);
        // all four are bf16-exact: 2.0 = 0x4000, -1.75 = 0xBFE0, 2.5 = 0x4020, -0.25 = 0xBE80
        assertArrayEquals(new short[] {0x4000, (short) 0xBFE0, 0x4020, (short) 0xBE80}, r.stored());
    }

    // ---------------------------------------------------------------------------------------
    // biases (gpt-oss) by hand
    // ---------------------------------------------------------------------------------------

    /**
     * The interleaved top-1 case above with a bias on expert 1's rows (gate0, up0, gate1, up1) =
     * (0.5, 1, -3, 0.25): gate0 = 1 + 0.5, up0 = -1 + 1, gate1 = 2 - 3, up1 = 2 + 0.25. Expert 0's
     * bias is large, so reading the wrong expert's bias shows.
     */
    @Test
    void gateUpAddsTheRoutedExpertsBiasOfEachRowBeforeTheEpilogue() {
        short[] w = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, UP0, GATE1, UP1));
        float[] bias = {100, 100, 100, 100, 0.5f, 1, -3, 0.25f};
        ExpertReference.Result r = ExpertReference.gateUp(layer(4, 2, 2, 1, GateUpLayout.INTERLEAVED).withBias().gateUp(),
                ExactBf16.of(X_TOP1), WeightRows.bf16(w, 2, 4, 4).withBias(bias), routing(1, 1, new int[] {1}, new float[] {1f}));
        assertArrayEquals(new double[] {silu(1.5) * 0.0, silu(-1.0) * 2.25}, r.exact(), 1e-15);
        assertStoredIsRoundedExact(r);
    }

    /** The down case above with a bias per (expert, h): each slot's bias is weighted like its dot product. */
    @Test
    void downWeightsEachSlotsBiasWithItsRoutingWeight() {
        short[] w = ExactBf16.of(
                1, 1, 0, 2,          // expert 0: rows h=0, h=1
                1, 2, 0.5, -1,       // expert 1
                2, 0, 1, -1);        // expert 2
        short[] inter = ExactBf16.of(1, 2, 3, -1, 1, 1, 2, 0);
        Routing routing = routing(2, 2, new int[] {2, 0, 1, 0}, new float[] {0.25f, 0.75f, 0.5f, 0.5f});
        float[] bias = {1, -2, 4, 8, 0.5f, 0};  // [e][h]
        ExpertReference.Result r = ExpertReference.down(layer(2, 2, 3, 2, GateUpLayout.STACKED).withBias().down(), inter,
                WeightRows.bf16(w, 3, 2, 2).withBias(bias), routing);
        // the unbiased y was {2, -1.75, 2.5, -0.25}; token 0 adds 0.25 b[2] + 0.75 b[0], token 1 0.5 b[1] + 0.5 b[0]
        double[] expected = {
            2 + 0.25 * 0.5 + 0.75 * 1,
            -1.75 + 0.25 * 0 + 0.75 * -2,
            2.5 + 0.5 * 4 + 0.5 * 1,
            -0.25 + 0.5 * 8 + 0.5 * -2,
        };
        assertArrayEquals(expected, r.exact(), 0);
    }

    @Test
    void biasOnOneSideOnlyIsRefused() {
        short[] w = ExactBf16.of(concat(EXPERT0_ROWS, GATE0, UP0, GATE1, UP1));
        Routing top1 = routing(1, 1, new int[] {1}, new float[] {1f});
        IllegalArgumentException noBias = assertThrows(IllegalArgumentException.class, () -> ExpertReference.gateUp(
                layer(4, 2, 2, 1, GateUpLayout.INTERLEAVED).withBias().gateUp(), ExactBf16.of(X_TOP1), WeightRows.bf16(w, 2, 4, 4), top1));
        assertTrue(noBias.getMessage().contains("bias=true"), noBias.getMessage());
        IllegalArgumentException extra = assertThrows(IllegalArgumentException.class, () -> ExpertReference.gateUp(
                layer(4, 2, 2, 1, GateUpLayout.INTERLEAVED).gateUp(), ExactBf16.of(X_TOP1),
                WeightRows.bf16(w, 2, 4, 4).withBias(new float[8]), top1));
        assertTrue(extra.getMessage().contains("the spec has none"), extra.getMessage());
        IllegalArgumentException size = assertThrows(IllegalArgumentException.class,
                () -> WeightRows.bf16(w, 2, 4, 4).withBias(new float[7]));
        assertTrue(size.getMessage().contains("needs 8 values"), size.getMessage());
    }

    // ---------------------------------------------------------------------------------------
    // metamorphic relations on random inputs
    // ---------------------------------------------------------------------------------------

    private static final ExpertShape RANDOM_SHAPE = new ExpertShape(64, 32, 8, 4);
    private static final int RANDOM_TOKENS = 6;

    @Test
    void storedIsTheBf16RoundingOfExactOnRandomInputs() {
        RandomCase c = RandomCase.create(11L);
        ExpertReference.Result inter = c.gateUp(c.routing);
        ExpertReference.Result y = c.down(inter.stored(), c.routing);
        assertStoredIsRoundedExact(inter);
        assertStoredIsRoundedExact(y);
        assertEquals(RANDOM_TOKENS * 4 * 32, inter.exact().length);
        assertEquals(RANDOM_TOKENS * 64, y.exact().length);
        assertTrue(Arrays.stream(y.exact()).anyMatch(v -> v != 0), "random inputs must not give all zeros");
    }

    @Test
    void downScalesExactlyWithTheRoutingWeights() {
        RandomCase c = RandomCase.create(12L);
        short[] inter = c.gateUp(c.routing).stored();
        ExpertReference.Result y = c.down(inter, c.routing);
        float[] doubled = c.routing.weights().clone();
        for (int i = 0; i < doubled.length; i++) {
            doubled[i] *= 2;
        }
        ExpertReference.Result y2 = c.down(inter, new Routing(RANDOM_TOKENS, 4, c.routing.ids().clone(), doubled));
        for (int i = 0; i < y.exact().length; i++) {
            double want = 2 * y.exact()[i];
            assertEquals(want, y2.exact()[i], 1e-12 * Math.abs(want), "y[" + i + "] with doubled weights");
        }
    }

    /** Weights that are multiples of 1/64 in [-1, 1] add exactly in FP32, so y(a + b) = y(a) + y(b). */
    @Test
    void downIsAdditiveInTheRoutingWeights() {
        RandomCase c = RandomCase.create(13L);
        short[] inter = c.gateUp(c.routing).stored();
        SplittableRandom r = new SplittableRandom(14L);
        float[] a = new float[RANDOM_TOKENS * 4];
        float[] b = new float[a.length];
        float[] sum = new float[a.length];
        for (int i = 0; i < a.length; i++) {
            a[i] = (r.nextInt(129) - 64) / 64f;
            b[i] = (r.nextInt(129) - 64) / 64f;
            sum[i] = a[i] + b[i];
        }
        int[] ids = c.routing.ids();
        double[] ya = c.down(inter, new Routing(RANDOM_TOKENS, 4, ids.clone(), a)).exact();
        double[] yb = c.down(inter, new Routing(RANDOM_TOKENS, 4, ids.clone(), b)).exact();
        double[] ySum = c.down(inter, new Routing(RANDOM_TOKENS, 4, ids.clone(), sum)).exact();
        double scale = maxAbs(ySum) + maxAbs(ya) + maxAbs(yb);
        for (int i = 0; i < ySum.length; i++) {
            assertEquals(ya[i] + yb[i], ySum[i], 1e-12 * scale, "y[" + i + "]");
        }
    }

    @Test
    void gateUpIgnoresTheRoutingWeights() {
        RandomCase c = RandomCase.create(15L);
        float[] other = new float[c.routing.weights().length];
        Arrays.fill(other, 0.125f);
        double[] a = c.gateUp(c.routing).exact();
        double[] b = c.gateUp(new Routing(RANDOM_TOKENS, 4, c.routing.ids().clone(), other)).exact();
        assertArrayEquals(a, b, 0);
    }

    /** Renumbering the experts (moving each expert's weights to its new number) changes nothing. */
    @Test
    void permutingTheExpertNumberingLeavesOutputsUnchanged() {
        RandomCase c = RandomCase.create(16L);
        int experts = RANDOM_SHAPE.experts();
        int[] perm = permutation(new SplittableRandom(17L), experts);
        int gateUpBlock = 2 * RANDOM_SHAPE.intermediate() * RANDOM_SHAPE.hidden();
        int downBlock = RANDOM_SHAPE.hidden() * RANDOM_SHAPE.intermediate();
        short[] wGateUp = new short[c.wGateUp.length];
        short[] wDown = new short[c.wDown.length];
        for (int e = 0; e < experts; e++) {
            System.arraycopy(c.wGateUp, e * gateUpBlock, wGateUp, perm[e] * gateUpBlock, gateUpBlock);
            System.arraycopy(c.wDown, e * downBlock, wDown, perm[e] * downBlock, downBlock);
        }
        int[] ids = c.routing.ids().clone();
        for (int i = 0; i < ids.length; i++) {
            ids[i] = perm[ids[i]];
        }
        Routing renumbered = new Routing(RANDOM_TOKENS, 4, ids, c.routing.weights().clone());
        RandomCase permuted = new RandomCase(c.specs, c.x, wGateUp, wDown, renumbered);

        ExpertReference.Result inter = c.gateUp(c.routing);
        ExpertReference.Result interPermuted = permuted.gateUp(renumbered);
        assertArrayEquals(inter.exact(), interPermuted.exact(), 0);
        assertArrayEquals(inter.stored(), interPermuted.stored());
        assertArrayEquals(c.down(inter.stored(), c.routing).exact(),
                permuted.down(interPermuted.stored(), renumbered).exact(), 0);
    }

    /**
     * Reordering a token's (id, weight) pairs reorders its gate_up outputs the same way and leaves
     * y unchanged up to summation order.
     */
    @Test
    void permutingATokensSlotsLeavesYUnchanged() {
        RandomCase c = RandomCase.create(18L);
        int k = RANDOM_SHAPE.topk();
        int n = RANDOM_SHAPE.intermediate();
        SplittableRandom r = new SplittableRandom(19L);
        int[][] slotPerm = new int[RANDOM_TOKENS][];
        int[] ids = new int[RANDOM_TOKENS * k];
        float[] weights = new float[RANDOM_TOKENS * k];
        for (int m = 0; m < RANDOM_TOKENS; m++) {
            slotPerm[m] = permutation(r, k);
            for (int j = 0; j < k; j++) {
                ids[m * k + j] = c.routing.id(m, slotPerm[m][j]);
                weights[m * k + j] = c.routing.weight(m, slotPerm[m][j]);
            }
        }
        Routing reordered = new Routing(RANDOM_TOKENS, k, ids, weights);

        ExpertReference.Result inter = c.gateUp(c.routing);
        ExpertReference.Result interReordered = c.gateUp(reordered);
        for (int m = 0; m < RANDOM_TOKENS; m++) {
            for (int j = 0; j < k; j++) {
                for (int i = 0; i < n; i++) {
                    assertEquals(inter.exact()[(m * k + slotPerm[m][j]) * n + i], interReordered.exact()[(m * k + j) * n + i], 0,
                            "inter[" + m + "][" + j + "][" + i + "]");
                }
            }
        }
        double[] y = c.down(inter.stored(), c.routing).exact();
        double[] yReordered = c.down(interReordered.stored(), reordered).exact();
        double scale = maxAbs(y);
        assertTrue(scale > 0);
        for (int i = 0; i < y.length; i++) {
            assertEquals(y[i], yReordered[i], 1e-12 * scale, "y[" + i + "]");
        }
    }

    // ---------------------------------------------------------------------------------------
    // inputs the reference rejects
    // ---------------------------------------------------------------------------------------

    static Stream<Arguments> badRoutings() {
        float nan = Float.NaN;
        float inf = Float.POSITIVE_INFINITY;
        return Stream.of(
                Arguments.of("id out of range", new int[] {0, 1, 7, 2}, new float[] {0.5f, 0.5f, 0.5f, 0.5f}, "topk_ids[1][0] = 7"),
                Arguments.of("id equal to E", new int[] {0, 3, 1, 2}, new float[] {0.5f, 0.5f, 0.5f, 0.5f}, "topk_ids[0][1] = 3"),
                Arguments.of("negative id", new int[] {0, -1, 1, 2}, new float[] {0.5f, 0.5f, 0.5f, 0.5f}, "topk_ids[0][1] = -1"),
                Arguments.of("duplicate id in a row", new int[] {0, 1, 2, 2}, new float[] {0.5f, 0.5f, 0.5f, 0.5f}, "topk_ids[1][1] = 2"),
                Arguments.of("NaN weight", new int[] {0, 1, 1, 2}, new float[] {0.5f, nan, 0.5f, 0.5f}, "topk_weights[0][1] = NaN"),
                Arguments.of("+inf weight", new int[] {0, 1, 1, 2}, new float[] {0.5f, 0.5f, inf, 0.5f}, "topk_weights[1][0] = Infinity"),
                Arguments.of("-inf weight", new int[] {0, 1, 1, 2}, new float[] {-inf, 0.5f, 0.5f, 0.5f}, "topk_weights[0][0] = -Infinity"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("badRoutings")
    void gateUpRejectsBadRoutingNamingTheEntry(String what, int[] ids, float[] weights, String entry) {
        TinyInputs t = new TinyInputs();
        RoutingException e = assertThrows(RoutingException.class,
                () -> ExpertReference.gateUp(t.specs.gateUp(), t.x, t.wGateUp, new Routing(2, 2, ids, weights)));
        assertTrue(e.getMessage().startsWith(entry + ":"), () -> "message '" + e.getMessage() + "' should name " + entry);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("badRoutings")
    void downRejectsBadRoutingNamingTheEntry(String what, int[] ids, float[] weights, String entry) {
        TinyInputs t = new TinyInputs();
        RoutingException e = assertThrows(RoutingException.class,
                () -> ExpertReference.down(t.specs.down(), t.inter, t.wDown, new Routing(2, 2, ids, weights)));
        assertTrue(e.getMessage().startsWith(entry + ":"), () -> "message '" + e.getMessage() + "' should name " + entry);
    }

    @Test
    void duplicateIdMessageNamesTheEarlierSlot() {
        RoutingException e = assertThrows(RoutingException.class,
                () -> new Routing(1, 3, new int[] {4, 1, 4}, new float[] {1, 1, 1}).checkedFor(8));
        assertEquals("topk_ids[0][2] = 4: expert 4 is already routed at slot 0; a token's experts must be distinct",
                e.getMessage());
    }

    @Test
    void validRoutingPassesItsCheck() {
        Routing r = new Routing(2, 2, new int[] {0, 2, 2, 1}, new float[] {0.5f, -0.5f, 0f, 1e30f});
        assertSame(r, r.checkedFor(3));
    }

    @Test
    void topkMismatchIsAnIllegalArgument() {
        TinyInputs t = new TinyInputs();
        Routing top1 = new Routing(2, 1, new int[] {0, 1}, new float[] {1f, 1f});
        IllegalArgumentException gateUp = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.gateUp(t.specs.gateUp(), t.x, t.wGateUp, top1));
        assertEquals("routing has top-1, the spec top-2", gateUp.getMessage());
        IllegalArgumentException down = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.down(t.specs.down(), t.inter, t.wDown, top1));
        assertEquals("routing has top-1, the spec top-2", down.getMessage());
    }

    @Test
    void wrongWeightShapeIsAnIllegalArgument() {
        TinyInputs t = new TinyInputs();
        WeightRows twoExperts = WeightRows.bf16(new short[2 * 4 * 2], 2, 4, 2);
        IllegalArgumentException e1 = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.gateUp(t.specs.gateUp(), t.x, twoExperts, t.routing));
        assertEquals("weights are [2, 4, 2], the spec needs [3, 4, 2]", e1.getMessage());
        // gate_up's [E][2I][H] weights handed to down, which needs [E][H][I]
        IllegalArgumentException e2 = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.down(t.specs.down(), t.inter, t.wGateUp, t.routing));
        assertEquals("weights are [3, 4, 2], the spec needs [3, 2, 2]", e2.getMessage());
    }

    @Test
    void wrongActivationLengthIsAnIllegalArgument() {
        TinyInputs t = new TinyInputs();
        IllegalArgumentException x = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.gateUp(t.specs.gateUp(), new short[3], t.wGateUp, t.routing));
        assertEquals("x has 3 elements, expected 4", x.getMessage());
        IllegalArgumentException inter = assertThrowsExactly(IllegalArgumentException.class,
                () -> ExpertReference.down(t.specs.down(), new short[4], t.wDown, t.routing));
        assertEquals("inter has 4 elements, expected 8", inter.getMessage());
    }

    @Test
    void weightRowsRejectsDataOfTheWrongLength() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> WeightRows.bf16(new short[7], 1, 2, 4));
        assertEquals("bf16 weights of shape [1, 2, 4] need 8 elements, got 7", e.getMessage());
    }

    // ---------------------------------------------------------------------------------------
    // helpers
    // ---------------------------------------------------------------------------------------

    private static ExpertLayerSpecs layer(int hidden, int intermediate, int experts, int topk, GateUpLayout layout) {
        // 4-byte loads (2 bf16) let the validator accept dimensions as small as 2
        return ExpertLayerSpecs.of("tiny", new ExpertShape(hidden, intermediate, experts, topk), layout,
                OutputCentricBuilder.create().loadBytes(4).build(), Target.SM_90A);
    }

    private static Routing routing(int tokens, int topk, int[] ids, float[] weights) {
        return new Routing(tokens, topk, ids, weights);
    }


    private static double[] concat(double[]... parts) {
        return Arrays.stream(parts).flatMapToDouble(Arrays::stream).toArray();
    }

    /** [E][2I][H] from per-expert gate and up rows ([I][H] each, flattened), in the given layout. */
    private static double[] gateUpWeights(GateUpLayout layout, double[][] gate, double[][] up, int intermediate, int hidden) {
        double[] out = new double[gate.length * 2 * intermediate * hidden];
        for (int e = 0; e < gate.length; e++) {
            for (int i = 0; i < intermediate; i++) {
                int gateRow = layout == GateUpLayout.STACKED ? i : 2 * i;
                int upRow = layout == GateUpLayout.STACKED ? intermediate + i : 2 * i + 1;
                System.arraycopy(gate[e], i * hidden, out, (e * 2 * intermediate + gateRow) * hidden, hidden);
                System.arraycopy(up[e], i * hidden, out, (e * 2 * intermediate + upRow) * hidden, hidden);
            }
        }
        return out;
    }

    private static double silu(double g) {
        return g / (1.0 + Math.exp(-g));
    }

    private static void assertStoredIsRoundedExact(ExpertReference.Result r) {
        assertEquals(r.exact().length, r.stored().length);
        for (int i = 0; i < r.exact().length; i++) {
            short want = Bf16.fromFloat((float) r.exact()[i]);
            assertEquals(want, r.stored()[i], "stored[" + i + "] for exact " + r.exact()[i]);
        }
    }

    private static double maxAbs(double[] v) {
        return Arrays.stream(v).map(Math::abs).max().orElse(0);
    }

    private static int[] permutation(SplittableRandom r, int n) {
        int[] p = new int[n];
        for (int i = 0; i < n; i++) {
            p[i] = i;
        }
        for (int i = n - 1; i > 0; i--) {
            int j = r.nextInt(i + 1);
            int t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        return p;
    }

    /** Seeded random activations, weights and routing for {@link #RANDOM_SHAPE}. */
    private record RandomCase(ExpertLayerSpecs specs, short[] x, short[] wGateUp, short[] wDown, Routing routing) {
        static RandomCase create(long seed) {
            ExpertShape s = RANDOM_SHAPE;
            ExpertLayerSpecs specs = ExpertLayerSpecs.of("random", s, GateUpLayout.STACKED,
                    OutputCentricBuilder.create().build(), Target.SM_90A);
            return new RandomCase(specs,
                    RandomInputs.bf16Normal(seed, RANDOM_TOKENS * s.hidden(), 1.0),
                    RandomInputs.bf16Normal(seed + 1000, (int) (s.experts() * s.gateUpElementsPerExpert()), 0.1),
                    RandomInputs.bf16Normal(seed + 2000, (int) (s.experts() * s.downElementsPerExpert()), 0.1),
                    RandomInputs.uniformRouting(seed + 3000, RANDOM_TOKENS, s.experts(), s.topk()));
        }

        ExpertReference.Result gateUp(Routing r) {
            ExpertShape s = RANDOM_SHAPE;
            return ExpertReference.gateUp(specs.gateUp(), x,
                    WeightRows.bf16(wGateUp, s.experts(), 2 * s.intermediate(), s.hidden()), r);
        }

        ExpertReference.Result down(short[] inter, Routing r) {
            ExpertShape s = RANDOM_SHAPE;
            return ExpertReference.down(specs.down(), inter,
                    WeightRows.bf16(wDown, s.experts(), s.hidden(), s.intermediate()), r);
        }
    }

    /** Valid inputs for H=2, I=2, E=3, top-2, two tokens, to corrupt one at a time. */
    private static final class TinyInputs {
        final ExpertLayerSpecs specs = layer(2, 2, 3, 2, GateUpLayout.STACKED);
        final short[] x = ExactBf16.of(1, 2, -1, 0.5);
        final WeightRows wGateUp = WeightRows.bf16(RandomInputs.bf16Normal(1L, 3 * 4 * 2, 1.0), 3, 4, 2);
        final WeightRows wDown = WeightRows.bf16(RandomInputs.bf16Normal(2L, 3 * 2 * 2, 1.0), 3, 2, 2);
        final short[] inter = RandomInputs.bf16Normal(3L, 2 * 2 * 2, 1.0);
        final Routing routing = new Routing(2, 2, new int[] {0, 1, 2, 0}, new float[] {0.5f, 0.5f, 0.25f, 0.75f});
    }
}
