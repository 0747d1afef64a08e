package dev.moeforge.dsl.schedule;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/** The rules, enumeration grids and notes that several schedule kinds share. */
final class ScheduleRules {
    /** Bytes a lane may load per weight load instruction (LDG.32, .64, .128). */
    static final List<Integer> LOAD_BYTES = List.of(4, 8, 16);

    private ScheduleRules() {}

    /**
     * With an input norm, a block keeps its {@code tokens} normed rows of {@code rowLength} bf16 in
     * shared memory, at most {@link InputNorm#MAX_ROW_BYTES}: refused at the block's token count, or
     * (one token a block) at the row length.
     */
    static void normedRows(List<SpecError> errors, Optional<InputNorm> norm, int tokens, String tokensField, int rowLength,
                           String rowField) {
        long bytes = 2L * tokens * rowLength;
        if (norm.isEmpty() || bytes <= InputNorm.MAX_ROW_BYTES) {
            return;
        }
        String why = " with input_norm: a block keeps its normed rows in shared memory (" + tokens + " x " + rowLength
                + " bf16 = " + bytes + " bytes, at most " + InputNorm.MAX_ROW_BYTES + ")";
        long fewerTokens = InputNorm.MAX_ROW_BYTES / (2L * rowLength);
        if (tokensField != null && fewerTokens >= 1) {
            errors.add(new SpecError(tokensField, Integer.toString(tokens), "at most " + fewerTokens + why));
        } else {  // one row alone is too long: at most MAX_ROW_BYTES / 2 elements, with one token a block
            errors.add(new SpecError(rowField, Integer.toString(rowLength), "at most " + InputNorm.MAX_ROW_BYTES / 2
                    + (tokens > 1 ? " (with " + tokensField + " = 1; " + InputNorm.MAX_ROW_BYTES / (2 * tokens) + " with " + tokens + ")" : "")
                    + why));
        }
    }

    static void range(List<SpecError> errors, String path, int value, int min, int max) {
        if (value < min || value > max) {
            errors.add(new SpecError(path, Integer.toString(value), min + ".." + max));
        }
    }

    static int maxWarps(Target target) {
        return target.maxThreadsPerBlock() / 32;
    }

    static void loadBytes(List<SpecError> errors, int loadBytes) {
        if (!LOAD_BYTES.contains(loadBytes)) {
            errors.add(new SpecError("schedule.load_bytes", Integer.toString(loadBytes), "4, 8 or 16"));
        }
    }

    /**
     * A decode GEMV's loads: the load width, and its rows ({@code path}, {@code length} elements of
     * {@code weights}) a whole number of loads; the length only once it is in range.
     */
    static void rowLoads(List<SpecError> errors, String path, int length, WeightFormat weights, int loadBytes) {
        loadBytes(errors, loadBytes);
        if (LOAD_BYTES.contains(loadBytes) && length >= 1 && length <= Limits.MAX_DIMENSION) {
            wholeLoads(errors, path, length, weights.elementsPerLoad(loadBytes), loadBytes);
        }
    }

    /** A row of {@code value} elements read in loads of {@code by} elements ({@code loadBytes} bytes) must be whole loads. */
    static void wholeLoads(List<SpecError> errors, String path, int value, int by, int loadBytes) {
        if (value % by != 0) {
            errors.add(new SpecError(path, Integer.toString(value), "a multiple of " + by
                    + " (each lane loads " + loadBytes + " bytes = " + by + " elements at a time); "
                    + "lower schedule.load_bytes or pad the dimension"));
        }
    }

    /**
     * The warps of an output-producing block: the S warps sharing one output (or tile) divide the
     * block's warps, and the occupancy promise fits the SM's warps.
     */
    static void warpSplit(List<SpecError> errors, String splitField, int warps, int split, int minBlocks, Target target) {
        if (warps >= 1 && (split < 1 || warps % split != 0)) {
            errors.add(new SpecError(splitField, Integer.toString(split), "a divisor of warps_per_cta (" + warps + ")"));
        }
        minBlocks(errors, warps, minBlocks, target);
    }

    /** The occupancy promise: at most as many blocks as the SM's warps hold. */
    static void minBlocks(List<SpecError> errors, int warps, int minBlocks, Target target) {
        if (warps >= 1 && warps <= maxWarps(target)) {
            range(errors, "schedule.min_blocks_per_sm", minBlocks, 0, target.maxWarpsPerSm() / warps);
        }
    }

    static void sharedLimit(List<SpecError> errors, long shared, Target target, String remedy) {
        if (shared > target.maxSharedBytesPerBlock()) {
            errors.add(new SpecError("schedule", shared + " bytes of shared memory", "at most "
                    + target.maxSharedBytesPerBlock() + " bytes per thread block on " + target.text() + " (" + remedy + ")"));
        }
    }

    static boolean dimensionsInRange(ExpertShape s) {
        return s.hidden() >= 1 && s.hidden() <= Limits.MAX_DIMENSION && s.intermediate() >= 1
                && s.intermediate() <= Limits.MAX_DIMENSION && s.experts() >= 1 && s.experts() <= Limits.MAX_EXPERTS
                && s.topk() >= 1 && s.topk() <= Limits.MAX_TOPK;
    }

    static void fourBit(List<SpecError> errors, WeightFormat weights, String kind, String why) {
        if (weights.element().bits() != 4) {
            errors.add(new SpecError("problem.weights", weights.text(), "a 4-bit format (nvfp4, mxfp4, int4_channel, "
                    + "int4_group128) under " + kind + why));
        }
    }

    /** {@code __launch_bounds__}'s block threads for a block of {@code warps} warps. */
    static int threads(int warps) {
        return 32 * warps;
    }

    /**
     * Every schedule of {@code kind} whose parameters take the values of {@code domains} (one list
     * per parameter, in order), in lexicographic order of the domains: the enumeration grid.
     */
    static <S extends Schedule<?>> List<S> grid(ScheduleKind<S, ?> kind, List<List<?>> domains) {
        List<S> out = new ArrayList<>();
        grid(kind, domains, new ArrayList<>(), out);
        return out;
    }

    private static <S extends Schedule<?>> void grid(ScheduleKind<S, ?> kind, List<List<?>> domains, List<Object> prefix,
                                                      List<S> out) {
        if (prefix.size() == domains.size()) {
            out.add(kind.create(prefix));
            return;
        }
        for (Object v : domains.get(prefix.size())) {
            prefix.add(v);
            grid(kind, domains, prefix, out);
            prefix.removeLast();
        }
    }

    /** Powers of two from {@code from} to {@code to}. */
    static List<Integer> powersOfTwo(int from, int to) {
        List<Integer> out = new ArrayList<>();
        for (int v = from; v <= to; v *= 2) {
            out.add(v);
        }
        return out;
    }

    /** How a kernel decodes the format's codes and applies its scales; tensorCores: the tensor-core bodies. */
    static String formatNote(WeightFormat format, boolean tensorCores) {
        String element = switch (format.element()) {
            case BF16 -> "plain bf16 rows, no scales";
            case E4M3 -> "E4M3 codes (hardware fp8x2 conversion)";
            case E2M1 -> "E2M1 codes, two per byte with element 2j low (decoded arithmetically"
                    + (tensorCores ? " to bf16x2, a shift and two masks per pair)" : ", 8 per word)");
            case INT8 -> "INT8 codes (fp16 magic-number conversion)";
            case INT4 -> "INT4 codes, two per byte with element 2j low ("
                    + (tensorCores ? "magic-number conversion, in bf16)" : "fp16 magic-number conversion)");
        };
        String block = switch (format.blockScale()) {
            case NONE -> "";
            case F32_BLOCK_128X128 -> "; an FP32 scale per 128 x 128 block";
            case F32_GROUP_128 -> "; an FP32 scale per 128 along K";
            case E4M3_PER_16 -> "; an E4M3 scale per 16 along K";
            case E8M0_PER_32 -> "; an E8M0 scale per 32 along K";
        };
        String use = switch (format.blockScale()) {
            case NONE -> "";
            case E4M3_PER_16, E8M0_PER_32 -> tensorCores
                    ? " (folded into the block's bf16 codes: exact, the products have at most 6 significant bits)"
                    : " (applied once to each load's partial sum of its block)";
            case F32_BLOCK_128X128, F32_GROUP_128 -> tensorCores
                    ? " (applied once to each step's FP32 sum: a step is one block)"
                    : " (applied once to each load's partial sum of its block)";
        };
        String row = switch (format.rowScale()) {
            case NONE -> "";
            case PER_ROW -> "; an FP32 scale per row, applied to the row's sum";
            case PER_TENSOR -> "; an FP32 scale per tensor (gate and up each their own), applied to the row's sum";
        };
        return "Weights " + format.text() + ": " + element + block + use + row + ".";
    }

    /**
     * The header comment of an expert kernel: the unit a warp owns (down's says how the routing
     * weights meet the sums), how the weights are decoded,
     * the bias, the schedule's own lines, and what the kernel assumes of the routing.
     */
    static List<String> expertNotes(Problem.ExpertProblem problem, String unit, boolean tensorCores, List<String> scheduleNotes) {
        List<String> notes = new ArrayList<>();
        notes.add(switch (problem) {
            case Problem.ExpertGateUp g -> "gate_up: " + unit + "; gate and up rows "
                    + (g.layout() == GateUpLayout.STACKED ? "stacked ([gate; up])" : "interleaved (2i, 2i+1)") + ".";
            case Problem.ExpertDown _ -> "down: " + unit + ".";
        });
        notes.add(formatNote(problem.weights(), tensorCores));
        if (problem.bias()) {
            notes.add("Bias: an FP32 value per expert and row, added to the row's sum"
                    + (problem instanceof Problem.ExpertDown ? " (weighted by the slot's routing weight in the combine)." : "."));
        }
        notes.addAll(scheduleNotes);
        notes.add("Assumes: a token's expert ids are distinct; ids outside [0, E) contribute nothing.");
        return notes;
    }

    /** The reduction length of an expert half: gate_up reduces over hidden, down over intermediate. */
    static int reduceLength(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp g -> g.shape().hidden();
            case Problem.ExpertDown d -> d.shape().intermediate();
        };
    }

    /** The problem field that holds {@link #reduceLength}. */
    static String reduceField(Problem.ExpertProblem problem) {
        return switch (problem) {
            case Problem.ExpertGateUp _ -> "problem.hidden";
            case Problem.ExpertDown _ -> "problem.intermediate";
        };
    }
}
