package dev.moeforge.dsl.ir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.schedule.OutputCentric;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The derived sizes of an output-centric kernel. The shared-memory size is stated twice, here in
 * Java (validation and the launcher) and in the CUDA TileRouting struct the kernel carves its
 * shared memory with; the tests compute it by hand and from the CUDA source, so the two cannot
 * drift apart unnoticed.
 */
class OutputCentricLayoutTest {
    /** The device header, read from the codegen module's sources (tests run in the dsl module directory). */
    private static final Path DEVICE_HEADER = Path.of(System.getProperty("user.dir")).resolveSibling("codegen")
            .resolve("src/main/resources/dev/moeforge/codegen/cuda/moeforge_device.cuh");

    private static Problem.ExpertProblem gateUp(int hidden, int intermediate, int experts, int topk) {
        return new Problem.ExpertGateUp(new ExpertShape(hidden, intermediate, experts, topk), WeightFormat.BF16,
                DType.BF16, GateUpLayout.STACKED);
    }

    private static Problem.ExpertProblem down(int hidden, int intermediate, int experts, int topk) {
        return new Problem.ExpertDown(new ExpertShape(hidden, intermediate, experts, topk), WeightFormat.BF16, DType.BF16);
    }

    private static OutputCentric schedule(int warps, int loadBytes, int unroll, int tokens) {
        return new OutputCentric(warps, loadBytes, unroll, tokens, 1, 0);
    }

    /** Qwen3-30B-A3B gate_up: 2048 / 8 elements per 16-byte load = 256 loads = one pass of 32 lanes x 8 loads. */
    @Test
    void qwen3GateUpRowIsOnePass() {
        OutputCentric.Layout l = OutputCentric.Layout.of(gateUp(2048, 768, 128, 8), schedule(4, 16, 8, 1));
        assertEquals(2048, l.reduceLength());
        assertEquals(8, l.elementsPerLoad());
        assertEquals(256, l.chunksPerRow());
        assertEquals(1, l.blocksPerRow());
        assertEquals(8, l.maxDistinctExperts(), "min(T*k, E) = min(1*8, 128)");
        assertEquals(0, l.sharedBytes(), "one token per CTA needs no routing table");
    }

    /** gpt-oss width 2880: 2880 / 8 = 360 loads; a pass is 32 lanes x U loads. */
    @ParameterizedTest(name = "U={0}: {1} passes")
    @CsvSource({
        "1, 12",   // ceil(360 / 32)  = 12
        "4, 3",    // ceil(360 / 128) = 3
        "8, 2",    // ceil(360 / 256) = 2
        "12, 1",   // 360 / 384 -> 1
        "16, 1",   // 360 / 512 -> 1
    })
    void gptOssRowPasses(int unroll, int passes) {
        OutputCentric.Layout l = OutputCentric.Layout.of(gateUp(2880, 2880, 32, 4), schedule(4, 16, unroll, 1));
        assertEquals(360, l.chunksPerRow());
        assertEquals(passes, l.blocksPerRow());
        assertEquals(0, l.sharedBytes());
    }

    @Test
    void downReducesOverTheIntermediateSize() {
        OutputCentric.Layout l = OutputCentric.Layout.of(down(2048, 768, 128, 8), schedule(4, 16, 8, 1));
        assertEquals(768, l.reduceLength());
        assertEquals(96, l.chunksPerRow(), "768 / 8");
        assertEquals(1, l.blocksPerRow(), "ceil(96 / 256)");
        // 4-byte loads: 2 elements each, 384 loads, 2 passes of 256
        OutputCentric.Layout narrow = OutputCentric.Layout.of(down(2048, 768, 128, 8), schedule(4, 4, 8, 1));
        assertEquals(2, narrow.elementsPerLoad());
        assertEquals(384, narrow.chunksPerRow());
        assertEquals(2, narrow.blocksPerRow());
    }

    @Test
    void singleTokenCtasNeedNoSharedMemory() {
        for (int warps : new int[] {1, 4, 32}) {
            assertEquals(0, OutputCentric.Layout.of(gateUp(2880, 2880, 32, 4), schedule(warps, 16, 4, 1)).sharedBytes());
            assertEquals(0, OutputCentric.Layout.of(down(2048, 768, 1024, 32), schedule(warps, 16, 8, 1)).sharedBytes());
        }
    }

    /**
     * Down, T=32 tokens per CTA, E=128, k=8, W=4, by hand:
     * bitmap words = ceil(128 / 32) = 4; header = align16(8*4 + 4 = 36) = 48;
     * distinct experts = min(32*8, 128) = 128; ranks = align16(8*128) = 1024;
     * slots = align16(128*32) = 4096; routing table = 48 + 1024 + 4096 = 5168;
     * accumulators = W*T*32 lanes * 4 bytes = 4*32*32*4 = 16384; total 21552.
     */
    @Test
    void tiledDownSharedBytesByHand() {
        OutputCentric.Layout l = OutputCentric.Layout.of(down(2048, 768, 128, 8), schedule(4, 16, 8, 32));
        assertEquals(128, l.maxDistinctExperts());
        assertEquals(48 + 1024 + 4096 + 4 * 32 * 32 * 4, l.sharedBytes());
        assertEquals(21_552, l.sharedBytes());
    }

    /**
     * gate_up with the same tile: the per-lane partial sums exist only when a row takes several
     * passes. H=2048 at U=8 is one pass: just the routing table, 5168 bytes. H=2880 at U=8 is two:
     * plus W*T*2 (gate, up)*32 lanes*4 bytes = 4*32*2*32*4 = 32768.
     */
    @Test
    void tiledGateUpSharedBytesByHand() {
        assertEquals(5_168, OutputCentric.Layout.of(gateUp(2048, 768, 128, 8), schedule(4, 16, 8, 32)).sharedBytes());
        OutputCentric.Layout twoPasses = OutputCentric.Layout.of(gateUp(2880, 768, 128, 8), schedule(4, 16, 8, 32));
        assertEquals(2, twoPasses.blocksPerRow());
        assertEquals(5_168 + 32_768, twoPasses.sharedBytes());
    }

    /**
     * Sizes that are not multiples of 16: E=100, k=3, T=5, W=2. words = 4, header = align16(36) = 48;
     * distinct = min(15, 100) = 15; ranks = align16(120) = 128; slots = align16(75) = 80;
     * table 256; down accumulators 2*5*32*4 = 1280.
     */
    @Test
    void tiledSharedBytesAlignEachRegionTo16Bytes() {
        OutputCentric.Layout l = OutputCentric.Layout.of(down(64, 64, 100, 3), schedule(2, 16, 8, 5));
        assertEquals(15, l.maxDistinctExperts());
        assertEquals(48 + 128 + 80 + 1280, l.sharedBytes());
    }

    /** The Java layout and the CUDA TileRouting struct (plus the kernels' accumulator arrays) agree. */
    @ParameterizedTest(name = "{0} H={1} I={2} E={3} k={4} W={5} LB={6} U={7} T={8}")
    @CsvSource({
        "down,    2048, 768,  128,  8, 4, 16, 8, 32",
        "down,    2048, 768,  128,  8, 4, 16, 8,  2",
        "down,      64,  64,  100,  3, 2, 16, 8,  5",
        "down,    4096, 1536, 1024, 32, 8, 16, 8, 32",
        "down,    2880, 2880,  32,  4, 1,  4, 1,  7",
        "gate_up, 2048, 768,  128,  8, 4, 16, 8, 32",
        "gate_up, 2880, 2880,  32,  4, 4, 16, 8, 16",
        "gate_up, 2880, 2880,  32,  4, 4, 16, 4,  3",
        "gate_up,   64,  64,  100,  3, 2,  8, 1,  5",
        "gate_up, 7168, 2048, 256,  8, 2, 16, 8, 32",
    })
    void javaLayoutMatchesTheCudaTileRouting(String kind, int h, int i, int e, int k, int w, int lb, int u, int t)
            throws IOException {
        Problem.ExpertProblem p = kind.equals("down") ? down(h, i, e, k) : gateUp(h, i, e, k);
        OutputCentric.Layout layout = OutputCentric.Layout.of(p, schedule(w, lb, u, t));
        CudaLayout cuda = CudaLayout.read();
        Map<String, Long> routing = cuda.tileRouting(t, k, e);
        assertEquals(routing.get("kMaxDistinct").longValue(), layout.maxDistinctExperts(), "kMaxDistinct");
        long accumulatorFloatsPerWarp = kind.equals("down")
                ? cuda.downAccumulatorFloatsPerWarp(t)
                : layout.blocksPerRow() > 1 ? cuda.gateUpPartialFloatsPerWarp(t) : 0;
        long cudaBytes = routing.get("kBytes") + (long) w * accumulatorFloatsPerWarp * Float.BYTES;
        assertEquals(cudaBytes, layout.sharedBytes(), () -> "CUDA " + routing + " + " + w + " warps x "
                + accumulatorFloatsPerWarp + " floats");
    }

    /** The CUDA sizes of the by-hand case, read from the header: 48 + 1024 + 4096, then 4 warps x 32 tokens x 32 lanes. */
    @Test
    void cudaTileRoutingOfTheByHandCase() throws IOException {
        CudaLayout cuda = CudaLayout.read();
        Map<String, Long> routing = cuda.tileRouting(32, 8, 128);
        assertEquals(4, routing.get("kWords"));
        assertEquals(128, routing.get("kMaxDistinct"));
        assertEquals(48, routing.get("kHeaderBytes"));
        assertEquals(1024, routing.get("kRankBytes"));
        assertEquals(4096, routing.get("kSlotBytes"));
        assertEquals(5168, routing.get("kBytes"));
        assertEquals(32 * 32, cuda.downAccumulatorFloatsPerWarp(32));
        assertEquals(32 * 64, cuda.gateUpPartialFloatsPerWarp(32));
    }

    @Test
    void validatedSpecsUseTheSameLayout() {
        KernelSpec spec = KernelBuilder.named("d").expertDown(new ExpertShape(2048, 768, 128, 8))
                .schedule(OutputCentricBuilder.create().tokensPerCta(32).build()).build();
        assertEquals(21_552, OutputCentric.Layout.of((Problem.ExpertProblem) spec.problem(), (OutputCentric) spec.schedule()).sharedBytes());
    }

    /**
     * Reads the TileRouting constants and the accumulator strides from moeforge_device.cuh and
     * evaluates them: integer arithmetic with + - * / and the header's ceil_div, align16, min_int.
     */
    private record CudaLayout(String source) {
        private static final Pattern STRUCT = Pattern.compile("struct TileRouting \\{(.*?)\\n\\};", Pattern.DOTALL);
        private static final Pattern CONSTANT = Pattern.compile("static constexpr int (\\w+) = ([^;]+);");
        private static final Pattern DOWN_ACC = Pattern.compile(
                "float\\* acc = reinterpret_cast<float\\*>\\(smem \\+ Routing::kBytes\\) \\+ warp \\* ([^;]+);");
        private static final Pattern GATE_UP_PARTIAL = Pattern.compile(
                "float\\* partial = reinterpret_cast<float\\*>\\(smem \\+ Routing::kBytes\\) \\+ warp \\* ([^;]+);");

        static CudaLayout read() throws IOException {
            assertTrue(Files.isRegularFile(DEVICE_HEADER), "device header not found at " + DEVICE_HEADER);
            String source = Files.readString(DEVICE_HEADER);
            // the helpers the constants use, as this evaluator implements them
            for (String helper : List.of(
                    "constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }",
                    "constexpr int align16(int bytes) { return (bytes + 15) & ~15; }",
                    "constexpr int min_int(int a, int b) { return a < b ? a : b; }")) {
                assertTrue(source.contains(helper), "the device header no longer defines: " + helper);
            }
            return new CudaLayout(source);
        }

        /** Every {@code static constexpr int} of TileRouting<T, K, E>, in declaration order. */
        Map<String, Long> tileRouting(int t, int k, int e) {
            Matcher struct = STRUCT.matcher(source);
            assertTrue(struct.find(), "no struct TileRouting in the device header");
            Map<String, Long> env = new HashMap<>(Map.of("T", (long) t, "K", (long) k, "E", (long) e));
            Map<String, Long> constants = new LinkedHashMap<>();
            Matcher c = CONSTANT.matcher(struct.group(1));
            while (c.find()) {
                long v = new Expr(c.group(2), env).evaluate();
                env.put(c.group(1), v);
                constants.put(c.group(1), v);
            }
            for (String name : List.of("kWords", "kMaxDistinct", "kHeaderBytes", "kRankBytes", "kSlotBytes", "kBytes")) {
                assertTrue(constants.containsKey(name), "TileRouting has no " + name + ": " + constants.keySet());
            }
            return constants;
        }

        long downAccumulatorFloatsPerWarp(int t) {
            return stride(DOWN_ACC, "down_token_tile's acc", t);
        }

        long gateUpPartialFloatsPerWarp(int t) {
            return stride(GATE_UP_PARTIAL, "gate_up_token_tile's partial", t);
        }

        private long stride(Pattern p, String what, int t) {
            Matcher m = p.matcher(source);
            assertTrue(m.find(), "cannot find " + what + " in the device header");
            return new Expr(m.group(1), Map.of("T", (long) t)).evaluate();
        }
    }

    /** A recursive-descent evaluator for the integer constant expressions of the device header. */
    private static final class Expr {
        private final List<String> tokens;
        private final Map<String, Long> env;
        private int pos;

        Expr(String text, Map<String, Long> env) {
            this.tokens = Pattern.compile("\\w+|[-+*/(),]").matcher(text).results().map(r -> r.group()).toList();
            this.env = env;
            String rest = text.replaceAll("\\w+|[-+*/(),]|\\s", "");
            assertTrue(rest.isEmpty(), "unsupported characters '" + rest + "' in " + text);
        }

        long evaluate() {
            long v = sum();
            assertEquals(tokens.size(), pos, "trailing tokens in " + tokens);
            return v;
        }

        private long sum() {
            long v = product();
            while (pos < tokens.size() && (peek().equals("+") || peek().equals("-"))) {
                v = next().equals("+") ? v + product() : v - product();
            }
            return v;
        }

        private long product() {
            long v = atom();
            while (pos < tokens.size() && (peek().equals("*") || peek().equals("/"))) {
                v = next().equals("*") ? v * atom() : v / atom();
            }
            return v;
        }

        private long atom() {
            String token = next();
            if (token.equals("(")) {
                long v = sum();
                expect(")");
                return v;
            }
            if (Character.isDigit(token.charAt(0))) {
                return Long.parseLong(token);
            }
            if (pos < tokens.size() && peek().equals("(")) {
                next();
                long a = sum();
                long b = 0;
                if (peek().equals(",")) {
                    next();
                    b = sum();
                }
                expect(")");
                return switch (token) {
                    case "ceil_div" -> (a + b - 1) / b;
                    case "align16" -> (a + 15) & ~15L;
                    case "min_int" -> Math.min(a, b);
                    default -> throw new AssertionError("unknown function " + token + " in " + tokens);
                };
            }
            Long v = env.get(token);
            if (v == null) {
                throw new AssertionError("unknown name " + token + " in " + tokens);
            }
            return v;
        }

        private String peek() {
            return tokens.get(pos);
        }

        private String next() {
            if (pos >= tokens.size()) {
                throw new AssertionError("unexpected end of " + tokens);
            }
            return tokens.get(pos++);
        }

        private void expect(String token) {
            assertEquals(token, next(), "in " + tokens);
        }
    }
}
