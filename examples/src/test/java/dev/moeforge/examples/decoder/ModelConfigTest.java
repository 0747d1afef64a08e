package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.OptionalDouble;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** config.json in the hub's and transformers 5.x's spellings, each architecture's defaults, and the refusals. */
class ModelConfigTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @TempDir
    Path tmp;

    static void assertMentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), () -> "expected '" + p + "' in: " + message);
        }
    }

    private static ObjectNode json(String text) {
        try {
            return (ObjectNode) JSON.readTree(text);
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    /** Qwen3-MoE as the hub spells it: rope_theta, num_experts; head_dim 32 is not hidden/heads (16). */
    private static ObjectNode qwenHub() {
        return json("""
                {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 1000,
                 "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "head_dim": 32, "intermediate_size": 128, "moe_intermediate_size": 48, "num_experts": 8,
                 "num_experts_per_tok": 2, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [1],
                 "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": null, "max_position_embeddings": 4096,
                 "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": null,
                 "eos_token_id": 151645}
                """);
    }

    @Test
    void qwen3MoeHubSpelling() {
        ModelConfig c = ModelConfig.parse(qwenHub());
        assertEquals(Architecture.QWEN3_MOE, c.arch());
        assertEquals(1000, c.vocab());
        assertEquals(64, c.hidden());
        assertEquals(3, c.layers());
        assertEquals(4, c.heads());
        assertEquals(2, c.kvHeads());
        assertEquals(2, c.groupSize());
        assertEquals(32, c.headDim());
        assertEquals(48, c.expertIntermediate());
        assertEquals(128, c.denseIntermediate());
        assertEquals(8, c.experts());
        assertEquals(2, c.topk());
        assertTrue(c.normTopkProb());
        assertEquals(1e-6, c.rmsEps());
        assertEquals(Rope.DEFAULT, c.rope().type());
        assertEquals(1e6, c.rope().theta());
        assertEquals(4096, c.maxPositions());
        assertFalse(c.tieEmbeddings());
        assertFalse(c.attentionBias());
        assertEquals(OptionalDouble.empty(), c.clipQkv());
        assertEquals(0, c.slidingWindow());
        assertEquals(List.of(false, false, false), c.slidingLayers());
        assertEquals(List.of(true, false, true), c.moeLayers());
        assertEquals(List.of(151645), c.eosIds());
    }

    /** transformers 5.x writes rope_parameters and num_local_experts: the same model. */
    @Test
    void transformers5SpellingGivesTheSameGeometry() {
        ObjectNode v5 = qwenHub();
        v5.remove(List.of("rope_theta", "rope_scaling", "num_experts"));
        v5.putObject("rope_parameters").put("rope_theta", 1000000.0).put("rope_type", "default");
        v5.put("num_local_experts", 8);
        assertFalse(v5.has("rope_theta") || v5.has("num_experts"));
        ModelConfig hub = ModelConfig.parse(qwenHub());
        ModelConfig five = ModelConfig.parse(v5);
        assertEquals(hub, five);
        assertEquals(1e6, five.rope().theta());
        assertEquals(8, five.experts());
    }

    @Test
    void qwen3MoeSparseStepAndDefaults() {
        ObjectNode c = qwenHub();
        c.put("num_hidden_layers", 4).put("decoder_sparse_step", 2);
        c.remove(List.of("mlp_only_layers", "rms_norm_eps", "norm_topk_prob", "rope_theta"));
        ModelConfig m = ModelConfig.parse(c);
        assertEquals(List.of(false, true, false, true), m.moeLayers());
        assertEquals(1e-6, m.rmsEps());
        assertFalse(m.normTopkProb());
        assertEquals(10000, m.rope().theta());
        // sliding window only when use_sliding_window; layers from max_window_layers on
        c.put("use_sliding_window", true).put("sliding_window", 16).put("max_window_layers", 2);
        m = ModelConfig.parse(c);
        assertEquals(16, m.slidingWindow());
        assertEquals(List.of(false, false, true, true), m.slidingLayers());
        c.put("decoder_sparse_step", 0);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "decoder_sparse_step");
    }

    @Test
    void qwen3MoeNeedsMoeIntermediateSize() {
        ObjectNode c = qwenHub();
        c.remove("moe_intermediate_size");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "'moe_intermediate_size'");
    }

    /** OLMoE leaves head_dim, num_key_value_heads, rms_norm_eps and norm_topk_prob to its defaults. */
    @Test
    void olmoeDefaults() {
        ModelConfig c = ModelConfig.parse(json("""
                {"model_type": "olmoe", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
                 "clip_qkv": 8.0, "eos_token_id": [7, 9]}
                """));
        assertEquals(Architecture.OLMOE, c.arch());
        assertEquals(16, c.headDim());
        assertEquals(4, c.kvHeads());
        assertEquals(1, c.groupSize());
        assertEquals(1e-5, c.rmsEps());
        assertFalse(c.normTopkProb());
        assertEquals(OptionalDouble.of(8.0), c.clipQkv());
        assertEquals(32, c.expertIntermediate());
        assertEquals(10000, c.rope().theta());
        assertEquals(List.of(true, true), c.moeLayers());
        assertEquals(List.of(false, false), c.slidingLayers());
        assertEquals(List.of(7, 9), c.eosIds());
        assertFalse(c.attentionBias());

        ObjectNode noClip = json("""
                {"model_type": "olmoe", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
                 "clip_qkv": null, "norm_topk_prob": true}
                """);
        ModelConfig d = ModelConfig.parse(noClip);
        assertEquals(OptionalDouble.empty(), d.clipQkv());
        assertTrue(d.normTopkProb());
        assertEquals(List.of(), d.eosIds());
    }

    /** Mixtral: rope_theta 1e6 when absent; the top-k weights are always renormalised. */
    @Test
    void mixtralDefaults() {
        ObjectNode c = json("""
                {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 500,
                 "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false,
                 "sliding_window": null}
                """);
        ModelConfig m = ModelConfig.parse(c);
        assertEquals(Architecture.MIXTRAL, m.arch());
        assertEquals(1e6, m.rope().theta());
        assertEquals(Rope.DEFAULT, m.rope().type());
        assertTrue(m.normTopkProb());
        assertEquals(4, m.experts());
        assertEquals(96, m.expertIntermediate());
        assertEquals(16, m.headDim());
        assertEquals(0, m.slidingWindow());
        assertEquals(List.of(false, false), m.slidingLayers());
        assertFalse(m.attentionBias());
        // Mixtral's window, where set, is every layer's
        c.put("sliding_window", 4096);
        assertEquals(List.of(true, true), ModelConfig.parse(c).slidingLayers());
        assertEquals(4096, ModelConfig.parse(c).slidingWindow());
    }

    /** Without model_type, architectures[0]'s class names the architecture. */
    @Test
    void architectureFromClassNameWhenModelTypeIsAbsent() {
        ObjectNode c = json("""
                {"architectures": ["MixtralForCausalLM"], "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2}
                """);
        assertEquals(Architecture.MIXTRAL, ModelConfig.parse(c).arch());
        assertEquals(Architecture.GPT_OSS, Architecture.fromName("gpt-oss"));
        assertEquals(Architecture.QWEN3_MOE, Architecture.fromName("Qwen3_MoE"));
    }

    private static ObjectNode gptOss() {
        return json("""
                {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 500, "hidden_size": 64,
                 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                 "intermediate_size": 32, "num_local_experts": 4, "experts_per_token": 2, "rope_theta": 150000.0,
                 "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "truncate": false, "original_max_position_embeddings": 4096},
                 "max_position_embeddings": 131072, "sliding_window": 16,
                 "layer_types": ["full_attention", "sliding_attention", "full_attention"]}
                """);
    }

    @Test
    void gptOssExplicitLayerTypesAndYarn() {
        ModelConfig c = ModelConfig.parse(gptOss());
        assertEquals(Architecture.GPT_OSS, c.arch());
        assertEquals(2, c.topk(), "experts_per_token is num_experts_per_tok's alias");
        assertEquals(List.of(false, true, false), c.slidingLayers());
        assertEquals(16, c.slidingWindow());
        assertTrue(c.attentionBias(), "gpt-oss's attention_bias defaults to true");
        assertTrue(c.normTopkProb());
        Rope r = c.rope();
        assertEquals(Rope.YARN, r.type());
        assertEquals(150000, r.theta());
        assertEquals(32, r.factor());
        assertEquals(4096, r.originalMaxPositions());
        assertEquals(32, r.betaFast());
        assertEquals(1, r.betaSlow());
        assertFalse(r.truncate());
        assertTrue(Double.isNaN(r.attentionFactor()));
        assertEquals((float) (0.1 * Math.log(32) + 1), r.attentionScaling());
    }

    @Test
    void gptOssDefaults() {
        ObjectNode c = gptOss();
        c.put("num_hidden_layers", 5).put("attention_bias", false);
        c.remove(List.of("layer_types", "sliding_window", "rope_theta"));
        ModelConfig m = ModelConfig.parse(c);
        assertEquals(128, m.slidingWindow());
        // sliding on the even layers: (i + 1) % 2 != 0
        assertEquals(List.of(true, false, true, false, true), m.slidingLayers());
        assertFalse(m.attentionBias());
        assertEquals(150000, m.rope().theta());
    }

    @Test
    void gptOssBadLayerTypes() {
        ObjectNode c = gptOss();
        c.putArray("layer_types").add("full_attention").add("sliding_attention");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "layer_types has 2 entries for 3 layers");
        c.putArray("layer_types").add("full_attention").add("chunked_attention").add("full_attention");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "chunked_attention");
    }

    /** rope_parameters' yarn with attention_factor and without a factor: the factor from the position ratio. */
    @Test
    void yarnFactorFromPositionsAndExplicitAttentionFactor() {
        ObjectNode c = gptOss();
        c.remove(List.of("rope_theta", "rope_scaling"));
        c.putObject("rope_parameters").put("rope_type", "yarn").put("rope_theta", 50000.0)
                .put("original_max_position_embeddings", 4096).put("attention_factor", 1.25);
        Rope r = ModelConfig.parse(c).rope();
        assertEquals(50000, r.theta());
        assertEquals(32, r.factor(), "131072 / 4096");
        assertTrue(r.truncate());
        assertEquals(1.25f, r.attentionScaling());
    }

    @Test
    void unsupportedRopeTypeIsRefused() {
        ObjectNode c = qwenHub();
        c.putObject("rope_scaling").put("type", "dynamic").put("factor", 2.0);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "'dynamic'", "default, yarn");
    }

    @Test
    void unknownModelTypeListsTheKnownArchitectures() {
        ObjectNode c = qwenHub();
        c.put("model_type", "llama");
        c.putArray("architectures").add("LlamaForCausalLM");
        String message = assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage();
        assertMentions(message, "'llama'", "LlamaForCausalLM", "qwen3_moe", "olmoe", "mixtral", "gpt_oss");
        // an unknown model_type is not overridden by a known class name
        c.putArray("architectures").add("MixtralForCausalLM");
        assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c));
    }

    @Test
    void missingRequiredKeyIsNamed() {
        ObjectNode c = qwenHub();
        c.remove("hidden_size");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "'hidden_size'", "missing");
        ObjectNode d = qwenHub();
        d.put("vocab_size", "many");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(d)).getMessage(),
                "'vocab_size'");
        ObjectNode e = qwenHub();
        e.remove("num_experts");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(e)).getMessage(),
                "'num_experts'");
    }

    @Test
    void headsNotAMultipleOfKvHeadsAreRefused() {
        ObjectNode c = qwenHub();
        c.put("num_attention_heads", 6).put("num_key_value_heads", 4);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(c)).getMessage(),
                "num_attention_heads 6 is not a multiple of num_key_value_heads 4");
    }

    @Test
    void otherGeometryRefusals() {
        ObjectNode odd = qwenHub();
        odd.put("head_dim", 15);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(odd)).getMessage(),
                "head_dim 15", "even");
        ObjectNode topk = qwenHub();
        topk.put("num_experts_per_tok", 9);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(topk)).getMessage(),
                "num_experts_per_tok 9 exceeds the 8 experts");
        ObjectNode noDense = qwenHub();
        noDense.put("intermediate_size", 0);
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.parse(noDense)).getMessage(),
                "dense MLP layers need intermediate_size > 0");
    }

    @Test
    void readNamesTheFileAndItsProblem() throws IOException {
        Path dir = Files.createDirectories(tmp.resolve("model"));
        String missing = assertThrows(IllegalArgumentException.class, () -> ModelConfig.read(dir)).getMessage();
        assertMentions(missing, dir.toString(), "has no config.json");

        ObjectNode c = qwenHub();
        Files.writeString(dir.resolve("config.json"), JSON.writeValueAsString(c));
        assertEquals(ModelConfig.parse(c), ModelConfig.read(dir));

        c.remove("num_hidden_layers");
        Files.writeString(dir.resolve("config.json"), JSON.writeValueAsString(c));
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.read(dir)).getMessage(),
                dir.resolve("config.json").toString(), "'num_hidden_layers'");

        Files.writeString(dir.resolve("config.json"), "[1, 2]");
        assertMentions(assertThrows(IllegalArgumentException.class, () -> ModelConfig.read(dir)).getMessage(),
                "not a JSON object");
    }
}
