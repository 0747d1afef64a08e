package dev.moeforge.dsl.build;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;

/** Static factories for epilogue trees: {@code store(gated(silu(), gate(), up()), BF16)}. */
public final class Epilogues {
    private Epilogues() {}

    public static Acc acc() {
        return Acc.MAIN;
    }

    public static Acc gate() {
        return Acc.GATE;
    }

    public static Acc up() {
        return Acc.UP;
    }

    public static GateFunction silu() {
        return GateFunction.SILU;
    }

    /** gpt-oss's clamped SwiGLU, {@code (clamp(up, -7, 7) + 1) * g * sigmoid(1.702 g)} with {@code g = min(gate, 7)}. */
    public static GateFunction clampedSwiglu() {
        return GateFunction.CLAMPED_SWIGLU;
    }

    public static GatedActivation gated(GateFunction function, EpilogueNode gate, EpilogueNode up) {
        return new GatedActivation(function, gate, up);
    }

    public static Combine combine(EpilogueNode input) {
        return new Combine(input);
    }

    public static Store store(EpilogueNode input, DType dtype) {
        return new Store(input, dtype);
    }

    /** {@code store(gated(silu, acc(gate), acc(up)), dtype)}: the SwiGLU half of Qwen3-MoE, Mixtral, OLMoE. */
    public static Store siluGatedStore(DType dtype) {
        return store(gated(silu(), gate(), up()), dtype);
    }

    /** {@code store(combine(acc), dtype)}: the routing-weighted down projection. */
    public static Store combinedStore(DType dtype) {
        return store(combine(acc()), dtype);
    }
}
