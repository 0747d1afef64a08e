package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import java.util.List;

/**
 * A spec text that does not follow the grammar. Each error's path is its position,
 * {@code [source ]line L:C} (both from 1), its value the offending token, and what is allowed says
 * what was expected, followed by the source line with a caret under the column.
 */
public class SpecSyntaxException extends SpecException {

    SpecSyntaxException(List<SpecError> errors) {
        super(null, errors);
    }
}
