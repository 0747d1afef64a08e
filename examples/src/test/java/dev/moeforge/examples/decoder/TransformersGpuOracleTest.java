package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.runtime.cuda.GpuTestSession;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.nio.FloatBuffer;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Optional;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The GPU decoder against transformers 5.x on the GPU host: each architecture's tiny random model
 * (every tensor drawn, norms and biases included), 64 greedy steps of transformers in FP32 (eager
 * attention and experts), and the decoder (bf16 weights, activations and cache) fed the same tokens:
 * every step's logits within cosine 0.9999 of transformers', and the same greedy token at every step
 * where transformers' top-2 margin exceeds the bf16 error scale. A step whose token brings a router to a
 * near-tie (the FP64 reference, which follows transformers to 4e-7, fed the same tokens, says which) is
 * counted apart, not compared: there bf16 may pick another expert, and that step's logits part by a few
 * percent, which is rounding, not a fault.
 */
@RequiresGpu
class TransformersGpuOracleTest extends GpuTestSession {
    private static final int STEPS = 64;
    private static final double MIN_COSINE = 0.9999;
    /**
     * The bf16 error scale, as a fraction of the step's largest logit: about three times the worst element the
     * decoder's logits differ by (printed per model); a step whose top-2 margin is wider must pick the same token.
     */
    private static final double BF16_SCALE = 2e-2;

    @ParameterizedTest
    @EnumSource(Architecture.class)
    void theGpuDecoderFollowsTransformersStepByStep(Architecture arch, @TempDir Path dir) throws Exception {
        Path model = dir.resolve("model");
        RandomModel.write(ModelPreset.of(arch, "tiny"), 23, SafetensorsDType.BF16, 5_000_000_000L, model);
        TransformersOracle oracle = TransformersOracle.run(model, TransformersOracle.PROMPT, STEPS, dir, null);
        int[] promptIds = oracle.promptIds();
        int[] theirIds = oracle.ids();
        FloatBuffer theirs = oracle.logits();

        ModelConfig c = ModelConfig.read(model);
        int qualifying = 0;
        int nearTies = 0;
        double worstCosine = 1;
        double worstElement = 0;
        try (Checkpoint ckpt = Checkpoint.open(model);
             GpuDecoder gpu = new GpuDecoder(c, new GpuDecoder.Weights.FromCheckpoint(ckpt, Optional.empty()), runtime, stream, 1,
                     promptIds.length + STEPS + 1, STEPS + 1, l -> { })) {
            ReferenceDecoder ref = new ReferenceDecoder(c, ModelWeights.load(c, ckpt, l -> { }), promptIds.length + STEPS + 1);
            ref.forward(promptIds);
            float[] ours = gpu.forward(promptIds);
            int vocab = ours.length;
            assertEquals((long) STEPS * vocab, theirs.remaining(), "logits from the oracle");
            for (int s = 0; s < STEPS; s++) {
                float[] want = new float[vocab];
                theirs.get(s * vocab, want);
                double dot = 0, wantNorm = 0, ourNorm = 0, peak = 0, element = 0;
                float top = Float.NEGATIVE_INFINITY, second = Float.NEGATIVE_INFINITY;
                for (int v = 0; v < vocab; v++) {
                    dot += (double) want[v] * ours[v];
                    wantNorm += (double) want[v] * want[v];
                    ourNorm += (double) ours[v] * ours[v];
                    peak = Math.max(peak, Math.abs(want[v]));
                    element = Math.max(element, Math.abs(want[v] - ours[v]));
                    if (want[v] > top) {
                        second = top;
                        top = want[v];
                    } else if (want[v] > second) {
                        second = want[v];
                    }
                }
                double cosine = dot / Math.sqrt(wantNorm * ourNorm);
                boolean nearTie = ref.lastRouterMargin() < GpuDecoderGpuTest.ROUTER_NEAR_TIE;
                if (nearTie) {
                    nearTies++;
                    System.out.printf(Locale.ROOT, "%s step %d: a router near-tie (margin %.1e), cosine %.7f, not compared%n",
                            arch.modelType(), s, ref.lastRouterMargin(), cosine);
                } else {
                    worstCosine = Math.min(worstCosine, cosine);
                    worstElement = Math.max(worstElement, element / peak);
                    assertTrue(cosine >= MIN_COSINE, arch + " step " + s + ": logits cosine " + cosine);
                }
                if (!nearTie && top - second > BF16_SCALE * peak) {
                    qualifying++;
                    assertEquals(theirIds[s], Sampler.argmax(ours), arch + " step " + s + ": top-2 margin " + (top - second) / peak
                            + " of the peak, logits differ by up to " + element / peak);
                }
                ours = gpu.forward(new int[] {theirIds[s]});  // teacher-forced: transformers' token
                ref.forward(new int[] {theirIds[s]});
            }
        }
        System.out.printf(Locale.ROOT, "%s: %d steps against %s (%d at a router near-tie, apart), worst cosine %.7f, "
                + "worst element %.2e of the peak logit; %d with a top-2 margin over %.0e of the peak, each the same token%n",
                arch.modelType(), STEPS, oracle.where(), nearTies, worstCosine,
                worstElement, qualifying, BF16_SCALE);
        assertTrue(nearTies <= STEPS / 4, arch + ": " + nearTies + " of " + STEPS + " steps at a router near-tie");
        assertTrue(qualifying > 0, arch + ": no step's margin exceeds the bf16 scale, so no token was compared");
    }
}
