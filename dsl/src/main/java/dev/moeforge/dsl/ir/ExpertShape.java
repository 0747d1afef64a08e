package dev.moeforge.dsl.ir;

/**
 * Sizes of one MoE expert MLP layer: hidden size H, intermediate size I per expert, E experts,
 * each token routed to {@code topk} of them. Invariants are checked by
 * {@link dev.moeforge.dsl.check.Validator}, which names the offending field.
 */
public record ExpertShape(int hidden, int intermediate, int experts, int topk) {

    /** Elements of one expert's gate_up weight, {@code 2I x H}. */
    public long gateUpElementsPerExpert() {
        return 2L * intermediate * hidden;
    }

    /** Elements of one expert's down weight, {@code H x I}. */
    public long downElementsPerExpert() {
        return (long) hidden * intermediate;
    }
}
