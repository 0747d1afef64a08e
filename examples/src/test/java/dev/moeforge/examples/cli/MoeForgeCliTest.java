package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.Target;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The command line as a whole: versions, help on subcommands, targets named twice, file errors. */
class MoeForgeCliTest {

    /** Every command's path below {@code moeforge}, e.g. [bench, router]. */
    private static List<List<String>> commandPaths(CommandLine command, List<String> path) {
        List<List<String>> paths = new ArrayList<>();
        command.getSubcommands().forEach((name, sub) -> {
            List<String> p = new ArrayList<>(path);
            p.add(name);
            paths.add(p);
            paths.addAll(commandPaths(sub, p));
        });
        return paths;
    }

    @Test
    void everyCommandAndSubcommandPrintsTheVersion() {
        List<List<String>> paths = commandPaths(MoeForgeCli.commandLine(), List.of());
        assertTrue(paths.contains(List.of("bench", "router")) && paths.contains(List.of("try")), paths.toString());
        paths.add(List.of());
        for (List<String> path : paths) {
            for (String flag : List.of("-V", "--version")) {
                List<String> args = new ArrayList<>(path);
                args.add(flag);
                CliRun run = CliRun.of(args.toArray(String[]::new));
                assertEquals(0, run.exitCode(), args + ": " + run.err());
                assertEquals(MoeForgeCli.VERSION + System.lineSeparator(), run.out(), args.toString());
            }
        }
    }

    @Test
    void helpShowsTheUsageOfTheSubcommandNamed() {
        CliRun router = CliRun.of("help", "bench", "router");
        assertEquals(0, router.exitCode(), router.err());
        assertTrue(router.out().startsWith("Usage: moeforge bench router "), router.out());
        CliRun bench = CliRun.of("help", "bench");
        assertTrue(bench.out().startsWith("Usage: moeforge bench "), bench.out());
        assertTrue(CliRun.of("help").out().startsWith("Usage: moeforge "));
        CliRun unknown = CliRun.of("help", "bench", "nope");
        assertEquals(2, unknown.exitCode());
        assertTrue(unknown.err().contains("Unknown command 'nope' of 'moeforge bench'; it has: router, layer, formats"),
                unknown.err());
    }

    @Test
    void aTargetNamedTwiceCountsOnce() {
        assertEquals(List.of(Target.SM_90A, Target.SM_100A), GenCommand.parseTargets(List.of("sm_90a", "sm_100a", " sm_90a")));
    }

    @Test
    void fileErrorsSayWhatIsWrongWithWhichPath(@TempDir Path tmp) throws Exception {
        Path file = Files.writeString(tmp.resolve("a-file"), "");
        CliRun onFile = CliRun.of("gen", "--target", "sm_90a", "--out", file.toString());
        assertEquals(1, onFile.exitCode());
        assertTrue(onFile.err().startsWith("moeforge gen: " + file + ": exists and is not a directory"), onFile.err());
        CliRun below = CliRun.of("gen", "--target", "sm_90a", "--out", file.resolve("sub").toString());
        assertEquals(1, below.exitCode());
        assertTrue(below.err().startsWith("moeforge gen: " + file.resolve("sub") + ": a parent is a file, not a directory"),
                below.err());
    }
}
