package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.Limits;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import org.antlr.v4.runtime.BaseErrorListener;
import org.antlr.v4.runtime.Parser;
import org.antlr.v4.runtime.RecognitionException;
import org.antlr.v4.runtime.Recognizer;
import org.antlr.v4.runtime.Token;
import org.antlr.v4.runtime.Vocabulary;
import org.antlr.v4.runtime.misc.IntervalSet;

/**
 * Collects the lexer's and parser's syntax errors in our own words (ANTLR's are written for
 * grammar authors) and throws them as one {@link SpecSyntaxException}.
 */
final class SyntaxErrors extends BaseErrorListener {
    private static final Pattern KEYWORD = Pattern.compile("'[A-Za-z_]+'");

    private final String sourceName;
    private final String[] lines;
    private final List<SpecError> errors = new ArrayList<>();

    SyntaxErrors(String text, String sourceName) {
        this.sourceName = sourceName;
        this.lines = text.split("\r?\n", -1);
    }

    @Override
    public void syntaxError(Recognizer<?, ?> recognizer, Object offendingSymbol, int line, int column,
                            String msg, RecognitionException e) {
        String found;
        String expected;
        if (recognizer instanceof Parser parser) {
            Token token = (Token) offendingSymbol;
            found = token.getType() == Token.EOF ? "end of input" : "'" + token.getText() + "'";
            // e is null where the parser recovered by inserting or deleting one token; its state is then current
            IntervalSet tokens = e != null ? e.getExpectedTokens() : parser.getExpectedTokens();
            expected = "expected " + describe(tokens, parser.getVocabulary());
        } else {
            String source = sourceLine(line);
            found = column < source.length() ? "'" + source.charAt(column) + "'" : "end of line";
            expected = "expected a name, a number, one of { } ( ) , = or a comment; no token starts with this character";
        }
        errors.add(new SpecError(position(line, column), found, expected + excerpt(line, column)));
    }

    /** The first '(' that nests calls deeper than {@link Limits#MAX_NESTING_DEPTH}; {@code deepest}: the text's deepest nesting. */
    void nestedTooDeep(Token open, int deepest) {
        int line = open.getLine();
        int column = open.getCharPositionInLine();
        errors.add(new SpecError(position(line, column), "'(' opening call " + (Limits.MAX_NESTING_DEPTH + 1)
                + " of a nesting " + deepest + " deep", "calls nested at most " + Limits.MAX_NESTING_DEPTH
                + " deep; fold repeated calls (e.g. one scale by the product of the factors)" + excerpt(line, column)));
    }

    void throwIfAny() {
        if (!errors.isEmpty()) {
            throw new SpecSyntaxException(errors);
        }
    }

    private String position(int line, int column) {
        return (sourceName == null ? "" : sourceName + " ") + "line " + line + ":" + (column + 1);
    }

    private String sourceLine(int line) {
        return line >= 1 && line <= lines.length ? lines[line - 1] : "";
    }

    /** The source line and a caret under the column; tabs are copied so the caret lines up. */
    private String excerpt(int line, int column) {
        String source = sourceLine(line);
        StringBuilder caret = new StringBuilder();
        for (int i = 0; i < column; i++) {
            caret.append(i < source.length() && source.charAt(i) == '\t' ? '\t' : ' ');
        }
        return "\n    " + source + "\n    " + caret + "^";
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
