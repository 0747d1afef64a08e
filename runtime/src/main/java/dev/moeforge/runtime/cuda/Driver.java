package dev.moeforge.runtime.cuda;

import java.util.List;
import java.util.function.IntSupplier;
import jcuda.driver.CUresult;
import jcuda.driver.JCudaDriver;

/**
 * The one place JCuda's driver binding is entered. Loading it can fail on machines without the
 * CUDA driver (JCuda's native library links against libcuda), so the first use is guarded and the
 * failure is reported as a {@link CudaException} instead of an {@link Error} escaping from a
 * static initializer.
 */
final class Driver {

    private Driver() {
    }

    /** Holder idiom: JCuda is loaded once, on first use, by whichever thread gets here first. */
    private static final class Binding {
        static final Throwable LOAD_FAILURE = load();

        private static Throwable load() {
            try {
                // Makes JCuda throw on every non-success CUresult, so no result code can go unchecked.
                JCudaDriver.setExceptionsEnabled(true);
                return null;
            } catch (LinkageError | RuntimeException e) {
                return e;
            }
        }
    }

    /**
     * JCuda's load error is a page of nested stack traces; the useful parts are its first line and
     * the linker's own messages (e.g. {@code libcuda.so.1: cannot open shared object file}).
     */
    private static String summary(Throwable loadFailure) {
        List<String> lines = String.valueOf(loadFailure.getMessage()).lines().toList();
        String prefix = UnsatisfiedLinkError.class.getName() + ": ";
        List<String> causes = lines.stream().filter(l -> l.startsWith(prefix))
                .map(l -> l.substring(prefix.length())).distinct().toList();
        String first = loadFailure.getClass().getSimpleName() + ": " + (lines.isEmpty() ? "" : lines.getFirst());
        return causes.isEmpty() ? first : first + " (" + String.join("; ", causes) + ")";
    }

    /**
     * Runs one driver call and turns a failure into a {@link CudaException} naming {@code call}.
     * The result code is checked as well, in case other code in the process switched JCuda's
     * exceptions off again.
     */
    static void check(String call, IntSupplier driverCall) {
        Throwable loadFailure = Binding.LOAD_FAILURE;
        if (loadFailure != null) {
            throw new CudaException(call, "JCuda's native driver binding could not be loaded: " + summary(loadFailure), loadFailure);
        }
        int result;
        try {
            result = driverCall.getAsInt();
        } catch (jcuda.CudaException e) {
            throw new CudaException(call, e.getMessage(), e);
        }
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(call, CUresult.stringFor(result), null);
        }
    }
}
