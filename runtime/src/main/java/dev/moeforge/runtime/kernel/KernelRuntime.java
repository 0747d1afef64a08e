package dev.moeforge.runtime.kernel;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.codegen.cuda.LaunchGeometry;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaModule;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Spec to launchable kernel on one device: generate, compile through the content-addressed
 * cache, load, and keep the module for the runtime's lifetime. Specs are retargeted to the
 * device's architecture, so the catalogue's text loads on any supported GPU.
 */
public final class KernelRuntime implements AutoCloseable {
    private final CudaContext context;
    private final KernelCache cache;
    private final Target target;
    /** One future per spec: the first caller compiles and loads, others wait for it (no lock held while nvcc runs). */
    private final Map<KernelSpec, CompletableFuture<KernelHandle>> loaded = new ConcurrentHashMap<>();
    private final List<CudaModule> modules = new ArrayList<>();

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

    private KernelHandle compileAndLoad(KernelSpec spec) {
        GeneratedKernel generated = CudaEmitter.emit(spec);
        CompileResult compiled = cache.getOrCompile(
                CudaSource.of(generated), target);
        context.makeCurrent();  // loads may run on any thread, e.g. a pool compiling in parallel
        CudaModule module = CudaModule.load(compiled.cubin());
        synchronized (modules) {
            modules.add(module);
        }
        CudaFunction function = module.function(spec.name());
        int shared = LaunchGeometry.of(spec, 1).sharedBytes();
        if (shared > 48 * 1024) {
            function.setMaxDynamicSharedBytes(shared);
        }
        return new KernelHandle(spec, generated.specText(), function, compiled.report().function(spec.name()));
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
