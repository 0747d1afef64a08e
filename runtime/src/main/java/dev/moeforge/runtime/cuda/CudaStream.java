package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuStreamCreate;
import static jcuda.driver.JCudaDriver.cuStreamDestroy;
import static jcuda.driver.JCudaDriver.cuStreamSynchronize;

import jcuda.driver.CUstream;
import jcuda.driver.CUstream_flags;

/**
 * A non-blocking stream: it does not synchronize implicitly with the legacy default stream, so
 * work other code puts there neither delays our launches nor breaks a graph capture on it.
 */
public final class CudaStream extends NativeResource {

    private final CUstream stream;

    private CudaStream(CUstream stream) {
        this.stream = stream;
    }

    /** Creates a stream in the current context. */
    public static CudaStream create() {
        CUstream stream = new CUstream();
        Driver.check("cuStreamCreate(non-blocking)", () -> cuStreamCreate(stream, CUstream_flags.CU_STREAM_NON_BLOCKING));
        return new CudaStream(stream);
    }

    /** The JCuda handle, for driver calls this package does not wrap. */
    public CUstream handle() {
        checkOpen();
        return stream;
    }

    /** Waits until all work queued on this stream has finished. */
    public void synchronize() {
        checkOpen();
        Driver.check("cuStreamSynchronize", () -> cuStreamSynchronize(stream));
    }

    @Override
    protected void release() {
        Driver.check("cuStreamDestroy", () -> cuStreamDestroy(stream));
    }

    @Override
    public String toString() {
        return "CudaStream[" + stream + "]";
    }
}
