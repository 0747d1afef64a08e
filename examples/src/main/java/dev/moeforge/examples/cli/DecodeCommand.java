package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.examples.decoder.Architecture;
import dev.moeforge.examples.decoder.Generation;
import dev.moeforge.examples.decoder.GpuDecoder;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.ModelPreset;
import dev.moeforge.examples.decoder.ModelWeights;
import dev.moeforge.examples.decoder.RandomModel;
import dev.moeforge.examples.decoder.ReferenceDecoder;
import dev.moeforge.examples.decoder.Sampler;
import dev.moeforge.examples.decoder.TextTokenizer;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge decode}: generates text from a Hugging Face MoE model directory (or the built-in
 * model), streaming it, and ends with the timing line: on the GPU through {@link GpuDecoder}, else on
 * the CPU reference path ({@link ReferenceDecoder}).
 */
@Command(name = "decode", mixinStandardHelpOptions = true,
        description = "Generates text from a Hugging Face MoE model directory (config.json, *.safetensors, tokenizer.json; "
                + "qwen3_moe, olmoe, mixtral, gpt_oss), or without --model from the built-in model (Qwen3-30B-A3B geometry, "
                + "random weights made on the GPU, the Qwen3 tokenizer), streaming the text as it is produced, then one timing "
                + "line: load time, prefill tokens/s, decode tokens/s. On a GPU each decode step is one CUDA graph and the next "
                + "token is picked there (greedy, or sampled at --temperature after the --top-k/--top-p cut); without one, "
                + "or with --cpu, it runs the CPU reference path (FP64, one token at a time: right for init-model's tiny models).")
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

    @Option(names = "--cpu", description = "Run the CPU reference path (FP64) even where there is a GPU.")
    boolean cpu;

    @Option(names = "--layers", paramLabel = "N", description = "The built-in model with N layers instead of 48.")
    Integer layers;

    @Option(names = "--experts-format", paramLabel = "FORMAT",
            description = "Re-encode the routed experts on load with the reference quantiser (e.g. nvfp4, mxfp4, fp8_e4m3_block128; "
                    + "the built-in model draws one layer's experts on the host, encodes them and copies them to every layer).")
    String expertsFormat;

    @Mixin
    TunedPoolOptions pools;

    /** The decoder's kernel choice with its experts' tuned pool, read and checked against the model before the GPU is touched. */
    private GpuDecoder.KernelChoice choice = GpuDecoder.KernelChoice.BY_BATCH;

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
        expertsFormat();  // a format that does not exist is refused before anything loads
        pools.check();
        boolean onGpu = !cpu && Gpu.available();
        if (pools.tuned != null && !onGpu) {
            throw new IllegalArgumentException("--tuned " + pools.tuned + " chooses the GPU's expert kernels, and this run is on the CPU ("
                    + (cpu ? "--cpu was given" : Gpu.unavailableReason()) + ")");
        }
        if (model == null && !onGpu) {
            throw new IllegalArgumentException("no --model: the built-in model (Qwen3-30B-A3B geometry, 48 layers, random weights)"
                    + " runs on a GPU, and " + (cpu ? "--cpu was given" : "there is none here (" + Gpu.unavailableReason() + ")")
                    + "; write a small model with `moeforge init-model --arch qwen3_moe --preset tiny --out DIR` and decode it"
                    + " with --model DIR");
        }
        if (model != null && layers != null) {
            throw new IllegalArgumentException("--layers shapes the built-in model; a --model directory has its own");
        }
        long loadStart = System.nanoTime();
        ModelPreset preset = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b");
        if (layers != null) {
            preset = preset.withLayers(layers);
        }
        ModelConfig config = model != null ? ModelConfig.read(model)
                : ModelConfig.parse(RandomModel.config(preset, SafetensorsDType.BF16, new ObjectMapper()));
        if (onGpu) {
            choice = pools.apply(choice, config);
        }
        try (TextTokenizer tokenizer = model != null ? TextTokenizer.open(model.resolve("tokenizer.json"))
                : TextTokenizer.builtInQwen3()) {
            int[] promptIds = tokenizer.encode(prompt);
            int ctx = context != null ? context : promptIds.length + maxTokens;
            if (ctx < promptIds.length + 1) {
                throw new IllegalArgumentException("--context " + ctx + " cannot hold the prompt's " + promptIds.length
                        + " tokens and one more");
            }
            if (model == null) {
                err.println("the built-in model: " + preset + ", random weights made on the GPU (seed 0) with the Qwen3"
                        + " tokenizer: its text is noise, its speed is real");
            }
            Run run = onGpu ? gpu(config, tokenizer, promptIds, ctx, sampling, loadStart, out, err)
                    : cpu(config, tokenizer, promptIds, ctx, sampling, loadStart, out, err);
            out.println();
            for (int b = 1; b < batch; b++) {
                out.println("[" + b + "] " + run.texts().get(b));
            }
            out.printf(Locale.ROOT, "load %.2f s · prefill %d tokens, %.1f tokens/s · decode %d tokens, %.1f tokens/s (%s)%n",
                    run.load(), run.prefillTokens(), run.prefillTokens() / run.prefill(), run.decodeTokens(),
                    run.decodeTokens() == 0 ? 0 : run.decodeTokens() / run.decode(), run.device());
            if (json != null) {
                writeJson(config, promptIds, run);
            }
        }
        return 0;
    }

    private java.util.Optional<dev.moeforge.dsl.ir.WeightFormat> expertsFormat() {
        return java.util.Optional.ofNullable(expertsFormat).map(f -> QuantizeCommand.parseFormat("--experts-format", f));
    }

    /** What a run produced and how long it took; texts and ids per sequence. */
    private record Run(String device, List<int[]> ids, List<String> texts, List<String> stops, double load, int prefillTokens,
                       double prefill, int decodeTokens, double decode) {}

    private Run cpu(ModelConfig config, TextTokenizer tokenizer, int[] promptIds, int ctx, Sampler.Options sampling,
                    long loadStart, PrintWriter out, PrintWriter err) {
        requireHeapFor(config);
        List<ReferenceDecoder> decoders = new ArrayList<>();
        try (Checkpoint ckpt = Checkpoint.open(model)) {
            ModelWeights weights = ModelWeights.load(config, ckpt, expertsFormat(), layer -> { });
            for (int b = 0; b < batch; b++) {
                decoders.add(new ReferenceDecoder(config, weights, ctx));
            }
        }
        double load = (System.nanoTime() - loadStart) / 1e9;
        String device = decoders.getFirst().device();
        err.printf(Locale.ROOT, "%s: %d layers, H=%d, %d experts top-%d; %s, slow: one token at a time; prompt %d tokens%n",
                config.arch().modelType(), config.layers(), config.hidden(), config.experts(), config.topk(), device,
                promptIds.length);
        err.flush();
        List<Generation.Result> results = new ArrayList<>();
        for (int b = 0; b < batch; b++) {
            results.add(generate(decoders.get(b), tokenizer, promptIds, config, sampling, b, out));
        }
        return summary(device, results, load);
    }

    private Run gpu(ModelConfig config, TextTokenizer tokenizer, int[] promptIds, int ctx, Sampler.Options sampling,
                    long loadStart, PrintWriter out, PrintWriter err) {
        try (CudaContext context = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(context, KernelCache.defaultCache());
             Checkpoint ckpt = model != null ? Checkpoint.open(model) : null) {
            GpuDecoder.Weights weights = ckpt != null ? new GpuDecoder.Weights.FromCheckpoint(ckpt, expertsFormat())
                    : new GpuDecoder.Weights.Random(0, expertsFormat());
            err.printf(Locale.ROOT, "%s: %d layers, H=%d, %d experts top-%d; loading onto %s ...%n", config.arch().modelType(),
                    config.layers(), config.hidden(), config.experts(), config.topk(), context.deviceName());
            err.flush();
            try (GpuDecoder decoder = new GpuDecoder(config, weights, runtime, stream, batch, ctx, maxTokens, layer -> { }, choice)) {
                stream.synchronize();
                double load = (System.nanoTime() - loadStart) / 1e9;
                err.printf(Locale.ROOT, "%s, batch %d; prompt %d tokens%n", decoder.device(), batch, promptIds.length);
                decoder.tunedPoolNote().ifPresent(note -> err.println(note + ": " + decoder.stepExpertKernels().stream()
                        .map(KernelSpec::name).collect(Collectors.joining(" + "))));
                err.flush();
                decoder.sampling(sampling);
                TextTokenizer.Stream text = new TextTokenizer.Stream(tokenizer);
                boolean[] ended = new boolean[batch];
                GpuDecoder.Generated g = decoder.generate(promptIds, maxTokens, picks -> {
                    boolean any = false;
                    for (int b = 0; b < batch; b++) {
                        if (!ended[b] && config.eosIds().contains(picks[b])) {
                            ended[b] = true;
                        } else if (b == 0 && !ended[0]) {
                            out.print(text.add(picks[0]));
                            out.flush();
                        }
                        any |= !ended[b];
                    }
                    return any;
                });
                List<int[]> ids = new ArrayList<>();
                List<String> texts = new ArrayList<>();
                List<String> stops = new ArrayList<>();
                for (int[] seq : g.ids()) {
                    int end = seq.length;
                    for (int i = 0; i < seq.length; i++) {
                        if (config.eosIds().contains(seq[i])) {
                            end = i + 1;
                            break;
                        }
                    }
                    int[] kept = Arrays.copyOf(seq, end);
                    ids.add(kept);
                    texts.add(tokenizer.decode(kept));
                    stops.add(end < seq.length || (end > 0 && config.eosIds().contains(kept[end - 1])) ? "eos"
                            : seq.length == maxTokens ? "max-tokens" : "context");
                }
                return new Run(decoder.device(), ids, texts, stops, load, batch * promptIds.length, g.prefillNanos() / 1e9,
                        batch * (g.steps() - 1), g.decodeNanos() / 1e9);
            }
        }
    }

    private Generation.Result generate(dev.moeforge.examples.decoder.TokenModel decoder, TextTokenizer tokenizer, int[] promptIds,
                                       ModelConfig config, Sampler.Options sampling, int b, PrintWriter out) {
        Sampler sampler = new Sampler(new Sampler.Options(sampling.temperature(), sampling.topK(), sampling.topP(), seed + b));
        return Generation.run(decoder, tokenizer, promptIds, maxTokens, sampler, config.eosIds(), text -> {
            if (b == 0) {
                out.print(text);
                out.flush();
            }
        });
    }

    private static Run summary(String device, List<Generation.Result> results, double load) {
        return new Run(device, results.stream().map(Generation.Result::ids).toList(),
                results.stream().map(Generation.Result::text).toList(), results.stream().map(Generation.Result::stop).toList(), load,
                results.stream().mapToInt(r -> r.timings().prefillTokens()).sum(),
                results.stream().mapToDouble(r -> r.timings().prefillSeconds()).sum(),
                results.stream().mapToInt(r -> r.timings().decodeTokens()).sum(),
                results.stream().mapToDouble(r -> r.timings().decodeSeconds()).sum());
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

    private void writeJson(ModelConfig config, int[] promptIds, Run run) {
        ObjectMapper mapper = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        ObjectNode root = mapper.createObjectNode();
        root.put("model", model != null ? model.toString() : "built-in").put("arch", config.arch().modelType())
                .put("layers", config.layers()).put("device", run.device()).put("batch", batch).put("prompt", prompt);
        ArrayNode ids = root.putArray("prompt_ids");
        for (int id : promptIds) {
            ids.add(id);
        }
        root.putObject("sampling").put("temperature", temperature).put("top_k", topK).put("top_p", topP).put("seed", seed);
        ArrayNode seqs = root.putArray("sequences");
        for (int b = 0; b < run.ids().size(); b++) {
            ObjectNode s = seqs.addObject();
            ArrayNode g = s.putArray("ids");
            for (int id : run.ids().get(b)) {
                g.add(id);
            }
            s.put("text", run.texts().get(b)).put("stop", run.stops().get(b));
        }
        root.putObject("timings").put("load_s", run.load()).put("prefill_tokens", run.prefillTokens())
                .put("prefill_s", run.prefill()).put("prefill_tokens_per_s", run.prefillTokens() / run.prefill())
                .put("decode_tokens", run.decodeTokens()).put("decode_s", run.decode())
                .put("decode_tokens_per_s", run.decodeTokens() == 0 ? 0 : run.decodeTokens() / run.decode());
        try {
            mapper.writeValue(json.toFile(), root);
        } catch (IOException e) {
            throw new UncheckedIOException(json + ": " + e.getMessage(), e);
        }
    }
}
