package dev.moeforge.dsl.reference;

/** A routing table that breaks the kernels' assumptions; the message names the bad entry. */
public class RoutingException extends IllegalArgumentException {
    public RoutingException(String message) {
        super(message);
    }
}
