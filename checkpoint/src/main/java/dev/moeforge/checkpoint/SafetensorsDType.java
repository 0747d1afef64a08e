package dev.moeforge.checkpoint;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * An element type of the safetensors format, named as it is spelled in a file's header, with its
 * width in bits. Sub-byte types (F4, F6_*) pack their elements with no padding between them.
 */
public enum SafetensorsDType {
    BOOL(8),
    F4(4),
    F6_E2M3(6),
    F6_E3M2(6),
    U8(8),
    I8(8),
    F8_E5M2(8),
    F8_E4M3(8),
    F8_E8M0(8),
    F8_E4M3FNUZ(8),
    F8_E5M2FNUZ(8),
    I16(16),
    U16(16),
    F16(16),
    BF16(16),
    I32(32),
    U32(32),
    F32(32),
    C64(64),
    F64(64),
    I64(64),
    U64(64);

    private final int bits;

    SafetensorsDType(int bits) {
        this.bits = bits;
    }

    /** The header spelling, e.g. {@code "BF16"}; the constant names are the spellings. */
    public String text() {
        return name();
    }

    /** Width of one element in bits. */
    public int bits() {
        return bits;
    }

    /**
     * Bytes one element occupies for alignment purposes: its width for byte-sized and wider types, 1
     * for sub-byte types. The writer orders tensors by this, widest first, so each tensor starts at a
     * multiple of its own element size.
     */
    public int alignment() {
        return Math.max(1, bits / 8);
    }

    /**
     * Bytes taken by {@code numel} packed elements.
     *
     * @throws IllegalArgumentException if numel is negative, the elements do not end on a byte
     *     boundary (e.g. an odd number of F4 values), or the size overflows a long
     */
    public long byteSize(long numel) {
        if (numel < 0) {
            throw new IllegalArgumentException("negative element count " + numel);
        }
        long totalBits;
        try {
            totalBits = Math.multiplyExact(numel, (long) bits);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(numel + " elements of " + this + " overflow a 64-bit byte count");
        }
        if (totalBits % 8 != 0) {
            throw new IllegalArgumentException(numel + " elements of " + this + " (" + bits
                    + " bits each) take " + totalBits + " bits, which is not a whole number of bytes");
        }
        return totalBits / 8;
    }

    /**
     * The type spelled {@code text} in a header (exact, case-sensitive, as the reference reader is).
     *
     * @throws IllegalArgumentException naming the allowed spellings if there is no such type
     */
    public static SafetensorsDType fromText(String text) {
        for (SafetensorsDType t : values()) {
            if (t.name().equals(text)) {
                return t;
            }
        }
        throw new IllegalArgumentException("unknown dtype '" + text + "'; allowed: " + allowedText());
    }

    static String allowedText() {
        return Arrays.stream(values()).map(SafetensorsDType::text).collect(Collectors.joining(", "));
    }
}
