package dev.moeforge.runtime.dispatch;

import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.schedule.Schedule;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The wave cost model of every configuration of a pool, fitted on its profiled points, and how
 * well its choice does where it was not fitted: at each held-out point the model picks, per half
 * of the layer, the configuration it predicts fastest, and the regret is that pick's measured time
 * over the best measured one.
 */
public final class PoolFit {
    /** Which half of the expert layer a configuration computes. */
    public enum Half {
        GATE_UP, DOWN
    }

    /** A configuration of the pool: its name, half, and the problem and schedule that give its grid. */
    public record Config(String name, Half half, Problem.ExpertProblem problem, Schedule<Problem.ExpertProblem> schedule) {
        /** Blocks with work at this point: the model's G. */
        long blocks(Point p) {
            return schedule.workBlocks(problem, p.batch(), p.expertLoad());
        }

        /** The model's prediction at this point. */
        public double predict(WaveCostModel model, Point p, int sms) {
            return model.predict(blocks(p), p.pairs(), sms);
        }

        boolean runs(Point p) {
            return p.batch() <= schedule.maxTokens(problem);
        }
    }

    /** A profiled point: its batch, the routing's balancedness and expert load, and whether it was held out of the fit. */
    public record Point(String key, int batch, double balancedness, boolean heldOut, int[] expertLoad) {
        /** The routed (token, slot) pairs: the model's P. */
        public long pairs() {
            return Arrays.stream(expertLoad).asLongStream().sum();
        }
    }

    /** One measured time of one configuration at one point (per layer). */
    public record Measured(String config, String point, double micros) {}

    /** What the model chose for the layer at a point, and what that cost against the best measured pair. */
    public record Choice(Point point, String gateUp, String down, double micros, String bestGateUp, String bestDown,
                         double bestMicros) {
        public double regret() {
            return micros / bestMicros - 1;
        }
    }

    /** Regret over a set of points: mean, 95th percentile and largest. */
    public record Regret(int points, double mean, double p95, double max) {
        public static Regret of(List<Choice> choices) {
            double[] r = choices.stream().mapToDouble(Choice::regret).sorted().toArray();
            if (r.length == 0) {
                return new Regret(0, Double.NaN, Double.NaN, Double.NaN);
            }
            return new Regret(r.length, Arrays.stream(r).average().orElseThrow(), r[(int) Math.ceil(0.95 * r.length) - 1],
                    r[r.length - 1]);
        }
    }

    private final List<Config> configs;
    private final List<Point> points;
    private final Map<String, Map<String, Double>> times = new LinkedHashMap<>();  // config -> point -> us
    private final int sms;

    public PoolFit(List<Config> configs, List<Point> points, List<Measured> measured, int sms) {
        this.configs = List.copyOf(configs);
        this.points = List.copyOf(points);
        this.sms = sms;
        for (Measured m : measured) {
            times.computeIfAbsent(m.config(), c -> new LinkedHashMap<>()).put(m.point(), m.micros());
        }
    }

    public List<Config> configs() {
        return configs;
    }

    public List<Point> points() {
        return points;
    }

    /** The measured time of a configuration at a point, if it was timed there. */
    public Optional<Double> measured(Config c, Point p) {
        return Optional.ofNullable(times.getOrDefault(c.name(), Map.of()).get(p.key()));
    }

    /**
     * Each configuration's model with up to {@code terms} terms, fitted on the points not held out.
     * A configuration with too few timed points for the model is refused by name, with the points it has.
     */
    public Map<String, WaveCostModel> fit(int terms) {
        Map<String, WaveCostModel> models = new LinkedHashMap<>();
        for (Config c : configs) {
            List<WaveCostModel.Sample> samples = new ArrayList<>();
            for (Point p : points) {
                if (!p.heldOut()) {
                    measured(c, p).ifPresent(t -> samples.add(new WaveCostModel.Sample(c.blocks(p), p.pairs(), t)));
                }
            }
            try {
                models.put(c.name(), WaveCostModel.fit(samples, sms, terms));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("config " + c.name() + ": " + e.getMessage() + " (timed at " + samples.size()
                        + " profiled points; it runs up to " + c.schedule().maxTokens(c.problem()) + " tokens)", e);
            }
        }
        return models;
    }

    /** The configuration of {@code half} the models predict fastest at {@code p}, among those that run at its batch. */
    public Config choose(Map<String, WaveCostModel> models, Half half, Point p) {
        return configs.stream().filter(c -> c.half() == half && c.runs(p))
                .min(Comparator.comparingDouble(c -> c.predict(models.get(c.name()), p, sms)))
                .orElseThrow(() -> new IllegalStateException("no config of " + half + " runs " + p.batch() + " tokens"));
    }

    /** The fastest measured configuration of {@code half} at {@code p}. */
    public Config best(Half half, Point p) {
        return configs.stream().filter(c -> c.half() == half && measured(c, p).isPresent())
                .min(Comparator.comparingDouble(c -> measured(c, p).orElseThrow()))
                .orElseThrow(() -> new IllegalStateException("no config of " + half + " was timed at " + p.key()));
    }

    /** The model's choice for the layer at each point of {@code where}, against the best measured pair. */
    public List<Choice> choices(Map<String, WaveCostModel> models, List<Point> where) {
        List<Choice> out = new ArrayList<>();
        for (Point p : where) {
            Config gu = choose(models, Half.GATE_UP, p);
            Config dn = choose(models, Half.DOWN, p);
            Config bestGu = best(Half.GATE_UP, p);
            Config bestDn = best(Half.DOWN, p);
            double chosen = measured(gu, p).orElseThrow() + measured(dn, p).orElseThrow();
            double best = measured(bestGu, p).orElseThrow() + measured(bestDn, p).orElseThrow();
            out.add(new Choice(p, gu.name(), dn.name(), chosen, bestGu.name(), bestDn.name(), best));
        }
        return out;
    }

    public List<Point> heldOut() {
        return points.stream().filter(Point::heldOut).toList();
    }

    public List<Point> profiled() {
        return points.stream().filter(p -> !p.heldOut()).toList();
    }

    /**
     * Routing-aware dispatch against static dispatch: for each batch, the static pair is the best
     * measured at that batch's most balanced point (what an autotuner picks); at the batch's other
     * points the model's choice and the static pair are both measured. Each row: point, static time,
     * dispatched time.
     */
    public record AgainstStatic(Point point, String staticGateUp, String staticDown, double staticMicros, double dispatchedMicros) {
        public double speedup() {
            return staticMicros / dispatchedMicros;
        }
    }

    public List<AgainstStatic> againstStatic(Map<String, WaveCostModel> models, List<Point> where) {
        List<AgainstStatic> rows = new ArrayList<>();
        for (int batch : where.stream().mapToInt(Point::batch).distinct().toArray()) {
            List<Point> here = where.stream().filter(p -> p.batch() == batch).toList();
            Point balanced = here.stream().max(Comparator.comparingDouble(Point::balancedness)).orElseThrow();
            Config staticGu = best(Half.GATE_UP, balanced);
            Config staticDn = best(Half.DOWN, balanced);
            for (Point p : here) {
                if (p == balanced) {
                    continue;
                }
                Optional<Double> sg = measured(staticGu, p);
                Optional<Double> sd = measured(staticDn, p);
                if (sg.isEmpty() || sd.isEmpty()) {
                    continue;
                }
                Config gu = choose(models, Half.GATE_UP, p);
                Config dn = choose(models, Half.DOWN, p);
                rows.add(new AgainstStatic(p, staticGu.name(), staticDn.name(), sg.get() + sd.get(),
                        measured(gu, p).orElseThrow() + measured(dn, p).orElseThrow()));
            }
        }
        return rows;
    }
}
