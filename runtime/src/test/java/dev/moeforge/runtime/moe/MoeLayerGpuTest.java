package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.build.OutputTensorCoreBuilder;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.RouterReference;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.util.Map;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Router, gate_up and down chained on the device (the MoE layer as one unit): the routing the GPU
 * wrote matches the router reference (up to FP32 near-ties), y matches the expert reference run
 * on that routing, and one graph of the whole layer replays bit-identically. The router is the
 * default decode schedule or, where {@code router_tile} is set, router_tiled with a cluster split
 * (which lets the next kernel begin only after its scores phase).
 */
@RequiresGpu
class MoeLayerGpuTest extends GpuSession {

    @ParameterizedTest(name = "H={0} I={1} E={2} k={3} M={4} tokens_per_cta={5} router_tile={6}")
    @CsvSource({"2048, 768, 128, 8, 1, 1, 0", "2048, 768, 128, 8, 5, 8, 0", "520, 136, 24, 3, 13, 4, 0",
                "2048, 768, 128, 8, 40, 8, 16", "520, 136, 24, 3, 37, 4, 32"})
    void layerMatchesReference(int hidden, int intermediate, int experts, int topk, int tokens, int tile, int routerTile) {
        long seed = System.nanoTime();
        ExpertShape shape = new ExpertShape(hidden, intermediate, experts, topk);
        KernelBuilder routerBuilder = KernelBuilder.named("l_router_" + experts + "_" + topk + "_m" + routerTile).router(hidden, experts)
                .epilogue(RoutingRules.softmaxTopKRenormalized(topk, DType.FP32)).target(runtime.target());
        if (routerTile > 0) {
            routerBuilder.schedule(new RouterTiled(routerTile, 16, 8, 64, 3, 2, 2));
        }
        KernelSpec routerSpec = routerBuilder.build();
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("l_" + hidden + "_" + experts + "_t" + tile, shape, GateUpLayout.STACKED,
                OutputCentricBuilder.create().tokensPerCta(tile).build(), runtime.target());
        short[] x = RandomInputs.bf16Normal(seed, tokens * hidden, 1.0);
        short[] wr = RandomInputs.bf16Normal(seed + 1, experts * hidden, 1.0 / Math.sqrt(hidden));
        short[] wgu = RandomInputs.bf16Normal(seed + 2, experts * 2 * intermediate * hidden, 1.0 / Math.sqrt(hidden));
        short[] wdn = RandomInputs.bf16Normal(seed + 3, experts * hidden * intermediate, 1.0 / Math.sqrt(intermediate));
        String where = "seed=" + seed;

        try (Layers layers = Layers.load(routerSpec, specs, tokens); DeviceBuffer dx = upload(x); DeviceBuffer dwr = upload(wr);
             DeviceBuffer dguBuffer = upload(wgu); DeviceBuffer ddnBuffer = upload(wdn); Scratch scratch = Scratch.of(tokens, shape)) {
            MoeLayer layer = layers.overlapping();
            DeviceWeights dgu = DeviceWeights.bf16(dguBuffer), ddn = DeviceWeights.bf16(ddnBuffer);
            DeviceBuffer ids = scratch.ids(), weights = scratch.weights(), inter = scratch.inter(), y = scratch.y();
            Written first = runPoisoned(layer, tokens, dx, dwr, Map.of(), dgu, ddn, scratch);
            int[] gotIds = first.ids();
            float[] gotWeights = first.weights();
            short[] gotY = first.y();

            assertRouting(RouterReference.run(routerSpec, x, WeightRows.bf16(wr, 1, experts, hidden), Map.of()), null, first, topk, where);
            // y against the expert reference on the routing the router wrote
            ExpertReference.LayerResult expected = ExpertReference.layer(specs.gateUp(), specs.down(), x,
                    WeightRows.bf16(wgu, experts, 2 * intermediate, hidden), WeightRows.bf16(wdn, experts, hidden, intermediate),
                    new Routing(tokens, topk, gotIds, gotWeights));
            ErrorStats e = ErrorStats.of(expected.y().exact(), gotY);
            System.out.println("moe layer H=" + hidden + " E=" + experts + " M=" + tokens + ": y " + e);
            BF16_OUTPUT.check(e, () -> "y (" + where + ")");

            // the whole layer in one graph: the same bytes again
            y.fillBytes16(Bf16.NAN);
            try (CudaGraph g = CudaGraph.capture(stream,
                    () -> layer.enqueue(stream, tokens, dx, dwr, Map.of(), dgu, ddn, ids, weights, inter, y))) {
                g.launch(stream);
                stream.synchronize();
            }
            short[] again = new short[gotY.length];
            y.copyTo(again);
            assertArrayEquals(gotY, again, "graph replay of the layer differs (" + where + ")");

            // overlapping launches (the default) and serial ones write the same bytes, in a graph of
            // three chained layers (each layer's y is the next one's x, so a kernel that read its
            // input before its predecessor finished would show)
            assertArrayEquals(chainOfThree(layers.serial(), tokens, dx, dwr, Map.of(), dgu, ddn, scratch),
                    chainOfThree(layer, tokens, dx, dwr, Map.of(), dgu, ddn, scratch), "overlapping and serial launches differ (" + where + ")");
        }
    }

    /**
     * A 4-bit layer on the tensor cores (gate_up 8 warps, 4 per tile, 2 steps; down as the
     * catalogue's NVFP4 one: 32 warps on a tile, two groups of one step in turn), chained three
     * deep under overlapping launches: a kernel that read its routing or its input before its
     * predecessor finished would write other bytes than serial launches. The first layer's y is
     * checked against the expert reference on the routing the router wrote.
     */
    @ParameterizedTest(name = "{0} H={1} I={2} E={3} k={4} M={5}")
    @CsvSource({"nvfp4, 2048, 768, 128, 8, 1", "mxfp4, 2048, 768, 128, 8, 2", "int4_group128, 1024, 256, 64, 4, 3",
                "int4_channel, 544, 160, 24, 3, 5"})
    void quantisedLayerChainsUnderOverlappingLaunches(String formatName, int hidden, int intermediate, int experts, int topk,
                                                      int tokens) {
        long seed = System.nanoTime();
        String where = formatName + " seed=" + seed;
        WeightFormat format = WeightFormat.ALL.stream().filter(f -> f.text().equals(formatName)).findFirst().orElseThrow();
        ExpertShape shape = new ExpertShape(hidden, intermediate, experts, topk);
        KernelSpec routerSpec = KernelBuilder.named("q_router_" + hidden + "_" + experts + "_" + topk).router(hidden, experts)
                .epilogue(RoutingRules.softmaxTopKRenormalized(topk, DType.FP32)).target(runtime.target()).build();
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("q_" + formatName + "_" + hidden + "_" + experts, shape, GateUpLayout.STACKED,
                format, OutputTensorCoreBuilder.create().build(),
                OutputTensorCoreBuilder.create().warpsPerCta(32).warpsPerTile(32).kUnroll(1).build(), runtime.target());
        EncodedWeights gu = EncodedWeights.encode(format, RowSource.normal(seed, 2 * intermediate, 1.0 / Math.sqrt(hidden)), experts,
                2 * intermediate, hidden, Projections.of(GateUpLayout.STACKED), "gate_up");
        EncodedWeights dn = EncodedWeights.encode(format, RowSource.normal(seed + 1, hidden, 1.0 / Math.sqrt(intermediate)), experts,
                hidden, intermediate, Projections.ONE, "down");
        short[] x = RandomInputs.bf16Normal(seed + 2, tokens * hidden, 1.0);
        short[] wr = RandomInputs.bf16Normal(seed + 3, experts * hidden, 1.0 / Math.sqrt(hidden));

        try (Layers layers = Layers.load(routerSpec, specs, tokens); DeviceBuffer dx = upload(x); DeviceBuffer dwr = upload(wr);
             DeviceWeights dgu = DeviceWeights.upload(gu); DeviceWeights ddn = DeviceWeights.upload(dn);
             Scratch scratch = Scratch.of(tokens, shape)) {
            Written first = runPoisoned(layers.overlapping(), tokens, dx, dwr, Map.of(), dgu, ddn, scratch);
            ExpertReference.LayerResult expected = ExpertReference.layer(specs.gateUp(), specs.down(), x, WeightRows.of(gu),
                    WeightRows.of(dn), new Routing(tokens, topk, first.ids(), first.weights()));
            ErrorStats e = ErrorStats.of(expected.y().exact(), first.y());
            System.out.println("quantised moe layer " + formatName + " H=" + hidden + " E=" + experts + " M=" + tokens + ": y " + e);
            BF16_OUTPUT.check(e, () -> "y (" + where + ")");

            assertArrayEquals(chainOfThree(layers.serial(), tokens, dx, dwr, Map.of(), dgu, ddn, scratch),
                    chainOfThree(layers.overlapping(), tokens, dx, dwr, Map.of(), dgu, ddn, scratch),
                    "overlapping and serial launches differ (" + where + ")");
        }
    }

    /**
     * gpt-oss-20b's whole layer (H = I = 2880, E = 32, k = 4) as the model runs it: the router adds its
     * bias to the logits before the top-k and takes the softmax of the k best, then MXFP4 experts with
     * gate and up rows interleaved, the clamped SwiGLU and a bias in both projections. The routing is
     * checked against the router reference (up to FP32 near-ties of the biased logits), y against the
     * expert reference on the routing the router wrote, and three chained layers under overlapping
     * launches against serial ones.
     */
    @ParameterizedTest(name = "M={0}")
    @CsvSource({"1", "3"})
    void gptOss20bLayerWithItsRouterBiasAndExpertBiases(int tokens) {
        long seed = System.nanoTime();
        String where = "gpt-oss-20b M=" + tokens + " seed=" + seed;
        int hidden = 2880;
        int intermediate = 2880;
        int experts = 32;
        int topk = 4;
        ExpertShape shape = new ExpertShape(hidden, intermediate, experts, topk);
        KernelSpec routerSpec = KernelBuilder.named("g_router_gpt_oss_20b").router(hidden, experts)
                .epilogue(RoutingRules.biasedTopKSoftmax(topk, "router_bias", DType.FP32)).target(runtime.target()).build();
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("g_gpt_oss_20b", shape, GateUpLayout.INTERLEAVED, WeightFormat.MXFP4,
                        OutputTensorCoreBuilder.create().build(),
                        OutputTensorCoreBuilder.create().warpsPerCta(32).warpsPerTile(32).kUnroll(1).build(), runtime.target())
                .withGate(GateFunction.CLAMPED_SWIGLU).withBias();
        EncodedWeights gu = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.normal(seed, 2 * intermediate, 1.0 / Math.sqrt(hidden)),
                experts, 2 * intermediate, hidden, Projections.of(GateUpLayout.INTERLEAVED), "gate_up");
        EncodedWeights dn = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.normal(seed + 1, hidden, 1.0 / Math.sqrt(intermediate)),
                experts, hidden, intermediate, Projections.ONE, "down");
        // biases of the size of a row's typical sum, so that they move the clamps', the selection's and the combine's inputs
        float[] guBias = RandomInputs.floatNormal(seed + 2, experts * 2 * intermediate, 0.5);
        float[] dnBias = RandomInputs.floatNormal(seed + 3, experts * hidden, 0.5);
        float[] routerBias = RandomInputs.floatNormal(seed + 4, experts, 0.5);
        short[] x = RandomInputs.bf16Normal(seed + 5, tokens * hidden, 1.0);
        short[] wr = RandomInputs.bf16Normal(seed + 6, experts * hidden, 1.0 / Math.sqrt(hidden));

        try (Layers layers = Layers.load(routerSpec, specs, tokens); DeviceBuffer dx = upload(x); DeviceBuffer dwr = upload(wr);
             DeviceBuffer bias = DeviceBuffer.allocate(DType.FP32, experts);
             DeviceWeights dgu = DeviceWeights.upload(gu, guBias); DeviceWeights ddn = DeviceWeights.upload(dn, dnBias);
             Scratch scratch = Scratch.of(tokens, shape)) {
            bias.copyFrom(routerBias);
            Map<String, DeviceBuffer> rows = Map.of("router_bias", bias);
            Written first = runPoisoned(layers.overlapping(), tokens, dx, dwr, rows, dgu, ddn, scratch);

            assertRouting(RouterReference.run(routerSpec, x, WeightRows.bf16(wr, 1, experts, hidden), Map.of("router_bias", routerBias)),
                    routerBias, first, topk, where);
            ExpertReference.LayerResult expected = ExpertReference.layer(specs.gateUp(), specs.down(), x, WeightRows.of(gu).withBias(guBias),
                    WeightRows.of(dn).withBias(dnBias), new Routing(tokens, topk, first.ids(), first.weights()));
            ErrorStats e = ErrorStats.of(expected.y().exact(), first.y());
            System.out.println("gpt-oss-20b layer M=" + tokens + ": y " + e);
            BF16_OUTPUT.check(e, () -> "y (" + where + ")");

            assertArrayEquals(chainOfThree(layers.serial(), tokens, dx, dwr, rows, dgu, ddn, scratch),
                    chainOfThree(layers.overlapping(), tokens, dx, dwr, rows, dgu, ddn, scratch),
                    "overlapping and serial launches differ (" + where + ")");
        }
    }

    /** A router and its expert kernels as one layer launched overlapping (as the runtime does) and one launched serially. */
    record Layers(RouterKernel router, MoeLayer overlapping, MoeLayer serial) implements AutoCloseable {
        static Layers load(KernelSpec routerSpec, ExpertLayerSpecs specs, int tokens) {
            RouterKernel router = new RouterKernel(runtime.load(routerSpec), tokens);
            ExpertLayer experts = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()));
            return new Layers(router, new MoeLayer(router, experts),
                    new MoeLayer(router, new ExpertLayer(experts.gateUp(), experts.down(), LaunchOrder.AFTER_PREVIOUS)));
        }

        @Override
        public void close() {
            router.close();
        }
    }

    /**
     * The routing a layer's router wrote against the router reference, slot by slot: the same expert,
     * or one whose selection score (the FP64 score plus {@code selectionBias}, if the rule adds one
     * before its top-k) is within 1e-5 of the reference's, a near-tie FP32 sums may order either way;
     * where the expert is the same, its weight within 1e-4.
     */
    private static void assertRouting(RouterReference.Result ref, float[] selectionBias, Written got, int topk, String where) {
        for (int t = 0; t < ref.scores().length; t++) {
            RouterReference.Selection want = (RouterReference.Selection) ref.exact()[t];
            double[] scores = ref.scores()[t];
            for (int j = 0; j < topk; j++) {
                int e = got.ids()[t * topk + j];
                int w = want.ids()[j];
                String at = "token " + t + " slot " + j + ": expert " + e + ", reference " + w + " (" + where + ")";
                if (e == w) {
                    assertEquals(want.values()[j], got.weights()[t * topk + j], 1e-4 * Math.abs(want.values()[j]) + 1e-6, at);
                    continue;
                }
                assertTrue(e >= 0 && e < scores.length, at);
                double se = scores[e] + (selectionBias == null ? 0 : selectionBias[e]);
                double sw = scores[w] + (selectionBias == null ? 0 : selectionBias[w]);
                assertTrue(Math.abs(se - sw) <= 1e-5 * (1 + Math.abs(sw)), at);
            }
        }
    }

    /** A layer's routing table, intermediate and output on the device, for {@code tokens} tokens. */
    record Scratch(DeviceBuffer ids, DeviceBuffer weights, DeviceBuffer inter, DeviceBuffer y) implements AutoCloseable {
        static Scratch of(int tokens, ExpertShape shape) {
            long slots = (long) tokens * shape.topk();
            return new Scratch(DeviceBuffer.allocate(DType.INT32, slots), DeviceBuffer.allocate(DType.FP32, slots),
                    DeviceBuffer.allocate(DType.BF16, slots * shape.intermediate()),
                    DeviceBuffer.allocate(DType.BF16, (long) tokens * shape.hidden()));
        }

        @Override
        public void close() {
            ids.close();
            weights.close();
            inter.close();
            y.close();
        }
    }

    /** What one layer wrote: its routing and y. */
    record Written(int[] ids, float[] weights, short[] y) {}

    /** One layer launched into poisoned routing and output buffers (ids -1, weights and y NaN), then read back. */
    private static Written runPoisoned(MoeLayer layer, int tokens, DeviceBuffer x, DeviceBuffer wRouter, Map<String, DeviceBuffer> rows,
                                       DeviceWeights gateUp, DeviceWeights down, Scratch s) {
        s.ids().fillWords32(-1);
        s.weights().fillWords32(0x7FC00000);
        s.y().fillBytes16(Bf16.NAN);
        layer.enqueue(stream, tokens, x, wRouter, rows, gateUp, down, s.ids(), s.weights(), s.inter(), s.y());
        stream.synchronize();
        int k = layer.experts().shape().topk();
        Written w = new Written(new int[tokens * k], new float[tokens * k], new short[tokens * layer.experts().shape().hidden()]);
        s.ids().copyTo(w.ids());
        s.weights().copyTo(w.weights());
        s.y().copyTo(w.y());
        return w;
    }

    /**
     * y after three layers chained in one graph, each layer's y the next one's x, launched as
     * {@code l} launches (so a kernel that read its input before its predecessor finished shows).
     */
    private static short[] chainOfThree(MoeLayer l, int tokens, DeviceBuffer x, DeviceBuffer wRouter, Map<String, DeviceBuffer> rows,
                                        DeviceWeights gateUp, DeviceWeights down, Scratch s) {
        long outputs = (long) tokens * l.experts().shape().hidden();
        try (DeviceBuffer y1 = DeviceBuffer.allocate(DType.BF16, outputs);
             DeviceBuffer y2 = DeviceBuffer.allocate(DType.BF16, outputs);
             CudaGraph g = CudaGraph.capture(stream, () -> {
                 l.enqueue(stream, tokens, x, wRouter, rows, gateUp, down, s.ids(), s.weights(), s.inter(), y1);
                 l.enqueue(stream, tokens, y1, wRouter, rows, gateUp, down, s.ids(), s.weights(), s.inter(), y2);
                 l.enqueue(stream, tokens, y2, wRouter, rows, gateUp, down, s.ids(), s.weights(), s.inter(), s.y());
             })) {
            s.y().fillBytes16(Bf16.NAN);
            g.launch(stream);
            stream.synchronize();
            short[] out = new short[(int) outputs];
            s.y().copyTo(out);
            return out;
        }
    }

    private static DeviceBuffer upload(short[] data) {
        DeviceBuffer b = DeviceBuffer.allocate(DType.BF16, data.length);
        b.copyFrom(data);
        return b;
    }
}
