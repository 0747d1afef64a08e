package dev.moeforge.runtime.dispatch;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecPrinter;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A tuned pool's directory as {@code pool} and {@code profile} leave it, with timings made up: each
 * kernel's time at a point is what its made-up cost model predicts there, so a test knows which
 * pair the fitted models key to a token count. For tests of what reads such a directory.
 */
public final class TunedPoolFixture {
    /** Token counts the made-up profile times, and those it holds out. */
    private static final int[] PROFILED = {1, 4, 40, 300};
    private static final int[] HELD_OUT = {16, 100};
    private static final double[] BALANCEDNESS = {1.0, 0.7};
    /** The device a made-up profile names unless told another. */
    public static final String DEVICE = "Made-up GPU";

    private TunedPoolFixture() {}

    /** Writes pool.moe (the kernels of {@code truth}, in its order) and a profile of {@code truth}'s predictions into {@code dir}. */
    public static void write(Path dir, Map<KernelSpec, WaveCostModel> truth, int sms) throws IOException {
        write(dir, truth, sms, PROFILED, HELD_OUT);
    }

    /** As above, the profile timing the batches {@code profiled} and holding out {@code heldOut}. */
    public static void write(Path dir, Map<KernelSpec, WaveCostModel> truth, int sms, int[] profiled, int[] heldOut)
            throws IOException {
        write(dir, truth, sms, profiled, heldOut, DEVICE);
    }

    /** As above, the profile naming {@code device} as the GPU it timed; null leaves the device out (a broken profile, for tests). */
    public static void write(Path dir, Map<KernelSpec, WaveCostModel> truth, int sms, String device) throws IOException {
        write(dir, truth, sms, PROFILED, HELD_OUT, device);
    }

    private static void write(Path dir, Map<KernelSpec, WaveCostModel> truth, int sms, int[] profiled, int[] heldOut, String device)
            throws IOException {
        List<KernelSpec> kernels = new ArrayList<>(truth.keySet());
        ExpertShape shape = ((Problem.ExpertProblem) kernels.getFirst().problem()).shape();
        String text = SpecPrinter.printAll(kernels);
        Files.writeString(dir.resolve(PoolDirectory.KERNELS_FILE), text);
        List<Map<String, Object>> points = new ArrayList<>();
        List<Map<String, Object>> timings = new ArrayList<>();
        for (boolean held : new boolean[] {false, true}) {
            for (int m : held ? heldOut : profiled) {
                for (double beta : BALANCEDNESS) {
                    RandomInputs.BalancednessRange range = RandomInputs.reachableBalancedness(m, m, shape.experts(), shape.topk());
                    Routing r = RandomInputs.skewedRouting(m, m, shape.experts(), shape.topk(), range.clamp(beta));
                    int[] load = r.expertLoad(shape.experts());
                    String key = m + "@" + beta + (held ? "/held-out" : "");
                    points.add(Map.of("key", key, "batch", m, "balancedness", r.balancedness(shape.experts()), "held_out", held,
                            "expert_load", load));
                    truth.forEach((k, model) -> {
                        @SuppressWarnings("unchecked")
                        Schedule<Problem.ExpertProblem> schedule = (Schedule<Problem.ExpertProblem>) k.schedule();
                        Problem.ExpertProblem p = (Problem.ExpertProblem) k.problem();
                        if (m <= schedule.maxTokens(p)) {
                            timings.add(Map.of("config", k.name(), "point", key, "us",
                                    model.predict(schedule.workBlocks(p, m, load), (long) m * shape.topk(), sms)));
                        }
                    });
                }
            }
        }
        Map<String, Object> profile = new LinkedHashMap<>();
        profile.put("format", PoolDirectory.PROFILE_FORMAT);
        profile.put("model", "made_up");
        if (device != null) {
            profile.put("device", Map.of("name", device));
        }
        profile.put("sm_count", sms);
        profile.put("pool_sha256", PoolDirectory.sha256(text));
        profile.put("points", points);
        profile.put("timings", timings);
        new ObjectMapper().writeValue(dir.resolve(PoolDirectory.PROFILE_FILE).toFile(), profile);
    }
}
