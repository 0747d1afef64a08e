package dev.moeforge.checkpoint;

import static dev.moeforge.checkpoint.TensorChecks.dim;
import static dev.moeforge.checkpoint.TensorChecks.requireDivisible;
import static dev.moeforge.checkpoint.TensorChecks.requireFloat;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Converts the routed expert weights of a BF16/F16/F32 checkpoint to one {@link WeightFormat} with
 * the reference quantiser {@link EncodedWeights#encode}, one expert matrix at a time, and writes a
 * new checkpoint that {@link CheckpointExperts} loads.
 *
 * <p>Converted: per-expert {@code *.mlp.experts.<e>.(gate_proj|up_proj|down_proj).weight} and
 * Mixtral's {@code *.block_sparse_moe.experts.<e>.(w1|w3|w2).weight}, each {@code [out, in]}, written
 * under the same base name with the tensors of {@link ExpertTensors} (gate and up stay separate
 * projections, so NVFP4 gives each its own {@code weight_scale_2}). transformers' fused
 * {@code *.mlp.experts.gate_up_proj [E, 2I, H]} + {@code *.mlp.experts.down_proj [E, H, I]} are split
 * into the per-expert names ({@code experts.<e>.gate_proj} = rows {@code 0..I-1}, {@code up_proj} =
 * rows {@code I..2I-1}), the layout {@code save_pretrained} writes. gpt-oss's fused
 * {@code [E, H, 2I]} + {@code [E, I, H]} (transposed, gate/up interleaved) go only to {@code mxfp4},
 * as gpt-oss's own {@code gate_up_proj_blocks/_scales} and {@code down_proj_blocks/_scales}; their
 * biases are copied.
 *
 * <p>Every other tensor is copied byte for byte; every other top-level file is copied, config.json
 * with a {@code quantization_config} added. Shards are written in input name order; the quantised
 * tensors of one layer are encoded together, in parallel, when the first of them is written, and
 * held until written: memory peaks at about one output shard. {@link CheckpointWriter} puts the
 * shards in place only once all are written, so a failure (a NaN weight) leaves no partial checkpoint.
 */
public final class Quantizer {

    private static final Pattern PER_EXPERT = Pattern.compile(
            "(.+\\.mlp\\.experts)\\.(\\d+)\\.(gate_proj|up_proj|down_proj)\\.weight"
                    + "|(.+\\.block_sparse_moe\\.experts)\\.(\\d+)\\.(w1|w3|w2)\\.weight");
    private static final Pattern FUSED = Pattern.compile("(.+\\.mlp\\.experts)\\.(gate_up_proj|down_proj)");

    private Quantizer() {}

    /** What one run did. */
    public record Summary(int expertTensors, int tensorsWritten, long expertBytesBefore, long expertBytesAfter,
                          int copiedTensors, long copiedBytes, int copiedFiles, List<Path> written) {
        public Summary {
            written = List.copyOf(written);
        }
    }

    /** Hears how a run goes, on the thread that called {@link #quantize}. */
    public interface Listener {
        /** Something worth telling the user: a folder skipped, a quantization_config replaced. */
        default void note(String message) {}

        /** The tensors are about to be written, {@code tensors} of them. */
        default void writing(int tensors) {}

        /** One more tensor went to the writer. */
        default void tensorWritten() {}

        /** Every tensor is written; the other files are copied next. */
        default void tensorsWritten() {}
    }

    /** Whether {@code a} and {@code b} are the same folder: writing the output into the input is refused. */
    public static boolean sameFolder(Path a, Path b) throws IOException {
        return a.toAbsolutePath().normalize().equals(b.toAbsolutePath().normalize())
                || (Files.exists(a) && Files.exists(b) && Files.isSameFile(a, b));
    }

    /**
     * Quantises {@code ckpt}'s routed experts to {@code format} and writes the new checkpoint into
     * {@code outDir} (created if missing), in shards of at most {@code maxShardBytes}.
     *
     * @throws IllegalArgumentException if {@code outDir} is the checkpoint's own folder, the checkpoint
     *     has no routed experts, or {@code format} cannot hold them (gpt-oss's fused layout: mxfp4 only)
     * @throws CheckpointException naming the tensor and its file: a weight that is not a float, not
     *     whole blocks of the format, or not finite; a fused pair that does not match; an output name
     *     that clashes with another tensor
     */
    public static Summary quantize(Checkpoint ckpt, WeightFormat format, Path outDir, long maxShardBytes,
                                   Listener listener) throws IOException {
        Objects.requireNonNull(format, "format");
        Objects.requireNonNull(listener, "listener");
        if (sameFolder(ckpt.dir(), outDir)) {
            throw new IllegalArgumentException(outDir + ": is the folder of the checkpoint being quantised; "
                    + "write the quantised checkpoint elsewhere");
        }
        Plan plan = plan(ckpt, format, listener);
        Map<String, String> metadata = new LinkedHashMap<>(ckpt.files().getFirst().metadata());
        metadata.putIfAbsent("format", "pt");
        metadata.put(ExpertTensors.FORMAT_METADATA_KEY, format.text());
        CheckpointWriter writer = new CheckpointWriter(maxShardBytes).metadata(metadata);
        Encodings encodings = new Encodings(format);
        long after = 0;
        long copiedBytes = 0;
        int tensorsWritten = 0;
        listener.writing(plan.copies().size() + plan.jobs().stream().mapToInt(j -> j.outputs.size()).sum());
        // Output order: input name order, each quantised weight's tensors together.
        for (Object item : plan.items()) {
            if (item instanceof String name) {
                TensorInfo t = ckpt.tensor(name);
                writer.add(name, t.dtype(), t.shape(), () -> {
                    listener.tensorWritten();
                    return ckpt.data(name);
                });
                copiedBytes += t.byteSize();
                continue;
            }
            Job j = (Job) item;
            encodings.add(j);
            for (int i = 0; i < j.outputs.size(); i++) {
                ExpertTensors.Entry e = j.outputs.get(i);
                int index = i;
                writer.add(e.name(), e.dtype(), e.shape(), () -> {
                    byte[] bytes = encodings.take(j, index);
                    listener.tensorWritten();
                    return MemorySegment.ofArray(bytes);
                });
                after += e.byteSize();
                tensorsWritten++;
            }
        }
        List<Path> written = writer.write(outDir);
        listener.tensorsWritten();
        int files = copyOtherFiles(ckpt.dir(), outDir, format, listener);
        return new Summary(plan.expertTensors(), tensorsWritten, plan.expertBytes(), after, plan.copies().size(),
                copiedBytes, files, written);
    }

    // ---------------------------------------------------------------- the plan

    /** One {@link EncodedWeights#encode} call: its rows, read from one stored tensor, and the tensors its result is written as. */
    private static final class Job {
        final int order;
        final String label;       // what the encoder's errors call the rows
        final FloatRows source;
        final Path file;
        final String group;       // the layer's experts prefix: jobs of one group are encoded together
        final int experts;
        final int rows;
        final int cols;
        final List<ExpertTensors.Entry> outputs;
        EncodedWeights result;
        int remaining;
        boolean done;

        Job(int order, String label, FloatRows source, Path file, String group, int experts, int rows, int cols,
            List<ExpertTensors.Entry> outputs) {
            this.order = order;
            this.label = label;
            this.source = source;
            this.file = file;
            this.group = group;
            this.experts = experts;
            this.rows = rows;
            this.cols = cols;
            this.outputs = outputs;
            this.remaining = outputs.size();
        }

        void encode(WeightFormat format) {
            try {
                result = EncodedWeights.encode(format, source, experts, rows, cols, Projections.ONE, label);
            } catch (EncodedWeights.NonFiniteWeightException e) {
                // the index in the tensor as stored, not in this job's (sliced, transposed) rows
                throw new CheckpointException(file + ": " + e.messageAt(source.tensor().name(),
                        source.storedIndex(e.expert(), e.row(), e.col())), e);
            } catch (IllegalArgumentException e) {
                throw new CheckpointException(file + ": " + e.getMessage(), e);
            }
        }
    }

    /**
     * What to write: {@code items} in output order, each a tensor name to copy or a {@link Job};
     * {@code expertBytes}, the bytes of the {@code expertTensors} quantised.
     */
    private record Plan(List<Object> items, List<Job> jobs, List<String> copies, int expertTensors, long expertBytes) {}

    private static Plan plan(Checkpoint ckpt, WeightFormat format, Listener listener) {
        List<Job> jobs = new ArrayList<>();
        List<String> copies = new ArrayList<>();
        List<Object> items = new ArrayList<>();
        Set<String> fusedDone = new HashSet<>();
        long before = 0;
        int expertTensors = 0;
        boolean straddle = false;
        for (String name : ckpt.names()) {
            Matcher pe = PER_EXPERT.matcher(name);
            Matcher fu = FUSED.matcher(name);
            if (pe.matches()) {
                TensorInfo t = requireFloat(ckpt, name, 2);
                SafetensorsFile file = ckpt.fileOf(name);
                String group = pe.group(1) != null ? pe.group(1) : pe.group(4);
                int rows = dim(file, t, 0);
                int cols = dim(file, t, 1);
                String base = name.substring(0, name.length() - ".weight".length());
                String proj = pe.group(3) != null ? pe.group(3) : pe.group(6);
                straddle |= format.blockScale().blockRows() && !proj.equals("down_proj") && !proj.equals("w2")
                        && rows % format.blockScale().block() != 0;
                checkBlocks(ckpt, name, format, cols);
                jobs.add(new Job(jobs.size(), name, FloatRows.matrix(ckpt, name), file.path(), group, 1, rows, cols,
                        ExpertTensors.perExpert(format, base, rows, cols)));
                items.add(jobs.getLast());
                before += t.byteSize();
                expertTensors++;
            } else if (fu.matches()) {
                String prefix = fu.group(1);
                if (fusedDone.add(prefix)) {
                    int first = jobs.size();
                    before += fused(ckpt, prefix, format, jobs);
                    items.addAll(jobs.subList(first, jobs.size()));
                    expertTensors += 2;
                }
            } else {
                copies.add(name);
                items.add(name);
            }
        }
        if (jobs.isEmpty()) {
            throw new IllegalArgumentException(ckpt.dir() + ": no routed expert weights to quantise (looked for "
                    + "*.mlp.experts.<e>.(gate_proj|up_proj|down_proj).weight, *.block_sparse_moe.experts.<e>.(w1|w3|w2).weight "
                    + "and *.mlp.experts.(gate_up_proj|down_proj))");
        }
        Set<String> copied = new HashSet<>(copies);
        Set<String> outputNames = new HashSet<>();
        for (Job j : jobs) {
            for (ExpertTensors.Entry e : j.outputs) {
                if (!outputNames.add(e.name()) || copied.contains(e.name())) {
                    throw new CheckpointException(ckpt.dir() + ": tensor '" + e.name() + "' (quantised from '" + j.label
                            + "') would clash with a tensor of the same name in the input or another output");
                }
            }
        }
        if (straddle) {
            int block = format.blockScale().block();
            listener.note(format.text() + " gate/up weights with I % " + block + " != 0: CheckpointExperts cannot fuse them"
                    + " (a " + block + "-row scale block would straddle gate and up)");
        }
        return new Plan(items, jobs, copies, expertTensors, before);
    }

    /** Plans the jobs of the fused pair {@code prefix.gate_up_proj} + {@code prefix.down_proj}; returns their input bytes. */
    private static long fused(Checkpoint ckpt, String prefix, WeightFormat format, List<Job> jobs) {
        FusedFloatExperts fused = FusedFloatExperts.find(ckpt, prefix);
        String guName = fused.gateUp().name();
        String dnName = fused.down().name();
        Path guFile = ckpt.fileOf(guName).path();
        Path dnFile = ckpt.fileOf(dnName).path();
        int e = fused.experts();
        int h = fused.hidden();
        int i = fused.intermediate();
        FloatRows gu = fused.gateUpRows(ckpt);
        FloatRows dn = fused.downRows(ckpt);
        if (fused.transposed() && !(format instanceof WeightFormat.Mxfp4)) {
            throw new IllegalArgumentException(format.text() + ": the gpt-oss fused experts '" + guName + "' "
                    + fused.gateUp().shape() + " (transposed, gate/up interleaved) in " + guFile
                    + " can be quantised only to mxfp4, gpt-oss's own _blocks/_scales layout");
        }
        checkBlocks(ckpt, guName, format, h);
        checkBlocks(ckpt, dnName, format, i);
        if (fused.transposed()) {  // gpt-oss's own tensors, all experts at once, gate/up interleaved as stored
            jobs.add(new Job(jobs.size(), guName, gu, guFile, prefix, e, 2 * i, h,
                    ExpertTensors.gptOssMxfp4(prefix, "gate_up_proj", e, 2 * i, h)));
            jobs.add(new Job(jobs.size(), dnName, dn, dnFile, prefix, e, h, i,
                    ExpertTensors.gptOssMxfp4(prefix, "down_proj", e, h, i)));
        } else {                   // split into the per-expert names
            for (int x = 0; x < e; x++) {
                String base = prefix + "." + x + ".";
                jobs.add(new Job(jobs.size(), guName + " (expert " + x + ", gate rows 0.." + (i - 1) + ")", gu.from(x, 0),
                        guFile, prefix, 1, i, h, ExpertTensors.perExpert(format, base + "gate_proj", i, h)));
                jobs.add(new Job(jobs.size(), guName + " (expert " + x + ", up rows " + i + ".." + (2 * i - 1) + ")",
                        gu.from(x, i), guFile, prefix, 1, i, h, ExpertTensors.perExpert(format, base + "up_proj", i, h)));
            }
            for (int x = 0; x < e; x++) {
                jobs.add(new Job(jobs.size(), dnName + " (expert " + x + ")", dn.from(x, 0), dnFile, prefix, 1, h, i,
                        ExpertTensors.perExpert(format, prefix + "." + x + ".down_proj", h, i)));
            }
        }
        return fused.gateUp().byteSize() + fused.down().byteSize();
    }

    /** Refuses, before anything is written, rows that are not whole blocks of the format. */
    private static void checkBlocks(Checkpoint ckpt, String name, WeightFormat format, int cols) {
        WeightFormat.BlockScale bs = format.blockScale();
        int block = bs.blockRows() ? 0 : bs.block();
        if (format.element().bits() == 4 && cols % 2 != 0) {
            block = 2;
        }
        if (block > 0) {
            requireDivisible(ckpt.fileOf(name), name, cols, block, format.text());
        }
    }

    // ---------------------------------------------------------------- encoding

    /** Encodes lazily, a group (layer) at a time, and hands out each output's bytes once. */
    private static final class Encodings {
        private final WeightFormat format;
        private final Map<String, List<Job>> groups = new LinkedHashMap<>();

        Encodings(WeightFormat format) {
            this.format = format;
        }

        void add(Job job) {
            groups.computeIfAbsent(job.group, g -> new ArrayList<>()).add(job);
        }

        /** The bytes of output {@code i} of {@code job}; called from the writer's thread, once per output. */
        synchronized byte[] take(Job job, int i) {
            if (job.result == null) {
                List<Job> batch = groups.get(job.group).stream().filter(j -> j.result == null && !j.done).toList();
                Map<Job, RuntimeException> failures = new ConcurrentHashMap<>();
                batch.parallelStream().forEach(j -> {
                    try {
                        j.encode(format);
                    } catch (RuntimeException e) {
                        failures.put(j, e);
                    }
                });
                if (!failures.isEmpty()) {
                    // the first failing weight in name order, whatever the threads' timing
                    throw failures.entrySet().stream().min(Comparator.comparingInt(f -> f.getKey().order))
                            .orElseThrow().getValue();
                }
            }
            byte[] bytes = job.outputs.get(i).part().bytes(job.result);
            if (--job.remaining == 0) {
                job.result = null;  // written: let it go
                job.done = true;
            }
            return bytes;
        }
    }

    // ---------------------------------------------------------------- other files

    /** Copies the top-level files other than safetensors; config.json gets a quantization_config. Returns the count. */
    private static int copyOtherFiles(Path inDir, Path outDir, WeightFormat format, Listener listener) throws IOException {
        int n = 0;
        List<Path> entries = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(inDir)) {
            ds.forEach(entries::add);
        }
        entries.sort(null);
        for (Path p : entries) {
            String name = p.getFileName().toString();
            if (name.endsWith(".safetensors") || name.equals(Checkpoint.INDEX_FILE)) {
                continue;
            }
            if (Files.isDirectory(p)) {
                listener.note("skipped the folder " + name + "/ (only top-level files are copied)");
                continue;
            }
            if (!Files.isRegularFile(p)) {
                continue;
            }
            if (name.equals("config.json")) {
                writeConfig(p, outDir.resolve(name), format, listener);
            } else {
                Files.copy(p, outDir.resolve(name), StandardCopyOption.REPLACE_EXISTING);
            }
            n++;
        }
        if (!Files.exists(inDir.resolve("config.json"))) {
            listener.note(inDir + " has no config.json; no quantization_config written");
        }
        return n;
    }

    /** Decimals kept as written (1e-06 stays 0.000001, not 1.0E-6). */
    private static final ObjectMapper CONFIG_JSON = JsonMapper.builder()
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .nodeFactory(JsonNodeFactory.withExactBigDecimals(true))
            .build();

    /** The quantization_config MoeForge adds to config.json. */
    static ObjectNode quantizationConfig(WeightFormat format) {
        ObjectNode q = CONFIG_JSON.createObjectNode();
        q.put("quant_method", "moeforge");
        q.put("format", format.text());
        q.put("modules", "routed experts");
        q.putObject("producer").put("name", "moeforge").put("version", "0.1.0");
        return q;
    }

    private static void writeConfig(Path from, Path to, WeightFormat format, Listener listener) throws IOException {
        JsonNode root;
        try {
            root = CONFIG_JSON.readTree(from.toFile());
        } catch (IOException e) {
            throw new IOException(from + ": cannot read as JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof ObjectNode config)) {
            throw new IOException(from + ": not a JSON object");
        }
        if (config.has("quantization_config")) {
            listener.note("replacing the quantization_config of " + from + ": " + config.get("quantization_config"));
        }
        config.set("quantization_config", quantizationConfig(format));
        Files.writeString(to, CONFIG_JSON.writer(Json.TRANSFORMERS_LAYOUT).writeValueAsString(config) + "\n");
    }
}
