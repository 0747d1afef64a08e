package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Texts off the grammar fail with the position (line and column from 1), the offending token and what was expected. */
class SpecSyntaxErrorTest {

    @ParameterizedTest(name = "{1}")
    @CsvSource(delimiter = '|', quoteCharacter = '"', textBlock = """
            "kernel k {\\n  problem expert_down(hidden=2048,, intermediate=768)\\n}\\n" | line 2:35 | ',': expected a name or a number
            "kernel k {\\n  problem expert_down(hidden=2048)\\n"                       | line 3:1  | end of input: expected '}', 'problem', 'schedule', 'epilogue' or 'target'
            "kernel 42 { }"                                                            | line 1:8  | '42': expected a name
            "kernel k {\\n  problm expert_down()\\n}"                                  | line 2:3  | 'problm': expected '}', 'problem'
            "kernel k {\\n  epilogue store(combine(acc) dtype=bf16)\\n}"               | line 2:31 | 'dtype': expected ',' or ')'
            "kernel k { problem expert_down(hidden=) }"                                | line 1:39 | ')': expected a name or a number
            "kernel k { target sm_90a } }"                                             | line 1:28 | '}': expected end of input or 'kernel'
            "kernel k {\\n\\tschedule output_centric(warps_per_cta=4 $)\\n}"           | line 2:42 | '$': expected a name, a number
            "kernel k { problem expert_down(hidden=-) }"                               | line 1:39 | '-': expected
            """)
    void reportsPositionTokenAndExpectation(String escaped, String position, String fragment) {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class, () -> SpecParser.parseAll(escaped.translateEscapes()));
        assertTrue(e.getMessage().contains(position + " = " + fragment), e.getMessage());
    }

    @Test
    void showsTheSourceLineWithACaretUnderTheColumn() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parse("kernel k {\n\tproblem expert_down(hidden=)\n}\n"));
        assertEquals("""
                invalid spec: line 2:29 = ')': expected a name or a number
                    \tproblem expert_down(hidden=)
                    \t                           ^""", e.getMessage());
    }

    @Test
    void namesTheSourceWhenGiven() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parse("kernel k {", "qwen3.moe"));
        assertEquals("qwen3.moe line 1:11", e.errors().getFirst().path());
    }

    @Test
    void reportsEveryErrorTheParserRecoversFrom() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parseAll("kernel a { target sm_90a ) }\nkernel b { problem p(x=) }\n"));
        assertEquals(2, e.errors().size(), e.getMessage());
        assertEquals("line 1:26", e.errors().get(0).path());
        assertEquals("line 2:24", e.errors().get(1).path());
    }

    @Test
    void aRunOfCharactersNoTokenStartsWithIsOneShortError() {
        for (int run : new int[] {10_000, 60_000}) {
            SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                    () -> SpecParser.parse("kernel k {\n  " + "@".repeat(run) + "\n}\n", "at.moe"));
            assertEquals(1, e.errors().size(), e::getMessage);
            assertEquals("at.moe line 2:3 = '" + "@".repeat(SyntaxErrors.TOKEN_SHOWN) + "...' (" + run
                    + " characters): expected a name, a number, one of { } ( ) , = or a comment; no token starts with "
                    + "these characters", e.errors().getFirst().message().lines().findFirst().orElseThrow());
            assertTrue(e.getMessage().length() < 500, e.getMessage().length() + " characters");
        }
    }

    @Test
    void atMostTwentyErrorsAreListedAndTheRestCounted() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parse("kernel k {\n" + "  @ $\n".repeat(5_000) + "}\n"));
        assertEquals(SpecException.MAX_LISTED_ERRORS, e.errors().size());
        assertEquals(10_000 - SpecException.MAX_LISTED_ERRORS, e.omitted());
        assertTrue(e.getMessage().startsWith("invalid spec: 10000 problems\n  line 2:3 = '@'"), e.getMessage());
        assertTrue(e.getMessage().endsWith("\n  ... and 9980 more"), e.getMessage());
        assertTrue(e.getMessage().length() < 10_000, e.getMessage().length() + " characters");
    }

    @Test
    void theEarliestErrorsAreListedInTheirOrderInTheText() {
        // the lexer reads the whole text before the parser starts: its errors come first, yet are listed in place
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parseAll("kernel a { target ) }\nkernel b { @ }\n" + "kernel c { target ) }\n".repeat(30)));
        assertEquals(List.of("line 1:19", "line 2:12", "line 3:19", "line 4:19"),
                e.errors().subList(0, 4).stream().map(SpecError::path).toList());
        assertEquals(32 - SpecException.MAX_LISTED_ERRORS, e.omitted());
    }

    @Test
    void aLongLineIsShownAsAWindowAroundTheColumn() {
        String line = "  epilogue store(" + "x".repeat(300) + " $ " + "y".repeat(300) + ")";
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parse("kernel k {\n" + line + "\n}\n"));
        String window = line.substring(318 - SyntaxErrors.EXCERPT_WIDTH / 2, 318 + SyntaxErrors.EXCERPT_WIDTH / 2);
        assertEquals("line 2:319 = '$': expected a name, a number, one of { } ( ) , = or a comment; no token starts with "
                + "this character\n    ..." + window + "...\n       " + " ".repeat(SyntaxErrors.EXCERPT_WIDTH / 2) + "^",
                e.errors().getFirst().message());
    }

    @Test
    void aHugeTokenIsShownCut() {
        SpecSyntaxException e = assertThrows(SpecSyntaxException.class,
                () -> SpecParser.parse("kernel k { problem expert_down(hidden=2048 " + "p".repeat(100_000) + ") }"));
        assertEquals("'" + "p".repeat(SyntaxErrors.TOKEN_SHOWN) + "...' (100000 characters)", e.errors().getFirst().value());
        assertTrue(e.getMessage().length() < 500, e.getMessage().length() + " characters");
    }

    @Test
    void aHugeValueIsShownCutInTheValidatorsMessage() {
        String name = "k".repeat(100_000);
        SpecException e = assertThrows(SpecException.class, () -> SpecParser.parse("""
                kernel NAME {
                  problem expert_down(hidden=2048, intermediate=768, experts=128, topk=8, weights=bf16, activations=bf16)
                  schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=8, tokens_per_cta=1, warps_per_output=1, min_blocks_per_sm=0)
                  epilogue store(combine(acc), dtype=bf16)
                  target sm_90a
                }
                """.replace("NAME", name)));
        assertEquals("'" + name + "'", e.errors().getFirst().value());
        assertTrue(e.getMessage().contains("name = '" + "k".repeat(SpecError.VALUE_SHOWN - 1) + "... (100002 characters): a C identifier"),
                () -> e.getMessage().substring(0, 300));
        assertTrue(e.getMessage().length() < 101_000, e.getMessage().length() + " characters");
    }

    @Test
    void anyInvalidSpecListsAtMostTwentyErrorsAndCountsTheRest() {
        String args = java.util.stream.IntStream.range(0, 30).mapToObj(i -> "a" + i + "=1").collect(java.util.stream.Collectors.joining(", "));
        SpecException e = assertThrows(SpecException.class, () -> SpecParser.parse("kernel k { problem expert_down(" + args + ") }"));
        // 30 unknown arguments, 6 missing ones and 3 missing sections: all kept, 20 listed
        assertEquals(39, e.errors().size());
        assertEquals(1 + SpecException.MAX_LISTED_ERRORS + 1, e.getMessage().lines().count(), e::getMessage);
        assertTrue(e.getMessage().startsWith("invalid spec 'k': 39 problems\n"), e::getMessage);
        assertTrue(e.getMessage().endsWith("\n  ... and 19 more"), e::getMessage);
    }

    @Test
    void aSyntaxErrorIsASpecException() {
        assertThrows(SpecException.class, () -> SpecParser.parse("kernel"));
    }
}
