package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/** Runs a PyTorch baseline script of a benchmark: JSON in on stdin, JSON out on stdout, its stderr passed through. */
final class TorchBaseline {
    private TorchBaseline() {}

    /** The script's result, or null (with a line saying why) where it or python3 with torch cannot run. */
    static JsonNode run(Path script, Object input) throws Exception {
        if (!Files.isRegularFile(script)) {
            System.out.println("PyTorch baseline skipped: no script at " + script);
            return null;
        }
        ObjectMapper json = new ObjectMapper();
        Process p = new ProcessBuilder("python3", script.toString()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        p.getOutputStream().write(json.writeValueAsString(input).getBytes(StandardCharsets.UTF_8));
        p.getOutputStream().close();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(10, TimeUnit.MINUTES) || p.exitValue() != 0) {
            System.out.println("PyTorch baseline failed (exit " + (p.isAlive() ? "timeout" : p.exitValue()) + "); see stderr above");
            p.destroyForcibly();
            return null;
        }
        return json.readTree(output);
    }
}
