package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.api.Test;

/** Plain progress lines (no terminal here): none for a short step, a line at the second and one at the end for a long one. */
class ProgressTest {

    @Test
    void onlyAStepLongerThanASecondIsReported() throws Exception {
        StringWriter log = new StringWriter();
        try (Progress p = Progress.start(new PrintWriter(log, true), "   short", 3)) {
            p.step();
        }
        assertEquals("", log.toString());

        try (Progress p = Progress.start(new PrintWriter(log, true), "   long", 2)) {
            p.step();
            Thread.sleep(Progress.QUIET.toMillis() + 400);
            p.step();
        }
        String[] lines = log.toString().split("\n");
        assertEquals(2, lines.length, log.toString());
        assertTrue(lines[0].matches("   long: 1 of 2 done, 1\\.\\d s so far"), lines[0]);
        assertTrue(lines[1].matches("   long: 2 of 2 done in 1\\.\\d s"), lines[1]);
    }
}
