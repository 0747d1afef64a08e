package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.CheckpointExperts;
import dev.moeforge.checkpoint.CheckpointWriter;
import dev.moeforge.checkpoint.ExpertTensors;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.checkpoint.TensorInfo;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import picocli.CommandLine;

/**
 * {@code moeforge quantize} on a tiny synthetic BF16 checkpoint (two layers of four Qwen-style
 * experts, two shards): for every format the output has the documented tensors, the untouched
 * tensors are byte-identical, config.json gains a quantization_config, and
 * {@link CheckpointExperts#load} gives exactly {@link EncodedWeights#encode} of the original fused
 * weights. Also fused inputs, and the refusals.
 */
class QuantizeCommandTest {

    static final int LAYERS = 2;
    static final int E = 4;
    /** I = 128 so that FP8 128x128 blocks of gate and up do not straddle; H = 256 for group-128 formats. */
    static final int H = 256;
    static final int I = 128;

    @TempDir
    Path tmp;

    static float[] weights(long seed, int n) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] w = new float[n];
        for (int i = 0; i < n; i++) {
            w[i] = Bf16.toFloat(Bf16.fromFloat((float) (r.nextGaussian() * 0.05)));
        }
        return w;
    }

    static byte[] bf16Bytes(float[] w) {
        ByteBuffer b = ByteBuffer.allocate(2 * w.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : w) {
            b.putShort(Bf16.fromFloat(v));
        }
        return b.array();
    }

    /** The synthetic model: per layer gate_up [E][2I][H] (gate rows then up rows) and down [E][H][I], plus other tensors. */
    static final class Model {
        final int h;
        final int i;
        final float[][] gateUp = new float[LAYERS][];
        final float[][] down = new float[LAYERS][];
        final Map<String, byte[]> others = new LinkedHashMap<>();

        Model(int h, int i) {
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

        float[] slice(float[] a, long from, int n) {
            float[] out = new float[n];
            System.arraycopy(a, (int) from, out, 0, n);
            return out;
        }

        /** Writes Qwen-style per-expert names ({@code names} = gate, up, down) into {@code dir}, in two or more shards. */
        void writePerExpert(Path dir, String block, String... names) throws IOException {
            CheckpointWriter w = new CheckpointWriter(totalBytes() / 2 + 1).metadata(Map.of("format", "pt"));
            others.forEach((n, b) -> w.add(n, SafetensorsDType.BF16, shapeOf(n), b));
            for (int l = 0; l < LAYERS; l++) {
                for (int e = 0; e < E; e++) {
                    String base = "model.layers." + l + "." + block + ".experts." + e + ".";
                    w.add(base + names[0] + ".weight", SafetensorsDType.BF16, List.of((long) i, (long) h),
                            bf16Bytes(slice(gateUp[l], (long) e * 2 * i * h, i * h)));
                    w.add(base + names[1] + ".weight", SafetensorsDType.BF16, List.of((long) i, (long) h),
                            bf16Bytes(slice(gateUp[l], ((long) e * 2 * i + i) * h, i * h)));
                    w.add(base + names[2] + ".weight", SafetensorsDType.BF16, List.of((long) h, (long) i),
                            bf16Bytes(slice(down[l], (long) e * h * i, h * i)));
                }
            }
            assertTrue(w.write(dir).size() >= 3, "at least two shards and the index");
            writeSideFiles(dir);
        }

        /** transformers' in-memory fused names: gate_up_proj [E, 2I, H], down_proj [E, H, I]. */
        void writeFused(Path dir) throws IOException {
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

        long totalBytes() {
            return 2L * LAYERS * E * 3 * i * h + others.values().stream().mapToLong(b -> b.length).sum();
        }

        List<Long> shapeOf(String name) {
            if (name.endsWith("mlp.gate.weight")) {
                return List.of((long) E, (long) h);
            }
            if (name.endsWith("layernorm.weight")) {
                return List.of((long) h);
            }
            return List.of(16L, (long) h);
        }

        EncodedWeights expectedGateUp(WeightFormat f, int l) {
            return EncodedWeights.encode(f, RowSource.of(gateUp[l], 2 * i, h), E, 2 * i, h, Projections.STACKED_GATE_UP, "gate_up");
        }

        EncodedWeights expectedDown(WeightFormat f, int l) {
            return EncodedWeights.encode(f, RowSource.of(down[l], h, i), E, h, i, Projections.ONE, "down");
        }
    }

    static void writeSideFiles(Path dir) throws IOException {
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

    /** Runs the command; returns the exit code, and the exception of a failed run in {@code error[0]}. */
    static int quantize(Exception[] error, StringWriter out, String... args) {
        CommandLine cmd = new CommandLine(new QuantizeCommand());
        cmd.setOut(new PrintWriter(out, true));
        cmd.setErr(new PrintWriter(new StringWriter(), true));
        cmd.setExecutionExceptionHandler((e, c, parsed) -> {
            error[0] = e;
            return 1;
        });
        return cmd.execute(args);
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

    static List<String> formats() {
        return WeightFormat.ALL.stream().map(WeightFormat::text).toList();
    }

    static void assertMentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), () -> "expected '" + p + "' in: " + message);
        }
    }

    @ParameterizedTest
    @MethodSource("formats")
    void everyFormatRoundTrips(String formatText) throws IOException {
        WeightFormat format = QuantizeCommand.parseFormat(formatText);
        Model m = new Model(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Exception[] error = new Exception[1];
        StringWriter stdout = new StringWriter();
        int rc = quantize(error, stdout, "--in", in.toString(), "--format", formatText, "--out", outDir.toString(),
                "--shard-size", "300kB");
        assertEquals(0, rc, () -> "failed: " + error[0]);
        assertMentions(stdout.toString(), "quantised 24 routed expert tensors to " + formatText, "copied 6 other tensors unchanged");

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
        Model m = new Model(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "block_sparse_moe", "w1", "w3", "w2");
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", outDir.toString()),
                () -> "failed: " + error[0]);
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
        Model m = new Model(H, I);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writeFused(in);
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "fp8_e4m3_block128",
                "--out", outDir.toString()), () -> "failed: " + error[0]);
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
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp4", "--out", outDir.toString()),
                () -> "failed: " + error[0]);
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
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", tmp.resolve("o2").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "only to mxfp4", p + ".gate_up_proj");
    }

    static float[] transpose(float[] a, int e, int n, int k) {
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

    /** H = 64, I = 32: the formats with blocks of at most 32 work, the others are refused with the reason. */
    @ParameterizedTest
    @MethodSource("formats")
    void smallGeometry(String formatText) throws IOException {
        WeightFormat format = QuantizeCommand.parseFormat(formatText);
        Model m = new Model(64, 32);
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", formatText, "--out", outDir.toString());
        if (format.blockScale() == WeightFormat.BlockScale.F32_GROUP_128) {
            assertEquals(1, rc);
            assertMentions(error[0].getMessage(), "not whole blocks of 128", "model.layers.0.mlp.experts.0.down_proj.weight");
            return;
        }
        assertEquals(0, rc, () -> "failed: " + error[0]);
        try (Checkpoint ckpt = Checkpoint.open(outDir)) {
            if (format.blockScale().blockRows()) {  // FP8 128x128 with I = 32: quantised, but not fusable
                CheckpointException e = org.junit.jupiter.api.Assertions.assertThrows(CheckpointException.class,
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

    // ---------------------------------------------------------------- refusals

    @Test
    void unknownFormatListsTheAllowedOnes() throws IOException {
        Path in = tmp.resolve("in");
        new Model(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp5", "--out", tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertInstanceOf(IllegalArgumentException.class, error[0]);
        assertMentions(error[0].getMessage(), "nvfp5", "allowed: " + String.join(", ", formats()));
        assertFalse(Files.exists(tmp.resolve("out")));
    }

    @Test
    void helpListsEveryFormat() {
        assertEquals(String.join(", ", formats()), QuantizeCommand.ALLOWED);
        String usage = new CommandLine(new QuantizeCommand()).getUsageMessage();
        assertMentions(usage, "--in=DIR", "--format=FORMAT", "--out=DIR", "--shard-size=SIZE", "int4_group128");
    }

    @Test
    void outputFolderEqualToInputIsRefused() throws IOException {
        Path in = tmp.resolve("in");
        new Model(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Map<String, Long> before = sizes(in);
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "nvfp4", "--out", in + "/./");
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--out", "input folder");
        assertEquals(before, sizes(in));
    }

    static Map<String, Long> sizes(Path dir) throws IOException {
        try (var s = Files.list(dir)) {
            return s.collect(Collectors.toMap(p -> p.getFileName().toString(), p -> p.toFile().length()));
        }
    }

    @Test
    void notACheckpointIsRefused() throws IOException {
        Path empty = Files.createDirectories(tmp.resolve("empty"));
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", empty.toString(), "--format", "nvfp4", "--out", tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--in", "not a readable checkpoint", "safetensors");
        rc = quantize(error, new StringWriter(), "--in", tmp.resolve("missing").toString(), "--format", "nvfp4", "--out",
                tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "--in", "not a directory");
    }

    @Test
    void nanWeightNamesFileTensorAndIndex() throws IOException {
        Model m = new Model(64, 32);
        // expert 2's up_proj of layer 1 (rows I..2I-1 of gate_up): row 5, column 7
        m.gateUp[1][(2 * 2 * 32 + 32 + 5) * 64 + 7] = Float.NaN;
        Path in = tmp.resolve("in");
        m.writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        String tensor = "model.layers.1.mlp.experts.2.up_proj.weight";
        String file;
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            file = ckpt.fileOf(tensor).path().getFileName().toString();
        }
        Exception[] error = new Exception[1];
        Path outDir = tmp.resolve("out");
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString(),
                "--shard-size", "20kB");
        assertEquals(1, rc);
        assertInstanceOf(CheckpointException.class, error[0]);
        // the index of the 2-D [out, in] tensor as stored: [row, col], no expert dimension
        assertEquals(in.resolve(file) + ": tensor " + tensor + ": NaN at [5, 7]; weights to quantise must be finite",
                error[0].getMessage());
        // layer 0's shards were written before the NaN was met; none of them is left behind
        assertEquals(Map.of(), sizes(outDir));
    }

    /** Runs quantize on {@code in}, expecting it to fail; returns the message. */
    String quantizeFails(Path in, String format) {
        Exception[] error = new Exception[1];
        int rc = quantize(error, new StringWriter(), "--in", in.toString(), "--format", format, "--out", tmp.resolve("out").toString());
        assertEquals(1, rc);
        assertInstanceOf(CheckpointException.class, error[0]);
        return error[0].getMessage();
    }

    static String fileOf(Path dir, String tensor) {
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            return ckpt.fileOf(tensor).path().toString();
        }
    }

    /** Fused [E, 2I, H]: the up half is quantised from its own slice, but a NaN there is named at its row in the fused tensor. */
    @Test
    void nanInFusedGateUpNamesTheIndexInTheFusedTensor() throws IOException {
        Model m = new Model(64, 32);
        // layer 1, expert 2, up row 5 (fused row I + 5 = 37), column 7
        m.gateUp[1][((2 * 2 * 32) + 32 + 5) * 64 + 7] = Float.NaN;
        Path in = tmp.resolve("in");
        m.writeFused(in);
        String tensor = "model.layers.1.mlp.experts.gate_up_proj";
        assertEquals(fileOf(in, tensor) + ": tensor " + tensor + ": NaN at [2, 37, 7]; weights to quantise must be finite",
                quantizeFails(in, "nvfp4"));
        // down [E, H, I] of expert 3: [3, 60, 9]
        m.gateUp[1][((2 * 2 * 32) + 32 + 5) * 64 + 7] = 0f;
        m.down[0][(3 * 64 + 60) * 32 + 9] = Float.NEGATIVE_INFINITY;
        Path in2 = tmp.resolve("in2");
        m.writeFused(in2);
        String down = "model.layers.0.mlp.experts.down_proj";
        assertEquals(fileOf(in2, down) + ": tensor " + down + ": -Inf at [3, 60, 9]; weights to quantise must be finite",
                quantizeFails(in2, "nvfp4"));
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
                + "weights to quantise must be finite", quantizeFails(in, "mxfp4"));
        // down [E, I, H] stored, read as [E][H][I]: output row 50, input 3 of expert 0 is stored at [0, 3, 50]
        gu[(1 * 2 * i + 5) * h + 40] = 0f;
        dn[50 * i + 3] = Float.NaN;
        Path in2 = tmp.resolve("in2");
        new CheckpointWriter(1)
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) i, (long) h), bf16Bytes(transpose(dn, e, h, i)))
                .add(p + ".gate_up_proj", SafetensorsDType.BF16, List.of((long) e, (long) h, 2L * i), bf16Bytes(transpose(gu, e, 2 * i, h)))
                .write(in2);
        assertEquals(fileOf(in2, p + ".down_proj") + ": tensor " + p + ".down_proj: NaN at [0, 3, 50]; "
                + "weights to quantise must be finite", quantizeFails(in2, "mxfp4"));
    }

    @Test
    void alreadyQuantisedExpertsAreRefused() throws IOException {
        Path in = tmp.resolve("in");
        Path outDir = tmp.resolve("out");
        new Model(64, 32).writePerExpert(in, "mlp", "gate_proj", "up_proj", "down_proj");
        Exception[] error = new Exception[1];
        assertEquals(0, quantize(error, new StringWriter(), "--in", in.toString(), "--format", "mxfp8", "--out", outDir.toString()));
        int rc = quantize(error, new StringWriter(), "--in", outDir.toString(), "--format", "nvfp4", "--out", tmp.resolve("again").toString());
        assertEquals(1, rc);
        assertMentions(error[0].getMessage(), "F8_E4M3", "already quantised", ".weight'");
    }

    @Test
    void shardSizes() {
        assertEquals(5_000_000_000L, QuantizeCommand.parseSize("5GB"));
        assertEquals(2L << 30, QuantizeCommand.parseSize("2GiB"));
        assertEquals(300_000L, QuantizeCommand.parseSize("300kB"));
        assertEquals(1234L, QuantizeCommand.parseSize("1234"));
        assertNotEquals(0, org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> QuantizeCommand.parseSize("5 potatoes")).getMessage().length());
    }
}
