package dev.moeforge.dsl.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The sealed hierarchy is the registry: every schedule record has exactly one kind, listed once, that describes it. */
class ScheduleKindsTest {

    @Test
    void everyPermittedRecordIsAKindInDeclaredOrder() {
        List<Class<?>> permitted = records(Schedule.class);
        assertEquals(permitted, Schedule.kinds().stream().<Class<?>>map(ScheduleKind::type).toList(),
                "Schedule.kinds() lists every permitted record once, in the permits clause's order");
        assertEquals(permitted.size(), new HashSet<>(Schedule.kinds().stream().map(ScheduleKind::name).toList()).size(),
                "kind names are unique");
    }

    /** The records of a sealed hierarchy in the order of its permits clauses, a sealed sub-interface's in its place. */
    private static List<Class<?>> records(Class<?> sealed) {
        return Arrays.stream(sealed.getPermittedSubclasses())
                .<Class<?>>flatMap(c -> c.isInterface() ? records(c).stream() : java.util.stream.Stream.of(c)).toList();
    }

    @Test
    void parametersAreTheRecordComponentsInSnakeCase() {
        assertEquals(List.of("warps_per_cta", "load_bytes", "k_unroll", "tokens_per_cta", "warps_per_output", "min_blocks_per_sm"),
                OutputCentric.KIND.params().stream().map(ScheduleKind.Param::name).toList());
        assertEquals(List.of("tokens_per_cta", "tokens_per_warp", "warps_per_cta", "k_tile", "stages", "k_groups", "cluster_split"),
                RouterTiled.KIND.params().stream().map(ScheduleKind.Param::name).toList());
        ScheduleKind.Param orderLoads = SplitDown.KIND.params().getLast();
        assertEquals("order_loads", orderLoads.name());
        assertTrue(orderLoads.optional(), "a boolean may be left out of the text");
    }

    @Test
    void createAndValuesRoundTripAndPrint() {
        SplitDown s = SplitDown.KIND.create(List.of(8, 2, 4, 3, true));
        assertEquals(new SplitDown(8, 2, 4, 3, true), s);
        assertEquals(List.of(8, 2, 4, 3, true), SplitDown.KIND.values(s));
        assertSame(SplitDown.KIND, s.kind());
        assertEquals("split_down(warps_per_cta=8, k_unroll=2, warps_per_tile=4, min_blocks_per_sm=3, order_loads=true)",
                SpecPrinter.printSchedule(s));
        assertThrows(IllegalArgumentException.class, () -> SplitDown.KIND.create(List.of(8, 2)));
    }

    @Test
    void eachKindLowersTheProblemsItNames() {
        assertEquals(List.of("expert_gate_up", "expert_down"), Problem.kindNames(OutputCentric.KIND.problemType()));
        assertEquals(List.of("expert_mlp"), Problem.kindNames(SplitDown.KIND.problemType()));
        assertEquals(List.of("router"), Problem.kindNames(RouterGemv.KIND.problemType()));
    }
}
