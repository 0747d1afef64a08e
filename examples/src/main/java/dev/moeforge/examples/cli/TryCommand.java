package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge try}: the loop of a kernel author. Reads a .moe file, validates, generates and
 * compiles each kernel (through the cache), and runs each unit its kernels form (a layer, an
 * expert_mlp, a router, a lone half) on fresh random inputs against the FP64 CPU reference; with a
 * GPU it checks the device's outputs and times them against the catalogue's kernels for the same
 * function (and with {@code --sweep} against the schedule's neighbours).
 */
@Command(name = "try", mixinStandardHelpOptions = true,
        description = "Validates, generates and compiles the kernels of a .moe file (printing each one's registers, spills and "
                + "shared memory), runs them on random inputs against the FP64 CPU reference and, with a GPU, on the device: "
                + "each output's error and pass/fail, the graph-replayed time, and the catalogue's time for the same function. "
                + "Exit code 2 for invalid specs, 1 when a GPU output misses its tolerance.")
public final class TryCommand implements Callable<Integer> {
    private static final int WARMUP = 10;

    @Parameters(paramLabel = "FILE.moe", description = "The spec file: one or more kernels.")
    Path file;

    @Option(names = "--tokens", split = ",", defaultValue = "1,8", description = "Token counts to run (default: ${DEFAULT-VALUE}).")
    List<Integer> tokens;

    @Option(names = "--target", split = ",",
            description = "Targets to compile for (default: each kernel's own); allowed: sm_90a, sm_100a, sm_120a. With a GPU its "
                    + "target is added: the runs use it.")
    List<String> targets;

    @Option(names = "--reps", defaultValue = "100", description = "Timed graph replays (default: ${DEFAULT-VALUE}).")
    int reps;

    @Option(names = "--sweep", description = "Also run and time every neighbour of each kernel's schedule (the valid schedules "
            + "of the same kind with one parameter changed).")
    boolean sweep;

    @Option(names = "--json", paramLabel = "FILE", description = "Also write the results as JSON to FILE.")
    Path json;

    @Option(names = "--no-run", description = "Only parse and validate, and print the canonical form (as 'check' does).")
    boolean noRun;

    @Option(names = "--seed", description = "Seed of the random inputs (default: from the clock; printed).")
    Long seed;

    @Spec
    CommandSpec command;

    /** The kernels' cache (the default one; tests give their own). */
    KernelCache cache = KernelCache.defaultCache();

    @Override
    public Integer call() throws Exception {
        PrintWriter out = command.commandLine().getOut();
        for (int m : tokens) {
            if (m < 1) {
                throw new IllegalArgumentException("--tokens " + tokens + ": each token count at least 1, got " + m);
            }
        }
        if (reps < 1) {
            throw new IllegalArgumentException("--reps " + reps + ": at least 1");
        }
        List<Target> chosen = targets == null ? null : GenCommand.parseTargets(targets);
        if (json != null && json.toAbsolutePath().getParent() != null) {
            Files.createDirectories(json.toAbsolutePath().getParent());  // a path that cannot be written fails now, not after the runs
        }
        if (noRun) {
            CheckCommand.printCanonical(out, List.of(file));
            return 0;
        }
        List<KernelSpec> kernels = SpecFiles.read(List.of(file)).stream().map(SpecFiles.Located::spec).toList();
        long s = seed != null ? seed : System.nanoTime();
        Report report = new Report(file, s, tokens, reps);
        out.println(file + ": " + kernels.size() + (kernels.size() == 1 ? " kernel" : " kernels") + ", valid");
        if (!Gpu.available()) {
            run(out, kernels, chosen, null, s, report);
            out.println("Skipped, with no usable CUDA device here (" + Gpu.unavailableReason() + "): running the kernels on the "
                    + "device, their outputs' errors against the reference, their graph-replayed times and the catalogue's"
                    + (sweep ? ", and the schedule neighbours of --sweep" : "") + ".");
            report.gpuSkipped = Gpu.unavailableReason();
            report.write(json, out);
            return 0;
        }
        boolean pass;
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache)) {
            report.device = ctx.deviceName();
            report.runTarget = runtime.target().text();
            pass = run(out, kernels, chosen, new Device(ctx, stream, runtime), s, report);
        }
        report.write(json, out);
        return pass ? 0 : 1;
    }

    /** The GPU the units run on. */
    private record Device(CudaContext context, CudaStream stream, KernelRuntime runtime) {}

    /**
     * Compiles, prints the resources, and runs every unit, on {@code device} too where there is one (null: none); false
     * when a device output missed its tolerance.
     */
    private boolean run(PrintWriter out, List<KernelSpec> kernels, List<Target> chosen, Device device, long s, Report report)
            throws Exception {
        KernelRuntime runtime = device == null ? null : device.runtime();
        Set<KernelSpec> work = new LinkedHashSet<>();
        for (KernelSpec k : kernels) {
            for (Target t : chosen != null ? chosen : List.of(k.target())) {
                work.add(k.withTarget(t));
            }
            if (runtime != null) {
                work.add(k.withTarget(runtime.target()));
            }
        }
        out.println("1. Generating and compiling with nvcc (through the kernel cache " + cache.directory() + ")");
        List<KernelResources> resources = ParallelCompile.run(List.copyOf(work), 0, out, spec -> KernelResources.compile(spec, cache));
        int i = 0;
        for (KernelSpec k : work) {
            KernelResources r = resources.get(i++);
            out.println(r.line(k.name(), k.target().text()));
            report.kernel(k, r);
        }

        out.println(runtime == null
                ? "2. On random inputs (seed " + s + "), against the FP64 CPU reference"
                : "2. On " + device.context().deviceName() + " (" + runtime.target().text() + "), random inputs (seed " + s + "), outputs against "
                        + "the FP64 CPU reference, times graph-replayed (median of " + reps + ")");
        for (TrialUnit unit : TrialUnit.of(kernels)) {
            out.println("   " + unit.describe() + ": " + unit.name());
            List<TrialUnit> catalogue = runtime == null ? List.of() : unit.catalogueVariants(Catalogue.specs());
            List<TrialUnit> neighbours = runtime == null || !sweep ? List.of() : unit.neighbours(runtime.target());
            if (runtime != null) {
                if (catalogue.isEmpty()) {
                    out.println("     no catalogue kernel computes the same function (problem and epilogue) to compare with");
                }
                precompile(out, catalogue, neighbours, runtime.target());
            }
            for (int m : tokens) {
                if (m > unit.maxTokens()) {
                    out.println("     M=" + m + ": skipped, the kernels take at most " + unit.maxTokens() + " tokens");
                    continue;
                }
                long t0 = System.nanoTime();
                TrialUnit.Trial trial;
                try (Progress p = Progress.start(out, "     CPU reference", 0)) {
                    trial = unit.prepare(m, s);
                }
                double referenceMs = (System.nanoTime() - t0) / 1e6;
                Report.Run run = report.run(unit, m, referenceMs);
                out.printf(Locale.ROOT, "     M=%d: CPU reference (FP64) %.1f ms%s%n", m, referenceMs,
                        runtime == null ? "; GPU run skipped" : "");
                if (runtime == null) {
                    continue;
                }
                run.outcome = runVariant(out, trial, device, unit, unit.name());
                for (TrialUnit c : catalogue) {
                    if (m <= c.maxTokens()) {
                        run.catalogue.add(runVariant(out, trial, device, c, "catalogue " + c.name()));
                    }
                }
                for (TrialUnit n : neighbours) {
                    if (m <= n.maxTokens()) {
                        run.neighbours.add(runVariant(out, trial, device, n, "neighbour " + neighbourLabel(unit, n)));
                    }
                }
            }
        }
        return report.runs.stream().allMatch(Report.Run::pass);
    }

    private TrialUnit.Outcome runVariant(PrintWriter out, TrialUnit.Trial trial, Device device, TrialUnit variant, String label)
            throws Exception {
        TrialUnit.Outcome outcome = trial.run(device.runtime(), device.stream(), variant, WARMUP, reps);
        out.println("       " + outcome.line(label));
        return outcome;
    }

    /** Compiles the variants' kernels for {@code target} in parallel, so that loading them one by one finds them cached. */
    private void precompile(PrintWriter out, List<TrialUnit> catalogue, List<TrialUnit> neighbours, Target target) throws Exception {
        List<KernelSpec> work = Stream.concat(catalogue.stream(), neighbours.stream())
                .flatMap(v -> v.kernels().stream()).map(k -> k.withTarget(target)).distinct().toList();
        ParallelCompile.run(work, 0, out, spec -> KernelResources.compile(spec, cache));
    }

    /** A neighbour by the schedule that differs from the unit's, e.g. {@code g @ output_centric_wpc4_lb16_ku4_tpc1_wpo1_mbps0 + d}. */
    private static String neighbourLabel(TrialUnit unit, TrialUnit neighbour) {
        List<String> parts = new ArrayList<>();
        for (int i = 0; i < neighbour.kernels().size(); i++) {
            KernelSpec mine = unit.kernels().get(i);
            KernelSpec theirs = neighbour.kernels().get(i);
            parts.add(mine.name() + (theirs.schedule().equals(mine.schedule()) ? "" : " @ " + Candidates.name(theirs.schedule())));
        }
        return String.join(" + ", parts);
    }

    /** What --json writes: per kernel and target its resources, and per run of the units it belongs to the outcomes. */
    private static final class Report {
        final Path file;
        final long seed;
        final List<Integer> tokens;
        final int reps;
        /** The device and its target, or (without one) why the GPU runs were skipped. */
        String device;
        String runTarget;
        String gpuSkipped;
        final Map<String, Map<String, Object>> kernels = new LinkedHashMap<>();
        final List<Run> runs = new ArrayList<>();

        Report(Path file, long seed, List<Integer> tokens, int reps) {
            this.file = file;
            this.seed = seed;
            this.tokens = tokens;
            this.reps = reps;
        }

        /** One unit at one token count. */
        static final class Run {
            final TrialUnit unit;
            final int tokens;
            final double referenceMs;
            TrialUnit.Outcome outcome;
            final List<TrialUnit.Outcome> catalogue = new ArrayList<>();
            final List<TrialUnit.Outcome> neighbours = new ArrayList<>();

            Run(TrialUnit unit, int tokens, double referenceMs) {
                this.unit = unit;
                this.tokens = tokens;
                this.referenceMs = referenceMs;
            }

            /** Whether every output of every variant run on the device was within its tolerance (true when none ran). */
            boolean pass() {
                return Stream.of(Stream.ofNullable(outcome), catalogue.stream(), neighbours.stream()).flatMap(o -> o)
                        .allMatch(TrialUnit.Outcome::pass);
            }
        }

        void kernel(KernelSpec k, KernelResources r) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", k.name());
            m.put("target", k.target().text());
            m.put("registers", r.registers());
            m.put("spill_bytes", r.spillBytes());
            m.put("smem_bytes", r.sharedBytes());
            m.put("runs", new ArrayList<Map<String, Object>>());
            kernels.putIfAbsent(k.name() + "@" + k.target().text(), m);
        }

        Run run(TrialUnit unit, int tokens, double referenceMs) {
            Run r = new Run(unit, tokens, referenceMs);
            runs.add(r);
            return r;
        }

        void write(Path json, PrintWriter out) throws Exception {
            if (json == null) {
                return;
            }
            for (Run r : runs) {
                // a run is listed under each kernel of its unit: with the target it ran on, else the kernel's first
                for (KernelSpec k : r.unit.kernels()) {
                    kernels.values().stream()
                            .filter(e -> e.get("name").equals(k.name()) && (runTarget == null || e.get("target").equals(runTarget)))
                            .findFirst().ifPresent(e -> runsOf(e).add(runRow(r)));
                }
            }
            Map<String, Object> doc = new LinkedHashMap<>();
            doc.put("file", file.toString());
            doc.put("seed", seed);
            doc.put("tokens", tokens);
            doc.put("reps", reps);
            doc.put("device", device);
            doc.put("gpu_skipped", gpuSkipped);
            doc.put("kernels", List.copyOf(kernels.values()));
            new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(json.toFile(), doc);
            out.println("wrote " + json);
        }

        @SuppressWarnings("unchecked")
        private static List<Map<String, Object>> runsOf(Map<String, Object> kernelEntry) {
            return (List<Map<String, Object>>) kernelEntry.get("runs");
        }

        private static Map<String, Object> runRow(Run r) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("tokens", r.tokens);
            m.put("unit", r.unit.name());
            m.put("reference_ms", r.referenceMs);
            if (r.outcome == null) {
                m.put("gpu", "skipped");
                return m;
            }
            m.putAll(outcomeRow(r.outcome));
            m.put("catalogue", r.catalogue.stream().map(Report::outcomeRow).toList());
            m.put("neighbours", r.neighbours.stream().map(Report::outcomeRow).toList());
            return m;
        }

        private static Map<String, Object> outcomeRow(TrialUnit.Outcome o) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", o.variant().name());
            m.put("pass", o.pass());
            m.put("time_us", o.timing().medianMicros());
            m.put("p10_us", o.timing().p10Micros());
            m.put("p90_us", o.timing().p90Micros());
            List<Map<String, Object>> outputs = new ArrayList<>();
            for (TrialUnit.Check c : o.checks()) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("output", c.output());
                e.put("pass", c.pass());
                if (c.error() != null) {
                    ErrorStats s = c.error();
                    e.put("rel_l2", s.relativeL2());
                    e.put("max_abs", s.maxAbs());
                    e.put("max_abs_of_peak", s.maxAbsOfPeak());
                    e.put("reference_peak", s.referencePeak());
                    e.put("non_finite", s.nonFinite());
                } else {
                    e.put("note", c.note());
                }
                outputs.add(e);
            }
            m.put("error", outputs);
            return m;
        }
    }
}
