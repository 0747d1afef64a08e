package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Limits;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Add;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.schedule.RouterGemv;
import org.junit.jupiter.api.Test;

/**
 * Specs nested deeper than {@link Limits#MAX_NESTING_DEPTH} are refused with a spec error before
 * anything recurses over them: the parser by the text's nesting of calls, the Validator by the depth
 * of a tree built in Java. Nothing overflows the stack, however deep the nesting.
 */
class NestingLimitTest {
    private static final String ROUTER = """
            kernel r {
              problem router(hidden=2048, experts=128, weights=bf16, activations=bf16, expert_counts=false)
              schedule router_gemv(warps_per_cta=4, load_bytes=16, k_unroll=8, experts_per_cta=4)
              epilogue EPILOGUE
              target sm_90a
            }
            """;

    private static String router(String epilogue) {
        return ROUTER.replace("EPILOGUE", epilogue);
    }

    /** {@code store(topk(scale(scale(...(acc, 1)...), 2), dtype=fp32)} with {@code scales} scale nodes: a valid router. */
    private static String scaledRouter(int scales) {
        return router("store(topk(" + "scale(".repeat(scales) + "acc" + ", 1)".repeat(scales) + ", 2), dtype=fp32)");
    }

    @Test
    void anEpilogue2000CallsDeepIsRefusedAtTheFirstCallPastTheLimit() {
        String epilogue = "store(" + "add(".repeat(2000) + "acc" + ", acc)".repeat(2000) + ", dtype=fp32)";
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class, () -> SpecParser.parse(router(epilogue), "deep.moe"));
        assertEquals(1, e.errors().size(), e.getMessage());
        // "  epilogue " then store( and 63 add( before the '(' that opens call 65
        int column = "  epilogue ".length() + "store(".length() + 63 * "add(".length() + "add".length() + 1;
        SpecError error = e.errors().getFirst();
        assertEquals("deep.moe line 4:" + column, error.path());
        assertTrue(error.value().contains("2001 deep"), error.value());
        assertTrue(error.allowed().startsWith("calls nested at most " + Limits.MAX_NESTING_DEPTH + " deep"), error.allowed());
    }

    @Test
    void aValidRouterRule500DeepIsRefused() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class, () -> SpecParser.parse(scaledRouter(500)));
        assertTrue(e.getMessage().contains("of a nesting 502 deep: calls nested at most 64 deep"), e.getMessage());
    }

    @Test
    void nestingFarBeyondAnyStackIsRefusedWithoutOverflow() {
        assertThrows(SpecSyntaxException.class, () -> SpecParser.parse(scaledRouter(200_000)));
        assertThrows(SpecSyntaxException.class, () -> SpecParser.parseAll(router("store(" + "(".repeat(200_000))));
        assertThrows(SpecSyntaxException.class, () -> SpecParser.parseUnvalidated(router("f(".repeat(200_000)), "unclosed.moe"));
    }

    @Test
    void aTreeAtTheLimitParsesAndPrintsBack() {
        // store, topk, 61 scales and acc: 64 nodes, nested in 63 calls
        KernelSpec spec = SpecParser.parse(scaledRouter(Limits.MAX_NESTING_DEPTH - 3));
        assertEquals(Limits.MAX_NESTING_DEPTH, dev.moeforge.dsl.check.EpilogueTypes.depth(spec.epilogue()));
        assertEquals(spec, SpecParser.parse(SpecPrinter.print(spec)));
    }

    @Test
    void aTreeOneNodePastTheLimitIsASpecErrorOfTheEpilogue() {
        // 64 calls (within the text's limit) around a bare acc: 65 nodes
        SpecException e = assertThrows(SpecException.class, () -> SpecParser.parse(scaledRouter(Limits.MAX_NESTING_DEPTH - 2)));
        assertTrue(e.getMessage().contains("epilogue = a tree 65 nodes deep: at most 64 nodes from the root"), e.getMessage());
    }

    @Test
    void aTreeBuiltInJavaTooDeepIsASpecErrorNotAStackOverflow() {
        EpilogueNode deep = Acc.MAIN;
        for (int i = 0; i < 100_000; i++) {
            deep = new Scale(deep, 1);
        }
        KernelBuilder builder = KernelBuilder.named("r").router(2048, 128).schedule(new RouterGemv(4, 16, 8, 4))
                .epilogue(new Store(TopK.of(deep, 2), DType.FP32));
        SpecException e = assertThrows(SpecException.class, builder::build);
        assertEquals(new SpecError("epilogue", "a tree 100003 nodes deep", "at most 64 nodes from the root to the deepest "
                + "leaf; fold repeated nodes (e.g. one scale by the product of the factors)"), e.errors().getFirst());
        assertEquals(1, e.errors().size(), e.getMessage());
    }

    @Test
    void aSharedSubtreeIsMeasuredOnce() {
        // 60 levels of add(x, x): 2^60 paths, measured in 61 steps
        EpilogueNode shared = Acc.MAIN;
        for (int i = 0; i < 60; i++) {
            shared = new Add(shared, shared);
        }
        assertEquals(61, dev.moeforge.dsl.check.EpilogueTypes.depth(shared));
        for (int i = 0; i < 10; i++) {
            shared = new Add(shared, shared);
        }
        KernelSpec spec = KernelBuilder.named("r").router(2048, 128).schedule(new RouterGemv(4, 16, 8, 4))
                .epilogue(new Store(TopK.of(shared, 2), DType.FP32)).unchecked();
        assertEquals("a tree 73 nodes deep", Validator.errors(spec).getFirst().value());
    }
}
