package dev.moeforge.examples.decoder;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.IntStream;

/**
 * A tuned pool's directory ({@code moeforge tune}) whose pairs a decode step's experts take, keyed on
 * the batch: read once and checked against the model's expert geometry before anything runs on the
 * GPU, then by the decoder against its target and, once the experts' format is known, against the
 * function the model's experts compute.
 */
public record TunedPool(Path dir, PoolDirectory.Loaded loaded, DispatchTable table) {

    /**
     * The directory read and its cost models fitted ({@link PoolStore#usableTable}), every kernel of it of the
     * model's expert geometry; refused, naming the kernels, for a model of other experts or of none, and for a
     * pool a layer could not serve from.
     */
    public static TunedPool read(Path dir, ModelConfig c) {
        if (!c.moeLayers().contains(true)) {
            throw new IllegalArgumentException("tuned pool " + dir + ": the model has no MoE layers for it to serve");
        }
        PoolDirectory.Loaded loaded;
        try {
            loaded = PoolDirectory.load(dir);
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException("tuned pool " + dir + ": " + e.getFile() + " does not exist (a tuned pool's directory "
                    + "holds " + PoolDirectory.KERNELS_FILE + " and " + PoolDirectory.PROFILE_FILE + ": moeforge tune)", e);
        } catch (IOException e) {
            throw new UncheckedIOException("tuned pool " + dir + ": " + e.getMessage(), e);
        }
        ExpertShape model = new ExpertShape(c.hidden(), c.expertIntermediate(), c.experts(), c.topk());
        List<String> wrong = new ArrayList<>();
        for (KernelSpec k : loaded.kernels().values()) {
            ExpertShape shape = ((Problem.ExpertProblem) k.problem()).shape();
            if (!shape.equals(model)) {
                wrong.add(k.name() + " is of " + text(shape));
            }
        }
        if (!wrong.isEmpty()) {
            throw new IllegalArgumentException("tuned pool " + dir.resolve(PoolDirectory.KERNELS_FILE) + " does not fit this model's "
                    + "experts (" + text(model) + "): " + summary(wrong) + "; tune a pool for them: moeforge tune --shape "
                    + model.hidden() + "," + model.intermediate() + "," + model.experts() + "," + model.topk() + " --out DIR");
        }
        try {
            return new TunedPool(dir, loaded, PoolStore.usableTable(loaded));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("tuned pool " + dir + ": " + e.getMessage(), e);
        }
    }

    /** Refuses a pool of kernels for another target than the decoder's device. */
    void checkTarget(Target target) {
        List<String> wrong = loaded.kernels().values().stream().filter(k -> k.target() != target)
                .map(k -> k.name() + " is for " + k.target().text()).toList();
        if (!wrong.isEmpty()) {
            throw new IllegalArgumentException("tuned pool " + dir.resolve(PoolDirectory.KERNELS_FILE) + " is not for this device's "
                    + target.text() + ": " + summary(wrong) + "; tune a pool with --target " + target.text());
        }
    }

    /**
     * Refuses a pool any of whose kernels computes another function than the model's expert half of
     * its kind ({@link #differences}).
     */
    void checkComputes(MoeBlock block) {
        List<String> differences = differences(block);
        if (!differences.isEmpty()) {
            throw new IllegalArgumentException("tuned pool " + dir.resolve(PoolDirectory.KERNELS_FILE)
                    + " computes other expert layers than this model's: " + String.join("; ", differences) + " (`moeforge profile` "
                    + "times bf16 pools of the SiLU-gated experts; decode other experts without --tuned)");
        }
    }

    /**
     * How the pool's kernels compute another function than the model's expert half of their kind (weights format,
     * activations, gate/up layout, biases, epilogue), as {@code block} states them: each difference once, with how many
     * kernels have it; empty where every kernel computes the model's.
     */
    List<String> differences(MoeBlock block) {
        Map<String, Integer> differences = new LinkedHashMap<>();
        for (KernelSpec k : loaded.kernels().values()) {
            Problem.ExpertProblem pool = (Problem.ExpertProblem) k.problem();
            boolean gateUp = pool instanceof Problem.ExpertGateUp;
            Problem.ExpertProblem model = gateUp ? block.gateUp() : block.down();
            Store epilogue = gateUp ? block.gateUpEpilogue() : block.downEpilogue();
            List<String> found = new ArrayList<>();
            if (!pool.shape().equals(model.shape())) {
                found.add("of " + text(pool.shape()) + " (the model's experts: " + text(model.shape()) + ")");
            }
            if (!pool.weights().equals(model.weights())) {
                found.add("with " + pool.weights().text() + " weights (the model's experts: " + model.weights().text() + ")");
            }
            if (pool.activations() != model.activations()) {
                found.add("with " + pool.activations().text() + " activations (the model's experts: " + model.activations().text() + ")");
            }
            if (pool instanceof Problem.ExpertGateUp g && model instanceof Problem.ExpertGateUp m && g.layout() != m.layout()) {
                found.add("reading gate and up " + g.layout().text() + " (the model's experts: " + m.layout().text() + ")");
            }
            if (pool.bias() != model.bias()) {
                found.add(pool.bias() ? "with expert biases (the model's experts have none)"
                        : "without expert biases (the model's experts have them)");
            }
            if (!k.epilogue().equals(epilogue)) {
                found.add("ending in " + SpecPrinter.printEpilogue(k.epilogue()) + " (the model's experts: "
                        + SpecPrinter.printEpilogue(epilogue) + ")");
            }
            for (String f : found) {
                differences.merge((gateUp ? "gate_up" : "down") + " kernels " + f, 1, Integer::sum);
            }
        }
        List<String> lines = new ArrayList<>();
        differences.forEach((what, n) -> lines.add(what.replaceFirst(" kernels ", " kernels: " + n + " ")));
        return lines;
    }

    /** A look in a store of installed pools: the pool the decode steps may take, or why none. */
    record Lookup(Optional<TunedPool> pool, Optional<String> why) {}

    /**
     * The pool {@code store} holds for the model's experts as {@code block} states them, on {@code target} and the
     * device named {@code device}, where it fits them; else none, and why (the decode steps then keep the catalogue's
     * pairs: an installed pool is a default, so one that does not fit is passed over, not refused).
     */
    static Lookup installed(PoolStore store, ModelConfig c, MoeBlock block, Target target, String device) {
        PoolStore.Key key = new PoolStore.Key(block.gateUp().shape(), block.gateUp().weights(), target, device);
        Optional<PoolStore.Installed> found = store.find(key);
        if (found.isEmpty()) {
            return new Lookup(Optional.empty(), Optional.of("no tuned pool is installed in " + store.directory() + " for these experts ("
                    + key + "): the decode steps take the catalogue's (`moeforge tune` installs one)"));
        }
        Path dir = found.get().dir();
        TunedPool pool;
        try {
            pool = read(dir, c);
            PoolStore.Key read = PoolStore.Key.of(pool.loaded());
            if (!read.equals(key)) {
                throw new IllegalArgumentException("it holds a pool of " + read);
            }
        } catch (RuntimeException e) {
            return new Lookup(Optional.empty(), Optional.of("the tuned pool installed at " + dir + " is passed over (" + e.getMessage()
                    + "): the decode steps take the catalogue's experts"));
        }
        List<String> differences = pool.differences(block);
        if (!differences.isEmpty()) {
            return new Lookup(Optional.empty(), Optional.of("the tuned pool installed at " + dir + " computes other expert layers than "
                    + "this model's (" + String.join("; ", differences) + "): the decode steps take the catalogue's experts"));
        }
        return new Lookup(Optional.of(pool), Optional.empty());
    }

    /**
     * Whether the pool's profile trained its models on token counts around {@code batch} (from its
     * smallest profiled batch to its largest, held-out points aside): outside them the models extrapolate.
     */
    public boolean covers(int batch) {
        return batch >= smallestBatch() && batch <= largestBatch();
    }

    /** Why a decode step of {@code batch} sequences keeps the catalogue's pair beside this pool. */
    String outside(int batch) {
        return "batch " + batch + " lies outside the batches " + dir + " was profiled at (" + smallestBatch() + " to " + largestBatch()
                + " tokens): the decode steps keep the catalogue's experts";
    }

    private int smallestBatch() {
        return profiledBatches().min().orElseThrow();
    }

    private int largestBatch() {
        return profiledBatches().max().orElseThrow();
    }

    private IntStream profiledBatches() {
        return loaded.fit().profiled().stream().mapToInt(PoolFit.Point::batch);
    }

    private static String text(ExpertShape s) {
        return "H=" + s.hidden() + ", I=" + s.intermediate() + ", E=" + s.experts() + ", top-" + s.topk();
    }

    /** The first few of a list of faults, and how many more. */
    private static String summary(List<String> wrong) {
        int shown = Math.min(3, wrong.size());
        return String.join("; ", wrong.subList(0, shown)) + (wrong.size() > shown ? " (and " + (wrong.size() - shown) + " more)" : "");
    }
}
