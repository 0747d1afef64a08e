package dev.moeforge.examples.cli;

import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge tune}: pool, profile and fit in one go for a geometry, ending with the dispatch's
 * candidates and the regret of its model; each step is the command of the same name, so a stopped
 * tune continues with {@code moeforge profile DIR} and {@code moeforge fit DIR}.
 */
@Command(name = "tune", mixinStandardHelpOptions = true,
        description = "Pool, profile and fit for a model or a geometry the catalogue never saw (a GPU for the profile), ending with "
                + "the candidates routing-aware dispatch will choose among and the cost model's regret; then installs the pool "
                + "(unless --no-install), so decode takes it by default for experts it fits.")
public final class TuneCommand implements Callable<Integer> {

    @ArgGroup(exclusive = true, multiplicity = "1")
    PoolCommand.Geometry geometry;

    @Option(names = "--out", required = true, paramLabel = "DIR", description = "The pool's directory (pool, profile, fit, pictures).")
    Path out;

    @Option(names = "--target", defaultValue = "sm_90a", description = "Target (default: ${DEFAULT-VALUE}).")
    String target;

    @Option(names = "--jobs", defaultValue = "0", description = "Parallel nvcc processes for the pool (default: the core count).")
    int jobs;

    @Option(names = "--no-install", description = "Leave the tuned pool in --out only; by default it is also installed (`moeforge "
            + "pools install`), so decode and bench decode take it for experts it fits.")
    boolean noInstall;

    /** Where the pool is installed (tests give their own). */
    PoolStore store = PoolStore.defaultStore();

    @Spec
    CommandSpec command;

    @Override
    public Integer call() throws IOException {
        PrintWriter stdout = command.commandLine().getOut();
        if (!Gpu.available()) {  // before minutes of nvcc: the profile needs a device
            throw new IllegalStateException("tune profiles on a GPU: " + Gpu.unavailableReason() + " (`moeforge pool` alone runs "
                    + "without one)");
        }
        List<String> pool = new ArrayList<>(List.of("pool", "--out", out.toString(), "--target", target, "--jobs", Integer.toString(jobs)));
        if (geometry.model != null) {
            pool.addAll(List.of("--model", geometry.model));
        } else {
            pool.addAll(List.of("--shape", String.join(",", geometry.shape.stream().map(String::valueOf).toList())));
        }
        for (List<String> step : List.of(pool, List.of("profile", out.toString()), List.of("fit", out.toString()))) {
            stdout.println("== moeforge " + String.join(" ", step));
            stdout.flush();
            CommandLine cli = MoeForgeCli.commandLine();
            cli.setOut(stdout);
            cli.setErr(command.commandLine().getErr());
            int code = cli.execute(step.toArray(String[]::new));
            if (code != 0) {
                return code;
            }
        }
        if (!noInstall) {
            stdout.println("== moeforge pools install " + out);
            stdout.println(PoolsCommand.installed(store.install(out)));
        }
        return 0;
    }
}
