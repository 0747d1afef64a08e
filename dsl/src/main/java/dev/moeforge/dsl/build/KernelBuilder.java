package dev.moeforge.dsl.build;

import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.Objects;

/**
 * Fluent construction of a {@link KernelSpec}; {@link #build()} validates, so an invalid spec is
 * rejected with every problem named before it can reach the code generator.
 *
 * <pre>{@code
 * KernelSpec gateUp = KernelBuilder.named("qwen3_gate_up")
 *         .expertGateUp(new ExpertShape(2048, 768, 128, 8))
 *         .schedule(OutputCentricBuilder.create().warpsPerCta(4).kUnroll(8).build())
 *         .epilogue(Epilogues.siluGatedStore(DType.BF16))
 *         .target(Target.SM_90A)
 *         .build();
 * }</pre>
 */
public final class KernelBuilder {
    private final String name;
    private ExpertShape shape;
    private boolean gateUp = true;
    private Problem.Router router;
    private boolean expertCounts;
    private WeightFormat weights = WeightFormat.BF16;
    private DType activations = DType.BF16;
    private GateUpLayout layout = GateUpLayout.STACKED;
    private boolean bias;
    private Schedule<?> schedule = OutputCentricBuilder.create().build();
    private EpilogueNode epilogue;
    private Target target = Target.SM_90A;

    private KernelBuilder(String name) {
        this.name = Objects.requireNonNull(name, "name");
    }

    public static KernelBuilder named(String name) {
        return new KernelBuilder(name);
    }

    /** The gate_up half; the epilogue defaults to {@code store(gated(silu, acc(gate), acc(up)))}. */
    public KernelBuilder expertGateUp(ExpertShape shape) {
        this.shape = shape;
        this.gateUp = true;
        return this;
    }

    /** The down half; the epilogue defaults to {@code store(combine(acc))}. */
    public KernelBuilder expertDown(ExpertShape shape) {
        this.shape = shape;
        this.gateUp = false;
        return this;
    }

    /**
     * A router of {@code experts} scores over {@code hidden} inputs; give its routing rule as the
     * epilogue ({@link RoutingRules}). Sets the default decode schedule, router_gemv with 4 warps of
     * one expert each per block; call {@link #schedule} afterwards to change it.
     */
    public KernelBuilder router(int hidden, int experts) {
        this.router = new Problem.Router(hidden, experts, weights, activations, false);
        this.schedule = new RouterGemv(4, 16, 8, 4);
        return this;
    }

    /** A router also writes the per-expert token histogram ({@code expert_counts}). */
    public KernelBuilder expertCounts(boolean on) {
        this.expertCounts = on;
        return this;
    }

    public KernelBuilder weights(WeightFormat weights) {
        this.weights = weights;
        return this;
    }

    public KernelBuilder activations(DType activations) {
        this.activations = activations;
        return this;
    }

    public KernelBuilder layout(GateUpLayout layout) {
        this.layout = layout;
        return this;
    }

    /** Whether the expert projection has a bias ({@link Problem.ExpertProblem#bias()}); default none. */
    public KernelBuilder bias(boolean bias) {
        this.bias = bias;
        return this;
    }

    public KernelBuilder schedule(Schedule<?> schedule) {
        this.schedule = schedule;
        return this;
    }

    public KernelBuilder epilogue(EpilogueNode epilogue) {
        this.epilogue = epilogue;
        return this;
    }

    public KernelBuilder target(Target target) {
        this.target = target;
        return this;
    }

    /** The spec, validated. */
    public KernelSpec build() {
        return Validator.check(unchecked()).spec();
    }

    /** The spec without validation, for tests of the validator itself. */
    public KernelSpec unchecked() {
        if (router != null) {
            if (bias) {
                throw new IllegalStateException("bias(true) applies to expert problems; a router's bias is row(name) in its routing rule");
            }
            Objects.requireNonNull(epilogue, "a router needs its routing rule as the epilogue (see RoutingRules)");
            Problem.Router r = new Problem.Router(router.hidden(), router.experts(), weights, activations, expertCounts);
            return new KernelSpec(name, r, schedule, epilogue, target);
        }
        Objects.requireNonNull(shape, "call expertGateUp(shape), expertDown(shape) or router(hidden, experts) first");
        Problem problem = gateUp
                ? new Problem.ExpertGateUp(shape, weights, activations, layout, bias)
                : new Problem.ExpertDown(shape, weights, activations, bias);
        EpilogueNode e = epilogue != null ? epilogue
                : gateUp ? Epilogues.siluGatedStore(activations) : Epilogues.combinedStore(activations);
        return new KernelSpec(name, problem, schedule, e, target);
    }
}
