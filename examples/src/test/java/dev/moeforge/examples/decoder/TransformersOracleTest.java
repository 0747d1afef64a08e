package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.nio.FloatBuffer;
import java.nio.file.Path;
import java.util.Locale;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The CPU decoder against transformers 5.x on the GPU host (python3 with torch and transformers):
 * each architecture's tiny random model, written by {@link RandomModel}, decoded greedily by both;
 * the prompt's ids (the tokenizers library against transformers' tokenizer), every generated token
 * and every step's logits must agree. transformers then saves the model in its own spelling
 * ({@code save_pretrained}: rope_parameters, num_local_experts, F32 tensors), and the decoder must
 * read that directory to the same logits.
 */
@RequiresGpu
class TransformersOracleTest {
    private static final int TOKENS = 24;
    /** FP32 against FP64 on unit-sized logits: differences of 1e-6 are rounding; a wrong rule moves them by 1e-1. */
    private static final double LOGIT_TOLERANCE = 2e-4;

    @ParameterizedTest
    @EnumSource(Architecture.class)
    void greedyDecodingMatchesTransformers(Architecture arch, @TempDir Path dir) throws Exception {
        Path model = dir.resolve("model");
        RandomModel.write(ModelPreset.of(arch, "tiny"), 11, SafetensorsDType.BF16, 5_000_000_000L, model);
        Path resaved = dir.resolve("resaved");
        TransformersOracle oracle = TransformersOracle.run(model, TransformersOracle.PROMPT, TOKENS, dir, resaved);

        int[] promptIds;
        try (TextTokenizer tokenizer = TextTokenizer.open(model.resolve("tokenizer.json"))) {
            promptIds = tokenizer.encode(TransformersOracle.PROMPT);
        }
        assertArrayEquals(oracle.promptIds(), promptIds, "prompt ids: tokenizers (DJL) against transformers");
        int[] expected = oracle.ids();
        FloatBuffer theirs = oracle.logits();

        float[][] ours = decode(model, promptIds);
        int vocab = ours[0].length;
        assertEquals((long) TOKENS * vocab, theirs.remaining(), "logits from the oracle");
        double worst = 0;
        for (int s = 0; s < TOKENS; s++) {
            double scale = 0;
            double diff = 0;
            for (int v = 0; v < vocab; v++) {
                float t = theirs.get(s * vocab + v);
                scale = Math.max(scale, Math.abs(t));
                diff = Math.max(diff, Math.abs(t - ours[s][v]));
            }
            worst = Math.max(worst, diff / scale);
            assertEquals(expected[s], Sampler.argmax(ours[s]), arch + ": token " + s + " (relative logit difference "
                    + diff / scale + ")");
        }
        System.out.printf(Locale.ROOT, "%s: %d tokens equal to %s; worst logit difference %.2e of the largest logit%n",
                arch.modelType(), TOKENS, oracle.where(), worst);
        assertTrue(worst < LOGIT_TOLERANCE, arch + ": logits differ by " + worst + " of their scale");

        float[][] again = decode(resaved, promptIds);
        for (int s = 0; s < TOKENS; s++) {
            for (int v = 0; v < vocab; v++) {
                assertEquals(ours[s][v], again[s][v], 1e-9 + 1e-6 * Math.abs(ours[s][v]),
                        arch + ": the model as transformers saved it, step " + s + " logit " + v);
            }
        }
    }

    /** Greedy decoding of TOKENS tokens on the CPU path; each step's logits. */
    private static float[][] decode(Path model, int[] promptIds) {
        ModelConfig c = ModelConfig.read(model);
        try (Checkpoint ckpt = Checkpoint.open(model)) {
            ReferenceDecoder d = new ReferenceDecoder(c, ModelWeights.load(c, ckpt, l -> { }), promptIds.length + TOKENS);
            float[][] logits = new float[TOKENS][];
            logits[0] = d.forward(promptIds);
            for (int s = 1; s < TOKENS; s++) {
                logits[s] = d.forward(new int[] {Sampler.argmax(logits[s - 1])});
            }
            return logits;
        }
    }
}
