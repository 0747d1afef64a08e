package dev.moeforge.examples.decoder;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.checkpoint.CheckpointWriter;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.dsl.format.Bf16;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import java.util.zip.GZIPInputStream;

/**
 * Writes a model of a preset's geometry with random weights as a Hugging Face directory that
 * transformers 5.17 loads as it is: config.json, generation_config.json, safetensors in the names
 * {@code save_pretrained} writes (per-expert tensors; gpt-oss's fused ones), and the shipped Qwen3
 * tokenizer. Each tensor is drawn from its own generator seeded by the seed and its name, so a
 * tensor's values do not depend on which others exist. Scales keep activations and logits near
 * unit size, so greedy decoding has clear winners: embeddings N(0, 1), projections N(0, 1/fan_in),
 * norms 1 + N(0, 0.1^2), biases N(0, 0.1^2), sinks N(0, 1).
 */
public final class RandomModel {
    /** The ids of the shipped tokenizer's {@code <|endoftext|>} and {@code <|im_end|>}. */
    static final int BOS = 151643;
    static final int EOS = 151645;

    private RandomModel() {}

    /**
     * Writes the model into {@code out} (created; must not hold a model already).
     *
     * @return the files written
     */
    public static List<Path> write(ModelPreset p, long seed, SafetensorsDType dtype, long maxShardBytes, Path out) {
        if (dtype != SafetensorsDType.BF16 && dtype != SafetensorsDType.F32) {
            throw new IllegalArgumentException("--dtype must be bf16 or f32, got " + dtype.text());
        }
        try {
            Files.createDirectories(out);
            if (Files.exists(out.resolve("config.json"))) {
                throw new IllegalArgumentException(out + " already holds a model (config.json); choose a new directory");
            }
            CheckpointWriter w = new CheckpointWriter(maxShardBytes).metadata(java.util.Map.of("format", "pt"));
            new Tensors(w, seed, dtype).addAll(p);
            List<Path> files = new java.util.ArrayList<>(w.write(out));
            ObjectMapper json = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
            json.writeValue(out.resolve("config.json").toFile(), config(p, dtype, json));
            ObjectNode gen = json.createObjectNode().put("bos_token_id", BOS).put("eos_token_id", EOS)
                    .put("pad_token_id", BOS);
            json.writeValue(out.resolve("generation_config.json").toFile(), gen);
            try (InputStream in = new GZIPInputStream(TextTokenizer.resource("tokenizer.json.gz"))) {
                Files.copy(in, out.resolve("tokenizer.json"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            }
            for (String f : List.of("tokenizer_config.json", "LICENSE", "NOTICE")) {
                try (InputStream in = TextTokenizer.resource(f)) {
                    Files.copy(in, out.resolve(f.equals("tokenizer_config.json") ? f : "TOKENIZER_" + f),
                            java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                }
            }
            files.addAll(List.of(out.resolve("config.json"), out.resolve("generation_config.json"), out.resolve("tokenizer.json")));
            return files;
        } catch (IOException e) {
            throw new UncheckedIOException(out + ": " + e.getMessage(), e);
        }
    }

    /** config.json in the hub's spelling (rope_theta, rope_scaling, num_experts / num_local_experts). */
    public static ObjectNode config(ModelPreset p, SafetensorsDType dtype, ObjectMapper json) {
        ObjectNode c = json.createObjectNode();
        c.putArray("architectures").add(p.arch().className());
        c.put("model_type", p.arch().modelType());
        c.put("vocab_size", ModelPreset.VOCAB).put("hidden_size", p.hidden()).put("num_hidden_layers", p.layers())
                .put("num_attention_heads", p.heads()).put("num_key_value_heads", p.kvHeads()).put("head_dim", p.headDim())
                .put("max_position_embeddings", p.maxPositions()).put("hidden_act", "silu").put("tie_word_embeddings", false)
                .put("num_experts_per_tok", p.topk()).put("bos_token_id", BOS).put("eos_token_id", EOS)
                .put("torch_dtype", dtype == SafetensorsDType.BF16 ? "bfloat16" : "float32");
        switch (p.arch()) {
            case QWEN3_MOE -> {
                c.put("intermediate_size", p.denseIntermediate()).put("moe_intermediate_size", p.expertIntermediate())
                        .put("num_experts", p.experts()).put("norm_topk_prob", true).put("decoder_sparse_step", 1)
                        .put("rms_norm_eps", 1e-6).put("rope_theta", 1e6).put("attention_bias", false)
                        .put("use_sliding_window", false);
                p.denseLayers().forEach(c.putArray("mlp_only_layers")::add);
            }
            case OLMOE -> {
                c.put("intermediate_size", p.expertIntermediate()).put("num_experts", p.experts()).put("norm_topk_prob", false)
                        .put("rms_norm_eps", 1e-5).put("rope_theta", 10000.0).put("attention_bias", false);
                if (p.clipQkv() > 0) {
                    c.put("clip_qkv", p.clipQkv());
                } else {
                    c.putNull("clip_qkv");
                }
            }
            case MIXTRAL -> {
                c.put("intermediate_size", p.expertIntermediate()).put("num_local_experts", p.experts())
                        .put("rms_norm_eps", 1e-5).put("rope_theta", 1e6);
                if (p.slidingWindow() > 0) {
                    c.put("sliding_window", p.slidingWindow());
                } else {
                    c.putNull("sliding_window");
                }
            }
            case GPT_OSS -> {
                c.put("intermediate_size", p.expertIntermediate()).put("num_local_experts", p.experts())
                        .put("rms_norm_eps", 1e-5).put("rope_theta", 150000.0).put("attention_bias", true)
                        .put("sliding_window", p.slidingWindow()).put("initial_context_length", 4096);
                c.putObject("rope_scaling").put("rope_type", "yarn").put("factor", 32.0).put("beta_fast", 32.0)
                        .put("beta_slow", 1.0).put("truncate", false).put("original_max_position_embeddings", 4096);
                var types = c.putArray("layer_types");
                IntStream.range(0, p.layers()).forEach(i -> types.add(i % 2 == 0 ? "sliding_attention" : "full_attention"));
            }
        }
        return c;
    }

    /** Adds every tensor of a preset, each made when its shard is written. */
    private record Tensors(CheckpointWriter w, long seed, SafetensorsDType dtype) {

        void addAll(ModelPreset p) {
            int h = p.hidden();
            normal("model.embed_tokens.weight", 1, ModelPreset.VOCAB, h);
            for (int l = 0; l < p.layers(); l++) {
                String pre = ModelWeights.layerPrefix(l);
                norm(pre + "input_layernorm.weight", h);
                norm(pre + "post_attention_layernorm.weight", h);
                attention(p, pre + "self_attn.");
                if (p.denseLayers().contains(l)) {
                    linear(pre + "mlp.gate_proj.weight", p.denseIntermediate(), h);
                    linear(pre + "mlp.up_proj.weight", p.denseIntermediate(), h);
                    linear(pre + "mlp.down_proj.weight", h, p.denseIntermediate());
                } else {
                    experts(p, pre);
                }
            }
            norm("model.norm.weight", h);
            linear("lm_head.weight", ModelPreset.VOCAB, h);
        }

        private void attention(ModelPreset p, String pre) {
            int q = p.heads() * p.headDim();
            int kv = p.kvHeads() * p.headDim();
            boolean bias = p.arch() == Architecture.GPT_OSS;
            linear(pre + "q_proj.weight", q, p.hidden());
            linear(pre + "k_proj.weight", kv, p.hidden());
            linear(pre + "v_proj.weight", kv, p.hidden());
            linear(pre + "o_proj.weight", p.hidden(), q);
            if (bias) {
                for (String proj : List.of("q_proj", "k_proj", "v_proj")) {
                    normal(pre + proj + ".bias", 0.1, proj.equals("q_proj") ? q : kv);
                }
                normal(pre + "o_proj.bias", 0.1, p.hidden());
                normal(pre + "sinks", 1, p.heads());
            }
            switch (p.arch()) {
                case QWEN3_MOE -> {
                    norm(pre + "q_norm.weight", p.headDim());
                    norm(pre + "k_norm.weight", p.headDim());
                }
                case OLMOE -> {
                    norm(pre + "q_norm.weight", q);
                    norm(pre + "k_norm.weight", kv);
                }
                case MIXTRAL, GPT_OSS -> { }
            }
        }

        private void experts(ModelPreset p, String layer) {
            int h = p.hidden();
            int in = p.expertIntermediate();
            int e = p.experts();
            switch (p.arch()) {
                case GPT_OSS -> {
                    String pre = layer + "mlp.";
                    linear(pre + "router.weight", e, h);
                    normal(pre + "router.bias", 0.1, e);
                    // x @ W: gate_up [E, H, 2I] (gate and up interleaved), down [E, I, H]
                    normal(pre + "experts.gate_up_proj", 1 / Math.sqrt(h), e, h, 2 * in);
                    normal(pre + "experts.gate_up_proj_bias", 0.1, e, 2 * in);
                    normal(pre + "experts.down_proj", 1 / Math.sqrt(in), e, in, h);
                    normal(pre + "experts.down_proj_bias", 0.1, e, h);
                }
                case MIXTRAL -> {
                    String pre = layer + "block_sparse_moe.";
                    linear(pre + "gate.weight", e, h);
                    for (int x = 0; x < e; x++) {
                        linear(pre + "experts." + x + ".w1.weight", in, h);
                        linear(pre + "experts." + x + ".w3.weight", in, h);
                        linear(pre + "experts." + x + ".w2.weight", h, in);
                    }
                }
                case QWEN3_MOE, OLMOE -> {
                    String pre = layer + "mlp.";
                    linear(pre + "gate.weight", e, h);
                    for (int x = 0; x < e; x++) {
                        linear(pre + "experts." + x + ".gate_proj.weight", in, h);
                        linear(pre + "experts." + x + ".up_proj.weight", in, h);
                        linear(pre + "experts." + x + ".down_proj.weight", h, in);
                    }
                }
            }
        }

        private void linear(String name, int out, int in) {
            normal(name, 1 / Math.sqrt(in), out, in);
        }

        private void norm(String name, int n) {
            add(name, new long[] {n}, r -> 1 + 0.1 * r.nextGaussian());
        }

        private void normal(String name, double std, long... shape) {
            add(name, shape, r -> std * r.nextGaussian());
        }

        private void add(String name, long[] shape, java.util.function.ToDoubleFunction<SplittableRandom> value) {
            long n = Arrays.stream(shape).reduce(1, Math::multiplyExact);
            long tensorSeed = seed * 0x9E3779B97F4A7C15L + name.hashCode();
            w.add(name, dtype, Arrays.stream(shape).boxed().toList(), () -> {
                SplittableRandom r = new SplittableRandom(tensorSeed);
                MemorySegment data = java.lang.foreign.Arena.ofAuto().allocate(dtype.byteSize(n));
                for (long i = 0; i < n; i++) {
                    float v = (float) value.applyAsDouble(r);
                    if (dtype == SafetensorsDType.BF16) {
                        data.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 2 * i, Bf16.fromFloat(v));
                    } else {
                        data.set(ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 4 * i, v);
                    }
                }
                return data;
            });
        }
    }
}
