package dev.moeforge.examples.cli;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.decoder.GpuDecoder;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.kernel.ModuleResource;
import dev.moeforge.runtime.moe.DispatchedLayer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge precompile}: fills the kernel cache with the kernels of .moe files (and the
 * catalogue), so that a host without nvcc, or one that should not spend minutes compiling, loads
 * them from the cache. A GPU run lists what it loaded with env {@code MOEFORGE_RECORD_SPECS=FILE}.
 */
@Command(name = "precompile", mixinStandardHelpOptions = true,
        description = "Compiles the kernels of .moe files (and with --catalogue the built-in ones) into the kernel cache "
                + "(env MOEFORGE_CACHE, else ~/.cache/moeforge/kernels) for the given targets, in parallel.")
public final class PrecompileCommand implements Callable<Integer> {

    @Parameters(paramLabel = "FILE.moe", arity = "0..*", description = "Spec files; each spec is compiled for every --target.")
    List<Path> files = new ArrayList<>();

    @Option(names = "--catalogue", description = "Also compile the built-in catalogue.")
    boolean catalogue;

    @Option(names = "--modules", description = "Also compile the hand-written modules the commands load: the decoder's "
            + "kernels, the benchmarks' helpers and the dispatch's choosing launch.")
    boolean modules;

    /** The hand-written CUDA modules the CLI's commands load through the cache. */
    static final List<ModuleResource> MODULES = List.of(GpuDecoder.MODULE, BenchKernels.MODULE, DispatchedLayer.MODULE);

    @Option(names = "--target", split = ",", defaultValue = "sm_90a",
            description = "Targets, comma-separated (default: ${DEFAULT-VALUE}); allowed: sm_90a, sm_100a, sm_120a.")
    List<String> targets;

    @Option(names = "--jobs", defaultValue = "0", description = "Parallel nvcc processes (default: the core count).")
    int jobs;

    @Option(names = "--into", paramLabel = "DIR", description = "Also copy exactly these kernels' cache entries into the "
            + "kernel cache at DIR (e.g. a bundle's), compiling only what the main cache lacks.")
    Path into;

    @Spec
    CommandSpec command;

    @Override
    public Integer call() throws Exception {
        List<Target> chosen = GenCommand.parseTargets(targets);
        if (into != null && Files.exists(into) && !Files.isDirectory(into)) {
            throw new IllegalArgumentException("--into " + into + ": not a directory");
        }
        List<KernelSpec> specs = new ArrayList<>(SpecFiles.read(files).stream().map(SpecFiles.Located::spec).toList());
        if (catalogue) {
            specs.addAll(Catalogue.specs());
        }
        if (specs.isEmpty() && !modules) {
            throw new IllegalArgumentException("nothing to compile: give .moe files, --catalogue or --modules");
        }
        Set<KernelSpec> work = new LinkedHashSet<>();  // a spec listed twice is compiled once
        for (KernelSpec spec : specs) {
            for (Target t : chosen) {
                work.add(spec.withTarget(t));
            }
        }
        KernelCache cache = KernelCache.defaultCache();
        KernelCache copy = into == null ? null : new KernelCache(into);
        PrintWriter stdout = command.commandLine().getOut();
        List<Boolean> spilled = ParallelCompile.run(List.copyOf(work), jobs, stdout, spec -> {
            CudaSource source = CudaSource.of(CudaEmitter.emit(spec));
            boolean spills = cache.getOrCompile(source, spec.target()).report().function(spec.name()).spills();
            if (copy != null) {
                copy.copyEntryFrom(cache, source, spec.target());
            }
            return spills;
        });
        long spills = spilled.stream().filter(b -> b).count();
        if (modules) {
            for (ModuleResource module : MODULES) {
                for (Target t : chosen) {
                    CudaSource source = module.source();
                    if (cache.getOrCompile(source, t).report().anySpills()) {
                        spills++;
                    }
                    if (copy != null) {
                        copy.copyEntryFrom(cache, source, t);
                    }
                }
            }
            stdout.println("compiled " + MODULES.stream().map(ModuleResource::fileName).toList() + " for " + targets);
        }
        stdout.println("precompiled " + work.size() + (work.size() == 1 ? " kernel" : " kernels") + " into "
                + cache.directory() + (copy != null ? " and copied them into " + copy.directory() : "") + " (" + cache.misses()
                + " compiled now, the rest already cached" + (spills > 0 ? "; " + spills + " spill registers" : "") + ")");
        return 0;
    }
}
