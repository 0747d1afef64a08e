package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * The functions of one kind (problems, schedules or epilogue nodes) by name. Resolving an
 * expression looks up the function it calls, binds its arguments and builds the IR value;
 * where that fails it records errors and gives null.
 */
final class FunctionTable<T> {

    /**
     * One function: its parameters in declared order (the order of positional arguments) and how
     * it builds its value. {@code build} reads every argument, then returns null unless
     * {@link Args#ok()}, so that all of a call's errors are reported.
     */
    record Entry<T>(String name, List<String> params, Function<Args, T> build) {}

    private final Map<String, Entry<T>> entries = new LinkedHashMap<>();
    private final boolean expressions;

    private FunctionTable(List<Entry<T>> entries, boolean expressions) {
        for (Entry<T> e : entries) {
            this.entries.put(e.name(), e);
        }
        this.expressions = expressions;
    }

    /**
     * Functions that stand for a whole section (problem, schedule): arguments by name only, at the
     * paths {@code section.argument} the Validator uses.
     */
    static <T> FunctionTable<T> sections(List<Entry<T>> entries) {
        return new FunctionTable<>(entries, false);
    }

    /**
     * Functions that nest (epilogue nodes): arguments by position or name, a bare name is a call
     * without arguments, and paths name each function: {@code epilogue.store.input}.
     */
    static <T> FunctionTable<T> expressions(List<Entry<T>> entries) {
        return new FunctionTable<>(entries, true);
    }

    T resolve(Expr expr, String path, BuildLog log) {
        log.wrote(path, expr.at());
        Expr.Call call = switch (expr) {
            case Expr.Call c -> c;
            case Expr.Name n -> new Expr.Call(n.text(), List.of(), n.at());
            case Expr.Num _ -> null;
        };
        Entry<T> entry = call == null ? null : entries.get(call.name());
        if (entry == null) {
            log.error(new SpecError(path, call == null ? expr.text() : call.name(),
                    "one of: " + String.join(", ", entries.keySet())));
            return null;
        }
        String argsPath = expressions ? path + "." + entry.name() : path;
        return entry.build().apply(Args.bind(call, entry.params(), expressions, argsPath, log));
    }
}
