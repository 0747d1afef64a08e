package dev.moeforge.dsl.ir;

/** The sizes every kernel MoeForge generates can take: the one statement of each, for validation and the device header. */
public final class Limits {
    /** Largest expert count: a token tile's routing table keeps a bitmap of 32 words of 32 bits. */
    public static final int MAX_EXPERTS = 1024;
    /** Largest top-k (routed slots per token, and a router's k): one slot per lane of a warp. */
    public static final int MAX_TOPK = 32;
    /** Largest hidden or intermediate size. */
    public static final int MAX_DIMENSION = 1 << 16;

    private Limits() {}
}
