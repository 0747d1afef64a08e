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

    /**
     * Refuses tokens that would not fit the context or lie outside the vocabulary, all checked
     * before any runs, so a refused call leaves the cache as it was.
     */
    static void checkTokens(int[] tokens, int position, int context, int vocab) {
        if (tokens.length == 0) {
            throw new IllegalArgumentException("no tokens to run");
        }
        if (position + tokens.length > context) {
            throw new IllegalArgumentException("the context holds " + context + " tokens; " + position + " are in it and "
                    + tokens.length + " more do not fit");
        }
        for (int token : tokens) {
            if (token < 0 || token >= vocab) {
                throw new IllegalArgumentException("token id " + token + " is outside the vocabulary [0, " + vocab + ")");
            }
        }
    }
}
