package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.RouterReference;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.RouterCluster;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Router kernels on the GPU against the FP64 reference on fresh random inputs: every routing
 * rule, the three router schedules (decode: router_gemv and router_cluster; prefill: router_tiled)
 * with several variants each, the decode shapes and bench router's six GEMM shapes. Selections must match
 * except where the FP64 selection scores of the two experts are a near-tie (within 1e-5 relative,
 * where FP32 accumulation may legitimately order them the other way); weights match within 1e-4
 * (fp32) or 1e-2 (bf16) relative.
 */
@RequiresGpu
class RouterGpuTest extends GpuSession {
    static final double NEAR_TIE = 1e-5;

    record Case(String name, int hidden, int experts, Store rule, int[] tokens) {
        @Override
        public String toString() {
            return name;
        }
    }

    static final List<Case> CASES = List.of(
            new Case("qwen3_30b_softmax_renorm_k8", 2048, 128, RoutingRules.softmaxTopKRenormalized(8, DType.FP32), new int[] {1, 7, 64}),
            new Case("qwen3_next_softmax_renorm_k10", 2048, 512, RoutingRules.softmaxTopKRenormalized(10, DType.FP32), new int[] {1, 33}),
            new Case("deepseek_v3_groups_8_4_k8", 7168, 256,
                    RoutingRules.groupLimitedSigmoid(8, 8, 4, 2.5, "e_score_correction_bias", DType.FP32), new int[] {1, 16}),
            new Case("gpt_oss_bias_topk_softmax_k4", 2880, 32, RoutingRules.biasedTopKSoftmax(4, "router_bias", DType.FP32),
                    new int[] {1, 64}),
            new Case("olmoe_softmax_k8", 2048, 64, RoutingRules.softmaxTopK(8, DType.FP32), new int[] {1, 5}),
            new Case("dense_out_k4", 1024, 64, new Store(new Dense(new Renormalize(TopK.of(new Softmax(Acc.MAIN), 4))), DType.FP32),
                    new int[] {1, 9}),
            new Case("dense_bf16_out_k4", 1024, 64, new Store(new Dense(new Renormalize(TopK.of(new Softmax(Acc.MAIN), 4))), DType.BF16),
                    new int[] {1, 9}),
            new Case("bf16_weights_k6_of_96", 512, 96, RoutingRules.softmaxTopKRenormalized(6, DType.BF16), new int[] {1, 3}),
            // H not a whole number of k tiles, E not a whole number of mma columns
            new Case("ragged_h200_e60_k5", 200, 60, RoutingRules.softmaxTopKRenormalized(5, DType.FP32), new int[] {3, 50, 100}),
            new Case("ragged_h296_e40_k3", 296, 40, RoutingRules.softmaxTopKRenormalized(3, DType.FP32), new int[] {5, 70}),
            new Case("sigmoid_scale_k3_of_40", 256, 40, new Store(new Scale(TopK.of(new Sigmoid(Acc.MAIN), 3), 0.5), DType.FP32),
                    new int[] {2}),
            // bench router's six (M, N, K) GEMM shapes, top-4, softmax over the top-4
            gemm(512, 8, 128), gemm(512, 16, 128), gemm(1024, 64, 512), gemm(2048, 128, 1024), gemm(4096, 64, 2048),
            gemm(4096, 128, 2048),
            // k = 16 (above the catalogue's largest, Qwen3-Next's 10), and a k that is not a power of two above 10
            new Case("e512_softmax_renorm_k16", 2048, 512, RoutingRules.softmaxTopKRenormalized(16, DType.FP32), new int[] {1, 9}),
            new Case("e256_softmax_renorm_k13", 1024, 256, RoutingRules.softmaxTopKRenormalized(13, DType.FP32), new int[] {1, 20}));

    static Case gemm(int m, int n, int k) {
        return new Case("gemm_" + m + "x" + n + "x" + k, k, n, new Store(new Softmax(TopK.of(Acc.MAIN, 4)), DType.FP32), new int[] {m});
    }

    /** The catalogue's Qwen3-30B-A3B prefill router: 64-token tiles split over clusters of 2. */
    static final RouterTiled CATALOGUE_PREFILL = new RouterTiled(64, 32, 16, 64, 3, 2, 2);

    static final List<Schedule> SCHEDULES = List.of(
            new RouterGemv(4, 16, 8, 4),
            new RouterGemv(8, 8, 2, 16),
            // 16 warps on 4 experts: each score split over 4 warps, 4-byte loads so that the spans are ragged
            new RouterGemv(16, 4, 1, 4),
            new RouterCluster(8, 16, 16, 8),
            new RouterCluster(3, 4, 8, 2),
            new RouterTiled(16, 16, 4, 64, 3, 1, 1),
            new RouterTiled(64, 16, 16, 32, 4, 1, 1),
            new RouterTiled(48, 16, 12, 64, 2, 1, 1),
            // k groups, cluster splits (ragged shares where the slices do not divide: hidden 296 in 64-wide
            // slices split 4 leaves the last block none), 32-token warp tiles
            new RouterTiled(32, 16, 16, 32, 2, 2, 2),
            new RouterTiled(48, 16, 12, 64, 2, 1, 4),
            new RouterTiled(64, 32, 16, 64, 4, 4, 2),
            CATALOGUE_PREFILL,
            // bench router's gemm_1024x64x512 and gemm_2048x128x1024 schedules
            new RouterTiled(16, 16, 8, 64, 4, 2, 2),
            new RouterTiled(32, 32, 16, 64, 3, 4, 2));

    /** Index of the first router_tiled schedule in {@link #SCHEDULES}. */
    static final int FIRST_TILED = java.util.stream.IntStream.range(0, SCHEDULES.size())
            .filter(i -> SCHEDULES.get(i) instanceof RouterTiled).findFirst().orElseThrow();

    /** Index of the first router_cluster schedule in {@link #SCHEDULES}. */
    static final int FIRST_CLUSTER = java.util.stream.IntStream.range(0, SCHEDULES.size())
            .filter(i -> SCHEDULES.get(i) instanceof RouterCluster).findFirst().orElseThrow();

    /** Each schedule family once: router_gemv, router_cluster and router_tiled. */
    static java.util.stream.IntStream decodeAndTiled() {
        return java.util.stream.IntStream.of(0, FIRST_CLUSTER, FIRST_TILED);
    }

    /**
     * The decode schedules (gemv and cluster), a tiled one other than {@link #decodeAndTiled()}'s, and
     * the catalogue's prefill schedule (split over a cluster: each block flushes its own rows' counts).
     */
    static java.util.stream.IntStream decodeAndOtherTiled() {
        return java.util.stream.IntStream.of(0, FIRST_CLUSTER, FIRST_TILED + 1, SCHEDULES.indexOf(CATALOGUE_PREFILL));
    }


    static KernelSpec spec(Case c, int schedule) {
        // a router_gemv block never takes more experts than there are
        Schedule fitted = switch (SCHEDULES.get(schedule)) {
            case RouterGemv g -> new RouterGemv(g.warpsPerCta(), g.loadBytes(), g.kUnroll(),
                    Math.min(g.expertsPerCta(), c.experts()));
            case Schedule s -> s;
        };
        return KernelBuilder.named("r_" + c.name() + "_s" + schedule).router(c.hidden(), c.experts())
                .schedule(fitted).epilogue(c.rule()).target(runtime.target()).build();
    }

    /**
     * Every (case, schedule, M) whose spec validates: a 32-token warp tile holds too many
     * accumulators for 512 experts, for one. Each schedule must still meet at least four cases.
     */
    /** Every case's kernel compiled (through the cache) in parallel before the tests load them one by one. */
    private static LateWriter lateWriter;

    @BeforeAll
    static void compileSuite() throws Exception {
        lateWriter = new LateWriter(runtime);
        compileAll(cases().map(a -> spec((Case) a.get()[0], (Integer) a.get()[1])).distinct().toList());
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (int s = 0; s < SCHEDULES.size(); s++) {
            int met = 0;
            for (Case c : CASES) {
                try {
                    spec(c, s);
                } catch (SpecException e) {
                    continue;  // this schedule does not fit this case
                }
                met++;
                for (int m : c.tokens()) {
                    out.add(Arguments.of(c, s, m));
                }
            }
            if (met < 4) {
                throw new IllegalStateException("schedule " + SCHEDULES.get(s) + " validates for only " + met + " cases");
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} schedule {1} M={2}")
    @MethodSource("cases")
    void routerMatchesReference(Case c, int schedule, int tokens) {
        long seed = System.nanoTime();
        KernelSpec spec = spec(c, schedule);
        short[] x = RandomInputs.bf16Normal(seed, tokens * c.hidden(), 1.0);
        short[] w = RandomInputs.bf16Normal(seed + 1, c.experts() * c.hidden(), 1.0 / Math.sqrt(c.hidden()));
        Map<String, float[]> rows = randomRows(spec, c.experts(), seed + 2);
        check(spec, c, tokens, x, w, rows, "seed=" + seed);
    }

    /** NaN scores follow the documented rule on the GPU exactly as in the reference, decode and tiled alike. */
    @ParameterizedTest(name = "schedule {0}")
    @MethodSource("decodeAndTiled")
    void nanScoresFollowTheDocumentedRule(int schedule) {
        long seed = System.nanoTime();
        int hidden = 256;
        int experts = 32;
        short[] x = RandomInputs.bf16Normal(seed, 2 * hidden, 1.0);
        short[] w = RandomInputs.bf16Normal(seed + 1, experts * hidden, 1.0 / Math.sqrt(hidden));
        for (int h = 0; h < hidden; h++) {
            w[5 * hidden + h] = Bf16.NAN;  // expert 5 scores NaN
        }
        // top-k on the logits: the NaN expert is never chosen, the weights stay finite
        Case biased = new Case("nan_gpt_oss", hidden, experts, RoutingRules.biasedTopKSoftmax(4, "router_bias", DType.FP32), new int[] {2});
        KernelSpec s1 = spec(biased, schedule).withName("r_nan_biased_s" + schedule);
        check(s1, biased, 2, x, w, randomRows(s1, experts, seed + 2), "NaN, top-k of logits, seed=" + seed);
        // softmax over all experts first: every probability is NaN, so the k lowest ids tie
        Case softmaxFirst = new Case("nan_softmax_first", hidden, experts, RoutingRules.softmaxTopKRenormalized(4, DType.FP32), new int[] {2});
        KernelSpec s2 = spec(softmaxFirst, schedule).withName("r_nan_softmax_first_s" + schedule);
        RouterReference.Result ref = check(s2, softmaxFirst, 2, x, w, Map.of(), "NaN, softmax first, seed=" + seed).ref();
        assertArrayEquals(new int[] {0, 1, 2, 3}, ((RouterReference.Selection) ref.stored()[0]).ids());
    }

    /**
     * Exact ties: experts 3, 9 and 17 share one weight row, aligned with the token so that they lead
     * every other expert by far. The lower index wins on the GPU as in the reference, decode and tiled
     * alike (the random cases only meet near-ties, where either order is accepted).
     */
    @ParameterizedTest(name = "schedule {0}")
    @MethodSource("decodeAndTiled")
    void exactTiesGoToTheLowerExpert(int schedule) {
        long seed = System.nanoTime();
        int hidden = 256;
        int experts = 32;
        int tokens = 2;
        short[] token = RandomInputs.bf16Normal(seed, hidden, 1.0);
        short[] x = new short[tokens * hidden];
        for (int t = 0; t < tokens; t++) {
            System.arraycopy(token, 0, x, t * hidden, hidden);
        }
        short[] w = RandomInputs.bf16Normal(seed + 1, experts * hidden, 1.0 / Math.sqrt(hidden));
        for (int e : new int[] {17, 3, 9}) {
            System.arraycopy(token, 0, w, e * hidden, hidden);
        }
        Case tie = new Case("ties_k2_of_3", hidden, experts, RoutingRules.softmaxTopKRenormalized(2, DType.FP32), new int[] {tokens});
        KernelSpec spec = spec(tie, schedule).withName("r_ties_s" + schedule);
        Checked checked = check(spec, tie, tokens, x, w, Map.of(), "exact ties, seed=" + seed);
        assertArrayEquals(new int[] {3, 9}, ((RouterReference.Selection) checked.ref().stored()[0]).ids(), "reference");
        assertArrayEquals(new int[] {3, 9, 3, 9}, checked.ids(), "GPU ids with experts 3, 9 and 17 tied at the top, seed=" + seed);
    }

    /** The expert histogram counts every routed (token, slot), and a graph zeroes and refills it each replay. */
    @ParameterizedTest(name = "schedule {0}")
    @MethodSource("decodeAndOtherTiled")
    void expertCountsMatchTheRoutingTable(int schedule) {
        long seed = System.nanoTime();
        int hidden = 512;
        int experts = 48;
        int k = 6;
        int tokens = 137;
        KernelSpec spec = KernelBuilder.named("r_counts_s" + schedule).router(hidden, experts).expertCounts(true)
                .schedule(SCHEDULES.get(schedule))
                .epilogue(RoutingRules.softmaxTopKRenormalized(k, DType.FP32)).target(runtime.target()).build();
        RouterKernel router = new RouterKernel(runtime.load(spec), tokens);
        short[] x = RandomInputs.bf16Normal(seed, tokens * hidden, 1.0);
        short[] w = RandomInputs.bf16Normal(seed + 1, experts * hidden, 1.0 / Math.sqrt(hidden));
        try (DeviceBuffer dx = DeviceBuffer.allocate(DType.BF16, x.length);
             DeviceBuffer dw = DeviceBuffer.allocate(DType.BF16, w.length);
             DeviceBuffer weights = DeviceBuffer.allocate(DType.FP32, (long) tokens * k);
             DeviceBuffer ids = DeviceBuffer.allocate(DType.INT32, (long) tokens * k);
             DeviceBuffer counts = DeviceBuffer.allocate(DType.INT32, experts)) {
            dx.copyFrom(x);
            dw.copyFrom(w);
            counts.fillWords32(12345);  // poison: the graph's memset node must clear it
            try (CudaGraph g = CudaGraph.capture(stream, () -> {
                router.zeroCounts(stream, counts);
                router.enqueue(stream, tokens, dx, dw, Map.of(), weights, ids, counts);
            })) {
                g.launch(stream);
                g.launch(stream);
                stream.synchronize();
            }
            int[] gotIds = new int[tokens * k];
            int[] gotCounts = new int[experts];
            ids.copyTo(gotIds);
            counts.copyTo(gotCounts);
            int[] want = new int[experts];
            for (int id : gotIds) {
                want[id]++;
            }
            assertArrayEquals(want, gotCounts, "expert counts (seed=" + seed + ")");
            assertEquals(tokens * k, java.util.Arrays.stream(gotCounts).sum());
        } finally {
            router.close();
        }
    }

    /** The reference's result and the GPU's ids (empty for a dense router) of one checked launch. */
    record Checked(RouterReference.Result ref, int[] ids) {}

    private Checked check(KernelSpec spec, Case c, int tokens, short[] x, short[] w, Map<String, float[]> rows, String where) {
        RouterKernel router = new RouterKernel(runtime.load(spec), tokens);
        RouterReference.Result ref = RouterReference.run(spec, x, WeightRows.bf16(w, 1, c.experts(), c.hidden()), rows);
        Store store = (Store) spec.epilogue();
        int k = router.topk().orElse(-1);
        try (DeviceBuffer dx = DeviceBuffer.allocate(DType.BF16, x.length);
             DeviceBuffer dw = DeviceBuffer.allocate(DType.BF16, w.length);
             DeviceBuffer weightsOut = DeviceBuffer.allocate(store.dtype(), (long) tokens * (k > 0 ? k : c.experts()));
             DeviceBuffer idsOut = DeviceBuffer.allocate(DType.INT32, (long) tokens * Math.max(k, 1))) {
            dx.copyFrom(x);
            dw.copyFrom(w);
            Map<String, DeviceBuffer> deviceRows = new LinkedHashMap<>();
            for (Map.Entry<String, float[]> r : rows.entrySet()) {
                DeviceBuffer b = DeviceBuffer.allocate(DType.FP32, c.experts());
                b.copyFrom(r.getValue());
                deviceRows.put(r.getKey(), b);
            }
            DeviceBuffer[] outputs = k > 0 ? new DeviceBuffer[] {weightsOut, idsOut} : new DeviceBuffer[] {weightsOut};
            poison(weightsOut, idsOut);
            router.enqueue(stream, tokens, dx, dw, deviceRows, outputs);
            stream.synchronize();
            float[] gotWeights = readWeights(weightsOut, store.dtype());
            int[] gotIds = new int[(int) idsOut.elements()];
            idsOut.copyTo(gotIds);
            compare(spec, ref, rows, k, c.experts(), gotWeights, gotIds, store.dtype(), where);

            // in a chain, overlapping a kernel that writes x late: the same bytes (no input read before the wait)
            try (DeviceBuffer fresh = DeviceBuffer.allocate(DType.BF16, x.length)) {
                fresh.copyFrom(x);
                dx.copyFrom(RandomInputs.bf16Normal(x.length * 31L + tokens, x.length, 1.0));
                poison(weightsOut, idsOut);
                lateWriter.chain(stream, fresh, dx, () -> router.enqueue(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, dx, dw,
                        deviceRows, outputs));
            }
            assertArrayEquals(gotWeights, readWeights(weightsOut, store.dtype()), "after a late writer of x: " + where);
            int[] chained = new int[gotIds.length];
            idsOut.copyTo(chained);
            assertArrayEquals(gotIds, chained, "ids after a late writer of x: " + where);

            // graph replay: the same bytes, and every ticket back at zero
            poison(weightsOut, idsOut);
            try (CudaGraph g = CudaGraph.capture(stream, () -> router.enqueue(stream, tokens, dx, dw, deviceRows, outputs))) {
                g.launch(stream);
                g.launch(stream);
                stream.synchronize();
            }
            assertArrayEquals(gotWeights, readWeights(weightsOut, store.dtype()), "graph replay differs: " + where);
            int[] again = new int[gotIds.length];
            idsOut.copyTo(again);
            assertArrayEquals(gotIds, again, "graph replay ids differ: " + where);
            if (router.counters() != null) {
                int[] tickets = new int[tokens];
                router.counters().copyTo(tickets);
                assertArrayEquals(new int[tokens], tickets, "tickets not left at zero: " + where);
                int[] scoreWords = new int[(int) router.scores().elements()];
                router.scores().copyTo(scoreWords);
                assertArrayEquals(new int[scoreWords.length], scoreWords, "scores workspace not left at zero: " + where);
            }
            deviceRows.values().forEach(DeviceBuffer::close);
            return new Checked(ref, k > 0 ? gotIds : new int[0]);
        } finally {
            router.close();
        }
    }

    static void compare(KernelSpec spec, RouterReference.Result ref, Map<String, float[]> rows, int k, int experts,
                                float[] gotWeights, int[] gotIds, DType dtype, String where) {
        double tolerance = dtype == DType.BF16 ? 1e-2 : 1e-4;
        TopK topk = findTopK(spec.epilogue());
        int tokens = ref.exact().length;
        int nearTies = 0;
        for (int t = 0; t < tokens; t++) {
            String at = spec.name() + " token " + t + " (" + where + ")";
            switch (ref.exact()[t]) {
                case RouterReference.Selection(int[] ids, double[] values) -> {
                    double[] by = selectionScores(topk, ref.scores()[t], rows);
                    for (int j = 0; j < k; j++) {
                        int got = gotIds[t * k + j];
                        if (got != ids[j]) {
                            boolean tie = got >= 0 && got < experts && Math.abs(by[got] - by[ids[j]])
                                    <= NEAR_TIE * (1 + Math.abs(by[ids[j]]));
                            if (!tie) {
                                fail(at + " slot " + j + ": expert " + got + ", reference " + ids[j] + " (scores "
                                        + (got >= 0 && got < experts ? by[got] : Double.NaN) + " vs " + by[ids[j]] + ")");
                            }
                            nearTies++;
                            continue;
                        }
                        double want = values[j];
                        double have = gotWeights[t * k + j];
                        if (Double.isNaN(want)) {
                            assertTrue(Double.isNaN(have), at + " slot " + j + ": want NaN, got " + have);
                        } else if (Math.abs(have - want) > tolerance * Math.max(Math.abs(want), 1e-3)) {
                            fail(at + " slot " + j + " expert " + got + ": weight " + have + ", reference " + want);
                        }
                    }
                }
                case RouterReference.Row(double[] values) -> {
                    // a dense row may hold a near-tied expert where the reference holds zero, or the reverse:
                    // allowed only when that expert's selection score ties the last one the reference selected
                    double[] by = selectionScores(topk, ref.scores()[t], rows);
                    int[] selected = ((RouterReference.Selection) RouterReference.evaluate(topk, ref.scores()[t], rows)).ids();
                    double boundary = by[selected[selected.length - 1]];
                    for (int e = 0; e < experts; e++) {
                        double have = gotWeights[t * experts + e];
                        double want = values[e];
                        if (Math.abs(have - want) > tolerance * Math.max(Math.abs(want), 1e-3)) {
                            boolean tie = (have == 0) != (want == 0)
                                    && Math.abs(by[e] - boundary) <= NEAR_TIE * (1 + Math.abs(boundary));
                            assertTrue(tie, at + " expert " + e + ": " + have + ", reference " + want + " (score " + by[e]
                                    + ", the last selected " + boundary + ")");
                            nearTies++;
                        }
                    }
                }
            }
        }
        assertTrue(nearTies <= Math.max(2, tokens / 100), spec.name() + ": " + nearTies + " near-ties in " + tokens + " tokens");
    }

    /** The FP64 row the top-k selects on (its by=, else its input). */
    private static double[] selectionScores(TopK topk, double[] scores, Map<String, float[]> rows) {
        EpilogueNode selector = topk.by().orElse(topk.input());
        return ((RouterReference.Row) RouterReference.evaluate(selector, scores, rows)).values();
    }

    private static TopK findTopK(EpilogueNode node) {
        return switch (node) {
            case TopK t -> t;
            case Store s -> findTopK(s.input());
            case Renormalize r -> findTopK(r.input());
            case Softmax s -> findTopK(s.input());
            case Scale s -> findTopK(s.input());
            case Sigmoid s -> findTopK(s.input());
            case Dense d -> findTopK(d.input());
            case Add a -> findTopK(a.left());
            default -> throw new IllegalStateException("no topk in " + node);
        };
    }

    private static Map<String, float[]> randomRows(KernelSpec spec, int experts, long seed) {
        Map<String, float[]> rows = new LinkedHashMap<>();
        SplittableRandom r = new SplittableRandom(seed);
        for (KernelParam p : dev.moeforge.codegen.cuda.KernelSignature.of(spec).params()) {
            if (p.role() == KernelParam.Role.INPUT && p.elementType() == DType.FP32) {
                float[] v = new float[experts];
                for (int e = 0; e < experts; e++) {
                    v[e] = (float) (0.3 * r.nextGaussian());
                }
                rows.put(p.name(), v);
            }
        }
        return rows;
    }

    private static void poison(DeviceBuffer weights, DeviceBuffer ids) {
        if (weights.dtype() == DType.BF16) {
            weights.fillBytes16(Bf16.NAN);
        } else {
            weights.fillWords32(0x7FC00000);
        }
        ids.fillWords32(-7);
    }

    private static float[] readWeights(DeviceBuffer b, DType type) {
        float[] out = new float[(int) b.elements()];
        if (type == DType.BF16) {
            short[] raw = new short[out.length];
            b.copyTo(raw);
            for (int i = 0; i < raw.length; i++) {
                out[i] = Bf16.toFloat(raw[i]);
            }
        } else {
            b.copyTo(out);
        }
        return out;
    }
}
