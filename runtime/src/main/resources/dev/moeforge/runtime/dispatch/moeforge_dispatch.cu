// moeforge_dispatch.cu: routing-aware dispatch on the device. From the live routing plan's expert
// offsets, one block prices every candidate configuration of the expert layer's two halves with its
// fitted wave cost model and sets each half's graph switch to the cheapest, so the choice never
// leaves the GPU. DispatchTable (Java) writes the rows and computes the same choice on the host.
#include <cuda_runtime.h>

namespace {

constexpr int kMaxRows = 64;
constexpr unsigned kFullMask = 0xffffffffu;

// One candidate, as DispatchTable.Row lays it out (10 doubles).
struct Row {
  double kind;     // 0: tiles of `param` pairs per expert; 1: one block per routed pair; 2: tiles of `param` tokens
  double param;    // block_m (kind 0) or tokens per tile (kind 2)
  double groups;   // blocks per unit: n tiles (kind 0) or output groups (kinds 1, 2)
  double feature;  // which histogram feature G reads (kinds 0, 2; the table numbers them), or -1
  double a, b, c, d, e;  // T = a + b ceil(G/S) + c G + d sqrt(G) + e P
  double unused;
};

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

}  // namespace

// The histogram's features the rows read: for each distinct (kind, param) of kinds 0 and 2, the sum
// over experts of ceil(n_e / param) or of the chance expert e is in a tile of `param` tokens. One
// expert per thread, each feature summed over the block, so the rows themselves are a few flops.
constexpr int kMaxFeatures = 8;

// One block of 1024 threads. chosen[0..1]: the picks (for checks).
extern "C" __global__ void __launch_bounds__(1024) moe_dispatch(
    const int* __restrict__ expert_offsets,
    int experts,
    const Row* __restrict__ rows,
    int gate_up_rows,
    int down_rows,
    int tokens,
    int sms,
    cudaGraphConditionalHandle gate_up_switch,
    cudaGraphConditionalHandle down_switch,
    int* __restrict__ chosen
) {
  __shared__ int feature_kind[kMaxFeatures], feature_param[kMaxFeatures];
  __shared__ double warp_sums[32][kMaxFeatures];
  __shared__ double sums[kMaxFeatures];
  __shared__ double cost[kMaxRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = gate_up_rows + down_rows;
  for (int j = threadIdx.x; j < kMaxFeatures; j += blockDim.x) feature_kind[j] = -1;
  __syncthreads();
  for (int r = threadIdx.x; r < n; r += blockDim.x) {  // rows of one feature write the same values
    const int f = static_cast<int>(rows[r].feature);
    if (f >= 0) {
      feature_kind[f] = static_cast<int>(rows[r].kind);
      feature_param[f] = static_cast<int>(rows[r].param);
    }
  }
  __syncthreads();
  double part[kMaxFeatures];
#pragma unroll
  for (int j = 0; j < kMaxFeatures; ++j) part[j] = 0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    const int m = expert_offsets[e + 1] - expert_offsets[e];
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) {
      const int kind = feature_kind[j], param = feature_param[j];
      if (kind == 0) {
        part[j] += (m + param - 1) / param;
      } else if (kind == 2) {
        // expert e (on m of the batch's tokens) misses a tile of `per` tokens drawn without replacement;
        // in float, as OutputCentric.workBlocks computes it (IEEE division both sides: the same bits)
        const int per = min(param, tokens);
        float miss = 1.0f;
        for (int i = 0; i < per && miss > 0.0f; ++i) {
          miss *= fmaxf(0.0f, static_cast<float>(tokens - m - i) / static_cast<float>(tokens - i));
        }
        part[j] += 1.0 - static_cast<double>(miss);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxFeatures; ++j) {
    const double v = warp_sum(part[j]);
    if (lane == 0) warp_sums[warp][j] = v;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
#pragma unroll
    for (int j = 0; j < kMaxFeatures; ++j) {
      const double v = warp_sum(lane < warps ? warp_sums[lane][j] : 0.0);
      if (lane == 0) sums[j] = v;
    }
  }
  __syncthreads();
  const double pairs = static_cast<double>(expert_offsets[experts] - expert_offsets[0]);
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    const Row row = rows[r];
    const int kind = static_cast<int>(row.kind), param = static_cast<int>(row.param);
    const int f = static_cast<int>(row.feature);
    const double g = kind == 1 ? row.groups * pairs
                   : kind == 0 ? row.groups * sums[f]
                               : fmax(1.0, floor(row.groups * ((tokens + param - 1) / param) * sums[f] + 0.5));
    cost[r] = row.a + row.b * ceil(g / sms) + row.c * g + row.d * sqrt(g) + row.e * pairs;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int up = 0, down = gate_up_rows;
    for (int r = 1; r < gate_up_rows; ++r) up = cost[r] < cost[up] ? r : up;
    for (int r = gate_up_rows + 1; r < n; ++r) down = cost[r] < cost[down] ? r : down;
    chosen[0] = up;
    chosen[1] = down - gate_up_rows;
    // a zero handle: no switch to set (the decision timed without its graph nodes)
    if (gate_up_switch != 0) cudaGraphSetConditional(gate_up_switch, up);
    if (down_switch != 0) cudaGraphSetConditional(down_switch, down - gate_up_rows);
  }
}
