package dev.moeforge.dsl.ir;

/** How a {@link Problem} is mapped onto the GPU. One problem can be lowered with several schedules. */
public sealed interface Schedule permits Schedule.OutputCentric, Schedule.OutputTensorCore, Schedule.SplitDown, Schedule.RouterGemv,
        Schedule.RouterCluster, Schedule.RouterTiled {

    /**
     * Warp decode (seeds 000 and 004): one warp owns one output scalar and streams the weight rows
     * it needs straight from memory; the routed experts are folded inside the warp, so there is
     * no scatter, padding or per-expert buffer.
     *
     * @param warpsPerCta  warps per thread block; consecutive warps own consecutive outputs
     * @param loadBytes    bytes each lane loads per weight load instruction (16 = LDG.128)
     * @param kUnroll      loads per lane and weight row issued before the first is used
     *                     (memory-level parallelism)
     * @param tokensPerCta 1: each warp serves one token and reads its experts' rows for that token
     *                     alone. T > 1: the tokens of a tile of T share every weight row read: each
     *                     distinct routed expert of the tile is read once however many of its
     *                     tokens use it (the thread block builds the tile's routing table in
     *                     shared memory first).
     * @param warpsPerOutput S warps of a block share one output: each takes every S-th piece of the
     *                     reduction (load blocks of a row, or distinct experts of a tile) and the S
     *                     partial sums are added in shared memory in warp order, so the result is
     *                     deterministic. More warps in flight where outputs are few (down: one per
     *                     hidden output). Divides warpsPerCta.
     * @param minBlocksPerSm the occupancy promise given to ptxas ({@code __launch_bounds__}'s second
     *                     argument): 0 leaves ptxas its own register heuristic (which may interleave
     *                     loads with their use to save registers); N >= 1 lets a thread use up to
     *                     65536 / (N * threads) registers, so the loads of an unrolled row stay in
     *                     flight together.
     */
    record OutputCentric(int warpsPerCta, int loadBytes, int kUnroll, int tokensPerCta, int warpsPerOutput,
                         int minBlocksPerSm) implements Schedule {

        /** Outputs (neurons or hidden units) one thread block computes. */
        public int outputsPerCta() {
            return warpsPerCta / warpsPerOutput;
        }
    }

    /**
     * Warp decode of 4-bit weights on the tensor cores. On Hopper, decoding 4-bit codes to FP32 for
     * FMA costs more instruction issue than the bytes cost DRAM time (bench/NOTES.md, "Where the
     * 4-bit time goes"); here a warp owns a tile of 16 weight rows for one token (gate_up: the gate
     * and up rows of 8 neurons; down: 16 hidden outputs), decodes the codes to BF16 in registers with
     * the K-block scales folded in where that is exact, and sums them against the token's activations
     * with {@code mma.sync} m16n8k16 (FP32 accumulate). A step is 128 codes of each of the tile's rows
     * (16 bytes per lane and row); the token's activations (down: its k rows of inter) are staged in
     * shared memory once per block.
     *
     * @param warpsPerCta    warps per thread block
     * @param kUnroll        steps in a group, whose loads each lane issues before the first is used;
     *                       down asks for a warp's next group before it reduces the current one, so
     *                       it holds two groups in registers
     * @param warpsPerTile   S warps of a block share a tile, each taking every S-th group of kUnroll
     *                       steps; their partial sums are added in shared memory in warp order
     *                       (deterministic). Divides warpsPerCta.
     * @param minBlocksPerSm the occupancy promise given to ptxas, as in {@link OutputCentric}
     */
    record OutputTensorCore(int warpsPerCta, int kUnroll, int warpsPerTile, int minBlocksPerSm) implements Schedule {

        /** Tiles one thread block computes. */
        public int tilesPerCta() {
            return warpsPerCta / warpsPerTile;
        }
    }

    /**
     * The expert MLP of 4-bit weights as one kernel with no wait between blocks (bench/NOTES.md,
     * "down split along its K inside gate_up's blocks"). A block takes one (token, routed slot) and
     * 16 neurons: two gate_up tiles as in {@link OutputTensorCore} give their h; then the same warps
     * multiply the 16 h into down's 16 matching columns, for every hidden row, on the tensor cores,
     * and add the products, times the routing weight, into y with 16-byte atomic adds. Down's
     * columns come repacked in tiles of 16 (a one-time repack on load), so one 16-byte load per lane
     * holds four mmas' fragments.
     *
     * @param warpsPerCta    warps per thread block: twice warpsPerTile (two tiles of 8 neurons)
     * @param kUnroll        gate_up steps in a group, whose loads each lane issues before the first is used
     * @param warpsPerTile   warps that share a gate_up tile, as in {@link OutputTensorCore}
     * @param minBlocksPerSm the occupancy promise given to ptxas, as in {@link OutputCentric}
     * @param orderLoads     make every code word of a gate_up group depend on the group's scale
     *                       loads, so that ptxas issues all of them before the first decode (NVFP4
     *                       at Qwen3-30B-A3B: 14.48 -> 13.80 us; it costs others up to 0.2 us)
     */
    record SplitDown(int warpsPerCta, int kUnroll, int warpsPerTile, int minBlocksPerSm, boolean orderLoads) implements Schedule {}

    /**
     * The decode router (seed 000's warp GEMV, seed 002's fused epilogue): the experts of a token
     * are spread over {@code ceil(E / expertsPerCta)} thread blocks, one warp per expert score (or
     * several, see below; {@code W_r[e] . x[m]}, 16-byte loads, FP32); the token's block that took the last
     * start ticket (an atomic at its start, so every other block of the token has begun) awaits the
     * token's E scores as they land in L2 and one warp evaluates the whole epilogue tree (softmax,
     * top-k, biases, renormalisation) in registers before storing the routing table.
     * One launch per router call, no host synchronisation. With at least twice as many warps as
     * experts per block, each score's row is split over {@code warpsPerCta / expertsPerCta} warps
     * (fewer dependent load rounds for long rows), their parts added in shared memory in warp order.
     *
     * @param warpsPerCta   warps per thread block, each computing every warpsPerCta-th expert of the block
     *                      (or a part of one expert's score, see above)
     * @param loadBytes     bytes each lane loads per load of a router row (16 = LDG.128)
     * @param kUnroll       loads per lane issued before the first is used
     * @param expertsPerCta experts of one token per thread block: fewer means more blocks in flight
     */
    record RouterGemv(int warpsPerCta, int loadBytes, int kUnroll, int expertsPerCta) implements Schedule {}

    /**
     * The decode router on a thread-block cluster (sm_90 and later): a token's
     * {@code clusterSize} blocks each compute a slice of the expert scores (one warp per score, or
     * several, see below) and write them straight into block 0's shared memory (distributed shared memory); after
     * {@code cluster.sync()} one warp of block 0 evaluates the epilogue tree. The scores never
     * reach global memory and no fence or atomic ticket is needed. As in {@link RouterGemv}, a block
     * with at least twice as many warps as its {@code ceil(E / clusterSize)} experts splits each score
     * over its warps.
     *
     * @param clusterSize blocks per token, 1..8 (the portable cluster size)
     * @param warpsPerCta warps per block
     * @param loadBytes   bytes each lane loads per load of a router row
     * @param kUnroll     loads per lane issued before the first is used
     */
    record RouterCluster(int clusterSize, int warpsPerCta, int loadBytes, int kUnroll) implements Schedule {}

    /**
     * The prefill router (seed 002's fused GEMM epilogue): a thread block owns a tile of
     * {@code tokensPerCta} tokens and every expert, computes the tile's scores on the tensor cores
     * ({@code mma.sync} m16n8k16, BF16 in, FP32 out) from a {@code stages}-deep {@code cp.async}
     * pipeline of {@code kTile}-wide slices of x and W_r in shared memory, then puts the scores in
     * shared memory, where each warp takes whole rows and evaluates the epilogue tree in registers.
     * The (M, E) scores never reach global memory; no workspace.
     *
     * <p>Warps form {@code tokensPerCta / tokensPerWarp} row groups, {@code kGroups} k groups (each
     * takes every kGroups-th 16-wide step of a slice; their partial sums are added in group order)
     * and as many column groups as the remaining warps make. Shared memory reads bind this loop: a
     * slice is read once per row group (W_r) and once per column group (x), so larger warp tiles
     * and k groups read less for the same warps. With {@code clusterSplit > 1} a cluster of that
     * many blocks shares one tile, each summing ceil(slices / clusterSplit) of the slices (the last
     * share may be shorter, or empty); the blocks exchange
     * partial sums through distributed shared memory and each evaluates the rule for its share of
     * the rows (each block then streams only its part of W_r).
     *
     * @param tokensPerCta  tokens per tile, a multiple of 16 (the mma's M), 16..128
     * @param tokensPerWarp tokens of a warp's tile, a multiple of 16 dividing tokensPerCta
     * @param warpsPerCta   warps per block: row groups x k groups x column groups
     * @param kTile         elements of the hidden dimension per pipeline stage, 32 or 64
     * @param stages        pipeline depth, 2..4
     * @param kGroups       warps that split a slice's 16-wide steps, 1, 2 or 4 (at most kTile / 16)
     * @param clusterSplit  blocks of a cluster that split the hidden dimension, 1, 2, 4 or 8, at most
     *                      the number of kTile slices
     */
    record RouterTiled(int tokensPerCta, int tokensPerWarp, int warpsPerCta, int kTile, int stages, int kGroups,
                       int clusterSplit) implements Schedule {}
}
