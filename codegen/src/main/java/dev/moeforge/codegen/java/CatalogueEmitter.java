package dev.moeforge.codegen.java;

import com.palantir.javapoet.ClassName;
import com.palantir.javapoet.FieldSpec;
import com.palantir.javapoet.JavaFile;
import com.palantir.javapoet.MethodSpec;
import com.palantir.javapoet.TypeSpec;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import javax.lang.model.element.Modifier;

/**
 * Emits {@code BuiltinKernel}: one enum constant per built-in kernel, in catalogue order, holding its
 * canonical text and parsed spec, so callers name a kernel by a constant the compiler checks
 * instead of by a string.
 */
public final class CatalogueEmitter {
    private static final ClassName KERNEL_SPEC = ClassName.get(KernelSpec.class);
    private static final ClassName SPEC_PARSER = ClassName.get("dev.moeforge.dsl.text", "SpecParser");

    private CatalogueEmitter() {}

    /** The enum of {@code specs}; refuses an empty catalogue and two kernels whose constants would collide. */
    public static JavaFile emit(List<KernelSpec> specs, String packageName) {
        if (specs.isEmpty()) {
            throw new IllegalArgumentException("the built-in catalogue has no kernels: add a .moe file");
        }
        TypeSpec.Builder type = TypeSpec.enumBuilder("BuiltinKernel")
                .addModifiers(Modifier.PUBLIC)
                .addJavadoc("The built-in kernel catalogue, generated from the .moe files of module generated; do not edit.\n");
        Map<String, String> seen = new HashMap<>();
        for (KernelSpec s : specs) {
            String constant = constantName(s.name());
            String before = seen.put(constant, s.name());
            if (before != null) {
                throw new IllegalArgumentException("kernels '" + before + "' and '" + s.name() + "' both make the constant " + constant);
            }
            type.addEnumConstant(constant, TypeSpec.anonymousClassBuilder("$S", SpecPrinter.print(s))
                    .addJavadoc("{@code $L}: $L under $L, $L.\n", s.name(), s.problem().kindName(), s.schedule().kind().name(),
                            s.problem().weights().text())
                    .build());
        }
        type.addField(FieldSpec.builder(String.class, "specText", Modifier.PRIVATE, Modifier.FINAL).build())
                .addField(FieldSpec.builder(KERNEL_SPEC, "spec", Modifier.PRIVATE, Modifier.FINAL).build())
                .addMethod(MethodSpec.constructorBuilder().addParameter(String.class, "specText")
                        .addStatement("this.specText = specText")
                        .addStatement("this.spec = $T.parse(specText)", SPEC_PARSER).build())
                .addMethod(MethodSpec.methodBuilder("specText").addModifiers(Modifier.PUBLIC).returns(String.class)
                        .addJavadoc("The kernel's canonical text, for the target it was written for.\n")
                        .addStatement("return specText").build())
                .addMethod(MethodSpec.methodBuilder("spec").addModifiers(Modifier.PUBLIC).returns(KERNEL_SPEC)
                        .addJavadoc("The kernel's spec, validated; the runtime retargets it to the device it loads on.\n")
                        .addStatement("return spec").build())
                .addMethod(MethodSpec.methodBuilder("kernelName").addModifiers(Modifier.PUBLIC).returns(String.class)
                        .addStatement("return spec.name()").build());
        return JavaFile.builder(packageName, type.build()).skipJavaLangImports(true).indent("    ").build();
    }

    /** {@code qwen3_30b_a3b_gate_up} to {@code QWEN3_30B_A3B_GATE_UP}. */
    public static String constantName(String kernelName) {
        String upper = kernelName.toUpperCase(Locale.ROOT);
        return Character.isJavaIdentifierStart(upper.charAt(0)) && upper.charAt(0) != '_' ? upper : "K" + upper;
    }
}
