package dev.moeforge.examples.decoder;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A tuned pool's directory ({@code moeforge tune}) whose pairs a decode step's experts take, keyed on
 * the batch: read and checked against the model before anything runs on the GPU (its geometry and
 * target), and once the experts' format is known against the function the model's experts compute.
 */
record TunedPool(Path dir, PoolDirectory.Loaded loaded) {

    /** The directory read, every kernel of it of the model's expert geometry and of {@code target}; else refused naming them. */
    static TunedPool read(Path dir, ModelConfig c, Target target) {
        PoolDirectory.Loaded loaded;
        try {
            loaded = PoolDirectory.load(dir);
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
            if (k.target() != target) {
                wrong.add(k.name() + " is for " + k.target().text());
            }
        }
        if (!wrong.isEmpty()) {
            throw new IllegalArgumentException("tuned pool " + dir.resolve(PoolDirectory.KERNELS_FILE) + " does not fit this model ("
                    + text(model) + ", " + target.text() + "): " + summary(wrong) + "; tune a pool for it: moeforge tune --shape "
                    + model.hidden() + "," + model.intermediate() + "," + model.experts() + "," + model.topk() + " --target "
                    + target.text() + " --out DIR");
        }
        return new TunedPool(dir, loaded);
    }

    /**
     * Refuses a pool any of whose kernels computes another function than the model's expert half of
     * its kind ({@code gateUp} or {@code down}: problem with its weights format, and epilogue).
     */
    void checkComputes(KernelSpec gateUp, KernelSpec down) {
        List<String> wrong = new ArrayList<>();
        for (KernelSpec k : loaded.kernels().values()) {
            KernelSpec model = k.problem() instanceof Problem.ExpertGateUp ? gateUp : down;
            if (!k.problem().equals(model.problem())) {
                wrong.add(k.name() + " takes " + ((Problem.ExpertProblem) k.problem()).weights().text() + " weights as "
                        + k.problem() + ", the model's " + model.problem());
            } else if (!k.epilogue().equals(model.epilogue())) {
                wrong.add(k.name() + " ends in " + k.epilogue() + ", the model's in " + model.epilogue());
            }
        }
        if (!wrong.isEmpty()) {
            throw new IllegalArgumentException("tuned pool " + dir.resolve(PoolDirectory.KERNELS_FILE)
                    + " computes other expert layers than this model's: " + summary(wrong)
                    + "; tune a pool of the model's experts' format (moeforge tune --format)");
        }
    }

    /**
     * Whether the pool's profile timed token counts around {@code batch} (from its smallest profiled
     * batch to its largest): outside them the fitted models extrapolate, and at one sequence a profile
     * from 8 tokens up keyed the layer to a pair far slower than the catalogue's (bench/NOTES.md).
     */
    boolean covers(int batch) {
        return batch >= smallestBatch() && batch <= largestBatch();
    }

    /** Why a decode step of {@code batch} sequences keeps the catalogue's pair beside this pool. */
    String outside(int batch) {
        return "batch " + batch + " lies outside the batches " + dir + " was profiled at (" + smallestBatch() + " to " + largestBatch()
                + " tokens): the decode steps keep the catalogue's experts";
    }

    private int smallestBatch() {
        return loaded.fit().points().stream().mapToInt(PoolFit.Point::batch).min().orElseThrow();
    }

    private int largestBatch() {
        return loaded.fit().points().stream().mapToInt(PoolFit.Point::batch).max().orElseThrow();
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
