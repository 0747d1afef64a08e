package dev.moeforge.checkpoint;

import java.nio.file.Path;
import java.util.List;

/** Checks of a tensor's presence, dtype and shape that fail naming the tensor and its file. */
final class TensorChecks {

    private TensorChecks() {}

    /** Tensor {@code name}; its absence is reported in the file of {@code beside}, the tensor that needs it. */
    static TensorInfo require(Checkpoint ckpt, String beside, String name, String why) {
        return ckpt.find(name).orElseThrow(() -> SafetensorsFile.fail(ckpt.fileOf(beside).path(), name,
                "not in this checkpoint: " + why));
    }

    static void requireExperts(SafetensorsFile f, TensorInfo t, int experts) {
        if (t.shape().getFirst() != experts) {
            throw SafetensorsFile.fail(f.path(), t.name(), "holds " + t.shape().getFirst() + " experts (shape " + t.shape()
                    + "), " + experts + " were asked for");
        }
    }

    static void requireDtype(SafetensorsFile f, TensorInfo t, SafetensorsDType dtype, String what) {
        if (t.dtype() != dtype) {
            throw SafetensorsFile.fail(f.path(), t.name(), "dtype " + t.dtype() + ": " + what + " must be " + dtype);
        }
    }

    static void requireShape(SafetensorsFile f, TensorInfo t, List<Long> shape, String what) {
        if (!t.shape().equals(shape)) {
            throw SafetensorsFile.fail(f.path(), t.name(), "shape " + t.shape() + ": " + what + " must be " + shape);
        }
    }

    static void requireChannelShape(SafetensorsFile f, TensorInfo t, int n, String what) {
        List<Long> s = t.shape();
        boolean ok = (s.size() == 1 && s.getFirst() == n) || (s.size() == 2 && s.get(0) == n && s.get(1) == 1);
        if (!ok) {
            throw SafetensorsFile.fail(f.path(), t.name(), "shape " + s + ": " + what + " must be [" + n + ", 1] or [" + n + "]");
        }
    }

    static void requireDivisible(SafetensorsFile f, String weight, int k, int block, String what) {
        if (k % block != 0) {
            throw SafetensorsFile.fail(f.path(), weight, "rows of " + k + " elements are not whole blocks of " + block
                    + " (" + what + ")");
        }
    }

    static int dim(SafetensorsFile f, TensorInfo t, int i) {
        long d = t.shape().get(i);
        if (d > Integer.MAX_VALUE) {
            throw SafetensorsFile.fail(f.path(), t.name(), "dimension " + i + " of shape " + t.shape() + " is too large");
        }
        return (int) d;
    }

    /**
     * Checks that tensor {@code name} is BF16, F16 or F32 with {@code dims} dimensions ({@code [out, in]},
     * or {@code [E, out, in]} fused), the expert weights read as floats.
     */
    static TensorInfo requireFloat(Checkpoint ckpt, String name, int dims) {
        TensorInfo t = ckpt.tensor(name);
        Path file = ckpt.fileOf(name).path();
        if (!FloatRows.isFloat(t.dtype())) {
            throw SafetensorsFile.fail(file, name, "dtype " + t.dtype() + ": expert weights read as floats must be BF16, "
                    + "F16 or F32 (is the checkpoint already quantised?)");
        }
        if (t.shape().size() != dims) {
            throw SafetensorsFile.fail(file, name, "shape " + t.shape() + ": expected " + dims + "-D "
                    + (dims == 2 ? "[out, in]" : "[E, out, in]"));
        }
        return t;
    }
}
