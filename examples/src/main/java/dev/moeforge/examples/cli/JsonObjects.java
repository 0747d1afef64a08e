package dev.moeforge.examples.cli;

import java.util.LinkedHashMap;
import java.util.Map;

/** JSON objects whose keys keep the order given, so that the same inputs write the same bytes. */
final class JsonObjects {
    private JsonObjects() {}

    /** Keys and values in turn; unlike Map.of, whose iteration order changes from one JVM run to the next. */
    static Map<String, Object> ordered(Object... keysAndValues) {
        if (keysAndValues.length % 2 != 0) {
            throw new IllegalArgumentException("keys and values in pairs: " + keysAndValues.length + " arguments");
        }
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            m.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return m;
    }
}
