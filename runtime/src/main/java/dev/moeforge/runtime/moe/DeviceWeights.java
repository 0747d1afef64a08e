package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * An expert weight on the device as a kernel takes it: the codes, then the format's K-block
 * scales and row scales where it has them (the order of the kernel's weight parameters).
 */
public record DeviceWeights(WeightFormat format, List<DeviceBuffer> buffers) implements AutoCloseable {

    public DeviceWeights {
        buffers = List.copyOf(buffers);
    }

    /** Plain BF16 weights. */
    public static DeviceWeights bf16(DeviceBuffer weights) {
        return new DeviceWeights(WeightFormat.BF16, List.of(weights));
    }

    /** Copies {@code w} to the device. */
    public static DeviceWeights upload(EncodedWeights w) {
        List<DeviceBuffer> buffers = new ArrayList<>();
        try {
            buffers.add(copy(w.format().element() == WeightFormat.Element.BF16 ? DType.BF16 : DType.U8, w.codes()));
            switch (w.format().blockScale()) {
                case NONE -> { }
                case F32_BLOCK_128X128, F32_GROUP_128 -> buffers.add(copy(DType.FP32, w.blockScales()));
                case E4M3_PER_16, E8M0_PER_32 -> buffers.add(copy(DType.U8, w.blockScales()));
            }
            switch (w.format().rowScale()) {
                case NONE -> { }
                case PER_ROW, PER_TENSOR -> {
                    DeviceBuffer b = DeviceBuffer.allocate(DType.FP32, w.rowScales().length);
                    buffers.add(b);
                    b.copyFrom(w.rowScales());
                }
            }
        } catch (RuntimeException e) {
            buffers.forEach(DeviceBuffer::close);
            throw e;
        }
        return new DeviceWeights(w.format(), buffers);
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
