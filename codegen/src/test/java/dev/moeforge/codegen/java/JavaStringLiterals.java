package dev.moeforge.codegen.java;

import java.util.ArrayList;
import java.util.List;

/**
 * Reads back the string values of generated Java source: a run of string literals joined by
 * {@code +} is one value, a {@code ,} outside literals ends it. Enough for JavaPoet's {@code $S}
 * output, which splits multi-line strings into concatenated literals.
 */
final class JavaStringLiterals {
    private JavaStringLiterals() {}

    /** The value of the initializer of {@code static final String <field>} in {@code source}. */
    static String fieldValue(String source, String field) {
        String marker = "String " + field + " = ";
        int start = source.indexOf(marker);
        if (start < 0) {
            throw new AssertionError("no field " + field + " in:\n" + source);
        }
        List<String> values = values(source, start + marker.length(), ';');
        if (values.size() != 1) {
            throw new AssertionError(field + " is not one string expression: " + values);
        }
        return values.getFirst();
    }

    /** The string values between {@code from} and the first {@code end} character outside a literal. */
    static List<String> values(String source, int from, char end) {
        List<String> out = new ArrayList<>();
        StringBuilder current = null;
        int i = from;
        while (i < source.length()) {
            char c = source.charAt(i);
            if (c == '"') {
                if (current == null) {
                    current = new StringBuilder();
                }
                i = literal(source, i + 1, current);
            } else if (c == end || c == ',') {
                if (current != null) {
                    out.add(current.toString());
                    current = null;
                }
                if (c == end) {
                    return out;
                }
                i++;
            } else if (c == '+' || Character.isWhitespace(c)) {
                i++;
            } else {
                throw new AssertionError("unexpected '" + c + "' at " + i + " in: "
                        + source.substring(from, Math.min(source.length(), i + 20)));
            }
        }
        throw new AssertionError("no '" + end + "' after " + from);
    }

    /** Appends the unescaped literal starting after its opening quote; returns the index after its closing quote. */
    private static int literal(String s, int i, StringBuilder out) {
        while (true) {
            char c = s.charAt(i);
            if (c == '"') {
                return i + 1;
            }
            if (c == '\n') {
                throw new AssertionError("unterminated string literal");
            }
            if (c != '\\') {
                out.append(c);
                i++;
                continue;
            }
            char e = s.charAt(i + 1);
            switch (e) {
                case 'n' -> out.append('\n');
                case 't' -> out.append('\t');
                case 'r' -> out.append('\r');
                case 'b' -> out.append('\b');
                case 'f' -> out.append('\f');
                case 's' -> out.append(' ');
                case '"', '\'', '\\' -> out.append(e);
                case 'u' -> {
                    out.append((char) Integer.parseInt(s.substring(i + 2, i + 6), 16));
                    i += 4;
                }
                default -> throw new AssertionError("unsupported escape \\" + e);
            }
            i += 2;
        }
    }
}
