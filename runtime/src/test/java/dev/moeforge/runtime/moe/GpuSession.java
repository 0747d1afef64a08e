package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;


import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterAll;

/**
 * The base of the expert layers' GPU test classes: the session of {@link
 * dev.moeforge.runtime.cuda.GpuTestSession}, the bounds an output is held to, and the layers'
 * compile and run helpers.
 */
abstract class GpuSession extends dev.moeforge.runtime.cuda.GpuTestSession {
    /**
     * How far an output may be from the FP64 reference: its relative L2 error, and every element's
     * error as a fraction of the reference's peak |ref| (see {@link ErrorStats#within}).
     */
    record Bounds(double relativeL2, double element) {
        void check(ErrorStats e, Supplier<String> what) {
            assertTrue(e.within(relativeL2, element),
                    () -> what.get() + ": " + e + " (bounds: rel " + relativeL2 + ", each element " + element + " of the peak)");
        }
    }

    /**
     * A bf16 output (gate_up's intermediate, the layer's y). Rounding to bf16 alone moves an output
     * by up to 2^-8 = 3.9e-3 of the peak, and nothing else in these kernels comes near it: in the
     * GPU test logs under bench/results, 808 bf16 outputs whose references were rebuilt from their
     * printed seeds were off by at most 3.8e-3 of the peak, with relative L2 errors up to 2.3e-3.
     * 1e-2 for both leaves 2.5 times the rounding bound.
     */
    static final Bounds BF16_OUTPUT = new Bounds(1e-2, 1e-2);


    /** Whether an expert-centric schedule runs on this GPU: wgmma is sm_90a's. */
    static boolean runsOnThisGpu(ExpertCentric schedule) {
        return !schedule.wgmma() || runtime.target() == Target.SM_90A;
    }

    /** Compiles both kernels of every layer (each once), as {@link #compileAll} does. */
    static void compileLayers(List<ExpertLayerSpecs> layers) throws Exception {
        List<KernelSpec> specs = new ArrayList<>();
        for (ExpertLayerSpecs l : layers) {
            if (!specs.contains(l.gateUp())) {
                specs.add(l.gateUp());
                specs.add(l.down());
            }
        }
        compileAll(specs);
    }

    /** Compiles (through the cache) every spec in parallel, so that the tests then load from the cache. */
    static void compileAll(List<KernelSpec> specs) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(2, Runtime.getRuntime().availableProcessors()));
        try {
            List<Future<?>> jobs = new ArrayList<>();
            for (KernelSpec spec : specs) {
                jobs.add(pool.submit(() -> runtime.load(spec)));
            }
            for (Future<?> f : jobs) {
                f.get();
            }
        } finally {
            pool.shutdown();
        }
    }

    /**
     * Runs {@code layer} on {@code x} and {@code routing} with its outputs poisoned first, checks
     * inter and y against the reference within {@code bounds}, then checks that one graph replay
     * writes the same bytes. {@code where} names the case (and its seeds) in every message.
     */
    static void checkExpertLayer(String where, ExpertLayer layer, short[] x, Routing routing, DeviceWeights gateUp,
                                 DeviceWeights down, ExpertReference.LayerResult ref, Bounds bounds) {
        int tokens = routing.tokens();
        try (LayerBuffers b = LayerBuffers.of(x, routing, ref)) {
            b.poison();
            b.enqueue(layer, tokens, gateUp, down);
            stream.synchronize();
            short[] gotInter = download(b.inter());
            short[] gotY = download(b.y());
            ErrorStats ei = ErrorStats.of(ref.inter().exact(), gotInter);
            ErrorStats ey = ErrorStats.of(ref.y().exact(), gotY);
            System.out.println(where + ": gate_up " + ei + "; y " + ey);
            bounds.check(ei, () -> "gate_up " + where);
            bounds.check(ey, () -> "down " + where);

            // a graph replay computes the same bytes as the direct launch
            b.poison();
            try (CudaGraph graph = CudaGraph.capture(stream, () -> b.enqueue(layer, tokens, gateUp, down))) {
                graph.launch(stream);
                stream.synchronize();
            }
            assertArrayEquals(gotInter, download(b.inter()), () -> "graph replay of gate_up differs: " + where);
            assertArrayEquals(gotY, download(b.y()), () -> "graph replay of down differs: " + where);
        }
    }

    /** An expert layer's geometry under test, named for the test reports. */
    record Geometry(String name, ExpertShape shape, GateUpLayout layout) {
        @Override
        public String toString() {
            return name;
        }
    }

    /** One layer call's device buffers: x and the routing uploaded, inter and y for the outputs. */
    record LayerBuffers(DeviceBuffer x, DeviceBuffer ids, DeviceBuffer weights, DeviceBuffer inter, DeviceBuffer y)
            implements AutoCloseable {
        static LayerBuffers of(short[] x, Routing routing, ExpertReference.LayerResult ref) {
            LayerBuffers b = new LayerBuffers(DeviceBuffer.allocate(DType.BF16, x.length),
                    DeviceBuffer.allocate(DType.INT32, routing.ids().length), DeviceBuffer.allocate(DType.FP32, routing.weights().length),
                    DeviceBuffer.allocate(DType.BF16, ref.inter().stored().length), DeviceBuffer.allocate(DType.BF16, ref.y().stored().length));
            b.x.copyFrom(x);
            b.ids.copyFrom(routing.ids());
            b.weights.copyFrom(routing.weights());
            return b;
        }

        /** Fills both outputs with NaN, so that an output the kernels leave unwritten shows. */
        void poison() {
            inter.fillBytes16(Bf16.NAN);
            y.fillBytes16(Bf16.NAN);
        }

        void enqueue(ExpertLayer layer, int tokens, DeviceWeights gateUp, DeviceWeights down) {
            layer.enqueue(stream, tokens, x, gateUp, down, ids, weights, inter, y);
        }

        @Override
        public void close() {
            x.close();
            ids.close();
            weights.close();
            inter.close();
            y.close();
        }
    }

    /**
     * One geometry's random BF16 layer weights, on the host for the reference and on the device;
     * drawn fresh every run from {@code seed} (print it with any failure).
     */
    record LayerWeights(ExpertShape shape, long seed, short[] gateUp, short[] down, DeviceBuffer deviceGateUp,
                        DeviceBuffer deviceDown) implements AutoCloseable {
        static LayerWeights draw(ExpertShape s, long seed) {
            short[] gu = RandomInputs.bf16Normal(seed, s.experts() * 2 * s.intermediate() * s.hidden(), 1.0 / Math.sqrt(s.hidden()));
            short[] dn = RandomInputs.bf16Normal(seed + 1, s.experts() * s.hidden() * s.intermediate(), 1.0 / Math.sqrt(s.intermediate()));
            return new LayerWeights(s, seed, gu, dn, uploadBf16(gu), uploadBf16(dn));
        }

        @Override
        public void close() {
            deviceGateUp.close();
            deviceDown.close();
        }
    }

    /** The weights of the geometry under test; cases come grouped by geometry, so one set is kept at a time. */
    private static LayerWeights layerWeights;

    static LayerWeights layerWeights(ExpertShape shape, long seed) {
        if (layerWeights == null || !layerWeights.shape().equals(shape) || layerWeights.seed() != seed) {
            releaseLayerWeights();
            layerWeights = LayerWeights.draw(shape, seed);
        }
        return layerWeights;
    }

    static void releaseLayerWeights() {
        if (layerWeights != null) {
            layerWeights.close();
            layerWeights = null;
        }
    }

    static DeviceBuffer uploadBf16(short[] data) {
        DeviceBuffer b = DeviceBuffer.allocate(DType.BF16, data.length);
        b.copyFrom(data);
        return b;
    }

    /** A bf16 buffer's contents. */
    static short[] download(DeviceBuffer b) {
        short[] out = new short[(int) b.elements()];
        b.copyTo(out);
        return out;
    }

    /**
     * A geometry's expert weights in a quantised format, encoded from fresh normal rows (seeded from
     * {@code seed}): the reference's rows and the device's buffers.
     */
    record EncodedLayer(long seed, WeightRows gateUp, WeightRows down, DeviceWeights deviceGateUp, DeviceWeights deviceDown) {}

    private static final Map<String, EncodedLayer> ENCODED_LAYERS = new HashMap<>();

    /** The class's weights of {@code format} for {@code g}, encoded once (seed {@code seed}) and kept until the class ends. */
    static EncodedLayer encodedLayer(WeightFormat format, Geometry g, long seed) {
        return ENCODED_LAYERS.computeIfAbsent(format.text() + "/" + g.name(), key -> {
            ExpertShape s = g.shape();
            EncodedWeights gu = EncodedWeights.encode(format, RowSource.normal(seed, 2 * s.intermediate(), 1.0 / Math.sqrt(s.hidden())),
                    s.experts(), 2 * s.intermediate(), s.hidden(), Projections.of(g.layout()), "gate_up");
            EncodedWeights dn = EncodedWeights.encode(format, RowSource.normal(seed + 1, s.hidden(), 1.0 / Math.sqrt(s.intermediate())),
                    s.experts(), s.hidden(), s.intermediate(), Projections.ONE, "down");
            return new EncodedLayer(seed, WeightRows.of(gu), WeightRows.of(dn), DeviceWeights.upload(gu), DeviceWeights.upload(dn));
        });
    }

    /** Before the session closes (a subclass's {@code @AfterAll} runs before its base's). */
    @AfterAll
    static void releaseWeights() {
        releaseLayerWeights();
        for (EncodedLayer w : ENCODED_LAYERS.values()) {
            w.deviceGateUp().close();
            w.deviceDown().close();
        }
        ENCODED_LAYERS.clear();
    }
}
