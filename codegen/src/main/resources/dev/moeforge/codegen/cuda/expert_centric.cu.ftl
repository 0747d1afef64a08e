<#-- Expert kernel of schedule expert_centric: the expert skeleton, then the two entry points that
     build the routing plan (RoutingPlan) this kernel takes, one warp per block each, for a W8A8
     gate_up the entry point that quantises x into its workspace, and for a down with combine_kernel
     the entry point that adds each token's slot rows into y. -->
<#include "expert.cu.ftl">

// Routing plan, step 1: each block counts one segment of pairs per bucket (E experts, then ids outside [0, E)).
extern "C" __global__ void __launch_bounds__(32) ${alignCount}(
    const int* __restrict__ topk_ids,
    int* __restrict__ segment_counts,
    int pairs,
    int segment
) {
  __shared__ int counts[Config::kExperts + 1];
  mf::begin_after_previous_kernel();
  mf::routing_align_count(topk_ids, segment_counts, pairs, Config::kExperts, segment, counts);
}

// Routing plan, step 2: each block places its segment's pairs; block 0 writes expert_offsets.
extern "C" __global__ void __launch_bounds__(32) ${alignScatter}(
    const int* __restrict__ topk_ids,
    const int* __restrict__ segment_counts,
    int* __restrict__ sorted_slots,
    int* __restrict__ expert_offsets,
    int pairs,
    int segment,
    int segments
) {
  __shared__ int places[2 * (Config::kExperts + 1)];
  mf::begin_after_previous_kernel();
  mf::routing_align_scatter(topk_ids, segment_counts, sorted_slots, expert_offsets, pairs, Config::kExperts, segment,
                            segments, places);
}
<#if quantiseX != "">

// x quantised to FP8 per token in groups of 128 (codes, then FP32 scales), a warp per group, for the
// kernel above to multiply.
extern "C" __global__ void __launch_bounds__(${quantiseThreads}) ${quantiseX}(
    const __nv_bfloat16* __restrict__ x,
    uint8_t* __restrict__ x_fp8,
    int num_tokens
) {
  mf::begin_after_previous_kernel();
  mf::quantise_rows_fp8<Config::kHidden>(x, x_fp8, num_tokens);
}
</#if>
<#if combine != "">

// Each token's k partial rows (the kernel above leaves them in its workspace) added in slot order into
// y, a thread per ${combineOutputs} outputs of a token: the sums and their order of the combine inside the tiles.
extern "C" __global__ void __launch_bounds__(${combineThreads}) ${combine}(
    const __nv_bfloat16* __restrict__ partials,
    __nv_bfloat16* __restrict__ y,
    int num_tokens
) {
  mf::begin_after_previous_kernel();
  mf::add_slot_rows<Config, ${combineOutputs}>(partials, y, num_tokens, Epilogue{});
}
</#if>
