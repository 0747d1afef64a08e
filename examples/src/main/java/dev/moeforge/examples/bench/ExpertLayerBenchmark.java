package dev.moeforge.examples.bench;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.SplitDownWeights;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.SplitDown;
import dev.moeforge.examples.bench.GpuTimer.Timing;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.moe.DeviceWeights;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.ExpertMlpLayer;
import dev.moeforge.runtime.moe.MoeLayer;
import dev.moeforge.runtime.moe.RouterKernel;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.function.Consumer;

/**
 * Times the expert layer as a decode step runs it: the weights of
 * {@code layers} layers (together far beyond L2) are filled on the device, each layer gets its own
 * random routing, and one CUDA graph runs all layers back to back; the time per layer is the
 * graph's time divided by the layer count. gate_up alone and down alone are timed the same way,
 * for the split. Bytes counted are the distinct routed experts' weights: each routed expert costs
 * one read per layer however many tokens share it.
 */
public final class ExpertLayerBenchmark implements AutoCloseable {
    public record Variant(String name, ExpertLayer layer) {}

    /** A one-kernel layer (expert_mlp under split_down). */
    public record MlpVariant(String name, ExpertMlpLayer mlp) {}

    /**
     * One variant at one token count.
     *
     * @param gateUp       gate_up alone, null for a one-kernel layer
     * @param down         down alone, null for a one-kernel layer
     * @param balancedness the routings' mean entropy-normalised balancedness H(p) / ln E of the expert loads
     */
    public record Result(String variant, int tokens, Timing layer, Timing gateUp, Timing down,
                         double distinctExpertsPerLayer, double distinctBytesPerLayer, double gbPerSecond,
                         double fractionOfRead, double balancedness) {}

    /** The whole layer (router + experts) per layer, and the router alone in its own graph. */
    public record LayerResult(String variant, int tokens, Timing layer, Timing router, double distinctExpertsPerLayer,
                              double bytesPerLayer, double gbPerSecond, double fractionOfRead) {}

    private final ExpertShape shape;
    private final int layers;
    private final int maxTokens;
    private final List<DeviceWeights> gateUpWeights = new ArrayList<>();
    private final List<DeviceWeights> downWeights = new ArrayList<>();
    /** Bytes one routed expert costs per layer: gate_up's and down's codes and scales. */
    private final double bytesPerExpert;
    private final List<DeviceBuffer> ids = new ArrayList<>();
    private final List<DeviceBuffer> weights = new ArrayList<>();
    private final short[] hostX;
    private final List<Routing> routings = new ArrayList<>();
    private final DeviceBuffer x;
    /** gate_up's output for down, one per element type the variants hand over (bf16 rows, FP8 quantised rows). */
    private final Map<DType, DeviceBuffer> inters = new EnumMap<>(DType.class);
    private final DeviceBuffer y;
    /** Down repacked for split_down, per layer (4-bit weights of whole quads and tiles only), and its FP32 outputs. */
    private final List<DeviceWeights> splitDownWeights = new ArrayList<>();
    private final List<DeviceBuffer> mlpOutputs = new ArrayList<>();

    /** Allocates and fills {@code layers} layers of BF16 weights (uniform random, on the device) for up to {@code maxTokens} tokens. */
    public ExpertLayerBenchmark(BenchKernels kernels, CudaStream stream, ExpertShape shape, int layers, int maxTokens, long seed) {
        this(stream, shape, layers, maxTokens, seed, 2.0 * 3.0 * shape.hidden() * shape.intermediate(), l -> {
            // uniform in [-s, s) has standard deviation s / sqrt(3): rows of K values give O(1) dot products
            DeviceBuffer gu = DeviceBuffer.allocate(DType.BF16, (long) shape.experts() * 2 * shape.intermediate() * shape.hidden());
            kernels.fillUniform(stream, gu, seed + 2L * l, (float) Math.sqrt(3.0 / shape.hidden()));
            DeviceBuffer dn = DeviceBuffer.allocate(DType.BF16, (long) shape.experts() * shape.hidden() * shape.intermediate());
            kernels.fillUniform(stream, dn, seed + 2L * l + 1, (float) Math.sqrt(3.0 / shape.intermediate()));
            return new DeviceWeights[] {DeviceWeights.bf16(gu), DeviceWeights.bf16(dn)};
        });
    }

    /**
     * {@code layers} copies of one layer's weights in any format, quantised once on the host: each
     * layer has its own device memory, so the rotation still reads far beyond L2.
     */
    public ExpertLayerBenchmark(CudaStream stream, ExpertShape shape, int layers, int maxTokens, long seed,
                                EncodedWeights gateUp, EncodedWeights down) {
        this(stream, shape, layers, maxTokens, seed, gateUp.bytesPerExpert() + down.bytesPerExpert(),
                l -> new DeviceWeights[] {DeviceWeights.upload(gateUp), DeviceWeights.upload(down)});
        if (SplitDown.fits(down.format(), shape.hidden(), shape.intermediate())) {
            SplitDownWeights split = SplitDownWeights.of(down);
            for (int l = 0; l < layers; l++) {
                splitDownWeights.add(DeviceWeights.upload(split));
            }
            for (int i = 0; i < 3; i++) {
                DeviceBuffer out = DeviceBuffer.allocate(DType.FP32, (long) maxTokens * shape.hidden());
                out.copyFrom(new float[maxTokens * shape.hidden()]);
                mlpOutputs.add(out);
            }
        }
    }

    private ExpertLayerBenchmark(CudaStream stream, ExpertShape shape, int layers, int maxTokens, long seed,
                                 double bytesPerExpert, java.util.function.IntFunction<DeviceWeights[]> layerWeights) {
        this.shape = shape;
        this.layers = layers;
        this.maxTokens = maxTokens;
        this.bytesPerExpert = bytesPerExpert;
        int k = shape.topk();
        for (int l = 0; l < layers; l++) {
            DeviceWeights[] w = layerWeights.apply(l);
            gateUpWeights.add(w[0]);
            downWeights.add(w[1]);
            ids.add(DeviceBuffer.allocate(DType.INT32, (long) maxTokens * k));
            weights.add(DeviceBuffer.allocate(DType.FP32, (long) maxTokens * k));
        }
        x = DeviceBuffer.allocate(DType.BF16, (long) maxTokens * shape.hidden());
        hostX = RandomInputs.bf16Normal(seed ^ 0x5eed, maxTokens * shape.hidden(), 1.0);
        x.copyFrom(hostX);
        y = DeviceBuffer.allocate(DType.BF16, (long) maxTokens * shape.hidden());
        stream.synchronize();
    }

    /** Bytes of all layers' expert weights on the device. */
    public long weightBytes() {
        long b = 0;
        for (int l = 0; l < layers; l++) {
            b += gateUpWeights.get(l).bytes() + downWeights.get(l).bytes();
        }
        for (DeviceWeights w : splitDownWeights) {
            b += w.bytes();
        }
        return b;
    }

    /** Times every variant at {@code tokens} tokens with fresh uniform routing per layer. */
    public List<Result> run(CudaStream stream, List<Variant> variants, int tokens, long seed, int warmup, int reps,
                            double readBytesPerSecond, Consumer<String> progress) {
        return run(stream, variants, tokens, seed, OptionalDouble.empty(), warmup, reps, readBytesPerSecond, progress);
    }

    /**
     * Times every variant at {@code tokens} tokens with fresh routing per layer: uniform, or at
     * {@code balancedness} (moved into what the batch reaches; {@link RandomInputs#skewedRouting}).
     */
    public List<Result> run(CudaStream stream, List<Variant> variants, int tokens, long seed, OptionalDouble balancedness, int warmup,
                            int reps, double readBytesPerSecond, Consumer<String> progress) {
        Drawn drawn = drawRouting(tokens, seed, balancedness);
        double expertsPerLayer = drawn.expertsPerLayer();
        double bytesPerLayer = expertsPerLayer * bytesPerExpert;
        List<Result> results = new ArrayList<>();
        for (Variant v : variants) {
            if (tokens > v.layer().maxTokens()) {
                continue;
            }
            progress.accept(v.name() + " at M=" + tokens);
            y.fillBytes16(Bf16.NAN);
            DeviceBuffer inter = interFor(v.layer());
            Timing whole = timeGraph(stream, warmup, reps, l -> v.layer().enqueue(stream, tokens, x,
                    gateUpWeights.get(l), downWeights.get(l), ids.get(l), weights.get(l), inter, y));
            checkWritten(v.name(), tokens);
            Timing gateUp = timeGraph(stream, warmup, reps, l ->
                    v.layer().enqueueGateUp(stream, tokens, x, gateUpWeights.get(l), ids.get(l), inter));
            Timing down = timeGraph(stream, warmup, reps, l ->
                    v.layer().enqueueDown(stream, tokens, inter, downWeights.get(l), ids.get(l), weights.get(l), y));
            double seconds = whole.medianMicros() * 1e-6;
            double gbps = bytesPerLayer / seconds / 1e9;
            results.add(new Result(v.name(), tokens, whole, gateUp, down, expertsPerLayer, bytesPerLayer, gbps,
                    bytesPerLayer / seconds / readBytesPerSecond, drawn.balancedness()));
        }
        return results;
    }

    /** The intermediate buffer for {@code layer}'s kernels (bf16 rows, or quantised rows for W8A8), for up to maxTokens tokens. */
    private DeviceBuffer interFor(ExpertLayer layer) {
        DType type = layer.gateUp().signature().param("inter").elementType();
        return inters.computeIfAbsent(type, t -> layer.allocateInter(maxTokens));
    }

    /** What the layers' routings were drawn to: distinct experts and balancedness, each the mean over the layers. */
    private record Drawn(double expertsPerLayer, double balancedness) {}

    /** Draws each layer's routing (the same for the same tokens, seed and balancedness), uniform or at {@code balancedness}. */
    private Drawn drawRouting(int tokens, long seed, OptionalDouble balancedness) {
        if (tokens < 1 || tokens > maxTokens) {
            throw new IllegalArgumentException("tokens = " + tokens + ", this benchmark was sized for 1.." + maxTokens);
        }
        long distinct = 0;
        double beta = 0;
        routings.clear();
        for (int l = 0; l < layers; l++) {
            long layerSeed = seed + 7919L * l + tokens;
            Routing r = balancedness.isEmpty()
                    ? RandomInputs.uniformRouting(layerSeed, tokens, shape.experts(), shape.topk())
                    : RandomInputs.skewedRouting(layerSeed, tokens, shape.experts(), shape.topk(), RandomInputs.reachableBalancedness(
                            layerSeed, tokens, shape.experts(), shape.topk()).clamp(balancedness.getAsDouble()));
            routings.add(r);
            ids.get(l).copyFrom(r.ids());
            weights.get(l).copyFrom(r.weights());
            distinct += r.distinctExperts();
            beta += r.balancedness(shape.experts());
        }
        return new Drawn((double) distinct / layers, beta / layers);
    }

    /** Whether the weights were also repacked for split_down (4-bit, whole quads and tiles). */
    public boolean hasSplitDown() {
        return !splitDownWeights.isEmpty();
    }

    /**
     * Times one-kernel layers as {@link #run} times pairs, on the same routing for the same tokens and
     * seed: layer l adds into output {@code l % 3} and zeroes output {@code (l + 1) % 3}. Across
     * replays an output is added to twice now and then; that changes its values, not the work.
     */
    public List<Result> runMlp(CudaStream stream, List<MlpVariant> variants, int tokens, long seed, int warmup, int reps,
                               double readBytesPerSecond, Consumer<String> progress) {
        if (!hasSplitDown()) {
            throw new IllegalStateException("these weights were not repacked for split_down (4-bit, H a multiple of 64, "
                    + "I a multiple of 16)");
        }
        Drawn drawn = drawRouting(tokens, seed, OptionalDouble.empty());
        double expertsPerLayer = drawn.expertsPerLayer();
        double bytesPerLayer = expertsPerLayer * bytesPerExpert;
        List<Result> results = new ArrayList<>();
        for (MlpVariant v : variants) {
            if (tokens > v.mlp().maxTokens()) {
                continue;
            }
            progress.accept(v.name() + " at M=" + tokens);
            Timing whole = timeGraph(stream, warmup, reps, l -> v.mlp().enqueue(stream, tokens, x, gateUpWeights.get(l),
                    splitDownWeights.get(l), ids.get(l), weights.get(l), mlpOutputs.get(l % 3), mlpOutputs.get((l + 1) % 3)));
            for (DeviceBuffer out : mlpOutputs) {
                float[] values = new float[tokens * shape.hidden()];
                out.copyTo(values);
                for (int i = 0; i < values.length; i++) {
                    if (!Float.isFinite(values[i])) {
                        throw new IllegalStateException(v.name() + " at M=" + tokens + " left an output non-finite at " + i);
                    }
                }
            }
            double seconds = whole.medianMicros() * 1e-6;
            results.add(new Result(v.name(), tokens, whole, null, null, expertsPerLayer, bytesPerLayer,
                    bytesPerLayer / seconds / 1e9, bytesPerLayer / seconds / readBytesPerSecond, drawn.balancedness()));
        }
        return results;
    }

    /**
     * The whole layer as a decode step runs it: router (on each layer's own router weights), then
     * gate_up and down on the routing it wrote, all layers in one graph. The distinct experts are
     * counted from the routing the router produced (read back after timing).
     */
    public LayerResult runWithRouter(CudaStream stream, String name, RouterKernel router, ExpertLayer experts,
                                List<DeviceBuffer> routerWeights, Map<String, DeviceBuffer> rows, int tokens, int warmup,
                                int reps, double readBytesPerSecond) {
        MoeLayer layer = new MoeLayer(router, experts);
        y.fillBytes16(Bf16.NAN);
        DeviceBuffer inter = interFor(experts);
        Timing whole = timeGraph(stream, warmup, reps, l -> layer.enqueue(stream, tokens, x, routerWeights.get(l % routerWeights.size()),
                rows, gateUpWeights.get(l), downWeights.get(l), ids.get(l), weights.get(l), inter, y));
        checkWritten(name, tokens);
        Timing routerOnly = timeGraph(stream, warmup, reps, l -> router.enqueue(stream, tokens, x,
                routerWeights.get(l % routerWeights.size()), rows, weights.get(l), ids.get(l)));
        long distinct = 0;
        long routerBytes = 0;
        for (int l = 0; l < layers; l++) {
            int[] chosen = new int[tokens * shape.topk()];
            ids.get(l).copyTo(chosen);
            distinct += java.util.Arrays.stream(chosen).distinct().count();
            routerBytes += routerWeights.get(l % routerWeights.size()).bytes();
        }
        double expertsPerLayer = (double) distinct / layers;
        double bytesPerLayer = expertsPerLayer * bytesPerExpert + (double) routerBytes / layers;
        double seconds = whole.medianMicros() * 1e-6;
        return new LayerResult(name, tokens, whole, routerOnly, expertsPerLayer, bytesPerLayer, bytesPerLayer / seconds / 1e9,
                bytesPerLayer / seconds / readBytesPerSecond);
    }

    /** The activations of the last {@link #run}'s first {@code tokens} tokens (bf16 bits). */
    public short[] activations(int tokens) {
        return java.util.Arrays.copyOf(hostX, tokens * shape.hidden());
    }

    /** The routing of layer 0 in the last {@link #run}. */
    public Routing firstLayerRouting() {
        if (routings.isEmpty()) {
            throw new IllegalStateException("no run yet: the routing is drawn by run()");
        }
        return routings.getFirst();
    }

    /** Runs {@code layer} once on layer 0's weights and routing of the last {@link #run} and returns its y (bf16 bits). */
    public short[] firstLayerOutput(CudaStream stream, ExpertLayer layer) {
        int tokens = firstLayerRouting().tokens();
        y.fillBytes16(Bf16.NAN);
        DeviceBuffer inter = interFor(layer);
        layer.enqueue(stream, tokens, x, gateUpWeights.getFirst(), downWeights.getFirst(), ids.getFirst(), weights.getFirst(), inter, y);
        stream.synchronize();
        short[] out = new short[tokens * shape.hidden()];
        y.copyTo(out);
        return out;
    }

    private interface LayerEnqueue {
        void enqueue(int layer);
    }

    private Timing timeGraph(CudaStream stream, int warmup, int reps, LayerEnqueue body) {
        try (CudaGraph graph = CudaGraph.capture(stream, () -> {
            for (int l = 0; l < layers; l++) {
                body.enqueue(l);
            }
        })) {
            return GpuTimer.time(stream, graph, warmup, reps).scaled(1.0 / layers);
        }
    }

    /** The device-side proof that the graph ran the kernels: no output is left poisoned or non-finite. */
    private void checkWritten(String variant, int tokens) {
        short[] out = new short[tokens * shape.hidden()];
        y.copyTo(out);
        for (int i = 0; i < out.length; i++) {
            if (!Bf16.isFinite(out[i])) {
                throw new IllegalStateException(variant + " at M=" + tokens + " left y[" + i / shape.hidden() + "]["
                        + i % shape.hidden() + "] non-finite (0x" + Integer.toHexString(out[i] & 0xffff) + ")");
            }
        }
    }

    @Override
    public void close() {
        gateUpWeights.forEach(DeviceWeights::close);
        downWeights.forEach(DeviceWeights::close);
        ids.forEach(DeviceBuffer::close);
        weights.forEach(DeviceBuffer::close);
        x.close();
        inters.values().forEach(DeviceBuffer::close);
        y.close();
        splitDownWeights.forEach(DeviceWeights::close);
        mlpOutputs.forEach(DeviceBuffer::close);
    }
}
