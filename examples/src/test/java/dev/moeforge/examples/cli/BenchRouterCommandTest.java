package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.check.Validator;
import java.util.HashSet;
import java.util.List;
import org.junit.jupiter.api.Test;

/** bench router's shape table, its sweep and --shapes, without a GPU. */
class BenchRouterCommandTest {

    @Test
    void everySweepVariantValidatesUnderAUniqueName() {
        List<BenchRouterCommand.Shape> all = BenchRouterCommand.withSweep(BenchRouterCommand.shapes());
        assertTrue(all.size() > BenchRouterCommand.shapes().size());
        for (BenchRouterCommand.Shape s : all) {
            assertTrue(Validator.errors(s.spec()).isEmpty(), s.name() + ": " + Validator.errors(s.spec()));
        }
        assertEquals(all.size(), new HashSet<>(all.stream().map(BenchRouterCommand.Shape::name).toList()).size());
    }

    @Test
    void shapesSelectsByNameInTableOrder() {
        List<BenchRouterCommand.Shape> shapes = BenchRouterCommand.shapes();
        assertSame(shapes, BenchRouterCommand.selected(shapes, null));
        List<BenchRouterCommand.Shape> two = BenchRouterCommand.selected(shapes, List.of("gemm_2048x128x1024", "decode_deepseek_v3_m1"));
        assertEquals(List.of("decode_deepseek_v3_m1", "gemm_2048x128x1024"), two.stream().map(BenchRouterCommand.Shape::name).toList());
    }

    @Test
    void anUnknownShapeIsRefusedWithTheKnownOnes() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> BenchRouterCommand.selected(BenchRouterCommand.shapes(), List.of("gemm_2048x128x1023")));
        assertTrue(e.getMessage().contains("--shapes: unknown shape 'gemm_2048x128x1023'"), e.getMessage());
        assertTrue(e.getMessage().contains("gemm_2048x128x1024"), e.getMessage());
    }
}
