package dev.moeforge.examples.decoder;

/**
 * Rotary position embedding as transformers 5.17 computes it: NeoX pairing ({@code i} with
 * {@code i + d/2}), inverse frequencies and angles in FP32, {@code cos} and {@code sin} multiplied
 * by the attention scaling (1 but for YaRN).
 *
 * @param theta the base ({@code rope_theta})
 * @param type {@code default} or {@code yarn}
 * @param factor YaRN's context extension factor
 * @param originalMaxPositions YaRN's {@code original_max_position_embeddings}
 * @param betaFast YaRN's {@code beta_fast}
 * @param betaSlow YaRN's {@code beta_slow}
 * @param truncate YaRN's {@code truncate}: whether the correction range is rounded outward to whole dimensions
 * @param attentionFactor the scaling of cos and sin; NaN where it follows from the factor
 */
public record Rope(double theta, String type, double factor, int originalMaxPositions, double betaFast, double betaSlow,
                   boolean truncate, double attentionFactor) {

    public static final String DEFAULT = "default";
    public static final String YARN = "yarn";

    public Rope {
        if (!(theta > 1)) {
            throw new IllegalArgumentException("rope_theta must be above 1, got " + theta);
        }
        if (!type.equals(DEFAULT) && !type.equals(YARN)) {
            throw new IllegalArgumentException("rope_type '" + type + "' is not supported; supported: default, yarn");
        }
        if (type.equals(YARN) && !(factor >= 1 && originalMaxPositions > 0 && betaFast > 0 && betaSlow > 0)) {
            throw new IllegalArgumentException("yarn needs factor >= 1, original_max_position_embeddings > 0 and positive"
                    + " beta_fast, beta_slow; got factor " + factor + ", original_max_position_embeddings "
                    + originalMaxPositions + ", beta_fast " + betaFast + ", beta_slow " + betaSlow);
        }
    }

    /** Plain RoPE of base {@code theta}. */
    public static Rope plain(double theta) {
        return new Rope(theta, DEFAULT, 1, 0, 0, 0, true, Double.NaN);
    }

    /** The FP32 inverse frequencies of a head of {@code dim} dimensions, {@code dim/2} of them. */
    public float[] inverseFrequencies(int dim) {
        int half = dim / 2;
        float[] out = new float[half];
        double[] ramp = type.equals(YARN) ? yarnRamp(dim) : null;
        for (int i = 0; i < half; i++) {
            float exponent = (float) (2 * i) / dim;
            float posFreq = (float) Math.pow(theta, exponent);
            float extrapolation = 1f / posFreq;
            if (ramp == null) {
                out[i] = extrapolation;
            } else {
                float interpolation = 1f / ((float) factor * posFreq);
                float extrapolationFactor = 1f - (float) ramp[i];
                out[i] = interpolation * (1f - extrapolationFactor) + extrapolation * extrapolationFactor;
            }
        }
        return out;
    }

    /** What cos and sin are multiplied by. */
    public float attentionScaling() {
        if (!type.equals(YARN)) {
            return 1f;
        }
        if (!Double.isNaN(attentionFactor)) {
            return (float) attentionFactor;
        }
        return (float) (factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1);
    }

    /** YaRN's linear ramp over the frequency index between the correction dimensions of beta_fast and beta_slow. */
    private double[] yarnRamp(int dim) {
        double low = correctionDim(betaFast, dim);
        double high = correctionDim(betaSlow, dim);
        if (truncate) {
            low = Math.floor(low);
            high = Math.ceil(high);
        }
        low = Math.max(low, 0);
        high = Math.min(high, dim - 1);
        if (low == high) {
            high += 0.001;
        }
        double[] ramp = new double[dim / 2];
        for (int i = 0; i < ramp.length; i++) {
            float r = (float) ((i - (float) low) / (float) (high - low));
            ramp[i] = Math.min(1, Math.max(0, r));
        }
        return ramp;
    }

    private double correctionDim(double rotations, int dim) {
        return dim * Math.log(originalMaxPositions / (rotations * 2 * Math.PI)) / (2 * Math.log(theta));
    }

    /**
     * Rotates {@code heads} heads of {@code dim} values in {@code v} (head-major) to position
     * {@code pos}: {@code x' = x cos + rotate_half(x) sin}.
     */
    public static void apply(double[] v, int heads, int dim, float[] inverseFrequencies, float scaling, int pos) {
        int half = dim / 2;
        for (int i = 0; i < half; i++) {
            float angle = inverseFrequencies[i] * (float) pos;
            double cos = (float) Math.cos(angle) * scaling;
            double sin = (float) Math.sin(angle) * scaling;
            for (int h = 0; h < heads; h++) {
                int a = h * dim + i;
                int b = a + half;
                double x = v[a];
                double y = v[b];
                v[a] = x * cos - y * sin;
                v[b] = y * cos + x * sin;
            }
        }
    }
}
