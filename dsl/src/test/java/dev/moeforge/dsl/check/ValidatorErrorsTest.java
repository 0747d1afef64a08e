package dev.moeforge.dsl.check;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.dsl.text.SpecParser;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The must-fail suite: every {@code errors/NAME.moe} must be rejected by the parser or the
 * Validator, with a message holding each line of {@code errors/NAME.expected} (the field path and
 * value, and what is allowed).
 */
class ValidatorErrorsTest {

    @TestFactory
    Stream<DynamicTest> mustFailSpecs() throws IOException, URISyntaxException {
        List<Path> specs = files(".moe");
        assertFalse(specs.isEmpty(), "no must-fail specs");
        return specs.stream().map(spec -> DynamicTest.dynamicTest(spec.getFileName().toString(), () -> {
            String name = spec.getFileName().toString();
            Path expected = spec.resolveSibling(name.replaceFirst("\\.moe$", ".expected"));
            assertTrue(Files.exists(expected), "missing " + expected.getFileName());
            List<String> fragments = Files.readAllLines(expected).stream().filter(l -> !l.isBlank()).toList();
            assertFalse(fragments.isEmpty(), expected.getFileName() + " is empty");
            SpecException e = assertThrows(SpecException.class,
                    () -> SpecParser.parse(Files.readString(spec), name), name + " must fail");
            for (String fragment : fragments) {
                assertTrue(e.getMessage().contains(fragment), "no '" + fragment + "' in:\n" + e.getMessage());
            }
            // each problem once: a tree is typed once, not once per enclosing node
            assertEquals(e.errors().size(), new java.util.HashSet<>(e.errors()).size(), "a problem reported twice in:\n" + e.getMessage());
        }));
    }

    @Test
    void everyExpectedFileHasItsSpec() throws IOException, URISyntaxException {
        for (Path expected : files(".expected")) {
            String spec = expected.getFileName().toString().replaceFirst("\\.expected$", ".moe");
            assertTrue(Files.exists(expected.resolveSibling(spec)), "missing " + spec);
        }
    }

    /** The shared-memory case fails for its size alone: the same kernel is valid on a target with more shared memory. */
    @Test
    void sharedMemoryCaseExceedsOnlySm120Limit() throws IOException, URISyntaxException {
        String text = Files.readString(dir().resolve("shared_memory_over_sm120_limit.moe"));
        assertThrows(SpecException.class, () -> SpecParser.parse(text));
        KernelSpec onHopper = SpecParser.parse(text.replace("target sm_120a", "target sm_90a"));
        long shared = OutputCentric.Layout.of((dev.moeforge.dsl.ir.Problem.ExpertProblem) onHopper.problem(), (OutputCentric) onHopper.schedule()).sharedBytes();
        assertEquals(172_304, shared);
        assertTrue(shared > Target.SM_120A.maxSharedBytesPerBlock());
    }

    /** The histogram case fails for the histogram alone: the same kernel without expert counts is valid. */
    @Test
    void histogramCaseExceedsTheLimitOnlyWithItsCounts() throws IOException, URISyntaxException {
        String text = Files.readString(dir().resolve("router_tiled_histogram_over_sm120_limit.moe"));
        assertThrows(SpecException.class, () -> SpecParser.parse(text));
        KernelSpec withoutCounts = SpecParser.parse(text.replace("expert_counts=true", "expert_counts=false"));
        long shared = RouterTiled.Layout.of((dev.moeforge.dsl.ir.Problem.Router) withoutCounts.problem(),
                (RouterTiled) withoutCounts.schedule()).sharedBytes();
        assertEquals(101_376, shared);
        assertTrue(shared <= Target.SM_120A.maxSharedBytesPerBlock());
        assertTrue(shared + 4 * 512 > Target.SM_120A.maxSharedBytesPerBlock());
    }

    private static List<Path> files(String extension) throws IOException, URISyntaxException {
        try (Stream<Path> list = Files.list(dir())) {
            return list.filter(p -> p.getFileName().toString().endsWith(extension)).sorted().toList();
        }
    }

    private static Path dir() throws URISyntaxException {
        return Path.of(ValidatorErrorsTest.class.getResource("/errors").toURI());
    }
}
