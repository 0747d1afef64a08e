package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/** A closed set of names of the textual form (dtypes, layouts, targets, ...) and the IR value each stands for. */
final class Choices<T> {
    private final Map<String, T> byText = new LinkedHashMap<>();

    private Choices(List<T> values, Function<T, String> text) {
        for (T v : values) {
            byText.put(text.apply(v), v);
        }
    }

    static <T> Choices<T> of(List<T> values, Function<T, String> text) {
        return new Choices<>(values, text);
    }

    /** The value named {@code text}, or null after recording an error at {@code path}. */
    T read(String text, String path, List<SpecError> errors) {
        T value = byText.get(text);
        if (value == null) {
            errors.add(new SpecError(path, text, allowed()));
        }
        return value;
    }

    String allowed() {
        return "one of: " + String.join(", ", byText.keySet());
    }
}
