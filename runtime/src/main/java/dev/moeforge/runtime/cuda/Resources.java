package dev.moeforge.runtime.cuda;

/** Closing several resources at once. */
public final class Resources {
    private Resources() {}

    /**
     * Closes every resource in order (nulls skipped), also those after one that fails, so that nothing
     * is left allocated; then rethrows the first failure with the later ones suppressed (a checked one
     * wrapped in {@link IllegalStateException}).
     */
    public static void closeAll(Iterable<? extends AutoCloseable> resources) {
        RuntimeException first = null;
        for (AutoCloseable r : resources) {
            if (r == null) {
                continue;
            }
            try {
                r.close();
            } catch (Exception e) {
                RuntimeException failure = e instanceof RuntimeException unchecked ? unchecked : new IllegalStateException("closing " + r, e);
                if (first == null) {
                    first = failure;
                } else {
                    first.addSuppressed(failure);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }
}
