package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ConfigPool;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolStore;
import dev.moeforge.runtime.dispatch.TunedPoolFixture;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A tuned pool for the decoder's experts: the tiny Qwen3's pool (one-token warps and 16-pair tiles
 * for each half) keyed to one kind at one sequence and the other at eight, the batches its profile
 * covers, and pools that do not fit the model refused by name before anything runs on a GPU.
 */
public class TunedPoolTest {
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

    /** Writes the tiny Qwen3's pool with a made-up profile of 1 to 300 tokens into {@code dir}. */
    static void writePool(Path dir) throws IOException {
        TunedPoolFixture.write(dir, madeUpModels(poolKernels()), SMS);
    }

    /** As above, the profile naming {@code device} as the GPU it timed. */
    public static void writePool(Path dir, String device) throws IOException {
        TunedPoolFixture.write(dir, madeUpModels(poolKernels()), SMS, device);
    }

    private static ModelConfig tinyQwen3() {
        return ModelConfig.read(RandomModelTest.tiny(Architecture.QWEN3_MOE));
    }

    @Test
    void theResourceHoldsTheTinyQwen3sFirstOneTokenAndSixteenPairCandidates() throws IOException {
        MoeBlock block = MoeBlock.of(tinyQwen3(), WeightFormat.BF16, GateUpLayout.STACKED, false);
        List<KernelSpec> expected = new ArrayList<>();
        for (Problem.ExpertProblem p : List.<Problem.ExpertProblem>of(block.gateUp(), block.down())) {
            List<Schedule<Problem.ExpertProblem>> pool = ConfigPool.of(p, Target.SM_90A);
            String half = p instanceof Problem.ExpertGateUp ? "gate_up" : "down";
            var oneToken = pool.stream().filter(s -> s instanceof OutputCentric oc && oc.tokensPerCta() == 1).findFirst().orElseThrow();
            var tiles = pool.stream().filter(s -> s instanceof ExpertCentric e && e.blockM() == 16).findFirst().orElseThrow();
            for (var s : List.of(oneToken, tiles)) {
                String name = "tuned_" + half + "_" + Candidates.name(s);
                expected.add(p instanceof Problem.ExpertGateUp g
                        ? KernelBuilder.named(name).expertGateUp(g.shape()).layout(g.layout()).weights(g.weights()).schedule(s)
                                .epilogue(block.gateUpEpilogue()).target(Target.SM_90A).build()
                        : KernelBuilder.named(name).expertDown(p.shape()).weights(p.weights()).schedule(s).epilogue(block.downEpilogue())
                                .target(Target.SM_90A).build());
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

    /** A profile from 8 tokens does not cover one sequence, even where a held-out point lies there. */
    @Test
    void aPoolCoversTheBatchesItsProfileTrainedOn(@TempDir Path dir) throws IOException {
        TunedPoolFixture.write(dir, madeUpModels(poolKernels()), SMS, new int[] {8, 40, 300}, new int[] {1, 16, 400});
        TunedPool pool = TunedPool.read(dir, tinyQwen3());
        assertFalse(pool.covers(1), "below the profiled batches");
        assertTrue(pool.covers(8) && pool.covers(16) && pool.covers(300));
        assertFalse(pool.covers(400), "above them, where only a held-out point lies");
        assertTrue(pool.outside(1).contains("batch 1 lies outside the batches " + dir + " was profiled at (8 to 300 tokens)"),
                pool.outside(1));
    }

    @Test
    void aPoolOfAnotherGeometryOrTargetIsRefusedWithTheTuneCommandForTheModel(@TempDir Path dir) throws IOException {
        writePool(dir);
        ModelConfig mixtral = ModelConfig.read(RandomModelTest.tiny(Architecture.MIXTRAL));
        var e = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, mixtral));
        assertTrue(e.getMessage().contains("is of H=64, I=32, E=8, top-2") && e.getMessage().contains("experts (H=64, I=64, E=4, top-2)")
                && e.getMessage().contains("moeforge tune --shape 64,64,4,2 --out DIR"), e.getMessage());
        TunedPool pool = TunedPool.read(dir, tinyQwen3());
        var target = assertThrows(IllegalArgumentException.class, () -> pool.checkTarget(Target.SM_100A));
        assertTrue(target.getMessage().contains("is for sm_90a") && target.getMessage().contains("(and 1 more)")
                && target.getMessage().contains("--target sm_100a"), target.getMessage());
        pool.checkTarget(Target.SM_90A);
    }

    @Test
    void aPoolOfAnotherFormatIsRefusedOnceTheExpertsFormatIsKnown(@TempDir Path dir) throws IOException {
        writePool(dir);
        ModelConfig c = tinyQwen3();
        TunedPool pool = TunedPool.read(dir, c);
        pool.checkComputes(MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false));  // the pool's own function passes
        var e = assertThrows(IllegalArgumentException.class,
                () -> pool.checkComputes(MoeBlock.of(c, WeightFormat.NVFP4, GateUpLayout.STACKED, false)));
        assertTrue(e.getMessage().contains(": gate_up kernels: 2 with bf16 weights (the model's experts: nvfp4); down kernels: 2 with "
                + "bf16 weights (the model's experts: nvfp4) (") && e.getMessage().contains("decode other experts without --tuned"),
                e.getMessage());
        var layoutAndBias = assertThrows(IllegalArgumentException.class,
                () -> pool.checkComputes(MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.INTERLEAVED, true)));
        assertTrue(layoutAndBias.getMessage().contains("gate_up kernels: 2 reading gate and up stacked (the model's experts: interleaved); "
                + "gate_up kernels: 2 without expert biases (the model's experts have them); down kernels: 2 without expert biases"),
                layoutAndBias.getMessage());
        var epilogue = assertThrows(IllegalArgumentException.class, () -> pool.checkComputes(MoeBlock.of(
                ModelConfig.read(RandomModelTest.tiny(Architecture.GPT_OSS)), WeightFormat.BF16, GateUpLayout.STACKED, false)));
        assertTrue(epilogue.getMessage().contains("gate_up kernels: 2 of H=64, I=32, E=8, top-2 (the model's experts: H=64, I=32, E=4, "
                + "top-2)") && epilogue.getMessage().contains("gate_up kernels: 2 ending in store(gated(silu"), epilogue.getMessage());
    }

    @Test
    void aPoolWithoutItsFilesIsRefusedWithTheCommandThatMakesThem(@TempDir Path dir) throws IOException {
        writePool(dir);
        Files.delete(dir.resolve(PoolDirectory.PROFILE_FILE));
        var profile = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, tinyQwen3()));
        assertTrue(profile.getMessage().contains("moeforge profile " + dir), profile.getMessage());
        Path empty = Files.createDirectory(dir.resolve("empty"));
        writePool(empty);
        Files.delete(empty.resolve(PoolDirectory.KERNELS_FILE));
        var kernels = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(empty, tinyQwen3()));
        assertTrue(kernels.getMessage().contains(empty.resolve(PoolDirectory.KERNELS_FILE) + " does not exist"), kernels.getMessage());
    }

    /** A pool a layer could not serve from (here: gate_up kernels alone) is refused when it is read, before the GPU. */
    @Test
    void aPoolWithoutADownHalfIsRefusedWhenRead(@TempDir Path dir) throws IOException {
        Map<KernelSpec, WaveCostModel> gateUps = new LinkedHashMap<>(madeUpModels(poolKernels()));
        gateUps.keySet().removeIf(k -> !(k.problem() instanceof Problem.ExpertGateUp));
        TunedPoolFixture.write(dir, gateUps, SMS);
        var e = assertThrows(IllegalArgumentException.class, () -> TunedPool.read(dir, tinyQwen3()));
        assertTrue(e.getMessage().contains("tuned pool " + dir + ": the pool holds no down kernels"), e.getMessage());
    }

    @Test
    void aTunedPoolAndAnExpertKindCannotBothChooseTheExperts(@TempDir Path dir) throws IOException {
        writePool(dir);
        TunedPool pool = TunedPool.read(dir, tinyQwen3());
        var e = assertThrows(IllegalArgumentException.class, () -> new GpuDecoder.KernelChoice(GpuDecoder.ProjectionKernels.BY_BATCH,
                GpuDecoder.AttentionKernels.BY_BATCH, GpuDecoder.ExpertKernels.EXPERT_CENTRIC, new GpuDecoder.TunedPools.Given(pool)));
        assertTrue(e.getMessage().contains("--tuned") && e.getMessage().contains("expert-centric (--experts)"), e.getMessage());
    }

    /**
     * The pool installed for the experts is found by their geometry, format, target and device, and passed over,
     * saying why, where there is none, where it computes another function, or where its copy cannot be read.
     */
    @Test
    void anInstalledPoolServesTheExpertsItFitsOnTheDeviceItWasProfiledOn(@TempDir Path dir) throws IOException {
        ModelConfig c = tinyQwen3();
        MoeBlock block = MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false);
        PoolStore store = new PoolStore(dir.resolve("store"));
        TunedPool.Lookup none = TunedPool.installed(store, c, block, Target.SM_90A, "NVIDIA H200");
        assertTrue(none.pool().isEmpty());
        assertTrue(none.why().orElseThrow().contains("no tuned pool is installed in " + store.directory() + " for these experts (H=64, "
                + "I=32, E=8, top-2, bf16, sm_90a, NVIDIA H200)"), none.why().orElseThrow());
        Path tuned = Files.createDirectory(dir.resolve("tuned"));
        writePool(tuned, "NVIDIA H200");
        Path installed = store.install(tuned).pool().dir();
        TunedPool.Lookup found = TunedPool.installed(store, c, block, Target.SM_90A, "NVIDIA H200");
        assertEquals(installed, found.pool().orElseThrow().dir());
        assertTrue(found.why().isEmpty());
        assertTrue(TunedPool.installed(store, c, block, Target.SM_90A, "NVIDIA H100 80GB HBM3").pool().isEmpty(), "another device");
        assertTrue(TunedPool.installed(store, c, block, Target.SM_100A, "NVIDIA H200").pool().isEmpty(), "another target");
        TunedPool.Lookup biased = TunedPool.installed(store, c, MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, true),
                Target.SM_90A, "NVIDIA H200");
        assertTrue(biased.pool().isEmpty());
        assertTrue(biased.why().orElseThrow().contains("the tuned pool installed at " + installed + " computes other expert layers than "
                + "this model's (gate_up kernels: 2 without expert biases"), biased.why().orElseThrow());
        Files.delete(installed.resolve(PoolDirectory.PROFILE_FILE));
        TunedPool.Lookup broken = TunedPool.installed(store, c, block, Target.SM_90A, "NVIDIA H200");
        assertTrue(broken.pool().isEmpty());
        assertTrue(broken.why().orElseThrow().contains("the tuned pool installed at " + installed + " is passed over (")
                && broken.why().orElseThrow().contains("does not exist"), broken.why().orElseThrow());
    }

    @Test
    void installedPoolsAndAnExpertKindCannotBothChooseTheExperts(@TempDir Path dir) {
        PoolStore store = new PoolStore(dir);
        assertEquals(new GpuDecoder.TunedPools.Installed(store), GpuDecoder.KernelChoice.BY_BATCH.withInstalledPools(store).tunedPools());
        var e = assertThrows(IllegalArgumentException.class, () -> new GpuDecoder.KernelChoice(GpuDecoder.ProjectionKernels.BY_BATCH,
                GpuDecoder.AttentionKernels.BY_BATCH, GpuDecoder.ExpertKernels.OUTPUT_CENTRIC, new GpuDecoder.TunedPools.Installed(store)));
        assertTrue(e.getMessage().contains("the installed tuned pools") && e.getMessage().contains("output-centric (--experts)"),
                e.getMessage());
    }
}
