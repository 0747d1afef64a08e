package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.examples.decoder.Architecture;
import dev.moeforge.examples.decoder.Generation;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.ModelWeights;
import dev.moeforge.examples.decoder.RandomModelTest;
import dev.moeforge.examples.decoder.ReferenceDecoder;
import dev.moeforge.examples.decoder.Sampler;
import dev.moeforge.examples.decoder.TextTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.StreamSupport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code moeforge decode} through the command line, on Qwen3-MoE's tiny random model. */
class DecodeCommandTest {
    private static final String PROMPT = "The capital of France is";
    private static final int EOS = 151645;

    @TempDir
    Path tmp;

    static void assertMentions(String text, String... parts) {
        for (String p : parts) {
            assertTrue(text.contains(p), () -> "expected '" + p + "' in: " + text);
        }
    }

    private static Path model() {
        return RandomModelTest.tiny(Architecture.QWEN3_MOE);
    }

    private static int[] ints(JsonNode array) {
        return StreamSupport.stream(array.spliterator(), false).mapToInt(JsonNode::asInt).toArray();
    }

    /** decode with --json; the run must succeed. */
    private JsonNode decode(String name, String... options) throws IOException {
        Path json = tmp.resolve(name + ".json");
        List<String> args = new ArrayList<>(List.of("decode", "--model", model().toString(), "--prompt", PROMPT,
                "--json", json.toString()));
        args.addAll(List.of(options));
        CliRun run = CliRun.of(args.toArray(String[]::new));
        assertEquals(0, run.exitCode(), run::err);
        return new ObjectMapper().readTree(json.toFile());
    }

    @Test
    void greedyDecodePrintsTheTextAndTimingsAndWritesJson() throws IOException {
        Path json = tmp.resolve("out.json");
        CliRun run = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--max-tokens", "5",
                "--json", json.toString());
        assertEquals(0, run.exitCode(), run::err);
        assertMentions(run.err(), "qwen3_moe: 3 layers, H=64, 8 experts top-2; CPU reference (FP64)", "prompt 5 tokens");
        List<String> lines = run.out().lines().toList();
        String timing = lines.getLast();
        assertTrue(timing.startsWith("load "), timing);
        assertMentions(timing, "tokens/s", "prefill 5 tokens", "(CPU reference (FP64))");

        JsonNode doc = new ObjectMapper().readTree(json.toFile());
        assertArrayEquals(new int[] {785, 6722, 315, 9625, 374}, ints(doc.get("prompt_ids")));
        assertEquals(PROMPT, doc.get("prompt").asText());
        assertEquals("qwen3_moe", doc.get("arch").asText());
        assertEquals(0, doc.get("sampling").get("temperature").asDouble());
        assertEquals(1, doc.get("sequences").size());
        JsonNode seq = doc.get("sequences").get(0);
        int[] ids = ints(seq.get("ids"));
        assertTrue(ids.length == 5 || ids[ids.length - 1] == EOS, () -> java.util.Arrays.toString(ids));
        assertEquals(ids.length == 5 && ids[4] != EOS ? "max-tokens" : "eos", seq.get("stop").asText());
        JsonNode timings = doc.get("timings");
        assertEquals(5, timings.get("prefill_tokens").asInt());
        assertEquals(ids.length - 1, timings.get("decode_tokens").asInt());
        assertMentions(timing, "decode " + (ids.length - 1) + " tokens");
        assertTrue(timings.get("decode_tokens_per_s").asDouble() > 0, timings::toString);
        assertTrue(timings.get("prefill_tokens_per_s").asDouble() > 0, timings::toString);
        assertTrue(timings.get("load_s").asDouble() > 0, timings::toString);

        String text = seq.get("text").asText();
        try (TextTokenizer tokenizer = TextTokenizer.open(model().resolve("tokenizer.json"))) {
            assertEquals(tokenizer.decode(ids), text);
        }
        // the streamed text is the first thing printed (what it holds back of an unfinished character aside)
        String streamed = run.out().substring(0, run.out().lastIndexOf(timing) - System.lineSeparator().length());
        assertTrue(text.startsWith(streamed), () -> "streamed '" + streamed + "', text '" + text + "'");

        // the ids are greedy decoding's on the reference decoder
        ModelConfig c = ModelConfig.read(model());
        try (Checkpoint ckpt = Checkpoint.open(model()); TextTokenizer tokenizer = TextTokenizer.open(model().resolve("tokenizer.json"))) {
            ReferenceDecoder d = new ReferenceDecoder(c, ModelWeights.load(c, ckpt, l -> { }), 10);
            Generation.Result r = Generation.run(d, tokenizer, tokenizer.encode(PROMPT), 5, new Sampler(Sampler.Options.greedy()),
                    c.eosIds(), s -> { });
            assertArrayEquals(r.ids(), ids);
        }
    }

    /**
     * The seed decides the sampled tokens: the same seed the same ids, another seed others; sequence b of
     * a batch uses seed S + b and is printed as "[b] text".
     */
    @Test
    void samplingFollowsTheSeedAndBatchesUseConsecutiveSeeds() throws IOException {
        int[] seed1 = ints(decode("seed1", "--temperature", "0.8", "--seed", "1", "--max-tokens", "8")
                .get("sequences").get(0).get("ids"));
        int[] seed2 = ints(decode("seed2", "--temperature", "0.8", "--seed", "2", "--max-tokens", "8")
                .get("sequences").get(0).get("ids"));
        assertFalse(java.util.Arrays.equals(seed1, seed2), java.util.Arrays.toString(seed1));

        Path json = tmp.resolve("batch.json");
        CliRun run = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--temperature", "0.8",
                "--seed", "1", "--max-tokens", "8", "--batch", "2", "--json", json.toString());
        assertEquals(0, run.exitCode(), run::err);
        JsonNode doc = new ObjectMapper().readTree(json.toFile());
        assertEquals(2, doc.get("sequences").size());
        assertArrayEquals(seed1, ints(doc.get("sequences").get(0).get("ids")), "seed 1 again");
        assertArrayEquals(seed2, ints(doc.get("sequences").get(1).get("ids")), "sequence 1 of seed 1 is seed 2's");
        String second = doc.get("sequences").get(1).get("text").asText();
        assertTrue(run.out().lines().anyMatch(l -> l.startsWith("[1] ")), run::out);
        assertTrue(run.out().contains("[1] " + second), run::out);
        assertFalse(run.out().contains("[2] "), run::out);
        assertEquals(10, doc.get("timings").get("prefill_tokens").asInt(), "both sequences' prompts");
    }

    @Test
    void withoutAModelItPointsToInitModel() {
        CliRun run = CliRun.of("decode", "--prompt", PROMPT);
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), "decode: no --model", "init-model");
    }

    @Test
    void aContextTooSmallForThePromptIsRefused() {
        CliRun run = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--context", "5");
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), "--context 5", "prompt's 5 tokens");
        assertEquals("", run.out());
    }

    @Test
    void invalidSamplingAndBatchAreRefused() {
        CliRun topP = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--top-p", "0");
        assertEquals(1, topP.exitCode());
        assertMentions(topP.err(), "--top-p must be in (0, 1], got 0.0");
        CliRun temperature = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--temperature", "-1");
        assertEquals(1, temperature.exitCode());
        assertMentions(temperature.err(), "--temperature");
        CliRun batch = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--batch", "0");
        assertEquals(1, batch.exitCode());
        assertMentions(batch.err(), "--batch must be positive");
        // with --context given: without it, the default context (prompt + max-tokens) is refused first, as --context's
        CliRun maxTokens = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--max-tokens", "0",
                "--context", "10");
        assertEquals(1, maxTokens.exitCode());
        assertMentions(maxTokens.err(), "--max-tokens");
    }

    @Test
    void aTunedPoolOnTheCpuPathIsRefused() {
        CliRun run = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--cpu", "--tuned", tmp.toString());
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), "--tuned " + tmp, "chooses the GPU's expert kernels", "--cpu was given");
        assertEquals("", run.out());
    }

    @Test
    void aTunedPoolAndNoTunedPoolAreRefusedTogether() {
        CliRun run = CliRun.of("decode", "--model", model().toString(), "--prompt", PROMPT, "--tuned", tmp.toString(), "--no-tuned");
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), "--tuned " + tmp + " and --no-tuned: give one");
        assertEquals("", run.out());
    }

    @Test
    void aDirectoryWithoutAModelIsRefused() throws IOException {
        Path empty = Files.createDirectories(tmp.resolve("empty"));
        CliRun run = CliRun.of("decode", "--model", empty.toString(), "--prompt", PROMPT);
        assertEquals(1, run.exitCode());
        assertMentions(run.err(), empty + " has no config.json");
    }
}
