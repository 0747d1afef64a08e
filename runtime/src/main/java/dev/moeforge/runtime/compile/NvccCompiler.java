package dev.moeforge.runtime.compile;

import dev.moeforge.dsl.ir.Target;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Compiles {@link CudaSource}s to cubins by running nvcc as a subprocess. (JCuda's NVRTC binding
 * does not load against the CUDA 13 driver on our GPU hosts, and the subprocess also gives us
 * ptxas's resource report.)
 *
 * <p>Each compile runs in a fresh temporary directory that is deleted afterwards, so concurrent
 * compiles do not interfere. Instances are thread-safe.
 */
public class NvccCompiler {

    /** How long one nvcc run may take before it is killed. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofMinutes(10);

    private static final Logger LOG = Logger.getLogger(NvccCompiler.class.getName());
    private static final Path CUDA_DEFAULT = Path.of("/usr/local/cuda/bin/nvcc");
    private static final int MAX_DIAGNOSTICS = 20;
    private static final int CONTEXT_LINES = 2;

    /** cudafe/cicc style: {@code kernel.cu(12): error: identifier "x" is undefined}. */
    private static final Pattern NVCC_DIAGNOSTIC =
            Pattern.compile("^(\\S+?)\\((\\d+)\\): ((?:catastrophic )?error): (.*)$", Pattern.MULTILINE);
    /** Host preprocessor style: {@code kernel.cu:1:10: fatal error: missing.cuh: No such file or directory}. */
    private static final Pattern GCC_DIAGNOSTIC =
            Pattern.compile("^(\\S+?):(\\d+):\\d+: ((?:fatal )?error): (.*)$", Pattern.MULTILINE);

    private final Path executable;
    private final Duration timeout;
    private volatile String version;

    /** Uses the nvcc found by {@link #locate()} and {@link #DEFAULT_TIMEOUT}. */
    public NvccCompiler() {
        this(locate().orElseThrow(() -> new IllegalStateException(
                "nvcc not found: set MOEFORGE_NVCC, put nvcc on PATH or install it at " + CUDA_DEFAULT)), DEFAULT_TIMEOUT);
    }

    public NvccCompiler(Path executable, Duration timeout) {
        this.executable = executable;
        this.timeout = timeout;
    }

    /**
     * Finds nvcc: the path in env {@code MOEFORGE_NVCC} if set (taken as given, so a wrong setting
     * fails loudly instead of silently using another toolkit), else {@code nvcc} on {@code PATH},
     * else {@code /usr/local/cuda/bin/nvcc}.
     */
    public static Optional<Path> locate() {
        String configured = System.getenv("MOEFORGE_NVCC");
        if (configured != null && !configured.isBlank()) {
            return Optional.of(Path.of(configured));
        }
        String path = System.getenv("PATH");
        if (path != null) {
            for (String dir : path.split(java.io.File.pathSeparator)) {
                if (!dir.isEmpty()) {
                    Path candidate = Path.of(dir, "nvcc");
                    if (Files.isExecutable(candidate)) {
                        return Optional.of(candidate);
                    }
                }
            }
        }
        return Files.isExecutable(CUDA_DEFAULT) ? Optional.of(CUDA_DEFAULT) : Optional.empty();
    }

    public Path executable() {
        return executable;
    }

    /** The release line of {@code nvcc --version}, e.g. {@code Cuda compilation tools, release 13.0, V13.0.88}. */
    public String version() {
        String v = version;
        if (v == null) {
            v = queryVersion();
            version = v;
        }
        return v;
    }

    private String queryVersion() {
        List<String> command = List.of(executable.toString(), "--version");
        Path out = null;
        try {
            out = Files.createTempFile("moeforge-nvcc-version-", ".txt");
            int exit = run(command, out.getParent(), out, Duration.ofMinutes(1));
            String text = readLog(out);
            return text.lines().filter(l -> l.contains("release")).findFirst().map(String::strip)
                    .orElseThrow(() -> new CompileFailure("nvcc --version (exit " + exit
                            + ") printed no release line:\n" + text, command, text, null));
        } catch (IOException e) {
            throw new CompileFailure("cannot run " + shellLine(command) + ": " + e.getMessage(), command, "", e);
        } finally {
            if (out != null) {
                deleteRecursively(out);
            }
        }
    }

    /** nvcc's options for {@code target}, without input and output: part of the kernel cache key. */
    public List<String> flags(Target target) {
        return List.of("-cubin", "-gencode=arch=" + target.virtualArch() + ",code=" + target.text(),
                "-O3", "-std=c++17", "-Xptxas", "-v", "-lineinfo");
    }

    /**
     * Compiles {@code source} for {@code target}.
     *
     * @throws CompileFailure if nvcc reports errors, exceeds the timeout or cannot be started
     */
    public CompileResult compile(CudaSource source, Target target) {
        String cubinName = source.fileName().substring(0, source.fileName().length() - ".cu".length()) + ".cubin";
        List<String> command = new ArrayList<>();
        command.add(executable.toString());
        command.addAll(flags(target));
        command.addAll(List.of("-o", cubinName, source.fileName()));

        Path dir = null;
        try {
            dir = Files.createTempDirectory("moeforge-nvcc-");
            // Sources get a folder of their own, so no header name can collide with the log file.
            Path src = Files.createDirectory(dir.resolve("src"));
            for (Map.Entry<String, String> header : source.headers().entrySet()) {
                Path file = src.resolve(header.getKey());
                Files.createDirectories(file.getParent());
                Files.writeString(file, header.getValue());
            }
            Files.writeString(src.resolve(source.fileName()), source.code());
            Path logFile = dir.resolve("nvcc-output.txt");

            int exit;
            try {
                exit = run(command, src, logFile, timeout);
            } catch (TimeoutException e) {
                throw new CompileFailure("nvcc timed out after " + timeout + " compiling " + source.fileName()
                        + " for " + target.text() + "\ncommand: " + repro(src, command) + specSection(source),
                        command, readLog(logFile), null);
            }
            String log = readLog(logFile);
            Path cubin = src.resolve(cubinName);
            if (exit != 0 || !Files.isRegularFile(cubin)) {
                throw new CompileFailure(failureMessage(source, target, command, src, log, exit), command, log, null);
            }
            return new CompileResult(Files.readAllBytes(cubin), PtxasReport.parse(log), log, command);
        } catch (IOException e) {
            throw new CompileFailure("cannot run nvcc for " + source.fileName() + ": " + e.getMessage()
                    + "\ncommand: " + shellLine(command), command, "", e);
        } finally {
            if (dir != null) {
                deleteRecursively(dir);
            }
        }
    }

    /** Raised inside {@link #run} so timeouts are reported with the caller's context. */
    private static final class TimeoutException extends IOException {
        TimeoutException() {
            super("timed out");
        }
    }

    /**
     * Runs {@code command} in {@code workDir} with stdout and stderr merged into {@code output}:
     * a file, not a pipe, so nvcc can never block on a full pipe while we wait for it.
     */
    private static int run(List<String> command, Path workDir, Path output, Duration limit) throws IOException {
        Process process = new ProcessBuilder(command)
                .directory(workDir.toFile())
                .redirectErrorStream(true)
                .redirectOutput(output.toFile())
                .start();
        try {
            if (!process.waitFor(limit.toMillis(), TimeUnit.MILLISECONDS)) {
                kill(process);
                throw new TimeoutException();
            }
            return process.exitValue();
        } catch (InterruptedException e) {
            kill(process);
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while waiting for nvcc", e);
        }
    }

    /** nvcc forks cicc and ptxas; kill those too so nothing keeps writing into the temp dir. */
    private static void kill(Process process) {
        process.descendants().forEach(ProcessHandle::destroyForcibly);
        process.destroyForcibly();
        try {
            process.waitFor(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String failureMessage(CudaSource source, Target target, List<String> command, Path workDir,
                                         String log, int exit) {
        Map<String, String> files = new TreeMap<>(source.headers());
        files.put(source.fileName(), source.code());

        StringBuilder msg = new StringBuilder();
        msg.append("nvcc failed (exit ").append(exit).append(") compiling ").append(source.fileName())
                .append(" for ").append(target.text()).append('\n');
        msg.append("command: ").append(repro(workDir, command)).append('\n');

        List<Diagnostic> diagnostics = new ArrayList<>();
        for (Pattern p : List.of(NVCC_DIAGNOSTIC, GCC_DIAGNOSTIC)) {
            for (Matcher m = p.matcher(log); m.find(); ) {
                diagnostics.add(new Diagnostic(m.start(), m.group(1), Integer.parseInt(m.group(2)), m.group(3), m.group(4)));
            }
        }
        if (diagnostics.isEmpty()) {
            msg.append("nvcc output:\n").append(log.strip()).append('\n');
        }
        diagnostics.sort(Comparator.comparingInt(Diagnostic::position));
        for (Diagnostic d : diagnostics.subList(0, Math.min(diagnostics.size(), MAX_DIAGNOSTICS))) {
            msg.append('\n').append(d.file()).append('(').append(d.line()).append("): ").append(d.kind())
                    .append(": ").append(d.message()).append('\n');
            // nvcc names files as it opened them, relative to the work dir; map back to our sources.
            Path resolved = workDir.resolve(d.file()).normalize();
            String text = resolved.startsWith(workDir) ? files.get(workDir.relativize(resolved).toString()) : null;
            if (text != null) {
                msg.append(excerpt(text, d.line()));
            }
        }
        if (diagnostics.size() > MAX_DIAGNOSTICS) {
            msg.append("\n... ").append(diagnostics.size() - MAX_DIAGNOSTICS).append(" more errors\n");
        }
        return msg.append(specSection(source)).toString();
    }

    private record Diagnostic(int position, String file, int line, String kind, String message) {
    }

    /** Lines {@code line-2 .. line+2} of {@code text}, numbered, with {@code >} on {@code line}. */
    static String excerpt(String text, int line) {
        List<String> lines = text.lines().toList();
        int from = Math.max(1, line - CONTEXT_LINES);
        int to = Math.min(lines.size(), line + CONTEXT_LINES);
        int width = String.valueOf(Math.max(to, 1)).length();
        StringBuilder b = new StringBuilder();
        for (int n = from; n <= to; n++) {
            b.append(n == line ? "  > " : "    ")
                    .append(String.format("%" + width + "d", n)).append(" | ").append(lines.get(n - 1)).append('\n');
        }
        return b.toString();
    }

    private static String specSection(CudaSource source) {
        if (source.specText().isBlank()) {
            return "";
        }
        return "\nspec:\n" + source.specText().lines().map(l -> "  " + l).collect(Collectors.joining("\n")) + '\n';
    }

    /** The command as a shell line that can be pasted (the directory is removed after the run). */
    private static String repro(Path workDir, List<String> command) {
        return "cd " + shellQuote(workDir.toString()) + " && " + shellLine(command);
    }

    private static String shellLine(List<String> command) {
        return command.stream().map(NvccCompiler::shellQuote).collect(Collectors.joining(" "));
    }

    private static String shellQuote(String arg) {
        return arg.matches("[A-Za-z0-9_./=,:+@%-]+") ? arg : "'" + arg.replace("'", "'\\''") + "'";
    }

    /** nvcc's output is ASCII in practice; decoding leniently keeps a stray byte from hiding the errors. */
    private static String readLog(Path file) throws IOException {
        return new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
    }

    private static void deleteRecursively(Path root) {
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | UncheckedIOException e) {
            LOG.log(Level.WARNING, "cannot delete nvcc build directory " + root, e);
        }
    }
}
