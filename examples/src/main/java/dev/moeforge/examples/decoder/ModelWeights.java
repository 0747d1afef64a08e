package dev.moeforge.examples.decoder;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointExperts;
import dev.moeforge.checkpoint.TensorInfo;
import dev.moeforge.dsl.reference.WeightRows;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.IntConsumer;

/**
 * A model's weights as the CPU path holds them: dense tensors as FP32 row-major {@code [out][in]}
 * arrays, each MoE layer's experts in their stored format behind the reference's {@link WeightRows}.
 * Every tensor's shape is checked against the config before it is read.
 */
public record ModelWeights(float[] embed, float[] finalNorm, float[] lmHead, List<Layer> layers) {

    /** One decoder layer. */
    public record Layer(float[] inputNorm, float[] postNorm, Attention attention, FeedForward feedForward) {}

    /**
     * Attention's projections ({@code [out][in]}), biases (zeros where the model has none), and
     * where the architecture has them the q/k norms and the per-head sinks (else null).
     */
    public record Attention(float[] q, float[] qBias, float[] k, float[] kBias, float[] v, float[] vBias, float[] o,
                            float[] oBias, float[] qNorm, float[] kNorm, float[] sinks) {}

    /** A layer's MLP: routed experts or a dense one. */
    public sealed interface FeedForward permits Moe, DenseMlp {}

    /** Routed experts: the router ({@code [E][H]}, bias zeros where there is none), the block's rules, the experts. */
    public record Moe(float[] router, float[] routerBias, MoeBlock block, WeightRows gateUp, WeightRows down)
            implements FeedForward {}

    /** A dense SiLU-gated MLP: gate and up {@code [I][H]}, down {@code [H][I]}. */
    public record DenseMlp(float[] gate, float[] up, float[] down) implements FeedForward {}

    /** The prefix of layer {@code l}'s tensors. */
    public static String layerPrefix(int l) {
        return "model.layers." + l + ".";
    }

    /**
     * Reads every weight the config needs from the checkpoint.
     *
     * @param progress told the index of each layer once it is read
     * @throws dev.moeforge.checkpoint.CheckpointException naming the tensor and its file when one is missing
     * @throws IllegalArgumentException when a tensor's shape is not the config's
     */
    public static ModelWeights load(ModelConfig c, Checkpoint ckpt, IntConsumer progress) {
        return load(c, ckpt, java.util.Optional.empty(), progress);
    }

    /** As {@link #load(ModelConfig, Checkpoint, IntConsumer)}, the experts re-encoded in {@code expertsFormat} where one is given. */
    public static ModelWeights load(ModelConfig c, Checkpoint ckpt, java.util.Optional<dev.moeforge.dsl.ir.WeightFormat> expertsFormat,
                                    IntConsumer progress) {
        Reader r = new Reader(ckpt);
        float[] embed = r.floats("model.embed_tokens.weight", c.vocab(), c.hidden());
        float[] norm = r.floats("model.norm.weight", c.hidden());
        float[] head = c.tieEmbeddings() ? embed : r.floats("lm_head.weight", c.vocab(), c.hidden());
        List<Layer> layers = new ArrayList<>();
        for (int l = 0; l < c.layers(); l++) {
            String p = layerPrefix(l);
            layers.add(new Layer(r.floats(p + "input_layernorm.weight", c.hidden()),
                    r.floats(p + "post_attention_layernorm.weight", c.hidden()), attention(c, r, p + "self_attn."),
                    c.moeLayers().get(l) ? moe(c, r, ckpt, p, expertsFormat) : dense(c, r, p + "mlp.")));
            progress.accept(l);
        }
        return new ModelWeights(embed, norm, head, List.copyOf(layers));
    }

    private static Attention attention(ModelConfig c, Reader r, String p) {
        int q = c.heads() * c.headDim();
        int kv = c.kvHeads() * c.headDim();
        boolean bias = c.attentionBias();
        float[] qNorm = null;
        float[] kNorm = null;
        switch (c.arch()) {
            case QWEN3_MOE -> {
                qNorm = r.floats(p + "q_norm.weight", c.headDim());
                kNorm = r.floats(p + "k_norm.weight", c.headDim());
            }
            case OLMOE -> {
                qNorm = r.floats(p + "q_norm.weight", q);
                kNorm = r.floats(p + "k_norm.weight", kv);
            }
            case MIXTRAL, GPT_OSS -> { }
        }
        return new Attention(r.floats(p + "q_proj.weight", q, c.hidden()), r.bias(bias, p + "q_proj.bias", q),
                r.floats(p + "k_proj.weight", kv, c.hidden()), r.bias(bias, p + "k_proj.bias", kv),
                r.floats(p + "v_proj.weight", kv, c.hidden()), r.bias(bias, p + "v_proj.bias", kv),
                r.floats(p + "o_proj.weight", c.hidden(), q), r.bias(bias, p + "o_proj.bias", c.hidden()),
                qNorm, kNorm, c.arch() == Architecture.GPT_OSS ? r.floats(p + "sinks", c.heads()) : null);
    }

    /**
     * The prefix of layer {@code layer}'s MoE block ({@code model.layers.L.mlp}): Mixtral's hub
     * checkpoints keep {@code block_sparse_moe}, transformers 5.x's fused layout says {@code mlp}.
     */
    public static String moePrefix(ModelConfig c, Checkpoint ckpt, String layer) {
        return layer + (c.arch() == Architecture.MIXTRAL && ckpt.find(layer + "block_sparse_moe.gate.weight").isPresent()
                ? "block_sparse_moe" : "mlp");
    }

    /** The router's prefix under a MoE block: gpt-oss's {@code router} (weight and bias), the others' {@code gate}. */
    public static String routerPrefix(ModelConfig c, String moePrefix) {
        return moePrefix + (c.arch() == Architecture.GPT_OSS ? ".router" : ".gate");
    }

    private static Moe moe(ModelConfig c, Reader r, Checkpoint ckpt, String layer,
                           java.util.Optional<dev.moeforge.dsl.ir.WeightFormat> expertsFormat) {
        String p = moePrefix(c, ckpt, layer);
        boolean gptOss = c.arch() == Architecture.GPT_OSS;
        String router = routerPrefix(c, p);
        float[] routerWeight = r.floats(router + ".weight", c.experts(), c.hidden());
        float[] routerBias = r.bias(gptOss, router + ".bias", c.experts());
        CheckpointExperts.LayerWeights experts = ExpertFormats.reencode(CheckpointExperts.load(ckpt, p, c.experts()), expertsFormat, p);
        if (experts.hidden() != c.hidden() || experts.intermediate() != c.expertIntermediate()) {
            throw new IllegalArgumentException(p + ": experts of hidden " + experts.hidden() + " and intermediate "
                    + experts.intermediate() + ", config.json says " + c.hidden() + " and " + c.expertIntermediate());
        }
        boolean bias = experts.gateUpBias().isPresent();
        WeightRows gateUp = WeightRows.of(experts.gateUp());
        WeightRows down = WeightRows.of(experts.down());
        if (bias) {
            gateUp = gateUp.withBias(experts.gateUpBias().orElseThrow());
            down = down.withBias(experts.downBias().orElseThrow(() -> new IllegalArgumentException(
                    p + ": the experts have a gate_up bias but no down bias")));
        }
        return new Moe(routerWeight, routerBias, MoeBlock.of(c, experts.gateUp().format(), experts.layout(), bias), gateUp,
                down);
    }

    private static DenseMlp dense(ModelConfig c, Reader r, String p) {
        int in = c.denseIntermediate();
        return new DenseMlp(r.floats(p + "gate_proj.weight", in, c.hidden()), r.floats(p + "up_proj.weight", in, c.hidden()),
                r.floats(p + "down_proj.weight", c.hidden(), in));
    }

    /** Reads float tensors of an expected shape. */
    private record Reader(Checkpoint ckpt) {
        float[] floats(String name, long... shape) {
            TensorInfo t = ckpt.tensor(name);
            List<Long> want = Arrays.stream(shape).boxed().toList();
            if (!t.shape().equals(want)) {
                throw new IllegalArgumentException(ckpt.fileOf(name).path() + ": tensor '" + name + "' has shape "
                        + t.shape() + ", config.json implies " + want);
            }
            return ckpt.floats(name);
        }

        float[] bias(boolean present, String name, int n) {
            return present ? floats(name, n) : new float[n];
        }
    }
}
