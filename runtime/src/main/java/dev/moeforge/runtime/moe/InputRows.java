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
     * ({@code residualOut} must not be {@code residual}: other blocks may still be reading it).
     */
    record Normed(DeviceBuffer residual, DeviceBuffer addend, DeviceBuffer normWeight, DeviceBuffer residualOut,
                  DeviceBuffer normedOut) implements InputRows {
        public Normed {
            if (residual == residualOut) {
                throw new IllegalArgumentException("residualOut is the residual's buffer: the kernel's blocks read the residual "
                        + "while one of them writes residual_out, so give it another buffer");
            }
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
