package dev.moeforge.dsl.ir;

/**
 * A kernel's input rows made from the residual stream by the kernel itself (a decoder's residual
 * add and the RMSNorm that follows it, without a launch of their own). For token {@code m}:
 * {@code v = residual[m] + addend[m]} in FP32, stored to {@code residual_out[m]}; the row the kernel
 * multiplies is {@code bf16(norm_weight * (v / sqrt(mean(v^2) + eps)))}, stored to
 * {@code normed_out[m]} for the kernels after it. Each token's two stores are made by one block;
 * every block that reads the token computes the same row. Neither output may share memory with
 * the inputs: other blocks may still be reading them. Written
 * {@code input_norm=add_rms_norm(addend=fp32, eps=1e-06)}.
 *
 * @param addend the element type of the addend, bf16 or fp32
 * @param eps    the RMSNorm's epsilon, in (0, 1)
 */
public record InputNorm(DType addend, double eps) {

    /** Bytes of the normed rows one block keeps in shared memory. */
    public static final int MAX_ROW_BYTES = 32 * 1024;
    /** Elements the kernel reads and writes together: a row is a whole number of them. */
    public static final int ELEMENTS_PER_LOAD = 4;

    /** Where the problem's field is written in the textual form. */
    public static final String FIELD = "problem.input_norm";
}
