package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A loaded router kernel with its workspace (the per-token scores and tickets, sized for up to
 * {@code maxTokens} tokens; both start at zero and the kernel leaves them at zero, so graph
 * replays need no reset). One launch per router call, nothing read back to the host.
 */
public final class RouterKernel implements AutoCloseable {
    private final KernelHandle handle;
    private final Problem.Router problem;
    private final List<String> rowParams;
    /** The signature's WORKSPACE tensors by name (router_gemv: scores and tickets; router_cluster: none). */
    private final Map<String, DeviceBuffer> workspace = new LinkedHashMap<>();

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
        for (KernelParam p : handle.signature().tensors()) {
            if (p.role() == KernelParam.Role.WORKSPACE) {
                DeviceBuffer b = DeviceBuffer.allocate(p.elementType(), p.elements(maxTokens));
                b.fillWords32(0);  // tickets and scores start at zero (a zero score word means "not yet written")
                workspace.put(p.name(), b);
            }
        }
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
        enqueue(stream, LaunchOrder.AFTER_PREVIOUS, tokens, x, wRouter, rows, outputs);
    }

    /** As {@link #enqueue(CudaStream, int, DeviceBuffer, DeviceBuffer, Map, DeviceBuffer...)}, ordered as {@code order} says. */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer x, DeviceBuffer wRouter,
                        Map<String, DeviceBuffer> rows, DeviceBuffer... outputs) {
        enqueue(stream, order, tokens, new InputRows.Given(x), wRouter, rows, outputs);
    }

    /**
     * As above, with the input rows as given or (for a router with an input norm) made from the
     * residual stream; {@code outputs} are the routing table's, the norm's two come with {@code input}.
     */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, InputRows input, DeviceBuffer wRouter,
                        Map<String, DeviceBuffer> rows, DeviceBuffer... outputs) {
        input.requireFor(problem, handle.spec().name());
        if (!rows.keySet().equals(new java.util.HashSet<>(rowParams))) {
            throw new IllegalArgumentException("router " + handle.spec().name() + " takes the rows " + rowParams + ", given "
                    + rows.keySet());
        }
        Map<String, Long> lengths = new java.util.TreeMap<>();
        rows.forEach((name, buffer) -> lengths.put(name, buffer.elements()));
        requireRowLengths(handle.spec().name(), problem.experts(), lengths);
        List<DeviceBuffer> args = new ArrayList<>();
        int output = 0;
        for (KernelParam p : handle.signature().tensors()) {
            java.util.Optional<DeviceBuffer> own = input.bind(p);
            if (own.isPresent()) {
                args.add(own.get());
                continue;
            }
            args.add(switch (p.role()) {
                case WEIGHTS -> wRouter;
                case INPUT -> rows.get(p.name());
                case WORKSPACE -> workspace.get(p.name());
                case OUTPUT -> output < outputs.length ? outputs[output++] : null;
                case ROUTING, TOKEN_COUNT, TENSOR_MAP -> throw new IllegalStateException("a router has no " + p.role() + " tensor " + p.name());
            });
        }
        if (output != outputs.length) {
            throw new IllegalArgumentException("router " + handle.spec().name() + " writes " + output + " outputs, "
                    + outputs.length + " buffers given");
        }
        handle.launch(stream, order, tokens, args.toArray(DeviceBuffer[]::new));
    }

    /**
     * A {@code row(name)} holds one value per expert, so its buffer must hold exactly E values. The
     * launch refuses any buffer that is too short, but takes longer ones (token-sized buffers may be
     * sized for the largest batch); a longer row, e.g. the bias of a layer with more experts, is a
     * mistake it could not see. The spec cannot get this wrong (a row is E wide by construction); the
     * buffer can, so the check is here.
     */
    static void requireRowLengths(String router, int experts, Map<String, Long> lengths) {
        lengths.forEach((name, elements) -> {
            if (elements != experts) {
                throw new IllegalArgumentException("router " + router + ": row(" + name + ") holds one fp32 value per expert, "
                        + "exactly " + experts + "; the buffer given holds " + elements);
            }
        });
    }

    /** Whether the kernel adds to an {@code expert_counts} output (zero it per step with {@link #zeroCounts}). */
    public boolean countsExperts() {
        return problem.expertCounts();
    }

    /** Enqueues zeroing the expert counts on {@code stream}, so it lands in a captured graph too. */
    public void zeroCounts(CudaStream stream, DeviceBuffer expertCounts) {
        expertCounts.fillWords32Async(0, stream);
    }

    /** The workspace tickets of a router_gemv kernel, for tests (all zero whenever no launch is in flight); null otherwise. */
    public DeviceBuffer counters() {
        return workspace.get("counters");
    }

    /** The scores workspace of a router_gemv kernel, for tests (all zero whenever no launch is in flight); null otherwise. */
    public DeviceBuffer scores() {
        return workspace.get("scores");
    }


    @Override
    public void close() {
        workspace.values().forEach(DeviceBuffer::close);
    }
}
