package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * A gated activation over two per-neuron values, {@code f(gate, up)}; for {@link GateFunction.Silu}
 * that is {@code silu(gate) * up}, evaluated in FP32. Written {@code gated(silu, acc(gate), acc(up))}.
 */
public record GatedActivation(GateFunction function, EpilogueNode gate, EpilogueNode up) implements EpilogueNode {
    public GatedActivation {
        Objects.requireNonNull(function, "function");
        Objects.requireNonNull(gate, "gate");
        Objects.requireNonNull(up, "up");
    }

    @Override
    public List<EpilogueNode> children() {
        return List.of(gate, up);
    }
}
