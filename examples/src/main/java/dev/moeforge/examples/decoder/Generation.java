package dev.moeforge.examples.decoder;

import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;

/** One prompt through a {@link TokenModel}: prefill, then tokens sampled one at a time until EOS or the limit. */
public final class Generation {

    /**
     * Seconds spent, and tokens run: the prefill includes picking the first token (time to first
     * token); the decode is every later step, each a forward of one token and its pick (the text's
     * detokenising and printing left out).
     */
    public record Timings(int prefillTokens, double prefillSeconds, int decodeTokens, double decodeSeconds) {
        public double prefillTokensPerSecond() {
            return prefillTokens / prefillSeconds;
        }

        public double decodeTokensPerSecond() {
            return decodeTokens == 0 ? Double.NaN : decodeTokens / decodeSeconds;
        }
    }

    /** The prompt's ids, the generated ids (EOS included if it came), their text, and why generation stopped. */
    public record Result(int[] promptIds, int[] ids, String text, String stop, Timings timings) {}

    private Generation() {}

    /**
     * Generates up to {@code maxTokens} tokens after {@code promptIds}; {@code stream} is given the
     * text as it grows.
     */
    public static Result run(TokenModel model, TextTokenizer tokenizer, int[] promptIds, int maxTokens, Sampler sampler,
                             List<Integer> eos, Consumer<String> stream) {
        if (promptIds.length == 0) {
            throw new IllegalArgumentException("the prompt encodes to no tokens; give some text");
        }
        if (maxTokens <= 0) {
            throw new IllegalArgumentException("--max-tokens must be positive, got " + maxTokens);
        }
        TextTokenizer.Stream text = new TextTokenizer.Stream(tokenizer);
        int[] ids = new int[maxTokens];
        int n = 0;
        String stop = "max-tokens";
        long start = System.nanoTime();
        float[] logits = model.forward(promptIds);
        int next = sampler.next(logits);
        double prefill = (System.nanoTime() - start) / 1e9;
        long decodeNanos = 0;
        while (true) {
            ids[n++] = next;
            if (eos.contains(next)) {
                stop = "eos";
                break;
            }
            stream.accept(text.add(next));
            if (n == maxTokens) {
                break;
            }
            if (model.position() == model.context()) {
                stop = "context";
                break;
            }
            long step = System.nanoTime();
            next = sampler.next(model.forward(new int[] {next}));
            decodeNanos += System.nanoTime() - step;
        }
        double decode = decodeNanos / 1e9;
        int[] out = Arrays.copyOf(ids, n);
        return new Result(promptIds, out, tokenizer.decode(out), stop, new Timings(promptIds.length, prefill, n - 1, decode));
    }
}
