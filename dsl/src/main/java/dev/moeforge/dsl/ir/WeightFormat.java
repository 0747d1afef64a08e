package dev.moeforge.dsl.ir;

/**
 * How expert weights are encoded in memory, with the bit and scale layouts of the checkpoints that
 * ship them (OCP MX v1.0, NVIDIA ModelOpt's NVFP4, DeepSeek-V3's FP8 blocks). Codes are row-major with K
 * (the reduction dimension) contiguous, {@code [E][N][K * bits / 8]}: one output row is one
 * contiguous run of memory, which is what a warp that owns one output wants. Sub-byte codes pack
 * element {@code 2j} into the low nibble of byte {@code j}.
 *
 * <p>Scales come in at most two tensors beside the codes: {@link #blockScale() K-block scales}
 * (multiplying a block of a row's codes) and {@link #rowScale() row scales} (FP32, multiplying a
 * whole row: one per row, or one per expert and projection).
 */
public sealed interface WeightFormat permits WeightFormat.Bf16, WeightFormat.Fp8, WeightFormat.Mxfp8,
        WeightFormat.Nvfp4, WeightFormat.Mxfp4, WeightFormat.Int8, WeightFormat.Int4 {

    /** The element encoding of the codes. */
    enum Element {
        /** bfloat16. */
        BF16(16),
        /** FP8 E4M3 ("fn"): bias 7, max 448, S.1111.111 NaN, no infinity. */
        E4M3(8),
        /** FP4 E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. */
        E2M1(4),
        /** Two's complement 8-bit integer. */
        INT8(8),
        /** Two's complement 4-bit integer. */
        INT4(4);

        private final int bits;

        Element(int bits) {
            this.bits = bits;
        }

        public int bits() {
            return bits;
        }
    }

    /** The K-block scale tensor of a format. */
    enum BlockScale {
        NONE(0, 0, false),
        /** FP32 {@code [E][ceil(N/128)][ceil(K/128)]}, one per 128 x 128 block, multiplied (DeepSeek-V3 {@code weight_scale_inv}). */
        F32_BLOCK_128X128(128, 4, true),
        /** FP32 {@code [E][N][K/128]}, one per 128 consecutive elements of a row. */
        F32_GROUP_128(128, 4, false),
        /** E4M3 {@code [E][N][K/16]}, linear (not swizzled): NVFP4 {@code weight_scale}. */
        E4M3_PER_16(16, 1, false),
        /** E8M0 {@code [E][N][K/32]}: byte b is 2^(b-127), 0xFF NaN (OCP MX). */
        E8M0_PER_32(32, 1, false);

        private final int block;
        private final int bytes;
        private final boolean blockRows;

        BlockScale(int block, int bytes, boolean blockRows) {
            this.block = block;
            this.bytes = bytes;
            this.blockRows = blockRows;
        }

        /** Elements of a row per scale (0: no block scales). */
        public int block() {
            return block;
        }

        /** Bytes of one scale. */
        public int bytes() {
            return bytes;
        }

        /** Whether a scale also spans {@link #block()} rows (128 x 128 blocks). */
        public boolean blockRows() {
            return blockRows;
        }

        /** Scales per expert for an {@code [N][K]} matrix. */
        public long perExpert(int rows, int cols) {
            return switch (this) {
                case NONE -> 0;
                case F32_BLOCK_128X128 -> (long) Math.ceilDiv(rows, block) * Math.ceilDiv(cols, block);
                case F32_GROUP_128, E4M3_PER_16, E8M0_PER_32 -> (long) rows * (cols / block);
            };
        }
    }

    /** The FP32 scale of a whole row. */
    enum RowScale {
        NONE,
        /** FP32 {@code [E][N]}, one per output row (channel). */
        PER_ROW,
        /** FP32 {@code [E][P]}, one per expert and projection (NVFP4 {@code weight_scale_2}; gate and up keep their own). */
        PER_TENSOR
    }

    /** The name in the textual form. */
    default String text() {
        return switch (this) {
            case Bf16 _ -> "bf16";
            case Fp8 f -> "fp8_e4m3_" + f.scaling().scales().text();
            case Mxfp8 _ -> "mxfp8";
            case Nvfp4 _ -> "nvfp4";
            case Mxfp4 _ -> "mxfp4";
            case Int8 i -> "int8_" + i.scaling().scales().text();
            case Int4 i -> "int4_" + i.scaling().scales().text();
        };
    }

    default Element element() {
        return switch (this) {
            case Bf16 _ -> Element.BF16;
            case Fp8 _, Mxfp8 _ -> Element.E4M3;
            case Nvfp4 _, Mxfp4 _ -> Element.E2M1;
            case Int8 _ -> Element.INT8;
            case Int4 _ -> Element.INT4;
        };
    }

    default BlockScale blockScale() {
        return switch (this) {
            case Bf16 _ -> BlockScale.NONE;
            case Fp8 f -> f.scaling().scales().blockScale();
            case Mxfp8 _, Mxfp4 _ -> BlockScale.E8M0_PER_32;
            case Nvfp4 _ -> BlockScale.E4M3_PER_16;
            case Int8 i -> i.scaling().scales().blockScale();
            case Int4 i -> i.scaling().scales().blockScale();
        };
    }

    default RowScale rowScale() {
        return switch (this) {
            case Bf16 _, Mxfp8 _, Mxfp4 _ -> RowScale.NONE;
            case Fp8 f -> f.scaling().scales().rowScale();
            case Nvfp4 _ -> RowScale.PER_TENSOR;
            case Int8 i -> i.scaling().scales().rowScale();
            case Int4 i -> i.scaling().scales().rowScale();
        };
    }

    /** Bytes of the codes of one row of {@code k} elements (scales not included). */
    default long rowBytes(int k) {
        return (long) k * element().bits() / 8;
    }

    /** Elements per load of {@code loadBytes} bytes of codes. */
    default int elementsPerLoad(int loadBytes) {
        return loadBytes * 8 / element().bits();
    }

    /** A scaling choice of a format family: its name suffix and the scale tensors it brings. */
    record Scales(String text, BlockScale blockScale, RowScale rowScale) {
        /** One FP32 scale per output row. */
        public static final Scales CHANNEL = new Scales("channel", BlockScale.NONE, RowScale.PER_ROW);
    }

    /** Plain bfloat16: the upper half of an IEEE binary32, no scales. */
    record Bf16() implements WeightFormat {}

    /** How FP8 weights are scaled: one FP32 scale per output channel, or per 128 x 128 block (DeepSeek-V3). */
    enum Fp8Scaling {
        CHANNEL(Scales.CHANNEL),
        BLOCK_128X128(new Scales("block128", BlockScale.F32_BLOCK_128X128, RowScale.NONE));

        private final Scales scales;

        Fp8Scaling(Scales scales) {
            this.scales = scales;
        }

        public Scales scales() {
            return scales;
        }
    }

    /** FP8 E4M3 codes with FP32 scales per output channel or per 128 x 128 block. */
    record Fp8(Fp8Scaling scaling) implements WeightFormat {}

    /** OCP MXFP8: E4M3 codes, one E8M0 scale per 32 along K. */
    record Mxfp8() implements WeightFormat {}

    /** NVIDIA NVFP4 (ModelOpt): E2M1 codes, one E4M3 scale per 16 along K, one FP32 scale per tensor. */
    record Nvfp4() implements WeightFormat {}

    /** OCP MXFP4 (gpt-oss {@code _blocks}/{@code _scales}): E2M1 codes, one E8M0 scale per 32 along K. */
    record Mxfp4() implements WeightFormat {}

    /** How weight-only integers are scaled: one FP32 scale per output channel, or per group of 128 along K. */
    enum IntScaling {
        CHANNEL(Scales.CHANNEL),
        GROUP_128(new Scales("group128", BlockScale.F32_GROUP_128, RowScale.NONE));

        private final Scales scales;

        IntScaling(Scales scales) {
            this.scales = scales;
        }

        public Scales scales() {
            return scales;
        }
    }

    /** Symmetric INT8 weight-only, FP32 scales per channel or per group of 128 along K. */
    record Int8(IntScaling scaling) implements WeightFormat {}

    /** Symmetric INT4 weight-only (two per byte), FP32 scales per channel or per group of 128 along K. */
    record Int4(IntScaling scaling) implements WeightFormat {}

    WeightFormat BF16 = new Bf16();
    WeightFormat FP8_CHANNEL = new Fp8(Fp8Scaling.CHANNEL);
    WeightFormat FP8_BLOCK128 = new Fp8(Fp8Scaling.BLOCK_128X128);
    WeightFormat MXFP8 = new Mxfp8();
    WeightFormat NVFP4 = new Nvfp4();
    WeightFormat MXFP4 = new Mxfp4();
    WeightFormat INT8_CHANNEL = new Int8(IntScaling.CHANNEL);
    WeightFormat INT8_GROUP128 = new Int8(IntScaling.GROUP_128);
    WeightFormat INT4_CHANNEL = new Int4(IntScaling.CHANNEL);
    WeightFormat INT4_GROUP128 = new Int4(IntScaling.GROUP_128);

    /** Every format, in the order the docs and benchmarks list them. */
    java.util.List<WeightFormat> ALL = java.util.List.of(BF16, FP8_CHANNEL, FP8_BLOCK128, MXFP8, NVFP4, MXFP4,
            INT8_CHANNEL, INT8_GROUP128, INT4_CHANNEL, INT4_GROUP128);

    /** The format written {@code text}, e.g. {@code nvfp4}; an unknown one is refused with the list of known ones. */
    static WeightFormat fromText(String text) {
        return ALL.stream().filter(f -> f.text().equals(text)).findFirst().orElseThrow(() -> new IllegalArgumentException(
                "unknown format '" + text + "'; known: " + String.join(", ", ALL.stream().map(WeightFormat::text).toList())));
    }
}
