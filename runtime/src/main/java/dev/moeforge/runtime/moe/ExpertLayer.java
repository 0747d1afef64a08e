package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.RoutingAlign;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The MoE expert layer with routing given: gate_up then down, enqueued back to back on one
 * stream with nothing read back to the host, so a decode loop can capture it in a CUDA graph.
 * By default both kernels overlap the kernel before them (programmatic dependent launch).
 *
 * <p>Either half may be of either family. Where one takes the routing grouped by expert
 * (expert_centric), the layer first builds that plan on the device (two small launches, once per
 * layer call) and owns its buffers and the kernels' scratch, sized for {@link #capacity()} tokens.
 */
public final class ExpertLayer implements Experts, AutoCloseable {
    /** Tokens a layer with expert-centric kernels holds scratch for unless told otherwise. */
    public static final int DEFAULT_CAPACITY = 4096;

    private final KernelHandle gateUp;
    private final KernelHandle down;
    private final ExpertShape shape;
    private final LaunchOrder order;
    private final int capacity;
    private final Optional<RoutingAlign> align;
    private final RoutingAlign.PlanBuffers plan;
    private final ExpertHalf gateUpHalf;
    private final ExpertHalf downHalf;

    public ExpertLayer(KernelHandle gateUp, KernelHandle down) {
        this(gateUp, down, LaunchOrder.OVERLAPPING_PREVIOUS);
    }

    public ExpertLayer(KernelHandle gateUp, KernelHandle down, LaunchOrder order) {
        this(gateUp, down, order, Math.min(DEFAULT_CAPACITY, Math.min(gateUp.maxTokens(), down.maxTokens())));
    }

    /** With scratch for up to {@code capacity} tokens (at most both kernels' maxTokens). */
    public ExpertLayer(KernelHandle gateUp, KernelHandle down, LaunchOrder order, int capacity) {
        if (!(gateUp.spec().problem() instanceof Problem.ExpertGateUp g)) {
            throw new IllegalArgumentException("kernel " + gateUp.spec().name() + " is not a gate_up kernel");
        }
        if (!(down.spec().problem() instanceof Problem.ExpertDown d)) {
            throw new IllegalArgumentException("kernel " + down.spec().name() + " is not a down kernel");
        }
        if (!g.shape().equals(d.shape())) {
            throw new IllegalArgumentException("gate_up " + gateUp.spec().name() + " has shape " + g.shape()
                    + " but down " + down.spec().name() + " has " + d.shape());
        }
        KernelParam handed = gateUp.signature().param("inter");
        KernelParam taken = down.signature().param("inter");
        if (!sameLayout(handed, taken)) {
            throw new IllegalArgumentException("gate_up " + gateUp.spec().name() + " writes inter as " + handed.elementType().text() + " "
                    + handed.shapeText() + " but down " + down.spec().name() + " reads " + taken.elementType().text() + " "
                    + taken.shapeText() + ": pair kernels that both multiply FP8 activations (W8A8) or neither");
        }
        int max = Math.min(gateUp.maxTokens(), down.maxTokens());
        if (capacity < 1 || capacity > max) {
            throw new IllegalArgumentException("capacity = " + capacity + ": the kernels of this layer take 1.." + max + " tokens");
        }
        this.gateUp = gateUp;
        this.down = down;
        this.shape = g.shape();
        this.order = order;
        this.capacity = capacity;
        this.align = gateUp.routingAlign().or(down::routingAlign);
        this.plan = align.map(a -> a.allocate(capacity)).orElse(null);
        this.gateUpHalf = ExpertHalf.sharing(gateUp, order, capacity, plan);
        this.downHalf = ExpertHalf.sharing(down, order, capacity, plan);
    }

    /** Whether two kernels' buffers of one name hold the same elements in the same shape (one buffer serves both). */
    static boolean sameLayout(KernelParam a, KernelParam b) {
        return a.elementType() == b.elementType() && a.shape().equals(b.shape());
    }

    /** How each kernel is ordered after the one before it. */
    @Override
    public LaunchOrder order() {
        return order;
    }

    @Override
    public ExpertShape shape() {
        return shape;
    }

    public KernelHandle gateUp() {
        return gateUp;
    }

    public KernelHandle down() {
        return down;
    }

    /** The most tokens one call takes: the kernels' limit, or the scratch's where a kernel has scratch. */
    @Override
    public int maxTokens() {
        return Math.min(gateUpHalf.maxTokens(), downHalf.maxTokens());
    }

    /** Tokens the layer's scratch is sized for. */
    public int capacity() {
        return capacity;
    }

    /**
     * A buffer for the intermediate gate_up hands to down, for up to {@code tokens} tokens, as the
     * kernels take it: bf16 [M][k][I], or with FP8 activations (W8A8) each (token, slot)'s quantised row.
     */
    @Override
    public DeviceBuffer allocateInter(int tokens) {
        if (tokens < 1) {
            throw new IllegalArgumentException("tokens = " + tokens + ": at least 1");
        }
        KernelParam inter = gateUp.signature().param("inter");
        return DeviceBuffer.allocate(inter.elementType(), inter.elements(tokens));
    }

    /** The routing plan's buffers, where a kernel takes one (for tests); empty otherwise. */
    public Optional<RoutingAlign.PlanBuffers> routingPlan() {
        return Optional.ofNullable(plan);
    }

    /** Enqueues {@code y = down(gate_up(x))} for {@code tokens} tokens; {@code inter} is the scratch {@link #allocateInter} makes. */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceBuffer wGateUp, DeviceBuffer wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        enqueue(stream, tokens, x, DeviceWeights.bf16(wGateUp), DeviceWeights.bf16(wDown), topkIds, topkWeights, inter, y);
    }

    /** As above, with the weights in the kernels' format (codes and scales). */
    @Override
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceWeights wDown,
                        DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer inter, DeviceBuffer y) {
        enqueuePlan(stream, tokens, topkIds);
        launchGateUp(stream, tokens, x, wGateUp, topkIds, inter);
        launchDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** gate_up alone (after the routing plan, where it takes one): {@code inter = act(x W_gu^T)} for each routed (token, slot). */
    public void enqueueGateUp(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceBuffer topkIds,
                              DeviceBuffer inter) {
        if (gateUp.takesRoutingPlan()) {
            enqueuePlan(stream, tokens, topkIds);
        }
        launchGateUp(stream, tokens, x, wGateUp, topkIds, inter);
    }

    /** down alone (after the routing plan, where it takes one): {@code y = sum_j topk_weights[j] * (inter_j W_down^T)}. */
    public void enqueueDown(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                            DeviceBuffer topkWeights, DeviceBuffer y) {
        if (down.takesRoutingPlan()) {
            enqueuePlan(stream, tokens, topkIds);
        }
        launchDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** The routing plan both halves read, where one takes it (the align refuses more tokens than the plan holds). */
    private void enqueuePlan(CudaStream stream, int tokens, DeviceBuffer topkIds) {
        if (align.isPresent()) {
            align.get().enqueue(stream, order, tokens, topkIds, plan);
        }
    }

    private void launchGateUp(CudaStream stream, int tokens, DeviceBuffer x, DeviceWeights wGateUp, DeviceBuffer topkIds,
                              DeviceBuffer inter) {
        gateUpHalf.launchGateUp(stream, tokens, x, wGateUp, topkIds, inter);
    }

    private void launchDown(CudaStream stream, int tokens, DeviceBuffer inter, DeviceWeights wDown, DeviceBuffer topkIds,
                            DeviceBuffer topkWeights, DeviceBuffer y) {
        downHalf.launchDown(stream, tokens, inter, wDown, topkIds, topkWeights, y);
    }

    /** A kernel's buffers in launch order: {@code before}, each weight's buffers, then {@code after}. */
    static DeviceBuffer[] args(List<DeviceBuffer> before, List<DeviceWeights> weights, List<DeviceBuffer> after) {
        List<DeviceBuffer> all = new ArrayList<>(before);
        for (DeviceWeights w : weights) {
            all.addAll(w.buffers());
        }
        all.addAll(after);
        return all.toArray(DeviceBuffer[]::new);
    }

    /** Frees the routing plan and the kernels' scratch (the kernels stay loaded). */
    @Override
    public void close() {
        if (plan != null) {
            plan.close();
        }
        gateUpHalf.close();
        downHalf.close();
    }
}
