package dev.moeforge.checkpoint;

import dev.moeforge.dsl.ir.WeightFormat;
import java.io.IOException;
import java.nio.file.Path;

/**
 * A quantisation run in a JVM of its own, for {@link QuantizerKillTest} to kill midway. It prints
 * {@code tensor <n>} to stdout after each tensor goes to the writer and then pauses, so that the
 * test sees how far it got and the kill lands while shards are being written.
 *
 * <p>Arguments: input folder, format, output folder, shard size in bytes, pause per tensor in ms.
 */
public final class QuantizeChild {

    private QuantizeChild() {}

    public static void main(String[] args) throws IOException {
        Path in = Path.of(args[0]);
        WeightFormat format = WeightFormat.ALL.stream().filter(f -> f.text().equals(args[1])).findFirst().orElseThrow();
        Path out = Path.of(args[2]);
        long maxShardBytes = Long.parseLong(args[3]);
        long pauseMillis = Long.parseLong(args[4]);
        try (Checkpoint ckpt = Checkpoint.open(in)) {
            Quantizer.quantize(ckpt, format, out, maxShardBytes, new Quantizer.Listener() {
                private int written;

                @Override
                public void writing(int tensors) {
                    System.out.println("writing " + tensors);
                }

                @Override
                public void tensorWritten() {
                    System.out.println("tensor " + ++written);
                    try {
                        Thread.sleep(pauseMillis);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            });
        }
        System.out.println("done");
    }
}
