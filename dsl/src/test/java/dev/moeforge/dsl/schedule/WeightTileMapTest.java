package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The copy engine's view of an expert weight: walking (K, gate or up, output row, expert) with the
 * strides of each layout must address exactly the element the weight's own indexing names, so that a
 * box lands gate and up rows side by side as the tile expects.
 */
class WeightTileMapTest {
    static final ExpertShape SHAPE = new ExpertShape(136, 40, 7, 3);
    static final ExpertCentric TMA = new ExpertCentric(32, 16, 64, 2, 2, 4, 1).withTma(true);

    /** Byte offset of element (c0, c1, c2, c3) through the map's strides. */
    static long offset(WeightTileMap m, long c0, long c1, long c2, long c3) {
        return 2 * c0 + c1 * m.strideBytes().get(0) + c2 * m.strideBytes().get(1) + c3 * m.strideBytes().get(2);
    }

    @Test
    void gateUpBoxesWalkTheGateAndUpRowsOfEachNeuronInBothLayouts() {
        for (GateUpLayout layout : GateUpLayout.values()) {
            Problem.ExpertGateUp p = new Problem.ExpertGateUp(SHAPE, WeightFormat.BF16, DType.BF16, layout);
            WeightTileMap m = TMA.weightTileMap(p).orElseThrow();
            int h = SHAPE.hidden();
            int i = SHAPE.intermediate();
            assertEquals(List.of((long) h, 2L, (long) i, (long) SHAPE.experts()), m.dims());
            assertEquals(List.of(64, 2, 16, 1), m.box());
            for (int e = 0; e < SHAPE.experts(); e++) {
                for (int n = 0; n < i; n++) {
                    for (int k : new int[] {0, 7, h - 1}) {
                        long gate = 2L * (((long) e * 2 * i + layout.gateRow(n, i)) * h + k);
                        long up = 2L * (((long) e * 2 * i + layout.upRow(n, i)) * h + k);
                        assertEquals(gate, offset(m, k, 0, n, e), layout + " gate e=" + e + " n=" + n + " k=" + k);
                        assertEquals(up, offset(m, k, 1, n, e), layout + " up e=" + e + " n=" + n + " k=" + k);
                    }
                }
            }
            assertEquals(64L * 2 * 16 * 2, m.boxBytes(), "the tile's 2 x block_n weight rows of 128 bytes");
        }
    }

    @Test
    void downBoxesWalkBlockNRowsOfOneExpert() {
        Problem.ExpertDown p = new Problem.ExpertDown(SHAPE, WeightFormat.BF16, DType.BF16);
        WeightTileMap m = TMA.weightTileMap(p).orElseThrow();
        int h = SHAPE.hidden();
        int i = SHAPE.intermediate();
        assertEquals(List.of((long) i, 1L, (long) h, (long) SHAPE.experts()), m.dims());
        assertEquals(List.of(64, 1, 16, 1), m.box());
        for (int e = 0; e < SHAPE.experts(); e++) {
            for (int row : new int[] {0, 1, h - 1}) {
                assertEquals(2L * (((long) e * h + row) * i + 5), offset(m, 5, 0, row, e));
            }
        }
    }

    @Test
    void fp8BoxesBring128CodesOfEachRow() {
        ExpertShape shape = new ExpertShape(256, 128, 5, 2);
        ExpertCentric fp8 = new ExpertCentric(16, 128, 128, 1, 8, 3, 1).withTma(true);
        Problem.ExpertGateUp p = new Problem.ExpertGateUp(shape, WeightFormat.FP8_BLOCK128, DType.BF16, GateUpLayout.INTERLEAVED);
        WeightTileMap m = fp8.weightTileMap(p).orElseThrow();
        assertEquals(1, m.elementBytes());
        assertEquals(List.of(128, 2, 128, 1), m.box());
        for (int n : new int[] {0, 5, 127}) {
            long gate = ((long) 3 * 2 * 128 + GateUpLayout.INTERLEAVED.gateRow(n, 128)) * 256 + 9;
            long up = ((long) 3 * 2 * 128 + GateUpLayout.INTERLEAVED.upRow(n, 128)) * 256 + 9;
            assertEquals(gate, 9 + n * m.strideBytes().get(1) + 3 * m.strideBytes().get(2));
            assertEquals(up, 9 + m.strideBytes().get(0) + n * m.strideBytes().get(1) + 3 * m.strideBytes().get(2));
        }
        assertEquals(128L * 2 * 128, m.boxBytes(), "the tile's 256 weight rows of 128 bytes");
    }

    @Test
    void onlyTmaSchedulesHaveAMapAndBadMapsAreRefused() {
        Problem.ExpertDown p = new Problem.ExpertDown(SHAPE, WeightFormat.BF16, DType.BF16);
        assertTrue(TMA.withTma(false).weightTileMap(p).isEmpty());
        assertThrows(IllegalArgumentException.class, () -> new WeightTileMap(2, List.of(8L, 4L), List.of(24L), List.of(8, 4)));
        assertThrows(IllegalArgumentException.class, () -> new WeightTileMap(2, List.of(128L, 4L), List.of(256L), List.of(128, 4)));
        assertThrows(IllegalArgumentException.class, () -> new WeightTileMap(2, List.of(128L, 4L), List.of(), List.of(64, 4)));
        assertThrows(IllegalArgumentException.class, () -> new WeightTileMap(4, List.of(128L, 4L), List.of(512L), List.of(32, 4)));
    }
}
