// moeforge_dispatch.cu: routing-aware dispatch on the device, folded into the routing plan's second
// launch. In every block warp 0 places its segment's pairs as the align's scatter does; in block 0
// the other warps meanwhile read the whole expert histogram from the count launch's segment counts,
// price every candidate of the layer's two halves with its fitted wave cost model and set the
// layer's graph switch to the cheapest (gate_up, down) pair. So the choice never leaves the GPU,
// costs no launch of its own, and runs beside the scatter rather than after it. DispatchTable (Java)
// writes the rows and the in-tile table and computes the same choice on the host.
#include "moeforge_expert_centric.cuh"

namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxRows = 64;
constexpr int kMaxFeatures = 8;
constexpr int kChoiceWarps = 8;
constexpr int kChoiceThreads = 32 * kChoiceWarps;
constexpr int kExpertsPerThread = kMaxExperts / kChoiceThreads;

// One candidate, as DispatchTable.Row lays it out (10 doubles).
struct Row {
  double kind;     // 0: tiles of `param` pairs per expert; 1: one block per routed pair; 2: tiles of `param` tokens
  double param;    // block_m (kind 0) or tokens per tile (kind 2)
  double groups;   // blocks per unit: n tiles (kind 0) or output groups (kinds 1, 2)
  double feature;  // which histogram feature G reads (kinds 0, 2; the table numbers them), or -1
  double a, b, c, d, e;  // T = a + b ceil(G/S) + c G + d sqrt(G) + e P
  double origin;   // the row's number in its half of the table this one was narrowed from
};

// The choosing warps of block 0 meet here; warp 0 (the scatter) does not.
__device__ __forceinline__ void choice_barrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kChoiceThreads) : "memory");
}

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(mf::kFullMask, v, d);
  return v;
}

// kChoiceThreads threads (t = 0 ..): expert e's pairs are the sum of its bucket over the segments.
// The histogram's features the rows read: for each distinct (kind, param) of kinds 0 and 2, the sum
// over experts of ceil(n_e / param), or of the chance that expert e is in a tile of `param` tokens,
// which the host tabulated for this token count (in_tile[f][min(n_e, tokens)]).
__device__ __forceinline__ void choose_pair(int t, const int* __restrict__ segment_counts, int segments, int experts,
                                            const Row* __restrict__ rows, int gate_up_rows, int down_rows,
                                            const double* __restrict__ in_tile, int tokens, int sms,
                                            cudaGraphConditionalHandle pair_switch, int* __restrict__ chosen) {
  __shared__ int feature_kind[kMaxFeatures], feature_param[kMaxFeatures];
  __shared__ double warp_sums[kChoiceWarps][kMaxFeatures + 1];
  __shared__ double cost[kMaxRows];
  const int lane = t & 31, warp = t >> 5, n = gate_up_rows + down_rows, buckets = experts + 1;
  if (t < kMaxFeatures) {
    feature_kind[t] = -1;
    feature_param[t] = 1;
  }
  // each thread's experts' pairs, loads first so they are in flight together
  int load[kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) load[i] = 0;
  for (int s = 0; s < segments; ++s) {
#pragma unroll
    for (int i = 0; i < kExpertsPerThread; ++i) {
      const int e = t + i * kChoiceThreads;
      if (e < experts) load[i] += segment_counts[static_cast<size_t>(s) * buckets + e];
    }
  }
  choice_barrier();
  for (int r = t; r < n; r += kChoiceThreads) {  // rows of one feature write the same values
    const int f = static_cast<int>(rows[r].feature);
    if (f >= 0) {
      feature_kind[f] = static_cast<int>(rows[r].kind);
      feature_param[f] = static_cast<int>(rows[r].param);
    }
  }
  choice_barrier();
  double sums[kMaxFeatures + 1];  // the features, then the pairs
#pragma unroll
  for (int j = 0; j <= kMaxFeatures; ++j) sums[j] = 0;
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = t + i * kChoiceThreads, m = load[i];
    double in[kMaxFeatures];  // an expert's table entries, asked for together
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) {
      in[j] = e < experts && feature_kind[j] == 2 ? in_tile[j * (tokens + 1) + min(m, tokens)] : 0.0;
    }
    sums[kMaxFeatures] += m;
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) {
      const int param = feature_param[j];
      sums[j] += feature_kind[j] == 0 ? static_cast<double>((m + param - 1) / param) : in[j];
    }
  }
#pragma unroll
  for (int j = 0; j <= kMaxFeatures; ++j) {
    const double v = warp_sum_double(sums[j]);
    if (lane == 0) warp_sums[warp][j] = v;
  }
  choice_barrier();
#pragma unroll
  for (int j = 0; j <= kMaxFeatures; ++j) {
    sums[j] = 0;
#pragma unroll
    for (int w = 0; w < kChoiceWarps; ++w) sums[j] += warp_sums[w][j];
  }
  const double p = sums[kMaxFeatures];
  for (int r = t; r < n; r += kChoiceThreads) {
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
  choice_barrier();
  if (t == 0) {
    int up = 0, down = gate_up_rows;
    for (int r = 1; r < gate_up_rows; ++r) up = cost[r] < cost[up] ? r : up;
    for (int r = gate_up_rows + 1; r < n; ++r) down = cost[r] < cost[down] ? r : down;
    chosen[0] = static_cast<int>(rows[up].origin);
    chosen[1] = static_cast<int>(rows[down].origin);
    // a zero handle: no switch to set (the decision timed without its graph node)
    if (pair_switch != 0) cudaGraphSetConditional(pair_switch, up * down_rows + (down - gate_up_rows));
  }
}

}  // namespace

// The align's second launch with the decision in it: grid = the plan's segments, 32 * (1 + kChoiceWarps)
// threads, after the align's count launch. Warp 0 scatters; block 0's other warps choose, the other
// blocks' leave. pair_switch: the switch to set, or 0 for none. chosen[0..1]: the pair's rows
// (gate_up's, down's) as origins, for checks.
extern "C" __global__ void __launch_bounds__(32 * (1 + kChoiceWarps), 1) moe_align_scatter_dispatch(
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
  if (threadIdx.x < 32) {
    mf::routing_align_scatter(topk_ids, segment_counts, sorted_slots, expert_offsets, pairs, experts, segment, segments, places);
  } else if (blockIdx.x == 0) {
    choose_pair(threadIdx.x - 32, segment_counts, segments, experts, rows, gate_up_rows, down_rows, in_tile, tokens, sms,
                pair_switch, chosen);
  }
}
