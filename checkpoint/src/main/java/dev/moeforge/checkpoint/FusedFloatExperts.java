package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.TensorChecks.dim;
import static dev.moeforge.checkpoint.TensorChecks.require;
import static dev.moeforge.checkpoint.TensorChecks.requireFloat;

import dev.moeforge.dsl.ir.GateUpLayout;

/**
 * transformers' fused float experts of one layer, {@code P.gate_up_proj} and {@code P.down_proj}
 * (BF16, F16 or F32), in either orientation: nn.Linear's {@code [E, 2I, H]} with {@code [E, H, I]}
 * (gate rows, then up rows: {@link GateUpLayout#STACKED}), or gpt-oss's transposed
 * {@code [E, H, 2I]} with {@code [E, I, H]} (gate and up rows {@link GateUpLayout#INTERLEAVED}).
 *
 * @param prefix the experts' prefix {@code P}, e.g. {@code model.layers.0.mlp.experts}
 */
record FusedFloatExperts(String prefix, TensorInfo gateUp, TensorInfo down, int experts, int hidden, int intermediate,
                         boolean transposed) {

    /**
     * Finds the pair under {@code prefix}, one of which exists.
     *
     * @throws CheckpointException naming the tensor and its file: the other one missing, not a float, not
     *     3-D, a different expert count, or shapes that do not pair
     */
    static FusedFloatExperts find(Checkpoint ckpt, String prefix) {
        String guName = prefix + ".gate_up_proj";
        String dnName = prefix + ".down_proj";
        if (ckpt.find(guName).isEmpty()) {
            require(ckpt, dnName, guName, "fused experts need it beside '" + dnName + "'");
        }
        require(ckpt, guName, dnName, "fused experts need it beside '" + guName + "'");
        TensorInfo gu = requireFloat(ckpt, guName, 3);
        TensorInfo dn = requireFloat(ckpt, dnName, 3);
        SafetensorsFile guf = ckpt.fileOf(guName);
        SafetensorsFile dnf = ckpt.fileOf(dnName);
        int e = dim(guf, gu, 0);
        if (dn.shape().getFirst() != e) {
            throw SafetensorsFile.fail(dnf.path(), dnName, dn.shape().getFirst() + " experts, but '" + guName + "' has " + e);
        }
        int a = dim(guf, gu, 1);
        int b = dim(guf, gu, 2);
        int c = dim(dnf, dn, 1);
        int d = dim(dnf, dn, 2);
        if (a == 2 * d && b == c) {           // [E, 2I, H] and [E, H, I]
            return new FusedFloatExperts(prefix, gu, dn, e, b, d, false);
        }
        if (b == 2 * c && a == d) {           // gpt-oss: [E, H, 2I] and [E, I, H]
            return new FusedFloatExperts(prefix, gu, dn, e, a, c, true);
        }
        throw SafetensorsFile.fail(dnf.path(), dnName, "shape " + dn.shape() + " does not pair with '" + guName + "' "
                + gu.shape() + ": need [E, 2I, H] with [E, H, I], or gpt-oss's [E, H, 2I] with [E, I, H]");
    }

    GateUpLayout layout() {
        return transposed ? GateUpLayout.INTERLEAVED : GateUpLayout.STACKED;
    }

    /** gate_up's rows, {@code [E][2I][H]} in {@link #layout()}'s order. */
    FloatRows gateUpRows(Checkpoint ckpt) {
        return rows(ckpt, gateUp, 2 * intermediate, hidden);
    }

    /** down's rows, {@code [E][H][I]}. */
    FloatRows downRows(Checkpoint ckpt) {
        return rows(ckpt, down, hidden, intermediate);
    }

    /** An {@code [E][n][k]} weight, stored so, or as {@code [E][k][n]} when transposed. */
    private FloatRows rows(Checkpoint ckpt, TensorInfo t, long n, long k) {
        return transposed
                ? new FloatRows(t, ckpt.data(t.name()), 0, n * k, 1, n)
                : new FloatRows(t, ckpt.data(t.name()), 0, n * k, k, 1);
    }
}
