package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ModelGeometry;
import dev.moeforge.dsl.check.SpecError;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The dispatch pool: valid entries only, both families, wgmma only on sm_90a, the same list every time. */
class ConfigPoolTest {
    static List<Problem.ExpertProblem> halves(ModelGeometry m) {
        return List.of(new Problem.ExpertGateUp(m.shape(), WeightFormat.BF16, DType.BF16, m.layout()),
                new Problem.ExpertDown(m.shape(), WeightFormat.BF16, DType.BF16));
    }

    @Test
    void everyEntryPassesItsKindsCheck() {
        for (ModelGeometry m : ModelGeometry.values()) {
            for (Target t : Target.values()) {
                for (Problem.ExpertProblem p : halves(m)) {
                    List<Schedule<Problem.ExpertProblem>> pool = ConfigPool.of(p, t);
                    assertTrue(pool.stream().anyMatch(s -> s instanceof OutputCentric), m + " " + t);
                    assertTrue(pool.stream().anyMatch(s -> s instanceof ExpertCentric), m + " " + t);
                    for (Schedule<Problem.ExpertProblem> s : pool) {
                        List<SpecError> errors = new ArrayList<>();
                        s.check(p, t, errors);
                        assertEquals(List.of(), errors, m + " " + t + " " + s);
                        assertTrue(t == Target.SM_90A || !(s instanceof ExpertCentric e && e.wgmma()), "wgmma on " + t);
                    }
                    assertEquals(pool, ConfigPool.of(p, t), "a stable order");
                    assertEquals(pool.size(), pool.stream().distinct().count(), "no entry twice");
                }
            }
        }
    }

    @Test
    void qwen3PoolOnHopperHasBothFamiliesInRampsRange() {
        int total = 0;
        for (Problem.ExpertProblem p : halves(ModelGeometry.QWEN3_30B_A3B)) {
            List<Schedule<Problem.ExpertProblem>> pool = ConfigPool.of(p, Target.SM_90A);
            assertEquals(28, pool.stream().filter(s -> s instanceof OutputCentric).count(), p.kindName());
            assertTrue(pool.contains(new OutputCentric(8, 16, 4, 1, 2, 0)), p.kindName() + ": one token, two warps an output");
            assertTrue(pool.stream().anyMatch(s -> s instanceof ExpertCentric e && e.wgmma()), p.kindName());
            assertTrue(pool.stream().anyMatch(s -> s instanceof ExpertCentric e && e.tma()), p.kindName());
            assertTrue(pool.stream().anyMatch(s -> s instanceof ExpertCentric e && e.producer()), p.kindName());
            assertEquals(p instanceof Problem.ExpertDown, pool.stream().anyMatch(s -> s instanceof ExpertCentric e && e.combineKernel()),
                    p.kindName() + ": down's producer and mma.sync tiles also with the combine launch, gate_up never");
            total += pool.size();
        }
        assertEquals(243, total);
    }
}
