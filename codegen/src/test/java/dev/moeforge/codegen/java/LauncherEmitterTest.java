package dev.moeforge.codegen.java;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.ExpertLayerSpecs;
import dev.moeforge.dsl.build.OutputCentricBuilder;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The typed Java launchers and the catalogue of spec texts. */
class LauncherEmitterTest {
    private static final String PACKAGE = "dev.moeforge.generated";
    private static final ExpertLayerSpecs QWEN3 = ExpertLayerSpecs.of("qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8),
            GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A);
    private static final ExpertLayerSpecs GPT_OSS = ExpertLayerSpecs.of("gpt_oss_20b", new ExpertShape(2880, 2880, 32, 4),
            GateUpLayout.INTERLEAVED, OutputCentricBuilder.create().tokensPerCta(8).build(), Target.SM_100A);

    @ParameterizedTest(name = "{0} -> {1}")
    @CsvSource({
        "qwen3_30b_a3b_gate_up, Qwen330bA3bGateUp",
        "qwen3_30b_a3b_down, Qwen330bA3bDown",
        "gpt_oss_20b_gate_up, GptOss20bGateUp",
        "mixtral, Mixtral",
        "_lead__and_trail_, LeadAndTrail",
        "3d_kernel, K3dKernel",
        "alreadyCamel, AlreadyCamel",
    })
    void classNameIsUpperCamelCase(String kernel, String className) {
        assertEquals(className, LauncherEmitter.className(kernel));
    }

    @Test
    void gateUpLauncherText() {
        KernelSpec spec = QWEN3.gateUp();
        String text = emit(spec);
        String flat = text.replaceAll("\\s+", " ");
        assertTrue(text.startsWith("package dev.moeforge.generated;\n"), text);
        assertTrue(text.contains("public final class Qwen330bA3bGateUp {"), text);
        assertTrue(text.contains("public static final String KERNEL_NAME = \"qwen3_30b_a3b_gate_up\";"), text);
        assertTrue(flat.contains("public void launch(CudaStream stream, DeviceBuffer x, DeviceBuffer wGateUp, "
                + "DeviceBuffer topkIds, DeviceBuffer inter, int numTokens) {"), text);
        assertTrue(text.contains("handle.launch(stream, numTokens, x, wGateUp, topkIds, inter);"), text);
        assertTrue(text.contains("public static Qwen330bA3bGateUp load(KernelRuntime runtime) {"), text);
        assertTrue(text.contains("return new Qwen330bA3bGateUp(runtime.load(SPEC_TEXT));"), text);
        assertTrue(text.contains("import dev.moeforge.runtime.cuda.CudaStream;"), text);
        assertTrue(text.contains("import dev.moeforge.runtime.cuda.DeviceBuffer;"), text);
        assertTrue(text.contains("import dev.moeforge.runtime.kernel.KernelHandle;"), text);
        assertTrue(text.contains("import dev.moeforge.runtime.kernel.KernelRuntime;"), text);
        assertTrue(text.contains("generated from {@code qwen3.moe}"), text);
    }

    @Test
    void specTextLiteralIsTheCanonicalText() {
        for (KernelSpec spec : List.of(QWEN3.gateUp(), QWEN3.down(), GPT_OSS.gateUp(), GPT_OSS.down())) {
            String text = emit(spec);
            assertEquals(SpecPrinter.print(spec), JavaStringLiterals.fieldValue(text, "SPEC_TEXT"), spec.name());
            assertEquals(spec.name(), JavaStringLiterals.fieldValue(text, "KERNEL_NAME"));
        }
    }

    @Test
    void downLauncherTakesItsParametersInKernelOrder() {
        String text = emit(QWEN3.down());
        String flat = text.replaceAll("\\s+", " ");
        assertTrue(text.contains("public final class Qwen330bA3bDown {"), text);
        assertTrue(flat.contains("public void launch(CudaStream stream, DeviceBuffer inter, DeviceBuffer wDown, "
                + "DeviceBuffer topkIds, DeviceBuffer topkWeights, DeviceBuffer y, int numTokens) {"), text);
        assertTrue(text.contains("handle.launch(stream, numTokens, inter, wDown, topkIds, topkWeights, y);"), text);
    }

    @Test
    void parameterJavadocStatesTypeAndShape() {
        String text = emit(QWEN3.gateUp());
        assertTrue(text.contains("@param x activations, bf16 [M, 2048]"), text);
        assertTrue(text.contains("@param wGateUp gate and up rows of every expert, bf16 [128, 1536, 2048]"), text);
        assertTrue(text.contains("@param topkIds routed expert of each (token, slot), int32 [M, 8]"), text);
        assertTrue(text.contains("@param inter activation of each (token, slot, neuron), bf16 [M, 8, 768]"), text);
        assertTrue(text.contains("@param numTokens tokens M"), text);
    }

    @Test
    void sameSpecEmitsTheSameText() {
        assertEquals(emit(QWEN3.gateUp()), emit(QWEN3.gateUp()));
        KernelSpec rebuilt = ExpertLayerSpecs.of("qwen3_30b_a3b", new ExpertShape(2048, 768, 128, 8),
                GateUpLayout.STACKED, OutputCentricBuilder.create().build(), Target.SM_90A).gateUp();
        assertEquals(emit(QWEN3.gateUp()), emit(rebuilt));
    }

    @Test
    void catalogueIsAnEnumOfTheSpecTextsInOrder() {
        List<KernelSpec> specs = List.of(QWEN3.gateUp(), QWEN3.down(), GPT_OSS.down(), GPT_OSS.gateUp());
        String text = CatalogueEmitter.emit(specs, PACKAGE).toString();
        assertTrue(text.startsWith("package dev.moeforge.generated;\n"), text);
        assertTrue(text.contains("public enum BuiltinKernel {"), text);
        int previous = -1;
        for (KernelSpec spec : specs) {
            String marker = CatalogueEmitter.constantName(spec.name()) + "(";
            int start = text.indexOf(marker);
            assertTrue(start > previous, marker + " missing or out of order in:\n" + text);
            assertEquals(List.of(SpecPrinter.print(spec)), JavaStringLiterals.values(text, start + marker.length(), ')'));
            previous = start;
        }
        assertEquals(text, CatalogueEmitter.emit(specs, PACKAGE).toString(), "same specs, same text");
    }

    @Test
    void anEmptyCatalogueOrCollidingConstantsAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> CatalogueEmitter.emit(List.of(), PACKAGE));
        KernelSpec lower = QWEN3.gateUp();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> CatalogueEmitter.emit(List.of(lower, lower.withName("QWEN3_30b_a3b_gate_up")), PACKAGE));
        assertTrue(e.getMessage().contains("QWEN3_30B_A3B_GATE_UP"), e.getMessage());
    }

    private static String emit(KernelSpec spec) {
        return LauncherEmitter.emit(spec, PACKAGE, "qwen3.moe").toString();
    }
}
