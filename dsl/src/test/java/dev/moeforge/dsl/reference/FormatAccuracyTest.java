package dev.moeforge.dsl.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import java.util.stream.Stream;

/** The accuracy study's references on a small layer: errors ordered as the formats' precision says they must be. */
class FormatAccuracyTest {
    static final ExpertShape SHAPE = new ExpertShape(256, 128, 6, 2);

    static Stream<WeightFormat> formats() {
        return WeightFormat.ALL.stream();
    }

    @ParameterizedTest
    @MethodSource("formats")
    void referencesOrderTheErrors(WeightFormat f) {
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("acc", SHAPE, GateUpLayout.STACKED, f,
                OutputCentricBuilder.create().build(), OutputCentricBuilder.create().build(), Target.SM_90A);
        RowSource gu = RowSource.normal(11, 2 * SHAPE.intermediate(), 1 / Math.sqrt(SHAPE.hidden()));
        RowSource dn = RowSource.normal(12, SHAPE.hidden(), 1 / Math.sqrt(SHAPE.intermediate()));
        EncodedWeights qgu = EncodedWeights.encode(f, gu, SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden(),
                Projections.STACKED_GATE_UP, "gate_up");
        EncodedWeights qdn = EncodedWeights.encode(f, dn, SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate(), Projections.ONE, "down");
        short[] x = RandomInputs.bf16Normal(13, 4 * SHAPE.hidden(), 1.0);
        Routing routing = RandomInputs.uniformRouting(14, 4, SHAPE.experts(), SHAPE.topk());
        FormatAccuracy.References refs = FormatAccuracy.references(specs, x, gu, dn, qgu, qdn, routing);
        // a stand-in for a kernel: the dequantised reference rounded to bf16, as a kernel stores it
        short[] y = new short[refs.dequantised().length];
        for (int i = 0; i < y.length; i++) {
            y[i] = Bf16.fromDouble(refs.dequantised()[i]);
        }
        FormatAccuracy.Errors e = FormatAccuracy.errors(refs, y);
        assertTrue(e.kernel() < 4e-3, f.text() + ": " + e);
        switch (f.element()) {
            case BF16 -> assertEquals(e.format(), e.quantisedActivationPath(), 1e-12, "bf16 activations are already bf16");
            case E4M3, INT8, E2M1, INT4 -> {
                assertTrue(e.format() > 1e-3, f.text() + ": " + e);
                assertTrue(e.ratio() > 1.2, f.text() + ": quantising the activations too must cost accuracy: " + e);
            }
        }
    }
}
