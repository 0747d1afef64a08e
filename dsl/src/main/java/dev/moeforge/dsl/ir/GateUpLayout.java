package dev.moeforge.dsl.ir;

/**
 * Where the gate and up rows of neuron {@code i} sit in an expert's {@code [2I][H]} gate_up weight.
 */
public enum GateUpLayout {
    /** Gate rows {@code 0..I-1}, then up rows {@code I..2I-1}: Hugging Face {@code gate_up_proj = cat(gate, up)}. */
    STACKED("stacked"),
    /** Gate row {@code 2i}, up row {@code 2i+1}: gpt-oss {@code gate_up_proj}. */
    INTERLEAVED("interleaved");

    private final String text;

    GateUpLayout(String text) {
        this.text = text;
    }

    public String text() {
        return text;
    }

    public int gateRow(int neuron, int intermediate) {
        return switch (this) {
            case STACKED -> neuron;
            case INTERLEAVED -> 2 * neuron;
        };
    }

    public int upRow(int neuron, int intermediate) {
        return switch (this) {
            case STACKED -> intermediate + neuron;
            case INTERLEAVED -> 2 * neuron + 1;
        };
    }

    public static GateUpLayout fromText(String text) {
        for (GateUpLayout l : values()) {
            if (l.text.equals(text)) {
                return l;
            }
        }
        return null;
    }
}
