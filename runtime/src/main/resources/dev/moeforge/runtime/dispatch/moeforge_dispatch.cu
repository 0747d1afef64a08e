// moeforge_dispatch.cu: routing-aware dispatch on the device, folded into the routing plan's second
// launch. Every block places its segment's pairs as the align's scatter does; block 0, which holds
// the whole expert histogram once it has written expert_offsets, then prices every candidate of the
// layer's two halves with its fitted wave cost model and sets the layer's graph switch to the
// cheapest (gate_up, down) pair, so the choice never leaves the GPU and costs no launch of its own.
// DispatchTable (Java) writes the rows and the in-tile table and computes the same choice on the host.
#include "moeforge_expert_centric.cuh"

namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxRows = 64;
constexpr int kMaxFeatures = 8;

// One candidate, as DispatchTable.Row lays it out (10 doubles).
struct Row {
  double kind;     // 0: tiles of `param` pairs per expert; 1: one block per routed pair; 2: tiles of `param` tokens
  double param;    // block_m (kind 0) or tokens per tile (kind 2)
  double groups;   // blocks per unit: n tiles (kind 0) or output groups (kinds 1, 2)
  double feature;  // which histogram feature G reads (kinds 0, 2; the table numbers them), or -1
  double a, b, c, d, e;  // T = a + b ceil(G/S) + c G + d sqrt(G) + e P
  double unused;
};

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(mf::kFullMask, v, d);
  return v;
}

// Block 0's one warp, after the scatter: `load[e]` holds expert e's pairs. The histogram's features
// the rows read: for each distinct (kind, param) of kinds 0 and 2, the sum over experts of
// ceil(n_e / param), or of the chance that expert e is in a tile of `param` tokens, which the host
// tabulated for this token count (in_tile[f][min(n_e, tokens)]).
__device__ __forceinline__ void choose_pair(const int* load, int experts, const Row* __restrict__ rows, int gate_up_rows,
                                            int down_rows, const double* __restrict__ in_tile, int tokens, int sms,
                                            cudaGraphConditionalHandle pair_switch, int* __restrict__ chosen) {
  __shared__ int feature_kind[kMaxFeatures], feature_param[kMaxFeatures];
  __shared__ double cost[kMaxRows];
  const int lane = threadIdx.x, n = gate_up_rows + down_rows;
  if (lane < kMaxFeatures) feature_kind[lane] = -1;
  __syncwarp();
  for (int r = lane; r < n; r += 32) {  // rows of one feature write the same values
    const int f = static_cast<int>(rows[r].feature);
    if (f >= 0) {
      feature_kind[f] = static_cast<int>(rows[r].kind);
      feature_param[f] = static_cast<int>(rows[r].param);
    }
  }
  __syncwarp();
  double sums[kMaxFeatures];
  int pairs = 0;
#pragma unroll
  for (int j = 0; j < kMaxFeatures; ++j) sums[j] = 0;
  for (int e = lane; e < experts; e += 32) {
    const int m = load[e];
    pairs += m;
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) {
      const int kind = feature_kind[j], param = feature_param[j];
      if (kind == 0) sums[j] += (m + param - 1) / param;
      if (kind == 2) sums[j] += in_tile[j * (tokens + 1) + min(m, tokens)];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxFeatures; ++j) sums[j] = warp_sum_double(sums[j]);
  const double p = warp_sum_double(static_cast<double>(pairs));
  for (int r = lane; r < n; r += 32) {
    const Row row = rows[r];
    const int kind = static_cast<int>(row.kind), param = static_cast<int>(row.param);
    double s = 0;
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) s = j == static_cast<int>(row.feature) ? sums[j] : s;
    const double g = kind == 1 ? row.groups * p
                   : kind == 0 ? row.groups * s
                               : fmax(1.0, floor(row.groups * ((tokens + param - 1) / param) * s + 0.5));
    cost[r] = row.a + row.b * ceil(g / sms) + row.c * g + row.d * sqrt(g) + row.e * p;
  }
  __syncwarp();
  if (lane == 0) {
    int up = 0, down = gate_up_rows;
    for (int r = 1; r < gate_up_rows; ++r) up = cost[r] < cost[up] ? r : up;
    for (int r = gate_up_rows + 1; r < n; ++r) down = cost[r] < cost[down] ? r : down;
    chosen[0] = up;
    chosen[1] = down - gate_up_rows;
    // a zero handle: no switch to set (the decision timed without its graph node)
    if (pair_switch != 0) cudaGraphSetConditional(pair_switch, up * down_rows + (down - gate_up_rows));
  }
}

}  // namespace

// The align's second launch with the decision in it: grid = the plan's segments, one warp a block,
// after the align's count launch. chosen[0..1]: the pair's rows (gate_up's, down's), for checks.
extern "C" __global__ void __launch_bounds__(32) moe_align_scatter_dispatch(
    const int* __restrict__ topk_ids,
    const int* __restrict__ segment_counts,
    int* __restrict__ sorted_slots,
    int* __restrict__ expert_offsets,
    int pairs,
    int experts,
    int segment,
    int segments,
    const Row* __restrict__ rows,
    int gate_up_rows,
    int down_rows,
    const double* __restrict__ in_tile,
    int tokens,
    int sms,
    cudaGraphConditionalHandle pair_switch,
    int* __restrict__ chosen
) {
  __shared__ int places[2 * (kMaxExperts + 1)];
  mf::begin_after_previous_kernel();
  mf::routing_align_scatter(topk_ids, segment_counts, sorted_slots, expert_offsets, pairs, experts, segment, segments, places);
  // the scatter leaves each bucket's total pairs after its E + 1 places
  __syncwarp();
  if (blockIdx.x == 0) choose_pair(places + experts + 1, experts, rows, gate_up_rows, down_rows, in_tile, tokens, sms, pair_switch, chosen);
}
