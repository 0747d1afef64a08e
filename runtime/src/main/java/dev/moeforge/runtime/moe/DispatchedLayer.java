package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.GraphSwitch;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.kernel.ModuleResource;
import dev.moeforge.runtime.kernel.RoutingAlign;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

/**
 * The expert layer with routing-aware dispatch decided on the GPU: the routing plan is built from
 * {@code topk_ids}, the dispatch kernel prices every candidate of each half on the plan's expert
 * histogram with its fitted cost model ({@link DispatchTable}) and sets a graph switch per half,
 * and the switch runs the chosen candidate. Nothing is read back to the host, so a graph of this
 * layer replays with a new routing each time and chooses again each time. It runs only as a graph:
 * {@link #capture} records one for a token count.
 */
public final class DispatchedLayer implements AutoCloseable {
    /** The dispatch kernel's module. */
    public static final ModuleResource MODULE = new ModuleResource(DispatchTable.class, "moeforge_dispatch.cu");

    private final KernelRuntime runtime;
    private final DispatchTable table;
    private final ExpertShape shape;
    private final int capacity;
    private final RoutingAlign align;
    private final RoutingAlign.PlanBuffers plan;
    private final List<ExpertHalf> gateUp = new ArrayList<>();
    private final List<ExpertHalf> down = new ArrayList<>();
    private final CudaFunction dispatch;
    private final DeviceBuffer rows;
    private final DeviceBuffer chosen;

    /**
     * @param kernels  the kernel of each candidate, by the name its row carries
     * @param capacity the most tokens a graph of this layer takes
     */
    public DispatchedLayer(KernelRuntime runtime, DispatchTable table, Function<String, KernelHandle> kernels, int capacity) {
        this.runtime = runtime;
        this.table = table;
        this.capacity = capacity;
        List<KernelHandle> ups = table.gateUp().stream().map(r -> kernels.apply(r.name())).toList();
        List<KernelHandle> downs = table.down().stream().map(r -> kernels.apply(r.name())).toList();
        this.shape = ((Problem.ExpertProblem) ups.getFirst().spec().problem()).shape();
        if (shape.experts() != table.experts()) {
            throw new IllegalArgumentException("a dispatch table of " + table.experts() + " experts for kernels of " + shape.experts());
        }
        this.align = java.util.stream.Stream.concat(ups.stream(), downs.stream()).flatMap(k -> k.routingAlign().stream()).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no candidate takes the routing plan, whose expert histogram the "
                        + "dispatch reads: give each half at least one expert_centric candidate"));
        this.plan = align.allocate(capacity);
        for (KernelHandle k : ups) {
            requireShape(k);
            gateUp.add(ExpertHalf.sharing(k, LaunchOrder.AFTER_PREVIOUS, Math.min(capacity, k.maxTokens()), plan));
        }
        for (KernelHandle k : downs) {
            requireShape(k);
            down.add(ExpertHalf.sharing(k, LaunchOrder.AFTER_PREVIOUS, Math.min(capacity, k.maxTokens()), plan));
        }
        this.dispatch = runtime.loadResource(MODULE).function("moe_dispatch");
        double[] packed = table.packed();
        int[] words = new int[2 * packed.length];
        for (int i = 0; i < packed.length; i++) {
            long bits = Double.doubleToRawLongBits(packed[i]);
            words[2 * i] = (int) bits;  // little-endian doubles
            words[2 * i + 1] = (int) (bits >>> 32);
        }
        this.rows = DeviceBuffer.allocate(DType.INT32, words.length);
        rows.copyFrom(words);
        this.chosen = DeviceBuffer.allocate(DType.INT32, 2);
        chosen.fillWords32(-1);
    }

    private void requireShape(KernelHandle k) {
        if (!(k.spec().problem() instanceof Problem.ExpertProblem p) || !p.shape().equals(shape)) {
            throw new IllegalArgumentException("candidate " + k.spec().name() + " is not of the layer's geometry " + shape);
        }
    }

    public DispatchTable table() {
        return table;
    }

    /**
     * Records the layer for {@code tokens} tokens as one graph: the routing plan, the dispatch, and
     * a switch per half whose bodies are the candidates. Replays read whatever routing {@code topkIds}
     * and {@code topkWeights} hold at the time. {@code bodyStream} records the switches' bodies.
     */
    public CudaGraph capture(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer x, DeviceWeights wGateUp,
                             DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        return CudaGraph.capture(stream, () -> record(stream, bodyStream, tokens, x, wGateUp, wDown, topkIds, topkWeights, inter, y));
    }

    /**
     * As {@link #capture}, into the graph {@code stream} is capturing now (several layers in one graph:
     * each records its own switches; they share this layer's plan, which each rebuilds in turn).
     */
    public void record(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer x, DeviceWeights wGateUp,
                       DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        if (tokens < 1 || tokens > capacity) {
            throw new IllegalArgumentException("tokens = " + tokens + ": this layer was built for 1.." + capacity);
        }
        CudaContext context = runtime.context();
        align.enqueue(stream, LaunchOrder.AFTER_PREVIOUS, tokens, topkIds, plan);
        GraphSwitch upSwitch = GraphSwitch.create(stream, context, gateUp.size());
        GraphSwitch downSwitch = GraphSwitch.create(stream, context, down.size());
        dispatch.launch(1, 1, 1, 1024, 1, 1, 0, stream, plan.expertOffsets(), table.experts(), rows, table.gateUp().size(),
                table.down().size(), tokens, context.smCount(), upSwitch.handle(), downSwitch.handle(), chosen);
        upSwitch.insert(stream, context, bodyStream, gateUp.stream().<Runnable>map(h -> () -> {
            requireRuns(h, tokens);
            h.launchGateUp(bodyStream, tokens, x, wGateUp, topkIds, inter);
        }).toList());
        downSwitch.insert(stream, context, bodyStream, down.stream().<Runnable>map(h -> () -> {
            requireRuns(h, tokens);
            h.launchDown(bodyStream, tokens, inter, wDown, topkIds, topkWeights, y);
        }).toList());
    }

    /**
     * Parts of the decision, into the graph {@code stream} is capturing, to see what each costs:
     * the plan; with {@code switches} 0 or more also the dispatch kernel, and that many of the two
     * switches, with empty bodies (a switch left out is not set by the kernel).
     */
    public void recordDecision(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer topkIds, int switches) {
        CudaContext context = runtime.context();
        align.enqueue(stream, LaunchOrder.AFTER_PREVIOUS, tokens, topkIds, plan);
        if (switches < 0) {
            return;
        }
        GraphSwitch upSwitch = switches >= 1 ? GraphSwitch.create(stream, context, gateUp.size()) : null;
        GraphSwitch downSwitch = switches >= 2 ? GraphSwitch.create(stream, context, down.size()) : null;
        this.dispatch.launch(1, 1, 1, 1024, 1, 1, 0, stream, plan.expertOffsets(), table.experts(), rows, table.gateUp().size(),
                table.down().size(), tokens, context.smCount(), upSwitch == null ? 0L : upSwitch.handle(),
                downSwitch == null ? 0L : downSwitch.handle(), chosen);
        if (upSwitch != null) {
            upSwitch.insert(stream, context, bodyStream, java.util.Collections.nCopies(gateUp.size(), () -> { }));
        }
        if (downSwitch != null) {
            downSwitch.insert(stream, context, bodyStream, java.util.Collections.nCopies(down.size(), () -> { }));
        }
    }

    private static void requireRuns(ExpertHalf h, int tokens) {
        if (tokens > h.maxTokens()) {
            throw new IllegalArgumentException("candidate " + h.kernel().spec().name() + " takes at most " + h.maxTokens()
                    + " tokens; the layer's graph is for " + tokens);
        }
    }

    /** The candidates the last replay chose (gate_up's, down's row): a host read, for checks and reports only. */
    public int[] lastChoice() {
        int[] out = new int[2];
        chosen.copyTo(out);
        return out;
    }

    @Override
    public void close() {
        gateUp.forEach(ExpertHalf::close);
        down.forEach(ExpertHalf::close);
        plan.close();
        rows.close();
        chosen.close();
    }
}
