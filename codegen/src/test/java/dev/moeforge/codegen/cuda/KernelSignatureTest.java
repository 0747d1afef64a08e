package dev.moeforge.codegen.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.codegen.cuda.KernelParam.Role;
import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.GateFunction;
import dev.moeforge.dsl.ir.epilogue.GatedActivation;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.SplitDown;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The parameters of the generated kernels, in launch order, with their shapes and CUDA declarations. */
class KernelSignatureTest {
    private static final int M = KernelParam.TOKENS;
    private static final ExpertLayerSpecs QWEN3 = ExpertLayerSpecs.of("qwen3", new ExpertShape(2048, 768, 128, 8),
            GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A);

    @Test
    void gateUpParameters() {
        List<KernelParam> p = KernelSignature.of(QWEN3.gateUp()).params();
        assertEquals(List.of("x", "w_gate_up", "topk_ids", "inter", "num_tokens"), p.stream().map(KernelParam::name).toList());
        assertParam(p.get(0), "x", Role.INPUT, DType.BF16, List.of(M, 2048));
        assertParam(p.get(1), "w_gate_up", Role.WEIGHTS, DType.BF16, List.of(128, 2 * 768, 2048));
        assertParam(p.get(2), "topk_ids", Role.ROUTING, DType.INT32, List.of(M, 8));
        assertParam(p.get(3), "inter", Role.OUTPUT, DType.BF16, List.of(M, 8, 768));
        assertParam(p.get(4), "num_tokens", Role.TOKEN_COUNT, DType.INT32, List.of());
    }

    @Test
    void downParameters() {
        List<KernelParam> p = KernelSignature.of(QWEN3.down()).params();
        assertEquals(List.of("inter", "w_down", "topk_ids", "topk_weights", "y", "num_tokens"),
                p.stream().map(KernelParam::name).toList());
        assertParam(p.get(0), "inter", Role.INPUT, DType.BF16, List.of(M, 8, 768));
        assertParam(p.get(1), "w_down", Role.WEIGHTS, DType.BF16, List.of(128, 2048, 768));
        assertParam(p.get(2), "topk_ids", Role.ROUTING, DType.INT32, List.of(M, 8));
        assertParam(p.get(3), "topk_weights", Role.ROUTING, DType.FP32, List.of(M, 8));
        assertParam(p.get(4), "y", Role.OUTPUT, DType.BF16, List.of(M, 2048));
        assertParam(p.get(5), "num_tokens", Role.TOKEN_COUNT, DType.INT32, List.of());
    }

    /**
     * expert_mlp: gate_up's weights as gate_up takes them, down's as SplitDownWeights lays them out
     * (as many bytes as the source: codes E*H*I/2, E4M3 scales E*H*I/16, E8M0 E*H*I/32, FP32 4*E*H*I/128).
     */
    @Test
    void mlpParametersHoldTheRepackedDown() {
        ExpertShape shape = new ExpertShape(2048, 768, 128, 8);
        for (WeightFormat f : List.of(WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.INT4_CHANNEL, WeightFormat.INT4_GROUP128)) {
            KernelSpec spec = new KernelSpec("mlp", new Problem.ExpertMlp(shape, f, DType.BF16, GateUpLayout.STACKED),
                    new SplitDown(8, 2, 4, 3, false), new Store(new GatedActivation(GateFunction.SILU, Acc.GATE, Acc.UP),
                    DType.BF16), Target.SM_90A);
            KernelSignature sig = KernelSignature.of(spec);
            KernelParam codes = sig.param("w_down");
            assertEquals(List.of(128, 48, 32, 512), codes.shape(), f.text());
            assertEquals(128L * 2048 * 768 / 2, codes.elements(1), f.text());
            long scales = switch (f.blockScale()) {
                case NONE -> 0;
                case E4M3_PER_16 -> 128L * 2048 * 768 / 16;
                case E8M0_PER_32 -> 128L * 2048 * 768 / 32;
                case F32_GROUP_128 -> 128L * 2048 * 768 / 128;
                case F32_BLOCK_128X128 -> throw new AssertionError();
            };
            if (scales > 0) {
                assertEquals(scales, sig.param("w_down_scales").elements(1), f.text());
            }
            List<String> names = sig.params().stream().map(KernelParam::name).toList();
            assertEquals(List.of("topk_ids", "topk_weights", "y", "y_zero", "num_tokens"), names.subList(names.size() - 5, names.size()));
            assertParam(sig.param("y"), "y", Role.OUTPUT, DType.FP32, List.of(M, 2048));
            assertParam(sig.param("y_zero"), "y_zero", Role.OUTPUT, DType.FP32, List.of(M, 2048));
        }
    }

    @Test
    void gateUpOutputIsDownInput() {
        KernelParam out = KernelSignature.of(QWEN3.gateUp()).param("inter");
        KernelParam in = KernelSignature.of(QWEN3.down()).param("inter");
        assertEquals(out.elementType(), in.elementType());
        assertEquals(out.shape(), in.shape());
    }

    @Test
    void cudaDeclarations() {
        assertEquals(List.of(
                        "const __nv_bfloat16* __restrict__ x",
                        "const __nv_bfloat16* __restrict__ w_gate_up",
                        "const int* __restrict__ topk_ids",
                        "__nv_bfloat16* __restrict__ inter",
                        "int num_tokens"),
                KernelSignature.of(QWEN3.gateUp()).params().stream().map(KernelParam::cudaDeclaration).toList());
        assertEquals(List.of(
                        "const __nv_bfloat16* __restrict__ inter",
                        "const __nv_bfloat16* __restrict__ w_down",
                        "const int* __restrict__ topk_ids",
                        "const float* __restrict__ topk_weights",
                        "__nv_bfloat16* __restrict__ y",
                        "int num_tokens"),
                KernelSignature.of(QWEN3.down()).params().stream().map(KernelParam::cudaDeclaration).toList());
        assertEquals("const __half* __restrict__ h",
                new KernelParam("h", Role.INPUT, DType.FP16, List.of(M), "").cudaDeclaration());
    }

    @Test
    void elementsSubstituteTheTokenCount() {
        KernelSignature s = KernelSignature.of(QWEN3.gateUp());
        assertEquals(3L * 2048, s.param("x").elements(3));
        assertEquals(128L * 1536 * 2048, s.param("w_gate_up").elements(3), "weights do not depend on M");
        assertEquals(128L * 1536 * 2048, s.param("w_gate_up").elements(1000));
        assertEquals(5L * 8, s.param("topk_ids").elements(5));
        assertEquals(5L * 8 * 768, s.param("inter").elements(5));
        assertEquals(0L, s.param("inter").elements(0));
        assertEquals(1L, s.param("num_tokens").elements(7), "a scalar is one element");
    }

    @Test
    void elementsOfLargeTensorsDoNotOverflowInt() {
        ExpertLayerSpecs big = ExpertLayerSpecs.of("big", new ExpertShape(8192, 8192, 64, 8),
                GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A);
        assertEquals(64L * 16384 * 8192, KernelSignature.of(big.gateUp()).param("w_gate_up").elements(1));
        assertEquals(100_000L * 8 * 8192, KernelSignature.of(big.down()).param("inter").elements(100_000));
    }

    @Test
    void shapeText() {
        KernelSignature s = KernelSignature.of(QWEN3.down());
        assertEquals("[M, 8, 768]", s.param("inter").shapeText());
        assertEquals("[128, 2048, 768]", s.param("w_down").shapeText());
        assertEquals("[]", s.param("num_tokens").shapeText());
    }

    @Test
    void tensorsAreEveryParameterButTheTokenCount() {
        KernelSignature s = KernelSignature.of(QWEN3.down());
        assertEquals(List.of("inter", "w_down", "topk_ids", "topk_weights", "y"),
                s.tensors().stream().map(KernelParam::name).toList());
        assertFalse(s.param(KernelSignature.TOKEN_COUNT).isTensor());
        assertTrue(s.param("y").isTensor());
    }

    @Test
    void unknownParameterIsRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KernelSignature.of(QWEN3.gateUp()).param("y"));
        assertTrue(e.getMessage().startsWith("no parameter 'y' in "), e.getMessage());
    }

    @Test
    void parameterListsAreImmutable() {
        KernelSignature s = KernelSignature.of(QWEN3.gateUp());
        assertThrows(UnsupportedOperationException.class, () -> s.params().clear());
        assertThrows(UnsupportedOperationException.class, () -> s.param("x").shape().clear());
    }

    private static void assertParam(KernelParam p, String name, Role role, DType type, List<Integer> shape) {
        assertEquals(name, p.name());
        assertEquals(role, p.role(), name);
        assertEquals(type, p.elementType(), name);
        assertEquals(shape, p.shape(), name);
        assertFalse(p.description().isBlank(), name);
    }
}
