package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.runtime.dispatch.DispatchTable;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import dev.moeforge.runtime.dispatch.PoolFit;
import dev.moeforge.runtime.dispatch.WaveCostModel;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code moeforge fit DIR}: fits the wave cost model of every pool configuration on DIR's profile,
 * reports the regret of its choices on the held-out points (mean, p95, max) for 2 to 5 terms,
 * and routing-aware dispatch against the best static pair per batch; writes {@code DIR/fit.json}
 * and the pictures {@code DIR/regret-cdf.png}, {@code DIR/winners.png} and {@code DIR/predicted.png}.
 */
@Command(name = "fit", mixinStandardHelpOptions = true,
        description = "Fits the wave cost model T = a + b ceil(G/S) + c G + d sqrt(G) + e P of every config in DIR's profile and "
                + "reports the regret of its choices on the held-out points (2, 3 and 4 terms) and dispatch against static "
                + "configs; writes DIR/fit.json and PNG plots.")
public final class FitCommand implements Callable<Integer> {
    static final String FILE = "fit.json";

    @Parameters(index = "0", paramLabel = "DIR", description = "The pool's directory, with profile.json from `moeforge profile` (or profile.json.gz, the same gzipped).")
    Path dir;

    @Spec
    CommandSpec command;

    @Override
    public Integer call() throws Exception {
        PrintWriter out = command.commandLine().getOut();
        PoolDirectory.Loaded profiled = PoolDirectory.load(dir);
        PoolFit fit = profiled.fit();
        JsonNode profile = profiled.profile();
        int sms = profile.get("sm_count").asInt();
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("model", profile.get("model").asText());
        doc.put("device", profile.path("device").path("name").asText());
        doc.put("sm_count", sms);
        doc.put("profile_date", profile.path("date").asText());
        doc.put("cost_model", "T = a + b ceil(G/S) + c G + d sqrt(G) + e P (P: routed pairs); d only where the config's median "
                + "profiled grid is under S; the dispatch uses all five terms");
        out.printf(Locale.ROOT, "fit of %s: %d configs, %d profiled points, %d held out (S = %d)%n%n", profile.get("model").asText(),
                fit.configs().size(), fit.profiled().size(), fit.heldOut().size(), sms);
        out.println("regret of the model's choice for the layer (gate_up + down) against the best measured pair");
        out.printf(Locale.ROOT, "%-6s %-12s %7s %9s %9s %9s%n", "terms", "points", "count", "mean", "p95", "max");
        List<Map<String, Object>> ablation = new ArrayList<>();
        for (int terms = 2; terms <= WaveCostModel.MAX_TERMS; terms++) {
            Map<String, WaveCostModel> models = fit.fit(terms);
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("terms", terms);
            for (var where : List.of(Map.entry("held_out", fit.heldOut()), Map.entry("profiled", fit.profiled()))) {
                PoolFit.Regret r = PoolFit.Regret.of(fit.choices(models, where.getValue()));
                row.put(where.getKey(), JsonObjects.ordered("points", r.points(), "mean", r.mean(), "p95", r.p95(), "max", r.max()));
                out.printf(Locale.ROOT, "%-6d %-12s %7d %8.2f%% %8.2f%% %8.2f%%%n", terms, where.getKey(), r.points(), 100 * r.mean(),
                        100 * r.p95(), 100 * r.max());
            }
            ablation.add(row);
        }
        doc.put("ablation", ablation);
        Map<String, WaveCostModel> models = fit.fit(WaveCostModel.MAX_TERMS);
        Map<String, Object> coefficients = new LinkedHashMap<>();
        models.forEach((name, m) -> coefficients.put(name, JsonObjects.ordered("a", m.a(), "b", m.b(), "c", m.c(), "d", m.d(), "e", m.e(),
                "terms", m.terms())));
        doc.put("models", coefficients);
        List<PoolFit.Choice> choices = fit.choices(models, fit.heldOut());
        doc.put("held_out_choices", choices.stream().map(FitCommand::choiceRow).toList());
        out.println();
        out.println("held-out points: the model's pair against the best measured pair (us per layer)");
        choices.forEach(c -> printChoice(out, c));
        List<PoolFit.AgainstStatic> vsStatic = new ArrayList<>(fit.againstStatic(models, fit.heldOut()));
        vsStatic.addAll(fit.againstStatic(models, fit.profiled()));
        double logSum = 0;
        double worst = Double.POSITIVE_INFINITY;
        List<Map<String, Object>> staticRows = new ArrayList<>();
        out.println();
        out.println("routing-aware dispatch against the static pair per batch (the best measured at the batch's most balanced point)");
        for (PoolFit.AgainstStatic s : vsStatic) {
            logSum += Math.log(s.speedup());
            worst = Math.min(worst, s.speedup());
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("point", s.point().key());
            row.put("batch", s.point().batch());
            row.put("balancedness", s.point().balancedness());
            row.put("held_out", s.point().heldOut());
            row.put("static", s.staticGateUp() + " + " + s.staticDown());
            row.put("static_us", s.staticMicros());
            row.put("dispatched_us", s.dispatchedMicros());
            row.put("speedup", s.speedup());
            staticRows.add(row);
            out.printf(Locale.ROOT, "  M=%-5d beta=%.2f  static %8.1f  dispatched %8.1f  %.3fx%n", s.point().batch(),
                    s.point().balancedness(), s.staticMicros(), s.dispatchedMicros(), s.speedup());
        }
        double geomean = vsStatic.isEmpty() ? Double.NaN : Math.exp(logSum / vsStatic.size());
        out.printf(Locale.ROOT, "  geomean %.3fx over %d points, worst %.3fx%n", geomean, vsStatic.size(), worst);
        doc.put("against_static", JsonObjects.ordered("rows", staticRows, "geomean_speedup", geomean, "worst_speedup", worst));
        DispatchTable table = DispatchTable.of(fit, models);
        doc.put("dispatch", JsonObjects.ordered("gate_up", table.gateUp().stream().map(DispatchTable.Row::name).toList(),
                "down", table.down().stream().map(DispatchTable.Row::name).toList()));
        out.printf(Locale.ROOT, "dispatch candidates (the configs the model picks at some point): %d for gate_up, %d for down%n",
                table.gateUp().size(), table.down().size());
        doc.put("keyed_on_tokens", keyedOnTokens(out, fit, table, sms));
        List<Path> pictures = List.of();
        try {
            pictures = FitPlots.write(dir, fit, models, choices, sms);
        } catch (RuntimeException | LinkageError | InternalError e) {
            // a JVM without fonts (a GPU host's minimal runtime) draws no text: the numbers stand without the pictures
            FitPlots.removeStale(dir);
            out.println("pictures not drawn (" + e.getMessage() + "); `moeforge fit " + dir + "` on a desktop machine draws them");
        }
        doc.put("plots", pictures.stream().map(p -> p.getFileName().toString()).toList());
        Path file = dir.resolve(FILE);
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(file.toFile(), doc);
        out.println();
        out.println("wrote " + file + (pictures.isEmpty() ? "" : " and " + pictures.stream().map(p -> p.getFileName().toString()).toList()));
        out.flush();
        return 0;
    }

    private static Map<String, Object> choiceRow(PoolFit.Choice c) {
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("point", c.point().key());
        row.put("batch", c.point().batch());
        row.put("balancedness", c.point().balancedness());
        row.put("chosen", c.gateUp() + " + " + c.down());
        row.put("chosen_us", c.micros());
        row.put("best", c.bestGateUp() + " + " + c.bestDown());
        row.put("best_us", c.bestMicros());
        row.put("regret", c.regret());
        return row;
    }

    /**
     * The pair a {@code TokenKeyedLayer} runs for each batch ({@link DispatchTable#keyedOnTokens}: chosen on
     * the host from the token count alone) against the best measured pair, at every point of the profile
     * where both of its configs were timed.
     */
    private static Map<String, Object> keyedOnTokens(PrintWriter out, PoolFit fit, DispatchTable table, int sms) {
        int topk = fit.configs().getFirst().problem().shape().topk();
        Map<String, PoolFit.Config> byName = new LinkedHashMap<>();
        fit.configs().forEach(c -> byName.put(c.name(), c));
        out.println();
        out.println("the pair keyed on the token count (chosen on the host, nothing decided on the device) against the best measured pair");
        Map<Integer, int[]> keyed = new LinkedHashMap<>();
        Map<Boolean, List<PoolFit.Choice>> choices = new LinkedHashMap<>(Map.of(true, new ArrayList<>(), false, new ArrayList<>()));
        int untimed = 0;
        for (PoolFit.Point p : fit.points()) {
            int[] pair = keyed.computeIfAbsent(p.batch(), m -> table.keyedOnTokens(m, topk, sms));
            PoolFit.Config up = byName.get(table.gateUp().get(pair[0]).name());
            PoolFit.Config down = byName.get(table.down().get(pair[1]).name());
            Optional<Double> upUs = fit.measured(up, p);
            Optional<Double> downUs = fit.measured(down, p);
            if (upUs.isEmpty() || downUs.isEmpty()) {
                untimed++;  // a config the profile did not time at this point
                continue;
            }
            PoolFit.Config bestUp = fit.best(PoolFit.Half.GATE_UP, p);
            PoolFit.Config bestDown = fit.best(PoolFit.Half.DOWN, p);
            PoolFit.Choice c = new PoolFit.Choice(p, up.name(), down.name(), upUs.get() + downUs.get(), bestUp.name(), bestDown.name(),
                    fit.measured(bestUp, p).orElseThrow() + fit.measured(bestDown, p).orElseThrow());
            choices.get(p.heldOut()).add(c);
            printChoice(out, c);
        }
        Map<String, Object> regret = new LinkedHashMap<>();
        for (boolean heldOut : List.of(true, false)) {
            PoolFit.Regret r = PoolFit.Regret.of(choices.get(heldOut));
            regret.put(heldOut ? "held_out" : "profiled", JsonObjects.ordered("points", r.points(), "mean", r.mean(), "p95", r.p95(),
                    "max", r.max()));
            out.printf(Locale.ROOT, "  %s: %d points, regret mean %.2f%%, p95 %.2f%%, max %.2f%%%n", heldOut ? "held out" : "profiled",
                    r.points(), 100 * r.mean(), 100 * r.p95(), 100 * r.max());
        }
        if (untimed > 0) {
            out.printf(Locale.ROOT, "  (%d points left out: the profile did not time the keyed pair there)%n", untimed);
        }
        List<Map<String, Object>> rows = new ArrayList<>();
        choices.values().forEach(list -> list.forEach(c -> rows.add(choiceRow(c))));
        return JsonObjects.ordered("rows", rows, "regret", regret, "points_untimed", untimed);
    }

    /** A choice against the best measured pair at its point, as the report prints it. */
    private static void printChoice(PrintWriter out, PoolFit.Choice c) {
        out.printf(Locale.ROOT, "  M=%-5d beta=%.2f%s  %8.1f vs %8.1f  (%+.2f%%)  %s + %s%n", c.point().batch(), c.point().balancedness(),
                c.point().heldOut() ? " (held out)" : "", c.micros(), c.bestMicros(), 100 * c.regret(), c.gateUp(), c.down());
    }
}
