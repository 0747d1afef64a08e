package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.RoutingAlign;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One half of the expert layer (a gate_up or a down kernel) with what it owns beyond its caller's
 * buffers: its scratch (zeroed once; tickets are left zero by every launch) and, for a kernel
 * that takes the routing grouped by expert, the plan's buffers, sized for {@code capacity}
 * tokens. A half that runs alone builds its own plan; in an {@link ExpertLayer} the halves share one.
 * A W8A8 gate_up also quantises x into its workspace before each launch.
 */
public final class ExpertHalf implements AutoCloseable {
    private final KernelHandle kernel;
    private final LaunchOrder order;
    private final int capacity;
    private final RoutingAlign.PlanBuffers plan;
    private final boolean ownsPlan;
    private final Map<String, DeviceBuffer> workspace = new LinkedHashMap<>();

    private ExpertHalf(KernelHandle kernel, LaunchOrder order, int capacity, RoutingAlign.PlanBuffers plan, boolean ownsPlan) {
        if (!(kernel.spec().problem() instanceof Problem.ExpertProblem)) {
            throw new IllegalArgumentException("kernel " + kernel.spec().name() + " is not a gate_up or down kernel");
        }
        if (capacity < 1 || capacity > kernel.maxTokens()) {
            throw new IllegalArgumentException("capacity = " + capacity + ": kernel " + kernel.spec().name() + " takes 1.."
                    + kernel.maxTokens() + " tokens");
        }
        this.kernel = kernel;
        this.order = order;
        this.capacity = capacity;
        this.plan = plan;
        this.ownsPlan = ownsPlan;
        for (KernelParam p : kernel.signature().tensors()) {
            if (p.role() == KernelParam.Role.WORKSPACE) {
                DeviceBuffer b = DeviceBuffer.allocate(p.elementType(), p.elements(capacity));
                b.fillWords32(0);
                workspace.put(p.name(), b);
            }
        }
    }

    /** A half that runs alone: it builds its own routing plan where it takes one. */
    public static ExpertHalf alone(KernelHandle kernel, LaunchOrder order, int capacity) {
        return new ExpertHalf(kernel, order, capacity, kernel.routingAlign().map(a -> a.allocate(capacity)).orElse(null), true);
    }

    /** A half of a layer, reading {@code plan} (built by the layer; null when neither half takes one). */
    static ExpertHalf sharing(KernelHandle kernel, LaunchOrder order, int capacity, RoutingAlign.PlanBuffers plan) {
        return new ExpertHalf(kernel, order, capacity, kernel.takesRoutingPlan() ? plan : null, false);
    }

    public KernelHandle kernel() {
        return kernel;
    }

    /** The most tokens one launch takes: the kernel's, or its scratch's where it owns some. */
    public int maxTokens() {
        return plan != null || !workspace.isEmpty() ? capacity : kernel.maxTokens();
    }

    /** gate_up: {@code inter = act(x W_gu^T)} for each routed (token, slot), after its own plan where it takes one. */
    public void enqueueGateUp(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceBuffer topkIds,
                              DeviceBuffer inter) {
        enqueueOwnPlan(stream, tokens, topkIds);
        launchGateUp(stream, tokens, x, wGateUp, topkIds, inter);
    }

    /** gate_up's kernel alone (after quantising x, for W8A8), reading the plan already built. */
    void launchGateUp(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceBuffer topkIds, DeviceBuffer inter) {
        if (kernel.quantiser().isPresent()) {
            checkTokens(tokens);  // before the quantise launch, so a refused call enqueues nothing
            kernel.quantiser().get().enqueue(stream, order, tokens, x, workspace.get(ExpertCentric.QUANTISED_X));
        }
        launch(stream, tokens, Map.of("x", x, "topk_ids", topkIds, "inter", inter), "gate_up's weights", wGateUp);
    }

    /** down: {@code y = sum_j topk_weights[j] * (inter_j W_down^T)}, after its own plan where it takes one. */
    public void enqueueDown(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                            DeviceBuffer topkWeights, DeviceBuffer y) {
        enqueueOwnPlan(stream, tokens, topkIds);
        launchDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /**
     * Builds this half's own routing plan for {@code topkIds} (where it takes one) and nothing else:
     * for a routing that stays the same from call to call (a projection run as one expert's down
     * half, every row to expert 0), after which {@link #enqueueDownOnPlan} launches the kernel alone.
     */
    public void enqueuePlan(CudaStream stream, int tokens, DeviceBuffer topkIds) {
        enqueueOwnPlan(stream, tokens, topkIds);
    }

    /**
     * down's kernel alone, reading the plan {@link #enqueuePlan} (or an earlier {@link #enqueueDown})
     * built for these {@code tokens} and {@code topkIds}: the caller keeps the routing unchanged since.
     */
    public void enqueueDownOnPlan(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                                  DeviceBuffer topkWeights, DeviceBuffer y) {
        checkTokens(tokens);
        launchDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** down's kernel alone, reading the plan already built. */
    void launchDown(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                    DeviceBuffer topkWeights, DeviceBuffer y) {
        launch(stream, tokens, Map.of("inter", inter, "topk_ids", topkIds, "topk_weights", topkWeights, "y", y), "down's weights", wDown);
        kernel.slotCombine().ifPresent(c -> c.enqueue(stream, order, tokens, workspace.get(ExpertCentric.PARTIALS), y));
    }

    private void enqueueOwnPlan(CudaStream stream, int tokens, DeviceBuffer topkIds) {
        checkTokens(tokens);  // before the plan's launches, so a refused call enqueues nothing
        if (ownsPlan && plan != null) {
            kernel.routingAlign().orElseThrow().enqueue(stream, order, tokens, topkIds, plan);
        }
    }

    private void checkTokens(int tokens) {
        if (tokens < 1 || tokens > maxTokens()) {
            throw new IllegalArgumentException("tokens = " + tokens + ": kernel " + kernel.spec().name() + " takes 1.." + maxTokens()
                    + (maxTokens() == capacity ? " here (its scratch's capacity; give the layer a larger one)" : ""));
        }
    }

    /** The kernel alone, on its buffers bound by name in its signature's order (the plan and scratch its own). */
    private void launch(CudaStream stream, int tokens, Map<String, DeviceBuffer> named, String weightsName, DeviceWeights weights) {
        checkTokens(tokens);
        weights.requireLayout(DeviceWeights.Layout.NATURAL, weightsName);
        List<DeviceBuffer> all = new ArrayList<>();
        for (KernelParam p : kernel.signature().tensors()) {
            switch (p.weightPart()) {
                case CODES -> all.addAll(weights.buffers());
                case BLOCK_SCALES, ROW_SCALES, BIAS, TENSOR_MAP -> { }  // among the weight's buffers (no map is a tensor)
                case NONE -> all.add(switch (p.name()) {
                    case RoutingPlan.SORTED_SLOTS -> plan.sortedSlots();
                    case RoutingPlan.EXPERT_OFFSETS -> plan.expertOffsets();
                    default -> p.role() == KernelParam.Role.WORKSPACE ? workspace.get(p.name()) : named.get(p.name());
                });
            }
        }
        kernel.launch(stream, order, tokens, all.toArray(DeviceBuffer[]::new));
    }

    /** Frees the scratch and an own plan (the kernel stays loaded). */
    @Override
    public void close() {
        if (ownsPlan && plan != null) {
            plan.close();
        }
        workspace.values().forEach(DeviceBuffer::close);
    }
}
