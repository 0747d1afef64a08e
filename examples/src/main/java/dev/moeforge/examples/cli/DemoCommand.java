package dev.moeforge.examples.cli;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.Gpu;
import dev.moeforge.runtime.kernel.KernelRuntime;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge demo}, the main job: generates and nvcc-compiles the built-in catalogue, runs a
 * small expert layer on the CPU reference and, when a CUDA device is present, on the GPU with
 * both schedules, checking every output against the reference.
 */
@Command(name = "demo", mixinStandardHelpOptions = true,
        description = "Generates and compiles the built-in kernels, runs a small MoE expert layer on the CPU reference "
                + "and, with a GPU, on the device: prints the error against the reference and the time.")
public final class DemoCommand implements Callable<Integer> {
    @Option(names = "--out", defaultValue = "out/demo", description = "Where the catalogue goes (default: ${DEFAULT-VALUE}).")
    Path out;

    @Option(names = "--target", split = ",", defaultValue = "sm_90a,sm_100a,sm_120a",
            description = "Targets to compile the catalogue for (default: ${DEFAULT-VALUE}).")
    List<String> targets;

    @Option(names = "--tokens", defaultValue = "4", description = "Tokens in the demo batch, 1..32 (default: ${DEFAULT-VALUE}).")
    int tokens;

    @Option(names = "--seed", description = "Seed of the random inputs (default: from the clock; printed).")
    Long seed;

    @Spec
    CommandSpec command;

    /** What step 1 compiles, and the cache it compiles through: the catalogue and the default cache (tests give less). */
    List<KernelSpec> catalogue = Catalogue.specs();
    KernelCache cache = KernelCache.defaultCache();

    @Override
    public Integer call() throws Exception {
        if (tokens < 1 || tokens > 32) {
            throw new IllegalArgumentException("--tokens " + tokens + ": allowed 1..32");
        }
        PrintWriter stdout = command.commandLine().getOut();
        long s = seed != null ? seed : System.nanoTime();
        List<Target> ts = GenCommand.parseTargets(targets);
        stdout.println("1. Generating the built-in catalogue (" + catalogue.size() + " kernels) for "
                + ts.stream().map(Target::text).toList() + " and compiling it with nvcc into " + out);
        for (GenCommand.Entry e : GenCommand.generate(catalogue, ts, out, 0, stdout, cache)) {
            stdout.println(new KernelResources(e.registers(), e.spill_bytes(), e.smem_bytes()).line(e.name(), e.target()));
        }

        ExpertShape shape = new ExpertShape(256, 128, 16, 4);
        stdout.printf(Locale.ROOT, "2. A small expert layer: H=%d, I=%d, E=%d, top-%d, M=%d tokens, BF16, seed %d%n",
                shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), tokens, s);
        List<TrialUnit> variants = List.of(
                layer(ExpertLayerSpecs.of("demo_single", shape, GateUpLayout.STACKED, OutputCentricBuilder.create().build(),
                        Target.SM_90A)),
                layer(ExpertLayerSpecs.of("demo_tiled", shape, GateUpLayout.STACKED,
                        OutputCentricBuilder.create().tokensPerCta(Math.max(2, tokens)).build(), Target.SM_90A)));
        long t0 = System.nanoTime();
        TrialUnit.Trial trial;
        try (Progress p = Progress.start(stdout, "   CPU reference", 0)) {
            trial = variants.getFirst().prepare(tokens, s);
        }
        stdout.printf(Locale.ROOT, "   CPU reference (FP64): %.1f ms; %s%n", (System.nanoTime() - t0) / 1e6, trial.sample());

        if (!Gpu.available()) {
            stdout.println("3. No usable CUDA device here (" + Gpu.unavailableReason() + "): the GPU run is skipped.");
            return 0;
        }
        boolean ok = true;
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache)) {
            stdout.println("3. On " + ctx.deviceName() + " (" + runtime.target().text() + "), each layer's outputs against the "
                    + "reference and its time per layer (graph, median of 100):");
            for (TrialUnit v : variants) {
                TrialUnit.Outcome outcome;
                try (Progress p = Progress.start(stdout, "   " + v.name(), 0)) {  // the first load compiles
                    outcome = trial.run(runtime, stream, v, 10, 100);
                }
                ok &= outcome.pass();
                stdout.println("   " + outcome.line(v.kernels().getFirst().name().replace("_gate_up", "")));
            }
        }
        return ok ? 0 : 1;
    }

    private static TrialUnit layer(ExpertLayerSpecs specs) {
        return new TrialUnit.Layer(specs.gateUp(), specs.down());
    }
}
