package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.List;
import org.junit.jupiter.api.Test;

/** bench formats' workloads and the catalogue pair each one times first, without a GPU. */
class BenchFormatsCommandTest {

    @Test
    void everyWorkloadTimesTheCataloguePairOfItsGeometryAndFormat() {
        List<BenchFormatsCommand.Workload> workloads = new BenchFormatsCommand().workloads();
        assertEquals(WeightFormat.ALL.size() + 1, workloads.size(), "every format at Qwen3-30B-A3B, and NVFP4 at Qwen3-Next");
        for (BenchFormatsCommand.Workload w : workloads) {
            KernelSpec gateUp = w.catalogueGateUp();
            KernelSpec down = w.catalogueDown();
            Problem.ExpertGateUp g = assertInstanceOf(Problem.ExpertGateUp.class, gateUp.problem(), gateUp.name());
            Problem.ExpertDown d = assertInstanceOf(Problem.ExpertDown.class, down.problem(), down.name());
            assertEquals(w.shape(), g.shape(), gateUp.name());
            assertEquals(w.shape(), d.shape(), down.name());
            assertEquals(w.format(), g.weights(), gateUp.name());
            assertEquals(w.format(), d.weights(), down.name());
        }
    }
}
