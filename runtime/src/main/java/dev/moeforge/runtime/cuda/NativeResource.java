package dev.moeforge.runtime.cuda;

/**
 * A driver object that must be released exactly once. {@link #close()} is idempotent; any other
 * use after it throws {@link IllegalStateException} rather than passing a dangling handle to the
 * driver. Not thread-safe beyond that: share an instance between threads only with external ordering.
 */
abstract class NativeResource implements AutoCloseable {

    private volatile boolean closed;

    /** Frees the driver object; called once, by the first {@link #close()}. */
    protected abstract void release();

    protected final void checkOpen() {
        if (closed) {
            throw new IllegalStateException(this + " used after close");
        }
    }

    public final boolean isClosed() {
        return closed;
    }

    @Override
    public final void close() {
        if (!closed) {
            closed = true;
            release();
        }
    }
}
