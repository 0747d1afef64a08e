package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.check.ValidatedSpec;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.schedule.ConfigConstant;
import dev.moeforge.dsl.schedule.ExpertCentric;
import dev.moeforge.dsl.schedule.LaunchGeometry;
import dev.moeforge.dsl.schedule.RoutingPlan;
import dev.moeforge.dsl.schedule.ScheduleModel;
import dev.moeforge.dsl.schedule.TreeEvaluation;
import dev.moeforge.dsl.text.SpecPrinter;
import freemarker.core.TemplateClassResolver;
import freemarker.template.Configuration;
import freemarker.template.Template;
import freemarker.template.TemplateException;
import freemarker.template.TemplateExceptionHandler;
import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TimeZone;

/**
 * Generates the CUDA source of a spec. The spec is validated first, so no code is ever generated
 * for an invalid one. The schedule states its template, device body, Config members and notes
 * ({@link ScheduleModel}); this class adds the problem's part (shape, format, epilogue, signature).
 * Output depends on the spec alone: same spec, same bytes.
 */
public final class CudaEmitter {
    private static final Configuration FREEMARKER = configuration();

    private CudaEmitter() {}

    public static GeneratedKernel emit(KernelSpec spec) {
        return emit(Validator.check(spec));
    }

    /** The CUDA of a spec the caller has validated already. */
    public static GeneratedKernel emit(ValidatedSpec<?> valid) {
        KernelSpec spec = valid.spec();
        String specText = SpecPrinter.print(spec);
        ScheduleModel schedule = valid.model();
        String source = render(schedule.template(), model(valid, specText, schedule));
        return new GeneratedKernel(spec, specText, fileName(spec), source, DeviceHeader.of(schedule.library()).files());
    }

    /** {@code <name>_<target>.cu}: one file per kernel and target. */
    public static String fileName(KernelSpec spec) {
        return spec.name() + "_" + spec.target().text() + ".cu";
    }

    private static KernelModel model(ValidatedSpec<?> valid, String specText, ScheduleModel schedule) {
        Problem problem = valid.problem();
        List<ConfigConstant> config = new ArrayList<>(problemConfig(problem));
        config.addAll(schedule.config());
        LaunchGeometry launch = valid.geometry(1);  // block and shared memory do not depend on the tokens
        config.add(ConfigConstant.integer("kThreadsPerCta", launch.blockX()));
        config.add(ConfigConstant.integer("kMinBlocksPerSm", schedule.minBlocksPerSm()));
        config.add(ConfigConstant.integer("kSharedBytes", launch.sharedBytes()));
        List<String> notes = new ArrayList<>(schedule.notes());
        if (launch.sharedBytes() > 0) {
            notes.add("Dynamic shared memory: " + launch.sharedBytes() + " bytes.");
        }
        String launchBounds = "Config::kThreadsPerCta" + (schedule.minBlocksPerSm() > 0 ? ", Config::kMinBlocksPerSm" : "");
        KernelSignature signature = KernelSignature.of(valid);
        List<String> params = signature.params().stream().map(KernelParam::cudaDeclaration).toList();
        Store store = valid.epilogue();
        Map<EpilogueNode, String> bound = new LinkedHashMap<>();
        String epilogueParams = "";
        List<String> valueLines = List.of();
        List<String> storeLines = List.of();
        boolean blockGroups = false;
        boolean expertCounts = false;
        switch (problem) {
            case Problem.ExpertGateUp _, Problem.ExpertMlp _ -> {
                epilogueParams = "float gate, float up";
                bound.put(Acc.GATE, "gate");
                bound.put(Acc.UP, "up");
            }
            case Problem.ExpertDown _ -> {
                epilogueParams = "float combined";
                if (store.input() instanceof Combine c) {
                    bound.put(c, "combined");
                }
            }
            case Problem.Router r -> {
                TreeEvaluation evaluation = schedule.evaluation().orElseThrow(
                        () -> new IllegalStateException("a router schedule states how its rule is evaluated"));
                RouterEpilogueEmitter.Code code = RouterEpilogueEmitter.emit(store, r.expertCounts(), evaluation);
                valueLines = code.values();
                storeLines = code.stores();
                blockGroups = evaluation.mode() == TreeEvaluation.Mode.BLOCK_GROUPS;
                expertCounts = r.expertCounts();
            }
            case Problem.Linear _ -> {
                epilogueParams = "float acc";
                bound.put(Acc.MAIN, "acc");
            }
        }
        boolean expert = !(problem instanceof Problem.Router);
        return new KernelModel(specText.lines().toList(), notes, DeviceHeader.of(schedule.library()).fileName(), config, launchBounds,
                schedule.clusterSize(), valid.name(), params, schedule.body(), signature.callArguments(), signature.inputArgument(),
                expert ? SpecPrinter.printEpilogue(store) : "", epilogueParams,
                expert ? EpilogueEmitter.emit(store, bound) : List.of(), valueLines, storeLines, blockGroups, expertCounts,
                valid.takesRoutingPlan() ? valid.name() + RoutingPlan.COUNT_ENTRY : "",
                valid.takesRoutingPlan() ? valid.name() + RoutingPlan.SCATTER_ENTRY : "",
                valid.takesQuantisedX() ? valid.name() + ExpertCentric.QUANTISE_ENTRY : "",
                ExpertCentric.QUANTISE_THREADS, valid.combinesAfter() ? valid.name() + ExpertCentric.COMBINE_ENTRY : "",
                ExpertCentric.COMBINE_THREADS, ExpertCentric.COMBINE_OUTPUTS_PER_THREAD, schedule.waitsInBody());
    }

    /** The problem's members of Config: its weight format, sizes and layout, and its input norm's epsilon. */
    private static List<ConfigConstant> problemConfig(Problem problem) {
        List<ConfigConstant> config = new ArrayList<>();
        problem.inputNorm().ifPresent(n -> config.add(ConfigConstant.real("kNormEps", n.eps())));
        switch (problem) {
            case Problem.ExpertProblem p -> {
                config.add(ConfigConstant.type("Format", deviceFormat(p.weights())));
                config.addAll(shapeConfig(p.shape()));
                if (p instanceof Problem.ExpertGateUp g) {
                    config.add(layout(g.layout()));
                }
                config.add(ConfigConstant.bool("kBias", p.bias()));
            }
            case Problem.ExpertMlp m -> {
                config.add(ConfigConstant.type("Format", deviceFormat(m.weights())));
                config.addAll(shapeConfig(m.shape()));
                config.add(layout(m.layout()));
            }
            case Problem.Router r -> {
                config.add(ConfigConstant.integer("kHidden", r.hidden()));
                config.add(ConfigConstant.integer("kExperts", r.experts()));
            }
            case Problem.Linear l -> {
                config.add(ConfigConstant.integer("kInputs", l.inputs()));
                config.add(ConfigConstant.integer("kOutputs", l.outputs()));
                config.add(ConfigConstant.bool("kBias", l.bias()));
            }
        }
        return config;
    }

    private static List<ConfigConstant> shapeConfig(ExpertShape shape) {
        return List.of(ConfigConstant.integer("kHidden", shape.hidden()),
                ConfigConstant.integer("kIntermediate", shape.intermediate()),
                ConfigConstant.integer("kExperts", shape.experts()),
                ConfigConstant.integer("kTopk", shape.topk()));
    }

    private static ConfigConstant layout(GateUpLayout layout) {
        return ConfigConstant.enumerator("kLayout", "mf::GateUpLayout", switch (layout) {
            case STACKED -> "mf::GateUpLayout::kStacked";
            case INTERLEAVED -> "mf::GateUpLayout::kInterleaved";
        });
    }

    /** The device header's description of a weight format. */
    static String deviceFormat(WeightFormat format) {
        return switch (format) {
            case WeightFormat.Bf16 _ -> "mf::Bf16Weights";
            case WeightFormat.Fp8 f -> switch (f.scaling()) {
                case CHANNEL -> "mf::Fp8ChannelWeights";
                case BLOCK_128X128 -> "mf::Fp8Block128Weights";
            };
            case WeightFormat.Mxfp8 _ -> "mf::Mxfp8Weights";
            case WeightFormat.Nvfp4 _ -> "mf::Nvfp4Weights";
            case WeightFormat.Mxfp4 _ -> "mf::Mxfp4Weights";
            case WeightFormat.Int8 i -> switch (i.scaling()) {
                case CHANNEL -> "mf::Int8ChannelWeights";
                case GROUP_128 -> "mf::Int8Group128Weights";
            };
            case WeightFormat.Int4 i -> switch (i.scaling()) {
                case CHANNEL -> "mf::Int4ChannelWeights";
                case GROUP_128 -> "mf::Int4Group128Weights";
            };
        };
    }

    private static String render(String template, KernelModel model) {
        try {
            Template t = FREEMARKER.getTemplate(template);
            StringWriter out = new StringWriter();
            t.process(model, out);
            return out.toString();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (TemplateException e) {
            throw new IllegalStateException("template " + template + " failed: " + e.getMessage(), e);
        }
    }

    private static Configuration configuration() {
        Configuration c = new Configuration(Configuration.VERSION_2_3_34);
        c.setClassForTemplateLoading(CudaEmitter.class, "");
        c.setDefaultEncoding("UTF-8");
        c.setNumberFormat("computer");
        c.setLocale(Locale.ROOT);
        c.setTimeZone(TimeZone.getTimeZone("UTC"));
        c.setTemplateExceptionHandler(TemplateExceptionHandler.RETHROW_HANDLER);
        c.setLogTemplateExceptions(false);
        c.setWrapUncheckedExceptions(true);
        c.setFallbackOnNullLoopVariable(false);
        c.setNewBuiltinClassResolver(TemplateClassResolver.ALLOWS_NOTHING_RESOLVER);
        c.setWhitespaceStripping(true);
        return c;
    }
}
