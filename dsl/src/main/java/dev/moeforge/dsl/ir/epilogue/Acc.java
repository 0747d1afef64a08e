package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;

/**
 * The FP32 accumulator of one output: the full dot product of a weight row with the activation,
 * after the warp's reduction. Written {@code acc}, {@code acc(gate)} or {@code acc(up)}.
 */
public record Acc(AccChannel channel) implements EpilogueNode {
    public Acc {
        Objects.requireNonNull(channel, "channel");
    }

    public static final Acc MAIN = new Acc(AccChannel.MAIN);
    public static final Acc GATE = new Acc(AccChannel.GATE);
    public static final Acc UP = new Acc(AccChannel.UP);

    @Override
    public List<EpilogueNode> children() {
        return List.of();
    }
}
