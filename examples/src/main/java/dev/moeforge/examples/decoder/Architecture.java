package dev.moeforge.examples.decoder;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

/** The model families the decoder runs, named as Hugging Face's config.json names them. */
public enum Architecture {
    /** Per-head q/k RMSNorm before RoPE; softmax, top-k, renormalised when {@code norm_topk_prob}. */
    QWEN3_MOE("qwen3_moe", "Qwen3MoeForCausalLM"),
    /** q/k RMSNorm over the whole projection, optional {@code clip_qkv}; softmax, top-k, not renormalised by default. */
    OLMOE("olmoe", "OlmoeForCausalLM"),
    /** Plain GQA; softmax, top-k, always renormalised; experts {@code block_sparse_moe.experts.E.w1/w3/w2}. */
    MIXTRAL("mixtral", "MixtralForCausalLM"),
    /** Attention sinks and biases, alternating sliding/full attention, YaRN; biased top-k then softmax; clamped SwiGLU. */
    GPT_OSS("gpt_oss", "GptOssForCausalLM");

    private final String modelType;
    private final String className;

    Architecture(String modelType, String className) {
        this.modelType = modelType;
        this.className = className;
    }

    /** config.json's {@code model_type}. */
    public String modelType() {
        return modelType;
    }

    /** config.json's {@code architectures[0]}. */
    public String className() {
        return className;
    }

    /**
     * The architecture of a config.json: its {@code model_type}, else its {@code architectures}.
     *
     * @throws IllegalArgumentException naming what the file says and every architecture known
     */
    public static Architecture of(String modelType, List<String> architectures) {
        for (Architecture a : values()) {
            if (a.modelType.equals(modelType) || (modelType == null && architectures.contains(a.className))) {
                return a;
            }
        }
        throw new IllegalArgumentException("model_type " + (modelType == null ? "(absent)" : "'" + modelType + "'")
                + " with architectures " + architectures + " is not one the decoder runs; it knows " + known());
    }

    /** The architecture named on a command line: its model_type ({@code qwen3_moe}) or with hyphens ({@code qwen3-moe}). */
    public static Architecture fromName(String name) {
        String key = name.toLowerCase(Locale.ROOT).replace('-', '_');
        return Arrays.stream(values()).filter(a -> a.modelType.equals(key)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("unknown architecture '" + name + "'; known: " + known()));
    }

    /** Every architecture as {@code model_type (ClassName)}. */
    public static String known() {
        return Arrays.stream(values()).map(a -> a.modelType + " (" + a.className + ")").collect(Collectors.joining(", "));
    }
}
