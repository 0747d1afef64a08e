package dev.moeforge.runtime.compile;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Per-function resource usage reported by {@code ptxas -v}: registers, spills, stack, shared and
 * constant memory. Parsed from nvcc's output, e.g. (CUDA 13.0, sm_90a):
 *
 * <pre>
 * ptxas info    : Compiling entry function 'spiller' for 'sm_90a'
 * ptxas info    : Function properties for spiller
 *     736 bytes stack frame, 1020 bytes spill stores, 1284 bytes spill loads
 * ptxas info    : Used 24 registers, used 0 barriers, 736 bytes cumulative stack size
 * </pre>
 *
 * Older toolkits print {@code Used 8 registers, 360 bytes cmem[0]} instead (CUDA 13 dropped cmem and
 * prints {@code smem} only when non-zero), so every field after the register count is optional.
 * Non-entry device functions that are not inlined get only a "Function properties" block; they are
 * listed too, with 0 registers, because their spills count as much as a kernel's.
 */
public final class PtxasReport {

    /**
     * Resources of one function. Byte counts are per thread except {@code sharedBytes} (static shared
     * memory per block) and {@code constantBytes} (all constant banks together).
     */
    public record FunctionResources(String name, int registers, long spillStoreBytes, long spillLoadBytes,
                                    long stackFrameBytes, long sharedBytes, long constantBytes) {

        /** Whether ptxas had to spill registers to local memory in this function. */
        public boolean spills() {
            return spillStoreBytes > 0 || spillLoadBytes > 0;
        }
    }

    private static final ObjectMapper JSON = new ObjectMapper();

    private static final Pattern ENTRY = Pattern.compile("Compiling entry function '([^']+)'");
    private static final Pattern PROPERTIES = Pattern.compile("Function properties for '?([^'\\s]+)'?\\s*$");
    private static final Pattern FRAME = Pattern.compile(
            "(\\d+) bytes stack frame, (\\d+) bytes spill stores, (\\d+) bytes spill loads");
    private static final Pattern USED = Pattern.compile("ptxas info\\s*: Used (\\d+) registers(.*)$");
    private static final Pattern SMEM = Pattern.compile("(\\d+) bytes smem");
    private static final Pattern CMEM = Pattern.compile("(\\d+) bytes cmem\\[\\d+\\]");

    private final Map<String, FunctionResources> functions;

    private PtxasReport(Map<String, FunctionResources> functions) {
        this.functions = Collections.unmodifiableMap(functions);
    }

    /** Parses nvcc's combined output; lines that are not ptxas resource lines are ignored. */
    public static PtxasReport parse(String log) {
        Map<String, Builder> byName = new LinkedHashMap<>();
        Builder current = null;
        for (String line : log.split("\\R")) {
            Matcher m;
            if ((m = ENTRY.matcher(line)).find() || (m = PROPERTIES.matcher(line)).find()) {
                current = byName.computeIfAbsent(m.group(1), Builder::new);
            } else if (current != null && (m = FRAME.matcher(line)).find()) {
                current.stackFrame = Long.parseLong(m.group(1));
                current.spillStores = Long.parseLong(m.group(2));
                current.spillLoads = Long.parseLong(m.group(3));
            } else if (current != null && (m = USED.matcher(line)).find()) {
                current.registers = Integer.parseInt(m.group(1));
                String rest = m.group(2);
                Matcher smem = SMEM.matcher(rest);
                current.shared = smem.find() ? Long.parseLong(smem.group(1)) : 0;
                long cmem = 0;
                for (Matcher c = CMEM.matcher(rest); c.find(); ) {
                    cmem += Long.parseLong(c.group(1));
                }
                current.constant = cmem;
            }
        }
        Map<String, FunctionResources> functions = new LinkedHashMap<>();
        byName.forEach((name, b) -> functions.put(name, b.build()));
        return new PtxasReport(functions);
    }

    /** The named function (mangled name for C++ symbols); throws if ptxas did not report it. */
    public FunctionResources function(String name) {
        FunctionResources f = functions.get(name);
        if (f == null) {
            throw new NoSuchElementException("ptxas reported no function '" + name + "'; it reported " + functions.keySet());
        }
        return f;
    }

    /** All reported functions in the order ptxas printed them. */
    public Collection<FunctionResources> functions() {
        return functions.values();
    }

    /** Whether any function spilled registers. */
    public boolean anySpills() {
        return functions.values().stream().anyMatch(FunctionResources::spills);
    }

    /** JSON form, {@code {"functions":[{...},...]}}, as stored in the kernel cache. */
    public String toJson() {
        try {
            return JSON.writerWithDefaultPrettyPrinter().writeValueAsString(new Json(List.copyOf(functions.values())));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("cannot serialize ptxas report", e);
        }
    }

    /** Reads the form written by {@link #toJson()}. */
    public static PtxasReport fromJson(String json) throws JsonProcessingException {
        Json parsed = JSON.readValue(json, Json.class);
        if (parsed.functions() == null) {
            throw new IllegalArgumentException("ptxas report JSON has no \"functions\" array");
        }
        Map<String, FunctionResources> functions = new LinkedHashMap<>();
        for (FunctionResources f : parsed.functions()) {
            functions.put(f.name(), f);
        }
        return new PtxasReport(functions);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof PtxasReport other && functions.equals(other.functions);
    }

    @Override
    public int hashCode() {
        return functions.hashCode();
    }

    @Override
    public String toString() {
        return "PtxasReport" + new ArrayList<>(functions.values());
    }

    private record Json(List<FunctionResources> functions) {
    }

    private static final class Builder {
        final String name;
        int registers;
        long spillStores;
        long spillLoads;
        long stackFrame;
        long shared;
        long constant;

        Builder(String name) {
            this.name = name;
        }

        FunctionResources build() {
            return new FunctionResources(name, registers, spillStores, spillLoads, stackFrame, shared, constant);
        }
    }
}
