package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.checkpoint.Checkpoint;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The CPU reference decoder on each architecture's tiny random model: prefill against token-by-token,
 * the KV cache, the context and vocabulary limits, gpt-oss's sliding window, Mixtral against a plain
 * re-implementation, and greedy generation.
 */
class ReferenceDecoderTest {
    /** Token ids; the first five are "The capital of France is". */
    private static final int[] PROMPT = {785, 6722, 315, 9625, 374, 12095, 11, 323};

    private record Loaded(ModelConfig config, ModelWeights weights) {}

    private static final Map<Architecture, Loaded> MODELS = new EnumMap<>(Architecture.class);
    private static TextTokenizer tokenizer;

    @TempDir
    Path tmp;

    @BeforeAll
    static void openTokenizer() {
        tokenizer = TextTokenizer.builtInQwen3();
    }

    @AfterAll
    static void closeTokenizer() {
        tokenizer.close();
    }

    private static synchronized Loaded model(Architecture arch) {
        return MODELS.computeIfAbsent(arch, a -> {
            Path dir = RandomModelTest.tiny(a);
            ModelConfig c = ModelConfig.read(dir);
            try (Checkpoint ckpt = Checkpoint.open(dir)) {
                List<Integer> progress = new ArrayList<>();
                ModelWeights w = ModelWeights.load(c, ckpt, progress::add);
                assertEquals(java.util.stream.IntStream.range(0, c.layers()).boxed().toList(), progress);
                return new Loaded(c, w);
            }
        });
    }

    private static ReferenceDecoder decoder(Architecture arch, int context) {
        Loaded m = model(arch);
        return new ReferenceDecoder(m.config(), m.weights(), context);
    }

    @ParameterizedTest
    @EnumSource(Architecture.class)
    void promptInOneCallEqualsTokenByToken(Architecture arch) {
        ReferenceDecoder whole = decoder(arch, 16);
        float[] prefill = whole.forward(PROMPT);
        assertEquals(PROMPT.length, whole.position());
        assertEquals(ModelPreset.VOCAB, prefill.length);

        ReferenceDecoder single = decoder(arch, 16);
        float[] last = null;
        for (int i = 0; i < PROMPT.length; i++) {
            last = single.forward(new int[] {PROMPT[i]});
            assertEquals(i + 1, single.position());
        }
        assertArrayEquals(prefill, last);

        ReferenceDecoder split = decoder(arch, 16);
        split.forward(Arrays.copyOfRange(PROMPT, 0, 3));
        assertArrayEquals(prefill, split.forward(Arrays.copyOfRange(PROMPT, 3, PROMPT.length)));

        // the logits are finite, of unit scale, and not flat
        double max = 0;
        for (float v : prefill) {
            assertTrue(Float.isFinite(v));
            max = Math.max(max, Math.abs(v));
        }
        assertTrue(max > 0.5 && max < 100, "largest logit " + max);
        // the next step continues from the same cache in both
        int next = Sampler.argmax(prefill);
        assertArrayEquals(whole.forward(new int[] {next}), single.forward(new int[] {next}));
    }

    /**
     * What came before changes the logits: the cache is read. A repeated token is the exception where
     * attention weights sum to 1: every value it attends to is the same, so the logits are those of the
     * token alone; gpt-oss's sinks take part of the weight, so there they are not.
     */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void theCacheMatters(Architecture arch) {
        float[] alone = decoder(arch, 4).forward(new int[] {9625});
        assertArrayEquals(alone, decoder(arch, 4).forward(new int[] {9625}), "a fresh decoder repeats itself");
        float[] afterOther = decoder(arch, 4).forward(new int[] {785, 9625});
        float[] afterThird = decoder(arch, 4).forward(new int[] {374, 9625});
        assertFalse(Arrays.equals(alone, afterOther));
        assertFalse(Arrays.equals(afterOther, afterThird));
        float[] repeated = decoder(arch, 4).forward(new int[] {9625, 9625, 9625});
        double worst = 0;
        for (int i = 0; i < alone.length; i++) {
            worst = Math.max(worst, Math.abs(alone[i] - repeated[i]));
        }
        if (arch == Architecture.GPT_OSS) {
            assertTrue(worst > 1e-3, "sinks: " + worst);
        } else {
            assertTrue(worst < 1e-5, "repeated token: " + worst);
        }
    }

    @Test
    void contextLimitIsEnforced() {
        ReferenceDecoder d = decoder(Architecture.QWEN3_MOE, 4);
        assertEquals(4, d.context());
        d.forward(new int[] {1, 2, 3});
        String m = assertThrows(IllegalArgumentException.class, () -> d.forward(new int[] {4, 5})).getMessage();
        assertTrue(m.contains("context holds 4 tokens") && m.contains("3 are in it"), m);
        assertEquals(3, d.position(), "a refused call runs nothing");
        d.forward(new int[] {4});
        assertEquals(4, d.position());
        m = assertThrows(IllegalArgumentException.class, () -> d.forward(new int[] {5})).getMessage();
        assertTrue(m.contains("context holds 4 tokens"), m);

        ReferenceDecoder fresh = decoder(Architecture.QWEN3_MOE, 4);
        assertThrows(IllegalArgumentException.class, () -> fresh.forward(new int[] {1, 2, 3, 4, 5}));
        assertEquals(0, fresh.position());
        Loaded q = model(Architecture.QWEN3_MOE);
        m = assertThrows(IllegalArgumentException.class, () -> new ReferenceDecoder(q.config(), q.weights(), 0)).getMessage();
        assertTrue(m.contains("context"), m);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> fresh.forward(new int[0])).getMessage()
                .contains("no tokens"));
    }

    /**
     * The experts' activations quantised as W8A8 kernels quantise them: refused where the widths are not
     * whole groups of 128; on the tiny Qwen3 widened to 128 the logits move by the quantisation's error
     * (percents, not zero and not tens of percent), and switching back gives the unquantised logits again.
     */
    @Test
    void expertActivationsQuantisedAsW8a8KernelsDo() {
        ReferenceDecoder narrow = decoder(Architecture.QWEN3_MOE, 8);
        String m = assertThrows(IllegalArgumentException.class, () -> narrow.quantiseExpertActivations(true)).getMessage();
        assertTrue(m.contains("groups of 128") && m.contains("hidden 64"), m);
        Path dir = RandomModelTest.written(RandomModelTest.WIDE_QWEN3);
        ModelConfig c = ModelConfig.read(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            ModelWeights w = ModelWeights.load(c, ckpt, java.util.Optional.of(dev.moeforge.dsl.ir.WeightFormat.FP8_BLOCK128), l -> { });
            int[] prompt = Arrays.copyOf(PROMPT, 5);
            float[] plain = new ReferenceDecoder(c, w, 8).forward(prompt);
            ReferenceDecoder quantised = new ReferenceDecoder(c, w, 8);
            quantised.quantiseExpertActivations(true);
            double[] want = java.util.stream.IntStream.range(0, plain.length).mapToDouble(i -> plain[i]).toArray();
            double moved = dev.moeforge.dsl.reference.ErrorStats.of(want, quantised.forward(prompt)).relativeL2();
            assertTrue(moved > 1e-3 && moved < 1e-1, "W8A8 moved the logits by " + moved);
            ReferenceDecoder back = new ReferenceDecoder(c, w, 8);
            back.quantiseExpertActivations(true);
            back.quantiseExpertActivations(false);
            assertArrayEquals(plain, back.forward(prompt));
        }
    }

    @Test
    void tokensOutsideTheVocabularyAreRefused() {
        ReferenceDecoder d = decoder(Architecture.MIXTRAL, 8);
        String m = assertThrows(IllegalArgumentException.class, () -> d.forward(new int[] {ModelPreset.VOCAB})).getMessage();
        assertTrue(m.contains("token id 151936") && m.contains("vocabulary [0, 151936)"), m);
        m = assertThrows(IllegalArgumentException.class, () -> d.forward(new int[] {-1})).getMessage();
        assertTrue(m.contains("token id -1"), m);
        assertEquals(0, d.position());
        // the largest id is fine
        d.forward(new int[] {ModelPreset.VOCAB - 1});
        assertEquals(1, d.position());
    }

    /**
     * gpt-oss's tiny model attends through a window of 4 on layer 0 (sliding_attention) and fully on
     * layer 1. Up to 4 tokens the window holds them all, so a window of 1000 gives the same logits;
     * from the 5th token on it does not; and with every layer full_attention the window is not applied.
     */
    @Test
    void gptOssSlidingWindowIsApplied() throws IOException {
        Loaded m = model(Architecture.GPT_OSS);
        assertEquals(4, m.config().slidingWindow());
        assertEquals(List.of(true, false), m.config().slidingLayers());
        ObjectMapper json = new ObjectMapper();
        ObjectNode wide = (ObjectNode) json.readTree(RandomModelTest.tiny(Architecture.GPT_OSS).resolve("config.json").toFile());
        wide.put("sliding_window", 1000);
        ModelConfig wideConfig = readCopy(json, wide, "wide");
        assertEquals(1000, wideConfig.slidingWindow());
        ObjectNode full = (ObjectNode) json.readTree(RandomModelTest.tiny(Architecture.GPT_OSS).resolve("config.json").toFile());
        full.putArray("layer_types").add("full_attention").add("full_attention");
        ModelConfig fullConfig = readCopy(json, full, "full");
        assertEquals(List.of(false, false), fullConfig.slidingLayers());

        int[] ten = Arrays.copyOf(PROMPT, 10);
        ten[8] = 9625;
        ten[9] = 374;
        float[] windowed = new ReferenceDecoder(m.config(), m.weights(), 16).forward(ten);
        float[] wideLogits = new ReferenceDecoder(wideConfig, m.weights(), 16).forward(ten);
        float[] fullLogits = new ReferenceDecoder(fullConfig, m.weights(), 16).forward(ten);
        assertFalse(Arrays.equals(windowed, wideLogits), "a window of 4 over 10 tokens changes the logits");
        assertArrayEquals(wideLogits, fullLogits, "no sliding layer: the window is not used");

        int[] four = Arrays.copyOf(ten, 4);
        assertArrayEquals(new ReferenceDecoder(wideConfig, m.weights(), 16).forward(four),
                new ReferenceDecoder(m.config(), m.weights(), 16).forward(four), "4 tokens fit the window");
        int[] five = Arrays.copyOf(ten, 5);
        assertFalse(Arrays.equals(new ReferenceDecoder(wideConfig, m.weights(), 16).forward(five),
                new ReferenceDecoder(m.config(), m.weights(), 16).forward(five)), "the 5th token's window leaves out the 1st");
    }

    private ModelConfig readCopy(ObjectMapper json, ObjectNode config, String name) throws IOException {
        Path dir = Files.createDirectories(tmp.resolve(name));
        json.writeValue(dir.resolve("config.json").toFile(), config);
        return ModelConfig.read(dir);
    }

    /**
     * Mixtral's tiny model against a plain FP64 re-implementation of MixtralForCausalLM written from
     * the checkpoint's tensors: RMSNorm, GQA with NeoX RoPE, softmax top-2 renormalised routing,
     * SwiGLU experts {@code w2(silu(w1 x) * w3 x)}.
     */
    @Test
    void mixtralMatchesAPlainImplementation() {
        Path dir = RandomModelTest.tiny(Architecture.MIXTRAL);
        ModelConfig c = model(Architecture.MIXTRAL).config();
        int[] tokens = Arrays.copyOf(PROMPT, 5);
        double[] want;
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            want = new PlainMixtral(c, ckpt).logits(tokens);
        }
        float[] got = decoder(Architecture.MIXTRAL, 8).forward(tokens);
        double scale = 0;
        for (double v : want) {
            scale = Math.max(scale, Math.abs(v));
        }
        for (int i = 0; i < got.length; i++) {
            assertEquals(want[i], got[i], 1e-5 * scale, "logit " + i);
        }
        assertEquals(argmax(want), Sampler.argmax(got));
    }

    /** MixtralForCausalLM in FP64, one token after another, from the tensors by name. */
    private record PlainMixtral(ModelConfig c, Checkpoint ckpt) {
        double[] logits(int[] tokens) {
            int h = c.hidden();
            int hd = c.headDim();
            int kvDim = c.kvHeads() * hd;
            double[][][] keys = new double[c.layers()][tokens.length][];
            double[][][] values = new double[c.layers()][tokens.length][];
            float[] embed = ckpt.floats("model.embed_tokens.weight");
            double[] x = null;
            for (int pos = 0; pos < tokens.length; pos++) {
                x = new double[h];
                for (int i = 0; i < h; i++) {
                    x[i] = embed[tokens[pos] * h + i];
                }
                for (int l = 0; l < c.layers(); l++) {
                    String p = "model.layers." + l + ".";
                    double[] n = norm(x, ckpt.floats(p + "input_layernorm.weight"));
                    double[] q = mul(ckpt.floats(p + "self_attn.q_proj.weight"), n);
                    double[] k = mul(ckpt.floats(p + "self_attn.k_proj.weight"), n);
                    double[] v = mul(ckpt.floats(p + "self_attn.v_proj.weight"), n);
                    rope(q, c.heads(), pos);
                    rope(k, c.kvHeads(), pos);
                    keys[l][pos] = k;
                    values[l][pos] = v;
                    double[] att = new double[c.heads() * hd];
                    for (int head = 0; head < c.heads(); head++) {
                        int kvHead = head / (c.heads() / c.kvHeads());
                        double[] s = new double[pos + 1];
                        double max = Double.NEGATIVE_INFINITY;
                        for (int t = 0; t <= pos; t++) {
                            for (int d = 0; d < hd; d++) {
                                s[t] += q[head * hd + d] * keys[l][t][kvHead * hd + d];
                            }
                            s[t] /= Math.sqrt(hd);
                            max = Math.max(max, s[t]);
                        }
                        double sum = 0;
                        for (int t = 0; t <= pos; t++) {
                            s[t] = Math.exp(s[t] - max);
                            sum += s[t];
                        }
                        for (int t = 0; t <= pos; t++) {
                            for (int d = 0; d < hd; d++) {
                                att[head * hd + d] += s[t] / sum * values[l][t][kvHead * hd + d];
                            }
                        }
                    }
                    assertEquals(kvDim, keys[l][pos].length);
                    add(x, mul(ckpt.floats(p + "self_attn.o_proj.weight"), att));
                    add(x, moe(p + "block_sparse_moe.", norm(x, ckpt.floats(p + "post_attention_layernorm.weight"))));
                }
            }
            return mul(ckpt.floats("lm_head.weight"), norm(x, ckpt.floats("model.norm.weight")));
        }

        private double[] moe(String p, double[] x) {
            double[] r = mul(ckpt.floats(p + "gate.weight"), x);
            double max = Arrays.stream(r).max().orElseThrow();
            double[] prob = Arrays.stream(r).map(v -> Math.exp(v - max)).toArray();
            double total = Arrays.stream(prob).sum();
            Integer[] order = new Integer[r.length];
            for (int e = 0; e < r.length; e++) {
                order[e] = e;
                prob[e] /= total;
            }
            Arrays.sort(order, (a, b) -> Double.compare(prob[b], prob[a]));
            double kept = 0;
            for (int j = 0; j < c.topk(); j++) {
                kept += prob[order[j]];
            }
            double[] out = new double[x.length];
            for (int j = 0; j < c.topk(); j++) {
                int e = order[j];
                String ex = p + "experts." + e + ".";
                double[] g = mul(ckpt.floats(ex + "w1.weight"), x);
                double[] u = mul(ckpt.floats(ex + "w3.weight"), x);
                for (int i = 0; i < g.length; i++) {
                    g[i] = g[i] / (1 + Math.exp(-g[i])) * u[i];
                }
                double[] d = mul(ckpt.floats(ex + "w2.weight"), g);
                for (int i = 0; i < out.length; i++) {
                    out[i] += prob[e] / kept * d[i];
                }
            }
            return out;
        }

        private void rope(double[] v, int heads, int pos) {
            int hd = c.headDim();
            int half = hd / 2;
            for (int i = 0; i < half; i++) {
                double angle = pos / Math.pow(c.rope().theta(), 2.0 * i / hd);
                for (int head = 0; head < heads; head++) {
                    int a = head * hd + i;
                    double x = v[a];
                    double y = v[a + half];
                    v[a] = x * Math.cos(angle) - y * Math.sin(angle);
                    v[a + half] = y * Math.cos(angle) + x * Math.sin(angle);
                }
            }
        }

        private double[] norm(double[] x, float[] w) {
            double ss = 0;
            for (double v : x) {
                ss += v * v;
            }
            double r = 1 / Math.sqrt(ss / x.length + c.rmsEps());
            double[] out = new double[x.length];
            for (int i = 0; i < x.length; i++) {
                out[i] = w[i] * x[i] * r;
            }
            return out;
        }

        /** {@code W x} for W of {@code [out][x.length]}. */
        private static double[] mul(float[] w, double[] x) {
            int rows = w.length / x.length;
            double[] out = new double[rows];
            for (int r = 0; r < rows; r++) {
                double s = 0;
                for (int i = 0; i < x.length; i++) {
                    s += w[r * x.length + i] * x[i];
                }
                out[r] = s;
            }
            return out;
        }

        private static void add(double[] x, double[] y) {
            for (int i = 0; i < x.length; i++) {
                x[i] += y[i];
            }
        }
    }

    private static int argmax(double[] v) {
        int best = 0;
        for (int i = 1; i < v.length; i++) {
            if (v[i] > v[best]) {
                best = i;
            }
        }
        return best;
    }

    /** Greedy generation is the argmax chain, and the same in two runs. */
    @Test
    void greedyGenerationIsDeterministic() {
        int[] prompt = tokenizer.encode("The capital of France is");
        int n = 6;
        StringBuilder streamed = new StringBuilder();
        Generation.Result a = Generation.run(decoder(Architecture.QWEN3_MOE, prompt.length + n), tokenizer, prompt, n,
                new Sampler(Sampler.Options.greedy()), List.of(RandomModel.EOS), streamed::append);
        Generation.Result b = Generation.run(decoder(Architecture.QWEN3_MOE, prompt.length + n), tokenizer, prompt, n,
                new Sampler(Sampler.Options.greedy()), List.of(RandomModel.EOS), s -> { });
        assertArrayEquals(a.ids(), b.ids());
        assertEquals(a.text(), b.text());
        assertArrayEquals(prompt, a.promptIds());
        assertEquals(n, a.ids().length, "a random model's EOS is unlikely: " + Arrays.toString(a.ids()));
        assertEquals("max-tokens", a.stop());
        assertEquals(tokenizer.decode(a.ids()), a.text());
        assertTrue(a.text().startsWith(streamed.toString()), () -> "streamed '" + streamed + "', text '" + a.text() + "'");

        // the argmax chain, step by step
        ReferenceDecoder d = decoder(Architecture.QWEN3_MOE, prompt.length + n);
        int next = Sampler.argmax(d.forward(prompt));
        for (int i = 0; i < n; i++) {
            assertEquals(next, a.ids()[i], "token " + i);
            if (i + 1 < n) {
                next = Sampler.argmax(d.forward(new int[] {next}));
            }
        }

        Generation.Timings t = a.timings();
        assertEquals(prompt.length, t.prefillTokens());
        assertEquals(n - 1, t.decodeTokens());
        assertTrue(t.prefillSeconds() > 0 && t.decodeSeconds() > 0);
        assertTrue(t.prefillTokensPerSecond() > 0 && t.decodeTokensPerSecond() > 0);
    }

    @Test
    void sampledGenerationFollowsTheSeed() {
        int[] prompt = Arrays.copyOf(PROMPT, 3);
        int[][] ids = new int[3][];
        long[] seeds = {5, 5, 6};
        for (int i = 0; i < 3; i++) {
            ids[i] = Generation.run(decoder(Architecture.OLMOE, 16), tokenizer, prompt, 5,
                    new Sampler(new Sampler.Options(1, 0, 1, seeds[i])), List.of(RandomModel.EOS), s -> { }).ids();
        }
        assertArrayEquals(ids[0], ids[1]);
        assertFalse(Arrays.equals(ids[0], ids[2]), Arrays.toString(ids[0]));
    }

    /** Generation stops when the cache is full: the token picked from the last position's logits is the last. */
    @Test
    void generationStopsAtTheContext() {
        int[] prompt = Arrays.copyOf(PROMPT, 3);
        Generation.Result r = Generation.run(decoder(Architecture.MIXTRAL, 5), tokenizer, prompt, 10,
                new Sampler(Sampler.Options.greedy()), List.of(RandomModel.EOS), s -> { });
        assertEquals("context", r.stop());
        assertEquals(3, r.ids().length);
        assertEquals(2, r.timings().decodeTokens());
        assertThrows(IllegalArgumentException.class, () -> Generation.run(decoder(Architecture.MIXTRAL, 5), tokenizer,
                new int[0], 4, new Sampler(Sampler.Options.greedy()), List.of(), s -> { }));
        String m = assertThrows(IllegalArgumentException.class, () -> Generation.run(decoder(Architecture.MIXTRAL, 5),
                tokenizer, prompt, 0, new Sampler(Sampler.Options.greedy()), List.of(), s -> { })).getMessage();
        assertTrue(m.contains("--max-tokens"), m);
    }

    /** EOS ends generation, is kept in the ids, and is neither streamed nor part of the text. */
    @Test
    void eosStopsGeneration() {
        int hello = tokenizer.encode("Hello")[0];
        int[] script = {hello, hello, RandomModel.EOS, hello};
        TokenModel scripted = new TokenModel() {
            private int position;

            @Override
            public float[] forward(int[] tokens) {
                float[] logits = new float[ModelPreset.VOCAB];
                logits[script[position]] = 10;
                position++;
                return logits;
            }

            @Override
            public int position() {
                return position;
            }

            @Override
            public int context() {
                return 100;
            }

            @Override
            public String device() {
                return "script";
            }
        };
        List<String> streamed = new ArrayList<>();
        Generation.Result r = Generation.run(scripted, tokenizer, new int[] {1, 2}, 10, new Sampler(Sampler.Options.greedy()),
                List.of(RandomModel.BOS, RandomModel.EOS), streamed::add);
        assertArrayEquals(new int[] {hello, hello, RandomModel.EOS}, r.ids());
        assertEquals("eos", r.stop());
        assertEquals("HelloHello", r.text());
        assertEquals(List.of("Hello", "Hello"), streamed);
        assertEquals(2, r.timings().decodeTokens());
    }
}
