package dev.moeforge.runtime.cuda;

import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.schedule.WeightTileMap;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.Arrays;
import jcuda.driver.CUresult;

/**
 * A CUDA tensor map (the copy engine's 128-byte description of a tensor in device memory), passed
 * to a kernel by value. Encoded by {@code cuTensorMapEncodeTiled}, bound through Java's FFM API as
 * JCuda 12.0 has none: bf16 elements, no interleave, the 128-byte swizzle, 256-byte L2 promotion,
 * zeros past the tensor's edges.
 */
public final class TensorMap {
    public static final int BYTES = KernelSignature.TENSOR_MAP_BYTES;

    // cuda.h's enums: CU_TENSOR_MAP_DATA_TYPE_UINT8 and _BFLOAT16, _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_L2_256B, _FLOAT_OOB_FILL_NONE
    private static final int DATA_TYPE_UINT8 = 0;
    private static final int DATA_TYPE_BFLOAT16 = 9;
    private static final int INTERLEAVE_NONE = 0;
    private static final int SWIZZLE_128B = 3;
    private static final int L2_PROMOTION_256B = 3;
    private static final int OOB_FILL_ZEROS = 0;

    private final byte[] bytes;

    private TensorMap(byte[] bytes) {
        if (bytes.length != BYTES) {
            throw new IllegalArgumentException("a tensor map is " + BYTES + " bytes, not " + bytes.length);
        }
        this.bytes = bytes;
    }

    /** The map's bytes, for a launch that passes them by pointer (not to be written). */
    byte[] bytes() {
        return bytes;
    }

    /** Writes the map into {@code target} (at least 128 bytes, 64-byte aligned for the driver). */
    void copyTo(MemorySegment target) {
        MemorySegment.copy(MemorySegment.ofArray(bytes), 0, target, 0, BYTES);
    }

    /** The map of the tensor (bf16, or 8-bit codes) at device address {@code address} as {@code map} describes it. */
    public static TensorMap encode(long address, WeightTileMap map) {
        if (address % 16 != 0) {
            throw new IllegalArgumentException("a tensor map's tensor starts on 16 bytes; address 0x" + Long.toHexString(address));
        }
        int rank = map.dims().size();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(BYTES, 64);
            MemorySegment dims = arena.allocateFrom(ValueLayout.JAVA_LONG, map.dims().stream().mapToLong(Long::longValue).toArray());
            MemorySegment strides = arena.allocateFrom(ValueLayout.JAVA_LONG,
                    map.strideBytes().isEmpty() ? new long[1] : map.strideBytes().stream().mapToLong(Long::longValue).toArray());
            MemorySegment box = arena.allocateFrom(ValueLayout.JAVA_INT, map.box().stream().mapToInt(Integer::intValue).toArray());
            int[] ones = new int[rank];
            Arrays.fill(ones, 1);
            MemorySegment elementStrides = arena.allocateFrom(ValueLayout.JAVA_INT, ones);
            int dataType = map.elementBytes() == 1 ? DATA_TYPE_UINT8 : DATA_TYPE_BFLOAT16;
            int result = (int) Binding.ENCODE.invokeExact(out, dataType, rank, MemorySegment.ofAddress(address), dims,
                    strides, box, elementStrides, INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_ZEROS);
            if (result != CUresult.CUDA_SUCCESS) {
                throw new CudaException("cuTensorMapEncodeTiled(dims " + map.dims() + ", strides " + map.strideBytes() + " B, box "
                        + map.box() + ")", CUresult.stringFor(result), null);
            }
            return new TensorMap(out.toArray(ValueLayout.JAVA_BYTE));
        } catch (CudaException e) {
            throw e;
        } catch (Throwable e) {
            throw new CudaException("cuTensorMapEncodeTiled", "not callable: " + e, e);
        }
    }

    /** libcuda's symbol, resolved on first use. */
    private static final class Binding {
        static final MethodHandle ENCODE;

        static {
            SymbolLookup cuda = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
            ENCODE = Linker.nativeLinker().downcallHandle(cuda.find("cuTensorMapEncodeTiled").orElseThrow(
                            () -> new IllegalStateException("libcuda.so.1 has no cuTensorMapEncodeTiled (driver older than CUDA 12.0)")),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                            ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS,
                            ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
        }
    }
}
