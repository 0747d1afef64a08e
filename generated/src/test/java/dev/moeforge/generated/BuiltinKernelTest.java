package dev.moeforge.generated;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.codegen.java.LauncherEmitter;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.dsl.text.SpecPrinter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The generated catalogue against the spec files it was generated from, read here on their own:
 * one constant per kernel of every .moe file, in file-name order, each holding the spec its file
 * declares, and a launcher per constant.
 */
class BuiltinKernelTest {

    /** Surefire runs in the module's directory. */
    private static final Path SPECS = Path.of("src", "main", "specs");

    /** Every kernel of every spec file, files in name order, kernels in file order. */
    private static List<KernelSpec> specsOnDisk() throws IOException {
        List<KernelSpec> specs = new ArrayList<>();
        try (Stream<Path> files = Files.list(SPECS)) {
            for (Path f : files.sorted().toList()) {
                List<KernelSpec> declared = SpecParser.parseAll(Files.readString(f, StandardCharsets.UTF_8), f.getFileName().toString());
                assertFalse(declared.isEmpty(), f + " declares no kernel");
                specs.addAll(declared);
            }
        }
        return specs;
    }

    @Test
    void everyFileInTheSpecFolderIsASpec() throws IOException {
        // a file the generator skips for its name (".MOE", ".moe.bak") would drop its kernels silently
        try (Stream<Path> files = Files.list(SPECS)) {
            List<String> others = files.map(p -> p.getFileName().toString()).filter(n -> !n.endsWith(".moe")).toList();
            assertTrue(others.isEmpty(), "not .moe files in " + SPECS + ": " + others);
        }
    }

    @Test
    void oneConstantPerSpecInFileOrderHoldingThatSpec() throws IOException {
        List<KernelSpec> onDisk = specsOnDisk();
        BuiltinKernel[] constants = BuiltinKernel.values();
        assertTrue(onDisk.size() >= 45, "only " + onDisk.size() + " specs under " + SPECS.toAbsolutePath());
        assertEquals(onDisk.stream().map(KernelSpec::name).toList(),
                java.util.Arrays.stream(constants).map(BuiltinKernel::kernelName).toList());
        for (int i = 0; i < constants.length; i++) {
            BuiltinKernel k = constants[i];
            KernelSpec file = onDisk.get(i);
            assertEquals(file, k.spec(), k + ": the constant's spec is not its file's");
            assertEquals(SpecPrinter.print(file), k.specText(), k + ": the constant's text is not its file's spec printed");
            assertEquals(k.spec(), SpecParser.parse(k.specText()), k + ": its text does not parse back to its spec");
            assertEquals(k.spec().name(), k.kernelName());
            assertEquals(k.kernelName().toUpperCase(Locale.ROOT), k.name(), "constant named after its kernel");
        }
    }

    @Test
    void kernelNamesAreUnique() {
        Set<String> seen = new HashSet<>();
        for (BuiltinKernel k : BuiltinKernel.values()) {
            assertTrue(seen.add(k.kernelName()), "two constants name " + k.kernelName());
        }
    }

    @Test
    void eachConstantHasItsLauncher() throws ReflectiveOperationException {
        for (BuiltinKernel k : BuiltinKernel.values()) {
            Class<?> launcher = Class.forName(BuiltinKernel.class.getPackageName() + "." + LauncherEmitter.className(k.kernelName()));
            assertEquals(k.kernelName(), launcher.getField("KERNEL_NAME").get(null), launcher.getName());
            assertEquals(k.specText(), launcher.getField("SPEC_TEXT").get(null), launcher.getName());
        }
    }
}
