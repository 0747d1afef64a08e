package dev.moeforge.dsl.format;

import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.WeightFormat.BlockScale;
import dev.moeforge.dsl.ir.WeightFormat.RowScale;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.stream.IntStream;

/**
 * An expert weight {@code [E][N][K]} in a {@link WeightFormat}, as the kernels read it: the codes
 * ({@code [E][N][K * bits / 8]}, sub-byte element {@code 2j} in the low nibble of byte {@code j}),
 * the K-block scales (raw bytes: E4M3/E8M0 bytes, or little-endian FP32) and the FP32 row scales
 * ({@code [E][N]} per row, or {@code [E][P]} per projection). {@link #encode} is the reference
 * quantiser and {@link #decodeRow} the reference decoder.
 */
public record EncodedWeights(WeightFormat format, int experts, int rows, int cols, Projections projections,
                             byte[] codes, byte[] blockScales, float[] rowScales) {

    public EncodedWeights {
        long rowBytes = format.rowBytes(cols);
        if ((long) cols * format.element().bits() % 8 != 0) {
            throw new IllegalArgumentException(format.text() + " rows of " + cols + " elements are not whole bytes");
        }
        requireLength("codes", codes.length, (long) experts * rows * rowBytes);
        requireLength("block scales", blockScales.length,
                (long) experts * format.blockScale().perExpert(rows, cols) * format.blockScale().bytes());
        requireLength("row scales", rowScales.length, rowScaleCount(format, experts, rows, projections));
    }

    private static void requireLength(String what, long actual, long expected) {
        if (actual != expected) {
            throw new IllegalArgumentException(what + ": " + actual + " entries, the format needs " + expected);
        }
    }

    private static long rowScaleCount(WeightFormat format, int experts, int rows, Projections projections) {
        return switch (format.rowScale()) {
            case NONE -> 0;
            case PER_ROW -> (long) experts * rows;
            case PER_TENSOR -> (long) experts * projections.count();
        };
    }

    /** Bytes the kernels stream per expert: codes and scales. */
    public long bytesPerExpert() {
        return (codes.length + blockScales.length + 4L * rowScales.length) / experts;
    }

    /**
     * Quantises {@code source} with the reference rounding (round to nearest even, saturate to the
     * largest finite value; E8M0 shared exponents as OCP MX v1.0). Experts are encoded in parallel;
     * the result does not depend on the thread count.
     *
     * @param tensor the tensor's name, for errors
     * @throws NonFiniteWeightException naming the tensor and the first index (in {@code [E][N][K]} of
     *                                   {@code source}) of a NaN or infinity
     * @throws IllegalArgumentException naming the tensor, for a row length that is not whole blocks of the format
     */
    public static EncodedWeights encode(WeightFormat format, RowSource source, int experts, int rows, int cols,
                                        Projections projections, String tensor) {
        BlockScale bs = format.blockScale();
        if (bs.block() > 0 && !bs.blockRows() && cols % bs.block() != 0) {
            throw new IllegalArgumentException("tensor " + tensor + ": rows of " + cols + " elements are not whole blocks of "
                    + bs.block() + " (" + format.text() + ")");
        }
        if (format.rowScale() == RowScale.PER_TENSOR && rows % projections.count() != 0) {
            throw new IllegalArgumentException("tensor " + tensor + ": " + rows + " rows do not split into "
                    + projections.count() + " projections");
        }
        long rowBytes = format.rowBytes(cols);
        long codeBytes = (long) experts * rows * rowBytes;
        long scaleBytes = (long) experts * bs.perExpert(rows, cols) * bs.bytes();
        if (codeBytes > Integer.MAX_VALUE - 8 || scaleBytes > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("tensor " + tensor + ": " + codeBytes + " bytes of codes do not fit one array");
        }
        byte[] codes = new byte[(int) codeBytes];
        byte[] blockScales = new byte[(int) scaleBytes];
        float[] rowScales = new float[(int) rowScaleCount(format, experts, rows, projections)];
        Encoder encoder = new Encoder(format, source, experts, rows, cols, projections, codes, blockScales, rowScales);
        long[] firstBad = IntStream.range(0, experts).parallel().mapToLong(encoder::amaxes).toArray();
        for (int e = 0; e < experts; e++) {
            if (firstBad[e] >= 0) {
                long i = firstBad[e];
                throw new NonFiniteWeightException(tensor, e, (int) (i / cols), (int) (i % cols), encoder.valueAt(e, i));
            }
        }
        IntStream.range(0, experts).parallel().forEach(encoder::encodeExpert);
        return new EncodedWeights(format, experts, rows, cols, projections, codes, blockScales, rowScales);
    }

    /**
     * A NaN or infinite weight given to {@link #encode}, at {@code [expert, row, col]} of the
     * {@link RowSource}'s {@code [E][N][K]}. A caller whose rows come from a tensor of another layout
     * (a slice, a 2-D weight, a transposed one) names the stored index with {@link #messageAt}.
     */
    public static final class NonFiniteWeightException extends IllegalArgumentException {
        private final int expert;
        private final int row;
        private final int col;
        private final float value;

        public NonFiniteWeightException(String tensor, int expert, int row, int col, float value) {
            super(message(tensor, value, expert, row, col));
            this.expert = expert;
            this.row = row;
            this.col = col;
            this.value = value;
        }

        private static String message(String tensor, float value, long... index) {
            return "tensor " + tensor + ": " + (Float.isNaN(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf") + " at "
                    + Arrays.toString(index) + "; weights to quantise must be finite";
        }

        /** This message for the same value at {@code index} of {@code tensor}, e.g. the tensor the rows were read from. */
        public String messageAt(String tensor, long... index) {
            return message(tensor, value, index);
        }

        public int expert() {
            return expert;
        }

        public int row() {
            return row;
        }

        public int col() {
            return col;
        }

        public float value() {
            return value;
        }
    }

    /** BF16 weights given as bits, row-major {@code [E][N][K]}. */
    public static EncodedWeights bf16(short[] bits, int experts, int rows, int cols) {
        requireLength("bf16 weights", bits.length, (long) experts * rows * cols);
        byte[] codes = new byte[bits.length * 2];
        ByteBuffer.wrap(codes).order(ByteOrder.LITTLE_ENDIAN).asShortBuffer().put(bits);
        return new EncodedWeights(WeightFormat.BF16, experts, rows, cols, Projections.ONE, codes, new byte[0], new float[0]);
    }

    /** Row {@code n} of expert {@code e}, dequantised exactly (every product of the format's factors is exact in FP64). */
    public void decodeRow(int e, int n, double[] out) {
        long base = ((long) e * rows + n) * format.rowBytes(cols);
        double rowScale = switch (format.rowScale()) {
            case NONE -> 1.0;
            case PER_ROW -> rowScales[e * rows + n];
            case PER_TENSOR -> rowScales[e * projections.count() + projections.of(n, rows)];
        };
        BlockScale bs = format.blockScale();
        double scale = 1.0;
        for (int k = 0; k < cols; k++) {
            if (bs.block() > 0 && k % bs.block() == 0) {
                scale = blockScale(e, n, k / bs.block());
            }
            out[k] = element(base, k) * scale * rowScale;
        }
    }

    /** The exact value of element {@code k} of the row whose codes start at {@code base}. */
    private double element(long base, int k) {
        return switch (format.element()) {
            case BF16 -> Bf16.toFloat((short) ((codes[(int) (base + 2L * k)] & 0xFF) | codes[(int) (base + 2L * k + 1)] << 8));
            case E4M3 -> Minifloat.E4M3.decode(codes[(int) (base + k)] & 0xFF);
            case INT8 -> codes[(int) (base + k)];
            case E2M1 -> Minifloat.E2M1.decode(nibble(base, k));
            case INT4 -> (nibble(base, k) ^ 8) - 8;
        };
    }

    private int nibble(long base, int k) {
        int b = codes[(int) (base + k / 2)] & 0xFF;
        return (k & 1) == 0 ? b & 0xF : b >>> 4;
    }

    /** Block scale {@code block} (along K) of row {@code n} of expert {@code e}. */
    private double blockScale(int e, int n, int block) {
        BlockScale bs = format.blockScale();
        long index = bs.blockRows()
                ? ((long) e * Math.ceilDiv(rows, bs.block()) + n / bs.block()) * Math.ceilDiv(cols, bs.block()) + block
                : ((long) e * rows + n) * (cols / bs.block()) + block;
        return switch (bs) {
            case NONE -> 1.0;
            case F32_BLOCK_128X128, F32_GROUP_128 -> f32(blockScales, index);
            case E4M3_PER_16 -> Minifloat.E4M3.decode(blockScales[(int) index] & 0xFF);
            case E8M0_PER_32 -> E8M0.decode(blockScales[(int) index] & 0xFF);
        };
    }

    static float f32(byte[] bytes, long index) {
        int i = (int) (4 * index);
        return Float.intBitsToFloat((bytes[i] & 0xFF) | (bytes[i + 1] & 0xFF) << 8 | (bytes[i + 2] & 0xFF) << 16
                | (bytes[i + 3] & 0xFF) << 24);
    }

    static void putF32(byte[] bytes, long index, float v) {
        int bits = Float.floatToRawIntBits(v);
        int i = (int) (4 * index);
        bytes[i] = (byte) bits;
        bytes[i + 1] = (byte) (bits >>> 8);
        bytes[i + 2] = (byte) (bits >>> 16);
        bytes[i + 3] = (byte) (bits >>> 24);
    }
}
