package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.moe.ExpertCentricGpuTest.RoutingKind;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The expert-centric layer with NVFP4 and MXFP4 weights (each slice's codes and scales decoded to
 * bf16 mma.sync operands: in registers by each warp on one warp row, in shared memory by the block
 * on several) on the GPU against the FP64 reference of the same codes, on
 * fresh random inputs and weights each run, outputs poisoned first: gate_up's intermediate and y
 * within the bf16 output bounds, a graph replay writing the same bytes, and the plan the host
 * twin's. Routings: uniform, one expert taking every token, experts with exactly block_m and
 * block_m +- 1 pairs, ids outside [0, E); outputs that end inside a tile.
 */
@RequiresGpu
class ExpertCentricFourBitGpuTest extends GpuSession {
    static final Geometry QWEN3_30B = ExpertCentricGpuTest.QWEN3_30B;
    static final Geometry SMALL = ExpertCentricGpuTest.SMALL;
    static final Geometry INTERLEAVED = new Geometry("fp4_interleaved_384x256_e12_k3", new ExpertShape(384, 256, 12, 3),
            GateUpLayout.INTERLEAVED);
    /** One slot per token, so a routing can put exactly n pairs on an expert. */
    static final Geometry TOP1 = new Geometry("fp4_top1_128x128_e9_k1", new ExpertShape(128, 128, 9, 1), GateUpLayout.STACKED);
    /** H and I of 384 under tiles of 256 outputs (down) and 128 neurons (gate_up): a row's last tile runs past the outputs. */
    static final Geometry PAST_OUTPUTS = new Geometry("fp4_past_384x384_e6_k2", new ExpertShape(384, 384, 6, 2), GateUpLayout.STACKED);

    /**
     * (gate_up, down): the catalogue's NVFP4 decode-batch pair, 16-pair tiles with 64-wide slices (NVFP4
     * only: an MXFP4 row's scales of a 64-wide slice are 2 bytes), the decoder's prompt pair, 64-pair
     * tiles of 128-wide slices, 128-pair tiles with down's atomic combine (over sm_120a's shared
     * memory), wide tiles whose outputs may end inside a tile, and 16-pair tiles of twice the
     * catalogue's outputs. The 16-pair tiles (one warp row) decode in registers, the others in shared memory.
     */
    static final List<ExpertCentric[]> SCHEDULES = List.of(
            new ExpertCentric[] {new ExpertCentric(16, 32, 128, 1, 4, 4, 1), new ExpertCentric(16, 64, 128, 1, 4, 4, 1)},
            new ExpertCentric[] {new ExpertCentric(16, 64, 64, 1, 4, 4, 1), new ExpertCentric(16, 128, 64, 1, 4, 4, 1)},
            new ExpertCentric[] {new ExpertCentric(64, 64, 64, 2, 2, 4, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8)},
            new ExpertCentric[] {new ExpertCentric(64, 64, 128, 2, 2, 3, 8), new ExpertCentric(64, 128, 128, 2, 2, 3, 8)},
            new ExpertCentric[] {new ExpertCentric(128, 64, 128, 4, 2, 3, 8),
                    new ExpertCentric(128, 128, 128, 4, 2, 3, 8).withAtomicCombine(true)},
            new ExpertCentric[] {new ExpertCentric(32, 128, 64, 2, 4, 3, 1), new ExpertCentric(32, 256, 64, 2, 4, 3, 1)},
            new ExpertCentric[] {new ExpertCentric(16, 64, 128, 1, 4, 4, 1), new ExpertCentric(16, 128, 128, 1, 4, 4, 1)});

    static final List<WeightFormat> FORMATS = List.of(WeightFormat.NVFP4, WeightFormat.MXFP4);

    record Case(WeightFormat format, Geometry geometry, int schedule, int tokens, RoutingKind routing) {
        @Override
        public String toString() {
            return format.text() + " " + geometry + " schedule " + schedule + " M=" + tokens + " " + routing;
        }
    }

    /** Whether a schedule takes a format: MXFP4's scales of a row fill a 4-byte copy from 128-wide slices. */
    static boolean takes(WeightFormat format, int schedule) {
        return format.equals(WeightFormat.NVFP4) || SCHEDULES.get(schedule)[0].blockK() == 128;
    }

    static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (WeightFormat f : FORMATS) {
            for (int s = 0; s < SCHEDULES.size(); s++) {
                if (!takes(f, s)) {
                    continue;
                }
                for (int m : new int[] {1, 5, 64, 300}) {
                    cases.add(new Case(f, SMALL, s, m, RoutingKind.UNIFORM));
                }
                cases.add(new Case(f, SMALL, s, 40, RoutingKind.OUTSIDE_IDS));
                cases.add(new Case(f, INTERLEAVED, s, 17, RoutingKind.UNIFORM));
                cases.add(new Case(f, INTERLEAVED, s, 200, RoutingKind.UNIFORM));
                cases.add(new Case(f, TOP1, s, 3 * 64 + 40, RoutingKind.BLOCK_EDGES));
                cases.add(new Case(f, TOP1, s, 300, RoutingKind.ALL_ON_EXPERT_0));
            }
            cases.add(new Case(f, QWEN3_30B, 0, 8, RoutingKind.UNIFORM));  // the catalogue's decode-batch pair
            cases.add(new Case(f, QWEN3_30B, 0, 32, RoutingKind.UNIFORM));
            cases.add(new Case(f, QWEN3_30B, 6, 8, RoutingKind.UNIFORM));
            cases.add(new Case(f, QWEN3_30B, 3, 256, RoutingKind.UNIFORM));
        }
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_30B, 2, 256, RoutingKind.UNIFORM));  // the decoder's prompt pair
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_30B, 5, 64, RoutingKind.UNIFORM));
        cases.add(new Case(WeightFormat.NVFP4, PAST_OUTPUTS, 5, 3, RoutingKind.UNIFORM));
        cases.add(new Case(WeightFormat.NVFP4, PAST_OUTPUTS, 5, 100, RoutingKind.UNIFORM));
        cases.add(new Case(WeightFormat.NVFP4, PAST_OUTPUTS, 5, 40, RoutingKind.OUTSIDE_IDS));
        return cases;
    }

    static Stream<Arguments> arguments() {
        return cases().stream().map(Arguments::of);
    }

    static ExpertLayerSpecs specs(Case c, Target target) {
        ExpertCentric[] s = SCHEDULES.get(c.schedule());
        return ExpertLayerSpecs.of("ec_" + c.format().text() + "_" + c.geometry().name() + "_" + c.schedule(), c.geometry().shape(),
                c.geometry().layout(), c.format(), s[0], s[1], target);
    }

    static EncodedLayer weightsFor(WeightFormat f, Geometry g) {
        return encodedLayer(f, g, ExpertCentricGpuTest.RUN_SEED + (f.text() + "/" + g.name()).hashCode());
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        compileLayers(cases().stream().map(c -> specs(c, runtime.target())).toList());
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("arguments")
    void fourBitLayerMatchesReference(Case c) {
        ExpertLayerSpecs specs = specs(c, runtime.target());
        EncodedLayer w = weightsFor(c.format(), c.geometry());
        ExpertShape s = c.geometry().shape();
        long seed = System.nanoTime();
        short[] x = RandomInputs.bf16Normal(seed, c.tokens() * s.hidden(), 1.0);
        Routing routing = ExpertCentricGpuTest.routing(new ExpertCentricGpuTest.Case(c.geometry(), c.schedule(), c.tokens(), c.routing()),
                seed + 1);
        boolean outside = c.routing() == RoutingKind.OUTSIDE_IDS;
        Routing referenceRouting = outside ? ExpertCentricGpuTest.withoutOutsideIds(routing, s.experts()) : routing;
        ExpertReference.LayerResult ref = ExpertReference.layer(specs.gateUp(), specs.down(), x, w.gateUp(), w.down(), referenceRouting);
        String where = c + " seed=" + seed + " weight seed=" + w.seed();
        try (ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()),
                LaunchOrder.OVERLAPPING_PREVIOUS, Math.max(c.tokens(), 16))) {
            boolean atomic = SCHEDULES.get(c.schedule())[1].atomicCombine();
            if (outside || atomic) {
                ExpertCentricGpuTest.checkY(where, layer, x, routing, w.deviceGateUp(), w.deviceDown(), ref, !atomic);
            } else {
                checkExpertLayer(where, layer, x, routing, w.deviceGateUp(), w.deviceDown(), ref, BF16_OUTPUT);
            }
            ExpertCentricGpuTest.checkPlan(where, layer, routing, s);
        }
    }
}
