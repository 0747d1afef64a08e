package dev.moeforge.dsl.schedule;

/**
 * How a router kernel's warps evaluate the routing rule (the epilogue tree) once the scores exist,
 * and where the code reads a token's row of scores from.
 *
 * @param scores the CUDA expression that yields the token's row (or the warp's slice) of scores
 */
public record TreeEvaluation(Mode mode, String scores) {

    public enum Mode {
        /** Warp 0 of the token's block evaluates the whole tree in registers. */
        ONE_WARP,
        /**
         * Each warp of the token's block ranks one expert group and scores it, then each kept
         * group's best are ranked against the other kept groups' (group-limited top-k over
         * elementwise rows, one group per warp).
         */
        BLOCK_GROUPS,
        /** Each warp evaluates the tree for whole rows of a tile of tokens, several rows interleaved. */
        WARP_PER_ROW
    }
}
