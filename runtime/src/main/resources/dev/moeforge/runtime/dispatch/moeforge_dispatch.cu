// moeforge_dispatch.cu: routing-aware dispatch on the device. From the live routing plan's expert
// offsets, one block prices every candidate configuration of the expert layer's two halves with its
// fitted wave cost model and sets each half's graph switch to the cheapest, so the choice never
// leaves the GPU. DispatchTable (Java) writes the rows and computes the same choice on the host.
#include <cuda_runtime.h>

namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxRows = 64;
constexpr unsigned kFullMask = 0xffffffffu;

// One candidate, as DispatchTable.Row lays it out (8 doubles).
struct Row {
  double kind;    // 0: tiles of `param` pairs per expert; 1: one block per routed pair; 2: tiles of `param` tokens
  double param;   // block_m (kind 0) or tokens per tile (kind 2)
  double groups;  // blocks per unit: n tiles (kind 0) or output groups (kinds 1, 2)
  double a, b, c, d, e;  // T = a + b ceil(G/S) + c G + d sqrt(G) + e P
};

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

}  // namespace

// One block of 32 warps; warp w prices rows w, w + 32. chosen[0..1]: the picks (for checks).
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
  __shared__ int load[kMaxExperts];
  __shared__ double cost[kMaxRows];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) load[e] = expert_offsets[e + 1] - expert_offsets[e];
  __syncthreads();
  const double pairs = static_cast<double>(expert_offsets[experts] - expert_offsets[0]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = gate_up_rows + down_rows;
  for (int r = warp; r < n; r += blockDim.x >> 5) {
    const Row row = rows[r];
    const int kind = static_cast<int>(row.kind), param = static_cast<int>(row.param);
    double g;
    if (kind == 1) {
      g = row.groups * pairs;
    } else {
      double part = 0;
      for (int e = lane; e < experts; e += 32) {
        const int m = load[e];
        if (kind == 0) {
          part += (m + param - 1) / param;
        } else {
          // expert e (on m of the batch's tokens) misses a tile of `per` tokens drawn without replacement
          const int per = min(param, tokens);
          double miss = 1;
          for (int i = 0; i < per && miss > 0; ++i) miss *= fmax(0.0, static_cast<double>(tokens - m - i) / (tokens - i));
          part += 1 - miss;
        }
      }
      const double sum = warp_sum(part);
      g = kind == 0 ? row.groups * sum : fmax(1.0, floor(row.groups * ((tokens + param - 1) / param) * sum + 0.5));
    }
    if (lane == 0) cost[r] = row.a + row.b * ceil(g / sms) + row.c * g + row.d * sqrt(g) + row.e * pairs;
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
