package dev.moeforge.examples.cli;

import dev.moeforge.examples.decoder.GpuDecoder;
import dev.moeforge.examples.decoder.ModelConfig;
import dev.moeforge.examples.decoder.TunedPool;
import dev.moeforge.runtime.dispatch.PoolStore;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/**
 * Where the decode steps' experts take a tuned pool's pairs from: by default the pool installed for the
 * experts' geometry, format, target and device (`moeforge tune` installs one), else a pool named by
 * directory, or none.
 */
final class TunedPoolOptions {
    @Option(names = "--tuned", paramLabel = "DIR",
            description = "A tuned pool's directory (`moeforge tune` of the model's expert geometry, bf16) instead of the pool "
                    + "installed for it: the decode steps' experts run the pair its cost models price cheapest at the batch, where "
                    + "its profile timed the batch (the catalogue's elsewhere). A pool that does not fit the model is refused.")
    Path tuned;

    @Option(names = "--no-tuned",
            description = "The catalogue's expert pairs even where a tuned pool is installed for the model's experts (by default "
                    + "the decode steps take the pool installed in $MOEFORGE_POOLS, else ~/.cache/moeforge/pools, for the "
                    + "experts' geometry, format, target and GPU, where its profile timed the batch).")
    boolean noTuned;

    /** The installed pools looked in (tests give their own). */
    PoolStore store = PoolStore.defaultStore();

    /** Refuses options that contradict each other (on any machine, before anything loads). */
    void check() {
        if (tuned != null && noTuned) {
            throw new IllegalArgumentException("--tuned " + tuned + " and --no-tuned: give one");
        }
    }

    /**
     * {@code choice} with the experts' pool source: the --tuned pool, read and checked against the model now (before
     * the GPU is touched); none with --no-tuned or where {@code choice} forces the experts' kernels; else the store's.
     */
    GpuDecoder.KernelChoice apply(GpuDecoder.KernelChoice choice, ModelConfig c) {
        check();
        if (tuned != null) {
            return choice.withTunedPool(TunedPool.read(tuned, c));
        }
        if (noTuned || choice.experts() != GpuDecoder.ExpertKernels.BY_BATCH) {
            return choice;
        }
        return choice.withInstalledPools(store);
    }
}
