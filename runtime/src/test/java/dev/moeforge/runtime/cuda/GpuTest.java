package dev.moeforge.runtime.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import org.junit.jupiter.api.Test;

/** Runs everywhere: on a machine without a GPU or driver the probe must answer, not throw. */
class GpuTest {

    @Test
    void probeAnswersWithoutThrowing() {
        boolean available = Gpu.available();
        String reason = Gpu.unavailableReason();

        assertNotNull(reason);
        assertEquals(available, reason.isEmpty(), reason);
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
}
