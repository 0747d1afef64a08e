package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
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
        // one kernel through an empty cache: nvcc takes seconds, as the whole catalogue's first compile takes minutes
        var kernel = ExpertLayerSpecs.of("demo_progress", new ExpertShape(256, 128, 16, 4), GateUpLayout.STACKED,
                OutputCentricBuilder.create().build(), Target.SM_90A).down();
        CliRun run = CliRun.of(cli -> {
            DemoCommand demo = CliRun.command(cli, "demo");
            demo.catalogue = List.of(kernel);
            demo.cache = new KernelCache(cacheDir);
        }, "demo", "--target", "sm_90a", "--tokens", "2", "--seed", "3", "--out", out.toString());
        assertEquals(0, run.exitCode(), run.out() + run.err());
        String text = run.out();
        int step1 = text.indexOf("1. Generating the built-in catalogue (1 kernels)");
        int started = text.indexOf("   nvcc: 0 of 1 done, ");
        int ended = text.indexOf("   nvcc: 1 of 1 done in ");
        int listed = text.indexOf("demo_progress_down");
        assertTrue(step1 >= 0 && step1 < started && started < ended && ended < listed, text);
    }
}
