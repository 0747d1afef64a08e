package dev.moeforge.dsl.reference;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.RowSource;

/**
 * Expert weights as the reference sees them: row {@code row} of expert {@code expert}, decoded to
 * doubles. Each weight format supplies its decoder; the reference never sees the encoding.
 */
public interface WeightRows {
    int experts();

    int rows();

    int rowLength();

    void decode(int expert, int row, double[] out);

    /** Whether the rows carry a bias (see {@link #withBias}). */
    default boolean hasBias() {
        return false;
    }

    /** The bias of row {@code row} of expert {@code expert}; 0 when there is none. */
    default double bias(int expert, int row) {
        return 0;
    }

    /** These rows with a bias {@code [experts][rows]} (FP32, as the kernels take it). */
    default WeightRows withBias(float[] bias) {
        if ((long) experts() * rows() != bias.length) {
            throw new IllegalArgumentException("a bias for [" + experts() + ", " + rows() + ", " + rowLength() + "] weights needs "
                    + (long) experts() * rows() + " values [experts][rows], got " + bias.length);
        }
        return new Biased(this, bias.clone());
    }

    /** Row-major {@code [experts][rows][rowLength]} bf16 bits. */
    static WeightRows bf16(short[] data, int experts, int rows, int rowLength) {
        if ((long) experts * rows * rowLength != data.length) {
            throw new IllegalArgumentException("bf16 weights of shape [" + experts + ", " + rows + ", " + rowLength
                    + "] need " + (long) experts * rows * rowLength + " elements, got " + data.length);
        }
        return new Decoded(experts, rows, rowLength, (expert, row, out) -> {
            int base = (expert * rows + row) * rowLength;
            for (int i = 0; i < rowLength; i++) {
                out[i] = Bf16.toFloat(data[base + i]);
            }
        });
    }

    /** Weights in any format, dequantised exactly by the format's reference decoder. */
    static WeightRows of(EncodedWeights w) {
        return new Decoded(w.experts(), w.rows(), w.cols(), w::decodeRow);
    }

    /** FP32 weights produced row by row (e.g. the original weights before quantisation). */
    static WeightRows of(RowSource source, int experts, int rows, int rowLength) {
        return new Decoded(experts, rows, rowLength, (expert, row, out) -> {
            float[] f = new float[rowLength];
            source.row(expert, row, f);
            for (int i = 0; i < rowLength; i++) {
                out[i] = f[i];
            }
        });
    }

    /** How one row is decoded. */
    @FunctionalInterface
    interface RowDecoder {
        void decode(int expert, int row, double[] out);
    }

    /** Rows plus their bias {@code [experts][rows]}. */
    record Biased(WeightRows weights, float[] values) implements WeightRows {
        @Override
        public int experts() {
            return weights.experts();
        }

        @Override
        public int rows() {
            return weights.rows();
        }

        @Override
        public int rowLength() {
            return weights.rowLength();
        }

        @Override
        public void decode(int expert, int row, double[] out) {
            weights.decode(expert, row, out);
        }

        @Override
        public boolean hasBias() {
            return true;
        }

        @Override
        public double bias(int expert, int row) {
            return values[expert * weights.rows() + row];
        }
    }

    /** The sizes plus a row decoder. */
    record Decoded(int experts, int rows, int rowLength, RowDecoder decoder) implements WeightRows {
        @Override
        public void decode(int expert, int row, double[] out) {
            decoder.decode(expert, row, out);
        }
    }
}
