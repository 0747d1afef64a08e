package dev.moeforge.checkpoint;

import java.io.IOException;
import java.io.StringReader;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryNotEmptyException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Consumer;

/**
 * Where a {@link Quantizer} run writes its checkpoint before the output folder exists:
 * {@code .quantize-<out>-<id>}, a folder beside the output folder (so on the same file system, and
 * the finished checkpoint moves into place with one rename). An owner file
 * {@code .quantize-<out>-<id>.owner} beside it names the process that made it (pid, start time,
 * host). A later run removes the staging folder of a run whose process is gone, a run that was killed,
 * and leaves every other one alone: one of a live process, of another host, or without a readable
 * owner file is not provably stale. Nothing ever lands in the output folder before the final move.
 *
 * <p>The run removes its own staging folder when it fails, and on the way out of a JVM that is
 * shutting down (Ctrl-C, SIGTERM); only a SIGKILL or a crash leaves one for the next run.
 */
final class StagingFolder implements AutoCloseable {

    static final String PREFIX = ".quantize-";
    static final String OWNER_SUFFIX = ".owner";

    // An output name is cut to this many characters in the staging names, so they stay valid file names.
    private static final int NAME_CHARS = 100;
    // Process start times as read back can differ by clock-tick rounding; this much apart is another process.
    private static final Duration SAME_START = Duration.ofSeconds(1);

    private final Path out;
    private final Path dir;
    private final Path owner;
    private final List<Path> createdFolders;
    private final Thread cleanupOnExit;
    private boolean committed;
    private boolean discarded;

    private StagingFolder(Path out, Path dir, Path owner, List<Path> createdFolders) {
        this.out = out;
        this.dir = dir;
        this.owner = owner;
        this.createdFolders = createdFolders;
        this.cleanupOnExit = new Thread(this::discard, "quantize: remove " + dir.getFileName());
    }

    /**
     * Removes the stale staging folders beside {@code out} (absolute), then makes this run's, creating
     * the folders above {@code out} that are missing (removed again if the run fails).
     */
    static StagingFolder create(Path out, Consumer<String> note) throws IOException {
        Path parent = out.getParent();
        List<Path> created = createFolders(parent);
        StagingFolder staging = null;
        try {
            removeStale(parent, note);
            String name = out.getFileName().toString();
            String id = PREFIX + name.substring(0, Math.min(name.length(), NAME_CHARS)) + "-" + ProcessHandle.current().pid()
                    + "-" + Long.toHexString(ThreadLocalRandom.current().nextLong() >>> 1);
            Path owner = parent.resolve(id + OWNER_SUFFIX);
            Path dir = parent.resolve(id);
            // The owner file first: a staging folder without one is never removed by a later run.
            Files.writeString(owner, ownerText(out), StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
            staging = new StagingFolder(out, dir, owner, created);
            Runtime.getRuntime().addShutdownHook(staging.cleanupOnExit);
            Files.createDirectory(dir);
            return staging;
        } catch (IOException | RuntimeException e) {
            if (staging != null) {
                staging.close();
            } else {
                removeEmpty(created);
            }
            throw e;
        }
    }

    /** The staging folder, to write the checkpoint into. */
    Path dir() {
        return dir;
    }

    /**
     * Puts the staged checkpoint in place. An absent or empty output folder becomes the staging
     * folder, renamed; into a non-empty one ({@code force} only) each staged file is moved, replacing
     * one of the same name, and the shards and index of an earlier checkpoint that this one does not
     * have are deleted; other files there are kept and named in a note.
     *
     * @return the files now in the output folder that were written by this run
     */
    synchronized List<Path> commit(boolean force, Consumer<String> note) throws IOException {
        if (discarded) {
            throw new CheckpointException(out + ": not written: the run is being stopped");
        }
        List<Path> staged = list(dir);
        if (Files.isDirectory(out) && list(out).isEmpty()) {
            Files.delete(out);
        }
        if (!Files.exists(out, LinkOption.NOFOLLOW_LINKS)) {
            move(dir, out);
        } else if (!Files.isDirectory(out)) {
            throw new CheckpointException(out + ": appeared while this run wrote, and is not a directory; the quantised "
                    + "checkpoint is not written there");
        } else if (!force) {
            throw new CheckpointException(out + ": was filled by something else while this run wrote; the quantised "
                    + "checkpoint is not written over it without force");
        } else {
            replaceInto(staged, note);
        }
        committed = true;
        Files.deleteIfExists(owner);
        return staged.stream().map(p -> out.resolve(p.getFileName())).toList();
    }

    private void replaceInto(List<Path> staged, Consumer<String> note) throws IOException {
        List<String> names = staged.stream().map(p -> p.getFileName().toString()).toList();
        // The index last: until it moves, a reader of the folder still finds the old shards it names.
        List<Path> order = new ArrayList<>(staged);
        order.sort((a, b) -> Boolean.compare(isIndex(a), isIndex(b)));
        for (Path p : order) {
            move(p, out.resolve(p.getFileName()));
        }
        List<String> kept = new ArrayList<>();
        for (Path p : list(out)) {
            String name = p.getFileName().toString();
            if (names.contains(name)) {
                continue;
            }
            if (CheckpointWriter.isCheckpointFile(name) && Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                Files.delete(p);  // a shard or index of the earlier checkpoint: read with the new ones, it would corrupt it
            } else {
                kept.add(name);
            }
        }
        Files.delete(dir);
        if (!kept.isEmpty()) {
            Collections.sort(kept);
            note.accept("kept in " + out + " what the quantised checkpoint does not replace: " + String.join(", ", kept));
        }
    }

    private static boolean isIndex(Path p) {
        return p.getFileName().toString().equals(Checkpoint.INDEX_FILE);
    }

    /** Removes the staging folder unless it was committed, and the folders made for it if they are empty. */
    @Override
    public void close() {
        discard();
        try {
            Runtime.getRuntime().removeShutdownHook(cleanupOnExit);
        } catch (IllegalStateException shuttingDown) {
            // the hook is running or has run: it does what close does
        }
    }

    private synchronized void discard() {
        if (discarded) {
            return;
        }
        discarded = true;
        if (!committed) {
            deleteOwnFiles(dir);
        }
        try {
            Files.deleteIfExists(owner);
        } catch (IOException ignored) {
            // the owner file of a dead process: the next run removes it
        }
        if (!committed) {
            removeEmpty(createdFolders);
        }
    }

    // ---------------------------------------------------------------- stale staging of killed runs

    /** Removes the staging folders in {@code parent} whose owner file names a process of this host that is gone. */
    static void removeStale(Path parent, Consumer<String> note) throws IOException {
        List<Path> owners = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(parent, PREFIX + "*" + OWNER_SUFFIX)) {
            ds.forEach(owners::add);
        }
        owners.sort(null);
        for (Path ownerFile : owners) {
            if (!Files.isRegularFile(ownerFile, LinkOption.NOFOLLOW_LINKS)) {
                continue;
            }
            Optional<String> gone = goneOwner(ownerFile);
            if (gone.isEmpty()) {
                continue;
            }
            String fileName = ownerFile.getFileName().toString();
            Path stale = parent.resolve(fileName.substring(0, fileName.length() - OWNER_SUFFIX.length()));
            if (Files.exists(stale, LinkOption.NOFOLLOW_LINKS)) {
                Optional<String> foreign = foreignEntry(stale);
                if (foreign.isPresent()) {
                    note.accept("left " + stale + " alone: it holds " + foreign.get() + ", which quantize never writes");
                    continue;
                }
                deleteOwnFiles(stale);
                if (Files.exists(stale, LinkOption.NOFOLLOW_LINKS)) {
                    note.accept("could not remove all of " + stale + ", the staging folder of a quantize run that was killed ("
                            + gone.get() + ")");
                    continue;
                }
                note.accept("removed the staging folder " + stale + " of a quantize run that was killed (" + gone.get() + ")");
            }
            Files.deleteIfExists(ownerFile);
        }
    }

    /** What the owner file says of its process, if that process is provably gone: not running, or its pid reused. */
    private static Optional<String> goneOwner(Path ownerFile) {
        Properties p = new Properties();
        try {
            p.load(new StringReader(Files.readString(ownerFile)));
        } catch (IOException | IllegalArgumentException unreadable) {
            return Optional.empty();
        }
        String host = p.getProperty("host");
        String pidText = p.getProperty("pid");
        if (host == null || pidText == null || !host.equals(hostName())) {
            return Optional.empty();  // another host's processes cannot be checked from here
        }
        long pid;
        try {
            pid = Long.parseLong(pidText.trim());
        } catch (NumberFormatException e) {
            return Optional.empty();
        }
        Optional<ProcessHandle> process = ProcessHandle.of(pid);
        if (process.isEmpty() || !process.get().isAlive()) {
            return Optional.of("pid " + pid + ", no longer running");
        }
        Optional<Instant> started = process.get().info().startInstant();
        Instant recorded;
        try {
            recorded = Instant.parse(p.getProperty("started", "").trim());
        } catch (DateTimeParseException e) {
            return Optional.empty();
        }
        if (started.isPresent() && Duration.between(recorded, started.get()).abs().compareTo(SAME_START) > 0) {
            return Optional.of("pid " + pid + ", now another process");
        }
        return Optional.empty();
    }

    /** The first entry of {@code dir} that is not a plain file (a run stages only files), if any. */
    private static Optional<String> foreignEntry(Path dir) throws IOException {
        if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
            return Optional.of("no folder but " + dir.getFileName());
        }
        for (Path p : list(dir)) {
            if (!Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                return Optional.of(p.getFileName().toString());
            }
        }
        return Optional.empty();
    }

    private static String ownerText(Path out) {
        ProcessHandle self = ProcessHandle.current();
        return "# the staging folder of a moeforge quantize run; a later run removes it once this process is gone\n"
                + "pid=" + self.pid() + "\n"
                + "started=" + self.info().startInstant().map(Instant::toString).orElse("") + "\n"
                + "host=" + hostName() + "\n"
                + "out=" + out.toString().replace("\\", "\\\\") + "\n";
    }

    /** This host's name, read without a name lookup (which can hang on a misconfigured network). */
    static String hostName() {
        try {
            return Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
        } catch (IOException | RuntimeException e) {
            String env = System.getenv("HOSTNAME");
            return env != null ? env : System.getenv().getOrDefault("COMPUTERNAME", "localhost");
        }
    }

    // ---------------------------------------------------------------- files

    /** Deletes the plain files directly in {@code dir} (what a run stages) and then {@code dir}, if that empties it. */
    private static void deleteOwnFiles(Path dir) {
        if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        try {
            for (Path p : list(dir)) {
                if (Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                    Files.deleteIfExists(p);
                }
            }
            Files.deleteIfExists(dir);
        } catch (IOException ignored) {
            // what is left has an owner file beside it, for the next run
        }
    }

    /** Creates {@code folder} and the folders above it that are missing; returns those made, deepest first. */
    private static List<Path> createFolders(Path folder) throws IOException {
        List<Path> missing = new ArrayList<>();
        for (Path p = folder; p != null && !Files.exists(p); p = p.getParent()) {
            missing.add(p);
        }
        List<Path> created = new ArrayList<>();
        try {
            for (Path p : missing.reversed()) {
                Files.createDirectory(p);
                created.addFirst(p);
            }
        } catch (IOException e) {
            removeEmpty(created);
            throw new CheckpointException(folder + ": cannot create: " + e, e);
        }
        return created;
    }

    private static void removeEmpty(List<Path> folders) {
        for (Path p : folders) {
            try {
                Files.deleteIfExists(p);
            } catch (DirectoryNotEmptyException e) {
                return;  // something else went there meanwhile: it and the folders above stay
            } catch (IOException ignored) {
                return;
            }
        }
    }

    private static List<Path> list(Path dir) throws IOException {
        List<Path> out = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            ds.forEach(out::add);
        }
        out.sort(null);
        return out;
    }

    /** A rename, atomic where the file system can. */
    private static void move(Path from, Path to) throws IOException {
        try {
            Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
        }
    }
}
