package dev.moeforge.dsl.build;

import dev.moeforge.dsl.schedule.OutputTensorCore;


/** Fluent construction of an {@link OutputTensorCore} schedule; defaults are the H100 decode choice for gate_up. */
public final class OutputTensorCoreBuilder {
    private int warpsPerCta = 8;
    private int kUnroll = 2;
    private int warpsPerTile = 4;
    private int minBlocksPerSm = 1;

    private OutputTensorCoreBuilder() {}

    public static OutputTensorCoreBuilder create() {
        return new OutputTensorCoreBuilder();
    }

    public OutputTensorCoreBuilder warpsPerCta(int v) {
        this.warpsPerCta = v;
        return this;
    }

    public OutputTensorCoreBuilder kUnroll(int v) {
        this.kUnroll = v;
        return this;
    }

    public OutputTensorCoreBuilder warpsPerTile(int v) {
        this.warpsPerTile = v;
        return this;
    }

    public OutputTensorCoreBuilder minBlocksPerSm(int v) {
        this.minBlocksPerSm = v;
        return this;
    }

    public OutputTensorCore build() {
        return new OutputTensorCore(warpsPerCta, kUnroll, warpsPerTile, minBlocksPerSm);
    }
}
