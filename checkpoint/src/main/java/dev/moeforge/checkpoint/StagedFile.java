package dev.moeforge.checkpoint;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A file written under a temporary name beside its own and moved there only when asked, so a failed
 * write never leaves a truncated file that looks like a checkpoint under the real name. Errors name
 * the real name.
 */
final class StagedFile {

    /** What goes into the file. */
    @FunctionalInterface
    interface Body {
        void write(FileChannel channel) throws IOException;
    }

    private final Path path;
    private final long size;
    private Path temp;

    private StagedFile(Path path, Path temp, long size) {
        this.path = path;
        this.temp = temp;
        this.size = size;
    }

    /**
     * Writes {@code body} into a new temporary file beside {@code path}, deleted again if it fails.
     *
     * @throws CheckpointException naming {@code path} on an I/O error; what {@code body} throws otherwise
     */
    static StagedFile write(Path path, Body body) {
        Path absolute = path.toAbsolutePath();
        // Not Files.createTempFile: it makes the file owner-only, and the result should get the
        // usual permissions like any other file.
        Path candidate = absolute.resolveSibling("." + absolute.getFileName() + "."
                + Long.toHexString(ThreadLocalRandom.current().nextLong()) + ".tmp");
        Path created = null;
        try {
            long size;
            try (FileChannel ch = FileChannel.open(candidate, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                created = candidate;
                body.write(ch);
                size = ch.size();
            }
            StagedFile staged = new StagedFile(path, created, size);
            created = null;
            return staged;
        } catch (IOException e) {
            throw new CheckpointException(path + ": cannot write: " + e, e);
        } finally {
            deleteQuietly(created);
        }
    }

    /** The file's name once in place. */
    Path path() {
        return path;
    }

    /** Bytes written. */
    long size() {
        return size;
    }

    /** Moves the file to its name, atomically where the file system can, replacing any file there. */
    void moveIntoPlace() {
        Path absolute = path.toAbsolutePath();
        try {
            try {
                Files.move(temp, absolute, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(temp, absolute, StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException e) {
            throw new CheckpointException(path + ": cannot write: " + e, e);
        }
        temp = null;
    }

    /** Deletes the temporary file unless it was moved into place. */
    void discard() {
        deleteQuietly(temp);
        temp = null;
    }

    static void writeFully(FileChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            ch.write(buf);
        }
    }

    private static void deleteQuietly(Path p) {
        if (p == null) {
            return;
        }
        try {
            Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // The original failure is what matters; a stray temporary file is harmless.
        }
    }
}
