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
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
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
 * held until written: memory peaks at about one output shard.
 *
 * <p>Everything that can be checked without encoding is checked before anything is written:
 * config.json parses, every MoE layer passes {@link CheckpointExperts#check} (the loader's own
 * structural check) and has the expert count config.json states, every weight is a float of whole
 * blocks of the format, no output name clashes, and the output folder is new or empty (or
 * {@link Options#force}). The checkpoint is then written into a {@link StagingFolder} beside the
 * output folder and moved into place only once complete, so a failure (a NaN weight) or a kill
 * leaves no output folder, and the next run removes the staging folder of a killed one.
 */
public final class Quantizer {

    private static final Pattern PER_EXPERT = Pattern.compile(
            "(.+\\.mlp\\.experts)\\.(\\d+)\\.(gate_proj|up_proj|down_proj)\\.weight"
                    + "|(.+\\.block_sparse_moe\\.experts)\\.(\\d+)\\.(w1|w3|w2)\\.weight");
    private static final Pattern FUSED = Pattern.compile("(.+\\.mlp\\.experts)\\.(gate_up_proj|down_proj)");

    private Quantizer() {}

    /**
     * How a run writes.
     *
     * @param maxShardBytes the largest shard, in bytes of tensor data
     * @param force write into a non-empty output folder: files of the same name are replaced, the shards
     *     and index of an earlier checkpoint deleted, every other file kept
     * @param dryRun check and plan everything, write nothing ({@link Summary#dryRun})
     */
    public record Options(long maxShardBytes, boolean force, boolean dryRun) {
        public Options {
            if (maxShardBytes <= 0) {
                throw new IllegalArgumentException("maxShardBytes must be positive, got " + maxShardBytes);
            }
        }
    }

    /**
     * What an output tensor is made from: the input tensor {@code tensor}, copied as is or (quantised)
     * the rows {@code label} of it, {@code shape} being those rows ({@code [rows, cols]}, or
     * {@code [experts, rows, cols]} for gpt-oss's fused experts) as the encoder reads them.
     */
    public record Source(String tensor, String label, SafetensorsDType dtype, List<Long> shape, boolean quantised) {
        public Source {
            shape = List.copyOf(shape);
        }

        public long byteSize() {
            return dtype.byteSize(TensorInfo.numel(shape));
        }
    }

    /** A tensor of the output and what it is made from. */
    public record OutputTensor(String name, SafetensorsDType dtype, List<Long> shape, long bytes, Source source) {
        public OutputTensor {
            shape = List.copyOf(shape);
        }
    }

    /** A file of the output: a safetensors shard (and its tensors), the index, config.json, or another file copied. */
    public record OutputFile(String name, Kind kind, long bytes, int tensors) {
        public enum Kind { SHARD, INDEX, CONFIG, COPY }
    }

    /**
     * What one run did or, in a dry run, would do: the counts and bytes, every tensor in the order
     * added (each shard holds a run of them), every file, and {@code written}, the checkpoint's
     * shards and index as paths in the output folder.
     */
    public record Summary(boolean dryRun, int expertTensors, int tensorsWritten, long expertBytesBefore, long expertBytesAfter,
                          int copiedTensors, long copiedBytes, int copiedFiles, List<OutputTensor> tensors,
                          List<OutputFile> files, List<Path> written) {
        public Summary {
            tensors = List.copyOf(tensors);
            files = List.copyOf(files);
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

    /** {@link #quantize(Checkpoint, WeightFormat, Path, Options, Listener)} into a new or empty {@code outDir}. */
    public static Summary quantize(Checkpoint ckpt, WeightFormat format, Path outDir, long maxShardBytes,
                                   Listener listener) throws IOException {
        return quantize(ckpt, format, outDir, new Options(maxShardBytes, false, false), listener);
    }

    /**
     * Quantises {@code ckpt}'s routed experts to {@code format} and writes the new checkpoint into
     * {@code outDir} (created, with the folders above it, if missing), in shards of at most
     * {@code options.maxShardBytes()}; or, with {@code options.dryRun()}, only says what it would write.
     *
     * @throws IllegalArgumentException if {@code outDir} is the checkpoint's own folder, not a folder, or
     *     not empty (without force); the checkpoint has no routed experts; or {@code format} cannot hold
     *     them (gpt-oss's fused layout: mxfp4 only)
     * @throws CheckpointException naming the file (and tensor): a config.json that is not a JSON object;
     *     a MoE layer that {@link CheckpointExperts#check} refuses, or whose expert count is not
     *     config.json's; a weight that is not a float, not whole blocks of the format, or not finite; a
     *     fused pair that does not match; an output name that clashes with another tensor
     */
    public static Summary quantize(Checkpoint ckpt, WeightFormat format, Path outDir, Options options,
                                   Listener listener) throws IOException {
        Objects.requireNonNull(format, "format");
        Objects.requireNonNull(options, "options");
        Objects.requireNonNull(listener, "listener");
        Path out = outputFolder(ckpt, outDir, options.force());
        Path configFile = ckpt.dir().resolve(CONFIG_FILE);
        ObjectNode config = readConfig(configFile);
        Plan plan = plan(ckpt, format, config, listener);
        List<Path> otherFiles = otherFiles(ckpt.dir(), listener);
        String configText = null;
        if (config != null) {
            if (config.has("quantization_config")) {
                listener.note("replacing the quantization_config of " + configFile + ": " + config.get("quantization_config"));
            }
            config.set("quantization_config", quantizationConfig(format));
            configText = CONFIG_JSON.writer(Json.TRANSFORMERS_LAYOUT).writeValueAsString(config) + "\n";
        } else {
            listener.note(ckpt.dir() + " has no config.json; no quantization_config written");
        }

        Map<String, String> metadata = new LinkedHashMap<>(ckpt.files().getFirst().metadata());
        metadata.putIfAbsent("format", "pt");
        metadata.put(ExpertTensors.FORMAT_METADATA_KEY, format.text());
        CheckpointWriter writer = new CheckpointWriter(options.maxShardBytes()).metadata(metadata);
        Encodings encodings = new Encodings(format);
        List<OutputTensor> tensors = new ArrayList<>();
        long after = 0;
        long copiedBytes = 0;
        int tensorsWritten = 0;
        // Output order: input name order, each quantised weight's tensors together.
        for (Object item : plan.items()) {
            if (item instanceof String name) {
                TensorInfo t = ckpt.tensor(name);
                writer.add(name, t.dtype(), t.shape(), () -> {
                    listener.tensorWritten();
                    return ckpt.data(name);
                });
                tensors.add(new OutputTensor(name, t.dtype(), t.shape(), t.byteSize(),
                        new Source(name, name, t.dtype(), t.shape(), false)));
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
                tensors.add(new OutputTensor(e.name(), e.dtype(), e.shape(), e.byteSize(), j.source()));
                after += e.byteSize();
                tensorsWritten++;
            }
        }

        List<OutputFile> files = new ArrayList<>();
        List<Path> checkpointFiles = new ArrayList<>();
        for (CheckpointWriter.PlannedFile f : writer.plan()) {
            boolean index = f.name().equals(Checkpoint.INDEX_FILE);
            files.add(new OutputFile(f.name(), index ? OutputFile.Kind.INDEX : OutputFile.Kind.SHARD, f.bytes(), f.tensors().size()));
            checkpointFiles.add(out.resolve(f.name()));
        }
        for (Path p : otherFiles) {
            boolean isConfig = p.getFileName().toString().equals(CONFIG_FILE);
            files.add(new OutputFile(p.getFileName().toString(), isConfig ? OutputFile.Kind.CONFIG : OutputFile.Kind.COPY,
                    isConfig ? configText.getBytes(StandardCharsets.UTF_8).length : Files.size(p), 0));
        }
        Summary summary = new Summary(options.dryRun(), plan.expertTensors(), tensorsWritten, plan.expertBytes(), after,
                plan.copies().size(), copiedBytes, otherFiles.size(), tensors, files, checkpointFiles);
        if (options.dryRun()) {
            if (Files.isDirectory(out)) {
                noteWhatForceReplaces(out, files, listener);
            }
            return summary;
        }

        try (StagingFolder staging = StagingFolder.create(out, listener::note)) {
            listener.writing(tensors.size());
            writer.write(staging.dir());
            listener.tensorsWritten();
            for (Path p : otherFiles) {
                Path to = staging.dir().resolve(p.getFileName());
                if (p.getFileName().toString().equals(CONFIG_FILE)) {
                    Files.writeString(to, configText);
                } else {
                    Files.copy(p, to);
                }
            }
            staging.commit(options.force(), listener::note);
        }
        return summary;
    }

    /**
     * The output folder, absolute (and, if it exists, with links resolved, so the checkpoint lands where
     * it points); refused if it is the input folder, not a folder, or not empty without {@code force}.
     */
    private static Path outputFolder(Checkpoint ckpt, Path outDir, boolean force) throws IOException {
        Objects.requireNonNull(outDir, "outDir");
        if (sameFolder(ckpt.dir(), outDir)) {
            throw new IllegalArgumentException(outDir + ": is the folder of the checkpoint being quantised; "
                    + "write the quantised checkpoint elsewhere");
        }
        Path out = outDir.toAbsolutePath().normalize();
        if (Files.exists(out)) {
            if (!Files.isDirectory(out)) {
                throw new IllegalArgumentException(outDir + ": not a directory; the quantised checkpoint is a folder");
            }
            out = out.toRealPath();
            List<String> entries = entries(out);
            if (!entries.isEmpty() && !force) {
                throw new IllegalArgumentException(outDir + ": not empty (holds " + describe(entries) + "); the quantised "
                        + "checkpoint goes into a new or empty folder, or over this one with force");
            }
        }
        if (out.getParent() == null || out.getFileName() == null) {
            throw new IllegalArgumentException(outDir + ": the quantised checkpoint needs a folder of its own, not the root");
        }
        return out;
    }

    /** In a dry run over a non-empty output folder: which of its files the run would replace, delete and keep. */
    private static void noteWhatForceReplaces(Path out, List<OutputFile> files, Listener listener) throws IOException {
        Set<String> written = new HashSet<>();
        files.forEach(f -> written.add(f.name()));
        List<String> replaced = new ArrayList<>();
        List<String> deleted = new ArrayList<>();
        List<String> kept = new ArrayList<>();
        for (String name : entries(out)) {
            (written.contains(name) ? replaced : CheckpointWriter.isCheckpointFile(name) ? deleted : kept).add(name);
        }
        if (!replaced.isEmpty() || !deleted.isEmpty() || !kept.isEmpty()) {
            listener.note("in " + out + " the run would replace " + (replaced.isEmpty() ? "nothing" : describe(replaced))
                    + "; delete " + (deleted.isEmpty() ? "nothing" : describe(deleted)) + " (shards and index of the earlier "
                    + "checkpoint); keep " + (kept.isEmpty() ? "nothing" : describe(kept)));
        }
    }

    /** The names in {@code dir}, sorted. */
    private static List<String> entries(Path dir) throws IOException {
        List<String> names = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            ds.forEach(p -> names.add(p.getFileName().toString()));
        }
        names.sort(null);
        return names;
    }

    /** {@code a, b, c and 5 more}. */
    private static String describe(List<String> names) {
        int shown = Math.min(names.size(), 3);
        String list = String.join(", ", names.subList(0, shown));
        return names.size() > shown ? list + " and " + (names.size() - shown) + " more" : list;
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

        /** What the job reads, for the summary. */
        Source source() {
            TensorInfo t = this.source.tensor();
            List<Long> shape = experts == 1 ? List.of((long) rows, (long) cols) : List.of((long) experts, (long) rows, (long) cols);
            return new Source(t.name(), label, t.dtype(), shape, true);
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

    private static Plan plan(Checkpoint ckpt, WeightFormat format, ObjectNode config, Listener listener) {
        checkStructure(ckpt, config);
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

    /** The keys under which config.json states a model's routed expert count, by model family. */
    private static final List<String> EXPERT_COUNT_KEYS = List.of("num_experts", "num_local_experts", "n_routed_experts");

    /**
     * Runs the loader's structural check on every MoE layer, so that a checkpoint it would refuse is
     * refused before anything is written; then compares each layer's expert count with config.json's,
     * which catches the one gap the names alone cannot show: a last expert missing.
     */
    private static void checkStructure(Checkpoint ckpt, ObjectNode config) {
        Set<String> layers = new TreeSet<>();
        for (String name : ckpt.names()) {
            Matcher pe = PER_EXPERT.matcher(name);
            Matcher fu = FUSED.matcher(name);
            String experts = pe.matches() ? (pe.group(1) != null ? pe.group(1) : pe.group(4)) : fu.matches() ? fu.group(1) : null;
            if (experts != null) {
                layers.add(experts.substring(0, experts.length() - ".experts".length()));
            }
        }
        String key = null;
        JsonNode stated = null;
        for (String k : EXPERT_COUNT_KEYS) {
            if (config != null && config.get(k) != null && config.get(k).canConvertToInt()) {
                key = k;
                stated = config.get(k);
                break;
            }
        }
        for (String layer : layers) {
            int experts = CheckpointExperts.check(ckpt, layer);
            if (stated != null && stated.intValue() != experts) {
                throw new CheckpointException(ckpt.dir().resolve(CONFIG_FILE) + ": " + key + " is " + stated.intValue()
                        + " but '" + layer + "' has " + experts + " experts (0.." + (experts - 1) + ") in " + ckpt.dir()
                        + "; every MoE layer must hold all the experts the config states");
            }
        }
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

    private static final String CONFIG_FILE = "config.json";

    /** The top-level files to copy: all but the safetensors and their index; config.json is copied with a quantization_config. */
    private static List<Path> otherFiles(Path inDir, Listener listener) throws IOException {
        List<Path> entries = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(inDir)) {
            ds.forEach(entries::add);
        }
        entries.sort(null);
        List<Path> files = new ArrayList<>();
        for (Path p : entries) {
            String name = p.getFileName().toString();
            if (name.endsWith(".safetensors") || name.equals(Checkpoint.INDEX_FILE)) {
                continue;
            }
            if (Files.isDirectory(p)) {
                listener.note("skipped the folder " + name + "/ (only top-level files are copied)");
                continue;
            }
            if (Files.isRegularFile(p)) {
                files.add(p);
            }
        }
        return files;
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

    /** config.json parsed, or null if there is none. */
    private static ObjectNode readConfig(Path file) {
        if (!Files.isRegularFile(file)) {
            return null;
        }
        JsonNode root;
        try {
            root = CONFIG_JSON.readTree(file.toFile());
        } catch (IOException e) {
            throw new CheckpointException(file + ": cannot read as JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof ObjectNode config)) {
            throw new CheckpointException(file + ": not a JSON object, so no quantization_config can be added to it");
        }
        return config;
    }
}
