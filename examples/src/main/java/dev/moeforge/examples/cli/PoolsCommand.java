package dev.moeforge.examples.cli;

import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.IntSummaryStatistics;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge pools}: the tuned pools installed for use by default ({@link PoolStore}), and
 * {@code pools install DIR}, which puts a profiled pool's directory among them.
 */
@Command(name = "pools", mixinStandardHelpOptions = true, subcommands = {PoolsCommand.Install.class},
        description = "Lists the tuned pools installed in $MOEFORGE_POOLS (else ~/.cache/moeforge/pools): one per expert geometry, "
                + "weights format, target and GPU, which decode and bench decode take by default for experts they fit.")
public final class PoolsCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    /** The installed pools (tests give their own). */
    PoolStore store = PoolStore.defaultStore();

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        List<PoolStore.Entry> entries = store.list();
        if (entries.isEmpty()) {
            out.println("no tuned pools installed in " + store.directory() + " (`moeforge tune` installs one; `moeforge pools install DIR` "
                    + "installs a profiled pool's directory)");
            return 0;
        }
        out.println(entries.size() + " in " + store.directory() + ":");
        for (PoolStore.Entry e : entries) {
            switch (e) {
                case PoolStore.Entry.Readable r -> out.println("  " + r.dir().getFileName() + ": " + describe(r.pool().key(), r.loaded()));
                case PoolStore.Entry.Unreadable u -> out.println("  " + u.dir().getFileName() + ": unreadable, passed over (" + u.why() + ")");
            }
        }
        return 0;
    }

    /** A pool's key, size, profiled token counts and date, in a line. */
    static String describe(PoolStore.Key key, PoolDirectory.Loaded loaded) {
        IntSummaryStatistics batches = loaded.fit().profiled().stream().mapToInt(PoolFit.Point::batch).summaryStatistics();
        String date = loaded.profile().path("date").asText("");
        return key + "; " + loaded.kernels().size() + " configs, profiled at " + batches.getMin() + " to " + batches.getMax() + " tokens"
                + (date.isEmpty() ? "" : " on " + date.substring(0, Math.min(10, date.length())));
    }

    /** What an installation did, in a line. */
    static String installed(PoolStore.Installation done) {
        return (done.replaced() ? "replaced the pool installed for " : "installed the pool for ") + done.pool().key() + ": "
                + done.pool().dir() + " (decode and bench decode take it by default for experts it fits)";
    }

    @Command(name = "install", mixinStandardHelpOptions = true,
            description = "Copies a profiled pool's directory (`moeforge pool` then `profile`; `tune` installs its own) into the "
                    + "installed pools, replacing the one installed for the same geometry, format, target and GPU. The directory is "
                    + "read whole first: a profile of another pool, an unfinished one, or one that names no GPU is refused.")
    static final class Install implements Callable<Integer> {
        @Spec
        CommandSpec spec;

        @ParentCommand
        PoolsCommand pools;

        @Parameters(paramLabel = "DIR", description = "The pool's directory (pool.moe and profile.json or profile.json.gz).")
        Path dir;

        @Override
        public Integer call() throws IOException {
            spec.commandLine().getOut().println(installed(pools.store.install(dir)));
            return 0;
        }
    }
}
