package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import org.junit.jupiter.api.Test;

/** gpt-oss's clamped SwiGLU against hand-computed values (transformers 5.17 models/gpt_oss). */
class ClampedSwigluTest {
    static final EpilogueNode TREE = Epilogues.store(Epilogues.gated(Epilogues.clampedSwiglu(), Epilogues.gate(), Epilogues.up()),
            DType.BF16);

    static double eval(double gate, double up) {
        return EpilogueEvaluator.evaluate(TREE, new EpilogueEvaluator.Accumulators() {
            @Override
            public int slots() {
                return 1;
            }

            @Override
            public double value(dev.moeforge.dsl.ir.epilogue.Acc acc, int slot) {
                return switch (acc.channel()) {
                    case GATE -> gate;
                    case UP -> up;
                    case MAIN -> throw new AssertionError();
                };
            }

            @Override
            public double routingWeight(int slot) {
                throw new AssertionError();
            }
        }, 0);
    }

    @Test
    void clampsGateAboveAndUpOnBothSides() {
        // gate 8 -> 7, up -9 -> -7: (-7 + 1) * 7 * sigmoid(1.702 * 7)
        assertEquals(-6 * 7 / (1 + Math.exp(-1.702 * 7)), eval(8, -9), 1e-12);
        // gate has no lower clamp: -20 stays; up 9 -> 7
        assertEquals(8 * -20 / (1 + Math.exp(1.702 * 20)), eval(-20, 9), 1e-18);
        // inside the limits: (0.5 + 1) * -2 * sigmoid(-3.404)
        assertEquals(1.5 * -2 / (1 + Math.exp(3.404)), eval(-2, 0.5), 1e-12);
        assertTrue(Double.isNaN(eval(Double.NaN, 1)), "NaN gate stays NaN, as torch.clamp keeps it");
        assertTrue(Double.isNaN(eval(1, Double.NaN)), "NaN up stays NaN");
    }

    @Test
    void textualFormRoundTrips() {
        String text = """
                kernel oss_gate_up {
                  problem expert_gate_up(hidden=2880, intermediate=2880, experts=32, topk=4, weights=mxfp4, activations=bf16, layout=interleaved)
                  schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=2, tokens_per_cta=1, warps_per_output=1, min_blocks_per_sm=0)
                  epilogue store(gated(clamped_swiglu, acc(gate), acc(up)), dtype=bf16)
                  target sm_90a
                }
                """;
        assertEquals(text, SpecPrinter.print(SpecParser.parse(text)));
        assertEquals(TREE, SpecParser.parse(text).epilogue());
    }
}
