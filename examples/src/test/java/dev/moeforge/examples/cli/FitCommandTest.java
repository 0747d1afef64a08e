package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * `moeforge fit` on profiles made up from known cost models (no GPU): it recovers the choices the
 * models make, writes fit.json and the pictures, and refuses a profile of another pool.
 */
class FitCommandTest {
    @TempDir
    Path dir;

    static final ExpertShape SHAPE = new ExpertShape(256, 128, 16, 4);
    static final int SMS = 132;

    /** Two gate_up and two down configs of the small geometry: small tiles and large ones, one output-centric. */
    static final String POOL = """
            kernel pool_gate_up_small {
              problem expert_gate_up(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16, layout=stacked)
              schedule expert_centric(block_m=16, block_n=32, block_k=32, warps_m=1, warps_n=2, stages=3, group_m=1)
              epilogue store(gated(silu, acc(gate), acc(up)), dtype=bf16)
              target sm_90a
            }

            kernel pool_gate_up_large {
              problem expert_gate_up(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16, layout=stacked)
              schedule expert_centric(block_m=64, block_n=64, block_k=64, warps_m=2, warps_n=2, stages=3, group_m=1)
              epilogue store(gated(silu, acc(gate), acc(up)), dtype=bf16)
              target sm_90a
            }

            kernel pool_down_small {
              problem expert_down(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16)
              schedule expert_centric(block_m=16, block_n=32, block_k=32, warps_m=1, warps_n=2, stages=2, group_m=1)
              epilogue store(combine(acc), dtype=bf16)
              target sm_90a
            }

            kernel pool_down_warps {
              problem expert_down(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16)
              schedule output_centric(warps_per_cta=4, load_bytes=16, k_unroll=4, tokens_per_cta=8, warps_per_output=1, min_blocks_per_sm=0)
              epilogue store(combine(acc), dtype=bf16)
              target sm_90a
            }
            """;

    /** The made-up truth: per config, T = a + b ceil(G/S) + c G with these coefficients. */
    static final Map<String, double[]> TRUTH = Map.of(
            "pool_gate_up_small", new double[] {4, 2, 0.030},
            "pool_gate_up_large", new double[] {9, 5, 0.004},
            "pool_down_small", new double[] {3, 1, 0.020},
            "pool_down_warps", new double[] {6, 0.5, 0.010});

    private void writeProfile(String poolSha, int[] batches, double[] levels, int[] heldBatches, double[] heldLevels) throws Exception {
        Files.writeString(dir.resolve(PoolDirectory.KERNELS_FILE), POOL);
        List<KernelSpec> specs = SpecParser.parseAll(POOL);
        List<Map<String, Object>> points = new ArrayList<>();
        List<Map<String, Object>> timings = new ArrayList<>();
        long seed = 7;
        for (boolean held : new boolean[] {false, true}) {
            for (int m : held ? heldBatches : batches) {
                RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(seed + m, m, SHAPE.experts(), SHAPE.topk());
                for (double b : held ? heldLevels : levels) {
                    double target = Math.round(range.clamp(b) * 1000) / 1000.0;
                    String key = m + "@" + target + (held ? "/held-out" : "");
                    if (points.stream().anyMatch(p -> p.get("key").equals(key))) {
                        continue;
                    }
                    Routing r = RandomInputs.skewedRouting(seed + m, m, SHAPE.experts(), SHAPE.topk(), target);
                    int[] load = new int[SHAPE.experts()];
                    Arrays.stream(r.ids()).forEach(id -> load[id]++);
                    points.add(Map.of("key", key, "batch", m, "balancedness", r.balancedness(SHAPE.experts()), "held_out", held,
                            "expert_load", load));
                    for (KernelSpec s : specs) {
                        Problem.ExpertProblem p = (Problem.ExpertProblem) s.problem();
                        @SuppressWarnings("unchecked")
                        Schedule<Problem.ExpertProblem> schedule = (Schedule<Problem.ExpertProblem>) s.schedule();
                        long g = schedule.workBlocks(p, m, load);
                        double[] c = TRUTH.get(s.name());
                        timings.add(Map.of("config", s.name(), "point", key, "us", c[0] + c[1] * Math.ceilDiv(g, SMS) + c[2] * g));
                    }
                }
            }
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", PoolDirectory.PROFILE_FORMAT);
        doc.put("model", "made_up");
        doc.put("device", Map.of("name", "none"));
        doc.put("sm_count", SMS);
        doc.put("pool_sha256", poolSha == null ? PoolDirectory.sha256(POOL) : poolSha);
        doc.put("points", points);
        doc.put("timings", timings);
        new ObjectMapper().writeValue(dir.resolve(PoolDirectory.PROFILE_FILE).toFile(), doc);
    }

    @Test
    void recoversTheChoicesOfExactModelsAndWritesTheFitAndPictures() throws Exception {
        writeProfile(null, new int[] {8, 64, 512, 2048, 8192}, new double[] {1.0, 0.9, 0.8, 0.7, 0.6},
                new int[] {32, 1024}, new double[] {0.95, 0.75});
        CliRun run = CliRun.of("fit", dir.toString());
        assertEquals(0, run.exitCode(), run.err() + run.out());
        JsonNode fit = new ObjectMapper().readTree(dir.resolve(FitCommand.FILE).toFile());
        // three terms are the truth's own form: every choice exact on the held-out points
        JsonNode three = fit.get("ablation").get(1);
        assertEquals(3, three.get("terms").asInt());
        assertTrue(three.get("held_out").get("points").asInt() >= 3, fit.toString());
        assertEquals(0.0, three.get("held_out").get("max").asDouble(), 1e-9, run.out());
        assertEquals(4, fit.get("models").size());
        double[] small = TRUTH.get("pool_gate_up_small");
        JsonNode m = fit.get("models").get("pool_gate_up_small");
        assertArrayEquals(small, new double[] {m.get("a").asDouble(), m.get("b").asDouble(), m.get("c").asDouble()}, 1e-6);
        for (String png : List.of("regret-cdf.png", "winners.png", "predicted.png")) {
            byte[] head = Arrays.copyOf(Files.readAllBytes(dir.resolve(png)), 4);
            assertArrayEquals(new byte[] {(byte) 0x89, 'P', 'N', 'G'}, head, png + " is a PNG");
        }
        assertTrue(run.out().contains("routing-aware dispatch against the static pair per batch"), run.out());
        // the pair keyed on the token count, at every point where both its configs were timed, never under the best
        JsonNode keyed = fit.get("keyed_on_tokens");
        assertEquals(fit.get("held_out_choices").size(), keyed.get("regret").get("held_out").get("points").asInt(), run.out());
        for (JsonNode row : keyed.get("rows")) {
            assertTrue(row.get("chosen_us").asDouble() >= row.get("best_us").asDouble() - 1e-9, row.toString());
        }
        // the same profile kept gzipped: the same fit
        Path json = dir.resolve(PoolDirectory.PROFILE_FILE);
        try (var out = new java.util.zip.GZIPOutputStream(Files.newOutputStream(dir.resolve(PoolDirectory.PROFILE_FILE + ".gz")))) {
            Files.copy(json, out);
        }
        Files.delete(json);
        String plain = Files.readString(dir.resolve(FitCommand.FILE));
        Files.delete(dir.resolve(FitCommand.FILE));
        CliRun gzipped = CliRun.of("fit", dir.toString());
        assertEquals(0, gzipped.exitCode(), gzipped.err() + gzipped.out());
        assertEquals(plain, Files.readString(dir.resolve(FitCommand.FILE)), "the fit of the gzipped profile");
    }

    @Test
    void refusesAProfileOfAnotherPoolAndOneWithTooFewPoints() throws Exception {
        writeProfile("0".repeat(64), new int[] {8, 64, 512, 2048, 8192}, new double[] {1.0}, new int[] {32}, new double[] {1.0});
        CliRun other = CliRun.of("fit", dir.toString());
        assertEquals(1, other.exitCode());
        assertTrue(other.err().contains("is a profile of another pool than"), other.err());
        writeProfile(null, new int[] {8, 64}, new double[] {1.0}, new int[] {32}, new double[] {1.0});
        CliRun few = CliRun.of("fit", dir.toString());
        assertEquals(1, few.exitCode());
        // gate_up's two grids take one wave, so its model is the constant alone, which two samples fit; down's take two
        assertTrue(few.err().contains("config pool_down_small: 2 samples for a model of 2 terms: at least 3"), few.err());
        Files.delete(dir.resolve(PoolDirectory.PROFILE_FILE));
        CliRun none = CliRun.of("fit", dir.toString());
        assertTrue(none.err().contains("run `moeforge profile " + dir + "` on a GPU first"), none.err());
    }
}
