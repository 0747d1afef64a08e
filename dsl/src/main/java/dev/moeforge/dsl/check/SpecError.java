package dev.moeforge.dsl.check;

/**
 * One thing wrong with a spec: where ({@code path}, e.g. {@code problem.shape.hidden}), what was
 * given ({@code value}) and what is allowed ({@code allowed}).
 */
public record SpecError(String path, String value, String allowed) {
    /** Characters of a value a message shows; a longer one (a huge name or number) is cut and its length given. */
    public static final int VALUE_SHOWN = 200;

    public String message() {
        return path + " = " + shown(value) + ": " + allowed;
    }

    @Override
    public String toString() {
        return message();
    }

    private static String shown(String value) {
        return value.length() <= VALUE_SHOWN ? value
                : value.substring(0, VALUE_SHOWN) + "... (" + value.length() + " characters)";
    }
}
