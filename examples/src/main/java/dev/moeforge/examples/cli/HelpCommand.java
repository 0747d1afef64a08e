package dev.moeforge.examples.cli;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Help;
import picocli.CommandLine.Parameters;

/**
 * {@code moeforge help [COMMAND [SUBCOMMAND...]]}: the usage of the command the path names, e.g.
 * {@code help bench router} (picocli's own help command reads only the first name).
 */
@Command(name = "help", helpCommand = true, mixinStandardHelpOptions = true,
        description = "Shows the usage of moeforge, or of the command named, e.g. 'help bench router'.")
public final class HelpCommand implements CommandLine.IHelpCommandInitializable2, Runnable {

    @Parameters(paramLabel = "COMMAND", arity = "0..*", description = "A command, then its subcommands.")
    List<String> path = new ArrayList<>();

    private CommandLine self;
    private Help.ColorScheme colors;
    private PrintWriter out;

    @Override
    public void init(CommandLine helpCommandLine, Help.ColorScheme colorScheme, PrintWriter outWriter, PrintWriter errWriter) {
        this.self = helpCommandLine;
        this.colors = colorScheme;
        this.out = outWriter;
    }

    @Override
    public void run() {
        CommandLine command = self.getParent();
        for (String name : path) {
            CommandLine sub = command.getSubcommands().get(name);
            if (sub == null) {
                throw new CommandLine.ParameterException(self, "Unknown command '" + name + "' of '"
                        + command.getCommandSpec().qualifiedName() + "'; it has: "
                        + String.join(", ", command.getSubcommands().keySet()));
            }
            command = sub;
        }
        command.usage(out, colors);
    }
}
