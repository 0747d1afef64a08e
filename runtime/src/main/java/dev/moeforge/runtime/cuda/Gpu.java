package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuDeviceGetCount;
import static jcuda.driver.JCudaDriver.cuInit;

import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Whether this process can use a CUDA GPU. Build and CI machines have no GPU and often no driver,
 * so code and tests ask here before touching anything else in this package.
 *
 * <p>The probe tells a machine with nothing to use ({@link State#ABSENT}: no driver, only the
 * toolkit's stub driver, no device) from one where something is installed but does not work
 * ({@link State#BROKEN}: JCuda's native library fails to load for another reason than a missing
 * {@code libcuda.so.1}, or the driver fails otherwise), so that the second is never mistaken for
 * the first.
 */
public final class Gpu {

    private Gpu() {
    }

    /** What the probe found. */
    public enum State {
        /** {@code cuInit(0)} succeeds and there is at least one device. */
        AVAILABLE,
        /** Nothing to use: no CUDA driver, only the toolkit's stub driver, or a driver with no device. */
        ABSENT,
        /** Something is installed but does not work; never a reason to skip quietly. */
        BROKEN
    }

    /** The probe's answer; {@code reason} is one line, empty when the state is {@link State#AVAILABLE}. */
    public record Status(State state, String reason) {
    }

    /** Probed once, on first use: loading the driver and cuInit are slow and their answer does not change. */
    private static final class Holder {
        static final Status STATUS = probe();
    }

    /** Driver answers that mean there is no GPU to use rather than a broken install. */
    private static final Set<String> NO_GPU_ERRORS = Set.of("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_STUB_LIBRARY");

    /** The dynamic linker's words when JCuda's library cannot find the driver library it links against. */
    private static final Pattern NO_DRIVER_LIBRARY = Pattern.compile("libcuda\\.so[.0-9]*: cannot open shared object file");

    /** The probe's answer. Never throws. */
    public static Status status() {
        return Holder.STATUS;
    }

    /** True if JCuda's native library loads, {@code cuInit(0)} succeeds and there is a device. Never throws. */
    public static boolean available() {
        return status().state() == State.AVAILABLE;
    }

    /** Why {@link #available()} is false, for skip and failure messages; empty when it is true. */
    public static String unavailableReason() {
        return status().reason();
    }

    private static Status probe() {
        int[] count = new int[1];
        try {
            Driver.check("cuInit", () -> cuInit(0));
            Driver.check("cuDeviceGetCount", () -> cuDeviceGetCount(count));
        } catch (Throwable t) {
            // Anything at all, including NoClassDefFoundError from a jar missing at run time: classify
            // answers for it instead of letting it escape.
            return classify(t, 0, jcudaNativesShipped());
        }
        return classify(null, count[0], jcudaNativesShipped());
    }

    /** The build ships JCuda's native library for Linux on x86-64 only (the jcuda-natives classifier). */
    private static boolean jcudaNativesShipped() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        return os.startsWith("linux") && (arch.equals("amd64") || arch.equals("x86_64"));
    }

    /**
     * Sorts what the probe saw: {@code failure} is what cuInit or cuDeviceGetCount threw (null if
     * both succeeded), {@code devices} the count reported, {@code nativesShipped} whether this
     * platform has JCuda's native library in the build at all.
     */
    static Status classify(Throwable failure, int devices, boolean nativesShipped) {
        if (failure == null) {
            return devices > 0 ? new Status(State.AVAILABLE, "") : new Status(State.ABSENT, "the CUDA driver reports no devices");
        }
        if (!(failure instanceof CudaException e)) {
            return new Status(State.BROKEN, "probing the CUDA driver threw " + oneLine(failure.toString()));
        }
        if (e.getCause() instanceof LinkageError link) {
            String text = e.getMessage() + " " + link.getMessage();
            if (NO_DRIVER_LIBRARY.matcher(text).find()) {
                return new Status(State.ABSENT, "no CUDA driver on this machine: " + oneLine(e.getMessage()));
            }
            if (!nativesShipped) {
                return new Status(State.ABSENT, "JCuda's native library is not built for " + System.getProperty("os.name") + " on "
                        + System.getProperty("os.arch") + ": " + oneLine(e.getMessage()));
            }
            return new Status(State.BROKEN, "JCuda's native library fails to load, though the CUDA driver library is not "
                    + "what is missing: " + oneLine(e.getMessage()));
        }
        if (NO_GPU_ERRORS.contains(e.error())) {
            return new Status(State.ABSENT, "no CUDA device: " + oneLine(e.getMessage()));
        }
        return new Status(State.BROKEN, "the CUDA driver is installed but fails: " + oneLine(e.getMessage()));
    }

    private static String oneLine(String s) {
        return String.valueOf(s).replaceAll("\\s*\\R\\s*", " ").strip();
    }
}
