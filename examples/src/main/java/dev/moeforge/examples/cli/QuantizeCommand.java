package dev.moeforge.examples.cli;

import com.fasterxml.jackson.core.util.DefaultIndenter;
import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.CheckpointWriter;
import dev.moeforge.checkpoint.ExpertTensors;
import dev.moeforge.checkpoint.SafetensorsDType;
import dev.moeforge.checkpoint.TensorInfo;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge quantize}: converts the routed expert weights of a BF16/F16/F32 checkpoint to one
 * {@link WeightFormat} with the reference quantiser {@link EncodedWeights#encode}, one expert
 * matrix at a time, and writes a new checkpoint that {@code CheckpointExperts} loads.
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
 */
@Command(name = "quantize", mixinStandardHelpOptions = true,
        description = "Quantises the routed expert weights of a BF16/F16/F32 Hugging Face checkpoint to one weight "
                + "format (reference quantiser) and writes a new checkpoint: other tensors and files copied unchanged, "
                + "quantization_config added to config.json.")
public final class QuantizeCommand implements Callable<Integer> {

    /** {@link WeightFormat#ALL}'s names, for the help (a test checks they agree). */
    static final String ALLOWED = "bf16, fp8_e4m3_channel, fp8_e4m3_block128, mxfp8, nvfp4, mxfp4, int8_channel, "
            + "int8_group128, int4_channel, int4_group128";

    static final Pattern PER_EXPERT = Pattern.compile(
            "(.+\\.mlp\\.experts)\\.(\\d+)\\.(gate_proj|up_proj|down_proj)\\.weight"
                    + "|(.+\\.block_sparse_moe\\.experts)\\.(\\d+)\\.(w1|w3|w2)\\.weight");
    static final Pattern FUSED = Pattern.compile("(.+\\.mlp\\.experts)\\.(gate_up_proj|down_proj)");

    private static final ValueLayout.OfFloat F32_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfShort I16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    @Spec
    CommandSpec spec;

    @Option(names = "--in", required = true, paramLabel = "DIR",
            description = "Input checkpoint: a folder with model.safetensors, or shards and model.safetensors.index.json.")
    Path in;

    @Option(names = "--format", required = true, paramLabel = "FORMAT",
            description = "Format of the routed experts; allowed: " + ALLOWED + ".")
    String format;

    @Option(names = "--out", required = true, paramLabel = "DIR",
            description = "Output folder (created if missing; must not be --in).")
    Path out;

    @Option(names = "--shard-size", defaultValue = "5GB", paramLabel = "SIZE",
            description = "Largest shard: bytes, or a number with kB, MB, GB (powers of 1000) or KiB, MiB, GiB "
                    + "(default: ${DEFAULT-VALUE}, as transformers).")
    String shardSize;

    /** What one run did, for the summary and the tests. */
    record Summary(int expertTensors, int tensorsWritten, long expertBytesBefore, long expertBytesAfter,
                   int copiedTensors, long copiedBytes, int copiedFiles, List<Path> written) {}

    @Override
    public Integer call() throws Exception {
        WeightFormat f = parseFormat(format);
        long maxShard = parseSize(shardSize);
        PrintWriter stdout = spec == null ? new PrintWriter(System.out, true) : spec.commandLine().getOut();
        Summary s = run(in, f, out, maxShard, stdout, true);
        stdout.printf(Locale.ROOT, "quantised %d routed expert tensors to %s as %d tensors: %s -> %s (%.2fx)%n",
                s.expertTensors(), f.text(), s.tensorsWritten(), human(s.expertBytesBefore()), human(s.expertBytesAfter()),
                s.expertBytesAfter() == 0 ? 0.0 : (double) s.expertBytesBefore() / s.expertBytesAfter());
        long shards = s.written().stream().filter(p -> p.getFileName().toString().endsWith(".safetensors")).count();
        stdout.printf(Locale.ROOT, "copied %d other tensors unchanged (%s) and %d other files; checkpoint %s -> %s in %d %s in %s%n",
                s.copiedTensors(), human(s.copiedBytes()), s.copiedFiles(),
                human(s.expertBytesBefore() + s.copiedBytes()), human(s.expertBytesAfter() + s.copiedBytes()),
                shards, shards == 1 ? "file" : "shards", out);
        stdout.flush();
        return 0;
    }

    static WeightFormat parseFormat(String text) {
        for (WeightFormat f : WeightFormat.ALL) {
            if (f.text().equals(text)) {
                return f;
            }
        }
        throw new IllegalArgumentException("--format " + text + ": unknown format; allowed: "
                + WeightFormat.ALL.stream().map(WeightFormat::text).collect(Collectors.joining(", ")));
    }

    private static final Pattern SIZE = Pattern.compile("(\\d+(?:\\.\\d+)?)\\s*([kmgt]i?b|b)?", Pattern.CASE_INSENSITIVE);

    /** "5GB" = 5e9 bytes, "2GiB" = 2^31, "1000" = 1000 bytes. */
    static long parseSize(String text) {
        Matcher m = SIZE.matcher(text.trim());
        if (!m.matches()) {
            throw new IllegalArgumentException("--shard-size " + text + ": expected bytes, or a number with kB, MB, GB, "
                    + "KiB, MiB or GiB, e.g. 5GB");
        }
        String unit = m.group(2) == null ? "b" : m.group(2).toLowerCase(Locale.ROOT);
        int power = "bkmgt".indexOf(unit.charAt(0));
        double base = unit.contains("i") ? 1024 : 1000;
        double bytes = Double.parseDouble(m.group(1)) * Math.pow(base, power);
        if (bytes < 1 || bytes > Long.MAX_VALUE) {
            throw new IllegalArgumentException("--shard-size " + text + ": must be at least one byte");
        }
        return (long) bytes;
    }

    // ---------------------------------------------------------------- the conversion

    /** Where element {@code [expert, row, col]} of a job's rows is in the stored tensor: its index there. */
    @FunctionalInterface
    private interface StoredIndex {
        long[] of(int expert, int row, int col);
    }

    /** One {@link EncodedWeights#encode} call and the tensors its result is written as. */
    private static final class Job {
        final int order;
        final String label;       // the tensor name the encoder's errors carry
        final String tensor;      // the stored tensor the rows are read from
        final StoredIndex stored;
        final Path file;
        final String group;       // the layer's experts prefix: jobs of one group are encoded together
        final RowSource source;
        final int experts;
        final int rows;
        final int cols;
        final List<ExpertTensors.Entry> outputs;
        EncodedWeights result;
        int remaining;
        boolean done;

        Job(int order, String label, String tensor, StoredIndex stored, Path file, String group, RowSource source,
            int experts, int rows, int cols, List<ExpertTensors.Entry> outputs) {
            this.order = order;
            this.label = label;
            this.tensor = tensor;
            this.stored = stored;
            this.file = file;
            this.group = group;
            this.source = source;
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
                throw new CheckpointException(file + ": " + e.messageAt(tensor, stored.of(e.expert(), e.row(), e.col())), e);
            } catch (IllegalArgumentException e) {
                throw new CheckpointException(file + ": " + e.getMessage(), e);
            }
        }
    }

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

    /**
     * Converts {@code inDir} into {@code outDir}.
     *
     * @param progress whether to show a progress bar (only on a terminal)
     */
    static Summary run(Path inDir, WeightFormat format, Path outDir, long maxShardBytes, PrintWriter log, boolean progress)
            throws IOException {
        if (!Files.isDirectory(inDir)) {
            throw new IllegalArgumentException("--in " + inDir + ": not a directory");
        }
        if (inDir.toAbsolutePath().normalize().equals(outDir.toAbsolutePath().normalize())
                || (Files.exists(outDir) && Files.isSameFile(inDir, outDir))) {
            throw new IllegalArgumentException("--out " + outDir + ": is the input folder; write the converted checkpoint elsewhere");
        }
        Checkpoint ckpt;
        try {
            ckpt = Checkpoint.open(inDir);
        } catch (CheckpointException e) {
            throw new IllegalArgumentException("--in " + inDir + ": not a readable checkpoint: " + e.getMessage(), e);
        }
        try (ckpt) {
            return convert(ckpt, format, outDir, maxShardBytes, log, progress);
        }
    }

    private static Summary convert(Checkpoint ckpt, WeightFormat format, Path outDir, long maxShardBytes, PrintWriter log,
                                   boolean progress) throws IOException {
        Map<String, String> metadata = new LinkedHashMap<>(ckpt.files().getFirst().metadata());
        metadata.putIfAbsent("format", "pt");
        metadata.put(ExpertTensors.FORMAT_METADATA_KEY, format.text());
        CheckpointWriter writer = new CheckpointWriter(maxShardBytes).metadata(metadata);
        Encodings encodings = new Encodings(format);
        List<Job> jobs = new ArrayList<>();
        List<String> copies = new ArrayList<>();
        List<Object> items = new ArrayList<>();  // in output order: a tensor name to copy, or a Job
        Set<String> fusedDone = new HashSet<>();
        Set<String> outputNames = new HashSet<>();
        long before = 0;
        int expertTensors = 0;
        boolean straddle = false;
        for (String name : ckpt.names()) {
            Matcher pe = PER_EXPERT.matcher(name);
            Matcher fu = FUSED.matcher(name);
            if (pe.matches()) {
                TensorInfo t = requireFloat(ckpt, name, 2);
                String group = pe.group(1) != null ? pe.group(1) : pe.group(4);
                int rows = Math.toIntExact(t.shape().get(0));
                int cols = Math.toIntExact(t.shape().get(1));
                String base = name.substring(0, name.length() - ".weight".length());
                String proj = pe.group(3) != null ? pe.group(3) : pe.group(6);
                straddle |= format.blockScale().blockRows() && !proj.equals("down_proj") && !proj.equals("w2") && rows % 128 != 0;
                checkBlocks(ckpt, name, format, cols);
                RowSource src = rows(ckpt.data(name), t.dtype(), 0, 0, cols, 1);
                jobs.add(new Job(jobs.size(), name, name, (x, n, k) -> new long[] {n, k}, ckpt.fileOf(name).path(), group,
                        src, 1, rows, cols, ExpertTensors.perExpert(format, base, rows, cols)));
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
            throw new IllegalArgumentException("--in " + ckpt.dir() + ": no routed expert weights to quantise (looked for "
                    + "*.mlp.experts.<e>.(gate_proj|up_proj|down_proj).weight, *.block_sparse_moe.experts.<e>.(w1|w3|w2).weight "
                    + "and *.mlp.experts.(gate_up_proj|down_proj))");
        }
        Set<String> copied = new HashSet<>(copies);
        for (Job j : jobs) {
            for (ExpertTensors.Entry e : j.outputs) {
                if (!outputNames.add(e.name()) || copied.contains(e.name())) {
                    throw new CheckpointException(ckpt.dir() + ": tensor '" + e.name() + "' (quantised from '" + j.label
                            + "') would clash with a tensor of the same name in the input or another output");
                }
            }
        }
        if (straddle) {
            log.println("note: " + format.text() + " gate/up weights with I % 128 != 0: CheckpointExperts cannot fuse them"
                    + " (a 128-row scale block would straddle gate and up)");
        }

        // Output order: input name order, each quantised weight's tensors together.
        List<Runnable> adds = new ArrayList<>();
        int total = copies.size() + jobs.stream().mapToInt(j -> j.outputs.size()).sum();
        ProgressBarBuilder bar = new ProgressBarBuilder().setTaskName("quantize " + format.text()).setInitialMax(total)
                .setUnit(" tensors", 1).setStyle(ProgressBarStyle.ASCII).continuousUpdate().setUpdateIntervalMillis(250);
        long after = 0;
        long copiedBytes = 0;
        int tensorsWritten = 0;
        List<Path> written;
        try (ProgressBar pb = progress && System.console() != null ? bar.build() : null) {
            for (Object item : items) {
                if (item instanceof String name) {
                    TensorInfo t = ckpt.tensor(name);
                    writer.add(name, t.dtype(), t.shape(), () -> {
                        step(pb);
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
                        step(pb);
                        return MemorySegment.ofArray(bytes);
                    });
                    after += e.byteSize();
                    tensorsWritten++;
                }
            }
            written = writeStaged(writer, outDir);
        }
        int files = copyOtherFiles(ckpt.dir(), outDir, format, log);
        return new Summary(expertTensors, tensorsWritten, before, after, copies.size(), copiedBytes, files, written);
    }

    private static final Pattern OWN_FILES = Pattern.compile(
            "model(-\\d+-of-\\d+)?\\.safetensors|" + Pattern.quote(Checkpoint.INDEX_FILE));

    /**
     * Writes into a hidden folder inside {@code outDir} and moves the files into place only once all
     * are written, so a failure half way (a NaN weight) leaves no partial checkpoint behind. Files of
     * an earlier checkpoint in {@code outDir} that this one does not replace are deleted.
     */
    private static List<Path> writeStaged(CheckpointWriter writer, Path outDir) throws IOException {
        Files.createDirectories(outDir);
        Path staging = Files.createTempDirectory(outDir, ".quantize-");
        try {
            List<Path> staged = writer.write(staging);
            Set<String> names = new HashSet<>();
            List<Path> written = new ArrayList<>();
            for (Path p : staged) {
                Path target = outDir.resolve(p.getFileName());
                Files.move(p, target, StandardCopyOption.REPLACE_EXISTING);
                names.add(p.getFileName().toString());
                written.add(target);
            }
            try (DirectoryStream<Path> ds = Files.newDirectoryStream(outDir, p -> Files.isRegularFile(p)
                    && OWN_FILES.matcher(p.getFileName().toString()).matches() && !names.contains(p.getFileName().toString()))) {
                for (Path stale : ds) {
                    Files.delete(stale);
                }
            }
            return written;
        } finally {
            try (var files = Files.list(staging)) {
                for (Path p : files.toList()) {
                    Files.deleteIfExists(p);
                }
            }
            Files.deleteIfExists(staging);
        }
    }

    private static void step(ProgressBar pb) {
        if (pb != null) {
            pb.step();
        }
    }

    /** Plans the jobs of the fused pair {@code prefix.gate_up_proj} + {@code prefix.down_proj}; returns their input bytes. */
    private static long fused(Checkpoint ckpt, String prefix, WeightFormat format, List<Job> jobs) {
        String guName = prefix + ".gate_up_proj";
        String dnName = prefix + ".down_proj";
        for (String n : List.of(guName, dnName)) {
            if (ckpt.find(n).isEmpty()) {
                String other = n.equals(guName) ? dnName : guName;
                throw new CheckpointException(ckpt.fileOf(other).path() + ": tensor '" + other + "': fused experts need '"
                        + n + "' beside it, which is not in this checkpoint");
            }
        }
        TensorInfo gu = requireFloat(ckpt, guName, 3);
        TensorInfo dn = requireFloat(ckpt, dnName, 3);
        int e = Math.toIntExact(gu.shape().get(0));
        int a = Math.toIntExact(gu.shape().get(1));
        int b = Math.toIntExact(gu.shape().get(2));
        int c = Math.toIntExact(dn.shape().get(1));
        int d = Math.toIntExact(dn.shape().get(2));
        Path guFile = ckpt.fileOf(guName).path();
        Path dnFile = ckpt.fileOf(dnName).path();
        if (dn.shape().get(0) != e) {
            throw new CheckpointException(dnFile + ": tensor '" + dnName + "': " + dn.shape().get(0) + " experts, but '"
                    + guName + "' has " + e);
        }
        MemorySegment guData = ckpt.data(guName);
        MemorySegment dnData = ckpt.data(dnName);
        if (a == 2 * d && b == c) {  // [E, 2I, H] + [E, H, I]: split into the per-expert names
            int i = d;
            int h = b;
            checkBlocks(ckpt, guName, format, h);
            checkBlocks(ckpt, dnName, format, i);
            for (int x = 0; x < e; x++) {
                String base = prefix + "." + x + ".";
                long guBase = (long) x * a * b;
                int expert = x;
                jobs.add(new Job(jobs.size(), guName + " (expert " + x + ", gate rows 0.." + (i - 1) + ")", guName,
                        (ignored, n, k) -> new long[] {expert, n, k}, guFile, prefix,
                        rows(guData, gu.dtype(), guBase, 0, h, 1), 1, i, h,
                        ExpertTensors.perExpert(format, base + "gate_proj", i, h)));
                jobs.add(new Job(jobs.size(), guName + " (expert " + x + ", up rows " + i + ".." + (2 * i - 1) + ")", guName,
                        (ignored, n, k) -> new long[] {expert, i + n, k}, guFile, prefix,
                        rows(guData, gu.dtype(), guBase + (long) i * h, 0, h, 1), 1, i, h,
                        ExpertTensors.perExpert(format, base + "up_proj", i, h)));
            }
            for (int x = 0; x < e; x++) {
                int expert = x;
                jobs.add(new Job(jobs.size(), dnName + " (expert " + x + ")", dnName, (ignored, n, k) -> new long[] {expert, n, k},
                        dnFile, prefix, rows(dnData, dn.dtype(), (long) x * c * d, 0, i, 1), 1, h, i,
                        ExpertTensors.perExpert(format, prefix + "." + x + ".down_proj", h, i)));
            }
        } else if (b == 2 * c && a == d) {  // gpt-oss [E, H, 2I] + [E, I, H], gate/up interleaved
            if (!(format instanceof WeightFormat.Mxfp4)) {
                throw new IllegalArgumentException("--format " + format.text() + ": the gpt-oss fused experts '" + guName
                        + "' " + gu.shape() + " (transposed, gate/up interleaved) in " + guFile
                        + " can be quantised only to mxfp4, gpt-oss's own _blocks/_scales layout");
            }
            int h = a;
            int i = c;
            checkBlocks(ckpt, guName, format, h);
            checkBlocks(ckpt, dnName, format, i);
            // output row n, input column k of expert x is stored at [x][k][n]
            StoredIndex transposed = (x, n, k) -> new long[] {x, k, n};
            jobs.add(new Job(jobs.size(), guName, guName, transposed, guFile, prefix,
                    rows(guData, gu.dtype(), 0, (long) h * 2 * i, 1, 2 * i),
                    e, 2 * i, h, ExpertTensors.gptOssMxfp4(prefix, "gate_up_proj", e, 2 * i, h)));
            jobs.add(new Job(jobs.size(), dnName, dnName, transposed, dnFile, prefix,
                    rows(dnData, dn.dtype(), 0, (long) i * h, 1, h),
                    e, h, i, ExpertTensors.gptOssMxfp4(prefix, "down_proj", e, h, i)));
        } else {
            throw new CheckpointException(dnFile + ": tensor '" + dnName + "' " + dn.shape() + " does not pair with '" + guName
                    + "' " + gu.shape() + ": need [E, 2I, H] with [E, H, I], or gpt-oss's [E, H, 2I] with [E, I, H]");
        }
        return gu.byteSize() + dn.byteSize();
    }

    /** Rows of a float tensor: element (e, n, k) at {@code base + e*expertStride + n*rowStride + k*colStride}. */
    private static RowSource rows(MemorySegment data, SafetensorsDType dt, long base, long expertStride, long rowStride,
                                  long colStride) {
        return (e, n, out) -> {
            long start = base + e * expertStride + n * rowStride;
            for (int k = 0; k < out.length; k++) {
                long i = start + k * colStride;
                out[k] = switch (dt) {
                    case BF16 -> Bf16.toFloat(data.get(I16_LE, 2 * i));
                    case F16 -> Float.float16ToFloat(data.get(I16_LE, 2 * i));
                    case F32 -> data.get(F32_LE, 4 * i);
                    default -> throw new IllegalStateException(dt.toString());
                };
            }
        };
    }

    private static TensorInfo requireFloat(Checkpoint ckpt, String name, int dims) {
        TensorInfo t = ckpt.tensor(name);
        Path file = ckpt.fileOf(name).path();
        if (t.dtype() != SafetensorsDType.BF16 && t.dtype() != SafetensorsDType.F16 && t.dtype() != SafetensorsDType.F32) {
            throw new CheckpointException(file + ": tensor '" + name + "': dtype " + t.dtype()
                    + "; quantize reads BF16, F16 or F32 expert weights (is the checkpoint already quantised?)");
        }
        if (t.shape().size() != dims) {
            throw new CheckpointException(file + ": tensor '" + name + "': shape " + t.shape() + "; expected " + dims
                    + "-D " + (dims == 2 ? "[out, in]" : "[E, out, in]"));
        }
        return t;
    }

    /** Refuses, before anything is written, rows that are not whole blocks of the format. */
    private static void checkBlocks(Checkpoint ckpt, String name, WeightFormat format, int cols) {
        WeightFormat.BlockScale bs = format.blockScale();
        int block = bs.blockRows() ? 0 : bs.block();
        if (format.element().bits() == 4 && cols % 2 != 0) {
            block = 2;
        }
        if (block > 0 && cols % block != 0) {
            throw new CheckpointException(ckpt.fileOf(name).path() + ": tensor '" + name + "': rows of " + cols
                    + " elements are not whole blocks of " + block + " (" + format.text() + ")");
        }
    }

    // ---------------------------------------------------------------- other files

    /** Copies the top-level files other than safetensors; config.json gets a quantization_config. Returns the count. */
    private static int copyOtherFiles(Path inDir, Path outDir, WeightFormat format, PrintWriter log) throws IOException {
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
                log.println("note: skipped the folder " + name + "/ (only top-level files are copied)");
                continue;
            }
            if (!Files.isRegularFile(p)) {
                continue;
            }
            if (name.equals("config.json")) {
                writeConfig(p, outDir.resolve(name), format, log);
            } else {
                Files.copy(p, outDir.resolve(name), StandardCopyOption.REPLACE_EXISTING);
            }
            n++;
        }
        if (!Files.exists(inDir.resolve("config.json"))) {
            log.println("note: " + inDir + " has no config.json; no quantization_config written");
        }
        return n;
    }

    /** Decimals kept as written (1e-06 stays 0.000001, not 1.0E-6). */
    private static final ObjectMapper JSON = JsonMapper.builder()
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .nodeFactory(JsonNodeFactory.withExactBigDecimals(true))
            .build();

    /** The quantization_config MoeForge adds to config.json. */
    static ObjectNode quantizationConfig(WeightFormat format) {
        ObjectNode q = JSON.createObjectNode();
        q.put("quant_method", "moeforge");
        q.put("format", format.text());
        q.put("modules", "routed experts");
        q.putObject("producer").put("name", "moeforge").put("version", "0.1.0");
        return q;
    }

    private static void writeConfig(Path from, Path to, WeightFormat format, PrintWriter log) throws IOException {
        JsonNode root;
        try {
            root = JSON.readTree(from.toFile());
        } catch (IOException e) {
            throw new IOException(from + ": cannot read as JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof ObjectNode config)) {
            throw new IOException(from + ": not a JSON object");
        }
        if (config.has("quantization_config")) {
            log.println("note: replacing the quantization_config of " + from + ": " + config.get("quantization_config"));
        }
        config.set("quantization_config", quantizationConfig(format));
        // transformers' layout: json.dumps(indent=2), "key": value
        DefaultPrettyPrinter pretty = new DefaultPrettyPrinter()
                .withSeparators(Separators.createDefaultInstance().withObjectFieldValueSpacing(Separators.Spacing.AFTER))
                .withObjectIndenter(new DefaultIndenter("  ", "\n"));
        Files.writeString(to, JSON.writer(pretty).writeValueAsString(config) + "\n");
    }

    static String human(long bytes) {
        if (bytes < 1000) {
            return bytes + " B";
        }
        String[] units = {"kB", "MB", "GB", "TB"};
        double v = bytes;
        int u = -1;
        while (v >= 1000 && u < units.length - 1) {
            v /= 1000;
            u++;
        }
        return String.format(Locale.ROOT, "%.2f %s", v, units[u]);
    }
}
