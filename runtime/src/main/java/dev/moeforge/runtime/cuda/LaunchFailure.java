package dev.moeforge.runtime.cuda;

/**
 * A kernel launch was rejected. The message names the kernel and its launch geometry; callers that
 * know which spec the kernel came from wrap this with it. (Faults while the kernel runs surface
 * later, as a {@link CudaException} from the next synchronizing call.)
 */
public final class LaunchFailure extends RuntimeException {

    public LaunchFailure(String message, Throwable cause) {
        super(message, cause);
    }
}
