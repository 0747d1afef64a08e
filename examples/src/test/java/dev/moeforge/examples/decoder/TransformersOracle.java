package dev.moeforge.examples.decoder;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * transformers' greedy decoding of a model directory on the GPU host ({@code transformers_oracle.py}, python3 with
 * torch and transformers, or {@code MOEFORGE_PYTHON}): its version and device, the prompt's ids, the greedy ids, and
 * every step's logits ([steps][vocab], FP32).
 */
record TransformersOracle(JsonNode report, int[] promptIds, int[] ids, FloatBuffer logits) {
    /** The prompt the oracle tests decode from. */
    static final String PROMPT = "The capital of France is Paris, and the capital of Germany is";

    /** Runs the oracle for {@code steps} steps in {@code work}; with {@code resaveDir}, transformers also saves the model there. */
    static TransformersOracle run(Path model, String prompt, int steps, Path work, Path resaveDir) throws IOException, InterruptedException {
        Path script = work.resolve("transformers_oracle.py");
        try (InputStream in = TransformersOracle.class.getResourceAsStream("transformers_oracle.py")) {
            Files.copy(in, script);
        }
        Path logitsFile = work.resolve("logits.f32");
        List<String> command = new ArrayList<>(List.of(System.getenv().getOrDefault("MOEFORGE_PYTHON", "python3"), script.toString(),
                model.toString(), prompt, Integer.toString(steps), logitsFile.toString()));
        if (resaveDir != null) {
            command.add(resaveDir.toString());
        }
        Process p = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String stdout = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), "the oracle failed: " + stdout);
        JsonNode report = new ObjectMapper().readTree(stdout.lines().toList().getLast());
        FloatBuffer logits = ByteBuffer.wrap(Files.readAllBytes(logitsFile)).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        return new TransformersOracle(report, ints(report.get("prompt_ids")), ints(report.get("ids")), logits);
    }

    /** "transformers VERSION on DEVICE", for a test's report. */
    String where() {
        return "transformers " + report.get("transformers").asText() + " on " + report.get("device").asText();
    }

    private static int[] ints(JsonNode array) {
        int[] out = new int[array.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = array.get(i).asInt();
        }
        return out;
    }
}
