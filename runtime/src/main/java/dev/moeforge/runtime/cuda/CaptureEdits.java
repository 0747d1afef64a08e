package dev.moeforge.runtime.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import jcuda.driver.CUresult;

/**
 * Edits of the graph a stream is capturing, for work whose shape is not a chain: the nodes the
 * stream's next work depends on (read and set), an empty node joining several branches, and a
 * captured kernel node made device-updatable (a kernel earlier in the graph may then enable or
 * disable it on the device). Bound through Java's FFM API (JCuda 12.0 has none of these calls);
 * {@code CUkernelNodeAttrValue} is cuda.h's 64-byte launch attribute union, whose
 * {@code deviceUpdatableKernelNode} is an int flag and, at byte 8, the device handle.
 */
public final class CaptureEdits {
    private static final int CAPTURE_ACTIVE = 1;
    private static final int SET_CAPTURE_DEPENDENCIES = 1;
    private static final int ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE = 13;
    private static final long ATTRIBUTE_VALUE_BYTES = 64;

    private CaptureEdits() {}

    private static final class Binding {
        static final MethodHandle CAPTURE_INFO;
        static final MethodHandle UPDATE_DEPENDENCIES;
        static final MethodHandle ADD_EMPTY_NODE;
        static final MethodHandle SET_KERNEL_ATTRIBUTE;
        static final MethodHandle GET_KERNEL_ATTRIBUTE;

        static {
            SymbolLookup cuda = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
            Linker linker = Linker.nativeLinker();
            ValueLayout a = ValueLayout.ADDRESS;
            ValueLayout i = ValueLayout.JAVA_INT;
            ValueLayout l = ValueLayout.JAVA_LONG;
            CAPTURE_INFO = linker.downcallHandle(find(cuda, "cuStreamGetCaptureInfo_v3"), FunctionDescriptor.of(i, a, a, a, a, a, a, a));
            UPDATE_DEPENDENCIES = linker.downcallHandle(find(cuda, "cuStreamUpdateCaptureDependencies_v2"),
                    FunctionDescriptor.of(i, a, a, a, l, i));
            ADD_EMPTY_NODE = linker.downcallHandle(find(cuda, "cuGraphAddEmptyNode"), FunctionDescriptor.of(i, a, a, a, l));
            SET_KERNEL_ATTRIBUTE = linker.downcallHandle(find(cuda, "cuGraphKernelNodeSetAttribute"), FunctionDescriptor.of(i, a, i, a));
            GET_KERNEL_ATTRIBUTE = linker.downcallHandle(find(cuda, "cuGraphKernelNodeGetAttribute"), FunctionDescriptor.of(i, a, i, a));
        }

        private static MemorySegment find(SymbolLookup cuda, String name) {
            return cuda.find(name).orElseThrow(() -> new IllegalStateException("libcuda.so.1 has no " + name
                    + ": editing a captured graph needs a CUDA 12.4 or newer driver"));
        }
    }

    /** What the stream's capture is building: its graph and the nodes the next captured work depends on. */
    record Capture(MemorySegment graph, MemorySegment dependencies, MemorySegment edgeData, long count) {
        long[] nodes() {
            return count == 0 ? new long[0] : dependencies.reinterpret(8 * count).toArray(ValueLayout.JAVA_LONG);
        }
    }

    static Capture capture(CudaStream stream, Arena arena) {
        MemorySegment status = arena.allocate(ValueLayout.JAVA_INT);
        MemorySegment graph = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment deps = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment edges = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment count = arena.allocate(ValueLayout.JAVA_LONG);
        call("cuStreamGetCaptureInfo", () -> (int) Binding.CAPTURE_INFO.invokeExact(stream(stream), status, MemorySegment.NULL,
                graph, deps, edges, count));
        if (status.get(ValueLayout.JAVA_INT, 0) != CAPTURE_ACTIVE) {
            throw new IllegalStateException("this edit goes into a graph being captured: capture the stream first (CudaGraph.capture)");
        }
        return new Capture(graph.get(ValueLayout.ADDRESS, 0), deps.get(ValueLayout.ADDRESS, 0), edges.get(ValueLayout.ADDRESS, 0),
                count.get(ValueLayout.JAVA_LONG, 0));
    }

    /** The nodes the next work captured on {@code stream} will depend on. */
    public static long[] dependencies(CudaStream stream) {
        try (Arena arena = Arena.ofConfined()) {
            return capture(stream, arena).nodes();
        }
    }

    /** Makes the next work captured on {@code stream} depend on {@code nodes} alone. */
    public static void setDependencies(CudaStream stream, long... nodes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment list = arena.allocateFrom(ValueLayout.JAVA_LONG, nodes);
            call("cuStreamUpdateCaptureDependencies", () -> (int) Binding.UPDATE_DEPENDENCIES.invokeExact(stream(stream), list,
                    MemorySegment.NULL, (long) nodes.length, SET_CAPTURE_DEPENDENCIES));
        }
    }

    /** Adds an empty node after {@code nodes} and makes the stream's next work depend on it alone. */
    public static void join(CudaStream stream, long... nodes) {
        try (Arena arena = Arena.ofConfined()) {
            Capture c = capture(stream, arena);
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment list = arena.allocateFrom(ValueLayout.JAVA_LONG, nodes);
            call("cuGraphAddEmptyNode", () -> (int) Binding.ADD_EMPTY_NODE.invokeExact(out, c.graph(), list, (long) nodes.length));
            setDependencies(stream, out.get(ValueLayout.JAVA_LONG, 0));
        }
    }

    /**
     * Makes the captured kernel node {@code node} device-updatable and returns its device handle
     * (a {@code cudaGraphDeviceNode_t}, for {@code cudaGraphKernelNodeSetEnabled} in a kernel). A graph
     * holding such a node is instantiated once and uploaded before its first launch ({@link CudaGraph}
     * does both).
     */
    public static long deviceUpdatable(long node) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocate(ATTRIBUTE_VALUE_BYTES, 8);
            value.set(ValueLayout.JAVA_INT, 0, 1);
            MemorySegment n = MemorySegment.ofAddress(node);
            call("cuGraphKernelNodeSetAttribute(device-updatable)", () -> (int) Binding.SET_KERNEL_ATTRIBUTE.invokeExact(n,
                    ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, value));
            MemorySegment out = arena.allocate(ATTRIBUTE_VALUE_BYTES, 8);
            call("cuGraphKernelNodeGetAttribute(device-updatable)", () -> (int) Binding.GET_KERNEL_ATTRIBUTE.invokeExact(n,
                    ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, out));
            long handle = out.get(ValueLayout.JAVA_LONG, 8);
            if (out.get(ValueLayout.JAVA_INT, 0) != 1 || handle == 0) {
                throw new CudaException("cuGraphKernelNodeGetAttribute(device-updatable)", "the node did not become device-updatable", null);
            }
            return handle;
        }
    }

    static MemorySegment stream(CudaStream s) {
        return MemorySegment.ofAddress(LaunchKernelEx.address(s.handle()));
    }

    interface DriverCall {
        int invoke() throws Throwable;
    }

    static void call(String name, DriverCall c) {
        int result;
        try {
            result = c.invoke();
        } catch (RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new CudaException(name, "not callable: " + e, e);
        }
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(name, CUresult.stringFor(result), null);
        }
    }
}
