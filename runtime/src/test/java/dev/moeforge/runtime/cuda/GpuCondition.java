package dev.moeforge.runtime.cuda;

import java.util.Locale;
import org.junit.jupiter.api.extension.ConditionEvaluationResult;
import org.junit.jupiter.api.extension.ExecutionCondition;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The condition behind {@link RequiresGpu}. Evaluated for the class first, so that a class without
 * a GPU never runs its {@code @BeforeAll} (which would open a context) and JUnit reports each of its
 * tests as skipped. Decides from {@link Gpu#status()} and the environment variable
 * {@code MOEFORGE_REQUIRE_GPU}, which the GPU host's runner sets to 1:
 *
 * <ul>
 *   <li>a GPU: the tests run;
 *   <li>none ({@link Gpu.State#ABSENT}): the tests are skipped with the probe's reason, unless a GPU is
 *       required, when the class fails;
 *   <li>a broken install ({@link Gpu.State#BROKEN}): the class fails, required or not.
 * </ul>
 */
public final class GpuCondition implements ExecutionCondition {

    /** The environment variable that turns "no GPU" from a skip into a failure. */
    public static final String REQUIRE_GPU = "MOEFORGE_REQUIRE_GPU";

    @Override
    public ConditionEvaluationResult evaluateExecutionCondition(ExtensionContext context) {
        return decide(Gpu.status(), required(System.getenv(REQUIRE_GPU)));
    }

    /**
     * Whether {@code setting} (the variable's value, null when unset) requires a GPU. Only 1/true
     * and 0/false are understood; anything else throws, so a misspelt setting is not read as "no".
     */
    static boolean required(String setting) {
        if (setting == null) {
            return false;
        }
        return switch (setting.strip().toLowerCase(Locale.ROOT)) {
            case "", "0", "false" -> false;
            case "1", "true" -> true;
            default -> throw new IllegalStateException(REQUIRE_GPU + "=" + setting + " is neither 1 (require a GPU) nor 0");
        };
    }

    /** Runs, skips with the reason, or throws (which JUnit reports as the class failing). */
    static ConditionEvaluationResult decide(Gpu.Status status, boolean required) {
        return switch (status.state()) {
            case AVAILABLE -> ConditionEvaluationResult.enabled("a CUDA GPU is available");
            case ABSENT -> {
                if (required) {
                    throw new IllegalStateException(REQUIRE_GPU + "=1 but there is no usable GPU: " + status.reason());
                }
                yield ConditionEvaluationResult.disabled(status.reason());
            }
            case BROKEN -> throw new IllegalStateException("broken CUDA install, not a machine without a GPU: " + status.reason());
        };
    }
}
