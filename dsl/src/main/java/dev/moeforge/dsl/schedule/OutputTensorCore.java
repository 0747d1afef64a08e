package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Warp decode of 4-bit weights on the tensor cores. On Hopper, decoding 4-bit codes to FP32 for FMA
 * costs more instruction issue than the bytes cost DRAM time (bench/NOTES.md, "Where the 4-bit
 * time goes"); here a warp owns a tile of 16 weight rows for one token (gate_up: the gate and up
 * rows of 8 neurons; down: 16 hidden outputs), decodes the codes to BF16 in registers with the
 * K-block scales folded in where that is exact, and sums them against the token's activations with
 * {@code mma.sync} m16n8k16 (FP32 accumulate). A step is 128 codes of each of the tile's rows (16
 * bytes per lane and row); the token's activations (down: its k rows of inter) are staged in shared
 * memory once per block. Lowers {@code expert_gate_up} and {@code expert_down} of 4-bit formats.
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
public record OutputTensorCore(int warpsPerCta, int kUnroll, int warpsPerTile, int minBlocksPerSm)
        implements Schedule<Problem.ExpertProblem> {

    public static final ScheduleKind<OutputTensorCore, Problem.ExpertProblem> KIND = new ScheduleKind<>("output_tensor_core",
            OutputTensorCore.class, Problem.ExpertProblem.class, OutputTensorCore::space);

    /** Codes per 16-byte chunk of 4-bit weights. */
    public static final int CODES_PER_CHUNK = 32;
    /** Chunks per step: the four lanes of a row group. */
    public static final int CHUNKS_PER_STEP = 4;

    /** Tiles one thread block computes. */
    public int tilesPerCta() {
        return warpsPerCta / warpsPerTile;
    }

    @Override
    public ScheduleKind<OutputTensorCore, Problem.ExpertProblem> kind() {
        return KIND;
    }

    /** Warps and warps per tile in powers of two and 12 and 24 (three warp groups), 1-8 steps in flight, promises 0-4. */
    private static List<OutputTensorCore> space(Problem.ExpertProblem problem, Target target) {
        List<Integer> warps = List.of(1, 2, 4, 8, 12, 16, 24, 32);
        return ScheduleRules.grid(KIND, List.of(warps, List.of(1, 2, 3, 4, 6, 8), warps, List.of(0, 1, 2, 4)));
    }

    @Override
    public void check(Problem.ExpertProblem p, Target target, List<SpecError> errors) {
        ScheduleRules.fourBit(errors, p.weights(), KIND.name(), "; other formats take output_centric");
        range(errors, "schedule.warps_per_cta", warpsPerCta, 1, ScheduleRules.maxWarps(target));
        range(errors, "schedule.k_unroll", kUnroll, 1, 8);
        ScheduleRules.warpSplit(errors, "schedule.warps_per_tile", warpsPerCta, warpsPerTile, minBlocksPerSm, target);
        if (!ScheduleRules.dimensionsInRange(p.shape())) {
            return;
        }
        int reduce = ScheduleRules.reduceLength(p);
        if (reduce % CODES_PER_CHUNK != 0) {
            errors.add(new SpecError(ScheduleRules.reduceField(p), Integer.toString(reduce), "a multiple of "
                    + CODES_PER_CHUNK + " under output_tensor_core: each lane reads whole 16-byte chunks of 32 codes"));
            return;
        }
        if (warpsPerCta >= 1 && warpsPerTile >= 1) {
            ScheduleRules.sharedLimit(errors, sharedBytes(p), target,
                    "the staged activations grow with the reduction and, for down, with topk");
        }
    }

    /** down folds each routing weight into the FP32 accumulator, which needs {@code combine(acc)}. */
    @Override
    public void checkEpilogue(Problem.ExpertProblem problem, EpilogueNode epilogue, List<SpecError> errors) {
        OutputCentric.foldedCombine(KIND.name(), problem, epilogue, errors);
    }

    /**
     * The derived sizes of an output_tensor_core kernel: its reduction in 16-byte chunks of 32
     * codes, four chunks (one per lane of a row group) per step, and its shared memory. The device
     * header's tensor-core bodies ({@code TileRow}, {@code stage_tile_activations}) lay shared memory
     * out the same way and static_assert that their bytes equal these.
     *
     * @param rowsPerTile    weight rows a warp reduces together (the mma's M)
     * @param outputsPerTile outputs a tile writes (gate_up: 8 neurons, down: 16 hidden units)
     * @param chunksPerRow   16-byte chunks of 32 codes in one weight row
     * @param stepsPerRow    steps of 4 chunks per row, the last one possibly ragged
     * @param stagedRows     activation rows staged per block (gate_up: the token's x, down: its k rows of inter)
     * @param sharedBytes    the staged activations (padded to whole steps) and the warps' partial sums
     */
    public record Layout(int rowsPerTile, int outputsPerTile, int chunksPerRow, int stepsPerRow, int stagedRows,
                         long sharedBytes) {

        public static Layout of(Problem.ExpertProblem problem, OutputTensorCore s) {
            int outputs = switch (problem) {
                case Problem.ExpertGateUp _ -> 8;   // rows 0-7 gate, 8-15 up
                case Problem.ExpertDown _ -> 16;
            };
            int staged = switch (problem) {
                case Problem.ExpertGateUp _ -> 1;
                case Problem.ExpertDown _ -> problem.shape().topk();
            };
            int chunks = ScheduleRules.reduceLength(problem) / CODES_PER_CHUNK;
            int steps = Math.ceilDiv(chunks, CHUNKS_PER_STEP);
            return new Layout(16, outputs, chunks, steps, staged, stagedBytes(staged, steps) + partialBytes(s.warpsPerTile(),
                    s.warpsPerCta()));
        }

        /** 16 bytes per chunk and word, four words per chunk (the staged order of the device header). */
        static long stagedBytes(int rows, int steps) {
            return 64L * rows * CHUNKS_PER_STEP * steps;
        }

        /** One FP32 per (warp, tile row) when warps share a tile. */
        static long partialBytes(int warpsPerTile, int warpsPerCta) {
            return warpsPerTile > 1 ? 4L * 16 * warpsPerCta : 0;
        }
    }

    public Layout layout(Problem.ExpertProblem problem) {
        return Layout.of(problem, this);
    }

    @Override
    public long sharedBytes(Problem.ExpertProblem problem) {
        return layout(problem).sharedBytes();
    }

    @Override
    public LaunchGeometry geometry(Problem.ExpertProblem problem, int tokens) {
        Layout layout = layout(problem);
        int outputs = switch (problem) {
            case Problem.ExpertGateUp p -> p.shape().intermediate();
            case Problem.ExpertDown p -> p.shape().hidden();
        };
        // gate_up: one block per (tile group, token and slot); down: per (tile group, token)
        int gridY = problem instanceof Problem.ExpertGateUp ? tokens * problem.shape().topk() : tokens;
        return new LaunchGeometry(Math.ceilDiv(outputs, layout.outputsPerTile() * tilesPerCta()), gridY,
                ScheduleRules.threads(warpsPerCta), Math.toIntExact(layout.sharedBytes()));
    }

    @Override
    public int maxTokens(Problem.ExpertProblem problem) {
        return problem instanceof Problem.ExpertGateUp g ? LaunchGeometry.MAX_GRID_Y / g.shape().topk() : LaunchGeometry.MAX_GRID_Y;
    }

    @Override
    public ScheduleModel model(Problem.ExpertProblem problem, Store epilogue) {
        Layout layout = layout(problem);
        List<String> own = new ArrayList<>();
        own.add("Codes decode to bf16 in registers and meet the activations, staged in shared memory, in mma.sync "
                + "m16n8k16 with FP32 accumulation.");
        own.add("A row is " + layout.chunksPerRow() + " chunks of 32 codes in " + layout.stepsPerRow() + " steps of 4 (one chunk "
                + "per lane of a row group); " + kUnroll + " steps in flight per lane.");
        if (warpsPerTile > 1) {
            own.add(warpsPerTile + " warps share each tile; their partial sums are added in shared memory in warp order.");
        }
        String unit = switch (problem) {
            case Problem.ExpertGateUp _ -> "one warp per (token, routed slot, tile of 8 neurons: their gate and up rows)";
            case Problem.ExpertDown _ -> "one warp per (token, tile of 16 hidden outputs); routing weights folded into one FP32 accumulator";
        };
        String body = switch (problem) {
            case Problem.ExpertGateUp _ -> "gate_up_tensor_core";
            case Problem.ExpertDown _ -> "down_tensor_core";
        };
        return new ScheduleModel("expert.cu.ftl", body, List.of(
                ConfigConstant.integer("kWarpsPerCta", warpsPerCta),
                ConfigConstant.integer("kUnroll", kUnroll),
                ConfigConstant.integer("kWarpsPerTile", warpsPerTile)),
                ScheduleRules.expertNotes(problem, unit, true, own),
                minBlocksPerSm, 1, Optional.empty());
    }

    @Override
    public String spillAdvice() {
        return "fewer steps in flight (k_unroll " + kUnroll + "; a warp holds two groups of them), fewer warps per block "
                + "(warps_per_cta " + warpsPerCta + ") or no blocks-per-SM promise (min_blocks_per_sm " + minBlocksPerSm + ")";
    }
}
