package dev.moeforge.examples.decoder;

import dev.moeforge.checkpoint.Checkpoint;
import dev.moeforge.checkpoint.CheckpointExperts;
import dev.moeforge.dsl.build.Epilogues;
import dev.moeforge.dsl.build.KernelBuilder;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.InputNorm;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.LinearGemv;
import dev.moeforge.dsl.schedule.LinearMma;
import dev.moeforge.dsl.schedule.OutputCentric;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.runtime.cuda.CudaFunction;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaModule;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.cuda.Resources;
import dev.moeforge.runtime.dispatch.PoolStore;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.kernel.ModuleResource;
import dev.moeforge.runtime.moe.DeviceWeights;
import dev.moeforge.runtime.moe.ExpertHalf;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.Experts;
import dev.moeforge.runtime.moe.InputRows;
import dev.moeforge.runtime.moe.RouterKernel;
import dev.moeforge.runtime.moe.TokenKeyedLayer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.IntConsumer;

/**
 * The decoder on the GPU for {@code batch} sequences at once: the linear projections, the router and
 * the experts are DSL kernels (q, k and v fused into one projection), the rest is
 * {@code moeforge_decoder.cu}. One decode step (every layer, the LM head and the next token's pick)
 * is one CUDA graph, captured once and replayed; the positions and the step counter live on the
 * device, so nothing but the picked ids comes back to the host. A prompt runs in chunks of its
 * tokens on the tensor cores ({@link PromptKernels}), or, where the model's kernels do not allow
 * that, one token per replay of the same layers, without the pick.
 */
public final class GpuDecoder implements TokenModel, AutoCloseable {
    /** The decoder's own kernels (embedding, norms, RoPE, attention, residual adds, the pick). */
    public static final ModuleResource MODULE = new ModuleResource(GpuDecoder.class, "moeforge_decoder.cu");
    /** The row kernels' block (rms_norm, the adds with norms, q/k norm and RoPE), as moeforge_decoder.cu's kRowThreads. */
    private static final int ROW_THREADS = 512;
    /** The most values of a row those kernels take: kRowThreads x kPerThread. */
    private static final int MAX_ROW = 512 * 16;
    /** Attention blocks a step should launch at least: about four per SM of an H100, so short contexts still fill the device. */
    static final int ATTENTION_BLOCKS = 512;

    /**
     * Blocks per (token, head) of attention: a head's positions are cut into this many slices, each
     * a block with its own online softmax, merged by the block that finishes last. One slice per 64 positions of the
     * context the decoder keeps (one block walking 4,096 positions in turn was the step's slowest
     * part), but at least enough for {@link #ATTENTION_BLOCKS} blocks over the batch's heads (a batch
     * of 64 with 16 slices launched 32,768 blocks of two positions a warp), at most {@link #ATTENTION_MAX_SLICES}.
     */
    static int attentionSplits(int context, int batch, int heads) {
        int fill = Math.ceilDiv(ATTENTION_BLOCKS, batch * heads);
        return Math.clamp(Math.max(Math.ceilDiv(context, 64), fill), 1, ATTENTION_MAX_SLICES);
    }
    /** The most slices attention by head cuts a head's positions into (moeforge_decoder.cu's kAttnMaxSlices, its merge's scratch). */
    static final int ATTENTION_MAX_SLICES = 64;
    /**
     * Attention by head in thread block clusters ({@code attention_decode_cluster_<head_dim>}): a head's
     * slices, one cluster (moeforge_decoder.cu's kAttnClusterSlices), merged in distributed shared memory.
     */
    static final int CLUSTER_ATTENTION_SLICES = 8;
    /** Threads of a decode attention block, every kind (moeforge_decoder.cu's 32 * kAttnWarps and 32 * kGroupWarps). */
    static final int DECODE_ATTENTION_THREADS = 128;
    /**
     * Up to this cache capacity attention by head runs in clusters: the positions one round of the
     * cluster's loads covers (moeforge_decoder.cu's kAttnClusterSlices x kAttnGroups x kAttnClusterInFlight).
     */
    static final int CLUSTER_ATTENTION_POSITIONS = 512;
    /**
     * The most blocks attention in clusters launches: one sequence of the built-in model. Larger
     * grids take several waves of clusters of 124-register blocks and lost to the ticket merge
     * (bench/NOTES.md, "Attention by head in clusters for one sequence").
     */
    static final int CLUSTER_ATTENTION_BLOCKS = 256;
    /** Blocks sharing one token's pick (each a slice of the vocabulary). */
    private static final int PICK_BLOCKS = 64;
    /** sample_cut's grid per sequence: one cluster of the kernel's kCutBlocks blocks of kCutThreads. */
    static final int CUT_BLOCKS = 8;
    static final int CUT_THREADS = 512;
    /**
     * Every kernel of a step lets the next one begin launching at its start (programmatic dependent
     * launch), so the step's several hundred launches overlap the work instead of following it.
     */
    private static final LaunchOrder ORDER = LaunchOrder.OVERLAPPING_PREVIOUS;

    private final ModelConfig c;
    private final KernelRuntime runtime;
    private final CudaStream stream;
    private final int batch;
    private final int context;
    private final int maxSteps;
    private final List<DeviceBuffer> owned = new ArrayList<>();
    private final List<AutoCloseable> closers = new ArrayList<>();

    // weights
    private final DeviceBuffer embed;
    private final DeviceBuffer finalNorm;
    private final DeviceBuffer lmHead;
    private final List<LayerOnDevice> layers = new ArrayList<>();
    private final DeviceBuffer invFreq;

    // kernels
    private final Projection qkvProj;
    private final Projection oProj;
    private final KernelHandle head;
    private final RouterKernel router;
    private final Experts experts;
    private final Optional<String> tunedNote;
    private final ExpertLayer denseMlp;
    private final CudaFunction embedTokens;
    private final CudaFunction rmsNorm;
    private final CudaFunction qkNormRope;
    private final CudaFunction attention;
    private final CudaFunction addF32Norm;
    private final CudaFunction addBf16Norm;
    private final CudaFunction pickNext;
    private final CudaFunction sampleCut;
    private final CudaFunction endStep;
    private final CudaModule module;
    private final Kernels kernels;

    // activations and state
    private final DeviceBuffer x;          // [B][H] fp32 residual
    private final DeviceBuffer xAlt;       // [B][H] fp32: the residual's other buffer, where a kernel norming its input writes it
    private final DeviceBuffer zeros;      // [B][H] bf16 zeros: the first layer's addend, where its q/k/v projection norms its input
    private final DeviceBuffer normed;     // [B][max(H, qDim)] bf16
    private final DeviceBuffer qkv;        // [B][qkvDim] the projection's output: fp32, or bf16 from tiles
    private final DeviceBuffer q;          // [B][qDim] fp32, roped
    private final DeviceBuffer attnOut;    // [B][qDim] bf16
    private final DecodeAttention decodeAttention;
    private final DeviceBuffer attnParts;  // [B][heads][slices][head_dim + 2] fp32
    private final DeviceBuffer attnTickets; // [B][heads] int32, zero between layers
    private final DeviceBuffer projected;  // [B][H] the projection's output: fp32, or bf16 from tiles
    private final DeviceBuffer topkIds;
    private final DeviceBuffer topkWeights;
    private final DeviceBuffer inter;
    private final DeviceBuffer moeOut;     // [B][H] bf16
    private final DeviceBuffer denseIds;
    private final DeviceBuffer denseWeights;
    private final DeviceBuffer denseInter;
    private final DeviceBuffer logits;     // [B][V] fp32
    private final DeviceBuffer next;       // [B] int32
    private final DeviceBuffer positions;  // [B] int32
    private final DeviceBuffer step;       // [1] int32
    private final DeviceBuffer history;    // [B][maxSteps] int32
    private final DeviceBuffer pickBest;   // [B] u64, zero between picks
    private final DeviceBuffer pickTickets; // [B] int32, zero between picks
    private final DeviceBuffer pickCut;    // [B][2] u32: where each sequence's top-k/top-p prefix ends
    private final List<DeviceBuffer> kCache = new ArrayList<>();
    private final List<DeviceBuffer> vCache = new ArrayList<>();
    private float temperature;
    private int topK;
    private float topP = 1;
    private long seed;
    private CudaGraph layersGraph;
    private CudaGraph stepGraph;
    private int position;
    private int promptChunk;
    private PromptChunks prompt;

    /** A layer on the device; {@code qkv} and {@code o} are each projection's matrix, then its bias where it has one. */
    private record LayerOnDevice(DeviceBuffer inputNorm, DeviceBuffer postNorm, DeviceWeights qkv, DeviceWeights o, DeviceBuffer qNorm, DeviceBuffer kNorm, DeviceBuffer sinks,
                                 DeviceBuffer wRouter, DeviceBuffer bRouter, DeviceWeights gateUp, DeviceWeights down,
                                 boolean moe) {}

    /**
     * Loads the model's weights from the checkpoint onto the GPU and its kernels through the runtime.
     *
     * @param progress told the index of each layer once it is on the device
     */
    public GpuDecoder(ModelConfig config, Checkpoint ckpt, KernelRuntime runtime, CudaStream stream, int batch, int context,
                      int maxSteps, IntConsumer progress) {
        this(config, new Weights.FromCheckpoint(ckpt, Optional.empty()), runtime, stream, batch, context, maxSteps, progress);
    }

    /** Where the weights come from: a checkpoint, or random values made on the device (the built-in model). */
    public sealed interface Weights {
        /**
         * The checkpoint's tensors, each read (converted to bf16 where it is not) and copied to the
         * device; the experts as stored, or re-encoded in {@code experts} ({@link ExpertFormats}).
         */
        record FromCheckpoint(Checkpoint ckpt, Optional<WeightFormat> experts) implements Weights {}

        /**
         * Each tensor drawn on the device from the seed and its name, scaled as {@link RandomModel}
         * scales them; the experts in bf16, or in {@code experts}: then one layer's experts drawn and
         * encoded on the host ({@link ExpertFormats#random}) and copied to every layer.
         */
        record Random(long seed, Optional<WeightFormat> experts) implements Weights {}
    }

    /** The decoder of a model whose weights come from {@code source}, its projections' kernels chosen by the batch. */
    public GpuDecoder(ModelConfig config, Weights source, KernelRuntime runtime, CudaStream stream, int batch, int context,
                      int maxSteps, IntConsumer progress) {
        this(config, source, runtime, stream, batch, context, maxSteps, progress, KernelChoice.BY_BATCH);
    }

    /**
     * The same with the decode step's projections, attention and experts on the kernels {@code choice} names (to compare
     * them), or its experts on a tuned pool's pair.
     */
    public GpuDecoder(ModelConfig config, Weights source, KernelRuntime runtime, CudaStream stream, int batch, int context,
                      int maxSteps, IntConsumer progress, KernelChoice choice) {
        if (batch < 1 || context < 2 || maxSteps < 1) {
            throw new IllegalArgumentException("batch, context and steps must be positive (context at least 2), got " + batch
                    + ", " + context + ", " + maxSteps);
        }
        try {
            this.c = config;
            this.runtime = runtime;
            this.stream = stream;
            this.batch = batch;
            this.context = context;
            this.maxSteps = maxSteps;
            Target target = runtime.target();
            switch (choice.tunedPools()) {
                case TunedPools.Given(TunedPool given) -> given.checkTarget(target);  // before any upload
                case TunedPools.Installed _, TunedPools.None _ -> { }  // an installed pool is looked up by its target
            }
            int h = c.hidden();
            int qDim = c.heads() * c.headDim();
            int kvDim = c.kvHeads() * c.headDim();
            int qkvDim = qDim + 2 * kvDim;

            boolean bias = c.attentionBias();
            module = runtime.loadResource(MODULE);
            embedTokens = module.function("embed_tokens");
            rmsNorm = module.function("rms_norm");
            addF32Norm = module.function("add_f32_rms_norm");
            addBf16Norm = module.function("add_bf16_rms_norm");
            pickNext = module.function("pick_next");
            sampleCut = module.function("sample_cut");
            endStep = module.function("end_step");
            if (!DECODE_HEAD_DIMS.contains(c.headDim())) {
                throw new IllegalArgumentException("head_dim " + c.headDim() + ": the decoder's attention on the GPU takes "
                        + new java.util.TreeSet<>(DECODE_HEAD_DIMS));
            }
            decodeAttention = DecodeAttention.of(c, context, batch, choice.attention());
            attention = module.function(decodeAttention.kernel());
            if (decodeAttention.sharedBytes() > 48 * 1024) {
                attention.setMaxDynamicSharedBytes(decodeAttention.sharedBytes());
            }
            if (h > MAX_ROW || qkvDim > MAX_ROW) {
                throw new IllegalArgumentException("hidden_size " + h + " and the fused q/k/v row of " + qkvDim
                        + " values: the decoder's row kernels take at most " + MAX_ROW);
            }

            // weights
            Fill fill = new Fill(module.function("fill_normal_bf16"), module.function("fill_normal_f32"));
            embed = matrix(source, fill, "model.embed_tokens.weight", c.vocab(), h, 1.0);
            finalNorm = vector(source, fill, "model.norm.weight", h, Vector.NORM);
            lmHead = c.tieEmbeddings() ? embed : matrix(source, fill, "lm_head.weight", c.vocab(), h, 1 / Math.sqrt(h));
            invFreq = f32(c.rope().inverseFrequencies(c.headDim()));
            MoeBlock block = null;
            TunedPool.Lookup tuned = new TunedPool.Lookup(Optional.empty(), Optional.empty());
            CheckpointExperts.LayerWeights randomExperts = null;
            boolean norms = c.arch() == Architecture.QWEN3_MOE || c.arch() == Architecture.OLMOE;
            for (int l = 0; l < c.layers(); l++) {
                String p = ModelWeights.layerPrefix(l);
                String a = p + "self_attn.";
                DeviceBuffer wQkv = switch (source) {
                    case Weights.FromCheckpoint(Checkpoint ckpt, var _) -> bf16(concat(bf16Of(ckpt, a + "q_proj.weight", (long) qDim * h),
                            bf16Of(ckpt, a + "k_proj.weight", (long) kvDim * h), bf16Of(ckpt, a + "v_proj.weight", (long) kvDim * h)));
                    case Weights.Random _ -> matrix(source, fill, a + "qkv_proj.weight", qkvDim, h, 1 / Math.sqrt(h));
                };
                DeviceBuffer bQkv = !bias ? null : switch (source) {
                    case Weights.FromCheckpoint(Checkpoint ckpt, var _) -> f32(concatFloats(sized(ckpt, a + "q_proj.bias", qDim),
                            sized(ckpt, a + "k_proj.bias", kvDim), sized(ckpt, a + "v_proj.bias", kvDim)));
                    case Weights.Random _ -> vector(source, fill, a + "qkv_proj.bias", qkvDim, Vector.BIAS);
                };
                DeviceBuffer wO = matrix(source, fill, a + "o_proj.weight", h, qDim, 1 / Math.sqrt(qDim));
                DeviceBuffer bO = bias ? vector(source, fill, a + "o_proj.bias", h, Vector.BIAS) : null;
                int qNormLength = c.arch() == Architecture.OLMOE ? qDim : c.headDim();
                int kNormLength = c.arch() == Architecture.OLMOE ? kvDim : c.headDim();
                DeviceBuffer qn = norms ? vector(source, fill, a + "q_norm.weight", qNormLength, Vector.NORM) : null;
                DeviceBuffer kn = norms ? vector(source, fill, a + "k_norm.weight", kNormLength, Vector.NORM) : null;
                DeviceBuffer sinks = c.arch() == Architecture.GPT_OSS ? vector(source, fill, a + "sinks", c.heads(), Vector.SINK) : null;
                DeviceBuffer inputNorm = vector(source, fill, p + "input_layernorm.weight", h, Vector.NORM);
                DeviceBuffer postNorm = vector(source, fill, p + "post_attention_layernorm.weight", h, Vector.NORM);
                LayerOnDevice layer;
                if (c.moeLayers().get(l)) {
                    String moe = source instanceof Weights.FromCheckpoint(Checkpoint ckpt, var _) ? ModelWeights.moePrefix(c, ckpt, p)
                            : p + "mlp";
                    String r = ModelWeights.routerPrefix(c, moe);
                    DeviceBuffer wRouter = matrix(source, fill, r + ".weight", c.experts(), h, 1 / Math.sqrt(h));
                    DeviceBuffer bRouter = c.arch() == Architecture.GPT_OSS ? vector(source, fill, r + ".bias", c.experts(), Vector.BIAS)
                            : null;
                    DeviceWeights gateUp;
                    DeviceWeights down;
                    switch (source) {
                        case Weights.FromCheckpoint(Checkpoint ckpt, Optional<WeightFormat> format) -> {
                            CheckpointExperts.LayerWeights w = ExpertFormats.reencode(CheckpointExperts.load(ckpt, moe, c.experts()),
                                    format, moe);
                            boolean expertBias = w.gateUpBias().isPresent();
                            block = MoeBlock.of(c, w.gateUp().format(), w.layout(), expertBias);
                            gateUp = own(expertBias ? DeviceWeights.upload(w.gateUp(), w.gateUpBias().orElseThrow())
                                    : DeviceWeights.upload(w.gateUp()));
                            down = own(expertBias ? DeviceWeights.upload(w.down(), w.downBias().orElseThrow())
                                    : DeviceWeights.upload(w.down()));
                        }
                        case Weights.Random(long seed, Optional<WeightFormat> format) when format.isPresent()
                                && !format.get().equals(WeightFormat.BF16) -> {
                            if (randomExperts == null) {
                                randomExperts = ExpertFormats.random(c, format.get(), seed);
                            }
                            block = MoeBlock.of(c, format.get(), GateUpLayout.STACKED, false);
                            gateUp = own(DeviceWeights.upload(randomExperts.gateUp()));
                            down = own(DeviceWeights.upload(randomExperts.down()));
                        }
                        case Weights.Random _ -> {
                            int in = c.expertIntermediate();
                            block = MoeBlock.of(c, WeightFormat.BF16, GateUpLayout.STACKED, false);
                            gateUp = DeviceWeights.bf16(matrix(source, fill, moe + ".experts.gate_up_proj", (long) c.experts() * 2 * in, h,
                                    1 / Math.sqrt(h)));
                            down = DeviceWeights.bf16(matrix(source, fill, moe + ".experts.down_proj", (long) c.experts() * h, in,
                                    1 / Math.sqrt(in)));
                        }
                    }
                    if (l == c.moeLayers().indexOf(true)) {  // the experts' format is known from the first
                        tuned = tunedPool(choice.tunedPools(), block, target);
                    }
                    layer = new LayerOnDevice(inputNorm, postNorm, projectionWeights(wQkv, bQkv), projectionWeights(wO, bO), qn, kn, sinks,
                            wRouter, bRouter, gateUp, down, true);
                } else {
                    int in = c.denseIntermediate();
                    DeviceBuffer stacked = switch (source) {
                        case Weights.FromCheckpoint(Checkpoint ckpt, var _) -> bf16(concat(bf16Of(ckpt, p + "mlp.gate_proj.weight", (long) in * h),
                                bf16Of(ckpt, p + "mlp.up_proj.weight", (long) in * h)));
                        case Weights.Random _ -> matrix(source, fill, p + "mlp.gate_up_proj.weight", 2L * in, h, 1 / Math.sqrt(h));
                    };
                    layer = new LayerOnDevice(inputNorm, postNorm, projectionWeights(wQkv, bQkv), projectionWeights(wO, bO), qn, kn, sinks, null, null,
                            DeviceWeights.bf16(stacked), DeviceWeights.bf16(matrix(source, fill, p + "mlp.down_proj.weight", h, in,
                            1 / Math.sqrt(in))), false);
                }
                layers.add(layer);
                progress.accept(l);
            }
            // the DSL kernels, once the experts' format is known
            Kernels k = Kernels.of(c, block, target, batch, choice.projections(), choice.experts());
            kernels = k;
            promptChunk = Math.min(context, PROMPT_CHUNK);
            qkvProj = projection(k.qkv());
            oProj = projection(k.o());
            qkNormRope = qkNormKernel(qkvProj.output());
            head = runtime.load(k.head());
            router = k.router() == null ? null : own(new RouterKernel(runtime.load(k.router()), batch));
            Optional<TunedPool> serving = tuned.pool().filter(pool -> pool.covers(batch));
            experts = k.gateUp() == null ? null : serving.isPresent() ? own(keyedOnBatch(serving.get()))
                    : own(new ExpertLayer(runtime.load(k.gateUp()), runtime.load(k.down()), ORDER));
            tunedNote = tuned.pool().map(pool -> pool.covers(batch) ? "the decode steps' experts from " + pool.dir() + ", keyed on "
                    + batch + " tokens" : pool.outside(batch)).or(tuned::why);
            denseMlp = k.denseGateUp() == null ? null
                    : own(new ExpertLayer(runtime.load(k.denseGateUp()), runtime.load(k.denseDown()), ORDER));

            // activations and state
            x = buffer(DType.FP32, (long) batch * h);
            xAlt = buffer(DType.FP32, (long) batch * h);
            zeros = buffer(DType.BF16, (long) batch * h);
            zeros.fillWords32(0);
            normed = buffer(DType.BF16, (long) batch * Math.max(h, qDim));
            qkv = buffer(qkvProj.output(), (long) batch * qkvDim);
            q = buffer(DType.FP32, (long) batch * qDim);
            attnOut = buffer(DType.BF16, (long) batch * qDim);
            attnParts = buffer(DType.FP32, (long) batch * c.heads() * decodeAttention.slices() * (c.headDim() + 2));
            attnTickets = buffer(DType.INT32, (long) batch * c.heads());
            attnTickets.fillWords32(0);
            projected = buffer(oProj.output(), (long) batch * h);
            topkIds = buffer(DType.INT32, (long) batch * c.topk());
            topkWeights = buffer(DType.FP32, (long) batch * c.topk());
            inter = experts == null ? buffer(DType.BF16, 1) : own(experts.allocateInter(batch));
            moeOut = buffer(DType.BF16, (long) batch * h);
            denseIds = buffer(DType.INT32, batch);
            denseIds.fillWords32(0);
            denseWeights = buffer(DType.FP32, batch);
            denseWeights.fillWords32(Float.floatToIntBits(1f));
            denseInter = buffer(DType.BF16, (long) batch * Math.max(1, c.denseIntermediate()));
            logits = buffer(DType.FP32, (long) batch * c.vocab());
            next = buffer(DType.INT32, batch);
            positions = buffer(DType.INT32, batch);
            step = buffer(DType.INT32, 1);
            history = buffer(DType.INT32, (long) batch * maxSteps);
            pickBest = buffer(DType.INT32, 2L * batch);  // u64 per token
            pickBest.fillWords32(0);
            pickTickets = buffer(DType.INT32, batch);
            pickTickets.fillWords32(0);
            pickCut = buffer(DType.INT32, 2L * batch);
            for (int l = 0; l < c.layers(); l++) {
                kCache.add(buffer(DType.BF16, (long) batch * context * kvDim));
                vCache.add(buffer(DType.BF16, (long) batch * context * kvDim));
            }
            for (Projection p : List.of(qkvProj, oProj)) {
                if (p instanceof Projection.Tiles(ExpertHalf half)) {  // every row to the one expert, every step: the plan is built once
                    half.enqueuePlan(stream, batch, denseIds);
                }
            }
            stream.synchronize();
            reset();
        } catch (RuntimeException | Error e) {
            try {
                close();  // what was allocated before the failure
            } catch (RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        }
    }

    /**
     * A decode step's projection: a {@code linear} kernel (FP32 out), or one expert's
     * {@code expert_centric} down half at top-1 (bf16 out) over a routing plan built once, every row
     * to the expert.
     */
    private sealed interface Projection {
        record Linear(KernelHandle kernel) implements Projection {}

        record Tiles(ExpertHalf half) implements Projection {}

        default DType output() {
            return switch (this) {
                case Linear _ -> DType.FP32;
                case Tiles _ -> DType.BF16;
            };
        }
    }

    private Projection projection(KernelSpec spec) {
        KernelHandle handle = runtime.load(spec);
        return spec.problem() instanceof Problem.ExpertDown ? new Projection.Tiles(own(ExpertHalf.alone(handle, ORDER, batch)))
                : new Projection.Linear(handle);
    }

    /**
     * The q/k norm with RoPE and the cache write for a fused q/k/v row of {@code qkvType} (the
     * projection's output): OLMoE's norm spans every head, so one block a row holding the row in
     * shared memory as floats; the others' one block a head.
     */
    private CudaFunction qkNormKernel(DType qkvType) {
        String type = qkvType == DType.BF16 ? "_bf16" : "";
        if (c.arch() != Architecture.OLMOE) {
            return module.function("qk_norm_rope_cache_heads" + type);
        }
        CudaFunction f = module.function("qk_norm_rope_cache" + type);
        int rowBytes = (c.heads() + 2 * c.kvHeads()) * c.headDim() * 4;
        if (rowBytes > 48 * 1024) {
            f.setMaxDynamicSharedBytes(rowBytes);
        }
        return f;
    }

    /**
     * Layer l's q/k norm with RoPE for {@code rows} rows of {@code qkvRows} at {@code rowPositions},
     * q to {@code qOut}, k and v to the cache: each row's own sequence ({@code copies} 0, a decode
     * step) or sequences 0 .. copies-1 (a prompt's rows, shared by the batch).
     */
    private void enqueueQkNormRope(CudaFunction kernel, int l, LayerOnDevice w, int rows, DeviceBuffer qkvRows,
                                   DeviceBuffer rowPositions, DeviceBuffer qOut, int copies) {
        int qkvDim = (c.heads() + 2 * c.kvHeads()) * c.headDim();
        float eps = (float) c.rmsEps();
        if (c.arch() == Architecture.OLMOE) {
            kernel.launch(ORDER, rows, 1, 1, ROW_THREADS, 1, 1, qkvDim * 4, stream, qkvRows, w.qNorm(), w.kNorm(),
                    (float) c.clipQkv().orElse(0), eps, rowPositions, invFreq, c.rope().attentionScaling(), qOut, kCache.get(l),
                    vCache.get(l), c.heads(), c.kvHeads(), c.headDim(), context, copies);
        } else {
            int perHeadNorm = c.arch() == Architecture.QWEN3_MOE ? 1 : 0;
            kernel.launch(ORDER, c.heads() + 2 * c.kvHeads(), rows, 1, 32 * Math.ceilDiv(c.headDim(), 32), 1, 1, 0, stream, qkvRows,
                    ptr(w.qNorm()), ptr(w.kNorm()), perHeadNorm, eps, rowPositions, invFreq, c.rope().attentionScaling(), qOut,
                    kCache.get(l), vCache.get(l), c.heads(), c.kvHeads(), c.headDim(), context, copies);
        }
    }

    /** A projection's weights as its kernels read them: the matrix, then its bias where it has one. */
    private static DeviceWeights projectionWeights(DeviceBuffer w, DeviceBuffer bias) {
        return bias == null ? DeviceWeights.bf16(w) : new DeviceWeights(WeightFormat.BF16, DeviceWeights.Layout.NATURAL, List.of(w, bias));
    }

    /** Forgets the sequences: position 0, step 0. */
    public void reset() {
        positions.fillWords32(0);
        step.fillWords32(0);
        position = 0;
    }

    /** Sampling for {@link #generate}: temperature 0 is greedy; otherwise softmax(logits / T), drawn from the seed. */
    public void sampling(double temperature, long seed) {
        sampling(new Sampler.Options(temperature, 0, 1, seed));
    }

    /**
     * Sampling for {@link #generate} as {@link Sampler} does it, on the device: greedy at temperature
     * 0, else softmax(logits / T) over the top-k tokens cut to top-p (sample_cut), drawn from the
     * seed (sequence b from seed + b's draws, by the Gumbel-max rule).
     */
    public void sampling(Sampler.Options options) {
        this.temperature = (float) options.temperature();
        this.topK = options.topK();
        this.topP = (float) options.topP();
        this.seed = options.seed();
        if (stepGraph != null) {  // captured with the old values
            stepGraph.close();
            stepGraph = null;
        }
    }

    @Override
    public float[] forward(int[] tokens) {
        runPrompt(tokens, false);
        float[] out = new float[c.vocab()];
        float[] all = new float[batch * c.vocab()];
        stream.synchronize();
        logits.copyTo(all);
        System.arraycopy(all, 0, out, 0, c.vocab());
        return out;
    }

    /**
     * What {@link #generate} did: the picks {@code [batch][steps]}, the prompt's time (its tokens
     * one per replay, then the first pick, back on the host) and the later steps' time (each one
     * graph replay and its picks back on the host).
     */
    public record Generated(int[][] ids, long prefillNanos, long decodeNanos) {
        public int steps() {
            return ids.length == 0 ? 0 : ids[0].length;
        }
    }

    /**
     * Runs the prompt (the same for every sequence), then generates up to {@code maxTokens} tokens
     * per sequence on the device; {@code perStep} is given each step's picks ({@code [batch]}) as
     * they come back, and stops generation by returning false.
     */
    public Generated generate(int[] prompt, int maxTokens, java.util.function.Predicate<int[]> perStep) {
        if (maxTokens > maxSteps) {
            throw new IllegalArgumentException(maxTokens + " tokens asked for; this decoder keeps " + maxSteps);
        }
        if (stepGraph == null) {  // captured before the clock starts, as a served model's would be
            stepGraph = CudaGraph.capture(stream, () -> {
                enqueueLayers();
                enqueuePick();
            });
        }
        long start = System.nanoTime();
        runPrompt(prompt, true);
        int[] picks = new int[batch];
        stream.synchronize();
        next.copyTo(picks);
        long prefill = System.nanoTime() - start;
        int steps = 1;
        long decode = 0;  // the steps alone: what perStep does with the picks is the caller's time
        boolean more = perStep.test(picks.clone());
        while (more && steps < maxTokens && position < context) {
            long t = System.nanoTime();
            stepGraph.launch(stream);
            position++;
            stream.synchronize();
            next.copyTo(picks);
            decode += System.nanoTime() - t;
            steps++;
            more = perStep.test(picks.clone());
        }
        int[] all = new int[batch * maxSteps];
        history.copyTo(all);
        int[][] out = new int[batch][steps];
        for (int b = 0; b < batch; b++) {
            System.arraycopy(all, b * maxSteps, out[b], 0, steps);
        }
        return new Generated(out, prefill, decode);
    }

    /**
     * The prompt: of two tokens or more, in chunks on the tensor cores where the model's kernels
     * allow ({@link PromptChunks}), else one token per replay of the layers; with {@code pick}, the
     * last token's logits then pick the first new token.
     */
    private void runPrompt(int[] tokens, boolean pick) {
        TokenModel.checkTokens(tokens, position, context, c.vocab());
        if (tokens.length > 1 && promptsInChunks()) {
            if (prompt == null) {
                prompt = new PromptChunks(promptChunk);
            }
            prompt.run(tokens);
            position += tokens.length;
            int[] pos = new int[batch];
            Arrays.fill(pos, position - 1);
            stream.synchronize();
            positions.copyFrom(pos);  // the last prompt token's; the pick advances them
        } else {
            runPromptTokens(tokens);
        }
        if (pick) {
            stream.synchronize();
            step.fillWords32(0);
            enqueuePick();  // after the last token's layers; it advances positions to `position`
        }
    }

    /** The prompt one token per replay of the layers (their last logits stay). */
    private void runPromptTokens(int[] tokens) {
        if (layersGraph == null) {
            layersGraph = CudaGraph.capture(stream, this::enqueueLayers);
        }
        int[] ids = new int[batch];
        int[] pos = new int[batch];
        for (int token : tokens) {
            Arrays.fill(ids, token);
            Arrays.fill(pos, position);
            stream.synchronize();  // the previous replay has read next and positions
            next.copyFrom(ids);
            positions.copyFrom(pos);
            layersGraph.launch(stream);
            position++;
        }
    }

    /** The most prompt tokens one chunk takes. */
    static final int PROMPT_CHUNK = 2048;
    /** The head dimensions the prompt's tensor-core attention is built for. */
    private static final Set<Integer> PROMPT_HEAD_DIMS = Set.of(16, 32, 64, 128);

    /** The head dimensions the decode steps' attention is built for ({@code attention_decode_<head_dim>}). */
    static final Set<Integer> DECODE_HEAD_DIMS = Set.of(16, 32, 64, 128, 256);

    /** Query rows per block of the prompt's attention (moeforge_decoder.cu's kPrefillRows). */
    static final int PROMPT_ATTENTION_ROWS = 64;

    /**
     * Dynamic shared memory of {@code attention_prefill_<head_dim>}: two stages of a k and a v tile of
     * 64 keys, each row padded by 8 bf16 (moeforge_decoder.cu's PrefillTile).
     */
    static int promptAttentionBytes(int headDim) {
        return 2 * 2 * 64 * (headDim + 8) * 2;
    }

    /** The most q heads of a kv group {@code attention_decode_group_<head_dim>} takes: the rows of one mma tile. */
    static final int GROUP_ATTENTION_ROWS = 16;
    /**
     * Blocks a step's attention by kv group aims for: about two per SM. Slices are cut only that far, as
     * many as split the cache's capacity into equal runs of whole 64-position tiles (the staged tile; the
     * kernel splits the positions written so far evenly, so a full cache gives each slice whole tiles, a
     * filling one fewer), and at most {@link #GROUP_ATTENTION_SLICES}: each slice's part is one more for the
     * block that merges them, and those reads outweighed the longer walk of fewer slices (bench/NOTES.md).
     */
    static final int GROUP_ATTENTION_BLOCKS = 256;
    /** The most slices of a sequence's positions attention by kv group cuts. */
    static final int GROUP_ATTENTION_SLICES = 16;
    /** The slices the kernel's merge scratch is sized for (moeforge_decoder.cu's kGroupMaxSlices). */
    static final int GROUP_ATTENTION_MERGE_SLICES = 64;

    /** From this batch a decode step's attention runs by kv group where the model allows it ({@link #groupAttentionPays}). */
    static final int GROUP_ATTENTION_FROM_BATCH = 8;

    /**
     * Whether attention by kv group made the whole decode step faster than by head: from 8 sequences
     * (on the H200 at 512 positions; on the H100 it had won from 16, and from 8 over 2,048 positions),
     * from one over 4,096. At 4 sequences the kernel by head won the step although attention alone was
     * slower (bench/NOTES.md).
     */
    static boolean groupAttentionPays(int batch, int context) {
        return batch >= GROUP_ATTENTION_FROM_BATCH || context >= 4096;
    }

    /** Which kernel runs a decode step's attention: the decoder's choice, or one kind wherever it applies (to compare them). */
    public enum AttentionKernels {
        /**
         * By kv group where {@link DecodeAttention#byGroup} allows it and the batch or the cache is
         * large enough ({@link #groupAttentionPays}), else by head.
         */
        BY_BATCH,
        /**
         * By head: one head's slice per block, the slices in one cluster ({@code attention_decode_cluster_<head_dim>})
         * up to {@link #CLUSTER_ATTENTION_POSITIONS} positions of cache and {@link #CLUSTER_ATTENTION_BLOCKS} blocks, else
         * merged by a ticket ({@code attention_decode_<head_dim>}).
         */
        BY_HEAD,
        /** {@code attention_decode_group_<head_dim>} where it applies (as {@link #BY_BATCH}). */
        BY_GROUP
    }

    /** A decode step's expert halves: the decoder's choice by batch, or one family at every batch (`bench decode --experts`). */
    public enum ExpertKernels {
        /** Output-centric token tiles below {@link #expertCentricFrom} sequences, expert-centric tiles from there ({@link #expertHalf}). */
        BY_BATCH,
        /** The catalogue's output-centric token tiles at every batch. */
        OUTPUT_CENTRIC,
        /** Expert-centric tiles of {@link #EXPERT_TILE_PAIRS} pairs at every batch: the catalogue's, or its schedule carried ({@link #expertHalf}). */
        EXPERT_CENTRIC
    }

    /** Where a decode step's experts may take a tuned pool's pairs from instead of the catalogue's. */
    public sealed interface TunedPools {
        /** The catalogue's pairs only. */
        record None() implements TunedPools {}

        /** A pool the caller names (--tuned DIR): refused where it does not fit the model or the device's target. */
        record Given(TunedPool pool) implements TunedPools {}

        /**
         * The pool {@code store} holds for the experts' geometry, format, target and device, where one fits them; else the
         * catalogue's pairs, saying why ({@link #tunedPoolNote}).
         */
        record Installed(PoolStore store) implements TunedPools {}
    }

    /**
     * The decode step's kernel choices: the projections', attention's and experts' (`bench decode` can force them), and
     * where a tuned pool's pairs may come from for the experts instead of the catalogue's.
     */
    public record KernelChoice(ProjectionKernels projections, AttentionKernels attention, ExpertKernels experts,
                               TunedPools tunedPools) {
        /** The decoder's own choices, on the catalogue's pairs. */
        public static final KernelChoice BY_BATCH = new KernelChoice(ProjectionKernels.BY_BATCH, AttentionKernels.BY_BATCH,
                ExpertKernels.BY_BATCH, new TunedPools.None());

        public KernelChoice {
            String pools = switch (tunedPools) {
                case TunedPools.None _ -> null;
                case TunedPools.Given _ -> "a tuned pool (--tuned)";
                case TunedPools.Installed _ -> "the installed tuned pools";
            };
            if (pools != null && experts != ExpertKernels.BY_BATCH) {
                throw new IllegalArgumentException(pools + " and the expert kernels " + experts.name().toLowerCase(Locale.ROOT).replace('_', '-')
                        + " (--experts) both choose the decode step's experts: give one");
            }
        }

        /**
         * The same with a decode step's experts from a tuned pool ({@code moeforge tune}), keyed on the batch where
         * its profile covers the batch ({@link TunedPool#covers}).
         */
        public KernelChoice withTunedPool(TunedPool pool) {
            return new KernelChoice(projections, attention, experts, new TunedPools.Given(pool));
        }

        /** The same with a decode step's experts from the pool {@code store} holds for them, where it holds one that fits. */
        public KernelChoice withInstalledPools(PoolStore store) {
            return new KernelChoice(projections, attention, experts, new TunedPools.Installed(store));
        }
    }

    /**
     * A decode step's attention kernel and its grid: by kv group on the tensor cores
     * ({@code attention_decode_group_<head_dim>}: grid (kv_heads, slices, batch), each kv row read
     * once for the group's heads) where a group has 2 to {@link #GROUP_ATTENTION_ROWS} heads and the
     * head size is one the prompt's tiles take; else by head, grid (heads, slices, batch): for a cache
     * of up to {@link #CLUSTER_ATTENTION_POSITIONS} positions and a grid of up to
     * {@link #CLUSTER_ATTENTION_BLOCKS} blocks in clusters of the head's slices
     * ({@code attention_decode_cluster_<head_dim>}), else {@code attention_decode_<head_dim>}.
     *
     * @param kernel      the kernel's name in moeforge_decoder.cu
     * @param blocks      the grid's x: kv heads or heads
     * @param slices      the grid's y: slices of each sequence's positions, merged in the cluster or by the block that finishes last
     * @param sharedBytes the launch's dynamic shared memory
     */
    record DecodeAttention(String kernel, int blocks, int slices, int sharedBytes) {
        static DecodeAttention of(ModelConfig c, int context, int batch, AttentionKernels choice) {
            boolean group = switch (choice) {
                case BY_BATCH -> byGroup(c) && groupAttentionPays(batch, context);
                case BY_GROUP -> byGroup(c);
                case BY_HEAD -> false;
            };
            if (group) {
                int fill = Math.clamp(Math.ceilDiv(GROUP_ATTENTION_BLOCKS, batch * c.kvHeads()), 1, GROUP_ATTENTION_SLICES);
                int tiles = Math.ceilDiv(context, 64);
                int slices = Math.ceilDiv(tiles, Math.ceilDiv(tiles, fill));  // equal runs of whole tiles, at most fill
                return new DecodeAttention("attention_decode_group_" + c.headDim(), c.kvHeads(), slices,
                        groupAttentionBytes(c.headDim()));
            }
            if (context <= CLUSTER_ATTENTION_POSITIONS && (long) c.heads() * CLUSTER_ATTENTION_SLICES * batch <= CLUSTER_ATTENTION_BLOCKS) {
                return new DecodeAttention("attention_decode_cluster_" + c.headDim(), c.heads(), CLUSTER_ATTENTION_SLICES, 0);
            }
            return new DecodeAttention("attention_decode_" + c.headDim(), c.heads(), attentionSplits(context, batch, c.heads()), 0);
        }

        /** Whether a model's kv groups fit the tensor cores' tiles: 2 to {@link #GROUP_ATTENTION_ROWS} heads of a size the tiles take. */
        static boolean byGroup(ModelConfig c) {
            int group = c.heads() / c.kvHeads();
            return group >= 2 && group <= GROUP_ATTENTION_ROWS && PROMPT_HEAD_DIMS.contains(c.headDim());
        }
    }

    /**
     * Dynamic shared memory of {@code attention_decode_group_<head_dim>} (moeforge_decoder.cu's
     * GroupTile): the prompt's staged tiles, or where more, each warp's [16][head_dim + 2] sums and
     * the merge's max and scale per (row, slice).
     */
    static int groupAttentionBytes(int headDim) {
        return Math.max(promptAttentionBytes(headDim),
                4 * GROUP_ATTENTION_ROWS * (headDim + 2) * 4 + 2 * GROUP_ATTENTION_ROWS * GROUP_ATTENTION_MERGE_SLICES * 4);
    }

    /**
     * The tuned pool a decode step's experts may take, once their function is known: the given one (refused where it
     * computes another function than {@code block}), or the installed one that fits them.
     */
    private TunedPool.Lookup tunedPool(TunedPools pools, MoeBlock block, Target target) {
        return switch (pools) {
            case TunedPools.None _ -> new TunedPool.Lookup(Optional.empty(), Optional.empty());
            case TunedPools.Given(TunedPool pool) -> {
                pool.checkComputes(block);
                yield new TunedPool.Lookup(Optional.of(pool), Optional.empty());
            }
            case TunedPools.Installed(PoolStore store) -> TunedPool.installed(store, c, block, target, runtime.context().deviceName());
        };
    }

    /** A tuned pool's pair for a decode step of this batch ({@link TokenKeyedLayer}). */
    private TokenKeyedLayer keyedOnBatch(TunedPool pool) {
        TokenKeyedLayer layer = TokenKeyedLayer.of(runtime, pool.loaded(), pool.table(), ORDER, batch);
        layer.prepare(batch);
        return layer;
    }

    /** Where a tuned pool was given or looked for: whether the decode steps take its pair, or why they keep the catalogue's. */
    public Optional<String> tunedPoolNote() {
        return tunedNote;
    }

    /** Whether a decode step's experts run a tuned pool's pair (given or installed) instead of the catalogue's. */
    public boolean expertsFromTunedPool() {
        return switch (experts) {
            case null -> false;
            case ExpertLayer _ -> false;
            case TokenKeyedLayer _ -> true;
        };
    }

    /** The gate_up and down kernels of a decode step's experts: the catalogue's by the batch, or a tuned pool's keyed on it. */
    public List<KernelSpec> stepExpertKernels() {
        ExpertLayer pair = switch (experts) {
            case null -> throw new IllegalStateException("the model has no MoE layers");
            case ExpertLayer e -> e;
            case TokenKeyedLayer keyed -> keyed.prepare(batch);
        };
        return List.of(pair.gateUp().spec(), pair.down().spec());
    }

    /** Whether a prompt of two tokens or more runs in chunks on the tensor cores (else one token per replay). */
    public boolean promptsInChunks() {
        return kernels.prompt() != null && PROMPT_HEAD_DIMS.contains(c.headDim());
    }

    /**
     * Whether the MoE layers' expert kernels multiply FP8 activations (W8A8), quantising x and the
     * intermediate per token in groups of 128: those of a decode step, or ({@code prompt}) those of a
     * prompt in chunks.
     */
    boolean expertsQuantiseActivations(boolean prompt) {
        KernelSpec gateUp = prompt ? (kernels.prompt() == null ? null : kernels.prompt().gateUp()) : kernels.gateUp();
        return gateUp != null && Validator.check(gateUp).quantisesActivations();
    }

    /** Prompt tokens per chunk from now on (at most the context; the default {@link #PROMPT_CHUNK}): a smaller one for tests. */
    void promptChunk(int tokens) {
        if (tokens < 1) {
            throw new IllegalArgumentException("prompt chunk " + tokens + ": at least 1 token");
        }
        if (prompt != null) {
            prompt.close();
            prompt = null;
        }
        promptChunk = Math.min(tokens, context);
    }

    /**
     * A prompt in chunks of up to {@code chunk} tokens, every sequence's the same: each chunk's rows
     * go through every layer together (projections, router and experts as expert-centric tiles,
     * attention over the cache on the tensor cores), their keys and values written to every
     * sequence's cache; after the last chunk its last row's final norm goes to every sequence's LM head.
     */
    private final class PromptChunks implements AutoCloseable {
        private final int chunk;
        private final List<DeviceBuffer> buffers = new ArrayList<>();
        private final List<AutoCloseable> resources = new ArrayList<>();
        private final ExpertHalf qkvProj;
        private final ExpertHalf oProj;
        private final RouterKernel router;
        private final ExpertLayer experts;
        private final ExpertLayer denseMlp;
        private final CudaFunction qkNormRope;
        private final CudaFunction attention;
        private final CudaFunction repeatRow;
        private final int attentionBytes;
        private final DeviceBuffer ids;
        private final DeviceBuffer rowPositions;
        private final DeviceBuffer x;
        private final DeviceBuffer normed;
        private final DeviceBuffer qkv;
        private final DeviceBuffer q;
        private final DeviceBuffer attnOut;
        private final DeviceBuffer projected;
        private final DeviceBuffer oneExpert;   // [chunk] int32 zeros: every row to the projection's one expert
        private final DeviceBuffer unitWeight;  // [chunk] fp32 ones
        private final DeviceBuffer topkIds;
        private final DeviceBuffer topkWeights;
        private final DeviceBuffer inter;
        private final DeviceBuffer denseInter;
        private final DeviceBuffer moeOut;

        /** Chunks of {@code wanted} tokens, or fewer where the decode experts the prompt falls back on take fewer. */
        PromptChunks(int wanted) {
            PromptKernels k = kernels.prompt();
            experts = k.gateUp() != null ? keep(new ExpertLayer(runtime.load(k.gateUp()), runtime.load(k.down()), ORDER, wanted))
                    : catalogueExperts();
            KernelHandle routerKernel = k.router() == null ? null : runtime.load(k.router());
            chunk = Math.min(Math.min(wanted, experts == null ? wanted : experts.maxTokens()),
                    routerKernel == null ? wanted : routerKernel.maxTokens());
            int h = c.hidden();
            int qDim = c.heads() * c.headDim();
            int kvDim = c.kvHeads() * c.headDim();
            qkvProj = keep(ExpertHalf.alone(runtime.load(k.qkv()), ORDER, chunk));
            oProj = keep(ExpertHalf.alone(runtime.load(k.o()), ORDER, chunk));
            router = routerKernel == null ? null : keep(new RouterKernel(routerKernel, chunk));
            denseMlp = k.denseGateUp() == null ? null
                    : keep(new ExpertLayer(runtime.load(k.denseGateUp()), runtime.load(k.denseDown()), ORDER, chunk));
            qkNormRope = qkNormKernel(DType.BF16);
            attention = module.function("attention_prefill_" + c.headDim());
            attentionBytes = promptAttentionBytes(c.headDim());
            if (attentionBytes > 48 * 1024) {
                attention.setMaxDynamicSharedBytes(attentionBytes);
            }
            repeatRow = module.function("repeat_row_bf16");
            ids = allocate(DType.INT32, chunk);
            rowPositions = allocate(DType.INT32, chunk);
            x = allocate(DType.FP32, (long) chunk * h);
            normed = allocate(DType.BF16, (long) chunk * h);
            qkv = allocate(DType.BF16, (long) chunk * (qDim + 2 * kvDim));
            q = allocate(DType.FP32, (long) chunk * qDim);
            attnOut = allocate(DType.BF16, (long) chunk * qDim);
            projected = allocate(DType.BF16, (long) chunk * h);
            oneExpert = allocate(DType.INT32, chunk);
            oneExpert.fillWords32(0);
            unitWeight = allocate(DType.FP32, chunk);
            unitWeight.fillWords32(Float.floatToIntBits(1f));
            topkIds = allocate(DType.INT32, (long) chunk * c.topk());
            topkWeights = allocate(DType.FP32, (long) chunk * c.topk());
            // as the experts' kernels take it: bf16 rows, or quantised rows where the tiles are W8A8
            inter = experts == null ? allocate(DType.BF16, 1) : keep(experts.allocateInter(chunk));
            denseInter = allocate(DType.BF16, (long) chunk * Math.max(1, c.denseIntermediate()));
            moeOut = allocate(DType.BF16, (long) chunk * h);
        }

        /**
         * Where the prompt has no tiles of its own: the decode step's pair, which takes any token count,
         * or beside a tuned pool's (keyed on the batch alone) the catalogue's.
         */
        private ExpertLayer catalogueExperts() {
            return switch (GpuDecoder.this.experts) {
                case null -> null;
                case ExpertLayer e -> e;
                case TokenKeyedLayer _ -> keep(new ExpertLayer(runtime.load(kernels.gateUp()), runtime.load(kernels.down()), ORDER));
            };
        }

        /** The prompt's tokens from the decoder's position on, chunk by chunk, then the LM head of its last row for every sequence. */
        void run(int[] tokens) {
            int rows = 0;
            for (int from = 0; from < tokens.length; from += chunk) {
                rows = Math.min(chunk, tokens.length - from);
                int[] pos = new int[rows];
                for (int t = 0; t < rows; t++) {
                    pos[t] = position + from + t;
                }
                stream.synchronize();  // the previous chunk has read ids and positions
                ids.copyFrom(Arrays.copyOfRange(tokens, from, from + rows));
                rowPositions.copyFrom(pos);
                enqueueChunk(rows, position + from);
            }
            int h = c.hidden();
            repeatRow.launch(ORDER, batch, 1, 1, ROW_THREADS, 1, 1, 0, stream, normed, rows - 1,
                    GpuDecoder.this.normed, h);
            head.launch(stream, ORDER, batch, GpuDecoder.this.normed, lmHead, logits);
        }

        private void enqueueChunk(int rows, int firstPosition) {
            int h = c.hidden();
            float eps = (float) c.rmsEps();
            embedTokens.launch(ORDER, rows, 1, 1, ROW_THREADS, 1, 1, 0, stream, ids, embed, x, h);
            rmsNorm.launch(ORDER, rows, 1, 1, ROW_THREADS, 1, 1, 0, stream, x, layers.getFirst().inputNorm(), normed, h, eps);
            // every row to the projections' one expert: their plans serve the chunk's every layer
            qkvProj.enqueuePlan(stream, rows, oneExpert);
            oProj.enqueuePlan(stream, rows, oneExpert);
            for (int l = 0; l < c.layers(); l++) {
                LayerOnDevice w = layers.get(l);
                qkvProj.enqueueDownOnPlan(stream, rows, normed, w.qkv(), oneExpert, unitWeight, qkv);
                enqueueQkNormRope(qkNormRope, l, w, rows, qkv, rowPositions, q, batch);
                attention.launch(ORDER, c.heads(), Math.ceilDiv(rows, PROMPT_ATTENTION_ROWS), 1, 128, 1, 1, attentionBytes, stream, q, kCache.get(l),
                        vCache.get(l), ptr(w.sinks()), attnOut, rows, firstPosition, c.heads(), c.kvHeads(),
                        c.slidingLayers().get(l) ? c.slidingWindow() : 0, (float) (1 / Math.sqrt(c.headDim())));
                oProj.enqueueDownOnPlan(stream, rows, attnOut, w.o(), oneExpert, unitWeight, projected);
                addBf16Norm.launch(ORDER, rows, 1, 1, ROW_THREADS, 1, 1, 0, stream, x, projected, w.postNorm(), normed, h, eps);
                if (w.moe()) {
                    Map<String, DeviceBuffer> rowParams = w.bRouter() == null ? Map.of() : Map.of(MoeBlock.ROUTER_BIAS, w.bRouter());
                    router.enqueue(stream, ORDER, rows, normed, w.wRouter(), rowParams, topkWeights, topkIds);
                    experts.enqueue(stream, rows, normed, w.gateUp(), w.down(), topkIds, topkWeights, inter, moeOut);
                } else {
                    denseMlp.enqueue(stream, rows, normed, w.gateUp(), w.down(), oneExpert, unitWeight, denseInter, moeOut);
                }
                DeviceBuffer nextNorm = l + 1 < c.layers() ? layers.get(l + 1).inputNorm() : finalNorm;
                addBf16Norm.launch(ORDER, rows, 1, 1, ROW_THREADS, 1, 1, 0, stream, x, moeOut, nextNorm, normed, h, eps);
            }
        }

        private DeviceBuffer allocate(DType type, long elements) {
            DeviceBuffer b = DeviceBuffer.allocate(type, Math.max(1, elements));
            buffers.add(b);
            return b;
        }

        private <T extends AutoCloseable> T keep(T resource) {
            resources.add(resource);
            return resource;
        }

        @Override
        public void close() {
            List<AutoCloseable> all = new ArrayList<>(resources);
            all.addAll(buffers);
            Resources.closeAll(all);
        }
    }

    /** The parts of a decode step that {@link #timeParts} times alone (the pick is in none of them). */
    public enum StepPart {
        /**
         * Per layer the fused q/k/v projection and the o projection (where the q/k/v projection norms
         * its input, that residual add and norm with it).
         */
        PROJECTIONS,
        /** Per layer q/k norm with RoPE and the cache write, and attention over the cache. */
        ATTENTION,
        /** Per MoE layer the router (where it norms its input, the post-attention residual add and norm with it). */
        ROUTER,
        /** Per layer the experts (or the dense MLP). */
        EXPERTS,
        /** The embedding, the norms with their residual adds that are kernels of their own, and the LM head. */
        REST
    }

    /**
     * Each part of a step on its own: a graph of only that part's kernels over every layer, captured
     * and replayed ({@code reps} times after {@code warmup}), in microseconds per replay (median).
     * Parts overlap in a whole step, so the sum is not the step; the state they leave (the cache
     * row of the current position, the residual stream) is what a step leaves. Without the routers
     * the experts part runs each layer on the routing its router left in one pass of the layers
     * just before ({@link #routingPerLayer}), as the step does.
     */
    public Map<StepPart, Double> timeParts(int warmup, int reps) {
        List<RoutingOnDevice> routing = new ArrayList<>();
        try {
            for (LayerRouting r : routingPerLayer()) {
                routing.add(r == null ? null : RoutingOnDevice.of(r));
            }
            Map<StepPart, Double> out = new EnumMap<>(StepPart.class);
            for (StepPart part : StepPart.values()) {
                try (CudaGraph g = CudaGraph.capture(stream, () -> enqueueLayers(EnumSet.of(part), null, routing))) {
                    out.put(part, GpuTimer.time(stream, g, warmup, reps).medianMicros());
                }
            }
            return out;
        } finally {
            Resources.closeAll(routing);
        }
    }

    /**
     * How many distinct experts each layer's router picks for the current tokens of the batch (0 for a
     * dense layer), on one pass of the layers ({@link #routingPerLayer}).
     */
    public int[] distinctExpertsPerLayer() {
        return routingPerLayer().stream().mapToInt(r -> r == null ? 0 : (int) Arrays.stream(r.ids()).distinct().count()).toArray();
    }

    /** A MoE layer's routing of the batch: each token's k expert ids and weights. */
    private record LayerRouting(int[] ids, float[] weights) {}

    /** The same on the device, for the experts part timed alone. */
    private record RoutingOnDevice(DeviceBuffer ids, DeviceBuffer weights) implements AutoCloseable {
        static RoutingOnDevice of(LayerRouting r) {
            DeviceBuffer ids = null;
            DeviceBuffer weights = null;
            try {
                ids = DeviceBuffer.allocate(DType.INT32, r.ids().length);
                ids.copyFrom(r.ids());
                weights = DeviceBuffer.allocate(DType.FP32, r.weights().length);
                weights.copyFrom(r.weights());
                return new RoutingOnDevice(ids, weights);
            } catch (RuntimeException e) {
                try {
                    Resources.closeAll(Arrays.asList(ids, weights));
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
                throw e;
            }
        }

        @Override
        public void close() {
            Resources.closeAll(List.of(ids, weights));
        }
    }

    /**
     * Each layer's routing for the current tokens of the batch (null for a dense layer): one pass of
     * the layers launched one by one, the host reading each router's output. The pass writes what a
     * step writes (the cache rows of the current positions) and advances nothing, so it belongs
     * between steps.
     */
    private List<LayerRouting> routingPerLayer() {
        List<LayerRouting> routing = new ArrayList<>(Collections.nCopies(c.layers(), null));
        enqueueLayers(EnumSet.allOf(StepPart.class), l -> {
            stream.synchronize();
            LayerRouting r = new LayerRouting(new int[batch * c.topk()], new float[batch * c.topk()]);
            topkIds.copyTo(r.ids());
            topkWeights.copyTo(r.weights());
            routing.set(l, r);
        }, null);
        stream.synchronize();
        return routing;
    }

    private void enqueueLayers() {
        enqueueLayers(EnumSet.allOf(StepPart.class), null, null);
    }

    /**
     * Each layer's residual adds carry the next norm: after attention the post-attention norm, after
     * the MLP the next layer's input norm (the last: the final norm). Where the q/k/v projection or
     * the router norms its own input, that add and norm is no kernel of its own: the kernel reads
     * the residual from one of two buffers and writes the sum to the other. {@code afterRouter},
     * where given, is called with the layer's index right after its router is enqueued; {@code routing},
     * where given, holds each layer's expert ids and weights for its experts (else they read the router's).
     */
    private void enqueueLayers(Set<StepPart> parts, IntConsumer afterRouter, List<RoutingOnDevice> routing) {
        boolean attention = parts.contains(StepPart.ATTENTION);
        boolean rest = parts.contains(StepPart.REST);
        boolean qkvNorms = kernels.qkvNormsInput();
        int h = c.hidden();
        float eps = (float) c.rmsEps();
        DeviceBuffer residual = x;
        if (rest) {
            embedTokens.launch(ORDER, batch, 1, 1, ROW_THREADS, 1, 1, 0, stream, next, embed, x, h);
            if (!qkvNorms) {
                rmsNorm.launch(ORDER, batch, 1, 1, ROW_THREADS, 1, 1, 0, stream, x, layers.getFirst().inputNorm(), normed, h, eps);
            }
        }
        for (int l = 0; l < c.layers(); l++) {
            LayerOnDevice w = layers.get(l);
            if (qkvNorms && parts.contains(StepPart.PROJECTIONS)) {
                DeviceBuffer sum = otherResidual(residual);
                launchLinear(((Projection.Linear) qkvProj).kernel(),
                        new InputRows.Normed(residual, l == 0 ? zeros : moeOut, w.inputNorm(), sum, normed), w.qkv(), qkv);
                residual = sum;
            }
            enqueueAttention(l, w, parts.contains(StepPart.PROJECTIONS), attention, !qkvNorms);
            boolean routerNorms = w.moe() && kernels.routerNormsInput();
            if (rest && !routerNorms) {
                (oProj.output() == DType.BF16 ? addBf16Norm : addF32Norm).launch(ORDER, batch, 1, 1, ROW_THREADS, 1, 1, 0, stream, residual,
                        projected, w.postNorm(), normed, h, eps);
            }
            if (w.moe()) {
                Map<String, DeviceBuffer> rows = w.bRouter() == null ? Map.of() : Map.of(MoeBlock.ROUTER_BIAS, w.bRouter());
                if (parts.contains(StepPart.ROUTER)) {
                    if (routerNorms) {
                        DeviceBuffer sum = otherResidual(residual);
                        router.enqueue(stream, ORDER, batch, new InputRows.Normed(residual, projected, w.postNorm(), sum, normed),
                                w.wRouter(), rows, topkWeights, topkIds);
                        residual = sum;
                    } else {
                        router.enqueue(stream, ORDER, batch, normed, w.wRouter(), rows, topkWeights, topkIds);
                    }
                    if (afterRouter != null) {
                        afterRouter.accept(l);
                    }
                }
                if (parts.contains(StepPart.EXPERTS)) {
                    DeviceBuffer ids = routing == null ? topkIds : routing.get(l).ids();
                    DeviceBuffer weights = routing == null ? topkWeights : routing.get(l).weights();
                    experts.enqueue(stream, batch, normed, w.gateUp(), w.down(), ids, weights, inter, moeOut);
                }
            } else if (parts.contains(StepPart.EXPERTS)) {
                denseMlp.enqueue(stream, batch, normed, w.gateUp(), w.down(), denseIds, denseWeights, denseInter, moeOut);
            }
            boolean last = l + 1 == c.layers();
            if (rest && (last || !qkvNorms)) {
                DeviceBuffer nextNorm = last ? finalNorm : layers.get(l + 1).inputNorm();
                addBf16Norm.launch(ORDER, batch, 1, 1, ROW_THREADS, 1, 1, 0, stream, residual, moeOut, nextNorm, normed, h, eps);
            }
        }
        if (rest) {
            head.launch(stream, ORDER, batch, normed, lmHead, logits);
        }
    }

    /** The residual's buffer a kernel norming its input writes the sum to: not the one it reads. */
    private DeviceBuffer otherResidual(DeviceBuffer residual) {
        return residual == x ? xAlt : x;
    }

    /**
     * Layer l's attention: the fused projection (where {@code qkvHere}: else the caller launched it,
     * norming its own input), q/k norm with RoPE and the cache write, attention, the o projection;
     * the projections where {@code projections}, the rest where {@code attention}.
     */
    private void enqueueAttention(int l, LayerOnDevice w, boolean projections, boolean attention, boolean qkvHere) {
        if (projections && qkvHere) {
            enqueueProjection(qkvProj, normed, w.qkv(), qkv);
        }
        if (attention) {
            enqueueQkNormRope(qkNormRope, l, w, batch, qkv, positions, q, 0);
            this.attention.launch(ORDER, decodeAttention.blocks(), decodeAttention.slices(), batch, DECODE_ATTENTION_THREADS, 1, 1,
                    decodeAttention.sharedBytes(), stream, q, kCache.get(l), vCache.get(l),
                    positions, ptr(w.sinks()), attnParts, attnTickets, attnOut, c.heads(), c.kvHeads(), context,
                    c.slidingLayers().get(l) ? c.slidingWindow() : 0, (float) (1 / Math.sqrt(c.headDim())));
        }
        if (projections) {
            enqueueProjection(oProj, attnOut, w.o(), projected);
        }
    }

    private void enqueueProjection(Projection p, DeviceBuffer in, DeviceWeights w, DeviceBuffer out) {
        switch (p) {
            case Projection.Tiles(ExpertHalf half) -> half.enqueueDownOnPlan(stream, batch, in, w, denseIds, denseWeights, out);
            case Projection.Linear(KernelHandle k) -> launchLinear(k, new InputRows.Given(in), w, out);
        }
    }

    private void enqueuePick() {
        boolean cut = temperature > 0 && (topK > 0 || topP < 1);
        if (cut) {
            sampleCut.launch(ORDER, CUT_BLOCKS, batch, 1, CUT_THREADS, 1, 1, 0, stream, logits, c.vocab(), temperature, topK, topP, pickCut);
        }
        pickNext.launch(ORDER, PICK_BLOCKS, batch, 1, 256, 1, 1, 0, stream, logits, c.vocab(), temperature, seed,
                cut ? pickCut : (Object) 0L, next, positions, step, history, maxSteps, pickBest, pickTickets);
        endStep.launch(ORDER, 1, 1, 1, 1, 1, 1, 0, stream, step);
    }

    /** A linear kernel's launch: its input rows, the matrix (then the bias where there is one), y. */
    private void launchLinear(KernelHandle k, InputRows in, DeviceWeights w, DeviceBuffer out) {
        k.launch(stream, ORDER, batch, in.linearArguments(k, w.buffers(), out));
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
        return "GPU " + runtime.context().deviceName();
    }

    @Override
    public void close() {
        List<AutoCloseable> all = new ArrayList<>(Arrays.asList(stepGraph, layersGraph, prompt));
        all.addAll(closers);
        all.addAll(owned);
        stepGraph = null;
        layersGraph = null;
        prompt = null;
        Resources.closeAll(all);  // every one, also after a failure (the constructor's cleanup relies on it)
    }

    // ----------------------------------------------------------------------------------------- helpers

    /**
     * Every DSL kernel the decoder of a model loads: the fused q/k/v, o and LM head projections, and
     * (given the MoE block its checkpoint's experts make) the router and expert halves, and the dense
     * MLP's halves where the model has dense layers (an expert layer of one expert, top-1). Null where
     * the model has none of a kind. {@code prompt} holds the kernels that run a prompt in chunks.
     */
    public record Kernels(KernelSpec qkv, KernelSpec o, KernelSpec head, KernelSpec router, KernelSpec gateUp, KernelSpec down,
                          KernelSpec denseGateUp, KernelSpec denseDown, PromptKernels prompt) {

        public static Kernels of(ModelConfig c, MoeBlock block, Target target, int batch) {
            return of(c, block, target, batch, ProjectionKernels.BY_BATCH);
        }

        public static Kernels of(ModelConfig c, MoeBlock block, Target target, int batch, ProjectionKernels projections) {
            return of(c, block, target, batch, projections, ExpertKernels.BY_BATCH);
        }

        public static Kernels of(ModelConfig c, MoeBlock block, Target target, int batch, ProjectionKernels projections,
                                 ExpertKernels experts) {
            int h = c.hidden();
            int qDim = c.heads() * c.headDim();
            int qkvDim = qDim + 2 * c.kvHeads() * c.headDim();
            KernelSpec router = null;
            KernelSpec gateUp = null;
            KernelSpec down = null;
            KernelSpec qkv = withInputNorm(decodeProjection("qkv_proj", h, qkvDim, c.attentionBias(), target, batch, projections),
                    new InputNorm(DType.BF16, c.rmsEps()), batch);  // after the MLP's bf16 output
            KernelSpec o = decodeProjection("o_proj", qDim, h, c.attentionBias(), target, batch, projections);
            if (block != null) {
                KernelSpec plain = KernelBuilder.named("router").router(h, c.experts())
                        .schedule(new RouterGemv(4, loadBytes(h), 8, Math.min(4, c.experts()))).epilogue(block.routingRule())
                        .target(target).build();
                router = catalogued(plain, batch, experts).orElse(plain);
                KernelSpec plainGateUp = expertSpec("experts_gate_up", block.gateUp(), block.gateUpEpilogue(), target);
                KernelSpec plainDown = expertSpec("experts_down", block.down(), block.downEpilogue(), target);
                gateUp = expertHalf(plainGateUp, batch, experts);
                down = expertHalf(plainDown, batch, experts);
                // a W8A8 half hands its quantised rows to a W8A8 half only
                if (Validator.check(gateUp).quantisesActivations() != Validator.check(down).quantisesActivations()) {
                    gateUp = plainGateUp;
                    down = plainDown;
                }
            }
            KernelSpec denseGateUp = null;
            KernelSpec denseDown = null;
            if (c.moeLayers().contains(false)) {
                denseGateUp = expertSpec("dense_gate_up", denseGateUpProblem(c), Epilogues.siluGatedStore(DType.BF16), target);
                denseDown = expertSpec("dense_down", denseDownProblem(c), Epilogues.combinedStore(DType.BF16), target);
            }
            PromptKernels prompt = PromptKernels.of(c, block, router, target).orElse(null);
            if (router != null) {  // after the o projection's output
                router = withInputNorm(router, new InputNorm(((Store) o.epilogue()).dtype(), c.rmsEps()), batch);
            }
            return new Kernels(qkv, o, linear("lm_head", h, c.vocab(), false, target, batch, projections),
                    router, gateUp, down, denseGateUp, denseDown, prompt);
        }

        /** Whether the q/k/v projection makes its rows from the residual stream (the input norm before it is no launch of its own). */
        public boolean qkvNormsInput() {
            return qkv.problem().inputNorm().isPresent();
        }

        /** Whether the router makes its rows from the residual stream (the post-attention norm is no launch of its own). */
        public boolean routerNormsInput() {
            return router != null && router.problem().inputNorm().isPresent();
        }

        /** The kernels that exist, in load order. */
        public List<KernelSpec> all() {
            List<KernelSpec> all = new ArrayList<>(java.util.stream.Stream.of(qkv, o, head, router, gateUp, down, denseGateUp,
                    denseDown).filter(java.util.Objects::nonNull).toList());
            if (prompt != null) {
                all.addAll(prompt.all());
            }
            return all;
        }
    }

    /**
     * Up to this many sequences a decode step's q/k/v projection and router norm their own input
     * rows where their schedule can ({@link InputNorm}): the residual add and norm before each is
     * then no kernel of its own. Every block that reads a token norms it, so the work grows with
     * the blocks per token; it won at 1, 8 and 16 and was level at 32 and 64 (bench/NOTES.md).
     */
    static final int INPUT_NORM_UP_TO = 16;

    /** {@code spec} making its rows with {@code norm}, where the batch is small enough and its schedule can; else {@code spec}. */
    static KernelSpec withInputNorm(KernelSpec spec, InputNorm norm, int batch) {
        if (batch > INPUT_NORM_UP_TO || !spec.schedule().kind().normsInputs()) {
            return spec;
        }
        Problem normed = switch (spec.problem()) {
            case Problem.Linear l -> l.withInputNorm(norm);
            case Problem.Router r -> r.withInputNorm(norm);
            case Problem.ExpertProblem _, Problem.ExpertMlp _ -> null;
        };
        if (normed == null) {
            return spec;
        }
        KernelSpec candidate = new KernelSpec(spec.name(), normed, spec.schedule(), spec.epilogue(), spec.target());
        return Validator.errors(candidate).isEmpty() ? candidate : spec;
    }

    private static Problem.ExpertGateUp denseGateUpProblem(ModelConfig c) {
        return new Problem.ExpertGateUp(new ExpertShape(c.hidden(), c.denseIntermediate(), 1, 1), WeightFormat.BF16, DType.BF16,
                GateUpLayout.STACKED);
    }

    private static Problem.ExpertDown denseDownProblem(ModelConfig c) {
        return new Problem.ExpertDown(new ExpertShape(c.hidden(), c.denseIntermediate(), 1, 1), WeightFormat.BF16, DType.BF16);
    }

    /**
     * The kernels of a prompt run in chunks, all on the tensor cores (expert_centric): the q/k/v
     * and o projections as down halves of one expert at top-1 (a chunk's rows are its pairs, each
     * weighted 1), the router on the catalogue's tiled schedule where one lowers the model's rule
     * (else the decode router's schedule, reading its rows as given), the expert halves (null where the experts' format has no
     * expert-centric lowering: the prompt then takes the decode halves), the dense MLP's halves.
     */
    public record PromptKernels(KernelSpec qkv, KernelSpec o, KernelSpec router, KernelSpec gateUp, KernelSpec down,
                                KernelSpec denseGateUp, KernelSpec denseDown) {

        /** Empty where the projections have no expert-centric lowering (the prompt then runs one token per step). */
        static Optional<PromptKernels> of(ModelConfig c, MoeBlock block, KernelSpec decodeRouter, Target target) {
            int h = c.hidden();
            int qDim = c.heads() * c.headDim();
            int qkvDim = qDim + 2 * c.kvHeads() * c.headDim();
            boolean bias = c.attentionBias();
            List<ExpertCentric> projectionTiles = takingBias(PROJECTION_TILES, bias);
            Optional<KernelSpec> qkv = tiles("prompt_qkv_proj", projection(h, qkvDim, bias), projectionTiles, target);
            Optional<KernelSpec> o = tiles("prompt_o_proj", projection(qDim, h, bias), projectionTiles, target);
            if (qkv.isEmpty() || o.isEmpty()) {
                return Optional.empty();
            }
            KernelSpec router = null;
            KernelSpec gateUp = null;
            KernelSpec down = null;
            if (block != null) {
                // the decode router's own spec may norm its input; the prompt's is its own kernel either way
                router = tiledRouter(decodeRouter).orElse(new KernelSpec("prompt_router", decodeRouter.problem(), decodeRouter.schedule(),
                        decodeRouter.epilogue(), decodeRouter.target()));
                Optional<KernelSpec> g = tiles("prompt_experts_gate_up", block.gateUp(), block.gateUpEpilogue(), EXPERT_GATE_UP_TILES,
                        target);
                Optional<KernelSpec> d = tiles("prompt_experts_down", block.down(), block.downEpilogue(),
                        takingBias(EXPERT_DOWN_TILES, block.down().bias()), target);
                if (g.isPresent() && d.isPresent()) {
                    gateUp = g.get();
                    down = d.get();
                }
            }
            KernelSpec denseGateUp = null;
            KernelSpec denseDown = null;
            if (c.moeLayers().contains(false)) {
                Optional<KernelSpec> g = tiles("prompt_dense_gate_up", denseGateUpProblem(c), Epilogues.siluGatedStore(DType.BF16),
                        EXPERT_GATE_UP_TILES, target);
                Optional<KernelSpec> d = tiles("prompt_dense_down", denseDownProblem(c), Epilogues.combinedStore(DType.BF16),
                        combiningInTiles(EXPERT_DOWN_TILES), target);
                if (g.isEmpty() || d.isEmpty()) {
                    return Optional.empty();
                }
                denseGateUp = g.get();
                denseDown = d.get();
            }
            return Optional.of(new PromptKernels(qkv.get(), o.get(), router, gateUp, down, denseGateUp, denseDown));
        }

        /** The kernels that exist, in load order. */
        public List<KernelSpec> all() {
            return java.util.stream.Stream.of(qkv, o, router, gateUp, down, denseGateUp, denseDown)
                    .filter(java.util.Objects::nonNull).toList();
        }
    }

    /** A projection {@code [outputs][inputs]} as the down half of one expert at top-1, with its bias as the expert's. */
    private static Problem.ExpertDown projection(int inputs, int outputs, boolean bias) {
        return new Problem.ExpertDown(new ExpertShape(outputs, inputs, 1, 1), WeightFormat.BF16, DType.BF16, bias);
    }

    /**
     * The tiles a prompt's projections prefer, first that lowers: on sm_90a wgmma over 128 rows by
     * 256 outputs, its stages filled by a producer warpgroup (the fastest measured over a chunk's
     * 2,048 rows; bench/NOTES.md), then four warpgroups over 256 (or 128) outputs fed by the tensor
     * memory accelerator; then mma.sync tiles of 128, 64 and 16 rows (every target). A
     * projection's rows are all one expert's, so the large tiles pad nothing but the chunk's last.
     */
    static final List<ExpertCentric> PROJECTION_TILES = List.of(
            new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true),
            new ExpertCentric(128, 256, 64, 8, 2, 4, 8, true).withTma(true),
            new ExpertCentric(128, 128, 64, 8, 2, 4, 8, true).withTma(true),
            new ExpertCentric(128, 128, 64, 2, 4, 3, 8),
            new ExpertCentric(64, 128, 64, 2, 2, 4, 8),
            new ExpertCentric(16, 64, 32, 1, 4, 3, 1));
    /**
     * The experts' gate_up tiles for a prompt: on sm_90a 128 pairs by two warpgroups fed by a producer
     * warpgroup (the fastest measured pair at a chunk of 2,048 tokens; bench/NOTES.md), then 64 pairs
     * by two warpgroups; then mma.sync tiles (every target). FP8 block weights lower only the W8A8
     * tiles of 128-code slices: the fastest measured pair's gate_up on sm_90a, then the catalogue's
     * 16-pair gate_up (two stages: it fits sm_120a's shared memory).
     */
    static final List<ExpertCentric> EXPERT_GATE_UP_TILES = List.of(
            new ExpertCentric(128, 128, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true),
            new ExpertCentric(64, 128, 64, 4, 2, 5, 8, true).withTma(true),
            new ExpertCentric(64, 128, 128, 4, 2, 4, 8, true).withTma(true).withProducer(true),
            new ExpertCentric(16, 128, 128, 1, 8, 2, 1).withTma(true),
            new ExpertCentric(64, 64, 64, 2, 2, 4, 8),
            new ExpertCentric(16, 64, 32, 1, 4, 3, 1));
    /**
     * {@code tiles} without those that spill registers with a bias in their epilogue (sm_90a, ptxas
     * 13.0): 256 outputs on 12 warps or more, where a thread's share of the registers (at most 170)
     * holds 64-128 sums and the bias loads do not fit beside them (two warpgroups side by side, 8
     * warps, do not spill).
     */
    static List<ExpertCentric> takingBias(List<ExpertCentric> tiles, boolean bias) {
        return tiles.stream().filter(t -> !bias || t.blockN() <= 128 || t.warps() < 12).toList();
    }

    /** {@code tiles} adding down's slots in the tiles: at top-1 (a dense MLP) the combine launch would only copy y. */
    static List<ExpertCentric> combiningInTiles(List<ExpertCentric> tiles) {
        return tiles.stream().map(t -> t.withCombineKernel(false)).toList();
    }

    /**
     * The experts' down tiles for a prompt, as {@link #EXPERT_GATE_UP_TILES}; the producer tile and the
     * W8A8 wgmma tile leave each token's slot rows to their module's combine entry point, which adds
     * them after the tiles (the 16-pair W8A8 down is the catalogue's, adding them in the tiles).
     */
    static final List<ExpertCentric> EXPERT_DOWN_TILES = List.of(
            new ExpertCentric(128, 256, 64, 8, 1, 4, 8, true).withTma(true).withProducer(true).withCombineKernel(true),
            new ExpertCentric(64, 256, 64, 4, 2, 5, 8, true).withTma(true),
            new ExpertCentric(64, 128, 128, 4, 1, 3, 8, true).withTma(true).withCombineKernel(true),
            new ExpertCentric(16, 128, 128, 1, 4, 4, 1).withTma(true),
            new ExpertCentric(64, 128, 64, 2, 2, 4, 8),
            new ExpertCentric(16, 64, 32, 1, 4, 3, 1));

    private static Optional<KernelSpec> tiles(String name, Problem.ExpertDown problem, List<ExpertCentric> preferred, Target target) {
        return tiles(name, problem, Epilogues.combinedStore(DType.BF16), preferred, target);
    }

    /** The first of {@code preferred} that lowers the problem on the target, else the first expert-centric candidate that does. */
    private static Optional<KernelSpec> tiles(String name, Problem problem, Store epilogue, List<ExpertCentric> preferred,
                                              Target target) {
        List<Schedule<?>> all = new ArrayList<>(preferred);
        if (problem instanceof Problem.ExpertProblem p) {
            all.addAll(Candidates.of(ExpertCentric.KIND, p, target));
        }
        return all.stream().map(s -> new KernelSpec(name, problem, s, epilogue, target))
                .filter(k -> Validator.errors(k).isEmpty()).findFirst();
    }

    /** The decode router's rule on the catalogue's tiled prefill schedule for the same router size, where it lowers. */
    private static Optional<KernelSpec> tiledRouter(KernelSpec decode) {
        if (!(decode.problem() instanceof Problem.Router r)) {
            return Optional.empty();
        }
        return catalogue()
                .filter(k -> k.schedule() instanceof dev.moeforge.dsl.schedule.RouterTiled && k.target() == decode.target()
                        && k.problem() instanceof Problem.Router t && t.hidden() == r.hidden() && t.experts() == r.experts())
                .map(k -> new KernelSpec("prompt_router", r, k.schedule(), decode.epilogue(), decode.target()))
                .filter(k -> Validator.errors(k).isEmpty()).findFirst();
    }

    /**
     * From this batch an expert half of 4-bit or FP8 weights takes the catalogue's expert-centric tile of
     * {@link #EXPERT_TILE_PAIRS} where it has one: in a decode step the router's picks crowd onto fewer
     * experts than a uniform routing's, and the tiles read each picked expert once (4-bit tiles against
     * the tensor-core decode pair: behind at 4 sequences, ahead from 5).
     */
    static final int EXPERT_CENTRIC_FROM = 5;
    /** The same for BF16 experts, whose 16-pair tiles were ahead of the 8-token output-centric tiles from 3 sequences. */
    static final int BF16_EXPERT_CENTRIC_FROM = 3;
    /** Routed pairs per tile of the catalogue's decode-batch expert-centric pairs. */
    static final int EXPERT_TILE_PAIRS = 16;

    /**
     * The built-in catalogue's decode kernel for the same function (problem, epilogue, target), tuned
     * for its model (the routers' choice, and the fallback of {@link #expertHalf}): a router, or for an
     * expert half from {@link #expertCentricFrom} tokens the
     * 16-pair expert-centric tile (where `bench decode --experts` finds it ahead of the output-centric
     * tiles), else the output-centric half whose token tile suits the batch (1 token per block up to 2 tokens,
     * then 8 up to 16, then 32), else the nearest tile the catalogue has; {@code experts} may force
     * either family at every batch.
     */
    static Optional<KernelSpec> catalogued(KernelSpec wanted, int batch, ExpertKernels experts) {
        List<KernelSpec> same = sameProblemAndEpilogue(wanted);
        if (tilesWanted(wanted, batch, experts)) {
            Optional<KernelSpec> tiles = same.stream().filter(k -> isDecodeTile(k.schedule())).findFirst();
            if (tiles.isPresent()) {
                return tiles;
            }
        }
        int tile = tokenTileForBatch(batch);
        return same.stream().filter(k -> tokenTile(k) > 0)
                .min(java.util.Comparator.comparingInt(k -> Math.abs(Integer.numberOfTrailingZeros(tokenTile(k))
                        - Integer.numberOfTrailingZeros(tile))));
    }

    /**
     * A decode step's expert half: the catalogue's kernel for the same function where it has the kind
     * the batch wants (the 16-pair expert-centric tile, else the token tile of {@link #tokenTileForBatch}
     * where that is more than one token); else, unless the catalogue's nearest kernel for the function
     * is a tensor-core decode, the catalogue's schedule of that kind carried to this model's geometry
     * and format (one of the same weights format first; FP8 block weights take W8A8 tiles, whose
     * activations are quantised per token in groups of 128, as the prompt's are), where it lowers; else
     * the catalogue's nearest tile ({@link #catalogued}), else {@code plain}. So a model off the
     * catalogue also reads each picked expert once per tile of tokens, not once per token.
     */
    static KernelSpec expertHalf(KernelSpec plain, int batch, ExpertKernels experts) {
        List<KernelSpec> same = sameProblemAndEpilogue(plain);
        List<java.util.function.Predicate<Schedule<?>>> kinds = new ArrayList<>();
        if (tilesWanted(plain, batch, experts)) {
            kinds.add(GpuDecoder::isDecodeTile);
        }
        int tile = tokenTileForBatch(batch);
        if (tile > 1) {  // one token a block takes the catalogue's nearest tile, else plain's own schedule
            kinds.add(s -> s instanceof OutputCentric oc && oc.tokensPerCta() == tile);
        }
        Optional<KernelSpec> nearest = catalogued(plain, batch, experts);
        // a tensor-core decode the catalogue holds for the function stays ahead of schedules carried from
        // other formats (bench/NOTES.md: NVFP4's against token tiles, MXFP4's against 4-bit tiles)
        boolean carry = nearest.map(k -> k.schedule() instanceof OutputCentric || isDecodeTile(k.schedule())).orElse(true);
        for (var kind : kinds) {
            Optional<KernelSpec> catalogued = same.stream().filter(k -> kind.test(k.schedule())).findFirst();
            if (catalogued.isPresent()) {
                return catalogued.get();
            }
            Optional<KernelSpec> carried = !carry ? Optional.empty() : carriedSchedules(plain).filter(kind)
                    .map(plain::withSchedule).filter(k -> Validator.errors(k).isEmpty()).findFirst();
            if (carried.isPresent()) {
                return carried.get();
            }
        }
        return nearest.orElse(plain);
    }

    /** The built-in catalogue's kernel specs, in its order. */
    private static java.util.stream.Stream<KernelSpec> catalogue() {
        return Arrays.stream(dev.moeforge.generated.BuiltinKernel.values()).map(dev.moeforge.generated.BuiltinKernel::spec);
    }

    /** The catalogue's kernels computing the same function as {@code wanted} (problem, epilogue, target). */
    private static List<KernelSpec> sameProblemAndEpilogue(KernelSpec wanted) {
        return catalogue()
                .filter(k -> k.problem().equals(wanted.problem()) && k.epilogue().equals(wanted.epilogue())
                        && k.target() == wanted.target())
                .toList();
    }

    /**
     * The schedules of the catalogue's kernels of the same half (gate_up or down) and target as
     * {@code wanted}, those of its weights format first, each once.
     */
    private static java.util.stream.Stream<Schedule<?>> carriedSchedules(KernelSpec wanted) {
        WeightFormat format = ((Problem.ExpertProblem) wanted.problem()).weights();
        return catalogue()
                .filter(k -> k.target() == wanted.target() && k.problem().getClass() == wanted.problem().getClass())
                .sorted(java.util.Comparator.comparing(k -> ((Problem.ExpertProblem) k.problem()).weights().equals(format) ? 0 : 1))
                .<Schedule<?>>map(KernelSpec::schedule).distinct();
    }

    /** The decode batches' expert-centric tile: {@link #EXPERT_TILE_PAIRS} routed pairs of one expert. */
    private static boolean isDecodeTile(Schedule<?> s) {
        return s instanceof ExpertCentric e && e.blockM() == EXPERT_TILE_PAIRS;
    }

    /** The batch from which an expert half of {@code kernel}'s weights format takes the expert-centric tiles. */
    static int expertCentricFrom(KernelSpec kernel) {
        return kernel.problem() instanceof Problem.ExpertProblem p && p.weights().equals(WeightFormat.BF16) ? BF16_EXPERT_CENTRIC_FROM
                : EXPERT_CENTRIC_FROM;
    }

    /** Whether {@code kernel}'s expert half at this batch wants the expert-centric tiles ({@link #expertCentricFrom}), or {@code experts} forces a family. */
    private static boolean tilesWanted(KernelSpec kernel, int batch, ExpertKernels experts) {
        return switch (experts) {
            case BY_BATCH -> batch >= expertCentricFrom(kernel);
            case EXPERT_CENTRIC -> true;
            case OUTPUT_CENTRIC -> false;
        };
    }

    /** The output-centric token tile a batch takes: 1 token per block up to 2 tokens, then 8 up to 16, then 32. */
    private static int tokenTileForBatch(int batch) {
        return batch <= 2 ? 1 : batch <= 16 ? 8 : 32;
    }

    /** Tokens per block of a decode kernel: an output-centric tile, 1 for the decode routers and the 4-bit tensor-core decode; 0 for any other kind. */
    private static int tokenTile(KernelSpec k) {
        return switch (k.schedule()) {
            case OutputCentric oc -> oc.tokensPerCta();
            case RouterGemv _, dev.moeforge.dsl.schedule.RouterCluster _, dev.moeforge.dsl.schedule.OutputTensorCore _ -> 1;
            case dev.moeforge.dsl.schedule.SplitDown _,
                 ExpertCentric _,
                 dev.moeforge.dsl.schedule.RouterTiled _, LinearGemv _, LinearMma _ -> 0;
        };
    }

    /**
     * The kernels of a decode step's q/k/v and o projections and its LM head: chosen by the batch
     * ({@link #decodeProjection}), or one kind for every batch, so that `bench decode --projections`
     * can compare them (the LM head has no tiles: there it takes the batch's choice).
     */
    public enum ProjectionKernels {
        /** One warp per output row ({@code linear_gemv}) for one sequence, the tensor cores ({@code linear_mma}) up to {@link #PROJECTION_TILES_FROM}, expert tiles from there. */
        BY_BATCH,
        /** {@code linear_gemv}: one warp per output row, tokens in groups of up to {@link #LINEAR_TOKENS_PER_CTA}. */
        GEMV,
        /** {@code linear_mma}: weight rows by tokens on {@code mma.sync}, up to {@link #MMA_TOKENS_PER_CTA} tokens a block. */
        MMA,
        /** One expert's {@code expert_centric} down half at top-1 (the projections; the LM head as {@link #BY_BATCH}). */
        TILES
    }

    /** From this batch a decode step's q/k/v and o projections run on expert tiles ({@link #decodeProjection}). */
    static final int PROJECTION_TILES_FROM = 65;

    /**
     * A decode step's projection: one expert's {@code expert_centric} down half at top-1 with tiles
     * of the batch's rows (up to 64) by 16 outputs (32 from 17 rows) and 128-wide slices, where
     * {@code projections} asks for tiles, or by batch from {@link #PROJECTION_TILES_FROM}, and it
     * lowers; else {@link #linear}.
     */
    static KernelSpec decodeProjection(String name, int inputs, int outputs, boolean bias, Target target, int batch,
                                       ProjectionKernels projections) {
        boolean tiles = switch (projections) {
            case BY_BATCH -> batch >= PROJECTION_TILES_FROM;
            case TILES -> true;
            case GEMV, MMA -> false;
        };
        if (tiles) {
            int blockM = Math.min(64, 16 * Math.ceilDiv(batch, 16));
            int blockN = blockM == 16 ? 16 : 32;  // of the two measured, the faster at each block_m
            ExpertCentric tile = new ExpertCentric(blockM, blockN, 128, blockM / 16, blockN / 16, 4, 1);
            KernelSpec spec = new KernelSpec(name, projection(inputs, outputs, bias), tile, Epilogues.combinedStore(DType.BF16), target);
            if (Validator.errors(spec).isEmpty()) {
                return spec;
            }
        }
        return linear(name, inputs, outputs, bias, target, batch, projections);
    }

    /** The most tokens a {@code linear_gemv} block multiplies each weight load by (their rows come from L1 each time). */
    static final int LINEAR_TOKENS_PER_CTA = 8;
    /** The most tokens a {@code linear_mma} block takes: eight tiles of 8. */
    static final int MMA_TOKENS_PER_CTA = 64;

    /**
     * A linear projection's kernel (FP32 out); {@code TILES} chooses here as {@code BY_BATCH} (a
     * linear kernel has no tiles). For one sequence, or where {@code projections} asks for it: {@code linear_gemv}, one warp per output row, 8 outputs per block, the widest loads
     * the row allows, the batch's tokens in groups of up to {@link #LINEAR_TOKENS_PER_CTA} (the
     * weights are read once per group), and as many loads in flight as cover the row in one step,
     * so that a row's weights are in flight before the kernel waits for its input: up to 16 for one
     * token, 8 for a group (16 loads beside 8 sums take 163 registers on sm_90a, one block per SM).
     * Else, where the rows are whole 16-byte loads: {@code linear_mma}, the batch in tiles of 8
     * tokens (up to {@link #MMA_TOKENS_PER_CTA} a block) by 16 rows, 8 warps over the inputs, 4
     * steps of loads in flight.
     */
    static KernelSpec linear(String name, int inputs, int outputs, boolean bias, Target target, int batch,
                             ProjectionKernels projections) {
        Problem.Linear problem = new Problem.Linear(inputs, outputs, WeightFormat.BF16, DType.BF16, bias);
        Store epilogue = Epilogues.store(Epilogues.acc(), DType.FP32);
        boolean mma = switch (projections) {
            case BY_BATCH, TILES -> batch > 1;
            case MMA -> true;
            case GEMV -> false;
        };
        if (mma) {
            int tokens = Math.min(MMA_TOKENS_PER_CTA, 8 * Math.ceilDiv(batch, 8));
            // one row tile: two (half the activations read per block, half the blocks) made the projections slower
            KernelSpec spec = new KernelSpec(name, problem, new LinearMma(8, 4, 16, tokens), epilogue, target);
            if (Validator.errors(spec).isEmpty()) {
                return spec;
            }
        }
        int loadBytes = loadBytes(inputs);
        int tokens = Math.min(batch, LINEAR_TOKENS_PER_CTA);
        int unroll = Math.min(tokens == 1 ? 16 : 8, Math.ceilDiv(inputs / (loadBytes / 2), 32));
        return Validator.check(new KernelSpec(name, problem, new LinearGemv(8, loadBytes, unroll, Math.min(8, outputs), tokens),
                epilogue, target)).spec();
    }

    /** 16-byte loads where a row is a whole number of them, else 8, else 4. */
    static int loadBytes(int elements) {
        return elements % 8 == 0 ? 16 : elements % 4 == 0 ? 8 : 4;
    }

    /** An expert half with a decode schedule: one token per block where that validates, else the first valid output-centric one. */
    static KernelSpec expertSpec(String name, Problem problem, Store epilogue, Target target) {
        KernelSpec preferred = new KernelSpec(name, problem, new OutputCentric(4, 16, 8, 1, 1, 0), epilogue, target);
        if (Validator.errors(preferred).isEmpty()) {
            return preferred;
        }
        for (Schedule<?> s : Candidates.of(OutputCentric.KIND, problem, target)) {
            KernelSpec k = preferred.withSchedule(s);
            if (Validator.errors(k).isEmpty()) {
                return k;
            }
        }
        throw new IllegalArgumentException("no output-centric schedule lowers " + problem);
    }

    private DeviceBuffer buffer(DType type, long elements) {
        DeviceBuffer b = DeviceBuffer.allocate(type, Math.max(1, elements));
        owned.add(b);
        return b;
    }

    private <T extends AutoCloseable> T own(T resource) {
        closers.add(resource);
        return resource;
    }

    private DeviceBuffer f32(float[] values) {
        DeviceBuffer b = buffer(DType.FP32, values.length);
        b.copyFrom(values);
        return b;
    }

    private DeviceBuffer bf16(short[] bits) {
        DeviceBuffer b = buffer(DType.BF16, bits.length);
        b.copyFrom(bits);
        return b;
    }

    private enum Vector {
        /** 1 + N(0, 0.1^2): a norm's weight. */
        NORM(1, 0.1),
        /** N(0, 0.1^2). */
        BIAS(0, 0.1),
        /** N(0, 1): gpt-oss's attention sinks. */
        SINK(0, 1);

        final double mean;
        final double std;

        Vector(double mean, double std) {
            this.mean = mean;
            this.std = std;
        }
    }

    private record Fill(CudaFunction bf16, CudaFunction f32) {}

    /** A bf16 matrix {@code [rows][cols]}: the checkpoint's tensor, or N(0, std^2) drawn on the device. */
    private DeviceBuffer matrix(Weights source, Fill fill, String name, long rows, int cols, double std) {
        return switch (source) {
            case Weights.FromCheckpoint(Checkpoint ckpt, var _) -> bf16(bf16Of(ckpt, name, rows * cols));
            case Weights.Random(long seed, var _) -> {
                DeviceBuffer b = buffer(DType.BF16, rows * cols);
                fill.bf16().launch(1024, 1, 1, 256, 1, 1, 0, stream, b, rows * cols, tensorSeed(seed, name), 0f, (float) std);
                yield b;
            }
        };
    }

    /** An FP32 vector: the checkpoint's tensor, or drawn on the device as its kind says. */
    private DeviceBuffer vector(Weights source, Fill fill, String name, int n, Vector kind) {
        return switch (source) {
            case Weights.FromCheckpoint(Checkpoint ckpt, var _) -> f32(sized(ckpt, name, n));
            case Weights.Random(long seed, var _) -> {
                DeviceBuffer b = buffer(DType.FP32, n);
                fill.f32().launch(Math.ceilDiv(n, 256), 1, 1, 256, 1, 1, 0, stream, b, (long) n, tensorSeed(seed, name),
                        (float) kind.mean, (float) kind.std);
                yield b;
            }
        };
    }

    /** The tensor's values, refused unless it has the number of elements config.json implies. */
    private static float[] sized(Checkpoint ckpt, String name, long elements) {
        long n = ckpt.tensor(name).numel();
        if (n != elements) {
            throw new IllegalArgumentException(ckpt.fileOf(name).path() + ": tensor '" + name + "' has shape "
                    + ckpt.tensor(name).shape() + " (" + n + " elements); config.json implies " + elements);
        }
        return ckpt.floats(name);
    }

    private static long tensorSeed(long seed, String name) {
        return seed * 0x9E3779B97F4A7C15L + name.hashCode();
    }

    private static short[] bf16Bits(float[] values) {
        short[] out = new short[values.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = Bf16.fromFloat(values[i]);
        }
        return out;
    }

    /** A tensor as bf16 bits: a BF16 tensor's own, any other float tensor rounded; its size checked as {@link #sized} does. */
    private static short[] bf16Of(Checkpoint ckpt, String name, long elements) {
        return ckpt.tensor(name).dtype() == dev.moeforge.checkpoint.SafetensorsDType.BF16 && ckpt.tensor(name).numel() == elements
                ? ckpt.bf16(name) : bf16Bits(sized(ckpt, name, elements));
    }

    /** bf16 arrays one after another (q, k and v stacked into the fused projection). */
    private static short[] concat(short[]... parts) {
        int n = 0;
        for (short[] p : parts) {
            n += p.length;
        }
        short[] out = new short[n];
        int at = 0;
        for (short[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    /** Arrays one after another (q, k and v stacked into the fused projection). */
    private static float[] concatFloats(float[]... parts) {
        int n = 0;
        for (float[] p : parts) {
            n += p.length;
        }
        float[] out = new float[n];
        int at = 0;
        for (float[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    private static Object ptr(DeviceBuffer b) {
        return b == null ? (Object) 0L : b;
    }
}
