package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule.OutputTensorCore;

/**
 * The derived sizes of an output_tensor_core kernel: its reduction in 16-byte chunks of 32 codes,
 * four chunks (one per lane of a row group) per step, and its shared memory. The single statement
 * of these facts for validation, the CUDA emitter and the launcher; the device header
 * ({@code TileRow}, {@code stage_tile_activations}) lays shared memory out the same way.
 *
 * @param rowsPerTile     weight rows a warp reduces together (the mma's M)
 * @param outputsPerTile  outputs a tile writes (gate_up: 8 neurons, down: 16 hidden units)
 * @param chunksPerRow    16-byte chunks of 32 codes in one weight row
 * @param stepsPerRow     steps of 4 chunks per row, the last one possibly ragged
 * @param stagedRows      activation rows staged per block (gate_up: the token's x, down: its k rows of inter)
 * @param sharedBytes     the staged activations (padded to whole steps) and the warps' partial sums
 */
public record TensorCoreTileLayout(int rowsPerTile, int outputsPerTile, int chunksPerRow, int stepsPerRow, int stagedRows,
                                   long sharedBytes) {
    /** Codes per 16-byte chunk of 4-bit weights. */
    public static final int CODES_PER_CHUNK = 32;
    /** Chunks per step: the four lanes of a row group. */
    public static final int CHUNKS_PER_STEP = 4;

    public static TensorCoreTileLayout of(Problem.ExpertProblem problem, OutputTensorCore s) {
        int reduce = switch (problem) {
            case Problem.ExpertGateUp _ -> problem.shape().hidden();
            case Problem.ExpertDown _ -> problem.shape().intermediate();
        };
        int outputs = switch (problem) {
            case Problem.ExpertGateUp _ -> 8;   // rows 0-7 gate, 8-15 up
            case Problem.ExpertDown _ -> 16;
        };
        int staged = switch (problem) {
            case Problem.ExpertGateUp _ -> 1;
            case Problem.ExpertDown _ -> problem.shape().topk();
        };
        int chunks = reduce / CODES_PER_CHUNK;
        int steps = (chunks + CHUNKS_PER_STEP - 1) / CHUNKS_PER_STEP;
        // 16 bytes per chunk and word, four words per chunk (the staged order of the device header)
        long activations = 64L * staged * CHUNKS_PER_STEP * steps;
        long partials = s.warpsPerTile() > 1 ? 4L * 16 * s.warpsPerCta() : 0;
        return new TensorCoreTileLayout(16, outputs, chunks, steps, staged, activations + partials);
    }
}
