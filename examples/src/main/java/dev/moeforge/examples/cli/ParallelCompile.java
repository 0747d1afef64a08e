package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.KernelSpec;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;

/** Runs one job per spec on a pool of threads (each starts an nvcc process), with a progress bar on a terminal. */
final class ParallelCompile {
    /** The work done for one spec. */
    interface Job<T> {
        T run(KernelSpec spec) throws Exception;
    }

    private ParallelCompile() {}

    /** The jobs' results, in the order of {@code specs}; {@code jobs} threads (0: the core count). */
    static <T> List<T> run(List<KernelSpec> specs, int jobs, boolean progress, Job<T> job) throws Exception {
        int threads = jobs > 0 ? jobs : Runtime.getRuntime().availableProcessors();
        ProgressBarBuilder bar = new ProgressBarBuilder().setTaskName("nvcc").setInitialMax(specs.size())
                .setStyle(ProgressBarStyle.ASCII).continuousUpdate().setUpdateIntervalMillis(250);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<T> results = new ArrayList<>();
        // a bar on a terminal; in a log, the caller's summary line is enough
        try (ProgressBar pb = progress && System.console() != null ? bar.build() : null) {
            List<Future<T>> futures = new ArrayList<>();
            for (KernelSpec spec : specs) {
                futures.add(pool.submit(() -> {
                    T result = job.run(spec);
                    if (pb != null) {
                        pb.step();
                    }
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
