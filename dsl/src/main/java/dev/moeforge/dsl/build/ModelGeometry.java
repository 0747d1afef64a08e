package dev.moeforge.dsl.build;

import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import java.util.Arrays;
import java.util.stream.Collectors;

/** The routed-expert geometry of the MoE models MoeForge knows by name (one tensor-parallel rank: all experts). */
public enum ModelGeometry {
    QWEN3_30B_A3B("qwen3-30b-a3b", new ExpertShape(2048, 768, 128, 8), GateUpLayout.STACKED),
    QWEN3_NEXT_80B_A3B("qwen3-next-80b-a3b", new ExpertShape(2048, 512, 512, 10), GateUpLayout.STACKED),
    GPT_OSS_20B("gpt-oss-20b", new ExpertShape(2880, 2880, 32, 4), GateUpLayout.INTERLEAVED),
    OLMOE_1B_7B("olmoe-1b-7b", new ExpertShape(2048, 1024, 64, 8), GateUpLayout.STACKED),
    MIXTRAL_8X7B("mixtral-8x7b", new ExpertShape(4096, 14336, 8, 2), GateUpLayout.STACKED),
    DEEPSEEK_V3("deepseek-v3", new ExpertShape(7168, 2048, 256, 8), GateUpLayout.STACKED);

    private final String text;
    private final ExpertShape shape;
    private final GateUpLayout layout;

    ModelGeometry(String text, ExpertShape shape, GateUpLayout layout) {
        this.text = text;
        this.shape = shape;
        this.layout = layout;
    }

    public String text() {
        return text;
    }

    public ExpertShape shape() {
        return shape;
    }

    /** How the model's checkpoint stacks gate and up rows (gpt-oss interleaves them). */
    public GateUpLayout layout() {
        return layout;
    }

    /** The model named {@code text}; an unknown name is refused with the list of known ones. */
    public static ModelGeometry fromText(String text) {
        for (ModelGeometry m : values()) {
            if (m.text.equals(text)) {
                return m;
            }
        }
        throw new IllegalArgumentException("unknown model '" + text + "'; known: " + allowedText()
                + " (or give the geometry with --shape H,I,E,k)");
    }

    public static String allowedText() {
        return Arrays.stream(values()).map(ModelGeometry::text).collect(Collectors.joining(", "));
    }
}
