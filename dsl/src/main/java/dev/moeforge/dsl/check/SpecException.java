package dev.moeforge.dsl.check;

import java.util.List;

/**
 * A user's spec is invalid (as opposed to an internal error, which is an
 * {@link IllegalStateException}). Carries every problem found, each naming the field path, the
 * value and what is allowed; thrown before any code is generated.
 */
public class SpecException extends RuntimeException {
    private final transient String specName;
    private final List<SpecError> errors;

    public SpecException(String specName, List<SpecError> errors) {
        super(format(specName, errors));
        if (errors.isEmpty()) {
            throw new IllegalArgumentException("a SpecException needs at least one error");
        }
        this.specName = specName;
        this.errors = List.copyOf(errors);
    }

    public static SpecException of(String specName, String path, Object value, String allowed) {
        return new SpecException(specName, List.of(new SpecError(path, String.valueOf(value), allowed)));
    }

    public String specName() {
        return specName;
    }

    public List<SpecError> errors() {
        return errors;
    }

    private static String format(String specName, List<SpecError> errors) {
        StringBuilder b = new StringBuilder("invalid spec");
        if (specName != null) {
            b.append(" '").append(specName).append('\'');
        }
        if (errors.size() == 1) {
            return b.append(": ").append(errors.getFirst().message()).toString();
        }
        b.append(": ").append(errors.size()).append(" problems");
        for (SpecError e : errors) {
            b.append("\n  ").append(e.message());
        }
        return b.toString();
    }
}
