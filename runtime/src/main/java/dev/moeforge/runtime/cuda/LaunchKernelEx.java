package dev.moeforge.runtime.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import jcuda.NativePointerObject;
import jcuda.Pointer;
import jcuda.driver.CUresult;

/**
 * {@code cuLaunchKernelEx} with programmatic stream serialization (programmatic dependent launch,
 * sm_90+), bound through Java's FFM API because JCuda 12.0 has no binding for it. The kernel may
 * begin launching while the previous kernel in the stream is still running; it must execute
 * {@code griddepcontrol.wait} before it reads what that kernel wrote (every generated kernel
 * does, first thing). Inside stream capture the driver records a programmatic graph edge.
 *
 * <p>Layouts: {@code CUlaunchConfig} and {@code CUlaunchAttribute} of CUDA 12/13's cuda.h (a 4-byte
 * id padded to 8, then a 64-byte value union); {@code CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6}.
 */
final class LaunchKernelEx {
    private static final int PROGRAMMATIC_STREAM_SERIALIZATION = 6;

    private static final StructLayout ATTRIBUTE = MemoryLayout.structLayout(
            ValueLayout.JAVA_INT.withName("id"),
            MemoryLayout.paddingLayout(4),
            ValueLayout.JAVA_INT.withName("value"),
            MemoryLayout.paddingLayout(60));

    private static final StructLayout CONFIG = MemoryLayout.structLayout(
            ValueLayout.JAVA_INT.withName("gridDimX"),
            ValueLayout.JAVA_INT.withName("gridDimY"),
            ValueLayout.JAVA_INT.withName("gridDimZ"),
            ValueLayout.JAVA_INT.withName("blockDimX"),
            ValueLayout.JAVA_INT.withName("blockDimY"),
            ValueLayout.JAVA_INT.withName("blockDimZ"),
            ValueLayout.JAVA_INT.withName("sharedMemBytes"),
            MemoryLayout.paddingLayout(4),
            ValueLayout.ADDRESS.withName("hStream"),
            ValueLayout.ADDRESS.withName("attrs"),
            ValueLayout.JAVA_INT.withName("numAttrs"),
            MemoryLayout.paddingLayout(4));

    private static final VarHandle[] CONFIG_INTS = {
            field("gridDimX"), field("gridDimY"), field("gridDimZ"), field("blockDimX"), field("blockDimY"),
            field("blockDimZ"), field("sharedMemBytes")};
    private static final VarHandle STREAM = field("hStream");
    private static final VarHandle ATTRIBUTES = field("attrs");
    private static final VarHandle ATTRIBUTE_COUNT = field("numAttrs");

    private LaunchKernelEx() {}

    private static VarHandle field(String name) {
        return CONFIG.varHandle(MemoryLayout.PathElement.groupElement(name));
    }

    /** Resolved on first use: libcuda's symbol and JCuda's hidden native pointers. */
    private static final class Binding {
        static final MethodHandle LAUNCH;
        static final Method NATIVE_POINTER;
        static final Field BYTE_OFFSET;

        static {
            try {
                SymbolLookup cuda = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
                LAUNCH = Linker.nativeLinker().downcallHandle(cuda.find("cuLaunchKernelEx").orElseThrow(
                                () -> new IllegalStateException("libcuda.so.1 has no cuLaunchKernelEx (driver older than CUDA 12.0)")),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS,
                                ValueLayout.ADDRESS, ValueLayout.ADDRESS));
                NATIVE_POINTER = NativePointerObject.class.getDeclaredMethod("getNativePointer");
                NATIVE_POINTER.setAccessible(true);
                BYTE_OFFSET = Pointer.class.getDeclaredField("byteOffset");
                BYTE_OFFSET.setAccessible(true);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }
    }

    /** The address a JCuda handle or device pointer stands for. */
    static long address(NativePointerObject o) {
        if (o == null) {
            return 0;
        }
        try {
            long base = (long) Binding.NATIVE_POINTER.invoke(o);
            return o instanceof Pointer p ? base + (long) Binding.BYTE_OFFSET.get(p) : base;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot read JCuda's native pointer", e);
        }
    }

    /**
     * Launches {@code function} with programmatic stream serialization. {@code args}: a device
     * address ({@code Long} from {@link #address}) for a pointer parameter, an {@code Integer} for an
     * {@code int}, a {@code Float} for a {@code float}, a {@link TensorMap} for a tensor map (by value).
     */
    static void launch(NativePointerObject function, int[] gridBlockShared, NativePointerObject stream, Object[] args) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment attribute = arena.allocate(ATTRIBUTE);
            attribute.set(ValueLayout.JAVA_INT, 0, PROGRAMMATIC_STREAM_SERIALIZATION);
            attribute.set(ValueLayout.JAVA_INT, 8, 1);
            MemorySegment config = arena.allocate(CONFIG);
            for (int i = 0; i < CONFIG_INTS.length; i++) {
                CONFIG_INTS[i].set(config, 0L, gridBlockShared[i]);
            }
            STREAM.set(config, 0L, MemorySegment.ofAddress(address(stream)));
            ATTRIBUTES.set(config, 0L, attribute);
            ATTRIBUTE_COUNT.set(config, 0L, 1);
            MemorySegment params = arena.allocate(ValueLayout.ADDRESS, args.length);
            for (int i = 0; i < args.length; i++) {
                MemorySegment value = switch (args[i]) {
                    case Long address -> arena.allocateFrom(ValueLayout.JAVA_LONG, address);
                    case Integer v -> arena.allocateFrom(ValueLayout.JAVA_INT, v);
                    case Float v -> arena.allocateFrom(ValueLayout.JAVA_FLOAT, v);
                    case TensorMap map -> {
                        MemorySegment bytes = arena.allocate(TensorMap.BYTES, 64);
                        map.copyTo(bytes);
                        yield bytes;
                    }
                    default -> throw new IllegalArgumentException("argument " + i + ": " + args[i]);
                };
                params.setAtIndex(ValueLayout.ADDRESS, i, value);
            }
            int result = (int) Binding.LAUNCH.invokeExact(config, MemorySegment.ofAddress(address(function)), params,
                    MemorySegment.NULL);
            if (result != CUresult.CUDA_SUCCESS) {
                throw new CudaException("cuLaunchKernelEx(programmatic stream serialization)", CUresult.stringFor(result), null);
            }
        } catch (CudaException | IllegalArgumentException e) {
            throw e;
        } catch (Throwable e) {
            throw new CudaException("cuLaunchKernelEx(programmatic stream serialization)", "not callable: " + e, e);
        }
    }
}
