package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuDeviceGetCount;
import static jcuda.driver.JCudaDriver.cuInit;

/**
 * Whether this process can use a CUDA GPU. Build and CI machines have no GPU and often no driver,
 * so code and tests ask here before touching anything else in this package.
 */
public final class Gpu {

    private Gpu() {
    }

    private record Probe(boolean available, String reason) {
    }

    /** Probed once, on first use: loading the driver and cuInit are slow and their answer does not change. */
    private static final class Holder {
        static final Probe PROBE = probe();
    }

    /** True if JCuda's native library loads, {@code cuInit(0)} succeeds and there is a device. Never throws. */
    public static boolean available() {
        return Holder.PROBE.available();
    }

    /** Why {@link #available()} is false, for skip messages; empty when it is true. */
    public static String unavailableReason() {
        return Holder.PROBE.reason();
    }

    private static Probe probe() {
        try {
            Driver.check("cuInit", () -> cuInit(0));
            int[] count = new int[1];
            Driver.check("cuDeviceGetCount", () -> cuDeviceGetCount(count));
            return count[0] > 0 ? new Probe(true, "") : new Probe(false, "the CUDA driver reports no devices");
        } catch (Throwable t) {
            // Anything at all, including UnsatisfiedLinkError or NoClassDefFoundError from a broken
            // install, means "no GPU" here; callers only need the answer and a reason to print.
            return new Probe(false, "no usable CUDA GPU: " + (t instanceof CudaException ? t.getMessage() : t.toString()));
        }
    }
}
