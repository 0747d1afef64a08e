package dev.moeforge.examples.cli;

import dev.moeforge.codegen.cuda.KernelParam;
import dev.moeforge.codegen.cuda.KernelSignature;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.format.Bf16;
import dev.moeforge.dsl.format.EncodedWeights;
import dev.moeforge.dsl.format.Projections;
import dev.moeforge.dsl.format.RowSource;
import dev.moeforge.dsl.format.SplitDownWeights;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Target;
import dev.moeforge.dsl.ir.epilogue.RouterTrees;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.reference.ErrorStats;
import dev.moeforge.dsl.reference.ExpertReference;
import dev.moeforge.dsl.reference.InputNormReference;
import dev.moeforge.dsl.reference.RandomInputs;
import dev.moeforge.dsl.reference.LinearReference;
import dev.moeforge.dsl.reference.RouterReference;
import dev.moeforge.dsl.reference.Routing;
import dev.moeforge.dsl.reference.WeightRows;
import dev.moeforge.dsl.schedule.Candidates;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.Schedule;
import dev.moeforge.examples.bench.GpuTimer;
import dev.moeforge.runtime.cuda.CudaGraph;
import dev.moeforge.runtime.cuda.CudaStream;
import dev.moeforge.runtime.cuda.DeviceBuffer;
import dev.moeforge.runtime.cuda.LaunchOrder;
import dev.moeforge.runtime.kernel.KernelHandle;
import dev.moeforge.runtime.kernel.KernelRuntime;
import dev.moeforge.runtime.moe.DeviceWeights;
import dev.moeforge.runtime.moe.ExpertHalf;
import dev.moeforge.runtime.moe.ExpertLayer;
import dev.moeforge.runtime.moe.ExpertMlpLayer;
import dev.moeforge.runtime.moe.InputRows;
import dev.moeforge.runtime.moe.RouterKernel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

/**
 * What {@code try} and {@code demo} run on the device: the layer a gate_up and a down of one shape
 * form, an expert_mlp kernel (a layer by itself), a router, or a gate_up or down alone.
 * {@link #prepare} draws fresh random inputs and computes the FP64 CPU reference on them; on a GPU,
 * {@link Trial#run} then runs a variant of the unit (itself, a schedule neighbour, the catalogue's
 * kernels for the same function) on those inputs, its outputs poisoned first, checks every output
 * against the reference and times graph replays of it.
 */
sealed interface TrialUnit {

    /** The kernels, in launch order. */
    List<KernelSpec> kernels();

    /** The same kind of unit with other kernels of the same problems (a neighbour's schedule, a catalogue kernel). */
    TrialUnit with(List<KernelSpec> kernels);

    /** Fresh random inputs for {@code tokens} tokens and the FP64 reference on them. */
    Trial prepare(int tokens, long seed);

    /** What kind of unit this is and its sizes, e.g. {@code layer (H=256, I=128, E=16, top-4, gate_up bf16, down bf16)}. */
    String describe();

    default String name() {
        return kernels().stream().map(KernelSpec::name).collect(Collectors.joining(" + "));
    }

    /** The most tokens every kernel of the unit takes in one launch. */
    default int maxTokens() {
        return kernels().stream().mapToInt(k -> Validator.check(k).maxTokens()).min().orElseThrow();
    }

    /**
     * The catalogue's kernels that compute what this unit computes (equal problems and epilogues), as
     * units of this kind; a layer takes the catalogue's gate_up and the down of the same name.
     */
    default List<TrialUnit> catalogueVariants(List<KernelSpec> catalogue) {
        KernelSpec only = kernels().getFirst();
        return catalogue.stream().filter(c -> sameFunction(c, only)).map(c -> with(List.of(c))).toList();
    }

    /** For each kernel, each neighbour of its schedule on {@code target} beside the unit's other kernels. */
    default List<TrialUnit> neighbours(Target target) {
        List<TrialUnit> variants = new ArrayList<>();
        for (int i = 0; i < kernels().size(); i++) {
            KernelSpec k = kernels().get(i);
            int n = 0;
            for (Schedule<?> s : Candidates.neighbours(k.schedule(), k.problem(), target)) {
                List<KernelSpec> ks = new ArrayList<>(kernels());
                ks.set(i, k.withSchedule(s).withName(k.name() + "_n" + n++));
                variants.add(with(ks));
            }
        }
        return variants;
    }

    private static boolean sameFunction(KernelSpec a, KernelSpec b) {
        return a.problem().equals(b.problem()) && a.epilogue().equals(b.epilogue())
                && quantisesActivations(a) == quantisesActivations(b);
    }

    /** Whether the kernel multiplies FP8-quantised activations (W8A8): its outputs are another function's than W8A16's. */
    private static boolean quantisesActivations(KernelSpec k) {
        return Validator.check(k).quantisesActivations();
    }

    /**
     * The units {@code kernels} form, in order: each gate_up with an unpaired down of its shape (the one
     * named as it is with {@code down} for {@code gate_up}, else the first), the rest alone.
     */
    static List<TrialUnit> of(List<KernelSpec> kernels) {
        List<KernelSpec> downs = new ArrayList<>(kernels.stream().filter(k -> k.problem() instanceof Problem.ExpertDown).toList());
        List<TrialUnit> units = new ArrayList<>();
        for (KernelSpec k : kernels) {
            switch (k.problem()) {
                case Problem.ExpertGateUp g -> {
                    String namesake = k.name().replace("gate_up", "down");
                    Optional<KernelSpec> down = downs.stream()
                            .filter(d -> ((Problem.ExpertDown) d.problem()).shape().equals(g.shape()))
                            .min(java.util.Comparator.comparing(d -> !d.name().equals(namesake)));
                    down.ifPresent(downs::remove);
                    units.add(down.<TrialUnit>map(d -> new Layer(k, d)).orElseGet(() -> new Single(k)));
                }
                case Problem.ExpertDown _ -> { }  // paired above, or alone below
                case Problem.ExpertMlp _, Problem.Router _, Problem.Linear _ -> units.add(new Single(k));
            }
        }
        downs.forEach(d -> units.add(new Single(d)));
        return units;
    }

    /** An expert unit's activations {@code x [M][H]}, N(0, 1) in bf16. */
    private static short[] activations(ExpertShape s, int tokens, long seed) {
        return RandomInputs.bf16Normal(seed, tokens * s.hidden(), 1.0);
    }

    /** An expert unit's routing: each token to top-k distinct experts, with positive weights summing to 1. */
    private static Routing routing(ExpertShape s, int tokens, long seed) {
        return RandomInputs.uniformRouting(seed + 3, tokens, s.experts(), s.topk());
    }

    private static String shapeText(ExpertShape s) {
        return "H=" + s.hidden() + ", I=" + s.intermediate() + ", E=" + s.experts() + ", top-" + s.topk();
    }

    // ------------------------------------------------------------------------------------ the units

    /** A gate_up and a down of the same shape: one {@link ExpertLayer}. */
    record Layer(KernelSpec gateUp, KernelSpec down) implements TrialUnit {
        @Override
        public List<KernelSpec> kernels() {
            return List.of(gateUp, down);
        }

        @Override
        public TrialUnit with(List<KernelSpec> kernels) {
            return new Layer(kernels.get(0), kernels.get(1));
        }

        @Override
        public String describe() {
            Problem.ExpertGateUp g = (Problem.ExpertGateUp) gateUp.problem();
            return "layer (" + shapeText(g.shape()) + ", gate_up " + g.weights().text() + ", down " + down.problem().weights().text()
                    + ")";
        }

        @Override
        public List<TrialUnit> catalogueVariants(List<KernelSpec> catalogue) {
            List<TrialUnit> pairs = new ArrayList<>();
            for (KernelSpec g : catalogue) {
                String downName = g.name().replace("gate_up", "down");
                if (sameFunction(g, gateUp)) {
                    catalogue.stream().filter(d -> d.name().equals(downName) && sameFunction(d, down)).findFirst()
                            .ifPresent(d -> pairs.add(new Layer(g, d)));
                }
            }
            return pairs;
        }

        @Override
        public Trial prepare(int tokens, long seed) {
            ExpertShape s = ((Problem.ExpertGateUp) gateUp.problem()).shape();
            short[] x = activations(s, tokens, seed);
            Routing routing = routing(s, tokens, seed);
            HostWeights gu = HostWeights.random((Problem.ExpertProblem) gateUp.problem(), seed + 1);
            HostWeights dn = HostWeights.random((Problem.ExpertProblem) down.problem(), seed + 2);
            ExpertReference.LayerResult ref = ExpertReference.layer(gateUp, down, x, gu.rows(), dn.rows(), routing);
            boolean w8a8 = Validator.check(gateUp).quantisesActivations();
            boolean wgmma = gateUp.schedule() instanceof ExpertCentric g && g.wgmma() || down.schedule() instanceof ExpertCentric d && d.wgmma();
            return new Trial(tokens) {
                @Override
                String sample() {
                    return "token 0 routed to " + Arrays.toString(Arrays.copyOf(routing.ids(), s.topk())) + "; y[0][0..3] = "
                            + firstValues(ref.y().stored(), 4);
                }

                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    ExpertLayer layer = own(new ExpertLayer(kernels.get(0), kernels.get(1), LaunchOrder.OVERLAPPING_PREVIOUS, tokens));
                    DeviceBuffer dx = input(x);
                    DeviceWeights dgu = own(gu.upload());
                    DeviceWeights ddn = own(dn.upload());
                    DeviceBuffer[] r = input(routing);
                    if (w8a8) {  // the intermediate is quantised rows: y alone is checked
                        DeviceBuffer inter = own(layer.allocateInter(tokens));
                        DeviceBuffer y = output(DType.BF16, ref.y().stored().length, against("y", ref.y().exact(),
                                wgmma ? Bounds.WGMMA_FP8_Y : Bounds.BF16_OUTPUT));
                        return () -> layer.enqueue(stream, tokens, dx, dgu, ddn, r[0], r[1], inter, y);
                    }
                    DeviceBuffer inter = output(DType.BF16, ref.inter().stored().length, against("inter", ref.inter().exact()));
                    DeviceBuffer y = output(DType.BF16, ref.y().stored().length, against("y", ref.y().exact()));
                    return () -> layer.enqueue(stream, tokens, dx, dgu, ddn, r[0], r[1], inter, y);
                }
            };
        }
    }

    /** One kernel: a gate_up or a down without its other half beside it, an expert_mlp, or a router. */
    record Single(KernelSpec kernel) implements TrialUnit {
        /** Selection scores closer than this (relative) may be ordered either way by FP32 accumulation. */
        static final double NEAR_TIE = 1e-5;

        @Override
        public List<KernelSpec> kernels() {
            return List.of(kernel);
        }

        @Override
        public TrialUnit with(List<KernelSpec> kernels) {
            return new Single(kernels.getFirst());
        }

        @Override
        public String describe() {
            return switch (kernel.problem()) {
                case Problem.ExpertGateUp g -> "gate_up alone (" + shapeText(g.shape()) + ", " + g.weights().text() + ")";
                case Problem.ExpertDown d -> "down alone (" + shapeText(d.shape()) + ", " + d.weights().text() + ")";
                case Problem.ExpertMlp m -> "expert_mlp layer (" + shapeText(m.shape()) + ", " + m.weights().text() + ")";
                case Problem.Router r -> "router (H=" + r.hidden() + ", E=" + r.experts() + ")";
                case Problem.Linear l -> "linear (K=" + l.inputs() + ", N=" + l.outputs() + (l.bias() ? ", bias" : "") + ")";
            };
        }

        @Override
        public Trial prepare(int tokens, long seed) {
            if (Validator.check(kernel).quantisesActivations()) {
                throw new IllegalArgumentException("kernel " + kernel.name() + " multiplies FP8 activations (W8A8): its intermediate is "
                        + "quantised rows, so try it as a layer, beside its other half in the same file");
            }
            return switch (kernel.problem()) {
                case Problem.ExpertGateUp g -> gateUp(g, tokens, seed);
                case Problem.ExpertDown d -> down(d, tokens, seed);
                case Problem.ExpertMlp m -> mlp(m, tokens, seed);
                case Problem.Router r -> router(r, tokens, seed);
                case Problem.Linear l -> linear(l, tokens, seed);
            };
        }

        private Trial gateUp(Problem.ExpertGateUp p, int tokens, long seed) {
            ExpertShape s = p.shape();
            short[] x = activations(s, tokens, seed);
            Routing routing = routing(s, tokens, seed);
            HostWeights gu = HostWeights.random(p, seed + 1);
            ExpertReference.Result ref = ExpertReference.gateUp(kernel, x, gu.rows(), routing);
            return new Trial(tokens) {
                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    DeviceBuffer dx = input(x);
                    DeviceWeights dgu = own(gu.upload());
                    DeviceBuffer ids = input(routing)[0];
                    DeviceBuffer inter = output(DType.BF16, ref.stored().length, against("inter", ref.exact()));
                    ExpertHalf half = own(ExpertHalf.alone(kernels.getFirst(), LaunchOrder.OVERLAPPING_PREVIOUS, tokens));
                    return () -> half.enqueueGateUp(stream, tokens, dx, dgu, ids, inter);
                }
            };
        }

        /** down alone: its intermediate is drawn at random. */
        private Trial down(Problem.ExpertDown p, int tokens, long seed) {
            ExpertShape s = p.shape();
            short[] inter = RandomInputs.bf16Normal(seed, tokens * s.topk() * s.intermediate(), 1.0);
            Routing routing = routing(s, tokens, seed);
            HostWeights dn = HostWeights.random(p, seed + 2);
            ExpertReference.Result ref = ExpertReference.down(kernel, inter, dn.rows(), routing);
            return new Trial(tokens) {
                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    DeviceBuffer dinter = input(inter);
                    DeviceWeights ddn = own(dn.upload());
                    DeviceBuffer[] r = input(routing);
                    DeviceBuffer y = output(DType.BF16, ref.stored().length, against("y", ref.exact()));
                    ExpertHalf half = own(ExpertHalf.alone(kernels.getFirst(), LaunchOrder.OVERLAPPING_PREVIOUS, tokens));
                    return () -> half.enqueueDown(stream, tokens, dinter, ddn, r[0], r[1], y);
                }
            };
        }

        /** expert_mlp adds into an FP32 y that starts at zero, and zeroes y_zero (poisoned instead) for a later launch. */
        private Trial mlp(Problem.ExpertMlp p, int tokens, long seed) {
            ExpertShape s = p.shape();
            short[] x = activations(s, tokens, seed);
            Routing routing = routing(s, tokens, seed);
            HostWeights gu = HostWeights.random(new Problem.ExpertGateUp(s, p.weights(), p.activations(), p.layout()), seed + 1);
            HostWeights dn = HostWeights.random(new Problem.ExpertDown(s, p.weights(), p.activations()), seed + 2);
            ExpertReference.MlpResult ref = ExpertReference.mlp(kernel, x, gu.rows(), dn.rows(), routing);
            return new Trial(tokens) {
                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    ExpertMlpLayer layer = new ExpertMlpLayer(kernels.getFirst());
                    DeviceBuffer dx = input(x);
                    DeviceWeights dgu = own(gu.upload());
                    DeviceWeights ddn = own(DeviceWeights.upload(SplitDownWeights.of(dn.encoded())));
                    DeviceBuffer[] r = input(routing);
                    DeviceBuffer y = accumulator(DType.FP32, ref.y().length, against("y", ref.y(), Bounds.FP32_Y));
                    DeviceBuffer zeroed = output(DType.FP32, ref.y().length, b -> {
                        float[] v = fp32(b);
                        long left = IntStream.range(0, v.length).filter(i -> v[i] != 0).count();
                        return new Check("y_zero", null, left + " of " + v.length + " not zeroed", left == 0);
                    });
                    return () -> layer.enqueue(stream, tokens, dx, dgu, ddn, r[0], r[1], y, zeroed);
                }
            };
        }

        private Trial router(Problem.Router p, int tokens, long seed) {
            HostRows input = HostRows.draw(p, p.hidden(), tokens, seed);
            short[] x = input.x();
            short[] w = RandomInputs.bf16Normal(seed + 1, p.experts() * p.hidden(), 1.0 / Math.sqrt(p.hidden()));
            Map<String, float[]> rows = new LinkedHashMap<>();
            for (String row : RouterTrees.rowParams(kernel.epilogue())) {
                rows.put(row, RandomInputs.floatNormal(seed + 2 + rows.size(), p.experts(), 0.3));
            }
            RouterReference.Result ref = RouterReference.run(kernel, x, WeightRows.bf16(w, 1, p.experts(), p.hidden()), rows);
            Bounds bounds = ((Store) kernel.epilogue()).dtype() == DType.BF16 ? Bounds.BF16_OUTPUT : Bounds.FP32_ROUTING;
            Optional<TopK> selection = RouterTrees.selection(kernel.epilogue());
            // the reference's routing table as the kernel stores it: ids and values of a top-k, else a dense row per token
            double[] values = Arrays.stream(ref.exact()).flatMapToDouble(v -> Arrays.stream(switch (v) {
                case RouterReference.Row(double[] row) -> row;
                case RouterReference.Selection(int[] ids, double[] selected) -> selected;
            })).toArray();
            int[] ids = Arrays.stream(ref.exact()).filter(v -> v instanceof RouterReference.Selection)
                    .flatMapToInt(v -> Arrays.stream(((RouterReference.Selection) v).ids())).toArray();
            List<KernelParam> outputs = KernelSignature.of(kernel).tensors().stream()
                    .filter(param -> param.role() == KernelParam.Role.OUTPUT).toList();
            return new Trial(tokens) {
                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    RouterKernel router = own(new RouterKernel(kernels.getFirst(), tokens));
                    InputRows dx = upload(input);
                    DeviceBuffer dw = input(w);
                    Map<String, DeviceBuffer> drows = new LinkedHashMap<>();
                    rows.forEach((name, row) -> drows.put(name, input(row)));
                    Map<String, DeviceBuffer> out = new LinkedHashMap<>();
                    for (KernelParam param : outputs) {
                        if (dx.bind(param).isPresent()) {
                            continue;  // the input norm's outputs, checked by upload
                        }
                        out.put(param.name(), output(param.elementType(), param.elements(tokens), switch (param.name()) {
                            case "topk_ids" -> b -> idsCheck(selection.orElseThrow(), ref, rows, ids, ints(b));
                            case "expert_counts" -> b -> countsCheck(ints(out.get("topk_ids")), ints(b));
                            default -> against(param.name(), values, bounds);  // topk_weights or router_out
                        }));
                    }
                    DeviceBuffer counts = out.get("expert_counts");
                    DeviceBuffer[] buffers = out.values().toArray(DeviceBuffer[]::new);
                    return () -> {
                        if (counts != null) {
                            router.zeroCounts(stream, counts);
                        }
                        router.enqueue(stream, LaunchOrder.AFTER_PREVIOUS, tokens, dx, dw, drows, buffers);
                    };
                }
            };
        }

        private Trial linear(Problem.Linear p, int tokens, long seed) {
            HostRows input = HostRows.draw(p, p.inputs(), tokens, seed);
            short[] x = input.x();
            short[] w = RandomInputs.bf16Normal(seed + 1, p.outputs() * p.inputs(), 1.0 / Math.sqrt(p.inputs()));
            float[] bias = p.bias() ? RandomInputs.floatNormal(seed + 2, p.outputs(), 0.3) : null;
            double[] ref = LinearReference.run(kernel, x, WeightRows.bf16(w, 1, p.outputs(), p.inputs()), bias);
            DType stored = ((Store) kernel.epilogue()).dtype();
            Bounds bounds = stored == DType.BF16 ? Bounds.BF16_OUTPUT : Bounds.FP32_LINEAR;
            return new Trial(tokens) {
                @Override
                Runnable upload(CudaStream stream, List<KernelHandle> kernels) {
                    KernelHandle k = kernels.getFirst();
                    InputRows dx = upload(input);
                    List<DeviceBuffer> weights = bias == null ? List.of(input(w)) : List.of(input(w), input(bias));
                    DeviceBuffer[] args = dx.linearArguments(k, weights, output(stored, ref.length, against("y", ref, bounds)));
                    return () -> k.launch(stream, LaunchOrder.OVERLAPPING_PREVIOUS, tokens, args);
                }
            };
        }

        /** The ids must be the reference's, but where two experts' selection scores are a near-tie. */
        private static Check idsCheck(TopK topk, RouterReference.Result ref, Map<String, float[]> rows, int[] want, int[] got) {
            int differ = 0;
            int nearTies = 0;
            for (int i = 0; i < want.length; i++) {
                if (got[i] != want[i]) {
                    double[] by = ((RouterReference.Row) RouterReference.evaluate(topk.by().orElse(topk.input()),
                            ref.scores()[i / topk.k()], rows)).values();
                    boolean tie = got[i] >= 0 && got[i] < by.length
                            && Math.abs(by[got[i]] - by[want[i]]) <= NEAR_TIE * (1 + Math.abs(by[want[i]]));
                    differ += tie ? 0 : 1;
                    nearTies += tie ? 1 : 0;
                }
            }
            return new Check("topk_ids", null, differ + " of " + want.length + " differ"
                    + (nearTies > 0 ? " (" + nearTies + " more at a near-tie)" : ""), differ == 0);
        }

        /** expert_counts must be the histogram of the ids the kernel wrote. */
        private static Check countsCheck(int[] ids, int[] counts) {
            int[] want = new int[counts.length];
            for (int id : ids) {
                if (id >= 0 && id < want.length) {
                    want[id]++;
                }
            }
            boolean same = Arrays.equals(want, counts);
            return new Check("expert_counts", null, same ? "the ids' histogram" : "not the ids' histogram", same);
        }
    }

    // ------------------------------------------------------------------------------- the trial

    /** How far an output may be from the reference: relative L2 error and each element's error as a fraction of the peak. */
    record Bounds(double relativeL2, double element) {
        /** A bf16 output: rounding alone moves it by up to 2^-8 of the peak; the GPU tests allow 1e-2 for both. */
        static final Bounds BF16_OUTPUT = new Bounds(1e-2, 1e-2);
        /** expert_mlp's FP32 y, as the GPU tests bound it (FP32 sums in another order, an intermediate on a rounding edge). */
        static final Bounds FP32_Y = new Bounds(1e-4, 1e-3);
        /** A router's FP32 routing weights, as the GPU tests bound them. */
        static final Bounds FP32_ROUTING = new Bounds(1e-4, 1e-4);
        /** A linear projection's FP32 outputs: FP32 sums of bf16 products in another order than FP64's. */
        static final Bounds FP32_LINEAR = new Bounds(1e-5, 1e-4);
        /**
         * y of a W8A8 layer on Hopper's warpgroup MMA, whose FP8 sums are 22-bit floats: the GPU tests
         * measured up to 6.7e-3 relative and 2.1e-2 of the peak per element, and allow 2e-2 and 4e-2.
         */
        static final Bounds WGMMA_FP8_Y = new Bounds(2e-2, 4e-2);
    }

    /** One output checked: its error against the reference (null where a count says more), or a note, and whether it passed. */
    record Check(String output, ErrorStats error, String note, boolean pass) {
        static Check of(String output, ErrorStats error, Bounds bounds) {
            return new Check(output, error, null, error.within(bounds.relativeL2(), bounds.element()));
        }

        @Override
        public String toString() {
            return output + " " + (error != null ? error : note);
        }
    }

    /** A variant's run: every output checked, and the median of its timed graph replays. */
    record Outcome(TrialUnit variant, List<Check> checks, GpuTimer.Timing timing) {
        boolean pass() {
            return checks.stream().allMatch(Check::pass);
        }

        /** One line: the time, PASS or FAIL, and each output's error. */
        String line(String label) {
            return String.format(Locale.ROOT, "%-44s %9.2f us  %s  %s", label, timing.medianMicros(), pass() ? "PASS" : "FAIL",
                    checks.stream().map(Check::toString).collect(Collectors.joining(" | ")));
        }
    }

    /**
     * A unit's random inputs and FP64 reference for one token count. On a variant's {@link #run} the
     * inputs go to the device and its outputs are allocated, each with its check; both are freed when
     * the run ends.
     */
    abstract class Trial {
        final int tokens;
        private final List<AutoCloseable> device = new ArrayList<>();
        private final List<Output> outputs = new ArrayList<>();

        /** An output: zeroed (an accumulator) or poisoned before the launch, then checked. */
        private record Output(DeviceBuffer buffer, boolean accumulates, Function<DeviceBuffer, Check> check) {}

        Trial(int tokens) {
            this.tokens = tokens;
        }

        /** A few of the reference's values, for the demo's listing; empty where there is nothing short to show. */
        String sample() {
            return "";
        }

        /**
         * Runs {@code variant} (kernels of this unit's problems) on the device: its outputs poisoned, one
         * launch checked against the reference, then {@code reps} graph replays timed after {@code warmup}.
         */
        final Outcome run(KernelRuntime runtime, CudaStream stream, TrialUnit variant, int warmup, int reps) throws Exception {
            List<KernelHandle> kernels = variant.kernels().stream().map(runtime::load).toList();
            try {
                Runnable launch = upload(stream, kernels);
                for (Output o : outputs) {
                    DeviceBuffer b = o.buffer();
                    switch (b.dtype()) {
                        case BF16 -> b.fillBytes16(o.accumulates() ? 0 : Bf16.NAN);
                        case FP32 -> b.fillWords32(o.accumulates() ? 0 : Float.floatToRawIntBits(Float.NaN));
                        default -> b.fillWords32(o.accumulates() ? 0 : -1);
                    }
                }
                launch.run();
                stream.synchronize();
                List<Check> checks = outputs.stream().map(o -> o.check().apply(o.buffer())).toList();
                GpuTimer.Timing timing;
                try (CudaGraph graph = CudaGraph.capture(stream, launch)) {
                    timing = GpuTimer.time(stream, graph, warmup, reps);
                }
                return new Outcome(variant, checks, timing);
            } finally {
                outputs.clear();
                for (AutoCloseable r : device.reversed()) {
                    r.close();
                }
                device.clear();
            }
        }

        /** Copies the inputs to the device and allocates the outputs; returns what one launch of {@code kernels} enqueues. */
        abstract Runnable upload(CudaStream stream, List<KernelHandle> kernels);

        /** An output the launch writes whole: filled with NaN (-1 for integers) first, so that one left unwritten fails. */
        DeviceBuffer output(DType dtype, long elements, Function<DeviceBuffer, Check> check) {
            DeviceBuffer b = own(DeviceBuffer.allocate(dtype, elements));
            outputs.add(new Output(b, false, check));
            return b;
        }

        /** An output the launch adds into: zero first. */
        DeviceBuffer accumulator(DType dtype, long elements, Function<DeviceBuffer, Check> check) {
            DeviceBuffer b = own(DeviceBuffer.allocate(dtype, elements));
            outputs.add(new Output(b, true, check));
            return b;
        }

        DeviceBuffer input(short[] bf16) {
            DeviceBuffer b = own(DeviceBuffer.allocate(DType.BF16, bf16.length));
            b.copyFrom(bf16);
            return b;
        }

        DeviceBuffer input(float[] values) {
            DeviceBuffer b = own(DeviceBuffer.allocate(DType.FP32, values.length));
            b.copyFrom(values);
            return b;
        }

        /**
         * A router's or linear kernel's rows: x as given, or the residual stream, addend and norm
         * weight an input norm makes them from, with its two outputs checked against the reference's.
         */
        InputRows upload(HostRows rows) {
            InputNormReference.Drawn d = rows.drawn();
            if (d == null) {
                return new InputRows.Given(input(rows.x()));
            }
            double[] sums = IntStream.range(0, d.residual().length).mapToDouble(i -> d.rows().residualOut()[i]).toArray();
            double[] normed = IntStream.range(0, rows.x().length).mapToDouble(i -> Bf16.toFloat(rows.x()[i])).toArray();
            DeviceBuffer addend = d.norm().addend() == DType.BF16 ? input(d.addendBf16()) : input(d.addend());
            return new InputRows.Normed(input(d.residual()), addend, input(d.weight()),
                    output(DType.FP32, sums.length, against(KernelSignature.RESIDUAL_OUT, sums, Bounds.FP32_LINEAR)),
                    output(DType.BF16, normed.length, against(KernelSignature.NORMED_OUT, normed, Bounds.BF16_OUTPUT)));
        }

        /** The routing's ids and weights. */
        DeviceBuffer[] input(Routing routing) {
            DeviceBuffer ids = own(DeviceBuffer.allocate(DType.INT32, routing.ids().length));
            ids.copyFrom(routing.ids());
            return new DeviceBuffer[] {ids, input(routing.weights())};
        }

        <T extends AutoCloseable> T own(T resource) {
            device.add(resource);
            return resource;
        }
    }

    /** Checks an output against the reference's exact values within bf16 output bounds. */
    static Function<DeviceBuffer, Check> against(String output, double[] reference) {
        return against(output, reference, Bounds.BF16_OUTPUT);
    }

    static Function<DeviceBuffer, Check> against(String output, double[] reference, Bounds bounds) {
        return b -> Check.of(output, b.dtype() == DType.BF16 ? ErrorStats.of(reference, bf16(b)) : ErrorStats.of(reference, fp32(b)),
                bounds);
    }

    /**
     * The input rows of a router or linear kernel drawn on the host: {@code x} as given, or where the
     * problem has an input norm the residual stream, addend and norm weight of
     * {@link InputNormReference#random} ({@code drawn}; {@code x} is then the rows it makes).
     */
    record HostRows(short[] x, InputNormReference.Drawn drawn) {
        static HostRows draw(Problem p, int width, int tokens, long seed) {
            if (p.inputNorm().isEmpty()) {
                return new HostRows(RandomInputs.bf16Normal(seed, tokens * width, 1.0), null);
            }
            InputNormReference.Drawn drawn = InputNormReference.random(p.inputNorm().get(), tokens, width, seed);
            return new HostRows(drawn.rows().normed(), drawn);
        }
    }

    /** Random expert weights in a problem's format, encoded as a checkpoint holds them, with its bias when it has one. */
    record HostWeights(EncodedWeights encoded, float[] bias) {
        static HostWeights random(Problem.ExpertProblem p, long seed) {
            ExpertShape s = p.shape();
            boolean gateUp = p instanceof Problem.ExpertGateUp;
            int rows = gateUp ? 2 * s.intermediate() : s.hidden();
            int cols = gateUp ? s.hidden() : s.intermediate();
            Projections projections = p instanceof Problem.ExpertGateUp g ? Projections.of(g.layout()) : Projections.ONE;
            // rows of K values with standard deviation 1/sqrt(K) give dot products of O(1)
            EncodedWeights w = EncodedWeights.encode(p.weights(), RowSource.normal(seed, rows, 1.0 / Math.sqrt(cols)), s.experts(),
                    rows, cols, projections, gateUp ? "gate_up" : "down");
            return new HostWeights(w, p.bias() ? RandomInputs.floatNormal(seed ^ 0xb1a5, s.experts() * rows, 0.5) : null);
        }

        WeightRows rows() {
            WeightRows rows = WeightRows.of(encoded);
            return bias == null ? rows : rows.withBias(bias);
        }

        DeviceWeights upload() {
            return DeviceWeights.upload(encoded, bias);
        }
    }

    private static short[] bf16(DeviceBuffer b) {
        short[] out = new short[(int) b.elements()];
        b.copyTo(out);
        return out;
    }

    private static int[] ints(DeviceBuffer b) {
        int[] out = new int[(int) b.elements()];
        b.copyTo(out);
        return out;
    }

    private static float[] fp32(DeviceBuffer b) {
        float[] out = new float[(int) b.elements()];
        b.copyTo(out);
        return out;
    }

    private static String firstValues(short[] v, int n) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < Math.min(n, v.length); i++) {
            b.append(i > 0 ? ", " : "").append(String.format(Locale.ROOT, "%.4f", Bf16.toFloat(v[i])));
        }
        return b.append(']').toString();
    }
}
