package dev.moeforge.checkpoint;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.RowSource;
import java.lang.foreign.MemorySegment;

/**
 * The FP32 rows of an {@code [E][N][K]} weight held in a BF16, F16 or F32 tensor in any orientation:
 * element {@code (e, n, k)} is element {@code base + e*expertStride + n*rowStride + k*colStride} of
 * the tensor as stored. How {@link CheckpointExperts} and {@link Quantizer} read float weights.
 */
record FloatRows(TensorInfo tensor, MemorySegment data, long base, long expertStride, long rowStride, long colStride)
        implements RowSource {

    /** The rows of a 2-D {@code [N, K]} tensor (one expert). */
    static FloatRows matrix(Checkpoint ckpt, String name) {
        TensorInfo t = ckpt.tensor(name);
        return new FloatRows(t, ckpt.data(name), 0, 0, t.shape().get(1), 1);
    }

    /** The same weight seen from {@code (expert, row)}: its expert 0, row 0 is that element's row. */
    FloatRows from(int expert, int row) {
        return new FloatRows(tensor, data, index(expert, row, 0), expertStride, rowStride, colStride);
    }

    /** Where element {@code (e, n, k)} is in the tensor as stored: its element index. */
    long index(int e, int n, int k) {
        return base + e * expertStride + n * rowStride + k * colStride;
    }

    /** Where element {@code (e, n, k)} is in the tensor as stored: one index per dimension of its shape. */
    long[] storedIndex(int e, int n, int k) {
        long i = index(e, n, k);
        long[] at = new long[tensor.shape().size()];
        for (int d = at.length - 1; d >= 0; d--) {
            long size = tensor.shape().get(d);
            at[d] = i % size;
            i /= size;
        }
        return at;
    }

    @Override
    public void row(int e, int n, float[] out) {
        long start = index(e, n, 0);
        for (int k = 0; k < out.length; k++) {
            out[k] = at(data, tensor.dtype(), start + k * colStride);
        }
    }

    static boolean isFloat(SafetensorsDType dt) {
        return dt == SafetensorsDType.BF16 || dt == SafetensorsDType.F16 || dt == SafetensorsDType.F32;
    }

    /** Element {@code i} of a BF16, F16 or F32 tensor's data. */
    static float at(MemorySegment data, SafetensorsDType dt, long i) {
        return switch (dt) {
            case F32 -> data.get(SafetensorsFile.F32_LE, 4 * i);
            case BF16 -> Bf16.toFloat(data.get(SafetensorsFile.I16_LE, 2 * i));
            case F16 -> Float.float16ToFloat(data.get(SafetensorsFile.I16_LE, 2 * i));
            default -> throw new IllegalArgumentException("not a float dtype: " + dt);
        };
    }
}
