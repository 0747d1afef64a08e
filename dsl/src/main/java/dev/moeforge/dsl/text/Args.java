package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import java.math.BigDecimal;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The arguments of one call, bound to the parameters of the function it names. Binding records
 * unknown, repeated and misplaced arguments; reading a parameter converts its value and records a
 * missing argument or a value of the wrong kind. Errors are at {@code path.parameter}, the names
 * the Validator uses.
 */
final class Args {
    /** A number as an integer is written: digits, perhaps a minus sign, no point or exponent. */
    private static final Pattern INTEGER = Pattern.compile("-?[0-9]+");

    private final String function;
    private final List<String> params;
    private final String path;
    private final BuildLog log;
    private final int errorsBefore;
    private final Map<String, Expr> values = new HashMap<>();

    private Args(String function, List<String> params, String path, BuildLog log) {
        this.function = function;
        this.params = params;
        this.path = path;
        this.log = log;
        this.errorsBefore = log.errors().size();
    }

    /**
     * Binds {@code call}'s arguments to {@code params}: by name, or (where {@code positional}) by
     * position, positional ones first.
     */
    static Args bind(Expr.Call call, List<String> params, boolean positional, String path, BuildLog log) {
        Args args = new Args(call.name(), params, path, log);
        boolean namedSeen = false;
        int next = 0;
        for (Expr.Arg arg : call.args()) {
            if (arg.name() != null) {
                namedSeen = true;
                args.put(arg.name(), arg.value());
            } else if (!positional) {
                log.error(new SpecError(path, arg.text(), "a named argument (name=value), " + args.paramsText()),
                        arg.value().at());
            } else if (namedSeen) {
                log.error(new SpecError(path, arg.text(), "a named argument: positional arguments come first"),
                        arg.value().at());
            } else if (next == params.size()) {
                log.error(new SpecError(path, arg.text(), call.name() + " takes " + params.size()
                        + " argument(s): " + String.join(", ", params)), arg.value().at());
            } else {
                args.put(params.get(next++), arg.value());
            }
        }
        return args;
    }

    private void put(String param, Expr value) {
        if (!params.contains(param)) {
            log.error(new SpecError(path(param), value.text(), "unknown argument of " + function + "; " + paramsText()),
                    value.at());
        } else if (values.putIfAbsent(param, value) != null) {
            log.error(new SpecError(path(param), value.text(), "one value; " + param + " is given more than once"),
                    value.at());
        } else {
            log.wrote(path(param), value.at());
        }
    }

    boolean has(String param) {
        return values.containsKey(param);
    }

    /** Whether no error has been recorded since binding began, nested calls included. */
    boolean ok() {
        return log.errors().size() == errorsBefore;
    }

    Integer integer(String param) {
        Expr e = required(param);
        return switch (e) {
            case null -> null;
            case Expr.Num n when !INTEGER.matcher(n.text()).matches() -> fail(param, e,
                    "an integer: a whole number written without a decimal point or exponent" + asInteger(n.text()));
            case Expr.Num n -> {
                try {
                    yield Integer.valueOf(Integer.parseInt(n.text()));
                } catch (NumberFormatException tooLarge) {
                    yield fail(param, e, "an integer from " + Integer.MIN_VALUE + " to " + Integer.MAX_VALUE);
                }
            }
            case Expr.Name _, Expr.Call _ -> fail(param, e, "a number");
        };
    }

    /** {@code "; write N"} where a number with a decimal point or exponent is the integer N, else nothing. */
    private static String asInteger(String number) {
        BigDecimal value = new BigDecimal(number);
        // digits before the point, counted without expanding the number: 1e999999999 is not spelled out
        if (value.signum() != 0 && value.precision() - value.scale() > 10) {
            return "";
        }
        try {
            return "; write " + value.intValueExact();
        } catch (ArithmeticException fractionOrTooLarge) {
            return "";
        }
    }

    /** An integer, or {@code fallback} when the argument is absent (an optional parameter). */
    Integer integer(String param, int fallback) {
        return has(param) ? integer(param) : Integer.valueOf(fallback);
    }

    Double decimal(String param) {
        Expr e = required(param);
        return switch (e) {
            case null -> null;
            case Expr.Num n -> {
                double v = Double.parseDouble(n.text());
                yield Double.isFinite(v) ? Double.valueOf(v) : fail(param, e, "a finite number");
            }
            case Expr.Name _, Expr.Call _ -> fail(param, e, "a number");
        };
    }

    /** A bare name used as an identifier (e.g. a parameter's name). */
    String identifier(String param) {
        Expr e = required(param);
        return switch (e) {
            case null -> null;
            case Expr.Name n -> n.text();
            case Expr.Num _, Expr.Call _ -> fail(param, e, "a name");
        };
    }

    <T> T choice(String param, Choices<T> choices) {
        Expr e = required(param);
        return switch (e) {
            case null -> null;
            case Expr.Name n -> choices.read(n.text(), path(param), log.errors());
            case Expr.Num _, Expr.Call _ -> fail(param, e, choices.allowed());
        };
    }

    /** A named value, or {@code fallback} when the argument is absent (an optional parameter). */
    <T> T choice(String param, Choices<T> choices, T fallback) {
        return has(param) ? choice(param, choices) : fallback;
    }

    <T> T function(String param, FunctionTable<T> table) {
        Expr e = required(param);
        return e == null ? null : table.resolve(e, path(param), log);
    }

    private Expr required(String param) {
        Expr e = values.get(param);
        if (e == null) {
            log.error(new SpecError(path(param), "(missing)", "a required argument of " + function));
        }
        return e;
    }

    private <T> T fail(String param, Expr value, String allowed) {
        log.error(new SpecError(path(param), value.text(), allowed));
        return null;
    }

    private String path(String param) {
        return path + "." + param;
    }

    private String paramsText() {
        return "one of: " + String.join(", ", params);
    }
}
