package dev.moeforge.examples.decoder;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * A Hugging Face {@code tokenizer.json}, read by the {@code tokenizers} library itself (through DJL,
 * its native library inside the jar; nothing is downloaded). Encodes as {@code tokenizer(text)}
 * does, special tokens added; decodes without them.
 */
public final class TextTokenizer implements AutoCloseable {
    /** The Qwen3 tokenizer shipped with MoeForge: tokenizer.json (gzip), tokenizer_config.json, LICENSE, NOTICE. */
    public static final String BUILT_IN = "/dev/moeforge/examples/decoder/qwen3/";

    private static final Map<String, String> OPTIONS = Map.of("addSpecialTokens", "true", "truncation", "false",
            "padding", "false");

    static {
        // DJL unpacks its native library under DJL_CACHE_DIR (default ~/.djl.ai); keep it with MoeForge's caches
        if (System.getProperty("DJL_CACHE_DIR") == null && System.getenv("DJL_CACHE_DIR") == null) {
            System.setProperty("DJL_CACHE_DIR", Path.of(System.getProperty("user.home"), ".cache", "moeforge", "djl").toString());
        }
        // the jar's CPU build, never a download: on a CUDA host DJL would otherwise fetch its GPU build
        if (System.getenv("RUST_FLAVOR") == null) {
            System.setProperty("RUST_FLAVOR", "cpu");
        }
        System.setProperty("ai.djl.offline", "true");
    }

    private final HuggingFaceTokenizer tokenizer;
    private final String source;

    private TextTokenizer(HuggingFaceTokenizer tokenizer, String source) {
        this.tokenizer = tokenizer;
        this.source = source;
    }

    /** The tokenizer.json of a model directory. */
    public static TextTokenizer open(Path tokenizerJson) {
        if (!Files.isRegularFile(tokenizerJson)) {
            throw new IllegalArgumentException(tokenizerJson + " does not exist: the model directory needs its tokenizer.json");
        }
        try {
            return new TextTokenizer(HuggingFaceTokenizer.newInstance(tokenizerJson, OPTIONS), tokenizerJson.toString());
        } catch (IOException e) {
            throw new UncheckedIOException(tokenizerJson + ": " + e.getMessage(), e);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException(tokenizerJson + ": not a tokenizer.json the tokenizers library reads: "
                    + e.getMessage(), e);
        }
    }

    /** The Qwen3 tokenizer MoeForge ships. */
    public static TextTokenizer builtInQwen3() {
        try (InputStream in = new GZIPInputStream(resource("tokenizer.json.gz"))) {
            return new TextTokenizer(HuggingFaceTokenizer.newInstance(in, OPTIONS), "built-in Qwen3 tokenizer");
        } catch (IOException e) {
            throw new UncheckedIOException("the built-in Qwen3 tokenizer: " + e.getMessage(), e);
        }
    }

    /** A file of the built-in tokenizer's folder. */
    public static InputStream resource(String name) {
        InputStream in = TextTokenizer.class.getResourceAsStream(BUILT_IN + name);
        if (in == null) {
            throw new IllegalStateException("the jar lacks " + BUILT_IN + name);
        }
        return in;
    }

    public int[] encode(String text) {
        return Arrays.stream(tokenizer.encode(text, true, false).getIds()).mapToInt(Math::toIntExact).toArray();
    }

    /** The text of {@code ids}, special tokens left out. */
    public String decode(int[] ids) {
        return tokenizer.decode(Arrays.stream(ids).asLongStream().toArray(), true);
    }

    public String source() {
        return source;
    }

    @Override
    public void close() {
        tokenizer.close();
    }

    /**
     * Text as it is generated: each call returns what the new token added, holding back an
     * unfinished UTF-8 character. Only the tokens since the last text given out, and the few before
     * them that shape it (a leading space, a merged character), are decoded again, as the
     * tokenizers library's own decode stream does, so a long generation costs no more per token.
     */
    public static final class Stream {
        private final TextTokenizer tokenizer;
        private int[] ids = new int[0];
        private int prefix;  // where the context of the next text starts
        private int read;    // where the next text starts

        public Stream(TextTokenizer tokenizer) {
            this.tokenizer = tokenizer;
        }

        public String add(int id) {
            ids = Arrays.copyOf(ids, ids.length + 1);
            ids[ids.length - 1] = id;
            String before = tokenizer.decode(Arrays.copyOfRange(ids, prefix, read));
            String now = tokenizer.decode(Arrays.copyOfRange(ids, prefix, ids.length));
            if (now.length() <= before.length() || now.endsWith("\uFFFD")) {
                return "";
            }
            prefix = read;
            read = ids.length;
            return now.substring(before.length());
        }
    }
}
