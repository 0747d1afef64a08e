package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.GpuTimer.Timing;
import dev.moeforge.examples.bench.HalfProfiler;
import dev.moeforge.examples.bench.HalfProfiler.Half;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertHalf;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge profile DIR}: times every configuration of the pool in DIR (written by
 * {@code moeforge pool}) at batch sizes x balancedness levels, each half of the layer alone, and
 * writes {@code DIR/profile.json} after every point, so that a run that is stopped continues where
 * it stopped. Held-out points (other batches and levels) are timed the same way for {@code fit} to
 * judge its model on.
 */
@Command(name = "profile", mixinStandardHelpOptions = true,
        description = "Times every config of DIR/pool.json (from `moeforge pool`) at batch sizes x balancedness levels "
                + "(the entropy of the expert load over ln E), weights rotated beyond L2, graph-replayed; resumable; writes "
                + "DIR/profile.json.")
public final class ProfileCommand implements Callable<Integer> {

    @Parameters(index = "0", paramLabel = "DIR", description = "The pool's directory (pool.json and pool.moe).")
    Path dir;

    @Option(names = "--batches", split = ",", defaultValue = "1,2,4,8,32,128,512,2048",
            description = "Batch sizes profiled (default: ${DEFAULT-VALUE}: from one token, so that a decoder's steps of 1 to 4 "
                    + "sequences take the pool too).")
    List<Integer> batches;

    @Option(names = "--balancedness", split = ",", defaultValue = "1.0,0.9,0.8,0.7,0.6",
            description = "Balancedness levels profiled (default: ${DEFAULT-VALUE}); a level a batch cannot reach is moved to the nearest it can.")
    List<Double> levels;

    @Option(names = "--held-out-batches", split = ",", defaultValue = "16,64,256,1024",
            description = "Batch sizes of the held-out points fit judges its model on (default: ${DEFAULT-VALUE}).")
    List<Integer> heldOutBatches;

    @Option(names = "--held-out-balancedness", split = ",", defaultValue = "0.95,0.75,0.65",
            description = "Balancedness of the held-out points (default: ${DEFAULT-VALUE}).")
    List<Double> heldOutLevels;

    @Option(names = "--layers", defaultValue = "2", description = "Layers of weights rotated per replay (default: ${DEFAULT-VALUE}).")
    int layers;

    @Option(names = "--warmup", defaultValue = "3", description = "Warm-up replays before a full timing (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--reps", defaultValue = "50", description = "Timed replays of a full timing, at least 50 (default: ${DEFAULT-VALUE}).")
    int reps;

    @Option(names = "--screen-reps", defaultValue = "3",
            description = "Replays of the first look at every config, after one warm-up (default: ${DEFAULT-VALUE}).")
    int screenReps;

    @Option(names = "--prune", defaultValue = "1.5",
            description = "A config whose first look is slower than this times the point's best keeps that look instead of a full timing (default: ${DEFAULT-VALUE}).")
    double prune;

    @Option(names = "--seed", defaultValue = "20261127", description = "Seed of weights and routings (default: ${DEFAULT-VALUE}).")
    long seed;

    @Spec
    CommandSpec command;

    /** A pool config loaded for timing. */
    record Loaded(String name, Half half, ExpertHalf kernel) {}

    /** A point to profile: the batch, the balancedness asked for and the one it is moved to where the batch cannot reach it. */
    record Point(int batch, double requested, double target, boolean heldOut) {
        String key() {
            return batch + "@" + String.format(Locale.ROOT, "%.3f", target) + (heldOut ? "/held-out" : "");
        }
    }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = command.commandLine().getOut();
        checkOptions();
        JsonNode pool = readPool();
        String kernelsText = Files.readString(dir.resolve(pool.path("kernels").asText(PoolDirectory.KERNELS_FILE)));
        String poolSha = PoolDirectory.sha256(kernelsText);
        if (!poolSha.equals(pool.path("kernels_sha256").asText())) {
            throw new IllegalArgumentException(dir.resolve(PoolDirectory.KERNELS_FILE) + " is not the file pool.json lists (its SHA-256 "
                    + "differs): run `moeforge pool` again");
        }
        JsonNode shapeNode = pool.get("shape");
        ExpertShape shape = new ExpertShape(shapeNode.get("hidden").asInt(), shapeNode.get("intermediate").asInt(),
                shapeNode.get("experts").asInt(), shapeNode.get("topk").asInt());
        if (!"bf16".equals(pool.path("format").asText())) {
            throw new IllegalArgumentException("profile times bf16 pools; " + dir.resolve("pool.json") + " is "
                    + pool.path("format").asText() + " (its weights would need the format's encoder on the device)");
        }
        List<KernelSpec> specs = SpecParser.parseAll(kernelsText, PoolDirectory.KERNELS_FILE);
        if (!Gpu.available()) {
            throw new IllegalStateException("profile needs a CUDA device: " + Gpu.unavailableReason());
        }
        List<Point> points = points(shape);
        int maxBatch = points.stream().mapToInt(Point::batch).max().orElseThrow();
        Path file = dir.resolve(PoolDirectory.PROFILE_FILE);
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, KernelCache.defaultCache());
             BenchKernels kernels = new BenchKernels(runtime)) {
            Map<String, Object> doc = resumeOrStart(file, pool, poolSha, ctx, runtime, out);
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> donePoints = (List<Map<String, Object>>) doc.get("points");
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> timings = (List<Map<String, Object>>) doc.get("timings");
            List<String> done = donePoints.stream().map(p -> (String) p.get("key")).toList();
            List<Point> todo = points.stream().filter(p -> !done.contains(p.key())).toList();
            out.printf(Locale.ROOT, "profile of %s: %d configs x %d points (%d held out); %d done before, %d to go%n",
                    pool.path("model").asText(), specs.size(), points.size(), points.stream().filter(Point::heldOut).count(),
                    points.size() - todo.size(), todo.size());
            out.flush();
            if (todo.isEmpty()) {
                out.println("nothing to do: " + file + " is complete");
                return 0;
            }
            List<Loaded> loaded = new ArrayList<>();
            try (Progress progress = Progress.start(out, "loading " + specs.size() + " kernels", specs.size())) {
                for (KernelSpec spec : specs) {
                    Half half = spec.problem() instanceof Problem.ExpertGateUp ? Half.GATE_UP : Half.DOWN;
                    var handle = runtime.load(spec);
                    loaded.add(new Loaded(spec.name(), half, ExpertHalf.alone(handle, LaunchOrder.OVERLAPPING_PREVIOUS,
                            Math.min(maxBatch, handle.maxTokens()))));
                    progress.step();
                }
            }
            try (HalfProfiler profiler = new HalfProfiler(kernels, stream, shape, layers, maxBatch, seed)) {
                long started = System.nanoTime();
                try (Progress progress = Progress.start(out, "profiling " + todo.size() + " points", todo.size())) {
                    for (Point p : todo) {
                        Routing routing = RandomInputs.skewedRouting(routingSeed(p), p.batch(), shape.experts(), shape.topk(), p.target());
                        profiler.route(routing);
                        for (Half half : Half.values()) {
                            timings.addAll(timePoint(stream, profiler, p, half, loaded.stream().filter(l -> l.half() == half).toList()));
                        }
                        donePoints.add(pointRow(p, routing, shape.experts()));
                        write(file, doc);
                        progress.step();
                    }
                } finally {
                    loaded.forEach(l -> l.kernel().close());
                }
                out.printf(Locale.ROOT, "profiled %d points in %.0f s; wrote %s%n", todo.size(), (System.nanoTime() - started) / 1e9, file);
            }
        }
        return 0;
    }

    private void checkOptions() {
        if (reps < 50) {
            throw new IllegalArgumentException("--reps " + reps + ": at least 50 timed repetitions");
        }
        if (layers < 1 || warmup < 0 || screenReps < 1) {
            throw new IllegalArgumentException("--layers, --screen-reps at least 1, --warmup at least 0");
        }
        if (prune < 1) {
            throw new IllegalArgumentException("--prune " + prune + ": at least 1 (1 times every config in full only where it ties the best)");
        }
        for (List<Integer> list : List.of(batches, heldOutBatches)) {
            for (int m : list) {
                if (m < 1) {
                    throw new IllegalArgumentException("batch " + m + ": at least 1");
                }
            }
        }
        for (List<Double> list : List.of(levels, heldOutLevels)) {
            for (double b : list) {
                if (!(b > 0 && b <= 1)) {
                    throw new IllegalArgumentException("balancedness " + b + ": in (0, 1]");
                }
            }
        }
    }

    private JsonNode readPool() throws IOException {
        Path poolFile = dir.resolve("pool.json");
        if (!Files.isRegularFile(poolFile)) {
            throw new IllegalArgumentException(poolFile + " does not exist: write it with `moeforge pool --model NAME --out " + dir + "`");
        }
        JsonNode pool = new ObjectMapper().readTree(poolFile.toFile());
        for (String field : List.of("model", "shape", "format", "target", "configs", "kernels_sha256")) {
            if (!pool.has(field)) {
                throw new IllegalArgumentException(poolFile + " has no '" + field + "': not a pool.json of this version of `moeforge pool`");
            }
        }
        return pool;
    }

    /** The training points (batches x levels) then the held-out ones, each level moved into what its batch reaches; no repeats. */
    List<Point> points(ExpertShape shape) {
        List<Point> points = new ArrayList<>();
        addPoints(points, batches, levels, false, shape);
        addPoints(points, heldOutBatches, heldOutLevels, true, shape);
        return points;
    }

    private void addPoints(List<Point> points, List<Integer> ms, List<Double> bs, boolean heldOut, ExpertShape shape) {
        for (int m : ms) {
            RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(seed + m, m, shape.experts(), shape.topk());
            for (double b : bs) {
                // a hair inside the range: skewedRouting lands within its tolerance of the target
                double target = Math.round(range.clamp(b) * 1000) / 1000.0;
                Point p = new Point(m, b, target, heldOut);
                if (points.stream().noneMatch(q -> q.key().equals(p.key()))) {
                    points.add(p);
                }
            }
        }
    }

    /** The routing seed depends on the batch alone, so every level of a batch shares its draws (and its reachable range). */
    private long routingSeed(Point p) {
        return seed + p.batch();
    }

    /**
     * Every config of one half at one point: a first look (one warm-up, a few replays) at each, then a
     * full timing of those within {@code prune} of the best look; the rest keep their look, marked pruned.
     */
    private List<Map<String, Object>> timePoint(CudaStream stream, HalfProfiler profiler, Point p, Half half, List<Loaded> configs) {
        List<Map<String, Object>> rows = new ArrayList<>();
        Map<Loaded, Timing> looks = new LinkedHashMap<>();
        for (Loaded c : configs) {
            if (p.batch() <= c.kernel().maxTokens()) {
                looks.put(c, profiler.time(stream, c.kernel(), half, 1, screenReps));
            }
        }
        double best = looks.values().stream().mapToDouble(Timing::medianMicros).min().orElse(Double.NaN);
        for (Map.Entry<Loaded, Timing> e : looks.entrySet()) {
            boolean full = e.getValue().medianMicros() <= prune * best;
            Timing t = full ? profiler.time(stream, e.getKey().kernel(), half, warmup, reps) : e.getValue();
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("config", e.getKey().name());
            row.put("half", half.name().toLowerCase(Locale.ROOT));
            row.put("point", p.key());
            row.put("us", t.medianMicros());
            row.put("p10_us", t.p10Micros());
            row.put("p90_us", t.p90Micros());
            row.put("reps", t.repetitions());
            row.put("pruned", !full);
            rows.add(row);
        }
        rows.sort(Comparator.comparingDouble(r -> (double) r.get("us")));
        return rows;
    }

    private static Map<String, Object> pointRow(Point p, Routing routing, int experts) {
        int[] load = routing.expertLoad(experts);
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("key", p.key());
        row.put("batch", p.batch());
        row.put("balancedness_requested", p.requested());
        row.put("balancedness_target", p.target());
        row.put("balancedness", routing.balancedness(experts));
        row.put("held_out", p.heldOut());
        row.put("expert_load", load);
        return row;
    }

    /**
     * The profile to continue, or a new one. A profile of another pool, target or device, or taken
     * with other options, is refused by name rather than mixed with this run's timings.
     */
    private Map<String, Object> resumeOrStart(Path file, JsonNode pool, String poolSha, CudaContext ctx, KernelRuntime runtime,
                                              PrintWriter out) throws IOException {
        Map<String, Object> method = new LinkedHashMap<>();
        method.put("batches", batches);
        method.put("balancedness", levels);
        method.put("held_out_batches", heldOutBatches);
        method.put("held_out_balancedness", heldOutLevels);
        method.put("layers", layers);
        method.put("warmup", warmup);
        method.put("reps", reps);
        method.put("screen_reps", screenReps);
        method.put("prune", prune);
        method.put("seed", seed);
        method.put("timing", "each half alone (with the routing plan it builds where it takes one), all layers on one routing in one "
                + "CUDA graph; per layer = replay / layers; median");
        ObjectMapper json = new ObjectMapper();
        if (Files.exists(file)) {
            @SuppressWarnings("unchecked")
            Map<String, Object> old = json.readValue(file.toFile(), Map.class);
            List<String> mismatches = new ArrayList<>();
            compare(mismatches, "format", old.get("format"), PoolDirectory.PROFILE_FORMAT);
            compare(mismatches, "pool (kernels_sha256)", old.get("pool_sha256"), poolSha);
            compare(mismatches, "target", old.get("target"), runtime.target().text());
            compare(mismatches, "device", old.get("device") instanceof Map<?, ?> d ? d.get("name") : null, ctx.deviceName());
            compare(mismatches, "options", asJson(json, old.get("method")), asJson(json, method));
            if (!mismatches.isEmpty()) {
                throw new IllegalArgumentException(file + " is a profile of another " + String.join(", ", mismatches)
                        + ": move it away to start a new one here");
            }
            out.println("continuing " + file);
            return old;
        }
        if (!pool.get("target").asText().equals(runtime.target().text())) {
            throw new IllegalArgumentException(dir.resolve("pool.json") + " is a pool for " + pool.get("target").asText() + "; this "
                    + "device (" + ctx.deviceName() + ") runs " + runtime.target().text() + " kernels");
        }
        Map<String, Object> doc = BenchReports.header("profile", ctx);
        doc.put("format", PoolDirectory.PROFILE_FORMAT);
        doc.put("model", pool.get("model").asText());
        doc.put("shape", json.convertValue(pool.get("shape"), Map.class));
        doc.put("target", runtime.target().text());
        doc.put("sm_count", ctx.smCount());
        doc.put("pool_sha256", poolSha);
        doc.put("method", method);
        doc.put("points", new ArrayList<Map<String, Object>>());
        doc.put("timings", new ArrayList<Map<String, Object>>());
        return doc;
    }

    /** A value as the JSON file holds it: numbers compare by value, not by the Java type that wrote them. */
    static JsonNode asJson(ObjectMapper json, Object value) throws IOException {
        return json.readTree(json.writeValueAsString(value));
    }

    private static void compare(List<String> mismatches, String what, Object was, Object now) {
        if (!Objects.equals(was, now)) {
            mismatches.add(what + " (" + was + ", now " + now + ")");
        }
    }

    /** Written beside, then moved over the old file: a run stopped mid-write leaves the previous profile whole. */
    private static void write(Path file, Map<String, Object> doc) throws IOException {
        Path temp = file.resolveSibling(file.getFileName() + ".partial");
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(temp.toFile(), doc);
        Files.move(temp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }
}
