package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The shipped Qwen3 tokenizer through the tokenizers library: encoding, decoding and streaming. */
class TextTokenizerTest {
    private static TextTokenizer tokenizer;

    @TempDir
    Path tmp;

    @BeforeAll
    static void open() {
        tokenizer = TextTokenizer.builtInQwen3();
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    /** The ids transformers' Qwen3 tokenizer gives (no BOS: Qwen3 adds none). */
    @Test
    void encodesAsTransformersDoes() {
        assertArrayEquals(new int[] {785, 6722, 315, 9625, 374}, tokenizer.encode("The capital of France is"));
        assertEquals("built-in Qwen3 tokenizer", tokenizer.source());
    }

    @Test
    void decodeInvertsEncode() {
        for (String s : List.of("The capital of France is", "Hello, world!\n  indented\ttab 12345",
                "Crème brûlée, façade, naïve, Ærøskøbing", "北京是中国的首都。東京は日本の首都です。", "party 🎉🦜 time",
                "mixed: Größe 大小 😀 end")) {
            int[] ids = tokenizer.encode(s);
            assertTrue(ids.length > 0);
            assertEquals(s, tokenizer.decode(ids), s);
        }
    }

    /** Special tokens are left out of the decoded text (<|im_end|> is 151645). */
    @Test
    void decodeLeavesOutSpecialTokens() {
        int[] ids = tokenizer.encode("Paris");
        int[] withEos = java.util.Arrays.copyOf(ids, ids.length + 1);
        withEos[ids.length] = RandomModel.EOS;
        assertEquals("Paris", tokenizer.decode(withEos));
    }

    /** The stream's deltas add up to the full text. */
    @Test
    void streamDeltasAddUpToTheText() {
        String s = "Streaming text: café, 日本語, and 🎉 emoji.";
        int[] ids = tokenizer.encode(s);
        TextTokenizer.Stream stream = new TextTokenizer.Stream(tokenizer);
        StringBuilder out = new StringBuilder();
        for (int id : ids) {
            String delta = stream.add(id);
            assertTrue(!delta.contains("\uFFFD"), "no replacement character: " + delta);
            out.append(delta);
        }
        assertEquals(s, out.toString());
        assertEquals(tokenizer.decode(ids), out.toString());
    }

    /** A character split over byte tokens appears only with its last byte, not as U+FFFD before. */
    @Test
    void streamHoldsBackAnUnfinishedCharacter() {
        String split = List.of("🦜", "🎉", "𝄞", "龘", "ꙮ", "🫠").stream().filter(c -> tokenizer.encode(c).length > 1)
                .findFirst().orElseThrow(() -> new AssertionError("no candidate character takes more than one token"));
        int[] ids = tokenizer.encode("a" + split + "b");
        TextTokenizer.Stream stream = new TextTokenizer.Stream(tokenizer);
        List<String> deltas = new java.util.ArrayList<>();
        for (int id : ids) {
            deltas.add(stream.add(id));
        }
        assertEquals("a" + split + "b", String.join("", deltas));
        // the character's tokens: all but the last give nothing, the last the whole character
        int[] charIds = tokenizer.encode(split);
        TextTokenizer.Stream alone = new TextTokenizer.Stream(tokenizer);
        for (int i = 0; i < charIds.length - 1; i++) {
            assertEquals("", alone.add(charIds[i]), "token " + i + " of " + charIds.length + " of " + split);
        }
        assertEquals(split, alone.add(charIds[charIds.length - 1]));
        assertTrue(deltas.contains(split) || deltas.stream().anyMatch(d -> d.contains(split)), deltas::toString);
        assertTrue(deltas.stream().noneMatch(d -> d.contains("\uFFFD")), deltas::toString);
    }

    @Test
    void openOfAMissingFileSaysSo() {
        Path missing = tmp.resolve("model").resolve("tokenizer.json");
        String m = assertThrows(IllegalArgumentException.class, () -> TextTokenizer.open(missing)).getMessage();
        assertTrue(m.contains(missing.toString()) && m.contains("does not exist") && m.contains("tokenizer.json"), m);
    }

    @Test
    void openOfANonTokenizerIsRefused() throws IOException {
        Path bad = Files.writeString(tmp.resolve("tokenizer.json"), "{\"not\": \"a tokenizer\"}");
        String m = assertThrows(IllegalArgumentException.class, () -> TextTokenizer.open(bad)).getMessage();
        assertTrue(m.contains(bad.toString()) && m.contains("not a tokenizer.json"), m);
    }

    /** A model directory's tokenizer.json (the shipped one, as init-model copies it) encodes as the built-in one. */
    @Test
    void openReadsAFileAsTheBuiltInOne() throws IOException {
        Path file = tmp.resolve("tokenizer.json");
        try (var in = new java.util.zip.GZIPInputStream(TextTokenizer.resource("tokenizer.json.gz"))) {
            Files.copy(in, file);
        }
        try (TextTokenizer t = TextTokenizer.open(file)) {
            assertEquals(file.toString(), t.source());
            String s = "The capital of France is Paris, and 東京 🎉";
            assertArrayEquals(tokenizer.encode(s), t.encode(s));
        }
    }
}
