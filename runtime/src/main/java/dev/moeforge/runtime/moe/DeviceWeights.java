package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.SplitDownWeights;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * An expert weight on the device as a kernel takes it: the codes, then the format's K-block
 * scales and row scales where it has them, then the FP32 bias if the projection has one (the
 * order of the kernel's weight parameters).
 */
public record DeviceWeights(WeightFormat format, Layout layout, List<DeviceBuffer> buffers) implements AutoCloseable {

    /**
     * How the codes and K-block scales are laid out. Both layouts have the same sizes, so a launch's
     * buffer checks cannot tell them apart: the layer executors check this instead.
     */
    public enum Layout {
        /** As the checkpoints ship them ({@code EncodedWeights}): what the gate_up, down and router kernels read. */
        NATURAL,
        /** Down repacked in 16-column tiles ({@code SplitDownWeights}): what an expert_mlp kernel reads. */
        SPLIT_DOWN
    }

    public DeviceWeights {
        buffers = List.copyOf(buffers);
    }

    /** Throws unless these weights are in {@code expected} layout; {@code what} names them in the message. */
    public void requireLayout(Layout expected, String what) {
        if (layout != expected) {
            throw new IllegalArgumentException(what + " are in the " + layout + " layout, the kernel reads " + expected
                    + (expected == Layout.SPLIT_DOWN ? " (upload SplitDownWeights.of(down))" : " (upload the EncodedWeights)"));
        }
    }

    /** Plain BF16 weights. */
    public static DeviceWeights bf16(DeviceBuffer weights) {
        return new DeviceWeights(WeightFormat.BF16, Layout.NATURAL, List.of(weights));
    }

    /** Copies {@code w} to the device. */
    public static DeviceWeights upload(EncodedWeights w) {
        return upload(w, null);
    }

    /**
     * Copies {@code w} and its bias {@code [E][N]} (FP32, in the weights' row order) to the device,
     * for a kernel whose problem has {@code bias=true}; a null bias uploads none.
     */
    public static DeviceWeights upload(EncodedWeights w, float[] bias) {
        if (bias != null && bias.length != (long) w.experts() * w.rows()) {
            throw new IllegalArgumentException("a bias for [" + w.experts() + ", " + w.rows() + ", " + w.cols()
                    + "] weights needs " + (long) w.experts() * w.rows() + " values, got " + bias.length);
        }
        return upload(w.format(), Layout.NATURAL, w.codes(), w.blockScales(), w.rowScales(), bias);
    }

    /** Copies down's weights repacked for split_down (codes, K-block scales, row scales as loaded) to the device. */
    public static DeviceWeights upload(SplitDownWeights w) {
        return upload(w.format(), Layout.SPLIT_DOWN, w.codes(), w.blockScales(), w.rowScales(), null);
    }

    /** The codes, then the K-block scales and row scales where the format has them, then the bias if any. */
    private static DeviceWeights upload(WeightFormat format, Layout layout, byte[] codes, byte[] blockScales, float[] rowScales,
                                        float[] bias) {
        List<DeviceBuffer> buffers = new ArrayList<>();
        try {
            buffers.add(copy(format.element() == WeightFormat.Element.BF16 ? DType.BF16 : DType.U8, codes));
            switch (format.blockScale()) {
                case NONE -> { }
                case F32_BLOCK_128X128, F32_GROUP_128 -> buffers.add(copy(DType.FP32, blockScales));
                case E4M3_PER_16, E8M0_PER_32 -> buffers.add(copy(DType.U8, blockScales));
            }
            switch (format.rowScale()) {
                case NONE -> { }
                case PER_ROW, PER_TENSOR -> buffers.add(copy(rowScales));
            }
            if (bias != null) {
                buffers.add(copy(bias));
            }
        } catch (RuntimeException e) {
            buffers.forEach(DeviceBuffer::close);
            throw e;
        }
        return new DeviceWeights(format, layout, buffers);
    }

    private static DeviceBuffer copy(float[] values) {
        DeviceBuffer b = DeviceBuffer.allocate(DType.FP32, values.length);
        try {
            b.copyFrom(values);
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
        return b;
    }

    private static DeviceBuffer copy(DType dtype, byte[] bytes) {
        DeviceBuffer b = DeviceBuffer.allocate(dtype, bytes.length / dtype.bytes());
        try {
            b.copyFrom(bytes);
        } catch (RuntimeException e) {
            b.close();
            throw e;
        }
        return b;
    }

    /** Bytes on the device, codes and scales. */
    public long bytes() {
        return buffers.stream().mapToLong(DeviceBuffer::bytes).sum();
    }

    @Override
    public void close() {
        buffers.forEach(DeviceBuffer::close);
    }
}
