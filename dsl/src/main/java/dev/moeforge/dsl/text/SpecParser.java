package dev.moeforge.dsl.text;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Limits;
import java.util.List;
import org.antlr.v4.runtime.CharStreams;
import org.antlr.v4.runtime.CommonTokenStream;
import org.antlr.v4.runtime.IntStream;
import org.antlr.v4.runtime.Token;

/**
 * Reads the textual form of kernel specs ({@code MoeSpec.g4}; {@link SpecPrinter} writes its
 * canonical form). Every spec returned has passed {@link Validator#check}: a text off the grammar
 * throws {@link SpecSyntaxException}, a wrong name, argument or value {@link SpecException}, each
 * error naming its place ({@code [source ]line L:C}) and, past the grammar, its field path.
 */
public final class SpecParser {
    private SpecParser() {}

    /** The one kernel of {@code text}. */
    public static KernelSpec parse(String text) {
        return parse(text, null);
    }

    /**
     * The one kernel of {@code text}; {@code sourceName} (nullable, e.g. a file name) is named in
     * messages, with the line and column of each error's field.
     */
    public static KernelSpec parse(String text, String sourceName) {
        return validated(onlyKernel(text, sourceName));
    }

    /**
     * The one kernel of {@code text} as written, not validated: for tools that report every rule a
     * spec breaks. Names, arguments and their types are still checked ({@link SpecException}).
     */
    public static KernelSpec parseUnvalidated(String text, String sourceName) {
        return onlyKernel(text, sourceName).spec();
    }

    /** The kernels of {@code text}, in order; none for an empty text. */
    public static List<KernelSpec> parseAll(String text) {
        return parseAll(text, null);
    }

    /** The kernels of {@code text}, in order; {@code sourceName} (nullable) is named in messages. */
    public static List<KernelSpec> parseAll(String text, String sourceName) {
        return syntaxTree(text, sourceName).kernel().stream()
                .map(kernel -> validated(KernelBuilder.build(kernel, sourceName)))
                .toList();
    }

    private static KernelBuilder.Built onlyKernel(String text, String sourceName) {
        List<MoeSpecParser.KernelContext> kernels = syntaxTree(text, sourceName).kernel();
        if (kernels.isEmpty()) {
            SpecError none = new SpecError("kernel", "(missing)", "no kernel found; a spec file holds one or more "
                    + "`kernel NAME { ... }` blocks, and parse reads exactly one");
            throw new SpecException(null, List.of(sourceName == null ? none : none.at(sourceName)));
        }
        if (kernels.size() > 1) {
            throw new SpecException(null, List.of(new SpecError("kernels", Integer.toString(kernels.size()),
                    "exactly one kernel (parseAll reads several); the second starts here")
                    .at(SourcePosition.of(kernels.get(1).getStart()).in(sourceName))));
        }
        return KernelBuilder.build(kernels.getFirst(), sourceName);
    }

    /** The built spec once the Validator passes it; else its errors, each at its field's place in the text. */
    private static KernelSpec validated(KernelBuilder.Built built) {
        try {
            return Validator.check(built.spec()).spec();
        } catch (SpecException e) {
            throw new SpecException(e.specName(), built.log().located(e.errors()));
        }
    }

    private static MoeSpecParser.FileContext syntaxTree(String text, String sourceName) {
        SyntaxErrors errors = new SyntaxErrors(text, sourceName);
        MoeSpecLexer lexer = new MoeSpecLexer(
                CharStreams.fromString(text, sourceName == null ? IntStream.UNKNOWN_SOURCE_NAME : sourceName));
        lexer.removeErrorListeners();
        lexer.addErrorListener(errors);
        CommonTokenStream tokens = new CommonTokenStream(lexer);
        tokens.fill();
        // ANTLR descends recursively: an expression nested too deep is refused before it parses
        if (!nestingWithinLimit(tokens.getTokens(), errors)) {
            errors.throwIfAny();
        }
        MoeSpecParser parser = new MoeSpecParser(tokens);
        parser.removeErrorListeners();
        parser.addErrorListener(errors);
        MoeSpecParser.FileContext file = parser.file();
        errors.throwIfAny();
        return file;
    }

    /** Whether no call nests deeper than {@link Limits#MAX_NESTING_DEPTH}; else records an error at the first '(' past it. */
    private static boolean nestingWithinLimit(List<Token> tokens, SyntaxErrors errors) {
        int depth = 0;
        int deepest = 0;
        Token firstTooDeep = null;
        for (Token token : tokens) {
            if (token.getType() == MoeSpecLexer.OPEN) {
                depth++;
                deepest = Math.max(deepest, depth);
                if (depth > Limits.MAX_NESTING_DEPTH && firstTooDeep == null) {
                    firstTooDeep = token;
                }
            } else if (token.getType() == MoeSpecLexer.CLOSE && depth > 0) {
                depth--;
            }
        }
        if (firstTooDeep != null) {
            errors.nestedTooDeep(firstTooDeep, deepest);
        }
        return firstTooDeep == null;
    }
}
