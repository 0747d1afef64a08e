package dev.moeforge.examples.cli;

import dev.moeforge.dsl.text.SpecPrinter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge check}: parses and validates .moe files and prints their canonical form; no code
 * is generated and nvcc never runs, so it is fast enough for an editor's save hook or CI.
 */
@Command(name = "check", mixinStandardHelpOptions = true,
        description = "Parses and validates the kernels of .moe files and prints their canonical form (no code generated, "
                + "no nvcc). Every error is listed as file:line:column; exit code 2 when there is one.")
public final class CheckCommand implements Callable<Integer> {

    @Parameters(paramLabel = "FILE.moe", arity = "1..*", description = "Spec files.")
    List<Path> files = new ArrayList<>();

    @Spec
    CommandSpec command;

    @Override
    public Integer call() throws IOException {
        printCanonical(command.commandLine().getOut(), files);
        return 0;
    }

    /**
     * Reads and validates {@code files} ({@link SpecFiles.Invalid} listing every error) and prints each
     * file's kernels in canonical form, under a {@code # FILE} comment when there are several files.
     */
    static List<SpecFiles.Located> printCanonical(PrintWriter out, List<Path> files) throws IOException {
        List<SpecFiles.Located> kernels = SpecFiles.read(files);
        for (Path file : files) {
            if (files.size() > 1) {
                out.println("# " + file);
            }
            out.print(SpecPrinter.printAll(kernels.stream().filter(k -> k.file().equals(file)).map(SpecFiles.Located::spec).toList()));
        }
        out.flush();  // print() does not flush an autoflushing writer, and the JVM exits without flushing
        return kernels;
    }
}
