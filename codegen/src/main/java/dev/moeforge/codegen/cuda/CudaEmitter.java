package dev.moeforge.codegen.cuda;

import dev.moeforge.dsl.check.EpilogueTypes;
import dev.moeforge.dsl.check.OutputCentricLayout;
import dev.moeforge.dsl.check.RouterTileLayout;
import dev.moeforge.dsl.check.SplitDownLayout;
import dev.moeforge.dsl.check.TensorCoreTileLayout;
import dev.moeforge.dsl.check.Validator;
import dev.moeforge.dsl.ir.ExpertShape;
import dev.moeforge.dsl.ir.GateUpLayout;
import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.ir.Problem;
import dev.moeforge.dsl.ir.Schedule;
import dev.moeforge.dsl.ir.Schedule.OutputCentric;
import dev.moeforge.dsl.ir.WeightFormat;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Combine;
import dev.moeforge.dsl.ir.epilogue.EpilogueNode;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.text.SpecPrinter;
import freemarker.template.Configuration;
import freemarker.template.Template;
import freemarker.template.TemplateException;
import freemarker.template.TemplateExceptionHandler;
import freemarker.core.TemplateClassResolver;
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
 * for an invalid one. Output depends on the spec alone: same spec, same bytes.
 */
public final class CudaEmitter {
    private static final Configuration FREEMARKER = configuration();

    private CudaEmitter() {}

    public static GeneratedKernel emit(KernelSpec spec) {
        Validator.check(spec);
        String specText = SpecPrinter.print(spec);
        String source = switch (spec.schedule()) {
            case OutputCentric oc -> render("output_centric.cu.ftl", outputCentricModel(spec, oc, specText));
            case Schedule.OutputTensorCore tc -> render("output_centric.cu.ftl", outputTensorCoreModel(spec, tc, specText));
            case Schedule.SplitDown sd -> render("output_centric.cu.ftl", splitDownModel(spec, sd, specText));
            case Schedule.RouterGemv g -> render("router_gemv.cu.ftl", routerModel(spec, g, specText));
            case Schedule.RouterCluster c -> render("router_cluster.cu.ftl", routerClusterModel(spec, c, specText));
            case Schedule.RouterTiled t -> render("router_tiled.cu.ftl", routerTiledModel(spec, t, specText));
        };
        return new GeneratedKernel(spec, specText, fileName(spec), source,
                Map.of(DeviceHeader.FILE_NAME, DeviceHeader.content()));
    }

    /** {@code <name>_<target>.cu}: one file per kernel and target. */
    public static String fileName(KernelSpec spec) {
        return spec.name() + "_" + spec.target().text() + ".cu";
    }

    private static Map<String, Object> routerModel(KernelSpec spec, Schedule.RouterGemv g, String specText) {
        Problem.Router r = (Problem.Router) spec.problem();  // validated pairing
        List<Map<String, String>> constants = routerConstants(r);
        constant(constants, "int", "kWarpsPerCta", g.warpsPerCta());
        constant(constants, "int", "kLoadBytes", g.loadBytes());
        constant(constants, "int", "kUnroll", g.kUnroll());
        constant(constants, "int", "kExpertsPerCta", g.expertsPerCta());
        int split = LaunchGeometry.routerWarpsPerScore(spec);
        constant(constants, "int", "kWarpsPerScore", split);
        boolean block = RouterEpilogueEmitter.blockEligible((Store) spec.epilogue(), r.experts(), g.warpsPerCta());
        if (block) {
            constant(constants, "int", "kSlice", r.experts() / g.warpsPerCta());
        }
        Map<String, Object> model = routerModel(spec, specText, constants, launchBounds(g.warpsPerCta(), DECODE_ROUTER_MIN_BLOCKS), List.of(
                "router: " + LaunchGeometry.routerBlocksPerToken(spec) + " blocks per token, " + scoreWarps(split)
                        + "; the block with the token's last start ticket awaits the scores as they land and evaluates the epilogue"
                        + (block ? ", warp w on group w (its best k and the group's score), then each kept candidate "
                                + "ranked against the other kept groups', warp 0 on the rest of the tree."
                                : " in warp 0."),
                "Each lane loads " + g.loadBytes() + " bytes, " + g.kUnroll() + " loads in flight per row.",
                "Ties go to the lower expert id; NaN ranks below every number.",
                "Workspace: scores [M][E] (each score's bits complemented; zero: not yet written), counters [M] int32; "
                        + "both zero before the first launch and left zero."),
                block ? "mf::await_scores<kSlice>(scores + static_cast<size_t>(token) * kExperts + slice)"
                        : "mf::await_scores<kExperts>(scores + static_cast<size_t>(token) * kExperts)",
                block ? RouterEpilogueEmitter.Evaluation.BLOCK_GROUPS : RouterEpilogueEmitter.Evaluation.ONE_WARP);
        model.put("blockTail", block);
        return model;
    }

    private static Map<String, Object> routerClusterModel(KernelSpec spec, Schedule.RouterCluster c, String specText) {
        Problem.Router r = (Problem.Router) spec.problem();  // validated pairing
        List<Map<String, String>> constants = routerConstants(r);
        constant(constants, "int", "kClusterSize", c.clusterSize());
        constant(constants, "int", "kWarpsPerCta", c.warpsPerCta());
        constant(constants, "int", "kLoadBytes", c.loadBytes());
        constant(constants, "int", "kUnroll", c.kUnroll());
        int split = LaunchGeometry.routerWarpsPerScore(spec);
        constant(constants, "int", "kWarpsPerScore", split);
        Map<String, Object> model = routerModel(spec, specText, constants, launchBounds(c.warpsPerCta(), DECODE_ROUTER_MIN_BLOCKS), List.of(
                "router: one cluster of " + c.clusterSize() + " blocks per token, " + scoreWarps(split) + ", the scores "
                        + "written into block 0's shared memory; block 0's warp 0 evaluates the epilogue after cluster.sync().",
                "Each lane loads " + c.loadBytes() + " bytes, " + c.kUnroll() + " loads in flight per row.",
                "Ties go to the lower expert id; NaN ranks below every number."),
                "mf::load_row_shared<kExperts>(scores)", RouterEpilogueEmitter.Evaluation.ONE_WARP);
        model.put("clusterSize", c.clusterSize());
        return model;
    }

    private static Map<String, Object> routerTiledModel(KernelSpec spec, Schedule.RouterTiled t, String specText) {
        Problem.Router r = (Problem.Router) spec.problem();  // validated pairing
        RouterTileLayout layout = RouterTileLayout.of(r, t);
        List<Map<String, String>> constants = routerConstants(r);
        constant(constants, "int", "kTokensPerCta", t.tokensPerCta());
        constant(constants, "int", "kTokensPerWarp", t.tokensPerWarp());
        constant(constants, "int", "kWarpsPerCta", t.warpsPerCta());
        constant(constants, "int", "kKTile", t.kTile());
        constant(constants, "int", "kStages", t.stages());
        constant(constants, "int", "kKGroups", t.kGroups());
        constant(constants, "int", "kClusterSplit", t.clusterSplit());
        constant(constants, "int", "kSharedBytes", Math.toIntExact(layout.sharedBytes()));
        constant(constants, "int", "kRowsPerWarp", layout.ownRows() / t.warpsPerCta());
        List<String> notes = new ArrayList<>();
        notes.add("router: one " + (t.clusterSplit() > 1 ? "cluster of " + t.clusterSplit() + " blocks" : "block")
                + " per tile of " + t.tokensPerCta() + " tokens x all " + r.experts() + " experts (padded to "
                + layout.paddedExperts() + "); each warp computes " + t.tokensPerWarp() + " tokens x "
                + layout.columnsPerWarp() + " experts with mma.sync m16n8k16 (BF16 in, FP32 accumulate)"
                + (t.kGroups() > 1 ? " in one of " + t.kGroups() + " k groups (a slice's 16-wide steps dealt round-robin, "
                        + "the groups' partial sums added in group order)" : "")
                + ".");
        notes.add("x and W_r stream through a " + t.stages() + "-stage cp.async pipeline of " + t.kTile()
                + "-element slices, each tile starting at slice (tile mod share) of its share (the blocks do not all "
                + "read the same W_r lines at once); the scores stay in shared memory.");
        if (t.clusterSplit() > 1) {
            int share = (layout.slices() + t.clusterSplit() - 1) / t.clusterSplit();
            notes.add("Block q of a cluster sums slices [" + share + " q, " + share + " (q + 1)) of the " + layout.slices()
                    + ", sends the others their rows' partial sums through distributed shared memory, and after one "
                    + "cluster barrier adds its own " + layout.ownRows() + " rows' partials in block order.");
        }
        notes.add("Warp w evaluates the epilogue for rows w, w + " + t.warpsPerCta() + ", ... of the block's " + layout.ownRows()
                + ", its " + layout.ownRows() / t.warpsPerCta() + " rows interleaved (independent chains of shuffles and reductions).");
        notes.add("Ties go to the lower expert id; NaN ranks below every number.");
        notes.add("Dynamic shared memory: " + layout.sharedBytes() + " bytes.");
        Map<String, Object> model = routerModel(spec, specText, constants, launchBounds(t.warpsPerCta(), 0), notes,
                "mf::load_row_shared<kExperts>(scores + tile_row * Tile::kScoreStride)", RouterEpilogueEmitter.Evaluation.WARP_PER_ROW);
        model.put("clusterSplit", t.clusterSplit());
        model.put("expertCounts", r.expertCounts());
        return model;
    }

    private static List<Map<String, String>> routerConstants(Problem.Router r) {
        List<Map<String, String>> constants = new ArrayList<>();
        constant(constants, "int", "kHidden", r.hidden());
        constant(constants, "int", "kExperts", r.experts());
        return constants;
    }

    /**
     * The decode routers (one wave, latency-bound) declare one block per SM enough: without it ptxas
     * held them to 32 registers and issued their loads two at a time (bench/NOTES.md, "The grouped
     * tail": DeepSeek-V3 6.98 -> 5.48 us). The tiled router keeps its swept bounds.
     */
    private static final int DECODE_ROUTER_MIN_BLOCKS = 1;

    /** {@code __launch_bounds__}'s arguments: the block's threads, and the minimum blocks per SM unless 0. */
    private static String launchBounds(int warpsPerCta, int minBlocksPerSm) {
        return minBlocksPerSm == 0 ? Integer.toString(32 * warpsPerCta) : 32 * warpsPerCta + ", " + minBlocksPerSm;
    }

    /** How a decode router's warps share the scores (LaunchGeometry.routerWarpsPerScore). */
    private static String scoreWarps(int split) {
        return split == 1 ? "one warp per expert score"
                : "each expert score split over " + split + " warps (parts added in warp order)";
    }

    /** The model all router templates share; {@code scores} loads the token's row of scores. */
    private static Map<String, Object> routerModel(KernelSpec spec, String specText, List<Map<String, String>> constants,
                                                   String launchBounds, List<String> notes, String scores,
                                                   RouterEpilogueEmitter.Evaluation evaluation) {
        Problem.Router r = (Problem.Router) spec.problem();
        Map<String, Object> model = new LinkedHashMap<>();
        model.put("specLines", specText.lines().toList());
        model.put("notes", notes);
        model.put("header", DeviceHeader.FILE_NAME);
        model.put("constants", constants);
        model.put("launchBounds", launchBounds);
        model.put("name", spec.name());
        model.put("params", KernelSignature.of(spec).params().stream().map(KernelParam::cudaDeclaration).toList());
        RouterEpilogueEmitter.Code code = RouterEpilogueEmitter.emit((Store) spec.epilogue(), r.expertCounts(), scores, evaluation);
        model.put("valueLines", code.values());
        model.put("storeLines", code.stores());
        return model;
    }

    /**
     * What a schedule of an expert kernel contributes to the generated source: its constants and
     * template arguments, the device bodies it calls, the unit a warp owns, its notes, its shared
     * memory and its launch bounds. The rest (shape, format, epilogue, signature) is the problem's.
     */
    private record ExpertLowering(boolean tensorCores, List<Map<String, String>> constants, String templateArgs, String gateUpBody,
                                  String downBody, String gateUpUnit, String downUnit, List<String> notes,
                                  long sharedBytes, int warpsPerCta, int minBlocksPerSm) {}

    private static Map<String, Object> outputCentricModel(KernelSpec spec, OutputCentric oc, String specText) {
        Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();  // validated pairing
        OutputCentricLayout layout = OutputCentricLayout.of(problem, oc);
        boolean tiled = oc.tokensPerCta() > 1;
        List<Map<String, String>> constants = new ArrayList<>();
        constant(constants, "int", "kWarpsPerCta", oc.warpsPerCta());
        constant(constants, "int", "kLoadBytes", oc.loadBytes());
        constant(constants, "int", "kUnroll", oc.kUnroll());
        if (tiled) {
            constant(constants, "int", "kTokensPerCta", oc.tokensPerCta());
        }
        constant(constants, "int", "kWarpsPerOutput", oc.warpsPerOutput());
        List<String> notes = new ArrayList<>();
        notes.add("Each lane loads " + oc.loadBytes() + " bytes, " + oc.kUnroll() + " loads in flight per row; a row is "
                + layout.chunksPerRow() + " loads in " + layout.blocksPerRow() + " pass(es).");
        if (oc.warpsPerOutput() > 1) {
            notes.add(oc.warpsPerOutput() + " warps share each output; their partial sums are added in shared memory in warp order.");
        }
        return expertModel(spec, specText, new ExpertLowering(false, constants,
                "kWarpsPerCta, kLoadBytes, kUnroll" + (tiled ? ", kTokensPerCta" : "") + ", kWarpsPerOutput",
                tiled ? "gate_up_token_tile" : "gate_up_single_token", tiled ? "down_token_tile" : "down_single_token",
                "one warp per (" + (tiled ? "tile of " + oc.tokensPerCta() + " tokens, distinct expert" : "token, routed slot")
                        + ", neuron)",
                "one warp per (" + (tiled ? "tile of " + oc.tokensPerCta() + " tokens" : "token") + ", hidden output)",
                notes, layout.sharedBytes(), oc.warpsPerCta(), oc.minBlocksPerSm()));
    }

    private static Map<String, Object> outputTensorCoreModel(KernelSpec spec, Schedule.OutputTensorCore tc, String specText) {
        Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();  // validated pairing
        TensorCoreTileLayout layout = TensorCoreTileLayout.of(problem, tc);
        List<Map<String, String>> constants = new ArrayList<>();
        constant(constants, "int", "kWarpsPerCta", tc.warpsPerCta());
        constant(constants, "int", "kUnroll", tc.kUnroll());
        constant(constants, "int", "kWarpsPerTile", tc.warpsPerTile());
        List<String> notes = new ArrayList<>();
        notes.add("Codes decode to bf16 in registers and meet the activations, staged in shared memory, in mma.sync "
                + "m16n8k16 with FP32 accumulation.");
        notes.add("A row is " + layout.chunksPerRow() + " chunks of 32 codes in " + layout.stepsPerRow() + " steps of 4 (one chunk "
                + "per lane of a row group); " + tc.kUnroll() + " steps in flight per lane.");
        if (tc.warpsPerTile() > 1) {
            notes.add(tc.warpsPerTile() + " warps share each tile; their partial sums are added in shared memory in warp order.");
        }
        return expertModel(spec, specText, new ExpertLowering(true, constants, "kWarpsPerCta, kUnroll, kWarpsPerTile",
                "gate_up_tensor_core", "down_tensor_core",
                "one warp per (token, routed slot, tile of 8 neurons: their gate and up rows)",
                "one warp per (token, tile of 16 hidden outputs)",
                notes, layout.sharedBytes(), tc.warpsPerCta(), tc.minBlocksPerSm()));
    }

    private static Map<String, Object> splitDownModel(KernelSpec spec, Schedule.SplitDown sd, String specText) {
        Problem.ExpertMlp problem = (Problem.ExpertMlp) spec.problem();  // validated pairing
        SplitDownLayout layout = SplitDownLayout.of(problem, sd);
        var shape = problem.shape();
        List<Map<String, String>> constants = shapeConstants(shape);
        constants.add(Map.of("type", "mf::GateUpLayout", "name", "kLayout", "value", gateUpLayout(problem.layout())));
        constant(constants, "int", "kWarpsPerCta", sd.warpsPerCta());
        constant(constants, "int", "kUnroll", sd.kUnroll());
        constant(constants, "int", "kWarpsPerTile", sd.warpsPerTile());
        constants.add(Map.of("type", "bool", "name", "kOrderLoads", "value", Boolean.toString(sd.orderLoads())));
        List<String> notes = new ArrayList<>();
        notes.add("expert MLP: one block per (token, routed slot, 16 neurons): two gate_up tiles of 8 neurons (gate and up rows "
                + (problem.layout() == GateUpLayout.STACKED ? "stacked" : "interleaved") + ", " + sd.warpsPerTile()
                + " warps per tile, " + sd.kUnroll() + " steps in flight per lane) give the 16 h, rounded to "
                + ((Store) spec.epilogue()).dtype().text() + "; the block then multiplies them into down's 16 matching columns "
                + "for all " + shape.hidden() + " rows (" + layout.quads() + " quads of 64, at most " + layout.quadsPerWarp()
                + " per warp, mma.sync m16n8k16) and adds the products times the routing weight into y with 16-byte atomic adds.");
        notes.add(formatNote(problem.weights(), true));
        notes.add("Down's codes and K-block scales come repacked in 16-column tiles (SplitDownWeights); its row or tensor "
                + "scales as loaded.");
        if (sd.orderLoads()) {
            notes.add("Each gate_up group's code words depend on its scale loads, so ptxas issues all of them before the "
                    + "first decode.");
        }
        notes.add("y (FP32) is added to and must be zero before the launch; y_zero's first M rows are set to zero for a later "
                + "launch. The order of the adds, and so y's last bits, vary from launch to launch.");
        notes.add("Dynamic shared memory: " + layout.sharedBytes() + " bytes.");
        notes.add("Each (token, slot) adds on its own: ids outside [0, E) contribute nothing.");
        EpilogueNode root = spec.epilogue();
        Map<EpilogueNode, String> bound = new LinkedHashMap<>();
        bound.put(Acc.GATE, "gate");
        bound.put(Acc.UP, "up");
        return kernelModel(spec, specText, notes, constants, problem.weights(), root, "float gate, float up", bound,
                launchBounds(sd.warpsPerCta(), sd.minBlocksPerSm()), "mlp_split_down",
                "Format, kHidden, kIntermediate, kExperts, kTopk, kLayout, kWarpsPerCta, kUnroll, kWarpsPerTile, kOrderLoads",
                "x, " + weightArgs("w_gate_up", problem.weights(), false) + ", " + weightArgs("w_down", problem.weights(), false)
                        + ", topk_ids, topk_weights, y, y_zero, num_tokens");
    }

    /** kHidden, kIntermediate, kExperts, kTopk of an expert kernel. */
    private static List<Map<String, String>> shapeConstants(ExpertShape shape) {
        List<Map<String, String>> constants = new ArrayList<>();
        constant(constants, "int", "kHidden", shape.hidden());
        constant(constants, "int", "kIntermediate", shape.intermediate());
        constant(constants, "int", "kExperts", shape.experts());
        constant(constants, "int", "kTopk", shape.topk());
        return constants;
    }

    private static String gateUpLayout(GateUpLayout layout) {
        return switch (layout) {
            case STACKED -> "mf::GateUpLayout::kStacked";
            case INTERLEAVED -> "mf::GateUpLayout::kInterleaved";
        };
    }

    private static Map<String, Object> expertModel(KernelSpec spec, String specText, ExpertLowering lowering) {
        Problem.ExpertProblem problem = (Problem.ExpertProblem) spec.problem();  // validated pairing
        List<Map<String, String>> constants = shapeConstants(problem.shape());
        if (problem instanceof Problem.ExpertGateUp g) {
            constants.add(Map.of("type", "mf::GateUpLayout", "name", "kLayout", "value", gateUpLayout(g.layout())));
        }
        constants.addAll(lowering.constants());
        if (problem.bias()) {
            constants.add(Map.of("type", "bool", "name", "kBias", "value", "true"));
        }

        String shapeArgs = "Format, kHidden, kIntermediate, kExperts, kTopk";
        String scheduleArgs = lowering.templateArgs() + (problem.bias() ? ", kBias" : "");
        EpilogueNode root = spec.epilogue();
        String body;
        String templateArgs;
        String callArgs;
        String epilogueParams;
        Map<EpilogueNode, String> bound = new LinkedHashMap<>();
        List<String> notes = new ArrayList<>();
        switch (problem) {
            case Problem.ExpertGateUp g -> {
                body = lowering.gateUpBody();
                templateArgs = shapeArgs + ", kLayout, " + scheduleArgs;
                callArgs = "x, " + weightArgs("w_gate_up", problem) + ", topk_ids, inter, num_tokens";
                epilogueParams = "float gate, float up";
                bound.put(Acc.GATE, "gate");
                bound.put(Acc.UP, "up");
                notes.add("gate_up: " + lowering.gateUpUnit() + "; gate and up rows "
                        + (g.layout() == GateUpLayout.STACKED ? "stacked ([gate; up])" : "interleaved (2i, 2i+1)") + ".");
            }
            case Problem.ExpertDown _ -> {
                body = lowering.downBody();
                templateArgs = shapeArgs + ", " + scheduleArgs;
                callArgs = "inter, " + weightArgs("w_down", problem) + ", topk_ids, topk_weights, y, num_tokens";
                epilogueParams = "float combined";
                if (root instanceof Store(Combine c, var _)) {
                    bound.put(c, "combined");
                }
                notes.add("down: " + lowering.downUnit() + "; routing weights folded into one FP32 accumulator.");
            }
        }
        notes.add(formatNote(problem.weights(), lowering.tensorCores()));
        if (problem.bias()) {
            notes.add("Bias: an FP32 value per expert and row, added to the row's sum"
                    + (problem instanceof Problem.ExpertDown ? " (weighted by the slot's routing weight in the combine)." : "."));
        }
        notes.addAll(lowering.notes());
        if (lowering.sharedBytes() > 0) {
            notes.add("Dynamic shared memory: " + lowering.sharedBytes() + " bytes.");
        }
        notes.add("Assumes: a token's expert ids are distinct; ids outside [0, E) contribute nothing.");

        return kernelModel(spec, specText, notes, constants, problem.weights(), root, epilogueParams, bound,
                launchBounds(lowering.warpsPerCta(), lowering.minBlocksPerSm()), body, templateArgs, callArgs);
    }

    /** The model of output_centric.cu.ftl: one device body called with the spec's epilogue. */
    private static Map<String, Object> kernelModel(KernelSpec spec, String specText, List<String> notes,
                                                   List<Map<String, String>> constants, WeightFormat format, EpilogueNode root,
                                                   String epilogueParams, Map<EpilogueNode, String> bound, String launchBounds,
                                                   String body, String templateArgs, String callArgs) {
        Map<String, Object> model = new LinkedHashMap<>();
        model.put("specLines", specText.lines().toList());
        model.put("notes", notes);
        model.put("header", DeviceHeader.FILE_NAME);
        model.put("constants", constants);
        model.put("format", deviceFormat(format));
        model.put("epilogueText", EpilogueTypes.describe(root));
        model.put("epilogueParams", epilogueParams);
        model.put("epilogueLines", EpilogueEmitter.emit(root, bound));
        model.put("launchBounds", launchBounds);
        model.put("name", spec.name());
        model.put("params", KernelSignature.of(spec).params().stream().map(KernelParam::cudaDeclaration).toList());
        model.put("body", body);
        model.put("templateArgs", templateArgs);
        model.put("callArgs", callArgs);
        return model;
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

    /** One line on how the kernel reads the weights: codes, scales and where each scale is applied. */
    /** How a kernel decodes format's codes and applies its scales; tensorCores: the output_tensor_core bodies. */
    static String formatNote(WeightFormat format, boolean tensorCores) {
        String element = switch (format.element()) {
            case BF16 -> "plain bf16 rows, no scales";
            case E4M3 -> "E4M3 codes (hardware fp8x2 conversion)";
            case E2M1 -> "E2M1 codes, two per byte with element 2j low (decoded arithmetically"
                    + (tensorCores ? " to bf16x2, a shift and two masks per pair)" : ", 8 per word)");
            case INT8 -> "INT8 codes (seed 003's fp16 magic-number conversion)";
            case INT4 -> "INT4 codes, two per byte with element 2j low (seed 003's "
                    + (tensorCores ? "magic-number conversion, in bf16)" : "fp16 magic-number conversion)");
        };
        String block = switch (format.blockScale()) {
            case NONE -> "";
            case F32_BLOCK_128X128 -> "; an FP32 scale per 128 x 128 block";
            case F32_GROUP_128 -> "; an FP32 scale per 128 along K";
            case E4M3_PER_16 -> "; an E4M3 scale per 16 along K";
            case E8M0_PER_32 -> "; an E8M0 scale per 32 along K";
        };
        String use = switch (format.blockScale()) {
            case NONE -> "";
            case E4M3_PER_16, E8M0_PER_32 -> tensorCores
                    ? " (folded into the block's bf16 codes: exact, the products have at most 6 significant bits)"
                    : " (applied once to each load's partial sum of its block)";
            case F32_BLOCK_128X128, F32_GROUP_128 -> tensorCores
                    ? " (applied once to each step's FP32 sum: a step is one block)"
                    : " (applied once to each load's partial sum of its block)";
        };
        String row = switch (format.rowScale()) {
            case NONE -> "";
            case PER_ROW -> "; an FP32 scale per row, applied to the row's sum";
            case PER_TENSOR -> "; an FP32 scale per tensor (gate and up each their own), applied to the row's sum";
        };
        return "Weights " + format.text() + ": " + element + block + use + row + ".";
    }

    /** {@code mf::WeightArgs{codes, block scales, row scales[, bias]}}, null where the format has none. */
    private static String weightArgs(String name, Problem.ExpertProblem problem) {
        return weightArgs(name, problem.weights(), problem.bias());
    }

    private static String weightArgs(String name, WeightFormat format, boolean hasBias) {
        String blockScales = format.blockScale() == WeightFormat.BlockScale.NONE ? "nullptr" : KernelSignature.blockScalesName(name);
        String rowScales = format.rowScale() == WeightFormat.RowScale.NONE ? "nullptr" : KernelSignature.rowScalesName(name, format);
        String bias = hasBias ? ", " + KernelSignature.biasName(name) : "";
        return "mf::WeightArgs{" + name + ", " + blockScales + ", " + rowScales + bias + "}";
    }

    private static void constant(List<Map<String, String>> constants, String type, String name, int value) {
        constants.add(Map.of("type", type, "name", name, "value", Integer.toString(value)));
    }

    private static String render(String template, Map<String, Object> model) {
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
