package dev.moeforge.examples.decoder;

import dev.moeforge.checkpoint.CheckpointExperts;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.WeightFormat;
import java.util.Optional;

/**
 * The routed experts in another weight format than the checkpoint's ({@code decode --experts-format}):
 * each layer's experts re-encoded on load by the reference quantiser from the values they have, so
 * the CPU path and the GPU path compute with the same codes and scales.
 */
public final class ExpertFormats {
    private ExpertFormats() {}

    /** The layer's experts in {@code format} (biases kept); the layer itself where it is already in it or none is asked for. */
    public static CheckpointExperts.LayerWeights reencode(CheckpointExperts.LayerWeights w, Optional<WeightFormat> format,
                                                          String layer) {
        if (format.isEmpty() || format.get().equals(w.gateUp().format())) {
            return w;
        }
        WeightFormat f = format.get();
        EncodedWeights gateUp = EncodedWeights.encode(f, rows(w.gateUp()), w.experts(), 2 * w.intermediate(), w.hidden(),
                Projections.of(w.layout()), layer + " gate_up");
        EncodedWeights down = EncodedWeights.encode(f, rows(w.down()), w.experts(), w.hidden(), w.intermediate(), Projections.ONE,
                layer + " down");
        return new CheckpointExperts.LayerWeights(gateUp, down, w.layout(), w.gateUpBias(), w.downBias());
    }

    /**
     * Random experts drawn row by row (N(0, 1/fan_in), the built-in model's scales; each row from
     * its own stream of the seed) and encoded in {@code format}: gate_up stacked, no biases.
     */
    public static CheckpointExperts.LayerWeights random(ModelConfig c, WeightFormat format, long seed) {
        int h = c.hidden();
        int in = c.expertIntermediate();
        EncodedWeights gateUp = EncodedWeights.encode(format, RowSource.normal(seed, 2 * in, 1 / Math.sqrt(h)), c.experts(),
                2 * in, h, Projections.STACKED_GATE_UP, "random gate_up");
        EncodedWeights down = EncodedWeights.encode(format, RowSource.normal(seed + 1, h, 1 / Math.sqrt(in)), c.experts(), h, in,
                Projections.ONE, "random down");
        return new CheckpointExperts.LayerWeights(gateUp, down, GateUpLayout.STACKED, Optional.empty(), Optional.empty());
    }

    private static RowSource rows(EncodedWeights w) {
        return (e, n, out) -> {
            double[] row = new double[out.length];
            w.decodeRow(e, n, row);
            for (int i = 0; i < out.length; i++) {
                out[i] = (float) row[i];
            }
        };
    }
}
