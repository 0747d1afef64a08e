package dev.moeforge.dsl.ir;

/** The sizes every kernel MoeForge generates can take: the one statement of each, for validation and the device header. */
public final class Limits {
    /** Largest expert count: a token tile's routing table keeps a bitmap of 32 words of 32 bits. */
    public static final int MAX_EXPERTS = 1024;
    /** Largest top-k (routed slots per token, and a router's k): one slot per lane of a warp. */
    public static final int MAX_TOPK = 32;
    /** Largest hidden or intermediate size, and a linear projection's inputs. */
    public static final int MAX_DIMENSION = 1 << 16;
    /** Most outputs of a linear projection: an LM head over a vocabulary of up to 2^20 tokens. */
    public static final int MAX_LINEAR_OUTPUTS = 1 << 20;
    /**
     * Deepest nesting of a spec: calls inside calls in the textual form, nodes from an epilogue's root to
     * its deepest leaf. The parser, type checker, printer, reference and emitter recurse once per level,
     * so a bound keeps any spec far from the thread's stack limit; real trees are under ten deep.
     */
    public static final int MAX_NESTING_DEPTH = 64;

    private Limits() {}
}
