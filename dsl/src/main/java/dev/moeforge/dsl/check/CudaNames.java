package dev.moeforge.dsl.check;

import java.util.Set;

/**
 * Names a spec may not give to what becomes a CUDA identifier (a kernel, a router's row
 * parameter): C++ keywords, CUDA's built-in variables, and names reserved to the implementation
 * ({@code __x}, {@code _X}).
 */
public final class CudaNames {
    private static final Set<String> KEYWORDS = Set.of("alignas", "alignof", "asm", "auto", "bool", "break", "case",
            "catch", "char", "class", "const", "constexpr", "continue", "decltype", "default", "delete", "do", "double",
            "else", "enum", "explicit", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long",
            "namespace", "new", "noexcept", "nullptr", "operator", "private", "protected", "public", "register", "return",
            "short", "signed", "sizeof", "static", "struct", "switch", "template", "this", "throw", "true", "try",
            "typedef", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "while", "main",
            "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize");

    private CudaNames() {}

    public static boolean isReserved(String name) {
        return KEYWORDS.contains(name) || name.startsWith("__") || name.matches("_[A-Z].*");
    }
}
