package dev.moeforge.runtime.compile;

import java.util.List;

/**
 * A successful nvcc run.
 *
 * @param cubin   the device binary, ready for {@code cuModuleLoadData}; not copied, so do not modify it
 * @param report  per-function resource usage from {@code -Xptxas -v}
 * @param log     nvcc's combined stdout and stderr (ptxas lines, warnings)
 * @param command the argument list nvcc ran with
 */
public record CompileResult(byte[] cubin, PtxasReport report, String log, List<String> command) {

    public CompileResult {
        command = List.copyOf(command);
    }
}
