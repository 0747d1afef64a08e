package dev.moeforge.runtime.cache;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.CudaTokens;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.compile.PtxasReport;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Stream;

/**
 * A content-addressed on-disk cache of compiled kernels, shared by threads and processes.
 *
 * <p>An entry's key is the SHA-256 of everything that determines the cubin (see
 * {@link #key(CudaSource, Target, NvccCompiler)}); it lives in {@code <dir>/<key[0..2]>/<key>/} as
 * {@code kernel.cubin}, {@code report.json} (the {@link PtxasReport}), {@code meta.json} (key, target,
 * nvcc version, flags, command, nvcc log, cubin SHA-256 and length, creation time) and
 * {@code source.cu}, which is there for humans and not read back.
 *
 * <p>Entries are built in a temporary directory beside their final place and renamed into it
 * atomically, so a reader sees a whole entry or none. Compiling a key happens under a per-key lock,
 * an in-JVM lock plus a {@link FileLock} on {@code <key>.lock}, so concurrent requests for one key,
 * from threads or processes, compile it once. An entry that fails validation on read (missing file,
 * unreadable JSON, cubin length or hash not matching the metadata) is logged, deleted and compiled
 * again; it is never handed out.
 */
public final class KernelCache {

    /** Changes whenever the entry layout or key recipe changes, so old entries are simply not found. */
    static final String FORMAT = "moeforge-kernel-cache/2";

    static final String CUBIN = "kernel.cubin";
    static final String REPORT = "report.json";
    static final String META = "meta.json";
    static final String SOURCE = "source.cu";

    private static final Logger LOG = Logger.getLogger(KernelCache.class.getName());
    private static final ObjectMapper JSON = new ObjectMapper();

    /**
     * FileChannel locks belong to the whole JVM (a second lock on the same file from this JVM throws
     * instead of waiting), so threads first queue on this lock, shared by every cache instance.
     */
    private static final Map<Path, ReentrantLock> JVM_LOCKS = new ConcurrentHashMap<>();

    private final Path dir;
    private final AtomicLong hits = new AtomicLong();
    private final AtomicLong misses = new AtomicLong();
    private final AtomicLong rebuilds = new AtomicLong();
    private volatile NvccCompiler defaultCompiler;

    /** What {@code meta.json} holds. */
    record Meta(String format, String key, String target, String nvccVersion, List<String> flags,
                List<String> command, String cubinSha256, long cubinBytes, String created, String log) {
    }

    private static final class CorruptEntry extends Exception {
        CorruptEntry(String reason, Throwable cause) {
            super(reason, cause);
        }
    }

    public KernelCache(Path dir) {
        this.dir = dir.toAbsolutePath().normalize();
    }

    /** The cache in env {@code MOEFORGE_CACHE}, else {@code ~/.cache/moeforge/kernels}. */
    public static KernelCache defaultCache() {
        String configured = System.getenv("MOEFORGE_CACHE");
        return new KernelCache(configured != null && !configured.isBlank()
                ? Path.of(configured)
                : Path.of(System.getProperty("user.home"), ".cache", "moeforge", "kernels"));
    }

    public Path directory() {
        return dir;
    }

    /** Like {@link #getOrCompile(CudaSource, Target, NvccCompiler)} with the nvcc found on this machine. */
    public CompileResult getOrCompile(CudaSource source, Target target) {
        return getOrCompile(source, target, compiler());
    }

    /**
     * The cached result for {@code source} on {@code target}, compiling it with {@code nvcc} and
     * storing it first if there is no valid entry.
     *
     * @throws dev.moeforge.runtime.compile.CompileFailure if it had to be compiled and nvcc failed
     */
    public CompileResult getOrCompile(CudaSource source, Target target, NvccCompiler nvcc) {
        String key = key(source, target, nvcc);
        Path entry = entryDir(key);
        // Installed entries never change, so a valid read needs no lock. A corrupt one is looked at
        // again under the lock, where only one thread deletes and rebuilds it.
        try {
            CompileResult cached = readIfPresent(key, entry);
            if (cached != null) {
                hits.incrementAndGet();
                return cached;
            }
        } catch (CorruptEntry e) {
            // handled below
        }
        return withKeyLock(key, () -> {
            try {
                CompileResult cached = readIfPresent(key, entry);
                if (cached != null) {
                    hits.incrementAndGet();
                    return cached;
                }
                misses.incrementAndGet();
            } catch (CorruptEntry e) {
                LOG.warning("kernel cache entry " + entry + " is corrupt (" + e.getMessage() + "); deleting and recompiling");
                discard(entry);
                rebuilds.incrementAndGet();
            }
            CompileResult compiled = nvcc.compile(source, target);
            return install(key, entry, source, target, nvcc, compiled);
        });
    }

    /**
     * Copies {@code from}'s valid entry for {@code source} on {@code target} into this cache (built
     * beside its place and renamed in, as a compile's is), unless this cache has it already: how a
     * bundle gets exactly the kernels it needs from a build machine's cache.
     *
     * @throws IllegalStateException if {@code from} holds no valid entry for it
     */
    public void copyEntryFrom(KernelCache from, CudaSource source, Target target) {
        copyEntryFrom(from, source, target, compiler());
    }

    /** {@link #copyEntryFrom(KernelCache, CudaSource, Target)} for entries keyed with {@code nvcc}. */
    public void copyEntryFrom(KernelCache from, CudaSource source, Target target, NvccCompiler nvcc) {
        String key = from.key(source, target, nvcc);
        Path mine = entryDir(key);
        try {
            if (readIfPresent(key, mine) != null) {
                return;
            }
        } catch (CorruptEntry e) {
            discard(mine);
        }
        Path theirs = from.entryDir(key);
        try {
            if (readIfPresent(key, theirs) == null) {
                throw new IllegalStateException("no kernel cache entry " + theirs + " to copy");
            }
            Files.createDirectories(mine.getParent());
            Path tmp = Files.createTempDirectory(mine.getParent(), ".tmp-" + key.substring(0, 12) + "-");
            for (String file : List.of(CUBIN, REPORT, SOURCE, META)) {
                Files.copy(theirs.resolve(file), tmp.resolve(file));
            }
            try {
                Files.move(tmp, mine, StandardCopyOption.ATOMIC_MOVE);
            } catch (IOException e) {
                if (!Files.isDirectory(mine)) {
                    throw e;
                }
                discard(tmp);  // installed concurrently
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot copy kernel cache entry " + theirs + " into " + dir, e);
        } catch (CorruptEntry e) {
            throw new IllegalStateException("kernel cache entry " + theirs + " is corrupt: " + e.getMessage(), e);
        }
    }

    /** The key {@link #getOrCompile(CudaSource, Target)} uses. */
    public String key(CudaSource source, Target target) {
        return key(source, target, compiler());
    }

    /**
     * SHA-256 (hex) over, each length-prefixed: the cache format, the file name (nvcc records it in
     * the line info), the source, every header's name and content in name order (source and headers
     * without their comments, {@link CudaTokens}: a reworded comment keeps its key), the target,
     * nvcc's version and its flags.
     */
    public String key(CudaSource source, Target target, NvccCompiler nvcc) {
        MessageDigest sha = sha256();
        field(sha, FORMAT);
        field(sha, source.fileName());
        field(sha, CudaTokens.of(source.code()));
        count(sha, source.headers().size());
        source.headers().forEach((name, content) -> {
            field(sha, name);
            field(sha, CudaTokens.of(content));
        });
        field(sha, target.text());
        field(sha, nvcc.version());
        List<String> flags = nvcc.flags(target);
        count(sha, flags.size());
        flags.forEach(f -> field(sha, f));
        return HexFormat.of().formatHex(sha.digest());
    }

    /** Where the entry for {@code key} lives (whether or not it exists). */
    public Path entryDir(String key) {
        return dir.resolve(key.substring(0, 2)).resolve(key);
    }

    /** Requests answered from disk. */
    public long hits() {
        return hits.get();
    }

    /** Requests that compiled because there was no entry. */
    public long misses() {
        return misses.get();
    }

    /** Requests that compiled because the entry was corrupt. */
    public long rebuilds() {
        return rebuilds.get();
    }

    private NvccCompiler compiler() {
        NvccCompiler c = defaultCompiler;
        if (c == null) {
            synchronized (this) {
                c = defaultCompiler;
                if (c == null) {
                    c = new NvccCompiler();
                    defaultCompiler = c;
                }
            }
        }
        return c;
    }

    /** The valid entry, or null if there is none; throws if one is there but does not check out. */
    private static CompileResult readIfPresent(String key, Path entry) throws CorruptEntry {
        if (!Files.isDirectory(entry)) {
            return null;
        }
        try {
            Meta meta = JSON.readValue(Files.readAllBytes(entry.resolve(META)), Meta.class);
            if (!key.equals(meta.key()) || !FORMAT.equals(meta.format())) {
                throw new CorruptEntry("meta.json names key " + meta.key() + " in format " + meta.format(), null);
            }
            byte[] cubin = Files.readAllBytes(entry.resolve(CUBIN));
            if (cubin.length != meta.cubinBytes()) {
                throw new CorruptEntry(CUBIN + " has " + cubin.length + " bytes, meta.json says " + meta.cubinBytes(), null);
            }
            String sha = HexFormat.of().formatHex(sha256().digest(cubin));
            if (!sha.equals(meta.cubinSha256())) {
                throw new CorruptEntry(CUBIN + " has SHA-256 " + sha + ", meta.json says " + meta.cubinSha256(), null);
            }
            PtxasReport report = PtxasReport.fromJson(Files.readString(entry.resolve(REPORT)));
            return new CompileResult(cubin, report, meta.log(), meta.command());
        } catch (IOException | RuntimeException e) {
            // Jackson reports bad JSON as IOException, missing fields end up as NullPointerException.
            // Its messages quote the input over several lines; the first says enough for the log.
            throw new CorruptEntry(e.toString().lines().findFirst().orElse(""), e);
        }
    }

    /**
     * Builds the entry beside its final place and renames it in. If another process got there first
     * (one not honouring the lock, e.g. on a file system without locks), its entry is used. Failing
     * to write only costs a later recompile, so it is logged, not thrown.
     */
    private CompileResult install(String key, Path entry, CudaSource source, Target target, NvccCompiler nvcc,
                                  CompileResult compiled) {
        Path tmp = null;
        try {
            tmp = Files.createTempDirectory(entry.getParent(), ".tmp-" + key.substring(0, 12) + "-");
            Files.write(tmp.resolve(CUBIN), compiled.cubin());
            Files.writeString(tmp.resolve(REPORT), compiled.report().toJson());
            Files.writeString(tmp.resolve(SOURCE), source.code());
            Meta meta = new Meta(FORMAT, key, target.text(), nvcc.version(), nvcc.flags(target), compiled.command(),
                    HexFormat.of().formatHex(sha256().digest(compiled.cubin())), compiled.cubin().length,
                    Instant.now().toString(), compiled.log());
            Files.write(tmp.resolve(META), JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(meta));
            try {
                Files.move(tmp, entry, StandardCopyOption.ATOMIC_MOVE);
                tmp = null;
            } catch (IOException e) {
                if (!Files.isDirectory(entry)) {
                    throw e;
                }
                LOG.fine(() -> "kernel cache entry " + entry + " was installed concurrently; using that one");
                return readIfPresent(key, entry);
            }
        } catch (IOException | CorruptEntry e) {
            LOG.log(Level.WARNING, "cannot store kernel cache entry " + entry, e);
        } finally {
            if (tmp != null) {
                deleteRecursively(tmp);
            }
        }
        return compiled;
    }

    /** Renames a bad entry out of the way first, so no reader finds it half deleted. */
    private static void discard(Path entry) {
        try {
            Path trash = entry.resolveSibling(".trash-" + entry.getFileName() + "-" + System.nanoTime());
            Files.move(entry, trash, StandardCopyOption.ATOMIC_MOVE);
            deleteRecursively(trash);
        } catch (IOException e) {
            deleteRecursively(entry);
        }
    }

    private <T> T withKeyLock(String key, Supplier<T> action) {
        Path lockFile;
        try {
            Path shard = Files.createDirectories(entryDir(key).getParent()).toRealPath();
            lockFile = shard.resolve(key + ".lock");
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create kernel cache directory under " + dir, e);
        }
        ReentrantLock jvmLock = JVM_LOCKS.computeIfAbsent(lockFile, f -> new ReentrantLock());
        jvmLock.lock();
        try (FileChannel channel = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
             FileLock ignored = channel.lock()) {
            return action.get();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot lock " + lockFile, e);
        } finally {
            jvmLock.unlock();
        }
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform provides SHA-256", e);
        }
    }

    private static void field(MessageDigest sha, String value) {
        byte[] bytes = value.getBytes(StandardCharsets.UTF_8);
        count(sha, bytes.length);
        sha.update(bytes);
    }

    private static void count(MessageDigest sha, long n) {
        sha.update(ByteBuffer.allocate(Long.BYTES).putLong(n).array());
    }

    private static void deleteRecursively(Path root) {
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | UncheckedIOException e) {
            LOG.log(Level.WARNING, "cannot delete " + root, e);
        }
    }
}
