package dev.moeforge.runtime.cuda;

/** How a kernel launch is ordered after the previous kernel on its stream. */
public enum LaunchOrder {
    /** The kernel starts once the previous kernel has finished (a plain {@code cuLaunchKernel}). */
    AFTER_PREVIOUS,
    /**
     * Programmatic dependent launch (sm_90+): the kernel's blocks may start while the previous
     * kernel's last blocks still run, hiding its launch and ramp; each block waits at
     * {@code griddepcontrol.wait} until the previous kernel's writes are visible. Only for kernels
     * that execute that wait before reading their inputs: every MoeForge-generated kernel does. The
     * {@code linear_gemv} and {@code router_cluster} kernels read their weights before that wait, so
     * under this order no kernel still running on the stream may write those (a model's weights are
     * written before its steps).
     */
    OVERLAPPING_PREVIOUS
}
