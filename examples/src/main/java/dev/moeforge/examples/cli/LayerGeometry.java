package dev.moeforge.examples.cli;

import dev.moeforge.dsl.build.ModelGeometry;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import java.util.List;

/** The expert geometry a command works on, from {@code --model NAME} or {@code --shape H,I,E,k} (gate and up stacked). */
record LayerGeometry(String name, ExpertShape shape, GateUpLayout layout) {

    /** {@code --shape} where given, else the model {@code model}; either is refused with what is allowed. */
    static LayerGeometry of(String model, List<Integer> shape) {
        if (shape == null) {
            ModelGeometry m = ModelGeometry.fromText(model);
            return new LayerGeometry(m.text(), m.shape(), m.layout());
        }
        if (shape.size() != 4) {
            throw new IllegalArgumentException("--shape " + shape + ": four numbers, H,I,E,k");
        }
        ExpertShape s = new ExpertShape(shape.get(0), shape.get(1), shape.get(2), shape.get(3));
        return new LayerGeometry("shape_" + s.hidden() + "x" + s.intermediate() + "_e" + s.experts() + "_k" + s.topk(), s,
                GateUpLayout.STACKED);
    }
}
