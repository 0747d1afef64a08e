package dev.moeforge.checkpoint;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.core.util.DefaultIndenter;
import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

/** The JSON reader/writer shared by this package. */
final class Json {

    /**
     * Strict on input: a header with a tensor named twice, or anything after the top-level object
     * (other than the space padding), is malformed rather than silently half-read.
     */
    static final ObjectMapper MAPPER = JsonMapper.builder()
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();

    /** transformers' layout, json.dumps(indent=2): {@code "key": value}, two-space indent. */
    static final DefaultPrettyPrinter TRANSFORMERS_LAYOUT = new DefaultPrettyPrinter()
            .withSeparators(Separators.createDefaultInstance().withObjectFieldValueSpacing(Separators.Spacing.AFTER))
            .withObjectIndenter(new DefaultIndenter("  ", "\n"));

    private Json() {}
}
