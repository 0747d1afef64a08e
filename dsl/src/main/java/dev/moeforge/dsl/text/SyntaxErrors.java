package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.ir.Limits;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.PriorityQueue;
import java.util.regex.Pattern;
import org.antlr.v4.runtime.BaseErrorListener;
import org.antlr.v4.runtime.CharStream;
import org.antlr.v4.runtime.LexerNoViableAltException;
import org.antlr.v4.runtime.Parser;
import org.antlr.v4.runtime.RecognitionException;
import org.antlr.v4.runtime.Recognizer;
import org.antlr.v4.runtime.Token;
import org.antlr.v4.runtime.Vocabulary;
import org.antlr.v4.runtime.misc.IntervalSet;

/**
 * Collects the lexer's and parser's syntax errors in our own words (ANTLR's are written for
 * grammar authors) and throws them as one {@link SpecSyntaxException}. The output stays small
 * whatever the text: a run of characters no token starts with is one error, only the
 * {@link SpecException#MAX_LISTED_ERRORS} first errors (by position) are kept and the rest counted,
 * and each shows a window of its source line, not the whole line.
 */
final class SyntaxErrors extends BaseErrorListener {
    private static final Pattern KEYWORD = Pattern.compile("'[A-Za-z_]+'");
    /** Characters of the source line shown around an error's column. */
    static final int EXCERPT_WIDTH = 80;
    /** Characters of an offending token shown; a longer one is cut and its length given. */
    static final int TOKEN_SHOWN = 40;

    /** One error before it is worded: its position (line from 1, column from 0), what was found and what was expected. */
    private record Found(int line, int column, String found, String expected) {}

    /** Consecutive characters the lexer could not start a token with, reported as one error. */
    private static final class BadRun {
        final int line;
        final int column;
        final int start;
        int lastStart;
        int end;

        BadRun(int line, int column, int start, int end) {
            this.line = line;
            this.column = column;
            this.start = start;
            this.lastStart = start;
            this.end = end;
        }
    }

    private static final Comparator<Found> BY_POSITION = Comparator.comparingInt(Found::line).thenComparingInt(Found::column);

    private final String sourceName;
    private final String text;
    /** The text's lines, split when the first error needs one. */
    private String[] lines;
    /** The earliest errors so far, the latest of them on top: a later one displaces it. */
    private final PriorityQueue<Found> kept = new PriorityQueue<>(BY_POSITION.reversed());
    private int count;
    private BadRun run;

    SyntaxErrors(String text, String sourceName) {
        this.sourceName = sourceName;
        this.text = text;
    }

    @Override
    public void syntaxError(Recognizer<?, ?> recognizer, Object offendingSymbol, int line, int column,
                            String msg, RecognitionException e) {
        if (recognizer instanceof Parser parser) {
            endRun();
            Token token = (Token) offendingSymbol;
            String found = token.getType() == Token.EOF ? "end of input" : quoted(token.getText());
            // e is null where the parser recovered by inserting or deleting one token; its state is then current
            IntervalSet tokens = e != null ? e.getExpectedTokens() : parser.getExpectedTokens();
            add(new Found(line, column, found, "expected " + describe(tokens, parser.getVocabulary())));
        } else if (e instanceof LexerNoViableAltException failure) {
            // the lexer skips from the token's start through the character it failed at
            CharStream input = failure.getInputStream();
            int start = failure.getStartIndex();
            int end = Math.min(input.index() + 1, input.size());
            if (run != null && run.end == start && run.line == line) {
                run.lastStart = start;
                run.end = end;
            } else {
                endRun();
                run = new BadRun(line, column, start, end);
            }
        } else {
            // without the lexer's failure at hand, the one character at the column
            endRun();
            run = new BadRun(line, column, -1, -1);
            endRun();
        }
    }

    /** The first '(' that nests calls deeper than {@link Limits#MAX_NESTING_DEPTH}; {@code deepest}: the text's deepest nesting. */
    void nestedTooDeep(Token open, int deepest) {
        add(new Found(open.getLine(), open.getCharPositionInLine(), "'(' opening call " + (Limits.MAX_NESTING_DEPTH + 1)
                + " of a nesting " + deepest + " deep", "calls nested at most " + Limits.MAX_NESTING_DEPTH
                + " deep; fold repeated calls (e.g. one scale by the product of the factors)"));
    }

    void throwIfAny() {
        endRun();
        if (count > 0) {
            List<Found> earliest = new ArrayList<>(kept);
            earliest.sort(BY_POSITION);
            List<SpecError> errors = earliest.stream()
                    .map(f -> new SpecError(position(f.line(), f.column()), f.found(), f.expected() + excerpt(f.line(), f.column())))
                    .toList();
            throw new SpecSyntaxException(errors, count - errors.size());
        }
    }

    private void add(Found found) {
        count++;
        kept.add(found);
        if (kept.size() > SpecException.MAX_LISTED_ERRORS) {
            kept.poll();
        }
    }

    /** Reports the run of bad characters in progress, if any. */
    private void endRun() {
        if (run == null) {
            return;
        }
        String source = sourceLine(run.line);
        int from = source.offsetByCodePoints(0, Math.min(run.column, source.codePointCount(0, source.length())));
        int length = run.lastStart - run.start + 1;
        String bad = source.substring(from, source.offsetByCodePoints(from, Math.min(length, source.codePointCount(from, source.length()))));
        add(new Found(run.line, run.column, bad.isEmpty() ? "end of line" : quoted(bad),
                "expected a name, a number, one of { } ( ) , = or a comment; no token starts with "
                        + (length == 1 ? "this character" : "these characters")));
        run = null;
    }

    private String position(int line, int column) {
        return new SourcePosition(line, column + 1).in(sourceName);
    }

    private String sourceLine(int line) {
        if (lines == null) {
            lines = text.split("\r?\n", -1);
        }
        return line >= 1 && line <= lines.length ? lines[line - 1] : "";
    }

    /**
     * At most {@link #EXCERPT_WIDTH} characters of the source line around the column, "..." where it
     * is cut, and a caret under the column; tabs are copied so the caret lines up.
     */
    private String excerpt(int line, int column) {
        int[] source = sourceLine(line).codePoints().toArray();
        int at = Math.min(column, source.length);
        int from = 0;
        int to = source.length;
        if (source.length > EXCERPT_WIDTH) {
            from = Math.max(0, Math.min(at - EXCERPT_WIDTH / 2, source.length - EXCERPT_WIDTH));
            to = from + EXCERPT_WIDTH;
        }
        StringBuilder text = new StringBuilder(from > 0 ? "..." : "");
        StringBuilder caret = new StringBuilder(from > 0 ? "   " : "");
        for (int i = from; i < to; i++) {
            text.appendCodePoint(printable(source[i]));
        }
        for (int i = from; i < at; i++) {
            caret.append(source[i] == '\t' ? '\t' : ' ');
        }
        if (to < source.length) {
            text.append("...");
        }
        return "\n    " + text + "\n    " + caret + "^";
    }

    /** {@code 'text'}, cut to {@link #TOKEN_SHOWN} characters with its length when longer. */
    private static String quoted(String text) {
        int length = text.codePointCount(0, text.length());
        StringBuilder b = new StringBuilder("'");
        text.codePoints().limit(TOKEN_SHOWN).forEach(c -> b.appendCodePoint(printable(c)));
        return length <= TOKEN_SHOWN ? b.append('\'').toString() : b.append("...' (" + length + " characters)").toString();
    }

    /** Control characters (a tab aside) would garble the message: each shows as '?'. */
    private static int printable(int c) {
        return c != '\t' && Character.isISOControl(c) ? '?' : c;
    }

    private static String describe(IntervalSet tokens, Vocabulary vocabulary) {
        // where a name may stand, the keywords are names too (rule `name`): listing them would mislead
        boolean nameExpected = tokens.contains(MoeSpecLexer.IDENT);
        List<String> items = new ArrayList<>();
        for (int type : tokens.toList()) {
            String literal = vocabulary.getLiteralName(type);
            if (type == Token.EOF) {
                items.add("end of input");
            } else if (type == MoeSpecLexer.IDENT) {
                items.add("a name");
            } else if (type == MoeSpecLexer.NUMBER) {
                items.add("a number");
            } else if (!(nameExpected && literal != null && KEYWORD.matcher(literal).matches())) {
                items.add(vocabulary.getDisplayName(type));
            }
        }
        if (items.size() == 1) {
            return items.getFirst();
        }
        return String.join(", ", items.subList(0, items.size() - 1)) + " or " + items.getLast();
    }
}
