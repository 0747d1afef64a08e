package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import java.util.List;

/**
 * A spec text that does not follow the grammar. Each error's path is its position,
 * {@code [source ]line L:C} (both from 1), its value the offending token, and what is allowed says
 * what was expected, followed by a window of the source line with a caret under the column. Only
 * the earliest {@link SpecException#MAX_LISTED_ERRORS} errors are kept; {@link #omitted()} counts the rest.
 */
public class SpecSyntaxException extends SpecException {

    SpecSyntaxException(List<SpecError> errors, int omitted) {
        super(null, errors, omitted);
    }
}
