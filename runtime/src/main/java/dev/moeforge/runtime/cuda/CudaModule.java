package dev.moeforge.runtime.cuda;

import static jcuda.driver.JCudaDriver.cuModuleGetFunction;
import static jcuda.driver.JCudaDriver.cuModuleLoadData;
import static jcuda.driver.JCudaDriver.cuModuleUnload;

import jcuda.driver.CUfunction;
import jcuda.driver.CUmodule;

/** A cubin loaded into the current context. Its {@link CudaFunction}s are valid until it is closed. */
public final class CudaModule extends NativeResource {

    private final CUmodule module;

    private CudaModule(CUmodule module) {
        this.module = module;
    }

    /**
     * Loads a cubin as produced by nvcc {@code -cubin}. (JCuda wants PTX text zero-terminated; a
     * cubin is an ELF image whose size the driver reads from its header, so it is passed as is.)
     */
    public static CudaModule load(byte[] cubin) {
        CUmodule module = new CUmodule();
        Driver.check("cuModuleLoadData(" + cubin.length + " bytes)", () -> cuModuleLoadData(module, cubin));
        return new CudaModule(module);
    }

    /** The kernel named {@code name}: its {@code extern "C"} name, or the mangled name otherwise. */
    public CudaFunction function(String name) {
        checkOpen();
        CUfunction function = new CUfunction();
        Driver.check("cuModuleGetFunction(" + name + ")", () -> cuModuleGetFunction(function, module, name));
        return new CudaFunction(this, name, function);
    }

    @Override
    protected void release() {
        Driver.check("cuModuleUnload", () -> cuModuleUnload(module));
    }

    @Override
    public String toString() {
        return "CudaModule[" + module + "]";
    }
}
