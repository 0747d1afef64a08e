package dev.moeforge.dsl.build;

import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.schedule.Schedule;

/** The two kernels of a SiLU-gated expert layer, built and validated together. */
public record ExpertLayerSpecs(KernelSpec gateUp, KernelSpec down) {

    /** {@code <prefix>_gate_up} and {@code <prefix>_down}, BF16, with the same schedule for both halves. */
    public static ExpertLayerSpecs of(String prefix, ExpertShape shape, GateUpLayout layout, Schedule<?> schedule, Target target) {
        return of(prefix, shape, layout, schedule, schedule, target);
    }

    /** {@code <prefix>_gate_up} and {@code <prefix>_down}, BF16, each half with its own schedule. */
    public static ExpertLayerSpecs of(String prefix, ExpertShape shape, GateUpLayout layout, Schedule<?> gateUpSchedule,
                                      Schedule<?> downSchedule, Target target) {
        return of(prefix, shape, layout, WeightFormat.BF16, gateUpSchedule, downSchedule, target);
    }

    /** The same pair with gate_up's gate function replaced (e.g. gpt-oss's clamped SwiGLU). */
    public ExpertLayerSpecs withGate(GateFunction function) {
        KernelSpec g = new KernelSpec(gateUp.name(), gateUp.problem(), gateUp.schedule(),
                Epilogues.store(Epilogues.gated(function, Epilogues.gate(), Epilogues.up()), DType.BF16), gateUp.target());
        return new ExpertLayerSpecs(g, down);
    }

    /** The same pair with a bias on both projections (gpt-oss's {@code gate_up_proj_bias} and {@code down_proj_bias}). */
    public ExpertLayerSpecs withBias() {
        Problem.ExpertGateUp g = (Problem.ExpertGateUp) gateUp.problem();
        Problem.ExpertDown d = (Problem.ExpertDown) down.problem();
        return new ExpertLayerSpecs(
                Validator.check(new KernelSpec(gateUp.name(), new Problem.ExpertGateUp(g.shape(), g.weights(), g.activations(), g.layout(), true),
                        gateUp.schedule(), gateUp.epilogue(), gateUp.target())).spec(),
                Validator.check(new KernelSpec(down.name(), new Problem.ExpertDown(d.shape(), d.weights(), d.activations(), true),
                        down.schedule(), down.epilogue(), down.target())).spec());
    }

    /** {@code <prefix>_gate_up} and {@code <prefix>_down} with both weights in {@code weights}, each half with its own schedule. */
    public static ExpertLayerSpecs of(String prefix, ExpertShape shape, GateUpLayout layout, WeightFormat weights,
                                      Schedule<?> gateUpSchedule, Schedule<?> downSchedule, Target target) {
        KernelSpec gateUp = KernelBuilder.named(prefix + "_gate_up").expertGateUp(shape).layout(layout).weights(weights)
                .schedule(gateUpSchedule).epilogue(Epilogues.siluGatedStore(DType.BF16)).target(target).build();
        KernelSpec down = KernelBuilder.named(prefix + "_down").expertDown(shape).weights(weights)
                .schedule(downSchedule).epilogue(Epilogues.combinedStore(DType.BF16)).target(target).build();
        return new ExpertLayerSpecs(gateUp, down);
    }
}
