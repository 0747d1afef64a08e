package dev.moeforge.runtime.dispatch;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.stream.Stream;

/**
 * Tuned pools installed for use by default: one directory per {@link Key} (expert geometry, weights
 * format, target, device), each a copy of a pool's directory that {@link PoolDirectory#load} read
 * whole before it was put in place. A profile times one device, so a pool is found only for the
 * device it was profiled on.
 */
public final class PoolStore {
    /** The files of a pool's directory an installed copy keeps: what a layer reads, and the fit beside it for a person. */
    private static final List<String> KEPT = List.of(PoolDirectory.KERNELS_FILE, PoolDirectory.PROFILE_FILE,
            PoolDirectory.PROFILE_FILE + ".gz", "pool.json", "fit.json", "fit.txt");

    private static final String LOCK_FILE = ".lock";
    private static final String STAGED_PREFIX = ".installing-";
    private static final String REPLACED_PREFIX = ".replaced-";

    private final Path root;

    public PoolStore(Path root) {
        this.root = root.toAbsolutePath().normalize();
    }

    /** The store in env {@code MOEFORGE_POOLS}, else {@code ~/.cache/moeforge/pools}. */
    public static PoolStore defaultStore() {
        String configured = System.getenv("MOEFORGE_POOLS");
        return new PoolStore(configured != null && !configured.isBlank() ? Path.of(configured)
                : Path.of(System.getProperty("user.home"), ".cache", "moeforge", "pools"));
    }

    public Path directory() {
        return root;
    }

    /**
     * What an installed pool serves: experts of {@code shape} with {@code weights}, kernels for {@code target}, timed
     * on the device named {@code device} (as the driver names it).
     */
    public record Key(ExpertShape shape, WeightFormat weights, Target target, String device) {
        public Key {
            if (device == null || device.isBlank()) {
                throw new IllegalArgumentException("a tuned pool's key needs the device it was profiled on");
            }
        }

        /** The key of a pool's directory as read: its kernels' geometry, format and target, and its profile's device. */
        public static Key of(PoolDirectory.Loaded pool) {
            List<KernelSpec> kernels = List.copyOf(pool.kernels().values());
            if (kernels.isEmpty()) {
                throw new IllegalArgumentException("the pool holds no kernels");
            }
            Problem.ExpertProblem first = (Problem.ExpertProblem) kernels.getFirst().problem();
            for (KernelSpec k : kernels) {
                Problem.ExpertProblem p = (Problem.ExpertProblem) k.problem();
                if (!p.shape().equals(first.shape()) || !p.weights().equals(first.weights()) || k.target() != kernels.getFirst().target()) {
                    throw new IllegalArgumentException("the pool mixes kernels: " + kernels.getFirst().name() + " is " + describe(first,
                            kernels.getFirst().target()) + ", " + k.name() + " is " + describe(p, k.target())
                            + "; a pool serves one geometry, format and target");
                }
            }
            String device = pool.profile().path("device").path("name").asText("");
            if (device.isBlank()) {
                throw new IllegalArgumentException("the profile names no device (its device.name is missing): move it aside and profile "
                        + "the pool again with `moeforge profile DIR`, which records the GPU it times");
            }
            return new Key(first.shape(), first.weights(), kernels.getFirst().target(), device);
        }

        /** The installed copy's directory name: readable, and one per key. */
        public String directoryName() {
            return "h" + shape.hidden() + "-i" + shape.intermediate() + "-e" + shape.experts() + "-top" + shape.topk() + "-"
                    + weights.text() + "-" + target.text() + "-" + device.toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9]+", "-")
                    .replaceAll("(^-|-$)", "");
        }

        @Override
        public String toString() {
            return "H=" + shape.hidden() + ", I=" + shape.intermediate() + ", E=" + shape.experts() + ", top-" + shape.topk() + ", "
                    + weights.text() + ", " + target.text() + ", " + device;
        }

        private static String describe(Problem.ExpertProblem p, Target t) {
            return "H=" + p.shape().hidden() + ", I=" + p.shape().intermediate() + ", E=" + p.shape().experts() + ", top-"
                    + p.shape().topk() + ", " + p.weights().text() + ", " + t.text();
        }
    }

    /** An installed pool: its key and directory. */
    public record Installed(Key key, Path dir) {}

    /** What {@link #install} did: the pool now installed, and whether it took the place of one installed before for its key. */
    public record Installation(Installed pool, boolean replaced) {}

    /**
     * Copies the pool's directory {@code dir} into the store under its key, replacing the pool installed there before,
     * and says where the copy is. The directory is read whole and its cost models fitted first (a profile of another
     * pool, an unfinished one, one that names no device, or one the models cannot be fitted on is refused), and the copy
     * is read again before it takes the old one's place; where that fails, the old one stays. One install at a time
     * (a lock file in the store); what a killed install left is removed by the next.
     */
    public Installation install(Path dir) throws IOException {
        PoolDirectory.Loaded loaded = PoolDirectory.load(dir);
        Key key = Key.of(loaded);
        usableTable(loaded);
        Files.createDirectories(root);
        try (FileChannel lockFile = FileChannel.open(root.resolve(LOCK_FILE), StandardOpenOption.CREATE, StandardOpenOption.WRITE);
             FileLock _ = lockFile.lock()) {
            removeLeftovers();
            Path staged = Files.createTempDirectory(root, STAGED_PREFIX);
            Path target = root.resolve(key.directoryName());
            Path old = null;
            try {
                for (String name : KEPT) {
                    Path from = dir.resolve(name);
                    if (Files.isRegularFile(from)) {
                        Files.copy(from, staged.resolve(name), StandardCopyOption.COPY_ATTRIBUTES);
                    }
                }
                if (!Key.of(PoolDirectory.load(staged)).equals(key)) {
                    throw new IllegalStateException("the copy of " + dir + " reads as another pool than the original");
                }
                if (Files.exists(target)) {
                    old = Files.createTempDirectory(root, REPLACED_PREFIX).resolve("pool");
                    Files.move(target, old, StandardCopyOption.ATOMIC_MOVE);
                }
                try {
                    Files.move(staged, target, StandardCopyOption.ATOMIC_MOVE);
                } catch (IOException e) {
                    if (old != null) {
                        Files.move(old, target, StandardCopyOption.ATOMIC_MOVE);  // the old pool back in its place
                        old = null;
                    }
                    throw e;
                }
                staged = null;
                return new Installation(new Installed(key, target), old != null);
            } finally {
                // what is left (the staged copy of a failed install, the replaced pool) goes now or with the next install
                for (Path leftover : new Path[] {staged, old == null ? null : old.getParent()}) {
                    if (leftover != null) {
                        deleteQuietly(leftover);
                    }
                }
            }
        }
    }

    /**
     * The pool's dispatch table (its 5-term cost models fitted, the candidates they pick somewhere); refuses a pool
     * without both halves, whose profile timed no batch outside its held-out points, or whose models cannot be fitted:
     * a layer serving from it would fail where it is first used.
     */
    public static DispatchTable usableTable(PoolDirectory.Loaded pool) {
        for (PoolFit.Half half : PoolFit.Half.values()) {
            if (pool.fit().configs().stream().noneMatch(c -> c.half() == half)) {
                throw new IllegalArgumentException("the pool holds no " + half.name().toLowerCase(Locale.ROOT) + " kernels: a layer "
                        + "takes a pair");
            }
        }
        if (pool.fit().profiled().isEmpty()) {
            throw new IllegalArgumentException("the profile holds only held-out points: profile the pool again");
        }
        return DispatchTable.of(pool.fit(), pool.fit().fit(WaveCostModel.MAX_TERMS));
    }

    private void removeLeftovers() {
        List<Path> leftovers = new ArrayList<>();
        try (DirectoryStream<Path> children = Files.newDirectoryStream(root, p -> p.getFileName().toString().startsWith(STAGED_PREFIX)
                || p.getFileName().toString().startsWith(REPLACED_PREFIX))) {
            children.forEach(leftovers::add);
        } catch (IOException e) {
            return;  // nothing found is nothing to remove; a later install tries again
        }
        leftovers.forEach(PoolStore::deleteQuietly);
    }

    private static void deleteQuietly(Path dir) {
        try {
            deleteTree(dir);
        } catch (IOException e) {
            // a leftover of the store's own, hidden from find and list; the next install removes it
        }
    }

    /** The installed pool for {@code key}, if the store holds one. */
    public Optional<Installed> find(Key key) {
        Path dir = root.resolve(key.directoryName());
        return Files.isRegularFile(dir.resolve(PoolDirectory.KERNELS_FILE)) ? Optional.of(new Installed(key, dir)) : Optional.empty();
    }

    /** What a listing found in a directory of the store: the pool it holds, or why it cannot be read. */
    public sealed interface Entry {
        Path dir();

        record Readable(Installed pool, PoolDirectory.Loaded loaded) implements Entry {
            @Override
            public Path dir() {
                return pool.dir();
            }
        }

        record Unreadable(Path dir, String why) implements Entry {}
    }

    /** Every pool directory of the store, by name, each read whole and its cost models fitted. */
    public List<Entry> list() {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        List<Path> dirs = new ArrayList<>();
        try (DirectoryStream<Path> children = Files.newDirectoryStream(root, p -> Files.isDirectory(p)
                && !p.getFileName().toString().startsWith("."))) {
            children.forEach(dirs::add);
        } catch (IOException e) {
            throw new UncheckedIOException("reading the tuned pools in " + root + ": " + e.getMessage(), e);
        }
        dirs.sort(Comparator.comparing(p -> p.getFileName().toString()));
        List<Entry> entries = new ArrayList<>();
        for (Path dir : dirs) {
            try {
                PoolDirectory.Loaded loaded = PoolDirectory.load(dir);
                Key key = Key.of(loaded);
                usableTable(loaded);  // as the decoder checks it before it serves from it
                entries.add(key.directoryName().equals(dir.getFileName().toString())
                        ? new Entry.Readable(new Installed(key, dir), loaded)
                        : new Entry.Unreadable(dir, "holds a pool of " + key + ", whose directory is " + key.directoryName()
                        + " (install it with `moeforge pools install DIR`)"));
            } catch (IOException | RuntimeException e) {
                entries.add(new Entry.Unreadable(dir, e.getMessage()));
            }
        }
        return entries;
    }

    private static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> all = Files.walk(dir)) {
            for (Path p : all.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
