package dev.moeforge.examples.cli;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointException;
import dev.moeforge.checkpoint.Quantizer;
import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;
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
 * {@code moeforge quantize}: the command line of {@link Quantizer}, which converts the routed expert
 * weights of a BF16/F16/F32 checkpoint to one {@link WeightFormat} and writes a new checkpoint. This
 * class parses and checks the options, shows a progress bar on a terminal and prints the summary.
 */
@Command(name = "quantize", mixinStandardHelpOptions = true,
        description = "Quantises the routed expert weights of a BF16/F16/F32 Hugging Face checkpoint to one weight "
                + "format (reference quantiser) and writes a new checkpoint: other tensors and files copied unchanged, "
                + "quantization_config added to config.json.")
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
            description = "Output folder (created if missing; must not be --in).")
    Path out;

    @Option(names = "--shard-size", defaultValue = "5GB", paramLabel = "SIZE",
            description = "Largest shard: bytes, or a number with kB, MB, GB (powers of 1000) or KiB, MiB, GiB "
                    + "(default: ${DEFAULT-VALUE}, as transformers).")
    String shardSize;

    @Override
    public Integer call() throws Exception {
        WeightFormat f = parseFormat(format);
        long maxShard = parseSize(shardSize);
        PrintWriter stdout = spec == null ? new PrintWriter(System.out, true) : spec.commandLine().getOut();
        Quantizer.Summary s = run(in, f, out, maxShard, stdout);
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

    /** Checks --in and --out, then quantises, with notes and the progress bar on {@code log}. */
    static Quantizer.Summary run(Path inDir, WeightFormat format, Path outDir, long maxShardBytes, PrintWriter log)
            throws IOException {
        if (!Files.isDirectory(inDir)) {
            throw new IllegalArgumentException("--in " + inDir + ": not a directory");
        }
        if (Quantizer.sameFolder(inDir, outDir)) {
            throw new IllegalArgumentException("--out " + outDir + ": is the input folder; write the converted checkpoint elsewhere");
        }
        Checkpoint ckpt;
        try {
            ckpt = Checkpoint.open(inDir);
        } catch (CheckpointException e) {
            throw new IllegalArgumentException("--in " + inDir + ": not a readable checkpoint: " + e.getMessage(), e);
        }
        try (ckpt; Progress progress = new Progress(format, log)) {
            return Quantizer.quantize(ckpt, format, outDir, maxShardBytes, progress);
        }
    }

    /** Prints the notes, and shows a progress bar while the tensors are written when there is a terminal. */
    private static final class Progress implements Quantizer.Listener, AutoCloseable {
        private final WeightFormat format;
        private final PrintWriter log;
        private ProgressBar bar;

        Progress(WeightFormat format, PrintWriter log) {
            this.format = format;
            this.log = log;
        }

        @Override
        public void note(String message) {
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
