package dev.moeforge.dsl.build;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The fluent builders: their defaults, validation on build(), none on unchecked(). */
class KernelBuilderTest {
    private static final ExpertShape QWEN3 = new ExpertShape(2048, 768, 128, 8);

    @Test
    void outputCentricBuilderDefaultsAreTheH100DecodeChoice() {
        assertEquals(new OutputCentric(4, 16, 8, 1, 1, 0), OutputCentricBuilder.create().build());
        assertEquals(new OutputCentric(2, 8, 4, 16, 1, 0),
                OutputCentricBuilder.create().warpsPerCta(2).loadBytes(8).kUnroll(4).tokensPerCta(16).build());
    }

    @Test
    void gateUpDefaults() {
        KernelSpec spec = KernelBuilder.named("g").expertGateUp(QWEN3).build();
        assertEquals("g", spec.name());
        assertEquals(new Problem.ExpertGateUp(QWEN3, WeightFormat.BF16, DType.BF16, GateUpLayout.STACKED), spec.problem());
        assertEquals(OutputCentricBuilder.create().build(), spec.schedule());
        assertEquals(Epilogues.siluGatedStore(DType.BF16), spec.epilogue());
        assertEquals(Target.SM_90A, spec.target());
    }

    @Test
    void downDefaults() {
        KernelSpec spec = KernelBuilder.named("d").expertDown(QWEN3).build();
        assertEquals(new Problem.ExpertDown(QWEN3, WeightFormat.BF16, DType.BF16), spec.problem());
        assertEquals(OutputCentricBuilder.create().build(), spec.schedule());
        assertEquals(Epilogues.combinedStore(DType.BF16), spec.epilogue());
        assertEquals(Target.SM_90A, spec.target());
    }

    @Test
    void theLastProblemCallWins() {
        KernelSpec spec = KernelBuilder.named("d").expertGateUp(new ExpertShape(64, 64, 4, 2)).expertDown(QWEN3).build();
        assertInstanceOf(Problem.ExpertDown.class, spec.problem());
        assertEquals(QWEN3, ((Problem.ExpertProblem) spec.problem()).shape());
    }

    @Test
    void setFieldsReachTheSpec() {
        Schedule schedule = OutputCentricBuilder.create().warpsPerCta(8).tokensPerCta(4).build();
        KernelSpec spec = KernelBuilder.named("g").expertGateUp(QWEN3).layout(GateUpLayout.INTERLEAVED)
                .schedule(schedule).target(Target.SM_120A).build();
        assertEquals(GateUpLayout.INTERLEAVED, ((Problem.ExpertGateUp) spec.problem()).layout());
        assertEquals(schedule, spec.schedule());
        assertEquals(Target.SM_120A, spec.target());
    }

    @Test
    void buildAndUncheckedGiveEqualSpecsWhenValid() {
        KernelBuilder b = KernelBuilder.named("g").expertGateUp(QWEN3);
        assertEquals(b.unchecked(), b.build());
    }

    /** hidden = 12 is not a whole number of 16-byte loads (8 bf16), and top-5 of 4 experts is impossible. */
    @Test
    void buildListsEveryProblemAtOnce() {
        KernelBuilder b = KernelBuilder.named("bad").expertGateUp(new ExpertShape(12, 64, 4, 5));
        SpecException e = assertThrows(SpecException.class, b::build);
        assertEquals("bad", e.specName());
        assertEquals(List.of("problem.hidden", "problem.topk"), sortedPaths(e), e.getMessage());
        assertTrue(e.getMessage().startsWith("invalid spec 'bad': 2 problems\n"), e.getMessage());
        assertTrue(e.getMessage().contains("\n  problem.hidden = 12: a multiple of 8"), e.getMessage());
        assertTrue(e.getMessage().contains("\n  problem.topk = 5: 1..4"), e.getMessage());
    }

    /** An unrelated problem field (fp16 activations) must not hide that hidden = 12 is not whole 16-byte loads. */
    @Test
    void loadDivisibilityIsReportedAlongsideAnotherProblemError() {
        KernelBuilder b = KernelBuilder.named("bad").expertGateUp(new ExpertShape(12, 64, 4, 2)).activations(DType.FP16);
        SpecException e = assertThrows(SpecException.class, b::build);
        assertEquals(List.of("problem.activations", "problem.hidden"), sortedPaths(e), e.getMessage());
    }

    @Test
    void buildListsProblemsOfNameScheduleAndEpilogueTogether() {
        KernelBuilder b = KernelBuilder.named("9lives").expertDown(QWEN3)
                .schedule(OutputCentricBuilder.create().warpsPerCta(0).build())
                .epilogue(Epilogues.store(Epilogues.acc(), DType.BF16));
        SpecException e = assertThrows(SpecException.class, b::build);
        assertEquals(List.of("epilogue.store.input", "name", "schedule.warps_per_cta"), sortedPaths(e), e.getMessage());
    }

    @Test
    void aSingleProblemIsReportedOnOneLine() {
        SpecException e = assertThrows(SpecException.class,
                () -> KernelBuilder.named("one").expertGateUp(new ExpertShape(12, 64, 4, 2)).build());
        assertEquals(1, e.errors().size());
        SpecError error = e.errors().getFirst();
        assertEquals("problem.hidden", error.path());
        assertEquals("12", error.value());
        assertTrue(e.getMessage().startsWith("invalid spec 'one': problem.hidden = 12: a multiple of 8"), e.getMessage());
    }

    @Test
    void nonBf16ActivationsAreRejectedWithTheirDefaultEpilogue() {
        KernelBuilder b = KernelBuilder.named("h").expertGateUp(QWEN3).activations(DType.FP16);
        assertEquals(Epilogues.siluGatedStore(DType.FP16), b.unchecked().epilogue(), "the default epilogue follows the activations");
        SpecException e = assertThrows(SpecException.class, b::build);
        assertEquals(List.of("problem.activations"), sortedPaths(e), e.getMessage());
    }

    @Test
    void uncheckedDoesNotValidate() {
        KernelSpec spec = KernelBuilder.named("not a C name").expertGateUp(new ExpertShape(12, 64, 4, 5))
                .schedule(new OutputCentric(0, 12, 0, 99, 1, 0)).unchecked();
        assertEquals("not a C name", spec.name());
        assertEquals(new ExpertShape(12, 64, 4, 5), ((Problem.ExpertProblem) spec.problem()).shape());
        assertEquals(new OutputCentric(0, 12, 0, 99, 1, 0), spec.schedule());
    }

    @Test
    void aProblemMustBeChosen() {
        NullPointerException e = assertThrows(NullPointerException.class, () -> KernelBuilder.named("k").unchecked());
        assertEquals("call expertGateUp(shape), expertDown(shape) or router(hidden, experts) first", e.getMessage());
        assertThrows(NullPointerException.class, () -> KernelBuilder.named("k").build());
        NullPointerException name = assertThrows(NullPointerException.class, () -> KernelBuilder.named(null));
        assertEquals("name", name.getMessage());
    }

    @Test
    void specExceptionErrorsAreImmutable() {
        SpecException e = assertThrows(SpecException.class,
                () -> KernelBuilder.named("one").expertGateUp(new ExpertShape(12, 64, 4, 2)).build());
        assertThrows(UnsupportedOperationException.class, () -> e.errors().clear());
    }

    @Test
    void expertLayerSpecsNamesBothHalvesAndSharesTheSchedule() {
        Schedule schedule = OutputCentricBuilder.create().tokensPerCta(8).build();
        ExpertLayerSpecs layer = ExpertLayerSpecs.of("qwen3", QWEN3, GateUpLayout.INTERLEAVED, schedule, Target.SM_100A);
        assertEquals("qwen3_gate_up", layer.gateUp().name());
        assertEquals("qwen3_down", layer.down().name());
        assertEquals(new Problem.ExpertGateUp(QWEN3, WeightFormat.BF16, DType.BF16, GateUpLayout.INTERLEAVED),
                layer.gateUp().problem());
        assertEquals(new Problem.ExpertDown(QWEN3, WeightFormat.BF16, DType.BF16), layer.down().problem());
        assertEquals(schedule, layer.gateUp().schedule());
        assertEquals(schedule, layer.down().schedule());
        assertEquals(Epilogues.siluGatedStore(DType.BF16), layer.gateUp().epilogue());
        assertEquals(Epilogues.combinedStore(DType.BF16), layer.down().epilogue());
        assertEquals(Target.SM_100A, layer.gateUp().target());
        assertEquals(Target.SM_100A, layer.down().target());
    }

    @Test
    void expertLayerSpecsValidates() {
        assertThrows(SpecException.class, () -> ExpertLayerSpecs.of("bad", new ExpertShape(2048, 12, 128, 8),
                GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A));
    }

    private static List<String> sortedPaths(SpecException e) {
        return e.errors().stream().map(SpecError::path).sorted().toList();
    }
}
