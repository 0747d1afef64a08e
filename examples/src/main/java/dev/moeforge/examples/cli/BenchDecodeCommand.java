package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.examples.decoder.Architecture;
import dev.moeforge.examples.decoder.GpuDecoder;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.ModelPreset;
import dev.moeforge.examples.decoder.RandomModel;
import dev.moeforge.examples.decoder.Sampler;
import dev.moeforge.examples.decoder.TextTokenizer;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.stream.IntStream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code moeforge bench decode}: the built-in model's decode steps on the GPU at several batch
 * sizes, against the bytes a step must read at the device's measured read bandwidth, and
 * transformers' own generate on the same geometry in the same run.
 */
@Command(name = "decode", mixinStandardHelpOptions = true,
        description = "On a GPU: the built-in model (Qwen3-30B-A3B geometry, random bf16 weights) decoding --tokens tokens "
                + "at each batch size (sampled at --temperature, so a batch's sequences, and their routing, differ), each step "
                + "one graph replay with its picks back on the host; per batch the "
                + "step time, tokens/s, the bytes a step reads (every dense weight, the LM head, the KV cache, the distinct "
                + "experts the batch's routing touches, counted on one more pass of the layers; in brackets the count a "
                + "uniform routing would touch) and that as a fraction of the measured read bandwidth (the floor), "
                + "and each part of the step (the q/k/v and o projections, attention with its q/k norm, router, experts, the rest) timed alone as a graph of its kernels; "
                + "in the same run bench/torch_decode.py times transformers' generate on the same geometry with "
                + "--peer-layers layers. Writes <out>/<date>-<device>-decode.json (-decode-FORMAT.json for other expert formats).")
final class BenchDecodeCommand implements Callable<Integer> {

    @Option(names = "--batches", split = ",", defaultValue = "1,8,32", paramLabel = "B,...", description = "Batch sizes (default ${DEFAULT-VALUE}).")
    List<Integer> batches;

    @Option(names = "--tokens", defaultValue = "128", paramLabel = "N", description = "Tokens generated per sequence (default ${DEFAULT-VALUE}).")
    int tokens;

    @Option(names = "--layers", defaultValue = "48", paramLabel = "L", description = "Layers of the built-in model (default ${DEFAULT-VALUE}).")
    int layers;

    @Option(names = "--peer-layers", defaultValue = "8", paramLabel = "L",
            description = "Layers of transformers' model (default ${DEFAULT-VALUE}; its initialisation is slow); 0 skips it.")
    int peerLayers;

    @Option(names = "--torch-script", defaultValue = "bench/torch_decode.py", paramLabel = "FILE",
            description = "The transformers baseline script (default: ${DEFAULT-VALUE}); skipped when it or python3 with torch is missing.")
    Path torchScript;

    @Option(names = "--experts-format", defaultValue = "bf16", paramLabel = "FORMAT",
            description = "The routed experts' format (default bf16; others drawn for one layer on the host, encoded by the reference "
                    + "quantiser and copied to every layer).")
    String expertsFormat;

    @Option(names = "--context", defaultValue = "0", paramLabel = "C",
            description = "Positions in the cache when the timed steps end: the prompt is repeated to C - --tokens tokens "
                    + "(run in chunks, as any prompt), so the steps attend over C - --tokens to C positions (default: the prompt alone).")
    int context;

    @Option(names = "--prefill", defaultValue = "2048", paramLabel = "N",
            description = "Tokens of the prompt whose prefill is timed on its own (batch 1, random token ids; default "
                    + "${DEFAULT-VALUE}; 0 skips it).")
    int prefill;

    @Option(names = "--temperature", defaultValue = "1", paramLabel = "T",
            description = "Sampling temperature on the device (default ${DEFAULT-VALUE}; each sequence draws its own tokens, as a "
                    + "served batch's would; 0 is greedy, and every sequence of the batch then repeats the first one, so a step "
                    + "touches the experts of one token).")
    double temperature;

    @Option(names = "--top-k", defaultValue = "0", paramLabel = "K",
            description = "Sample among each sequence's K likeliest tokens (the cut made on the device; default 0 = all).")
    int topK;

    @Option(names = "--top-p", defaultValue = "1", paramLabel = "P",
            description = "Sample among the likeliest tokens reaching probability P (the cut made on the device; default 1).")
    double topP;

    @Option(names = "--projections", defaultValue = "by-batch", paramLabel = "KIND",
            description = "The decode step's q/k/v, o and LM head kernels: by-batch (the decoder's choice: one warp per row for one "
                    + "sequence, the tensor cores' linear_mma from two, expert tiles from 65), or one kind at every batch to compare "
                    + "them: gemv, mma or tiles (the LM head has no tiles and keeps the batch's choice). Any but by-batch adds "
                    + "-projections-KIND to the file's name.")
    String projections;

    @Option(names = "--attention", defaultValue = "by-batch", paramLabel = "KIND",
            description = "The decode step's attention kernel: by-batch (the decoder's choice), or by-head or by-group (by kv "
                    + "group on the tensor cores where the model's groups fit its tiles) at every batch to compare them. Any but "
                    + "by-batch adds -attention-KIND to the file's name.")
    String attention;

    @Option(names = "--experts", defaultValue = "by-batch", paramLabel = "KIND",
            description = "The decode step's expert halves: by-batch (the decoder's choice: the catalogue's output-centric token "
                    + "tiles below 3 sequences, below 5 for 4-bit and FP8 experts, its 16-pair expert-centric tiles from there), or "
                    + "output-centric or expert-centric at every batch to compare them. Any but by-batch adds -experts-KIND to the file's name.")
    String experts;

    @Mixin
    TunedPoolOptions pools;

    @Option(names = "--out", defaultValue = "bench/results", paramLabel = "DIR", description = "Where the JSON goes (default ${DEFAULT-VALUE}).")
    Path out;

    private static final String PROMPT = "The capital of France is";
    private static final long SAMPLING_SEED = 1;
    /** Replays per part of the step timed alone. */
    private static final int PART_REPS = 20;
    /** Timed prefills of the --prefill prompt (after one untimed); the median is reported. */
    private static final int PREFILL_REPS = 5;

    @Override
    public Integer call() throws Exception {
        Sampler.Options sampling = new Sampler.Options(temperature, topK, topP, SAMPLING_SEED);  // refuses bad values by name
        if (tokens < 2) {
            throw new IllegalArgumentException("--tokens must be at least 2 (one prefill pick, then decode steps), got " + tokens);
        }
        GpuDecoder.KernelChoice choice = new GpuDecoder.KernelChoice(
                kebab(GpuDecoder.ProjectionKernels.class, "--projections", projections),
                kebab(GpuDecoder.AttentionKernels.class, "--attention", attention),
                kebab(GpuDecoder.ExpertKernels.class, "--experts", experts), new GpuDecoder.TunedPools.None());
        ModelPreset preset = ModelPreset.of(Architecture.QWEN3_MOE, "qwen3-30b-a3b").withLayers(layers);
        dev.moeforge.dsl.ir.WeightFormat format = QuantizeCommand.parseFormat("--experts-format", expertsFormat);
        ModelConfig c = ModelConfig.parse(RandomModel.config(preset, SafetensorsDType.BF16, new ObjectMapper()));
        choice = pools.apply(choice, c);  // a --tuned pool read and checked once, before the GPU is touched
        int[] text;
        try (TextTokenizer tokenizer = TextTokenizer.builtInQwen3()) {
            text = tokenizer.encode(PROMPT);
        }
        int[] prompt = text;
        if (context > 0) {
            if (context < tokens + prompt.length) {
                throw new IllegalArgumentException("--context " + context + " leaves no room for the prompt (" + prompt.length
                        + " tokens) and --tokens " + tokens + "; give at least " + (tokens + prompt.length));
            }
            prompt = IntStream.range(0, context - tokens).map(i -> text[i % text.length]).toArray();
        }
        List<Map<String, Object>> rows = new ArrayList<>();
        boolean servedByPool = false;  // whether an installed pool served some batch (the file says so)
        Map<String, Object> doc;
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, KernelCache.defaultCache());
             BenchKernels kernels = new BenchKernels(runtime)) {
            System.out.println("device: " + ctx.deviceName() + ", " + ctx.smCount() + " SMs");
            long readBytes = 4L << 30;
            GpuTimer.Timing read = kernels.timeRead(stream, readBytes, 5, 50);
            double readBw = readBytes / (read.medianMicros() * 1e-6);
            System.out.printf(Locale.ROOT, "read bandwidth: %.0f GB/s; model: %s%n", readBw / 1e9, preset);
            Map<String, Object> prefillRow = prefill > 0 ? timePrefill(c, format, runtime, stream) : null;
            System.out.printf(Locale.ROOT, "%6s %12s %14s %14s %10s %10s %16s%n", "batch", "step us", "tokens/s", "GB per step", "of floor",
                    "sequences", "experts/layer");
            for (int batch : batches) {
                try (GpuDecoder d = new GpuDecoder(c, new GpuDecoder.Weights.Random(0, Optional.of(format)), runtime, stream, batch,
                        prompt.length + tokens, tokens, l -> { }, choice)) {
                    d.sampling(sampling);
                    d.generate(prompt, Math.min(tokens, 8), p -> true);  // warm-up: graphs captured, caches warm
                    d.reset();
                    GpuDecoder.Generated g = d.generate(prompt, tokens, p -> true);
                    int steps = g.steps() - 1;
                    double stepUs = g.decodeNanos() / 1e3 / steps;
                    // The floor counts the experts this batch's routing touches (measured on one more
                    // pass of the layers), not the uniform expectation: a random model's router is skewed.
                    int[] routed = d.distinctExpertsPerLayer();
                    double routedPerLayer = Arrays.stream(routed).average().orElse(0);
                    double uniform = uniformExperts(c, batch);
                    double positions = prompt.length + tokens / 2.0;  // the timed steps' mean context
                    double bytes = stepBytes(c, batch, bytesPerWeight(format, c), Arrays.stream(routed).sum(), positions);
                    double uniformBytes = stepBytes(c, batch, bytesPerWeight(format, c), uniform, positions);
                    double floorUs = bytes / readBw * 1e6;
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("batch", batch);
                    row.put("decode_steps", steps);
                    long distinct = Arrays.stream(g.ids()).map(Arrays::toString).distinct().count();
                    row.put("distinct_sequences", distinct);
                    row.put("step_us", stepUs);
                    row.put("decode_tokens_per_s", batch * 1e6 / stepUs);
                    row.put("prefill_tokens", prompt.length);
                    row.put("prefill_ms", g.prefillNanos() / 1e6);
                    row.put("distinct_experts_per_layer", routedPerLayer);
                    row.put("uniform_distinct_experts_per_layer", uniform / c.layers());
                    row.put("bytes_per_step", bytes);
                    row.put("bytes_per_step_uniform_routing", uniformBytes);
                    row.put("floor_us", floorUs);
                    row.put("fraction_of_uniform_floor", uniformBytes / readBw * 1e6 / stepUs);
                    row.put("fraction_of_floor", floorUs / stepUs);
                    List<String> expertKernels = d.stepExpertKernels().stream().map(KernelSpec::name).toList();
                    row.put("expert_kernels", expertKernels);
                    d.tunedPoolNote().ifPresent(note -> row.put("tuned_pool_note", note));
                    servedByPool |= d.expertsFromTunedPool();
                    Map<GpuDecoder.StepPart, Double> parts = d.timeParts(3, PART_REPS);
                    Map<String, Object> split = new LinkedHashMap<>();
                    parts.forEach((part, us) -> split.put(part.name().toLowerCase(Locale.ROOT) + "_us", us));
                    row.put("parts_alone", split);
                    rows.add(row);
                    System.out.printf(Locale.ROOT, "%6d %12.1f %14.1f %14.3f %9.0f%% %10d %7.1f (%5.1f)%n", batch, stepUs,
                            batch * 1e6 / stepUs, bytes / 1e9, 100 * floorUs / stepUs, distinct,
                            routedPerLayer, uniform / c.layers());
                    System.out.printf(Locale.ROOT, "       each part alone (us): projections %.1f, attention %.1f, router %.1f, experts %.1f, "
                            + "rest %.1f%n", parts.get(GpuDecoder.StepPart.PROJECTIONS), parts.get(GpuDecoder.StepPart.ATTENTION),
                            parts.get(GpuDecoder.StepPart.ROUTER),
                            parts.get(GpuDecoder.StepPart.EXPERTS), parts.get(GpuDecoder.StepPart.REST));
                    System.out.println("       experts: " + String.join(" + ", expertKernels)
                            + d.tunedPoolNote().map(note -> " (" + note + ")").orElse(""));
                }
            }
            doc = BenchReports.header("decode", ctx);
            doc.put("read_bandwidth_bytes_per_second", readBw);
            doc.put("model", Map.of("preset", preset.name(), "layers", c.layers(), "hidden", c.hidden(), "experts", c.experts(),
                    "topk", c.topk(), "expert_intermediate", c.expertIntermediate(), "vocab", c.vocab(), "weights", "bf16, random",
                    "experts_format", format.text()));
            doc.put("projections", projections);
            doc.put("attention", attention);
            doc.put("experts", experts);
            doc.put("tuned_pools", switch (choice.tunedPools()) {
                case GpuDecoder.TunedPools.None _ -> "none (the catalogue's pairs)";
                case GpuDecoder.TunedPools.Given(var pool) -> "given: " + pool.dir();
                case GpuDecoder.TunedPools.Installed(var store) -> "installed: " + store.directory();
            });
            doc.put("prompt_tokens", prompt.length);
            doc.put("context", prompt.length + tokens);
            doc.put("tokens", tokens);
            doc.put("temperature", temperature);
            doc.put("top_k", topK);
            doc.put("top_p", topP);
            doc.put("method", (temperature > 0 ? "sampled (each sequence its own draws)" : "greedy (every sequence the same)")
                    + "; each decode step one CUDA graph replay (every layer, the LM head, the pick on the device),"
                    + " its picks copied back to the host; step time = decode time / steps after a warm-up generation");
            doc.put("results", rows);
            if (prefillRow != null) {
                doc.put("prefill", prefillRow);
            }
            if (peerLayers > 0) {
                Map<String, Object> input = new LinkedHashMap<>();
                input.put("vocab", c.vocab());
                input.put("hidden", c.hidden());
                input.put("dense_intermediate", preset.denseIntermediate());
                input.put("intermediate", c.expertIntermediate());
                input.put("layers", peerLayers);
                input.put("heads", c.heads());
                input.put("kv_heads", c.kvHeads());
                input.put("head_dim", c.headDim());
                input.put("experts", c.experts());
                input.put("topk", c.topk());
                input.put("prompt_ids", text);
                input.put("batches", batches);
                input.put("tokens", Math.min(tokens, 32));
                input.put("reps", 3);
                JsonNode peer = TorchBaseline.run(torchScript, input);
                if (peer != null) {
                    doc.put("transformers", peer);
                    for (JsonNode r : peer.get("results")) {
                        System.out.printf(Locale.ROOT, "transformers %s, %d layers, batch %d: step %.1f ms, %.1f tokens/s%n",
                                peer.get("transformers").asText(), r.get("layers").asInt(), r.get("batch").asInt(),
                                r.get("step_ms").asDouble(), r.get("decode_tokens_per_s").asDouble());
                    }
                }
            }
            String suffix = (format.equals(dev.moeforge.dsl.ir.WeightFormat.BF16) ? "decode" : "decode-" + format.text())
                    + (choice.projections() == GpuDecoder.ProjectionKernels.BY_BATCH ? "" : "-projections-" + projections)
                    + (choice.attention() == GpuDecoder.AttentionKernels.BY_BATCH ? "" : "-attention-" + attention)
                    + (choice.experts() == GpuDecoder.ExpertKernels.BY_BATCH ? "" : "-experts-" + experts)
                    + (pools.tuned != null ? "-tuned" : servedByPool ? "-installed-pool" : "");
            System.out.println("wrote " + BenchReports.write(out, ctx, suffix, doc));
        }
        return 0;
    }

    /** The constant of {@code type} an option names in lower case with hyphens ({@code by-batch} for BY_BATCH). */
    static <E extends Enum<E>> E kebab(Class<E> type, String option, String value) {
        java.util.function.Function<E, String> name = e -> e.name().toLowerCase(Locale.ROOT).replace('_', '-');
        return Arrays.stream(type.getEnumConstants()).filter(e -> name.apply(e).equals(value)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException(option + " " + value + ": one of "
                        + Arrays.stream(type.getEnumConstants()).map(name).toList()));
    }

    /**
     * The --prefill prompt (random ids, seed 1) through a decoder of batch 1 that keeps just it and
     * one pick: one untimed run (kernels loaded, scratch allocated), then the median of
     * {@link #PREFILL_REPS}; each from the prompt's upload to the first pick back on the host.
     */
    private Map<String, Object> timePrefill(ModelConfig c, dev.moeforge.dsl.ir.WeightFormat format, KernelRuntime runtime,
                                            CudaStream stream) {
        int[] ids = new java.util.SplittableRandom(SAMPLING_SEED).ints(prefill, 0, c.vocab()).toArray();
        double[] ms = new double[PREFILL_REPS];
        boolean chunks;
        try (GpuDecoder d = new GpuDecoder(c, new GpuDecoder.Weights.Random(0, Optional.of(format)), runtime, stream, 1,
                prefill + 1, 1, l -> { })) {
            d.sampling(0, SAMPLING_SEED);
            chunks = d.promptsInChunks();
            d.generate(ids, 1, p -> true);
            for (int r = 0; r < PREFILL_REPS; r++) {
                d.reset();
                ms[r] = d.generate(ids, 1, p -> true).prefillNanos() / 1e6;
            }
        }
        Arrays.sort(ms);
        double median = ms[PREFILL_REPS / 2];
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("tokens", prefill);
        row.put("in_chunks", chunks);
        row.put("ms", median);
        row.put("ms_all", ms);
        row.put("tokens_per_s", prefill / (median / 1e3));
        System.out.printf(Locale.ROOT, "prefill of %d tokens (batch 1, %s): %.1f ms, %.0f tokens/s%n", prefill,
                chunks ? "in chunks" : "one token per replay", median, prefill / (median / 1e3));
        return row;
    }

    /** Bytes per expert weight in a format, codes and scales (from an encoded row of the model's hidden size). */
    static double bytesPerWeight(dev.moeforge.dsl.ir.WeightFormat format, ModelConfig c) {
        int k = c.hidden();
        double scales = format.blockScale().block() > 0 && !format.blockScale().blockRows()
                ? (double) format.blockScale().bytes() / format.blockScale().block() : 0;
        return (double) format.rowBytes(k) / k + scales;
    }

    /**
     * What one decode step of {@code batch} sequences must read: the embedding rows, every layer's
     * attention projections and router, {@code experts} distinct experts in all (summed over the
     * layers, at {@code expertBytesPerWeight}), each sequence's K and V cache rows of
     * {@code positions} positions per layer, the final norm and the LM head; the rest bf16.
     */
    static double stepBytes(ModelConfig c, int batch, double expertBytesPerWeight, double experts, double positions) {
        double h = c.hidden();
        double qkv = (c.heads() + 2.0 * c.kvHeads()) * c.headDim();
        double attention = qkv * h + h * c.heads() * c.headDim();
        double cache = 2.0 * batch * c.layers() * positions * c.kvHeads() * c.headDim();
        return 2 * (c.layers() * (attention + c.experts() * h) + (double) c.vocab() * h + batch * h + cache)
                + experts * 3 * h * c.expertIntermediate() * expertBytesPerWeight;
    }

    /** The distinct experts a uniform routing of {@code batch} tokens touches in all layers: {@code L E (1 - (1 - k/E)^B)}. */
    static double uniformExperts(ModelConfig c, int batch) {
        return c.layers() * c.experts() * (1 - Math.pow(1 - (double) c.topk() / c.experts(), batch));
    }
}
