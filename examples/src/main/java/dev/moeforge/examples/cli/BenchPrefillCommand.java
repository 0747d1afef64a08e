package dev.moeforge.examples.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.check.SpecException;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.examples.bench.BenchKernels;
import dev.moeforge.examples.bench.ExpertLayerBenchmark;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.examples.bench.HostLayer;
import dev.moeforge.runtime.cache.KernelCache;
import dev.moeforge.runtime.cuda.CudaContext;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.ExpertLayer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code moeforge bench prefill}: the BF16 expert layer of the Qwen3-30B-A3B geometry from large
 * decode batches to prefill, with the expert-centric family's tile pairs (and the catalogue's
 * output-centric pairs where the batch is small enough for them), weights rotated beyond L2, each
 * layer its own random routing, graph-replayed; in the same run PyTorch's grouped-GEMM layer and a
 * dense cuBLAS GEMM of the layer's FLOPs (the tensor-core ceiling). With {@code --format
 * fp8_e4m3_block128} the layer's weights are FP8 blocks and the {@code fp8_*} tile pairs multiply
 * them as FP8 x FP8 (W8A8); with {@code --format nvfp4} or {@code mxfp4} the {@code fp4_*} tile pairs
 * decode 4-bit weights to bf16 as they multiply them, beside the catalogue's 4-bit decode pair (up to 64
 * tokens). PyTorch's layer stays BF16. Writes {@code <out>/<date>-<device>-prefill.json} (BF16) or
 * {@code ...-prefill-<format>.json}.
 */
@Command(name = "prefill", mixinStandardHelpOptions = true,
        description = "Times the BF16 expert layer (H=2048, I=768, E=128, top-8) from 8 to 16,384 tokens with the "
                + "expert-centric tile pairs and, up to 64 tokens, the catalogue's output-centric pairs; PyTorch's "
                + "grouped_mm layer and a dense cuBLAS GEMM of the same FLOPs in the same run.")
public final class BenchPrefillCommand implements Callable<Integer> {
    /** Token counts up to which the output-centric pairs run too (the crossover). */
    static final int OUTPUT_CENTRIC_UP_TO = 64;

    @Mixin
    BenchOptions options;

    @Option(names = "--layers", defaultValue = "8", description = "Layers of weights to rotate over (default: ${DEFAULT-VALUE}; 8 = 9.7 GB).")
    int layers;

    @Option(names = "--tokens", split = ",", defaultValue = "8,16,32,64,256,1024,4096,16384",
            description = "Token counts (default: ${DEFAULT-VALUE}).")
    List<Integer> tokens;

    @Option(names = "--model", defaultValue = "qwen3-30b-a3b",
            description = "The model whose expert geometry is timed (default: ${DEFAULT-VALUE}); see `moeforge pool` for the names.")
    String model;

    @Option(names = "--shape", paramLabel = "H,I,E,k", split = ",",
            description = "A geometry instead of a model's: hidden, intermediate, experts, top-k (gate and up stacked).")
    List<Integer> shapeOption;

    @Option(names = "--torch-script", defaultValue = "bench/torch_prefill.py",
            description = "The PyTorch baseline script (default: ${DEFAULT-VALUE}); skipped when it or python3 with torch is missing.")
    Path torchScript;

    @Option(names = "--seed", defaultValue = "20261125", description = "Seed of weights and routing (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--format", defaultValue = "bf16", paramLabel = "FORMAT",
            description = "bf16 (default); fp8_e4m3_block128: FP8 block weights (quantised once on the host) multiplied as "
                    + "FP8 x FP8 by the fp8_* tile pairs; nvfp4 or mxfp4: 4-bit weights decoded to bf16 by the fp4_* tile "
                    + "pairs, beside the catalogue's 4-bit decode pair up to 64 tokens. PyTorch's layer stays BF16.")
    String formatText;

    @Option(names = "--balancedness", paramLabel = "BETA",
            description = "Route each layer at this entropy-normalised balancedness H(p)/ln(E) of the expert loads, moved into what "
                    + "each batch reaches (default: uniform routing; a decode step's router gives about 0.6-0.7). PyTorch's layer keeps "
                    + "its uniform routing.")
    Double balancedness;

    @Option(names = "--variants", split = ",", paramLabel = "NAME",
            description = "Only these variants (the tile pairs' names, and t8, t32 for the catalogue's output-centric pairs); default all.")
    List<String> variantNames;

    /** An expert-centric tile pair by the name the tables use. */
    record TilePair(String name, ExpertCentric gateUp, ExpertCentric down) {}

    /** Tiles of 16 to 128 routed pairs per expert, from decode batches (a few pairs per expert) to prefill. */
    static final List<TilePair> TILE_PAIRS = List.of(
            new TilePair("ec_m16", new ExpertCentric(16, 64, 64, 1, 4, 4, 1), new ExpertCentric(16, 128, 64, 1, 4, 4, 1)),
            new TilePair("ec_m32", new ExpertCentric(32, 64, 64, 2, 2, 4, 1), new ExpertCentric(32, 128, 64, 2, 2, 4, 1)),
            new TilePair("ec_m64", new ExpertCentric(64, 64, 64, 2, 2, 4, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8)),
            new TilePair("ec_m128", new ExpertCentric(128, 128, 64, 2, 4, 3, 8), new ExpertCentric(128, 128, 64, 2, 4, 3, 8)),
            new TilePair("ec_m128_k32", new ExpertCentric(128, 128, 32, 2, 4, 4, 8), new ExpertCentric(128, 256, 32, 2, 4, 4, 8)),
            // wide tiles with 128-element slices: 256 contiguous bytes of each weight row per stage
            new TilePair("ec_m16_k128", new ExpertCentric(16, 128, 128, 1, 8, 3, 1), new ExpertCentric(16, 256, 128, 1, 8, 3, 1)),
            new TilePair("ec_m32_k128", new ExpertCentric(32, 128, 128, 2, 4, 3, 1), new ExpertCentric(32, 256, 128, 2, 4, 3, 1)),
            new TilePair("ec_m16_n128", new ExpertCentric(16, 128, 64, 1, 8, 4, 1), new ExpertCentric(16, 256, 64, 1, 8, 4, 1)),
            // down's atomic combine: one FP32 sum per token instead of k partial rows
            new TilePair("ec_m16_k128_atomic", new ExpertCentric(16, 128, 128, 1, 8, 3, 1),
                    new ExpertCentric(16, 256, 128, 1, 8, 3, 1).withAtomicCombine(true)),
            new TilePair("ec_m32_k128_atomic", new ExpertCentric(32, 128, 128, 2, 4, 3, 1),
                    new ExpertCentric(32, 256, 128, 2, 4, 3, 1).withAtomicCombine(true)),
            // warpgroup MMA (sm_90a)
            new TilePair("wg_m64", new ExpertCentric(64, 64, 64, 4, 1, 5, 8, true), new ExpertCentric(64, 128, 64, 4, 1, 5, 8, true)),
            new TilePair("wg_m128", new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true), new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true)),
            new TilePair("wg_m128_n64", new ExpertCentric(128, 64, 64, 8, 1, 5, 8, true), new ExpertCentric(128, 128, 64, 8, 1, 5, 8, true)),
            new TilePair("wg_m128_atomic", new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withAtomicCombine(true)),
            // weight tiles by the tensor memory accelerator (64-element slices), beside their cp.async twins above
            withTma("ec_m16_tma", new ExpertCentric(16, 64, 64, 1, 4, 4, 1), new ExpertCentric(16, 128, 64, 1, 4, 4, 1)),
            withTma("ec_m16_ck_tma", new ExpertCentric(16, 64, 64, 1, 4, 4, 1),
                    new ExpertCentric(16, 128, 64, 1, 4, 4, 1).withCombineKernel(true)),
            withTma("ec_m16_d2_tma", new ExpertCentric(16, 64, 64, 1, 4, 4, 1), new ExpertCentric(16, 128, 64, 1, 4, 2, 8)),
            withTma("ec_m32_tma", new ExpertCentric(32, 64, 64, 2, 2, 4, 1), new ExpertCentric(32, 128, 64, 2, 2, 4, 1)),
            withTma("ec_m16_n128_tma", new ExpertCentric(16, 128, 64, 1, 8, 4, 1), new ExpertCentric(16, 256, 64, 1, 8, 4, 1)),
            withTma("ec_m16_s6_tma", new ExpertCentric(16, 64, 64, 1, 4, 6, 1), new ExpertCentric(16, 128, 64, 1, 4, 6, 1)),
            withTma("ec_m32_s6_tma", new ExpertCentric(32, 64, 64, 2, 2, 6, 1), new ExpertCentric(32, 128, 64, 2, 2, 6, 1)),
            withTma("ec_m64_tma", new ExpertCentric(64, 64, 64, 2, 2, 4, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8)),
            withTma("wg_m64_tma", new ExpertCentric(64, 64, 64, 4, 1, 5, 8, true), new ExpertCentric(64, 128, 64, 4, 1, 5, 8, true)),
            withTma("wg_m128_tma", new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true), new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true)),
            withTma("wg_m128_n64_tma", new ExpertCentric(128, 64, 64, 8, 1, 5, 8, true),
                    new ExpertCentric(128, 128, 64, 8, 1, 5, 8, true)),
            // two warpgroups side by side along the weight rows
            withTma("wg_m64_n2_tma", new ExpertCentric(64, 128, 64, 4, 2, 4, 8, true), new ExpertCentric(64, 256, 64, 4, 2, 4, 8, true)),
            withTma("wg_m64_n2_s5_tma", new ExpertCentric(64, 128, 64, 4, 2, 5, 8, true),
                    new ExpertCentric(64, 256, 64, 4, 2, 5, 8, true)),
            withTma("wg_m128_n2_tma", new ExpertCentric(128, 128, 64, 8, 2, 4, 8, true),
                    new ExpertCentric(128, 256, 64, 8, 2, 4, 8, true)),
            // a producer warpgroup fills the stages; stage barriers instead of a block barrier per slice
            withProducer("wg_m64_ws", new ExpertCentric(64, 64, 64, 4, 1, 5, 8, true), new ExpertCentric(64, 128, 64, 4, 1, 5, 8, true)),
            withProducer("wg_m64_n2_ws", new ExpertCentric(64, 128, 64, 4, 2, 5, 8, true),
                    new ExpertCentric(64, 256, 64, 4, 2, 5, 8, true)),
            withProducer("wg_m64_n2_s4_ws", new ExpertCentric(64, 128, 64, 4, 2, 4, 8, true),
                    new ExpertCentric(64, 256, 64, 4, 2, 4, 8, true)),
            withProducer("wg_m128_ws", new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true)),
            // the same with down's slots added by the module's combine entry point after the tiles
            withProducer("wg_m128_ws_ck", new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true),
                    new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withCombineKernel(true)),
            // swap-AB: the weight rows on wgmma's M side, 8 to 64 pairs on its N side; down's slots by the combine launch
            swapped("sw_m8", new ExpertCentric(8, 64, 64, 1, 4, 4, 1, true), new ExpertCentric(8, 128, 64, 1, 4, 4, 1, true)),
            swapped("sw_m16", new ExpertCentric(16, 64, 64, 1, 4, 4, 1, true), new ExpertCentric(16, 128, 64, 1, 4, 4, 1, true)),
            swapped("sw_m16_n128", new ExpertCentric(16, 128, 64, 1, 8, 4, 1, true), new ExpertCentric(16, 256, 64, 1, 8, 4, 1, true)),
            swapped("sw_m32", new ExpertCentric(32, 64, 64, 1, 4, 4, 1, true), new ExpertCentric(32, 128, 64, 1, 4, 4, 1, true)),
            swapped("sw_m64", new ExpertCentric(64, 64, 64, 1, 4, 4, 8, true), new ExpertCentric(64, 128, 64, 1, 4, 4, 8, true)),
            swapped("sw_m16_ws", new ExpertCentric(16, 64, 64, 1, 4, 5, 1, true).withProducer(true),
                    new ExpertCentric(16, 128, 64, 1, 4, 5, 1, true).withProducer(true)),
            swapped("sw_m32_ws", new ExpertCentric(32, 128, 64, 1, 8, 5, 8, true).withProducer(true),
                    new ExpertCentric(32, 128, 64, 1, 4, 5, 8, true).withProducer(true)));

    /**
     * W8A8 tile pairs for FP8 block weights: 128-code slices (one scale block each) by the copy engine;
     * gate_up tiles of whole 128-neuron groups, which it quantises as it stores them. A warp keeps two
     * sets of sums, so 64 pairs of mma.sync and 128-pair gate_up tiles spill (ptxas) and are not here.
     */
    static final List<TilePair> FP8_TILE_PAIRS = List.of(
            withTma("fp8_m16", new ExpertCentric(16, 128, 128, 1, 8, 4, 1), new ExpertCentric(16, 128, 128, 1, 4, 4, 1)),
            withTma("fp8_m16_s6", new ExpertCentric(16, 128, 128, 1, 8, 6, 1), new ExpertCentric(16, 128, 128, 1, 4, 6, 1)),
            withTma("fp8_m32", new ExpertCentric(32, 128, 128, 2, 4, 4, 1), new ExpertCentric(32, 128, 128, 2, 2, 4, 1)),
            withTma("fp8_wg_m64", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true), new ExpertCentric(64, 128, 128, 4, 1, 4, 8, true)),
            withTma("fp8_wg_m64_n2", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true),
                    new ExpertCentric(64, 256, 128, 4, 2, 4, 8, true)),
            withTma("fp8_wg_m64_d128", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true),
                    new ExpertCentric(128, 128, 128, 8, 1, 4, 8, true)),
            withProducer("fp8_wg_m64_ws", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true),
                    new ExpertCentric(64, 128, 128, 4, 1, 4, 8, true)),
            // the producer's gate_up beside a down of three stages: three down blocks an SM instead of two
            new TilePair("fp8_ws_s3", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true).withTma(true).withProducer(true),
                    new ExpertCentric(64, 128, 128, 4, 1, 3, 8, true).withTma(true)),
            new TilePair("fp8_ws_s3_ck", new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true).withTma(true).withProducer(true),
                    new ExpertCentric(64, 128, 128, 4, 1, 3, 8, true).withTma(true).withCombineKernel(true)));

    /**
     * Tile pairs for 4-bit weights (W4A16): mma.sync on cp.async stages of codes and scales, decoded to
     * bf16 by each warp (one warp row) or by the block (several). 64-wide slices only for NVFP4 (an MXFP4
     * row's scales of one are 2 bytes, under cp.async's 4); the pairs a format does not lower are
     * skipped with a line saying why. The 16-pair variants with 8 warps, half the outputs or 6 stages
     * are for a decode step's few tiles, where each block's chain of slices sets the pace.
     */
    static final List<TilePair> FOUR_BIT_TILE_PAIRS = List.of(
            new TilePair("fp4_m16", new ExpertCentric(16, 64, 128, 1, 4, 4, 1), new ExpertCentric(16, 128, 128, 1, 4, 4, 1)),
            new TilePair("fp4_m16_w8", new ExpertCentric(16, 64, 128, 1, 8, 4, 1), new ExpertCentric(16, 128, 128, 1, 8, 4, 1)),
            new TilePair("fp4_m16_n32", new ExpertCentric(16, 32, 128, 1, 4, 4, 1), new ExpertCentric(16, 64, 128, 1, 4, 4, 1)),
            new TilePair("fp4_m16_s6", new ExpertCentric(16, 64, 128, 1, 4, 6, 1), new ExpertCentric(16, 128, 128, 1, 4, 6, 1)),
            new TilePair("fp4_m16_k64_w8", new ExpertCentric(16, 64, 64, 1, 8, 6, 1), new ExpertCentric(16, 128, 64, 1, 8, 6, 1)),
            new TilePair("fp4_m16_k64", new ExpertCentric(16, 64, 64, 1, 4, 4, 1), new ExpertCentric(16, 128, 64, 1, 4, 4, 1)),
            new TilePair("fp4_m16_k64_s6", new ExpertCentric(16, 64, 64, 1, 4, 6, 1), new ExpertCentric(16, 128, 64, 1, 4, 6, 1)),
            new TilePair("fp4_m32_k64", new ExpertCentric(32, 64, 64, 2, 2, 4, 1), new ExpertCentric(32, 128, 64, 2, 2, 4, 1)),
            new TilePair("fp4_m64_k64", new ExpertCentric(64, 64, 64, 2, 2, 4, 8), new ExpertCentric(64, 128, 64, 2, 2, 4, 8)),
            new TilePair("fp4_m64", new ExpertCentric(64, 64, 128, 2, 2, 3, 8), new ExpertCentric(64, 128, 128, 2, 2, 3, 8)),
            new TilePair("fp4_m128_k64", new ExpertCentric(128, 128, 64, 2, 4, 3, 8), new ExpertCentric(128, 128, 64, 2, 4, 3, 8)),
            new TilePair("fp4_m128", new ExpertCentric(128, 64, 128, 4, 2, 3, 8), new ExpertCentric(128, 128, 128, 4, 2, 3, 8)));

    /** The catalogue's 4-bit decode pair of the Qwen3-30B-A3B geometry (one token a block, tensor cores), by format. */
    static final Map<WeightFormat, BenchCommand.CataloguePair> FOUR_BIT_DECODE_PAIRS = Map.of(
            WeightFormat.NVFP4, new BenchCommand.CataloguePair("tc", dev.moeforge.generated.BuiltinKernel.QWEN3_30B_A3B_NVFP4_GATE_UP,
                    dev.moeforge.generated.BuiltinKernel.QWEN3_30B_A3B_NVFP4_DOWN),
            WeightFormat.MXFP4, new BenchCommand.CataloguePair("tc", dev.moeforge.generated.BuiltinKernel.QWEN3_30B_A3B_MXFP4_GATE_UP,
                    dev.moeforge.generated.BuiltinKernel.QWEN3_30B_A3B_MXFP4_DOWN));

    private static TilePair withTma(String name, ExpertCentric gateUp, ExpertCentric down) {
        return new TilePair(name, gateUp.withTma(true), down.withTma(true));
    }

    private static TilePair swapped(String name, ExpertCentric gateUp, ExpertCentric down) {
        return new TilePair(name, gateUp.withTma(true).withSwapAb(true), down.withTma(true).withSwapAb(true).withCombineKernel(true));
    }

    private static TilePair withProducer(String name, ExpertCentric gateUp, ExpertCentric down) {
        return new TilePair(name, gateUp.withTma(true).withProducer(true), down.withTma(true).withProducer(true));
    }

    /** The geometry timed, and its gate/up layout. */
    private ExpertShape shape;
    private GateUpLayout layout;
    private WeightFormat format;

    @Override
    public Integer call() throws Exception {
        LayerBenchOptions.require(layers, tokens);
        LayerGeometry geometry = LayerGeometry.of(model, shapeOption);
        shape = geometry.shape();
        layout = geometry.layout();
        List<WeightFormat> formats = List.of(WeightFormat.BF16, WeightFormat.FP8_BLOCK128, WeightFormat.NVFP4, WeightFormat.MXFP4);
        format = formats.stream().filter(f -> f.text().equals(formatText)).findFirst().orElseThrow(() -> new IllegalArgumentException(
                "--format " + formatText + ": one of " + String.join(", ", formats.stream().map(WeightFormat::text).toList())));
        if (balancedness != null && !(balancedness >= 0 && balancedness <= 1)) {
            throw new IllegalArgumentException("--balancedness " + balancedness + ": in [0, 1] (H(p) / ln E of the expert loads; 1 is uniform)");
        }
        OptionalDouble routing = balancedness == null ? OptionalDouble.empty() : OptionalDouble.of(balancedness);
        boolean quantised = format != WeightFormat.BF16;
        boolean fourBit = FOUR_BIT_DECODE_PAIRS.containsKey(format);
        List<TilePair> pairs = fourBit ? FOUR_BIT_TILE_PAIRS : quantised ? FP8_TILE_PAIRS : TILE_PAIRS;
        // beside the tiles up to OUTPUT_CENTRIC_UP_TO tokens: the catalogue's output-centric pairs, or its 4-bit decode pair
        List<BenchCommand.CataloguePair> decodePairs = fourBit ? List.of(FOUR_BIT_DECODE_PAIRS.get(format))
                : quantised ? List.of() : BenchCommand.PAIRS.subList(1, BenchCommand.PAIRS.size());
        if (variantNames != null) {
            List<String> known = new ArrayList<>(pairs.stream().map(TilePair::name).toList());
            decodePairs.forEach(p -> known.add(p.name()));
            for (String v : variantNames) {
                if (!known.contains(v)) {
                    throw new IllegalArgumentException("--variants: unknown variant '" + v + "'; known: " + String.join(", ", known));
                }
            }
        }
        options.require("bench prefill");  // after every option is checked: a bad one is named on any machine
        int maxTokens = tokens.stream().mapToInt(Integer::intValue).max().orElseThrow();
        KernelCache cache = KernelCache.defaultCache();
        List<ExpertLayerBenchmark.Result> results = new ArrayList<>();
        try (CudaContext ctx = CudaContext.create(0);
             CudaStream stream = CudaStream.create();
             KernelRuntime runtime = new KernelRuntime(ctx, cache);
             BenchKernels kernels = new BenchKernels(runtime)) {
            System.out.println("device: " + ctx.deviceName() + ", " + ctx.smCount() + " SMs, driver " + ctx.driverVersion());
            long readBytes = 4L << 30;
            GpuTimer.Timing read = kernels.timeRead(stream, readBytes, 5, 50);
            double readBw = readBytes / (read.medianMicros() * 1e-6);
            System.out.printf(Locale.ROOT, "read bandwidth: %.0f GB/s%n", readBw / 1e9);
            List<ExpertLayerBenchmark.Variant> tiles = new ArrayList<>();
            for (TilePair p : pairs) {
                if (!wanted(p.name())) {
                    continue;
                }
                if (p.gateUp().wgmma() && runtime.target() != dev.moeforge.dsl.ir.Target.SM_90A) {
                    continue;  // warpgroup MMA is sm_90a's
                }
                layerOf("prefill_" + p.name(), p.gateUp(), p.down(), runtime, maxTokens)
                        .ifPresent(l -> tiles.add(new ExpertLayerBenchmark.Variant(p.name(), l)));
            }
            // the catalogue's Qwen3-30B-A3B output-centric tiles of 8 and 32 tokens (their schedules on another geometry)
            List<ExpertLayerBenchmark.Variant> warps = new ArrayList<>();
            for (BenchCommand.CataloguePair pair : decodePairs) {
                if (!wanted(pair.name())) {
                    continue;
                }
                KernelSpec gu = pair.gateUp().spec();
                KernelSpec dn = pair.down().spec();
                boolean sameProblem = gu.problem().equals(new Problem.ExpertGateUp(shape, format, DType.BF16, layout));
                if (fourBit && !sameProblem) {
                    System.out.println("  skipped " + pair.name() + ": the catalogue's 4-bit decode pair is Qwen3-30B-A3B's");
                    continue;
                }
                Optional<ExpertLayer> layer = sameProblem
                        ? Optional.of(new ExpertLayer(runtime.load(gu), runtime.load(dn)))
                        : layerOf("prefill_" + pair.name(), gu.schedule(), dn.schedule(), runtime, Math.min(maxTokens, OUTPUT_CENTRIC_UP_TO));
                layer.ifPresent(l -> warps.add(new ExpertLayerBenchmark.Variant(pair.name(), l)));
            }
            List<ExpertLayerBenchmark.Variant> all = new ArrayList<>(tiles);
            all.addAll(warps);
            if (all.isEmpty()) {  // before the weights are encoded and uploaded: nothing would be timed
                throw new IllegalArgumentException("bench prefill: no variant lowers " + geometry.name() + " in " + format.text()
                        + " (the lines above say why each was skipped)");
            }
            try (ExpertLayerBenchmark bench = quantised ? quantisedBenchmark(stream, maxTokens)
                    : new ExpertLayerBenchmark(kernels, stream, shape, layers, maxTokens, seed)) {
                System.out.printf(Locale.ROOT, "expert layer H=%d I=%d E=%d top-%d %s, %d layers = %.1f GB of weights%n",
                        shape.hidden(), shape.intermediate(), shape.experts(), shape.topk(), format.text(), layers,
                        bench.weightBytes() / 1e9);
                for (int m : tokens) {
                    List<ExpertLayerBenchmark.Variant> here = m <= OUTPUT_CENTRIC_UP_TO ? all : tiles;
                    results.addAll(bench.run(stream, here, m, seed, routing, options.warmup, options.reps, readBw,
                            msg -> System.out.println("  timing " + msg)));
                }
            }
            for (ExpertLayerBenchmark.Variant v : all) {
                v.layer().close();
            }
            JsonNode torch = TorchBaseline.run(torchScript, Map.of("hidden", shape.hidden(), "intermediate", shape.intermediate(),
                    "experts", shape.experts(), "topk", shape.topk(), "copies", layers, "tokens", tokens,
                    "warmup", options.warmup, "reps", options.reps));
            printTable(results, torch);
            Map<String, Object> doc = BenchReports.header("prefill", ctx);
            doc.put("method", Map.of("layers", layers, "warmup", options.warmup, "reps", options.reps, "timing",
                    "CUDA events around each replay of one graph running all layers; per-layer = replay / layers; median",
                    "bytes", "distinct routed experts' gate_up and down weights per layer", "flops", "2 M k 3 H I per layer",
                    "seed", seed, "routing", balancedness == null ? "uniform" : "balancedness " + balancedness
                            + ", moved into what each batch reaches (each row gives the routings' own)"));
            doc.put("read_bandwidth_bytes_per_second", readBw);
            doc.put("model", geometry.name());
            doc.put("shape", Map.of("hidden", shape.hidden(), "intermediate", shape.intermediate(), "experts", shape.experts(),
                    "topk", shape.topk(), "layout", layout.text(), "weights", format.text()));
            doc.put("variants", BenchCommand.variantRows(all));
            List<Map<String, Object>> rows = BenchCommand.resultRows(results, readBw);
            for (int i = 0; i < rows.size(); i++) {
                ExpertLayerBenchmark.Result r = results.get(i);
                rows.get(i).put("tflops", flops(r.tokens()) / (r.layer().medianMicros() * 1e6));
                JsonNode t = torchRow(torch, r.tokens());
                if (t != null) {
                    rows.get(i).put("fraction_of_dense_gemm", t.get("dense_gemm_us").asDouble() / r.layer().medianMicros());
                    rows.get(i).put("speedup_over_grouped_mm", t.get("grouped_mm_us").asDouble() / r.layer().medianMicros());
                }
            }
            doc.put("results", rows);
            doc.put("torch", torch == null ? "not run" : torch);
            String suffix = format == WeightFormat.FP8_BLOCK128 ? "-fp8" : quantised ? "-" + format.text() : "";
            System.out.println("wrote " + BenchReports.write(options.out, ctx, "prefill" + suffix, doc));
        }
        return 0;
    }

    /** The layers' quantised weights: one layer encoded on the host from normal rows, copied to every layer's memory. */
    private ExpertLayerBenchmark quantisedBenchmark(CudaStream stream, int maxTokens) {
        long t0 = System.nanoTime();
        HostLayer host = HostLayer.quantise(format, shape, Projections.of(layout), seed);
        System.out.printf(Locale.ROOT, "quantised one layer to %s in %.1f s%n", format.text(), (System.nanoTime() - t0) / 1e9);
        return new ExpertLayerBenchmark(stream, shape, layers, maxTokens, seed, host.gateUp(), host.down());
    }

    private boolean wanted(String variant) {
        return variantNames == null || variantNames.contains(variant);
    }

    /** A layer of the two schedules on the geometry timed, or empty (with a line saying why) where they do not lower it. */
    private Optional<ExpertLayer> layerOf(String name, Schedule<?> gateUp, Schedule<?> down, KernelRuntime runtime, int capacity) {
        try {
            ExpertLayerSpecs specs = ExpertLayerSpecs.of(name, shape, layout, format, gateUp, down, runtime.target());
            ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()), LaunchOrder.OVERLAPPING_PREVIOUS,
                    Math.min(capacity, Math.min(Validator.check(specs.gateUp()).maxTokens(), Validator.check(specs.down()).maxTokens())));
            return Optional.of(layer);
        } catch (SpecException e) {
            System.out.println("  skipped " + name + ": " + e.getMessage().lines().findFirst().orElse(""));
            return Optional.empty();
        }
    }

    /** The layer's multiply-adds times two: gate_up (2I x H) and down (H x I) for each of the M k routed pairs. */
    double flops(int tokens) {
        return 2.0 * tokens * shape.topk() * 3.0 * shape.hidden() * shape.intermediate();
    }

    private static JsonNode torchRow(JsonNode torch, int tokens) {
        if (torch == null) {
            return null;
        }
        for (JsonNode r : torch.get("results")) {
            if (r.get("tokens").asInt() == tokens) {
                return r;
            }
        }
        return null;
    }

    private void printTable(List<ExpertLayerBenchmark.Result> results, JsonNode torch) {
        System.out.println();
        System.out.printf(Locale.ROOT, "%-14s %6s %10s %10s %10s %8s %8s %9s %11s %10s %8s %6s%n", "variant", "M", "layer us",
                "gate_up us", "down us", "TFLOP/s", "of floor", "of dense", "grouped_mm", "vs torch", "experts", "beta");
        for (ExpertLayerBenchmark.Result r : results) {
            JsonNode t = torchRow(torch, r.tokens());
            double us = r.layer().medianMicros();
            System.out.printf(Locale.ROOT, "%-14s %6d %10.1f %10.1f %10.1f %8.1f %7.1f%% %8s %11s %10s %8.1f %6.3f%n", r.variant(),
                    r.tokens(), us,
                    r.gateUp().medianMicros(), r.down().medianMicros(), flops(r.tokens()) / (us * 1e6), 100 * r.fractionOfRead(),
                    t == null ? "-" : String.format(Locale.ROOT, "%.1f%%", 100 * t.get("dense_gemm_us").asDouble() / us),
                    t == null ? "-" : String.format(Locale.ROOT, "%.1f", t.get("grouped_mm_us").asDouble()),
                    t == null ? "-" : String.format(Locale.ROOT, "%.2fx", t.get("grouped_mm_us").asDouble() / us),
                    r.distinctExpertsPerLayer(), r.balancedness());
        }
        if (torch != null) {
            System.out.println();
            for (JsonNode t : torch.get("results")) {
                System.out.printf(Locale.ROOT, "M=%-6d dense cuBLAS GEMM %s: %.1f us (%.0f TFLOP/s); torch grouped_mm layer %.1f us%s%n",
                        t.get("tokens").asInt(), t.get("dense_gemm_shape"), t.get("dense_gemm_us").asDouble(),
                        t.get("dense_gemm_tflops").asDouble(), t.get("grouped_mm_us").asDouble(),
                        t.get("grouped_mm_graphed").asBoolean() ? " (graphed)" : " (eager: capture failed)");
            }
        }
    }
}
