package dev.moeforge.checkpoint;

import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.WeightFormat;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;

/**
 * A synthetic checkpoint with one gpt-oss MoE layer under its real names: fused MXFP4
 * {@code experts.gate_up_proj_blocks [E, 2I, H/32, 16]} and {@code _scales} (gate and up rows
 * interleaved), {@code down_proj_*}, the BF16 expert biases and a router. What was written is kept,
 * so a test can compare what a loader makes of it.
 *
 * @param prefix the layer's module path, e.g. {@code model.layers.3.mlp}
 */
public record GptOssCheckpoint(String prefix, int experts, int hidden, int intermediate, EncodedWeights gateUp,
                               EncodedWeights down, float[] gateUpBias, float[] downBias) {

    /** Writes the layer into {@code dir} (weights N(0, 0.05^2) rounded to bf16, biases likewise times {@code biasScale}). */
    public static GptOssCheckpoint write(Path dir, String prefix, int experts, int hidden, int intermediate, long seed,
                                         double biasScale) {
        int e = experts;
        int h = hidden;
        int i = intermediate;
        float[] gu = normalBf16(seed, e * 2 * i * h, 0.05);
        float[] dn = normalBf16(seed + 1, e * h * i, 0.05);
        float[] guBias = normalBf16(seed + 2, e * 2 * i, 0.05 * biasScale);
        float[] dnBias = normalBf16(seed + 3, e * h, 0.05 * biasScale);
        EncodedWeights guEnc = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(gu, 2 * i, h), e, 2 * i, h,
                Projections.INTERLEAVED_GATE_UP, "gu");
        EncodedWeights dnEnc = EncodedWeights.encode(WeightFormat.MXFP4, RowSource.of(dn, h, i), e, h, i, Projections.ONE, "dn");
        String p = prefix + ".experts";
        CheckpointWriter w = new CheckpointWriter();
        w.add(p + ".gate_up_proj_blocks", SafetensorsDType.U8, List.of((long) e, 2L * i, h / 32L, 16L), guEnc.codes());
        w.add(p + ".gate_up_proj_scales", SafetensorsDType.U8, List.of((long) e, 2L * i, h / 32L), guEnc.blockScales());
        w.add(p + ".gate_up_proj_bias", SafetensorsDType.BF16, List.of((long) e, 2L * i), bf16Bytes(guBias));
        w.add(p + ".down_proj_blocks", SafetensorsDType.U8, List.of((long) e, (long) h, i / 32L, 16L), dnEnc.codes());
        w.add(p + ".down_proj_scales", SafetensorsDType.U8, List.of((long) e, (long) h, i / 32L), dnEnc.blockScales());
        w.add(p + ".down_proj_bias", SafetensorsDType.BF16, List.of((long) e, (long) h), bf16Bytes(dnBias));
        w.add(prefix + ".router.weight", SafetensorsDType.BF16, List.of((long) e, (long) h), bf16Bytes(normalBf16(seed + 4, e * h, 0.05)));
        w.write(dir);
        return new GptOssCheckpoint(prefix, e, h, i, guEnc, dnEnc, guBias, dnBias);
    }

    /** {@code n} values of N(0, std^2), each rounded to bf16 (so a BF16 tensor holds them exactly). */
    public static float[] normalBf16(long seed, int n, double std) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] w = new float[n];
        for (int k = 0; k < n; k++) {
            w[k] = Bf16.toFloat(Bf16.fromFloat((float) (r.nextGaussian() * std)));
        }
        return w;
    }

    /** Little-endian bf16 bytes of {@code w}. */
    public static byte[] bf16Bytes(float[] w) {
        ByteBuffer b = ByteBuffer.allocate(2 * w.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : w) {
            b.putShort(Bf16.fromFloat(v));
        }
        return b.array();
    }
}
