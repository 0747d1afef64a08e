package dev.moeforge.examples.cli;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecParser;
import dev.moeforge.generated.BuiltinCatalogue;
import java.util.List;

/** The built-in kernels, parsed from the canonical texts the build generated. */
final class Catalogue {
    private Catalogue() {}

    static List<KernelSpec> specs() {
        return BuiltinCatalogue.SPEC_TEXTS.stream().map(SpecParser::parse).toList();
    }

    static KernelSpec named(String name) {
        return specs().stream().filter(s -> s.name().equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no built-in kernel '" + name + "'; the catalogue has "
                        + specs().stream().map(KernelSpec::name).toList()));
    }
}
