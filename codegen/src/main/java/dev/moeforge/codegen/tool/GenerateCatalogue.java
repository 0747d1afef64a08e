package dev.moeforge.codegen.tool;

import dev.moeforge.codegen.cuda.CudaEmitter;
import dev.moeforge.codegen.cuda.DeviceHeader;
import dev.moeforge.codegen.cuda.GeneratedKernel;
import dev.moeforge.codegen.java.CatalogueEmitter;
import dev.moeforge.codegen.java.LauncherEmitter;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * Build-time generator of the built-in catalogue: reads every {@code .moe} file of a directory
 * (sorted by name), and writes a typed launcher per kernel plus {@code BuiltinCatalogue} into a
 * Java source root, and the CUDA source of each kernel (for its spec's target) with the device
 * header into a CUDA directory. Run by module {@code generated} at generate-sources.
 *
 * <p>Usage: {@code GenerateCatalogue SPEC_DIR JAVA_OUT CUDA_OUT PACKAGE}
 */
public final class GenerateCatalogue {
    private GenerateCatalogue() {}

    public static void main(String[] args) throws IOException {
        if (args.length != 4) {
            System.err.println("usage: GenerateCatalogue SPEC_DIR JAVA_OUT CUDA_OUT PACKAGE");
            System.exit(2);
        }
        Path specDir = Path.of(args[0]);
        Path javaOut = Path.of(args[1]);
        Path cudaOut = Path.of(args[2]);
        String pkg = args[3];
        List<KernelSpec> specs = new ArrayList<>();
        List<String> sources = new ArrayList<>();
        for (Path file : specFiles(specDir)) {
            for (KernelSpec s : SpecParser.parseAll(Files.readString(file, StandardCharsets.UTF_8), file.getFileName().toString())) {
                specs.add(s);
                sources.add(file.getFileName().toString());
            }
        }
        Files.createDirectories(cudaOut);
        for (int i = 0; i < specs.size(); i++) {
            LauncherEmitter.emit(specs.get(i), pkg, sources.get(i)).writeTo(javaOut);
            GeneratedKernel k = CudaEmitter.emit(specs.get(i));
            Files.writeString(cudaOut.resolve(k.fileName()), k.source(), StandardCharsets.UTF_8);
        }
        for (DeviceHeader header : DeviceHeader.values()) {
            Files.writeString(cudaOut.resolve(header.fileName()), header.text(), StandardCharsets.UTF_8);
        }
        CatalogueEmitter.emit(specs, pkg).writeTo(javaOut);
        System.out.println("MoeForge: generated " + specs.size() + " launchers and kernels from " + specDir);
    }

    /** The catalogue's spec files, sorted by name so the catalogue order is stable. */
    public static List<Path> specFiles(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().endsWith(".moe")).sorted().toList();
        }
    }
}
