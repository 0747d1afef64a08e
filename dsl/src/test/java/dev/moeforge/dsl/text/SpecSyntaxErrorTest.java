package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.check.SpecException;
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
    void aSyntaxErrorIsASpecException() {
        assertThrows(SpecException.class, () -> SpecParser.parse("kernel"));
    }
}
