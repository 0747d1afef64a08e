package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuEventCreate;
import static jcuda.driver.JCudaDriver.cuEventDestroy;
import static jcuda.driver.JCudaDriver.cuEventElapsedTime;
import static jcuda.driver.JCudaDriver.cuEventRecord;
import static jcuda.driver.JCudaDriver.cuEventSynchronize;

import jcuda.driver.CUevent;
import jcuda.driver.CUstream;
import jcuda.driver.CUevent_flags;

/** A timing-capable event: a marker in a stream that the host can wait for and measure between. */
public final class CudaEvent extends NativeResource {

    private final CUevent event;

    private CudaEvent(CUevent event) {
        this.event = event;
    }

    /** Creates an event in the current context. */
    public static CudaEvent create() {
        CUevent event = new CUevent();
        Driver.check("cuEventCreate", () -> cuEventCreate(event, CUevent_flags.CU_EVENT_DEFAULT));
        return new CudaEvent(event);
    }

    /** Marks the current end of {@code stream}'s queued work. */
    public void record(CudaStream stream) {
        checkOpen();
        CUstream handle = stream.handle();
        Driver.check("cuEventRecord", () -> cuEventRecord(event, handle));
    }

    /** Waits until the work before the recorded marker has finished. */
    public void synchronize() {
        checkOpen();
        Driver.check("cuEventSynchronize", () -> cuEventSynchronize(event));
    }

    /** GPU time between two recorded events, in milliseconds; {@code end} must have completed. */
    public static float elapsedMillis(CudaEvent start, CudaEvent end) {
        start.checkOpen();
        end.checkOpen();
        float[] millis = new float[1];
        Driver.check("cuEventElapsedTime", () -> cuEventElapsedTime(millis, start.event, end.event));
        return millis[0];
    }

    @Override
    protected void release() {
        Driver.check("cuEventDestroy", () -> cuEventDestroy(event));
    }

    @Override
    public String toString() {
        return "CudaEvent[" + event + "]";
    }
}
