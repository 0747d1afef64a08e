package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.ir.KernelSpec;
import java.util.Map;

/**
 * The CUDA generated for one spec: the source, the headers it includes (name to content), and the
 * spec's canonical text (which also heads the source).
 */
public record GeneratedKernel(KernelSpec spec, String specText, String fileName, String source, Map<String, String> headers) {
    public GeneratedKernel {
        headers = Map.copyOf(headers);
    }

    public String kernelName() {
        return spec.name();
    }
}
