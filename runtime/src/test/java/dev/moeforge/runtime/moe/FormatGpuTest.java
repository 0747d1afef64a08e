package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointExperts;
import dev.moeforge.checkpoint.GptOssCheckpoint;
import dev.moeforge.codegen.cuda.DeviceHeader;
import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.build.OutputTensorCoreBuilder;
import dev.moeforge.dsl.format.E8M0;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Minifloat;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.OutputTensorCore;
import dev.moeforge.dsl.schedule.RouterCluster;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.RouterTiled;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.dsl.schedule.SplitDown;
import dev.moeforge.runtime.compile.CudaSource;
import dev.moeforge.runtime.compile.NvccCompiler;
import dev.moeforge.runtime.cuda.CudaModule;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.RequiresGpu;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every weight format on the GPU: the device decoders against the Java decoders on every code
 * point, and the output-centric expert layer against the FP64 reference on freshly quantised
 * random weights (the seed is in every message).
 */
@RequiresGpu
class FormatGpuTest extends GpuSession {
    static final long RUN_SEED = System.nanoTime();

    /** Each thread decodes a word of distinct codes (code t + i at position i), through the kernels' own decoders. */
    static final String DECODE_KERNELS = """
            #include "moeforge_device.cuh"
            template <mf::Element EL, int N>
            __device__ void decode_word(uint32_t word, float* out, float unscale) {
              float v[N];
              mf::decode_codes<EL, N>(&word, v);
              for (int i = 0; i < N; ++i) out[i] = v[i] * unscale;
            }
            extern "C" __global__ void decode_all(float* e4m3, float* int8, float* e2m1, float* int4, float* e8m0, float* e4m3_scale) {
              const uint32_t t = threadIdx.x;  // 256 threads
              uint32_t bytes = 0, nibbles = 0;
              for (uint32_t i = 0; i < 4; ++i) bytes |= ((t + i) & 0xffu) << (8 * i);
              for (uint32_t i = 0; i < 8; ++i) nibbles |= ((t + i) & 0xfu) << (4 * i);
              decode_word<mf::Element::kE4M3, 4>(bytes, e4m3 + 4 * t, 1.0f);
              decode_word<mf::Element::kInt8, 4>(bytes, int8 + 4 * t, 1.0f);
              if (t < 16) {
                decode_word<mf::Element::kE2M1, 8>(nibbles, e2m1 + 8 * t, mf::Nvfp4Weights::kUnscale);
                decode_word<mf::Element::kInt4, 8>(nibbles, int4 + 8 * t, 1.0f);
              }
              e8m0[t] = mf::block_scale_value<mf::BlockScale::kE8M0>(t);
              e4m3_scale[t] = mf::block_scale_value<mf::BlockScale::kE4M3>(t);
            }
            """;

    /**
     * The tensor-core kernels' decoder (decode_tile_chunk): thread b decodes four words whose nibble i
     * of word q is code (b + 8q + i) & 15, so that every code sits at every position over the
     * threads, with block scale byte b (NVFP4: words 0-1, and (b + 77) & 255 for words 2-3; MXFP4:
     * all four words), and writes the 32 values (bf16x2 pair j of word q holds nibbles j and j + 4)
     * as floats. NVFP4's bf16 values carry 2^-9 (TileDecode::kUnscale takes it back with the row
     * factor); INT4's block scales multiply the sums instead, so it decodes the codes alone.
     */
    static final String TILE_DECODE_KERNELS = """
            #include "moeforge_device.cuh"
            template <class F>
            __device__ void tile_decode(uint32_t raw_scales, float* out) {
              const uint32_t b = threadIdx.x;
              mf::Lane<16> codes;
              for (int q = 0; q < 4; ++q) {
                uint32_t w = 0;
                for (uint32_t i = 0; i < 8; ++i) w |= ((b + 8 * q + i) & 0xfu) << (4 * i);
                codes.w[q] = w;
              }
              uint32_t p[16];
              mf::decode_tile_chunk<F>(codes, raw_scales, p);
              for (int i = 0; i < 16; ++i) {
                out[32 * b + 2 * i] = __uint_as_float(p[i] << 16);
                out[32 * b + 2 * i + 1] = __uint_as_float(p[i] & 0xffff0000u);
              }
            }
            extern "C" __global__ void tile_decode_all(float* nvfp4, float* mxfp4, float* int4) {
              const uint32_t b = threadIdx.x;  // 256 threads
              tile_decode<mf::Nvfp4Weights>(b | (((b + 77) & 0xffu) << 8), nvfp4);
              tile_decode<mf::Mxfp4Weights>(b, mxfp4);
              tile_decode<mf::Int4ChannelWeights>(0u, int4);
            }
            """;

    @Test
    void tensorCoreDecoderMatchesJavaOnEveryCodeAndScale() {
        CudaSource source = new CudaSource("tile_decode_all.cu", TILE_DECODE_KERNELS,
                Map.of(DeviceHeader.FILE_NAME, DeviceHeader.content()), "");
        try (CudaModule module = CudaModule.load(new NvccCompiler().compile(source, runtime.target()).cubin());
             DeviceBuffer nvfp4 = DeviceBuffer.allocate(DType.FP32, 256 * 32);
             DeviceBuffer mxfp4 = DeviceBuffer.allocate(DType.FP32, 256 * 32);
             DeviceBuffer int4 = DeviceBuffer.allocate(DType.FP32, 256 * 32)) {
            nvfp4.fillBytes16((short) 0x7FC0);
            mxfp4.fillBytes16((short) 0x7FC0);
            int4.fillBytes16((short) 0x7FC0);
            module.function("tile_decode_all").launch(1, 1, 1, 256, 1, 1, 0, stream, nvfp4, mxfp4, int4);
            stream.synchronize();
            checkTileCodes(nvfp4, "NVFP4", (code, b, q) -> Minifloat.E2M1.decode(code)
                    * Minifloat.E4M3.decode(q < 2 ? b : (b + 77) & 0xFF) * 0x1p-9f);
            checkTileCodes(mxfp4, "MXFP4", (code, b, q) -> Minifloat.E2M1.decode(code) * E8M0.decode(b));
            checkTileCodes(int4, "INT4", (code, b, q) -> (code ^ 8) - 8);
        }
    }

    @FunctionalInterface
    interface TileValue {
        float apply(int code, int scaleByte, int word);
    }

    /** Thread b's values: pair j of word q at out[32 b + 8 q + 2 j] (nibble j) and + 1 (nibble j + 4). */
    private static void checkTileCodes(DeviceBuffer out, String name, TileValue expected) {
        float[] got = new float[256 * 32];
        out.copyTo(got);
        for (int b = 0; b < 256; b++) {
            for (int q = 0; q < 4; q++) {
                for (int j = 0; j < 4; j++) {
                    for (int half = 0; half < 2; half++) {
                        int nibble = j + 4 * half;
                        int code = (b + 8 * q + nibble) & 0xF;
                        assertSameFloat(expected.apply(code, b, q), got[32 * b + 8 * q + 2 * j + half],
                                name + " code " + code + " with scale byte " + b + " (word " + q + ", nibble " + nibble + ")");
                    }
                }
            }
        }
    }

    @Test
    void deviceDecodersMatchJavaOnEveryCodePoint() {
        CudaSource source = new CudaSource("decode_all.cu", DECODE_KERNELS,
                Map.of(DeviceHeader.FILE_NAME, DeviceHeader.content()), "");
        try (CudaModule module = CudaModule.load(new NvccCompiler().compile(source, runtime.target()).cubin());
             DeviceBuffer e4m3 = DeviceBuffer.allocate(DType.FP32, 1024);
             DeviceBuffer int8 = DeviceBuffer.allocate(DType.FP32, 1024);
             DeviceBuffer e2m1 = DeviceBuffer.allocate(DType.FP32, 128);
             DeviceBuffer int4 = DeviceBuffer.allocate(DType.FP32, 128);
             DeviceBuffer e8m0 = DeviceBuffer.allocate(DType.FP32, 256);
             DeviceBuffer e4m3Scale = DeviceBuffer.allocate(DType.FP32, 256)) {
            module.function("decode_all").launch(1, 1, 1, 256, 1, 1, 0, stream, e4m3, int8, e2m1, int4, e8m0, e4m3Scale);
            stream.synchronize();
            checkCodes(e4m3, 256, 4, 0xFF, c -> Minifloat.E4M3.decode(c), "E4M3");
            checkCodes(int8, 256, 4, 0xFF, c -> (byte) c, "INT8");
            checkCodes(e2m1, 16, 8, 0xF, c -> Minifloat.E2M1.decode(c), "E2M1");
            checkCodes(int4, 16, 8, 0xF, c -> (c ^ 8) - 8, "INT4");
            checkCodes(e8m0, 256, 1, 0xFF, E8M0::decode, "E8M0 scale");
            checkCodes(e4m3Scale, 256, 1, 0xFF, c -> Minifloat.E4M3.decode(c), "E4M3 scale");
        }
    }

    /** Thread t wrote the decodes of codes (t + i) & mask at out[perThread * t + i]. */
    private static void checkCodes(DeviceBuffer out, int threads, int perThread, int mask, IntToFloat decode, String name) {
        float[] got = new float[threads * perThread];
        out.copyTo(got);
        for (int t = 0; t < threads; t++) {
            for (int i = 0; i < perThread; i++) {
                int code = (t + i) & mask;
                assertSameFloat(decode.apply(code), got[perThread * t + i], name + " code " + code + " at position " + i);
            }
        }
    }

    @FunctionalInterface
    interface IntToFloat {
        float apply(int code);
    }

    private static void assertSameFloat(float expected, float actual, String what) {
        if (Float.isNaN(expected)) {
            assertTrue(Float.isNaN(actual), what + ": expected NaN, got " + actual);
        } else {
            assertEquals(Float.floatToRawIntBits(expected), Float.floatToRawIntBits(actual),
                    what + ": expected " + expected + ", got " + actual);
        }
    }

    /** bias: both projections carry a bias (gpt-oss), drawn once per geometry. */
    record Geometry(String name, ExpertShape shape, GateUpLayout layout, boolean bias) {
        Geometry(String name, ExpertShape shape, GateUpLayout layout) {
            this(name, shape, layout, false);
        }

        @Override
        public String toString() {
            return name;
        }
    }

    static final Geometry SMALL = new Geometry("small_256x128_e9_k3", new ExpertShape(256, 128, 9, 3), GateUpLayout.STACKED);
    static final Geometry SMALL_INTERLEAVED = new Geometry("small_384x256_e5_k2_interleaved", new ExpertShape(384, 256, 5, 2),
            GateUpLayout.INTERLEAVED);
    static final Geometry RAGGED_BLOCKS = new Geometry("ragged_328x256_e5_k2", new ExpertShape(328, 256, 5, 2), GateUpLayout.STACKED);
    static final Geometry QWEN3_30B = new Geometry("qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED);
    static final Geometry GPT_OSS_20B = new Geometry("gpt_oss_20b", new ExpertShape(2880, 2880, 32, 4), GateUpLayout.INTERLEAVED, true);
    static final Geometry SMALL_BIASED = new Geometry("small_384x256_e5_k2_interleaved_bias", new ExpertShape(384, 256, 5, 2),
            GateUpLayout.INTERLEAVED, true);
    static final Geometry QWEN3_NEXT = new Geometry("qwen3_next_80b", new ExpertShape(2048, 512, 512, 10), GateUpLayout.STACKED);

    static final OutputCentric SINGLE = OutputCentricBuilder.create().build();
    static final OutputCentric SINGLE_NARROW = OutputCentricBuilder.create().loadBytes(8).kUnroll(2).warpsPerCta(8).warpsPerOutput(2).build();
    static final OutputCentric TILED = OutputCentricBuilder.create().tokensPerCta(8).kUnroll(2).build();
    static final OutputCentric TILED_NARROW = OutputCentricBuilder.create().tokensPerCta(8).kUnroll(2).loadBytes(8).build();
    static final OutputCentric TILED_SPLIT = OutputCentricBuilder.create().tokensPerCta(5).warpsPerCta(4).warpsPerOutput(2).kUnroll(1).loadBytes(4).build();
    /** The 8-bit catalogue pairs' schedule (t1_u2_s2_mb1): one block per SM promised to ptxas. */
    static final OutputCentric SPLIT_ONE_BLOCK = OutputCentricBuilder.create().warpsPerCta(8).warpsPerOutput(2).kUnroll(2).minBlocksPerSm(1).build();

    // tensor-core decode (4-bit formats): several warps per tile, one warp per tile, 16 warps on one tile
    static final OutputTensorCore TC = OutputTensorCoreBuilder.create().build();
    static final OutputTensorCore TC_ONE_WARP = OutputTensorCoreBuilder.create().warpsPerCta(4).warpsPerTile(1).kUnroll(1).minBlocksPerSm(0).build();
    static final OutputTensorCore TC_SPLIT = OutputTensorCoreBuilder.create().warpsPerCta(4).warpsPerTile(2).kUnroll(3).build();
    static final OutputTensorCore TC_DOWN = OutputTensorCoreBuilder.create().warpsPerCta(16).warpsPerTile(16).kUnroll(3).build();
    /** The catalogue's 4-bit downs: 24 or 32 warps on one tile, groups of one step, two groups in turn. */
    static final OutputTensorCore TC_DOWN_RING = OutputTensorCoreBuilder.create().warpsPerCta(24).warpsPerTile(24).kUnroll(1).build();
    static final OutputTensorCore TC_DOWN_WIDE = OutputTensorCoreBuilder.create().warpsPerCta(32).warpsPerTile(32).kUnroll(1).build();
    /** Rows of 7 and 3 chunks of 32 codes: the last step of every row is ragged. */
    static final Geometry RAGGED_STEPS = new Geometry("ragged_steps_224x96_e7_k3", new ExpertShape(224, 96, 7, 3), GateUpLayout.STACKED);
    static final List<WeightFormat> FOUR_BIT = List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL,
            WeightFormat.INT4_GROUP128);

    record Case(WeightFormat format, Geometry geometry, Schedule gateUp, Schedule down, int tokens) {
        @Override
        public String toString() {
            return format.text() + " " + geometry + " " + tag(gateUp) + "/" + tag(down) + " M=" + tokens;
        }
    }

    static String tag(Schedule s) {
        return switch (s) {
            case OutputCentric oc -> "w" + oc.warpsPerCta() + "b" + oc.loadBytes() + "u" + oc.kUnroll() + "t" + oc.tokensPerCta()
                    + "s" + oc.warpsPerOutput() + (oc.minBlocksPerSm() > 0 ? "m" + oc.minBlocksPerSm() : "");
            case OutputTensorCore tc -> "tc_w" + tc.warpsPerCta() + "u" + tc.kUnroll() + "s" + tc.warpsPerTile();
            case SplitDown sd -> "split_w" + sd.warpsPerCta() + "u" + sd.kUnroll() + "s" + sd.warpsPerTile()
                    + (sd.orderLoads() ? "o" : "");
            case ExpertCentric ec -> Candidates.name(ec);
            case RouterGemv _, RouterCluster _, RouterTiled _, LinearGemv _, dev.moeforge.dsl.schedule.LinearMma _ ->
                    throw new IllegalArgumentException("not an expert schedule");
        };
    }

    static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (WeightFormat f : WeightFormat.ALL) {
            for (int m : new int[] {1, 3, 8}) {
                cases.add(new Case(f, SMALL, SINGLE, SINGLE, m));
                cases.add(new Case(f, SMALL_INTERLEAVED, SINGLE_NARROW, SINGLE_NARROW, m));
                cases.add(new Case(f, SMALL, TILED, TILED, m));
                cases.add(new Case(f, SMALL_INTERLEAVED, TILED, TILED_SPLIT, m));
            }
            cases.add(new Case(f, QWEN3_30B, SINGLE, SINGLE, 1));
            cases.add(new Case(f, QWEN3_30B, SPLIT_ONE_BLOCK, SPLIT_ONE_BLOCK, 1));
            cases.add(new Case(f, SMALL, SPLIT_ONE_BLOCK, SPLIT_ONE_BLOCK, 3));
            cases.add(new Case(f, QWEN3_30B, TILED, TILED, 8));
            if (FOUR_BIT.contains(f)) {
                cases.add(new Case(f, QWEN3_30B, TC, TC_DOWN, 1));
                cases.add(new Case(f, QWEN3_30B, TC, TC_DOWN_RING, 1));
                cases.add(new Case(f, QWEN3_30B, SINGLE, TC_DOWN_WIDE, 1));
                cases.add(new Case(f, SMALL, TC_SPLIT, TC_DOWN_RING, 3));
                cases.add(new Case(f, QWEN3_30B, TC_SPLIT, TC, 6));
                for (int m : new int[] {1, 3, 8}) {
                    cases.add(new Case(f, SMALL, TC, TC_DOWN, m));
                    cases.add(new Case(f, SMALL, TC_ONE_WARP, TC_SPLIT, m));
                }
                for (int m : new int[] {1, 5}) {
                    cases.add(new Case(f, SMALL_INTERLEAVED, TC_SPLIT, TC_ONE_WARP, m));
                }
                if (f != WeightFormat.INT4_GROUP128) {  // groups of 128 need rows of whole groups
                    for (int m : new int[] {1, 4}) {
                        cases.add(new Case(f, RAGGED_STEPS, TC, TC_SPLIT, m));
                        cases.add(new Case(f, RAGGED_STEPS, TC_ONE_WARP, TC_DOWN, m));
                    }
                }
            }
        }
        for (int m : new int[] {1, 4}) {
            cases.add(new Case(WeightFormat.FP8_BLOCK128, RAGGED_BLOCKS, SINGLE_NARROW, SINGLE_NARROW, m));
            cases.add(new Case(WeightFormat.FP8_BLOCK128, RAGGED_BLOCKS, TILED_NARROW, TILED_SPLIT, m));
        }
        for (WeightFormat f : List.of(WeightFormat.BF16, WeightFormat.MXFP4, WeightFormat.NVFP4, WeightFormat.FP8_CHANNEL)) {
            for (int m : new int[] {1, 5}) {
                cases.add(new Case(f, SMALL_BIASED, SINGLE_NARROW, SINGLE_NARROW, m));
                cases.add(new Case(f, SMALL_BIASED, TILED, TILED_SPLIT, m));
            }
        }
        for (WeightFormat f : List.of(WeightFormat.MXFP4, WeightFormat.NVFP4)) {
            for (int m : new int[] {1, 5}) {
                cases.add(new Case(f, SMALL_BIASED, TC, TC_SPLIT, m));
            }
        }
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, SINGLE, SINGLE, 1));
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, TILED, TILED, 8));
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, TC, TC_DOWN, 1));
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, TC_SPLIT, TC, 4));
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, TC, TC_DOWN_RING, 2));
        cases.add(new Case(WeightFormat.MXFP4, GPT_OSS_20B, TC, TC_DOWN_WIDE, 1));
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_NEXT, SINGLE, SINGLE, 1));
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_NEXT, TILED, TILED, 8));
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_NEXT, TC, TC_DOWN, 1));
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_NEXT, TC, TC_DOWN, 8));
        cases.add(new Case(WeightFormat.NVFP4, QWEN3_NEXT, TC, TC_DOWN_RING, 1));
        return cases;
    }

    static Stream<Arguments> layerCases() {
        return cases().stream().map(Arguments::of);
    }

    /** One geometry's and format's quantised weights, host and device; cases come grouped so one is kept at a time. */
    record Weights(WeightFormat format, Geometry geometry, long seed, WeightRows gateUp, WeightRows down,
                   DeviceWeights deviceGateUp, DeviceWeights deviceDown) implements AutoCloseable {
        @Override
        public void close() {
            deviceGateUp.close();
            deviceDown.close();
        }
    }

    static Weights weights;

    static Weights weightsFor(WeightFormat f, Geometry g) {
        if (weights == null || !weights.format().equals(f) || !weights.geometry().equals(g)) {
            if (weights != null) {
                weights.close();
                weights = null;
            }
            ExpertShape s = g.shape();
            long seed = RUN_SEED + 31L * WeightFormat.ALL.indexOf(f) + g.name().hashCode();
            RowSource gateUpRows = RowSource.normal(seed, 2 * s.intermediate(), 1.0 / Math.sqrt(s.hidden()));
            if (f == WeightFormat.NVFP4) {
                gateUpRows = upRowsLarger(gateUpRows, g.layout(), s.intermediate());
            }
            EncodedWeights gu = EncodedWeights.encode(f, gateUpRows, s.experts(), 2 * s.intermediate(), s.hidden(),
                    Projections.of(g.layout()), "gate_up");
            EncodedWeights dn = EncodedWeights.encode(f, RowSource.normal(seed + 1, s.hidden(), 1.0 / Math.sqrt(s.intermediate())),
                    s.experts(), s.hidden(), s.intermediate(), Projections.ONE, "down");
            if (g.bias()) {
                // biases of the size of a row's typical sum, so that they move the clamps' and the combine's inputs
                float[] guBias = RandomInputs.floatNormal(seed + 2, s.experts() * 2 * s.intermediate(), 0.5);
                float[] dnBias = RandomInputs.floatNormal(seed + 3, s.experts() * s.hidden(), 0.5);
                weights = new Weights(f, g, seed, WeightRows.of(gu).withBias(guBias), WeightRows.of(dn).withBias(dnBias),
                        DeviceWeights.upload(gu, guBias), DeviceWeights.upload(dn, dnBias));
            } else {
                weights = new Weights(f, g, seed, WeightRows.of(gu), WeightRows.of(dn), DeviceWeights.upload(gu), DeviceWeights.upload(dn));
            }
        }
        return weights;
    }

    /**
     * Up rows drawn 4 times as large as gate rows: NVFP4's per-tensor scales of gate and up then differ
     * 4-fold (ModelOpt keeps one per projection), so a kernel that applied one projection's scale to
     * the other's rows would be off by 4x instead of by the few percent two random draws differ.
     */
    static RowSource upRowsLarger(RowSource rows, GateUpLayout layout, int intermediate) {
        return (expert, row, out) -> {
            rows.row(expert, row, out);
            boolean up = switch (layout) {
                case STACKED -> row >= intermediate;
                case INTERLEAVED -> (row & 1) == 1;
            };
            if (up) {
                for (int i = 0; i < out.length; i++) {
                    out[i] *= 4.0f;
                }
            }
        };
    }

    /** gpt-oss's layer at a small geometry, as a checkpoint under its real names. */
    static final Geometry GPT_OSS_CHECKPOINT = new Geometry("gpt_oss_checkpoint_256x128_e8_k4", new ExpertShape(256, 128, 8, 4),
            GateUpLayout.INTERLEAVED, true);

    static ExpertLayerSpecs checkpointSpecs() {
        return ExpertLayerSpecs.of("f_gpt_oss_checkpoint", GPT_OSS_CHECKPOINT.shape(), GateUpLayout.INTERLEAVED, WeightFormat.MXFP4,
                SINGLE_NARROW, SINGLE_NARROW, runtime.target()).withGate(GateFunction.CLAMPED_SWIGLU).withBias();
    }

    @BeforeAll
    static void compileSuite() throws Exception {
        List<KernelSpec> specs = new ArrayList<>(List.of(checkpointSpecs().gateUp(), checkpointSpecs().down()));
        for (Case c : cases()) {
            specs.add(specs(c).gateUp());
            specs.add(specs(c).down());
        }
        compileAll(specs);
    }

    @AfterAll
    static void releaseWeights() {
        if (weights != null) {
            weights.close();
            weights = null;
        }
    }

    /** gpt-oss's geometry runs its own activation, the clamped SwiGLU; biased geometries add bias=true. */
    static ExpertLayerSpecs specs(Case c) {
        ExpertLayerSpecs specs = ExpertLayerSpecs.of("f_" + c.format().text() + "_" + c.geometry().name() + "_" + tag(c.gateUp())
                + "_" + tag(c.down()), c.geometry().shape(), c.geometry().layout(), c.format(), c.gateUp(), c.down(), runtime.target());
        if (c.geometry() == GPT_OSS_20B) {
            specs = specs.withGate(GateFunction.CLAMPED_SWIGLU);
        }
        return c.geometry().bias() ? specs.withBias() : specs;
    }

    /**
     * From a safetensors file to the GPU: a gpt-oss layer written under its real names is loaded by
     * CheckpointExperts (codes, scales, biases), uploaded, and run; the reference runs on the
     * weights as written.
     */
    @Test
    void gptOssCheckpointLayerRunsAsWritten(@TempDir Path dir) {
        ExpertShape s = GPT_OSS_CHECKPOINT.shape();
        long seed = System.nanoTime();
        GptOssCheckpoint written = GptOssCheckpoint.write(dir, "model.layers.0.mlp", s.experts(), s.hidden(), s.intermediate(),
                seed, 10.0);
        ExpertLayerSpecs specs = checkpointSpecs();
        ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()));
        try (Checkpoint ckpt = Checkpoint.open(dir)) {
            CheckpointExperts.LayerWeights lw = CheckpointExperts.load(ckpt, written.prefix());
            try (DeviceWeights gu = DeviceWeights.upload(lw.gateUp(), lw.gateUpBias().orElseThrow());
                 DeviceWeights dn = DeviceWeights.upload(lw.down(), lw.downBias().orElseThrow())) {
                for (int tokens : new int[] {1, 6}) {
                    short[] x = RandomInputs.bf16Normal(seed + tokens, tokens * s.hidden(), 8.0);
                    Routing routing = RandomInputs.uniformRouting(seed + 2 * tokens, tokens, s.experts(), s.topk());
                    ExpertReference.LayerResult ref = ExpertReference.layer(specs.gateUp(), specs.down(), x,
                            WeightRows.of(written.gateUp()).withBias(written.gateUpBias()),
                            WeightRows.of(written.down()).withBias(written.downBias()), routing);
                    checkExpertLayer("gpt-oss checkpoint M=" + tokens + " seed=" + seed, layer, x, routing, gu, dn, ref, BF16_OUTPUT);
                }
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("layerCases")
    void layerMatchesReference(Case c) {
        ExpertLayerSpecs specs = specs(c);
        ExpertLayer layer = new ExpertLayer(runtime.load(specs.gateUp()), runtime.load(specs.down()));
        Weights w = weightsFor(c.format(), c.geometry());
        ExpertShape s = c.geometry().shape();
        long seed = System.nanoTime();
        int tokens = c.tokens();
        // for gpt-oss, activations 4x larger put many gate and up values beyond the clamps at +-7
        short[] x = RandomInputs.bf16Normal(seed, tokens * s.hidden(), c.geometry() == GPT_OSS_20B ? 4.0 : 1.0);
        Routing routing = RandomInputs.uniformRouting(seed + 1, tokens, s.experts(), s.topk());
        ExpertReference.LayerResult ref = ExpertReference.layer(specs.gateUp(), specs.down(), x,
                w.gateUp(), w.down(), routing);
        checkExpertLayer(c + " seed=" + seed + " weight seed=" + w.seed(), layer, x, routing, w.deviceGateUp(), w.deviceDown(),
                ref, BF16_OUTPUT);
    }
}
