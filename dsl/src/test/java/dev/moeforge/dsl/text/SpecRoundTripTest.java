package dev.moeforge.dsl.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Scale;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.OutputTensorCore;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.SplitDown;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The printer and the parser are inverse: on the canonical corpus, on random valid specs and modulo layout. */
class SpecRoundTripTest {

    private static final String GATE_UP = """
            kernel qwen3_30b_a3b_gate_up_t1 {
              problem expert_gate_up(hidden=2048, intermediate=768, experts=128, topk=8, weights=bf16, activations=bf16, layout=stacked)
              schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=8, tokens_per_cta=1, warps_per_output=1, min_blocks_per_sm=0)
              epilogue store(gated(silu, acc(gate), acc(up)), dtype=bf16)
              target sm_90a
            }
            """;

    @TestFactory
    Stream<DynamicTest> corpusPrintsBackToTheSameBytes() throws IOException, URISyntaxException {
        Path dir = Path.of(SpecRoundTripTest.class.getResource("/text").toURI());
        List<Path> files;
        try (Stream<Path> list = Files.list(dir)) {
            files = list.filter(p -> p.toString().endsWith(".moe")).sorted().toList();
        }
        assertFalse(files.isEmpty(), "no .moe files in " + dir);
        return files.stream().map(file -> DynamicTest.dynamicTest(file.getFileName().toString(), () -> {
            String text = Files.readString(file);
            List<KernelSpec> specs = SpecParser.parseAll(text, file.getFileName().toString());
            assertEquals(text, SpecPrinter.printAll(specs));
            if (specs.size() == 1) {
                assertEquals(text, SpecPrinter.print(SpecParser.parse(text)));
            }
        }));
    }

    @Test
    void randomSpecsParseBackEqual() {
        Random random = new Random(20250611);
        List<KernelSpec> specs = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            KernelSpec spec = randomValidSpec(random, i);
            specs.add(spec);
            assertEquals(spec, SpecParser.parse(SpecPrinter.print(spec)), SpecPrinter.print(spec));
        }
        assertEquals(specs, SpecParser.parseAll(SpecPrinter.printAll(specs)));
    }

    @Test
    void randomSpecsCoverBothProblemsAndAllTargets() {
        Random random = new Random(20250611);
        List<KernelSpec> specs = Stream.generate(() -> randomValidSpec(random, 0)).limit(200).toList();
        assertTrue(specs.stream().anyMatch(s -> s.problem() instanceof Problem.ExpertDown));
        assertTrue(specs.stream().anyMatch(s -> s.problem() instanceof Problem.ExpertGateUp));
        assertTrue(specs.stream().anyMatch(s -> s.schedule() instanceof OutputTensorCore));
        assertTrue(specs.stream().anyMatch(s -> s.schedule() instanceof SplitDown));
        for (Target t : Target.values()) {
            assertTrue(specs.stream().anyMatch(s -> s.target() == t), t.text());
        }
    }

    @Test
    void layoutCommentsArgumentOrderAndNamedEpilogueArgumentsDoNotMatter() {
        String text = """
                # Qwen3-30B-A3B, first half
                kernel   qwen3_30b_a3b_gate_up_t1{problem expert_gate_up(
                      layout = stacked, topk=8, experts=128,   // routed experts
                      activations=bf16, weights=bf16, intermediate=768, hidden=2048)
                  schedule output_centric(min_blocks_per_sm=0, warps_per_output=1, tokens_per_cta=1, k_unroll=8, load_bytes=16, warps_per_cta=4)
                  target sm_90a   # H100
                  epilogue store(dtype=bf16, input=gated(silu, up=acc(up), gate=acc(gate)))
                }""";
        assertEquals(SpecParser.parse(GATE_UP), SpecParser.parse(text));
        assertEquals(GATE_UP, SpecPrinter.print(SpecParser.parse(text)));
    }

    @Test
    void positionalAndNamedEpilogueArgumentsMix() {
        EpilogueNode expected = SpecParser.parse(GATE_UP).epilogue();
        String text = GATE_UP.replace("store(gated(silu, acc(gate), acc(up)), dtype=bf16)",
                "store(gated(fn=silu, gate=acc(channel=gate), up=acc(up)), dtype=bf16)");
        assertEquals(expected, SpecParser.parse(text).epilogue());
    }

    @Test
    void emptyTextHoldsNoKernels() {
        assertEquals(List.of(), SpecParser.parseAll("  # nothing here\n"));
        assertEquals("", SpecPrinter.printAll(List.of()));
    }

    @Test
    void negativeZeroKeepsItsSign() {
        String text = """
                kernel r {
                  problem router(hidden=2048, experts=128, weights=bf16, activations=bf16, expert_counts=false)
                  schedule router_gemv(warps_per_cta=4, load_bytes=16, k_unroll=8, experts_per_cta=4)
                  epilogue store(topk(scale(acc, -0), 2), dtype=fp32)
                  target sm_90a
                }
                """;
        KernelSpec spec = SpecParser.parse(text);
        assertEquals(-0.0, ((Scale) ((TopK) ((Store) spec.epilogue()).input()).input()).factor());
        assertEquals(text, SpecPrinter.print(spec));
        assertEquals(spec, SpecParser.parse(SpecPrinter.print(spec)));
        assertEquals("-0", SpecPrinter.number(-0.0));
        assertEquals("0", SpecPrinter.number(0.0));
        for (String written : List.of("-0.0", "-0e5", "-0.000")) {
            KernelSpec same = SpecParser.parse(text.replace("scale(acc, -0)", "scale(acc, " + written + ")"));
            assertEquals(spec, same, written);
        }
    }

    @Test
    void printingIgnoresTheDefaultLocale() {
        KernelSpec spec = SpecParser.parse(GATE_UP);
        Locale saved = Locale.getDefault();
        try {
            for (Locale locale : List.of(Locale.forLanguageTag("ar-EG"), Locale.forLanguageTag("hi-IN-u-nu-deva"),
                    Locale.forLanguageTag("tr-TR"))) {
                Locale.setDefault(locale);
                assertEquals(GATE_UP, SpecPrinter.print(spec), locale.toString());
            }
        } finally {
            Locale.setDefault(saved);
        }
    }

    @Test
    void epiloguesPrintAsWritten() {
        assertEquals("store(combine(acc), dtype=bf16)",
                SpecPrinter.printEpilogue(new Store(new Combine(Acc.MAIN), DType.BF16)));
        assertEquals("gated(silu, acc(gate), acc(up))",
                SpecPrinter.printEpilogue(new GatedActivation(GateFunction.SILU, Acc.GATE, Acc.UP)));
    }

    /** A random spec the Validator accepts: draws again until it does. */
    private static KernelSpec randomValidSpec(Random r, int index) {
        while (true) {
            KernelSpec spec = randomSpec(r, index);
            if (Validator.errors(spec).isEmpty()) {
                return spec;
            }
        }
    }

    private static KernelSpec randomSpec(Random r, int index) {
        int experts = 1 + r.nextInt(512);
        ExpertShape shape = new ExpertShape(8 * (1 + r.nextInt(1024)), 8 * (1 + r.nextInt(1024)), experts,
                1 + r.nextInt(Math.min(experts, 32)));
        // one spec in eight is the whole expert MLP under split_down, in whole quads and scale blocks
        if (r.nextInt(8) == 0) {
            int warpsPerTile = 1 + r.nextInt(8);
            ExpertShape mlpShape = new ExpertShape(64 * (1 + r.nextInt(64)), 128 * (1 + r.nextInt(16)), experts, shape.topk());
            Problem mlp = new Problem.ExpertMlp(mlpShape, List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL,
                    WeightFormat.INT4_GROUP128).get(r.nextInt(4)), DType.BF16, GateUpLayout.values()[r.nextInt(GateUpLayout.values().length)]);
            return new KernelSpec("mlp_" + index, mlp, new SplitDown(2 * warpsPerTile, 1 + r.nextInt(8), warpsPerTile,
                    r.nextInt(2), r.nextBoolean()), new Store(randomGateUpValue(r, 3), DType.BF16),
                    Target.values()[r.nextInt(Target.values().length)]);
        }
        boolean gateUp = r.nextBoolean();
        boolean bias = r.nextBoolean();
        // one spec in four on the tensor cores, which take 4-bit weights (the Validator redraws ragged shapes)
        boolean tensorCores = r.nextInt(4) == 0;
        WeightFormat weights = tensorCores ? List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL).get(r.nextInt(3))
                : WeightFormat.BF16;
        Problem problem = gateUp
                ? new Problem.ExpertGateUp(shape, weights, DType.BF16,
                        GateUpLayout.values()[r.nextInt(GateUpLayout.values().length)], bias)
                : new Problem.ExpertDown(shape, weights, DType.BF16, bias);
        int warps = 1 + r.nextInt(8);
        int tokens = 1 + r.nextInt(8);
        // warps_per_output: a divisor of warps_per_cta (any for down; 1 for a token-tiled gate_up)
        int perOutput = gateUp && tokens > 1 ? 1 : List.of(1, 2, 4, 8).stream().filter(d -> warps % d == 0).toList()
                .get(r.nextInt((int) List.of(1, 2, 4, 8).stream().filter(d -> warps % d == 0).count()));
        Schedule schedule = tensorCores
                ? new OutputTensorCore(warps, 1 + r.nextInt(8), List.of(1, 2, 4, 8).stream().filter(d -> warps % d == 0)
                        .toList().getLast(), r.nextInt(2))
                : new OutputCentric(warps, List.of(4, 8, 16).get(r.nextInt(3)), 1 + r.nextInt(8), tokens, perOutput,
                        r.nextInt(3));
        EpilogueNode epilogue = new Store(gateUp ? randomGateUpValue(r, 3) : new Combine(Acc.MAIN), DType.BF16);
        // names include the grammar's keywords, which are ordinary names outside their own place
        String name = List.of("k", "kernel", "target", "moe_", "problem").get(r.nextInt(5)) + (index % 3 == 0 ? "" : "_" + index);
        return new KernelSpec(name, problem, schedule, epilogue, Target.values()[r.nextInt(Target.values().length)]);
    }

    /** A per-slot value of a gate_up kernel: an accumulator or a gated activation of two. */
    private static EpilogueNode randomGateUpValue(Random r, int depth) {
        return switch (depth == 0 ? r.nextInt(2) : r.nextInt(3)) {
            case 0 -> Acc.GATE;
            case 1 -> Acc.UP;
            default -> new GatedActivation(GateFunction.SILU, randomGateUpValue(r, depth - 1),
                    randomGateUpValue(r, depth - 1));
        };
    }
}
