package dev.moeforge.dsl.ir;

/**
 * What a kernel computes, independent of how it is mapped onto the GPU. Routing is given:
 * {@code topk_ids [M][k] int32} and {@code topk_weights [M][k] fp32}, token-major (DESIGN section 9).
 */
public sealed interface Problem permits Problem.ExpertGateUp, Problem.ExpertDown {

    ExpertShape shape();

    WeightFormat weights();

    DType activations();

    /**
     * The first half of the expert MLP. For token {@code m} and routed slot {@code j} with expert
     * {@code e = topk_ids[m][j]}, and every neuron {@code i < I}:
     * {@code gate = W_gu[e][gateRow(i)] . x[m]}, {@code up = W_gu[e][upRow(i)] . x[m]} (FP32
     * accumulation), then the epilogue (e.g. {@code silu(gate) * up}) is stored to
     * {@code inter[m][j][i]}.
     */
    record ExpertGateUp(ExpertShape shape, WeightFormat weights, DType activations, GateUpLayout layout)
            implements Problem {}

    /**
     * The second half. For token {@code m} and every hidden output {@code h < H}:
     * {@code acc_j = W_down[topk_ids[m][j]][h] . inter[m][j]} for each routed slot {@code j}; the
     * epilogue (a routing-weighted {@code combine}) folds them into one value stored to {@code y[m][h]}.
     */
    record ExpertDown(ExpertShape shape, WeightFormat weights, DType activations) implements Problem {}
}
