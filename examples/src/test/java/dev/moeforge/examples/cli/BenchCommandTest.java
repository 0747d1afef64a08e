package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Every bench command refuses a bad option on any machine: its options are checked before the GPU is looked for. */
class BenchCommandTest {

    private static void refused(String expected, String... args) {
        CliRun run = CliRun.of(args);
        assertEquals(1, run.exitCode(), run.out() + run.err());
        assertTrue(run.err().contains(expected), String.join(" ", args) + ": " + run.err());
    }

    @Test
    void badOptionsAreNamedBeforeTheGpuIsLookedFor() {
        refused("moeforge bench: --tokens [0]: each token count at least 1, got 0", "bench", "--tokens", "0");
        refused("moeforge bench: --layers 0: at least 1", "bench", "--layers", "0");
        refused("moeforge bench: --read-gib 0: at least 1", "bench", "--read-gib", "0");
        refused("moeforge bench: --reps 10: at least 50 timed repetitions", "bench", "--reps", "10");
        refused("moeforge bench layer: --tokens [1, -2]: each token count at least 1, got -2", "bench", "layer", "--tokens", "1,-2");
        refused("moeforge bench layer: --layers 0: at least 1", "bench", "layer", "--layers", "0");
        refused("moeforge bench formats: --formats: unknown format 'bogus'", "bench", "formats", "--formats", "bogus");
        refused("moeforge bench formats: --tokens [0]: each token count at least 1", "bench", "formats", "--tokens", "0");
        refused("moeforge bench formats: --warmup -1: at least 0", "bench", "formats", "--warmup", "-1");
        refused("moeforge bench router: --shapes: unknown shape 'nope'", "bench", "router", "--shapes", "nope");
        refused("moeforge bench router: --reps 3: at least 50 timed repetitions", "bench", "router", "--reps", "3");
        refused("moeforge bench prefill: --tokens [0]: each token count at least 1", "bench", "prefill", "--tokens", "0");
        refused("moeforge bench prefill: --reps 20: at least 50 timed repetitions", "bench", "prefill", "--reps", "20");
        refused("moeforge bench prefill: --shape [2048, 768]: four numbers, H,I,E,k", "bench", "prefill", "--shape", "2048,768");
        refused("moeforge bench prefill: unknown model 'nope'", "bench", "prefill", "--model", "nope");
        refused("moeforge bench prefill: --format fp4: one of bf16, fp8_e4m3_block128, nvfp4, mxfp4", "bench", "prefill", "--format", "fp4");
        refused("moeforge bench prefill: --balancedness 1.5: in [0, 1]", "bench", "prefill", "--balancedness", "1.5");
        refused("moeforge bench prefill: --balancedness NaN: in [0, 1]", "bench", "prefill", "--balancedness", "NaN");
        refused("moeforge bench prefill: --variants: unknown variant 'wg_m256'", "bench", "prefill", "--variants", "wg_m256");
        refused("moeforge bench decode: --projections gemm: one of [by-batch, gemv, mma, tiles]", "bench", "decode", "--projections", "gemm");
        refused("moeforge bench decode: --attention group: one of [by-batch, by-head, by-group]", "bench", "decode", "--attention", "group");
        refused("moeforge bench decode: --top-p must be in (0, 1], got 1.5", "bench", "decode", "--top-p", "1.5");
        refused("moeforge bench decode: --experts tiles: one of [by-batch, output-centric, expert-centric]", "bench", "decode", "--experts", "tiles");
        refused("moeforge bench decode: --top-k must be >= 0 (0 = all tokens), got -3", "bench", "decode", "--top-k", "-3");
    }
}
