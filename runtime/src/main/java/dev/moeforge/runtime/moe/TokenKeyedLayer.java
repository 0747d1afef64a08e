package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.Resources;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolStore;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * A tuned pool's expert layer with its pair chosen on the host for each token count
 * ({@link DispatchTable#keyedOnTokens}): a call, or a CUDA graph captured for M tokens, runs the pair
 * the fitted cost models price cheapest on average over the routings M tokens take. Nothing is decided
 * or read back on the device, so the layer costs what its pair costs. {@link #prepare} chooses and
 * loads a token count's pair before its first call or capture; a pair holds its own routing plan and scratch.
 */
public final class TokenKeyedLayer implements Experts, AutoCloseable {
    /** Rows of the table: the gate_up row and the down row. */
    private record Pair(int gateUp, int down) {}

    private final DispatchTable table;
    private final ExpertShape shape;
    private final Function<String, KernelHandle> kernels;
    private final LaunchOrder order;
    private final int capacity;
    private final int sms;
    private final Map<Integer, Pair> chosen = new HashMap<>();
    private final Map<Pair, ExpertLayer> layers = new LinkedHashMap<>();
    /** The intermediate the loaded pairs hand down, which every pair must share (one buffer serves all). */
    private KernelParam inter;

    /**
     * @param table    the pool's candidates with their fitted models ({@link DispatchTable#of})
     * @param shape    the layer's geometry, which every candidate's kernel must have
     * @param kernels  the kernel of each candidate, by the name its row carries
     * @param capacity the most tokens a call takes
     */
    public TokenKeyedLayer(KernelRuntime runtime, DispatchTable table, ExpertShape shape, Function<String, KernelHandle> kernels,
                           LaunchOrder order, int capacity) {
        if (table.experts() != shape.experts()) {
            throw new IllegalArgumentException("a dispatch table of " + table.experts() + " experts for a layer of " + shape.experts());
        }
        int most = Math.min(mostTokens(table.gateUp()), mostTokens(table.down()));
        if (capacity < 1 || capacity > most) {
            throw new IllegalArgumentException("capacity = " + capacity + ": the candidates take 1.." + most + " tokens");
        }
        this.table = table;
        this.shape = shape;
        this.kernels = kernels;
        this.order = order;
        this.capacity = capacity;
        this.sms = runtime.context().smCount();
    }

    /**
     * The layer of a tuned pool's directory ({@code moeforge tune}, or {@code pool} then {@code profile}):
     * the 5-term cost models fitted on its profile, the candidates they pick somewhere
     * ({@link DispatchTable#of}), and the pool's kernels loaded by name through {@code runtime}.
     */
    public static TokenKeyedLayer ofPool(KernelRuntime runtime, Path dir, LaunchOrder order, int capacity) throws IOException {
        return of(runtime, PoolDirectory.load(dir), order, capacity);
    }

    /** As {@link #ofPool}, from the directory as read (for a caller that checks its kernels first). */
    public static TokenKeyedLayer of(KernelRuntime runtime, PoolDirectory.Loaded pool, LaunchOrder order, int capacity) {
        return of(runtime, pool, PoolStore.usableTable(pool), order, capacity);
    }

    /** As above, with the pool's table already fitted ({@link PoolStore#usableTable}). */
    public static TokenKeyedLayer of(KernelRuntime runtime, PoolDirectory.Loaded pool, DispatchTable table, LaunchOrder order,
                                     int capacity) {
        ExpertShape shape = pool.fit().configs().getFirst().problem().shape();
        return new TokenKeyedLayer(runtime, table, shape, name -> runtime.load(pool.kernels().get(name)), order, capacity);
    }

    /**
     * Chooses the pair for {@code tokens} tokens and loads it (its kernels, its routing plan and scratch):
     * once per token count, before a call or a graph of that many tokens, as nothing may be allocated
     * during a capture. Returns the pair.
     */
    public ExpertLayer prepare(int tokens) {
        if (tokens < 1 || tokens > capacity) {
            throw new IllegalArgumentException("tokens = " + tokens + ": this layer takes 1.." + capacity);
        }
        Pair pair = chosen.get(tokens);
        if (pair == null) {
            int[] rows = table.keyedOnTokens(tokens, shape.topk(), sms);
            pair = new Pair(rows[0], rows[1]);
        }
        ExpertLayer layer = layers.get(pair);
        if (layer == null) {
            KernelHandle up = candidate(table.gateUp().get(pair.gateUp()).name());
            KernelHandle down = candidate(table.down().get(pair.down()).name());
            KernelParam inter = up.signature().param("inter");
            if (this.inter != null && !ExpertLayer.sameLayout(inter, this.inter)) {
                throw new IllegalArgumentException("candidate " + up.spec().name() + " hands down its intermediate as "
                        + inter.elementType().text() + " " + inter.shapeText() + ", another pair of this layer as "
                        + this.inter.elementType().text() + " " + this.inter.shapeText() + ": a layer keyed on the token count takes "
                        + "a pool whose pairs share one intermediate (one format)");
            }
            layer = new ExpertLayer(up, down, order, Math.min(capacity, Math.min(up.maxTokens(), down.maxTokens())));
            layers.put(pair, layer);
            this.inter = inter;
        }
        chosen.put(tokens, pair);  // only once its pair is loaded
        return layer;
    }

    private static int mostTokens(List<DispatchTable.Row> rows) {
        return rows.stream().mapToInt(DispatchTable.Row::maxTokens).max().orElse(0);
    }

    private ExpertLayer prepared(int tokens) {
        Pair pair = chosen.get(tokens);
        if (pair == null) {
            throw new IllegalStateException("call prepare(" + tokens + ") before a call or a graph of " + tokens + " tokens (loading "
                    + "its pair allocates the pair's routing plan, which a capture may not)");
        }
        return layers.get(pair);
    }

    private KernelHandle candidate(String name) {
        KernelHandle k = kernels.apply(name);
        if (!(k.spec().problem() instanceof Problem.ExpertProblem p) || !p.shape().equals(shape)) {
            throw new IllegalArgumentException("candidate " + name + " is not of the layer's geometry " + shape);
        }
        return k;
    }

    @Override
    public LaunchOrder order() {
        return order;
    }

    @Override
    public ExpertShape shape() {
        return shape;
    }

    /** The most tokens a call takes: at most the most any gate_up and any down candidate take. */
    @Override
    public int maxTokens() {
        return capacity;
    }

    /** The intermediate of the pair {@code tokens} tokens run (prepared here). */
    @Override
    public DeviceBuffer allocateInter(int tokens) {
        return prepare(tokens).allocateInter(tokens);
    }

    @Override
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        prepared(tokens).enqueue(stream, tokens, x, wGateUp, wDown, topkIds, topkWeights, inter, y);
    }

    @Override
    public void close() {
        List<ExpertLayer> loaded = List.copyOf(layers.values());
        layers.clear();
        chosen.clear();
        Resources.closeAll(loaded);
    }
}
