package dev.moeforge.dsl.check;

import java.util.List;

/**
 * A user's spec is invalid (as opposed to an internal error, which is an
 * {@link IllegalStateException}). Carries every problem found, each naming the field path, the
 * value and what is allowed; thrown before any code is generated.
 */
public class SpecException extends RuntimeException {
    /** The most errors a message lists; it counts the rest, so that a flood of errors keeps the message short. */
    public static final int MAX_LISTED_ERRORS = 20;

    private final transient String specName;
    private final List<SpecError> errors;
    private final int omitted;

    public SpecException(String specName, List<SpecError> errors) {
        this(specName, errors, 0);
    }

    /** {@code errors} and {@code omitted} more that were counted but not kept. */
    protected SpecException(String specName, List<SpecError> errors, int omitted) {
        super(format(specName, errors, omitted));
        if (errors.isEmpty()) {
            throw new IllegalArgumentException("a SpecException needs at least one error");
        }
        this.specName = specName;
        this.errors = List.copyOf(errors);
        this.omitted = omitted;
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

    /** The errors found beyond {@link #errors()}: counted, not kept. */
    public int omitted() {
        return omitted;
    }

    private static String format(String specName, List<SpecError> errors, int omitted) {
        StringBuilder b = new StringBuilder("invalid spec");
        if (specName != null) {
            b.append(" '").append(specName).append('\'');
        }
        int total = errors.size() + omitted;
        if (total == 1) {
            return b.append(": ").append(errors.getFirst().message()).toString();
        }
        b.append(": ").append(total).append(" problems");
        List<SpecError> listed = errors.subList(0, Math.min(errors.size(), MAX_LISTED_ERRORS));
        for (SpecError e : listed) {
            b.append("\n  ").append(e.message());
        }
        if (total > listed.size()) {
            b.append("\n  ... and ").append(total - listed.size()).append(" more");
        }
        return b.toString();
    }
}
