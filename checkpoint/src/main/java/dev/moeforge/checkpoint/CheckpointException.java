package dev.moeforge.checkpoint;

/**
 * A safetensors file or checkpoint folder could not be read or written, or does not hold what was
 * asked for. The message names the file (or folder) and, where one is involved, the tensor.
 */
public class CheckpointException extends RuntimeException {

    public CheckpointException(String message) {
        super(message);
    }

    public CheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
