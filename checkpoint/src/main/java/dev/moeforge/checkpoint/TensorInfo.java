package dev.moeforge.checkpoint;

import java.util.List;
import java.util.Objects;

/**
 * One entry of a safetensors header: a tensor's name, element type, row-major shape and the byte
 * range {@code [begin, end)} it occupies, relative to the start of the file's data buffer.
 */
public record TensorInfo(String name, SafetensorsDType dtype, List<Long> shape, long begin, long end) {

    public TensorInfo {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(dtype, "dtype");
        shape = List.copyOf(shape);
        for (Long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("tensor '" + name + "': negative dimension in shape " + shape);
            }
        }
        if (begin < 0 || end < begin) {
            throw new IllegalArgumentException("tensor '" + name + "': bad data_offsets [" + begin + ", " + end + "]");
        }
    }

    /** Number of elements: the product of the shape, 1 for a scalar (shape {@code []}). */
    public long numel() {
        try {
            return numel(shape);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("tensor '" + name + "': " + e.getMessage(), e);
        }
    }

    /** Bytes the data must take given dtype and shape (which is also {@code end - begin} in a valid file). */
    public long byteSize() {
        return dtype.byteSize(numel());
    }

    static long numel(List<Long> shape) {
        long n = 1;
        for (long d : shape) {
            try {
                n = Math.multiplyExact(n, d);
            } catch (ArithmeticException e) {
                throw new IllegalArgumentException("shape " + shape + " has more than 2^63 elements");
            }
        }
        return n;
    }
}
