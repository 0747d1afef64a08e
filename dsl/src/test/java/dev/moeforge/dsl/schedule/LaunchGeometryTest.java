package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.build.OutputTensorCoreBuilder;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.RouterCluster;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.SplitDown;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Grid, block and shared memory of a launch, as the kernel bodies of moeforge_device.cuh index
 * them: gate_up x = ceil(I/W), y = M*k (single token) or ceil(M/T)*min(T*k, E) (tiled); down
 * x = ceil(H/W), y = M or ceil(M/T); block 32*W.
 */
class LaunchGeometryTest {
    private static final ExpertShape QWEN3 = new ExpertShape(2048, 768, 128, 8);

    private static KernelSpec gateUp(ExpertShape shape, int warps, int tokensPerCta) {
        return KernelBuilder.named("gu").expertGateUp(shape)
                .schedule(OutputCentricBuilder.create().warpsPerCta(warps).tokensPerCta(tokensPerCta).build()).build();
    }

    private static KernelSpec down(ExpertShape shape, int warps, int tokensPerCta) {
        return KernelBuilder.named("dn").expertDown(shape)
                .schedule(OutputCentricBuilder.create().warpsPerCta(warps).tokensPerCta(tokensPerCta).build()).build();
    }

    @Test
    void gateUpSingleTokenGrid() {
        // x = ceil(768 / 4) = 192 neuron groups; y = M * k = 5 * 8 = 40 slots
        assertEquals(new LaunchGeometry(192, 40, 128, 0), LaunchGeometry.of(gateUp(QWEN3, 4, 1), 5));
        // ceil(768 / 5) = 154 (768 = 5 * 153 + 3); y = 1 * 8
        assertEquals(new LaunchGeometry(154, 8, 160, 0), LaunchGeometry.of(gateUp(QWEN3, 5, 1), 1));
    }

    @Test
    void gateUpTiledGrid() {
        // T = 4: min(4 * 8, 128) = 32 distinct experts per tile at most; M = 10 -> ceil(10 / 4) = 3 tiles
        KernelSpec spec = gateUp(QWEN3, 4, 4);
        LaunchGeometry g = LaunchGeometry.of(spec, 10);
        assertEquals(192, g.gridX());
        assertEquals(3 * 32, g.gridY());
        assertEquals(128, g.blockX());
        assertEquals(sharedBytes(spec), g.sharedBytes());
        assertTrue(g.sharedBytes() > 0);
        // T = 32: min(32 * 8, 128) = 128 (capped by E); M = 33 -> 2 tiles
        assertEquals(2 * 128, LaunchGeometry.of(gateUp(QWEN3, 4, 32), 33).gridY());
    }

    /** split_down: one block per (16 neurons, token, slot); M * H stays an int, so large H caps the tokens. */
    @Test
    void splitDownGridAndTokenCap() {
        KernelSpec qwen3 = mlp(new ExpertShape(2048, 768, 128, 8), new SplitDown(8, 2, 4, 3, false));
        // staged x 64 * 64 chunks + partials 8 warps * 64 + the 16 h
        assertEquals(new LaunchGeometry(48, 3 * 8, 256, 64 * 64 + 8 * 64 + 32), LaunchGeometry.of(qwen3, 3));
        assertEquals(65_535 / 8, LaunchGeometry.maxTokens(qwen3));
        KernelSpec wide = mlp(new ExpertShape(65_536, 128, 4, 1), new SplitDown(2, 1, 1, 0, false));
        assertEquals(Integer.MAX_VALUE / 65_536, LaunchGeometry.maxTokens(wide));
        assertEquals(new LaunchGeometry(8, 1, 64, 64 * 4 * 512 + 32), LaunchGeometry.of(wide, 1));
    }

    private static KernelSpec mlp(ExpertShape shape, SplitDown schedule) {
        return new KernelSpec("mlp", new Problem.ExpertMlp(shape, WeightFormat.INT4_CHANNEL, DType.BF16, GateUpLayout.STACKED), schedule,
                new Store(new GatedActivation(GateFunction.SILU, Acc.GATE, Acc.UP), DType.BF16), Target.SM_90A);
    }

    @Test
    void tensorCoreGridsAndSharedMemory() {
        KernelSpec gu = KernelBuilder.named("gu_tc").expertGateUp(QWEN3).weights(WeightFormat.NVFP4)
                .schedule(OutputTensorCoreBuilder.create().warpsPerCta(8).warpsPerTile(4).build()).build();
        // tiles of 8 neurons, 2 per block: x = ceil(768 / 16) = 48; y = M * k; x staged as 64 chunks of 64 bytes,
        // then 8 warps x 16 partial sums
        assertEquals(new LaunchGeometry(48, 3 * 8, 256, 64 * 64 + 8 * 64), LaunchGeometry.of(gu, 3));
        KernelSpec dn = KernelBuilder.named("dn_tc").expertDown(QWEN3).weights(WeightFormat.INT4_CHANNEL)
                .schedule(OutputTensorCoreBuilder.create().warpsPerCta(16).warpsPerTile(16).kUnroll(3).build()).build();
        // tiles of 16 hidden outputs, 1 per block: x = 2048 / 16 = 128; y = M; k = 8 rows of 24 chunks staged
        assertEquals(new LaunchGeometry(128, 5, 512, 64 * 8 * 24 + 16 * 64), LaunchGeometry.of(dn, 5));
        // a ragged row: 2880 = 90 chunks, padded to 23 steps of 4 (92)
        KernelSpec gptOss = KernelBuilder.named("dn_tc").expertDown(new ExpertShape(2880, 2880, 32, 4)).weights(WeightFormat.MXFP4)
                .schedule(OutputTensorCoreBuilder.create().warpsPerCta(4).warpsPerTile(1).build()).build();
        assertEquals(new LaunchGeometry(45, 1, 128, 64 * 4 * 92), LaunchGeometry.of(gptOss, 1));
    }

    @Test
    void downSingleTokenGrid() {
        // x = ceil(2048 / 4) = 512 hidden groups; y = M
        assertEquals(new LaunchGeometry(512, 7, 128, 0), LaunchGeometry.of(down(QWEN3, 4, 1), 7));
        // ceil(2048 / 3) = 683 (2048 = 3 * 682 + 2)
        assertEquals(new LaunchGeometry(683, 1, 96, 0), LaunchGeometry.of(down(QWEN3, 3, 1), 1));
    }

    @Test
    void downTiledGrid() {
        KernelSpec spec = down(QWEN3, 4, 32);
        // ceil(33 / 32) = 2 tiles; shared = 21552 bytes (routing table 5168 + 4*32*32*4 accumulators)
        assertEquals(new LaunchGeometry(512, 2, 128, 21_552), LaunchGeometry.of(spec, 33));
        assertEquals(1, LaunchGeometry.of(spec, 32).gridY());
        assertEquals(1, LaunchGeometry.of(spec, 1).gridY());
        assertEquals(sharedBytes(spec), LaunchGeometry.of(spec, 1).sharedBytes());
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 4, 8, 32})
    void blockIsOneWarpPerWarpPerCta(int warps) {
        assertEquals(32 * warps, LaunchGeometry.of(gateUp(QWEN3, warps, 1), 1).blockX());
        assertEquals(32 * warps, LaunchGeometry.of(down(QWEN3, warps, 2), 1).blockX());
    }

    @Test
    void sharedBytesComeFromTheLayout() {
        for (KernelSpec spec : new KernelSpec[] {gateUp(QWEN3, 4, 1), gateUp(QWEN3, 8, 16),
                gateUp(new ExpertShape(2880, 2880, 32, 4), 4, 8), down(QWEN3, 4, 1), down(QWEN3, 2, 8)}) {
            assertEquals(sharedBytes(spec), LaunchGeometry.of(spec, 3).sharedBytes(), spec.toString());
        }
    }

    @Test
    void routerTiledGridAndSharedMemory() {
        // E = 60, 48 tokens per block, 12 warps: 3 row groups x 4 column groups; experts padded to
        // ceil(60 / 64) * 64 = 64, 16 per warp; ceil(200 / 64) = 4 slices. Stage = 2 B * (48 + 64) rows * 64 = 14336 B, x 2
        // stages = 28672 B; the score table 4 B * 48 rows * (64 + 8) = 13824 B is smaller.
        KernelSpec spec = KernelBuilder.named("rt").router(200, 60)
                .schedule(new RouterTiled(48, 16, 12, 64, 2, 1, 1))
                .epilogue(dev.moeforge.dsl.build.RoutingRules.softmaxTopKRenormalized(5, dev.moeforge.dsl.ir.DType.FP32))
                .build();
        var layout = RouterTiled.Layout.of((dev.moeforge.dsl.ir.Problem.Router) spec.problem(),
                (RouterTiled) spec.schedule());
        assertEquals(new RouterTiled.Layout(3, 4, 64, 16, 72, 4, 48, 14_336, 28_672), layout);
        // M = 100 -> ceil(100 / 48) = 3 blocks of 12 warps
        assertEquals(new LaunchGeometry(3, 1, 384, 28_672), LaunchGeometry.of(spec, 100));
        assertEquals(Integer.MAX_VALUE - 127, LaunchGeometry.maxTokens(spec));
        assertEquals((Integer.MAX_VALUE - 128) / 48 + 1, LaunchGeometry.of(spec, Integer.MAX_VALUE - 127).gridX());
    }

    @Test
    void routerTiledClusterSplitGridAndSharedMemory() {
        // E = 60, 64 tokens per tile, 32 per warp, 16 warps: 2 row groups x 4 k groups x 2 column groups;
        // experts padded to ceil(60 / 32) * 32 = 64, 32 per warp (2 x 4 mma tiles: 32 accumulators). Split 2:
        // each block owns 32 rows. Stage = 2 B * (64 + 64) rows * 64 = 16384 B, x 4 stages = 65536 B (the
        // score table, 4 B * 64 * 72 = 18432 B, fits in it), then the inbox, one slot for the other block:
        // 4 B * 32 rows * 72 = 9216 B.
        var schedule = new RouterTiled(64, 32, 16, 64, 4, 4, 2);
        KernelSpec spec = KernelBuilder.named("rt2").router(200, 60).schedule(schedule)
                .epilogue(dev.moeforge.dsl.build.RoutingRules.softmaxTopKRenormalized(5, dev.moeforge.dsl.ir.DType.FP32))
                .build();
        var layout = RouterTiled.Layout.of((dev.moeforge.dsl.ir.Problem.Router) spec.problem(), schedule);
        assertEquals(new RouterTiled.Layout(2, 2, 64, 32, 72, 4, 32, 16_384, 74_752), layout);
        assertEquals(32, layout.accumulators(schedule));
        // M = 100 -> ceil(100 / 64) = 2 tiles, each a cluster of 2 blocks of 16 warps
        assertEquals(new LaunchGeometry(4, 1, 512, 74_752), LaunchGeometry.of(spec, 100));
    }

    /** The catalogue's decode routers: a split needs at least twice as many warps as a block's experts. */
    @Test
    void routerWarpsPerScore() {
        var rule = dev.moeforge.dsl.build.RoutingRules.softmaxTopKRenormalized(4, dev.moeforge.dsl.ir.DType.FP32);
        java.util.function.BiFunction<Integer, Schedule<?>, Integer> split = (experts, schedule) -> {
            var problem = (Problem.Router) KernelBuilder.named("r").router(2880, experts).schedule(schedule).epilogue(rule).build().problem();
            return switch (schedule) {
                case RouterGemv g -> g.warpsPerScore(problem);
                case RouterCluster c -> c.warpsPerScore(problem);
                default -> throw new IllegalArgumentException("not a decode router: " + schedule);
            };
        };
        // gpt-oss: E = 32 over a cluster of 8 -> 4 experts per block; 16 warps -> 4 per score, 32 -> 8
        assertEquals(4, split.apply(32, new RouterCluster(8, 16, 16, 8)));
        assertEquals(8, split.apply(32, new RouterCluster(8, 32, 16, 8)));
        // Qwen3-30B-A3B: E = 128 over 8 -> 16 per block, 16 warps: one warp per score
        assertEquals(1, split.apply(128, new RouterCluster(8, 16, 16, 8)));
        // E = 60 over 8 -> 8 per block (ceil); 15 warps < 16: no split
        assertEquals(1, split.apply(60, new RouterCluster(8, 15, 16, 8)));
        // gemv: 8 warps x 2 experts -> 4; 8 x 4 -> 2; 4 x 4 -> 1; 16 x 5 -> 3 (floor, 15 of 16 warps work)
        assertEquals(4, split.apply(256, new RouterGemv(8, 16, 8, 2)));
        assertEquals(2, split.apply(512, new RouterGemv(8, 16, 8, 4)));
        assertEquals(1, split.apply(512, new RouterGemv(4, 16, 8, 4)));
        assertEquals(3, split.apply(512, new RouterGemv(16, 16, 8, 5)));
    }

    @Test
    void maxTokens() {
        assertEquals(65_535 / 8, LaunchGeometry.maxTokens(gateUp(QWEN3, 4, 1)), "gate_up single token: M*k <= 65535");
        assertEquals(8191, LaunchGeometry.maxTokens(gateUp(QWEN3, 4, 1)));
        assertEquals((65_535 / 32) * 4, LaunchGeometry.maxTokens(gateUp(QWEN3, 4, 4)), "tiles * 32 <= 65535");
        assertEquals((65_535 / 128) * 32, LaunchGeometry.maxTokens(gateUp(QWEN3, 4, 32)), "tiles * 128 <= 65535");
        assertEquals(65_535, LaunchGeometry.maxTokens(down(QWEN3, 4, 1)));
        assertEquals(65_535 * 32, LaunchGeometry.maxTokens(down(QWEN3, 4, 32)));
    }

    @Test
    void gridYAtMaxTokensFitsCudasLimit() {
        for (KernelSpec spec : new KernelSpec[] {gateUp(QWEN3, 4, 1), gateUp(QWEN3, 4, 4), gateUp(QWEN3, 4, 3),
                gateUp(new ExpertShape(64, 64, 7, 3), 4, 5), down(QWEN3, 4, 1), down(QWEN3, 4, 32), down(QWEN3, 4, 7)}) {
            int max = LaunchGeometry.maxTokens(spec);
            LaunchGeometry g = LaunchGeometry.of(spec, max);
            assertTrue(g.gridY() <= LaunchGeometry.MAX_GRID_Y, spec.name() + " at " + max + " tokens: y = " + g.gridY());
        }
    }

    @Test
    void zeroTokensIsRejectedNamingTheKernel() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> LaunchGeometry.of(gateUp(QWEN3, 4, 1), 0));
        assertEquals("tokens = 0: kernel gu takes 1..8191", e.getMessage());
        IllegalArgumentException negative = assertThrows(IllegalArgumentException.class,
                () -> LaunchGeometry.of(down(QWEN3, 4, 1), -3));
        assertTrue(negative.getMessage().contains("kernel dn"), negative.getMessage());
    }

    @Test
    void tooManyTokensIsRejectedNamingTheKernel() {
        KernelSpec gu = gateUp(QWEN3, 4, 1);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LaunchGeometry.of(gu, 8192));
        assertEquals("tokens = 8192: kernel gu takes 1..8191", e.getMessage());
        KernelSpec dn = down(QWEN3, 4, 32);
        IllegalArgumentException d = assertThrows(IllegalArgumentException.class,
                () -> LaunchGeometry.of(dn, 65_535 * 32 + 1));
        assertEquals("tokens = 2097121: kernel dn takes 1..2097120", d.getMessage());
    }

    private static int sharedBytes(KernelSpec spec) {
        return (int) OutputCentric.Layout.of((dev.moeforge.dsl.ir.Problem.ExpertProblem) spec.problem(), (OutputCentric) spec.schedule()).sharedBytes();
    }
}
