package dev.moeforge.dsl.ir.epilogue;

import java.util.List;

/**
 * A node of the epilogue tree: what happens to the FP32 accumulator(s) before anything reaches
 * global memory. Every node is an immutable value; {@link dev.moeforge.dsl.check.EpilogueTypes}
 * gives each node its type and rejects an ill-formed tree with the path to the bad node.
 * Adding a node breaks the build at every exhaustive {@code switch}: type check, reference,
 * CUDA emitter and printer.
 *
 * <p>Router trees work on the row of expert scores ({@code acc}) and on top-k selections
 * ({@link TopK}: k values with their expert ids). Expert-kernel trees work on per-slot scalars.
 */
public sealed interface EpilogueNode
        permits Acc, RowParam, Add, Scale, Sigmoid, Softmax, TopK, Renormalize, Dense, GatedActivation, Combine, Store {

    /** The node's operands, in the order the textual form writes them (a top-k's {@code by} last). */
    List<EpilogueNode> children();
}
