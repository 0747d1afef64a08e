package dev.moeforge.checkpoint;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.ir.WeightFormat;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The checkpoint tensor names, dtypes and shapes of quantised routed-expert weights, one place for
 * both directions: {@link Quantizer} writes them and {@link CheckpointExperts} reads them.
 *
 * <p>Per expert and projection (base {@code X} = e.g. {@code model.layers.0.mlp.experts.3.gate_proj},
 * an {@code [N, K]} nn.Linear weight):
 * <table>
 * <caption>Tensors per format</caption>
 * <tr><th>format</th><th>codes</th><th>block scales</th><th>row scales</th></tr>
 * <tr><td>bf16</td><td>{@code X.weight} BF16 [N, K]</td><td></td><td></td></tr>
 * <tr><td>fp8_e4m3_channel</td><td>{@code X.weight} F8_E4M3 [N, K]</td><td></td>
 *     <td>{@code X.weight_scale} F32 [N, 1] (compressed-tensors / FBGEMM channel scale)</td></tr>
 * <tr><td>fp8_e4m3_block128</td><td>{@code X.weight} F8_E4M3 [N, K]</td>
 *     <td>{@code X.weight_scale_inv} F32 [ceil(N/128), ceil(K/128)] (DeepSeek-V3)</td><td></td></tr>
 * <tr><td>mxfp8</td><td>{@code X.weight} F8_E4M3 [N, K]</td>
 *     <td>{@code X.weight_scale_inv} U8 E8M0 [N, K/32] (transformers MXFP8)</td><td></td></tr>
 * <tr><td>nvfp4</td><td>{@code X.weight} U8 [N, K/2]</td><td>{@code X.weight_scale} F8_E4M3 [N, K/16]</td>
 *     <td>{@code X.weight_scale_2} F32 [] (ModelOpt)</td></tr>
 * <tr><td>mxfp4</td><td>{@code X.weight} U8 [N, K/2]</td>
 *     <td>{@code X.weight_scale_inv} U8 E8M0 [N, K/32] (the MXFP8 names with E2M1 codes)</td><td></td></tr>
 * <tr><td>int8_channel</td><td>{@code X.weight} I8 [N, K]</td><td></td><td>{@code X.weight_scale} F32 [N, 1]</td></tr>
 * <tr><td>int8_group128</td><td>{@code X.weight} I8 [N, K]</td><td>{@code X.weight_scale} F32 [N, K/128]</td><td></td></tr>
 * <tr><td>int4_channel</td><td>{@code X.weight_packed} U8 [N, K/2]</td><td></td><td>{@code X.weight_scale} F32 [N, 1]</td></tr>
 * <tr><td>int4_group128</td><td>{@code X.weight_packed} U8 [N, K/2]</td><td>{@code X.weight_scale} F32 [N, K/128]</td><td></td></tr>
 * </table>
 * Packed 4-bit codes hold element {@code 2j} in the low nibble of byte {@code j}; INT4 nibbles are
 * two's complement (-8..7), so {@code weight_packed} here is <em>not</em> compressed-tensors' I32
 * offset-binary {@code weight_packed}. INT4 gets its own name so that a U8 {@code weight} always means
 * FP4. Every shard MoeForge writes also carries {@value #FORMAT_METADATA_KEY} in its
 * {@code __metadata__}; the reader needs it only where shapes alone are ambiguous (an INT scale
 * {@code [N, 1]} of a {@code K = 128} weight is a channel scale unless the metadata says group128).
 *
 * <p>gpt-oss-style fused MXFP4 (prefix {@code P} = e.g. {@code model.layers.0.mlp.experts}):
 * {@code P.gate_up_proj_blocks} U8 [E, 2I, H/32, 16], {@code P.gate_up_proj_scales} U8 [E, 2I, H/32],
 * {@code P.down_proj_blocks} U8 [E, H, I/32, 16], {@code P.down_proj_scales} U8 [E, H, I/32], gate and up
 * rows interleaved, biases {@code P.gate_up_proj_bias} [E, 2I] and {@code P.down_proj_bias} [E, H].
 */
public final class ExpertTensors {

    /** The {@code __metadata__} key naming the {@link WeightFormat#text()} of the routed experts. */
    public static final String FORMAT_METADATA_KEY = "moeforge_format";

    public static final String WEIGHT = "weight";
    public static final String WEIGHT_PACKED = "weight_packed";
    public static final String WEIGHT_SCALE = "weight_scale";
    public static final String WEIGHT_SCALE_INV = "weight_scale_inv";
    public static final String WEIGHT_SCALE_2 = "weight_scale_2";
    public static final String BLOCKS = "_blocks";
    public static final String SCALES = "_scales";
    public static final String BIAS = "_bias";

    private ExpertTensors() {}

    /** Which array of an {@link EncodedWeights} a tensor holds. */
    public enum Part {
        CODES, BLOCK_SCALES, ROW_SCALES;

        /** The part's bytes as they go into the file (row scales as little-endian FP32). */
        public byte[] bytes(EncodedWeights w) {
            return switch (this) {
                case CODES -> w.codes();
                case BLOCK_SCALES -> w.blockScales();
                case ROW_SCALES -> {
                    ByteBuffer b = ByteBuffer.allocate(4 * w.rowScales().length).order(ByteOrder.LITTLE_ENDIAN);
                    b.asFloatBuffer().put(w.rowScales());
                    yield b.array();
                }
            };
        }
    }

    /** One tensor of a quantised weight. */
    public record Entry(String name, SafetensorsDType dtype, List<Long> shape, Part part) {
        public Entry {
            shape = List.copyOf(shape);
        }

        public long byteSize() {
            return dtype.byteSize(TensorInfo.numel(shape));
        }
    }

    /**
     * The tensors of one expert's {@code [rows, cols]} weight {@code base} ({@code base} without
     * {@code .weight}) in {@code format}, codes first.
     */
    public static List<Entry> perExpert(WeightFormat format, String base, int rows, int cols) {
        long n = rows;
        long k = cols;
        List<Entry> out = new ArrayList<>();
        switch (format) {
            case WeightFormat.Bf16 _ -> out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.BF16, List.of(n, k), Part.CODES));
            case WeightFormat.Fp8 f -> {
                out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.F8_E4M3, List.of(n, k), Part.CODES));
                switch (f.scaling()) {
                    case CHANNEL -> out.add(new Entry(base + "." + WEIGHT_SCALE, SafetensorsDType.F32, List.of(n, 1L), Part.ROW_SCALES));
                    case BLOCK_128X128 -> out.add(new Entry(base + "." + WEIGHT_SCALE_INV, SafetensorsDType.F32,
                            List.of(Math.ceilDiv(n, 128), Math.ceilDiv(k, 128)), Part.BLOCK_SCALES));
                }
            }
            case WeightFormat.Mxfp8 _ -> {
                out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.F8_E4M3, List.of(n, k), Part.CODES));
                out.add(new Entry(base + "." + WEIGHT_SCALE_INV, SafetensorsDType.U8, List.of(n, k / 32), Part.BLOCK_SCALES));
            }
            case WeightFormat.Nvfp4 _ -> {
                out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.U8, List.of(n, k / 2), Part.CODES));
                out.add(new Entry(base + "." + WEIGHT_SCALE, SafetensorsDType.F8_E4M3, List.of(n, k / 16), Part.BLOCK_SCALES));
                out.add(new Entry(base + "." + WEIGHT_SCALE_2, SafetensorsDType.F32, List.of(), Part.ROW_SCALES));
            }
            case WeightFormat.Mxfp4 _ -> {
                out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.U8, List.of(n, k / 2), Part.CODES));
                out.add(new Entry(base + "." + WEIGHT_SCALE_INV, SafetensorsDType.U8, List.of(n, k / 32), Part.BLOCK_SCALES));
            }
            case WeightFormat.Int8 i -> {
                out.add(new Entry(base + "." + WEIGHT, SafetensorsDType.I8, List.of(n, k), Part.CODES));
                out.add(intScale(i.scaling(), base, n, k));
            }
            case WeightFormat.Int4 i -> {
                out.add(new Entry(base + "." + WEIGHT_PACKED, SafetensorsDType.U8, List.of(n, k / 2), Part.CODES));
                out.add(intScale(i.scaling(), base, n, k));
            }
        }
        return out;
    }

    private static Entry intScale(WeightFormat.IntScaling scaling, String base, long n, long k) {
        return switch (scaling) {
            case CHANNEL -> new Entry(base + "." + WEIGHT_SCALE, SafetensorsDType.F32, List.of(n, 1L), Part.ROW_SCALES);
            case GROUP_128 -> new Entry(base + "." + WEIGHT_SCALE, SafetensorsDType.F32, List.of(n, k / 128), Part.BLOCK_SCALES);
        };
    }

    /**
     * The gpt-oss tensors of a fused MXFP4 weight {@code [experts, rows, cols]}: {@code
     * expertsPrefix.proj_blocks} and {@code expertsPrefix.proj_scales}, {@code proj} being
     * {@code gate_up_proj} or {@code down_proj}.
     */
    public static List<Entry> gptOssMxfp4(String expertsPrefix, String proj, int experts, int rows, int cols) {
        long e = experts;
        long n = rows;
        long g = cols / 32;
        return List.of(
                new Entry(expertsPrefix + "." + proj + BLOCKS, SafetensorsDType.U8, List.of(e, n, g, 16L), Part.CODES),
                new Entry(expertsPrefix + "." + proj + SCALES, SafetensorsDType.U8, List.of(e, n, g), Part.BLOCK_SCALES));
    }
}
