package dev.moeforge.runtime.dispatch;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.text.SpecParser;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * A tuned pool's directory as {@code moeforge pool} and {@code moeforge profile} write it: the kernels in
 * the textual form ({@link #KERNELS_FILE}) and their profile ({@link #PROFILE_FILE}, or the same gzipped),
 * read back as a {@link PoolFit} with the kernels by name.
 */
public final class PoolDirectory {
    /** The pool's kernels, in the textual form. */
    public static final String KERNELS_FILE = "pool.moe";
    /** The profile of them; a profile of another format is neither read nor resumed. */
    public static final String PROFILE_FILE = "profile.json";
    public static final String PROFILE_FORMAT = "moeforge-profile/1";

    /** The pool's fit data, the profile as read, and the pool's kernels by name (in the file's order). */
    public record Loaded(PoolFit fit, JsonNode profile, Map<String, KernelSpec> kernels) {}

    private PoolDirectory() {}

    /** Hex SHA-256 of the kernels' text: a profile names the pool it timed by it. */
    public static String sha256(String text) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The pool's configs (from {@link #KERNELS_FILE}) and the profile's points and timings. A profile of
     * another pool or format, or one without its held-out points yet, is refused by name.
     */
    public static Loaded load(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            throw new IllegalArgumentException(dir + " is not a directory: a tuned pool's directory is what `moeforge pool --out DIR` "
                    + "writes and `moeforge profile DIR` profiles");
        }
        Path profileFile = dir.resolve(PROFILE_FILE);
        Path gzipped = dir.resolve(PROFILE_FILE + ".gz");  // a profile kept compressed (JSON packs about tenfold)
        JsonNode profile;
        if (Files.isRegularFile(profileFile)) {
            profile = new ObjectMapper().readTree(profileFile.toFile());
        } else if (Files.isRegularFile(gzipped)) {
            try (InputStream in = new GZIPInputStream(Files.newInputStream(gzipped))) {
                profile = new ObjectMapper().readTree(in);
            }
            profileFile = gzipped;
        } else {
            throw new IllegalArgumentException(profileFile + " does not exist (nor " + gzipped.getFileName()
                    + "): run `moeforge profile " + dir + "` on a GPU first");
        }
        if (!PROFILE_FORMAT.equals(profile.path("format").asText())) {
            throw new IllegalArgumentException(profileFile + " is not a profile of this version (format " + profile.path("format").asText()
                    + ", expected " + PROFILE_FORMAT + ")");
        }
        String kernelsText = Files.readString(dir.resolve(KERNELS_FILE));
        if (!sha256(kernelsText).equals(profile.path("pool_sha256").asText())) {
            throw new IllegalArgumentException(profileFile + " is a profile of another pool than " + dir.resolve(KERNELS_FILE)
                    + " (its pool_sha256 differs): profile this pool again");
        }
        List<PoolFit.Config> configs = new ArrayList<>();
        Map<String, KernelSpec> kernels = new LinkedHashMap<>();
        for (KernelSpec spec : SpecParser.parseAll(kernelsText, KERNELS_FILE)) {
            if (!(spec.problem() instanceof Problem.ExpertProblem p)) {
                throw new IllegalArgumentException(spec.name() + " in " + KERNELS_FILE + " is not a gate_up or down kernel");
            }
            @SuppressWarnings("unchecked")
            Schedule<Problem.ExpertProblem> s = (Schedule<Problem.ExpertProblem>) spec.schedule();
            configs.add(new PoolFit.Config(spec.name(), p instanceof Problem.ExpertGateUp ? PoolFit.Half.GATE_UP : PoolFit.Half.DOWN, p, s));
            kernels.put(spec.name(), spec);
        }
        List<PoolFit.Point> points = new ArrayList<>();
        for (JsonNode p : profile.get("points")) {
            int[] load = new int[p.get("expert_load").size()];
            for (int i = 0; i < load.length; i++) {
                load[i] = p.get("expert_load").get(i).asInt();
            }
            points.add(new PoolFit.Point(p.get("key").asText(), p.get("batch").asInt(), p.get("balancedness").asDouble(),
                    p.get("held_out").asBoolean(), load));
        }
        List<PoolFit.Measured> measured = new ArrayList<>();
        for (JsonNode t : profile.get("timings")) {
            measured.add(new PoolFit.Measured(t.get("config").asText(), t.get("point").asText(), t.get("us").asDouble()));
        }
        if (points.stream().noneMatch(PoolFit.Point::heldOut)) {
            throw new IllegalArgumentException(profileFile + " has no held-out points yet (the profile stopped before them?): "
                    + "run `moeforge profile " + dir + "` again to finish it");
        }
        return new Loaded(new PoolFit(configs, points, measured, profile.get("sm_count").asInt()), profile, kernels);
    }
}
