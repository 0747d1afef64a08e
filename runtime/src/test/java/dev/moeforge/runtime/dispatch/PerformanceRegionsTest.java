package dev.moeforge.runtime.dispatch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.ExpertShape;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The four region variables from the geometry alone, on shapes whose answers are worked out by hand. */
class PerformanceRegionsTest {
    static final long L2 = 50L << 20;

    @Test
    void qwen3IsPipelineDominatedAndItsExpertsFitL2() {
        // gate_up: 2 x 768 = 1536 rows = 6 tiles of 256; H = 2048 = 16 slices of 128; 1536 x 2048 x 2 bytes
        PerformanceRegions r = PerformanceRegions.of(new ExpertShape(2048, 768, 128, 8), 1536.0 * 2048 * 2, 132, L2);
        assertEquals(6, r.nTiles());
        assertEquals(16, r.kDepth());
        assertEquals(96, r.density());
        assertEquals("A", r.region());
        assertEquals(1536.0 * 2048 * 2 / (0.75 * L2), r.l2Pressure(), 1e-12);
        assertFalse(r.groupMPays());
        assertEquals(List.of("tile shape"), r.predicted(0.1));  // K too shallow for split-K even under a quarter wave
    }

    @Test
    void mixtralIsRegionBAndNeedsGroupM() {
        PerformanceRegions r = PerformanceRegions.of(new ExpertShape(4096, 14336, 8, 2), 28672.0 * 4096 * 2, 132, L2);
        assertEquals(112 * 32, r.density());
        assertEquals("B", r.region());
        assertTrue(r.groupMPays());
        assertEquals(List.of("tile shape", "GROUP_M", "split-K"), r.predicted(0.2));
        assertEquals(List.of("tile shape", "GROUP_M"), r.predicted(0.25));
    }

    @Test
    void waveUtilisationCountsEachExpertsPartialTiles() {
        // 16 -> 1 tile of 16, 0 -> none, 1 -> 1, 33 -> 3; each x 2 n tiles (2 x 200 rows = 400 -> 2 of 256), over 4 SMs
        PerformanceRegions r = PerformanceRegions.of(new ExpertShape(256, 200, 4, 2), 1000, 4, L2);
        assertEquals((1 + 0 + 1 + 3) * 2 / 4.0, r.waveUtilisation(new int[] {16, 0, 1, 33}, 16), 1e-12);
        assertEquals((1 + 0 + 1 + 1) * 2 / 4.0, r.waveUtilisation(new int[] {16, 0, 1, 33}, 64), 1e-12);
        assertThrows(IllegalArgumentException.class, () -> r.waveUtilisation(new int[] {1, 2, 3}, 16));
        assertThrows(IllegalArgumentException.class, () -> PerformanceRegions.of(new ExpertShape(256, 200, 4, 2), 1000, 0, L2));
    }
}
