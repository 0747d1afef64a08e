package dev.moeforge.dsl.schedule;

/** Which part of the hand-written device library a schedule's kernels include. */
public enum DeviceLibrary {
    /** The core every kernel builds on. */
    CORE,
    /** The expert-centric family's routing align and grouped GEMM tiles, on top of the core. */
    EXPERT_CENTRIC
}
