package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.runtime.dispatch.PoolDirectory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** `moeforge regions`: the variables of known geometries, and the check against a made-up profile. */
class RegionsCommandTest {
    @TempDir
    Path dir;

    @Test
    void printsTheVariablesAndPredictions() {
        CliRun qwen = CliRun.of("regions", "--model", "qwen3-30b-a3b", "--batches", "8,512");
        assertEquals(0, qwen.exitCode(), qwen.err());
        assertTrue(qwen.out().contains("rho    = 6 n tiles x 16 k slices = 96"), qwen.out());
        assertTrue(qwen.out().contains("region A"), qwen.out());
        assertTrue(qwen.out().contains("GROUP_M should not matter"), qwen.out());
        CliRun mixtral = CliRun.of("regions", "--model", "mixtral-8x7b", "--batches", "1");
        assertTrue(mixtral.out().contains("region B") && mixtral.out().contains("GROUP_M pays"), mixtral.out());
        assertTrue(mixtral.out().contains("tile shape + GROUP_M"), mixtral.out());
    }

    @Test
    void refusesBadInputNamingTheOption() {
        CliRun run = CliRun.of("regions", "--model", "nope");
        assertNotEquals(0, run.exitCode());
        assertTrue(run.err().contains("known: qwen3-30b-a3b"), run.err());
        CliRun format = CliRun.of("regions", "--model", "qwen3-30b-a3b", "--format", "fp4");
        assertTrue(format.exitCode() != 0 && format.err().contains("--format fp4: unknown format 'fp4'; known: bf16,"), format.err());
        CliRun sms = CliRun.of("regions", "--model", "qwen3-30b-a3b", "--sms", "0");
        assertTrue(sms.exitCode() != 0 && sms.err().contains("--sms 0: at least 1"), sms.err());
        CliRun batch = CliRun.of("regions", "--model", "qwen3-30b-a3b", "--batches", "8,-1");
        assertTrue(batch.exitCode() != 0 && batch.err().contains("--batches -1: at least 1"), batch.err());
        CliRun beta = CliRun.of("regions", "--model", "qwen3-30b-a3b", "--balancedness", "1.5");
        assertTrue(beta.exitCode() != 0 && beta.err().contains("--balancedness 1.5: from above 0 to 1"), beta.err());
    }

    static final ExpertShape SHAPE = new ExpertShape(256, 128, 16, 4);

    static String kernel(String name, String half, int groupM) {
        String problem = half.equals("gate_up")
                ? "expert_gate_up(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16, layout=stacked)"
                : "expert_down(hidden=256, intermediate=128, experts=16, topk=4, weights=bf16, activations=bf16)";
        String epilogue = half.equals("gate_up") ? "store(gated(silu, acc(gate), acc(up)), dtype=bf16)" : "store(combine(acc), dtype=bf16)";
        return "kernel " + name + " {\n  problem " + problem + "\n  schedule expert_centric(block_m=16, block_n=32, block_k=32, "
                + "warps_m=1, warps_n=2, stages=3, group_m=" + groupM + ")\n  epilogue " + epilogue + "\n  target sm_90a\n}\n\n";
    }

    /** A pool of group_m twins whose group_m 8 configs are 10% faster everywhere: the prediction (does not matter) fails. */
    @Test
    void saysWhenTheProfileContradictsAPrediction() throws Exception {
        String pool = kernel("gu_flat", "gate_up", 1) + kernel("gu_grouped", "gate_up", 8) + kernel("dn_flat", "down", 1)
                + kernel("dn_grouped", "down", 8);
        Files.writeString(dir.resolve(PoolDirectory.KERNELS_FILE), pool);
        List<Map<String, Object>> points = new ArrayList<>();
        List<Map<String, Object>> timings = new ArrayList<>();
        for (int m : new int[] {8, 64, 512}) {
            for (boolean held : new boolean[] {false, true}) {
                String key = m + (held ? "/held-out" : "");
                var r = RandomInputs.uniformRouting(m, m, SHAPE.experts(), SHAPE.topk());
                points.add(Map.of("key", key, "batch", m, "balancedness", r.balancedness(SHAPE.experts()), "held_out", held,
                        "expert_load", r.expertLoad(SHAPE.experts())));
                for (String c : List.of("gu_flat", "gu_grouped", "dn_flat", "dn_grouped")) {
                    timings.add(Map.of("config", c, "point", key, "us", (c.endsWith("grouped") ? 10.0 : 11.0) + m / 64.0));
                }
            }
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", PoolDirectory.PROFILE_FORMAT);
        doc.put("model", "made_up");
        doc.put("sm_count", 132);
        doc.put("pool_sha256", PoolDirectory.sha256(pool));
        doc.put("points", points);
        doc.put("timings", timings);
        new ObjectMapper().writeValue(dir.resolve(PoolDirectory.PROFILE_FILE).toFile(), doc);
        CliRun run = CliRun.of("regions", "--shape", "256,128,16,4", "--batches", "8", "--profile", dir.toString());
        assertEquals(0, run.exitCode(), run.err() + run.out());
        assertTrue(run.out().contains("GROUP_M: 2 pairs of configs that differ only in group_m, 12 timings"), run.out());
        assertTrue(run.out().contains("GROUP_M pays; predicted does not matter: did not hold"), run.out());
        assertTrue(run.out().contains("split-K: no pool schedule splits K: not testable"), run.out());
    }
}
