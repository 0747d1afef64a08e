package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.InputNormReference;
import dev.moeforge.dsl.reference.InputNormReference.Drawn;
import dev.moeforge.dsl.reference.LinearReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.RouterReference;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.RouterCluster;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Linear and router kernels that make their input rows from the residual stream (input_norm), on
 * fresh random inputs with every output poisoned: residual_out must be the FP32 sum bit for bit;
 * normed_out within one bf16 step of the FP64 norm's rows; the outputs must be the reference's on
 * the rows the kernel stored (so every block multiplied those rows) and, within the usual bounds,
 * on the reference's own rows. Each case also runs behind a late writer of the residual (the norm
 * must read it after its wait) and as a graph replayed twice (the same bytes).
 */
@RequiresGpu
class InputNormGpuTest extends GpuSession {

    record LinearCase(String name, int inputs, int outputs, DType addend, LinearGemv schedule, int[] tokens) {
        @Override
        public String toString() {
            return name;
        }
    }

    static final List<LinearCase> LINEAR = List.of(
            // the decoder's q/k/v projection at one sequence, its MLP's bf16 output as the addend
            new LinearCase("qkv_2048x5120_bf16", 2048, 5120, DType.BF16, new LinearGemv(8, 16, 8, 8, 1), new int[] {1, 3}),
            // rows split over warps, an fp32 addend
            new LinearCase("split_2048x512_fp32", 2048, 512, DType.FP32, new LinearGemv(16, 8, 4, 4, 1), new int[] {1, 2}),
            // token groups of 8 (a short last group) and of 16 on a short row, 4-byte loads, ragged outputs
            new LinearCase("groups_1024x256_bf16", 1024, 256, DType.BF16, new LinearGemv(8, 16, 8, 8, 8), new int[] {8, 11}),
            new LinearCase("groups_200x77_fp32", 200, 77, DType.FP32, new LinearGemv(4, 4, 2, 4, 16), new int[] {5, 17}));

    record RouterCase(String name, int hidden, int experts, int topk, DType addend, Schedule<Problem.Router> schedule, int[] tokens) {
        @Override
        public String toString() {
            return name;
        }
    }

    static final List<RouterCase> ROUTER = List.of(
            // the decoder's router at one and eight sequences: a cluster of 8, one warp a score
            new RouterCase("cluster_2048x128_fp32", 2048, 128, 8, DType.FP32, new RouterCluster(8, 16, 16, 8), new int[] {1, 8}),
            // each score split over two warps, a bf16 addend
            new RouterCase("cluster_split_2048x64_bf16", 2048, 64, 8, DType.BF16, new RouterCluster(8, 16, 16, 8), new int[] {1, 3}),
            // the two-phase router (tickets), a hidden size of whole groups of four but not of eight
            new RouterCase("gemv_2884x32_fp32", 2884, 32, 4, DType.FP32, new RouterGemv(4, 8, 4, 4), new int[] {1, 5}));

    static KernelSpec linearSpec(LinearCase c, dev.moeforge.dsl.ir.Target target) {
        Problem.Linear p = new Problem.Linear(c.inputs(), c.outputs(), WeightFormat.BF16, DType.BF16, false)
                .withInputNorm(new InputNorm(c.addend(), 1e-6));
        return Validator.check(new KernelSpec("norm_" + c.name(), p, c.schedule(), Epilogues.store(Acc.MAIN, DType.FP32),
                target)).spec();
    }

    static KernelSpec routerSpec(RouterCase c, dev.moeforge.dsl.ir.Target target) {
        Problem.Router p = new Problem.Router(c.hidden(), c.experts(), WeightFormat.BF16, DType.BF16, false)
                .withInputNorm(new InputNorm(c.addend(), 1e-5));
        Store rule = new Store(new Renormalize(new TopK(new Softmax(Acc.MAIN), c.topk(), 1, 1, Optional.empty())), DType.FP32);
        return Validator.check(new KernelSpec("norm_" + c.name(), p, c.schedule(), rule, target)).spec();
    }

    private static LateWriter lateWriter;

    @BeforeAll
    static void compileSuite() throws Exception {
        lateWriter = new LateWriter(runtime);
        List<KernelSpec> all = new ArrayList<>(LINEAR.stream().map(c -> linearSpec(c, runtime.target())).toList());
        all.addAll(ROUTER.stream().map(c -> routerSpec(c, runtime.target())).toList());
        compileAll(all);
    }

    static Stream<Arguments> linearCases() {
        return LINEAR.stream().flatMap(c -> java.util.Arrays.stream(c.tokens()).mapToObj(m -> Arguments.of(c, m)));
    }

    static Stream<Arguments> routerCases() {
        return ROUTER.stream().flatMap(c -> java.util.Arrays.stream(c.tokens()).mapToObj(m -> Arguments.of(c, m)));
    }

    /**
     * One run's fresh inputs: the norm's (a new seed each run, named in `where` for a failure) and a
     * weight matrix of {@code outputs} rows of {@code width}.
     */
    record Fresh(String where, Drawn drawn, short[] w, WeightRows rows) {
        static Fresh draw(KernelSpec spec, String name, int tokens, int width, int outputs) {
            long seed = System.nanoTime();
            Drawn drawn = InputNormReference.random(spec.problem().inputNorm().orElseThrow(), tokens, width, seed);
            short[] w = RandomInputs.bf16Normal(seed + 3, outputs * width, 1.0 / Math.sqrt(width));
            return new Fresh(name + " M=" + tokens + " seed=" + seed, drawn, w, WeightRows.bf16(w, 1, outputs, width));
        }
    }

    /** The drawn input on the device with both outputs poisoned. */
    record OnDevice(DeviceBuffer residual, DeviceBuffer addend, DeviceBuffer weight, DeviceBuffer sum, DeviceBuffer normed)
            implements AutoCloseable {
        static OnDevice upload(Drawn d, DType addendType) {
            DeviceBuffer residual = DeviceBuffer.allocate(DType.FP32, d.residual().length);
            residual.copyFrom(d.residual());
            DeviceBuffer addend = DeviceBuffer.allocate(addendType, d.addend().length);
            if (addendType == DType.BF16) {
                addend.copyFrom(d.addendBf16());
            } else {
                addend.copyFrom(d.addend());
            }
            DeviceBuffer weight = DeviceBuffer.allocate(DType.FP32, d.weight().length);
            weight.copyFrom(d.weight());
            OnDevice on = new OnDevice(residual, addend, weight, DeviceBuffer.allocate(DType.FP32, d.residual().length),
                    DeviceBuffer.allocate(DType.BF16, d.residual().length));
            on.poison();
            return on;
        }

        InputRows rows() {
            return new InputRows.Normed(residual, addend, weight, sum, normed);
        }

        void poison() {
            sum.fillWords32(Float.floatToRawIntBits(Float.NaN));
            normed.fillBytes16(Bf16.NAN);
        }

        /** Checks both outputs against the reference's; returns the normed rows the kernel stored. */
        short[] check(Drawn d, String where) {
            float[] sums = new float[d.residual().length];
            sum.copyTo(sums);
            assertArrayEquals(d.rows().residualOut(), sums, "residual_out is not residual + addend in FP32: " + where);
            short[] rows = download(normed);
            int off = 0;
            for (int i = 0; i < rows.length; i++) {
                int steps = Math.abs(rows[i] - d.rows().normed()[i]);
                assertTrue(steps <= 1, "normed_out[" + i + "] = " + Bf16.toFloat(rows[i]) + ", the FP64 norm's "
                        + Bf16.toFloat(d.rows().normed()[i]) + ": more than one bf16 step apart (" + where + ")");
                off += steps;
            }
            assertTrue(off <= Math.max(4, rows.length / 50), off + " of " + rows.length + " normed values one step off (" + where + ")");
            return rows;
        }

        @Override
        public void close() {
            for (DeviceBuffer b : List.of(residual, addend, weight, sum, normed)) {
                b.close();
            }
        }
    }

    @ParameterizedTest(name = "{0} M={1}")
    @MethodSource("linearCases")
    void linearNormsItsRows(LinearCase c, int tokens) {
        KernelSpec spec = linearSpec(c, runtime.target());
        KernelHandle kernel = runtime.load(spec);
        Fresh f = Fresh.draw(spec, c.name(), tokens, c.inputs(), c.outputs());
        Drawn d = f.drawn();
        short[] w = f.w();
        WeightRows rows = f.rows();
        String where = f.where();
        try (OnDevice in = OnDevice.upload(d, c.addend());
             DeviceBuffer dw = uploadBf16(w);
             DeviceBuffer y = DeviceBuffer.allocate(DType.FP32, (long) tokens * c.outputs())) {
            DeviceBuffer[] args = in.rows().linearArguments(kernel, List.of(dw), y);
            Runnable launch = () -> kernel.launch(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, args);
            y.fillWords32(Float.floatToRawIntBits(Float.NaN));
            launch.run();
            stream.synchronize();
            short[] stored = in.check(d, where);
            float[] got = new float[tokens * c.outputs()];
            y.copyTo(got);
            LinearGpuTest.FP32_OUTPUT.check(ErrorStats.of(LinearReference.run(spec, stored, rows, null), got),
                    () -> "y against the rows the kernel stored: " + where);
            BF16_OUTPUT.check(ErrorStats.of(LinearReference.run(spec, d.rows().normed(), rows, null), got),
                    () -> "y against the FP64 norm's rows: " + where);
            assertSameBytes(in, y, got, stored, () -> { }, launch, where);
        }
    }

    @ParameterizedTest(name = "{0} M={1}")
    @MethodSource("routerCases")
    void routerNormsItsRows(RouterCase c, int tokens) {
        KernelSpec spec = routerSpec(c, runtime.target());
        Fresh f = Fresh.draw(spec, c.name(), tokens, c.hidden(), c.experts());
        Drawn d = f.drawn();
        short[] w = f.w();
        WeightRows rows = f.rows();
        String where = f.where();
        RouterKernel router = new RouterKernel(runtime.load(spec), tokens);
        try (OnDevice in = OnDevice.upload(d, c.addend());
             DeviceBuffer dw = uploadBf16(w);
             DeviceBuffer weightsOut = DeviceBuffer.allocate(DType.FP32, (long) tokens * c.topk());
             DeviceBuffer idsOut = DeviceBuffer.allocate(DType.INT32, (long) tokens * c.topk())) {
            Runnable launch = () -> router.enqueue(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, in.rows(), dw, Map.of(),
                    weightsOut, idsOut);
            weightsOut.fillWords32(Float.floatToRawIntBits(Float.NaN));
            idsOut.fillWords32(-1);
            launch.run();
            stream.synchronize();
            short[] stored = in.check(d, where);
            float[] gotWeights = new float[tokens * c.topk()];
            int[] gotIds = new int[tokens * c.topk()];
            weightsOut.copyTo(gotWeights);
            idsOut.copyTo(gotIds);
            RouterGpuTest.compare(spec, RouterReference.run(spec, stored, rows, Map.of()), Map.of(), c.topk(), c.experts(), gotWeights,
                    gotIds, DType.FP32, "on the rows the kernel stored, " + where);
            assertSameBytes(in, weightsOut, gotWeights, stored, () -> idsOut.fillWords32(-1), launch, where);
            int[] again = new int[gotIds.length];
            idsOut.copyTo(again);
            assertArrayEquals(gotIds, again, "ids after a late writer and a graph replay: " + where);
        } finally {
            router.close();
        }
    }

    /**
     * The launch again behind a late writer of the residual (other bytes in place until the writer
     * copies the right ones in, after the kernel began), then as a graph replayed twice, the outputs
     * poisoned before each: each time the same output and the same normed rows.
     */
    private static void assertSameBytes(OnDevice in, DeviceBuffer out, float[] want, short[] stored, Runnable poisonMore,
                                        Runnable launch, String where) {
        float[] got = new float[want.length];
        try (DeviceBuffer fresh = DeviceBuffer.allocate(DType.FP32, in.residual().elements())) {
            float[] residual = new float[(int) in.residual().elements()];
            in.residual().copyTo(residual);
            fresh.copyFrom(residual);
            in.residual().copyFrom(RandomInputs.floatNormal(residual.length * 31L + 7, residual.length, 1.0));
            in.poison();
            out.fillWords32(Float.floatToRawIntBits(Float.NaN));
            poisonMore.run();
            lateWriter.chain(stream, fresh, in.residual(), launch);
        }
        out.copyTo(got);
        assertArrayEquals(want, got, "after a late writer of the residual: " + where);
        assertArrayEquals(stored, download(in.normed()), "normed_out after a late writer of the residual: " + where);
        in.poison();
        out.fillWords32(Float.floatToRawIntBits(Float.NaN));
        poisonMore.run();
        try (CudaGraph g = CudaGraph.capture(stream, launch)) {
            g.launch(stream);
            g.launch(stream);
            stream.synchronize();
        }
        out.copyTo(got);
        assertArrayEquals(want, got, "graph replay: " + where);
        assertArrayEquals(stored, download(in.normed()), "normed_out after a graph replay: " + where);
    }
}
