package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The {@code moeforge} launcher's automatic build, with a stand-in for mvn that prints colour codes:
 * where stderr is not a terminal (here, a pipe) none reaches it.
 */
class LauncherTest {

    @Test
    void theBuildPrintsNoColourCodesIntoAPipe(@TempDir Path tmp) throws Exception {
        Path project = Files.createDirectories(tmp.resolve("project"));
        Files.copy(Path.of("..", "moeforge"), project.resolve("moeforge"));
        Files.writeString(project.resolve("pom.xml"), "<project/>");  // a source and no CLI jar: the launcher builds
        Path bin = Files.createDirectories(tmp.resolve("bin"));
        Path mvn = Files.writeString(bin.resolve("mvn"), "#!/usr/bin/env bash\n"
                + "printf '\\033[0m\\033[0mMoeForge: generated\\n\\033[1mBUILD\\033[m\\n'\n"
                + "printf '\\033[0;31merror colour\\033[0m\\n' >&2\n");
        Files.setPosixFilePermissions(mvn, PosixFilePermissions.fromString("rwxr-xr-x"));
        ProcessBuilder pb = new ProcessBuilder("bash", project.resolve("moeforge").toString(), "-V");
        pb.environment().put("PATH", bin + ":" + System.getenv("PATH"));
        pb.environment().put("MOEFORGE_JAVA", Path.of(System.getProperty("java.home"), "bin", "java").toString());
        pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);  // java then finds no jar: only the build's output matters
        Process p = pb.start();
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        p.waitFor();
        assertTrue(err.contains("MoeForge: generated") && err.contains("BUILD") && err.contains("error colour"), err);
        assertFalse(err.contains("\u001b"), "colour codes in: " + err.replace("\u001b", "ESC"));
    }
}
