package dev.moeforge.dsl.ir;

/**
 * A GPU architecture the generator emits for, with the limits validation checks against.
 * Figures are from the CUDA C++ Programming Guide's table "Technical Specifications per Compute
 * Capability" (shared memory per block with opt-in, warps per SM) and the vendors' data sheets
 * (SM counts: H100 SXM and H200 132, B200 148, RTX PRO 6000 Blackwell 188).
 */
public enum Target {
    SM_90A("sm_90a", 90, 232_448, 64, 132, true),
    SM_100A("sm_100a", 100, 232_448, 64, 148, false),
    SM_120A("sm_120a", 120, 101_376, 48, 188, false);

    private final String text;
    private final int computeCapability;
    private final int maxSharedBytesPerBlock;
    private final int maxWarpsPerSm;
    private final int smCount;
    private final boolean runVerified;

    Target(String text, int cc, int maxShared, int maxWarpsPerSm, int smCount, boolean runVerified) {
        this.text = text;
        this.computeCapability = cc;
        this.maxSharedBytesPerBlock = maxShared;
        this.maxWarpsPerSm = maxWarpsPerSm;
        this.smCount = smCount;
        this.runVerified = runVerified;
    }

    /** The name in the textual form and in nvcc's {@code code=} option, e.g. {@code sm_90a}. */
    public String text() {
        return text;
    }

    /** nvcc's {@code arch=} value, e.g. {@code compute_90a}. */
    public String virtualArch() {
        return "compute_" + text.substring(3);
    }

    public int computeCapability() {
        return computeCapability;
    }

    /** Largest shared memory one thread block may use (dynamic, after the opt-in attribute). */
    public int maxSharedBytesPerBlock() {
        return maxSharedBytesPerBlock;
    }

    public int maxThreadsPerBlock() {
        return 1024;
    }

    public int maxRegistersPerThread() {
        return 255;
    }

    public int maxWarpsPerSm() {
        return maxWarpsPerSm;
    }

    /** SM count of the reference part named in the class comment. */
    public int smCount() {
        return smCount;
    }

    /** Whether MoeForge has run this target's kernels on real hardware (only compile-checked otherwise). */
    public boolean runVerified() {
        return runVerified;
    }

    public static Target fromText(String text) {
        for (Target t : values()) {
            if (t.text.equals(text)) {
                return t;
            }
        }
        return null;
    }

    public static String allowedText() {
        StringBuilder b = new StringBuilder();
        for (Target t : values()) {
            if (!b.isEmpty()) {
                b.append(", ");
            }
            b.append(t.text);
        }
        return b.toString();
    }
}
