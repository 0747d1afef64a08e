package dev.moeforge.runtime.compile;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** What the kernel cache keys on: the source without comments, trailing spaces or blank lines. */
class CudaTokensTest {

    @Test
    void commentsBecomeOneSpaceAndBlankLinesGo() {
        assertEquals("int a;\nint b = 1  + 2;\n", CudaTokens.of("// note\nint a;   \n\n/* block\n comment */\nint b = 1 /*x*/+ 2;\n"));
        // a block comment is one space, as in C++'s own translation: the tokens around it stay apart
        assertEquals("a b\n", CudaTokens.of("a/**/b"));
        // a line comment continued by a backslash swallows the next line
        assertEquals("int x;\n", CudaTokens.of("int x; // one \\\n two\n"));
    }

    @Test
    void literalsAreKeptWithTheirCommentMarkers() {
        assertEquals("asm(\"mov.u32 %0, %1; // not a comment\");\n", CudaTokens.of("asm(\"mov.u32 %0, %1; // not a comment\");\n"));
        assertEquals("char c = '/'; char d = '\\'';\n", CudaTokens.of("char c = '/'; char d = '\\''; // quote\n"));
        assertEquals("s = \"a\\\"/*b\";\n", CudaTokens.of("s = \"a\\\"/*b\";\n"));
    }

    @Test
    void theDeviceHeaderKeepsItsCode() {
        String header = dev.moeforge.codegen.cuda.DeviceHeader.content();
        String tokens = CudaTokens.of(header);
        assertEquals(-1, tokens.indexOf("//"), "no line comment survives outside literals");
        assertEquals(tokens, CudaTokens.of(tokens), "stripping is idempotent");
    }
}
