package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The GPU decoder against the CPU reference on each architecture's tiny random model: the logits
 * of the prompt and of every later step, teacher-forced with the reference's greedy tokens, within
 * bf16 tolerance (bf16 weights, activations and KV cache against FP64) until the reference meets a
 * router near-tie (where bf16 may route elsewhere); the step graph's greedy tokens are those of
 * forward's logits; a batch of two decodes the same tokens twice; sampling repeats with its seed.
 */
@RequiresGpu
class GpuDecoderGpuTest extends dev.moeforge.runtime.cuda.GpuTestSession {
    private static final int[] PROMPT = {785, 6722, 315, 9625, 374, 12095, 11, 323, 279, 6722, 315};
    private static final int STEPS = 12;
    private static final int PROMPT_LENGTH = 5;
    /** bf16 rounding of weights, activations and the cache, through a few layers: the logits stay within 2% (relative L2). */
    private static final double LOGITS_L2 = 2e-2;
    /**
     * Where experts quantise their activations (W8A8) the logits are fixed only to the quantisation's
     * own error: on the reference of the widened Qwen3 below, moving the experts' input by 0.3%
     * (bf16's error through a few layers) before it is quantised moves the logits by 1.8-3.0%, as much
     * as W8A8 moves them from exact activations (2.0-3.6%); a wrong scale or block moves them by tens of percent.
     */
    private static final double W8A8_LOGITS_L2 = 5e-2;
    /** Router logits closer than this may be ordered the other way by bf16 activations. */
    static final double ROUTER_NEAR_TIE = 2e-2;

    @ParameterizedTest
    @EnumSource(Architecture.class)
    void logitsAndTokensMatchTheReference(Architecture arch) {
        compare(arch, Optional.empty());
    }

    /**
     * The experts re-encoded on load (--experts-format): the GPU's format kernels against the reference
     * on the same codes. Mixtral's tiny experts (H = I = 64) take NVFP4 in whole 64-wide slices, so its
     * prompt runs on the 4-bit expert-centric tiles.
     */
    @ParameterizedTest
    @CsvSource({"QWEN3_MOE, nvfp4", "MIXTRAL, mxfp8", "GPT_OSS, mxfp4", "MIXTRAL, nvfp4"})
    void expertsInAnotherFormat(Architecture arch, String format) {
        compare(arch, Optional.of(WeightFormat.ALL.stream().filter(f -> f.text().equals(format)).findFirst().orElseThrow()));
    }

    /**
     * FP8 block experts (the format of Qwen3's FP8 checkpoints): the prompt on the W8A8 prefill tiles,
     * then decode steps on one-token W8A16 kernels (1 sequence) or on the 16-pair W8A8 tiles carried
     * from the catalogue (8 sequences); the reference quantises the experts' activations wherever
     * the GPU's kernels do.
     */
    @ParameterizedTest
    @CsvSource({"1, true, false", "8, true, true"})
    void fp8BlockExpertsWhereTheirKernelsQuantiseActivations(int batch, boolean promptW8a8, boolean stepW8a8) {
        compare(RandomModelTest.written(RandomModelTest.WIDE_QWEN3), Optional.of(WeightFormat.FP8_BLOCK128), PROMPT_LENGTH + STEPS + 1, batch,
                PROMPT_LENGTH, GpuDecoder.PROMPT_CHUNK, gpu -> {
                    assertEquals(promptW8a8, gpu.expertsQuantiseActivations(true), "the prompt's experts multiply FP8 activations");
                    assertEquals(stepW8a8, gpu.expertsQuantiseActivations(false), "the steps' experts multiply FP8 activations");
                });
    }

    /** NVFP4 experts on the 4-bit expert-centric tiles through a prompt of 70 tokens in chunks of 32. */
    @Test
    void fourBitExpertTilesThroughAPromptInChunks() {
        compare(Architecture.MIXTRAL, Optional.of(WeightFormat.NVFP4), LONG_PROMPT + STEPS + 1, 1, LONG_PROMPT, 32);
    }

    /**
     * A batch of 128: the projections on one expert's tensor-core tiles, attention by kv group in
     * one slice per (token, kv group), 256 blocks (several slices, merged by the block that finishes
     * last, are AttentionGpuTest's).
     */
    @Test
    void attentionInOneSliceForALargeBatch() {
        ModelConfig c = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        int context = PROMPT_LENGTH + STEPS + 1;
        assertEquals(1, GpuDecoder.DecodeAttention.of(c, context, 128, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals(2, GpuDecoder.DecodeAttention.of(c, LONG_PROMPT + STEPS + 1, 1, GpuDecoder.AttentionKernels.BY_GROUP).slices());
        compare(Architecture.QWEN3_MOE, Optional.empty(), context, 128);
    }

    /**
     * A prompt of 70 tokens in chunks of 32 (the last of 6): chunks after the first attend to the
     * cache the earlier ones wrote, the third's rows span two 64-key tiles, its q tile is mostly
     * empty, and gpt-oss's window of 4 cuts into every tile.
     */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void aLongPromptInChunks(Architecture arch) {
        compare(arch, Optional.empty(), LONG_PROMPT + STEPS + 1, 1, LONG_PROMPT, 32);
    }

    private static final int LONG_PROMPT = 70;

    /**
     * A tuned pool's pairs (TunedPoolTest's tiny Qwen3 pool with its made-up profile) keyed on the
     * batch: the one-token warps for one sequence, the 16-pair tiles for eight, each decoding as the
     * reference does.
     */
    @ParameterizedTest
    @CsvSource({"1, output_centric", "8, expert_centric"})
    void aTunedPoolsPairKeyedOnTheBatch(int batch, String kind, @TempDir Path dir) throws Exception {
        TunedPoolTest.writePool(dir);
        Path model = RandomModelTest.tiny(Architecture.QWEN3_MOE);
        TunedPool pool = TunedPool.read(dir, ModelConfig.read(model));
        compare(model, Optional.empty(), PROMPT_LENGTH + STEPS + 1, batch, PROMPT_LENGTH, GpuDecoder.PROMPT_CHUNK,
                GpuDecoder.KernelChoice.BY_BATCH.withTunedPool(pool), gpu -> {
                    for (var k : gpu.stepExpertKernels()) {
                        assertTrue(k.name().startsWith("tuned_") && k.name().contains(kind), batch + " sequences run " + k.name());
                    }
                });
    }

    /**
     * The pool installed for the experts on this GPU (the same pool and made-up profile) serves the decode steps by
     * default: its 16-pair tiles at eight sequences, decoding as the reference does; beside it a store holding the
     * pool for another GPU only leaves the catalogue's pair, saying there is none for this one.
     */
    @Test
    void aPoolInstalledForThisGpu(@TempDir Path dir) throws Exception {
        Path tuned = Files.createDirectory(dir.resolve("tuned"));
        TunedPoolTest.writePool(tuned, runtime.context().deviceName());
        PoolStore store = new PoolStore(dir.resolve("store"));
        Path installed = store.install(tuned).pool().dir();
        Path model = RandomModelTest.tiny(Architecture.QWEN3_MOE);
        compare(model, Optional.empty(), PROMPT_LENGTH + STEPS + 1, 8, PROMPT_LENGTH, GpuDecoder.PROMPT_CHUNK,
                GpuDecoder.KernelChoice.BY_BATCH.withInstalledPools(store), gpu -> {
                    assertEquals("the decode steps' experts from " + installed + ", keyed on 8 tokens", gpu.tunedPoolNote().orElseThrow());
                    assertEquals(2, gpu.stepExpertKernels().size());
                    for (var k : gpu.stepExpertKernels()) {
                        assertTrue(k.name().startsWith("tuned_") && k.name().contains("expert_centric"), "8 sequences run " + k.name());
                    }
                });
        Path elsewhere = Files.createDirectory(dir.resolve("elsewhere"));
        TunedPoolTest.writePool(elsewhere, "another GPU");
        PoolStore other = new PoolStore(dir.resolve("other"));
        other.install(elsewhere);
        compare(model, Optional.empty(), PROMPT_LENGTH + STEPS + 1, 8, PROMPT_LENGTH, GpuDecoder.PROMPT_CHUNK,
                GpuDecoder.KernelChoice.BY_BATCH.withInstalledPools(other), gpu -> {
                    assertTrue(gpu.tunedPoolNote().orElseThrow().startsWith("no tuned pool is installed in " + other.directory()),
                            gpu.tunedPoolNote().orElseThrow());
                    assertEquals(2, gpu.stepExpertKernels().size());
                    for (var k : gpu.stepExpertKernels()) {
                        assertFalse(k.name().startsWith("tuned_"), "the catalogue's pair: " + k.name());
                    }
                });
    }

    /** A batch of 4: BF16 experts on the 16-pair expert-centric tiles (from {@link GpuDecoder#BF16_EXPERT_CENTRIC_FROM} sequences). */
    @Test
    void aBatchOfFourOnTheExpertTiles() {
        compare(RandomModelTest.tiny(Architecture.QWEN3_MOE), Optional.empty(), PROMPT_LENGTH + STEPS + 1, 4, PROMPT_LENGTH,
                GpuDecoder.PROMPT_CHUNK, gpu -> assertEquals(16, ((ExpertCentric) gpu.stepExpertKernels().getFirst().schedule()).blockM(),
                        "the step's gate_up"));
    }

    /**
     * A batch of 16: the decode steps' q/k/v, o and LM head projections on the tensor cores
     * ({@code linear_mma}; gpt-oss's with their biases) and, where the model's kv groups fit the
     * tiles, attention by kv group, every sequence decoding the same tokens.
     */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void aBatchOnTheTensorCores(Architecture arch) {
        compare(arch, Optional.empty(), PROMPT_LENGTH + STEPS + 1, GpuDecoder.GROUP_ATTENTION_FROM_BATCH);
    }

    private static void compare(Architecture arch, Optional<WeightFormat> format) {
        compare(arch, format, PROMPT_LENGTH + STEPS + 1, 1);
    }

    private static void compare(Architecture arch, Optional<WeightFormat> format, int context, int batch) {
        compare(arch, format, context, batch, PROMPT_LENGTH, GpuDecoder.PROMPT_CHUNK);
    }

    /**
     * Sequence 0 of a batch of {@code batch} (all decoding the same tokens) against the reference,
     * teacher-forced: a random prompt of {@code promptLength} tokens in chunks of {@code chunk} on
     * the tensor cores, then single tokens through the decode layers.
     */
    private static void compare(Architecture arch, Optional<WeightFormat> format, int context, int batch, int promptLength, int chunk) {
        compare(RandomModelTest.tiny(arch), format, context, batch, promptLength, chunk, gpu -> { });
    }

    /** As above on the model at {@code model}, after {@code check} has looked at the decoder's kernels. */
    private static void compare(Path model, Optional<WeightFormat> format, int context, int batch, int promptLength, int chunk,
                                java.util.function.Consumer<GpuDecoder> check) {
        compare(model, format, context, batch, promptLength, chunk, GpuDecoder.KernelChoice.BY_BATCH, check);
    }

    /** As above with the decoder's kernels chosen by {@code choice}. */
    private static void compare(Path model, Optional<WeightFormat> format, int context, int batch, int promptLength, int chunk,
                                GpuDecoder.KernelChoice choice, java.util.function.Consumer<GpuDecoder> check) {
        ModelConfig c = ModelConfig.read(model);
        Architecture arch = c.arch();
        try (Checkpoint ckpt = Checkpoint.open(model);
             GpuDecoder gpu = new GpuDecoder(c, new GpuDecoder.Weights.FromCheckpoint(ckpt, format), runtime, stream, batch, context,
                     STEPS + 1, l -> { }, choice)) {
            assertTrue(gpu.promptsInChunks(), arch + ": the prompt runs in chunks");
            check.accept(gpu);
            gpu.promptChunk(chunk);
            ModelWeights weights = ModelWeights.load(c, ckpt, format, l -> { });
            ExpertActivations quantised = new ExpertActivations(gpu.expertsQuantiseActivations(true),
                    gpu.expertsQuantiseActivations(false));
            int[] prompt = promptWithoutRouterTies(c, weights, context, promptLength, quantised);
            ReferenceDecoder ref = new ReferenceDecoder(c, weights, context);
            ref.quantiseExpertActivations(quantised.prompt());
            float[] want = ref.forward(prompt);
            ref.quantiseExpertActivations(quantised.step());
            float[] got = gpu.forward(prompt);
            double bound = quantised.prompt() || quantised.step() ? W8A8_LOGITS_L2 : LOGITS_L2;
            double worst = 0;
            for (int s = 0; s < STEPS; s++) {
                ErrorStats e = ErrorStats.of(widen(want), got);
                worst = Math.max(worst, e.relativeL2());
                assertTrue(e.relativeL2() < bound, arch + " " + format.map(WeightFormat::text).orElse("") + " step " + s
                        + ": logits " + e);
                int token = Sampler.argmax(want);
                want = ref.forward(new int[] {token});
                got = gpu.forward(new int[] {token});
            }
            System.out.printf(Locale.ROOT, "%s%s, batch %d: prompt of %d tokens in chunks of %d, %d steps teacher-forced, worst "
                    + "logits relative L2 %.2e%n", arch.modelType(), format.map(f -> " (experts " + f.text() + ")").orElse(""), batch,
                    prompt.length, chunk, STEPS, worst);
        }
    }

    /** Whether the GPU's expert kernels quantise their activations (W8A8) in the prompt and in the decode steps. */
    private record ExpertActivations(boolean prompt, boolean step) {}

    /**
     * A random prompt whose tokens and greedy continuation never bring the reference's router to a
     * near-tie (where bf16 activations may route a token elsewhere and the two runs part for good):
     * drawn token by token (a long prompt drawn whole almost always holds a tie somewhere), each
     * kept where the prompt so far stays clear.
     */
    private static int[] promptWithoutRouterTies(ModelConfig c, ModelWeights weights, int context, int length,
                                                 ExpertActivations quantised) {
        java.util.SplittableRandom random = new java.util.SplittableRandom(2026);
        for (int attempt = 0; attempt < 50; attempt++) {
            int[] prompt = new int[0];
            for (int tries = 0; prompt.length < length && tries < 100 * length; tries++) {
                int[] longer = java.util.Arrays.copyOf(prompt, prompt.length + 1);
                longer[prompt.length] = random.nextInt(151643);
                ReferenceDecoder ref = new ReferenceDecoder(c, weights, context);
                ref.quantiseExpertActivations(quantised.prompt());
                ref.forward(longer);
                if (ref.lastRouterMargin() >= ROUTER_NEAR_TIE) {
                    prompt = longer;
                }
            }
            ReferenceDecoder ref = new ReferenceDecoder(c, weights, context);
            ref.quantiseExpertActivations(quantised.prompt());
            float[] logits = ref.forward(prompt);
            ref.quantiseExpertActivations(quantised.step());
            boolean clear = prompt.length == length;
            for (int s = 0; clear && s < STEPS; s++) {
                logits = ref.forward(new int[] {Sampler.argmax(logits)});
                clear = ref.lastRouterMargin() >= ROUTER_NEAR_TIE;
            }
            if (clear) {
                return prompt;
            }
        }
        throw new IllegalStateException("no prompt of 50 keeps the router clear of near-ties");
    }

    /**
     * Greedy decoding inside the step graph (the pick on the device, positions advancing there) is
     * greedy decoding through {@link GpuDecoder#forward} with the host's argmax, for a batch of two,
     * and so is sampling cut to the top-1 token; top-k/top-p draws repeat with their seed.
     */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void theStepGraphDecodesAsForwardDoes(Architecture arch) {
        Path model = RandomModelTest.tiny(arch);
        ModelConfig c = ModelConfig.read(model);
        int context = PROMPT.length + STEPS + 1;
        try (Checkpoint ckpt = Checkpoint.open(model);
             GpuDecoder batch = new GpuDecoder(c, ckpt, runtime, stream, 2, context, STEPS, l -> { });
             GpuDecoder single = new GpuDecoder(c, ckpt, runtime, stream, 1, context, STEPS, l -> { })) {
            batch.sampling(0, 0);
            int[][] picks = batch.generate(PROMPT, STEPS, p -> true).ids();
            assertArrayEquals(picks[0], picks[1], arch + ": two sequences of one prompt");
            int[] expected = new int[STEPS];
            float[] logits = single.forward(PROMPT);
            for (int s = 0; s < STEPS; s++) {
                expected[s] = Sampler.argmax(logits);
                if (s < STEPS - 1) {
                    logits = single.forward(new int[] {expected[s]});
                }
            }
            assertArrayEquals(expected, picks[0], arch + ": the step graph's greedy tokens");

            // top-k of one at any temperature is greedy, for every sequence of the batch
            batch.reset();
            batch.sampling(new Sampler.Options(2.5, 1, 1, 11));
            int[][] topOne = batch.generate(PROMPT, STEPS, p -> true).ids();
            assertArrayEquals(expected, topOne[0], arch + ": top-k 1 in the step graph");
            assertArrayEquals(expected, topOne[1], arch + ": top-k 1, second sequence");
            // a nucleus: the same seed draws the same tokens
            batch.reset();
            batch.sampling(new Sampler.Options(1.5, 20, 0.9, 5));
            int[][] nucleus = batch.generate(PROMPT, STEPS, p -> true).ids();
            batch.reset();
            assertArrayEquals(nucleus[1], batch.generate(PROMPT, STEPS, p -> true).ids()[1], arch + ": top-k/top-p, the same seed");

            int[][] first = sample(c, ckpt, context, 7);
            int[][] second = sample(c, ckpt, context, 7);
            int[][] other = sample(c, ckpt, context, 8);
            assertArrayEquals(first[0], second[0], arch + ": the same seed");
            assertTrue(!java.util.Arrays.equals(first[0], other[0]), arch + ": another seed, the same " + STEPS + " tokens");
        }
    }

    private static int[][] sample(ModelConfig c, Checkpoint ckpt, int context, long seed) {
        try (GpuDecoder d = new GpuDecoder(c, ckpt, runtime, stream, 1, context, STEPS, l -> { })) {
            d.sampling(1.0, seed);
            return d.generate(PROMPT, STEPS, p -> true).ids();
        }
    }

    private static double[] widen(float[] v) {
        double[] out = new double[v.length];
        for (int i = 0; i < v.length; i++) {
            out[i] = v[i];
        }
        return out;
    }
}
