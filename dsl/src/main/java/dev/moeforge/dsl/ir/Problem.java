package dev.moeforge.dsl.ir;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * What a kernel computes, independent of how it is mapped onto the GPU. Routing tables between
 * kernels are token-major: {@code topk_ids [M][k] int32} and {@code topk_weights [M][k]}.
 */
public sealed interface Problem permits Problem.ExpertProblem, Problem.ExpertMlp, Problem.Router, Problem.Linear {

    /** Every problem kind by its name in the textual form, in the order the form lists them. */
    Map<String, Class<? extends Problem>> KINDS = kinds();

    private static Map<String, Class<? extends Problem>> kinds() {
        Map<String, Class<? extends Problem>> kinds = new LinkedHashMap<>();
        kinds.put("expert_gate_up", ExpertGateUp.class);
        kinds.put("expert_down", ExpertDown.class);
        kinds.put("expert_mlp", ExpertMlp.class);
        kinds.put("router", Router.class);
        kinds.put("linear", Linear.class);
        return Collections.unmodifiableMap(kinds);
    }

    /** The names of the problem kinds that are a {@code type}, e.g. expert_gate_up and expert_down for ExpertProblem. */
    static List<String> kindNames(Class<? extends Problem> type) {
        return KINDS.entrySet().stream().filter(e -> type.isAssignableFrom(e.getValue())).map(Map.Entry::getKey).toList();
    }

    /** This problem's name in the textual form, e.g. {@code expert_gate_up}. */
    default String kindName() {
        return kindNames(getClass()).getFirst();
    }

    WeightFormat weights();

    DType activations();

    /** How the kernel makes its input rows from the residual stream ({@link InputNorm}); empty: it reads them as given. */
    default Optional<InputNorm> inputNorm() {
        return Optional.empty();
    }

    /** One half of the expert MLP, with routing given. */
    sealed interface ExpertProblem extends Problem permits ExpertGateUp, ExpertDown {
        ExpertShape shape();

        /**
         * Whether the projection has a bias (gpt-oss): an FP32 vector per expert and weight row,
         * {@code [E][N]} in the weights' row order, added to each row's dot product before the
         * epilogue sees it. Written {@code bias=true}; absent means false.
         */
        boolean bias();
    }

    /**
     * The first half of the expert MLP. For token {@code m} and routed slot {@code j} with expert
     * {@code e = topk_ids[m][j]}, and every neuron {@code i < I}:
     * {@code gate = W_gu[e][gateRow(i)] . x[m]}, {@code up = W_gu[e][upRow(i)] . x[m]} (FP32
     * accumulation), then the epilogue (e.g. {@code silu(gate) * up}) is stored to
     * {@code inter[m][j][i]}. With a bias, {@code gate} and {@code up} include
     * {@code b[e][gateRow(i)]} and {@code b[e][upRow(i)]}.
     */
    record ExpertGateUp(ExpertShape shape, WeightFormat weights, DType activations, GateUpLayout layout, boolean bias)
            implements ExpertProblem {

        /** Without a bias. */
        public ExpertGateUp(ExpertShape shape, WeightFormat weights, DType activations, GateUpLayout layout) {
            this(shape, weights, activations, layout, false);
        }
    }

    /**
     * The second half. For token {@code m} and every hidden output {@code h < H}:
     * {@code acc_j = W_down[topk_ids[m][j]][h] . inter[m][j]} for each routed slot {@code j}; the
     * epilogue (a routing-weighted {@code combine}) folds them into one value stored to {@code y[m][h]}.
     * With a bias, {@code acc_j} includes {@code b[e_j][h]}, so the combine weights it too.
     */
    record ExpertDown(ExpertShape shape, WeightFormat weights, DType activations, boolean bias) implements ExpertProblem {

        /** Without a bias. */
        public ExpertDown(ExpertShape shape, WeightFormat weights, DType activations) {
            this(shape, weights, activations, false);
        }
    }

    /**
     * The whole expert MLP with routing given, in one kernel: for token {@code m} and routed slot
     * {@code j} with expert {@code e = topk_ids[m][j]}, gate_up and its epilogue as in
     * {@link ExpertGateUp} (the epilogue's store type rounds the intermediate, as a stored inter
     * would be), then {@code y[m][h] += topk_weights[m][j] * (W_down[e][h] . inter[m][j])} for every
     * hidden output {@code h}, summed into an FP32 {@code y} that is zero before the kernel. The
     * order of the additions is not fixed, so y's last bits may differ from run to run. Down's
     * weights arrive repacked for the schedule (see {@code SplitDownWeights}).
     */
    record ExpertMlp(ExpertShape shape, WeightFormat weights, DType activations, GateUpLayout layout) implements Problem {}

    /**
     * The router: for token {@code m}, the row of {@code experts} scores
     * {@code acc[e] = W_r[e] . x[m]} (FP32 accumulation; {@code W_r [E][H]}, the Hugging Face
     * {@code gate.weight}), then the epilogue tree (the routing rule: softmax, top-k, biases,
     * renormalisation, scaling) turns the row into the stored routing table.
     *
     * @param expertCounts also add, for every routed (token, slot), one to {@code expert_counts[e]}
     *                     (int32 [E], atomics, in the same kernel): the per-expert token histogram of
     *                     the expert-centric path and of routing-aware dispatch. The caller zeroes
     *                     the counts before the step (a memset node in the graph).
     * @param inputNorm    x made from the residual stream by the kernel ({@link InputNorm}), or read as given
     */
    record Router(int hidden, int experts, WeightFormat weights, DType activations, boolean expertCounts,
                  Optional<InputNorm> inputNorm) implements Problem {

        public Router {
            java.util.Objects.requireNonNull(inputNorm, "inputNorm: Optional.empty() for rows read as given");
        }

        /** Reading x as given. */
        public Router(int hidden, int experts, WeightFormat weights, DType activations, boolean expertCounts) {
            this(hidden, experts, weights, activations, expertCounts, Optional.empty());
        }

        /** The same router making its rows with {@code norm}. */
        public Router withInputNorm(InputNorm norm) {
            return new Router(hidden, experts, weights, activations, expertCounts, Optional.of(norm));
        }
    }

    /**
     * A dense projection as {@code nn.Linear} stores it: for token {@code m} and every output
     * {@code n}, {@code acc = W[n] . x[m]} (FP32 accumulation; {@code W [outputs][inputs]}), plus
     * {@code b[n]} with a bias (an FP32 vector, written {@code bias=true}), then the epilogue, one
     * value per (token, output), stored to {@code y[m][n]}. The decoder's attention projections,
     * dense MLPs and LM head. With an {@link InputNorm} the kernel makes x from the residual stream.
     */
    record Linear(int inputs, int outputs, WeightFormat weights, DType activations, boolean bias,
                  Optional<InputNorm> inputNorm) implements Problem {

        public Linear {
            java.util.Objects.requireNonNull(inputNorm, "inputNorm: Optional.empty() for rows read as given");
        }

        /** Reading x as given. */
        public Linear(int inputs, int outputs, WeightFormat weights, DType activations, boolean bias) {
            this(inputs, outputs, weights, activations, bias, Optional.empty());
        }

        /** The same projection making its rows with {@code norm}. */
        public Linear withInputNorm(InputNorm norm) {
            return new Linear(inputs, outputs, weights, activations, bias, Optional.of(norm));
        }
    }
}
