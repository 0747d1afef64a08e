package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.moeforge.dsl.check.SpecException;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** An integer parameter written with a decimal point or exponent is refused as not an integer, with the integer where it is one. */
class IntegerArgumentTest {
    private static final String DOWN = """
            kernel qwen3_down {
              problem expert_down(hidden=HIDDEN, intermediate=768, experts=128, topk=8, weights=bf16, activations=bf16)
              schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=8, tokens_per_cta=1, warps_per_output=1, min_blocks_per_sm=0)
              epilogue store(combine(acc), dtype=bf16)
              target sm_90a
            }
            """;

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', textBlock = """
            2048.0          | an integer: a whole number written without a decimal point or exponent; write 2048
            2e3             | an integer: a whole number written without a decimal point or exponent; write 2000
            -2.048E+3       | an integer: a whole number written without a decimal point or exponent; write -2048
            0.0             | an integer: a whole number written without a decimal point or exponent; write 0
            1.5             | an integer: a whole number written without a decimal point or exponent
            1e10            | an integer: a whole number written without a decimal point or exponent
            1e999999999     | an integer: a whole number written without a decimal point or exponent
            2147483648      | an integer from -2147483648 to 2147483647
            -0              | 1..65536
            """)
    void namesWhatIsWrongWithTheNumber(String hidden, String allowed) {
        SpecException e = assertThrows(SpecException.class, () -> SpecParser.parse(DOWN.replace("HIDDEN", hidden), "down.moe"));
        String value = hidden.equals("-0") ? "0" : hidden;
        assertEquals("down.moe line 2:30: problem.hidden = " + value + ": " + allowed, e.errors().getFirst().message());
    }
}
