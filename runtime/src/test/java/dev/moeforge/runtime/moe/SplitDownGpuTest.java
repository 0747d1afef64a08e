package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.format.SplitDownWeights;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.SplitDown;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The expert MLP in one kernel (expert_mlp under split_down) against the FP64 reference on fresh
 * random weights and inputs: every 4-bit format, whole and ragged quads (warps with fewer quads),
 * both gate/up layouts, several tokens, an unrouted slot, and the buffer it zeroes for a later launch.
 */
@RequiresGpu
class SplitDownGpuTest extends GpuSession {
    /**
     * The FP32 y against the reference. The intermediate is rounded as the reference rounds it, so
     * what is left is the order of FP32 sums and the odd intermediate on a bf16 rounding edge, which
     * moves every y of its token by its down weight times one bf16 step of that intermediate. The
     * GPU test logs under bench/results show relative L2 errors up to 4.4e-6 and element errors up
     * to 6.2e-6 of the peak (36 cases; at most 2.6e-7 in the 22 whose references were rebuilt from
     * their printed seeds). 1e-4 and 1e-3 leave room for such an intermediate and stay far below a
     * wrong output, which is off by a sizeable fraction of the peak.
     */
    static final Bounds FP32_Y = new Bounds(1e-4, 1e-3);

    /**
     * A graph replay against the first launch: the same FP32 partial sums added into y in another
     * order (a few hundred atomic adds per output), about 1e-7 of the peak each way.
     */
    static final Bounds REPLAY = new Bounds(1e-5, 1e-5);

    /** The catalogue's schedule: 8 warps, 4 per gate_up tile, 2 steps in flight, 3 blocks per SM. */
    static final SplitDown CATALOGUE = new SplitDown(8, 2, 4, 3, false);

    record Case(WeightFormat format, String geometry, ExpertShape shape, GateUpLayout layout, GateFunction gate, int tokens,
                SplitDown schedule, boolean unroutedSlot) {
        @Override
        public String toString() {
            return format.text() + " " + geometry + " M=" + tokens + " " + tag() + (unroutedSlot ? " one slot unrouted" : "");
        }

        String tag() {
            return "w" + schedule.warpsPerCta() + "u" + schedule.kUnroll() + "s" + schedule.warpsPerTile() + "m"
                    + schedule.minBlocksPerSm() + (schedule.orderLoads() ? "o" : "");
        }

        KernelSpec spec() {
            return new KernelSpec("sd_" + format.text() + "_" + geometry + "_m" + tokens + "_" + tag(),
                    new Problem.ExpertMlp(shape, format, DType.BF16, layout), schedule,
                    new Store(new GatedActivation(gate, Acc.GATE, Acc.UP), DType.BF16), runtime.target());
        }
    }

    static final List<WeightFormat> FOUR_BIT = List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL,
            WeightFormat.INT4_GROUP128);

    static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        ExpertShape small = new ExpertShape(256, 128, 9, 3);
        for (WeightFormat f : FOUR_BIT) {
            // 4 quads for 8 warps (half the warps multiply nothing), 3 tokens
            cases.add(new Case(f, "small_256x128_e9_k3", small, GateUpLayout.STACKED, GateFunction.SILU, 3, CATALOGUE, false));
            // 6 quads, interleaved gate/up rows, an unrouted slot
            cases.add(new Case(f, "small_384x256_e5_k2_interleaved", new ExpertShape(384, 256, 5, 2), GateUpLayout.INTERLEAVED,
                    GateFunction.SILU, 2, CATALOGUE, true));
            cases.add(new Case(f, "qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED, GateFunction.SILU,
                    1, CATALOGUE, false));
        }
        // other block shapes: one warp per tile (no combine), 2 per tile with single steps, 16 per tile with 8 in flight
        for (SplitDown s : List.of(new SplitDown(2, 2, 1, 0, false), new SplitDown(4, 1, 2, 0, false),
                new SplitDown(32, 8, 16, 1, true))) {
            cases.add(new Case(WeightFormat.NVFP4, "small_256x128_e9_k3", small, GateUpLayout.STACKED, GateFunction.SILU, 2, s, false));
            cases.add(new Case(WeightFormat.INT4_GROUP128, "small_256x128_e9_k3", small, GateUpLayout.STACKED, GateFunction.SILU, 2, s,
                    false));
        }
        cases.add(new Case(WeightFormat.NVFP4, "qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED,
                GateFunction.SILU, 1, new SplitDown(8, 2, 4, 3, true), false));
        cases.add(new Case(WeightFormat.NVFP4, "qwen3_next_80b", new ExpertShape(2048, 512, 512, 10), GateUpLayout.STACKED,
                GateFunction.SILU, 1, CATALOGUE, false));
        // 45 quads for 8 warps, gpt-oss's activation (no biases: expert_mlp has none)
        cases.add(new Case(WeightFormat.MXFP4, "gpt_oss_20b", new ExpertShape(2880, 2880, 32, 4), GateUpLayout.INTERLEAVED,
                GateFunction.CLAMPED_SWIGLU, 2, CATALOGUE, false));
        return cases;
    }

    static Stream<Case> layerCases() {
        return cases().stream();
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        compileAll(cases().stream().map(Case::spec).toList());
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("layerCases")
    void mlpMatchesReference(Case c) {
        KernelSpec spec = c.spec();
        KernelHandle kernel = runtime.load(spec);
        ExpertShape s = c.shape();
        long seed = System.nanoTime();
        EncodedWeights gu = EncodedWeights.encode(c.format(), FormatGpuTest.upRowsLarger(
                        RowSource.normal(seed, 2 * s.intermediate(), 1.0 / Math.sqrt(s.hidden())), c.layout(), s.intermediate()),
                s.experts(), 2 * s.intermediate(), s.hidden(), Projections.of(c.layout()), "gate_up");
        EncodedWeights dn = EncodedWeights.encode(c.format(), RowSource.normal(seed + 1, s.hidden(), 1.0 / Math.sqrt(s.intermediate())),
                s.experts(), s.hidden(), s.intermediate(), Projections.ONE, "down");
        // gpt-oss's activations 4x larger put gate and up beyond the clamps at +-7
        short[] x = RandomInputs.bf16Normal(seed + 2, c.tokens() * s.hidden(), c.gate() == GateFunction.CLAMPED_SWIGLU ? 4.0 : 1.0);
        Routing routing = RandomInputs.uniformRouting(seed + 3, c.tokens(), s.experts(), s.topk());
        int[] deviceIds = routing.ids().clone();
        Routing reference = routing;
        if (c.unroutedSlot()) {
            // slot 1 of token 0 is unrouted on the device (-1); the reference gives the same slot weight 0
            deviceIds[1] = -1;
            float[] w = routing.weights().clone();
            w[1] = 0.0f;
            reference = new Routing(routing.tokens(), routing.topk(), routing.ids(), w);
        }
        ExpertReference.MlpResult ref = ExpertReference.mlp(spec, x, WeightRows.of(gu), WeightRows.of(dn), reference);
        String where = c + " seed=" + seed;

        int outputs = c.tokens() * s.hidden();
        int tail = s.hidden();  // a row past the M rows the launch zeroes, which it must leave alone
        ExpertMlpLayer layer = new ExpertMlpLayer(kernel);
        try (DeviceWeights dgu = DeviceWeights.upload(gu);
             DeviceWeights ddn = DeviceWeights.upload(SplitDownWeights.of(dn));
             DeviceBuffer dx = DeviceBuffer.allocate(DType.BF16, x.length);
             DeviceBuffer dids = DeviceBuffer.allocate(DType.INT32, deviceIds.length);
             DeviceBuffer dw = DeviceBuffer.allocate(DType.FP32, routing.weights().length);
             DeviceBuffer dy = DeviceBuffer.allocate(DType.FP32, outputs);
             DeviceBuffer dzero = DeviceBuffer.allocate(DType.FP32, outputs + tail)) {
            dx.copyFrom(x);
            dids.copyFrom(deviceIds);
            dw.copyFrom(routing.weights());
            Runnable launch = () -> layer.enqueue(stream, c.tokens(), dx, dgu, ddn, dids, dw, dy, dzero);

            // y is added to: start it at 0.25 everywhere and expect the reference plus 0.25
            float[] start = new float[outputs];
            Arrays.fill(start, 0.25f);
            dy.copyFrom(start);
            float[] nan = new float[outputs + tail];
            Arrays.fill(nan, Float.NaN);
            dzero.copyFrom(nan);
            launch.run();
            stream.synchronize();
            float[] y = new float[outputs];
            dy.copyTo(y);
            for (int i = 0; i < outputs; i++) {
                y[i] -= 0.25f;
            }
            ErrorStats e = ErrorStats.of(ref.y(), y);
            System.out.println(where + ": y " + e);
            FP32_Y.check(e, () -> where);
            float[] zeroed = new float[outputs + tail];
            dzero.copyTo(zeroed);
            for (int i = 0; i < outputs; i++) {
                assertEquals(0, Float.floatToRawIntBits(zeroed[i]), where + ": y_zero[" + i + "] = " + zeroed[i]);
            }
            for (int i = outputs; i < outputs + tail; i++) {
                assertTrue(Float.isNaN(zeroed[i]), where + ": y_zero[" + i + "], past the launch's M rows, was written");
            }

            // replayed from a graph onto a zeroed y, it adds the same sums (in its own order)
            dy.copyFrom(new float[outputs]);
            try (CudaGraph graph = CudaGraph.capture(stream, launch)) {
                graph.launch(stream);
                stream.synchronize();
            }
            float[] replayed = new float[outputs];
            dy.copyTo(replayed);
            ErrorStats r = ErrorStats.of(toDouble(y), replayed);
            REPLAY.check(r, () -> where + ": the graph replay against the first launch");
        }
    }

    private static double[] toDouble(float[] v) {
        double[] out = new double[v.length];
        for (int i = 0; i < v.length; i++) {
            out[i] = v[i];
        }
        return out;
    }
}
