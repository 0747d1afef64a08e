package dev.moeforge.examples.decoder;

import java.util.SplittableRandom;
import java.util.stream.IntStream;

/**
 * Picks the next token from logits as transformers' {@code generate} does: greedy (the first of
 * equal maxima) at temperature 0, else the logits divided by the temperature, cut to the top-k,
 * then to the smallest set whose probability reaches top-p, and sampled from a seeded generator.
 */
public final class Sampler {

    /** The sampling rule: temperature 0 is greedy; topK 0 and topP 1 keep everything. */
    public record Options(double temperature, int topK, double topP, long seed) {
        public Options {
            if (!(temperature >= 0) || Double.isInfinite(temperature)) {
                throw new IllegalArgumentException("--temperature must be finite and >= 0 (0 = greedy), got " + temperature);
            }
            if (topK < 0) {
                throw new IllegalArgumentException("--top-k must be >= 0 (0 = all tokens), got " + topK);
            }
            if (!(topP > 0 && topP <= 1)) {
                throw new IllegalArgumentException("--top-p must be in (0, 1], got " + topP);
            }
        }

        public static Options greedy() {
            return new Options(0, 0, 1, 0);
        }

        public boolean isGreedy() {
            return temperature == 0;
        }
    }

    private final Options options;
    private final SplittableRandom random;

    public Sampler(Options options) {
        this.options = options;
        this.random = new SplittableRandom(options.seed());
    }

    public int next(float[] logits) {
        if (options.isGreedy()) {
            return argmax(logits);
        }
        Kept kept = kept(logits, options);
        if (kept.count() == 0) {
            return 0;  // every logit NaN: token 0, as the device picks
        }
        double total = 0;
        for (int i = 0; i < kept.count(); i++) {
            total += kept.mass()[i];
        }
        double u = random.nextDouble() * total;
        for (int i = 0; i < kept.count(); i++) {
            u -= kept.mass()[i];
            if (u < 0) {
                return kept.order()[i];
            }
        }
        return kept.order()[kept.count() - 1];
    }

    /**
     * The tokens a draw may pick: {@code order} is every token by logit descending, then index
     * ascending, NaNs last; the first {@code count} of them are kept (never a NaN); {@code mass[i]}
     * is exp(logit / T - max / T) of the i-th, for the first top-k.
     */
    public record Kept(int[] order, int count, double[] mass) {}

    /** Top-k, then the shortest prefix of those whose share of their softmax(logits / T) mass reaches top-p (temperature > 0). */
    public static Kept kept(float[] logits, Options options) {
        if (options.isGreedy()) {
            throw new IllegalArgumentException("greedy decoding keeps no sampling prefix");
        }
        int[] order = IntStream.range(0, logits.length).boxed().sorted((a, b) -> {
            boolean nanA = Float.isNaN(logits[a]);
            if (nanA != Float.isNaN(logits[b])) {
                return nanA ? 1 : -1;
            }
            int byValue = Float.compare(logits[b], logits[a]);
            return byValue != 0 ? byValue : a - b;
        }).mapToInt(Integer::intValue).toArray();
        int numbers = (int) IntStream.range(0, logits.length).filter(i -> !Float.isNaN(logits[i])).count();
        int keep = options.topK() > 0 ? Math.min(options.topK(), numbers) : numbers;
        if (keep == 0) {
            return new Kept(order, 0, new double[0]);
        }
        double max = logits[order[0]] / options.temperature();
        double[] p = new double[keep];
        double sum = 0;
        for (int i = 0; i < keep; i++) {
            p[i] = Math.exp(logits[order[i]] / options.temperature() - max);
            sum += p[i];
        }
        double cumulative = 0;
        int cut = keep;
        for (int i = 0; i < keep; i++) {
            cumulative += p[i] / sum;
            if (cumulative >= options.topP()) {
                cut = i + 1;
                break;
            }
        }
        return new Kept(order, cut, p);
    }

    /** The first index of the largest logit (torch.argmax's tie rule); NaN never wins. */
    public static int argmax(float[] logits) {
        int best = 0;
        for (int i = 1; i < logits.length; i++) {
            if (logits[i] > logits[best] || Float.isNaN(logits[best])) {
                best = i;
            }
        }
        return best;
    }
}
