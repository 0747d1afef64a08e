package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuMemAlloc;
import static jcuda.driver.JCudaDriver.cuMemFree;
import static jcuda.driver.JCudaDriver.cuMemcpyDtoH;
import static jcuda.driver.JCudaDriver.cuMemcpyHtoD;
import static jcuda.driver.JCudaDriver.cuMemsetD16;
import static jcuda.driver.JCudaDriver.cuMemsetD32;
import static jcuda.driver.JCudaDriver.cuStreamSynchronize;

import dev.moeforge.dsl.ir.DType;
import jcuda.Pointer;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUstream;

/**
 * A device allocation of {@code elements} values of {@code dtype} in the current context.
 *
 * <p>Copies and fills go through the legacy default stream, which does not order against our
 * non-blocking {@link CudaStream}s. So that they are still safe to mix with launches:
 * <ul>
 *   <li>{@code copyFrom} and {@code fill*} return only when the data is on the device (a pageable
 *       host-to-device copy or a memset may otherwise still be in flight when the call returns);</li>
 *   <li>{@code copyTo} does not wait for kernels: synchronize the stream that wrote the buffer first.</li>
 * </ul>
 * A host array may be shorter than the buffer (the copy covers the buffer's prefix, so one buffer
 * sized for the largest batch serves every smaller one), never longer.
 */
public final class DeviceBuffer extends NativeResource {

    /** Handle 0: the legacy default stream, where the synchronous copies and memsets run. */
    private static final CUstream LEGACY_STREAM = new CUstream();

    private final DType dtype;
    private final long elements;
    private final long bytes;
    private final Address address;

    /** Exposes the raw address, which JCuda keeps protected. */
    private static final class Address extends CUdeviceptr {
        long value() {
            return getNativePointer();
        }
    }

    private DeviceBuffer(DType dtype, long elements, long bytes, Address address) {
        this.dtype = dtype;
        this.elements = elements;
        this.bytes = bytes;
        this.address = address;
    }

    /** Allocates uninitialized device memory for {@code elements} values of {@code dtype}. */
    public static DeviceBuffer allocate(DType dtype, long elements) {
        if (elements <= 0) {
            throw new IllegalArgumentException("a device buffer needs at least one element, not " + elements);
        }
        long bytes = Math.multiplyExact(elements, (long) dtype.bytes());
        Address address = new Address();
        Driver.check("cuMemAlloc(" + bytes + " bytes for " + elements + " x " + dtype.text() + ")",
                () -> cuMemAlloc(address, bytes));
        return new DeviceBuffer(dtype, elements, bytes, address);
    }

    public DType dtype() {
        return dtype;
    }

    public long elements() {
        return elements;
    }

    public long bytes() {
        return bytes;
    }

    /** The JCuda device pointer, e.g. for kernel arguments. */
    public CUdeviceptr pointer() {
        checkOpen();
        return address;
    }

    /** The raw device address, for logs and for checking alignment. */
    public long devicePointerValue() {
        checkOpen();
        return address.value();
    }

    public void copyFrom(short[] host) {
        upload(Pointer.to(host), (long) host.length * Short.BYTES, "short[" + host.length + "]");
    }

    public void copyFrom(int[] host) {
        upload(Pointer.to(host), (long) host.length * Integer.BYTES, "int[" + host.length + "]");
    }

    public void copyFrom(float[] host) {
        upload(Pointer.to(host), (long) host.length * Float.BYTES, "float[" + host.length + "]");
    }

    public void copyFrom(byte[] host) {
        upload(Pointer.to(host), host.length, "byte[" + host.length + "]");
    }

    public void copyTo(short[] host) {
        download(Pointer.to(host), (long) host.length * Short.BYTES, "short[" + host.length + "]");
    }

    public void copyTo(int[] host) {
        download(Pointer.to(host), (long) host.length * Integer.BYTES, "int[" + host.length + "]");
    }

    public void copyTo(float[] host) {
        download(Pointer.to(host), (long) host.length * Float.BYTES, "float[" + host.length + "]");
    }

    public void copyTo(byte[] host) {
        download(Pointer.to(host), host.length, "byte[" + host.length + "]");
    }

    /** Sets every 16-bit word to {@code pattern}, e.g. {@code 0x7FC0} to poison bf16 data with NaN. */
    public void fillBytes16(short pattern) {
        checkOpen();
        requireMultipleOf(Short.BYTES, "fillBytes16");
        Driver.check("cuMemsetD16(" + this + ")", () -> cuMemsetD16(address, pattern, bytes / Short.BYTES));
        awaitLegacyStream();
    }

    /**
     * Enqueues setting every 32-bit word to {@code word} on {@code stream} (a memset node when the
     * stream is being captured into a graph, e.g. zeroing the router's expert counts each step).
     */
    public void fillWords32Async(int word, CudaStream stream) {
        checkOpen();
        requireMultipleOf(Integer.BYTES, "fillWords32Async");
        Driver.check("cuMemsetD32Async(" + this + ")", () -> jcuda.driver.JCudaDriver.cuMemsetD32Async(address, word,
                bytes / Integer.BYTES, stream.handle()));
    }

    /** Sets every 32-bit word to {@code word}. */
    public void fillWords32(int word) {
        checkOpen();
        requireMultipleOf(Integer.BYTES, "fillWords32");
        Driver.check("cuMemsetD32(" + this + ")", () -> cuMemsetD32(address, word, bytes / Integer.BYTES));
        awaitLegacyStream();
    }

    private void upload(Pointer host, long hostBytes, String what) {
        checkOpen();
        requireFits(hostBytes, "copy " + what + " into " + this);
        Driver.check("cuMemcpyHtoD(" + this + ")", () -> cuMemcpyHtoD(address, host, hostBytes));
        awaitLegacyStream();
    }

    private void download(Pointer host, long hostBytes, String what) {
        checkOpen();
        requireFits(hostBytes, "copy " + this + " into " + what);
        Driver.check("cuMemcpyDtoH(" + this + ")", () -> cuMemcpyDtoH(host, address, hostBytes));
    }

    private void awaitLegacyStream() {
        Driver.check("cuStreamSynchronize(legacy default stream)", () -> cuStreamSynchronize(LEGACY_STREAM));
    }

    /** Copies move the host array's length: the buffer's prefix, never past its end. */
    private void requireFits(long hostBytes, String action) {
        if (hostBytes > bytes) {
            throw new IllegalArgumentException("cannot " + action + ": the host array has "
                    + hostBytes + " bytes, the device buffer only " + bytes);
        }
    }

    private void requireMultipleOf(int wordBytes, String operation) {
        if (bytes % wordBytes != 0) {
            throw new IllegalArgumentException(operation + " needs a size that is a multiple of " + wordBytes
                    + " bytes; " + this + " has " + bytes);
        }
    }

    @Override
    protected void release() {
        Driver.check("cuMemFree(" + this + ")", () -> cuMemFree(address));
    }

    @Override
    public String toString() {
        return "DeviceBuffer[" + elements + " x " + dtype.text() + "]";
    }
}
