package dev.moeforge.runtime.kernel;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.check.ValidatedSpec;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.dsl.schedule.WeightTileMap;
import dev.moeforge.runtime.compile.PtxasReport;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.TensorMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A loaded kernel and the spec it was generated from. {@link #launch} checks every buffer's
 * element type and size against the spec's signature before enqueuing, and names the kernel and
 * the spec when something is wrong.
 */
public final class KernelHandle {
    private final ValidatedSpec<?> valid;
    private final KernelSpec spec;
    private final int maxTokens;
    private final String specText;
    private final KernelSignature signature;
    private final CudaFunction function;
    private final PtxasReport.FunctionResources resources;
    private final Optional<RoutingAlign> routingAlign;
    private final Optional<ActivationQuantiser> quantiser;
    private final Optional<SlotCombine> slotCombine;
    private final Map<Long, TensorMap> tensorMaps = new ConcurrentHashMap<>();

    KernelHandle(ValidatedSpec<?> valid, String specText, CudaFunction function, PtxasReport.FunctionResources resources,
                 Optional<RoutingAlign> routingAlign, Optional<ActivationQuantiser> quantiser, Optional<SlotCombine> slotCombine) {
        this.valid = valid;
        this.spec = valid.spec();
        this.maxTokens = valid.maxTokens();
        this.specText = specText;
        this.signature = KernelSignature.of(valid);
        this.function = function;
        this.resources = resources;
        this.routingAlign = routingAlign;
        this.quantiser = quantiser;
        this.slotCombine = slotCombine;
    }

    /**
     * The quantise entry point of a W8A8 gate_up kernel (x into its workspace); empty for the others.
     * Such a kernel multiplies what this entry point left there, not x: {@code ExpertHalf} and
     * {@code ExpertLayer} launch it first; a caller of {@link #launch} directly must too.
     */
    public Optional<ActivationQuantiser> quantiser() {
        return quantiser;
    }

    /**
     * The combine entry point of an expert_centric down with combine_kernel (its workspace's slot rows
     * into y); empty for the others. Such a kernel leaves y unwritten: {@code ExpertHalf} and
     * {@code ExpertLayer} launch this right after it; a caller of {@link #launch} directly must too.
     */
    public Optional<SlotCombine> slotCombine() {
        return slotCombine;
    }

    /** The align entry points of a kernel that takes the routing plan (expert_centric); empty for the others. */
    public Optional<RoutingAlign> routingAlign() {
        return routingAlign;
    }

    /** Whether the kernel takes the routing grouped by expert (sorted_slots, expert_offsets). */
    public boolean takesRoutingPlan() {
        return routingAlign.isPresent();
    }

    public KernelSpec spec() {
        return spec;
    }

    public KernelSignature signature() {
        return signature;
    }

    /** Registers, spills and shared memory as ptxas reported them. */
    public PtxasReport.FunctionResources resources() {
        return resources;
    }

    /** The largest token count one launch takes. */
    public int maxTokens() {
        return maxTokens;
    }

    /**
     * Enqueues the kernel for {@code numTokens} tokens. {@code tensors} are the signature's tensor
     * parameters in order; a buffer may be larger than needed (its prefix is used), never smaller.
     */
    public void launch(CudaStream stream, int numTokens, DeviceBuffer... tensors) {
        launch(stream, LaunchOrder.AFTER_PREVIOUS, numTokens, tensors);
    }

    /** As {@link #launch(CudaStream, int, DeviceBuffer...)}, ordered after the stream's previous kernel as {@code order} says. */
    public void launch(CudaStream stream, LaunchOrder order, int numTokens, DeviceBuffer... tensors) {
        List<KernelParam> params = signature.tensors();
        if (numTokens < 1 || numTokens > maxTokens()) {
            throw refused("num_tokens = " + numTokens + ", allowed 1.." + maxTokens());
        }
        if (tensors.length != params.size()) {
            throw refused(tensors.length + " buffers given, the kernel takes " + params.size() + ": "
                    + params.stream().map(KernelParam::name).toList());
        }
        for (int i = 0; i < params.size(); i++) {
            KernelParam p = params.get(i);
            DeviceBuffer b = tensors[i];
            if (b == null) {
                throw refused(p.name() + " is null");
            }
            if (b.dtype() != p.elementType()) {
                throw refused(p.name() + " must hold " + p.elementType().text() + ", the buffer holds " + b.dtype().text());
            }
            long needed = p.elements(numTokens);
            if (b.elements() < needed) {
                throw refused(p.name() + " " + p.shapeText() + " needs " + needed + " elements for M = " + numTokens
                        + ", the buffer has " + b.elements());
            }
        }
        LaunchGeometry g = valid.geometry(numTokens);
        try {
            List<KernelParam> all = signature.params();
            Object[] args = new Object[all.size()];
            int tensor = 0;
            DeviceBuffer codes = null;
            for (int i = 0; i < all.size(); i++) {
                KernelParam p = all.get(i);
                args[i] = switch (p.role()) {
                    case INPUT, WEIGHTS, ROUTING, OUTPUT, WORKSPACE -> {
                        DeviceBuffer b = tensors[tensor++];
                        if (p.weightPart() == KernelParam.WeightPart.CODES) {
                            codes = b;
                        }
                        yield b;
                    }
                    case TOKEN_COUNT -> numTokens;
                    case TENSOR_MAP -> tensorMap(p, codes);  // the map follows its weight's parts
                };
            }
            function.launch(order, g.gridX(), g.gridY(), 1, g.blockX(), 1, 1, g.sharedBytes(), stream, args);
        } catch (RuntimeException e) {
            throw new KernelLaunchException("launch of kernel " + spec.name() + " failed (grid " + g.gridX() + "x" + g.gridY()
                    + ", block " + g.blockX() + ", " + g.sharedBytes() + " B shared): " + e.getMessage() + "\nspec:\n" + specText, e);
        }
    }

    /**
     * The copy engine's map of the weight at {@code codes}, encoded once per buffer address (the map
     * is the address and the schedule's fixed geometry; past 256 addresses the handle starts afresh).
     */
    private TensorMap tensorMap(KernelParam p, DeviceBuffer codes) {
        if (codes == null) {
            throw new IllegalStateException("kernel " + spec.name() + ": tensor map " + p.name() + " follows no weight");
        }
        WeightTileMap map = valid.weightTileMap().orElseThrow(
                () -> new IllegalStateException("kernel " + spec.name() + " declares a tensor map its schedule does not describe"));
        if (tensorMaps.size() >= CACHED_TENSOR_MAPS) {
            tensorMaps.clear();
        }
        return tensorMaps.computeIfAbsent(codes.devicePointerValue(), address -> TensorMap.encode(address, map));
    }

    /** Tensor maps a handle keeps: a layer's rotated weight copies, a few dozen. */
    private static final int CACHED_TENSOR_MAPS = 256;

    private KernelLaunchException refused(String why) {
        return new KernelLaunchException("kernel " + spec.name() + " not launched: " + why + "\nspec:\n" + specText);
    }
}
