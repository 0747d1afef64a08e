package dev.moeforge.dsl.check;

/**
 * The type of an epilogue node: what it holds per output position, all in FP32 until stored.
 *
 * @param kind  per (token, slot) scalar and per token scalar in the expert kernels; a row of E
 *              expert scores or a top-k selection (k values with their expert ids) in the router
 * @param width E for a row, k for a top-k, 1 for the scalars
 */
public record ValueType(Kind kind, int width) {
    public enum Kind {
        PER_SLOT, PER_TOKEN, ROW, TOPK
    }

    public static final ValueType PER_SLOT = new ValueType(Kind.PER_SLOT, 1);
    public static final ValueType PER_TOKEN = new ValueType(Kind.PER_TOKEN, 1);

    public static ValueType row(int experts) {
        return new ValueType(Kind.ROW, experts);
    }

    public static ValueType topk(int k) {
        return new ValueType(Kind.TOPK, k);
    }

    /** How messages name the type. */
    public String text() {
        return switch (kind) {
            case PER_SLOT -> "a value per (token, slot)";
            case PER_TOKEN -> "a value per token";
            case ROW -> "a row of " + width + " expert scores";
            case TOPK -> "a top-" + width + " selection";
        };
    }
}
