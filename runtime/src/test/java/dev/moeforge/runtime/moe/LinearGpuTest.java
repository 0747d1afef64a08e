package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.LinearReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.LinearMma;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Linear projections on the GPU against the FP64 reference on fresh random inputs: the decoder's
 * shapes (q, k/v and o projections, gpt-oss's biased ones, an LM head of Qwen3's vocabulary), a
 * ragged one, bf16 and fp32 outputs, epilogues beyond the plain store, and schedules with one warp
 * per output, several outputs per warp, outputs split over warps, and token groups of 2 to 16 (full
 * and with a shorter last group); and on the tensor cores (linear_mma) with 1 to 4 row tiles, token
 * tiles of 8 to 32 (full and short) and 1 to 16 warps over the inputs, ragged rows and outputs included.
 */
@RequiresGpu
class LinearGpuTest extends GpuSession {
    /** FP32 outputs: FP32 sums of bf16 products in another order than FP64's. */
    static final Bounds FP32_OUTPUT = new Bounds(1e-5, 1e-4);

    record Case(String name, int inputs, int outputs, boolean bias, Store epilogue, int[] tokens) {
        @Override
        public String toString() {
            return name;
        }
    }

    static final List<Case> CASES = List.of(
            new Case("qwen3_q_2048x4096", 2048, 4096, false, Epilogues.store(Acc.MAIN, DType.BF16), new int[] {1, 3, 17, 32, 64}),
            new Case("qwen3_kv_2048x512", 2048, 512, false, Epilogues.store(Acc.MAIN, DType.BF16), new int[] {1, 8, 9}),
            new Case("qwen3_o_4096x2048_fp32", 4096, 2048, false, Epilogues.store(Acc.MAIN, DType.FP32), new int[] {1, 5}),
            new Case("gpt_oss_q_bias_2880x4096", 2880, 4096, true, Epilogues.store(Acc.MAIN, DType.BF16), new int[] {1, 4}),
            new Case("lm_head_2048x151936_fp32", 2048, 151936, false, Epilogues.store(Acc.MAIN, DType.FP32), new int[] {1, 8}),
            new Case("ragged_200x77_bias_sigmoid", 200, 77, true, new Store(new Sigmoid(new Scale(Acc.MAIN, 0.5)), DType.FP32),
                    new int[] {1, 9}));

    static final List<Schedule<Problem.Linear>> SCHEDULES = List.of(
            new LinearGemv(8, 16, 8, 8, 1),
            new LinearGemv(4, 16, 4, 16, 1),
            // 16 warps on 4 outputs: each row split over 4 warps
            new LinearGemv(16, 8, 4, 4, 1),
            new LinearGemv(2, 4, 2, 1, 1),
            // token groups: the decoder's batches (one row per warp, a whole row of 2048 in one step)
            new LinearGemv(8, 16, 8, 8, 8),
            new LinearGemv(8, 16, 16, 8, 4),
            // a group with split rows, and groups of 16 with a ragged tail
            new LinearGemv(16, 8, 4, 4, 2),
            new LinearGemv(4, 16, 4, 4, 16),
            // tensor cores: the decoder's batches of 8 and 32, 16-token tiles, one warp on four row tiles,
            // and more warps than a ragged row has steps
            new LinearMma(8, 4, 16, 8),
            new LinearMma(8, 2, 32, 32),
            new LinearMma(4, 8, 16, 16),
            new LinearMma(1, 2, 64, 8),
            new LinearMma(16, 1, 16, 24),
            // two row tiles by two token tiles, four by eight, and the decoder's shape at its largest
            new LinearMma(8, 4, 32, 16),
            new LinearMma(4, 4, 32, 64),
            new LinearMma(8, 4, 16, 64));

    static KernelSpec spec(Case c, int schedule) {
        return Validator.check(new KernelSpec("lin_" + c.name() + "_s" + schedule,
                new Problem.Linear(c.inputs(), c.outputs(), WeightFormat.BF16, DType.BF16, c.bias()), SCHEDULES.get(schedule),
                c.epilogue(), runtime.target())).spec();
    }

    private static LateWriter lateWriter;

    @BeforeAll
    static void compileSuite() throws Exception {
        lateWriter = new LateWriter(runtime);
        compileAll(cases().map(a -> spec((Case) a.get()[0], (Integer) a.get()[1])).distinct().toList());
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (int s = 0; s < SCHEDULES.size(); s++) {
            for (Case c : CASES) {
                try {
                    spec(c, s);
                } catch (SpecException e) {
                    continue;  // e.g. 16-byte loads on a ragged row
                }
                for (int m : c.tokens()) {
                    out.add(Arguments.of(c, s, m));
                }
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0} schedule {1} M={2}")
    @MethodSource("cases")
    void linearMatchesReference(Case c, int schedule, int tokens) {
        long seed = System.nanoTime();
        KernelSpec spec = spec(c, schedule);
        KernelHandle kernel = runtime.load(spec);
        short[] x = RandomInputs.bf16Normal(seed, tokens * c.inputs(), 1.0);
        short[] w = RandomInputs.bf16Normal(seed + 1, c.outputs() * c.inputs(), 1.0 / Math.sqrt(c.inputs()));
        float[] bias = c.bias() ? RandomInputs.floatNormal(seed + 2, c.outputs(), 0.3) : null;
        double[] ref = LinearReference.run(spec, x, WeightRows.bf16(w, 1, c.outputs(), c.inputs()), bias);
        DType out = c.epilogue().dtype();
        try (DeviceBuffer dx = uploadBf16(x);
             DeviceBuffer dw = uploadBf16(w);
             DeviceBuffer db = DeviceBuffer.allocate(DType.FP32, Math.max(1, c.outputs()));
             DeviceBuffer y = DeviceBuffer.allocate(out, (long) tokens * c.outputs())) {
            y.fillBytes16((short) 0x7FC0);  // NaN in bf16, and in fp32 (0x7FC07FC0)
            if (bias != null) {
                db.copyFrom(bias);
            }
            DeviceBuffer[] args = bias != null ? new DeviceBuffer[] {dx, dw, db, y} : new DeviceBuffer[] {dx, dw, y};
            kernel.launch(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, args);
            stream.synchronize();
            ErrorStats e;
            Bounds bounds;
            if (out == DType.BF16) {
                e = ErrorStats.of(ref, download(y));
                bounds = BF16_OUTPUT;
            } else {
                float[] got = new float[ref.length];
                y.copyTo(got);
                e = ErrorStats.of(ref, got);
                bounds = FP32_OUTPUT;
            }
            bounds.check(e, () -> spec.name() + " M=" + tokens + " seed=" + seed + " first outputs "
                    + Arrays.toString(Arrays.copyOf(ref, Math.min(4, ref.length))));

            // in a chain, overlapping a kernel that writes x late: the same bytes (no input read before the wait)
            byte[] alone = new byte[(int) y.bytes()];
            y.copyTo(alone);
            try (DeviceBuffer fresh = uploadBf16(x)) {
                dx.copyFrom(RandomInputs.bf16Normal(seed + 3, x.length, 1.0));
                y.fillBytes16((short) 0x7FC0);
                lateWriter.chain(stream, fresh, dx, () -> kernel.launch(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, args));
            }
            byte[] chained = new byte[alone.length];
            y.copyTo(chained);
            assertArrayEquals(alone, chained, spec.name() + " M=" + tokens
                    + ": after a late writer of x the output differs");
        }
    }
}
