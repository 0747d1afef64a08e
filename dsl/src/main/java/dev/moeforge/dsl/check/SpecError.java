package dev.moeforge.dsl.check;

/**
 * One thing wrong with a spec: where ({@code path}, e.g. {@code problem.shape.hidden}), what was
 * given ({@code value}) and what is allowed ({@code allowed}).
 */
public record SpecError(String path, String value, String allowed) {

    public String message() {
        return path + " = " + value + ": " + allowed;
    }

    @Override
    public String toString() {
        return message();
    }
}
