package dev.moeforge.runtime.cuda;

/** A CUDA driver call failed; the message names the call and the driver's error code. */
public final class CudaException extends RuntimeException {

    private final String call;
    private final String error;

    public CudaException(String call, String error, Throwable cause) {
        super(call + " failed: " + error, cause);
        this.call = call;
        this.error = error;
    }

    /** The failing driver call, with its salient arguments, e.g. {@code cuMemAlloc(1048576 bytes)}. */
    public String call() {
        return call;
    }

    /** The driver's error, e.g. {@code CUDA_ERROR_OUT_OF_MEMORY}. */
    public String error() {
        return error;
    }
}
