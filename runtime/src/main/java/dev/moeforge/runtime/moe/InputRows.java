package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.util.Optional;

/**
 * What a router or linear kernel reads its activation rows from: {@code x} as given, or, for a
 * problem with an input norm, the residual stream it makes them from and the two tensors it
 * writes on the way ({@link dev.moeforge.dsl.ir.InputNorm}).
 */
public sealed interface InputRows {

    /** The buffer this holds for the kernel parameter {@code p}, if {@code p} is one of the input's. */
    Optional<DeviceBuffer> bind(KernelParam p);

    /** Refuses rows of the other kind than the problem reads. */
    void requireFor(Problem problem, String kernel);

    /** {@code x [M][K]} as given. */
    record Given(DeviceBuffer x) implements InputRows {
        @Override
        public Optional<DeviceBuffer> bind(KernelParam p) {
            return p.name().equals(KernelSignature.X) ? Optional.of(x) : Optional.empty();
        }

        @Override
        public void requireFor(Problem problem, String kernel) {
            if (problem.inputNorm().isPresent()) {
                throw new IllegalArgumentException("kernel " + kernel + " norms its input (input_norm): give it the residual, "
                        + "the addend, the norm's weight and the two outputs (InputRows.Normed), not x");
            }
        }
    }

    /**
     * The residual stream {@code [M][K]} FP32, the branch output added to it, the norm's FP32
     * weight {@code [K]}, and where the kernel writes residual + addend and the normed rows
     * (neither may share memory with the inputs: other blocks may still be reading them).
     */
    record Normed(DeviceBuffer residual, DeviceBuffer addend, DeviceBuffer normWeight, DeviceBuffer residualOut,
                  DeviceBuffer normedOut) implements InputRows {
        public Normed {
            for (DeviceBuffer read : java.util.List.of(residual, addend, normWeight)) {
                for (DeviceBuffer written : java.util.List.of(residualOut, normedOut)) {
                    if (overlap(read, written)) {
                        throw new IllegalArgumentException("an output of the input norm shares memory with its inputs ("
                                + written + " and " + read + "): the kernel's blocks read the inputs while one of them "
                                + "writes the outputs, so give the outputs buffers of their own");
                    }
                }
            }
        }

        private static boolean overlap(DeviceBuffer a, DeviceBuffer b) {
            long a0 = a.devicePointerValue(), b0 = b.devicePointerValue();
            return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
        }

        @Override
        public Optional<DeviceBuffer> bind(KernelParam p) {
            return Optional.ofNullable(switch (p.name()) {
                case KernelSignature.RESIDUAL -> residual;
                case KernelSignature.ADDEND -> addend;
                case KernelSignature.NORM_WEIGHT -> normWeight;
                case KernelSignature.RESIDUAL_OUT -> residualOut;
                case KernelSignature.NORMED_OUT -> normedOut;
                default -> null;
            });
        }

        @Override
        public void requireFor(Problem problem, String kernel) {
            if (problem.inputNorm().isEmpty()) {
                throw new IllegalArgumentException("kernel " + kernel + " reads x as given (no input_norm): give it x "
                        + "(InputRows.Given), not a residual to norm");
            }
        }
    }
}
