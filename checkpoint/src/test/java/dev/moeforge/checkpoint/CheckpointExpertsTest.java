package dev.moeforge.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.WeightFormat;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.function.Predicate;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link CheckpointExperts} on hand-built checkpoints written with the names of {@link ExpertTensors}:
 * every format loads to exactly what {@link EncodedWeights#encode} gives for the fused weight, gpt-oss
 * fused tensors keep their interleaved layout and biases, and bad input names the tensor and the file.
 */
class CheckpointExpertsTest {

    static final String P = "model.layers.0.mlp";
    static final int E = 3;
    static final int H = 256;
    static final int I = 128;

    @TempDir
    Path dir;

    /** Random weights, rounded to BF16 so that the file's values are exactly these. */
    static float[] weights(long seed, int n) {
        return GptOssCheckpoint.normalBf16(seed, n, 0.05);
    }

    static byte[] bf16Bytes(float[] w) {
        return GptOssCheckpoint.bf16Bytes(w);
    }

    /** Gate, up and down of every expert: gate_up [E][2I][H] (gate rows then up rows) and down [E][H][I]. */
    record Layer(float[] gateUp, float[] down) {
        static Layer random(long seed) {
            return new Layer(weights(seed, E * 2 * I * H), weights(seed + 1, E * H * I));
        }

        float[] gate(int e) {
            return slice(gateUp, (long) e * 2 * I * H, I * H);
        }

        float[] up(int e) {
            return slice(gateUp, ((long) e * 2 * I + I) * H, I * H);
        }

        float[] down(int e) {
            return slice(down, (long) e * H * I, H * I);
        }
    }

    static float[] slice(float[] a, long from, int n) {
        float[] out = new float[n];
        System.arraycopy(a, (int) from, out, 0, n);
        return out;
    }

    /** Adds one expert projection in {@code format} under {@code base}, unless {@code skip} says so. */
    static void addQuantised(CheckpointWriter w, WeightFormat format, String base, float[] m, int rows, int cols,
                             Predicate<String> skip) {
        EncodedWeights enc = EncodedWeights.encode(format, RowSource.of(m, rows, cols), 1, rows, cols, Projections.ONE, base);
        for (ExpertTensors.Entry e : ExpertTensors.perExpert(format, base, rows, cols)) {
            if (!skip.test(e.name())) {
                w.add(e.name(), e.dtype(), e.shape(), e.part().bytes(enc));
            }
        }
    }

    Checkpoint write(WeightFormat format, Layer layer, String[] names, Predicate<String> skip) {
        CheckpointWriter w = new CheckpointWriter(200_000).metadata(Map.of("format", "pt", ExpertTensors.FORMAT_METADATA_KEY, format.text()));
        w.add("model.embed_tokens.weight", SafetensorsDType.BF16, List.of(8L, (long) H), bf16Bytes(weights(9, 8 * H)));
        for (int e = 0; e < E; e++) {
            String base = P + ".experts." + e + ".";
            addQuantised(w, format, base + names[0], layer.gate(e), I, H, skip);
            addQuantised(w, format, base + names[1], layer.up(e), I, H, skip);
            addQuantised(w, format, base + names[2], layer.down(e), H, I, skip);
        }
        w.write(dir);
        return Checkpoint.open(dir);
    }

    static List<WeightFormat> formats() {
        return WeightFormat.ALL;
    }

    static void assertEncodedEquals(EncodedWeights expected, EncodedWeights actual) {
        assertEquals(expected.format(), actual.format());
        assertEquals(expected.experts(), actual.experts());
        assertEquals(expected.rows(), actual.rows());
        assertEquals(expected.cols(), actual.cols());
        assertEquals(expected.projections(), actual.projections());
        assertArrayEquals(expected.codes(), actual.codes(), "codes");
        assertArrayEquals(expected.blockScales(), actual.blockScales(), "block scales");
        assertArrayEquals(expected.rowScales(), actual.rowScales(), "row scales");
    }

    @ParameterizedTest
    @MethodSource("formats")
    void perExpertTensorsLoadAsTheFusedEncoding(WeightFormat format) {
        Layer layer = Layer.random(format.text().hashCode());
        try (Checkpoint ckpt = write(format, layer, new String[] {"gate_proj", "up_proj", "down_proj"}, n -> false)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, P, E);
            assertEquals(GateUpLayout.STACKED, lw.layout());
            assertTrue(lw.gateUpBias().isEmpty() && lw.downBias().isEmpty());
            assertEncodedEquals(EncodedWeights.encode(format, RowSource.of(layer.gateUp(), 2 * I, H), E, 2 * I, H,
                    Projections.STACKED_GATE_UP, "gate_up"), lw.gateUp());
            assertEncodedEquals(EncodedWeights.encode(format, RowSource.of(layer.down(), H, I), E, H, I, Projections.ONE, "down"),
                    lw.down());
            assertEquals(E, CheckpointExperts.countExperts(ckpt, P));
            assertEquals(I, lw.intermediate());
            assertEquals(H, lw.hidden());
        }
    }

    @Test
    void mixtralNames() {
        Layer layer = Layer.random(5);
        try (Checkpoint ckpt = write(WeightFormat.FP8_BLOCK128, layer, new String[] {"w1", "w3", "w2"}, n -> false)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, P);
            assertEncodedEquals(EncodedWeights.encode(WeightFormat.FP8_BLOCK128, RowSource.of(layer.gateUp(), 2 * I, H), E, 2 * I, H,
                    Projections.STACKED_GATE_UP, "gate_up"), lw.gateUp());
        }
    }

    /** gpt-oss: fused {@code _blocks [E, 2I, H/32, 16]}, {@code _scales}, BF16 {@code _bias}, gate/up interleaved. */
    @Test
    void gptOssFusedMxfp4() {
        GptOssCheckpoint written = GptOssCheckpoint.write(dir, "model.layers.3.mlp", 2, 64, 32, 1, 1.0);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers.3.mlp");
            assertEquals(GateUpLayout.INTERLEAVED, lw.layout());
            assertEquals(2, lw.experts());
            assertEncodedEquals(written.gateUp(), lw.gateUp());
            assertEncodedEquals(written.down(), lw.down());
            assertArrayEquals(written.gateUpBias(), lw.gateUpBias().orElseThrow());
            assertArrayEquals(written.downBias(), lw.downBias().orElseThrow());
        }
    }

    /** transformers' fused float tensors, both orientations: [E, 2I, H] stacked, gpt-oss's [E, H, 2I] interleaved. */
    @Test
    void fusedFloatTensors() {
        int e = 2;
        int h = 64;
        int i = 32;
        float[] gu = weights(11, e * 2 * i * h);
        float[] dn = weights(12, e * h * i);
        String p = "model.layers.0.mlp.experts";
        new CheckpointWriter()
                .add(p + ".gate_up_proj", SafetensorsDType.BF16, List.of((long) e, 2L * i, (long) h), bf16Bytes(gu))
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) h, (long) i), bf16Bytes(dn))
                .write(dir.resolve("stacked"));
        try (Checkpoint ckpt = Checkpoint.open(dir.resolve("stacked"))) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers.0.mlp", e);
            assertEquals(GateUpLayout.STACKED, lw.layout());
            assertArrayEquals(bf16Bytes(gu), lw.gateUp().codes());
            assertArrayEquals(bf16Bytes(dn), lw.down().codes());
            assertEquals(2 * i, lw.gateUp().rows());
        }
        // gpt-oss stores x @ W: [E, H, 2I] and [E, I, H], F32 here, with biases
        float[] guT = SyntheticMoeCheckpoint.transpose(gu, e, 2 * i, h);
        float[] dnT = SyntheticMoeCheckpoint.transpose(dn, e, h, i);
        float[] bias = weights(13, e * 2 * i);
        ByteBuffer f32 = ByteBuffer.allocate(4 * guT.length).order(ByteOrder.LITTLE_ENDIAN);
        f32.asFloatBuffer().put(guT);
        new CheckpointWriter()
                .add(p + ".gate_up_proj", SafetensorsDType.F32, List.of((long) e, (long) h, 2L * i), f32.array())
                .add(p + ".gate_up_proj_bias", SafetensorsDType.BF16, List.of((long) e, 2L * i), bf16Bytes(bias))
                .add(p + ".down_proj", SafetensorsDType.BF16, List.of((long) e, (long) i, (long) h), bf16Bytes(dnT))
                .write(dir.resolve("gptoss"));
        try (Checkpoint ckpt = Checkpoint.open(dir.resolve("gptoss"))) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, "model.layers.0.mlp");
            assertEquals(GateUpLayout.INTERLEAVED, lw.layout());
            assertEquals(Projections.INTERLEAVED_GATE_UP, lw.gateUp().projections());
            assertArrayEquals(bf16Bytes(gu), lw.gateUp().codes());
            assertArrayEquals(bf16Bytes(dn), lw.down().codes());
            assertArrayEquals(bias, lw.gateUpBias().orElseThrow());
            assertTrue(lw.downBias().isEmpty());
        }
    }

    /** For K = 128 both INT scale shapes are [N, 1]: the file's moeforge_format metadata decides. */
    @Test
    void intGroup128WithOneGroupNeedsTheMetadata() {
        Layer layer = Layer.random(21);
        try (Checkpoint ckpt = write(WeightFormat.INT4_GROUP128, layer, new String[] {"gate_proj", "up_proj", "down_proj"}, n -> false)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, P, E);
            assertEquals(WeightFormat.INT4_GROUP128, lw.down().format());  // down: K = I = 128
            assertEquals(WeightFormat.INT4_GROUP128, lw.gateUp().format());
        }
    }

    /** Per-tensor FP8 (a scalar F32 weight_scale, as ModelOpt FP8 exports) loads as per channel, the scale repeated. */
    @Test
    void perTensorFp8ScaleIsRepeatedPerRow() {
        int i = 32;
        int h = 64;
        CheckpointWriter w = new CheckpointWriter();
        byte[][] codes = new byte[6][];
        for (int e = 0; e < 2; e++) {
            String[] projs = {"gate_proj", "up_proj", "down_proj"};
            for (int p = 0; p < 3; p++) {
                String base = P + ".experts." + e + "." + projs[p];
                byte[] c = new byte[i * h];
                new SplittableRandom(e * 3 + p).nextBytes(c);
                for (int k = 0; k < c.length; k++) {
                    c[k] &= (byte) 0xF7;  // no NaN codes
                }
                codes[e * 3 + p] = c;
                List<Long> shape = p == 2 ? List.of((long) h, (long) i) : List.of((long) i, (long) h);
                w.add(base + ".weight", SafetensorsDType.F8_E4M3, shape, c);
                ByteBuffer s = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putFloat(0.25f * (e * 3 + p + 1));
                w.add(base + ".weight_scale", SafetensorsDType.F32, List.of(), s.array());
            }
        }
        w.write(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, P);
            assertEquals(WeightFormat.FP8_CHANNEL, lw.gateUp().format());
            float[] rs = lw.gateUp().rowScales();
            assertEquals(2 * 2 * i, rs.length);
            assertEquals(0.25f, rs[0]);
            assertEquals(0.5f, rs[i]);          // expert 0's up
            assertEquals(1.0f, rs[2 * i + 1]);  // expert 1's gate
            assertEquals(1.5f, lw.down().rowScales()[h]);
            assertArrayEquals(codes[4], java.util.Arrays.copyOfRange(lw.gateUp().codes(), 3 * i * h, 4 * i * h));
        }
    }

    // ---------------------------------------------------------------- bad input

    private CheckpointException loadFails(WeightFormat format, Predicate<String> skip, UnaryOperator<CheckpointWriter> extra) {
        return loadFails(format, skip, extra, 200_000);
    }

    /** As above, in shards of at most {@code maxShardBytes} (1: one tensor per file, so a message must name the right one). */
    private CheckpointException loadFails(WeightFormat format, Predicate<String> skip, UnaryOperator<CheckpointWriter> extra,
                                          long maxShardBytes) {
        Layer layer = Layer.random(7);
        CheckpointWriter w = new CheckpointWriter(maxShardBytes).metadata(Map.of("format", "pt"));
        for (int e = 0; e < E; e++) {
            String base = P + ".experts." + e + ".";
            addQuantised(w, format, base + "gate_proj", layer.gate(e), I, H, skip);
            addQuantised(w, format, base + "up_proj", layer.up(e), I, H, skip);
            addQuantised(w, format, base + "down_proj", layer.down(e), H, I, skip);
        }
        extra.apply(w).write(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            return assertThrows(CheckpointException.class, () -> CheckpointExperts.load(ckpt, P, E));
        }
    }

    private String fileOf(String tensor) {
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            return ckpt.fileOf(tensor).path().getFileName().toString();
        }
    }

    static void assertMentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), () -> "expected '" + p + "' in: " + message);
        }
    }

    @Test
    void missingNvfp4WeightScaleNamesTensorAndFile() {
        String missing = P + ".experts.1.up_proj.weight_scale";
        CheckpointException e = loadFails(WeightFormat.NVFP4, missing::equals, w -> w);
        assertMentions(e.getMessage(), "'" + missing + "'", fileOf(P + ".experts.1.up_proj.weight"), "not in this checkpoint");
    }

    /** ModelOpt NVFP4 without its per-tensor weight_scale_2: U8 + F8_E4M3 block scales is NVFP4, not MXFP4. */
    @Test
    void missingNvfp4WeightScale2NamesTensorAndFile() {
        String missing = P + ".experts.2.gate_proj.weight_scale_2";
        CheckpointException e = loadFails(WeightFormat.NVFP4, missing::equals, w -> w, 1);
        String weightFile = fileOf(P + ".experts.2.gate_proj.weight");
        assertTrue(!weightFile.equals(fileOf(P + ".experts.2.gate_proj.weight_scale")), "one tensor per shard");
        assertMentions(e.getMessage(), "'" + missing + "'", weightFile, "not in this checkpoint",
                "'" + P + ".experts.2.gate_proj.weight_scale'");
    }

    /** gpt-oss MXFP4 without its E8M0 {@code _scales} (gate_up's or down's): named, with the file of the blocks beside it. */
    @ParameterizedTest
    @MethodSource("gptOssProjections")
    void missingGptOssScalesNamesTensorAndFile(String proj) {
        int e = 2;
        int h = 64;
        int i = 32;
        String p = "model.layers.0.mlp.experts";
        EncodedWeights gu = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(weights(1, e * 2 * i * h), 2 * i, h), e, 2 * i, h,
                Projections.INTERLEAVED_GATE_UP, "gu");
        EncodedWeights dn = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(weights(2, e * h * i), h, i), e, h, i,
                Projections.ONE, "dn");
        String missing = p + "." + proj + "_scales";
        CheckpointWriter w = new CheckpointWriter(1);  // one tensor per file
        w.add(p + ".gate_up_proj_blocks", SafetensorsDType.U8, List.of((long) e, 2L * i, h / 32L, 16L), gu.codes());
        w.add(p + ".down_proj_blocks", SafetensorsDType.U8, List.of((long) e, (long) h, i / 32L, 16L), dn.codes());
        if (!missing.equals(p + ".gate_up_proj_scales")) {
            w.add(p + ".gate_up_proj_scales", SafetensorsDType.U8, List.of((long) e, 2L * i, h / 32L), gu.blockScales());
        }
        if (!missing.equals(p + ".down_proj_scales")) {
            w.add(p + ".down_proj_scales", SafetensorsDType.U8, List.of((long) e, (long) h, i / 32L), dn.blockScales());
        }
        w.write(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            assertTrue(ckpt.find(missing).isEmpty());
            CheckpointException ex = assertThrows(CheckpointException.class, () -> CheckpointExperts.load(ckpt, "model.layers.0.mlp"));
            assertMentions(ex.getMessage(), "'" + missing + "'", fileOf(p + "." + proj + "_blocks"), "not in this checkpoint",
                    "'" + p + "." + proj + "_blocks'");
        }
    }

    static List<String> gptOssProjections() {
        return List.of("gate_up_proj", "down_proj");
    }

    @Test
    void missingIntScaleNamesTensorAndFile() {
        String missing = P + ".experts.2.down_proj.weight_scale";
        CheckpointException e = loadFails(WeightFormat.INT8_CHANNEL, missing::equals, w -> w);
        assertMentions(e.getMessage(), "'" + missing + "'", fileOf(P + ".experts.2.down_proj.weight"));
    }

    @Test
    void missingFp8ScaleNamesBothCandidates() {
        String missing = P + ".experts.0.gate_proj.weight_scale_inv";
        CheckpointException e = loadFails(WeightFormat.FP8_BLOCK128, missing::equals, w -> w);
        assertMentions(e.getMessage(), missing, P + ".experts.0.gate_proj.weight_scale'", fileOf(P + ".experts.0.gate_proj.weight"));
    }

    @Test
    void scaleOfTheWrongShape() {
        String bad = P + ".experts.1.gate_proj.weight_scale_inv";
        CheckpointException e = loadFails(WeightFormat.MXFP8, bad::equals,
                w -> w.add(bad, SafetensorsDType.U8, List.of((long) I, (long) H / 16), new byte[I * H / 16]));
        assertMentions(e.getMessage(), "'" + bad + "'", fileOf(bad), "[128, 16]", "[128, 8]");
    }

    @Test
    void scaleOfTheWrongDtype() {
        String bad = P + ".experts.0.down_proj.weight_scale";
        CheckpointException e = loadFails(WeightFormat.NVFP4, bad::equals,
                w -> w.add(bad, SafetensorsDType.U8, List.of((long) H, (long) I / 16), new byte[H * I / 16]));
        assertMentions(e.getMessage(), "'" + bad + "'", fileOf(bad), "U8", "F8_E4M3");
    }

    @Test
    void expertsDisagreeingInFormat() {
        // expert 2's up in MXFP8 while the rest are NVFP4
        String base = P + ".experts.2.up_proj";
        Layer other = Layer.random(8);
        CheckpointException e = loadFails(WeightFormat.NVFP4, n -> n.startsWith(base + "."), w -> {
            addQuantised(w, WeightFormat.MXFP8, base, other.up(2), I, H, n -> false);
            return w;
        });
        assertMentions(e.getMessage(), "'" + base + ".weight'", fileOf(base + ".weight"), "mxfp8", "nvfp4",
                P + ".experts.0.gate_proj.weight");
    }

    @Test
    void expertsDisagreeingInShape() {
        String base = P + ".experts.1.down_proj";
        CheckpointException e = loadFails(WeightFormat.BF16, n -> n.startsWith(base + "."), w ->
                w.add(base + ".weight", SafetensorsDType.BF16, List.of((long) H, 64L), new byte[H * 64 * 2]));
        assertMentions(e.getMessage(), "'" + base + ".weight'", fileOf(base + ".weight"), "[256, 64]", "[256, 128]");
    }

    @Test
    void rowsNotWholeBlocks() {
        // MXFP8 rows of 48 elements: not whole blocks of 32
        String base = P + ".experts.0.down_proj";
        CheckpointException e = loadFails(WeightFormat.MXFP8, n -> n.startsWith(base + "."), w -> w
                .add(base + ".weight", SafetensorsDType.F8_E4M3, List.of((long) H, 48L), new byte[H * 48])
                .add(base + ".weight_scale_inv", SafetensorsDType.U8, List.of((long) H, 1L), new byte[H]));
        assertMentions(e.getMessage(), "'" + base + ".weight'", fileOf(base + ".weight"), "48", "32");
    }

    @Test
    void fp8BlockGateUpMustBeWholeBlocksOfRows() {
        int i = 64;
        CheckpointWriter w = new CheckpointWriter();
        for (int e = 0; e < 2; e++) {
            String base = P + ".experts." + e + ".";
            addQuantised(w, WeightFormat.FP8_BLOCK128, base + "gate_proj", weights(e, i * H), i, H, n -> false);
            addQuantised(w, WeightFormat.FP8_BLOCK128, base + "up_proj", weights(e + 10, i * H), i, H, n -> false);
            addQuantised(w, WeightFormat.FP8_BLOCK128, base + "down_proj", weights(e + 20, i * H), H, i, n -> false);
        }
        w.write(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointException e = assertThrows(CheckpointException.class, () -> CheckpointExperts.load(ckpt, P));
            assertMentions(e.getMessage(), P + ".experts.0.gate_proj.weight", "straddle", "I % 128");
        }
    }

    @Test
    void missingExpertNamesTensorAndFolder() {
        CheckpointException e = loadFails(WeightFormat.BF16, n -> n.startsWith(P + ".experts.1.up_proj."), w -> w);
        assertMentions(e.getMessage(), P + ".experts.1.up_proj.weight", dir.toString());
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointException none = assertThrows(CheckpointException.class, () -> CheckpointExperts.load(ckpt, "model.layers.7.mlp"));
            assertMentions(none.getMessage(), "model.layers.7.mlp", "no routed experts");
        }
    }

    /** Expert ids must be 0..E-1: a gap or a stray id is named as such, not as a tensor of an expert nobody named. */
    @Test
    void expertIdsMustRunFromZeroWithoutAGap() {
        CheckpointWriter w = new CheckpointWriter();
        for (int e : new int[] {0, 1, 2, 1000}) {
            for (String proj : List.of("gate_proj", "up_proj", "down_proj")) {
                boolean down = proj.equals("down_proj");
                w.add(P + ".experts." + e + "." + proj + ".weight", SafetensorsDType.BF16,
                        List.of((long) (down ? 64 : 32), (long) (down ? 32 : 64)), new byte[2 * 64 * 32]);
            }
        }
        w.write(dir);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            for (var call : List.<Runnable>of(() -> CheckpointExperts.countExperts(ckpt, P), () -> CheckpointExperts.load(ckpt, P),
                    () -> CheckpointExperts.check(ckpt, P))) {
                CheckpointException e = assertThrows(CheckpointException.class, call::run);
                assertEquals(dir + ": the experts under '" + P + "' are numbered 0..2, 1000; expert ids must run from 0 to E-1"
                        + " with none missing (missing 3..999)", e.getMessage());
            }
            // asked for the first three, the loader takes them
            assertEquals(3, CheckpointExperts.load(ckpt, P, 3).experts());
        }
    }

    /** check() refuses what load() refuses, without reading a weight; and passes what it loads. */
    @Test
    void checkRefusesWhatLoadRefuses() {
        String missing = P + ".experts.1.up_proj.weight_scale";
        CheckpointException loaded = loadFails(WeightFormat.NVFP4, missing::equals, w -> w);
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointException checked = assertThrows(CheckpointException.class, () -> CheckpointExperts.check(ckpt, P));
            assertEquals(loaded.getMessage(), checked.getMessage());
        }
        try (Checkpoint ckpt = write(WeightFormat.NVFP4, Layer.random(3), new String[] {"gate_proj", "up_proj", "down_proj"}, n -> false)) {
            assertEquals(E, CheckpointExperts.check(ckpt, P));
        }
    }

    @Test
    void allFormatsHaveTensorNames() {
        for (WeightFormat f : WeightFormat.ALL) {
            List<ExpertTensors.Entry> entries = ExpertTensors.perExpert(f, "x", 256, 256);
            Set<String> names = new java.util.HashSet<>();
            entries.forEach(en -> names.add(en.name()));
            assertEquals(entries.size(), names.size(), f.text());
            assertEquals(1 + (f.blockScale() == WeightFormat.BlockScale.NONE ? 0 : 1)
                    + (f.rowScale() == WeightFormat.RowScale.NONE ? 0 : 1), entries.size(), f.text());
        }
    }
}
