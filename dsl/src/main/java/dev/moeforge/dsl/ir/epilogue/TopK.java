package dev.moeforge.dsl.ir.epilogue;

import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * Selects k experts of a row and keeps their values and ids, in descending order of the
 * selection score. The selection score is {@code by} when given (DeepSeek-V3 selects on
 * {@code sigmoid(acc) + e_score_correction_bias} but keeps {@code sigmoid(acc)} as the value),
 * else the input itself.
 *
 * <p>Ties go to the lower expert id. NaN ranks below every number, -inf included, so a NaN
 * expert is chosen only when fewer than k others exist (its value is then NaN too).
 *
 * <p>Group-limited selection (DeepSeek-V3): with {@code groups > 1} the E experts form
 * {@code groups} consecutive groups; each group scores the sum of its two highest selection
 * scores; the {@code topkGroups} best groups (ties to the lower group) are kept and the k experts
 * are chosen among theirs only. With {@code groups = 1} all experts compete.
 *
 * <p>Written {@code topk(x, 8)} or {@code topk(x, 8, groups=8, topk_groups=4, by=...)}.
 */
public record TopK(EpilogueNode input, int k, int groups, int topkGroups, Optional<EpilogueNode> by)
        implements EpilogueNode {
    public TopK {
        Objects.requireNonNull(input, "input");
        Objects.requireNonNull(by, "by (use Optional.empty())");
    }

    /** Plain top-k over the input's own values. */
    public static TopK of(EpilogueNode input, int k) {
        return new TopK(input, k, 1, 1, Optional.empty());
    }

    @Override
    public List<EpilogueNode> children() {
        return by.isPresent() ? List.of(input, by.get()) : List.of(input);
    }
}
