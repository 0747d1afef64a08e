package dev.moeforge.runtime.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import dev.moeforge.runtime.cuda.Gpu.State;
import dev.moeforge.runtime.cuda.Gpu.Status;
import org.junit.jupiter.api.Test;

/**
 * Runs everywhere: on a machine without a GPU or driver the probe must answer, not throw; and the
 * probe's classification of what it saw, fed the failures a machine can produce.
 */
class GpuTest {

    /** JCuda's load error on a machine without the driver, as Driver reports it (seen on a CI machine). */
    private static final String NO_LIBCUDA = "JCuda's native driver binding could not be loaded: UnsatisfiedLinkError: "
            + "Error while loading native library \"JCudaDriver-12.0.0-linux-x86_64\" (no JCudaDriver-12.0.0-linux-x86_64 in "
            + "java.library.path: /usr/java/packages/lib:/usr/lib64:/lib64:/lib:/usr/lib; /tmp/libJCudaDriver-12.0.0-linux-x86_64.so: "
            + "libcuda.so.1: cannot open shared object file: No such file or directory)";

    @Test
    void probeAnswersWithoutThrowing() {
        boolean available = Gpu.available();
        String reason = Gpu.unavailableReason();

        assertNotNull(reason);
        assertEquals(available, reason.isEmpty(), reason);
        assertEquals(available, Gpu.status().state() == State.AVAILABLE, reason);
        // The answer is cached.
        assertEquals(available, Gpu.available());
        assertEquals(reason, Gpu.unavailableReason());
        assertFalse(reason.contains("\n"), "the reason is one line, for skip messages: " + reason);
    }

    @Test
    void driverCallsFailAsCudaExceptionWhenThereIsNoGpu() {
        assumeFalse(Gpu.available(), "a GPU is present");
        CudaException e = assertThrows(CudaException.class, () -> CudaContext.create(0));
        assertTrue(e.getMessage().startsWith("cuInit failed: "), e.getMessage());
        assertEquals("cuInit", e.call());
    }

    @Test
    void devicesMakeAGpuAndNoneMakeNone() {
        assertEquals(new Status(State.AVAILABLE, ""), Gpu.classify(null, 1, true));
        Status none = Gpu.classify(null, 0, true);
        assertEquals(State.ABSENT, none.state());
        assertTrue(none.reason().contains("no devices"), none.reason());
    }

    @Test
    void aMissingDriverLibraryIsNoGpu() {
        Status s = Gpu.classify(new CudaException("cuInit", NO_LIBCUDA, new UnsatisfiedLinkError("multi\nline")), 0, true);
        assertEquals(State.ABSENT, s.state(), s.reason());
        assertTrue(s.reason().startsWith("no CUDA driver on this machine: "), s.reason());
        assertTrue(s.reason().contains("libcuda.so.1"), s.reason());
    }

    @Test
    void jcudaFailingForAnotherReasonIsBroken() {
        // natives jar missing from the class path, and a driver too old for JCuda's bindings
        for (String why : new String[] {
                "JCuda's native driver binding could not be loaded: UnsatisfiedLinkError: Error while loading native library "
                        + "\"JCudaDriver-12.0.0-linux-x86_64\" (no JCudaDriver-12.0.0-linux-x86_64 in java.library.path: /usr/lib; "
                        + "Could not find resource /lib/libJCudaDriver-12.0.0-linux-x86_64.so)",
                "JCuda's native driver binding could not be loaded: UnsatisfiedLinkError: Error while loading native library "
                        + "\"JCudaDriver-12.0.0-linux-x86_64\" (/tmp/libJCudaDriver-12.0.0-linux-x86_64.so: undefined symbol: "
                        + "cuGraphInstantiateWithParams)"}) {
            Status s = Gpu.classify(new CudaException("cuInit", why, new UnsatisfiedLinkError(why)), 0, true);
            assertEquals(State.BROKEN, s.state(), s.reason());
            assertTrue(s.reason().contains(why), s.reason());
        }
    }

    @Test
    void jcudaWithoutNativesForThisPlatformIsNoGpu() {
        String why = "JCuda's native driver binding could not be loaded: UnsatisfiedLinkError: Error while loading native library "
                + "\"JCudaDriver-12.0.0-linux-aarch64\" (Could not find resource /lib/libJCudaDriver-12.0.0-linux-aarch64.so)";
        assertEquals(State.ABSENT, Gpu.classify(new CudaException("cuInit", why, new UnsatisfiedLinkError(why)), 0, false).state());
        // the libcuda rule holds whatever the platform
        assertEquals(State.ABSENT, Gpu.classify(new CudaException("cuInit", NO_LIBCUDA, new UnsatisfiedLinkError("")), 0, false).state());
    }

    @Test
    void theDriverSayingThereIsNoGpuIsNoGpu() {
        for (String error : new String[] {"CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_STUB_LIBRARY"}) {
            Status s = Gpu.classify(new CudaException("cuInit", error, null), 0, true);
            assertEquals(State.ABSENT, s.state(), error);
            assertTrue(s.reason().contains("cuInit failed: " + error), s.reason());
        }
    }

    @Test
    void anyOtherDriverFailureIsBroken() {
        for (String error : new String[] {"CUDA_ERROR_UNKNOWN", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "CUDA_ERROR_NOT_INITIALIZED",
                "CUDA_ERROR_DEVICE_UNAVAILABLE", "INVALID CUresult: 35"}) {
            Status s = Gpu.classify(new CudaException("cuInit", error, null), 0, true);
            assertEquals(State.BROKEN, s.state(), error);
            assertTrue(s.reason().contains(error), s.reason());
        }
        assertEquals(State.BROKEN, Gpu.classify(new CudaException("cuDeviceGetCount", "CUDA_ERROR_INVALID_CONTEXT", null), 0, true).state());
    }

    @Test
    void somethingOtherThanADriverErrorIsBroken() {
        Status s = Gpu.classify(new NoClassDefFoundError("jcuda/driver/JCudaDriver"), 0, true);
        assertEquals(State.BROKEN, s.state());
        assertTrue(s.reason().contains("NoClassDefFoundError: jcuda/driver/JCudaDriver"), s.reason());
    }

    @Test
    void reasonsAreOneLine() {
        Status s = Gpu.classify(new CudaException("cuInit", "first\nsecond", new UnsatisfiedLinkError("first\nsecond")), 0, true);
        assertFalse(s.reason().contains("\n"), s.reason());
        assertTrue(s.reason().endsWith("first second"), s.reason());
    }
}
