package dev.moeforge.examples.cli;

import java.io.UncheckedIOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.NotDirectoryException;
import java.nio.file.Path;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code moeforge} command: generate and compile the catalogue, try and check kernels, run the demo, benchmark. */
@Command(name = "moeforge", mixinStandardHelpOptions = true, version = MoeForgeCli.VERSION,
        description = "Generates, compiles, checks and benchmarks MoE decode kernels described in the MoeForge DSL.",
        subcommands = {GenCommand.class, PrecompileCommand.class, CheckCommand.class, TryCommand.class, DemoCommand.class,
                BenchCommand.class, PoolCommand.class, ProfileCommand.class, FitCommand.class, RegionsCommand.class, TuneCommand.class, PoolsCommand.class, QuantizeCommand.class, InitModelCommand.class,
                DecodeCommand.class, HelpCommand.class})
public final class MoeForgeCli implements Runnable {
    static final String VERSION = "MoeForge 0.1.0";

    /** The exit code of a run refused for invalid specs (picocli's own for a bad command line). */
    static final int INVALID_SPEC = 2;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }

    public static void main(String[] args) {
        System.exit(commandLine().execute(args));
    }

    /**
     * The command line as {@code main} runs it: every command answers {@code -V}, and a failure prints
     * one message (the stack trace with {@code MOEFORGE_TRACE=1}); invalid specs exit with
     * {@link #INVALID_SPEC}, everything else that fails with 1.
     */
    static CommandLine commandLine() {
        CommandLine cli = new CommandLine(new MoeForgeCli());
        giveVersion(cli);
        cli.setExecutionExceptionHandler((e, cmd, parsed) -> {
            String name = cmd.getCommandSpec().qualifiedName();
            if (e instanceof SpecFiles.Invalid invalid) {
                invalid.errors().forEach(cmd.getErr()::println);
                return INVALID_SPEC;
            }
            Throwable cause = e instanceof UncheckedIOException u ? u.getCause() : e;
            cmd.getErr().println(name + ": " + (cause instanceof FileSystemException f ? describe(f) : e.getMessage()));
            if (System.getenv("MOEFORGE_TRACE") != null) {
                e.printStackTrace(cmd.getErr());
            } else {
                cmd.getErr().println("(set MOEFORGE_TRACE=1 for the stack trace)");
            }
            return 1;
        });
        return cli;
    }

    /** Subcommands have no version of their own: each gets the tool's, so that {@code -V} answers everywhere. */
    private static void giveVersion(CommandLine command) {
        for (CommandLine sub : command.getSubcommands().values()) {
            sub.getCommandSpec().version(VERSION);
            giveVersion(sub);
        }
    }

    /**
     * What went wrong with a file, and the path: the JDK's message of a failed file operation is often
     * the path alone (creating a directory where a file is, for one).
     */
    static String describe(FileSystemException e) {
        String what = switch (e) {
            case FileAlreadyExistsException _ -> e.getFile() != null && Files.isDirectory(Path.of(e.getFile()))
                    ? "already exists" : "exists and is not a directory";
            case AccessDeniedException _ -> "permission denied";
            case NoSuchFileException _ -> "no such file or directory (or a parent directory is missing)";
            case NotDirectoryException _ -> "not a directory";
            // mkdir's ENOTDIR: some parent on the path is a file
            default -> "Not a directory".equals(e.getReason()) ? "a parent is a file, not a directory"
                    : e.getReason() != null ? lowerFirst(e.getReason()) : "cannot be used";
        };
        return (e.getFile() != null ? e.getFile() : "a file") + ": " + what + (e.getOtherFile() != null ? " (with " + e.getOtherFile() + ")" : "");
    }

    private static String lowerFirst(String s) {
        return s.isEmpty() ? s : Character.toLowerCase(s.charAt(0)) + s.substring(1);
    }
}
