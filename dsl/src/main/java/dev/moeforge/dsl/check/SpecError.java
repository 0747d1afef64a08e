package dev.moeforge.dsl.check;

/**
 * One thing wrong with a spec: where ({@code path}, e.g. {@code problem.shape.hidden}), what was
 * given ({@code value}) and what is allowed ({@code allowed}). A spec read from text also names the
 * place ({@code position}, {@code [file ]line L:C}) where it wrote the field; null for a spec built in
 * Java, and for a syntax error, whose path is its place.
 */
public record SpecError(String path, String value, String allowed, String position) {
    /** Characters of a value a message shows; a longer one (a huge name or number) is cut and its length given. */
    public static final int VALUE_SHOWN = 200;

    public SpecError(String path, String value, String allowed) {
        this(path, value, allowed, null);
    }

    /** This error at {@code newPosition}. */
    public SpecError at(String newPosition) {
        return new SpecError(path, value, allowed, newPosition);
    }

    public String message() {
        return (position == null ? "" : position + ": ") + path + " = " + shown(value) + ": " + allowed;
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
