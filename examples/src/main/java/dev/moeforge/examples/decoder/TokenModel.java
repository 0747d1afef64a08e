package dev.moeforge.examples.decoder;

/** A decoder that turns tokens into next-token logits, keeping its own KV cache. */
public interface TokenModel {

    /**
     * Runs {@code tokens} at the next positions (a prompt, or one generated token) and returns the
     * logits that follow the last of them, {@code [vocab]}.
     *
     * @throws IllegalArgumentException when the tokens would not fit the context
     */
    float[] forward(int[] tokens);

    /** How many tokens the cache holds. */
    int position();

    /** The most tokens it can hold. */
    int context();

    /** Where it runs, for the user. */
    String device();
}
