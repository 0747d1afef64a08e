package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.KernelSpec;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/** Runs one job per spec on a pool of threads (each starts an nvcc process), with a {@link Progress} line or bar while they run. */
final class ParallelCompile {
    /** The work done for one spec. */
    interface Job<T> {
        T run(KernelSpec spec) throws Exception;
    }

    private ParallelCompile() {}

    /**
     * The jobs' results, in the order of {@code specs}; {@code jobs} threads (0: the core count). A run
     * longer than a second is reported on {@code log} (null: not reported).
     */
    static <T> List<T> run(List<KernelSpec> specs, int jobs, PrintWriter log, Job<T> job) throws Exception {
        int threads = jobs > 0 ? jobs : Runtime.getRuntime().availableProcessors();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<T> results = new ArrayList<>();
        try (Progress progress = log == null ? Progress.none() : Progress.start(log, "   nvcc", specs.size())) {
            List<Future<T>> futures = new ArrayList<>();
            for (KernelSpec spec : specs) {
                futures.add(pool.submit(() -> {
                    T result = job.run(spec);
                    progress.step();
                    return result;
                }));
            }
            for (Future<T> f : futures) {
                try {
                    results.add(f.get());
                } catch (ExecutionException e) {  // the job's own failure, not the pool's wrapper
                    throw e.getCause() instanceof Exception cause ? cause : e;
                }
            }
        } finally {
            pool.shutdownNow();
        }
        return results;
    }
}
