// Probe (not part of the toolkit): the expert MLP of one decode token as ONE kernel whose warps
// have two jobs, on the building blocks of moeforge_device.cuh's tensor-core decode.
//
// Why: two dependent kernels pay about 2 us each before a byte moves, and down at M=1 is not
// byte-bound but a chain (wait, stage inter, load, decode, combine) after gate_up (bench/NOTES.md,
// "Where the 4-bit time goes"). The earlier one-kernel probe (fused_layer.cuh) put a grid-wide
// barrier between the halves and decoded down's weights after it; here nothing of down but its
// last multiply waits for gate_up:
//   - gate warps (GW per block): gate_up's tiles, two warps per tile, their steps loaded GU ahead
//     of the one being reduced; each finished tile bumps its routed slot's counter (release).
//   - down warps (one per routed slot): while gate_up streams, warp j loads slot j's rows of the
//     block's 16-row down tile, decodes them to scaled bf16 mma fragments and parks them in shared
//     memory (4 bytes per code: the whole tile's K rows fit for the Qwen3 geometries). Then it
//     waits for slot j's counter (acquire), reads slot j's inter from L2 and runs the mmas. The K
//     down warps add their partial sums in slot order (named barrier) and store y.
// Nothing waits on a block that may not be resident except down warps on gate tiles, so the grid
// is one block per SM and launched cooperatively (every block resident or no launch).
// The counters are a workspace [2][K] of zeros, left zero: the last block to see a slot's count
// clears it.
#pragma once

#include "expert_probe.cuh"
#include "moeforge_device.cuh"

namespace mf {

__device__ __forceinline__ unsigned long long now_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <class F, int H, int I, int K, int GW>
struct DataflowMlp {
  using HRow = TileRow<H>;
  using IRow = TileRow<I>;
  static_assert(GW % 2 == 0 && GW / 2 + 2 <= 16, "gate warps in pairs, one named barrier per pair");
  static constexpr int kGateTilesPerSlot = ceil_div(I, 8);
  static constexpr int kGateUnits = 2 * K * kGateTilesPerSlot;  // (tile, half of its steps)
  static constexpr int kGatePartSteps = ceil_div(HRow::kSteps, 2);
  static constexpr int kDownTiles = ceil_div(H, 16);
  static constexpr int kDownSteps = IRow::kSteps;  // per routed slot
  static constexpr int kWarps = GW + K;
  static constexpr bool kStepScale = TileDecode<F>::kStepScale;
  // shared memory, in order: staged x, gate partials [GW / 2][16], down partials [K][16],
  // down fragments [K][steps][8][32 lanes] uint4, step scales [K][steps][32] float2
  static constexpr int kX = 64 * HRow::kPadded;
  static constexpr int kGatePartials = GW / 2 * 16 * 4;
  static constexpr int kDownPartials = K * 16 * 4;
  static constexpr int kFragments = K * kDownSteps * 8 * 32 * 16;
  static constexpr int kScales = kStepScale ? K * kDownSteps * 32 * 8 : 0;
  static constexpr int kBytes = kX + kGatePartials + kDownPartials + kFragments + kScales;
};

// stamps (may be null): per block [8] = start, x staged, down fragments parked (warp GW),
// gate warps done (last), slot 0 ready seen, y stored.
// DOWN false: gate_up alone (the down warps leave at once; y is not written), for where the time goes.
template <class F, int H, int I, int E, int K, GateUpLayout L, int GW, int GU, bool DOWN, class GateEpilogue, class DownEpilogue>
__device__ __forceinline__ void dataflow_mlp(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, WeightArgs w_down,
                                             const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                             __nv_bfloat16* __restrict__ inter, __nv_bfloat16* __restrict__ y,
                                             unsigned* __restrict__ counters, GateEpilogue gate_epi, DownEpilogue down_epi,
                                             unsigned long long* stamps) {
  using D = DataflowMlp<F, H, I, K, GW>;
  using HRow = typename D::HRow;
  using IRow = typename D::IRow;
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* xs = reinterpret_cast<uint4*>(smem);
  float* gate_partials = reinterpret_cast<float*>(smem + D::kX);
  float* down_partials = reinterpret_cast<float*>(smem + D::kX + D::kGatePartials);
  uint4* fragments = reinterpret_cast<uint4*>(smem + D::kX + D::kGatePartials + D::kDownPartials);
  float2* step_scales = reinterpret_cast<float2*>(smem + D::kX + D::kGatePartials + D::kDownPartials + D::kFragments);
  unsigned* ready = counters;
  unsigned* seen = counters + K;
  auto stamp = [&](int k) {
    if (stamps != nullptr) stamps[blockIdx.x * 8 + k] = now_globaltimer();
  };
  if (threadIdx.x == 0) stamp(0);
  stage_tile_activations<1, H>(x, xs);
  if (threadIdx.x == 0) stamp(1);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5;

  if (warp < GW) {
    // ---- gate_up: unit u = (tile u / 2, half u % 2 of its steps); both halves of a tile in this block
    for (int u = blockIdx.x * GW + warp; u < D::kGateUnits; u += gridDim.x * GW) {
      const int tile = u >> 1, part = u & 1, slot = tile / D::kGateTilesPerSlot;
      const int neuron0 = (tile - slot * D::kGateTilesPerSlot) * 8, neuron = neuron0 + g;
      const int e = __ldg(topk_ids + slot);
      const bool routed = static_cast<unsigned>(e) < static_cast<unsigned>(E);
      const bool mine = routed && neuron < I;
      const int gate_n = gate_row_of<L>(mine ? neuron : neuron0, I), up_n = up_row_of<L>(mine ? neuron : neuron0, I);
      float gate = 0.0f, up = 0.0f;
      if (routed) {  // uniform over the warp
        const GateUpTileRows<F, H, I> rows(w_gate_up, e, gate_n, up_n);
        constexpr int kN = D::kGatePartSteps;
        const int s_begin = part * kN;
        TileStep<F> step[kN];
        auto load = [&](int i) {
          const int c = (s_begin + i) * 4 + t;
          rows.load(step[i], c, mine && s_begin + i < HRow::kSteps && c < HRow::kChunks);
        };
#pragma unroll
        for (int i = 0; i < GU && i < kN; ++i) load(i);
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          if (i + GU < kN) load(i + GU);
          if (s_begin + i < HRow::kSteps) {  // uniform; the staged x ends there
            const StepSums sums = step[i].reduce(xs + (s_begin + i) * 4 + t, HRow::kPadded);
            gate += sums.lo;
            up += sums.hi;
          }
        }
      }
      const int pair = warp >> 1;
      if (part == 1) {
        if (t == 0) {
          gate_partials[pair * 16 + g] = gate;
          gate_partials[pair * 16 + 8 + g] = up;
        }
        named_barrier_arrive(2 + pair, 64);
        continue;
      }
      named_barrier_sync(2 + pair, 64);
      gate += gate_partials[pair * 16 + g];
      up += gate_partials[pair * 16 + 8 + g];
      if (t == 0 && mine) {
        constexpr float kUnscale = TileDecode<F>::kUnscale;
        gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0)) * kUnscale;
        up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1)) * kUnscale;
        store_bf16(inter + static_cast<size_t>(slot) * I + neuron, gate_epi(gate, up));
      }
      __threadfence();
      __syncwarp();
      if (lane == 0) add_release_gpu(ready + slot, 1u);
    }
    if (stamps != nullptr && lane == 0) atomicMax(stamps + blockIdx.x * 8 + 3, now_globaltimer());
    return;
  }

  // ---- down: warp j = routed slot j of the block's 16-row tile
  const int j = warp - GW;
  if (!DOWN || j >= K || blockIdx.x >= D::kDownTiles) return;  // uniform over the warp
  const int h0 = blockIdx.x * 16, h_lo = h0 + g, h_hi = h0 + g + 8;
  const int e = __ldg(topk_ids + j);
  const bool routed = static_cast<unsigned>(e) < static_cast<unsigned>(E);
  const int e_safe = routed ? e : 0;
  const float weight = routed ? __ldg(topk_weights + j) : 0.0f;
  const float w_lo = routed && h_lo < H ? apply_factor<F>(weight, row_factor<F, H, 1>(w_down, e_safe, h_lo, 0)) : 0.0f;
  const float w_hi = routed && h_hi < H ? apply_factor<F>(weight, row_factor<F, H, 1>(w_down, e_safe, h_hi, 0)) : 0.0f;
  uint4* mine = fragments + j * D::kDownSteps * 8 * 32;
  float2* my_scales = step_scales + j * D::kDownSteps * 32;
  if (routed) {  // park the decoded fragments, two steps in flight
    constexpr int kN = D::kDownSteps;
#pragma unroll
    for (int s0 = 0; s0 < kN; s0 += 2) {
      TileStep<F> step[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = (s0 + i) * 4 + t;
        const bool in = s0 + i < kN && c < IRow::kChunks;
        step[i].load(in && h_lo < H ? row_codes<F, H, I>(w_down, e, h_lo) : nullptr,
                     in && h_hi < H ? row_codes<F, H, I>(w_down, e, h_hi) : nullptr,
                     row_block_scales<F, H, I>(w_down, e, h_lo < H ? h_lo : 0),
                     row_block_scales<F, H, I>(w_down, e, h_hi < H ? h_hi : 0), c);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (s0 + i < kN) {
          uint32_t a_lo[16], a_hi[16];
          decode_tile_chunk<F>(step[i].lo, step[i].lo_scales, a_lo);
          decode_tile_chunk<F>(step[i].hi, step[i].hi_scales, a_hi);
          uint4* dst = mine + (s0 + i) * 8 * 32 + lane;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            dst[q * 32] = make_uint4(a_lo[4 * q], a_lo[4 * q + 1], a_lo[4 * q + 2], a_lo[4 * q + 3]);
            dst[(4 + q) * 32] = make_uint4(a_hi[4 * q], a_hi[4 * q + 1], a_hi[4 * q + 2], a_hi[4 * q + 3]);
          }
          if constexpr (D::kStepScale) my_scales[(s0 + i) * 32 + lane] = make_float2(__uint_as_float(step[i].lo_scales), __uint_as_float(step[i].hi_scales));
        }
      }
    }
  }
  if (stamps != nullptr && j == 0 && lane == 0) stamp(2);
  // slot j's inter is complete when all its gate tiles have counted (acquire, every lane)
  while (load_acquire_gpu(ready + j) < static_cast<unsigned>(D::kGateTilesPerSlot)) __nanosleep(32);
  if (j == 0 && lane == 0) stamp(4);
  if (lane == 0 && atomicAdd(seen + j, 1u) == static_cast<unsigned>(D::kDownTiles - 1)) {  // the last block to look: clear
    ready[j] = 0u;
    seen[j] = 0u;
  }
  float lo = 0.0f, hi = 0.0f;
  if (routed) {
    const __nv_bfloat16* row = inter + static_cast<size_t>(j) * I;
#pragma unroll
    for (int s = 0; s < D::kDownSteps; ++s) {
      const int c = s * 4 + t;
      uint4 b[4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        b[q] = c < IRow::kChunks ? pair_activation_word(__ldcg(reinterpret_cast<const uint4*>(row + 32 * c) + q)) : make_uint4(0u, 0u, 0u, 0u);
      uint32_t a_lo[16], a_hi[16];
      const uint4* src = mine + s * 8 * 32 + lane;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 l = src[q * 32], h = src[(4 + q) * 32];
        a_lo[4 * q] = l.x; a_lo[4 * q + 1] = l.y; a_lo[4 * q + 2] = l.z; a_lo[4 * q + 3] = l.w;
        a_hi[4 * q] = h.x; a_hi[4 * q + 1] = h.y; a_hi[4 * q + 2] = h.z; a_hi[4 * q + 3] = h.w;
      }
      float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      probe::tile_step_regs(d0, d1, a_lo, a_hi, b);
      float s_lo = d0[0] + d1[0], s_hi = d0[2] + d1[2];
      if constexpr (D::kStepScale) {
        const float2 sc = my_scales[s * 32 + lane];
        s_lo *= sc.x;
        s_hi *= sc.y;
      }
      lo = fmaf(w_lo, s_lo, lo);
      hi = fmaf(w_hi, s_hi, hi);
    }
  }
  if (t == 0) {
    down_partials[j * 16 + g] = lo;
    down_partials[j * 16 + 8 + g] = hi;
  }
  named_barrier_sync(1, 32 * K);
  if (j != 0) return;
  lo = 0.0f;
  hi = 0.0f;
#pragma unroll
  for (int s = 0; s < K; ++s) {
    lo += down_partials[s * 16 + g];
    hi += down_partials[s * 16 + 8 + g];
  }
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if (t == 0) {
    if (h_lo < H) store_bf16(y + h_lo, down_epi(lo * kUnscale));
    if (h_hi < H) store_bf16(y + h_hi, down_epi(hi * kUnscale));
  }
  if (lane == 0) stamp(5);
}

}  // namespace mf
