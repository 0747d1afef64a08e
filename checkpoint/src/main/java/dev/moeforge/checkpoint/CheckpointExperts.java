package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.ExpertTensors.BIAS;
import static dev.moeforge.checkpoint.ExpertTensors.BLOCKS;
import static dev.moeforge.checkpoint.ExpertTensors.SCALES;
import static dev.moeforge.checkpoint.ExpertTensors.WEIGHT;
import static dev.moeforge.checkpoint.ExpertTensors.WEIGHT_PACKED;
import static dev.moeforge.checkpoint.ExpertTensors.WEIGHT_SCALE;
import static dev.moeforge.checkpoint.ExpertTensors.WEIGHT_SCALE_2;
import static dev.moeforge.checkpoint.ExpertTensors.WEIGHT_SCALE_INV;
import static dev.moeforge.checkpoint.SafetensorsFile.I16_LE;
import static dev.moeforge.checkpoint.SafetensorsFile.MAX_ARRAY_LENGTH;
import static dev.moeforge.checkpoint.TensorChecks.dim;
import static dev.moeforge.checkpoint.TensorChecks.require;
import static dev.moeforge.checkpoint.TensorChecks.requireChannelShape;
import static dev.moeforge.checkpoint.TensorChecks.requireDivisible;
import static dev.moeforge.checkpoint.TensorChecks.requireDtype;
import static dev.moeforge.checkpoint.TensorChecks.requireExperts;
import static dev.moeforge.checkpoint.TensorChecks.requireShape;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.WeightFormat;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * Loads one MoE layer's routed expert weights from a {@link Checkpoint} into the kernels' in-memory
 * form: gate_up fused {@code [E][2I][H]} and down {@code [E][H][I]} as {@link EncodedWeights}, in
 * whatever format the checkpoint holds, detected per tensor.
 *
 * <p><b>Names.</b>
 * Under {@code layerPrefix} (e.g. {@code model.layers.0.mlp} or Mixtral's
 * {@code model.layers.0.block_sparse_moe}) the first of these that exists is used:
 * <ol>
 * <li>{@code experts.gate_up_proj_blocks} / {@code _scales} / {@code _bias} and {@code down_proj_*}:
 *     gpt-oss MXFP4, fused, gate and up rows {@link GateUpLayout#INTERLEAVED interleaved} as stored;</li>
 * <li>{@code experts.gate_up_proj} and {@code experts.down_proj}: transformers' fused float tensors,
 *     either {@code [E, 2I, H]} + {@code [E, H, I]} (nn.Linear orientation, gate then up:
 *     {@link GateUpLayout#STACKED}) or gpt-oss's {@code [E, H, 2I]} + {@code [E, I, H]}
 *     (transposed on load, {@link GateUpLayout#INTERLEAVED}); optional {@code _bias} tensors;</li>
 * <li>per expert {@code experts.<e>.gate_proj / up_proj / down_proj} (Qwen, OLMoE, DeepSeek, ...) or
 *     {@code experts.<e>.w1 / w3 / w2} (Mixtral): each {@code [out, in]}, fused on load into
 *     {@link GateUpLayout#STACKED} gate_up (gate rows, then up rows, of each expert).</li>
 * </ol>
 *
 * <p><b>Formats</b>, per weight tensor {@code X.weight}:
 * <ul>
 * <li>BF16, F16 or F32 {@code weight}: {@link WeightFormat#BF16} (F16/F32 rounded to nearest even);</li>
 * <li>F8_E4M3 {@code weight} + F32 2-D {@code weight_scale_inv [ceil(N/128), ceil(K/128)]}: FP8 128x128
 *     blocks (DeepSeek-V3);</li>
 * <li>F8_E4M3 {@code weight} + U8 (or F8_E8M0) {@code weight_scale_inv [N, K/32]}: MXFP8;</li>
 * <li>F8_E4M3 {@code weight} + F32 {@code weight_scale [N, 1]} or {@code [N]}: FP8 per channel; a scalar
 *     {@code weight_scale} (per-tensor FP8) is repeated for every row;</li>
 * <li>U8 {@code weight [N, K/2]} + {@code weight_scale_2} (F32 scalar) + F8_E4M3 {@code weight_scale [N, K/16]}:
 *     NVFP4 (ModelOpt); gate and up keep their own {@code weight_scale_2}, so the fused gate_up's row
 *     scales are {@code [E][2]};</li>
 * <li>U8 {@code weight [N, K/2]} + U8 {@code weight_scale_inv} (or {@code weight_scale}) {@code [N, K/32]}: MXFP4;</li>
 * <li>I8 {@code weight [N, K]} (INT8) or U8 {@code weight_packed [N, K/2]} (INT4, two's complement
 *     nibbles) + F32 {@code weight_scale}: {@code [N, 1]} or {@code [N]} per channel, {@code [N, K/128]}
 *     per group of 128. For {@code K = 128} both shapes are {@code [N, 1]}; it is read as per channel
 *     unless the file's {@code __metadata__} has {@value ExpertTensors#FORMAT_METADATA_KEY} =
 *     {@code int8_group128} / {@code int4_group128}. These are MoeForge's own names, see
 *     {@link ExpertTensors}.</li>
 * </ul>
 *
 * <p><b>The repack.</b>
 * Per-expert tensors are copied once, on load, into one array per fused weight: for each expert, its
 * gate's codes (block scales, row scales) then its up's, which is exactly what
 * {@link EncodedWeights#encode} of the stacked {@code [2I][H]} matrix with
 * {@link Projections#STACKED_GATE_UP} gives, every scale being per row, per block of one row, per
 * projection, or (FP8 128x128) per block of 128 rows of one projection when {@code I % 128 == 0}. FP8
 * 128x128 gate/up with {@code I % 128 != 0} cannot be fused (a 128-row block would straddle gate and up)
 * and is refused. gpt-oss's fused MXFP4 is copied as is (its layout is already the kernels').
 *
 * <p>Every inconsistency is a {@link CheckpointException} naming the tensor and its file: expert ids
 * that are not {@code 0 .. E-1}, a missing expert projection or scale tensor, a scale of the wrong
 * dtype or shape, experts or projections disagreeing in format or shape, a row length that is not
 * whole blocks of the format, or a fused weight over 2 GiB. {@link #check} finds all but the last
 * without reading a weight.
 */
public final class CheckpointExperts {

    private CheckpointExperts() {}

    /**
     * One layer's routed experts: gate_up {@code [E][2I][H]} in {@code layout} (projections
     * {@link Projections#of(GateUpLayout)}), down {@code [E][H][I]}, and the biases if the checkpoint
     * has them (gpt-oss: {@code [E][2I]} in the same row order as gate_up, and {@code [E][H]}).
     */
    public record LayerWeights(EncodedWeights gateUp, EncodedWeights down, GateUpLayout layout,
                               Optional<float[]> gateUpBias, Optional<float[]> downBias) {
        public LayerWeights {
            Objects.requireNonNull(gateUp, "gateUp");
            Objects.requireNonNull(down, "down");
            Objects.requireNonNull(layout, "layout");
            Objects.requireNonNull(gateUpBias, "gateUpBias");
            Objects.requireNonNull(downBias, "downBias");
        }

        public int experts() {
            return gateUp.experts();
        }

        public int hidden() {
            return gateUp.cols();
        }

        public int intermediate() {
            return gateUp.rows() / 2;
        }
    }

    /** {@link #load(Checkpoint, String, int)} with the expert count found in the checkpoint. */
    public static LayerWeights load(Checkpoint ckpt, String layerPrefix) {
        return load(ckpt, layerPrefix, countExperts(ckpt, layerPrefix));
    }

    /**
     * Loads experts {@code 0 .. experts-1} of the MoE block {@code layerPrefix} (e.g.
     * {@code model.layers.0.mlp}); see the class comment for names, formats and errors.
     */
    public static LayerWeights load(Checkpoint ckpt, String layerPrefix, int experts) {
        return locate(ckpt, layerPrefix, experts).read(ckpt);
    }

    /**
     * Checks the MoE block {@code layerPrefix} as {@link #load(Checkpoint, String)} does, without
     * reading any weight: expert ids {@code 0 .. E-1} with none missing, every tensor of every expert
     * present, their dtypes, shapes and scales, and experts agreeing in format and shape. What it does
     * not check is the size of the fused arrays the load builds, a limit of this process rather than
     * of the checkpoint. {@link Quantizer} runs it on its input before writing anything.
     *
     * @return the number of experts
     * @throws CheckpointException as {@link #load(Checkpoint, String)} would
     */
    public static int check(Checkpoint ckpt, String layerPrefix) {
        int experts = countExperts(ckpt, layerPrefix);
        locate(ckpt, layerPrefix, experts);
        return experts;
    }

    /** A layer's tensors found and checked; {@link #read} copies their data into the kernels' form. */
    @FunctionalInterface
    private interface Located {
        LayerWeights read(Checkpoint ckpt);
    }

    private static Located locate(Checkpoint ckpt, String layerPrefix, int experts) {
        Objects.requireNonNull(ckpt, "ckpt");
        Objects.requireNonNull(layerPrefix, "layerPrefix");
        if (experts <= 0) {
            throw new IllegalArgumentException("experts must be positive, got " + experts);
        }
        String p = layerPrefix + ".experts";
        if (ckpt.find(p + ".gate_up_proj" + BLOCKS).isPresent()) {
            return locateGptOssMxfp4(ckpt, p, experts);
        }
        if (ckpt.find(p + ".gate_up_proj").isPresent()) {
            return locateFusedFloat(ckpt, p, experts);
        }
        for (String[] names : List.of(new String[] {"gate_proj", "up_proj", "down_proj"}, new String[] {"w1", "w3", "w2"})) {
            String base = p + ".0." + names[0];
            if (ckpt.find(base + "." + WEIGHT).isPresent() || ckpt.find(base + "." + WEIGHT_PACKED).isPresent()) {
                return locatePerExpert(ckpt, p, experts, names);
            }
        }
        throw new CheckpointException(ckpt.dir() + ": no routed experts under '" + layerPrefix + "': looked for '"
                + p + ".gate_up_proj_blocks', '" + p + ".gate_up_proj', '" + p + ".0.gate_proj.weight' and '"
                + p + ".0.w1.weight'");
    }

    /**
     * The number of experts of {@code layerPrefix}: the fused tensors' first dimension, or the number
     * of expert ids named, which must run from 0 without a gap.
     *
     * @throws CheckpointException naming the layer if it has no experts, or ids that are not {@code 0 .. E-1}
     */
    public static int countExperts(Checkpoint ckpt, String layerPrefix) {
        String p = layerPrefix + ".experts.";
        for (String fused : List.of("gate_up_proj" + BLOCKS, "gate_up_proj")) {
            Optional<TensorInfo> t = ckpt.find(p + fused);
            if (t.isPresent() && !t.get().shape().isEmpty()) {
                return Math.toIntExact(t.get().shape().getFirst());
            }
        }
        TreeSet<Long> ids = new TreeSet<>();
        for (String name : ckpt.names()) {
            if (!name.startsWith(p)) {
                continue;
            }
            int dot = name.indexOf('.', p.length());
            String id = dot < 0 ? "" : name.substring(p.length(), dot);
            if (EXPERT_ID.matcher(id).matches()) {
                ids.add(id.length() > 18 ? Long.MAX_VALUE : Long.parseLong(id));
            }
        }
        if (ids.isEmpty()) {
            throw new CheckpointException(ckpt.dir() + ": no routed experts under '" + layerPrefix + "' (no tensor named '"
                    + p + "<e>.*' or '" + p + "gate_up_proj*')");
        }
        // A gap or a stray id would otherwise surface as a missing tensor of an expert nobody named.
        if (ids.first() != 0 || ids.last() != ids.size() - 1) {
            throw new CheckpointException(ckpt.dir() + ": the experts under '" + layerPrefix + "' are numbered "
                    + ranges(ids) + "; expert ids must run from 0 to E-1 with none missing (missing "
                    + missing(ids) + ")");
        }
        return ids.size();
    }

    private static final Pattern EXPERT_ID = Pattern.compile("\\d+");

    /** The ids from 0 to the largest that are not in {@code ids}, as ranges: {@code 3..999}. */
    private static String missing(TreeSet<Long> ids) {
        List<String> parts = new ArrayList<>();
        long next = 0;
        for (long id : ids) {
            if (id > next) {
                parts.add(id - 1 == next ? Long.toString(next) : next + ".." + (id - 1));
            }
            next = id + 1;
        }
        return String.join(", ", parts);
    }

    /** {@code 0..3, 1000}: consecutive ids as one range. */
    private static String ranges(TreeSet<Long> ids) {
        List<String> parts = new ArrayList<>();
        Long from = null;
        long prev = 0;
        for (long id : ids) {
            if (from != null && id == prev + 1) {
                prev = id;
                continue;
            }
            if (from != null) {
                parts.add(from == prev ? Long.toString(from) : from + ".." + prev);
            }
            from = id;
            prev = id;
        }
        if (from != null) {
            parts.add(from == prev ? Long.toString(from) : from + ".." + prev);
        }
        return String.join(", ", parts);
    }

    // ---------------------------------------------------------------- per expert

    /** Where one expert projection's format lives: the tensors holding its parts (null where the format has none). */
    private record Source(String weight, SafetensorsFile file, WeightFormat format, int rows, int cols,
                          String blockScales, String rowScales, boolean broadcastRowScale) {
        String describe() {
            return format.text() + " [" + rows + ", " + cols + "]";
        }
    }

    private static Located locatePerExpert(Checkpoint ckpt, String p, int experts, String[] names) {
        List<List<Source>> gateUp = new ArrayList<>();
        List<List<Source>> down = new ArrayList<>();
        for (int e = 0; e < experts; e++) {
            String base = p + "." + e + ".";
            gateUp.add(List.of(detect(ckpt, base + names[0]), detect(ckpt, base + names[1])));
            down.add(List.of(detect(ckpt, base + names[2])));
        }
        Source g = gateUp.getFirst().getFirst();
        Source d = down.getFirst().getFirst();
        if (d.rows() != g.cols() || d.cols() != g.rows()) {
            throw SafetensorsFile.fail(d.file().path(), d.weight(), "is " + d.describe() + " but down must be [H, I] = ["
                    + g.cols() + ", " + g.rows() + "] to match '" + g.weight() + "' " + g.describe());
        }
        requireAgreement(gateUp);
        requireAgreement(down);
        return c -> new LayerWeights(concat(c, gateUp, Projections.STACKED_GATE_UP), concat(c, down, Projections.ONE),
                GateUpLayout.STACKED, Optional.empty(), Optional.empty());
    }

    /** Finds the format of the weight {@code base.weight} (or {@code base.weight_packed}) and checks its companions. */
    private static Source detect(Checkpoint ckpt, String base) {
        String wName = base + "." + WEIGHT;
        String pName = base + "." + WEIGHT_PACKED;
        Optional<TensorInfo> w = ckpt.find(wName);
        Optional<TensorInfo> packed = ckpt.find(pName);
        if (w.isEmpty() && packed.isEmpty()) {
            throw new CheckpointException(ckpt.dir() + ": tensor '" + wName + "' (or '" + pName + "'): not in this checkpoint");
        }
        if (w.isPresent() && packed.isPresent()) {
            throw SafetensorsFile.fail(ckpt.fileOf(pName).path(), pName, "both '" + wName + "' and '" + pName
                    + "' exist; an expert weight has one or the other");
        }
        String name = w.isPresent() ? wName : pName;
        TensorInfo t = w.orElseGet(packed::get);
        SafetensorsFile file = ckpt.fileOf(name);
        if (t.shape().size() != 2) {
            throw SafetensorsFile.fail(file.path(), name, "an expert weight must be 2-D [out, in], shape is " + t.shape());
        }
        int n = dim(file, t, 0);
        int c = dim(file, t, 1);
        if (packed.isPresent()) {
            requireDtype(file, t, SafetensorsDType.U8, "INT4 weight_packed (two nibbles per byte)");
            return intSource(ckpt, file, base, name, n, 2 * c, true);
        }
        return switch (t.dtype()) {
            case BF16, F16, F32 -> new Source(name, file, WeightFormat.BF16, n, c, null, null, false);
            case F8_E4M3 -> fp8Source(ckpt, file, base, name, n, c);
            case U8 -> fp4Source(ckpt, file, base, name, n, 2 * c);
            case I8 -> intSource(ckpt, file, base, name, n, c, false);
            default -> throw SafetensorsFile.fail(file.path(), name, "dtype " + t.dtype() + " is not an expert weight dtype"
                    + " MoeForge reads (BF16, F16, F32, F8_E4M3, U8 for FP4, I8; U8 weight_packed for INT4)");
        };
    }

    private static Source fp8Source(Checkpoint ckpt, SafetensorsFile file, String base, String name, int n, int k) {
        String invName = base + "." + WEIGHT_SCALE_INV;
        String scaleName = base + "." + WEIGHT_SCALE;
        Optional<TensorInfo> inv = ckpt.find(invName);
        if (inv.isPresent()) {
            TensorInfo s = inv.get();
            SafetensorsFile sf = ckpt.fileOf(invName);
            if (s.dtype() == SafetensorsDType.F32) {
                requireShape(sf, s, List.of(Math.ceilDiv((long) n, 128), Math.ceilDiv((long) k, 128)),
                        "FP8 128x128 block scales of '" + name + "' [" + n + ", " + k + "]");
                return new Source(name, file, WeightFormat.FP8_BLOCK128, n, k, invName, null, false);
            }
            if (s.dtype() == SafetensorsDType.U8 || s.dtype() == SafetensorsDType.F8_E8M0) {
                requireDivisible(file, name, k, 32, "MXFP8");
                requireShape(sf, s, List.of((long) n, (long) k / 32), "MXFP8 E8M0 scales of '" + name + "' [" + n + ", " + k + "]");
                return new Source(name, file, WeightFormat.MXFP8, n, k, invName, null, false);
            }
            throw SafetensorsFile.fail(sf.path(), invName, "dtype " + s.dtype() + ": scales of the F8_E4M3 weight '" + name
                    + "' must be F32 (128x128 blocks) or U8/F8_E8M0 (MXFP8, one per 32)");
        }
        Optional<TensorInfo> scale = ckpt.find(scaleName);
        if (scale.isPresent()) {
            TensorInfo s = scale.get();
            SafetensorsFile sf = ckpt.fileOf(scaleName);
            requireDtype(sf, s, SafetensorsDType.F32, "FP8 channel scales of '" + name + "'");
            if (s.numel() == 1 && s.shape().size() <= 1) {
                return new Source(name, file, WeightFormat.FP8_CHANNEL, n, k, null, scaleName, true);
            }
            requireChannelShape(sf, s, n, "FP8 channel scales of '" + name + "'");
            return new Source(name, file, WeightFormat.FP8_CHANNEL, n, k, null, scaleName, false);
        }
        throw SafetensorsFile.fail(file.path(), invName, "not in this checkpoint, nor '" + scaleName + "': the F8_E4M3 weight '"
                + name + "' needs weight_scale_inv (F32 [ceil(N/128), ceil(K/128)], or U8 E8M0 [N, K/32] for MXFP8)"
                + " or weight_scale (F32 [N, 1] per channel)");
    }

    private static Source fp4Source(Checkpoint ckpt, SafetensorsFile file, String base, String name, int n, int k) {
        String s2Name = base + "." + WEIGHT_SCALE_2;
        String scaleName = base + "." + WEIGHT_SCALE;
        String invName = base + "." + WEIGHT_SCALE_INV;
        Optional<TensorInfo> s2 = ckpt.find(s2Name);
        Optional<TensorInfo> scale = ckpt.find(scaleName);
        if (s2.isPresent()) {
            SafetensorsFile s2f = ckpt.fileOf(s2Name);
            requireDtype(s2f, s2.get(), SafetensorsDType.F32, "NVFP4 per-tensor scale of '" + name + "'");
            if (s2.get().numel() != 1 || s2.get().shape().size() > 1) {
                throw SafetensorsFile.fail(s2f.path(), s2Name, "shape " + s2.get().shape()
                        + ": the NVFP4 per-tensor scale of '" + name + "' must be a scalar ([] or [1])");
            }
            if (scale.isEmpty()) {
                throw SafetensorsFile.fail(file.path(), scaleName, "not in this checkpoint: the NVFP4 weight '" + name
                        + "' (U8 + weight_scale_2) in this file needs it (F8_E4M3 [N, K/16])");
            }
            SafetensorsFile sf = ckpt.fileOf(scaleName);
            requireDtype(sf, scale.get(), SafetensorsDType.F8_E4M3, "NVFP4 block scales of '" + name + "'");
            requireDivisible(file, name, k, 16, "NVFP4");
            requireShape(sf, scale.get(), List.of((long) n, (long) k / 16), "NVFP4 block scales of '" + name + "' [" + n + ", " + k + "]");
            return new Source(name, file, WeightFormat.NVFP4, n, k, scaleName, s2Name, false);
        }
        String mxName = ckpt.find(invName).isPresent() ? invName : scale.isPresent() ? scaleName : null;
        if (mxName == null) {
            throw SafetensorsFile.fail(file.path(), invName, "not in this checkpoint, nor '" + scaleName + "' or '" + s2Name
                    + "': the U8 (FP4) weight '" + name + "' needs weight_scale_inv (U8 E8M0 [N, K/32], MXFP4) or "
                    + "weight_scale (F8_E4M3 [N, K/16]) + weight_scale_2 (F32 scalar, NVFP4)");
        }
        TensorInfo s = ckpt.tensor(mxName);
        SafetensorsFile sf = ckpt.fileOf(mxName);
        if (s.dtype() == SafetensorsDType.F8_E4M3) {
            throw SafetensorsFile.fail(file.path(), s2Name, "not in this checkpoint: the U8 weight '" + name
                    + "' has F8_E4M3 block scales '" + mxName + "' (NVFP4), which need this per-tensor F32 scale too");
        }
        if (s.dtype() != SafetensorsDType.U8 && s.dtype() != SafetensorsDType.F8_E8M0) {
            throw SafetensorsFile.fail(sf.path(), mxName, "dtype " + s.dtype() + ": MXFP4 scales of '" + name
                    + "' must be U8 or F8_E8M0 (E8M0 exponents)");
        }
        requireDivisible(file, name, k, 32, "MXFP4");
        requireShape(sf, s, List.of((long) n, (long) k / 32), "MXFP4 E8M0 scales of '" + name + "' [" + n + ", " + k + "]");
        return new Source(name, file, WeightFormat.MXFP4, n, k, mxName, null, false);
    }

    private static Source intSource(Checkpoint ckpt, SafetensorsFile file, String base, String name, int n, int k, boolean int4) {
        String what = int4 ? "INT4" : "INT8";
        String scaleName = base + "." + WEIGHT_SCALE;
        Optional<TensorInfo> scale = ckpt.find(scaleName);
        if (scale.isEmpty()) {
            throw SafetensorsFile.fail(file.path(), scaleName, "not in this checkpoint: the " + what + " weight '" + name
                    + "' in this file needs it (F32 [N, 1] per channel or [N, K/128] per group of 128)");
        }
        TensorInfo s = scale.get();
        SafetensorsFile sf = ckpt.fileOf(scaleName);
        requireDtype(sf, s, SafetensorsDType.F32, what + " scales of '" + name + "'");
        WeightFormat channel = int4 ? WeightFormat.INT4_CHANNEL : WeightFormat.INT8_CHANNEL;
        WeightFormat group = int4 ? WeightFormat.INT4_GROUP128 : WeightFormat.INT8_GROUP128;
        List<Long> shape = s.shape();
        boolean oneColumn = shape.size() == 1 || (shape.size() == 2 && shape.get(1) == 1);
        if (oneColumn && !(k == 128 && shape.size() == 2 && group.text().equals(file.metadata().get(ExpertTensors.FORMAT_METADATA_KEY)))) {
            requireChannelShape(sf, s, n, what + " channel scales of '" + name + "'");
            return new Source(name, file, channel, n, k, null, scaleName, false);
        }
        requireDivisible(file, name, k, 128, what + " group128");
        requireShape(sf, s, List.of((long) n, (long) k / 128), what + " group scales of '" + name + "' [" + n + ", " + k + "]"
                + " (or [" + n + ", 1] per channel)");
        return new Source(name, file, group, n, k, scaleName, null, false);
    }

    /**
     * Every expert, and gate and up, in the first one's format and shape; gate/up whose row blocks
     * would straddle the two projections once fused are refused.
     */
    private static void requireAgreement(List<List<Source>> sources) {
        Source first = sources.getFirst().getFirst();
        WeightFormat f = first.format();
        int parts = sources.getFirst().size();
        for (List<Source> expert : sources) {
            for (Source s : expert) {
                if (!s.format().equals(f) || s.rows() != first.rows() || s.cols() != first.cols()) {
                    throw SafetensorsFile.fail(s.file().path(), s.weight(), "is " + s.describe() + " but '" + first.weight()
                            + "' (in " + first.file().path().getFileName() + ") is " + first.describe()
                            + "; all experts of a layer, and gate and up, must agree in format and shape");
                }
            }
        }
        if (parts > 1 && f.blockScale().blockRows() && first.rows() % f.blockScale().block() != 0) {
            throw SafetensorsFile.fail(first.file().path(), first.weight(), f.text() + " gate/up of " + first.rows()
                    + " rows cannot be fused: a " + f.blockScale().block() + "-row scale block would straddle gate and up"
                    + " (needs I % " + f.blockScale().block() + " == 0)");
        }
    }

    /** Concatenates per expert, per projection sources, checked by {@link #requireAgreement}, into one {@code [E][P*N][K]} weight. */
    private static EncodedWeights concat(Checkpoint ckpt, List<List<Source>> sources, Projections projections) {
        Source first = sources.getFirst().getFirst();
        WeightFormat f = first.format();
        int parts = sources.getFirst().size();
        int experts = sources.size();
        int rows = first.rows();
        int cols = first.cols();
        long rowBytes = f.rowBytes(cols);
        long codeBytes = rowBytes * rows;
        long blockBytes = f.blockScale().perExpert(rows, cols) * f.blockScale().bytes();
        int rowScales = switch (f.rowScale()) {
            case NONE -> 0;
            case PER_ROW -> rows;
            case PER_TENSOR -> 1;
        };
        long totalCodes = codeBytes * parts * experts;
        if (totalCodes > MAX_ARRAY_LENGTH) {
            throw SafetensorsFile.fail(first.file().path(), first.weight(), "the fused weight of " + experts + " experts would take "
                    + totalCodes + " bytes, more than one Java array holds");
        }
        if (blockBytes * parts * experts > MAX_ARRAY_LENGTH) {
            throw SafetensorsFile.fail(first.file().path(), first.weight(), "the fused block scales of " + experts
                    + " experts would be more than one Java array holds");
        }
        byte[] codes = new byte[(int) totalCodes];
        byte[] blocks = new byte[(int) (blockBytes * parts * experts)];
        float[] scales = new float[rowScales * parts * experts];
        int ci = 0;
        int bi = 0;
        int si = 0;
        for (List<Source> expert : sources) {
            for (Source s : expert) {
                readCodes(ckpt, s, codes, ci);
                ci += (int) codeBytes;
                if (s.blockScales() != null) {
                    MemorySegment.copy(ckpt.data(s.blockScales()), 0, MemorySegment.ofArray(blocks), bi, blockBytes);
                    bi += (int) blockBytes;
                }
                if (s.rowScales() != null) {
                    float[] r = ckpt.f32(s.rowScales());
                    if (s.broadcastRowScale()) {
                        Arrays.fill(scales, si, si + rowScales, r[0]);
                    } else {
                        System.arraycopy(r, 0, scales, si, rowScales);
                    }
                    si += rowScales;
                }
            }
        }
        return new EncodedWeights(f, experts, rows * parts, cols, projections, codes, blocks, scales);
    }

    /** Copies a source's codes; float weights become BF16 (F32 and F16 rounded to nearest even). */
    private static void readCodes(Checkpoint ckpt, Source s, byte[] codes, int offset) {
        MemorySegment data = ckpt.data(s.weight());
        SafetensorsDType dt = ckpt.tensor(s.weight()).dtype();
        if (dt == SafetensorsDType.F32 || dt == SafetensorsDType.F16) {
            long n = (long) s.rows() * s.cols();
            for (long i = 0; i < n; i++) {
                putBf16(codes, offset + 2 * i, FloatRows.at(data, dt, i));
            }
        } else {
            MemorySegment.copy(data, 0, MemorySegment.ofArray(codes), offset, data.byteSize());
        }
    }

    // ---------------------------------------------------------------- fused

    private static Located locateGptOssMxfp4(Checkpoint ckpt, String p, int experts) {
        String guBlocks = p + ".gate_up_proj" + BLOCKS;
        String dnBlocks = p + ".down_proj" + BLOCKS;
        TensorInfo gu = require(ckpt, dnBlocks, guBlocks, "its gate_up partner '" + guBlocks + "'");
        TensorInfo dn = require(ckpt, guBlocks, dnBlocks, "gpt-oss MXFP4 experts need it beside '" + guBlocks + "'");
        int[] guShape = blocksShape(ckpt, gu, experts);
        int[] dnShape = blocksShape(ckpt, dn, experts);
        int twoI = guShape[0];
        int h = guShape[1];
        if (twoI % 2 != 0 || dnShape[0] != h || dnShape[1] != twoI / 2) {
            throw SafetensorsFile.fail(ckpt.fileOf(dnBlocks).path(), dnBlocks, "holds [E, " + dnShape[0] + ", " + dnShape[1]
                    + "] weights but '" + guBlocks + "' holds [E, " + twoI + ", " + h + "]; need gate_up [E, 2I, H] and down [E, H, I]");
        }
        requireMxScales(ckpt, p + ".gate_up_proj", experts, twoI, h);
        requireMxScales(ckpt, p + ".down_proj", experts, h, twoI / 2);
        Optional<TensorInfo> guBias = requireBias(ckpt, p + ".gate_up_proj" + BIAS, experts, twoI);
        Optional<TensorInfo> dnBias = requireBias(ckpt, p + ".down_proj" + BIAS, experts, h);
        return c -> new LayerWeights(fusedMx(c, p + ".gate_up_proj", experts, twoI, h, Projections.INTERLEAVED_GATE_UP),
                fusedMx(c, p + ".down_proj", experts, h, twoI / 2, Projections.ONE), GateUpLayout.INTERLEAVED,
                readBias(c, guBias), readBias(c, dnBias));
    }

    /** Checks {@code [E, N, K/32, 16]} U8 blocks; returns {N, K}. */
    private static int[] blocksShape(Checkpoint ckpt, TensorInfo t, int experts) {
        SafetensorsFile f = ckpt.fileOf(t.name());
        requireDtype(f, t, SafetensorsDType.U8, "MXFP4 blocks");
        List<Long> s = t.shape();
        if (s.size() != 4 || s.get(3) != 16) {
            throw SafetensorsFile.fail(f.path(), t.name(), "shape " + s + ": MXFP4 blocks must be [E, N, K/32, 16]");
        }
        requireExperts(f, t, experts);
        return new int[] {dim(f, t, 1), Math.multiplyExact(dim(f, t, 2), 32)};
    }

    /** The E8M0 scales {@code proj_scales [E, N, K/32]} of the MXFP4 blocks {@code proj_blocks}. */
    private static void requireMxScales(Checkpoint ckpt, String proj, int experts, int n, int k) {
        String blocksName = proj + BLOCKS;
        String scalesName = proj + SCALES;
        TensorInfo scales = require(ckpt, blocksName, scalesName, "the MXFP4 blocks '" + blocksName + "' need their E8M0 scales");
        SafetensorsFile sf = ckpt.fileOf(scalesName);
        if (scales.dtype() != SafetensorsDType.U8 && scales.dtype() != SafetensorsDType.F8_E8M0) {
            throw SafetensorsFile.fail(sf.path(), scalesName, "dtype " + scales.dtype() + ": MXFP4 scales must be U8 or F8_E8M0");
        }
        requireShape(sf, scales, List.of((long) experts, (long) n, (long) k / 32), "E8M0 scales of '" + blocksName + "'");
    }

    /** The blocks and scales of {@code proj}, checked by {@link #requireMxScales}, as they are. */
    private static EncodedWeights fusedMx(Checkpoint ckpt, String proj, int experts, int n, int k, Projections projections) {
        String blocksName = proj + BLOCKS;
        String scalesName = proj + SCALES;
        long codeBytes = (long) experts * n * (k / 2);
        if (codeBytes > MAX_ARRAY_LENGTH) {
            throw SafetensorsFile.fail(ckpt.fileOf(blocksName).path(), blocksName, codeBytes + " bytes: more than one Java array holds");
        }
        byte[] codes = ckpt.bytes(blocksName);
        byte[] blockScales = ckpt.bytes(scalesName);
        return new EncodedWeights(WeightFormat.MXFP4, experts, n, k, projections, codes, blockScales, new float[0]);
    }

    private static Located locateFusedFloat(Checkpoint ckpt, String p, int experts) {
        FusedFloatExperts fused = FusedFloatExperts.find(ckpt, p);
        requireExperts(ckpt.fileOf(fused.gateUp().name()), fused.gateUp(), experts);
        int h = fused.hidden();
        int i = fused.intermediate();
        Optional<TensorInfo> guBias = requireBias(ckpt, p + ".gate_up_proj" + BIAS, experts, 2 * i);
        Optional<TensorInfo> dnBias = requireBias(ckpt, p + ".down_proj" + BIAS, experts, h);
        return c -> new LayerWeights(
                fusedBf16(c, fused.gateUpRows(c), !fused.transposed(), experts, 2 * i, h, Projections.of(fused.layout())),
                fusedBf16(c, fused.downRows(c), !fused.transposed(), experts, h, i, Projections.ONE),
                fused.layout(), readBias(c, guBias), readBias(c, dnBias));
    }

    /**
     * A fused float weight as BF16 {@code [E][n][k]}: BF16 values as they are, F16 and F32 rounded to
     * nearest even; {@code rowMajor}: stored exactly so, copied in one go if BF16.
     */
    private static EncodedWeights fusedBf16(Checkpoint ckpt, FloatRows rows, boolean rowMajor, int experts, int n, int k,
                                            Projections projections) {
        TensorInfo t = rows.tensor();
        long count = (long) experts * n * k;
        if (2 * count > MAX_ARRAY_LENGTH) {
            throw SafetensorsFile.fail(ckpt.fileOf(t.name()).path(), t.name(), 2 * count + " bytes of BF16: more than one Java array holds");
        }
        MemorySegment data = rows.data();
        byte[] codes = new byte[(int) (2 * count)];
        if (rowMajor && t.dtype() == SafetensorsDType.BF16) {
            MemorySegment.copy(data, 0, MemorySegment.ofArray(codes), 0, codes.length);
        } else {
            for (int e = 0; e < experts; e++) {
                for (int r = 0; r < n; r++) {
                    long out = ((long) e * n + r) * k;
                    for (int c = 0; c < k; c++) {
                        long src = rows.index(e, r, c);
                        if (t.dtype() == SafetensorsDType.BF16) {
                            short bits = data.get(I16_LE, 2 * src);
                            codes[(int) (2 * (out + c))] = (byte) bits;
                            codes[(int) (2 * (out + c)) + 1] = (byte) (bits >>> 8);
                        } else {
                            putBf16(codes, 2 * (out + c), FloatRows.at(data, t.dtype(), src));
                        }
                    }
                }
            }
        }
        return new EncodedWeights(WeightFormat.BF16, experts, n, k, projections, codes, new byte[0], new float[0]);
    }

    /** The expert bias {@code name} {@code [E, n]}, if the checkpoint has one; a float. */
    private static Optional<TensorInfo> requireBias(Checkpoint ckpt, String name, int experts, int n) {
        Optional<TensorInfo> t = ckpt.find(name);
        if (t.isEmpty()) {
            return Optional.empty();
        }
        SafetensorsFile f = ckpt.fileOf(name);
        TensorInfo b = t.get();
        if (!FloatRows.isFloat(b.dtype())) {
            throw SafetensorsFile.fail(f.path(), name, "dtype " + b.dtype() + ": expert biases are read as BF16, F16 or F32");
        }
        requireShape(f, b, List.of((long) experts, (long) n), "expert bias");
        return t;
    }

    private static Optional<float[]> readBias(Checkpoint ckpt, Optional<TensorInfo> bias) {
        if (bias.isEmpty()) {
            return Optional.empty();
        }
        TensorInfo b = bias.get();
        MemorySegment data = ckpt.data(b.name());
        float[] out = new float[Math.toIntExact(b.numel())];
        for (int i = 0; i < out.length; i++) {
            out[i] = FloatRows.at(data, b.dtype(), i);
        }
        return Optional.of(out);
    }

    // ---------------------------------------------------------------- helpers

    private static void putBf16(byte[] out, long byteIndex, float v) {
        short bits = Bf16.fromFloat(v);
        out[(int) byteIndex] = (byte) bits;
        out[(int) byteIndex + 1] = (byte) (bits >>> 8);
    }
}
