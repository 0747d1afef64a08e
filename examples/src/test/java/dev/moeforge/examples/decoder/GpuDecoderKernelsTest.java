package dev.moeforge.examples.decoder;

import static dev.moeforge.examples.decoder.GpuDecoder.ProjectionKernels.BY_BATCH;
import static dev.moeforge.examples.decoder.GpuDecoder.ProjectionKernels.GEMV;
import static dev.moeforge.examples.decoder.GpuDecoder.ProjectionKernels.MMA;
import static dev.moeforge.examples.decoder.GpuDecoder.ProjectionKernels.TILES;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.LinearMma;
import dev.moeforge.dsl.schedule.OutputCentric;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.ParameterizedTest;

/** Which expert kernels the decoder of the built-in geometry takes by batch (no GPU). */
class GpuDecoderKernelsTest {
    static GpuDecoder.Kernels kernels(int batch) {
        return kernelsWith(batch, BY_BATCH);
    }

    static GpuDecoder.Kernels kernelsWith(int batch, GpuDecoder.ProjectionKernels projections) {
        ModelPreset p = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        ModelConfig c = ModelConfig.parse(RandomModel.config(p, SafetensorsDType.BF16, new ObjectMapper()));
        return GpuDecoder.Kernels.of(c, MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false), Target.SM_90A, batch,
                projections);
    }

    @Test
    void outputCentricTilesBelowThreeTokensThenTheCataloguesExpertCentricPair() {
        assertEquals(1, assertInstanceOf(OutputCentric.class, kernels(1).gateUp().schedule()).tokensPerCta());
        assertEquals(1, assertInstanceOf(OutputCentric.class, kernels(GpuDecoder.BF16_EXPERT_CENTRIC_FROM - 1).down().schedule())
                .tokensPerCta());
        for (int batch : new int[] {GpuDecoder.BF16_EXPERT_CENTRIC_FROM, 4, 12, 32, 256}) {
            GpuDecoder.Kernels k = kernels(batch);
            assertEquals("qwen3_30b_a3b_gate_up_m16", k.gateUp().name());
            assertEquals("qwen3_30b_a3b_down_m16", k.down().name());
            assertEquals(16, assertInstanceOf(ExpertCentric.class, k.down().schedule()).blockM());
        }
        // either family forced at every batch; the router stays the batch's
        ModelPreset p = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        ModelConfig c = ModelConfig.parse(RandomModel.config(p, SafetensorsDType.BF16, new ObjectMapper()));
        MoeBlock block = MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false);
        GpuDecoder.Kernels tiles = GpuDecoder.Kernels.of(c, block, Target.SM_90A, 2, BY_BATCH, GpuDecoder.ExpertKernels.EXPERT_CENTRIC);
        assertEquals("qwen3_30b_a3b_gate_up_m16", tiles.gateUp().name());
        assertEquals(kernels(2).router(), tiles.router());
        GpuDecoder.Kernels warps = GpuDecoder.Kernels.of(c, block, Target.SM_90A, 32, BY_BATCH, GpuDecoder.ExpertKernels.OUTPUT_CENTRIC);
        assertEquals(32, assertInstanceOf(OutputCentric.class, warps.gateUp().schedule()).tokensPerCta());
        // NVFP4 experts: the tensor-core decode pair up to 4 sequences, the 4-bit expert-centric pair from 5
        MoeBlock nvfp4 = MoeBlock.of(c, WeightFormat.NVFP4, GateUpLayout.STACKED, false);
        assertEquals("qwen3_30b_a3b_nvfp4_gate_up", GpuDecoder.Kernels.of(c, nvfp4, Target.SM_90A, 1).gateUp().name());
        assertEquals("qwen3_30b_a3b_nvfp4_gate_up",
                GpuDecoder.Kernels.of(c, nvfp4, Target.SM_90A, GpuDecoder.EXPERT_CENTRIC_FROM - 1).gateUp().name());
        GpuDecoder.Kernels nvfp4Batch = GpuDecoder.Kernels.of(c, nvfp4, Target.SM_90A, GpuDecoder.EXPERT_CENTRIC_FROM);
        assertEquals("qwen3_30b_a3b_nvfp4_gate_up_m16", nvfp4Batch.gateUp().name());
        assertEquals("qwen3_30b_a3b_nvfp4_down_m16", nvfp4Batch.down().name());
        // MXFP4 experts keep the catalogue's tensor-core decode at every batch: no tile is carried over it
        MoeBlock mxfp4 = MoeBlock.of(c, WeightFormat.MXFP4, GateUpLayout.STACKED, false);
        assertEquals("qwen3_30b_a3b_mxfp4_gate_up", GpuDecoder.Kernels.of(c, mxfp4, Target.SM_90A, 32).gateUp().name());
        assertEquals("qwen3_30b_a3b_mxfp4_down", GpuDecoder.Kernels.of(c, mxfp4, Target.SM_90A, 32).down().name());
        // FP8 block experts: the catalogue's one-token pair, then its W8A8 16-pair pair from 5 sequences
        MoeBlock fp8 = MoeBlock.of(c, WeightFormat.FP8_BLOCK128, GateUpLayout.STACKED, false);
        assertEquals("qwen3_30b_a3b_fp8_e4m3_block128_gate_up", GpuDecoder.Kernels.of(c, fp8, Target.SM_90A, 1).gateUp().name());
        GpuDecoder.Kernels fp8Batch = GpuDecoder.Kernels.of(c, fp8, Target.SM_90A, GpuDecoder.EXPERT_CENTRIC_FROM);
        assertEquals("qwen3_30b_a3b_fp8_e4m3_block128_gate_up_m16", fp8Batch.gateUp().name());
        assertEquals("qwen3_30b_a3b_fp8_e4m3_block128_down_m16", fp8Batch.down().name());
    }

    /**
     * A model off the catalogue: its expert halves take the catalogue's schedule of the kind the batch
     * wants, carried to its geometry (BF16: the 16-pair tiles from 3 sequences), not one token a block
     * at every batch; one token a block keeps its own schedule.
     */
    @Test
    void aModelOffTheCatalogueTakesTheCataloguesTilesCarried() {
        ModelConfig olmoe = ModelConfig.parse(RandomModel.config(ModelPreset.of(Architecture.OLMOE, "olmoe-1b-7b"),
                SafetensorsDType.BF16, new ObjectMapper()));
        MoeBlock block = MoeBlock.of(olmoe, WeightFormat.BF16, GateUpLayout.STACKED, false);
        assertEquals(1, assertInstanceOf(OutputCentric.class, GpuDecoder.Kernels.of(olmoe, block, Target.SM_90A, 1).gateUp().schedule())
                .tokensPerCta());
        assertEquals(1, assertInstanceOf(OutputCentric.class, GpuDecoder.Kernels.of(olmoe, block, Target.SM_90A, 2).down().schedule())
                .tokensPerCta());
        GpuDecoder.Kernels three = GpuDecoder.Kernels.of(olmoe, block, Target.SM_90A, 3);
        assertEquals("experts_gate_up", three.gateUp().name());
        assertEquals(16, assertInstanceOf(ExpertCentric.class, three.gateUp().schedule()).blockM());
        GpuDecoder.Kernels many = GpuDecoder.Kernels.of(olmoe, block, Target.SM_90A, 32);
        assertEquals(16, assertInstanceOf(ExpertCentric.class, many.gateUp().schedule()).blockM());
        assertEquals(16, assertInstanceOf(ExpertCentric.class, many.down().schedule()).blockM());
    }

    /**
     * A decode step's attention by kv group on the tensor cores where a group has 2 to 16 heads of a
     * size the tiles take (the built-in model: 8 heads of 128; slices for about 256 blocks, in equal runs of
     * whole 64-position tiles of the cache and at most 16) and the batch or the cache is large; by head
     * below that (in clusters up to 512 positions), for OLMoE's groups of one, for head_dim 256 and where
     * the choice says so.
     */
    @Test
    void decodeAttentionByKvGroupWhereTheGroupFitsATile() {
        ModelPreset p = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        ModelConfig qwen = ModelConfig.parse(RandomModel.config(p, SafetensorsDType.BF16, new ObjectMapper()));
        GpuDecoder.DecodeAttention one = GpuDecoder.DecodeAttention.of(qwen, 512, 1, GpuDecoder.AttentionKernels.BY_GROUP);
        assertEquals("attention_decode_group_128", one.kernel());
        assertEquals(4, one.blocks());
        assertEquals(8, one.slices());
        assertEquals(GpuDecoder.groupAttentionBytes(128), one.sharedBytes());
        assertEquals(2, GpuDecoder.DecodeAttention.of(qwen, 512, 32, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        // whole 64-position tiles a slice: 6 slices' worth of blocks for 12 sequences are 4 slices of two tiles
        assertEquals(4, GpuDecoder.DecodeAttention.of(qwen, 512, 12, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals(8, GpuDecoder.DecodeAttention.of(qwen, 512, 8, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals(8, GpuDecoder.DecodeAttention.of(qwen, 4096, 8, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        // by the batch: by head for a few sequences below 4,096 positions (in clusters up to 512 positions and 256
        // blocks: one sequence of 32 heads); by group from 8 sequences, from one over 4,096
        assertEquals("attention_decode_cluster_128", GpuDecoder.DecodeAttention.of(qwen, 512, 1, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals(GpuDecoder.CLUSTER_ATTENTION_SLICES, GpuDecoder.DecodeAttention.of(qwen, 512, 1, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals("attention_decode_128", GpuDecoder.DecodeAttention.of(qwen, 512, 7, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_128", GpuDecoder.DecodeAttention.of(qwen, 512, 8, GpuDecoder.AttentionKernels.BY_HEAD).kernel());
        assertEquals("attention_decode_128", GpuDecoder.DecodeAttention.of(qwen, 513, 1, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_group_128", GpuDecoder.DecodeAttention.of(qwen, 512, 8, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_128", GpuDecoder.DecodeAttention.of(qwen, 2048, 4, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_group_128", GpuDecoder.DecodeAttention.of(qwen, 512, 16, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_group_128", GpuDecoder.DecodeAttention.of(qwen, 2048, 8, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals("attention_decode_group_128", GpuDecoder.DecodeAttention.of(qwen, 4096, 1, GpuDecoder.AttentionKernels.BY_BATCH).kernel());
        assertEquals(1, GpuDecoder.DecodeAttention.of(qwen, 512, 128, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals(GpuDecoder.GROUP_ATTENTION_SLICES, GpuDecoder.DecodeAttention.of(qwen, 4096, 1, GpuDecoder.AttentionKernels.BY_BATCH).slices());
        assertEquals(2, GpuDecoder.DecodeAttention.of(qwen, 100, 1, GpuDecoder.AttentionKernels.BY_GROUP).slices());
        assertEquals("attention_decode_cluster_128",
                GpuDecoder.DecodeAttention.of(qwen, 512, 1, GpuDecoder.AttentionKernels.BY_HEAD).kernel());
        assertEquals("attention_decode_128",
                GpuDecoder.DecodeAttention.of(qwen, 1024, 1, GpuDecoder.AttentionKernels.BY_HEAD).kernel());
        ModelPreset o = ModelPreset.of(Architecture.OLMOE, "olmoe-1b-7b");
        ModelConfig olmoe = ModelConfig.parse(RandomModel.config(o, SafetensorsDType.BF16, new ObjectMapper()));
        GpuDecoder.DecodeAttention byHead = GpuDecoder.DecodeAttention.of(olmoe, 2048, 1, GpuDecoder.AttentionKernels.BY_BATCH);
        assertEquals("attention_decode_128", byHead.kernel());
        assertEquals(16, byHead.blocks());
        assertEquals(GpuDecoder.attentionSplits(2048, 1, 16), byHead.slices());
        assertEquals(0, byHead.sharedBytes());
    }

    /** Attention slices: one per 64 positions kept, at least enough for 512 blocks over the batch's heads, at most 64. */
    @Test
    void attentionSlicesFollowTheContextAndTheBatch() {
        assertEquals(16, GpuDecoder.attentionSplits(133, 1, 32));
        assertEquals(3, GpuDecoder.attentionSplits(133, 8, 32));
        assertEquals(8, GpuDecoder.attentionSplits(512, 8, 32));
        assertEquals(3, GpuDecoder.attentionSplits(133, 64, 32));
        assertEquals(64, GpuDecoder.attentionSplits(4096, 1, 32));
        assertEquals(64, GpuDecoder.attentionSplits(40960, 64, 32));
        assertEquals(64, GpuDecoder.attentionSplits(20, 1, 4));
        assertEquals(1, GpuDecoder.attentionSplits(20, 256, 32));
    }

    /** From a batch of 16 the decode projections are one expert's tensor-core tiles over the batch's rows; below, linear kernels. */
    @Test
    void decodeProjectionsOnTilesFromALargeBatch() {
        assertInstanceOf(LinearMma.class, kernels(GpuDecoder.PROJECTION_TILES_FROM - 1).qkv().schedule());
        for (int batch : new int[] {GpuDecoder.PROJECTION_TILES_FROM, 128}) {
            GpuDecoder.Kernels k = kernels(batch);
            ExpertCentric tile = assertInstanceOf(ExpertCentric.class, k.o().schedule());
            assertEquals(Math.min(64, 16 * Math.ceilDiv(batch, 16)), tile.blockM());
            assertEquals(new dev.moeforge.dsl.ir.ExpertShape(2048, 4096, 1, 1),
                    assertInstanceOf(dev.moeforge.dsl.ir.Problem.ExpertDown.class, k.o().problem()).shape());
        }
    }

    /**
     * One sequence's projections and LM head: one warp per row, a row's loads in one step; from two
     * sequences the tensor cores, the batch in tiles of 8 up to 64 a block; where the choice is forced,
     * that kind at every batch (the LM head keeps the batch's choice under tiles).
     */
    @Test
    void projectionKernelsFollowTheBatch() {
        var one = assertInstanceOf(LinearGemv.class, GpuDecoder.linear("o_proj", 4096, 2048, false, Target.SM_90A, 1, BY_BATCH).schedule());
        assertEquals(1, one.tokensPerCta());
        assertEquals(16, one.kUnroll());
        var three = assertInstanceOf(LinearMma.class, GpuDecoder.linear("qkv_proj", 2048, 5120, false, Target.SM_90A, 3, BY_BATCH).schedule());
        assertEquals(8, three.tokensPerCta());
        var many = assertInstanceOf(LinearMma.class, GpuDecoder.linear("o_proj", 4096, 2048, false, Target.SM_90A, 48, BY_BATCH).schedule());
        assertEquals(48, many.tokensPerCta());
        assertEquals(16, many.outputsPerCta());
        var most = assertInstanceOf(LinearMma.class, GpuDecoder.linear("o_proj", 4096, 2048, false, Target.SM_90A, 200, MMA).schedule());
        assertEquals(64, most.tokensPerCta());
        var gemv = assertInstanceOf(LinearGemv.class, GpuDecoder.linear("o_proj", 4096, 2048, false, Target.SM_90A, 32, GEMV).schedule());
        assertEquals(8, gemv.tokensPerCta());
        assertEquals(8, gemv.kUnroll());
        assertInstanceOf(LinearMma.class, GpuDecoder.linear("o_proj", 4096, 2048, false, Target.SM_90A, 1, MMA).schedule());
        // rows that are not whole 16-byte loads stay on linear_gemv
        assertInstanceOf(LinearGemv.class, GpuDecoder.linear("odd", 2052, 64, false, Target.SM_90A, 8, MMA).schedule());
        assertInstanceOf(ExpertCentric.class, kernelsWith(8, TILES).qkv().schedule());
        assertInstanceOf(LinearMma.class, kernelsWith(8, TILES).head().schedule());
        assertInstanceOf(LinearGemv.class, kernelsWith(8, GEMV).head().schedule());
    }

    /**
     * A prompt's kernels: the projections as one expert's down half on wgmma tiles of 128 rows whose
     * stages a producer warpgroup fills on sm_90a, and on mma.sync tiles elsewhere, the catalogue's
     * tiled router with the decode router's rule, the experts on producer-fed wgmma tiles of 128
     * pairs; an NVFP4 model's experts on mma.sync tiles of 64 pairs that decode each slice of 4-bit weights.
     */
    @Test
    void promptKernelsAreTensorCoreTiles() {
        GpuDecoder.PromptKernels p = kernels(1).prompt();
        ExpertCentric qkv = assertInstanceOf(ExpertCentric.class, p.qkv().schedule());
        assertTrue(qkv.wgmma() && qkv.tma() && qkv.producer());
        assertEquals(128, qkv.blockM());
        var problem = assertInstanceOf(dev.moeforge.dsl.ir.Problem.ExpertDown.class, p.qkv().problem());
        assertEquals(new dev.moeforge.dsl.ir.ExpertShape(5120, 2048, 1, 1), problem.shape());
        assertInstanceOf(dev.moeforge.dsl.schedule.RouterTiled.class, p.router().schedule());
        assertEquals(kernels(1).router().epilogue(), p.router().epilogue());
        ExpertCentric gateUp = assertInstanceOf(ExpertCentric.class, p.gateUp().schedule());
        ExpertCentric down = assertInstanceOf(ExpertCentric.class, p.down().schedule());
        assertTrue(gateUp.producer() && down.producer());
        assertEquals(128, gateUp.blockM());
        // the experts' k slots are added by the combine launch; the projections (top-1) add theirs in the tiles
        assertTrue(down.combineKernel() && !qkv.combineKernel(), "combine launch for the experts' down only");

        ModelPreset preset = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        ModelConfig c = ModelConfig.parse(RandomModel.config(preset, SafetensorsDType.BF16, new ObjectMapper()));
        GpuDecoder.PromptKernels other = GpuDecoder.Kernels.of(c, MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false),
                Target.SM_120A, 1).prompt();
        assertTrue(!assertInstanceOf(ExpertCentric.class, other.qkv().schedule()).wgmma(), "no wgmma off sm_90a");
        GpuDecoder.PromptKernels nvfp4 = GpuDecoder.Kernels.of(c, MoeBlock.of(c, WeightFormat.NVFP4, GateUpLayout.STACKED, false),
                Target.SM_90A, 1).prompt();
        ExpertCentric fourBit = assertInstanceOf(ExpertCentric.class, nvfp4.gateUp().schedule());
        assertEquals(64, fourBit.blockM());
        assertTrue(!fourBit.wgmma() && !fourBit.tma(), "4-bit tiles decode on mma.sync");
        assertEquals(WeightFormat.NVFP4, ((dev.moeforge.dsl.ir.Problem.ExpertDown) nvfp4.down().problem()).weights());
        assertNotNull(nvfp4.qkv());
        // the tiny Mixtral (H = I = 64) too, which GpuDecoderGpuTest runs with NVFP4 experts; not the tiny Qwen3 (I = 32)
        ModelConfig mixtral = ModelConfig.parse(RandomModel.config(ModelPreset.of(Architecture.MIXTRAL, "tiny"), SafetensorsDType.BF16,
                new ObjectMapper()));
        assertNotNull(GpuDecoder.Kernels.of(mixtral, MoeBlock.of(mixtral, WeightFormat.NVFP4, GateUpLayout.STACKED, false),
                Target.SM_90A, 1).prompt().gateUp());
        // experts with biases (gpt-oss): down off the producer tile, whose 128 sums a thread beside a bias spilled
        ModelConfig gptOss = ModelConfig.parse(RandomModel.config(ModelPreset.of(Architecture.GPT_OSS, "tiny"), SafetensorsDType.BF16,
                new ObjectMapper()));
        GpuDecoder.PromptKernels biased = GpuDecoder.Kernels.of(gptOss, MoeBlock.of(gptOss, WeightFormat.BF16, GateUpLayout.INTERLEAVED,
                true), Target.SM_90A, 1).prompt();
        ExpertCentric biasedDown = assertInstanceOf(ExpertCentric.class, biased.down().schedule());
        assertTrue(biasedDown.wgmma() && !biasedDown.producer());
        // a dense MLP's down (top-1) adds its one slot in the tiles: the combine launch would only copy y
        ModelConfig withDense = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        assertTrue(withDense.moeLayers().contains(false), "the tiny Qwen3 has a dense layer");
        GpuDecoder.PromptKernels dense = GpuDecoder.Kernels.of(withDense, MoeBlock.of(withDense, WeightFormat.BF16, GateUpLayout.STACKED,
                false), Target.SM_90A, 1).prompt();
        assertTrue(!assertInstanceOf(ExpertCentric.class, dense.denseDown().schedule()).combineKernel(), "in-tile combine at top-1");
    }

    /**
     * The bundle precompiles the decoder's kernels from one file per model and batch; a kernel the
     * decoder loads that its file lacks would be compiled on the GPU host instead. Every kernel of
     * the tiny models at the GPU tests' batches and of the built-in model at the benchmark's is there.
     */
    @ParameterizedTest
    @EnumSource(Architecture.class)
    void theBundlesKernelFilesHoldEveryKernelTheDecoderLoads(Architecture arch) throws Exception {
        java.nio.file.Path dir = RandomModelTest.tiny(arch);
        ModelConfig c = ModelConfig.read(dir);
        MoeBlock block;
        try (dev.moeforge.checkpoint.Checkpoint ckpt = dev.moeforge.checkpoint.Checkpoint.open(dir)) {
            String moe = ModelWeights.moePrefix(c, ckpt, ModelWeights.layerPrefix(c.moeLayers().indexOf(true)));
            var experts = dev.moeforge.checkpoint.CheckpointExperts.load(ckpt, moe, c.experts());
            block = MoeBlock.of(c, experts.gateUp().format(), experts.layout(), experts.gateUpBias().isPresent());
        }
        int[] batches = arch == Architecture.QWEN3_MOE ? new int[] {1, 2, 4, 16, 128} : new int[] {1, 2, 16};
        for (int batch : batches) {
            assertFileHolds(arch.modelType() + "-b" + batch + ".moe", GpuDecoder.Kernels.of(c, block, Target.SM_90A, batch));
        }
        if (arch == Architecture.QWEN3_MOE) {
            for (int batch : new int[] {1, 2, 4, 8, 16, 32, 64}) {
                assertFileHolds("builtin-b" + batch + ".moe", kernels(batch));
            }
            ModelPreset preset = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
            ModelConfig builtin = ModelConfig.parse(RandomModel.config(preset, SafetensorsDType.BF16, new ObjectMapper()));
            for (int batch : new int[] {1, 8}) {
                assertFileHolds("builtin-nvfp4-b" + batch + ".moe", GpuDecoder.Kernels.of(builtin, MoeBlock.of(builtin, WeightFormat.NVFP4,
                        GateUpLayout.STACKED, false), Target.SM_90A, batch));
                assertFileHolds("builtin-fp8-b" + batch + ".moe", GpuDecoder.Kernels.of(builtin, MoeBlock.of(builtin,
                        WeightFormat.FP8_BLOCK128, GateUpLayout.STACKED, false), Target.SM_90A, batch));
                ModelConfig wide = ModelConfig.read(RandomModelTest.written(RandomModelTest.WIDE_QWEN3));
                assertFileHolds("qwen3_moe-tiny128-fp8-b" + batch + ".moe", GpuDecoder.Kernels.of(wide, MoeBlock.of(wide,
                        WeightFormat.FP8_BLOCK128, GateUpLayout.STACKED, false), Target.SM_90A, batch));
            }
        }
    }

    private static void assertFileHolds(String name, GpuDecoder.Kernels kernels) throws java.io.IOException {
        try (java.io.InputStream in = GpuDecoderKernelsTest.class.getResourceAsStream("/gpu-decoder-kernels/" + name)) {
            assertNotNull(in, "gpu-decoder-kernels/" + name + " is missing");
            String file = new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            for (dev.moeforge.dsl.ir.KernelSpec k : kernels.all()) {
                assertTrue(file.contains(dev.moeforge.dsl.text.SpecPrinter.print(k)), name + " lacks kernel " + k.name());
            }
        }
    }
}
