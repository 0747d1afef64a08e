package dev.moeforge.runtime.compile;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.ScheduleKind;
import dev.moeforge.dsl.schedule.SplitDown;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestFactory;

/**
 * Java and the device header cannot drift: nvcc compiles a sample of every schedule kind's
 * candidates (fixed seed), and each generated kernel static_asserts that the header's layout
 * takes the shared memory and block size the schedule's Java computed. A sample, not the pool:
 * a few kernels of each kind and problem, picked across the candidate list.
 */
@Tag("nvcc")
class CandidateCompileNvccTest {
    private static final ExpertShape SHAPE = new ExpertShape(1024, 384, 64, 6);
    private static final int PER_KIND = 3;

    @TestFactory
    Stream<DynamicTest> sampledCandidatesCompile() {
        List<KernelSpec> sample = new ArrayList<>();
        SplittableRandom random = new SplittableRandom(20261125);
        for (KernelSpec base : problems()) {
            for (ScheduleKind<?, ?> kind : Schedule.kinds()) {
                List<? extends Schedule<?>> candidates = Candidates.of(kind, base.problem(), Target.SM_90A);
                for (int i = 0; i < PER_KIND && !candidates.isEmpty(); i++) {
                    Schedule<?> s = candidates.get(random.nextInt(candidates.size()));
                    sample.add(base.withSchedule(s).withName("c_" + base.name() + "_" + Candidates.name(s)));
                }
                // a producer tile always: its extra warps and second barrier per stage are layout facts of their own
                candidates.stream().filter(s -> s instanceof ExpertCentric e && e.producer()).findFirst()
                        .ifPresent(s -> sample.add(base.withSchedule(s).withName("c_" + base.name() + "_" + Candidates.name(s))));
            }
        }
        if (NvccCompiler.locate().isEmpty()) {
            return sample.stream().map(spec -> DynamicTest.dynamicTest(spec.name(), () -> assumeTrue(false, "nvcc not found")));
        }
        // every compile starts now, on all cores; each test waits for its own
        NvccCompiler nvcc = new NvccCompiler();
        ExecutorService pool = Executors.newFixedThreadPool(Runtime.getRuntime().availableProcessors());
        List<Future<CompileResult>> compiles = sample.stream()
                .map(spec -> pool.submit(() -> nvcc.compile(CudaSource.of(CudaEmitter.emit(spec)), spec.target()))).toList();
        pool.shutdown();
        return java.util.stream.IntStream.range(0, sample.size()).mapToObj(i -> DynamicTest.dynamicTest(sample.get(i).name(), () -> {
            CompileResult result = compiles.get(i).get();
            assertTrue(result.report().function(sample.get(i).name()).registers() > 0, sample.get(i).name());
        }));
    }

    private static List<KernelSpec> problems() {
        return List.of(
                spec("gu_bf16", new Problem.ExpertGateUp(SHAPE, WeightFormat.BF16, DType.BF16, GateUpLayout.STACKED),
                        Epilogues.siluGatedStore(DType.BF16)),
                spec("dn_bf16", new Problem.ExpertDown(SHAPE, WeightFormat.BF16, DType.BF16), Epilogues.combinedStore(DType.BF16)),
                spec("gu_nvfp4", new Problem.ExpertGateUp(SHAPE, WeightFormat.NVFP4, DType.BF16, GateUpLayout.INTERLEAVED),
                        Epilogues.siluGatedStore(DType.BF16)),
                spec("dn_mxfp4", new Problem.ExpertDown(SHAPE, WeightFormat.MXFP4, DType.BF16), Epilogues.combinedStore(DType.BF16)),
                spec("mlp_int4", new Problem.ExpertMlp(SHAPE, WeightFormat.INT4_GROUP128, DType.BF16, GateUpLayout.STACKED),
                        Epilogues.siluGatedStore(DType.BF16)),
                spec("router", new Problem.Router(1024, 64, WeightFormat.BF16, DType.BF16, true),
                        RoutingRules.softmaxTopKRenormalized(6, DType.FP32)),
                spec("linear", new Problem.Linear(1024, 1000, WeightFormat.BF16, DType.BF16, true),
                        Epilogues.store(Epilogues.acc(), DType.BF16)));
    }

    private static KernelSpec spec(String name, Problem problem, Store epilogue) {
        Schedule<?> any = switch (problem) {
            case Problem.ExpertProblem _ -> new OutputCentric(4, 16, 8, 1, 1, 0);
            case Problem.ExpertMlp _ -> new SplitDown(8, 2, 4, 3, false);
            case Problem.Router _ -> new RouterGemv(8, 16, 8, 4);
            case Problem.Linear _ -> new LinearGemv(8, 16, 8, 8, 4);
        };
        return new KernelSpec(name, problem, any, epilogue, Target.SM_90A);
    }
}
