package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.ModelGeometry;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ConfigPool;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecPrinter;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.compile.CompileResult;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge pool}: the configurations routing-aware dispatch chooses among for one model's
 * expert layer ({@link ConfigPool}, both families, gate_up and down apart), compiled in parallel
 * through the kernel cache; a configuration that spills is dropped. Writes {@code DIR/pool.json}.
 */
@Command(name = "pool", mixinStandardHelpOptions = true,
        description = "Lists the config pool of a model's expert layer (output-centric and expert-centric schedules for "
                + "gate_up and for down), compiles it in parallel through the kernel cache, drops configs that spill and "
                + "writes DIR/pool.json.")
public final class PoolCommand implements Callable<Integer> {

    static final class Geometry {
        @Option(names = "--model", description = "A model by name: ${COMPLETION-CANDIDATES}.", completionCandidates = Models.class)
        String model;

        @Option(names = "--shape", paramLabel = "H,I,E,k", split = ",", description = "The geometry: hidden, intermediate, experts, top-k.")
        List<Integer> shape;
    }

    /** The model names, for the help text. */
    static final class Models extends ArrayList<String> {
        Models() {
            for (ModelGeometry m : ModelGeometry.values()) {
                add(m.text());
            }
        }
    }

    @ArgGroup(exclusive = true, multiplicity = "1")
    Geometry geometry;

    @Option(names = "--format", defaultValue = "bf16", description = "Weight format (default: ${DEFAULT-VALUE}).")
    String format;

    @Option(names = "--target", defaultValue = "sm_90a", description = "Target (default: ${DEFAULT-VALUE}).")
    String target;

    @Option(names = "--out", required = true, paramLabel = "DIR", description = "Where pool.json goes.")
    Path out;

    @Option(names = "--jobs", defaultValue = "0", description = "Parallel nvcc processes (default: the core count).")
    int jobs;

    @Option(names = "--dry-run", description = "List the pool without compiling it (no pool.json).")
    boolean dryRun;

    @Spec
    CommandSpec command;

    /** One configuration of the pool: the half it computes, its family and schedule, and its kernel. */
    record Config(String half, String family, Schedule<?> schedule, KernelSpec spec) {}

    @Override
    public Integer call() throws Exception {
        Target t = GenCommand.parseTargets(List.of(target)).getFirst();
        WeightFormat weights = QuantizeCommand.parseFormat("--format", format);
        LayerGeometry chosen = LayerGeometry.of(geometry.model, geometry.shape);
        String name = chosen.name();
        ExpertShape shape = chosen.shape();
        GateUpLayout layout = chosen.layout();
        List<Config> configs = configs(shape, layout, weights, t);
        PrintWriter stdout = command.commandLine().getOut();
        Map<String, Integer> sizes = sizes(configs);
        stdout.println("pool for " + name + " (H=" + shape.hidden() + ", I=" + shape.intermediate() + ", E=" + shape.experts()
                + ", top-" + shape.topk() + ", " + weights.text() + ", " + t.text() + "): " + configs.size() + " configs " + sizes);
        if (dryRun) {
            configs.forEach(c -> stdout.println("  " + c.half() + "  " + Candidates.name(c.schedule())));
            stdout.flush();
            return 0;
        }
        Files.createDirectories(out);
        KernelCache cache = KernelCache.defaultCache();
        List<KernelResources> resources = ParallelCompile.run(configs.stream().map(Config::spec).toList(), jobs, stdout,
                spec -> {
                    CompileResult r = cache.getOrCompile(CudaSource.of(CudaEmitter.emit(spec)), spec.target());
                    return KernelResources.of(spec, r);
                });
        List<Map<String, Object>> kept = new ArrayList<>();
        List<Map<String, Object>> dropped = new ArrayList<>();
        StringBuilder kernels = new StringBuilder();
        for (int i = 0; i < configs.size(); i++) {
            Config c = configs.get(i);
            KernelResources r = resources.get(i);
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("half", c.half());
            row.put("family", c.family());
            row.put("name", Candidates.name(c.schedule()));
            row.put("schedule", SpecPrinter.printSchedule(c.schedule()));
            row.put("registers", r.registers());
            row.put("spill_bytes", r.spillBytes());
            row.put("smem_bytes", r.sharedBytes());
            (r.spillBytes() > 0 ? dropped : kept).add(row);
            if (r.spillBytes() == 0) {
                kernels.append(SpecPrinter.print(c.spec())).append('\n');
            }
        }
        Path moe = out.resolve(PoolDirectory.KERNELS_FILE);
        Files.writeString(moe, kernels.toString());
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("model", name);
        doc.put("shape", JsonObjects.ordered("hidden", shape.hidden(), "intermediate", shape.intermediate(), "experts", shape.experts(),
                "topk", shape.topk(), "layout", layout.text()));
        doc.put("format", weights.text());
        doc.put("target", t.text());
        doc.put("kernels", PoolDirectory.KERNELS_FILE);
        doc.put("kernels_sha256", PoolDirectory.sha256(kernels.toString()));
        doc.put("configs", kept);
        doc.put("dropped_for_spills", dropped);
        Path file = out.resolve("pool.json");
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(file.toFile(), doc);
        stdout.println("kept " + kept.size() + ", dropped " + dropped.size() + " that spill; wrote " + file + " and " + moe);
        stdout.flush();
        return 0;
    }

    /** The pool's kernels: for each half, each configuration of {@link ConfigPool}, named after its schedule. */
    static List<Config> configs(ExpertShape shape, GateUpLayout layout, WeightFormat weights, Target target) {
        List<Config> configs = new ArrayList<>();
        Problem.ExpertGateUp gateUp = new Problem.ExpertGateUp(shape, weights, DType.BF16, layout);
        Problem.ExpertDown down = new Problem.ExpertDown(shape, weights, DType.BF16);
        for (Schedule<Problem.ExpertProblem> s : ConfigPool.of(gateUp, target)) {
            KernelSpec spec = KernelBuilder.named("pool_gate_up_" + Candidates.name(s)).expertGateUp(shape).layout(layout)
                    .weights(weights).schedule(s).epilogue(Epilogues.siluGatedStore(DType.BF16)).target(target).build();
            configs.add(new Config("gate_up", s.kind().name(), s, spec));
        }
        for (Schedule<Problem.ExpertProblem> s : ConfigPool.of(down, target)) {
            KernelSpec spec = KernelBuilder.named("pool_down_" + Candidates.name(s)).expertDown(shape).weights(weights)
                    .schedule(s).epilogue(Epilogues.combinedStore(DType.BF16)).target(target).build();
            configs.add(new Config("down", s.kind().name(), s, spec));
        }
        return configs;
    }

    /** Configurations per half and family, e.g. {@code gate_up expert_centric=30}. */
    static Map<String, Integer> sizes(List<Config> configs) {
        Map<String, Integer> sizes = new LinkedHashMap<>();
        for (Config c : configs) {
            sizes.merge(c.half() + " " + c.family(), 1, Integer::sum);
        }
        return sizes;
    }
}
