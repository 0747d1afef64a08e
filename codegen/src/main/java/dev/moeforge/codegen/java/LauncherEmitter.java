package dev.moeforge.codegen.java;

import com.palantir.javapoet.ClassName;
import com.palantir.javapoet.CodeBlock;
import com.palantir.javapoet.FieldSpec;
import com.palantir.javapoet.JavaFile;
import com.palantir.javapoet.MethodSpec;
import com.palantir.javapoet.ParameterSpec;
import com.palantir.javapoet.TypeSpec;
import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecPrinter;
import java.util.ArrayList;
import java.util.List;
import javax.lang.model.element.Modifier;

/**
 * Emits one typed Java launcher per kernel: its parameters are named and ordered from the
 * spec's {@link KernelSignature}, so callers cannot swap two buffers, and the runtime checks
 * each buffer's type and size against the spec before the launch.
 */
public final class LauncherEmitter {
    static final String RUNTIME = "dev.moeforge.runtime.kernel";
    static final ClassName KERNEL_RUNTIME = ClassName.get(RUNTIME, "KernelRuntime");
    static final ClassName KERNEL_HANDLE = ClassName.get(RUNTIME, "KernelHandle");
    static final ClassName STREAM = ClassName.get("dev.moeforge.runtime.cuda", "CudaStream");
    static final ClassName BUFFER = ClassName.get("dev.moeforge.runtime.cuda", "DeviceBuffer");

    private LauncherEmitter() {}

    /** The launcher class for {@code spec} in {@code packageName}. */
    public static JavaFile emit(KernelSpec spec, String packageName, String sourceName) {
        KernelSignature signature = KernelSignature.of(spec);
        String className = className(spec.name());
        ClassName self = ClassName.get(packageName, className);
        String specText = SpecPrinter.print(spec);

        MethodSpec.Builder launch = MethodSpec.methodBuilder("launch")
                .addModifiers(Modifier.PUBLIC)
                .addJavadoc("Enqueues the kernel on {@code stream} for {@code numTokens} tokens; buffers are checked against the spec first.\n\n")
                .addParameter(STREAM, "stream");
        List<CodeBlock> args = new ArrayList<>();
        for (KernelParam p : signature.params()) {
            String name = camel(p.name());
            switch (p.role()) {
                case INPUT, WEIGHTS, ROUTING, OUTPUT, WORKSPACE -> {
                    launch.addParameter(ParameterSpec.builder(BUFFER, name).build());
                    launch.addJavadoc("@param $N $L, $L $L\n", name, p.description(), p.elementType().text(), p.shapeText());
                    args.add(CodeBlock.of("$N", name));
                }
                case TOKEN_COUNT -> {
                    launch.addParameter(int.class, name);
                    launch.addJavadoc("@param $N $L\n", name, p.description());
                }
                case TENSOR_MAP -> { }  // the handle encodes it from the weight's buffer
            }
        }
        launch.addStatement("handle.launch(stream, numTokens, $L)", CodeBlock.join(args, ", "));

        TypeSpec type = TypeSpec.classBuilder(className)
                .addModifiers(Modifier.PUBLIC, Modifier.FINAL)
                .addJavadoc("Typed launcher of the built-in kernel {@code $L}, generated from {@code $L}; do not edit.\n",
                        spec.name(), sourceName)
                .addField(FieldSpec.builder(String.class, "KERNEL_NAME", Modifier.PUBLIC, Modifier.STATIC, Modifier.FINAL)
                        .initializer("$S", spec.name()).build())
                .addField(FieldSpec.builder(String.class, "SPEC_TEXT", Modifier.PUBLIC, Modifier.STATIC, Modifier.FINAL)
                        .addJavadoc("The spec's canonical text; the runtime retargets it to the device it loads on.\n")
                        .initializer("$S", specText).build())
                .addField(FieldSpec.builder(KERNEL_HANDLE, "handle", Modifier.PRIVATE, Modifier.FINAL).build())
                .addMethod(MethodSpec.constructorBuilder().addModifiers(Modifier.PRIVATE)
                        .addParameter(KERNEL_HANDLE, "handle").addStatement("this.handle = handle").build())
                .addMethod(MethodSpec.methodBuilder("load").addModifiers(Modifier.PUBLIC, Modifier.STATIC)
                        .addJavadoc("Compiles the kernel for the runtime's device (or takes it from the kernel cache) and loads it.\n")
                        .returns(self).addParameter(KERNEL_RUNTIME, "runtime")
                        .addStatement("return new $T(runtime.load(SPEC_TEXT))", self).build())
                .addMethod(MethodSpec.methodBuilder("handle").addModifiers(Modifier.PUBLIC)
                        .returns(KERNEL_HANDLE).addStatement("return handle").build())
                .addMethod(launch.build())
                .build();
        return JavaFile.builder(packageName, type).skipJavaLangImports(true).indent("    ").build();
    }

    /** {@code qwen3_30b_a3b_gate_up} to {@code Qwen330bA3bGateUp}. */
    public static String className(String kernelName) {
        StringBuilder b = new StringBuilder();
        for (String part : kernelName.split("_")) {
            if (!part.isEmpty()) {
                b.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
            }
        }
        if (b.isEmpty() || !Character.isJavaIdentifierStart(b.charAt(0))) {
            b.insert(0, 'K');
        }
        return b.toString();
    }

    static String camel(String snake) {
        String upper = className(snake);
        return Character.toLowerCase(upper.charAt(0)) + upper.substring(1);
    }
}
