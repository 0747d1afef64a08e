package dev.moeforge.dsl.check;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule.SplitDown;
import dev.moeforge.dsl.ir.WeightFormat;

/**
 * The derived sizes of a split_down kernel, the single statement of them for validation, the CUDA
 * emitter, the launcher and the repack of down ({@code SplitDownWeights}); the device header
 * ({@code SplitDownLayout}, {@code mlp_split_down}) lays memory out the same way.
 *
 * @param quads           64-row quads of down's hidden rows (one 16-byte load per lane is four mmas' A fragments)
 * @param tiles           16-column tiles of down's intermediate columns: one per thread block and slot
 * @param quadsPerWarp    quads each warp of a block multiplies (the last warps may have one fewer)
 * @param sharedBytes     the token's staged x (padded to whole steps), the warps' partial sums, the 16 h
 */
public record SplitDownLayout(int quads, int tiles, int quadsPerWarp, long sharedBytes) {
    /** Rows of down in one quad. */
    public static final int QUAD_ROWS = 64;
    /** Columns of down (neurons) in one tile: a block's two gate_up tiles of 8. */
    public static final int TILE_COLUMNS = 16;

    /**
     * Whether down weights {@code [E][hidden][intermediate]} in {@code format} can be repacked for
     * split_down: 4-bit codes with scales along K, whole quads and tiles (the Validator says why a
     * spec is refused; this is the same rule for weights).
     */
    public static boolean fits(WeightFormat format, int hidden, int intermediate) {
        return format.element().bits() == 4 && !format.blockScale().blockRows() && hidden % QUAD_ROWS == 0
                && intermediate % TILE_COLUMNS == 0;
    }

    public static SplitDownLayout of(Problem.ExpertMlp problem, SplitDown s) {
        int hidden = problem.shape().hidden();
        int quads = hidden / QUAD_ROWS;
        int tiles = problem.shape().intermediate() / TILE_COLUMNS;
        int chunks = hidden / TensorCoreTileLayout.CODES_PER_CHUNK;
        int steps = (chunks + TensorCoreTileLayout.CHUNKS_PER_STEP - 1) / TensorCoreTileLayout.CHUNKS_PER_STEP;
        long activations = 64L * TensorCoreTileLayout.CHUNKS_PER_STEP * steps;  // as TensorCoreTileLayout stages one row
        long partials = s.warpsPerTile() > 1 ? 4L * 16 * s.warpsPerCta() : 0;
        long h = 2L * TILE_COLUMNS;
        return new SplitDownLayout(quads, tiles, (quads + s.warpsPerCta() - 1) / Math.max(1, s.warpsPerCta()),
                activations + partials + h);
    }
}
