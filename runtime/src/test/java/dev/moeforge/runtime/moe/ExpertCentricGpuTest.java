package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.function.IntFunction;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The expert-centric layer (routing plan, grouped GEMM gate_up and down) on the GPU against the FP64
 * CPU reference, on fresh random inputs each run, outputs poisoned first; graph replay must
 * write the same bytes (the ordered combine is deterministic). Routings cover the uniform case and
 * the skewed ones a tile boundary cares about: one expert taking everything, experts with exactly
 * block_m and block_m +- 1 pairs, and ids outside [0, E).
 */
@RequiresGpu
class ExpertCentricGpuTest extends GpuSession {
    static final Geometry QWEN3_30B = new Geometry("qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED);
    static final Geometry GPT_OSS = new Geometry("gpt_oss_20b", new ExpertShape(2880, 2880, 32, 4), GateUpLayout.INTERLEAVED);
    static final Geometry SMALL = new Geometry("small_256x128_e16_k4", new ExpertShape(256, 128, 16, 4), GateUpLayout.STACKED);
    /** E not a power of two, H and I at the 8-element alignment and off every tile size. */
    static final Geometry ODD = new Geometry("odd_1032x264_e33_k5", new ExpertShape(1032, 264, 33, 5), GateUpLayout.INTERLEAVED);
    static final Geometry NARROW = new Geometry("narrow_136x40_e7_k3", new ExpertShape(136, 40, 7, 3), GateUpLayout.STACKED);
    /** One slot per token, so a routing can put exactly n pairs on an expert. */
    static final Geometry TOP1 = new Geometry("top1_128x64_e9_k1", new ExpertShape(128, 64, 9, 1), GateUpLayout.STACKED);

    /** Schedules for (gate_up, down): the default tile, small tiles, and the largest register tile. */
    static final List<ExpertCentric[]> SCHEDULES = List.of(
            new ExpertCentric[] {new ExpertCentric(64, 64, 64, 2, 2, 4, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8)},
            new ExpertCentric[] {new ExpertCentric(16, 32, 32, 1, 2, 3, 1), new ExpertCentric(16, 32, 32, 1, 2, 2, 1)},
            new ExpertCentric[] {new ExpertCentric(128, 64, 32, 4, 2, 3, 32), new ExpertCentric(128, 128, 32, 4, 2, 3, 32)},
            // warpgroup MMA (sm_90a): one warpgroup with the narrowest slabs, two with the widest
            new ExpertCentric[] {new ExpertCentric(64, 32, 64, 4, 1, 3, 1, true), new ExpertCentric(64, 64, 64, 4, 1, 5, 1, true)},
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true), new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true)},
            // 128-element slices (rows of 16 pieces), wide tiles
            new ExpertCentric[] {new ExpertCentric(16, 128, 128, 1, 8, 3, 1), new ExpertCentric(16, 256, 128, 1, 8, 3, 1)},
            // down's atomic combine, on mma.sync and on wgmma
            new ExpertCentric[] {new ExpertCentric(16, 128, 128, 1, 8, 3, 1), new ExpertCentric(16, 256, 128, 1, 8, 3, 1).withAtomicCombine(true)},
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withAtomicCombine(true)},
            // weight tiles by the tensor memory accelerator: mma.sync, two warpgroups, one with the narrowest slabs
            new ExpertCentric[] {new ExpertCentric(32, 64, 64, 2, 2, 4, 1).withTma(true),
                    new ExpertCentric(32, 128, 64, 2, 2, 2, 1).withTma(true)},
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true).withTma(true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true)},
            new ExpertCentric[] {new ExpertCentric(64, 32, 64, 4, 1, 3, 1, true).withTma(true),
                    new ExpertCentric(64, 64, 64, 4, 1, 5, 1, true).withTma(true)},
            // wgmma with two warpgroups side by side along the weight rows (warps_n = 2), by TMA and by cp.async
            new ExpertCentric[] {new ExpertCentric(64, 128, 64, 4, 2, 4, 8, true).withTma(true),
                    new ExpertCentric(64, 256, 64, 4, 2, 4, 8, true).withTma(true)},
            new ExpertCentric[] {new ExpertCentric(128, 64, 64, 8, 2, 4, 1, true), new ExpertCentric(128, 256, 64, 8, 2, 3, 1, true)},
            // the catalogue's decode-batch pair with down's in-tile combine (it ships with the combine launch: schedule 20),
            // and the prefill example's pair
            new ExpertCentric[] {new ExpertCentric(16, 64, 64, 1, 4, 4, 1).withTma(true),
                    new ExpertCentric(16, 128, 64, 1, 4, 4, 1).withTma(true)},
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 2, 4, 8, true).withTma(true),
                    new ExpertCentric(128, 256, 64, 8, 2, 4, 8, true).withTma(true)},
            // a producer warpgroup filling the stages: two warpgroups side by side, and one with the narrowest slabs
            new ExpertCentric[] {new ExpertCentric(64, 128, 64, 4, 2, 5, 8, true).withTma(true).withProducer(true),
                    new ExpertCentric(64, 256, 64, 4, 2, 5, 8, true).withTma(true).withProducer(true)},
            new ExpertCentric[] {new ExpertCentric(64, 32, 64, 4, 1, 3, 1, true).withTma(true).withProducer(true),
                    new ExpertCentric(64, 64, 64, 4, 1, 5, 1, true).withTma(true).withProducer(true)},
            // the prefill pair with a producer: two 64-pair slabs, each warpgroup every weight row
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true)},
            // down's slots added by the module's combine entry point: schedule 17's pair, and schedule 0's (every target)
            new ExpertCentric[] {new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true).withCombineKernel(true)},
            new ExpertCentric[] {new ExpertCentric(64, 64, 64, 2, 2, 4, 8),
                    new ExpertCentric(64, 128, 64, 2, 2, 4, 8).withCombineKernel(true)},
            // the catalogue's decode-batch pair as it ships: schedule 13's with down's combine launch
            new ExpertCentric[] {new ExpertCentric(16, 64, 64, 1, 4, 4, 1).withTma(true),
                    new ExpertCentric(16, 128, 64, 1, 4, 4, 1).withTma(true).withCombineKernel(true)});

    /** (in the tiles, by the combine entry point): schedules that differ only in down's combine_kernel. */
    static final int[][] COMBINE_TWINS = {{17, 18}, {0, 19}, {13, 20}};

    /** How a case's routing is drawn. */
    enum RoutingKind {
        UNIFORM, ALL_ON_EXPERT_0, BLOCK_EDGES, OUTSIDE_IDS
    }

    static final long RUN_SEED = System.nanoTime();

    static LayerWeights weightsFor(Geometry g) {
        return layerWeights(g.shape(), RUN_SEED + g.name().hashCode());
    }

    record Case(Geometry geometry, int schedule, int tokens, RoutingKind routing) {
        @Override
        public String toString() {
            return geometry + " schedule " + schedule + " M=" + tokens + " " + routing;
        }
    }

    static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (int s = 0; s < SCHEDULES.size(); s++) {
            cases.addAll(baseCases(s));
        }
        for (int m : new int[] {1, 32, 64, 256}) {
            cases.add(new Case(QWEN3_30B, 0, m, RoutingKind.UNIFORM));
        }
        cases.add(new Case(QWEN3_30B, 1, 8, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 2, 1024, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 4, 1024, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 3, 64, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 0, 48, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 4, 96, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 0, 4096, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 2, 16384, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 4, 16384, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 5, 64, RoutingKind.UNIFORM));
        cases.add(new Case(ODD, 5, 17, RoutingKind.UNIFORM));
        cases.add(new Case(NARROW, 5, 50, RoutingKind.ALL_ON_EXPERT_0));
        cases.add(new Case(SMALL, 5, 256, RoutingKind.OUTSIDE_IDS));
        for (int schedule : new int[] {6, 7}) {
            cases.add(new Case(QWEN3_30B, schedule, 64, RoutingKind.UNIFORM));
            cases.add(new Case(ODD, schedule, 17, RoutingKind.UNIFORM));
            cases.add(new Case(NARROW, schedule, 50, RoutingKind.ALL_ON_EXPERT_0));
            cases.add(new Case(SMALL, schedule, 256, RoutingKind.OUTSIDE_IDS));
            cases.add(new Case(SMALL, schedule, 4096, RoutingKind.UNIFORM));
        }
        cases.add(new Case(QWEN3_30B, 8, 64, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 9, 1024, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 10, 256, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 9, 96, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 8, 48, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 9, 16384, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 11, 1024, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 12, 256, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 11, 96, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 13, 32, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 13, 256, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 14, 4096, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 15, 1024, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 15, 4096, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 15, 96, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 15, 16384, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 16, 256, RoutingKind.UNIFORM));
        cases.add(new Case(QWEN3_30B, 17, 4096, RoutingKind.UNIFORM));
        cases.add(new Case(GPT_OSS, 17, 96, RoutingKind.UNIFORM));
        cases.add(new Case(SMALL, 17, 16384, RoutingKind.UNIFORM));
        for (int schedule : new int[] {18, 19}) {
            cases.add(new Case(QWEN3_30B, schedule, 1024, RoutingKind.UNIFORM));
            cases.add(new Case(GPT_OSS, schedule, 96, RoutingKind.UNIFORM));
            cases.add(new Case(SMALL, schedule, 16384, RoutingKind.UNIFORM));
        }
        for (int m : new int[] {5, 8, 64}) {  // the decode batches the decoder runs the pair at
            cases.add(new Case(QWEN3_30B, 20, m, RoutingKind.UNIFORM));
        }
        return cases;
    }

    /** The cases every schedule runs: small geometries, odd sizes, tile edges, skew and ids outside [0, E). */
    static List<Case> baseCases(int schedule) {
        List<Case> cases = new ArrayList<>();
        for (int m : new int[] {1, 3, 16, 65, 256}) {
            cases.add(new Case(SMALL, schedule, m, RoutingKind.UNIFORM));
        }
        for (int m : new int[] {1, 17, 200}) {
            cases.add(new Case(ODD, schedule, m, RoutingKind.UNIFORM));
            cases.add(new Case(NARROW, schedule, m, RoutingKind.UNIFORM));
        }
        cases.add(new Case(NARROW, schedule, 50, RoutingKind.ALL_ON_EXPERT_0));
        cases.add(new Case(SMALL, schedule, 40, RoutingKind.OUTSIDE_IDS));
        cases.add(new Case(TOP1, schedule, 3 * 64 + 40, RoutingKind.BLOCK_EDGES));
        cases.add(new Case(TOP1, schedule, 300, RoutingKind.ALL_ON_EXPERT_0));
        return cases;
    }

    /** A geometry, token count and routing each pair of {@link #COMBINE_TWINS} runs on. */
    static Stream<Arguments> combineTwinCases() {
        List<Arguments> out = new ArrayList<>();
        for (int[] twins : COMBINE_TWINS) {
            out.add(Arguments.of(twins[0], twins[1], new Case(QWEN3_30B, twins[1], 512, RoutingKind.UNIFORM)));
            out.add(Arguments.of(twins[0], twins[1], new Case(SMALL, twins[1], 300, RoutingKind.OUTSIDE_IDS)));
            out.add(Arguments.of(twins[0], twins[1], new Case(TOP1, twins[1], 3 * 64 + 40, RoutingKind.BLOCK_EDGES)));
        }
        return out.stream();
    }

    static Stream<Arguments> arguments() {
        return cases().stream().map(Arguments::of);
    }

    static boolean runsHere(Case c) {
        return runsOnThisGpu(SCHEDULES.get(c.schedule())[0]);
    }

    static ExpertLayerSpecs specs(Geometry g, int schedule) {
        return specs("ec_", SCHEDULES, g, schedule);
    }

    /** The layer's two kernels for schedule pair {@code schedule} of {@code schedules}, named from the prefix. */
    static ExpertLayerSpecs specs(String prefix, List<ExpertCentric[]> schedules, Geometry g, int schedule) {
        ExpertCentric[] s = schedules.get(schedule);
        return ExpertLayerSpecs.of(prefix + g.name() + "_" + schedule, g.shape(), g.layout(), s[0], s[1], runtime.target());
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        compileLayers(cases().stream().filter(ExpertCentricGpuTest::runsHere).map(c -> specs(c.geometry(), c.schedule())).toList());
    }

    /** The case's routing: ids drawn as its kind says, weights positive and summing to one per token. */
    static Routing routing(Case c, long seed) {
        ExpertShape s = c.geometry().shape();
        Routing uniform = RandomInputs.uniformRouting(seed, c.tokens(), s.experts(), s.topk());
        int[] ids = uniform.ids().clone();
        int k = s.topk();
        switch (c.routing()) {
            case UNIFORM -> { }
            case ALL_ON_EXPERT_0 -> {  // every token's first slot on expert 0, its other slots elsewhere
                for (int m = 0; m < c.tokens(); m++) {
                    int at = -1;
                    for (int j = 0; j < k; j++) {
                        if (ids[m * k + j] == 0) {
                            at = j;
                        }
                    }
                    if (at >= 0) {
                        ids[m * k + at] = ids[m * k];
                    }
                    ids[m * k] = 0;
                }
            }
            case BLOCK_EDGES -> {  // top-1: 64, 63 and 65 pairs (block_m and one either side), the rest on one more expert
                IntFunction<Integer> expertOf = m -> m < 64 ? 2 : m < 127 ? 3 : m < 192 ? 4 : 7;
                for (int m = 0; m < c.tokens(); m++) {
                    ids[m] = expertOf.apply(m);
                }
            }
            case OUTSIDE_IDS -> {  // some slots name no expert: they add nothing to y
                SplittableRandom r = new SplittableRandom(seed + 7);
                for (int i = 0; i < ids.length; i += 3) {
                    ids[i] = r.nextBoolean() ? -1 : s.experts() + r.nextInt(5);
                }
            }
        }
        return new Routing(c.tokens(), k, ids, uniform.weights());
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("arguments")
    void layerMatchesReference(Case c) {
        Assumptions.assumeTrue(runsHere(c), "wgmma schedules run on sm_90a only");
        checkLayer(c, specs(c.geometry(), c.schedule()), SCHEDULES.get(c.schedule())[1].atomicCombine());
    }

    /**
     * The layer of {@code specs} on the case's fresh inputs against the FP64 reference: y (and inter
     * and graph replay where every id is an expert's), the plan against its host twin.
     */
    static void checkLayer(Case c, ExpertLayerSpecs specs, boolean atomic) {
        LayerWeights w = weightsFor(c.geometry());
        ExpertShape s = c.geometry().shape();
        long seed = System.nanoTime();
        short[] x = RandomInputs.bf16Normal(seed, c.tokens() * s.hidden(), 1.0);
        Routing routing = routing(c, seed + 1);
        Routing referenceRouting = c.routing() == RoutingKind.OUTSIDE_IDS ? withoutOutsideIds(routing, s.experts()) : routing;
        ExpertReference.LayerResult ref = ExpertReference.layer(specs.gateUp(), specs.down(), x,
                WeightRows.bf16(w.gateUp(), s.experts(), 2 * s.intermediate(), s.hidden()),
                WeightRows.bf16(w.down(), s.experts(), s.hidden(), s.intermediate()), referenceRouting);
        String where = c + " seed=" + seed + " weight seed=" + w.seed();
        try (ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()),
                LaunchOrder.OVERLAPPING_PREVIOUS, Math.max(c.tokens(), 16))) {
            if (c.routing() == RoutingKind.OUTSIDE_IDS || atomic) {
                checkY(where, layer, x, routing, DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()), ref, !atomic);
            } else {
                checkExpertLayer(where, layer, x, routing, DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()),
                        ref, BF16_OUTPUT);
            }
            checkPlan(where, layer, routing, s);
        }
    }

    /**
     * The combine entry point adds each token's slot rows in the in-tile combine's order: the layer
     * with it writes y byte for byte as its twin that combines in the tiles, on the same inputs.
     */
    @ParameterizedTest(name = "schedule {0} against {1}: {2}")
    @MethodSource("combineTwinCases")
    void combineKernelWritesTheInTileCombinesBytes(int inTile, int separate, Case c) {
        Assumptions.assumeTrue(runsHere(c), "wgmma schedules run on sm_90a only");
        LayerWeights w = weightsFor(c.geometry());
        ExpertShape s = c.geometry().shape();
        long seed = System.nanoTime();
        short[] x = RandomInputs.bf16Normal(seed, c.tokens() * s.hidden(), 1.0);
        Routing routing = routing(c, seed + 1);
        String where = c + " seed=" + seed + " weight seed=" + w.seed();
        short[][] ys = new short[2][];
        int[] schedules = {inTile, separate};
        for (int i = 0; i < 2; i++) {
            ExpertLayerSpecs specs = specs(c.geometry(), schedules[i]);
            try (ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()),
                    LaunchOrder.OVERLAPPING_PREVIOUS, c.tokens());
                 DeviceBuffer dx = uploadBf16(x);
                 DeviceBuffer ids = DeviceBuffer.allocate(DType.INT32, routing.ids().length);
                 DeviceBuffer weights = DeviceBuffer.allocate(DType.FP32, routing.weights().length);
                 DeviceBuffer inter = DeviceBuffer.allocate(DType.BF16, (long) routing.ids().length * s.intermediate());
                 DeviceBuffer y = DeviceBuffer.allocate(DType.BF16, (long) c.tokens() * s.hidden())) {
                ids.copyFrom(routing.ids());
                weights.copyFrom(routing.weights());
                y.fillBytes16(Bf16.NAN);
                layer.enqueue(stream, c.tokens(), dx, DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()), ids,
                        weights, inter, y);
                stream.synchronize();
                ys[i] = download(y);
            }
        }
        for (short v : ys[1]) {
            assertTrue(v != Bf16.NAN, () -> "the combine entry point left y unwritten (NaN poison): " + where);
        }
        assertArrayEquals(ys[0], ys[1], () -> "schedule " + separate + " wrote other bytes than " + inTile + ": " + where);
    }

    /** The plan the layer's align built (left from its last call) equals the host twin's. */
    static void checkPlan(String where, ExpertLayer layer, Routing routing, ExpertShape s) {
        RoutingPlan expected = RoutingPlan.of(routing.ids(), routing.tokens(), s.topk(), s.experts());
        var plan = layer.routingPlan().orElseThrow();
        int[] sorted = new int[routing.ids().length];
        int[] offsets = new int[RoutingPlan.offsetsLength(s.experts())];
        int[] all = new int[(int) plan.sortedSlots().elements()];
        plan.sortedSlots().copyTo(all);
        System.arraycopy(all, 0, sorted, 0, sorted.length);
        plan.expertOffsets().copyTo(offsets);
        assertArrayEquals(expected.expertOffsets(), offsets, () -> "expert_offsets differ from the host twin: " + where);
        assertArrayEquals(expected.sortedSlots(), sorted, () -> "sorted_slots differ from the host twin: " + where);
    }

    /** The reference's view of ids outside [0, E): slots with weight 0 on expert 0 add nothing to y. */
    static Routing withoutOutsideIds(Routing r, int experts) {
        int[] ids = r.ids().clone();
        float[] weights = r.weights().clone();
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] < 0 || ids[i] >= experts) {
                weights[i] = 0;
                ids[i] = firstUnused(ids, i - i % r.topk(), r.topk(), experts);
            }
        }
        return new Routing(r.tokens(), r.topk(), ids, weights);
    }

    private static int firstUnused(int[] ids, int from, int k, int experts) {
        for (int e = 0; e < experts; e++) {
            final int candidate = e;
            if (Arrays.stream(ids, from, from + k).noneMatch(v -> v == candidate)) {
                return e;
            }
        }
        throw new IllegalStateException("no free expert");
    }

    /**
     * y alone (inter of an id outside [0, E) is unspecified), twice: both within the bounds, and with
     * {@code sameBytes} (the ordered combine) the second run must write the same bytes as the first.
     */
    static void checkY(String where, ExpertLayer layer, short[] x, Routing routing, DeviceWeights gateUp, DeviceWeights down,
                       ExpertReference.LayerResult ref, boolean sameBytes) {
        try (LayerBuffers b = LayerBuffers.of(x, routing, ref)) {
            short[][] runs = new short[2][];
            for (int run = 0; run < 2; run++) {
                b.poison();
                b.enqueue(layer, routing.tokens(), gateUp, down);
                stream.synchronize();
                runs[run] = download(b.y());
            }
            for (short[] run : runs) {
                var ey = dev.moeforge.dsl.reference.ErrorStats.of(ref.y().exact(), run);
                System.out.println(where + ": y " + ey);
                BF16_OUTPUT.check(ey, () -> "down " + where);
            }
            if (sameBytes) {
                assertArrayEquals(runs[0], runs[1], () -> "a second run wrote other bytes: " + where);
            }
            assertEquals(runs[0].length, ref.y().stored().length);
        }
    }

}
