package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The expert layer on the GPU against the FP64 CPU reference, on fresh random inputs each run
 * (the seed is in the failure message), outputs poisoned with NaN before every launch.
 */
@RequiresGpu
class ExpertLayerGpuTest extends GpuSession {
    static final List<Geometry> GEOMETRIES = List.of(
            new Geometry("gpt_oss_20b", new ExpertShape(2880, 2880, 32, 4), GateUpLayout.INTERLEAVED),
            new Geometry("qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED),
            new Geometry("qwen3_next_80b", new ExpertShape(2048, 512, 512, 10), GateUpLayout.STACKED),
            new Geometry("odd_136x40_e7_k3", new ExpertShape(136, 40, 7, 3), GateUpLayout.STACKED),
            new Geometry("odd_1032x264_e33_k5", new ExpertShape(1032, 264, 33, 5), GateUpLayout.INTERLEAVED),
            new Geometry("tiny_8x8_e1_k1", new ExpertShape(8, 8, 1, 1), GateUpLayout.STACKED));

    /** A schedule for each half: the token-tiled gate_up keeps one warp per output. */
    record Schedules(OutputCentric gateUp, OutputCentric down) {
        static Schedules both(OutputCentric s) {
            return new Schedules(s, s);
        }

        @Override
        public String toString() {
            return "gate_up " + gateUp + ", down " + down;
        }
    }

    static final List<Schedules> SCHEDULES = List.of(
            Schedules.both(OutputCentricBuilder.create().build()),
            Schedules.both(OutputCentricBuilder.create().warpsPerCta(8).kUnroll(3).loadBytes(8).build()),
            Schedules.both(OutputCentricBuilder.create().tokensPerCta(32).build()),
            Schedules.both(OutputCentricBuilder.create().warpsPerCta(2).kUnroll(2).tokensPerCta(5).build()),
            // several warps per output: split rows (single token), split distinct experts (tiles)
            Schedules.both(OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(4).kUnroll(2).build()),
            new Schedules(OutputCentricBuilder.create().tokensPerCta(32).build(),
                    OutputCentricBuilder.create().warpsPerCta(6).warpsPerOutput(3).kUnroll(4).tokensPerCta(32).build()),
            new Schedules(OutputCentricBuilder.create().tokensPerCta(3).build(),
                    OutputCentricBuilder.create().warpsPerCta(4).warpsPerOutput(2).kUnroll(1).loadBytes(4).tokensPerCta(3).build()));

    /** This run's seed: printed with every failure, so the inputs can be rebuilt. */
    static final long RUN_SEED = System.nanoTime();


    static LayerWeights weightsFor(Geometry g) {
        return layerWeights(g.shape(), RUN_SEED + GEOMETRIES.indexOf(g));
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        List<KernelSpec> specs = new ArrayList<>();
        for (Geometry g : GEOMETRIES) {
            for (Schedules s : SCHEDULES) {
                specs.add(specs(g, s).gateUp());
                specs.add(specs(g, s).down());
            }
        }
        compileAll(specs);
    }


    static ExpertLayerSpecs specs(Geometry g, Schedules s) {
        return ExpertLayerSpecs.of("t_" + g.name() + "_" + tag(s.gateUp()) + "_" + tag(s.down()), g.shape(), g.layout(),
                s.gateUp(), s.down(), runtime.target());
    }

    static String tag(OutputCentric s) {
        return "w" + s.warpsPerCta() + "b" + s.loadBytes() + "u" + s.kUnroll() + "t" + s.tokensPerCta() + "s" + s.warpsPerOutput();
    }

    static Stream<Arguments> cases() {
        List<Arguments> cases = new ArrayList<>();
        int[] tokens = {1, 2, 3, 8, 13, 32};
        for (Geometry g : GEOMETRIES) {
            for (int si = 0; si < SCHEDULES.size(); si++) {
                for (int m : tokens) {
                    // the largest geometries take the long reference only at a few token counts
                    if (g.shape().hidden() >= 2048 && m != 1 && m != 8 && m != 32) {
                        continue;
                    }
                    cases.add(Arguments.of(g, si, m));
                }
            }
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "{0} schedule {1} M={2}")
    @MethodSource("cases")
    void layerMatchesReference(Geometry g, int scheduleIndex, int tokens) {
        ExpertLayerSpecs specs = specs(g, SCHEDULES.get(scheduleIndex));
        ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()));
        LayerWeights w = weightsFor(g);
        long seed = System.nanoTime();
        ExpertShape s = g.shape();
        short[] x = RandomInputs.bf16Normal(seed, tokens * s.hidden(), 1.0);
        Routing routing = RandomInputs.uniformRouting(seed + 1, tokens, s.experts(), s.topk());
        ExpertReference.LayerResult ref = ExpertReference.layer(specs.gateUp(), specs.down(), x,
                WeightRows.bf16(w.gateUp(), s.experts(), 2 * s.intermediate(), s.hidden()),
                WeightRows.bf16(w.down(), s.experts(), s.hidden(), s.intermediate()), routing);
        String where = g + " " + SCHEDULES.get(scheduleIndex) + " M=" + tokens + " seed=" + seed + " weight seed=" + w.seed();
        checkExpertLayer(where, layer, x, routing, DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()),
                ref, BF16_OUTPUT);
    }

    @Test
    void undersizedBufferIsRefusedBeforeLaunch() {
        ExpertLayerSpecs specs = specs(GEOMETRIES.get(3), SCHEDULES.getFirst());
        var gateUp = runtime.load(specs.gateUp());
        ExpertShape s = GEOMETRIES.get(3).shape();
        try (DeviceBuffer x = DeviceBuffer.allocate(DType.BF16, 2L * s.hidden());
             DeviceBuffer w = DeviceBuffer.allocate(DType.BF16, (long) s.experts() * 2 * s.intermediate() * s.hidden());
             DeviceBuffer ids = DeviceBuffer.allocate(DType.INT32, 4L * s.topk());
             DeviceBuffer inter = DeviceBuffer.allocate(DType.BF16, 4L * s.topk() * s.intermediate());
             DeviceBuffer wrongType = DeviceBuffer.allocate(DType.FP32, 4L * s.topk())) {
            var tooFew = org.junit.jupiter.api.Assertions.assertThrows(
                    dev.moeforge.runtime.kernel.KernelLaunchException.class, () -> gateUp.launch(stream, 4, x, w, ids, inter));
            assertTrue(tooFew.getMessage().contains("x [M, 136] needs 544 elements for M = 4"), tooFew.getMessage());
            var badType = org.junit.jupiter.api.Assertions.assertThrows(
                    dev.moeforge.runtime.kernel.KernelLaunchException.class, () -> gateUp.launch(stream, 2, x, w, wrongType, inter));
            assertTrue(badType.getMessage().contains("topk_ids must hold int32"), badType.getMessage());
        }
    }

}
