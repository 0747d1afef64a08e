package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.examples.decoder.TunedPoolTest;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** `moeforge pools` lists the installed tuned pools and `pools install DIR` adds one, read whole first. */
class PoolsCommandTest {
    @TempDir
    Path tmp;

    private CliRun run(PoolStore store, String... args) {
        return CliRun.of(cli -> CliRun.<PoolsCommand>command(cli, "pools").store = store, args);
    }

    @Test
    void anEmptyStoreSaysHowToFillIt() {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        CliRun run = run(store, "pools");
        assertEquals(0, run.exitCode(), run.err());
        assertTrue(run.out().contains("no tuned pools installed in " + store.directory() + " (`moeforge tune` installs one"), run.out());
    }

    @Test
    void aProfiledPoolIsInstalledListedAndReplaced() throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        Path tuned = Files.createDirectory(tmp.resolve("tuned"));
        TunedPoolTest.writePool(tuned, "NVIDIA H200");
        CliRun install = run(store, "pools", "install", tuned.toString());
        assertEquals(0, install.exitCode(), install.err());
        Path dir = store.directory().resolve("h64-i32-e8-top2-bf16-sm_90a-nvidia-h200");
        assertTrue(install.out().contains("installed the pool for H=64, I=32, E=8, top-2, bf16, sm_90a, NVIDIA H200: " + dir), install.out());
        CliRun list = run(store, "pools");
        assertTrue(list.out().contains("1 in " + store.directory()) && list.out().contains("h64-i32-e8-top2-bf16-sm_90a-nvidia-h200: "
                + "H=64, I=32, E=8, top-2, bf16, sm_90a, NVIDIA H200; 4 configs, profiled at 1 to 300 tokens"), list.out());
        CliRun again = run(store, "pools", "install", tuned.toString());
        assertTrue(again.out().contains("replaced the pool installed for H=64"), again.out());
        Files.createDirectory(store.directory().resolve("stray"));
        assertTrue(run(store, "pools").out().contains("stray: unreadable, passed over ("), "a directory that holds no pool");
    }

    @Test
    void aPoolWithoutItsProfileIsRefusedByName() throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        Path tuned = Files.createDirectory(tmp.resolve("tuned"));
        TunedPoolTest.writePool(tuned, "NVIDIA H200");
        Files.delete(tuned.resolve(PoolDirectory.PROFILE_FILE));
        CliRun run = run(store, "pools", "install", tuned.toString());
        assertEquals(1, run.exitCode());
        assertTrue(run.err().contains(tuned.resolve(PoolDirectory.PROFILE_FILE) + " does not exist") && run.err().contains("moeforge profile "
                + tuned), run.err());
        assertTrue(store.list().isEmpty());
        CliRun nowhere = run(store, "pools", "install", tmp.resolve("nowhere").toString());
        assertEquals(1, nowhere.exitCode());
        assertTrue(nowhere.err().contains(tmp.resolve("nowhere") + " is not a directory: a tuned pool's directory is what `moeforge pool "
                + "--out DIR` writes"), nowhere.err());
    }
}
