package dev.moeforge.runtime.moe;

import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import java.util.Map;

/**
 * The whole MoE layer as one unit: router, then gate_up, then down, all on the device with no host
 * synchronisation between them, so one CUDA graph captures a decode step's layer. The router is
 * launched in the expert layer's {@link Experts#order()}.
 */
public final class MoeLayer {
    private final RouterKernel router;
    private final Experts experts;

    /** {@code experts}: one pair ({@link ExpertLayer}), or a tuned pool's pair per token count ({@link TokenKeyedLayer}). */
    public MoeLayer(RouterKernel router, Experts experts) {
        int k = router.topk().orElseThrow(() -> new IllegalArgumentException("router "
                + router.handle().spec().name() + " stores a dense row; the expert layer needs a top-k table"));
        if (k != experts.shape().topk()) {
            throw new IllegalArgumentException("router " + router.handle().spec().name() + " selects top-" + k
                    + " but the expert layer takes top-" + experts.shape().topk());
        }
        if (router.problem().experts() != experts.shape().experts() || router.problem().hidden() != experts.shape().hidden()) {
            throw new IllegalArgumentException("router " + router.problem() + " does not match the expert layer " + experts.shape());
        }
        if (((Store) router.handle().spec().epilogue()).dtype() != DType.FP32) {
            throw new IllegalArgumentException("the expert kernels read fp32 routing weights; router "
                    + router.handle().spec().name() + " stores " + ((Store) router.handle().spec().epilogue()).dtype().text());
        }
        this.router = router;
        this.experts = experts;
    }

    public RouterKernel router() {
        return router;
    }

    public Experts experts() {
        return experts;
    }

    /** Enqueues router, gate_up and down for {@code tokens} tokens; {@code topkIds}, {@code topkWeights} and {@code inter} are scratch. */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceBuffer wRouter, Map<String, DeviceBuffer> rows,
                        DeviceBuffer wGateUp, DeviceBuffer wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights,
                        DeviceBuffer inter, DeviceBuffer y) {
        enqueue(stream, tokens, x, wRouter, rows, DeviceWeights.bf16(wGateUp), DeviceWeights.bf16(wDown), topkIds, topkWeights,
                inter, y);
    }

    /** As above, with the expert weights in the expert kernels' format. */
    public void enqueue(CudaStream stream, int tokens, DeviceBuffer x, DeviceBuffer wRouter, Map<String, DeviceBuffer> rows,
                        DeviceWeights wGateUp, DeviceWeights wDown, DeviceBuffer topkIds, DeviceBuffer topkWeights,
                        DeviceBuffer inter, DeviceBuffer y) {
        router.enqueue(stream, experts.order(), tokens, x, wRouter, rows, topkWeights, topkIds);
        experts.enqueue(stream, tokens, x, wGateUp, wDown, topkIds, topkWeights, inter, y);
    }
}
