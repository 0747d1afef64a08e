package dev.moeforge.dsl.ir;

/**
 * How expert weights are encoded in memory. Weights are row-major with K (the reduction
 * dimension) contiguous, {@code [E][N][K]}: one output row is one contiguous run of memory,
 * which is what a warp that owns one output wants (DESIGN section 5).
 */
public sealed interface WeightFormat permits WeightFormat.Bf16 {

    /** The name in the textual form. */
    String text();

    /** Bytes of one row of {@code k} elements, scales included. */
    long rowBytes(int k);

    /** Elements per load of {@code loadBytes} bytes. */
    int elementsPerLoad(int loadBytes);

    /** Plain bfloat16: the upper half of an IEEE binary32, no scales. */
    record Bf16() implements WeightFormat {
        @Override
        public String text() {
            return "bf16";
        }

        @Override
        public long rowBytes(int k) {
            return 2L * k;
        }

        @Override
        public int elementsPerLoad(int loadBytes) {
            return loadBytes / 2;
        }
    }

    WeightFormat BF16 = new Bf16();
}
