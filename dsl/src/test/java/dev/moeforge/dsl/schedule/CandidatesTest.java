package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.text.SpecParser;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Enumeration and validation share one predicate: every candidate validates, and no schedule that
 * validation refuses (the must-fail suite's among them) is ever a candidate.
 */
class CandidatesTest {
    private static final ExpertShape QWEN3 = new ExpertShape(2048, 768, 128, 8);
    private static final ExpertShape GPT_OSS = new ExpertShape(2880, 2880, 32, 4);

    /** Problems of every kind and several formats, with an epilogue each takes. */
    private static List<KernelSpec> problems() {
        List<KernelSpec> out = new ArrayList<>();
        for (WeightFormat f : List.of(WeightFormat.BF16, WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.FP8_BLOCK128)) {
            out.add(spec(new Problem.ExpertGateUp(QWEN3, f, DType.BF16, GateUpLayout.STACKED), Epilogues.siluGatedStore(DType.BF16)));
            out.add(spec(new Problem.ExpertDown(QWEN3, f, DType.BF16), Epilogues.combinedStore(DType.BF16)));
        }
        out.add(spec(new Problem.ExpertGateUp(GPT_OSS, WeightFormat.MXFP4, DType.BF16, GateUpLayout.INTERLEAVED, true),
                Epilogues.store(Epilogues.gated(Epilogues.clampedSwiglu(), Epilogues.gate(), Epilogues.up()), DType.BF16)));
        out.add(spec(new Problem.ExpertMlp(QWEN3, WeightFormat.INT4_GROUP128, DType.BF16, GateUpLayout.STACKED),
                Epilogues.siluGatedStore(DType.BF16)));
        out.add(spec(new Problem.Router(2048, 128, WeightFormat.BF16, DType.BF16, true), RoutingRules.softmaxTopKRenormalized(8, DType.FP32)));
        out.add(spec(new Problem.Router(7168, 256, WeightFormat.BF16, DType.BF16, false),
                RoutingRules.groupLimitedSigmoid(8, 8, 4, 2.5, "e_score_correction_bias", DType.FP32)));
        out.add(spec(new Problem.Linear(2048, 4096, WeightFormat.BF16, DType.BF16, false), Epilogues.store(Epilogues.acc(), DType.BF16)));
        out.add(spec(new Problem.Linear(2880, 64 * 64, WeightFormat.BF16, DType.BF16, true), Epilogues.store(Epilogues.acc(), DType.FP32)));
        return out;
    }

    private static KernelSpec spec(Problem problem, Store epilogue) {
        Schedule<?> any = switch (problem) {
            case Problem.ExpertProblem _ -> new OutputCentric(4, 16, 8, 1, 1, 0);
            case Problem.ExpertMlp _ -> new SplitDown(8, 2, 4, 3, false);
            case Problem.Router _ -> new RouterGemv(8, 16, 8, 4);
            case Problem.Linear _ -> new LinearGemv(8, 16, 8, 8, 4);
        };
        return new KernelSpec("k", problem, any, epilogue, Target.SM_90A);
    }

    @TestFactory
    Stream<DynamicTest> everyCandidateValidates() {
        return problems().stream().flatMap(base -> Stream.of(Target.values()).map(target -> DynamicTest.dynamicTest(
                base.problem().kindName() + " " + base.problem().weights().text() + " on " + target.text(), () -> {
                    List<Schedule<?>> candidates = Candidates.of(base.problem(), target);
                    assertFalse(candidates.isEmpty());
                    Set<String> names = new HashSet<>();
                    for (Schedule<?> s : candidates) {
                        KernelSpec spec = base.withSchedule(s).withTarget(target);
                        assertEquals(List.of(), Validator.errors(spec), Candidates.name(s));
                        assertTrue(s.kind().lowers(base.problem()));
                        assertTrue(names.add(Candidates.name(s)), "two candidates named " + Candidates.name(s));
                    }
                    assertEquals(candidates, Candidates.of(base.problem(), target), "the same list, in the same order, each time");
                })));
    }

    /** The valid schedules the grid visits are exactly the candidates: each refused one fails validation too. */
    @Test
    void theGridsRefusalsAreValidationsRefusals() {
        KernelSpec base = problems().getFirst();
        Problem.ExpertProblem problem = (Problem.ExpertProblem) base.problem();
        Set<Schedule<?>> candidates = new HashSet<>(Candidates.of(OutputCentric.KIND, problem, Target.SM_120A));
        int refused = 0;
        for (OutputCentric s : OutputCentric.KIND.space(problem, Target.SM_120A)) {
            boolean valid = Validator.errors(base.withSchedule(s).withTarget(Target.SM_120A)).isEmpty();
            assertEquals(valid, candidates.contains(s), s.toString());
            refused += valid ? 0 : 1;
        }
        assertTrue(refused > 0, "the grid reaches past the limits, so the predicate is exercised");
    }

    @Test
    void neighboursDifferInOneParameter() {
        KernelSpec down = problems().get(3);  // NVFP4 down
        OutputTensorCore chosen = new OutputTensorCore(24, 1, 24, 1);
        List<Schedule<Problem.ExpertProblem>> neighbours = Candidates.neighbours(chosen, down.problem(), Target.SM_90A);
        assertFalse(neighbours.isEmpty());
        for (Schedule<?> n : neighbours) {
            List<Object> a = OutputTensorCore.KIND.values(chosen);
            List<Object> b = OutputTensorCore.KIND.values(n);
            int differing = 0;
            for (int i = 0; i < a.size(); i++) {
                differing += a.get(i).equals(b.get(i)) ? 0 : 1;
            }
            assertEquals(1, differing, n.toString());
        }
        assertTrue(neighbours.contains(new OutputTensorCore(32, 1, 32, 1)) == false, "two parameters changed");
        assertTrue(neighbours.contains(new OutputTensorCore(24, 2, 24, 1)));
    }

    @Test
    void namesAreStableAndReadable() {
        assertEquals("output_centric_wpc4_lb16_ku8_tpc1_wpo1_mbps0", Candidates.name(new OutputCentric(4, 16, 8, 1, 1, 0)));
        assertEquals("split_down_wpc8_ku2_wpt4_mbps3_ol1", Candidates.name(new SplitDown(8, 2, 4, 3, true)));
    }

    @Test
    void anInvalidProblemHasNoCandidates() {
        Problem bad = new Problem.ExpertGateUp(new ExpertShape(2048, 768, 128, 0), WeightFormat.BF16, DType.BF16, GateUpLayout.STACKED);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Candidates.of(bad, Target.SM_90A));
        assertTrue(e.getMessage().contains("problem.topk"), e.getMessage());
    }

    /** The catalogue's hand-tuned schedules are in the pool enumeration offers. */
    @Test
    void everyCatalogueScheduleIsACandidate() throws IOException {
        Path specs = Path.of("../generated/src/main/specs");
        List<Path> files;
        try (Stream<Path> list = Files.list(specs)) {
            files = list.filter(p -> p.toString().endsWith(".moe")).sorted().toList();
        }
        assertFalse(files.isEmpty());
        for (Path file : files) {
            for (KernelSpec spec : SpecParser.parseAll(Files.readString(file), file.getFileName().toString())) {
                assertTrue(Candidates.of(spec.problem(), spec.target()).contains(spec.schedule()),
                        spec.name() + "'s " + spec.schedule() + " is not a candidate");
            }
        }
    }

    /**
     * Each must-fail spec that the Validator refuses for its schedule (its problem being valid):
     * that schedule is no candidate of the problem on the spec's target.
     */
    @Test
    void noMustFailScheduleIsACandidate() throws IOException, URISyntaxException {
        Path dir = Path.of(CandidatesTest.class.getResource("/errors").toURI());
        List<Path> files;
        try (Stream<Path> list = Files.list(dir)) {
            files = list.filter(p -> p.toString().endsWith(".moe")).sorted().toList();
        }
        int checked = 0;
        for (Path file : files) {
            KernelSpec spec;
            try {
                spec = SpecParser.parseUnvalidated(Files.readString(file), file.getFileName().toString());
            } catch (SpecException e) {
                continue;  // refused before a schedule exists
            }
            List<SpecError> errors = Validator.errors(spec);
            assertFalse(errors.isEmpty(), file + " must fail");
            boolean scheduleRefused = errors.stream().anyMatch(e -> e.path().startsWith("schedule"));
            if (!scheduleRefused || !Validator.problemErrors(spec.problem()).isEmpty()) {
                continue;
            }
            assertFalse(Candidates.of(spec.problem(), spec.target()).contains(spec.schedule()),
                    file.getFileName() + ": " + spec.schedule() + " is refused yet a candidate");
            checked++;
        }
        assertTrue(checked >= 10, "only " + checked + " must-fail specs refuse a schedule of a valid problem");
    }
}
