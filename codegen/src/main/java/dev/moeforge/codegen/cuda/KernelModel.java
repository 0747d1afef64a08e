package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.schedule.ConfigConstant;
import java.util.List;

/**
 * What a kernel template is rendered from: the spec's text and notes for the header comment, the
 * members of {@code struct Config}, the signature, and the call of the device header's body.
 * Expert templates use the epilogue functor's fields, router templates the routing rule's lines.
 *
 * @param specLines      the spec's canonical text, one line each
 * @param notes          how the work is laid out, one line each
 * @param header         the device header's file name
 * @param config         the members of {@code struct Config}, which the device header reads by name
 * @param launchBounds   {@code __launch_bounds__}'s arguments, in terms of Config's members
 * @param clusterSize    blocks per thread-block cluster, 1 for none
 * @param name           the kernel's name
 * @param params         the parameters' CUDA declarations, in launch order
 * @param body           the device header's entry point
 * @param callArgs       the arguments the kernel passes to it (from the signature)
 * @param inputArg       routers: what the kernel passes its body for the input rows (x, or the
 *                       tensors an input norm makes them from)
 * @param epilogueText   expert kernels: the epilogue's canonical text
 * @param epilogueParams expert kernels: the epilogue functor's parameters
 * @param epilogueLines  expert kernels: the functor's body
 * @param valueLines     routers: one temporary per subtree of the routing rule
 * @param storeLines     routers: the token's stores
 * @param blockGroups    routers: the block's warps share the rule's selection, one expert group each
 * @param expertCounts   routers: the kernel also counts each expert's tokens
 * @param alignCount     expert_centric: the name of the module's first align entry point (empty otherwise)
 * @param alignScatter   expert_centric: the name of the second
 * @param quantiseX      expert_centric gate_up with FP8 activations: the name of the entry point that
 *                       quantises x into the kernel's workspace (empty otherwise)
 * @param quantiseThreads threads of one block of that entry point (a warp per group of 128)
 * @param combine        expert_centric down with combine_kernel: the name of the entry point that adds each
 *                       token's slot rows into y after the kernel (empty otherwise)
 * @param combineThreads threads of one block of that entry point
 * @param combineOutputs outputs of a token one of its threads adds
 * @param waitsInBody    the body waits for the previous kernel itself (see ScheduleModel), so the
 *                       kernel only lets the next one begin
 */
public record KernelModel(List<String> specLines, List<String> notes, String header, List<ConfigConstant> config,
                          String launchBounds, int clusterSize, String name, List<String> params, String body, String callArgs, String inputArg,
                          String epilogueText, String epilogueParams, List<String> epilogueLines,
                          List<String> valueLines, List<String> storeLines, boolean blockGroups, boolean expertCounts,
                          String alignCount, String alignScatter, String quantiseX, int quantiseThreads,
                          String combine, int combineThreads, int combineOutputs, boolean waitsInBody) {
    public KernelModel {
        specLines = List.copyOf(specLines);
        notes = List.copyOf(notes);
        config = List.copyOf(config);
        params = List.copyOf(params);
        epilogueLines = List.copyOf(epilogueLines);
        valueLines = List.copyOf(valueLines);
        storeLines = List.copyOf(storeLines);
    }
}
