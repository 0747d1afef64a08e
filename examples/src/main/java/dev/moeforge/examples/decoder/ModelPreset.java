package dev.moeforge.examples.decoder;

import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

/**
 * A model geometry {@code init-model} can write with random weights: a tiny one per architecture
 * (for tests: every code path of the architecture at a few MB beside the vocabulary) and the
 * released models' own geometries. The vocabulary is always the shipped Qwen3 tokenizer's.
 *
 * @param denseLayers Qwen3-MoE's {@code mlp_only_layers}
 * @param denseIntermediate the dense MLP's width (Qwen3-MoE's {@code intermediate_size}); 0 where unused
 * @param slidingWindow gpt-oss's and Mixtral's window; 0 for none
 * @param clipQkv OLMoE's clamp; 0 for none
 */
public record ModelPreset(String name, Architecture arch, int hidden, int expertIntermediate, int denseIntermediate,
                          int layers, int heads, int kvHeads, int headDim, int experts, int topk, List<Integer> denseLayers,
                          int slidingWindow, double clipQkv, int maxPositions) {

    /** The Qwen3 tokenizer's embedding rows (151,669 tokens, padded as Qwen3's checkpoints pad them). */
    public static final int VOCAB = 151936;

    public static final List<ModelPreset> ALL = List.of(
            new ModelPreset("tiny", Architecture.QWEN3_MOE, 64, 32, 128, 3, 4, 2, 32, 8, 2, List.of(1), 0, 0, 4096),
            new ModelPreset("tiny", Architecture.OLMOE, 64, 32, 0, 2, 4, 4, 16, 8, 2, List.of(), 0, 3.0, 4096),
            new ModelPreset("tiny", Architecture.MIXTRAL, 64, 64, 0, 2, 4, 2, 16, 4, 2, List.of(), 0, 0, 4096),
            new ModelPreset("tiny", Architecture.GPT_OSS, 64, 32, 0, 2, 4, 2, 16, 4, 2, List.of(), 4, 0, 131072),
            new ModelPreset("qwen3-30b-a3b", Architecture.QWEN3_MOE, 2048, 768, 6144, 48, 32, 4, 128, 128, 8, List.of(), 0, 0, 40960),
            new ModelPreset("olmoe-1b-7b", Architecture.OLMOE, 2048, 1024, 0, 16, 16, 16, 128, 64, 8, List.of(), 0, 0, 4096),
            new ModelPreset("mixtral-8x7b", Architecture.MIXTRAL, 4096, 14336, 0, 32, 32, 8, 128, 8, 2, List.of(), 0, 0, 32768),
            new ModelPreset("gpt-oss-20b", Architecture.GPT_OSS, 2880, 2880, 0, 24, 64, 8, 64, 32, 4, List.of(), 128, 0, 131072));

    /** The preset of this name for the architecture; refused with the names the architecture has. */
    public static ModelPreset of(Architecture arch, String name) {
        return ALL.stream().filter(p -> p.arch == arch && p.name.equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no preset '" + name + "' for " + arch.modelType()
                        + "; it has: " + names(arch)));
    }

    public static String names(Architecture arch) {
        return ALL.stream().filter(p -> p.arch == arch).map(ModelPreset::name).collect(Collectors.joining(", "));
    }

    /** The same geometry with {@code layers} layers (dense layers past the end dropped). */
    public ModelPreset withLayers(int layers) {
        if (layers <= 0) {
            throw new IllegalArgumentException("--layers must be positive, got " + layers);
        }
        return new ModelPreset(name, arch, hidden, expertIntermediate, denseIntermediate, layers, heads, kvHeads, headDim,
                experts, topk, denseLayers.stream().filter(l -> l < layers).toList(), slidingWindow, clipQkv, maxPositions);
    }

    /** The parameters of its matrices, embedding and head included (norm, bias and sink vectors, a rounding error, left out). */
    public long parameters() {
        long q = (long) heads * headDim;
        long kv = (long) kvHeads * headDim;
        long attention = 2 * hidden * q + 2 * hidden * kv;
        long moe = (long) experts * 3 * hidden * expertIntermediate + (long) experts * hidden;
        long dense = 3L * hidden * denseIntermediate;
        return 2L * VOCAB * hidden + layers * attention + (long) (layers - denseLayers.size()) * moe
                + denseLayers.size() * dense;
    }

    @Override
    public String toString() {
        return arch.modelType() + " " + name + " (H=" + hidden + ", I=" + expertIntermediate + ", E=" + experts + ", top-"
                + topk + ", " + layers + " layers, " + heads + "/" + kvHeads + " heads of " + headDim + ")";
    }

    static String allNames() {
        return Arrays.stream(Architecture.values()).map(a -> a.modelType() + ": " + names(a)).collect(Collectors.joining("; "));
    }
}
