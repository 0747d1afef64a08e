package dev.moeforge.dsl.reference;

import java.util.Arrays;
import java.util.Objects;

/**
 * A routing table, token-major: {@code ids[m * topk + j]} is the expert of token {@code m}'s slot
 * {@code j} and {@code weights[m * topk + j]} its routing weight, the layout the kernels read.
 */
public record Routing(int tokens, int topk, int[] ids, float[] weights) {
    public Routing {
        Objects.requireNonNull(ids, "ids");
        Objects.requireNonNull(weights, "weights");
        if (tokens < 1 || topk < 1) {
            throw new IllegalArgumentException("routing needs tokens >= 1 and topk >= 1, got " + tokens + " and " + topk);
        }
        if (ids.length != tokens * topk || weights.length != tokens * topk) {
            throw new IllegalArgumentException("routing of " + tokens + " tokens x top-" + topk + " needs "
                    + tokens * topk + " ids and weights, got " + ids.length + " and " + weights.length);
        }
    }

    public int id(int token, int slot) {
        return ids[token * topk + slot];
    }

    public float weight(int token, int slot) {
        return weights[token * topk + slot];
    }

    /**
     * Rejects what the kernels assume away: an expert id outside {@code [0, experts)}, an expert
     * twice in one token's row, a non-finite routing weight. The message names the entry.
     */
    public Routing checkedFor(int experts) {
        for (int m = 0; m < tokens; m++) {
            for (int j = 0; j < topk; j++) {
                int e = id(m, j);
                if (e < 0 || e >= experts) {
                    throw new RoutingException("topk_ids[" + m + "][" + j + "] = " + e + ": expert ids must be in 0.." + (experts - 1));
                }
                for (int j2 = 0; j2 < j; j2++) {
                    if (id(m, j2) == e) {
                        throw new RoutingException("topk_ids[" + m + "][" + j + "] = " + e + ": expert " + e
                                + " is already routed at slot " + j2 + "; a token's experts must be distinct");
                    }
                }
                float w = weight(m, j);
                if (!Float.isFinite(w)) {
                    throw new RoutingException("topk_weights[" + m + "][" + j + "] = " + w + ": routing weights must be finite");
                }
            }
        }
        return this;
    }

    /** Pairs routed to each of {@code experts} experts; ids outside [0, E) are not counted. */
    public int[] expertLoad(int experts) {
        int[] load = new int[experts];
        for (int id : ids) {
            if (id >= 0 && id < experts) {
                load[id]++;
            }
        }
        return load;
    }

    /**
     * How evenly the routed (token, slot) pairs spread over {@code experts}: the entropy of the
     * expert-load distribution over the natural log of the expert count (1: every expert takes as many
     * pairs; ln k / ln E: every token on the same k experts). Ids outside [0, E) are not counted. One
     * expert (a dense projection as a top-1 layer) takes every pair, as evenly as one can: 1.
     */
    public double balancedness(int experts) {
        if (experts < 1) {
            throw new IllegalArgumentException("balancedness needs at least 1 expert, got " + experts);
        }
        if (experts == 1) {
            return 1.0;
        }
        long[] load = new long[experts];
        long total = 0;
        for (int id : ids) {
            if (id >= 0 && id < experts) {
                load[id]++;
                total++;
            }
        }
        double entropy = 0;
        for (long n : load) {
            if (n > 0) {
                double p = (double) n / total;
                entropy -= p * Math.log(p);
            }
        }
        return entropy / Math.log(experts);
    }

    /** Experts routed to by at least one token. */
    public int distinctExperts() {
        return (int) Arrays.stream(ids).distinct().count();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Routing r && r.tokens == tokens && r.topk == topk
                && Arrays.equals(r.ids, ids) && Arrays.equals(r.weights, weights);
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(ids) + Arrays.hashCode(weights);
    }

    @Override
    public String toString() {
        return "Routing[tokens=" + tokens + ", topk=" + topk + ", ids=" + Arrays.toString(ids)
                + ", weights=" + Arrays.toString(weights) + "]";
    }
}
