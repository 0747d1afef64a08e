package dev.moeforge.dsl.schedule;

import java.util.List;
import java.util.Optional;

/**
 * What a schedule contributes to its kernel's generated CUDA; the problem's part (shape, format,
 * epilogue, parameters) and the launch's block and shared memory ({@link Schedule#geometry}) the
 * emitter adds.
 *
 * @param template       the Freemarker template that renders the kernel, e.g. {@code expert.cu.ftl}
 * @param body           the device header's entry point the kernel calls, e.g. {@code gate_up_single_token}
 * @param config         the schedule's members of {@code struct Config}
 * @param notes          lines for the kernel's header comment (how the work is laid out)
 * @param minBlocksPerSm {@code __launch_bounds__}'s second argument, 0 for none
 * @param clusterSize    blocks per thread-block cluster ({@code __cluster_dims__}), 1 for none
 * @param evaluation     routers: how the routing rule is evaluated; empty for expert kernels
 * @param library        the part of the device library the kernel includes
 * @param waitsInBody    the body waits for the previous kernel itself, where it first reads an
 *                       input, so that its weight loads overlap that kernel (programmatic dependent
 *                       launch); otherwise the kernel waits before its body starts
 */
public record ScheduleModel(String template, String body, List<ConfigConstant> config, List<String> notes,
                            int minBlocksPerSm, int clusterSize, Optional<TreeEvaluation> evaluation, DeviceLibrary library,
                            boolean waitsInBody) {
    public ScheduleModel {
        config = List.copyOf(config);
        notes = List.copyOf(notes);
    }

    /** A kernel that waits for the previous kernel before its body starts. */
    public ScheduleModel(String template, String body, List<ConfigConstant> config, List<String> notes,
                         int minBlocksPerSm, int clusterSize, Optional<TreeEvaluation> evaluation, DeviceLibrary library) {
        this(template, body, config, notes, minBlocksPerSm, clusterSize, evaluation, library, false);
    }

    /** A kernel that needs the core library alone and waits before its body starts. */
    public ScheduleModel(String template, String body, List<ConfigConstant> config, List<String> notes,
                         int minBlocksPerSm, int clusterSize, Optional<TreeEvaluation> evaluation) {
        this(template, body, config, notes, minBlocksPerSm, clusterSize, evaluation, DeviceLibrary.CORE);
    }
}
