package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.Quantizer;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge quantize}: the command line of {@link Quantizer}, which converts the routed expert
 * weights of a BF16/F16/F32 checkpoint to one {@link WeightFormat} and writes a new checkpoint. This
 * class parses and checks the options, shows a progress bar on a terminal, prints the summary (or, in
 * a dry run, the plan) and writes it as JSON if asked.
 */
@Command(name = "quantize", mixinStandardHelpOptions = true,
        description = "Quantises the routed expert weights of a BF16/F16/F32 Hugging Face checkpoint to one weight "
                + "format (reference quantiser) and writes a new checkpoint: other tensors and files copied unchanged, "
                + "quantization_config added to config.json. Everything is checked before anything is written; the "
                + "output is staged beside --out and moved into place only once complete.")
public final class QuantizeCommand implements Callable<Integer> {

    /** {@link WeightFormat#ALL}'s names, for the help (a test checks they agree). */
    static final String ALLOWED = "bf16, fp8_e4m3_channel, fp8_e4m3_block128, mxfp8, nvfp4, mxfp4, int8_channel, "
            + "int8_group128, int4_channel, int4_group128";

    @Spec
    CommandSpec spec;

    @Option(names = "--in", required = true, paramLabel = "DIR",
            description = "Input checkpoint: a folder with model.safetensors, or shards and model.safetensors.index.json.")
    Path in;

    @Option(names = "--format", required = true, paramLabel = "FORMAT",
            description = "Format of the routed experts; allowed: " + ALLOWED + ".")
    String format;

    @Option(names = "--out", required = true, paramLabel = "DIR",
            description = "Output folder: new or empty (created if missing; must not be --in), or any folder with --force.")
    Path out;

    @Option(names = "--force",
            description = "Write into a non-empty --out: files of the same name are replaced, the shards and index of an "
                    + "earlier checkpoint there deleted, other files kept.")
    boolean force;

    @Option(names = "--dry-run",
            description = "Check everything and print what would be written (tensors, formats, bytes before and after, "
                    + "files), writing nothing. The weights are not read, so a non-finite one is found only by a real run.")
    boolean dryRun;

    @Option(names = "--json", paramLabel = "FILE",
            description = "Also write the summary (with --dry-run, the plan) as JSON to FILE.")
    Path json;

    @Option(names = "--shard-size", defaultValue = "5GB", paramLabel = "SIZE",
            description = "Largest shard: bytes, or a number with kB, MB, GB (powers of 1000) or KiB, MiB, GiB; "
                    + "1 byte to 2^63-1 bytes (default: ${DEFAULT-VALUE}, as transformers).")
    String shardSize;

    @Override
    public Integer call() throws Exception {
        WeightFormat f = parseFormat("--format", format);
        long maxShard = parseSize(shardSize);
        if (json != null && Files.isDirectory(json)) {
            throw new IllegalArgumentException("--json " + json + ": is a directory; name the JSON file to write");
        }
        // A dry run writes nothing into --out, not even the plan: it would make --out non-empty for the real run.
        if (json != null && dryRun && json.toAbsolutePath().normalize().startsWith(out.toAbsolutePath().normalize())) {
            throw new IllegalArgumentException("--json " + json + ": is inside --out " + out + ", which a dry run leaves "
                    + "untouched; write the plan elsewhere");
        }
        PrintWriter stdout = spec == null ? new PrintWriter(System.out, true) : spec.commandLine().getOut();
        List<String> notes = new ArrayList<>();
        Quantizer.Summary s = run(in, f, out, new Quantizer.Options(maxShard, force, dryRun), stdout, notes);
        if (s.dryRun()) {
            printPlan(s, f, stdout);
        }
        String would = s.dryRun() ? "would " : "";
        stdout.printf(Locale.ROOT, "%s%s %d routed expert tensors to %s as %d tensors: %s -> %s (%.2fx)%n",
                would, s.dryRun() ? "quantise" : "quantised", s.expertTensors(), f.text(), s.tensorsWritten(),
                human(s.expertBytesBefore()), human(s.expertBytesAfter()), ratio(s));
        long shards = s.files().stream().filter(x -> x.kind() == Quantizer.OutputFile.Kind.SHARD).count();
        stdout.printf(Locale.ROOT, "%s%s %d other tensors unchanged (%s) and %d other files; checkpoint %s -> %s in %d %s in %s%n",
                would, s.dryRun() ? "copy" : "copied", s.copiedTensors(), human(s.copiedBytes()), s.copiedFiles(),
                human(s.expertBytesBefore() + s.copiedBytes()), human(s.expertBytesAfter() + s.copiedBytes()),
                shards, shards == 1 ? "file" : "shards", out);
        if (json != null) {
            writeJson(json, s, f, maxShard, notes);
            stdout.println((s.dryRun() ? "plan" : "summary") + " written to " + json);
        }
        stdout.flush();
        return 0;
    }

    private static double ratio(Quantizer.Summary s) {
        return s.expertBytesAfter() == 0 ? 0.0 : (double) s.expertBytesBefore() / s.expertBytesAfter();
    }

    /** The dry run's account: each input tensor and what it becomes, then the files. */
    private void printPlan(Quantizer.Summary s, WeightFormat f, PrintWriter stdout) {
        stdout.println("dry run: nothing written; the weights are not read, so a non-finite one would only stop a real run");
        stdout.println("tensors, in the order written:");
        Quantizer.Source current = null;
        for (Quantizer.OutputTensor t : s.tensors()) {
            Quantizer.Source src = t.source();
            if (!src.quantised()) {
                stdout.printf(Locale.ROOT, "  copy %s %s %s (%d bytes)%n", t.name(), t.dtype(), t.shape(), t.bytes());
                current = null;
                continue;
            }
            if (!src.equals(current)) {
                stdout.printf(Locale.ROOT, "  quantise %s %s %s (%d bytes) to %s:%n", src.label(), src.dtype(), src.shape(),
                        src.byteSize(), f.text());
                current = src;
            }
            stdout.printf(Locale.ROOT, "    %s %s %s (%d bytes)%n", t.name(), t.dtype(), t.shape(), t.bytes());
        }
        stdout.println("files in " + out + ":");
        for (Quantizer.OutputFile file : s.files()) {
            String what = switch (file.kind()) {
                case SHARD -> ", " + file.tensors() + " tensors";
                case INDEX -> ", the shards' index";
                case CONFIG -> ", copied with a quantization_config";
                case COPY -> ", copied";
            };
            stdout.printf(Locale.ROOT, "  %s (%d bytes%s)%n", file.name(), file.bytes(), what);
        }
    }

    /** The summary as JSON: the counts and bytes, every tensor with its source, every file, and the notes. */
    private void writeJson(Path file, Quantizer.Summary s, WeightFormat f, long maxShard, List<String> notes) throws IOException {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("dry_run", s.dryRun());
        doc.put("in", in.toAbsolutePath().normalize().toString());
        doc.put("out", out.toAbsolutePath().normalize().toString());
        doc.put("format", f.text());
        doc.put("max_shard_bytes", maxShard);
        doc.put("force", force);
        doc.put("expert_tensors", s.expertTensors());
        doc.put("tensors_written", s.tensorsWritten());
        doc.put("expert_bytes_before", s.expertBytesBefore());
        doc.put("expert_bytes_after", s.expertBytesAfter());
        doc.put("compression", ratio(s));
        doc.put("copied_tensors", s.copiedTensors());
        doc.put("copied_bytes", s.copiedBytes());
        doc.put("copied_files", s.copiedFiles());
        doc.put("checkpoint_bytes_before", s.expertBytesBefore() + s.copiedBytes());
        doc.put("checkpoint_bytes_after", s.expertBytesAfter() + s.copiedBytes());
        List<Map<String, Object>> files = new ArrayList<>();
        for (Quantizer.OutputFile x : s.files()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", x.name());
            m.put("kind", x.kind().name().toLowerCase(Locale.ROOT));
            m.put("bytes", x.bytes());
            if (x.kind() == Quantizer.OutputFile.Kind.SHARD) {
                m.put("tensors", x.tensors());
            }
            files.add(m);
        }
        doc.put("files", files);
        List<Map<String, Object>> tensors = new ArrayList<>();
        for (Quantizer.OutputTensor t : s.tensors()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", t.name());
            m.put("dtype", t.dtype().text());
            m.put("shape", t.shape());
            m.put("bytes", t.bytes());
            Quantizer.Source src = t.source();
            if (src.quantised()) {
                m.put("quantised_from", src.label());
                m.put("source_dtype", src.dtype().text());
                m.put("source_shape", src.shape());
            } else {
                m.put("copied", true);
            }
            tensors.add(m);
        }
        doc.put("tensors", tensors);
        doc.put("notes", notes);
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(file.toFile(), doc);
    }

    /** The weight format named by {@code text}, given as option {@code option}; refused with the formats there are. */
    static WeightFormat parseFormat(String option, String text) {
        try {
            return WeightFormat.fromText(text);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(option + " " + text + ": " + e.getMessage(), e);
        }
    }

    private static final Pattern SIZE = Pattern.compile("(\\d+(?:\\.\\d+)?)\\s*([kmgt]i?b|b)?", Pattern.CASE_INSENSITIVE);

    /** "5GB" = 5e9 bytes, "2GiB" = 2^31, "1000" = 1000 bytes; a fraction of a byte is dropped. */
    static long parseSize(String text) {
        Matcher m = SIZE.matcher(text.trim());
        if (!m.matches()) {
            throw new IllegalArgumentException("--shard-size " + text + ": expected bytes, or a number with kB, MB, GB, "
                    + "KiB, MiB or GiB, e.g. 5GB");
        }
        String unit = m.group(2) == null ? "b" : m.group(2).toLowerCase(Locale.ROOT);
        int power = "bkmgt".indexOf(unit.charAt(0));
        BigDecimal base = BigDecimal.valueOf(unit.contains("i") ? 1024 : 1000);
        // Exact arithmetic: a double would round, and a long would overflow, on sizes past 2^63.
        BigInteger bytes = new BigDecimal(m.group(1)).multiply(base.pow(power)).toBigInteger();
        if (bytes.signum() <= 0 || bytes.bitLength() >= Long.SIZE) {
            throw new IllegalArgumentException("--shard-size " + text + ": out of range; allowed: 1 byte to "
                    + Long.MAX_VALUE + " bytes (about 9.2 EB)");
        }
        return bytes.longValueExact();
    }

    /**
     * Checks --in and --out, then quantises (or, with {@code options.dryRun()}, plans), with notes and
     * the progress bar on {@code log}; the notes are also added to {@code notes}.
     */
    static Quantizer.Summary run(Path inDir, WeightFormat format, Path outDir, Quantizer.Options options, PrintWriter log,
                                 List<String> notes) throws IOException {
        if (!Files.isDirectory(inDir)) {
            throw new IllegalArgumentException("--in " + inDir + ": not a directory");
        }
        if (Quantizer.sameFolder(inDir, outDir)) {
            throw new IllegalArgumentException("--out " + outDir + ": is the input folder; write the converted checkpoint elsewhere");
        }
        if (Files.exists(outDir) && !Files.isDirectory(outDir)) {
            throw new IllegalArgumentException("--out " + outDir + ": not a directory; the quantised checkpoint is a folder");
        }
        if (Files.isDirectory(outDir) && !options.force()) {
            List<String> entries;
            try (Stream<Path> s = Files.list(outDir)) {
                entries = s.map(p -> p.getFileName().toString()).sorted().toList();
            }
            if (!entries.isEmpty()) {
                String shown = String.join(", ", entries.subList(0, Math.min(3, entries.size())))
                        + (entries.size() > 3 ? " and " + (entries.size() - 3) + " more" : "");
                throw new IllegalArgumentException("--out " + outDir + ": not empty (holds " + shown + "); pass --force to "
                        + "write the quantised checkpoint over what is there, or name a new or empty folder");
            }
        }
        Checkpoint ckpt;
        try {
            ckpt = Checkpoint.open(inDir);
        } catch (CheckpointException e) {
            throw new IllegalArgumentException("--in " + inDir + ": not a readable checkpoint: " + e.getMessage(), e);
        }
        try (ckpt; Progress progress = new Progress(format, log, notes)) {
            return Quantizer.quantize(ckpt, format, outDir, options, progress);
        }
    }

    /** Prints the notes, and shows a progress bar while the tensors are written when there is a terminal. */
    private static final class Progress implements Quantizer.Listener, AutoCloseable {
        private final WeightFormat format;
        private final PrintWriter log;
        private final List<String> notes;
        private ProgressBar bar;

        Progress(WeightFormat format, PrintWriter log, List<String> notes) {
            this.format = format;
            this.log = log;
            this.notes = notes;
        }

        @Override
        public void note(String message) {
            notes.add(message);
            log.println("note: " + message);
        }

        @Override
        public void writing(int tensors) {
            if (System.console() != null) {
                bar = new ProgressBarBuilder().setTaskName("quantize " + format.text()).setInitialMax(tensors)
                        .setUnit(" tensors", 1).setStyle(ProgressBarStyle.ASCII).continuousUpdate()
                        .setUpdateIntervalMillis(250).build();
            }
        }

        @Override
        public void tensorWritten() {
            if (bar != null) {
                bar.step();
            }
        }

        @Override
        public void tensorsWritten() {
            close();
        }

        @Override
        public void close() {
            if (bar != null) {
                bar.close();
                bar = null;
            }
        }
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
