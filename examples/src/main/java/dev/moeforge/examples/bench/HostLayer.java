package dev.moeforge.examples.bench;

import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.WeightFormat;

/**
 * One expert layer's weights for a benchmark in a quantised format: original FP32 rows drawn
 * N(0, 1/K) from a seed (the same rows every time they are asked for, so an accuracy study can
 * rebuild them), quantised once on the host.
 *
 * @param gateUpRows the original gate and up rows [E][2I][H]
 * @param downRows   the original down rows [E][H][I]
 */
public record HostLayer(RowSource gateUpRows, RowSource downRows, EncodedWeights gateUp, EncodedWeights down) {
    /** The layer of {@code shape} in {@code format}, gate and up rows laid out as {@code gateUpProjections} says. */
    public static HostLayer quantise(WeightFormat format, ExpertShape shape, Projections gateUpProjections, long seed) {
        RowSource gateUpRows = RowSource.normal(seed, 2 * shape.intermediate(), 1.0 / Math.sqrt(shape.hidden()));
        RowSource downRows = RowSource.normal(seed + 1, shape.hidden(), 1.0 / Math.sqrt(shape.intermediate()));
        return new HostLayer(gateUpRows, downRows,
                EncodedWeights.encode(format, gateUpRows, shape.experts(), 2 * shape.intermediate(), shape.hidden(), gateUpProjections,
                        "gate_up"),
                EncodedWeights.encode(format, downRows, shape.experts(), shape.hidden(), shape.intermediate(), Projections.ONE, "down"));
    }
}
