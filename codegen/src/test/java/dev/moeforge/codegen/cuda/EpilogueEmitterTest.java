package dev.moeforge.codegen.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.AccChannel;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Epilogue trees as straight-line CUDA over the values the schedule binds. */
class EpilogueEmitterTest {

    @Test
    void gateUpTreeIsOneTemporaryThenReturn() {
        List<String> lines = EpilogueEmitter.emit(Epilogues.siluGatedStore(DType.BF16),
                Map.of(Acc.GATE, "gate", Acc.UP, "up"));
        assertEquals(List.of(
                "const float v0 = mf::silu(gate) * up;  // gated(silu, acc(gate), acc(up))",
                "return v0;"), lines);
    }

    @Test
    void boundNamesAreUsedAsGiven() {
        List<String> lines = EpilogueEmitter.emit(Epilogues.siluGatedStore(DType.BF16),
                Map.of(Acc.GATE, "acc_gate", Acc.UP, "acc_up"));
        assertEquals("const float v0 = mf::silu(acc_gate) * acc_up;  // gated(silu, acc(gate), acc(up))", lines.getFirst());
    }

    @Test
    void nestedGatesArePostOrder() {
        // gated(silu, gated(silu, gate, up), up): the inner node is v0, the outer v1
        EpilogueNode inner = Epilogues.gated(Epilogues.silu(), Epilogues.gate(), Epilogues.up());
        EpilogueNode tree = Epilogues.store(Epilogues.gated(Epilogues.silu(), inner, Epilogues.up()), DType.BF16);
        assertEquals(List.of(
                "const float v0 = mf::silu(gate) * up;  // gated(silu, acc(gate), acc(up))",
                "const float v1 = mf::silu(v0) * up;  // gated(silu, gated(silu, acc(gate), acc(up)), acc(up))",
                "return v1;"), EpilogueEmitter.emit(tree, Map.of(Acc.GATE, "gate", Acc.UP, "up")));
    }

    @Test
    void downReturnsTheCombinedValueTheScheduleFolds() {
        Store root = Epilogues.combinedStore(DType.BF16);
        Combine combine = (Combine) root.input();
        assertEquals(List.of("return combined;"), EpilogueEmitter.emit(root, Map.of(combine, "combined")));
    }

    @Test
    void downBindingIsByValue() {
        // a combine node built apart from the tree is equal to it, so it binds the same node
        assertEquals(List.of("return combined;"), EpilogueEmitter.emit(Epilogues.combinedStore(DType.BF16),
                Map.of(new Combine(new Acc(AccChannel.MAIN)), "combined")));
    }

    @Test
    void unboundAccumulatorIsAnInternalError() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> EpilogueEmitter.emit(Epilogues.siluGatedStore(DType.BF16), Map.of(Acc.GATE, "gate")));
        assertEquals("accumulator acc(up) is not bound by the schedule", e.getMessage());
        IllegalStateException none = assertThrows(IllegalStateException.class,
                () -> EpilogueEmitter.emit(Epilogues.store(Epilogues.acc(), DType.BF16), Map.of()));
        assertEquals("accumulator acc is not bound by the schedule", none.getMessage());
    }

    @Test
    void unfoldedCombineIsAnInternalError() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> EpilogueEmitter.emit(Epilogues.combinedStore(DType.BF16), Map.of(Acc.MAIN, "acc")));
        assertEquals("combine(acc) must be folded by the schedule", e.getMessage());
    }

    @Test
    void emittedLinesAreImmutable() {
        List<String> lines = EpilogueEmitter.emit(Epilogues.siluGatedStore(DType.BF16), Map.of(Acc.GATE, "g", Acc.UP, "u"));
        assertThrows(UnsupportedOperationException.class, () -> lines.add("x"));
    }
}
