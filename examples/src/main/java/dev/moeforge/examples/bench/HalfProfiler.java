package dev.moeforge.examples.bench;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.examples.bench.GpuTimer.Timing;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.moe.DeviceWeights;
import dev.moeforge.runtime.moe.ExpertHalf;
import java.util.ArrayList;
import java.util.List;

/**
 * Times one half of the expert layer (a gate_up or a down kernel, with the routing plan it builds
 * for itself where it takes one) as a decode step runs it: {@code layers} layers of BF16 weights,
 * together far beyond L2, all on the same routing, in one CUDA graph; per layer = replay / layers.
 * gate_up reads random activations, down a random {@code inter}, so each half is timed alone.
 */
public final class HalfProfiler implements AutoCloseable {
    /** Which half a kernel computes. */
    public enum Half {
        GATE_UP, DOWN
    }

    private final int layers;
    private final int maxTokens;
    private final List<DeviceWeights> gateUpWeights = new ArrayList<>();
    private final List<DeviceWeights> downWeights = new ArrayList<>();
    private final DeviceBuffer ids;
    private final DeviceBuffer weights;
    private final DeviceBuffer x;
    private final DeviceBuffer inter;
    private final DeviceBuffer y;
    private int tokens;

    public HalfProfiler(BenchKernels kernels, CudaStream stream, ExpertShape shape, int layers, int maxTokens, long seed) {
        this.layers = layers;
        this.maxTokens = maxTokens;
        int k = shape.topk();
        for (int l = 0; l < layers; l++) {
            DeviceBuffer gu = DeviceBuffer.allocate(DType.BF16, (long) shape.experts() * 2 * shape.intermediate() * shape.hidden());
            kernels.fillUniform(stream, gu, seed + 2L * l, (float) Math.sqrt(3.0 / shape.hidden()));
            DeviceBuffer dn = DeviceBuffer.allocate(DType.BF16, (long) shape.experts() * shape.hidden() * shape.intermediate());
            kernels.fillUniform(stream, dn, seed + 2L * l + 1, (float) Math.sqrt(3.0 / shape.intermediate()));
            gateUpWeights.add(DeviceWeights.bf16(gu));
            downWeights.add(DeviceWeights.bf16(dn));
        }
        ids = DeviceBuffer.allocate(DType.INT32, (long) maxTokens * k);
        weights = DeviceBuffer.allocate(DType.FP32, (long) maxTokens * k);
        x = DeviceBuffer.allocate(DType.BF16, (long) maxTokens * shape.hidden());
        x.copyFrom(RandomInputs.bf16Normal(seed ^ 0x5eed, maxTokens * shape.hidden(), 1.0));
        inter = DeviceBuffer.allocate(DType.BF16, (long) maxTokens * k * shape.intermediate());
        inter.copyFrom(RandomInputs.bf16Normal(seed ^ 0x1a7e, maxTokens * k * shape.intermediate(), 0.5));
        y = DeviceBuffer.allocate(DType.BF16, (long) maxTokens * shape.hidden());
        stream.synchronize();
    }

    /** The routing every layer runs on from now on; {@link #tokens()} is its batch. */
    public void route(Routing routing) {
        if (routing.tokens() > maxTokens) {
            throw new IllegalArgumentException(routing.tokens() + " tokens: this profiler was sized for 1.." + maxTokens);
        }
        ids.copyFrom(routing.ids());
        weights.copyFrom(routing.weights());
        tokens = routing.tokens();
    }

    public int tokens() {
        return tokens;
    }

    /** The half's time per layer on the current routing: {@code warmup} replays, then the median of {@code reps}. */
    public Timing time(CudaStream stream, ExpertHalf half, Half which, int warmup, int reps) {
        if (tokens == 0) {
            throw new IllegalStateException("no routing yet: call route() first");
        }
        return timeLayers(stream, l -> {
            switch (which) {
                case GATE_UP -> half.enqueueGateUp(stream, tokens, x, gateUpWeights.get(l), ids, inter);
                case DOWN -> half.enqueueDown(stream, tokens, inter, downWeights.get(l), ids, weights, y);
            }
        }, warmup, reps);
    }

    /** Times a graph of one {@code perLayer(l)} per layer (l = 0..layers-1): per layer = replay / layers. */
    public Timing timeLayers(CudaStream stream, java.util.function.IntConsumer perLayer, int warmup, int reps) {
        try (CudaGraph graph = CudaGraph.capture(stream, () -> {
            for (int l = 0; l < layers; l++) {
                perLayer.accept(l);
            }
        })) {
            return GpuTimer.time(stream, graph, warmup, reps).scaled(1.0 / layers);
        }
    }

    public int layers() {
        return layers;
    }

    public DeviceWeights gateUpWeights(int layer) {
        return gateUpWeights.get(layer);
    }

    public DeviceWeights downWeights(int layer) {
        return downWeights.get(layer);
    }

    public DeviceBuffer x() {
        return x;
    }

    public DeviceBuffer ids() {
        return ids;
    }

    public DeviceBuffer weights() {
        return weights;
    }

    public DeviceBuffer inter() {
        return inter;
    }

    public DeviceBuffer y() {
        return y;
    }

    @Override
    public void close() {
        gateUpWeights.forEach(DeviceWeights::close);
        downWeights.forEach(DeviceWeights::close);
        ids.close();
        weights.close();
        x.close();
        inter.close();
        y.close();
    }
}
