package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.GptOssCheckpoint.bf16Bytes;
import static dev.moeforge.checkpoint.SyntheticMoeCheckpoint.E;
import static dev.moeforge.checkpoint.SyntheticMoeCheckpoint.LAYERS;
import static dev.moeforge.checkpoint.SyntheticMoeCheckpoint.transpose;
import static dev.moeforge.checkpoint.SyntheticMoeCheckpoint.weights;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link Quantizer} on a tiny synthetic BF16 checkpoint ({@link SyntheticMoeCheckpoint}: two layers of
 * four Qwen-style experts, two shards): for every format the output has the documented tensors, the
 * untouched tensors are byte-identical, config.json gains a quantization_config, and
 * {@link CheckpointExperts#load} gives exactly {@link EncodedWeights#encode} of the original fused
 * weights. Also fused inputs, and the refusals.
 */
class QuantizerTest {

    /** I = 128 so that FP8 128x128 blocks of gate and up do not straddle; H = 256 for group-128 formats. */
    static final int H = 256;
    static final int I = 128;

    @TempDir
    Path tmp;

    static Quantizer.Summary quantize(Path in, WeightFormat format, Path out, long maxShardBytes, Quantizer.Listener listener)
            throws IOException {
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            return Quantizer.quantize(ckpt, format, out, maxShardBytes, listener);
        }
    }

    static Quantizer.Summary quantize(Path in, WeightFormat format, Path out, long maxShardBytes) throws IOException {
        return quantize(in, format, out, maxShardBytes, new Quantizer.Listener() {});
    }

    static Quantizer.Summary quantize(Path in, WeightFormat format, Path out) throws IOException {
        return quantize(in, format, out, CheckpointWriter.DEFAULT_MAX_SHARD_BYTES);
    }

    /** Quantises {@code in}, expecting it to fail with a CheckpointException; returns the message. */
    String quantizeFails(Path in, WeightFormat format) {
        return assertThrows(CheckpointException.class, () -> quantize(in, format, tmp.resolve("out"))).getMessage();
    }

    static void assertEncodedEquals(EncodedWeights expected, EncodedWeights actual, String what) {
        assertEquals(expected.format(), actual.format(), what);
        assertEquals(expected.experts(), actual.experts(), what);
        assertEquals(expected.rows(), actual.rows(), what);
        assertEquals(expected.cols(), actual.cols(), what);
        assertEquals(expected.projections(), actual.projections(), what);
        assertArrayEquals(expected.codes(), actual.codes(), what + " codes");
        assertArrayEquals(expected.blockScales(), actual.blockScales(), what + " block scales");
        assertArrayEquals(expected.rowScales(), actual.rowScales(), what + " row scales");
    }

    static List<WeightFormat> formats() {
        return WeightFormat.ALL;
    }

    static void assertMentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), () -> "expected '" + p + "' in: " + message);
        }
    }

    @ParameterizedTest
    @MethodSource("formats")
    void everyFormatRoundTrips(WeightFormat format) throws IOException {
        String formatText = format.text();
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Quantizer.Summary s = quantize(in, format, outDir, 300_000);
        assertEquals(24, s.expertTensors());
        assertEquals(6, s.copiedTensors());
        assertEquals(3, s.copiedFiles());

        try (Checkpoint src = Checkpoint.open(in); Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertTrue(ckpt.files().size() >= 2, "sharded output");
            List<String> expectedNames = new ArrayList<>(m.others.keySet());
            for (int l = 0; l < LAYERS; l++) {
                for (int e = 0; e < E; e++) {
                    for (String proj : List.of("gate_proj", "up_proj", "down_proj")) {
                        String base = "model.layers." + l + ".mlp.experts." + e + "." + proj;
                        boolean down = proj.equals("down_proj");
                        for (ExpertTensors.Entry en : ExpertTensors.perExpert(format, base, down ? H : I, down ? I : H)) {
                            TensorInfo t = ckpt.tensor(en.name());
                            assertEquals(en.dtype(), t.dtype(), en.name());
                            assertEquals(en.shape(), t.shape(), en.name());
                            expectedNames.add(en.name());
                        }
                    }
                }
            }
            assertEquals(expectedNames.stream().sorted().toList(), List.copyOf(ckpt.names()));
            for (String n : m.others.keySet()) {
                assertEquals(src.tensor(n).dtype(), ckpt.tensor(n).dtype(), n);
                assertEquals(src.tensor(n).shape(), ckpt.tensor(n).shape(), n);
                assertArrayEquals(src.bytes(n), ckpt.bytes(n), n);
            }
            for (var f : ckpt.files()) {
                assertEquals(formatText, f.metadata().get(ExpertTensors.FORMAT_METADATA_KEY));
                assertEquals("pt", f.metadata().get("format"));
            }
            for (int l = 0; l < LAYERS; l++) {
                CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers." + l + ".mlp", E);
                assertEquals(GateUpLayout.STACKED, lw.layout());
                assertEncodedEquals(m.expectedGateUp(format, l), lw.gateUp(), formatText + " layer " + l + " gate_up");
                assertEncodedEquals(m.expectedDown(format, l), lw.down(), formatText + " layer " + l + " down");
                if (format.equals(WeightFormat.BF16)) {
                    assertArrayEquals(bf16Bytes(m.gateUp[l]), lw.gateUp().codes());
                }
            }
        }

        JsonNode config = new ObjectMapper().readTree(outDir.resolve("config.json").toFile());
        JsonNode q = config.get("quantization_config");
        assertEquals("moeforge", q.get("quant_method").asText());
        assertEquals(formatText, q.get("format").asText());
        assertEquals("routed experts", q.get("modules").asText());
        assertEquals("qwen3_moe", config.get("model_type").asText());
        assertEquals(1e-6, config.get("rms_norm_eps").asDouble());
        assertEquals(1000000.0, config.get("rope_parameters").get("rope_theta").asDouble());
        assertEquals("Qwen3MoeForCausalLM", config.get("architectures").get(0).asText());
        assertEquals(Files.readString(in.resolve("tokenizer.json")), Files.readString(outDir.resolve("tokenizer.json")));
        assertEquals(Files.readString(in.resolve("generation_config.json")),
                Files.readString(outDir.resolve("generation_config.json")));
    }

    /** Mixtral names (w1 = gate, w3 = up, w2 = down under block_sparse_moe) keep their names. */
    @Test
    void mixtralNames() throws IOException {
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "block_sparse_moe", "w1", "w3", "w2");
        quantize(in, WeightFormat.NVFP4, outDir);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertEquals(SafetensorsDType.F32, ckpt.tensor("model.layers.1.block_sparse_moe.experts.3.w3.weight_scale_2").dtype());
            assertEquals(List.of(), ckpt.tensor("model.layers.1.block_sparse_moe.experts.3.w3.weight_scale_2").shape());
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers.1.block_sparse_moe");
            assertEncodedEquals(m.expectedGateUp(WeightFormat.NVFP4, 1), lw.gateUp(), "gate_up");
            assertEncodedEquals(m.expectedDown(WeightFormat.NVFP4, 1), lw.down(), "down");
        }
    }

    /** transformers' fused gate_up_proj [E, 2I, H] / down_proj [E, H, I] are written under the per-expert names. */
    @Test
    void fusedInputIsSplitPerExpert() throws IOException {
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writeFused(in);
        quantize(in, WeightFormat.FP8_BLOCK128, outDir);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertTrue(ckpt.find("model.layers.0.mlp.experts.gate_up_proj").isEmpty());
            assertEquals(List.of(1L, 2L), ckpt.tensor("model.layers.0.mlp.experts.3.up_proj.weight_scale_inv").shape());
            for (int l = 0; l < LAYERS; l++) {
                CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers." + l + ".mlp");
                assertEncodedEquals(m.expectedGateUp(WeightFormat.FP8_BLOCK128, l), lw.gateUp(), "gate_up");
                assertEncodedEquals(m.expectedDown(WeightFormat.FP8_BLOCK128, l), lw.down(), "down");
            }
        }
    }

    /** gpt-oss's BF16 [E, H, 2I] (x @ W, interleaved) to its own MXFP4 _blocks/_scales; the biases are copied. */
    @Test
    void gptOssFusedToMxfp4() throws IOException {
        int e = 2;
        int h = 64;
        int i = 32;
        float[] gu = weights(1, e * 2 * i * h);  // [E][2I][H], rows interleaved gate/up
        float[] dn = weights(2, e * h * i);      // [E][H][I]
        byte[] bias = bf16Bytes(weights(3, e * 2 * i));
        String p = "model.layers.0.mlp.experts";
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        new CheckpointWriter()
                .add(p + ".gate_up_proj", SafetensorsDType.BF16, List.of((long) e, (long) h, 2L * i), bf16Bytes(transpose(gu, e, 2 * i, h)))
                .add(p + ".gate_up_proj_bias", SafetensorsDType.BF16, List.of((long) e, 2L * i), bias)
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) i, (long) h), bf16Bytes(transpose(dn, e, h, i)))
                .write(in);
        quantize(in, WeightFormat.MXFP4, outDir);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            assertEquals(List.of((long) e, 2L * i, h / 32L, 16L), ckpt.tensor(p + ".gate_up_proj_blocks").shape());
            assertEquals(List.of((long) e, 2L * i, h / 32L), ckpt.tensor(p + ".gate_up_proj_scales").shape());
            assertEquals(List.of((long) e, (long) h, i / 32L, 16L), ckpt.tensor(p + ".down_proj_blocks").shape());
            assertArrayEquals(bias, ckpt.bytes(p + ".gate_up_proj_bias"));
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers.0.mlp");
            assertEquals(GateUpLayout.INTERLEAVED, lw.layout());
            assertEncodedEquals(EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(gu, 2 * i, h), e, 2 * i, h,
                    Projections.INTERLEAVED_GATE_UP, "gu"), lw.gateUp(), "gate_up");
            assertEncodedEquals(EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(dn, h, i), e, h, i, Projections.ONE, "dn"),
                    lw.down(), "down");
            assertTrue(lw.gateUpBias().isPresent());
        }
        // other formats cannot keep the interleaved fused layout: refused
        var refused = assertThrows(IllegalArgumentException.class, () -> quantize(in, WeightFormat.NVFP4, tmp.resolve("o2")));
        assertMentions(refused.getMessage(), "only to mxfp4", p + ".gate_up_proj");
    }

    /** H = 64, I = 32: the formats with blocks of at most 32 work, the others are refused with the reason. */
    @ParameterizedTest
    @MethodSource("formats")
    void smallGeometry(WeightFormat format) throws IOException {
        String formatText = format.text();
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(64, 32);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        if (format.blockScale() == WeightFormat.BlockScale.F32_GROUP_128) {
            var e = assertThrows(CheckpointException.class, () -> quantize(in, format, outDir));
            assertMentions(e.getMessage(), "not whole blocks of 128", "model.layers.0.mlp.experts.0.down_proj.weight");
            return;
        }
        quantize(in, format, outDir);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            if (format.blockScale().blockRows()) {  // FP8 128x128 with I = 32: quantised, but not fusable
                CheckpointException e = assertThrows(CheckpointException.class,
                        () -> CheckpointExperts.load(ckpt, "model.layers.0.mlp", E));
                assertMentions(e.getMessage(), "straddle");
                return;
            }
            for (int l = 0; l < LAYERS; l++) {
                CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers." + l + ".mlp", E);
                assertEncodedEquals(m.expectedGateUp(format, l), lw.gateUp(), formatText + " gate_up");
                assertEncodedEquals(m.expectedDown(format, l), lw.down(), formatText + " down");
            }
        }
    }

    @Test
    void nanWeightNamesFileTensorAndIndex() throws IOException {
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(64, 32);
        // expert 2's up_proj of layer 1 (rows I..2I-1 of gate_up): row 5, column 7
        m.gateUp[1][(2 * 2 * 32 + 32 + 5) * 64 + 7] = Float.NaN;
        Path in = tmp.resolve("in");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        String tensor = "model.layers.1.mlp.experts.2.up_proj.weight";
        String file;
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            file = ckpt.fileOf(tensor).path().getFileName().toString();
        }
        Path outDir = tmp.resolve("out");
        var e = assertThrows(CheckpointException.class, () -> quantize(in, WeightFormat.MXFP8, outDir, 20_000));
        // the index of the 2-D [out, in] tensor as stored: [row, col], no expert dimension
        assertEquals(in.resolve(file) + ": tensor " + tensor + ": NaN at [5, 7]; weights to quantise must be finite",
                e.getMessage());
        // layer 0's shards were written before the NaN was met; none of them is left behind, nor the folder
        assertFalse(Files.exists(outDir));
        assertEquals(Set.of("in"), sizes(tmp).keySet(), "no staging left");
    }

    static Map<String, Long> sizes(Path dir) throws IOException {
        try (var s = Files.list(dir)) {
            return s.collect(Collectors.toMap(p -> p.getFileName().toString(), p -> p.toFile().length()));
        }
    }

    static String fileOf(Path dir, String tensor) {
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            return ckpt.fileOf(tensor).path().toString();
        }
    }

    /** Fused [E, 2I, H]: the up half is quantised from its own slice, but a NaN there is named at its row in the fused tensor. */
    @Test
    void nanInFusedGateUpNamesTheIndexInTheFusedTensor() throws IOException {
        SyntheticMoeCheckpoint m = new SyntheticMoeCheckpoint(64, 32);
        // layer 1, expert 2, up row 5 (fused row I + 5 = 37), column 7
        m.gateUp[1][((2 * 2 * 32) + 32 + 5) * 64 + 7] = Float.NaN;
        Path in = tmp.resolve("in");
        m.writeFused(in);
        String tensor = "model.layers.1.mlp.experts.gate_up_proj";
        assertEquals(fileOf(in, tensor) + ": tensor " + tensor + ": NaN at [2, 37, 7]; weights to quantise must be finite",
                quantizeFails(in, WeightFormat.NVFP4));
        // down [E, H, I] of expert 3: [3, 60, 9]
        m.gateUp[1][((2 * 2 * 32) + 32 + 5) * 64 + 7] = 0f;
        m.down[0][(3 * 64 + 60) * 32 + 9] = Float.NEGATIVE_INFINITY;
        Path in2 = tmp.resolve("in2");
        m.writeFused(in2);
        String down = "model.layers.0.mlp.experts.down_proj";
        assertEquals(fileOf(in2, down) + ": tensor " + down + ": -Inf at [3, 60, 9]; weights to quantise must be finite",
                quantizeFails(in2, WeightFormat.NVFP4));
    }

    /** gpt-oss's [E, H, 2I] is read transposed; a non-finite weight is named at its index in the stored tensor. */
    @Test
    void nonFiniteInGptOssTransposedNamesTheStoredIndex() {
        int e = 2;
        int h = 64;
        int i = 32;
        float[] gu = weights(1, e * 2 * i * h);  // [E][2I][H]
        float[] dn = weights(2, e * h * i);      // [E][H][I]
        gu[(1 * 2 * i + 5) * h + 40] = Float.POSITIVE_INFINITY;  // expert 1, output row 5, input 40: stored [1, 40, 5]
        String p = "model.layers.0.mlp.experts";
        Path in = tmp.resolve("in");
        new CheckpointWriter(1)  // one tensor per shard: the message must name gate_up's
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) i, (long) h), bf16Bytes(transpose(dn, e, h, i)))
                .add(p + ".gate_up_proj", SafetensorsDType.BF16, List.of((long) e, (long) h, 2L * i), bf16Bytes(transpose(gu, e, 2 * i, h)))
                .write(in);
        assertEquals(fileOf(in, p + ".gate_up_proj") + ": tensor " + p + ".gate_up_proj: +Inf at [1, 40, 5]; "
                + "weights to quantise must be finite", quantizeFails(in, WeightFormat.MXFP4));
        // down [E, I, H] stored, read as [E][H][I]: output row 50, input 3 of expert 0 is stored at [0, 3, 50]
        gu[(1 * 2 * i + 5) * h + 40] = 0f;
        dn[50 * i + 3] = Float.NaN;
        Path in2 = tmp.resolve("in2");
        new CheckpointWriter(1)
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) i, (long) h), bf16Bytes(transpose(dn, e, h, i)))
                .add(p + ".gate_up_proj", SafetensorsDType.BF16, List.of((long) e, (long) h, 2L * i), bf16Bytes(transpose(gu, e, 2 * i, h)))
                .write(in2);
        assertEquals(fileOf(in2, p + ".down_proj") + ": tensor " + p + ".down_proj: NaN at [0, 3, 50]; "
                + "weights to quantise must be finite", quantizeFails(in2, WeightFormat.MXFP4));
    }

    @Test
    void alreadyQuantisedExpertsAreRefused() throws IOException {
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        quantize(in, WeightFormat.MXFP8, outDir);
        var e = assertThrows(CheckpointException.class, () -> quantize(outDir, WeightFormat.NVFP4, tmp.resolve("again")));
        assertMentions(e.getMessage(), "F8_E4M3", "already quantised", ".weight'");
    }

    /** The listener hears of every tensor written, once the plan is made, and the notes. */
    @Test
    void listenerHearsEveryTensorAndTheNotes() throws IOException {
        Path in = tmp.resolve("in");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Files.createDirectories(in.resolve("extra"));
        List<String> heard = new ArrayList<>();
        Quantizer.Listener listener = new Quantizer.Listener() {
            @Override
            public void note(String message) {
                heard.add("note " + message);
            }

            @Override
            public void writing(int tensors) {
                heard.add("writing " + tensors);
            }

            @Override
            public void tensorWritten() {
                heard.add("tensor");
            }

            @Override
            public void tensorsWritten() {
                heard.add("written");
            }
        };
        Quantizer.Summary s = quantize(in, WeightFormat.FP8_BLOCK128, tmp.resolve("out"), 20_000, listener);
        // 24 weights with their scales, 6 other tensors
        assertEquals(List.of("writing 54"), heard.stream().filter(h -> h.startsWith("writing")).toList());
        assertEquals(54, s.tensorsWritten() + s.copiedTensors());
        assertEquals(54, heard.stream().filter(h -> h.equals("tensor")).count());
        assertEquals(1, heard.stream().filter(h -> h.equals("written")).count());
        assertTrue(heard.indexOf("written") > heard.lastIndexOf("tensor"), heard::toString);
        // the notes come with the plan, before anything is written
        assertMentions(heard.get(0), "fp8_e4m3_block128 gate/up weights with I % 128 != 0", "straddle");
        assertMentions(heard.get(1), "skipped the folder extra/");
        assertEquals("writing 54", heard.get(2));
    }

    @Test
    void outputIntoTheInputFolderIsRefused() throws IOException {
        Path in = tmp.resolve("in");
        new SyntheticMoeCheckpoint(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Map<String, Long> before = sizes(in);
        var e = assertThrows(IllegalArgumentException.class, () -> quantize(in, WeightFormat.NVFP4, in.resolve(".")));
        assertMentions(e.getMessage(), "folder of the checkpoint being quantised");
        assertEquals(before, sizes(in));
    }

    @Test
    void checkpointWithoutExpertsIsRefused() throws IOException {
        Path in = tmp.resolve("in");
        new CheckpointWriter().add("lm_head.weight", SafetensorsDType.BF16, List.of(2L), new byte[4]).write(in);
        var e = assertThrows(IllegalArgumentException.class, () -> quantize(in, WeightFormat.NVFP4, tmp.resolve("out")));
        assertMentions(e.getMessage(), in.toString(), "no routed expert weights to quantise");
    }
}
