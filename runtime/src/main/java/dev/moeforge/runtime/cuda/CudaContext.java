package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuCtxSetCurrent;
import static jcuda.driver.JCudaDriver.cuCtxSynchronize;
import static jcuda.driver.JCudaDriver.cuDeviceGet;
import static jcuda.driver.JCudaDriver.cuDeviceGetAttribute;
import static jcuda.driver.JCudaDriver.cuDeviceGetName;
import static jcuda.driver.JCudaDriver.cuDevicePrimaryCtxRelease;
import static jcuda.driver.JCudaDriver.cuDevicePrimaryCtxRetain;
import static jcuda.driver.JCudaDriver.cuDeviceTotalMem;
import static jcuda.driver.JCudaDriver.cuDriverGetVersion;
import static jcuda.driver.JCudaDriver.cuInit;

import dev.moeforge.dsl.ir.Target;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Optional;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdevice_attribute;

/**
 * A device's primary context, made current on the creating thread. Driver calls act on the calling
 * thread's current context, so other threads call {@link #makeCurrent()} before using buffers,
 * modules or streams created under it.
 *
 * <p>The primary context (rather than {@code cuCtxCreate}) is the one the CUDA runtime and other
 * libraries in the process use too, and {@code cuCtxCreate}'s signature changed in CUDA 13 while
 * JCuda 12 binds the old one.
 */
public final class CudaContext extends NativeResource {

    private final int deviceIndex;
    private final CUdevice device;
    private final CUcontext context;

    private CudaContext(int deviceIndex, CUdevice device, CUcontext context) {
        this.deviceIndex = deviceIndex;
        this.device = device;
        this.context = context;
    }

    /** Initializes the driver, retains device {@code deviceIndex}'s primary context and makes it current. */
    public static CudaContext create(int deviceIndex) {
        Driver.check("cuInit", () -> cuInit(0));
        CUdevice device = new CUdevice();
        Driver.check("cuDeviceGet(" + deviceIndex + ")", () -> cuDeviceGet(device, deviceIndex));
        CUcontext context = new CUcontext();
        Driver.check("cuDevicePrimaryCtxRetain(device " + deviceIndex + ")", () -> cuDevicePrimaryCtxRetain(context, device));
        CudaContext created = new CudaContext(deviceIndex, device, context);
        try {
            created.makeCurrent();
        } catch (CudaException e) {
            created.close();
            throw e;
        }
        return created;
    }

    public int deviceIndex() {
        return deviceIndex;
    }

    /** The driver's context handle (for calls bound outside JCuda). */
    CUcontext handle() {
        return context;
    }

    /** E.g. {@code NVIDIA H100 80GB HBM3}. */
    public String deviceName() {
        checkOpen();
        byte[] name = new byte[256];
        Driver.check("cuDeviceGetName", () -> cuDeviceGetName(name, name.length, device));
        int end = 0;
        while (end < name.length && name[end] != 0) {
            end++;
        }
        return new String(Arrays.copyOf(name, end), StandardCharsets.UTF_8);
    }

    /** major * 10 + minor, e.g. 90 for an H100. */
    public int computeCapability() {
        return attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability major") * 10
                + attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability minor");
    }

    /** The generator target whose compute capability this device has, if MoeForge has one. */
    public Optional<Target> target() {
        int cc = computeCapability();
        return Arrays.stream(Target.values()).filter(t -> t.computeCapability() == cc).findFirst();
    }

    public int smCount() {
        return attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count");
    }

    public long l2Bytes() {
        return attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size");
    }

    public long totalMemory() {
        checkOpen();
        long[] bytes = new long[1];
        Driver.check("cuDeviceTotalMem", () -> cuDeviceTotalMem(bytes, device));
        return bytes[0];
    }

    /** SM clock in kHz as the driver reports it (the typical, not the boost, clock). */
    public int clockKhz() {
        return attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock rate");
    }

    /** Peak memory clock in kHz. */
    public int memoryClockKhz() {
        return attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "memory clock rate");
    }

    /** The installed driver's CUDA version, e.g. {@code 13.0}. */
    public String driverVersion() {
        int[] version = new int[1];
        Driver.check("cuDriverGetVersion", () -> cuDriverGetVersion(version));
        return version[0] / 1000 + "." + (version[0] % 1000) / 10;
    }

    /** Makes this context current on the calling thread. */
    public void makeCurrent() {
        checkOpen();
        Driver.check("cuCtxSetCurrent(device " + deviceIndex + ")", () -> cuCtxSetCurrent(context));
    }

    /** Waits for all work in this context; it must be current on the calling thread. */
    public void synchronize() {
        checkOpen();
        Driver.check("cuCtxSynchronize", () -> cuCtxSynchronize());
    }

    private int attribute(int attribute, String what) {
        checkOpen();
        int[] value = new int[1];
        Driver.check("cuDeviceGetAttribute(" + what + ")", () -> cuDeviceGetAttribute(value, attribute, device));
        return value[0];
    }

    @Override
    protected void release() {
        Driver.check("cuDevicePrimaryCtxRelease(device " + deviceIndex + ")", () -> cuDevicePrimaryCtxRelease(device));
    }

    @Override
    public String toString() {
        return "CudaContext[device " + deviceIndex + "]";
    }
}
