package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.ExpertShape;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What `moeforge profile` refuses before it touches a GPU, and the points it plans. */
class ProfileCommandTest {
    @TempDir
    Path dir;

    @Test
    void refusesAMissingPoolAndBadOptionsByName() throws Exception {
        CliRun missing = CliRun.of("profile", dir.toString());
        assertEquals(1, missing.exitCode());
        assertTrue(missing.err().contains(dir.resolve("pool.json") + " does not exist: write it with `moeforge pool"), missing.err());
        CliRun reps = CliRun.of("profile", dir.toString(), "--reps", "10");
        assertTrue(reps.err().contains("--reps 10: at least 50 timed repetitions"), reps.err());
        CliRun level = CliRun.of("profile", dir.toString(), "--balancedness", "0.5,1.5");
        assertTrue(level.err().contains("balancedness 1.5: in (0, 1]"), level.err());
        Files.writeString(dir.resolve("pool.json"), "{\"model\": \"x\"}");
        CliRun old = CliRun.of("profile", dir.toString());
        assertTrue(old.err().contains("has no 'shape': not a pool.json of this version"), old.err());
    }

    @Test
    void optionsReadBackFromAProfileEqualTheSameOptionsAgain() throws Exception {
        var json = new com.fasterxml.jackson.databind.ObjectMapper();
        java.util.Map<String, Object> method = new java.util.LinkedHashMap<>();
        method.put("batches", List.of(8, 32));
        method.put("balancedness", List.of(1.0, 0.7));
        method.put("prune", 1.5);
        method.put("seed", 20261127L);  // a long that fits an int: read back as an int
        Object readBack = json.readValue(json.writeValueAsString(java.util.Map.of("method", method)), java.util.Map.class).get("method");
        assertEquals(ProfileCommand.asJson(json, method), ProfileCommand.asJson(json, readBack));
        method.put("seed", 7L);
        assertTrue(!ProfileCommand.asJson(json, method).equals(ProfileCommand.asJson(json, readBack)));
    }

    @Test
    void levelsABatchCannotReachMoveIntoItsRangeWithoutRepeats() {
        ProfileCommand p = new ProfileCommand();
        p.batches = List.of(1, 512);
        p.levels = List.of(1.0, 0.9, 0.5);
        p.heldOutBatches = List.of(64);
        p.heldOutLevels = List.of(0.75);
        p.seed = 3;
        List<ProfileCommand.Point> points = p.points(new ExpertShape(2048, 768, 128, 8));
        // one token: 8 experts of 128 whatever the level, so its three levels are one point
        assertEquals(1, points.stream().filter(q -> q.batch() == 1).count(), points.toString());
        assertEquals(Math.round(Math.log(8) / Math.log(128) * 1000) / 1000.0, points.getFirst().target(), 1e-3);
        assertEquals(3, points.stream().filter(q -> q.batch() == 512).count(), points.toString());
        assertTrue(points.stream().filter(ProfileCommand.Point::heldOut).allMatch(q -> q.batch() == 64 && q.target() == 0.75), points.toString());
    }
}
