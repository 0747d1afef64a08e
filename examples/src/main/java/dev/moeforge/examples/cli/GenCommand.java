package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.DeviceHeader;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.PtxasReport;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

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

    @Override
    public Integer call() throws Exception {
        List<Entry> entries = generate(parseTargets(targets), out, jobs, true, KernelCache.defaultCache());
        System.out.println("wrote " + entries.size() + " kernels and " + out.resolve("catalogue.json"));
        return 0;
    }

    static List<Target> parseTargets(List<String> names) {
        List<Target> result = new ArrayList<>();
        for (String n : names) {
            Target t = Target.fromText(n.trim());
            if (t == null) {
                throw new IllegalArgumentException("--target " + n + ": unknown target; allowed: " + Target.allowedText());
            }
            result.add(t);
        }
        return result;
    }

    /** Generates and compiles the catalogue for {@code targets} into {@code out}; returns the entries written. */
    static List<Entry> generate(List<Target> targets, Path out, int jobs, boolean progress, KernelCache cache) throws Exception {
        Files.createDirectories(out);
        for (DeviceHeader header : DeviceHeader.values()) {
            Files.writeString(out.resolve(header.fileName()), header.text(), StandardCharsets.UTF_8);
        }
        List<KernelSpec> work = new ArrayList<>();
        for (KernelSpec spec : Catalogue.specs()) {
            for (Target t : targets) {
                work.add(spec.withTarget(t));
            }
        }
        List<Entry> entries = ParallelCompile.run(work, jobs, progress, spec -> compileOne(spec, out, cache));
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
        PtxasReport.FunctionResources f = r.report().function(spec.name());
        String family = spec.schedule().kind().name() + switch (spec.problem()) {
            case Problem.ExpertGateUp _ -> "_gate_up";
            case Problem.ExpertDown _ -> "_down";
            case Problem.ExpertMlp _ -> "_mlp";
            case Problem.Router _ -> "";
        };
        long smem = f.sharedBytes() + LaunchGeometry.of(spec, 1).sharedBytes();
        return new Entry(spec.name(), family, spec.problem().weights().text(), spec.target().text(), f.registers(),
                f.spillStoreBytes() + f.spillLoadBytes(), smem, k.fileName(), cubinName);
    }
}
