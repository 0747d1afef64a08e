package dev.moeforge.dsl.text;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.AccChannel;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.ScheduleKind;
import dev.moeforge.dsl.text.FunctionTable.Entry;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The names of the textual form: every problem, schedule and epilogue function with its
 * parameters and IR constructor, and the named values arguments take. A new IR kind gets its
 * name here (and its printed form in {@link SpecPrinter}); the grammar stays as it is.
 */
final class FunctionRegistry {
    private FunctionRegistry() {}

    // Sealed interfaces without a value list: extend these with the format or function.
    static final Choices<WeightFormat> WEIGHT_FORMATS = Choices.of(WeightFormat.ALL, WeightFormat::text);
    static final Choices<GateFunction> GATE_FUNCTIONS = Choices.of(List.of(GateFunction.SILU, GateFunction.CLAMPED_SWIGLU), GateFunction::text);

    static final Choices<DType> DTYPES = Choices.of(List.of(DType.values()), DType::text);
    static final Choices<GateUpLayout> LAYOUTS = Choices.of(List.of(GateUpLayout.values()), GateUpLayout::text);
    static final Choices<Target> TARGETS = Choices.of(List.of(Target.values()), Target::text);
    static final Choices<AccChannel> ACC_CHANNELS = Choices.of(List.of(AccChannel.values()), AccChannel::text);
    static final Choices<Boolean> BOOLEANS = Choices.of(List.of(Boolean.FALSE, Boolean.TRUE), b -> b.toString());

    static final FunctionTable<Problem> PROBLEMS = FunctionTable.sections(List.of(
            new Entry<>("expert_gate_up",
                    List.of("hidden", "intermediate", "experts", "topk", "weights", "activations", "layout", "bias"), a -> {
                        ExpertShape shape = shape(a);
                        WeightFormat weights = a.choice("weights", WEIGHT_FORMATS);
                        DType activations = a.choice("activations", DTYPES);
                        GateUpLayout layout = a.choice("layout", LAYOUTS);
                        Boolean bias = a.choice("bias", BOOLEANS, Boolean.FALSE);
                        return a.ok() ? new Problem.ExpertGateUp(shape, weights, activations, layout, bias) : null;
                    }),
            new Entry<>("expert_down",
                    List.of("hidden", "intermediate", "experts", "topk", "weights", "activations", "bias"), a -> {
                        ExpertShape shape = shape(a);
                        WeightFormat weights = a.choice("weights", WEIGHT_FORMATS);
                        DType activations = a.choice("activations", DTYPES);
                        Boolean bias = a.choice("bias", BOOLEANS, Boolean.FALSE);
                        return a.ok() ? new Problem.ExpertDown(shape, weights, activations, bias) : null;
                    }),
            new Entry<>("expert_mlp",
                    List.of("hidden", "intermediate", "experts", "topk", "weights", "activations", "layout"), a -> {
                        ExpertShape shape = shape(a);
                        WeightFormat weights = a.choice("weights", WEIGHT_FORMATS);
                        DType activations = a.choice("activations", DTYPES);
                        GateUpLayout layout = a.choice("layout", LAYOUTS);
                        return a.ok() ? new Problem.ExpertMlp(shape, weights, activations, layout) : null;
                    }),
            new Entry<>("router", List.of("hidden", "experts", "weights", "activations", "expert_counts", "input_norm"), a -> {
                Integer hidden = a.integer("hidden");
                Integer experts = a.integer("experts");
                WeightFormat weights = a.choice("weights", WEIGHT_FORMATS);
                DType activations = a.choice("activations", DTYPES);
                Boolean counts = a.choice("expert_counts", BOOLEANS);
                Optional<InputNorm> norm = inputNorm(a);
                return a.ok() ? new Problem.Router(hidden, experts, weights, activations, counts, norm) : null;
            }),
            new Entry<>("linear", List.of("inputs", "outputs", "weights", "activations", "bias", "input_norm"), a -> {
                Integer inputs = a.integer("inputs");
                Integer outputs = a.integer("outputs");
                WeightFormat weights = a.choice("weights", WEIGHT_FORMATS);
                DType activations = a.choice("activations", DTYPES);
                Boolean bias = a.choice("bias", BOOLEANS, Boolean.FALSE);
                Optional<InputNorm> norm = inputNorm(a);
                return a.ok() ? new Problem.Linear(inputs, outputs, weights, activations, bias, norm) : null;
            })));

    /** How a problem's input rows are made from the residual stream ({@code input_norm=...}). */
    static final FunctionTable<InputNorm> INPUT_NORMS = FunctionTable.expressions(List.of(
            new Entry<>("add_rms_norm", List.of("addend", "eps"), a -> {
                DType addend = a.choice("addend", DTYPES);
                Double eps = a.decimal("eps");
                return a.ok() ? new InputNorm(addend, eps) : null;
            })));

    /** The optional {@code input_norm} argument: absent means the rows are read as given. */
    private static Optional<InputNorm> inputNorm(Args a) {
        return a.has("input_norm") ? Optional.ofNullable(a.function("input_norm", INPUT_NORMS)) : Optional.empty();
    }

    /** Every schedule kind, its parameters read by name as the kind declares them (booleans may be left out: false). */
    static final FunctionTable<Schedule<?>> SCHEDULES = FunctionTable.sections(
            Schedule.kinds().stream().<Entry<Schedule<?>>>map(FunctionRegistry::schedule).toList());

    // Nested nodes are read through FunctionRegistry.EPILOGUE: a simple name may not refer to the
    // field from its own initializer.
    static final FunctionTable<EpilogueNode> EPILOGUE = FunctionTable.expressions(List.of(
            new Entry<>("store", List.of("input", "dtype"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                DType dtype = a.choice("dtype", DTYPES);
                return a.ok() ? new Store(input, dtype) : null;
            }),
            new Entry<>("combine", List.of("input"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Combine(input) : null;
            }),
            new Entry<>("gated", List.of("fn", "gate", "up"), a -> {
                GateFunction fn = a.choice("fn", GATE_FUNCTIONS);
                EpilogueNode gate = a.function("gate", FunctionRegistry.EPILOGUE);
                EpilogueNode up = a.function("up", FunctionRegistry.EPILOGUE);
                return a.ok() ? new GatedActivation(fn, gate, up) : null;
            }),
            new Entry<>("row", List.of("name"), a -> {
                String name = a.identifier("name");
                return a.ok() ? new RowParam(name) : null;
            }),
            new Entry<>("add", List.of("left", "right"), a -> {
                EpilogueNode left = a.function("left", FunctionRegistry.EPILOGUE);
                EpilogueNode right = a.function("right", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Add(left, right) : null;
            }),
            new Entry<>("scale", List.of("input", "factor"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                Double factor = a.decimal("factor");
                return a.ok() ? new Scale(input, factor) : null;
            }),
            new Entry<>("sigmoid", List.of("input"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Sigmoid(input) : null;
            }),
            new Entry<>("softmax", List.of("input"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Softmax(input) : null;
            }),
            // groups and topk_groups default to 1 (no group limit); by defaults to the input itself
            new Entry<>("topk", List.of("input", "k", "groups", "topk_groups", "by"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                Integer k = a.integer("k");
                Integer groups = a.integer("groups", 1);
                Integer topkGroups = a.integer("topk_groups", 1);
                Optional<EpilogueNode> by = a.has("by")
                        ? Optional.ofNullable(a.function("by", FunctionRegistry.EPILOGUE)) : Optional.empty();
                return a.ok() ? new TopK(input, k, groups, topkGroups, by) : null;
            }),
            new Entry<>("renormalize", List.of("input"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Renormalize(input) : null;
            }),
            new Entry<>("dense", List.of("input"), a -> {
                EpilogueNode input = a.function("input", FunctionRegistry.EPILOGUE);
                return a.ok() ? new Dense(input) : null;
            }),
            // bare acc is the main accumulator; acc(gate) and acc(up) name a gate_up channel
            new Entry<>("acc", List.of("channel"), a -> {
                if (!a.has("channel")) {
                    return a.ok() ? Acc.MAIN : null;
                }
                AccChannel channel = a.choice("channel", ACC_CHANNELS);
                return a.ok() ? new Acc(channel) : null;
            })));

    private static Entry<Schedule<?>> schedule(ScheduleKind<?, ?> kind) {
        return new Entry<>(kind.name(), kind.params().stream().map(ScheduleKind.Param::name).toList(), a -> {
            List<Object> values = new ArrayList<>();
            for (ScheduleKind.Param p : kind.params()) {
                values.add(p.isBoolean() ? a.choice(p.name(), BOOLEANS, Boolean.FALSE) : a.integer(p.name()));
            }
            return a.ok() ? kind.create(values) : null;
        });
    }

    private static ExpertShape shape(Args a) {
        Integer hidden = a.integer("hidden");
        Integer intermediate = a.integer("intermediate");
        Integer experts = a.integer("experts");
        Integer topk = a.integer("topk");
        return a.ok() ? new ExpertShape(hidden, intermediate, experts, topk) : null;
    }
}
