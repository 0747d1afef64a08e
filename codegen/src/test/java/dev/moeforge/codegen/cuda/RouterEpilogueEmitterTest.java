package dev.moeforge.codegen.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.build.RoutingRules;
import dev.moeforge.dsl.ir.DType;
import dev.moeforge.dsl.ir.epilogue.Acc;
import dev.moeforge.dsl.ir.epilogue.Renormalize;
import dev.moeforge.dsl.ir.epilogue.Softmax;
import dev.moeforge.dsl.ir.epilogue.Store;
import dev.moeforge.dsl.ir.epilogue.TopK;
import dev.moeforge.dsl.schedule.RouterGemv;
import dev.moeforge.dsl.schedule.TreeEvaluation.Mode;
import dev.moeforge.dsl.schedule.TreeEvaluation;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** The router trees as CUDA: which device forms the emitter picks, and for which trees the block shares the tail. */
class RouterEpilogueEmitterTest {
    static final String SCORES = "row";

    static List<String> values(Store tree, Mode evaluation) {
        return RouterEpilogueEmitter.emit(tree, false, new TreeEvaluation(evaluation, SCORES)).values();
    }

    @Test
    void renormalizedSoftmaxTopKIsTheSoftmaxOfTheBestK() {
        List<String> lines = values(RoutingRules.softmaxTopKRenormalized(10, DType.FP32), Mode.ONE_WARP);
        assertEquals(List.of(
                "__shared__ mf::TopKScratch topk_scratch;  // the top-k's candidates",
                "const mf::Row<Config::kExperts> v0 = row;",
                "const mf::TopK<10> v1 = mf::softmax_topk<10>(v0, &topk_scratch);"), lines);
        // the tiled router's warps evaluate rows of their own: no scratch
        assertEquals("const mf::TopK<8> v1 = mf::softmax_topk<8>(v0);",
                values(RoutingRules.softmaxTopKRenormalized(8, DType.FP32), Mode.WARP_PER_ROW).get(1));
    }

    @Test
    void softmaxWithoutRenormalisationStaysOverTheRow() {
        List<String> lines = values(RoutingRules.softmaxTopK(8, DType.FP32), Mode.ONE_WARP);
        assertEquals("const mf::Row<Config::kExperts> v1 = mf::softmax(v0);", lines.get(2));
    }

    @Test
    void groupsOrASelectionByOtherScoresKeepTheRenormalisation() {
        Store grouped = new Store(new Renormalize(new TopK(new Softmax(Acc.MAIN), 8, 8, 4, Optional.empty())), DType.FP32);
        assertTrue(values(grouped, Mode.ONE_WARP).getLast().contains("mf::renormalize("));
        Store by = new Store(new Renormalize(new TopK(new Softmax(Acc.MAIN), 8, 1, 1, Optional.of(Acc.MAIN))), DType.FP32);
        assertTrue(values(by, Mode.ONE_WARP).getLast().contains("mf::renormalize("));
        // softmax over a selection ranked by other scores is not best first
        Store softmaxBy = new Store(new Softmax(new TopK(Acc.MAIN, 4, 1, 1, Optional.of(new Softmax(Acc.MAIN)))), DType.FP32);
        assertTrue(values(softmaxBy, Mode.ONE_WARP).getLast().startsWith("const mf::TopK<4> v3 = mf::softmax(v2)"));
    }

    @Test
    void softmaxOfAnOwnSelectionIsBestFirst() {
        List<String> lines = values(RoutingRules.biasedTopKSoftmax(4, "router_bias", DType.FP32), Mode.ONE_WARP);
        assertEquals("const mf::TopK<4> v4 = mf::softmax_best_first(v3);", lines.getLast());
    }

    @Test
    void theBlockSharesGroupedTrees() {
        Store deepSeek = RoutingRules.groupLimitedSigmoid(8, 8, 4, 2.5, "bias", DType.FP32);
        assertTrue(RouterGemv.blockGroups(deepSeek, 256, 8));
        assertFalse(RouterGemv.blockGroups(deepSeek, 256, 4), "one group per warp");
        assertFalse(RouterGemv.blockGroups(deepSeek, 128, 8), "a group of 16 is not whole lanes");
        assertFalse(RouterGemv.blockGroups(RoutingRules.softmaxTopKRenormalized(10, DType.FP32), 512, 8),
                "no groups");
        Store rowSoftmax = new Store(new TopK(new Softmax(Acc.MAIN), 8, 8, 4, Optional.empty()), DType.FP32);
        assertFalse(RouterGemv.blockGroups(rowSoftmax, 256, 8), "a softmax over the row needs all of it");

        List<String> lines = values(deepSeek, Mode.BLOCK_GROUPS);
        assertEquals(List.of(
                "__shared__ mf::BlockTopKScratch<8, Config::kWarpsPerCta> topk_scratch;  // the warps' candidates",
                "const int slice = (threadIdx.x >> 5) * Config::kSlice;  // this warp's group of experts",
                "const mf::Row<Config::kSlice> v0 = mf::load_row<Config::kSlice>(bias + slice);",  // row parameters before the scores
                "const mf::Row<Config::kSlice> v1 = row;",
                "const mf::Row<Config::kSlice> v2 = mf::sigmoid(v1);",
                "const mf::Row<Config::kSlice> v3 = mf::add(v2, v0);",
                "const mf::TopK<8> v4 = mf::block_topk<8, 8, 4, Config::kSlice, Config::kWarpsPerCta>(v3, v2, topk_scratch);",
                "if (threadIdx.x >= 32) return;  // warp 0 holds the selection and finishes the tree",
                "const mf::TopK<8> v5 = mf::renormalize(v4);",
                "const mf::TopK<8> v6 = mf::scale(v5, 2.5f);"), lines);
    }
}
