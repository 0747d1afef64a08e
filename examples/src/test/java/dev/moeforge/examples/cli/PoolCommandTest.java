package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The pool command's listing and its refusals (compiling a whole pool takes minutes: `moeforge pool` without --dry-run). */
class PoolCommandTest {
    @TempDir
    Path tmp;

    @Test
    void dryRunListsBothFamiliesOfBothHalvesAndWritesNothing() {
        Path out = tmp.resolve("pool");
        CliRun run = CliRun.of("pool", "--model", "qwen3-30b-a3b", "--out", out.toString(), "--dry-run");
        assertEquals(0, run.exitCode(), run.err());
        assertTrue(run.out().contains("243 configs {gate_up output_centric=28, gate_up expert_centric=73, down output_centric=28, "
                + "down expert_centric=114}"), run.out());
        assertTrue(run.out().contains("\n  down  expert_centric_bm128_bn256_bk64_wm8_wn2_s4_gm8_w1_ac0_t1_p0_ck0_sa0\n"), run.out());
        assertTrue(run.out().contains("\n  down  expert_centric_bm128_bn256_bk64_wm8_wn1_s4_gm8_w1_ac0_t1_p1_ck0_sa0\n"), run.out());
        assertEquals(244, run.out().lines().count(), "a header and one line per config");
        assertFalse(Files.exists(out), "a dry run writes nothing");
    }

    @Test
    void aShapeOffTheModelsAndATargetWithoutWgmma() {
        CliRun run = CliRun.of("pool", "--shape", "1024,512,40,6", "--target", "sm_100a", "--out", tmp.toString(), "--dry-run");
        assertEquals(0, run.exitCode(), run.err());
        assertTrue(run.out().startsWith("pool for shape_1024x512_e40_k6 (H=1024, I=512, E=40, top-6, bf16, sm_100a)"), run.out());
        assertTrue(run.out().contains("expert_centric_"), run.out());
        assertFalse(run.out().contains("_w1_"), "wgmma is sm_90a's: " + run.out());
    }

    @Test
    void badOptionsAreRefusedWithWhatIsAllowed() {
        CliRun unknown = CliRun.of("pool", "--model", "nope", "--out", tmp.toString());
        assertEquals(1, unknown.exitCode());
        assertTrue(unknown.err().contains("unknown model 'nope'; known: qwen3-30b-a3b,"), unknown.err());
        CliRun shape = CliRun.of("pool", "--shape", "256,128", "--out", tmp.toString());
        assertTrue(shape.err().contains("--shape [256, 128]: four numbers, H,I,E,k"), shape.err());
        CliRun format = CliRun.of("pool", "--model", "gpt-oss-20b", "--format", "fp4", "--out", tmp.toString());
        assertTrue(format.err().contains("unknown format 'fp4'; known: bf16,"), format.err());
        CliRun both = CliRun.of("pool", "--model", "gpt-oss-20b", "--shape", "1,2,3,4", "--out", tmp.toString());
        assertEquals(2, both.exitCode(), "picocli refuses --model with --shape: " + both.err());
        CliRun neither = CliRun.of("pool", "--out", tmp.toString());
        assertEquals(2, neither.exitCode(), neither.err());
    }
}
