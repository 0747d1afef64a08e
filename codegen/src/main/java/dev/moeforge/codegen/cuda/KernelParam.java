package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.ir.DType;
import java.util.List;

/**
 * One parameter of a generated kernel, in launch order: a device tensor with its element type
 * and shape (where {@code -1} stands for the token count M), or the token count itself. The CUDA
 * emitter declares it, the Java launcher emitter names it, and the runtime checks buffers
 * against it before a launch.
 */
public record KernelParam(String name, Role role, DType elementType, List<Integer> shape, String description,
                          WeightPart weightPart) {

    /** Marks the token-count dimension in {@link #shape()}. */
    public static final int TOKENS = -1;

    /**
     * What a parameter is for. A WORKSPACE tensor is scratch the kernel owns (allocated zeroed once):
     * the router's scores and per-token tickets, expert_centric down's partial rows and tickets; the
     * kernel leaves tickets at zero again. A TENSOR_MAP is the copy engine's 128-byte view of the
     * weight before it ({@code WeightTileMap}), passed by value; the runtime encodes it from that
     * weight's buffer, so callers never pass one.
     */
    public enum Role {
        INPUT, WEIGHTS, ROUTING, OUTPUT, WORKSPACE, TOKEN_COUNT, TENSOR_MAP
    }

    /**
     * Which part of a weight a WEIGHTS tensor is: its codes, then (where the format has them) its
     * K-block scales, its row or per-tensor scales and its bias. The device header takes the parts
     * of one weight together as {@code mf::WeightArgs}.
     */
    public enum WeightPart {
        NONE, CODES, BLOCK_SCALES, ROW_SCALES, BIAS, TENSOR_MAP
    }

    public KernelParam {
        shape = List.copyOf(shape);
        if ((role == Role.TENSOR_MAP) != (weightPart == WeightPart.TENSOR_MAP)) {
            throw new IllegalArgumentException(name + ": a tensor map is the TENSOR_MAP part of a weight, and only it (role " + role
                    + ", part " + weightPart + ")");
        }
    }

    /** A parameter that is not part of an expert weight. */
    public KernelParam(String name, Role role, DType elementType, List<Integer> shape, String description) {
        this(name, role, elementType, shape, description, WeightPart.NONE);
    }

    /** A device buffer the caller passes (not the token count, not a tensor map the runtime derives). */
    public boolean isTensor() {
        return switch (role) {
            case INPUT, WEIGHTS, ROUTING, OUTPUT, WORKSPACE -> true;
            case TOKEN_COUNT, TENSOR_MAP -> false;
        };
    }

    /** Elements the tensor holds for {@code tokens} tokens. */
    public long elements(int tokens) {
        long n = 1;
        for (int d : shape) {
            n *= d == TOKENS ? tokens : d;
        }
        return n;
    }

    /** The shape written out for messages, e.g. {@code [M, 8, 768]}. */
    public String shapeText() {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < shape.size(); i++) {
            if (i > 0) {
                b.append(", ");
            }
            b.append(shape.get(i) == TOKENS ? "M" : Integer.toString(shape.get(i)));
        }
        return b.append(']').toString();
    }

    /** The CUDA type of one element. */
    public String cudaElement() {
        return switch (elementType) {
            case BF16 -> "__nv_bfloat16";
            case FP16 -> "__half";
            case FP32 -> "float";
            case INT32 -> "int";
            case U8 -> "uint8_t";
        };
    }

    /** The CUDA declaration of this parameter. */
    public String cudaDeclaration() {
        String element = cudaElement();
        return switch (role) {
            case INPUT, WEIGHTS, ROUTING -> "const " + element + "* __restrict__ " + name;
            case OUTPUT, WORKSPACE -> element + "* __restrict__ " + name;
            case TOKEN_COUNT -> "int " + name;
            case TENSOR_MAP -> "const __grid_constant__ mf::TensorMap " + name;
        };
    }
}
