package dev.moeforge.examples.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code moeforge} command: generate and compile the catalogue, run the demo, benchmark. */
@Command(name = "moeforge", mixinStandardHelpOptions = true, version = "MoeForge 0.1.0",
        description = "Generates, compiles, checks and benchmarks MoE decode kernels described in the MoeForge DSL.",
        subcommands = {GenCommand.class, PrecompileCommand.class, DemoCommand.class, BenchCommand.class, QuantizeCommand.class,
                CommandLine.HelpCommand.class})
public final class MoeForgeCli implements Runnable {

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    public static void main(String[] args) {
        CommandLine cli = new CommandLine(new MoeForgeCli());
        cli.setExecutionExceptionHandler((e, cmd, parsed) -> {
            cmd.getErr().println(cmd.getCommandSpec().qualifiedName() + ": " + e.getMessage());
            if (System.getenv("MOEFORGE_TRACE") != null) {
                e.printStackTrace(cmd.getErr());
            } else {
                cmd.getErr().println("(set MOEFORGE_TRACE=1 for the stack trace)");
            }
            return 1;
        });
        System.exit(cli.execute(args));
    }
}
