package dev.moeforge.runtime.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.List;
import jcuda.driver.CUresult;

/**
 * A switch inside a graph being captured: a conditional node (CUDA 12.8+ driver) whose value, set
 * on the device by a kernel earlier in the graph ({@code cudaGraphSetConditional}), picks which of
 * its bodies runs, so a decision made on the GPU needs no host read-back. Bound through Java's FFM
 * API (JCuda 12.0 has none of these calls); layouts as CUDA 13's cuda.h states them:
 * {@code CUgraphNodeParams} is 256 bytes (type, 12 reserved bytes, a 232-byte union, 8 reserved);
 * its {@code CUDA_CONDITIONAL_NODE_PARAMS} is a handle (8), type (4), size (4), the CUDA-owned
 * array of body graphs (8) and the context (8).
 */
public final class GraphSwitch {
    private static final int NODE_TYPE_CONDITIONAL = 13;
    private static final int CONDITIONAL_SWITCH = 2;
    private static final int ASSIGN_DEFAULT = 1;
    private static final int SET_CAPTURE_DEPENDENCIES = 1;
    private static final int CAPTURE_ACTIVE = 1;
    private static final int CAPTURE_MODE_THREAD_LOCAL = 1;
    private static final long NODE_PARAMS_BYTES = 256;

    private final long handle;
    private final int branches;

    private GraphSwitch(long handle, int branches) {
        this.handle = handle;
        this.branches = branches;
    }

    /** The value a kernel passes to {@code cudaGraphSetConditional} (a {@code cudaGraphConditionalHandle}). */
    public long handle() {
        return handle;
    }

    public int branches() {
        return branches;
    }

    private static final class Binding {
        static final MethodHandle HANDLE_CREATE;
        static final MethodHandle CAPTURE_INFO;
        static final MethodHandle ADD_NODE;
        static final MethodHandle UPDATE_DEPENDENCIES;
        static final MethodHandle BEGIN_CAPTURE_TO_GRAPH;
        static final MethodHandle END_CAPTURE;

        static {
            SymbolLookup cuda = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
            Linker linker = Linker.nativeLinker();
            ValueLayout a = ValueLayout.ADDRESS;
            ValueLayout i = ValueLayout.JAVA_INT;
            ValueLayout l = ValueLayout.JAVA_LONG;
            HANDLE_CREATE = linker.downcallHandle(find(cuda, "cuGraphConditionalHandleCreate"), FunctionDescriptor.of(i, a, a, a, i, i));
            CAPTURE_INFO = linker.downcallHandle(find(cuda, "cuStreamGetCaptureInfo_v3"), FunctionDescriptor.of(i, a, a, a, a, a, a, a));
            ADD_NODE = linker.downcallHandle(find(cuda, "cuGraphAddNode_v2"), FunctionDescriptor.of(i, a, a, a, a, l, a));
            UPDATE_DEPENDENCIES = linker.downcallHandle(find(cuda, "cuStreamUpdateCaptureDependencies_v2"),
                    FunctionDescriptor.of(i, a, a, a, l, i));
            BEGIN_CAPTURE_TO_GRAPH = linker.downcallHandle(find(cuda, "cuStreamBeginCaptureToGraph"), FunctionDescriptor.of(i, a, a, a, a, l, i));
            END_CAPTURE = linker.downcallHandle(find(cuda, "cuStreamEndCapture"), FunctionDescriptor.of(i, a, a));
        }

        private static MemorySegment find(SymbolLookup cuda, String name) {
            return cuda.find(name).orElseThrow(() -> new IllegalStateException("libcuda.so.1 has no " + name
                    + ": conditional graph nodes need a CUDA 12.8 or newer driver"));
        }
    }

    /** What the stream's capture is building: its graph and the nodes the next captured work depends on. */
    private record Capture(MemorySegment graph, MemorySegment dependencies, MemorySegment edgeData, long count) {}

    private static Capture capture(CudaStream stream, Arena arena) throws Throwable {
        MemorySegment status = arena.allocate(ValueLayout.JAVA_INT);
        MemorySegment graph = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment deps = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment edges = arena.allocate(ValueLayout.ADDRESS);
        MemorySegment count = arena.allocate(ValueLayout.JAVA_LONG);
        check("cuStreamGetCaptureInfo", (int) Binding.CAPTURE_INFO.invokeExact(stream(stream), status, MemorySegment.NULL, graph, deps,
                edges, count));
        if (status.get(ValueLayout.JAVA_INT, 0) != CAPTURE_ACTIVE) {
            throw new IllegalStateException("a graph switch goes into a graph being captured: capture the stream first (CudaGraph.capture)");
        }
        return new Capture(graph.get(ValueLayout.ADDRESS, 0), deps.get(ValueLayout.ADDRESS, 0), edges.get(ValueLayout.ADDRESS, 0),
                count.get(ValueLayout.JAVA_LONG, 0));
    }

    /**
     * A switch of {@code branches} bodies for the graph {@code stream} is capturing; each replay
     * starts it at {@code branches} (no body) until a kernel sets it. Create it before the kernel
     * that sets it is captured (the kernel takes {@link #handle()}).
     */
    public static GraphSwitch create(CudaStream stream, CudaContext context, int branches) {
        if (branches < 1) {
            throw new IllegalArgumentException("a switch of " + branches + " branches");
        }
        try (Arena arena = Arena.ofConfined()) {
            Capture c = capture(stream, arena);
            MemorySegment out = arena.allocate(ValueLayout.JAVA_LONG);
            check("cuGraphConditionalHandleCreate", (int) Binding.HANDLE_CREATE.invokeExact(out, c.graph(),
                    MemorySegment.ofAddress(LaunchKernelEx.address(context.handle())), branches, ASSIGN_DEFAULT));
            return new GraphSwitch(out.get(ValueLayout.JAVA_LONG, 0), branches);
        } catch (RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new CudaException("cuGraphConditionalHandleCreate", "not callable: " + e, e);
        }
    }

    /**
     * Adds the switch node after everything captured so far on {@code stream}, fills body i with
     * what {@code bodies.get(i)} queues on {@code bodyStream} (captured into that body), and makes
     * the stream's later work wait for the node.
     */
    public void insert(CudaStream stream, CudaContext context, CudaStream bodyStream, List<Runnable> bodies) {
        if (bodies.size() != branches) {
            throw new IllegalArgumentException(bodies.size() + " bodies for a switch of " + branches);
        }
        try (Arena arena = Arena.ofConfined()) {
            Capture c = capture(stream, arena);
            MemorySegment params = arena.allocate(NODE_PARAMS_BYTES, 8);  // zeroed
            params.set(ValueLayout.JAVA_INT, 0, NODE_TYPE_CONDITIONAL);
            long at = 16;  // the union
            params.set(ValueLayout.JAVA_LONG, at, handle);
            params.set(ValueLayout.JAVA_INT, at + 8, CONDITIONAL_SWITCH);
            params.set(ValueLayout.JAVA_INT, at + 12, branches);
            params.set(ValueLayout.ADDRESS, at + 24, MemorySegment.ofAddress(LaunchKernelEx.address(context.handle())));
            MemorySegment node = arena.allocate(ValueLayout.ADDRESS);
            check("cuGraphAddNode(conditional switch)", (int) Binding.ADD_NODE.invokeExact(node, c.graph(), c.dependencies(),
                    c.edgeData(), c.count(), params));
            MemorySegment bodiesOut = params.get(ValueLayout.ADDRESS, at + 16).reinterpret(8L * branches);
            for (int i = 0; i < branches; i++) {
                MemorySegment body = bodiesOut.getAtIndex(ValueLayout.ADDRESS, i);
                check("cuStreamBeginCaptureToGraph(switch body " + i + ")", (int) Binding.BEGIN_CAPTURE_TO_GRAPH.invokeExact(
                        stream(bodyStream), body, MemorySegment.NULL, MemorySegment.NULL, 0L, CAPTURE_MODE_THREAD_LOCAL));
                MemorySegment captured = arena.allocate(ValueLayout.ADDRESS);
                try {
                    bodies.get(i).run();
                } finally {
                    check("cuStreamEndCapture(switch body " + i + ")", (int) Binding.END_CAPTURE.invokeExact(stream(bodyStream), captured));
                }
            }
            check("cuStreamUpdateCaptureDependencies", (int) Binding.UPDATE_DEPENDENCIES.invokeExact(stream(stream), node,
                    MemorySegment.NULL, 1L, SET_CAPTURE_DEPENDENCIES));
        } catch (RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new CudaException("graph switch", "not callable: " + e, e);
        }
    }

    private static MemorySegment stream(CudaStream s) {
        return MemorySegment.ofAddress(LaunchKernelEx.address(s.handle()));
    }

    private static void check(String call, int result) {
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(call, CUresult.stringFor(result), null);
        }
    }
}
