package dev.moeforge.dsl.ir.epilogue;

/** The function a {@link GatedActivation} applies to its gate (and up) inputs. */
public sealed interface GateFunction permits GateFunction.Silu, GateFunction.ClampedSwiglu {

    String text();

    /** {@code silu(gate) * up} with {@code silu(g) = g / (1 + exp(-g))}: Qwen3-MoE, Mixtral, OLMoE, DeepSeek-V3. */
    record Silu() implements GateFunction {
        @Override
        public String text() {
            return "silu";
        }
    }

    /**
     * gpt-oss's clamped SwiGLU: {@code g = min(gate, LIMIT)}, {@code u = clamp(up, -LIMIT, LIMIT)},
     * {@code (u + 1) * g * sigmoid(ALPHA * g)}. NaN inputs stay NaN (the clamps compare, as
     * {@code torch.clamp} does). The constants are hard-coded in transformers 5.17
     * {@code models/gpt_oss} ({@code GptOssExperts}: {@code alpha = 1.702}, {@code limit = 7.0}).
     */
    record ClampedSwiglu() implements GateFunction {
        public static final double ALPHA = 1.702;
        public static final double LIMIT = 7.0;

        @Override
        public String text() {
            return "clamped_swiglu";
        }
    }

    GateFunction SILU = new Silu();
    GateFunction CLAMPED_SWIGLU = new ClampedSwiglu();
}
