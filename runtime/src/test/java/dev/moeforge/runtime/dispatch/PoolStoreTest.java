package dev.moeforge.runtime.dispatch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Installed tuned pools: found by their key only, installed whole or not at all, and listed with what cannot be read. */
class PoolStoreTest {
    private static final ExpertShape SHAPE = new ExpertShape(256, 128, 16, 2);
    private static final int SMS = 132;

    /** A pool of two pairs (one-token warps, 16-pair tiles) of {@code shape} with a made-up profile naming {@code device}. */
    private static Path pool(Path dir, ExpertShape shape, String device) throws IOException {
        return pool(dir, shape, shape, device);
    }

    /** As above, the tiles of {@code tilesShape}. */
    private static Path pool(Path dir, ExpertShape shape, ExpertShape tilesShape, String device) throws IOException {
        Map<KernelSpec, WaveCostModel> truth = new LinkedHashMap<>();
        var warps = ExpertLayerSpecs.of("warps", shape, GateUpLayout.STACKED, new OutputCentric(8, 16, 2, 1, 1, 0), Target.SM_90A);
        var tiles = ExpertLayerSpecs.of("tiles", tilesShape, GateUpLayout.STACKED, new ExpertCentric(16, 128, 64, 1, 4, 2, 1, false),
                Target.SM_90A);
        for (var pair : List.of(warps, tiles)) {
            WaveCostModel model = pair == warps ? new WaveCostModel(1, 0, 0.02, 0, 0, 3) : new WaveCostModel(3, 0, 0.01, 0, 0, 3);
            truth.put(pair.gateUp(), model);
            truth.put(pair.down(), model);
        }
        Files.createDirectories(dir);
        TunedPoolFixture.write(dir, truth, SMS, device);
        return dir;
    }

    private static PoolStore.Key key(String device) {
        return new PoolStore.Key(SHAPE, WeightFormat.BF16, Target.SM_90A, device);
    }

    @Test
    void aPoolIsFoundUnderItsGeometryFormatTargetAndDeviceOnly(@TempDir Path tmp) throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        assertTrue(store.find(key("NVIDIA H200")).isEmpty(), "an empty store");
        assertEquals(List.of(), store.list());
        PoolStore.Installation done = store.install(pool(tmp.resolve("tuned"), SHAPE, "NVIDIA H200"));
        assertFalse(done.replaced());
        assertEquals(key("NVIDIA H200"), done.pool().key());
        assertEquals("h256-i128-e16-top2-bf16-sm_90a-nvidia-h200", done.pool().dir().getFileName().toString());
        assertEquals(done.pool(), store.find(key("NVIDIA H200")).orElseThrow());
        assertTrue(store.find(key("NVIDIA H100 80GB HBM3")).isEmpty(), "another device");
        assertTrue(store.find(new PoolStore.Key(SHAPE, WeightFormat.NVFP4, Target.SM_90A, "NVIDIA H200")).isEmpty(), "another format");
        assertTrue(store.find(new PoolStore.Key(SHAPE, WeightFormat.BF16, Target.SM_100A, "NVIDIA H200")).isEmpty(), "another target");
        assertTrue(store.find(new PoolStore.Key(new ExpertShape(256, 128, 16, 4), WeightFormat.BF16, Target.SM_90A, "NVIDIA H200"))
                .isEmpty(), "another top-k");
        // the copy reads as the original: the same kernels and profile
        assertEquals(Files.readString(tmp.resolve("tuned").resolve(PoolDirectory.KERNELS_FILE)),
                Files.readString(done.pool().dir().resolve(PoolDirectory.KERNELS_FILE)));
        assertEquals(Files.readString(tmp.resolve("tuned").resolve(PoolDirectory.PROFILE_FILE)),
                Files.readString(done.pool().dir().resolve(PoolDirectory.PROFILE_FILE)));
    }

    @Test
    void installingAgainReplacesThePoolAndLeavesNothingBehind(@TempDir Path tmp) throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        store.install(pool(tmp.resolve("first"), SHAPE, "NVIDIA H200"));
        store.install(pool(tmp.resolve("other-device"), SHAPE, "NVIDIA H100 80GB HBM3"));
        Path second = pool(tmp.resolve("second"), SHAPE, "NVIDIA H200");
        Files.writeString(second.resolve("fit.txt"), "the second fit\n");
        PoolStore.Installation done = store.install(second);
        assertTrue(done.replaced());
        assertEquals("the second fit\n", Files.readString(done.pool().dir().resolve("fit.txt")));
        try (Stream<Path> children = Files.list(store.directory())) {
            assertEquals(List.of(".lock", "h256-i128-e16-top2-bf16-sm_90a-nvidia-h100-80gb-hbm3", "h256-i128-e16-top2-bf16-sm_90a-nvidia-h200"),
                    children.map(p -> p.getFileName().toString()).sorted().toList(), "no staged or replaced copies left");
        }
        assertEquals(2, store.list().stream().filter(e -> e instanceof PoolStore.Entry.Readable).count());
    }

    @Test
    void aPoolThatCannotBeReadWholeIsNotInstalled(@TempDir Path tmp) throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        var noDevice = assertThrows(IllegalArgumentException.class, () -> store.install(pool(tmp.resolve("a"), SHAPE, null)));
        assertTrue(noDevice.getMessage().contains("names no device") && noDevice.getMessage().contains("moeforge profile"),
                noDevice.getMessage());
        Path edited = pool(tmp.resolve("b"), SHAPE, "NVIDIA H200");
        Files.writeString(edited.resolve(PoolDirectory.KERNELS_FILE), Files.readString(edited.resolve(PoolDirectory.KERNELS_FILE)) + "\n");
        var otherPool = assertThrows(IllegalArgumentException.class, () -> store.install(edited));
        assertTrue(otherPool.getMessage().contains("is a profile of another pool"), otherPool.getMessage());
        Path unprofiled = pool(tmp.resolve("c"), SHAPE, "NVIDIA H200");
        Files.delete(unprofiled.resolve(PoolDirectory.PROFILE_FILE));
        assertThrows(IllegalArgumentException.class, () -> store.install(unprofiled));
        assertFalse(Files.exists(store.directory()), "a pool refused before anything was copied");
        assertTrue(store.list().isEmpty());
    }

    /** What a killed install left (a staged copy, a replaced pool) goes with the next install, and is never found or listed. */
    @Test
    void aKilledInstallsLeftoversGoWithTheNext(@TempDir Path tmp) throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        store.install(pool(tmp.resolve("a"), SHAPE, "NVIDIA H200"));
        Path staged = Files.createDirectories(store.directory().resolve(".installing-123"));
        Files.writeString(staged.resolve(PoolDirectory.KERNELS_FILE), "half a copy");
        Path replaced = Files.createDirectories(store.directory().resolve(".replaced-456").resolve("pool"));
        assertEquals(1, store.list().size(), "hidden leftovers are not listed");
        store.install(pool(tmp.resolve("b"), SHAPE, "NVIDIA H100 80GB HBM3"));
        assertFalse(Files.exists(staged) || Files.exists(replaced.getParent()));
        assertEquals(2, store.list().size());
    }

    /** A pool the cost models cannot serve from is refused at install, before a layer would fail on it. */
    @Test
    void aPoolWithoutBothHalvesIsNotInstalled(@TempDir Path tmp) throws IOException {
        Map<KernelSpec, WaveCostModel> gateUps = new LinkedHashMap<>();
        var warps = ExpertLayerSpecs.of("warps", SHAPE, GateUpLayout.STACKED, new OutputCentric(8, 16, 2, 1, 1, 0), Target.SM_90A);
        var tiles = ExpertLayerSpecs.of("tiles", SHAPE, GateUpLayout.STACKED, new ExpertCentric(16, 128, 64, 1, 4, 2, 1, false),
                Target.SM_90A);
        gateUps.put(warps.gateUp(), new WaveCostModel(1, 0, 0.02, 0, 0, 3));
        gateUps.put(tiles.gateUp(), new WaveCostModel(3, 0, 0.01, 0, 0, 3));
        Path dir = Files.createDirectories(tmp.resolve("gate-up-only"));
        TunedPoolFixture.write(dir, gateUps, SMS, "NVIDIA H200");
        var e = assertThrows(IllegalArgumentException.class, () -> new PoolStore(tmp.resolve("store")).install(dir));
        assertTrue(e.getMessage().contains("the pool holds no down kernels"), e.getMessage());
        assertFalse(Files.exists(tmp.resolve("store")));
    }

    @Test
    void aPoolMixingGeometriesHasNoKey(@TempDir Path tmp) throws IOException {
        Path mixed = pool(tmp.resolve("mixed"), SHAPE, new ExpertShape(256, 128, 16, 4), "NVIDIA H200");
        PoolDirectory.Loaded loaded = PoolDirectory.load(mixed);
        var e = assertThrows(IllegalArgumentException.class, () -> PoolStore.Key.of(loaded));
        assertTrue(e.getMessage().contains("the pool mixes kernels") && e.getMessage().contains("top-4"), e.getMessage());
        var install = assertThrows(IllegalArgumentException.class, () -> new PoolStore(tmp.resolve("store")).install(mixed));
        assertEquals(e.getMessage(), install.getMessage());
    }

    @Test
    void aListingNamesWhatCannotBeRead(@TempDir Path tmp) throws IOException {
        PoolStore store = new PoolStore(tmp.resolve("store"));
        store.install(pool(tmp.resolve("a"), SHAPE, "NVIDIA H200"));
        Files.createDirectories(store.directory().resolve("junk"));
        Path misplaced = store.directory().resolve("misplaced");
        Files.createDirectories(misplaced);
        for (String f : List.of(PoolDirectory.KERNELS_FILE, PoolDirectory.PROFILE_FILE)) {
            Files.copy(tmp.resolve("a").resolve(f), misplaced.resolve(f));
        }
        List<PoolStore.Entry> entries = store.list();
        assertEquals(List.of("h256-i128-e16-top2-bf16-sm_90a-nvidia-h200", "junk", "misplaced"),
                entries.stream().map(e -> e.dir().getFileName().toString()).toList());
        assertInstanceOf(PoolStore.Entry.Readable.class, entries.get(0));
        var junk = assertInstanceOf(PoolStore.Entry.Unreadable.class, entries.get(1));
        assertTrue(junk.why().contains("does not exist"), junk.why());
        var wrongName = assertInstanceOf(PoolStore.Entry.Unreadable.class, entries.get(2));
        assertTrue(wrongName.why().contains("whose directory is h256-i128-e16-top2-bf16-sm_90a-nvidia-h200"), wrongName.why());
        assertTrue(store.find(key("NVIDIA H200")).isPresent());
    }
}
