package dev.moeforge.examples.decoder;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalDouble;
import java.util.stream.IntStream;

/**
 * A decoder model's geometry and rules, read from a Hugging Face config.json in either spelling
 * transformers writes ({@code rope_theta}/{@code rope_scaling} or {@code rope_parameters};
 * {@code num_experts} or {@code num_local_experts}), with each architecture's defaults for what
 * the file leaves out.
 *
 * @param expertIntermediate each routed expert's intermediate size
 * @param denseIntermediate the intermediate size of a dense MLP layer (Qwen3-MoE's {@code mlp_only_layers}); 0 where there is none
 * @param normTopkProb whether the k selected routing weights are renormalised to sum to 1
 * @param clipQkv OLMoE's clamp of q, k and v
 * @param slidingWindow the window of a sliding-attention layer (the current token and the W-1 before it); 0 for none
 * @param slidingLayers which layers attend through the window
 * @param moeLayers which layers have routed experts (the others a dense MLP)
 * @param eosIds the tokens that end generation
 */
public record ModelConfig(Architecture arch, int vocab, int hidden, int layers, int heads, int kvHeads, int headDim,
                          int expertIntermediate, int denseIntermediate, int experts, int topk, boolean normTopkProb,
                          double rmsEps, Rope rope, int maxPositions, boolean tieEmbeddings, boolean attentionBias,
                          OptionalDouble clipQkv, int slidingWindow, List<Boolean> slidingLayers, List<Boolean> moeLayers,
                          List<Integer> eosIds) {

    public ModelConfig {
        slidingLayers = List.copyOf(slidingLayers);
        moeLayers = List.copyOf(moeLayers);
        eosIds = List.copyOf(eosIds);
        List<String> bad = new ArrayList<>();
        positive(bad, "vocab_size", vocab);
        positive(bad, "hidden_size", hidden);
        positive(bad, "num_hidden_layers", layers);
        positive(bad, "num_attention_heads", heads);
        positive(bad, "num_key_value_heads", kvHeads);
        positive(bad, "head_dim", headDim);
        positive(bad, "experts' intermediate size", expertIntermediate);
        positive(bad, "num_experts", experts);
        positive(bad, "num_experts_per_tok", topk);
        if (kvHeads > 0 && heads % kvHeads != 0) {
            bad.add("num_attention_heads " + heads + " is not a multiple of num_key_value_heads " + kvHeads);
        }
        if (headDim % 2 != 0) {
            bad.add("head_dim " + headDim + " must be even for rotary embedding");
        }
        if (topk > experts) {
            bad.add("num_experts_per_tok " + topk + " exceeds the " + experts + " experts");
        }
        if (slidingLayers.size() != layers || moeLayers.size() != layers) {
            bad.add("layer_types and the MoE layers must name each of the " + layers + " layers");
        }
        if (moeLayers.contains(false) && denseIntermediate <= 0) {
            bad.add("dense MLP layers need intermediate_size > 0");
        }
        if (!bad.isEmpty()) {
            throw new IllegalArgumentException(String.join("; ", bad));
        }
    }

    private static void positive(List<String> bad, String what, int v) {
        if (v <= 0) {
            bad.add(what + " must be positive, got " + v);
        }
    }

    /** Query heads per key/value head. */
    public int groupSize() {
        return heads / kvHeads;
    }

    /**
     * Reads {@code dir/config.json}.
     *
     * @throws IllegalArgumentException naming the file and the key that is missing or wrong
     */
    public static ModelConfig read(Path dir) {
        Path file = dir.resolve("config.json");
        JsonNode root;
        try {
            root = new ObjectMapper().readTree(Files.readString(file));
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException(dir + " has no config.json: a model directory is a Hugging Face"
                    + " checkpoint (config.json, *.safetensors, tokenizer.json)");
        } catch (IOException e) {
            throw new UncheckedIOException(file + ": " + e.getMessage(), e);
        }
        if (root == null || !root.isObject()) {
            throw new IllegalArgumentException(file + ": not a JSON object");
        }
        try {
            return parse(root);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(file + ": " + e.getMessage(), e);
        }
    }

    /** A config.json's object. */
    public static ModelConfig parse(JsonNode c) {
        List<String> classes = new ArrayList<>();
        c.path("architectures").forEach(n -> classes.add(n.asText()));
        Architecture arch = Architecture.of(c.hasNonNull("model_type") ? c.get("model_type").asText() : null, classes);
        int hidden = required(c, "hidden_size");
        int layers = required(c, "num_hidden_layers");
        int heads = required(c, "num_attention_heads");
        int kvHeads = c.hasNonNull("num_key_value_heads") ? c.get("num_key_value_heads").asInt() : heads;
        int headDim = c.hasNonNull("head_dim") ? c.get("head_dim").asInt() : hidden / heads;
        int experts = firstOf(c, "num_experts", "num_local_experts");
        int topk = firstOf(c, "num_experts_per_tok", "experts_per_token");
        int intermediate = c.hasNonNull("intermediate_size") ? c.get("intermediate_size").asInt() : 0;
        int expertIntermediate = arch == Architecture.QWEN3_MOE ? required(c, "moe_intermediate_size") : intermediate;
        if (arch != Architecture.QWEN3_MOE) {
            required(c, "intermediate_size");
        }
        boolean normTopk = switch (arch) {
            case MIXTRAL, GPT_OSS -> true;
            case QWEN3_MOE, OLMOE -> c.path("norm_topk_prob").asBoolean(false);
        };
        double eps = c.hasNonNull("rms_norm_eps") ? c.get("rms_norm_eps").asDouble()
                : arch == Architecture.QWEN3_MOE ? 1e-6 : 1e-5;
        List<Boolean> moeLayers = moeLayers(c, arch, layers);
        int window = slidingWindow(c, arch);
        List<Boolean> sliding = slidingLayers(c, arch, layers, window);
        boolean tie = c.path("tie_word_embeddings").asBoolean(false);
        boolean bias = c.path("attention_bias").asBoolean(arch == Architecture.GPT_OSS);
        OptionalDouble clip = arch == Architecture.OLMOE && c.hasNonNull("clip_qkv")
                ? OptionalDouble.of(c.get("clip_qkv").asDouble()) : OptionalDouble.empty();
        int maxPositions = c.path("max_position_embeddings").asInt(0);
        List<Integer> eos = new ArrayList<>();
        JsonNode e = c.path("eos_token_id");
        if (e.isArray()) {
            e.forEach(n -> eos.add(n.asInt()));
        } else if (e.isNumber()) {
            eos.add(e.asInt());
        }
        int vocab = required(c, "vocab_size");
        return new ModelConfig(arch, vocab, hidden, layers, heads, kvHeads, headDim, expertIntermediate, intermediate,
                experts, topk, normTopk, eps, rope(c, arch, maxPositions), maxPositions, tie, bias, clip, window, sliding,
                moeLayers, eos);
    }

    private static int required(JsonNode c, String key) {
        if (!c.hasNonNull(key) || !c.get(key).canConvertToInt()) {
            throw new IllegalArgumentException("'" + key + "' is missing or not an integer");
        }
        return c.get(key).asInt();
    }

    private static int firstOf(JsonNode c, String key, String alias) {
        return c.hasNonNull(key) ? required(c, key) : c.hasNonNull(alias) ? required(c, alias) : required(c, key);
    }

    /** Qwen3-MoE: a layer has experts iff it is not in mlp_only_layers and (i+1) % decoder_sparse_step == 0. */
    private static List<Boolean> moeLayers(JsonNode c, Architecture arch, int layers) {
        if (arch != Architecture.QWEN3_MOE) {
            return IntStream.range(0, layers).mapToObj(i -> true).toList();
        }
        int step = c.path("decoder_sparse_step").asInt(1);
        if (step <= 0) {
            throw new IllegalArgumentException("decoder_sparse_step must be positive, got " + step);
        }
        List<Integer> dense = new ArrayList<>();
        c.path("mlp_only_layers").forEach(n -> dense.add(n.asInt()));
        return IntStream.range(0, layers).mapToObj(i -> !dense.contains(i) && (i + 1) % step == 0).toList();
    }

    private static int slidingWindow(JsonNode c, Architecture arch) {
        return switch (arch) {
            case GPT_OSS -> c.path("sliding_window").asInt(128);
            case MIXTRAL -> c.path("sliding_window").asInt(0);
            case QWEN3_MOE -> c.path("use_sliding_window").asBoolean(false) ? c.path("sliding_window").asInt(0) : 0;
            case OLMOE -> 0;
        };
    }

    private static List<Boolean> slidingLayers(JsonNode c, Architecture arch, int layers, int window) {
        if (window <= 0) {
            return IntStream.range(0, layers).mapToObj(i -> false).toList();
        }
        if (arch == Architecture.QWEN3_MOE) {
            int full = c.path("max_window_layers").asInt(layers);
            return IntStream.range(0, layers).mapToObj(i -> i >= full).toList();
        }
        if (arch != Architecture.GPT_OSS) {
            return IntStream.range(0, layers).mapToObj(i -> true).toList();
        }
        JsonNode types = c.path("layer_types");
        if (!types.isArray()) {
            return IntStream.range(0, layers).mapToObj(i -> (i + 1) % 2 != 0).toList();
        }
        if (types.size() != layers) {
            throw new IllegalArgumentException("layer_types has " + types.size() + " entries for " + layers + " layers");
        }
        List<Boolean> out = new ArrayList<>();
        for (JsonNode t : types) {
            switch (t.asText()) {
                case "sliding_attention" -> out.add(true);
                case "full_attention" -> out.add(false);
                default -> throw new IllegalArgumentException("layer_types entry '" + t.asText()
                        + "' is not sliding_attention or full_attention");
            }
        }
        return out;
    }

    /** rope_parameters (transformers 5.x), else rope_theta with rope_scaling; each architecture's default theta. */
    private static Rope rope(JsonNode c, Architecture arch, int maxPositions) {
        JsonNode p = c.hasNonNull("rope_parameters") ? c.get("rope_parameters")
                : c.hasNonNull("rope_scaling") ? c.get("rope_scaling") : null;
        double defaultTheta = switch (arch) {
            case MIXTRAL -> 1e6;
            case GPT_OSS -> 150000;
            case QWEN3_MOE, OLMOE -> 10000;
        };
        double theta = c.hasNonNull("rope_theta") ? c.get("rope_theta").asDouble()
                : p != null && p.hasNonNull("rope_theta") ? p.get("rope_theta").asDouble() : defaultTheta;
        if (p == null) {
            return Rope.plain(theta);
        }
        String type = p.hasNonNull("rope_type") ? p.get("rope_type").asText() : p.path("type").asText(Rope.DEFAULT);
        if (type.equals(Rope.DEFAULT)) {
            return Rope.plain(theta);
        }
        int original = p.hasNonNull("original_max_position_embeddings") ? p.get("original_max_position_embeddings").asInt()
                : maxPositions;
        double factor = p.hasNonNull("factor") ? p.get("factor").asDouble()
                : original > 0 ? (double) maxPositions / original : 1;
        return new Rope(theta, type, factor, original, p.path("beta_fast").asDouble(32), p.path("beta_slow").asDouble(1),
                p.path("truncate").asBoolean(true),
                p.hasNonNull("attention_factor") ? p.get("attention_factor").asDouble() : Double.NaN);
    }
}
