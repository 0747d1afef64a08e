package dev.moeforge.runtime.moe;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.kernel.KernelHandle;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
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

    /**
     * A {@code linear} kernel's launch arguments in signature order: these rows, the matrix (then its
     * bias where it has one) from {@code weights}, and {@code y}. Refuses rows of the other kind and
     * a weight count other than the kernel's.
     */
    default DeviceBuffer[] linearArguments(KernelHandle linear, List<DeviceBuffer> weights, DeviceBuffer y) {
        requireFor(linear.spec().problem(), linear.spec().name());
        Iterator<DeviceBuffer> w = weights.iterator();
        List<DeviceBuffer> args = new ArrayList<>();
        for (KernelParam p : linear.signature().tensors()) {
            Optional<DeviceBuffer> own = bind(p);
            if (own.isPresent()) {
                args.add(own.get());
                continue;
            }
            args.add(switch (p.role()) {
                case WEIGHTS -> {
                    if (!w.hasNext()) {
                        throw new IllegalArgumentException("linear kernel " + linear.spec().name() + " takes more weight buffers than the "
                                + weights.size() + " given");
                    }
                    yield w.next();
                }
                case OUTPUT -> y;
                case INPUT, ROUTING, WORKSPACE, TOKEN_COUNT, TENSOR_MAP -> throw new IllegalStateException("a linear kernel has no "
                        + p.role() + " tensor " + p.name());
            });
        }
        if (w.hasNext()) {
            throw new IllegalArgumentException("linear kernel " + linear.spec().name() + " takes fewer weight buffers than the "
                    + weights.size() + " given");
        }
        return args.toArray(DeviceBuffer[]::new);
    }

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
            for (DeviceBuffer read : List.of(residual, addend, normWeight)) {
                for (DeviceBuffer written : List.of(residualOut, normedOut)) {
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
