package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.SplitDown;
import org.junit.jupiter.api.Test;

/** The whole-layer reference is gate_up, then down on gate_up's stored (bf16) intermediate. */
class ExpertLayerReferenceTest {
    static final ExpertShape SHAPE = new ExpertShape(16, 8, 5, 2);

    static ExpertLayerSpecs specs(ExpertShape shape) {
        return ExpertLayerSpecs.of("ref", shape, GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A);
    }

    @Test
    void layerIsDownOfTheStoredIntermediate() {
        ExpertLayerSpecs specs = specs(SHAPE);
        short[] x = RandomInputs.bf16Normal(1, 3 * SHAPE.hidden(), 1.0);
        WeightRows gu = WeightRows.bf16(RandomInputs.bf16Normal(2, SHAPE.experts() * 2 * SHAPE.intermediate() * SHAPE.hidden(), 0.25),
                SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden());
        WeightRows dn = WeightRows.bf16(RandomInputs.bf16Normal(3, SHAPE.experts() * SHAPE.hidden() * SHAPE.intermediate(), 0.35),
                SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate());
        Routing routing = RandomInputs.uniformRouting(4, 3, SHAPE.experts(), SHAPE.topk());

        ExpertReference.LayerResult layer = ExpertReference.layer(specs.gateUp(), specs.down(), x, gu, dn, routing);
        ExpertReference.Result inter = ExpertReference.gateUp(specs.gateUp(), x, gu, routing);
        ExpertReference.Result y = ExpertReference.down(specs.down(), inter.stored(), dn, routing);
        assertArrayEquals(inter.stored(), layer.inter().stored());
        assertArrayEquals(y.exact(), layer.y().exact());
        assertArrayEquals(y.stored(), layer.y().stored());
    }

    /**
     * W8A8 (expert_centric with FP8 block weights): the layer multiplies x and the intermediate as the
     * kernels quantise them, so its intermediate is already quantised and its y is down of that; a
     * W8A8 half beside a half that takes bf16 activations is refused.
     */
    @Test
    void w8a8LayerMultipliesQuantisedActivations() {
        ExpertShape shape = new ExpertShape(256, 128, 3, 2);
        ExpertCentric tile = new ExpertCentric(16, 128, 128, 1, 8, 2, 1).withTma(true);
        ExpertLayerSpecs w8a8 = ExpertLayerSpecs.of("w8a8", shape, GateUpLayout.STACKED, WeightFormat.FP8_BLOCK128, tile, tile, Target.SM_90A);
        int tokens = 3;
        short[] x = RandomInputs.bf16Normal(9, tokens * shape.hidden(), 1.0);
        WeightRows gu = WeightRows.bf16(RandomInputs.bf16Normal(10, shape.experts() * 2 * shape.intermediate() * shape.hidden(), 0.1),
                shape.experts(), 2 * shape.intermediate(), shape.hidden());
        WeightRows dn = WeightRows.bf16(RandomInputs.bf16Normal(11, shape.experts() * shape.hidden() * shape.intermediate(), 0.1),
                shape.experts(), shape.hidden(), shape.intermediate());
        Routing routing = RandomInputs.uniformRouting(12, tokens, shape.experts(), shape.topk());

        ExpertReference.LayerResult layer = ExpertReference.layer(w8a8.gateUp(), w8a8.down(), x, gu, dn, routing);
        double[] wide = new double[x.length];
        for (int i = 0; i < x.length; i++) {
            wide[i] = Bf16.toFloat(x[i]);
        }
        double[] xq = Fp8ActivationRows.quantise(wide, tokens, shape.hidden());
        double[] inter = Fp8ActivationRows.quantise(ExpertReference.gateUp(w8a8.gateUp(), xq, gu, routing).exact(),
                tokens * shape.topk(), shape.intermediate());
        assertArrayEquals(inter, layer.inter().exact());
        assertArrayEquals(ExpertReference.down(w8a8.down(), inter, dn, routing).exact(), layer.y().exact());
        double[] unquantised = ExpertReference.layer(specs(shape).gateUp(), specs(shape).down(), x, gu, dn, routing).y().exact();
        assertTrue(!java.util.Arrays.equals(unquantised, layer.y().exact()), "the W8A8 layer quantises");

        ExpertLayerSpecs bf16 = ExpertLayerSpecs.of("bf16", shape, GateUpLayout.STACKED, tile.withTma(false).withGroupM(1), Target.SM_90A);
        assertThrows(IllegalArgumentException.class, () -> ExpertReference.layer(w8a8.gateUp(), bf16.down(), x, gu, dn, routing));
    }

    /** expert_mlp's reference is the layer's: gate_up, then the routing-weighted sum of down on the stored intermediate. */
    @Test
    void mlpIsTheLayerWithAnUnroundedOutput() {
        ExpertLayerSpecs specs = specs(SHAPE);
        // the reference reads the weights it is given (bf16 here); the spec's format is split_down's kind
        KernelSpec mlp = new KernelSpec("ref_mlp", new Problem.ExpertMlp(SHAPE, WeightFormat.NVFP4, DType.BF16, GateUpLayout.STACKED),
                new SplitDown(8, 2, 4, 3, false), specs.gateUp().epilogue(), Target.SM_90A);
        short[] x = RandomInputs.bf16Normal(5, 3 * SHAPE.hidden(), 1.0);
        WeightRows gu = WeightRows.bf16(RandomInputs.bf16Normal(6, SHAPE.experts() * 2 * SHAPE.intermediate() * SHAPE.hidden(), 0.25),
                SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden());
        WeightRows dn = WeightRows.bf16(RandomInputs.bf16Normal(7, SHAPE.experts() * SHAPE.hidden() * SHAPE.intermediate(), 0.35),
                SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate());
        Routing routing = RandomInputs.uniformRouting(8, 3, SHAPE.experts(), SHAPE.topk());

        ExpertReference.MlpResult result = ExpertReference.mlp(mlp, x, gu, dn, routing);
        ExpertReference.LayerResult layer = ExpertReference.layer(specs.gateUp(), specs.down(), x, gu, dn, routing);
        assertArrayEquals(layer.inter().stored(), result.inter().stored());
        for (int i = 0; i < result.y().length; i++) {
            assertEquals(layer.y().exact()[i], result.y()[i], 1e-12 * Math.max(1, Math.abs(result.y()[i])), "y[" + i + "]");
        }
    }

    @Test
    void halvesOfDifferentShapesAreRefused() {
        ExpertShape other = new ExpertShape(16, 8, 6, 2);
        var e = assertThrows(IllegalArgumentException.class, () -> ExpertReference.layer(specs(SHAPE).gateUp(),
                specs(other).down(), new short[16], null, null, null));
        assertTrue(e.getMessage().contains("but down ref_down has ExpertShape[hidden=16, intermediate=8, experts=6, topk=2]"),
                e.getMessage());
    }
}
