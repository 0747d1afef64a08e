package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.KernelSpec;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.antlr.v4.runtime.CharStreams;
import org.antlr.v4.runtime.Token;
import org.junit.jupiter.api.Test;

/**
 * Mutates the catalogue's spec texts token by token (deleted, repeated, swapped and inserted tokens,
 * numbers replaced by boundary values, names by other names of the specs, calls nested deeper) and
 * reads every mutant: each must be accepted as valid specs, or refused with a short
 * {@link SpecException} (a {@link SpecSyntaxException} included), never anything else; and every
 * accepted spec must print to a text that reads back to an equal spec and prints the same again.
 *
 * <p>Specs refused only by the Validator are printed back too (read unvalidated): the printer writes
 * any spec the parser can build, odd values included.
 *
 * <p>Reproducible: the seed is fixed, printed with any failure, and set by {@code -Dmoeforge.fuzz.seed=N};
 * {@code -Dmoeforge.fuzz.mutations=N} changes how many mutations are made (one to three a mutant).
 */
class SpecFuzzTest {
    private static final long SEED = Long.getLong("moeforge.fuzz.seed", 20250611L);
    private static final int MUTATIONS = Integer.getInteger("moeforge.fuzz.mutations", 10_000);
    /** A refusal's message stays short whatever the mutant: a bound far above any honest one. */
    private static final int MESSAGE_BOUND = 20_000;

    private static final List<String> BOUNDARY_NUMBERS = List.of("0", "-0", "-1", "1", "2", "7", "8", "32", "33", "1024",
            "1025", "65536", "65537", "1e9", "2147483647", "2147483648", "-2147483648", "-2147483649", "1.5", "2048.0", "0.0",
            "-0.0", "2e3", "1e39", "-1e39", "3.4028235e38", "1e-50", "1e308", "1e309", "NaN", "Infinity", "0.1", "-2.5",
            "00000000000000000000000000000000000000008", "9".repeat(30), "9".repeat(400), "1" + "0".repeat(500) + ".5");
    private static final List<String> PUNCTUATION = List.of("(", ")", ",", "=", "{", "}", "-", "@", "#", ".");
    /** Calls that take an epilogue value first: wrapped around a value, they nest it one deeper. */
    private static final List<String> WRAPPERS = List.of("sigmoid(%s)", "softmax(%s)", "scale(%s, -0)", "scale(%s, 2.5)",
            "combine(%s)", "renormalize(%s)", "dense(%s)", "topk(%s, 2)", "add(%s, %s)", "gated(silu, %s, %s)", "store(%s, dtype=bf16)");

    private static final java.util.regex.Pattern NUMBER = java.util.regex.Pattern.compile("-?[0-9][0-9.eE+-]*");

    private record Corpus(List<String> texts, List<List<String>> tokens, List<String> names) {}

    /** What became of a text: specs accepted, refused by the Validator alone, refused before. */
    private enum Outcome { ACCEPTED, INVALID, MALFORMED }

    @Test
    void mutantsAreAcceptedAndPrintBackOrRefusedWithASpecException() throws IOException {
        Corpus corpus = corpus();
        long start = System.nanoTime();
        int[] outcomes = new int[Outcome.values().length];
        int mutants = 0;
        int mutations = 0;
        while (mutations < MUTATIONS) {
            Random random = new Random(SEED * 1_000_003L + mutants);
            int source = random.nextInt(corpus.tokens().size());
            List<String> tokens = new ArrayList<>(corpus.tokens().get(source));
            List<String> applied = new ArrayList<>();
            int count = List.of(1, 1, 1, 2, 2, 3).get(random.nextInt(6));
            for (int m = 0; m < count; m++) {
                applied.add(mutate(tokens, corpus.names(), random));
            }
            // now and then a second kernel, so that a file of several is read too
            if (random.nextInt(20) == 0) {
                int other = random.nextInt(corpus.tokens().size());
                tokens.addAll(corpus.tokens().get(other));
                applied.add("append catalogue spec " + other);
            }
            String mutant = String.join(" ", tokens);
            String context = "seed " + SEED + " (-Dmoeforge.fuzz.seed), mutant " + mutants + " of catalogue spec " + source
                    + " by " + applied + ":\n" + clip(mutant);
            outcomes[read(mutant, context).ordinal()]++;
            mutants++;
            mutations += count;
        }
        long millis = (System.nanoTime() - start) / 1_000_000;
        int accepted = outcomes[Outcome.ACCEPTED.ordinal()];
        int invalid = outcomes[Outcome.INVALID.ordinal()];
        System.out.printf("spec fuzz: seed %d, %d mutations in %d mutants of %d catalogue specs: %d accepted, %d refused by "
                + "the Validator (all %d printed back), %d refused before; %d ms%n", SEED, mutations, mutants,
                corpus.texts().size(), accepted, invalid, accepted + invalid, outcomes[Outcome.MALFORMED.ordinal()], millis);
        // the mutants must reach every outcome, or the fuzzing tests little
        for (Outcome outcome : Outcome.values()) {
            assertTrue(outcomes[outcome.ordinal()] >= mutants / 20,
                    outcomes[outcome.ordinal()] + " " + outcome + " of " + mutants + " (seed " + SEED + ")");
        }
    }

    @Test
    void theCatalogueItselfIsAcceptedAndPrintsBack() throws IOException {
        for (String text : corpus().texts()) {
            assertEquals(Outcome.ACCEPTED, read(text, text));
        }
    }

    /**
     * What became of the text; fails on anything but a spec's refusal, and unless each spec built
     * (accepted, or refused by the Validator alone) prints to a text that reads back to it.
     */
    private static Outcome read(String text, String context) {
        List<KernelSpec> specs;
        try {
            specs = SpecParser.parseAll(text, "mutant.moe");
        } catch (SpecException refusal) {
            assertTrue(refusal.getMessage().length() < MESSAGE_BOUND,
                    () -> refusal.getMessage().length() + " characters of message for " + context);
            // off the grammar, nothing is built; else the refusal may be the Validator's alone
            return !(refusal instanceof SpecSyntaxException) && invalidOnly(text, context) ? Outcome.INVALID : Outcome.MALFORMED;
        } catch (Throwable t) {
            throw new AssertionError("neither accepted nor refused: " + t + "\n" + context, t);
        }
        if (specs.isEmpty()) {
            return Outcome.MALFORMED;
        }
        for (KernelSpec spec : specs) {
            try {
                assertEquals(List.of(), Validator.errors(spec), context);
                String printed = SpecPrinter.print(spec);
                KernelSpec again = SpecParser.parse(printed, "printed.moe");
                assertEquals(spec, again, () -> "printed as\n" + printed + "for " + context);
                assertEquals(printed, SpecPrinter.print(again), context);
            } catch (AssertionError e) {
                throw e;
            } catch (Throwable t) {
                throw new AssertionError("an accepted spec failed to print back: " + t + "\n" + context, t);
            }
        }
        return Outcome.ACCEPTED;
    }

    /** Whether a refused text of one kernel builds a spec (the Validator refused it); that spec must print back. */
    private static boolean invalidOnly(String text, String context) {
        KernelSpec spec;
        try {
            spec = SpecParser.parseUnvalidated(text, "mutant.moe");
        } catch (SpecException refusal) {
            return false;
        } catch (Throwable t) {
            throw new AssertionError("neither built nor refused: " + t + "\n" + context, t);
        }
        try {
            String printed = SpecPrinter.print(spec);
            KernelSpec again = SpecParser.parseUnvalidated(printed, "printed.moe");
            assertEquals(spec, again, () -> "printed as\n" + printed + "for " + context);
            assertEquals(printed, SpecPrinter.print(again), context);
        } catch (AssertionError e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError("a spec refused by the Validator failed to print back: " + t + "\n" + context, t);
        }
        return true;
    }

    /** Applies one random mutation to {@code tokens}; returns what it did. */
    private static String mutate(List<String> tokens, List<String> names, Random random) {
        int at = random.nextInt(tokens.size());
        String token = tokens.get(at);
        switch (random.nextInt(8)) {
            case 0 -> {
                tokens.remove(at);
                return "delete '" + token + "' at " + at;
            }
            case 1 -> {
                tokens.add(at, token);
                return "repeat '" + token + "' at " + at;
            }
            case 2 -> {
                int other = random.nextBoolean() ? Math.min(at + 1, tokens.size() - 1) : random.nextInt(tokens.size());
                tokens.set(at, tokens.get(other));
                tokens.set(other, token);
                return "swap " + at + " and " + other;
            }
            case 3 -> {
                String inserted = random.nextBoolean() ? PUNCTUATION.get(random.nextInt(PUNCTUATION.size()))
                        : names.get(random.nextInt(names.size()));
                tokens.add(at, inserted);
                return "insert '" + inserted + "' at " + at;
            }
            case 4, 5 -> {
                List<Integer> numbers = indexesOf(tokens, SpecFuzzTest::isNumber);
                int n = numbers.isEmpty() ? at : numbers.get(random.nextInt(numbers.size()));
                String was = tokens.get(n);
                String number = random.nextBoolean() || !isNumber(was) ? BOUNDARY_NUMBERS.get(random.nextInt(BOUNDARY_NUMBERS.size()))
                        : nearby(was, random);
                tokens.set(n, number);
                return "number '" + clip(was) + "' at " + n + " to '" + clip(number) + "'";
            }
            case 6 -> {
                List<Integer> identifiers = indexesOf(tokens, t -> Character.isLetter(t.charAt(0)) || t.charAt(0) == '_');
                int n = identifiers.get(random.nextInt(identifiers.size()));
                String name = names.get(random.nextInt(names.size()));
                String was = tokens.set(n, name);
                return "name '" + was + "' at " + n + " to '" + name + "'";
            }
            default -> {
                return deepen(tokens, random);
            }
        }
    }

    /**
     * Nests a value deeper: wraps an epilogue's {@code acc} in calls, or opens and closes a
     * parenthesis around a stretch of tokens.
     */
    private static String deepen(List<String> tokens, Random random) {
        List<Integer> accs = indexesOf(tokens, "acc"::equals);
        if (accs.isEmpty() || random.nextInt(4) == 0) {
            int open = random.nextInt(tokens.size());
            int close = open + random.nextInt(tokens.size() - open);
            tokens.add(close + 1 <= tokens.size() ? close + 1 : tokens.size(), ")");
            tokens.add(open, "(");
            return "parentheses around " + open + ".." + close;
        }
        int n = accs.get(random.nextInt(accs.size()));
        // mostly a level or few; now and then around the nesting limit, or far past what a thread's stack holds
        int depth = switch (random.nextInt(40)) {
            case 0 -> 2_000 + random.nextInt(18_000);
            case 1, 2, 3, 4 -> 40 + random.nextInt(60);
            default -> 1 + random.nextInt(4);
        };
        String value = tokens.get(n);
        // the same wrapper all the way down keeps the deep ones valid where one level is
        String wrapper = WRAPPERS.get(random.nextInt(WRAPPERS.size()));
        // the wrapper's text before and after the value; a second operand is a plain acc, so the text grows
        // with the depth, not exponentially
        String before = wrapper.substring(0, wrapper.indexOf("%s"));
        String after = wrapper.substring(wrapper.indexOf("%s") + 2).replace("%s", "acc");
        tokens.set(n, before.repeat(depth) + value + after.repeat(depth));
        return "wrap acc at " + n + " in " + depth + " x " + wrapper;
    }

    private static boolean isNumber(String token) {
        return NUMBER.matcher(token).matches();
    }

    /** A number near {@code number}, or the same one spelled otherwise: the kind of change a valid spec survives. */
    private static String nearby(String number, Random random) {
        java.math.BigDecimal value = new java.math.BigDecimal(number);
        return switch (random.nextInt(5)) {
            case 0 -> value.multiply(java.math.BigDecimal.TWO).toString();
            case 1 -> value.divide(java.math.BigDecimal.TWO).toString();
            case 2 -> value.add(java.math.BigDecimal.ONE).toString();
            case 3 -> value.subtract(java.math.BigDecimal.ONE).toString();
            default -> number.startsWith("-") ? "-0" + number.substring(1) : "0" + number;
        };
    }

    private static List<Integer> indexesOf(List<String> tokens, java.util.function.Predicate<String> test) {
        List<Integer> indexes = new ArrayList<>();
        for (int i = 0; i < tokens.size(); i++) {
            if (!tokens.get(i).isEmpty() && test.test(tokens.get(i))) {
                indexes.add(i);
            }
        }
        return indexes;
    }

    /** The catalogue's texts, each as its tokens (comments and layout dropped), and every name they use. */
    private static Corpus corpus() throws IOException {
        Path dir = Path.of("../generated/src/main/specs");
        List<Path> files;
        try (Stream<Path> list = Files.list(dir)) {
            files = list.filter(p -> p.toString().endsWith(".moe")).sorted().toList();
        }
        assertFalse(files.isEmpty(), "no catalogue specs in " + dir.toAbsolutePath());
        List<String> texts = new ArrayList<>();
        List<List<String>> tokens = new ArrayList<>();
        TreeSet<String> names = new TreeSet<>(List.of("kernel", "problem", "schedule", "epilogue", "target"));
        for (Path file : files) {
            String text = Files.readString(file);
            texts.add(text);
            List<String> fileTokens = new ArrayList<>();
            for (Token t : new MoeSpecLexer(CharStreams.fromString(text)).getAllTokens()) {
                fileTokens.add(t.getText());
                if (t.getType() == MoeSpecLexer.IDENT) {
                    names.add(t.getText());
                }
            }
            tokens.add(fileTokens);
        }
        return new Corpus(texts, tokens, List.copyOf(names));
    }

    private static String clip(String text) {
        return text.length() <= 2_000 ? text : text.substring(0, 2_000) + "... (" + text.length() + " characters)";
    }
}
