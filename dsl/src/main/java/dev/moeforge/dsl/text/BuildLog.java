package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * What reading one kernel block records besides the spec: its errors, and where the text wrote each
 * field path (the paths the Validator's errors use), so that any error of the spec, found while
 * reading or later by the Validator, names its place in the text.
 */
final class BuildLog {
    private final String sourceName;
    private final SourcePosition kernel;
    private final List<SpecError> errors = new ArrayList<>();
    private final Map<String, SourcePosition> written = new HashMap<>();

    BuildLog(String sourceName, SourcePosition kernel) {
        this.sourceName = sourceName;
        this.kernel = kernel;
    }

    List<SpecError> errors() {
        return errors;
    }

    /** Records an error; where it is, is looked up by its path when the errors are thrown. */
    void error(SpecError error) {
        errors.add(error);
    }

    /** Records an error at a place of its own (e.g. the second of two values for one parameter). */
    void error(SpecError error, SourcePosition at) {
        errors.add(error.at(at.in(sourceName)));
    }

    /** The text wrote the field at {@code path} at {@code at}. */
    void wrote(String path, SourcePosition at) {
        written.put(path, at);
    }

    /** Each error with its place: its field's, else the nearest enclosing field's, else the kernel's. */
    List<SpecError> located(List<SpecError> found) {
        return found.stream().map(e -> e.position() != null ? e : e.at(positionOf(e.path()).in(sourceName))).toList();
    }

    private SourcePosition positionOf(String path) {
        for (String p = path; ; p = p.substring(0, p.lastIndexOf('.'))) {
            SourcePosition at = written.get(p);
            if (at != null) {
                return at;
            }
            if (p.indexOf('.') < 0) {
                return kernel;
            }
        }
    }
}
