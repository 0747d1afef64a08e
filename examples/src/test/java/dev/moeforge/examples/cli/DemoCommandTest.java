package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.NvccCompiler;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** demo reports every step that takes longer than a second, in plain lines when its output is not a terminal. */
class DemoCommandTest {

    @Test
    void aCompileLongerThanASecondIsReportedInPlainLines(@TempDir Path out, @TempDir Path cacheDir) {
        Assumptions.assumeTrue(NvccCompiler.locate().isPresent(), "nvcc not found");
        // a warpgroup tile pair through an empty cache: nvcc takes seconds on it (a small one-token kernel can
        // finish within the second on a fast core), as the whole catalogue's first compile takes minutes
        ExpertCentric wgmma = new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true);
        var pair = ExpertLayerSpecs.of("demo_progress", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED, wgmma,
                new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true), Target.SM_90A);
        CliRun run = CliRun.of(cli -> {
            DemoCommand demo = CliRun.command(cli, "demo");
            demo.catalogue = List.of(pair.gateUp(), pair.down());
            demo.cache = new KernelCache(cacheDir);
        }, "demo", "--target", "sm_90a", "--tokens", "2", "--seed", "3", "--out", out.toString());
        assertEquals(0, run.exitCode(), run.out() + run.err());
        String text = run.out();
        int step1 = text.indexOf("1. Generating the built-in catalogue (2 kernels)");
        int started = text.indexOf(" of 2 done, ", text.indexOf("   nvcc: "));  // the first line at one second, whatever is done then
        int ended = text.indexOf("   nvcc: 2 of 2 done in ");
        int listed = text.indexOf("demo_progress_down");
        assertTrue(step1 >= 0 && step1 < started && started < ended && ended < listed, text);
    }
}
