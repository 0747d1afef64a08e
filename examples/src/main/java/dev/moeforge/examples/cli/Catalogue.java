package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.generated.BuiltinKernel;
import java.util.Arrays;
import java.util.List;

/** The built-in kernels' specs, in catalogue order. */
final class Catalogue {
    private Catalogue() {}

    static List<KernelSpec> specs() {
        return Arrays.stream(BuiltinKernel.values()).map(BuiltinKernel::spec).toList();
    }
}
