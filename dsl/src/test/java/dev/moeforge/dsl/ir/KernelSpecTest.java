package dev.moeforge.dsl.ir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.AccChannel;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** KernelSpec and its parts are values: equal when built alike, copied with one field changed, never null. */
class KernelSpecTest {
    private static final ExpertShape QWEN3 = new ExpertShape(2048, 768, 128, 8);

    private static KernelSpec gateUp() {
        return KernelBuilder.named("qwen3_gate_up")
                .expertGateUp(new ExpertShape(2048, 768, 128, 8))
                .layout(GateUpLayout.INTERLEAVED)
                .schedule(OutputCentricBuilder.create().warpsPerCta(8).kUnroll(4).tokensPerCta(4).build())
                .epilogue(Epilogues.store(Epilogues.gated(Epilogues.silu(), Epilogues.gate(), Epilogues.up()), DType.BF16))
                .target(Target.SM_100A)
                .build();
    }

    @Test
    void specsBuiltTwiceAreEqualAndHashAlike() {
        KernelSpec a = gateUp();
        KernelSpec b = gateUp();
        assertEquals(a, b);
        assertEquals(b, a);
        assertEquals(a.hashCode(), b.hashCode());
        assertEquals(a.toString(), b.toString());
        assertEquals(SpecPrinter.print(a), SpecPrinter.print(b));
        assertEquals(Set.of(a), new HashSet<>(Set.of(b)));
    }

    @Test
    void epilogueTreesBuiltApartAreEqual() {
        EpilogueNode a = new Store(new GatedActivation(new GateFunction.Silu(), new Acc(AccChannel.GATE), new Acc(AccChannel.UP)), DType.BF16);
        assertEquals(Epilogues.siluGatedStore(DType.BF16), a);
        assertEquals(Epilogues.siluGatedStore(DType.BF16).hashCode(), a.hashCode());
        assertEquals(new Store(new Combine(new Acc(AccChannel.MAIN)), DType.BF16), Epilogues.combinedStore(DType.BF16));
        assertNotEquals(Epilogues.siluGatedStore(DType.BF16), Epilogues.siluGatedStore(DType.FP16));
        assertNotEquals(Epilogues.gated(Epilogues.silu(), Epilogues.gate(), Epilogues.up()),
                Epilogues.gated(Epilogues.silu(), Epilogues.up(), Epilogues.gate()), "gate and up are not interchangeable");
    }

    @Test
    void specsDifferingInOneFieldAreNotEqual() {
        KernelSpec a = gateUp();
        assertNotEquals(a, a.withName("other"));
        assertNotEquals(a, a.withTarget(Target.SM_90A));
        assertNotEquals(a, a.withSchedule(OutputCentricBuilder.create().build()));
        KernelSpec stacked = new KernelSpec(a.name(), new Problem.ExpertGateUp(QWEN3, WeightFormat.BF16, DType.BF16,
                GateUpLayout.STACKED), a.schedule(), a.epilogue(), a.target());
        assertNotEquals(a, stacked);
    }

    @Test
    void withTargetChangesOnlyTheTarget() {
        KernelSpec a = gateUp();
        KernelSpec b = a.withTarget(Target.SM_120A);
        assertEquals(Target.SM_120A, b.target());
        assertEquals(a.name(), b.name());
        assertSame(a.problem(), b.problem());
        assertSame(a.schedule(), b.schedule());
        assertSame(a.epilogue(), b.epilogue());
        assertEquals(Target.SM_100A, a.target(), "the original is unchanged");
        assertEquals(a, b.withTarget(Target.SM_100A), "retargeting back gives an equal spec");
    }

    @Test
    void withNameChangesOnlyTheName() {
        KernelSpec a = gateUp();
        KernelSpec b = a.withName("renamed");
        assertEquals("renamed", b.name());
        assertSame(a.problem(), b.problem());
        assertSame(a.schedule(), b.schedule());
        assertSame(a.epilogue(), b.epilogue());
        assertEquals(a.target(), b.target());
        assertEquals("qwen3_gate_up", a.name(), "the original is unchanged");
    }

    @Test
    void withScheduleChangesOnlyTheSchedule() {
        KernelSpec a = gateUp();
        Schedule<?> s = new OutputCentric(2, 8, 2, 1, 1, 0);
        KernelSpec b = a.withSchedule(s);
        assertSame(s, b.schedule());
        assertEquals(a.name(), b.name());
        assertSame(a.problem(), b.problem());
        assertSame(a.epilogue(), b.epilogue());
        assertEquals(a.target(), b.target());
    }

    @Test
    void kernelSpecRejectsEachNullNamingTheField() {
        KernelSpec a = gateUp();
        assertNullRejected("name", () -> new KernelSpec(null, a.problem(), a.schedule(), a.epilogue(), a.target()));
        assertNullRejected("problem", () -> new KernelSpec(a.name(), null, a.schedule(), a.epilogue(), a.target()));
        assertNullRejected("schedule", () -> new KernelSpec(a.name(), a.problem(), null, a.epilogue(), a.target()));
        assertNullRejected("epilogue", () -> new KernelSpec(a.name(), a.problem(), a.schedule(), null, a.target()));
        assertNullRejected("target", () -> new KernelSpec(a.name(), a.problem(), a.schedule(), a.epilogue(), null));
        assertNullRejected("target", () -> a.withTarget(null));
        assertNullRejected("name", () -> a.withName(null));
        assertNullRejected("schedule", () -> a.withSchedule(null));
    }

    @Test
    void epilogueNodesRejectEachNullNamingTheField() {
        assertNullRejected("channel", () -> new Acc(null));
        assertNullRejected("input", () -> new Combine(null));
        assertNullRejected("input", () -> new Store(null, DType.BF16));
        assertNullRejected("dtype", () -> new Store(Acc.MAIN, null));
        assertNullRejected("function", () -> new GatedActivation(null, Acc.GATE, Acc.UP));
        assertNullRejected("gate", () -> new GatedActivation(GateFunction.SILU, null, Acc.UP));
        assertNullRejected("up", () -> new GatedActivation(GateFunction.SILU, Acc.GATE, null));
    }

    @Test
    void expertShapeElementCountsDoNotOverflowInt() {
        ExpertShape big = new ExpertShape(65_536, 65_536, 1, 1);
        assertEquals(2L * 65_536 * 65_536, big.gateUpElementsPerExpert());
        assertEquals(8_589_934_592L, big.gateUpElementsPerExpert());
        assertEquals(4_294_967_296L, big.downElementsPerExpert());
        assertEquals(2L * 768 * 2048, QWEN3.gateUpElementsPerExpert());
        assertEquals(2048L * 768, QWEN3.downElementsPerExpert());
    }

    @Test
    void gateUpLayoutRows() {
        assertEquals(5, GateUpLayout.STACKED.gateRow(5, 768));
        assertEquals(768 + 5, GateUpLayout.STACKED.upRow(5, 768));
        assertEquals(10, GateUpLayout.INTERLEAVED.gateRow(5, 768));
        assertEquals(11, GateUpLayout.INTERLEAVED.upRow(5, 768));
        assertEquals(GateUpLayout.INTERLEAVED, GateUpLayout.fromText("interleaved"));
        assertNull(GateUpLayout.fromText("Stacked"));
    }

    @Test
    void targetNamesAndLimits() {
        assertEquals("sm_90a", Target.SM_90A.text());
        assertEquals("compute_90a", Target.SM_90A.virtualArch());
        assertEquals("compute_100a", Target.SM_100A.virtualArch());
        assertEquals("compute_120a", Target.SM_120A.virtualArch());
        assertEquals(Target.SM_120A, Target.fromText("sm_120a"));
        assertNull(Target.fromText("sm_90"));
        assertEquals("sm_90a, sm_100a, sm_120a", Target.allowedText());
        assertEquals(232_448, Target.SM_90A.maxSharedBytesPerBlock());
        assertEquals(101_376, Target.SM_120A.maxSharedBytesPerBlock());
    }

    @Test
    void bf16WeightFormatSizes() {
        assertEquals(4096, WeightFormat.BF16.rowBytes(2048));
        assertEquals(8, WeightFormat.BF16.elementsPerLoad(16));
        assertEquals(2, WeightFormat.BF16.elementsPerLoad(4));
        assertEquals(new WeightFormat.Bf16(), WeightFormat.BF16);
    }

    private static void assertNullRejected(String field, Executable construction) {
        NullPointerException e = assertThrows(NullPointerException.class, construction);
        assertEquals(field, e.getMessage());
    }
}
