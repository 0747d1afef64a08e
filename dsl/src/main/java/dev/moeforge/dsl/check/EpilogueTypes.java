package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.AccChannel;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.List;

/**
 * The epilogue tree's type checker: gives each node its {@link ValueScope} and records an error,
 * with the path to the node, wherever the tree is ill-formed for the problem it belongs to.
 */
public final class EpilogueTypes {
    private final Problem problem;
    private final List<SpecError> errors;

    private EpilogueTypes(Problem problem, List<SpecError> errors) {
        this.problem = problem;
        this.errors = errors;
    }

    /** Type-checks the tree rooted at {@code root} (path {@code epilogue}); appends problems to {@code errors}. */
    public static void check(Problem problem, EpilogueNode root, List<SpecError> errors) {
        EpilogueTypes types = new EpilogueTypes(problem, errors);
        if (!(root instanceof Store)) {
            errors.add(new SpecError("epilogue", describe(root), "the root of an epilogue must be store(...)"));
        }
        ValueScope scope = types.typeOf(root, "epilogue", true);
        if (root instanceof Store store && scope == ValueScope.STORED) {
            ValueScope stored = types.typeOf(store.input(), "epilogue.store.input", false);
            ValueScope wanted = switch (problem) {
                case Problem.ExpertGateUp _ -> ValueScope.PER_SLOT;
                case Problem.ExpertDown _ -> ValueScope.PER_TOKEN;
            };
            if (stored != null && stored != wanted) {
                errors.add(new SpecError("epilogue.store.input", describe(store.input()), switch (problem) {
                    case Problem.ExpertGateUp _ -> "gate_up stores one value per (token, routed slot, neuron); "
                            + "remove the combine";
                    case Problem.ExpertDown _ -> "down stores one value per (token, hidden output): "
                            + "wrap the accumulator in combine(...) to sum over the routed experts";
                }));
            }
        }
    }

    /** Returns the node's scope, or null when it is ill-formed (an error was recorded). */
    private ValueScope typeOf(EpilogueNode node, String path, boolean isRoot) {
        return switch (node) {
            case Acc acc -> {
                boolean allowed = switch (problem) {
                    case Problem.ExpertGateUp _ -> acc.channel() == AccChannel.GATE || acc.channel() == AccChannel.UP;
                    case Problem.ExpertDown _ -> acc.channel() == AccChannel.MAIN;
                };
                if (!allowed) {
                    errors.add(new SpecError(path, describe(acc), switch (problem) {
                        case Problem.ExpertGateUp _ -> "a gate_up kernel has the accumulators acc(gate) and acc(up)";
                        case Problem.ExpertDown _ -> "a down kernel has one accumulator, acc";
                    }));
                    yield null;
                }
                yield ValueScope.PER_SLOT;
            }
            case GatedActivation g -> {
                ValueScope gate = typeOf(g.gate(), path + ".gated.gate", false);
                ValueScope up = typeOf(g.up(), path + ".gated.up", false);
                if (gate == null || up == null) {
                    yield null;
                }
                if (gate != up) {
                    errors.add(new SpecError(path, describe(g),
                            "gate and up must have the same scope, got " + scopeText(gate) + " and " + scopeText(up)));
                    yield null;
                }
                yield gate;
            }
            case Combine c -> {
                ValueScope in = typeOf(c.input(), path + ".combine.input", false);
                if (in == null) {
                    yield null;
                }
                if (in != ValueScope.PER_SLOT) {
                    errors.add(new SpecError(path + ".combine.input", describe(c.input()),
                            "combine sums over the routed slots; its input must be per slot, got " + scopeText(in)));
                    yield null;
                }
                yield ValueScope.PER_TOKEN;
            }
            case Store s -> {
                if (!isRoot) {
                    errors.add(new SpecError(path, describe(s), "store(...) may only be the root of the epilogue"));
                    yield null;
                }
                if (s.dtype() != problem.activations()) {
                    errors.add(new SpecError(path + ".store.dtype", s.dtype().text(),
                            "the output type must be the problem's activation type, " + problem.activations().text()
                                    + " (the down kernel reads gate_up's output as its activation)"));
                }
                ValueScope in = typeOf(s.input(), path + ".store.input", false);
                yield in == null ? null : ValueScope.STORED;
            }
        };
    }

    private static String scopeText(ValueScope s) {
        return switch (s) {
            case PER_SLOT -> "per (token, slot)";
            case PER_TOKEN -> "per token";
            case STORED -> "stored";
        };
    }

    /** A short rendering of the node for messages. */
    public static String describe(EpilogueNode node) {
        return switch (node) {
            case Acc a -> a.channel() == AccChannel.MAIN ? "acc" : "acc(" + a.channel().text() + ")";
            case GatedActivation g -> "gated(" + g.function().text() + ", " + describe(g.gate()) + ", " + describe(g.up()) + ")";
            case Combine c -> "combine(" + describe(c.input()) + ")";
            case Store s -> "store(" + describe(s.input()) + ", dtype=" + s.dtype().text() + ")";
        };
    }
}
