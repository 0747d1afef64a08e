package dev.moeforge.dsl.format;

import dev.moeforge.dsl.ir.GateUpLayout;

/**
 * Which projection each row of an expert's weight belongs to, for formats that keep one FP32 scale
 * per tensor (NVFP4's {@code weight_scale_2}): a fused gate_up keeps gate's and up's apart.
 */
public enum Projections {
    /** One projection (down, or any unfused weight). */
    ONE(1),
    /** Gate rows 0..I-1, up rows I..2I-1. */
    STACKED_GATE_UP(2),
    /** Gate row 2i, up row 2i+1. */
    INTERLEAVED_GATE_UP(2);

    private final int count;

    Projections(int count) {
        this.count = count;
    }

    public int count() {
        return count;
    }

    /** The projection of {@code row} of {@code rows}: 0 (gate, or the only one) or 1 (up). */
    public int of(int row, int rows) {
        return switch (this) {
            case ONE -> 0;
            case STACKED_GATE_UP -> row < rows / 2 ? 0 : 1;
            case INTERLEAVED_GATE_UP -> row & 1;
        };
    }

    public static Projections of(GateUpLayout layout) {
        return switch (layout) {
            case STACKED -> STACKED_GATE_UP;
            case INTERLEAVED -> INTERLEAVED_GATE_UP;
        };
    }
}
