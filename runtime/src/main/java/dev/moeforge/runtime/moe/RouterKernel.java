package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.RouterTrees;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A loaded router kernel with its workspace (the per-token scores and tickets, sized for up to
 * {@code maxTokens} tokens; the tickets start at zero and the kernel leaves them at zero, so graph
 * replays need no reset). One launch per router call, nothing read back to the host.
 */
public final class RouterKernel implements AutoCloseable {
    private final KernelHandle handle;
    private final Problem.Router problem;
    private final List<String> rowParams;
    private final DeviceBuffer scores;
    private final DeviceBuffer counters;

    public RouterKernel(KernelHandle handle, int maxTokens) {
        if (!(handle.spec().problem() instanceof Problem.Router r)) {
            throw new IllegalArgumentException("kernel " + handle.spec().name() + " is not a router");
        }
        if (maxTokens < 1 || maxTokens > handle.maxTokens()) {
            throw new IllegalArgumentException("maxTokens = " + maxTokens + ": router " + handle.spec().name() + " takes 1.."
                    + handle.maxTokens());
        }
        this.handle = handle;
        this.problem = r;
        this.rowParams = RouterTrees.rowParams(handle.spec().epilogue());
        this.scores = DeviceBuffer.allocate(DType.FP32, (long) maxTokens * r.experts());
        this.counters = DeviceBuffer.allocate(DType.INT32, maxTokens);
        counters.fillWords32(0);
    }

    public KernelHandle handle() {
        return handle;
    }

    public Problem.Router problem() {
        return problem;
    }

    /** The k of the stored top-k, or empty for a dense router. */
    public java.util.OptionalInt topk() {
        return RouterTrees.storedTopK((Store) handle.spec().epilogue());
    }

    /** The {@code row(...)} parameters the rule needs, in launch order. */
    public List<String> rowParams() {
        return rowParams;
    }

    /**
     * Enqueues the router for {@code tokens} tokens. {@code rows} gives each {@code row(...)}
     * parameter's E-float buffer by name; {@code outputs} are {@code topk_weights, topk_ids} for a
     * top-k rule, or {@code router_out} for a dense one.
     */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceBuffer wRouter, Map<String, DeviceBuffer> rows,
                        DeviceBuffer... outputs) {
        if (!rows.keySet().equals(new java.util.HashSet<>(rowParams))) {
            throw new IllegalArgumentException("router " + handle.spec().name() + " takes the rows " + rowParams + ", given "
                    + rows.keySet());
        }
        List<DeviceBuffer> args = new ArrayList<>();
        args.add(x);
        args.add(wRouter);
        for (String name : rowParams) {
            args.add(rows.get(name));
        }
        args.add(scores);
        args.add(counters);
        args.addAll(List.of(outputs));
        handle.launch(stream, tokens, args.toArray(DeviceBuffer[]::new));
    }

    /** Whether the kernel adds to an {@code expert_counts} output (zero it per step with {@link #zeroCounts}). */
    public boolean countsExperts() {
        return problem.expertCounts();
    }

    /** Enqueues zeroing the expert counts on {@code stream}, so it lands in a captured graph too. */
    public void zeroCounts(CudaStream stream, DeviceBuffer expertCounts) {
        expertCounts.fillWords32Async(0, stream);
    }

    /** The workspace tickets, for tests: all zero whenever no launch is in flight. */
    public DeviceBuffer counters() {
        return counters;
    }


    @Override
    public void close() {
        scores.close();
        counters.close();
    }
}
