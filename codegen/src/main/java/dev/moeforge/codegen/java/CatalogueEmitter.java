package dev.moeforge.codegen.java;

import com.palantir.javapoet.ClassName;
import com.palantir.javapoet.CodeBlock;
import com.palantir.javapoet.FieldSpec;
import com.palantir.javapoet.JavaFile;
import com.palantir.javapoet.ParameterizedTypeName;
import com.palantir.javapoet.TypeSpec;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.ArrayList;
import java.util.List;
import javax.lang.model.element.Modifier;

/** Emits {@code BuiltinCatalogue}: the canonical text of every built-in kernel, in catalogue order. */
public final class CatalogueEmitter {
    private CatalogueEmitter() {}

    public static JavaFile emit(List<KernelSpec> specs, String packageName) {
        List<CodeBlock> texts = new ArrayList<>();
        for (KernelSpec s : specs) {
            texts.add(CodeBlock.of("$S", SpecPrinter.print(s)));
        }
        TypeSpec type = TypeSpec.classBuilder("BuiltinCatalogue")
                .addModifiers(Modifier.PUBLIC, Modifier.FINAL)
                .addJavadoc("The built-in kernel catalogue, generated from the .moe files of module generated; do not edit.\n")
                .addField(FieldSpec.builder(ParameterizedTypeName.get(ClassName.get(List.class), ClassName.get(String.class)),
                                "SPEC_TEXTS", Modifier.PUBLIC, Modifier.STATIC, Modifier.FINAL)
                        .initializer("$T.of(\n$L)", List.class, CodeBlock.join(texts, ",\n")).build())
                .addMethod(com.palantir.javapoet.MethodSpec.constructorBuilder().addModifiers(Modifier.PRIVATE).build())
                .build();
        return JavaFile.builder(packageName, type).skipJavaLangImports(true).indent("    ").build();
    }
}
