package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.DeviceHeader;
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
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * The expert layer with routing-aware dispatch decided on the GPU: the routing plan is built from
 * {@code topk_ids}, and the plan's second launch also prices every candidate of each half on the
 * plan's expert histogram with its fitted cost model ({@link DispatchTable}) and sets one graph
 * switch to the cheapest (gate_up, down) pair, whose body runs the pair. Nothing is read back to the
 * host, so a graph of this layer replays with a new routing each time and chooses again each time.
 * It runs only as a graph: {@link #capture} records one for a token count.
 *
 * <p>{@link Scope#LAYER} decides for every layer on its own histogram; {@link Scope#STEP} decides once,
 * on the first layer's, and the switch's body runs every layer of the graph with that pair: one
 * switch a step instead of one a layer.
 */
public final class DispatchedLayer implements AutoCloseable {
    /** The module of the routing plan's choosing launch ({@code moe_align_scatter_dispatch}). */
    public static final ModuleResource MODULE = new ModuleResource(DispatchTable.class, "moeforge_dispatch.cu",
            Optional.of(DeviceHeader.EXPERT_CENTRIC));

    /** The choosing launch's block: the scatter's warp and 8 choosing warps (the kernel's {@code kChoiceWarps}, its launch bound). */
    private static final int CHOICE_BLOCK_THREADS = 32 * (1 + 8);

    /** Where a decision holds. */
    public enum Scope {
        /** Each layer decides on its own histogram (a switch per layer). */
        LAYER,
        /** The first layer decides for every layer of the graph (one switch). */
        STEP
    }

    /** One layer's buffers. */
    public record LayerIo(DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown, DeviceBuffer topkIds,
                          DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {}

    private final KernelRuntime runtime;
    private final DispatchTable table;
    private final ExpertShape shape;
    private final int capacity;
    private final RoutingAlign align;
    private final RoutingAlign.PlanBuffers plan;
    private final List<ExpertHalf> gateUp = new ArrayList<>();
    private final List<ExpertHalf> down = new ArrayList<>();
    private final CudaFunction scatterAndChoose;
    private final Map<Integer, Candidates> byTokens = new HashMap<>();
    private final DeviceBuffer chosen;

    /**
     * What graphs of one token count hold: the table narrowed to the rows that win at some routing
     * of that many tokens, its rows and in-tile table on the device, and those rows' halves.
     */
    private record Candidates(DispatchTable table, DeviceBuffer rows, DeviceBuffer inTile, List<ExpertHalf> gateUp,
                              List<ExpertHalf> down) implements AutoCloseable {
        @Override
        public void close() {
            rows.close();
            inTile.close();
        }
    }

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
        this.align = Stream.concat(ups.stream(), downs.stream()).flatMap(k -> k.routingAlign().stream()).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no candidate takes the routing plan, whose expert histogram the "
                        + "dispatch reads: give each half at least one expert_centric candidate"));
        this.plan = align.allocate(capacity);
        for (KernelHandle k : ups) {
            requireShape(k);
            // a body's first kernel (nothing before it to overlap), or after a layer's plan in a step's body
            gateUp.add(ExpertHalf.sharing(k, LaunchOrder.AFTER_PREVIOUS, Math.min(capacity, k.maxTokens()), plan));
        }
        for (KernelHandle k : downs) {
            requireShape(k);
            down.add(ExpertHalf.sharing(k, LaunchOrder.OVERLAPPING_PREVIOUS, Math.min(capacity, k.maxTokens()), plan));
        }
        this.scatterAndChoose = runtime.loadResource(MODULE).function("moe_align_scatter_dispatch");
        this.chosen = DeviceBuffer.allocate(DType.INT32, 2);
        chosen.fillWords32(-1);
    }

    private static DeviceBuffer upload(int[] words) {
        DeviceBuffer b = DeviceBuffer.allocate(DType.INT32, words.length);
        try {
            b.copyFrom(words);
            return b;
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
    }

    /** Doubles as the int32 words of their little-endian bits. */
    private static int[] words(double[] values) {
        int[] words = new int[2 * values.length];
        for (int i = 0; i < values.length; i++) {
            long bits = Double.doubleToRawLongBits(values[i]);
            words[2 * i] = (int) bits;
            words[2 * i + 1] = (int) (bits >>> 32);
        }
        return words;
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
     * Records the layer for {@code tokens} tokens as one graph: the routing plan with the decision in
     * it, and a switch whose bodies are the candidate pairs. Replays read whatever routing
     * {@code topkIds} and {@code topkWeights} hold at the time. {@code bodyStream} records the bodies.
     */
    public CudaGraph capture(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer x, DeviceWeights wGateUp,
                             DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        prepare(tokens);
        return CudaGraph.capture(stream, () -> record(stream, bodyStream, tokens, x, wGateUp, wDown, topkIds, topkWeights, inter, y));
    }

    /**
     * Narrows the table to {@code tokens} tokens ({@link DispatchTable#narrowedTo}) and uploads what
     * the choice reads there: once per token count, before a graph of it is captured, as nothing
     * may be allocated during a capture.
     */
    public void prepare(int tokens) {
        if (tokens < 1 || tokens > capacity) {
            throw new IllegalArgumentException("tokens = " + tokens + ": this layer was built for 1.." + capacity);
        }
        byTokens.computeIfAbsent(tokens, t -> {
            DispatchTable narrow = table.narrowedTo(t, shape.topk(), runtime.context().smCount());
            DeviceBuffer rows = upload(words(narrow.packed()));
            DeviceBuffer inTile;
            try {
                inTile = upload(words(narrow.inTileTable(t)));
            } catch (RuntimeException e) {
                rows.close();
                throw e;
            }
            List<ExpertHalf> ups = new ArrayList<>();
            List<ExpertHalf> downs = new ArrayList<>();
            for (int i = 0; i < narrow.gateUp().size(); i++) {
                ups.add(gateUp.get(narrow.gateUpOrigin(i)));
            }
            for (int i = 0; i < narrow.down().size(); i++) {
                downs.add(down.get(narrow.downOrigin(i)));
            }
            return new Candidates(narrow, rows, inTile, ups, downs);
        });
    }

    private Candidates candidates(int tokens) {
        Candidates c = byTokens.get(tokens);
        if (c == null) {
            throw new IllegalStateException("call prepare(" + tokens + ") before capturing a graph of " + tokens + " tokens");
        }
        return c;
    }

    /** The candidates (gate_up's, down's) a graph of {@code tokens} tokens holds ({@link #prepare} first). */
    public DispatchTable candidatesAt(int tokens) {
        return candidates(tokens).table();
    }

    /** The host twin of a graph of {@code tokens} tokens: the rows of {@link #table()} it chooses at this histogram. */
    public int[] hostChoice(int[] load, int tokens) {
        DispatchTable narrow = candidates(tokens).table();
        return narrow.origin(narrow.choose(load, tokens, runtime.context().smCount()));
    }

    /** As {@link #capture}, into the graph {@code stream} is capturing now ({@link #prepare} first). */
    public void record(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer x, DeviceWeights wGateUp,
                       DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        record(stream, bodyStream, tokens, List.of(new LayerIo(x, wGateUp, wDown, topkIds, topkWeights, inter, y)), Scope.LAYER);
    }

    /**
     * Records {@code layers} in turn into the graph {@code stream} is capturing ({@link #prepare} first),
     * deciding as {@code scope} says. The layers share this layer's routing plan, which each rebuilds in turn.
     */
    public void record(CudaStream stream, CudaStream bodyStream, int tokens, List<LayerIo> layers, Scope scope) {
        if (tokens < 1 || tokens > capacity) {
            throw new IllegalArgumentException("tokens = " + tokens + ": this layer was built for 1.." + capacity);
        }
        if (layers.isEmpty()) {
            throw new IllegalArgumentException("no layers to record");
        }
        Candidates c = candidates(tokens);
        c.gateUp().forEach(h -> requireRuns(h, tokens));
        c.down().forEach(h -> requireRuns(h, tokens));
        CudaContext context = runtime.context();
        switch (scope) {
            case LAYER -> {
                for (LayerIo io : layers) {
                    GraphSwitch pairs = GraphSwitch.create(stream, context, c.table().pairs());
                    enqueuePlanAndChoice(stream, c, tokens, io.topkIds(), pairs.handle());
                    pairs.insert(stream, context, bodyStream, pairBodies(bodyStream, c, tokens, List.of(io), false));
                }
            }
            case STEP -> {
                GraphSwitch pairs = GraphSwitch.create(stream, context, c.table().pairs());
                enqueuePlanAndChoice(stream, c, tokens, layers.getFirst().topkIds(), pairs.handle());
                pairs.insert(stream, context, bodyStream, pairBodies(bodyStream, c, tokens, layers, true));
            }
        }
    }

    /** Body {@code pairIndex(u, d)} of the token count's table runs gate_up u and down d on every layer (after the first, on its own plan). */
    private List<Runnable> pairBodies(CudaStream bodyStream, Candidates c, int tokens, List<LayerIo> layers, boolean planAfterFirst) {
        List<Runnable> bodies = new ArrayList<>();
        for (ExpertHalf up : c.gateUp()) {
            for (ExpertHalf dn : c.down()) {
                bodies.add(() -> {
                    for (int l = 0; l < layers.size(); l++) {
                        LayerIo io = layers.get(l);
                        if (planAfterFirst && l > 0) {
                            align.enqueue(bodyStream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, io.topkIds(), plan);
                        }
                        up.launchGateUp(bodyStream, tokens, io.x(), io.wGateUp(), io.topkIds(), io.inter());
                        dn.launchDown(bodyStream, tokens, io.inter(), io.wDown(), io.topkIds(), io.topkWeights(), io.y());
                    }
                });
            }
        }
        return bodies;
    }

    /** The plan's two launches, the second also choosing the pair; a zero handle sets no switch. */
    private void enqueuePlanAndChoice(CudaStream stream, Candidates c, int tokens, DeviceBuffer topkIds, long pairSwitch) {
        // after a switch node (no kernel to overlap) or whatever the caller enqueued before
        RoutingAlign.Segments s = align.enqueueCount(stream, LaunchOrder.AFTER_PREVIOUS, tokens, topkIds, plan);
        scatterAndChoose.launch(LaunchOrder.OVERLAPPING_PREVIOUS, s.segments(), 1, 1, CHOICE_BLOCK_THREADS, 1, 1, 0, stream, topkIds,
                plan.segmentCounts(), plan.sortedSlots(), plan.expertOffsets(), s.pairs(), table.experts(), s.segment(),
                s.segments(), c.rows(), c.table().gateUp().size(), c.table().down().size(), c.inTile(), tokens,
                runtime.context().smCount(),
                pairSwitch, chosen);
    }

    /**
     * Parts of the decision, into the graph {@code stream} is capturing, to see what each costs: the
     * plan's two launches with the decision in the second ({@code withSwitch} false: no switch is set),
     * or also the switch, its bodies empty.
     */
    public void recordDecision(CudaStream stream, CudaStream bodyStream, int tokens, DeviceBuffer topkIds, boolean withSwitch) {
        Candidates c = candidates(tokens);
        if (!withSwitch) {
            enqueuePlanAndChoice(stream, c, tokens, topkIds, 0L);
            return;
        }
        GraphSwitch pairs = GraphSwitch.create(stream, runtime.context(), c.table().pairs());
        enqueuePlanAndChoice(stream, c, tokens, topkIds, pairs.handle());
        pairs.insert(stream, runtime.context(), bodyStream, Collections.nCopies(c.table().pairs(), () -> { }));
    }

    /** The plan's two launches alone, as a layer of one fixed pair runs them. */
    public void recordPlan(CudaStream stream, int tokens, DeviceBuffer topkIds) {
        align.enqueue(stream, LaunchOrder.AFTER_PREVIOUS, tokens, topkIds, plan);
    }

    private static void requireRuns(ExpertHalf h, int tokens) {
        if (tokens > h.maxTokens()) {
            throw new IllegalArgumentException("candidate " + h.kernel().spec().name() + " takes at most " + h.maxTokens()
                    + " tokens; the layer's graph is for " + tokens);
        }
    }

    /** The candidates the last replay chose (rows of {@link #table()}, gate_up's and down's): a host read, for checks and reports only. */
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
        byTokens.values().forEach(Candidates::close);
        chosen.close();
    }
}
