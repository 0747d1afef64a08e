package dev.moeforge.dsl.text;

import org.antlr.v4.runtime.Token;

/** A place in a spec text: line and column, both from 1 (a column counts characters; a tab is one). */
record SourcePosition(int line, int column) {

    static SourcePosition of(Token token) {
        return new SourcePosition(token.getLine(), token.getCharPositionInLine() + 1);
    }

    /** {@code [source ]line L:C}, as every error of a spec text names its place. */
    String in(String sourceName) {
        return (sourceName == null ? "" : sourceName + " ") + "line " + line + ":" + column;
    }
}
