package dev.moeforge.runtime.compile;

import java.util.List;

/**
 * nvcc could not produce a cubin: it reported errors, timed out or could not be started. The message
 * is meant to be read on its own: it holds the command line, each error with the source lines it
 * points at, and the spec the source was generated from.
 */
public final class CompileFailure extends RuntimeException {

    private final List<String> command;
    private final String log;

    public CompileFailure(String message, List<String> command, String log, Throwable cause) {
        super(message, cause);
        this.command = List.copyOf(command);
        this.log = log;
    }

    /** The argument list nvcc ran (or was to run) with. */
    public List<String> command() {
        return command;
    }

    /** nvcc's combined output; empty when it never ran. */
    public String log() {
        return log;
    }
}
