package dev.moeforge.dsl.build;

import dev.moeforge.dsl.schedule.OutputCentric;


/** Fluent construction of an {@link OutputCentric} schedule; defaults are the H100 decode choice. */
public final class OutputCentricBuilder {
    private int warpsPerCta = 4;
    private int loadBytes = 16;
    private int kUnroll = 8;
    private int tokensPerCta = 1;
    private int warpsPerOutput = 1;
    private int minBlocksPerSm = 0;

    private OutputCentricBuilder() {}

    public static OutputCentricBuilder create() {
        return new OutputCentricBuilder();
    }

    public OutputCentricBuilder warpsPerCta(int v) {
        warpsPerCta = v;
        return this;
    }

    public OutputCentricBuilder loadBytes(int v) {
        loadBytes = v;
        return this;
    }

    public OutputCentricBuilder kUnroll(int v) {
        kUnroll = v;
        return this;
    }

    public OutputCentricBuilder tokensPerCta(int v) {
        tokensPerCta = v;
        return this;
    }

    public OutputCentricBuilder warpsPerOutput(int v) {
        warpsPerOutput = v;
        return this;
    }

    public OutputCentricBuilder minBlocksPerSm(int v) {
        minBlocksPerSm = v;
        return this;
    }

    public OutputCentric build() {
        return new OutputCentric(warpsPerCta, loadBytes, kUnroll, tokensPerCta, warpsPerOutput, minBlocksPerSm);
    }
}
