package dev.moeforge.runtime.kernel;

/** A launch that failed or was refused; the message names the kernel, the spec and the reason. */
public class KernelLaunchException extends RuntimeException {
    public KernelLaunchException(String message) {
        super(message);
    }

    public KernelLaunchException(String message, Throwable cause) {
        super(message, cause);
    }
}
