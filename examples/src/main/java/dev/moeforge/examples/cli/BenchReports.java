package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.cuda.CudaContext;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/** What every benchmark JSON carries (date, commit, device, clocks, nvcc) and where it is written. */
final class BenchReports {
    private BenchReports() {}

    /** The head of a result document: benchmark name, date, commit, device and toolchain. */
    static Map<String, Object> header(String benchmark, CudaContext ctx) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("benchmark", benchmark);
        doc.put("date", ZonedDateTime.now(ZoneOffset.UTC).toString());
        doc.put("commit", commit());
        Map<String, Object> device = new LinkedHashMap<>();
        device.put("name", ctx.deviceName());
        device.put("compute_capability", ctx.computeCapability());
        device.put("sm_count", ctx.smCount());
        device.put("l2_bytes", ctx.l2Bytes());
        device.put("memory_bytes", ctx.totalMemory());
        device.put("sm_clock_khz", ctx.clockKhz());
        device.put("memory_clock_khz", ctx.memoryClockKhz());
        device.put("driver", ctx.driverVersion());
        doc.put("device", device);
        doc.put("nvcc", new NvccCompiler().version());
        return doc;
    }

    /** Writes {@code <out>/<date>-<device>-<suffix>.json}. */
    static Path write(Path out, CudaContext ctx, String suffix, Map<String, Object> doc) throws IOException {
        Files.createDirectories(out);
        String slug = ctx.deviceName().toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9]+", "-").replaceAll("(^-|-$)", "");
        Path file = out.resolve(LocalDate.now(ZoneOffset.UTC) + "-" + slug + "-" + suffix + ".json");
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(file.toFile(), doc);
        return file;
    }

    static Map<String, Object> timing(GpuTimer.Timing t) {
        return Map.of("median", t.medianMicros(), "p10", t.p10Micros(), "p90", t.p90Micros());
    }

    /** The commit measured: MOEFORGE_COMMIT (set by the bundle), else unknown. */
    static String commit() {
        String c = System.getenv("MOEFORGE_COMMIT");
        return c != null && !c.isBlank() ? c.trim() : "unknown";
    }
}
