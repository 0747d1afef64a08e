package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuGraphDestroy;
import static jcuda.driver.JCudaDriver.cuGraphExecDestroy;
import static jcuda.driver.JCudaDriver.cuGraphInstantiate;
import static jcuda.driver.JCudaDriver.cuGraphLaunch;
import static jcuda.driver.JCudaDriver.cuStreamBeginCapture;
import static jcuda.driver.JCudaDriver.cuStreamEndCapture;

import jcuda.driver.CUgraph;
import jcuda.driver.CUgraphExec;
import jcuda.driver.CUstream;
import jcuda.driver.CUstreamCaptureMode;

/**
 * An instantiated CUDA graph recorded from the work one piece of code queues on a stream; replaying
 * it costs one launch instead of one per kernel. Kernel arguments are frozen at capture: replays
 * use the same buffers and scalar values.
 */
public final class CudaGraph extends NativeResource {

    private final CUgraph graph;
    private final CUgraphExec exec;

    private CudaGraph(CUgraph graph, CUgraphExec exec) {
        this.graph = graph;
        this.exec = exec;
    }

    /**
     * Records what {@code enqueue} queues on {@code stream} (nothing runs during capture) and
     * instantiates it. The capture is thread-local: calls that are illegal during capture (allocation,
     * synchronous copies, synchronizing) fail only when made from this thread, and other threads keep
     * working normally.
     */
    public static CudaGraph capture(CudaStream stream, Runnable enqueue) {
        CUstream handle = stream.handle();
        Driver.check("cuStreamBeginCapture", () -> cuStreamBeginCapture(handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CUgraph graph = new CUgraph();
        try {
            enqueue.run();
        } catch (RuntimeException | Error e) {
            // End the capture anyway, or the stream stays in capture mode and unusable.
            try {
                Driver.check("cuStreamEndCapture", () -> cuStreamEndCapture(handle, graph));
                Driver.check("cuGraphDestroy", () -> cuGraphDestroy(graph));
            } catch (CudaException cleanup) {
                e.addSuppressed(cleanup);
            }
            throw e;
        }
        Driver.check("cuStreamEndCapture", () -> cuStreamEndCapture(handle, graph));
        CUgraphExec exec = new CUgraphExec();
        try {
            Driver.check("cuGraphInstantiate", () -> cuGraphInstantiate(exec, graph, 0));
        } catch (CudaException e) {
            try {
                Driver.check("cuGraphDestroy", () -> cuGraphDestroy(graph));
            } catch (CudaException cleanup) {
                e.addSuppressed(cleanup);
            }
            throw e;
        }
        return new CudaGraph(graph, exec);
    }

    /** Queues one replay of the graph on {@code stream}. */
    public void launch(CudaStream stream) {
        checkOpen();
        CUstream handle = stream.handle();
        Driver.check("cuGraphLaunch", () -> cuGraphLaunch(exec, handle));
    }

    @Override
    protected void release() {
        try {
            Driver.check("cuGraphExecDestroy", () -> cuGraphExecDestroy(exec));
        } finally {
            Driver.check("cuGraphDestroy", () -> cuGraphDestroy(graph));
        }
    }

    @Override
    public String toString() {
        return "CudaGraph[" + graph + "]";
    }
}
