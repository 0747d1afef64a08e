package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Every error of a spec read from text names its place, {@code [file ]line L:C}: the value of the
 * field it is about, else the nearest enclosing call, else the kernel; the Validator's errors too,
 * though the Validator sees only the built spec.
 */
class SpecErrorPlacesTest {
    private static final String DOWN = """
            # Qwen3-30B-A3B, second half
            kernel qwen3_down {
              problem expert_down(hidden=2048, intermediate=768, experts=128, topk=8, weights=bf16, activations=bf16)
              schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=8, tokens_per_cta=1, warps_per_output=1, min_blocks_per_sm=0)
              epilogue store(combine(acc), dtype=bf16)
              target sm_90a
            }
            """;

    private static SpecException refusal(String text, String sourceName) {
        return assertThrows(SpecException.class, () -> SpecParser.parse(text, sourceName));
    }

    @Test
    void theValidatorsErrorsNameTheFileLineAndColumnOfTheirField() {
        SpecException e = refusal(DOWN.replace("hidden=2048", "hidden=2050").replace("warps_per_cta=4", "warps_per_cta=33")
                .replace("dtype=bf16", "dtype=fp32"), "down.moe");
        assertEquals(List.of(
                "down.moe line 4:41: schedule.warps_per_cta = 33: 1..32",
                "down.moe line 3:30: problem.hidden = 2050: a multiple of 8 (each lane loads 16 bytes = 8 elements at a time); "
                        + "lower schedule.load_bytes or pad the dimension",
                "down.moe line 5:38: epilogue.store.dtype = fp32: the output type must be the problem's activation type, bf16 "
                        + "(the down kernel reads gate_up's output as its activation)"),
                e.errors().stream().map(SpecError::message).toList());
        assertEquals("qwen3_down", e.specName());
    }

    @Test
    void aNestedEpilogueFieldIsPlacedAtItsValue() {
        SpecException e = refusal(DOWN.replace("combine(acc)", "combine(scale(acc, 1e39))"), "down.moe");
        assertEquals(List.of("down.moe line 5:26", "down.moe line 5:37"), e.errors().stream().map(SpecError::position).toList());
        assertEquals("epilogue.store.input.combine.input.scale.factor", e.errors().get(1).path());
    }

    @Test
    void aFieldNotWrittenIsPlacedAtItsCallOrKernel() {
        SpecException e = refusal(DOWN.replace("output_centric(", "router_gemv(").replace("  target sm_90a\n", ""), "down.moe");
        SpecError missingArgument = e.errors().stream().filter(x -> x.path().equals("schedule.experts_per_cta")).findFirst().orElseThrow();
        assertEquals("down.moe line 4:12", missingArgument.position());
        SpecError missingSection = e.errors().stream().filter(x -> x.path().equals("target")).findFirst().orElseThrow();
        assertEquals("down.moe line 2:1", missingSection.position());
    }

    @Test
    void theBuildersErrorsArePlacedAtTheArgumentTheyAreAbout() {
        SpecException e = refusal(DOWN.replace("hidden=2048", "hidden=2048, hidden=4096, depth=3")
                .replace("dtype=bf16)", "dtype=bf16, 7)").replace("target sm_90a", "target sm_75"), null);
        assertEquals(List.of(
                "line 3:43: problem.hidden = 4096: one value; hidden is given more than once",
                "line 3:55: problem.depth = 3: unknown argument of expert_down; one of: hidden, intermediate, experts, topk, "
                        + "weights, activations, bias",
                "line 5:44: epilogue.store = 7: a named argument: positional arguments come first",
                "line 6:10: target = sm_75: one of: sm_90a, sm_100a, sm_120a"),
                e.errors().stream().map(SpecError::message).toList());
    }

    @Test
    void theKernelNameIsPlacedAtTheName() {
        SpecException e = refusal(DOWN.replace("qwen3_down", "int"), "down.moe");
        assertEquals("down.moe line 2:8", e.errors().getFirst().position());
    }

    @Test
    void eachKernelOfAFileIsPlacedInTheFile() {
        SpecException e = assertThrows(SpecException.class,
                () -> SpecParser.parseAll(DOWN + DOWN.replace("topk=8", "topk=0"), "pair.moe"));
        assertEquals("pair.moe line 10:72: problem.topk = 0: 1..32 (at most the number of experts, 128, and at most 32)",
                e.errors().getFirst().message());
    }

    @Test
    void aSecondKernelIsPlacedWhereItStarts() {
        SpecException e = refusal(DOWN + DOWN, "two.moe");
        assertEquals("invalid spec: two.moe line 9:1: kernels = 2: exactly one kernel (parseAll reads several); the second "
                + "starts here", e.getMessage());
    }

    @Test
    void aFileWithoutAKernelSaysSo() {
        for (String text : List.of("", "# a comment only\n", "  \n\n")) {
            SpecException e = refusal(text, "empty.moe");
            assertEquals("invalid spec: empty.moe: kernel = (missing): no kernel found; a spec file holds one or more "
                    + "`kernel NAME { ... }` blocks, and parse reads exactly one", e.getMessage());
            assertNull(e.specName());
        }
        assertEquals("invalid spec: kernel = (missing): no kernel found; a spec file holds one or more `kernel NAME { ... }` "
                + "blocks, and parse reads exactly one", refusal("", null).getMessage());
        assertEquals(List.of(), SpecParser.parseAll("", "empty.moe"));
    }

    @Test
    void aSpecBuiltInJavaHasNoPlace() {
        SpecException e = assertThrows(SpecException.class, () -> dev.moeforge.dsl.check.Validator.check(
                SpecParser.parseUnvalidated(DOWN.replace("topk=8", "topk=0"), "down.moe")));
        assertNull(e.errors().getFirst().position());
        assertEquals("problem.topk = 0: 1..32 (at most the number of experts, 128, and at most 32)", e.errors().getFirst().message());
    }
}
