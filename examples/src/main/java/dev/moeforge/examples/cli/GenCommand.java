package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.DeviceHeader;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code moeforge gen}: one .cu and .cubin per built-in kernel and target, and catalogue.json. */
@Command(name = "gen", mixinStandardHelpOptions = true,
        description = "Generates the CUDA of every built-in kernel for each target, compiles it with nvcc "
                + "(through the kernel cache) and writes DIR/catalogue.json with each kernel's resources.")
public final class GenCommand implements Callable<Integer> {

    @Option(names = "--target", split = ",", defaultValue = "sm_90a,sm_100a,sm_120a",
            description = "Targets, comma-separated (default: ${DEFAULT-VALUE}); allowed: sm_90a, sm_100a, sm_120a.")
    List<String> targets;

    @Option(names = "--out", required = true, description = "Output directory (created if missing).")
    Path out;

    @Option(names = "--jobs", defaultValue = "0", description = "Parallel nvcc processes (default: the core count).")
    int jobs;

    /** One kernel of catalogue.json. */
    public record Entry(String name, String family, String format, String target, int registers,
                        long spill_bytes, long smem_bytes, String source, String cubin) {}

    @Spec
    CommandSpec command;

    @Override
    public Integer call() throws Exception {
        PrintWriter stdout = command.commandLine().getOut();
        List<Entry> entries = generate(Catalogue.specs(), parseTargets(targets), out, jobs, stdout, KernelCache.defaultCache());
        stdout.println("wrote " + entries.size() + " kernels and " + out.resolve("catalogue.json"));
        return 0;
    }

    /** The targets named, each once, in the order first named; an unknown name is refused with the known ones. */
    static List<Target> parseTargets(List<String> names) {
        Set<Target> result = new LinkedHashSet<>();
        for (String n : names) {
            Target t = Target.fromText(n.trim());
            if (t == null) {
                throw new IllegalArgumentException("--target " + n + ": unknown target; allowed: " + Target.allowedText());
            }
            result.add(t);
        }
        return List.copyOf(result);
    }

    /**
     * Generates and compiles {@code specs} (the catalogue) for {@code targets} into {@code out}; returns the
     * entries written. A compile longer than a second is reported on {@code log} (null: not reported).
     */
    static List<Entry> generate(List<KernelSpec> specs, List<Target> targets, Path out, int jobs, PrintWriter log,
                                KernelCache cache) throws Exception {
        Files.createDirectories(out);
        for (DeviceHeader header : DeviceHeader.values()) {
            Files.writeString(out.resolve(header.fileName()), header.text(), StandardCharsets.UTF_8);
        }
        List<KernelSpec> work = new ArrayList<>();
        for (KernelSpec spec : specs) {
            for (Target t : targets) {
                work.add(spec.withTarget(t));
            }
        }
        List<Entry> entries = ParallelCompile.run(work, jobs, log, spec -> compileOne(spec, out, cache));
        ObjectMapper json = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("kernels", entries);
        json.writeValue(out.resolve("catalogue.json").toFile(), doc);
        return entries;
    }

    private static Entry compileOne(KernelSpec spec, Path out, KernelCache cache) throws Exception {
        GeneratedKernel k = CudaEmitter.emit(spec);
        Path source = out.resolve(k.fileName());
        Files.writeString(source, k.source(), StandardCharsets.UTF_8);
        CompileResult r = cache.getOrCompile(CudaSource.of(k), spec.target());
        String cubinName = k.fileName().replaceAll("\\.cu$", ".cubin");
        Files.write(out.resolve(cubinName), r.cubin());
        KernelResources res = KernelResources.of(spec, r);
        String family = spec.schedule().kind().name() + switch (spec.problem()) {
            case Problem.ExpertGateUp _ -> "_gate_up";
            case Problem.ExpertDown _ -> "_down";
            case Problem.ExpertMlp _ -> "_mlp";
            case Problem.Router _, Problem.Linear _ -> "";
        };
        return new Entry(spec.name(), family, spec.problem().weights().text(), spec.target().text(), res.registers(),
                res.spillBytes(), res.sharedBytes(), k.fileName(), cubinName);
    }
}
