package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.TunedPoolFixture;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A tuned pool for the decoder's experts: the tiny Qwen3's pool (one-token warps and 16-pair tiles
 * for each half) keyed to one kind at one sequence and the other at eight, and pools that do not fit
 * the model refused by name before anything runs on a GPU.
 */
class TunedPoolTest {
    /** The tiny Qwen3's pool, in the bundle's kernel files so that a GPU host loads it compiled. */
    static final String POOL_RESOURCE = "/gpu-decoder-kernels/qwen3_moe-tuned-pool.moe";
    /** The tiny models' SM count for the keyed choice: the H100's and the H200's. */
    private static final int SMS = 132;

    /** The pool's kernels as the resource holds them. */
    static List<KernelSpec> poolKernels() throws IOException {
        try (InputStream in = TunedPoolTest.class.getResourceAsStream(POOL_RESOURCE)) {
            return SpecParser.parseAll(new String(in.readAllBytes(), StandardCharsets.UTF_8), POOL_RESOURCE);
        }
    }

    /**
     * Made-up cost models that key the one-token warps to one sequence and the 16-pair tiles to eight
     * (as the decoder's catalogue pairs do), so the GPU test sees both kinds run from one pool.
     */
    static Map<KernelSpec, WaveCostModel> madeUpModels(List<KernelSpec> kernels) {
        Map<KernelSpec, WaveCostModel> models = new LinkedHashMap<>();
        for (KernelSpec k : kernels) {
            models.put(k, k.schedule() instanceof OutputCentric ? new WaveCostModel(1, 0, 0.02, 0, 0, 3)
                    : new WaveCostModel(3, 0, 0.01, 0, 0, 3));
        }
        return models;
    }

    /** Writes the tiny Qwen3's pool with a made-up profile into {@code dir}. */
    static void writePool(Path dir) throws IOException {
        TunedPoolFixture.write(dir, madeUpModels(poolKernels()), SMS);
    }

    @Test
    void theResourceHoldsTheTinyQwen3sFirstOneTokenAndSixteenPairCandidates() throws IOException {
        ModelConfig c = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        MoeBlock block = MoeBlock.of(c, WeightFormat.BF16, dev.moeforge.dsl.ir.GateUpLayout.STACKED, false);
        List<KernelSpec> expected = new java.util.ArrayList<>();
        for (Problem.ExpertProblem p : List.<Problem.ExpertProblem>of(block.gateUp(), block.down())) {
            var pool = dev.moeforge.dsl.schedule.ConfigPool.of(p, Target.SM_90A);
            String half = p instanceof Problem.ExpertGateUp ? "gate_up" : "down";
            var oneToken = pool.stream().filter(s -> s instanceof OutputCentric oc && oc.tokensPerCta() == 1).findFirst().orElseThrow();
            var tiles = pool.stream().filter(s -> s instanceof ExpertCentric e && e.blockM() == 16).findFirst().orElseThrow();
            for (var s : List.of(oneToken, tiles)) {
                String name = "tuned_" + half + "_" + dev.moeforge.dsl.schedule.Candidates.name(s);
                expected.add(p instanceof Problem.ExpertGateUp g
                        ? KernelBuilder.named(name).expertGateUp(g.shape()).layout(g.layout()).weights(g.weights()).schedule(s).epilogue(block.gateUpEpilogue())
                                .target(Target.SM_90A).build()
                        : KernelBuilder.named(name).expertDown(p.shape()).weights(p.weights()).schedule(s).epilogue(block.downEpilogue()).target(Target.SM_90A)
                                .build());
            }
        }
        assertEquals(SpecPrinter.printAll(expected), SpecPrinter.printAll(poolKernels()), "the resource " + POOL_RESOURCE
                + " (print the expected text into it when the pool's candidates change)");
    }

    @Test
    void theMadeUpProfileKeysTheOneTokenWarpsToOneSequenceAndTheTilesToEight(@TempDir Path dir) throws IOException {
        writePool(dir);
        PoolDirectory.Loaded pool = PoolDirectory.load(dir);
        DispatchTable table = DispatchTable.of(pool.fit(), pool.fit().fit(WaveCostModel.MAX_TERMS));
        for (int batch : new int[] {1, 8}) {
            int[] rows = table.keyedOnTokens(batch, 2, SMS);
            Class<?> kind = batch == 1 ? OutputCentric.class : ExpertCentric.class;
            assertInstanceOf(kind, pool.kernels().get(table.gateUp().get(rows[0]).name()).schedule(), "gate_up at " + batch);
            assertInstanceOf(kind, pool.kernels().get(table.down().get(rows[1]).name()).schedule(), "down at " + batch);
        }
    }

    @Test
    void aPoolOfAnotherGeometryIsRefusedWithTheTuneCommandForTheModel(@TempDir Path dir) throws IOException {
        writePool(dir);
        ModelConfig mixtral = ModelConfig.read(RandomModelTest.tiny(Architecture.MIXTRAL));
        var e = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, mixtral, Target.SM_90A));
        assertTrue(e.getMessage().contains("is of H=64, I=32, E=8, top-2") && e.getMessage().contains("(H=64, I=64, E=4, top-2, sm_90a)")
                && e.getMessage().contains("moeforge tune --shape 64,64,4,2 --target sm_90a"), e.getMessage());
        ModelConfig qwen3 = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        var target = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, qwen3, Target.SM_100A));
        assertTrue(target.getMessage().contains("is for sm_90a") && target.getMessage().contains("(and 1 more)"), target.getMessage());
    }

    @Test
    void aBatchOutsideTheProfiledOnesKeepsTheCataloguesPair(@TempDir Path dir) throws IOException {
        writePool(dir);
        TunedPool pool = TunedPool.read(dir, ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE)), Target.SM_90A);
        assertTrue(pool.covers(1) && pool.covers(8) && pool.covers(300), "the made-up profile times 1 to 300 tokens");
        assertTrue(!pool.covers(301));
        assertTrue(pool.outside(301).contains("batch 301 lies outside the batches " + dir + " was profiled at (1 to 300 tokens)"),
                pool.outside(301));
    }

    @Test
    void aPoolOfAnotherFormatIsRefusedOnceTheExpertsFormatIsKnown(@TempDir Path dir) throws IOException {
        writePool(dir);
        ModelConfig c = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        TunedPool pool = TunedPool.read(dir, c, Target.SM_90A);
        MoeBlock nvfp4 = MoeBlock.of(c, WeightFormat.NVFP4, dev.moeforge.dsl.ir.GateUpLayout.STACKED, false);
        List<KernelSpec> bf16 = poolKernels();
        pool.checkComputes(bf16.get(0), bf16.get(2));  // the pool's own function passes
        KernelSpec gateUp = bf16.get(1).withProblem(nvfp4.gateUp());
        var e = assertThrows(IllegalArgumentException.class, () -> pool.checkComputes(gateUp, bf16.get(2)));
        assertTrue(e.getMessage().contains("takes bf16 weights") && e.getMessage().contains("moeforge tune --format"), e.getMessage());
    }

    @Test
    void aPoolWithoutItsProfileIsRefusedWithTheCommandThatMakesIt(@TempDir Path dir) throws IOException {
        writePool(dir);
        Files.delete(dir.resolve(PoolDirectory.PROFILE_FILE));
        ModelConfig c = ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
        var e = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, c, Target.SM_90A));
        assertTrue(e.getMessage().contains("moeforge profile " + dir), e.getMessage());
    }

    @Test
    void aTunedPoolAndAnExpertKindCannotBothChooseTheExperts() {
        var e = assertThrows(IllegalArgumentException.class, () -> new GpuDecoder.KernelChoice(GpuDecoder.ProjectionKernels.BY_BATCH,
                GpuDecoder.AttentionKernels.BY_BATCH, GpuDecoder.ExpertKernels.EXPERT_CENTRIC, Optional.of(Path.of("pool"))));
        assertTrue(e.getMessage().contains("EXPERT_CENTRIC"), e.getMessage());
    }
}
