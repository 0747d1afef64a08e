package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.AccChannel;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.Dense;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.RowParam;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Sigmoid;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The epilogue tree's type checker: gives each node its {@link ValueType} and records an error,
 * with the path to the node and the rule it breaks, wherever the tree is ill-formed for its problem.
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
        if (!(root instanceof Store store)) {
            errors.add(new SpecError("epilogue", SpecPrinter.printEpilogue(root), "the root of an epilogue must be store(...)"));
            types.typeOf(root, "epilogue");
            return;
        }
        ValueType stored = types.typeOf(root, "epilogue");  // a store's type is its input's: the tree is typed once
        if (stored == null) {
            return;
        }
        String wanted = switch (problem) {
            case Problem.ExpertGateUp _ -> stored.kind() == ValueType.Kind.PER_SLOT ? null
                    : "gate_up stores one value per (token, routed slot, neuron); remove the combine";
            case Problem.ExpertMlp _ -> stored.kind() == ValueType.Kind.PER_SLOT ? null
                    : "the expert MLP's epilogue is its activation, one value per (token, routed slot, neuron) that "
                            + "down then reads; the combine over the slots is the problem's own: remove the combine";
            case Problem.ExpertDown _ -> stored.kind() == ValueType.Kind.PER_TOKEN ? null
                    : "down stores one value per (token, hidden output): wrap the accumulator in combine(...) to sum "
                            + "over the routed experts";
            case Problem.Router _ -> stored.kind() == ValueType.Kind.TOPK || stored.kind() == ValueType.Kind.ROW ? null
                    : "a router stores a top-k selection (weights and ids) or a row of expert scores";
            case Problem.Linear _ -> stored.kind() == ValueType.Kind.PER_TOKEN ? null
                    : "a linear projection stores one value per (token, output)";
        };
        if (wanted != null) {
            errors.add(new SpecError("epilogue.store.input", SpecPrinter.printEpilogue(store.input()), wanted));
        }
        if (problem instanceof Problem.Router r && r.expertCounts() && stored.kind() != ValueType.Kind.TOPK) {
            errors.add(new SpecError("problem.expert_counts", "true", "counts the experts of a top-k routing table; this "
                    + "router stores " + stored.text()));
        }
    }

    /**
     * The number of nodes from {@code root} to its deepest leaf, found without recursion so that a tree
     * of any depth is measured before anything recurses over it; a subtree built once and shared is
     * measured once.
     */
    public static int depth(EpilogueNode root) {
        Map<EpilogueNode, Integer> depths = new IdentityHashMap<>();
        Deque<EpilogueNode> pending = new ArrayDeque<>();
        pending.push(root);
        while (!pending.isEmpty()) {
            EpilogueNode node = pending.peek();
            if (depths.containsKey(node)) {
                pending.pop();
                continue;
            }
            int deepest = 0;
            boolean childrenMeasured = true;
            for (EpilogueNode child : node.children()) {
                Integer d = depths.get(child);
                if (d == null) {
                    pending.push(child);
                    childrenMeasured = false;
                } else {
                    deepest = Math.max(deepest, d);
                }
            }
            if (childrenMeasured) {
                pending.pop();
                depths.put(node, deepest + 1);
            }
        }
        return depths.get(root);
    }

    /** Returns the node's type, or null when it is ill-formed (an error was recorded). */
    private ValueType typeOf(EpilogueNode node, String path) {
        return switch (node) {
            case Acc acc -> {
                String rule = switch (problem) {
                    case Problem.ExpertGateUp _, Problem.ExpertMlp _ -> acc.channel() == AccChannel.GATE
                            || acc.channel() == AccChannel.UP ? null
                            : "a gate_up kernel (and the expert MLP's activation) has the accumulators acc(gate) and acc(up)";
                    case Problem.ExpertDown _ -> acc.channel() == AccChannel.MAIN ? null
                            : "a down kernel has one accumulator, acc";
                    case Problem.Router _ -> acc.channel() == AccChannel.MAIN ? null
                            : "a router has one accumulator, acc: the row of expert scores";
                    case Problem.Linear _ -> acc.channel() == AccChannel.MAIN ? null
                            : "a linear projection has one accumulator, acc: one output's dot product (and bias)";
                };
                if (rule != null) {
                    yield fail(path, acc, rule);
                }
                yield switch (problem) {
                    case Problem.ExpertProblem _, Problem.ExpertMlp _ -> ValueType.PER_SLOT;
                    case Problem.Router r -> ValueType.row(r.experts());
                    case Problem.Linear _ -> ValueType.PER_TOKEN;
                };
            }
            case RowParam p -> switch (problem) {
                case Problem.Router r -> {
                    if (!p.name().matches("[a-z_][a-z0-9_]{0,63}") || RESERVED.contains(p.name())
                            || p.name().matches("v[0-9]+") || CudaNames.isReserved(p.name())) {
                        yield fail(path, p, "a parameter name: lower case letters, digits and '_', not a C++ keyword, "
                                + "not v<number> (the emitted temporaries) and not one of " + RESERVED);
                    }
                    yield ValueType.row(r.experts());
                }
                case Problem.ExpertProblem _, Problem.ExpertMlp _ -> fail(path, p, "row(...) is a per-expert vector of a router");
                case Problem.Linear _ -> fail(path, p, "row(...) is a per-expert vector of a router; a linear projection's "
                        + "bias is the problem's bias=true");
            };
            case Add a -> {
                ValueType l = typeOf(a.left(), path + ".add.left");
                ValueType r = typeOf(a.right(), path + ".add.right");
                if (l == null || r == null) {
                    yield null;
                }
                if (!l.equals(r) || l.kind() == ValueType.Kind.TOPK) {
                    yield fail(path, a, "add needs two values of the same type (not top-k selections), got "
                            + l.text() + " and " + r.text());
                }
                yield l;
            }
            case Scale s -> {
                if (!Float.isFinite((float) s.factor())) {  // the kernels multiply in FP32
                    errors.add(new SpecError(path + ".scale.factor", Double.toString(s.factor()),
                            "a finite number within FP32's range (magnitude at most " + Float.MAX_VALUE + ")"));
                }
                yield typeOf(s.input(), path + ".scale.input");
            }
            case Sigmoid s -> typeOf(s.input(), path + ".sigmoid.input");
            case Softmax s -> {
                ValueType in = typeOf(s.input(), path + ".softmax.input");
                if (in == null) {
                    yield null;
                }
                if (in.kind() != ValueType.Kind.ROW && in.kind() != ValueType.Kind.TOPK) {
                    yield fail(path + ".softmax.input", s.input(), "softmax normalises a row of expert scores or a "
                            + "top-k selection's values, not " + in.text());
                }
                yield in;
            }
            case TopK t -> typeOfTopK(t, path);
            case Renormalize r -> {
                ValueType in = typeOf(r.input(), path + ".renormalize.input");
                if (in == null) {
                    yield null;
                }
                if (in.kind() != ValueType.Kind.TOPK) {
                    yield fail(path + ".renormalize.input", r.input(), "renormalize divides a top-k selection's values "
                            + "by their sum; its input must be topk(...), got " + in.text());
                }
                yield in;
            }
            case Dense d -> {
                ValueType in = typeOf(d.input(), path + ".dense.input");
                if (in == null) {
                    yield null;
                }
                if (in.kind() != ValueType.Kind.TOPK || !(problem instanceof Problem.Router r)) {
                    yield fail(path + ".dense.input", d.input(), "dense scatters a router's top-k selection into a row "
                            + "of experts; got " + in.text());
                }
                yield ValueType.row(r.experts());
            }
            case GatedActivation g -> {
                ValueType gate = typeOf(g.gate(), path + ".gated.gate");
                ValueType up = typeOf(g.up(), path + ".gated.up");
                if (gate == null || up == null) {
                    yield null;
                }
                if (gate.kind() != ValueType.Kind.PER_SLOT || !gate.equals(up)) {
                    yield fail(path, g, "gated(...) combines a gate_up kernel's two per-(token, slot) accumulators, got "
                            + gate.text() + " and " + up.text());
                }
                yield gate;
            }
            case Combine c -> {
                ValueType in = typeOf(c.input(), path + ".combine.input");
                if (in == null) {
                    yield null;
                }
                if (in.kind() != ValueType.Kind.PER_SLOT) {
                    yield fail(path + ".combine.input", c.input(),
                            "combine sums over the routed slots; its input must be per slot, got " + in.text());
                }
                yield ValueType.PER_TOKEN;
            }
            case Store s -> {
                if (!path.equals("epilogue")) {
                    yield fail(path, s, "store(...) may only be the root of the epilogue");
                }
                String allowed = switch (problem) {
                    case Problem.ExpertProblem p -> s.dtype() == p.activations() ? null
                            : "the output type must be the problem's activation type, " + p.activations().text()
                                    + " (the down kernel reads gate_up's output as its activation)";
                    case Problem.ExpertMlp p -> s.dtype() == p.activations() ? null
                            : "the intermediate's type, which must be the problem's activation type, " + p.activations().text()
                                    + " (down reads it as its activation; y is FP32 whatever this says)";
                    case Problem.Router _ -> s.dtype() == DType.FP32 || s.dtype() == DType.BF16 ? null
                            : "fp32 or bf16 routing weights";
                    case Problem.Linear _ -> s.dtype() == DType.FP32 || s.dtype() == DType.BF16 ? null
                            : "fp32 or bf16 outputs";
                };
                if (allowed != null) {
                    errors.add(new SpecError(path + ".store.dtype", s.dtype().text(), allowed));
                }
                yield typeOf(s.input(), path + ".store.input");
            }
        };
    }

    private ValueType typeOfTopK(TopK t, String path) {
        ValueType in = typeOf(t.input(), path + ".topk.input");
        ValueType by = t.by().map(b -> typeOf(b, path + ".topk.by")).orElse(in);
        if (in == null || by == null) {
            return null;
        }
        if (in.kind() != ValueType.Kind.ROW) {
            return fail(path + ".topk.input", t.input(), "topk selects from a row of expert scores, got " + in.text());
        }
        if (!by.equals(in)) {
            return fail(path + ".topk.by", t.by().orElseThrow(), "the selection scores must be a row like the input ("
                    + in.text() + "), got " + by.text());
        }
        int experts = in.width();
        boolean ok = true;
        if (t.k() < 1 || t.k() > Math.min(Limits.MAX_TOPK, experts)) {
            errors.add(new SpecError(path + ".topk.k", Integer.toString(t.k()),
                    "1.." + Math.min(Limits.MAX_TOPK, experts) + " (at most the number of experts, " + experts + ", and at most " + Limits.MAX_TOPK + ")"));
            ok = false;
        }
        if (t.groups() < 1 || t.groups() > 32 || experts % t.groups() != 0 || (t.groups() > 1 && experts / t.groups() < 2)) {
            errors.add(new SpecError(path + ".topk.groups", Integer.toString(t.groups()),
                    "1..32, dividing the " + experts + " experts into groups of at least 2 (a group scores its two best)"));
            ok = false;
        } else if (t.topkGroups() < 1 || t.topkGroups() > t.groups()) {
            errors.add(new SpecError(path + ".topk.topk_groups", Integer.toString(t.topkGroups()), "1.." + t.groups() + " (the groups)"));
            ok = false;
        } else if (ok && t.k() > t.topkGroups() * (experts / t.groups())) {
            errors.add(new SpecError(path + ".topk.k", Integer.toString(t.k()), "at most the experts of the kept groups, "
                    + t.topkGroups() + " x " + experts / t.groups()));
            ok = false;
        }
        return ok ? ValueType.topk(t.k()) : null;
    }

    private ValueType fail(String path, EpilogueNode node, String rule) {
        errors.add(new SpecError(path, SpecPrinter.printEpilogue(node), rule));
        return null;
    }

    /** Names a router's row parameters may not take: the kernel's other parameters and locals. */
    public static final List<String> RESERVED = List.of("x", "w_router", "scores", "counters", "topk_weights", "topk_ids",
            "router_out", "expert_counts", "num_tokens", "token", "tile_row", "smem", "Tile", "mf",
            "residual", "addend", "norm_weight", "residual_out", "normed_out");
}
