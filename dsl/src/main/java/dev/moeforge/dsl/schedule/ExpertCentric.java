package dev.moeforge.dsl.schedule;

import static dev.moeforge.dsl.schedule.ScheduleRules.range;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Expert-centric grouped GEMM on the tensor cores: the routed (token, slot) pairs are grouped by
 * expert ({@link RoutingPlan}), and a thread block multiplies a tile of {@code blockM} pairs of
 * one expert by {@code blockN} of its outputs with {@code mma.sync} m16n8k16 (BF16 in, FP32
 * accumulate) or warpgroup MMA, fed by a {@code stages}-deep pipeline of {@code blockK}-wide slices
 * (activation rows by cp.async; weight tiles by cp.async or by the tensor memory accelerator).
 * Every expert's weights are read once per tile of pairs rather than once per token, so this is
 * the family for batches past a few tokens per expert. gate_up gathers each pair's token row of x,
 * stages the gate and up rows of its neurons side by side and applies the gated activation in
 * registers; down multiplies each pair's inter row, weights it, and the block that completes a
 * token's k slots adds them in slot order (deterministic). Lowers {@code expert_gate_up} and
 * {@code expert_down} with bf16 weights on every target, and with {@code fp8_e4m3_block128} weights
 * as FP8 x FP8 (W8A8): x and the intermediate are quantised per token in groups of 128
 * ({@link Fp8ActivationRows}), each 128-wide slice is multiplied in E4M3 ({@code mma.sync} m16n8k32
 * or warpgroup MMA k32) and its sums are scaled by the pair's activation scale and the weight
 * block's scale before they join the FP32 accumulators; and with {@code nvfp4} or {@code mxfp4}
 * weights on {@code mma.sync} (W4A16): each stage holds a slice's 4-bit codes and their K-block
 * scales (a quarter of bf16's bytes), which each warp decodes into the bf16 MMA fragments of its own
 * columns in registers (with several warp rows, which share columns, the block decodes the slice once
 * into bf16 weight rows); the tensor's factor multiplies the sums in the epilogue.
 *
 * @param blockM  pairs per tile (the mma's M side), a multiple of 16 (with swap_ab the N side: 8, 16, 32 or 64)
 * @param blockN  outputs per tile: gate_up neurons (twice as many weight rows), down hidden units
 * @param blockK  K slice per pipeline stage: 32, 64 or 128 elements (fp8: 128, one scale block; nvfp4: 64 or
 *                128; mxfp4: 128, so that a row's scales of a slice fill one 4-byte copy)
 * @param warpsM  warps along M; each owns blockM / warpsM rows of the tile
 * @param warpsN  warps along N; each owns (weight rows of the tile) / warpsN columns
 * @param stages  slices in flight (pipeline depth), 2..8
 * @param groupM  m tiles a run of consecutive blocks walks before the next n tile (GROUP_M), 1..64
 * @param atomicCombine down only: each slot's weighted row is added atomically into an FP32 sum per
 *                token instead of kept for an ordered reduction (less memory traffic; the order
 *                of the additions, so y's last bits, may differ from run to run)
 * @param wgmma   sm_90a only: Hopper's warpgroup MMA ({@code wgmma.mma_async}, operands straight from the
 *                swizzled stages) instead of {@code mma.sync}: a warpgroup of four warps per 64 pairs
 *                (warps_m = block_m / 16), owning every weight row of the tile (warps_n = 1) or one half
 *                (warps_n = 2), block_k 64, at least three stages; with swap_ab its own warps (below)
 * @param tma     the weight tile of each slice comes by the tensor memory accelerator (one
 *                {@code cp.async.bulk.tensor} per slice from one thread, completion on an mbarrier) instead of
 *                every thread's 16-byte cp.async; the gathered activation rows stay on cp.async. block_k 64
 *                (the 128-byte swizzle the copy engine writes is the stages' own)
 * @param producer with wgmma and tma: a producer warpgroup of its own (beyond the MMA warps) fills the
 *                stages, the activation rows by cp.async and the weight tile by the copy engine, and each
 *                stage's barriers (landed, freed) replace the block barrier of every slice, so the MMA
 *                warpgroups wait only for the slice they multiply and never for each other
 * @param combineKernel down only: the tiles write each pair's weighted partial row and leave; a kernel of
 *                its own (the module's {@link #COMBINE_ENTRY} entry point, launched right after) adds each
 *                token's k rows in slot order, the same sums in the same order as the in-tile combine, so
 *                the same y. The tiles then wait on no fence, ticket or reload of partial rows
 * @param swapAb  with wgmma and tma (bf16 weights): the tile's weight rows are the M side of the warpgroup MMA (64 a
 *                slab) and its block_m pairs (8, 16, 32 or 64) the N side, so a handful of pairs per expert
 *                is padded to 8, not to 64 rows; warps_m = 1 and one or two warpgroups (warps_n 4 or 8)
 *                split the weight rows
 */
public record ExpertCentric(int blockM, int blockN, int blockK, int warpsM, int warpsN, int stages, int groupM, boolean wgmma,
                            boolean atomicCombine, boolean tma, boolean producer, boolean combineKernel, boolean swapAb)
        implements Schedule<Problem.ExpertProblem> {

    public static final ScheduleKind<ExpertCentric, Problem.ExpertProblem> KIND = new ScheduleKind<>("expert_centric",
            ExpertCentric.class, Problem.ExpertProblem.class, ExpertCentric::space);

    /** The slice width tma and wgmma take with bf16: 64 bf16 are the 128-byte rows of the 128-byte swizzle. */
    public static final int TMA_BLOCK_K = 64;
    /** Bytes of a staged row under tma and wgmma: the 128-byte swizzle's span (64 bf16, or 128 FP8 codes). */
    static final int SWIZZLED_ROW_BYTES = 128;

    /**
     * The slice width whose rows are the 128-byte swizzled rows, which tma, wgmma and FP8 weights ask
     * for: 64 bf16, or 128 FP8 codes (one 128 x 128 scale block).
     */
    public static int swizzledSliceWidth(Problem.ExpertProblem problem) {
        return SWIZZLED_ROW_BYTES / elementBytes(problem);
    }

    /** FP32 accumulators one thread may hold before ptxas runs out of registers for the rest. */
    public static final int MAX_ACCUMULATORS = 128;
    /** The same for 4-bit weights on one warp row, whose warps hold decoded code words and the next chunk's operands too. */
    public static final int MAX_REGISTER_DECODE_ACCUMULATORS = 64;
    /** The largest token count one launch takes (the down kernel's scratch grows with it). */
    public static final int MAX_TOKENS = 65_536;

    /** On mma.sync, with the ordered combine, weights by cp.async. */
    public ExpertCentric(int blockM, int blockN, int blockK, int warpsM, int warpsN, int stages, int groupM) {
        this(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, false, false, false, false, false, false);
    }

    /** With the ordered combine, weights by cp.async. */
    public ExpertCentric(int blockM, int blockN, int blockK, int warpsM, int warpsN, int stages, int groupM, boolean wgmma) {
        this(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, false, false, false, false, false);
    }

    /** Without producer warps, the combine in the tiles. */
    public ExpertCentric(int blockM, int blockN, int blockK, int warpsM, int warpsN, int stages, int groupM, boolean wgmma,
                         boolean atomicCombine, boolean tma) {
        this(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, false, false, false);
    }

    /** This schedule with another GROUP_M, everything else the same. */
    public ExpertCentric withGroupM(int groupM) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** This schedule with down's atomic combine (or the ordered one), everything else the same. */
    public ExpertCentric withAtomicCombine(boolean atomicCombine) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** This schedule with its weight tiles by the tensor memory accelerator (or not), everything else the same. */
    public ExpertCentric withTma(boolean tma) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** This schedule with a producer warpgroup filling the stages (or not), everything else the same. */
    public ExpertCentric withProducer(boolean producer) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** This schedule with down's slots added by a kernel of their own after the tiles (or in them), everything else the same. */
    public ExpertCentric withCombineKernel(boolean combineKernel) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** This schedule with the weight rows on the warpgroup MMA's M side and the pairs on its N side (or not). */
    public ExpertCentric withSwapAb(boolean swapAb) {
        return new ExpertCentric(blockM, blockN, blockK, warpsM, warpsN, stages, groupM, wgmma, atomicCombine, tma, producer,
                combineKernel, swapAb);
    }

    /** Warps of a block: the MMA warps, and the producer's. */
    public int warps() {
        return warpsM * warpsN + (producer ? PRODUCER_WARPS : 0);
    }

    /**
     * The producer's warps: a warpgroup, so that a slice's copies (16 bytes each) are issued in a
     * fraction of the slice's MMA time (one warp issuing them all was slower than no producer).
     */
    public static final int PRODUCER_WARPS = 4;

    @Override
    public ScheduleKind<ExpertCentric, Problem.ExpertProblem> kind() {
        return KIND;
    }

    /**
     * mma.sync: tiles of 16-128 pairs and 16-256 outputs, slices of 32-128, warp grids of up to 8
     * warps, 2-5 stages, GROUP_M 1, 8 or 32; on sm_90a also wgmma: one or two warpgroups, 3-5 stages, and
     * swap-AB tiles of 8 to 64 pairs with one or two warpgroups over the weight rows (weights by the copy engine);
     * each with weights by cp.async or by the tensor memory accelerator, and the wgmma tiles whose
     * weights come by the tensor memory accelerator also with a producer warpgroup. With FP8 weights
     * only the tiles of 128-byte slices, as W8A8 tiles of 128 codes by the tensor memory accelerator.
     * down's tiles without the atomic combine come both ways: its slots added in the tiles, or by the
     * combine launch.
     */
    private static List<ExpertCentric> space(Problem.ExpertProblem problem, Target target) {
        List<ExpertCentric> copies = new ArrayList<>(ScheduleRules.grid(KIND, List.of(List.of(16, 32, 64, 128),
                List.of(16, 32, 64, 128, 256), List.of(32, 64, 128), List.of(1, 2, 4), List.of(1, 2, 4, 8), List.of(2, 3, 4, 5),
                List.of(1, 8, 32), List.of(false), List.of(false, true), List.of(false), List.of(false), List.of(false),
                List.of(false))));
        if (target == Target.SM_90A) {
            copies.addAll(ScheduleRules.grid(KIND, List.of(List.of(64, 128), List.of(32, 64, 128, 256), List.of(64), List.of(4, 8),
                    List.of(1, 2), List.of(3, 4, 5), List.of(1, 8, 32), List.of(true), List.of(false, true), List.of(false),
                    List.of(false), List.of(false), List.of(false))));
            // swap-AB: the weight rows on wgmma's M side, a handful of pairs on its N side; weights by the copy engine
            copies.addAll(ScheduleRules.grid(KIND, List.of(SWAP_AB_BLOCK_M, List.of(32, 64, 128, 256), List.of(64), List.of(1),
                    List.of(4, 8), List.of(3, 4, 5), List.of(1, 8), List.of(true), List.of(false), List.of(true), List.of(false),
                    List.of(false), List.of(true))));
        }
        if (fourBit(problem)) {  // mma.sync on cp.async stages, slices of whole K-blocks' scale words
            return copies.stream().filter(s -> !s.tma()
                    && s.blockK() >= fourBitMinBlockK(problem)
                    && reduce(problem) % s.blockK() == 0).toList();
        }
        List<ExpertCentric> all = new ArrayList<>(fp8(problem) ? List.of() : copies);
        for (ExpertCentric s : copies) {
            if (s.blockK() == TMA_BLOCK_K && !s.tma()) {  // fp8: the same 128-byte rows hold 128 codes, one scale block
                all.add(new ExpertCentric(s.blockM, s.blockN, swizzledSliceWidth(problem), s.warpsM, s.warpsN, s.stages, s.groupM,
                        s.wgmma, s.atomicCombine, true, s.producer, s.combineKernel, s.swapAb));
            }
        }
        List<ExpertCentric> fed = new ArrayList<>();
        for (ExpertCentric s : all) {
            if (s.wgmma() && s.tma()) {
                fed.add(s.withProducer(true));
            }
        }
        all.addAll(fed);
        if (problem instanceof Problem.ExpertDown) {  // down's slots added in the tiles or by the combine launch
            List<ExpertCentric> launched = new ArrayList<>();
            for (ExpertCentric s : all) {
                if (!s.atomicCombine()) {
                    launched.add(s.withCombineKernel(true));
                }
            }
            all.addAll(launched);
        }
        return all;
    }

    /** Pairs per tile with swap_ab: the N of a warpgroup MMA over them. */
    static final List<Integer> SWAP_AB_BLOCK_M = List.of(8, 16, 32, 64);

    /** Whether the problem's weights are FP8 in 128 x 128 blocks, which this kind multiplies as W8A8. */
    static boolean fp8(Problem.ExpertProblem problem) {
        return problem.weights().equals(WeightFormat.FP8_BLOCK128);
    }

    /**
     * 4-bit weights on several warp rows, whose warps share weight columns: the block decodes each slice
     * once into bf16 weight rows in shared memory. On one warp row each warp decodes its own columns'
     * codes into its MMA fragments in registers, with no decoded slice and no barrier for it.
     */
    static boolean decodesSlice(Problem.ExpertProblem problem, ExpertCentric s) {
        return fourBit(problem) && s.warpsM() > 1;
    }

    /** Whether the problem's weights are E2M1 codes with E4M3 or E8M0 K-block scales, decoded to bf16. */
    static boolean fourBit(Problem.ExpertProblem problem) {
        return problem.weights().equals(WeightFormat.NVFP4) || problem.weights().equals(WeightFormat.MXFP4);
    }

    /** The smallest cp.async copy: a row's K-block scales of a 4-bit slice travel in one. */
    private static final int MIN_SCALE_COPY_BYTES = 4;

    /** The narrowest slice of 4-bit weights: one scale byte per K-block, at least one copy's bytes a row (NVFP4 64, MXFP4 128). */
    private static int fourBitMinBlockK(Problem.ExpertProblem problem) {
        return MIN_SCALE_COPY_BYTES * problem.weights().blockScale().block();
    }

    /** Bytes of one staged activation element: 2 (bf16), 1 (FP8 codes); 4-bit weights are decoded to bf16. */
    static int elementBytes(Problem.ExpertProblem problem) {
        return fp8(problem) ? 1 : 2;
    }

    /** W8A8 with FP8 block weights: x and the intermediate travel as quantised rows. */
    @Override
    public boolean quantisesActivations(Problem.ExpertProblem problem) {
        return fp8(problem);
    }

    /** down with combine_kernel: its module's combine entry point adds the slot rows it leaves. */
    @Override
    public boolean combinesAfter(Problem.ExpertProblem problem) {
        return combineKernel && problem instanceof Problem.ExpertDown;
    }

    @Override
    public void check(Problem.ExpertProblem p, Target target, List<SpecError> errors) {
        if (!(p.weights() instanceof WeightFormat.Bf16) && !fp8(p) && !fourBit(p)) {
            errors.add(new SpecError("problem.weights", p.weights().text(), "bf16, " + WeightFormat.FP8_BLOCK128.text()
                    + " (multiplied as FP8 x FP8), " + WeightFormat.NVFP4.text() + " or " + WeightFormat.MXFP4.text()
                    + " (decoded to bf16) under " + KIND.name() + "; other formats take output_centric or output_tensor_core"));
        }
        if (fp8(p)) {
            checkFp8(p, errors);
        }
        if (fourBit(p)) {
            checkFourBit(p, errors);
        }
        if (p.activations() != DType.BF16) {
            errors.add(new SpecError("problem.activations", p.activations().text(), "bf16 under " + KIND.name()));
        }
        boolean tileOk = true;
        if (swapAb) {
            if (!SWAP_AB_BLOCK_M.contains(blockM)) {
                errors.add(new SpecError("schedule.block_m", Integer.toString(blockM), "8, 16, 32 or 64 with swap_ab (the pairs are "
                        + "the N side of a warpgroup MMA)"));
                tileOk = false;
            }
        } else if (blockM < 16 || blockM > 256 || blockM % 16 != 0) {
            errors.add(new SpecError("schedule.block_m", Integer.toString(blockM), "a multiple of 16 (the mma's M) from 16 to 256"));
            tileOk = false;
        }
        if (blockN < 8 || blockN > 256 || blockN % 8 != 0) {
            errors.add(new SpecError("schedule.block_n", Integer.toString(blockN), "a multiple of 8 from 8 to 256 "
                    + "(outputs leave in 16-byte pieces)"));
            tileOk = false;
        }
        if (blockK != 32 && blockK != 64 && blockK != 128) {
            errors.add(new SpecError("schedule.block_k", Integer.toString(blockK), "32, 64 or 128 (a staged row is 4, 8 or 16 "
                    + "16-byte pieces, swizzled for ldmatrix)"));
        }
        range(errors, "schedule.warps_m", warpsM, 1, ScheduleRules.maxWarps(target));
        range(errors, "schedule.warps_n", warpsN, 1, ScheduleRules.maxWarps(target));
        range(errors, "schedule.stages", stages, 2, 8);
        range(errors, "schedule.group_m", groupM, 1, 64);
        if (wgmma) {
            checkWgmma(p, target, errors);
        }
        if (swapAb) {
            checkSwapAb(p, errors);
        }
        if (producer && !(wgmma && tma)) {
            errors.add(new SpecError("schedule.producer", "true", "false, or wgmma = true and tma = true: the producer warpgroup "
                    + "feeds warpgroup MMA tiles whose weight tiles come by the tensor memory accelerator"));
        }
        checkSwizzledSlices(p, errors);
        if (atomicCombine && p instanceof Problem.ExpertGateUp) {
            errors.add(new SpecError("schedule.atomic_combine", "true", "false for expert_gate_up: only down combines a token's slots"));
        }
        if (combineKernel && p instanceof Problem.ExpertGateUp) {
            errors.add(new SpecError("schedule.combine_kernel", "true", "false for expert_gate_up: only down combines a token's slots"));
        }
        if (combineKernel && atomicCombine) {
            errors.add(new SpecError("schedule.combine_kernel", "true", "false with atomic_combine = true: a token's slots are added "
                    + "either atomically in the tiles or in slot order by the combine kernel, not both"));
        }
        // in long: warps_m and warps_n may be anything a spec says, and their product must not wrap
        if (warpsM >= 1 && warpsN >= 1 && (long) warpsM * warpsN + (producer ? PRODUCER_WARPS : 0) > ScheduleRules.maxWarps(target)) {
            errors.add(new SpecError("schedule", warpsM + " x " + warpsN + " warps" + (producer ? " and the producer's "
                    + PRODUCER_WARPS : ""), "at most " + ScheduleRules.maxWarps(target) + " warps per thread block on " + target.text()));
            tileOk = false;
        }
        if (!tileOk || warpsM < 1 || warpsN < 1) {
            return;
        }
        int rows = weightRows(p);
        if (!swapAb && blockM % (16 * warpsM) != 0) {
            errors.add(new SpecError("schedule.warps_m", Integer.toString(warpsM), "a count that splits block_m (" + blockM
                    + ") into whole m16 fragments: block_m / warps_m a multiple of 16"));
        }
        if (!swapAb && rows % (16 * warpsN) != 0) {
            errors.add(new SpecError("schedule.warps_n", Integer.toString(warpsN), "a count that splits the tile's " + rows
                    + " weight rows" + (p instanceof Problem.ExpertGateUp ? " (gate and up of block_n neurons)" : "")
                    + " into whole pairs of n8 fragments: rows / warps_n a multiple of 16"));
        }
        // fp8 keeps a second set: each slice's sums wait there for their scales
        long accumulators = (fp8(p) ? 2L : 1L) * blockM * rows / (32L * warpsM * warpsN);
        if (accumulators > MAX_ACCUMULATORS) {
            errors.add(new SpecError("schedule", accumulators + " FP32 accumulators per thread", "at most " + MAX_ACCUMULATORS
                    + " (block_m x weight rows / threads" + (fp8(p) ? ", twice with fp8 weights" : "")
                    + "): more warps, or a smaller block_m or block_n"));
        }
        // 4-bit weights on one warp row decode in registers, where the next chunk's operands live beside the sums
        if (fourBit(p) && !decodesSlice(p, this) && accumulators > MAX_REGISTER_DECODE_ACCUMULATORS && accumulators <= MAX_ACCUMULATORS) {
            errors.add(new SpecError("schedule", accumulators + " FP32 accumulators per thread", "at most " + MAX_REGISTER_DECODE_ACCUMULATORS
                    + " with " + p.weights().text() + " weights on one warp row (each warp decodes its columns' codes in registers):"
                    + " more warps_n, a smaller block_m or block_n, or warps_m > 1 (the block then decodes each slice in shared memory)"));
        }
        if (!ScheduleRules.dimensionsInRange(p.shape())) {
            return;
        }
        if (p.shape().hidden() % 8 != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(p.shape().hidden()), "a multiple of 8 under "
                    + KIND.name() + " (rows move in 16-byte pieces)"));
        }
        if (p.shape().intermediate() % 8 != 0) {
            errors.add(new SpecError("problem.intermediate", Integer.toString(p.shape().intermediate()), "a multiple of 8 under "
                    + KIND.name() + " (rows move in 16-byte pieces)"));
        }
        if (blockK == 32 || blockK == 64 || blockK == 128) {
            ScheduleRules.sharedLimit(errors, sharedBytes(p), target, "fewer stages, or a smaller block_m, block_n or block_k");
        }
    }

    /** What warpgroup MMA asks beyond the tile rules: Hopper, 128-byte rows, whole warpgroups, 64-row slabs. */
    private void checkWgmma(Problem.ExpertProblem p, Target target, List<SpecError> errors) {
        if (target != Target.SM_90A) {
            errors.add(new SpecError("schedule.wgmma", "true", "false on " + target.text()
                    + ": warpgroup MMA is sm_90a's; mma.sync runs on every target"));
        }
        if (stages < 3) {
            errors.add(new SpecError("schedule.stages", Integer.toString(stages), "3..8 with wgmma (one stage under the MMAs, "
                    + "one they still read, the rest loading)"));
        }
        if (swapAb) {
            return;  // swap_ab states its own block_m, warps and weight-row rules (checkSwapAb)
        }
        if (blockM != 64 && blockM != 128) {
            errors.add(new SpecError("schedule.block_m", Integer.toString(blockM), "64 or 128 with wgmma (one warpgroup per 64 pairs)"));
        } else if (warpsM != blockM / 16 || (warpsN != 1 && warpsN != 2)) {
            errors.add(new SpecError("schedule", "warps_m = " + warpsM + ", warps_n = " + warpsN, "warps_m = "
                    + blockM / 16 + ", warps_n = 1 or 2 with wgmma (a warpgroup of four warps per 64 pairs owns every weight row,"
                    + " or with warps_n = 2 half of them)"));
        }
        if (blockN >= 8 && blockN <= 256 && blockN % 8 == 0 && (warpsN == 1 || warpsN == 2)) {
            int rows = weightRows(p);
            if (rows % (64 * warpsN) != 0 || rows / warpsN > 256) {
                errors.add(new SpecError("schedule.block_n", Integer.toString(blockN), "a tile of 64, 128 or 256 weight rows per"
                        + " warpgroup with wgmma (" + rows + " here over warps_n = " + warpsN
                        + (p instanceof Problem.ExpertGateUp ? "; gate_up has the gate and up row of each neuron" : "") + ")"));
            }
        }
    }

    /**
     * What swap_ab asks: warpgroup MMA (its M side of 64 rows takes the weight rows), bf16 weights by the
     * tensor memory accelerator (the form run against the reference), one warp along the pairs and one
     * or two warpgroups along the weight rows, each warpgroup's rows in whole slabs of 64.
     */
    private void checkSwapAb(Problem.ExpertProblem p, List<SpecError> errors) {
        if (!wgmma) {
            errors.add(new SpecError("schedule.swap_ab", "true", "false without wgmma: swap-AB puts the weight rows on the 64-row"
                    + " side of a warpgroup MMA"));
        }
        if (!(p.weights() instanceof WeightFormat.Bf16)) {
            errors.add(new SpecError("schedule.swap_ab", "true", "false with " + p.weights().text() + " weights (swap-AB tiles"
                    + " multiply bf16 weights)"));
        }
        if (!tma) {
            errors.add(new SpecError("schedule.tma", "false", "true with swap_ab (its weight tiles come by the tensor memory"
                    + " accelerator)"));
        }
        if (warpsM != 1 || (warpsN != 4 && warpsN != 8)) {
            errors.add(new SpecError("schedule", "warps_m = " + warpsM + ", warps_n = " + warpsN, "warps_m = 1, warps_n = 4 or 8"
                    + " with swap_ab (every warp takes all the tile's pairs; one or two warpgroups split the weight rows)"));
            return;
        }
        if (blockN >= 8 && blockN <= 256 && blockN % 8 == 0) {
            int rows = weightRows(p);
            int groups = warpsN / 4;
            if (rows % (64 * groups) != 0) {
                errors.add(new SpecError("schedule.block_n", Integer.toString(blockN), "a tile whose weight rows"
                        + (p instanceof Problem.ExpertGateUp ? " (gate and up of block_n neurons)" : "") + " are a multiple of "
                        + 64 * groups + " with swap_ab (whole slabs of 64 rows for each of the " + groups + " warpgroup(s); "
                        + rows + " here)"));
            }
        }
    }

    /**
     * One rule for the slice width: tma, wgmma and FP8 weights each ask for slices whose rows are the
     * 128-byte swizzled rows ({@link #swizzledSliceWidth}); FP8's slice is then one scale block.
     */
    private void checkSwizzledSlices(Problem.ExpertProblem p, List<SpecError> errors) {
        List<String> why = new ArrayList<>();
        if (tma) {
            why.add("tma (the copy engine writes 128-byte rows in the 128-byte swizzle the stages use)");
        }
        if (wgmma) {
            why.add("wgmma (128-byte swizzled rows)");
        }
        if (fp8(p)) {
            why.add(WeightFormat.FP8_BLOCK128.text() + " weights (a slice is one 128 x 128 scale block)");
        }
        int slice = swizzledSliceWidth(p);
        if (!why.isEmpty() && blockK != slice) {
            errors.add(new SpecError("schedule.block_k", Integer.toString(blockK), slice + " with " + String.join(" and ", why)));
        }
    }

    /**
     * What FP8 x FP8 asks beyond the slice width: the weight tiles by the copy engine, each warp's
     * columns within one scale block (or whole ones), H and I in whole groups of 128 (the activation
     * scales' groups), and gate_up tiles of whole groups of 128 neurons (it quantises its output
     * row by row as it stores it).
     */
    private void checkFp8(Problem.ExpertProblem p, List<SpecError> errors) {
        String format = WeightFormat.FP8_BLOCK128.text();
        if (!tma) {
            errors.add(new SpecError("schedule.tma", "false", "true with " + format + " weights (the copy engine brings the weight "
                    + "tiles; its 128-byte swizzle is the stages')"));
        }
        int group = Fp8ActivationRows.GROUP;
        int rows = weightRows(p);
        if (warpsN >= 1 && blockN >= 8 && rows % warpsN == 0 && group % (rows / warpsN) != 0) {
            errors.add(new SpecError("schedule.warps_n", Integer.toString(warpsN), "a count that leaves each warp " + group
                    + " weight rows or a divisor of " + group + " with " + format + " weights (its columns lie in one scale block; "
                    + rows + " rows here)"));
        }
        if (!ScheduleRules.dimensionsInRange(p.shape())) {
            return;
        }
        if (p.shape().hidden() % group != 0) {
            errors.add(new SpecError("problem.hidden", Integer.toString(p.shape().hidden()), "a multiple of " + group + " with "
                    + format + " weights under " + KIND.name() + " (x is quantised in groups of " + group + ")"));
        }
        if (p.shape().intermediate() % group != 0) {
            errors.add(new SpecError("problem.intermediate", Integer.toString(p.shape().intermediate()), "a multiple of " + group
                    + " with " + format + " weights under " + KIND.name() + " (the intermediate is quantised in groups of " + group + ")"));
        }
        if (p instanceof Problem.ExpertGateUp && blockN % group != 0) {
            errors.add(new SpecError("schedule.block_n", Integer.toString(blockN), "a multiple of " + group + " with " + format
                    + " weights: gate_up quantises whole groups of " + group + " neurons as it stores them"));
        }
    }

    /**
     * What 4-bit weights ask: mma.sync on cp.async stages (the warps decode each slice's codes, which
     * neither the copy engine's swizzle nor warpgroup MMA's operands would hold), a slice whose scales
     * of a row fill at least one 4-byte copy, and the kernel's K (gate_up's H, down's I) in whole slices.
     */
    private void checkFourBit(Problem.ExpertProblem p, List<SpecError> errors) {
        String format = p.weights().text();
        if (wgmma) {
            errors.add(new SpecError("schedule.wgmma", "true", "false with " + format + " weights (their codes are decoded "
                    + "into bf16 mma.sync operands)"));
        }
        if (tma) {
            errors.add(new SpecError("schedule.tma", "true", "false with " + format + " weights (their codes and scales come by "
                    + "cp.async)"));
        }
        int block = p.weights().blockScale().block();
        int minimum = fourBitMinBlockK(p);
        if ((blockK == 32 || blockK == 64 || blockK == 128) && blockK < minimum) {
            errors.add(new SpecError("schedule.block_k", Integer.toString(blockK), minimum + " or more with " + format + " weights"
                    + " (a slice's scales of a row, one byte per " + block + " codes, are copied " + MIN_SCALE_COPY_BYTES + " bytes at least)"));
        }
        if (!ScheduleRules.dimensionsInRange(p.shape()) || (blockK != 32 && blockK != 64 && blockK != 128)) {
            return;
        }
        if (reduce(p) % blockK != 0) {
            String field = p instanceof Problem.ExpertGateUp ? "problem.hidden" : "problem.intermediate";
            errors.add(new SpecError(field, Integer.toString(reduce(p)), "a multiple of block_k (" + blockK + ") with " + format
                    + " weights under " + KIND.name() + " (the kernel's K in whole slices of codes and scales)"));
        }
    }

    /** down adds each slot's weighted partial in the combine, which needs {@code combine(acc)}. */
    @Override
    public void checkEpilogue(Problem.ExpertProblem problem, EpilogueNode epilogue, List<SpecError> errors) {
        OutputCentric.foldedCombine(KIND.name(), problem, epilogue, errors);
    }

    /** Weight rows of one tile: gate_up stages the gate and the up row of each of its blockN neurons. */
    public int weightRows(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp _ -> 2 * blockN;
            case Problem.ExpertDown _ -> blockN;
        };
    }

    /**
     * The shared memory of an expert_centric block, as the device header's {@code ExpertTileShape}
     * lays it out (and static_asserts): the tile's pair table, with tma the stages' barriers, then the
     * pipeline, whose bytes the output staging reuses after the last slice.
     *
     * @param tableBytes    each row's pair and, for down, the token the block reduces (two int32)
     * @param barrierBytes  with tma, one 8-byte mbarrier per stage (its weight tile has landed), after the table;
     *                      with the producer two (the slice has landed; every MMA warp is done with it)
     * @param stageBytes    one slice: blockM activation rows and the weight rows, blockK elements each (bf16 or FP8);
     *                      with 4-bit weights the rows' codes (blockK / 2 bytes) and K-block scales instead of the weight rows
     * @param decodedBytes  4-bit weights on several warp rows: the slice's weight rows decoded to bf16 once by the
     *                      block, after the stages (else 0: one warp row decodes each warp's fragments in registers)
     * @param stagingBytes  the finished tile: bf16 (gate_up) or FP32 (down) rows, padded against bank conflicts
     * @param sharedBytes   table + barriers + max(stages x stage + decoded, staging), and with wgmma or tma 1024
     *                      bytes to align the stages (the 128-byte swizzle repeats every 1024 bytes)
     */
    public record Layout(int tableBytes, int barrierBytes, int stageBytes, int decodedBytes, int stagingBytes, long sharedBytes) {
        public static Layout of(Problem.ExpertProblem problem, ExpertCentric s) {
            int rows = s.weightRows(problem);
            int table = 8 * s.blockM();
            int rowBytes = elementBytes(problem) * s.blockK();
            int stage = fourBit(problem)
                    ? s.blockM() * rowBytes + rows * (s.blockK() / 2 + s.blockK() / problem.weights().blockScale().block())
                    : (s.blockM() + rows) * rowBytes;
            int decoded = decodesSlice(problem, s) ? rows * rowBytes : 0;
            int staging = switch (problem) {
                case Problem.ExpertGateUp _ -> s.blockM() * (s.blockN() + 8) * 2;
                case Problem.ExpertDown _ -> s.blockM() * (s.blockN() + 4) * 4;
            };
            int barriers = s.tma() ? 8 * s.stages() * (s.producer() ? 2 : 1) : 0;
            // the swizzled stages wgmma reads and the copy engine writes start on a 1024-byte boundary
            int slack = s.wgmma() || s.tma() ? 1024 : 0;
            return new Layout(table, barriers, stage, decoded, staging,
                    table + barriers + slack + Math.max((long) s.stages() * stage + decoded, staging));
        }
    }

    public Layout layout(Problem.ExpertProblem problem) {
        return Layout.of(problem, this);
    }

    @Override
    public long sharedBytes(Problem.ExpertProblem problem) {
        return layout(problem).sharedBytes();
    }

    /** Buckets of the plan a kernel walks: gate_up the E experts; down also bucket E (ids outside [0, E), zero rows). */
    static int buckets(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp g -> g.shape().experts();
            case Problem.ExpertDown d -> d.shape().experts() + 1;
        };
    }

    /** The GEMM's K: gate_up's H, down's I. */
    static int reduce(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp g -> g.shape().hidden();
            case Problem.ExpertDown d -> d.shape().intermediate();
        };
    }

    /** Outputs per pair: gate_up's neurons, down's hidden units. */
    static int outputs(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp g -> g.shape().intermediate();
            case Problem.ExpertDown d -> d.shape().hidden();
        };
    }

    /** m tiles of the worst-case routing: each bucket's last tile may be partial. */
    long maxMTiles(Problem.ExpertProblem problem, int tokens) {
        long pairs = (long) tokens * problem.shape().topk();
        return Math.ceilDiv(pairs, blockM) + Math.min(buckets(problem), pairs);
    }

    @Override
    public LaunchGeometry geometry(Problem.ExpertProblem problem, int tokens) {
        long blocks = maxMTiles(problem, tokens) * Math.ceilDiv(outputs(problem), blockN);
        return new LaunchGeometry(Math.toIntExact(blocks), 1, ScheduleRules.threads(warps()),
                Math.toIntExact(sharedBytes(problem)));
    }

    /** One block per tile of block_m pairs of an expert and block_n outputs (the over-launched rest exits at once). */
    @Override
    public long workBlocks(Problem.ExpertProblem problem, int tokens, int[] expertLoad) {
        if (expertLoad.length != problem.shape().experts()) {
            throw new IllegalArgumentException("expert load of " + expertLoad.length + " experts for a problem of "
                    + problem.shape().experts());
        }
        long tiles = 0;
        for (int n : expertLoad) {
            tiles += Math.ceilDiv(n, blockM);
        }
        return tiles * Math.ceilDiv(outputs(problem), blockN);
    }

    /** {@link #MAX_TOKENS}, or fewer where the over-launched grid would pass CUDA's 2^31 - 1 blocks. */
    @Override
    public int maxTokens(Problem.ExpertProblem problem) {
        int tokens = MAX_TOKENS;
        while (tokens > 1 && maxMTiles(problem, tokens) * Math.ceilDiv(outputs(problem), blockN) > Integer.MAX_VALUE) {
            tokens /= 2;
        }
        return tokens;
    }

    @Override
    public boolean takesRoutingPlan() {
        return true;
    }

    /**
     * down's scratch: each pair's weighted partial row (bf16; with the atomic combine each token's FP32
     * sum) and a ticket per token and n tile
     * that counts the slots in (left at zero by the block that completes them). A top-1 down with the
     * in-tile combine stores y from its tiles and leaves both unused (they stay among its parameters).
     */
    @Override
    public List<Workspace> workspace(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp g -> fp8(g) ? List.of(new Workspace(QUANTISED_X, DType.U8,
                    List.of(Workspace.TOKENS, Fp8ActivationRows.rowBytes(g.shape().hidden())),
                    "scratch: each token's x quantised to FP8 in groups of " + Fp8ActivationRows.GROUP
                    + " (codes, then FP32 scales), by the module's quantise entry point")) : List.of();
            case Problem.ExpertDown d -> {
                Workspace slotRows = new Workspace(PARTIALS, DType.BF16, List.of(Workspace.TOKENS, d.shape().topk(), d.shape().hidden()),
                        "scratch: each (token, slot)'s weighted partial row of y, rounded to bf16 (half the traffic of FP32)");
                if (combineKernel) {  // the combine entry point adds them: no tickets
                    yield List.of(slotRows);
                }
                yield List.of(atomicCombine
                        ? new Workspace(PARTIALS, DType.FP32, List.of(Workspace.TOKENS, d.shape().hidden()),
                                "scratch: each token's FP32 sum of its slots' weighted rows; zero before the first launch, left zero")
                        : slotRows,
                        new Workspace(TICKETS, DType.INT32, List.of(Workspace.TOKENS, Math.ceilDiv(d.shape().hidden(), blockN)),
                                "scratch: slots in per token and n tile; zero before the first launch, left zero"));
            }
        };
    }

    /**
     * With tma, the weight as the copy engine walks it: (K, gate or up, output row, expert), so that one
     * box of (slice, 2, block_n, 1) lands gate_up's rows in the tile's order (gate of neuron i at tile row
     * 2i, up at 2i + 1) from either layout, and down's (slice, 1, block_n, 1) its block_n rows, the
     * slice being 64 bf16 or 128 FP8 codes. Rows past
     * the outputs and columns past K arrive as zeros, as the cp.async copies make them.
     */
    @Override
    public Optional<WeightTileMap> weightTileMap(Problem.ExpertProblem problem) {
        if (!tma) {
            return Optional.empty();
        }
        long h = problem.shape().hidden();
        long i = problem.shape().intermediate();
        int bytes = elementBytes(problem);
        int slice = swizzledSliceWidth(problem);
        return Optional.of(switch (problem) {
            case Problem.ExpertGateUp g -> {
                long row = bytes * h;
                boolean stacked = g.layout() == GateUpLayout.STACKED;
                yield new WeightTileMap(bytes, List.of(h, 2L, i, (long) g.shape().experts()),
                        List.of(stacked ? i * row : row, stacked ? row : 2 * row, 2 * i * row), List.of(slice, 2, blockN, 1));
            }
            case Problem.ExpertDown d -> {
                long row = bytes * i;
                yield new WeightTileMap(bytes, List.of(i, 1L, h, (long) d.shape().experts()), List.of(row, row, h * row),
                        List.of(slice, 1, blockN, 1));
            }
        });
    }

    /**
     * W8A8 gate_up: the suffix of its module's entry point that quantises x into {@link #QUANTISED_X}
     * (after the kernel's name), and that entry point's block: a warp per group of 128 of a token's row.
     */
    public static final String QUANTISE_ENTRY = "_quantise_x";
    public static final int QUANTISE_THREADS = 256;

    /**
     * down with {@code combine_kernel}: the suffix of its module's entry point that adds each token's k
     * partial rows into y, and that entry point's block: a thread per 4 outputs of a token.
     */
    public static final String COMBINE_ENTRY = "_combine";
    public static final int COMBINE_THREADS = 256;
    /** Outputs one thread of the combine entry point adds (a bf16x4 of each slot's row). */
    public static final int COMBINE_OUTPUTS_PER_THREAD = 4;

    /** Blocks of the combine entry point for {@code tokens} tokens of {@code hidden} outputs. */
    public static int combineBlocks(int tokens, int hidden) {
        long threads = (long) tokens * Math.ceilDiv(hidden, COMBINE_OUTPUTS_PER_THREAD);
        return Math.toIntExact(Math.ceilDiv(threads, COMBINE_THREADS));
    }

    /** Blocks of the quantise entry point for {@code tokens} tokens of {@code hidden} (a multiple of 128). */
    public static int quantiseBlocks(int tokens, int hidden) {
        long warps = (long) tokens * (hidden / Fp8ActivationRows.GROUP);
        return Math.toIntExact(Math.ceilDiv(warps, QUANTISE_THREADS / 32));
    }

    /** Workspace names: down's scratch, and gate_up's quantised x (W8A8). */
    public static final String PARTIALS = "partials";
    public static final String QUANTISED_X = "x_fp8";
    public static final String TICKETS = "tickets";

    @Override
    public ScheduleModel model(Problem.ExpertProblem problem, Store epilogue) {
        Layout layout = layout(problem);
        int rows = weightRows(problem);
        List<String> own = new ArrayList<>();
        boolean fp8 = fp8(problem);
        String k = fp8 ? "k32" : "k16";
        own.add("A block: " + blockM + " routed pairs of one expert x " + rows + " weight rows, " + (swapAb
                ? (warpsN / 4) + " warpgroup(s) of " + rows / (warpsN / 4) + " weight rows x the " + blockM + " pairs, one wgmma m64n"
                + blockM + k + " per 64 weight rows and " + k + " step (swap-AB: the weight rows on the MMA's M side, the pairs"
                + " on its N side)"
                : wgmma
                ? (blockM / 64 * warpsN) + " warpgroup(s) of 64 x " + rows / warpsN + ", one wgmma m64n" + rows / warpsN
                + k + " per " + k + " step from the swizzled stages"
                : warpsM + " x " + warpsN + " warps of " + (blockM / warpsM) + " x " + (rows / warpsN) + ", mma.sync m16n8" + k)
                + (fp8 ? " (FP8 E4M3 in; each slice's sums scaled by the pair's activation scale and the weight block's, then"
                + " added to the FP32 accumulators)." : " (bf16 in, FP32 accumulate)."));
        if (fourBit(problem)) {
            own.add("Each slice's " + problem.weights().text() + " codes and K-block scales are staged as they are stored and "
                    + (decodesSlice(problem, this) ? "decoded once by the block into " + layout.decodedBytes() + " bytes of bf16 weight"
                    + " rows, which its warp rows share" : "decoded by each warp into the bf16 MMA fragments of its own columns, in"
                    + " registers") + ", the scales folded in exactly; the tensor's factor multiplies the sums before the epilogue.");
        }
        if (fp8) {
            own.add(switch (problem) {
                case Problem.ExpertGateUp _ -> "x arrives quantised per token in groups of 128 (the module's quantise entry point);"
                        + " the intermediate leaves quantised the same way.";
                case Problem.ExpertDown _ -> "The intermediate arrives quantised per (token, slot) in groups of 128.";
            });
        }
        own.add("K slices of " + blockK + " through a " + stages + "-stage pipeline (" + layout.stageBytes() + " bytes a stage; "
                + (tma ? "weight tiles by the tensor memory accelerator, activation rows by cp.async" : "cp.async")
                + (producer ? "; a producer warpgroup fills the stages, each stage's barriers say when it has landed and when"
                + " every MMA warp is done with it" : "") + "); m tiles in groups of " + groupM + ".");
        own.add("The grid covers the worst-case routing; blocks past the routing's last tile exit at once.");
        String unit = switch (problem) {
            case Problem.ExpertGateUp _ -> "a tile of pairs (token, slot) routed to one expert x " + blockN
                    + " neurons, gate and up rows staged side by side";
            case Problem.ExpertDown d -> "a tile of pairs routed to one expert x " + blockN + " hidden outputs; " + (atomicCombine
                    ? "each pair's weighted row is added atomically into its token's FP32 sum (the order of the additions varies)"
                    : combineKernel ? "each pair's weighted partial (rounded to bf16) goes to scratch; the combine entry point then"
                    + " adds each token's slots in slot order (FP32)"
                    : d.shape().topk() == 1 ? "top-1: each pair's weighted row (rounded to bf16) is its token's y, stored from the tile"
                    : "each pair's weighted partial (rounded to bf16) goes to scratch and the block completing a token adds its"
                    + " slots in slot order (FP32)");
        };
        String body = switch (problem) {
            case Problem.ExpertGateUp _ -> "gate_up_expert_centric";
            case Problem.ExpertDown _ -> "down_expert_centric";
        };
        List<String> notes = ScheduleRules.expertNotes(problem, unit, true, own);
        return new ScheduleModel("expert_centric.cu.ftl", body, List.of(
                ConfigConstant.integer("kBlockM", blockM),
                ConfigConstant.integer("kBlockN", blockN),
                ConfigConstant.integer("kBlockK", blockK),
                ConfigConstant.integer("kWarpsM", warpsM),
                ConfigConstant.integer("kWarpsN", warpsN),
                ConfigConstant.integer("kStages", stages),
                ConfigConstant.integer("kGroupM", groupM),
                ConfigConstant.bool("kWgmma", wgmma),
                ConfigConstant.bool("kAtomicCombine", atomicCombine),
                ConfigConstant.bool("kCombineKernel", combineKernel),
                ConfigConstant.bool("kTma", tma),
                ConfigConstant.integer("kProducerWarps", producer ? PRODUCER_WARPS : 0),
                ConfigConstant.bool("kSwapAb", swapAb)),
                notes, 1, 1, Optional.empty(), DeviceLibrary.EXPERT_CENTRIC);
    }

    @Override
    public String spillAdvice() {
        return "fewer accumulators per thread (block_m " + blockM + " x block_n " + blockN + " over " + (warpsM * warpsN)
                + " warps)";
    }
}
