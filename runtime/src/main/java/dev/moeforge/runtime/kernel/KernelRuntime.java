package dev.moeforge.runtime.kernel;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.dsl.check.ValidatedSpec;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.PtxasReport;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaModule;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Logger;

/**
 * Spec to launchable kernel on one device: generate, compile through the content-addressed
 * cache, load, and keep the module for the runtime's lifetime. Specs are retargeted to the
 * device's architecture, so the catalogue's text loads on any supported GPU.
 */
public final class KernelRuntime implements AutoCloseable {
    private static final Logger LOG = Logger.getLogger(KernelRuntime.class.getName());
    private final CudaContext context;
    private final KernelCache cache;
    private final Target target;
    /** One future per spec: the first caller compiles and loads, others wait for it (no lock held while nvcc runs). */
    private final Map<KernelSpec, CompletableFuture<KernelHandle>> loaded = new ConcurrentHashMap<>();
    private final List<CudaModule> modules = new ArrayList<>();
    /** Where each newly loaded spec's canonical text is appended, when env {@value #RECORD_ENV} names a file. */
    private final Optional<Path> record = Optional.ofNullable(System.getenv(RECORD_ENV)).map(Path::of);

    /**
     * The environment variable naming a file to which the runtime appends the canonical text of every
     * spec it loads (once each): how a GPU run lists the kernels a later build should precompile
     * ({@code moeforge precompile}).
     */
    public static final String RECORD_ENV = "MOEFORGE_RECORD_SPECS";

    public KernelRuntime(CudaContext context, KernelCache cache) {
        this.context = context;
        this.cache = cache;
        int cc = context.computeCapability();
        this.target = context.target().orElseThrow(() -> new IllegalStateException("MoeForge has no target for "
                + context.deviceName() + " (compute capability " + cc / 10 + "." + cc % 10 + "); supported: "
                + Target.allowedText()));
    }

    public Target target() {
        return target;
    }

    public CudaContext context() {
        return context;
    }

    /** As {@link #loadSource(String, String)}, the source being the hand-written module shipped beside its owner class. */
    public CudaModule loadResource(ModuleResource module) {
        return load(module.source());
    }

    /**
     * A hand-written CUDA source (not generated from a spec), compiled for this runtime's target
     * through the kernel cache and loaded; the runtime closes the module.
     */
    public CudaModule loadSource(String fileName, String code) {
        return load(CudaSource.of(fileName, code));
    }

    private CudaModule load(CudaSource source) {
        CompileResult compiled = cache.getOrCompile(source, target);
        context.makeCurrent();
        CudaModule module = CudaModule.load(compiled.cubin());
        synchronized (modules) {
            modules.add(module);
        }
        return module;
    }

    public KernelHandle load(String specText) {
        return load(SpecParser.parse(specText));
    }

    public KernelHandle load(KernelSpec spec) {
        KernelSpec retargeted = spec.withTarget(target);
        CompletableFuture<KernelHandle> mine = new CompletableFuture<>();
        CompletableFuture<KernelHandle> existing = loaded.putIfAbsent(retargeted, mine);
        if (existing == null) {
            try {
                mine.complete(compileAndLoad(retargeted));
                record.ifPresent(file -> append(file, retargeted));
            } catch (RuntimeException | Error e) {
                loaded.remove(retargeted, mine);  // a later call may try again
                mine.completeExceptionally(e);
                throw e;
            }
            return mine.join();
        }
        try {
            return existing.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof RuntimeException r) {
                throw r;
            }
            throw e;
        }
    }

    private static void append(Path file, KernelSpec spec) {
        synchronized (KernelRuntime.class) {
            try {
                Files.writeString(file, SpecPrinter.print(spec) + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                        StandardOpenOption.APPEND);
            } catch (IOException e) {
                throw new UncheckedIOException("cannot record " + spec.name() + " in " + file + " (" + RECORD_ENV + ")", e);
            }
        }
    }

    private KernelHandle compileAndLoad(KernelSpec spec) {
        ValidatedSpec<?> valid = Validator.check(spec);  // once: the emitter, the launch and the handle share it
        GeneratedKernel generated = CudaEmitter.emit(valid);
        CompileResult compiled = cache.getOrCompile(
                CudaSource.of(generated), target);
        context.makeCurrent();  // loads may run on any thread, e.g. a pool compiling in parallel
        CudaModule module = CudaModule.load(compiled.cubin());
        synchronized (modules) {
            modules.add(module);
        }
        CudaFunction function = module.function(spec.name());
        int shared = valid.geometry(1).sharedBytes();
        if (shared > 48 * 1024) {
            function.setMaxDynamicSharedBytes(shared);
        }
        PtxasReport.FunctionResources resources = compiled.report().function(spec.name());
        Optional<String> spilled = spillWarning(spec, resources);
        if (spilled.isPresent()) {  // logged from here, so that the record names this method as its source
            LOG.warning(spilled.get());
        }
        Optional<RoutingAlign> align = Optional.empty();
        if (valid.takesRoutingPlan() && valid.problem() instanceof Problem.ExpertProblem p) {
            align = Optional.of(new RoutingAlign(module.function(spec.name() + RoutingPlan.COUNT_ENTRY),
                    module.function(spec.name() + RoutingPlan.SCATTER_ENTRY), p.shape().experts(), p.shape().topk()));
        }
        Optional<ActivationQuantiser> quantiser = Optional.empty();
        if (valid.takesQuantisedX()) {
            quantiser = Optional.of(new ActivationQuantiser(module.function(spec.name() + ExpertCentric.QUANTISE_ENTRY),
                    ((Problem.ExpertGateUp) valid.problem()).shape().hidden()));
        }
        Optional<SlotCombine> combine = Optional.empty();
        if (valid.combinesAfter() && valid.problem() instanceof Problem.ExpertProblem p) {
            combine = Optional.of(new SlotCombine(module.function(spec.name() + ExpertCentric.COMBINE_ENTRY), p.shape().hidden(),
                    p.shape().topk()));
        }
        return new KernelHandle(valid, generated.specText(), function, resources, align, quantiser, combine);
    }

    /**
     * What to tell the author of a kernel that ptxas made spill registers to local memory: it still
     * computes the right thing, but slower (bench/NOTES.md, "Which tensor-core downs spill", lists
     * where nvcc does). The schedule names its parameters that free registers. Empty when nothing spilled.
     */
    static Optional<String> spillWarning(KernelSpec spec, PtxasReport.FunctionResources resources) {
        if (!resources.spills()) {
            return Optional.empty();
        }
        String remedy = spec.schedule().spillAdvice();
        return Optional.of(spec.name() + " (" + spec.target().text() + ") spills " + resources.spillStoreBytes() + " bytes of stores and "
                + resources.spillLoadBytes() + " bytes of loads per thread to local memory at " + resources.registers()
                + " registers: it computes the same outputs, more slowly. ptxas has more registers per thread with " + remedy + ".");
    }

    @Override
    public void close() {
        synchronized (modules) {
            for (CudaModule m : modules) {
                m.close();
            }
            modules.clear();
        }
        loaded.clear();
    }
}
