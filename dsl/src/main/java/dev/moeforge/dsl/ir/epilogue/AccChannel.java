package dev.moeforge.dsl.ir.epilogue;

/** Which FP32 accumulator of the kernel an {@link Acc} reads. */
public enum AccChannel {
    /** The one accumulator of a kernel with a single dot product per output (down). */
    MAIN("acc"),
    /** The gate row's dot product in a gate_up kernel. */
    GATE("gate"),
    /** The up row's dot product in a gate_up kernel. */
    UP("up");

    private final String text;

    AccChannel(String text) {
        this.text = text;
    }

    public String text() {
        return text;
    }

    public static AccChannel fromText(String text) {
        for (AccChannel c : values()) {
            if (c.text.equals(text)) {
                return c;
            }
        }
        return null;
    }
}
