package dev.moeforge.dsl.ir;

/** Element types of activations, outputs and routing tables. Accumulation is always FP32. */
public enum DType {
    BF16("bf16", 2),
    FP16("fp16", 2),
    FP32("fp32", 4),
    INT32("int32", 4),
    /** Raw bytes: packed weight codes and 8-bit scales. */
    U8("u8", 1);

    private final String text;
    private final int bytes;

    DType(String text, int bytes) {
        this.text = text;
        this.bytes = bytes;
    }

    /** The name used in the textual form and in messages. */
    public String text() {
        return text;
    }

    public int bytes() {
        return bytes;
    }

    public static DType fromText(String text) {
        for (DType t : values()) {
            if (t.text.equals(text)) {
                return t;
            }
        }
        return null;
    }
}
