package dev.moeforge.examples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.generated.BuiltinKernel;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** How try groups kernels into units, what it compares each with, and each unit's inputs and reference (no GPU needed). */
class TrialUnitTest {

    @Test
    void kernelsFormLayersWhereAGateUpAndADownShareAShapeAndRunAloneElsewhere(@TempDir Path tmp) throws Exception {
        List<KernelSpec> small = kernels(CliRun.resource(tmp, "small_layer.moe"));
        List<KernelSpec> every = kernels(CliRun.resource(tmp, "every_unit.moe"));
        List<TrialUnit> units = TrialUnit.of(java.util.stream.Stream.concat(every.stream(), small.stream()).toList());
        assertEquals(List.of("lone_gate_up", "small_mlp", "small_router", "normed_proj", "normed_router", "small_gate_up + small_down",
                "lone_down"), units.stream().map(TrialUnit::name).toList());
        assertInstanceOf(TrialUnit.Layer.class, units.get(5));
        assertEquals("gate_up alone (H=256, I=128, E=8, top-4, int8_channel)", units.get(0).describe());
        assertEquals("router (H=256, E=32)", units.get(2).describe());

        // of several downs of its shape, a gate_up takes its namesake
        KernelSpec gateUp = small.get(0);
        KernelSpec down = small.get(1);
        List<TrialUnit> pairs = TrialUnit.of(List.of(gateUp.withName("a_gate_up"), gateUp.withName("b_gate_up"),
                down.withName("b_down"), down.withName("a_down")));
        assertEquals(List.of("a_gate_up + a_down", "b_gate_up + b_down"), pairs.stream().map(TrialUnit::name).toList());
    }

    @Test
    void everyUnitDrawsItsInputsAndComputesItsReference(@TempDir Path tmp) throws Exception {
        for (TrialUnit unit : TrialUnit.of(kernels(CliRun.resource(tmp, "every_unit.moe")))) {
            for (int tokens : new int[] {1, 3}) {
                assertEquals(tokens, unit.prepare(tokens, 11).tokens, unit.name());
            }
        }
    }

    @Test
    void aCatalogueLayerIsComparedWithTheCataloguePairsOfItsFunction() {
        TrialUnit layer = new TrialUnit.Layer(BuiltinKernel.QWEN3_30B_A3B_GATE_UP.spec().withName("mine_gate_up"),
                BuiltinKernel.QWEN3_30B_A3B_DOWN.spec().withName("mine_down"));
        assertEquals(List.of("qwen3_30b_a3b_gate_up + qwen3_30b_a3b_down", "qwen3_30b_a3b_gate_up_m16 + qwen3_30b_a3b_down_m16",
                        "qwen3_30b_a3b_gate_up_m64 + qwen3_30b_a3b_down_m64", "qwen3_30b_a3b_gate_up_t32 + qwen3_30b_a3b_down_t32",
                        "qwen3_30b_a3b_gate_up_t8 + qwen3_30b_a3b_down_t8"),
                layer.catalogueVariants(Catalogue.specs()).stream().map(TrialUnit::name).toList());
        TrialUnit router = new TrialUnit.Single(BuiltinKernel.GPT_OSS_20B_ROUTER.spec().withName("mine_router"));
        assertEquals(List.of("gpt_oss_20b_router"),  // its prefill router also counts experts: another problem
                router.catalogueVariants(Catalogue.specs()).stream().map(TrialUnit::name).toList());
    }

    @Test
    void neighboursChangeOneKernelsScheduleBesideTheOthers(@TempDir Path tmp) throws Exception {
        TrialUnit layer = TrialUnit.of(kernels(CliRun.resource(tmp, "small_layer.moe"))).getFirst();
        List<TrialUnit> neighbours = layer.neighbours(Target.SM_90A);
        assertTrue(neighbours.size() > 2, neighbours.toString());
        for (TrialUnit n : neighbours) {
            boolean gateUpChanged = !n.kernels().get(0).schedule().equals(layer.kernels().get(0).schedule());
            boolean downChanged = !n.kernels().get(1).schedule().equals(layer.kernels().get(1).schedule());
            assertTrue(gateUpChanged != downChanged, n.name());
            assertTrue(n.name().matches("small_gate_up(_n\\d+)? \\+ small_down(_n\\d+)?"), n.name());
        }
    }

    private static List<KernelSpec> kernels(Path file) throws Exception {
        return SpecFiles.read(List.of(file)).stream().map(SpecFiles.Located::spec).toList();
    }
}
