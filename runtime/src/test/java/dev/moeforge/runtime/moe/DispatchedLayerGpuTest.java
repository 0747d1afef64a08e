package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.RequiresGpu;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.TunedPoolFixture;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Routing-aware dispatch decided on the GPU: one graph per token count, replayed on new routings,
 * chooses on the device what the host twin ({@link DispatchedLayer#hostChoice}) chooses, and the layer
 * it runs matches the FP64 reference with its outputs poisoned first. And the same candidates keyed on
 * the token count on the host ({@link TokenKeyedLayer}).
 */
@RequiresGpu
class DispatchedLayerGpuTest extends GpuSession {
    static final ExpertShape SHAPE = new ExpertShape(256, 128, 16, 4);

    /** Candidates: the name, then the gate_up and the down schedule. */
    record Candidate(String name, Schedule<?> gateUp, Schedule<?> down, WaveCostModel model) {}

    /**
     * Made-up models that put each candidate first somewhere: one token per warp for one token,
     * 16-pair tiles for a few tokens per expert or a uniform batch, 64-pair tiles for a batch piled
     * onto a few experts or a large one; the tiles of 8 tokens never.
     */
    static final List<Candidate> CANDIDATES = List.of(
            new Candidate("oc_t1", new OutputCentric(4, 16, 4, 1, 1, 0), new OutputCentric(4, 16, 4, 1, 1, 0),
                    new WaveCostModel(1, 0, 0.02, 0, 0, 3)),
            new Candidate("oc_t8", new OutputCentric(4, 16, 4, 8, 1, 0), new OutputCentric(4, 16, 4, 8, 1, 0),
                    new WaveCostModel(3, 0, 0.02, 0, 0, 3)),
            new Candidate("ec16", new ExpertCentric(16, 32, 32, 1, 2, 3, 1), new ExpertCentric(16, 32, 32, 1, 2, 2, 1),
                    new WaveCostModel(8, 0, 0.01, 0, 0, 3)),
            new Candidate("ec64", new ExpertCentric(64, 64, 64, 2, 2, 3, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8),
                    new WaveCostModel(8.4, 0, 0.025, 0, 0, 3)));

    static ExpertLayerSpecs specs(Candidate c) {
        return ExpertLayerSpecs.of("dispatch_" + c.name(), SHAPE, GateUpLayout.STACKED, c.gateUp(), c.down(), runtime.target());
    }

    @SuppressWarnings("unchecked")
    static DispatchTable table() {
        List<DispatchTable.Row> up = new ArrayList<>();
        List<DispatchTable.Row> down = new ArrayList<>();
        for (Candidate c : CANDIDATES) {
            ExpertLayerSpecs s = specs(c);
            up.add(DispatchTable.row(s.gateUp().name(), (Problem.ExpertProblem) s.gateUp().problem(),
                    (Schedule<Problem.ExpertProblem>) s.gateUp().schedule(), c.model()));
            down.add(DispatchTable.row(s.down().name(), (Problem.ExpertProblem) s.down().problem(),
                    (Schedule<Problem.ExpertProblem>) s.down().schedule(), c.model()));
        }
        return new DispatchTable(SHAPE.experts(), up, down);
    }

    /** Every candidate's kernels, compiled, by name. */
    static Map<String, KernelSpec> compiledCandidates() throws Exception {
        Map<String, KernelSpec> byName = new LinkedHashMap<>();
        for (Candidate c : CANDIDATES) {
            ExpertLayerSpecs s = specs(c);
            byName.put(s.gateUp().name(), s.gateUp());
            byName.put(s.down().name(), s.down());
        }
        compileAll(new ArrayList<>(byName.values()));
        return byName;
    }

    static DispatchedLayer layer(int capacity) throws Exception {
        Map<String, KernelSpec> byName = compiledCandidates();
        return new DispatchedLayer(runtime, table(), name -> runtime.load(byName.get(name)), capacity);
    }

    /** Every token on experts 0..k-1: a batch piled onto k experts. */
    static Routing piled(int tokens, long seed) {
        Routing r = RandomInputs.uniformRouting(seed, tokens, SHAPE.experts(), SHAPE.topk());
        int[] ids = new int[tokens * SHAPE.topk()];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = i % SHAPE.topk();
        }
        return new Routing(tokens, SHAPE.topk(), ids, r.weights());
    }

    static int[] load(Routing r) {
        return r.expertLoad(SHAPE.experts());
    }

    /** Runs the graph on `routing` (uploaded into the buffers it reads) and checks y and the choice. */
    static int[] runAndCheck(String where, DispatchedLayer layer, CudaGraph graph, LayerBuffers b, Routing routing, short[] x,
                             LayerWeights w) {
        b.ids().copyFrom(routing.ids());
        b.weights().copyFrom(routing.weights());
        b.poison();
        graph.launch(stream);
        stream.synchronize();
        int[] chosen = layer.lastChoice();
        int[] expected = layer.hostChoice(load(routing), routing.tokens());
        assertArrayEquals(expected, chosen, () -> "the device chose other candidates than the host twin: " + where);
        ExpertLayerSpecs ref = specs(CANDIDATES.get(2));
        ExpertReference.LayerResult r = ExpertReference.layer(ref.gateUp(), ref.down(), x,
                WeightRows.bf16(w.gateUp(), SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden()),
                WeightRows.bf16(w.down(), SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate()), routing);
        ErrorStats e = ErrorStats.of(r.y().exact(), download(b.y()));
        System.out.println(where + ": chose " + layer.table().gateUp().get(chosen[0]).name() + " + "
                + layer.table().down().get(chosen[1]).name() + ", y " + e);
        BF16_OUTPUT.check(e, () -> "y of " + where);
        return chosen;
    }

    @Test
    void eachTokenCountChoosesOnTheDeviceWhatTheHostTwinChoosesAndMatchesTheReference() throws Exception {
        long seed = System.nanoTime();
        LayerWeights w = layerWeights(SHAPE, seed);
        List<String> picks = new ArrayList<>();
        try (DispatchedLayer layer = layer(300); CudaStream bodies = CudaStream.create()) {
            for (int tokens : new int[] {1, 5, 40, 300}) {
                short[] x = RandomInputs.bf16Normal(seed + tokens, tokens * SHAPE.hidden(), 1.0);
                Routing first = RandomInputs.uniformRouting(seed + 2L * tokens, tokens, SHAPE.experts(), SHAPE.topk());
                try (LayerBuffers b = LayerBuffers.of(x, first, ExpertReference.layer(specs(CANDIDATES.get(2)).gateUp(),
                        specs(CANDIDATES.get(2)).down(), x, WeightRows.bf16(w.gateUp(), SHAPE.experts(), 2 * SHAPE.intermediate(),
                                SHAPE.hidden()), WeightRows.bf16(w.down(), SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate()), first));
                     CudaGraph graph = layer.capture(stream, bodies, tokens, b.x(), DeviceWeights.bf16(w.deviceGateUp()),
                             DeviceWeights.bf16(w.deviceDown()), b.ids(), b.weights(), b.inter(), b.y())) {
                    for (int round = 0; round < 2; round++) {
                        Routing r = round == 0 ? first : RandomInputs.uniformRouting(seed + 2L * tokens + 1, tokens, SHAPE.experts(),
                                SHAPE.topk());
                        int[] chosen = runAndCheck("M=" + tokens + " routing " + round + " seed=" + seed, layer, graph, b, r, x, w);
                        picks.add(layer.table().gateUp().get(chosen[0]).name());
                    }
                }
            }
        }
        assertEquals(3, picks.stream().distinct().count(), "one token per warp, 16- and 64-pair tiles each win somewhere: " + picks);
    }

    @Test
    void oneGraphChoosesAgainForEachRouting() throws Exception {
        long seed = System.nanoTime();
        LayerWeights w = layerWeights(SHAPE, seed);
        int tokens = 64;
        short[] x = RandomInputs.bf16Normal(seed, tokens * SHAPE.hidden(), 1.0);
        Routing uniform = RandomInputs.uniformRouting(seed + 1, tokens, SHAPE.experts(), SHAPE.topk());
        Routing piled = piled(tokens, seed + 2);
        try (DispatchedLayer layer = layer(tokens); CudaStream bodies = CudaStream.create();
             LayerBuffers b = new LayerBuffers(upload(x), DeviceBuffer.allocate(DType.INT32, tokens * SHAPE.topk()),
                     DeviceBuffer.allocate(DType.FP32, tokens * SHAPE.topk()),
                     DeviceBuffer.allocate(DType.BF16, (long) tokens * SHAPE.topk() * SHAPE.intermediate()),
                     DeviceBuffer.allocate(DType.BF16, (long) tokens * SHAPE.hidden()));
             CudaGraph graph = capture(layer, bodies, tokens, io(b, w))) {
            int[] spread = runAndCheck("uniform, seed=" + seed, layer, graph, b, uniform, x, w);
            int[] pile = runAndCheck("piled onto 4 experts, seed=" + seed, layer, graph, b, piled, x, w);
            int[] again = runAndCheck("uniform again, seed=" + seed, layer, graph, b, uniform, x, w);
            assertNotEquals(spread[0], pile[0], "the same graph chose the same gate_up for a spread and a piled routing");
            assertArrayEquals(spread, again);
        }
    }

    /**
     * One switch a step: the first layer's histogram decides for both layers of the graph, each layer
     * still runs on its own plan, and a second layer whose routing alone would pick other tiles
     * runs the first layer's pair and matches the reference.
     */
    @Test
    void aStepDecidesOnTheFirstLayerAndRunsEveryLayerWithThatPair() throws Exception {
        long seed = System.nanoTime();
        LayerWeights w = layerWeights(SHAPE, seed);
        int tokens = 64;
        short[] x0 = RandomInputs.bf16Normal(seed, tokens * SHAPE.hidden(), 1.0);
        short[] x1 = RandomInputs.bf16Normal(seed + 1, tokens * SHAPE.hidden(), 1.0);
        Routing uniform = RandomInputs.uniformRouting(seed + 2, tokens, SHAPE.experts(), SHAPE.topk());
        Routing piled = piled(tokens, seed + 3);
        ExpertLayerSpecs ref = specs(CANDIDATES.get(2));
        WeightRows gu = WeightRows.bf16(w.gateUp(), SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden());
        WeightRows dn = WeightRows.bf16(w.down(), SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate());
        for (Routing[] order : new Routing[][] {{uniform, piled}, {piled, uniform}}) {
            ExpertReference.LayerResult r0 = ExpertReference.layer(ref.gateUp(), ref.down(), x0, gu, dn, order[0]);
            ExpertReference.LayerResult r1 = ExpertReference.layer(ref.gateUp(), ref.down(), x1, gu, dn, order[1]);
            try (DispatchedLayer layer = layer(tokens); CudaStream bodies = CudaStream.create();
                 LayerBuffers b0 = LayerBuffers.of(x0, order[0], r0);
                 LayerBuffers b1 = LayerBuffers.of(x1, order[1], r1)) {
                layer.prepare(tokens);
                try (CudaGraph graph = CudaGraph.capture(stream, () -> layer.record(stream, bodies, tokens, List.of(io(b0, w), io(b1, w)),
                        DispatchedLayer.Scope.STEP))) {
                    b0.poison();
                    b1.poison();
                    graph.launch(stream);
                    stream.synchronize();
                }
                int[] chosen = layer.lastChoice();
                String where = (order[0] == uniform ? "uniform then piled" : "piled then uniform") + ", seed=" + seed;
                assertArrayEquals(layer.hostChoice(load(order[0]), tokens), chosen,
                        () -> "a step decides on its first layer's histogram: " + where);
                assertNotEquals(layer.hostChoice(load(order[1]), tokens)[0], chosen[0],
                        () -> "the second layer's routing alone picks the same gate_up, so the case shows nothing: " + where);
                BF16_OUTPUT.check(ErrorStats.of(r0.y().exact(), download(b0.y())), () -> "y of the first layer, " + where);
                BF16_OUTPUT.check(ErrorStats.of(r1.y().exact(), download(b1.y())), () -> "y of the second layer, " + where);
            }
        }
    }

    /**
     * No decision on the device: a {@link TokenKeyedLayer} runs, for each token count, the pair the host
     * keys on that count ({@link DispatchTable#keyedOnTokens}), captured in a graph of its two kernels and
     * the plan alone, on a spread and a piled routing, and matches the reference; the made-up models key
     * different pairs to different token counts.
     */
    @Test
    void aLayerKeyedOnTokensRunsTheHostsPairForEachTokenCountAndMatchesTheReference() throws Exception {
        long seed = System.nanoTime();
        LayerWeights w = layerWeights(SHAPE, seed);
        Map<String, KernelSpec> byName = compiledCandidates();
        DispatchTable table = table();
        ExpertLayerSpecs ref = specs(CANDIDATES.get(2));
        WeightRows gu = WeightRows.bf16(w.gateUp(), SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden());
        WeightRows dn = WeightRows.bf16(w.down(), SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate());
        List<String> picks = new ArrayList<>();
        try (TokenKeyedLayer layer = new TokenKeyedLayer(runtime, table, SHAPE, name -> runtime.load(byName.get(name)),
                LaunchOrder.OVERLAPPING_PREVIOUS, 300)) {
            for (int tokens : new int[] {1, 5, 40, 300}) {
                int[] keyed = table.keyedOnTokens(tokens, SHAPE.topk(), runtime.context().smCount());
                ExpertLayer pair = layer.prepare(tokens);
                assertEquals(table.gateUp().get(keyed[0]).name(), pair.gateUp().spec().name(), "gate_up at M=" + tokens);
                assertEquals(table.down().get(keyed[1]).name(), pair.down().spec().name(), "down at M=" + tokens);
                picks.add(pair.gateUp().spec().name());
                short[] x = RandomInputs.bf16Normal(seed + tokens, tokens * SHAPE.hidden(), 1.0);
                Map<String, Routing> routings = Map.of("uniform", RandomInputs.uniformRouting(seed + 2L * tokens, tokens, SHAPE.experts(),
                        SHAPE.topk()), "piled", piled(tokens, seed + 2L * tokens + 1));
                for (Map.Entry<String, Routing> routing : routings.entrySet()) {
                    Routing r = routing.getValue();
                    ExpertReference.LayerResult expected = ExpertReference.layer(ref.gateUp(), ref.down(), x, gu, dn, r);
                    String where = "M=" + tokens + " " + routing.getKey() + " on " + pair.gateUp().spec().name() + " + "
                            + pair.down().spec().name() + ", seed=" + seed;
                    try (LayerBuffers b = LayerBuffers.of(x, r, expected);
                         CudaGraph graph = CudaGraph.capture(stream, () -> layer.enqueue(stream, tokens, b.x(),
                                 DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()), b.ids(), b.weights(),
                                 b.inter(), b.y()))) {
                        b.poison();
                        graph.launch(stream);
                        stream.synchronize();
                        ErrorStats e = ErrorStats.of(expected.y().exact(), download(b.y()));
                        System.out.println(where + ": y " + e);
                        BF16_OUTPUT.check(e, () -> "y of " + where);
                    }
                }
            }
            assertThrows(IllegalArgumentException.class, () -> layer.prepare(301), "past the layer's capacity");
            assertThrows(IllegalStateException.class, () -> layer.enqueue(stream, 2, null, null, null, null, null, null, null),
                    "a token count not prepared");
        }
        assertTrue(picks.stream().distinct().count() >= 2, "the token count keys more than one gate_up: " + picks);
    }

    /**
     * A tuned pool's directory makes the layer in one call ({@link TokenKeyedLayer#ofPool}): the candidates'
     * kernels as pool.moe and a profile whose timings follow the made-up models, read back, fitted, and
     * keyed per token count; at 1 and 300 tokens the layer runs the pair its own table keys there and
     * matches the reference.
     */
    @Test
    void aTunedPoolsDirectoryMakesTheLayerKeyedOnTokens(@TempDir Path dir) throws Exception {
        Map<KernelSpec, WaveCostModel> truth = new LinkedHashMap<>();
        compiledCandidates();
        for (Candidate c : CANDIDATES) {
            truth.put(specs(c).gateUp(), c.model());
            truth.put(specs(c).down(), c.model());
        }
        TunedPoolFixture.write(dir, truth, runtime.context().smCount());
        long seed = System.nanoTime();
        LayerWeights w = layerWeights(SHAPE, seed);
        ExpertLayerSpecs ref = specs(CANDIDATES.get(2));
        WeightRows gu = WeightRows.bf16(w.gateUp(), SHAPE.experts(), 2 * SHAPE.intermediate(), SHAPE.hidden());
        WeightRows dn = WeightRows.bf16(w.down(), SHAPE.experts(), SHAPE.hidden(), SHAPE.intermediate());
        try (TokenKeyedLayer layer = TokenKeyedLayer.ofPool(runtime, dir, LaunchOrder.OVERLAPPING_PREVIOUS, 300)) {
            for (int tokens : new int[] {1, 300}) {
                ExpertLayer pair = layer.prepare(tokens);
                short[] x = RandomInputs.bf16Normal(seed + tokens, tokens * SHAPE.hidden(), 1.0);
                Routing r = RandomInputs.uniformRouting(seed + 3L * tokens, tokens, SHAPE.experts(), SHAPE.topk());
                ExpertReference.LayerResult expected = ExpertReference.layer(ref.gateUp(), ref.down(), x, gu, dn, r);
                String where = "M=" + tokens + " on " + pair.gateUp().spec().name() + " + " + pair.down().spec().name() + ", seed=" + seed;
                try (LayerBuffers b = LayerBuffers.of(x, r, expected)) {
                    b.poison();
                    layer.enqueue(stream, tokens, b.x(), DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()), b.ids(),
                            b.weights(), b.inter(), b.y());
                    stream.synchronize();
                    ErrorStats e = ErrorStats.of(expected.y().exact(), download(b.y()));
                    System.out.println(where + " (from the pool's directory): y " + e);
                    BF16_OUTPUT.check(e, () -> "y of " + where);
                }
            }
            assertNotEquals(layer.prepare(1).gateUp().spec().name(), layer.prepare(300).gateUp().spec().name(),
                    "the fitted models key one token and 300 tokens to the same gate_up");
        }
    }

    static DispatchedLayer.LayerIo io(LayerBuffers b, LayerWeights w) {
        return new DispatchedLayer.LayerIo(b.x(), DeviceWeights.bf16(w.deviceGateUp()), DeviceWeights.bf16(w.deviceDown()), b.ids(),
                b.weights(), b.inter(), b.y());
    }

    static CudaGraph capture(DispatchedLayer layer, CudaStream bodies, int tokens, DispatchedLayer.LayerIo io) {
        layer.prepare(tokens);
        return CudaGraph.capture(stream, () -> layer.record(stream, bodies, tokens, List.of(io), DispatchedLayer.Scope.LAYER));
    }

    static DeviceBuffer upload(short[] x) {
        return uploadBf16(x);
    }
}
