package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.GpuTimer.Timing;
import dev.moeforge.examples.bench.HalfProfiler;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.DispatchedLayer;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.TokenKeyedLayer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code moeforge bench dispatch DIR}: the expert layer with routing-aware dispatch decided on the
 * GPU (the plan choosing the pair and one graph switch, per layer or per step; {@link DispatchedLayer}) against
 * the static pair an autotuner picks per batch (the best measured at the batch's most balanced
 * profiled point), at each profiled batch and a skewed routing; and the dispatch's own cost
 * (the dispatched layer against a plain layer of the pair it chose).
 */
@Command(name = "dispatch", mixinStandardHelpOptions = true,
        description = "Times the expert layer with dispatch decided on the GPU (DIR's pool, profile and fit) against the static "
                + "pair per batch, at the profiled batches and the given balancedness; writes <out>/<date>-<device>-dispatch.json.")
public final class BenchDispatchCommand implements Callable<Integer> {
    @Mixin
    BenchOptions options;

    @Parameters(index = "0", paramLabel = "DIR", description = "The pool's directory, profiled (`moeforge profile`).")
    Path dir;

    @Option(names = "--balancedness", split = ",", defaultValue = "0.7,1.0",
            description = "Balancedness of the routings timed at each batch (default: ${DEFAULT-VALUE}; moved into what the batch reaches).")
    List<Double> levels;

    @Option(names = "--layers", defaultValue = "4", description = "Layers of weights rotated per replay (default: ${DEFAULT-VALUE}).")
    int layers;

    @Option(names = "--seed", defaultValue = "20261128", description = "Seed of weights and routings (default: ${DEFAULT-VALUE}).")
    long seed;

    @Override
    public Integer call() throws Exception {
        PoolDirectory.Loaded profiled = PoolDirectory.load(dir);
        PoolFit fit = profiled.fit();
        JsonNode profile = profiled.profile();
        options.require("bench dispatch");
        Map<String, WaveCostModel> models = fit.fit(WaveCostModel.MAX_TERMS);
        DispatchTable table = DispatchTable.of(fit, models);
        Map<String, KernelSpec> specs = profiled.kernels();
        ExpertShape shape = fit.configs().getFirst().problem().shape();
        List<Integer> batches = fit.profiled().stream().map(PoolFit.Point::batch).distinct().sorted().toList();
        int maxBatch = batches.getLast();
        KernelCache cache = KernelCache.defaultCache();
        List<Map<String, Object>> rows = new ArrayList<>();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             CudaStream bodies = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime);
             DispatchedLayer dispatched = new DispatchedLayer(runtime, table, name -> runtime.load(specs.get(name)), maxBatch);
             TokenKeyedLayer keyed = new TokenKeyedLayer(runtime, table, shape, name -> runtime.load(specs.get(name)),
                     LaunchOrder.OVERLAPPING_PREVIOUS, maxBatch);
             HalfProfiler bench = new HalfProfiler(kernels, stream, shape, layers, maxBatch, seed)) {
            System.out.printf(Locale.ROOT, "dispatch of %s on %s: %d gate_up and %d down candidates, %d layers rotated%n",
                    profile.get("model").asText(), ctx.deviceName(), table.gateUp().size(), table.down().size(), layers);
            System.out.printf(Locale.ROOT, "%-6s %-6s %12s %10s %12s %10s %10s %12s %10s %8s %8s %8s %8s  %s%n", "M", "beta", "dispatched",
                    "per step", "static", "speedup", "keyed", "chosen plain", "overhead", "serial", "decision", "+choice", "plan",
                    "chosen / static / keyed");
            for (int m : batches) {
                PoolFit.Point balanced = fit.profiled().stream().filter(p -> p.batch() == m)
                        .max(java.util.Comparator.comparingDouble(PoolFit.Point::balancedness)).orElseThrow();
                String staticUp = fit.best(PoolFit.Half.GATE_UP, balanced).name();
                String staticDown = fit.best(PoolFit.Half.DOWN, balanced).name();
                try (ExpertLayer fixed = new ExpertLayer(runtime.load(specs.get(staticUp)), runtime.load(specs.get(staticDown)),
                        LaunchOrder.OVERLAPPING_PREVIOUS, m)) {
                    RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(seed + m, m, shape.experts(), shape.topk());
                    // levels a batch cannot reach move to the nearest it can; those that land together are timed once
                    for (double target : levels.stream().mapToDouble(range::clamp).distinct().toArray()) {
                        Routing routing = RandomInputs.skewedRouting(seed + m, m, shape.experts(), shape.topk(), target);
                        bench.route(routing);
                        dispatched.prepare(m);
                        Timing withDispatch = bench.timeLayers(stream, l -> dispatched.record(stream, bodies, m, bench.x(),
                                bench.gateUpWeights(l), bench.downWeights(l), bench.ids(), bench.weights(), bench.inter(), bench.y()),
                                options.warmup, options.reps);
                        List<DispatchedLayer.LayerIo> all = new ArrayList<>();
                        for (int l = 0; l < layers; l++) {
                            all.add(new DispatchedLayer.LayerIo(bench.x(), bench.gateUpWeights(l), bench.downWeights(l), bench.ids(),
                                    bench.weights(), bench.inter(), bench.y()));
                        }
                        Timing perStep = bench.timeLayers(stream, l -> {
                            if (l == 0) {
                                dispatched.record(stream, bodies, m, all, DispatchedLayer.Scope.STEP);
                            }
                        }, options.warmup, options.reps);
                        int[] chosen = dispatched.lastChoice();
                        String chosenUp = table.gateUp().get(chosen[0]).name();
                        String chosenDown = table.down().get(chosen[1]).name();
                        Timing staticPair = bench.timeLayers(stream, l -> fixed.enqueue(stream, m, bench.x(), bench.gateUpWeights(l),
                                bench.downWeights(l), bench.ids(), bench.weights(), bench.inter(), bench.y()), options.warmup, options.reps);
                        // the pair keyed on the token count: no decision on the device
                        ExpertLayer keyedLayer = keyed.prepare(m);
                        Timing keyedPair = bench.timeLayers(stream, l -> keyed.enqueue(stream, m, bench.x(), bench.gateUpWeights(l),
                                bench.downWeights(l), bench.ids(), bench.weights(), bench.inter(), bench.y()), options.warmup, options.reps);
                        Timing chosenPlain;
                        try (ExpertLayer plain = new ExpertLayer(runtime.load(specs.get(chosenUp)), runtime.load(specs.get(chosenDown)),
                                LaunchOrder.OVERLAPPING_PREVIOUS, m)) {
                            chosenPlain = bench.timeLayers(stream, l -> plain.enqueue(stream, m, bench.x(), bench.gateUpWeights(l),
                                    bench.downWeights(l), bench.ids(), bench.weights(), bench.inter(), bench.y()), options.warmup, options.reps);
                        }
                        Timing chosenSerial;
                        try (ExpertLayer serial = new ExpertLayer(runtime.load(specs.get(chosenUp)), runtime.load(specs.get(chosenDown)),
                                LaunchOrder.AFTER_PREVIOUS, m)) {
                            chosenSerial = bench.timeLayers(stream, l -> serial.enqueue(stream, m, bench.x(), bench.gateUpWeights(l),
                                    bench.downWeights(l), bench.ids(), bench.weights(), bench.inter(), bench.y()), options.warmup, options.reps);
                        }
                        // the decision in parts: the plan alone, the plan with the choice in it, and with the switch (bodies empty)
                        double plan = bench.timeLayers(stream, l -> dispatched.recordPlan(stream, m, bench.ids()), options.warmup,
                                options.reps).medianMicros();
                        double planAndChoice = bench.timeLayers(stream, l -> dispatched.recordDecision(stream, bodies, m, bench.ids(),
                                false), options.warmup, options.reps).medianMicros();
                        double decision = bench.timeLayers(stream, l -> dispatched.recordDecision(stream, bodies, m, bench.ids(), true),
                                options.warmup, options.reps).medianMicros();
                        double beta = routing.balancedness(shape.experts());
                        Map<String, Object> row = new LinkedHashMap<>();
                        row.put("batch", m);
                        row.put("balancedness", beta);
                        row.put("dispatched_us", withDispatch.medianMicros());
                        row.put("dispatched_per_step_us", perStep.medianMicros());
                        row.put("static_us", staticPair.medianMicros());
                        row.put("speedup_over_static", staticPair.medianMicros() / withDispatch.medianMicros());
                        row.put("speedup_over_static_per_step", staticPair.medianMicros() / perStep.medianMicros());
                        row.put("chosen", chosenUp + " + " + chosenDown);
                        row.put("candidates_at_batch", Map.of("gate_up", dispatched.candidatesAt(m).gateUp().size(), "down",
                                dispatched.candidatesAt(m).down().size()));
                        row.put("keyed_us", keyedPair.medianMicros());
                        row.put("keyed", keyedLayer.gateUp().spec().name() + " + " + keyedLayer.down().spec().name());
                        row.put("speedup_keyed_over_static", staticPair.medianMicros() / keyedPair.medianMicros());
                        row.put("chosen_plain_us", chosenPlain.medianMicros());
                        row.put("dispatch_overhead_us", withDispatch.medianMicros() - chosenPlain.medianMicros());
                        row.put("dispatch_overhead_per_step_us", perStep.medianMicros() - chosenPlain.medianMicros());
                        row.put("chosen_serial_us", chosenSerial.medianMicros());
                        row.put("plan_us", plan);
                        row.put("plan_with_choice_us", planAndChoice);
                        row.put("decision_us", decision);
                        row.put("static", staticUp + " + " + staticDown);
                        rows.add(row);
                        System.out.printf(Locale.ROOT, "%-6d %-6.2f %12.1f %10.1f %12.1f %9.3fx %10.1f %12.1f %10.1f %8.1f %8.1f %8.1f %8.1f  %s / %s / %s%n",
                                m, beta, withDispatch.medianMicros(), perStep.medianMicros(), staticPair.medianMicros(),
                                staticPair.medianMicros() / withDispatch.medianMicros(), keyedPair.medianMicros(), chosenPlain.medianMicros(),
                                withDispatch.medianMicros() - chosenPlain.medianMicros(), chosenSerial.medianMicros(), decision,
                                planAndChoice, plan, shortName(chosenUp) + " + " + shortName(chosenDown),
                                shortName(staticUp) + " + " + shortName(staticDown),
                                shortName(keyedLayer.gateUp().spec().name()) + " + " + shortName(keyedLayer.down().spec().name()));
                        System.out.printf(Locale.ROOT, "       candidates at %d tokens: %d gate_up, %d down%n", m,
                                dispatched.candidatesAt(m).gateUp().size(), dispatched.candidatesAt(m).down().size());
                    }
                }
            }
            Map<String, Object> doc = BenchReports.header("dispatch", ctx);
            doc.put("model", profile.get("model").asText());
            doc.put("pool", dir.toString());
            doc.put("method", Map.of("layers", layers, "warmup", options.warmup, "reps", options.reps, "seed", seed, "timing",
                    "CUDA events around each replay of one graph running all layers; per layer = replay / layers; median",
                    "dispatched", "each layer: the plan's two launches, the second choosing the pair, and one switch over the "
                            + "(gate_up, down) pairs", "per step", "the first layer's plan chooses once; one switch whose body runs "
                            + "every layer (its plan, gate_up, down) with that pair", "static", "the best measured pair at the "
                            + "batch's most balanced profiled point", "overhead", "dispatched minus a plain graph of the pair the dispatch "
                            + "chose (its kernels launched as programmatic dependents); serial: that pair launched without; decision: "
                            + "the plan with the choice and the switch, bodies empty; +choice: without the switch; plan: the plan alone", "keyed",
                    "the pair keyed on the token count (DispatchTable.keyedOnTokens, chosen on the host) as a plain graph"));
            doc.put("candidates", Map.of("gate_up", table.gateUp().stream().map(DispatchTable.Row::name).toList(),
                    "down", table.down().stream().map(DispatchTable.Row::name).toList()));
            doc.put("results", rows);
            System.out.println("wrote " + BenchReports.write(options.out, ctx, "dispatch", doc));
        }
        return 0;
    }

    private static String shortName(String name) {
        return name.replaceFirst("^pool_(gate_up|down)_", "").replace("expert_centric_", "ec_").replace("output_centric_", "oc_");
    }
}
