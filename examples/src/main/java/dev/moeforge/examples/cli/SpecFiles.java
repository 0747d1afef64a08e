package dev.moeforge.examples.cli;

import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.ValidatedSpec;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.MoeSpecLexer;
import dev.moeforge.dsl.text.MoeSpecParser;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecSyntaxException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.antlr.v4.runtime.CharStreams;
import org.antlr.v4.runtime.CommonTokenStream;
import org.antlr.v4.runtime.ParserRuleContext;
import org.antlr.v4.runtime.Token;

/**
 * The kernels of {@code .moe} files, parsed and validated, each with where it was written. Every
 * error of every kernel of every file is collected before any is reported ({@link Invalid}): a
 * syntax error as the parser words it, any other as {@code file:line:column: kernel 'name': error},
 * at the section the error's field path starts with.
 */
final class SpecFiles {
    private SpecFiles() {}

    /** A valid kernel and where it starts. */
    record Located(ValidatedSpec<?> valid, Path file, int line, int column) {
        KernelSpec spec() {
            return valid.spec();
        }

        String where() {
            return file + ":" + line + ":" + column;
        }
    }

    /** The files hold invalid specs (or are missing); {@link #errors()} are the lines to print, in file order. */
    static final class Invalid extends RuntimeException {
        private final List<String> errors;

        Invalid(List<String> errors) {
            super(String.join("\n", errors));
            this.errors = List.copyOf(errors);
        }

        List<String> errors() {
            return errors;
        }
    }

    /** Every kernel of {@code files}, in order; throws {@link Invalid} listing every error, or a kernel name used twice. */
    static List<Located> read(List<Path> files) throws IOException {
        List<Located> kernels = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        Map<String, Located> byName = new HashMap<>();
        for (Path file : files) {
            if (!Files.isRegularFile(file)) {
                errors.add(file + ": no such spec file");
                continue;
            }
            for (Located k : read(file, Files.readString(file, StandardCharsets.UTF_8), errors)) {
                Located first = byName.putIfAbsent(k.spec().name(), k);
                if (first != null) {
                    errors.add(k.where() + ": kernel '" + k.spec().name() + "': name = '" + k.spec().name()
                            + "': one kernel per name (the first is at " + first.where() + ")");
                } else {
                    kernels.add(k);
                }
            }
        }
        if (!errors.isEmpty()) {
            throw new Invalid(errors);
        }
        return kernels;
    }

    private static List<Located> read(Path file, String text, List<String> errors) {
        try {
            SpecParser.parseAll(text, file.toString());
        } catch (SpecSyntaxException e) {
            e.errors().forEach(error -> errors.add(error.message()));
            return List.of();
        } catch (SpecException e) {
            // some kernel is invalid: reading each kernel alone below names every error of each
        }
        List<Located> kernels = new ArrayList<>();
        for (MoeSpecParser.KernelContext kernel : syntaxTree(text).kernel()) {
            Map<String, Token> sections = new HashMap<>();
            sections.put("name", kernel.name().getStart());
            kernel.section().forEach(s -> sections.putIfAbsent(s.getStart().getText(), s.getStart()));
            try {
                // the kernel alone, every other character blanked, so that the parser's positions stay the file's
                KernelSpec spec = SpecParser.parseUnvalidated(alone(text, kernel), file.toString());
                List<SpecError> invalid = Validator.errors(spec);
                if (invalid.isEmpty()) {
                    kernels.add(new Located(Validator.check(spec), file, line(kernel.getStart()), column(kernel.getStart())));
                }
                invalid.forEach(error -> errors.add(located(file, kernel, sections, spec.name(), error)));
            } catch (SpecException e) {
                e.errors().forEach(error -> errors.add(located(file, kernel, sections, kernel.name().getText(), error)));
            }
        }
        return kernels;
    }

    /** The parse tree of a text the parser has accepted. */
    private static MoeSpecParser.FileContext syntaxTree(String text) {
        MoeSpecLexer lexer = new MoeSpecLexer(CharStreams.fromString(text));
        lexer.removeErrorListeners();
        MoeSpecParser parser = new MoeSpecParser(new CommonTokenStream(lexer));
        parser.removeErrorListeners();
        return parser.file();
    }

    private static String alone(String text, ParserRuleContext kernel) {
        int from = kernel.getStart().getStartIndex();
        int to = kernel.getStop().getStopIndex();
        StringBuilder b = new StringBuilder(text.length());
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            b.append(i >= from && i <= to || c == '\n' || c == '\r' ? c : ' ');
        }
        return b.toString();
    }

    /** {@code error} at the section its path starts with (problem, schedule, epilogue, target, name), else at the kernel. */
    private static String located(Path file, ParserRuleContext kernel, Map<String, Token> sections, String name, SpecError error) {
        String section = error.path().split("[.\\[ ]", 2)[0];
        Token at = sections.getOrDefault(section, kernel.getStart());
        // the place leads the line here, so the error's own (the parser's "FILE line L:C") is left out
        return file + ":" + line(at) + ":" + column(at) + ": kernel '" + name + "': " + error.at(null).message();
    }

    private static int line(Token t) {
        return t.getLine();
    }

    private static int column(Token t) {
        return t.getCharPositionInLine() + 1;
    }
}
