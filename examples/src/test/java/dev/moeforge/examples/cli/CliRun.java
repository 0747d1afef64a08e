package dev.moeforge.examples.cli;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.Consumer;
import picocli.CommandLine;

/** One run of the {@code moeforge} command line as {@code main} runs it, with what it printed. */
record CliRun(int exitCode, String out, String err) {

    static CliRun of(String... args) {
        return of(cli -> { }, args);
    }

    /** {@code configure} sees the command line before it runs, e.g. to give a command its kernel cache. */
    static CliRun of(Consumer<CommandLine> configure, String... args) {
        CommandLine cli = MoeForgeCli.commandLine();
        // encoding writers buffer as picocli's own over System.out do, and are read unflushed as the
        // terminal sees them when main exits: what a command prints without flushing is missing here too
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        cli.setOut(new PrintWriter(new OutputStreamWriter(out, StandardCharsets.UTF_8), true));
        cli.setErr(new PrintWriter(new OutputStreamWriter(err, StandardCharsets.UTF_8), true));
        configure.accept(cli);
        int code = cli.execute(args);
        return new CliRun(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    /** The command object of subcommand {@code name} of {@code cli}. */
    static <T> T command(CommandLine cli, String name) {
        return cli.getSubcommands().get(name).getCommand();
    }

    /** A test resource (under {@code /try}) copied to {@code dir}: the tests run from a jar on GPU hosts too. */
    static Path resource(Path dir, String name) throws IOException {
        try (InputStream in = CliRun.class.getResourceAsStream("/try/" + name)) {
            if (in == null) {
                throw new IOException("no test resource /try/" + name);
            }
            Path file = dir.resolve(name);
            Files.copy(in, file);
            return file;
        }
    }
}
