package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.SafetensorsDType;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * init-model's random models: their config.json, the tensors' names, shapes and values, and the refusals.
 * {@link #tiny} is also the decoder and CLI tests' source of models.
 */
public class RandomModelTest {
    private static final long SHARD = 5_000_000_000L;

    /**
     * The tiny Qwen3 widened to H = I = 128, the narrowest geometry FP8 block weights' W8A8 tiles take
     * (whole 128 x 128 scale blocks and activation groups of 128).
     */
    public static final ModelPreset WIDE_QWEN3 = new ModelPreset("tiny-128", Architecture.QWEN3_MOE, 128, 128, 256, 2, 4, 2, 32,
            8, 2, List.of(), 0, 0, 4096);

    /** Each preset's model, seed 0, written once per test JVM (the tiny ones 40 MB and about a second each). */
    private static final Map<ModelPreset, Path> WRITTEN = new java.util.HashMap<>();
    private static Path tinyRoot;

    @TempDir
    Path tmp;

    /**
     * The tiny model of {@code arch} (seed 0, BF16), shared by every test class of this JVM: copy it
     * before changing anything. Deleted when the JVM exits.
     */
    public static Path tiny(Architecture arch) {
        return written(ModelPreset.of(arch, "tiny"));
    }

    /** The model of {@code preset} (seed 0, BF16), written once per test JVM and shared as {@link #tiny} is. */
    public static synchronized Path written(ModelPreset preset) {
        Path dir = WRITTEN.get(preset);
        if (dir == null) {
            try {
                if (tinyRoot == null) {
                    Path root = Files.createTempDirectory("moeforge-tiny-models");
                    Runtime.getRuntime().addShutdownHook(new Thread(() -> deleteTree(root)));
                    tinyRoot = root;
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            dir = tinyRoot.resolve(preset.arch().modelType() + "-" + preset.name() + "-" + WRITTEN.size());
            List<Path> files = RandomModel.write(preset, 0, SafetensorsDType.BF16, SHARD, dir);
            assertEquals(List.of(dir.resolve("model.safetensors"), dir.resolve("config.json"),
                    dir.resolve("generation_config.json"), dir.resolve("tokenizer.json")), files);
            WRITTEN.put(preset, dir);
        }
        return dir;
    }

    private static void deleteTree(Path root) {
        try (var paths = Files.walk(root)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException | UncheckedIOException e) {
            // best effort at exit
        }
    }

    @ParameterizedTest
    @EnumSource(Architecture.class)
    void configJsonHasThePresetsGeometry(Architecture arch) {
        ModelPreset p = ModelPreset.of(arch, "tiny");
        ModelConfig c = ModelConfig.read(tiny(arch));
        assertEquals(arch, c.arch());
        assertEquals(ModelPreset.VOCAB, c.vocab());
        assertEquals(p.hidden(), c.hidden());
        assertEquals(p.layers(), c.layers());
        assertEquals(p.heads(), c.heads());
        assertEquals(p.kvHeads(), c.kvHeads());
        assertEquals(p.headDim(), c.headDim());
        assertEquals(p.experts(), c.experts());
        assertEquals(p.topk(), c.topk());
        assertEquals(p.expertIntermediate(), c.expertIntermediate());
        assertEquals(p.maxPositions(), c.maxPositions());
        assertEquals(p.slidingWindow(), c.slidingWindow());
        assertEquals(IntStream.range(0, p.layers()).mapToObj(l -> !p.denseLayers().contains(l)).toList(), c.moeLayers());
        assertEquals(List.of(RandomModel.EOS), c.eosIds());
        assertFalse(c.tieEmbeddings());
        switch (arch) {
            case QWEN3_MOE -> {
                assertEquals(List.of(true, false, true), c.moeLayers(), "layer 1 is dense");
                assertEquals(128, c.denseIntermediate());
                assertTrue(c.normTopkProb());
                assertEquals(1e-6, c.rmsEps());
                assertEquals(Rope.plain(1e6), c.rope());
            }
            case OLMOE -> {
                assertEquals(java.util.OptionalDouble.of(3.0), c.clipQkv());
                assertFalse(c.normTopkProb());
                assertEquals(Rope.plain(10000), c.rope());
            }
            case MIXTRAL -> {
                assertEquals(List.of(false, false), c.slidingLayers());
                assertEquals(Rope.plain(1e6), c.rope());
            }
            case GPT_OSS -> {
                assertEquals(4, c.slidingWindow());
                assertEquals(List.of(true, false), c.slidingLayers());
                assertTrue(c.attentionBias());
                assertEquals(new Rope(150000, Rope.YARN, 32, 4096, 32, 1, false, Double.NaN), c.rope());
            }
        }
    }

    @Test
    void generationConfigAndTokenizerFiles() throws IOException {
        Path dir = tiny(Architecture.QWEN3_MOE);
        JsonNode gen = new ObjectMapper().readTree(dir.resolve("generation_config.json").toFile());
        assertEquals(151643, gen.get("bos_token_id").asInt());
        assertEquals(151645, gen.get("eos_token_id").asInt());
        JsonNode config = new ObjectMapper().readTree(dir.resolve("config.json").toFile());
        assertEquals("Qwen3MoeForCausalLM", config.get("architectures").get(0).asText());
        assertEquals("bfloat16", config.get("torch_dtype").asText());
        for (String f : List.of("tokenizer.json", "tokenizer_config.json", "TOKENIZER_LICENSE", "TOKENIZER_NOTICE")) {
            assertTrue(Files.size(dir.resolve(f)) > 0, f);
        }
        try (TextTokenizer t = TextTokenizer.open(dir.resolve("tokenizer.json"))) {
            assertArrayEquals(new int[] {785, 6722, 315, 9625, 374}, t.encode("The capital of France is"));
        }
    }

    /** The tensors save_pretrained writes for each architecture, with their shapes. */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void tensorNamesAndShapesAreTransformers(Architecture arch) {
        ModelPreset p = ModelPreset.of(arch, "tiny");
        Map<String, List<Long>> want = new java.util.TreeMap<>();
        long v = ModelPreset.VOCAB;
        long h = p.hidden();
        long q = (long) p.heads() * p.headDim();
        long kv = (long) p.kvHeads() * p.headDim();
        long in = p.expertIntermediate();
        long e = p.experts();
        want.put("model.embed_tokens.weight", List.of(v, h));
        want.put("lm_head.weight", List.of(v, h));
        want.put("model.norm.weight", List.of(h));
        for (int l = 0; l < p.layers(); l++) {
            String pre = "model.layers." + l + ".";
            want.put(pre + "input_layernorm.weight", List.of(h));
            want.put(pre + "post_attention_layernorm.weight", List.of(h));
            want.put(pre + "self_attn.q_proj.weight", List.of(q, h));
            want.put(pre + "self_attn.k_proj.weight", List.of(kv, h));
            want.put(pre + "self_attn.v_proj.weight", List.of(kv, h));
            want.put(pre + "self_attn.o_proj.weight", List.of(h, q));
            switch (arch) {
                case QWEN3_MOE -> {
                    want.put(pre + "self_attn.q_norm.weight", List.of((long) p.headDim()));
                    want.put(pre + "self_attn.k_norm.weight", List.of((long) p.headDim()));
                    if (l == 1) {
                        want.put(pre + "mlp.gate_proj.weight", List.of(128L, h));
                        want.put(pre + "mlp.up_proj.weight", List.of(128L, h));
                        want.put(pre + "mlp.down_proj.weight", List.of(h, 128L));
                    } else {
                        perExpert(want, pre + "mlp.", "gate_proj", "up_proj", "down_proj", p);
                    }
                }
                case OLMOE -> {
                    want.put(pre + "self_attn.q_norm.weight", List.of(q));
                    want.put(pre + "self_attn.k_norm.weight", List.of(kv));
                    perExpert(want, pre + "mlp.", "gate_proj", "up_proj", "down_proj", p);
                }
                case MIXTRAL -> perExpert(want, pre + "block_sparse_moe.", "w1", "w3", "w2", p);
                case GPT_OSS -> {
                    want.put(pre + "self_attn.q_proj.bias", List.of(q));
                    want.put(pre + "self_attn.k_proj.bias", List.of(kv));
                    want.put(pre + "self_attn.v_proj.bias", List.of(kv));
                    want.put(pre + "self_attn.o_proj.bias", List.of(h));
                    want.put(pre + "self_attn.sinks", List.of((long) p.heads()));
                    want.put(pre + "mlp.router.weight", List.of(e, h));
                    want.put(pre + "mlp.router.bias", List.of(e));
                    want.put(pre + "mlp.experts.gate_up_proj", List.of(e, h, 2 * in));
                    want.put(pre + "mlp.experts.gate_up_proj_bias", List.of(e, 2 * in));
                    want.put(pre + "mlp.experts.down_proj", List.of(e, in, h));
                    want.put(pre + "mlp.experts.down_proj_bias", List.of(e, h));
                }
            }
        }
        try (Checkpoint ckpt = Checkpoint.open(tiny(arch))) {
            assertEquals(want.keySet(), new TreeSet<>(ckpt.names()));
            for (Map.Entry<String, List<Long>> t : want.entrySet()) {
                assertEquals(t.getValue(), ckpt.tensor(t.getKey()).shape(), t.getKey());
                assertEquals(SafetensorsDType.BF16, ckpt.tensor(t.getKey()).dtype(), t.getKey());
            }
            assertEquals("pt", ckpt.files().getFirst().metadata().get("format"));
            assertEquals(1, ckpt.files().size());
        }
    }

    /** Router {@code gate.weight [E][H]} and each expert's gate/up {@code [I][H]} and down {@code [H][I]}. */
    private static void perExpert(Map<String, List<Long>> want, String pre, String gate, String up, String down, ModelPreset p) {
        long h = p.hidden();
        long in = p.expertIntermediate();
        want.put(pre + "gate.weight", List.of((long) p.experts(), h));
        for (int x = 0; x < p.experts(); x++) {
            want.put(pre + "experts." + x + "." + gate + ".weight", List.of(in, h));
            want.put(pre + "experts." + x + "." + up + ".weight", List.of(in, h));
            want.put(pre + "experts." + x + "." + down + ".weight", List.of(h, in));
        }
    }

    /** Embeddings N(0, 1), projections N(0, 1/fan_in), norms 1 + N(0, 0.01). */
    @Test
    void weightScales() {
        try (Checkpoint ckpt = Checkpoint.open(tiny(Architecture.MIXTRAL))) {
            double[] embed = meanAndStd(ckpt.floats("model.embed_tokens.weight"));
            assertEquals(0, embed[0], 0.01);
            assertEquals(1, embed[1], 0.01);
            double[] head = meanAndStd(ckpt.floats("lm_head.weight"));
            assertEquals(0, head[0], 0.01);
            assertEquals(0.125, head[1], 0.002, "1/sqrt(64)");
            double[] norm = meanAndStd(ckpt.floats("model.layers.0.input_layernorm.weight"));
            assertEquals(1, norm[0], 0.05);
            assertEquals(0.1, norm[1], 0.05);
        }
    }

    private static double[] meanAndStd(float[] v) {
        double s = 0;
        double ss = 0;
        for (float x : v) {
            s += x;
            ss += (double) x * x;
        }
        double mean = s / v.length;
        return new double[] {mean, Math.sqrt(ss / v.length - mean * mean)};
    }

    /**
     * The same seed writes the same bytes; another seed other weights (every tensor), the same config.json;
     * tensors of one shape are not copies of each other.
     */
    @Test
    void seedsDecideTheWeights() throws IOException {
        ModelPreset p = ModelPreset.of(Architecture.QWEN3_MOE, "tiny");
        Path again = tmp.resolve("again");
        RandomModel.write(p, 0, SafetensorsDType.BF16, SHARD, again);
        Path first = tiny(Architecture.QWEN3_MOE);
        assertEquals(-1, Files.mismatch(first.resolve("model.safetensors"), again.resolve("model.safetensors")));
        assertEquals(-1, Files.mismatch(first.resolve("config.json"), again.resolve("config.json")));

        Path other = tmp.resolve("other");
        RandomModel.write(p, 1, SafetensorsDType.BF16, SHARD, other);
        assertEquals(Files.size(first.resolve("model.safetensors")), Files.size(other.resolve("model.safetensors")));
        assertNotEquals(-1, Files.mismatch(first.resolve("model.safetensors"), other.resolve("model.safetensors")));
        assertEquals(-1, Files.mismatch(first.resolve("config.json"), other.resolve("config.json")));
        try (Checkpoint a = Checkpoint.open(first); Checkpoint o = Checkpoint.open(other)) {
            for (String name : a.names()) {
                assertFalse(java.util.Arrays.equals(a.bytes(name), o.bytes(name)), name + ": another seed");
            }
            assertFalse(java.util.Arrays.equals(a.bytes("model.layers.0.mlp.experts.0.gate_proj.weight"),
                    a.bytes("model.layers.0.mlp.experts.1.gate_proj.weight")));
            assertFalse(java.util.Arrays.equals(a.bytes("model.layers.0.mlp.experts.0.gate_proj.weight"),
                    a.bytes("model.layers.0.mlp.experts.0.up_proj.weight")));
        }
    }

    @Test
    void aDirectoryHoldingAModelIsRefused() throws IOException {
        Path dir = Files.createDirectories(tmp.resolve("model"));
        Files.writeString(dir.resolve("config.json"), "{}");
        ModelPreset p = ModelPreset.of(Architecture.MIXTRAL, "tiny");
        String m = assertThrows(IllegalArgumentException.class,
                () -> RandomModel.write(p, 0, SafetensorsDType.BF16, SHARD, dir)).getMessage();
        assertTrue(m.contains(dir.toString()) && m.contains("already holds a model"), m);
        assertEquals("{}", Files.readString(dir.resolve("config.json")));
        try (var files = Files.list(dir)) {
            assertEquals(1, files.count(), "nothing else written");
        }
        m = assertThrows(IllegalArgumentException.class,
                () -> RandomModel.write(p, 0, SafetensorsDType.F16, SHARD, tmp.resolve("f16"))).getMessage();
        assertTrue(m.contains("bf16 or f32"), m);
    }

    @Test
    void presets() {
        String m = assertThrows(IllegalArgumentException.class, () -> ModelPreset.of(Architecture.GPT_OSS, "huge")).getMessage();
        assertTrue(m.contains("'huge'") && m.contains("gpt_oss") && m.contains("tiny, gpt-oss-20b"), m);
        m = assertThrows(IllegalArgumentException.class, () -> ModelPreset.of(Architecture.MIXTRAL, "gpt-oss-20b")).getMessage();
        assertTrue(m.contains("tiny, mixtral-8x7b"), m);
        for (Architecture a : Architecture.values()) {
            assertEquals("tiny", ModelPreset.of(a, "tiny").name());
            assertEquals(a, ModelPreset.of(a, "tiny").arch());
        }
        ModelPreset big = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        assertEquals(48, big.layers());
        assertEquals(128, big.experts());
        // Qwen3-30B-A3B: 30.5 B parameters (norms left out)
        assertEquals(30.5e9, big.parameters(), 0.1e9);
    }

    @Test
    void withLayersDropsDenseLayersPastTheEnd() {
        ModelPreset p = ModelPreset.of(Architecture.QWEN3_MOE, "tiny");
        assertEquals(List.of(1), p.denseLayers());
        assertEquals(List.of(), p.withLayers(1).denseLayers());
        assertEquals(1, p.withLayers(1).layers());
        assertEquals(List.of(1), p.withLayers(2).denseLayers());
        assertEquals(List.of(1), p.withLayers(6).denseLayers());
        assertEquals(6, p.withLayers(6).layers());
        assertEquals(p.hidden(), p.withLayers(6).hidden());
        assertThrows(IllegalArgumentException.class, () -> p.withLayers(0));
        // one layer less is one attention and, here, one MoE layer less
        long attention = 2L * 64 * 128 + 2L * 64 * 64;
        long moe = 8L * 3 * 64 * 32 + 8L * 64;
        assertEquals(attention + moe, p.withLayers(4).parameters() - p.parameters());
    }

    /** parameters() counts every matrix (embedding, head, projections, routers, experts), not the norms' and biases' vectors. */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void parameterCountIsTheMatricesOfTheCheckpoint(Architecture arch) {
        try (Checkpoint ckpt = Checkpoint.open(tiny(arch))) {
            long matrices = 0;
            List<String> counted = new ArrayList<>();
            for (String name : ckpt.names()) {
                if (ckpt.tensor(name).shape().size() >= 2 && !name.endsWith("_bias")) {
                    matrices += ckpt.tensor(name).numel();
                    counted.add(name);
                }
            }
            assertEquals(ModelPreset.of(arch, "tiny").parameters(), matrices, counted::toString);
        }
    }
}
