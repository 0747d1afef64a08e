package dev.moeforge.examples.decoder;

import dev.moeforge.dsl.format.Fp8ActivationRows;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.RouterReference;
import dev.moeforge.dsl.reference.Routing;
import java.util.Map;
import java.util.stream.IntStream;

/**
 * The decoder on the CPU, in FP64 from the stored weights: the reference the GPU path is checked
 * against, and what {@code moeforge decode} runs where there is no GPU. The MoE layers evaluate
 * their {@link MoeBlock} with the DSL's own router and expert references. Slow by design: one
 * token at a time, every weight read for every token.
 */
public final class ReferenceDecoder implements TokenModel {
    private static final int PARALLEL_WORK = 1 << 16;

    private final ModelConfig c;
    private final ModelWeights w;
    private final int context;
    private final double[][] keys;
    private final double[][] values;
    private final float[] inverseFrequencies;
    private final float ropeScaling;
    private int position;
    private double routerMargin = Double.POSITIVE_INFINITY;
    private boolean expertActivationsQuantised;

    public ReferenceDecoder(ModelConfig config, ModelWeights weights, int context) {
        if (context <= 0) {
            throw new IllegalArgumentException("context must be positive, got " + context);
        }
        this.c = config;
        this.w = weights;
        this.context = context;
        int kv = c.kvHeads() * c.headDim();
        this.keys = new double[c.layers()][(int) Math.min(Integer.MAX_VALUE, (long) context * kv)];
        this.values = new double[c.layers()][keys[0].length];
        this.inverseFrequencies = c.rope().inverseFrequencies(c.headDim());
        this.ropeScaling = c.rope().attentionScaling();
    }

    @Override
    public float[] forward(int[] tokens) {
        TokenModel.checkTokens(tokens, position, context, c.vocab());
        double[] x = null;
        routerMargin = Double.POSITIVE_INFINITY;
        for (int token : tokens) {
            x = layers(token);
            position++;
        }
        double[] h = rmsNorm(x, w.finalNorm(), c.rmsEps());
        double[] logits = matVec(w.lmHead(), c.vocab(), c.hidden(), h, null);
        float[] out = new float[logits.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = (float) logits[i];
        }
        return out;
    }

    /**
     * From the next {@link #forward} on, the experts quantise x and the intermediate as W8A8 kernels
     * do (per token in groups of 128, {@link Fp8ActivationRows}), or not: the reference of a GPU path
     * whose expert kernels multiply FP8 activations.
     */
    public void quantiseExpertActivations(boolean quantised) {
        if (quantised && (c.hidden() % Fp8ActivationRows.GROUP != 0 || c.expertIntermediate() % Fp8ActivationRows.GROUP != 0)) {
            throw new IllegalArgumentException("W8A8 activations come in groups of " + Fp8ActivationRows.GROUP
                    + ": hidden " + c.hidden() + " and expert intermediate " + c.expertIntermediate() + " must be multiples");
        }
        expertActivationsQuantised = quantised;
    }

    @Override
    public int position() {
        return position;
    }

    @Override
    public int context() {
        return context;
    }

    @Override
    public String device() {
        return "CPU reference (FP64)";
    }

    /** Every layer on the token at {@link #position}; the residual stream after the last. */
    private double[] layers(int token) {
        double[] x = new double[c.hidden()];
        for (int i = 0; i < x.length; i++) {
            x[i] = w.embed()[token * c.hidden() + i];
        }
        for (int l = 0; l < c.layers(); l++) {
            ModelWeights.Layer layer = w.layers().get(l);
            add(x, attention(l, layer.attention(), rmsNorm(x, layer.inputNorm(), c.rmsEps())));
            double[] h = rmsNorm(x, layer.postNorm(), c.rmsEps());
            add(x, switch (layer.feedForward()) {
                case ModelWeights.Moe moe -> moe(moe, h);
                case ModelWeights.DenseMlp mlp -> dense(mlp, h);
            });
        }
        return x;
    }

    private double[] attention(int l, ModelWeights.Attention a, double[] h) {
        int hd = c.headDim();
        int qDim = c.heads() * hd;
        int kvDim = c.kvHeads() * hd;
        double[] q = matVec(a.q(), qDim, c.hidden(), h, a.qBias());
        double[] k = matVec(a.k(), kvDim, c.hidden(), h, a.kBias());
        double[] v = matVec(a.v(), kvDim, c.hidden(), h, a.vBias());
        switch (c.arch()) {
            case QWEN3_MOE -> {
                headNorm(q, c.heads(), a.qNorm());
                headNorm(k, c.kvHeads(), a.kNorm());
            }
            case OLMOE -> {
                System.arraycopy(rmsNorm(q, a.qNorm(), c.rmsEps()), 0, q, 0, qDim);
                System.arraycopy(rmsNorm(k, a.kNorm(), c.rmsEps()), 0, k, 0, kvDim);
                if (c.clipQkv().isPresent()) {
                    double clip = c.clipQkv().getAsDouble();
                    clamp(q, clip);
                    clamp(k, clip);
                    clamp(v, clip);
                }
            }
            case MIXTRAL, GPT_OSS -> { }
        }
        Rope.apply(q, c.heads(), hd, inverseFrequencies, ropeScaling, position);
        Rope.apply(k, c.kvHeads(), hd, inverseFrequencies, ropeScaling, position);
        System.arraycopy(k, 0, keys[l], position * kvDim, kvDim);
        System.arraycopy(v, 0, values[l], position * kvDim, kvDim);
        int first = c.slidingLayers().get(l) ? Math.max(0, position - c.slidingWindow() + 1) : 0;
        double scale = 1 / Math.sqrt(hd);
        double[] out = new double[qDim];
        IntStream.range(0, c.heads()).forEach(head -> {
            int kvHead = head / c.groupSize();
            int n = position - first + 1;
            double[] s = new double[n];
            double max = a.sinks() != null ? a.sinks()[head] : Double.NEGATIVE_INFINITY;
            for (int t = 0; t < n; t++) {
                double dot = 0;
                int base = (first + t) * kvDim + kvHead * hd;
                for (int d = 0; d < hd; d++) {
                    dot += q[head * hd + d] * keys[l][base + d];
                }
                s[t] = dot * scale;
                max = Math.max(max, s[t]);
            }
            double sum = a.sinks() != null ? Math.exp(a.sinks()[head] - max) : 0;
            for (int t = 0; t < n; t++) {
                s[t] = Math.exp(s[t] - max);
                sum += s[t];
            }
            for (int t = 0; t < n; t++) {
                int base = (first + t) * kvDim + kvHead * hd;
                double p = s[t] / sum;
                for (int d = 0; d < hd; d++) {
                    out[head * hd + d] += p * values[l][base + d];
                }
            }
        });
        return matVec(a.o(), c.hidden(), qDim, out, a.oBias());
    }

    private double[] moe(ModelWeights.Moe moe, double[] h) {
        double[] logits = matVec(moe.router(), c.experts(), c.hidden(), h, null);
        MoeBlock b = moe.block();
        RouterReference.Selection chosen = (RouterReference.Selection) RouterReference.evaluate(b.routingRule(), logits,
                Map.of(MoeBlock.ROUTER_BIAS, moe.routerBias()));
        routerMargin = Math.min(routerMargin, margin(logits, moe.routerBias(), c.topk()));
        float[] weights = new float[chosen.ids().length];
        for (int j = 0; j < weights.length; j++) {
            weights[j] = (float) chosen.values()[j];
        }
        Routing routing = new Routing(1, c.topk(), chosen.ids(), weights);
        double[] inter = expertActivationsQuantised
                ? ExpertReference.quantisedInter(b.gateUp(), b.gateUpEpilogue(), h, moe.gateUp(), routing)
                : ExpertReference.gateUp(b.gateUp(), b.gateUpEpilogue(), h, moe.gateUp(), routing).exact();
        return ExpertReference.down(b.down(), b.downEpilogue(), inter, moe.down(), routing).exact();
    }

    /**
     * The smallest gap, over the MoE layers of the last {@link #forward}, between a token's k-th and
     * (k+1)-th router logit (plus bias): the order every routing rule here selects by. Where it is
     * tiny, a kernel rounding its activations may route differently, and its outputs part from these.
     */
    public double lastRouterMargin() {
        return routerMargin;
    }

    private static double margin(double[] logits, float[] bias, int k) {
        if (k >= logits.length) {
            return Double.POSITIVE_INFINITY;
        }
        double[] v = new double[logits.length];
        for (int e = 0; e < v.length; e++) {
            v[e] = -(logits[e] + bias[e]);
        }
        java.util.Arrays.sort(v);
        return v[k] - v[k - 1];
    }

    private double[] dense(ModelWeights.DenseMlp mlp, double[] h) {
        int in = c.denseIntermediate();
        double[] g = matVec(mlp.gate(), in, c.hidden(), h, null);
        double[] u = matVec(mlp.up(), in, c.hidden(), h, null);
        for (int i = 0; i < in; i++) {
            g[i] = g[i] / (1 + Math.exp(-g[i])) * u[i];
        }
        return matVec(mlp.down(), c.hidden(), in, g, null);
    }

    /** Qwen3's q/k norm: RMSNorm over each head's dimensions with one weight of {@code head_dim}. */
    private void headNorm(double[] v, int heads, float[] weight) {
        int hd = c.headDim();
        for (int h = 0; h < heads; h++) {
            double[] head = java.util.Arrays.copyOfRange(v, h * hd, (h + 1) * hd);
            System.arraycopy(rmsNorm(head, weight, c.rmsEps()), 0, v, h * hd, hd);
        }
    }

    static double[] rmsNorm(double[] x, float[] weight, double eps) {
        double ss = 0;
        for (double v : x) {
            ss += v * v;
        }
        double r = 1 / Math.sqrt(ss / x.length + eps);
        double[] out = new double[x.length];
        for (int i = 0; i < x.length; i++) {
            out[i] = weight[i] * (x[i] * r);
        }
        return out;
    }

    /** {@code W x + b} for a row-major {@code [rows][cols]} W; b may be null. */
    static double[] matVec(float[] w, int rows, int cols, double[] x, float[] bias) {
        double[] out = new double[rows];
        IntStream range = IntStream.range(0, rows);
        ((long) rows * cols >= PARALLEL_WORK ? range.parallel() : range).forEach(r -> {
            double s = 0;
            int base = r * cols;
            for (int i = 0; i < cols; i++) {
                s += w[base + i] * x[i];
            }
            out[r] = s + (bias == null ? 0 : bias[r]);
        });
        return out;
    }

    private static void add(double[] x, double[] y) {
        for (int i = 0; i < x.length; i++) {
            x[i] += y[i];
        }
    }

    private static void clamp(double[] v, double limit) {
        for (int i = 0; i < v.length; i++) {
            v[i] = Math.max(-limit, Math.min(limit, v[i]));
        }
    }
}
