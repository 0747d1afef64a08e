package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.examples.decoder.Generation;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.ModelWeights;
import dev.moeforge.examples.decoder.ReferenceDecoder;
import dev.moeforge.examples.decoder.Sampler;
import dev.moeforge.examples.decoder.TextTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge decode}: generates text from a Hugging Face MoE model directory, streaming it, and
 * ends with the timing line. This build decodes on the CPU reference path ({@link ReferenceDecoder}).
 */
@Command(name = "decode", mixinStandardHelpOptions = true,
        description = "Generates text from a Hugging Face MoE model directory (config.json, *.safetensors, tokenizer.json; "
                + "qwen3_moe, olmoe, mixtral, gpt_oss), streaming it as it is produced, then one timing line: load time, "
                + "prefill tokens/s, decode tokens/s. Greedy unless --temperature is above 0. This build runs the CPU "
                + "reference path (FP64, one token at a time): right for small models such as init-model's tiny presets.")
public final class DecodeCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Option(names = "--model", paramLabel = "DIR", description = "The model directory (see init-model for a random one).")
    Path model;

    @Option(names = "--prompt", required = true, paramLabel = "TEXT", description = "The prompt, as plain text (no chat template).")
    String prompt;

    @Option(names = "--max-tokens", defaultValue = "32", paramLabel = "N", description = "Tokens to generate at most (default ${DEFAULT-VALUE}); EOS stops earlier.")
    int maxTokens;

    @Option(names = "--temperature", defaultValue = "0", paramLabel = "T", description = "0 (the default) is greedy.")
    double temperature;

    @Option(names = "--top-k", defaultValue = "0", paramLabel = "K", description = "Sample among the K likeliest tokens; 0 (default) = all.")
    int topK;

    @Option(names = "--top-p", defaultValue = "1", paramLabel = "P", description = "Sample among the likeliest tokens reaching probability P (default 1).")
    double topP;

    @Option(names = "--seed", defaultValue = "0", paramLabel = "S", description = "Seed of the sampler; sequence b of a batch uses S + b.")
    long seed;

    @Option(names = "--batch", defaultValue = "1", paramLabel = "B", description = "Sequences generated from the prompt (default 1); only the first streams.")
    int batch;

    @Option(names = "--context", paramLabel = "C", description = "KV cache length in tokens (default: the prompt plus --max-tokens).")
    Integer context;

    @Option(names = "--json", paramLabel = "FILE", description = "Also write the ids, text and timings as JSON.")
    Path json;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        if (batch <= 0) {
            throw new IllegalArgumentException("--batch must be positive, got " + batch);
        }
        if (maxTokens <= 0) {
            throw new IllegalArgumentException("--max-tokens must be positive, got " + maxTokens);
        }
        Sampler.Options sampling = new Sampler.Options(temperature, topK, topP, seed);
        if (model == null) {
            throw new IllegalArgumentException("no --model: the built-in model (Qwen3-30B-A3B geometry, 48 layers) runs on the"
                    + " GPU decoder, which this build does not have yet; write a small model with `moeforge init-model --arch"
                    + " qwen3_moe --preset tiny --out DIR` and decode it with --model DIR");
        }
        long loadStart = System.nanoTime();
        ModelConfig config = ModelConfig.read(model);
        requireHeapFor(config);
        TextTokenizer tokenizer = TextTokenizer.open(model.resolve("tokenizer.json"));
        int[] promptIds = tokenizer.encode(prompt);
        int ctx = context != null ? context : promptIds.length + maxTokens;
        if (ctx < promptIds.length + 1) {
            throw new IllegalArgumentException("--context " + ctx + " cannot hold the prompt's " + promptIds.length
                    + " tokens and one more");
        }
        List<ReferenceDecoder> decoders = new ArrayList<>();
        try (Checkpoint ckpt = Checkpoint.open(model)) {
            ModelWeights weights = ModelWeights.load(config, ckpt, layer -> { });
            for (int b = 0; b < batch; b++) {
                decoders.add(new ReferenceDecoder(config, weights, ctx));
            }
        }
        double load = (System.nanoTime() - loadStart) / 1e9;
        err.printf(Locale.ROOT, "%s: %d layers, H=%d, %d experts top-%d; %s; prompt %d tokens%n", config.arch().modelType(),
                config.layers(), config.hidden(), config.experts(), config.topk(), decoders.getFirst().device()
                        + ", slow: one token at a time", promptIds.length);
        err.flush();
        List<Generation.Result> results = new ArrayList<>();
        for (int b = 0; b < batch; b++) {
            Sampler sampler = new Sampler(new Sampler.Options(sampling.temperature(), sampling.topK(), sampling.topP(), seed + b));
            boolean streams = b == 0;
            results.add(Generation.run(decoders.get(b), tokenizer, promptIds, maxTokens, sampler, config.eosIds(), text -> {
                if (streams) {
                    out.print(text);
                    out.flush();
                }
            }));
        }
        out.println();
        for (int b = 1; b < batch; b++) {
            out.println("[" + b + "] " + results.get(b).text());
        }
        int prefillTokens = results.stream().mapToInt(r -> r.timings().prefillTokens()).sum();
        double prefill = results.stream().mapToDouble(r -> r.timings().prefillSeconds()).sum();
        int decodeTokens = results.stream().mapToInt(r -> r.timings().decodeTokens()).sum();
        double decode = results.stream().mapToDouble(r -> r.timings().decodeSeconds()).sum();
        out.printf(Locale.ROOT, "load %.2f s · prefill %d tokens, %.1f tokens/s · decode %d tokens, %.1f tokens/s (%s)%n",
                load, prefillTokens, prefillTokens / prefill, decodeTokens, decodeTokens == 0 ? 0 : decodeTokens / decode,
                decoders.getFirst().device());
        tokenizer.close();
        if (json != null) {
            writeJson(config, decoders.getFirst().device(), promptIds, results, load, prefillTokens, prefill, decodeTokens, decode);
        }
        return 0;
    }

    /** The CPU path holds the dense weights as FP32 and the experts as stored (about 2 bytes each for BF16). */
    private static void requireHeapFor(ModelConfig c) {
        long q = (long) c.heads() * c.headDim();
        long kv = (long) c.kvHeads() * c.headDim();
        long dense = 2L * c.vocab() * c.hidden() + c.layers() * (2 * c.hidden() * (q + kv) + (long) c.experts() * c.hidden());
        long experts = (long) c.layers() * c.experts() * 3 * c.hidden() * c.expertIntermediate();
        long bytes = 4 * dense + 2 * experts;
        long heap = Runtime.getRuntime().maxMemory();
        if (bytes > 0.9 * heap) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "the CPU reference path needs about %.1f GB for this"
                    + " model's weights, more than this JVM's %.1f GB heap; decode a smaller model (init-model --preset tiny)"
                    + " or give the JVM more memory (MOEFORGE_JAVA_OPTS=-Xmx...)", bytes / 1e9, heap / 1e9));
        }
    }

    private void writeJson(ModelConfig config, String device, int[] promptIds, List<Generation.Result> results, double load,
                           int prefillTokens, double prefill, int decodeTokens, double decode) {
        ObjectMapper mapper = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        ObjectNode root = mapper.createObjectNode();
        root.put("model", model.toString()).put("arch", config.arch().modelType()).put("device", device)
                .put("prompt", prompt);
        ArrayNode ids = root.putArray("prompt_ids");
        for (int id : promptIds) {
            ids.add(id);
        }
        root.putObject("sampling").put("temperature", temperature).put("top_k", topK).put("top_p", topP).put("seed", seed);
        ArrayNode seqs = root.putArray("sequences");
        for (Generation.Result r : results) {
            ObjectNode s = seqs.addObject();
            ArrayNode g = s.putArray("ids");
            for (int id : r.ids()) {
                g.add(id);
            }
            s.put("text", r.text()).put("stop", r.stop());
        }
        root.putObject("timings").put("load_s", load).put("prefill_tokens", prefillTokens).put("prefill_s", prefill)
                .put("prefill_tokens_per_s", prefillTokens / prefill).put("decode_tokens", decodeTokens).put("decode_s", decode)
                .put("decode_tokens_per_s", decodeTokens == 0 ? 0 : decodeTokens / decode);
        try {
            mapper.writeValue(json.toFile(), root);
        } catch (IOException e) {
            throw new UncheckedIOException(json + ": " + e.getMessage(), e);
        }
    }
}
