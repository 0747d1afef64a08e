package dev.moeforge.dsl.format;

import java.util.SplittableRandom;

/**
 * The FP32 rows of an expert weight {@code [E][N][K]}, produced on demand so that a large weight
 * can be quantised without ever holding it in FP32. Must return the same row every time it is asked.
 */
@FunctionalInterface
public interface RowSource {
    void row(int expert, int row, float[] out);

    /** Rows of the row-major array {@code w} of {@code [E][N][K]}. */
    static RowSource of(float[] w, int rows, int cols) {
        return (e, n, out) -> System.arraycopy(w, ((e * rows) + n) * cols, out, 0, cols);
    }

    /** Normal(0, sd) values, each row drawn from its own stream of {@code seed}. */
    static RowSource normal(long seed, int rows, double sd) {
        return (e, n, out) -> {
            SplittableRandom r = new SplittableRandom(seed * 0x9E3779B97F4A7C15L + (long) e * rows + n);
            for (int i = 0; i < out.length; i++) {
                out[i] = (float) (r.nextGaussian() * sd);
            }
        };
    }
}
