package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.GptOssCheckpoint.bf16Bytes;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * A synthetic BF16 MoE checkpoint of {@value #LAYERS} layers of {@value #E} experts: per layer gate_up
 * {@code [E][2I][H]} (gate rows then up rows) and down {@code [E][H][I]}, plus a router, norms,
 * embeddings and the side files of a Hugging Face folder, written under per-expert or transformers'
 * fused names. What was written is kept, so a test can compare what a reader or the quantiser makes of it.
 */
public final class SyntheticMoeCheckpoint {

    public static final int LAYERS = 2;
    public static final int E = 4;

    public final int h;
    public final int i;
    public final float[][] gateUp = new float[LAYERS][];
    public final float[][] down = new float[LAYERS][];
    /** The tensors that are not routed experts, by name. */
    public final Map<String, byte[]> others = new LinkedHashMap<>();

    public SyntheticMoeCheckpoint(int h, int i) {
        this.h = h;
        this.i = i;
        for (int l = 0; l < LAYERS; l++) {
            gateUp[l] = weights(100 + l, E * 2 * i * h);
            down[l] = weights(200 + l, E * h * i);
            others.put("model.layers." + l + ".mlp.gate.weight", bf16Bytes(weights(300 + l, E * h)));
            others.put("model.layers." + l + ".input_layernorm.weight", bf16Bytes(weights(400 + l, h)));
        }
        others.put("model.embed_tokens.weight", bf16Bytes(weights(1, 16 * h)));
        others.put("lm_head.weight", bf16Bytes(weights(2, 16 * h)));
    }

    /** N(0, 0.05^2) values rounded to bf16, so that a BF16 tensor holds them exactly. */
    public static float[] weights(long seed, int n) {
        return GptOssCheckpoint.normalBf16(seed, n, 0.05);
    }

    /** {@code [e][n][k]} to {@code [e][k][n]}. */
    public static float[] transpose(float[] a, int e, int n, int k) {
        float[] t = new float[a.length];
        for (int x = 0; x < e; x++) {
            for (int r = 0; r < n; r++) {
                for (int c = 0; c < k; c++) {
                    t[(x * k + c) * n + r] = a[(x * n + r) * k + c];
                }
            }
        }
        return t;
    }

    private static float[] slice(float[] a, long from, int n) {
        return Arrays.copyOfRange(a, (int) from, (int) from + n);
    }

    /** One tensor as it goes into the file. */
    public record Tensor(SafetensorsDType dtype, List<Long> shape, byte[] data) {}

    /** Writes per-expert names ({@code names} = gate, up, down, under {@code block}) into {@code dir}, in two or more shards. */
    public void writePerExpert(Path dir, String block, String... names) throws IOException {
        writePerExpert(dir, tensors -> {}, block, names);
    }

    /**
     * As {@link #writePerExpert(Path, String, String...)}, after {@code edit} has changed the tensors
     * (by name, in the order written): a test drops, renames or reshapes some to make a bad checkpoint.
     */
    public void writePerExpert(Path dir, Consumer<Map<String, Tensor>> edit, String block, String... names) throws IOException {
        Map<String, Tensor> tensors = new LinkedHashMap<>();
        others.forEach((n, b) -> tensors.put(n, new Tensor(SafetensorsDType.BF16, shapeOf(n), b)));
        for (int l = 0; l < LAYERS; l++) {
            for (int e = 0; e < E; e++) {
                String base = "model.layers." + l + "." + block + ".experts." + e + ".";
                tensors.put(base + names[0] + ".weight", new Tensor(SafetensorsDType.BF16, List.of((long) i, (long) h),
                        bf16Bytes(slice(gateUp[l], (long) e * 2 * i * h, i * h))));
                tensors.put(base + names[1] + ".weight", new Tensor(SafetensorsDType.BF16, List.of((long) i, (long) h),
                        bf16Bytes(slice(gateUp[l], ((long) e * 2 * i + i) * h, i * h))));
                tensors.put(base + names[2] + ".weight", new Tensor(SafetensorsDType.BF16, List.of((long) h, (long) i),
                        bf16Bytes(slice(down[l], (long) e * h * i, h * i))));
            }
        }
        edit.accept(tensors);
        CheckpointWriter w = new CheckpointWriter(totalBytes() / 2 + 1).metadata(Map.of("format", "pt"));
        tensors.forEach((n, t) -> w.add(n, t.dtype(), t.shape(), t.data()));
        assertTrue(w.write(dir).size() >= 3, "at least two shards and the index");
        writeSideFiles(dir);
    }

    /** transformers' in-memory fused names: gate_up_proj [E, 2I, H], down_proj [E, H, I]. */
    public void writeFused(Path dir) throws IOException {
        CheckpointWriter w = new CheckpointWriter(totalBytes() / 2 + 1).metadata(Map.of("format", "pt"));
        others.forEach((n, b) -> w.add(n, SafetensorsDType.BF16, shapeOf(n), b));
        for (int l = 0; l < LAYERS; l++) {
            String p = "model.layers." + l + ".mlp.experts.";
            w.add(p + "gate_up_proj", SafetensorsDType.BF16, List.of((long) E, 2L * i, (long) h), bf16Bytes(gateUp[l]));
            w.add(p + "down_proj", SafetensorsDType.BF16, List.of((long) E, (long) h, (long) i), bf16Bytes(down[l]));
        }
        w.write(dir);
        writeSideFiles(dir);
    }

    private long totalBytes() {
        return 2L * LAYERS * E * 3 * i * h + others.values().stream().mapToLong(b -> b.length).sum();
    }

    private List<Long> shapeOf(String name) {
        if (name.endsWith("mlp.gate.weight")) {
            return List.of((long) E, (long) h);
        }
        if (name.endsWith("layernorm.weight")) {
            return List.of((long) h);
        }
        return List.of(16L, (long) h);
    }

    public EncodedWeights expectedGateUp(WeightFormat f, int l) {
        return EncodedWeights.encode(f, RowSource.of(gateUp[l], 2 * i, h), E, 2 * i, h, Projections.STACKED_GATE_UP, "gate_up");
    }

    public EncodedWeights expectedDown(WeightFormat f, int l) {
        return EncodedWeights.encode(f, RowSource.of(down[l], h, i), E, h, i, Projections.ONE, "down");
    }

    /** config.json (with decimals that must survive as written), tokenizer.json and generation_config.json. */
    public static void writeSideFiles(Path dir) throws IOException {
        Files.writeString(dir.resolve("config.json"), """
                {
                  "architectures": ["Qwen3MoeForCausalLM"],
                  "model_type": "qwen3_moe",
                  "hidden_size": 256,
                  "rms_norm_eps": 1e-06,
                  "num_experts": 4,
                  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}
                }
                """);
        Files.writeString(dir.resolve("tokenizer.json"), "{\"version\": \"1.0\"}\n");
        Files.writeString(dir.resolve("generation_config.json"), "{\"do_sample\": false}\n");
    }
}
