package dev.moeforge.runtime.kernel;

import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;

/**
 * The quantise entry point of a W8A8 gate_up kernel's module: one launch that turns x (bf16
 * [M][H]) into the quantised rows the kernel multiplies ({@link Fp8ActivationRows}), on the device.
 */
public final class ActivationQuantiser {
    private final CudaFunction quantise;
    private final int hidden;

    ActivationQuantiser(CudaFunction quantise, int hidden) {
        this.quantise = quantise;
        this.hidden = hidden;
    }

    /** Enqueues {@code out = quantise(x)} for {@code tokens} rows. */
    public void enqueue(CudaStream stream, LaunchOrder order, int tokens, DeviceBuffer x, DeviceBuffer out) {
        if (x.dtype() != DType.BF16 || x.elements() < (long) tokens * hidden) {
            throw new IllegalArgumentException("x must be bf16 [" + tokens + "][" + hidden + "], got " + x);
        }
        long bytes = (long) tokens * Fp8ActivationRows.rowBytes(hidden);
        if (out.dtype() != DType.U8 || out.elements() < bytes) {
            throw new IllegalArgumentException("quantised x must be u8 [" + bytes + "], got " + out);
        }
        quantise.launch(order, ExpertCentric.quantiseBlocks(tokens, hidden), 1, 1, ExpertCentric.QUANTISE_THREADS, 1, 1, 0, stream,
                x, out, tokens);
    }
}
