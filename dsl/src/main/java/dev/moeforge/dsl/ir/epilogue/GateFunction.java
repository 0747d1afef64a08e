package dev.moeforge.dsl.ir.epilogue;

/** The function a {@link GatedActivation} applies to its gate (and up) inputs. */
public sealed interface GateFunction permits GateFunction.Silu {

    String text();

    /** {@code silu(gate) * up} with {@code silu(g) = g / (1 + exp(-g))}: Qwen3-MoE, Mixtral, OLMoE, DeepSeek-V3. */
    record Silu() implements GateFunction {
        @Override
        public String text() {
            return "silu";
        }
    }

    GateFunction SILU = new Silu();
}
