package dev.moeforge.runtime.dispatch;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.OutputTensorCore;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.reference.RandomInputs;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.ToDoubleFunction;
import java.util.stream.IntStream;

/**
 * What the routing plan's choosing launch ({@code moe_align_scatter_dispatch} in
 * {@code moeforge_dispatch.cu}) prices: for each half of the layer, its candidate configurations,
 * each as a row of ten doubles (how its grid follows the expert histogram, and its fitted
 * {@link WaveCostModel}). {@link #choose} is the host twin: the same rows and formula; the device
 * sums the histogram's features in another order, so a near tie may go the other way.
 */
public final class DispatchTable {
    /** The most candidates per half (the kernel's table holds 64 rows in all). */
    public static final int MAX_PER_HALF = 32;
    /** The most experts a table takes: what the choosing launch's shared memory and registers are sized for. */
    public static final int MAX_EXPERTS = 1024;
    /** The most distinct histogram features (tile heights, token tiles) the kernel sums. */
    public static final int MAX_FEATURES = 8;

    /** How a candidate's grid G follows the histogram. */
    public enum Kind {
        /** expert-centric: {@code groups x sum_e ceil(n_e / param)}. */
        TILES,
        /** output-centric, one token per warp: {@code groups x pairs}. */
        PER_PAIR,
        /** output-centric, tiles of {@code param} tokens: {@code groups x tiles x expected distinct experts per tile}. */
        TOKEN_TILES
    }

    /**
     * One candidate: its name, how its grid follows the histogram, its model, and the most tokens its
     * kernel takes (a row is never chosen for more).
     */
    public record Row(String name, Kind kind, int param, long groups, WaveCostModel model, int maxTokens) {
        /** Whether the row's kernel takes {@code tokens} tokens. */
        public boolean runs(int tokens) {
            return tokens <= maxTokens;
        }

        /** The grid at this histogram, as the kernel computes it. */
        public long blocks(int[] load, int tokens) {
            return switch (kind) {
                case TILES -> {
                    long tiles = 0;
                    for (int n : load) {
                        tiles += Math.ceilDiv(n, param);
                    }
                    yield groups * tiles;
                }
                case PER_PAIR -> groups * pairs(load);
                case TOKEN_TILES -> {
                    int per = Math.min(param, tokens);
                    double distinct = 0;
                    for (int n : load) {
                        distinct += OutputCentric.inTile(tokens, n, per);
                    }
                    yield Math.max(1, Math.round(groups * Math.ceilDiv(tokens, param) * distinct));
                }
            };
        }

        public double cost(int[] load, int tokens, int sms) {
            return model.predict(blocks(load, tokens), pairs(load), sms);
        }

        /** What the kernel reads: kind, param, groups, the feature's number (-1: none), the five coefficients, the origin. */
        double[] packed(int feature, int origin) {
            return new double[] {kind.ordinal(), param, groups, feature, model.a(), model.b(), model.c(), model.d(), model.e(), origin};
        }

        /** The histogram feature this row's grid reads, or null (one block per pair reads the pairs alone). */
        String feature() {
            return kind == Kind.PER_PAIR ? null : kind + "/" + param;
        }
    }

    private final int experts;
    private final List<Row> gateUp;
    private final List<Row> down;
    /** Each row's number in the table this one was narrowed from ({@link #narrowedTo}); its own number otherwise. */
    private final int[] gateUpOrigin;
    private final int[] downOrigin;

    public DispatchTable(int experts, List<Row> gateUp, List<Row> down) {
        this(experts, gateUp, down, identity(gateUp.size()), identity(down.size()));
    }

    private static int[] identity(int n) {
        return IntStream.range(0, n).toArray();
    }

    private DispatchTable(int experts, List<Row> gateUp, List<Row> down, int[] gateUpOrigin, int[] downOrigin) {
        if (experts < 1 || experts > MAX_EXPERTS) {
            throw new IllegalArgumentException("experts = " + experts + ": the dispatch kernel takes 1.." + MAX_EXPERTS);
        }
        for (List<Row> half : List.of(gateUp, down)) {
            if (half.isEmpty() || half.size() > MAX_PER_HALF) {
                throw new IllegalArgumentException(half.size() + " candidates for a half: 1.." + MAX_PER_HALF);
            }
        }
        this.experts = experts;
        this.gateUp = List.copyOf(gateUp);
        this.down = List.copyOf(down);
        this.gateUpOrigin = gateUpOrigin.clone();
        this.downOrigin = downOrigin.clone();
        int features = features().size();
        if (features > MAX_FEATURES) {
            throw new IllegalArgumentException(features + " distinct tile heights and token tiles among the candidates: the dispatch "
                    + "kernel sums at most " + MAX_FEATURES);
        }
    }

    /** Routings per balancedness level {@link #routingsOf} holds ({@link #narrowedTo}, {@link #keyedOnTokens}). */
    static final int NARROWING_ROUTINGS_PER_LEVEL = 4;
    /** Balancedness levels, from the least to the most balanced a batch reaches, {@link #routingsOf} holds. */
    static final int NARROWING_LEVELS = 16;

    /**
     * The rows that are the cheapest of their half, among those that take {@code tokens} tokens, at
     * some routing of that many tokens: over
     * {@link #NARROWING_LEVELS} balancedness levels from the least to the most balanced the batch
     * reaches, {@link #NARROWING_ROUTINGS_PER_LEVEL} routings each, and every token on the same top-k
     * experts. A graph of that token count holds only these (fewer switch bodies), in this
     * table's order; {@link #origin} maps a choice among them back to this table's rows.
     */
    public DispatchTable narrowedTo(int tokens, int topk, int sms) {
        BitSet ups = new BitSet();
        BitSet downs = new BitSet();
        for (int[] load : routingsOf(tokens, topk)) {
            int[] c = choose(load, tokens, sms);
            ups.set(c[0]);
            downs.set(c[1]);
        }
        int[] upRows = ups.stream().toArray();
        int[] downRows = downs.stream().toArray();
        return new DispatchTable(experts, Arrays.stream(upRows).mapToObj(gateUp::get).toList(),
                Arrays.stream(downRows).mapToObj(down::get).toList(), Arrays.stream(upRows).map(r -> gateUpOrigin[r]).toArray(),
                Arrays.stream(downRows).map(r -> downOrigin[r]).toArray());
    }

    /**
     * The expert histograms a batch of {@code tokens} tokens is priced on, by {@link #narrowedTo} and
     * {@link #keyedOnTokens}: every token on the same top-k experts, then {@link #NARROWING_LEVELS}
     * balancedness levels from the least to the most balanced the batch reaches,
     * {@link #NARROWING_ROUTINGS_PER_LEVEL} routings each.
     */
    List<int[]> routingsOf(int tokens, int topk) {
        if (tokens < 1) {
            throw new IllegalArgumentException("tokens = " + tokens + ": at least 1");
        }
        List<int[]> loads = new ArrayList<>();
        int[] piled = new int[experts];
        for (int e = 0; e < Math.min(topk, experts); e++) {
            piled[e] = tokens;
        }
        loads.add(piled);
        for (int seed = 0; seed < NARROWING_ROUTINGS_PER_LEVEL; seed++) {
            RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(seed, tokens, experts, topk);
            for (int level = 0; level < NARROWING_LEVELS; level++) {
                double beta = range.min() + (range.max() - range.min()) * level / (NARROWING_LEVELS - 1);
                int[] load = new int[experts];
                for (int id : RandomInputs.skewedRouting(seed, tokens, experts, topk, beta).ids()) {
                    load[id]++;
                }
                loads.add(load);
            }
        }
        return loads;
    }

    /**
     * The pair for a batch of {@code tokens} tokens chosen on the host, once, from the token count alone:
     * for each half the row with the least mean predicted time over {@link #routingsOf} that many tokens
     * (first on a tie), among the rows whose kernels take them. A graph captured for that token count runs
     * this pair whatever the routing: no decision on the device, so nothing is added to the layer; what it
     * gives up against {@link #choose} is the spread between the best pair of one routing and the best on
     * average over the batch's routings.
     */
    public int[] keyedOnTokens(int tokens, int topk, int sms) {
        List<int[]> loads = routingsOf(tokens, topk);
        ToDoubleFunction<Row> total = r -> loads.stream().mapToDouble(load -> r.cost(load, tokens, sms)).sum();
        return new int[] {cheapest(gateUp, tokens, total), cheapest(down, tokens, total)};
    }

    /** Gate_up row {@code row}'s number in the table this one was narrowed from. */
    public int gateUpOrigin(int row) {
        return gateUpOrigin[row];
    }

    /** Down row {@code row}'s number in the table this one was narrowed from. */
    public int downOrigin(int row) {
        return downOrigin[row];
    }

    /** A choice among this table's rows (gate_up's, down's) as rows of the table it was narrowed from. */
    public int[] origin(int[] choice) {
        return new int[] {gateUpOrigin(choice[0]), downOrigin(choice[1])};
    }

    public int experts() {
        return experts;
    }

    public List<Row> gateUp() {
        return gateUp;
    }

    public List<Row> down() {
        return down;
    }

    /** The row of a pool configuration: how its schedule's grid follows the histogram. */
    public static Row row(String name, Problem.ExpertProblem problem, Schedule<Problem.ExpertProblem> schedule, WaveCostModel model) {
        int outputs = switch (problem) {
            case Problem.ExpertGateUp p -> p.shape().intermediate();
            case Problem.ExpertDown p -> p.shape().hidden();
        };
        return switch (schedule) {
            case ExpertCentric ec -> new Row(name, Kind.TILES, ec.blockM(), Math.ceilDiv(outputs, ec.blockN()), model,
                    ec.maxTokens(problem));
            case OutputCentric oc -> oc.tokensPerCta() == 1
                    ? new Row(name, Kind.PER_PAIR, 1, Math.ceilDiv(outputs, oc.outputsPerCta()), model, oc.maxTokens(problem))
                    : new Row(name, Kind.TOKEN_TILES, oc.tokensPerCta(), Math.ceilDiv(outputs, oc.outputsPerCta()), model,
                            oc.maxTokens(problem));
            case OutputTensorCore _ -> throw new IllegalArgumentException(
                    name + ": routing-aware dispatch prices expert_centric and output_centric schedules, not " + schedule.kind().name());
        };
    }

    /**
     * The candidates of a fitted pool: for each half, the configurations its models pick at some
     * profiled or held-out point (the only ones the dispatch could choose there), the most picked
     * first, at most {@link #MAX_PER_HALF}.
     */
    public static DispatchTable of(PoolFit fit, Map<String, WaveCostModel> models) {
        List<List<Row>> halves = new ArrayList<>();
        for (PoolFit.Half half : PoolFit.Half.values()) {
            Map<PoolFit.Config, Integer> picks = new LinkedHashMap<>();
            for (PoolFit.Point p : fit.points()) {
                picks.merge(fit.choose(models, half, p), 1, Integer::sum);
            }
            List<Row> rows = new ArrayList<>();
            picks.entrySet().stream().sorted(Map.Entry.<PoolFit.Config, Integer>comparingByValue().reversed()).limit(MAX_PER_HALF)
                    .forEach(e -> rows.add(row(e.getKey().name(), e.getKey().problem(), e.getKey().schedule(), models.get(e.getKey().name()))));
            halves.add(rows);
        }
        int experts = fit.configs().getFirst().problem().shape().experts();
        return new DispatchTable(experts, halves.get(0), halves.get(1));
    }

    /**
     * The host twin of the kernel: the cheapest gate_up row and the cheapest down row at this histogram
     * (first on a tie), among the rows whose kernels take {@code tokens} tokens.
     */
    public int[] choose(int[] load, int tokens, int sms) {
        if (load.length != experts) {
            throw new IllegalArgumentException("a histogram of " + load.length + " experts for a table of " + experts);
        }
        ToDoubleFunction<Row> here = r -> r.cost(load, tokens, sms);
        return new int[] {cheapest(gateUp, tokens, here), cheapest(down, tokens, here)};
    }

    /** The row of least {@code cost} (first on a tie) among those whose kernels take {@code tokens} tokens. */
    private static int cheapest(List<Row> rows, int tokens, ToDoubleFunction<Row> cost) {
        int best = -1;
        double bestCost = Double.POSITIVE_INFINITY;
        for (int r = 0; r < rows.size(); r++) {
            if (!rows.get(r).runs(tokens)) {
                continue;
            }
            double c = cost.applyAsDouble(rows.get(r));
            if (best < 0 || c < bestCost) {
                best = r;
                bestCost = c;
            }
        }
        if (best < 0) {
            throw new IllegalArgumentException("no candidate of the half takes " + tokens + " tokens: "
                    + rows.stream().map(r -> r.name() + " (at most " + r.maxTokens() + ")").toList());
        }
        return best;
    }

    /** The (gate_up, down) pairs the layer's switch chooses among: every combination of the halves' rows. */
    public int pairs() {
        return gateUp.size() * down.size();
    }

    /** The switch's value for gate_up row {@code up} and down row {@code down}, as the kernel sets it. */
    public int pairIndex(int up, int down) {
        return up * this.down.size() + down;
    }

    /**
     * What the kernel reads for the token-tile features at {@code tokens} tokens: for feature f (numbered
     * as in {@link #packed()}) and n routed pairs on an expert, at {@code [f * (tokens + 1) + min(n, tokens)]},
     * the chance that the expert is in a tile of the feature's tokens ({@link OutputCentric#inTile}); zero
     * for the other features. Tabulated per token count so that the kernel runs no per-expert product of
     * {@code per} divisions.
     */
    public double[] inTileTable(int tokens) {
        if (tokens < 1) {
            throw new IllegalArgumentException("tokens = " + tokens + ": at least 1");
        }
        List<String> features = features();
        double[] out = new double[Math.max(1, features.size()) * (tokens + 1)];
        for (Row r : all()) {
            if (r.kind() == Kind.TOKEN_TILES) {
                int f = features.indexOf(r.feature());
                int per = Math.min(r.param(), tokens);
                for (int n = 0; n <= tokens; n++) {
                    out[f * (tokens + 1) + n] = OutputCentric.inTile(tokens, n, per);
                }
            }
        }
        return out;
    }

    private List<Row> all() {
        List<Row> all = new ArrayList<>(gateUp);
        all.addAll(down);
        return all;
    }

    private List<String> features() {
        return all().stream().map(Row::feature).filter(Objects::nonNull).distinct().toList();
    }

    /** Doubles per row the kernel reads. */
    static final int ROW_DOUBLES = 10;

    /** The kernel's rows, gate_up's then down's, with their features numbered in order of first use and their origins. */
    public double[] packed() {
        List<Row> all = all();
        List<String> features = features();
        double[] out = new double[ROW_DOUBLES * all.size()];
        for (int i = 0; i < all.size(); i++) {
            Row r = all.get(i);
            int origin = i < gateUp.size() ? gateUpOrigin[i] : downOrigin[i - gateUp.size()];
            System.arraycopy(r.packed(r.feature() == null ? -1 : features.indexOf(r.feature()), origin), 0, out, ROW_DOUBLES * i,
                    ROW_DOUBLES);
        }
        return out;
    }

    static long pairs(int[] load) {
        long p = 0;
        for (int n : load) {
            p += n;
        }
        return p;
    }
}
