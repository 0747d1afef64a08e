package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuFuncGetAttribute;
import static jcuda.driver.JCudaDriver.cuFuncSetAttribute;
import static jcuda.driver.JCudaDriver.cuLaunchKernel;

import jcuda.Pointer;
import jcuda.driver.CUfunction;
import jcuda.driver.CUfunction_attribute;
import jcuda.driver.CUstream;

/** A kernel in a loaded {@link CudaModule}. */
public final class CudaFunction {

    /** The function handle dies with its module, so every use first checks the module is still loaded. */
    private final CudaModule module;
    private final String name;
    private final CUfunction function;

    CudaFunction(CudaModule module, String name, CUfunction function) {
        this.module = module;
        this.name = name;
        this.function = function;
    }

    public String name() {
        return name;
    }

    /**
     * Queues the kernel on {@code stream} ({@code null}: the legacy default stream).
     *
     * @param args the kernel's parameters in order: a {@link DeviceBuffer} for a pointer, an
     *             {@link Integer} for {@code int}, a {@link Long} for {@code long long} / {@code int64_t},
     *             a {@link Float} for {@code float}, a {@link TensorMap} for a {@code __grid_constant__}
     *             tensor map; their types must match the kernel's signature,
     *             which the driver cannot check
     * @throws LaunchFailure if the driver rejects the launch
     */
    public void launch(int gx, int gy, int gz, int bx, int by, int bz, int sharedBytes, CudaStream stream,
                       Object... args) {
        launch(LaunchOrder.AFTER_PREVIOUS, gx, gy, gz, bx, by, bz, sharedBytes, stream, args);
    }

    /** As {@link #launch(int, int, int, int, int, int, int, CudaStream, Object...)}, ordered after the previous kernel as {@code order} says. */
    public void launch(LaunchOrder order, int gx, int gy, int gz, int bx, int by, int bz, int sharedBytes, CudaStream stream,
                       Object... args) {
        module.checkOpen();
        CUstream handle = stream == null ? null : stream.handle();
        try {
            for (int i = 0; i < args.length; i++) {
                checkArgument(i, args[i]);
            }
            switch (order) {
                case AFTER_PREVIOUS -> {
                    Pointer[] params = new Pointer[args.length];
                    for (int i = 0; i < args.length; i++) {
                        params[i] = switch (args[i]) {
                            case DeviceBuffer buffer -> Pointer.to(buffer.pointer());
                            case Integer value -> Pointer.to(new int[] {value});
                            case Long value -> Pointer.to(new long[] {value});
                            case Float value -> Pointer.to(new float[] {value});
                            case TensorMap map -> Pointer.to(map.bytes());
                            default -> throw new IllegalStateException("checked above");
                        };
                    }
                    Driver.check("cuLaunchKernel", () -> cuLaunchKernel(function, gx, gy, gz, bx, by, bz, sharedBytes, handle,
                            Pointer.to(params), null));
                }
                case OVERLAPPING_PREVIOUS -> {
                    Object[] values = new Object[args.length];
                    for (int i = 0; i < args.length; i++) {
                        values[i] = args[i] instanceof DeviceBuffer b ? (Object) LaunchKernelEx.address(b.pointer()) : args[i];
                    }
                    LaunchKernelEx.launch(function, new int[] {gx, gy, gz, bx, by, bz, sharedBytes}, handle, values);
                }
            }
        } catch (CudaException e) {
            throw new LaunchFailure("launching " + name + " with grid (" + gx + ", " + gy + ", " + gz + "), block ("
                    + bx + ", " + by + ", " + bz + "), " + sharedBytes + " bytes dynamic shared memory, "
                    + args.length + " arguments failed: " + e.getMessage(), e);
        }
    }

    private void checkArgument(int index, Object arg) {
        switch (arg) {
            case DeviceBuffer _, Integer _, Long _, Float _, TensorMap _ -> { }
            case null -> throw new IllegalArgumentException(name + ": argument " + index + " is null");
            default -> throw new IllegalArgumentException(name + ": argument " + index + " is a "
                    + arg.getClass().getName() + "; expected DeviceBuffer, Integer, Long, Float or TensorMap");
        }
    }

    /**
     * Allows launches with up to {@code bytes} of dynamic shared memory; above 48 KiB the driver
     * requires this opt-in.
     */
    public void setMaxDynamicSharedBytes(int bytes) {
        module.checkOpen();
        Driver.check("cuFuncSetAttribute(" + name + ", max dynamic shared memory = " + bytes + ")",
                () -> cuFuncSetAttribute(function, CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
    }

    /** Registers per thread, as the loaded binary declares. */
    public int registers() {
        return attribute(CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, "registers");
    }

    /** The largest block this kernel can be launched with, given its register use. */
    public int maxThreadsPerBlock() {
        return attribute(CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
    }

    private int attribute(int attribute, String what) {
        module.checkOpen();
        int[] value = new int[1];
        Driver.check("cuFuncGetAttribute(" + name + ", " + what + ")", () -> cuFuncGetAttribute(value, attribute, function));
        return value[0];
    }

    @Override
    public String toString() {
        return "CudaFunction[" + name + "]";
    }
}
