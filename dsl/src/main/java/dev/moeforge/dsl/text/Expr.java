package dev.moeforge.dsl.text;

import java.util.List;
import java.util.stream.Collectors;

/**
 * An expression of the textual form as written, before any name is resolved: the one generic shape
 * of problems, schedules and epilogues ({@link FunctionRegistry} gives the names their meaning).
 * Each keeps where it starts in the text, for the errors about the field it is the value of.
 */
sealed interface Expr {

    /** {@code name(args)}. */
    record Call(String name, List<Arg> args, SourcePosition at) implements Expr {}

    /** A bare name: a value such as {@code bf16}, or a function called without arguments such as {@code acc}. */
    record Name(String text, SourcePosition at) implements Expr {}

    /** An integer literal, kept as written so that an out-of-range one can be reported. */
    record Num(String text, SourcePosition at) implements Expr {}

    /** One argument of a call; {@code name} is null for a positional argument. */
    record Arg(String name, Expr value) {
        String text() {
            return name == null ? value.text() : name + "=" + value.text();
        }
    }

    SourcePosition at();

    /** The expression as it reads in messages. */
    default String text() {
        return switch (this) {
            case Call c -> c.name() + c.args().stream().map(Arg::text).collect(Collectors.joining(", ", "(", ")"));
            case Name n -> n.text();
            case Num n -> n.text();
        };
    }

    static Expr of(MoeSpecParser.ExprContext ctx) {
        return ctx.accept(FromTree.INSTANCE);
    }

    static Call of(MoeSpecParser.CallContext ctx) {
        return (Call) ctx.accept(FromTree.INSTANCE);
    }

    /** Reads an expression's parse tree. */
    final class FromTree extends MoeSpecBaseVisitor<Expr> {
        private static final FromTree INSTANCE = new FromTree();

        @Override
        public Expr visitCall(MoeSpecParser.CallContext ctx) {
            List<Arg> args = ctx.arg().stream()
                    .map(a -> new Arg(a.name() == null ? null : a.name().getText(), a.expr().accept(this)))
                    .toList();
            return new Call(ctx.name().getText(), args, SourcePosition.of(ctx.getStart()));
        }

        @Override
        public Expr visitCallExpr(MoeSpecParser.CallExprContext ctx) {
            return ctx.call().accept(this);
        }

        @Override
        public Expr visitNameExpr(MoeSpecParser.NameExprContext ctx) {
            return new Name(ctx.getText(), SourcePosition.of(ctx.getStart()));
        }

        @Override
        public Expr visitNumberExpr(MoeSpecParser.NumberExprContext ctx) {
            return new Num(ctx.getText(), SourcePosition.of(ctx.getStart()));
        }
    }
}
