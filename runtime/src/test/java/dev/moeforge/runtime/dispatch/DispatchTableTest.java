package dev.moeforge.runtime.dispatch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.ConfigPool;
import dev.moeforge.dsl.schedule.OutputTensorCore;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The dispatch table's rows price what the schedules' own grids say, and its host choice is the cost model's. */
class DispatchTableTest {
    static final ExpertShape SHAPE = new ExpertShape(2048, 768, 128, 8);
    static final Problem.ExpertGateUp GATE_UP = new Problem.ExpertGateUp(SHAPE, WeightFormat.BF16, DType.BF16, GateUpLayout.STACKED);
    static final Problem.ExpertDown DOWN = new Problem.ExpertDown(SHAPE, WeightFormat.BF16, DType.BF16);

    static int[] load(Routing r) {
        return r.expertLoad(SHAPE.experts());
    }

    @Test
    void everyPoolRowCountsTheGridItsScheduleDoes() {
        List<int[]> loads = new ArrayList<>();
        int[] batches = {1, 7, 64, 1000};
        for (int tokens : batches) {
            for (double beta : new double[] {0.95, 0.6}) {
                RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(tokens, tokens, SHAPE.experts(), SHAPE.topk());
                loads.add(load(RandomInputs.skewedRouting(tokens, tokens, SHAPE.experts(), SHAPE.topk(), range.clamp(beta))));
            }
        }
        for (Problem.ExpertProblem problem : List.<Problem.ExpertProblem>of(GATE_UP, DOWN)) {
            for (Schedule<Problem.ExpertProblem> s : ConfigPool.of(problem, Target.SM_90A)) {
                DispatchTable.Row row = DispatchTable.row("c", problem, s, new WaveCostModel(1, 0, 0, 0, 0, 2));
                for (int i = 0; i < loads.size(); i++) {
                    int tokens = batches[i / 2];
                    assertEquals(s.workBlocks(problem, tokens, loads.get(i)), row.blocks(loads.get(i), tokens), s + " at M=" + tokens);
                }
            }
        }
    }

    @Test
    void theHostChoiceIsTheCheapestPredictionAndBadTablesAreRefused() {
        List<DispatchTable.Row> up = new ArrayList<>();
        List<DispatchTable.Row> down = new ArrayList<>();
        List<Schedule<Problem.ExpertProblem>> ups = ConfigPool.of(GATE_UP, Target.SM_90A);
        for (int i = 0; i < 12; i++) {
            up.add(DispatchTable.row("u" + i, GATE_UP, ups.get(i * 5), new WaveCostModel(10 + i, 2, 0.01 * (i % 4), 0, 0.001 * i, 5)));
            down.add(DispatchTable.row("d" + i, DOWN, ups.get(i * 3), new WaveCostModel(5 + i, 1, 0.02, 0, 0, 3)));
        }
        DispatchTable table = new DispatchTable(SHAPE.experts(), up, down);
        int[] load = load(RandomInputs.uniformRouting(3, 200, SHAPE.experts(), SHAPE.topk()));
        int[] chosen = table.choose(load, 200, 132);
        List<List<DispatchTable.Row>> halves = List.of(up, down);
        for (int h = 0; h < 2; h++) {
            List<DispatchTable.Row> rows = halves.get(h);
            double pick = rows.get(chosen[h]).cost(load, 200, 132);
            for (int i = 0; i < rows.size(); i++) {
                double cost = rows.get(i).cost(load, 200, 132);
                // the cheapest, and the first of equals
                assertTrue(i < chosen[h] ? cost > pick : cost >= pick, "half " + h + ": row " + i + " costs " + cost + ", the pick " + pick);
            }
        }
        assertEquals(DispatchTable.ROW_DOUBLES * 24, table.packed().length);
        assertThrows(IllegalArgumentException.class, () -> table.choose(new int[64], 200, 132), "a histogram of 64 experts");
        assertThrows(IllegalArgumentException.class, () -> new DispatchTable(SHAPE.experts(), List.of(), down));
        assertThrows(IllegalArgumentException.class, () -> new DispatchTable(2048, up, down));
        List<DispatchTable.Row> nine = new ArrayList<>();
        for (int i = 1; i <= 9; i++) {
            nine.add(new DispatchTable.Row("t" + i, DispatchTable.Kind.TILES, 16 * i, 4, new WaveCostModel(1, 0, 0, 0, 0, 2),
                    Integer.MAX_VALUE));
        }
        assertThrows(IllegalArgumentException.class, () -> new DispatchTable(SHAPE.experts(), nine, down), "nine tile heights");
        var tensorCore = new OutputTensorCore(4, 1, 1, 0);
        assertThrows(IllegalArgumentException.class, () -> DispatchTable.row("t", GATE_UP, tensorCore, new WaveCostModel(1, 0, 0, 0, 0, 2)));
    }

    /**
     * What the kernel reads, priced the kernel's way (features from the packed rows, token tiles from
     * the in-tile table, no divisions), gives the host twin's costs, and the pair's switch value
     * numbers gate_up's row major.
     */
    @Test
    void thePackedRowsAndTheInTileTablePriceWhatTheRowsPrice() {
        List<DispatchTable.Row> up = new ArrayList<>();
        List<DispatchTable.Row> down = new ArrayList<>();
        for (Problem.ExpertProblem problem : List.<Problem.ExpertProblem>of(GATE_UP, DOWN)) {
            List<Schedule<Problem.ExpertProblem>> pool = ConfigPool.of(problem, Target.SM_90A);
            List<DispatchTable.Row> half = problem == GATE_UP ? up : down;
            java.util.Set<String> features = new java.util.HashSet<>();
            for (int i = 0; i < pool.size() && half.size() < 12; i++) {
                DispatchTable.Row row = DispatchTable.row("c" + i, problem, pool.get(i), new WaveCostModel(3 + i, 1.5, 0.01, 0.2, 0, 4));
                if (row.kind() == DispatchTable.Kind.PER_PAIR || features.size() < 4 || features.contains(row.kind() + "/" + row.param())) {
                    features.add(row.kind() + "/" + row.param());
                    half.add(row);
                }
            }
        }
        DispatchTable table = new DispatchTable(SHAPE.experts(), up, down);
        assertTrue(up.stream().anyMatch(r -> r.kind() == DispatchTable.Kind.TOKEN_TILES), "the case needs token tiles");
        double[] packed = table.packed();
        for (int tokens : new int[] {1, 9, 200}) {
            double[] inTile = table.inTileTable(tokens);
            int[] load = load(RandomInputs.uniformRouting(tokens, tokens, SHAPE.experts(), SHAPE.topk()));
            List<DispatchTable.Row> rows = new ArrayList<>(up);
            rows.addAll(down);
            for (int r = 0; r < rows.size(); r++) {
                int at = r * DispatchTable.ROW_DOUBLES;
                int kind = (int) packed[at];
                int param = (int) packed[at + 1];
                int feature = (int) packed[at + 3];
                double sum = 0;
                long pairs = 0;
                for (int n : load) {
                    pairs += n;
                    sum += kind == 0 ? Math.ceilDiv(n, param) : kind == 2 ? inTile[feature * (tokens + 1) + Math.min(n, tokens)] : 0;
                }
                double g = kind == 1 ? packed[at + 2] * pairs
                        : kind == 0 ? packed[at + 2] * sum
                        : Math.max(1.0, Math.floor(packed[at + 2] * Math.ceilDiv(tokens, param) * sum + 0.5));
                double cost = packed[at + 4] + packed[at + 5] * Math.ceil(g / 132) + packed[at + 6] * g + packed[at + 7] * Math.sqrt(g)
                        + packed[at + 8] * pairs;
                assertEquals(rows.get(r).cost(load, tokens, 132), cost, 1e-9 * cost, rows.get(r) + " at M=" + tokens);
            }
        }
        assertEquals(up.size() * down.size(), table.pairs());
        assertEquals(2 * down.size() + 3, table.pairIndex(2, 3));
        assertThrows(IllegalArgumentException.class, () -> table.inTileTable(0));
    }

    /**
     * A table narrowed to a token count keeps, in order, the rows that win at the routings it
     * prices, among them both ends of the skew; its choices map back to the full table's.
     */
    @Test
    void aNarrowedTableKeepsTheRowsThatWinAtItsTokenCount() {
        List<DispatchTable.Row> up = new ArrayList<>();
        List<DispatchTable.Row> down = new ArrayList<>();
        List<Schedule<Problem.ExpertProblem>> ups = ConfigPool.of(GATE_UP, Target.SM_90A);
        List<Schedule<Problem.ExpertProblem>> downs = ConfigPool.of(DOWN, Target.SM_90A);
        for (int i = 0; i < 16; i++) {
            // a fixed cost that falls with i and a per-block cost that grows with it: small grids favour late rows
            up.add(DispatchTable.row("u" + i, GATE_UP, ups.get(i * 3 % ups.size()), new WaveCostModel(40 - 2 * i, 0, 0.002 * (i + 1), 0, 0, 5)));
            down.add(DispatchTable.row("d" + i, DOWN, downs.get(i * 5 % downs.size()), new WaveCostModel(30 - i, 0.5, 0.001 * i, 0, 0, 3)));
        }
        DispatchTable full = new DispatchTable(SHAPE.experts(), up, down);
        for (int tokens : new int[] {1, 16, 300}) {
            DispatchTable narrow = full.narrowedTo(tokens, SHAPE.topk(), 132);
            assertTrue(narrow.gateUp().size() <= full.gateUp().size() && narrow.down().size() <= full.down().size());
            for (int i = 0; i < narrow.gateUp().size(); i++) {
                assertEquals(full.gateUp().get(narrow.gateUpOrigin(i)), narrow.gateUp().get(i));
                if (i > 0) {
                    assertTrue(narrow.gateUpOrigin(i) > narrow.gateUpOrigin(i - 1), "in the table's order");
                }
            }
            int[] piled = new int[SHAPE.experts()];
            for (int e = 0; e < SHAPE.topk(); e++) {
                piled[e] = tokens;
            }
            List<int[]> loads = new ArrayList<>(List.of(piled));
            RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(0, tokens, SHAPE.experts(), SHAPE.topk());
            loads.add(load(RandomInputs.skewedRouting(0, tokens, SHAPE.experts(), SHAPE.topk(), range.max())));
            for (int[] load : loads) {
                assertArrayEquals(full.choose(load, tokens, 132), narrow.origin(narrow.choose(load, tokens, 132)), "M=" + tokens);
            }
            double[] packed = narrow.packed();
            for (int i = 0; i < narrow.gateUp().size(); i++) {
                assertEquals(narrow.gateUpOrigin(i), (int) packed[i * DispatchTable.ROW_DOUBLES + 9], "the kernel reports origins");
            }
        }
        assertThrows(IllegalArgumentException.class, () -> full.narrowedTo(0, SHAPE.topk(), 132));
    }

    /**
     * A row whose kernel does not take the batch is never chosen, however cheap its model says it is,
     * and a narrowed table leaves it out; a half with no such row is refused by its rows' names.
     */
    @Test
    void aRowIsChosenOnlyForBatchesItsKernelTakes() {
        DispatchTable.Row cheapButSmall = new DispatchTable.Row("small", DispatchTable.Kind.TILES, 16, 4,
                new WaveCostModel(1, 0, 0, 0, 0, 2), 8);
        DispatchTable.Row dearButLarge = new DispatchTable.Row("large", DispatchTable.Kind.TILES, 16, 4,
                new WaveCostModel(100, 0, 0, 0, 0, 2), Integer.MAX_VALUE);
        DispatchTable table = new DispatchTable(SHAPE.experts(), List.of(cheapButSmall, dearButLarge), List.of(dearButLarge));
        int[] few = load(RandomInputs.uniformRouting(1, 8, SHAPE.experts(), SHAPE.topk()));
        int[] many = load(RandomInputs.uniformRouting(2, 9, SHAPE.experts(), SHAPE.topk()));
        assertEquals(0, table.choose(few, 8, 132)[0]);
        assertEquals(1, table.choose(many, 9, 132)[0], "the cheap row's kernel takes 8 tokens at most");
        DispatchTable narrow = table.narrowedTo(9, SHAPE.topk(), 132);
        assertEquals(List.of(dearButLarge), narrow.gateUp());
        assertEquals(1, narrow.gateUpOrigin(0));
        DispatchTable none = new DispatchTable(SHAPE.experts(), List.of(cheapButSmall), List.of(dearButLarge));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> none.choose(many, 9, 132));
        assertTrue(e.getMessage().contains("small (at most 8)"), e.getMessage());
    }

    /**
     * The pair keyed on the token count is each half's row of least mean predicted time over the batch's
     * routings: a row that wins only when the batch is piled onto a few experts loses to one that is a
     * little dearer there but far cheaper on the balanced routings; a row cheaper on every routing is
     * taken; a row whose kernel does not take the batch never is; the routings are the batch's pairs.
     */
    @Test
    void thePairKeyedOnTokensIsTheCheapestOnAverageOverTheBatchsRoutings() {
        // blocks of 16 pairs, 4 groups: G grows with the distinct experts the routing touches
        DispatchTable.Row perBlock = new DispatchTable.Row("per_block", DispatchTable.Kind.TILES, 16, 4,
                new WaveCostModel(5, 0, 1.0, 0, 0, 3), Integer.MAX_VALUE);
        DispatchTable.Row flat = new DispatchTable.Row("flat", DispatchTable.Kind.TILES, 16, 4,
                new WaveCostModel(150, 0, 0, 0, 0, 1), Integer.MAX_VALUE);
        DispatchTable table = new DispatchTable(SHAPE.experts(), List.of(perBlock, flat), List.of(flat));
        int tokens = 64;
        int[] piled = new int[SHAPE.experts()];
        for (int e = 0; e < SHAPE.topk(); e++) {
            piled[e] = tokens;
        }
        int[] uniform = load(RandomInputs.uniformRouting(5, tokens, SHAPE.experts(), SHAPE.topk()));
        assertEquals(0, table.choose(piled, tokens, 132)[0], "piled onto k experts: few blocks, the per-block row wins");
        assertEquals(1, table.choose(uniform, tokens, 132)[0], "balanced: many blocks, the flat row wins");
        double perBlockMean = table.routingsOf(tokens, SHAPE.topk()).stream().mapToDouble(l -> perBlock.cost(l, tokens, 132)).average()
                .orElseThrow();
        assertTrue(perBlockMean > 150, "the per-block row is dearer on average (" + perBlockMean + " us)");
        assertArrayEquals(new int[] {1, 0}, table.keyedOnTokens(tokens, SHAPE.topk(), 132));
        // one token: at most k experts, so the per-block row is the cheaper at every routing
        assertArrayEquals(new int[] {0, 0}, table.keyedOnTokens(1, SHAPE.topk(), 132));
        DispatchTable.Row cheapButSmall = new DispatchTable.Row("small", DispatchTable.Kind.TILES, 16, 4,
                new WaveCostModel(1, 0, 0, 0, 0, 2), 8);
        DispatchTable limited = new DispatchTable(SHAPE.experts(), List.of(cheapButSmall, flat), List.of(flat));
        assertEquals(0, limited.keyedOnTokens(8, SHAPE.topk(), 132)[0]);
        assertEquals(1, limited.keyedOnTokens(9, SHAPE.topk(), 132)[0], "the cheap row's kernel takes 8 tokens at most");
        assertThrows(IllegalArgumentException.class, () -> table.keyedOnTokens(0, SHAPE.topk(), 132));
        assertEquals(1 + DispatchTable.NARROWING_LEVELS * DispatchTable.NARROWING_ROUTINGS_PER_LEVEL,
                table.routingsOf(tokens, SHAPE.topk()).size());
        for (int[] load : table.routingsOf(tokens, SHAPE.topk())) {
            assertEquals((long) tokens * SHAPE.topk(), java.util.Arrays.stream(load).asLongStream().sum(), "every routing is the batch's pairs");
        }
    }
}
