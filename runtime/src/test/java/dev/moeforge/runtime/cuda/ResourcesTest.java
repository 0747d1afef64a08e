package dev.moeforge.runtime.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Every resource is closed even after one fails; the first failure is thrown with the later ones suppressed. */
class ResourcesTest {
    @Test
    void closesEveryResourceAndThrowsTheFirstFailureWithTheRestSuppressed() {
        List<String> closed = new ArrayList<>();
        IllegalStateException first = new IllegalStateException("first");
        List<AutoCloseable> resources = Arrays.asList(() -> closed.add("a"), () -> {
            closed.add("b");
            throw first;
        }, null, () -> {
            closed.add("c");
            throw new IOException("second");
        }, () -> closed.add("d"));
        RuntimeException e = assertThrows(RuntimeException.class, () -> Resources.closeAll(resources));
        assertSame(first, e);
        assertEquals(List.of("a", "b", "c", "d"), closed);
        assertEquals(1, e.getSuppressed().length);
        assertInstanceOf(IOException.class, e.getSuppressed()[0].getCause(), "a checked failure, wrapped");
        Resources.closeAll(List.of(() -> closed.add("e")));
        assertEquals("e", closed.getLast());
    }
}
