package dev.moeforge.examples.bench;

import dev.moeforge.runtime.cuda.CudaEvent;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import java.util.Arrays;

/**
 * Times device work with CUDA events: warm-up launches first, then each timed
 * repetition between its own pair of events; the summary is the median and the 10th and 90th
 * percentiles, in microseconds.
 */
public final class GpuTimer {
    /** Percentiles of the per-repetition times, in microseconds. */
    public record Timing(double medianMicros, double p10Micros, double p90Micros, int repetitions) {
        public Timing scaled(double factor) {
            return new Timing(medianMicros * factor, p10Micros * factor, p90Micros * factor, repetitions);
        }
    }

    private GpuTimer() {}

    /** Replays {@code graph} {@code warmup} times, then times {@code reps} replays one by one. */
    public static Timing time(CudaStream stream, CudaGraph graph, int warmup, int reps) {
        return time(stream, () -> graph.launch(stream), warmup, reps);
    }

    public static Timing time(CudaStream stream, Runnable enqueue, int warmup, int reps) {
        for (int i = 0; i < warmup; i++) {
            enqueue.run();
        }
        stream.synchronize();
        CudaEvent[] marks = new CudaEvent[reps + 1];
        try {
            for (int i = 0; i <= reps; i++) {
                marks[i] = CudaEvent.create();
            }
            marks[0].record(stream);
            for (int i = 0; i < reps; i++) {
                enqueue.run();
                marks[i + 1].record(stream);
            }
            marks[reps].synchronize();
            double[] micros = new double[reps];
            for (int i = 0; i < reps; i++) {
                micros[i] = 1000.0 * CudaEvent.elapsedMillis(marks[i], marks[i + 1]);
            }
            Arrays.sort(micros);
            return new Timing(percentile(micros, 0.5), percentile(micros, 0.1), percentile(micros, 0.9), reps);
        } finally {
            for (CudaEvent e : marks) {
                if (e != null) {
                    e.close();
                }
            }
        }
    }

    private static double percentile(double[] sorted, double q) {
        double pos = q * (sorted.length - 1);
        int lo = (int) Math.floor(pos);
        int hi = Math.min(sorted.length - 1, lo + 1);
        return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
    }
}
