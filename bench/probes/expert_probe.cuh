// Probe helpers (not part of the toolkit) shared by the expert-layer probes (tensor_core_probe.cu,
// decode_pipeline_probe.cu, splitk_layer_probe.cu): random
// 4-bit layers on the device, the catalogue's tensor-core kernels as launched, 4-bit rows in shared
// memory and a step of them with the activations in registers, bf16 conversions, output differences.
#pragma once

#include "moeforge_device.cuh"
#include "probe_harness.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace probe {

// The epilogues of the expert layer: SiLU-gated gate_up, plain down.
struct Silu {
  __device__ float operator()(float g, float u) const { return mf::silu(g) * u; }
};
struct Combine {
  __device__ float operator()(float c) const { return c; }
};

// The catalogue's tensor-core kernels (gate_up_tensor_core, down_tensor_core) as the runtime launches them.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int W, int U, int S>
__global__ void __launch_bounds__(32 * W, 1) tc_gate_up(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids, __nv_bfloat16* inter, int m) {
  mf::begin_after_previous_kernel();
  mf::gate_up_tensor_core<F, H, I, E, K, L, W, U, S>(x, w, ids, inter, m, Silu{});
}
template <class F, int H, int I, int E, int K, int W, int U, int S>
__global__ void __launch_bounds__(32 * W, 1) tc_down(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids, const float* tw, __nv_bfloat16* y, int m) {
  mf::begin_after_previous_kernel();
  mf::down_tensor_core<F, H, I, E, K, W, U, S>(inter, w, ids, tw, y, m, Combine{});
}

// Where a lane sits in a gate_up tile of the tensor-core kernels (gate_up_tensor_core works the
// same out inline): its mma row group g and thread t, its warp's part of the tile (S warps share a
// tile of 8 neurons, W warps a block), its neuron, the slot's expert and the rows it reads.
template <int I, int E, mf::GateUpLayout L, int W, int S>
struct GateUpLane {
  int lane, g, t, warp, part, neuron0, neuron, e, gate_n, up_n;
  bool active, routed, mine;

  __device__ __forceinline__ GateUpLane(const int* __restrict__ topk_ids, int slot)
      : lane(threadIdx.x & 31), g(lane >> 2), t(lane & 3), warp(threadIdx.x >> 5), part(warp % S),
        neuron0((blockIdx.x * (W / S) + warp / S) * 8), neuron(neuron0 + g) {
    active = neuron0 < I;  // uniform over the warp
    e = active ? __ldg(topk_ids + slot) : -1;
    routed = static_cast<unsigned>(e) < static_cast<unsigned>(E);
    mine = routed && neuron < I;
    gate_n = mf::gate_row_of<L>(mine ? neuron : neuron0, I);
    up_n = mf::up_row_of<L>(mine ? neuron : neuron0, I);
  }
};

// Where a lane sits in a down tile of the tensor-core kernels (down_tensor_core works the same out
// inline): its row group g and thread t, its warp's part of the tile (S warps share a tile of 16
// hidden outputs), its rows h_lo and h_hi, and routed slot `lane`'s expert and routing weight (0
// where unrouted). WEIGHT_BESIDE_ID: the weight is read beside the id instead of after it.
template <int H, int E, int K, int W, int S, bool WEIGHT_BESIDE_ID = false>
struct DownLane {
  int lane, g, t, warp, part, h0, h_lo, h_hi, lane_expert;
  float routing_weight;
  bool active;

  __device__ __forceinline__ DownLane(const int* __restrict__ topk_ids, const float* __restrict__ topk_weights, int token)
      : lane(threadIdx.x & 31), g(lane >> 2), t(lane & 3), warp(threadIdx.x >> 5), part(warp % S),
        h0((blockIdx.x * (W / S) + warp / S) * 16), h_lo(h0 + g), h_hi(h0 + g + 8) {
    active = h0 < H;  // uniform over the warp
    lane_expert = lane < K && active ? __ldg(topk_ids + token * K + lane) : -1;
    const bool routed = static_cast<unsigned>(lane_expert) < static_cast<unsigned>(E);
    if constexpr (WEIGHT_BESIDE_ID) {
      const float w = lane < K && active ? __ldg(topk_weights + token * K + lane) : 0.0f;
      routing_weight = routed ? w : 0.0f;
    } else {
      routing_weight = routed ? __ldg(topk_weights + token * K + lane) : 0.0f;
    }
  }
};

// Weights in shared memory (rows copied by the bulk-copy engine). Bytes of 4-bit rows of length L and their K-block scales; a stage holds 16 rows then their scales.
template <class F, int L>
struct Rows {
  static constexpr int kCodes = L / 2;
  static constexpr int kScales = F::kBlockScale == mf::BlockScale::kNone ? 0 : (L / F::kBlock) * (F::kBlockScale == mf::BlockScale::kF32 ? 4 : 1);
  static constexpr int kStage = 16 * (kCodes + kScales);
  static constexpr int kSteps = L / 128;
  static_assert(L % 128 == 0, "the probe takes whole 128-code steps");
  static_assert((8 * kScales) % 16 == 0, "scale runs are whole 16-byte units");
};

// Raw K-block scales of chunk c (32 codes) of a row in shared memory (load_tile_scales reads global).
template <class F>
__device__ __forceinline__ uint32_t smem_scales(const unsigned char* row, int c) {
  if constexpr (F::kBlockScale == mf::BlockScale::kNone) return 0u;
  else if constexpr (F::kBlockScale == mf::BlockScale::kF32) return reinterpret_cast<const uint32_t*>(row)[c / 4];
  else if constexpr (F::kBlock == 16) return reinterpret_cast<const unsigned short*>(row)[c];
  else return row[c];
}

// One step (chunk c of rows g and g + 8 of a stage); x words from shared memory (gate_up) or
// from registers (down).
template <class F, int L>
__device__ __forceinline__ mf::TileStep<F> stage_step(const unsigned char* stage, int g, int c) {
  using R = Rows<F, L>;
  mf::TileStep<F> st;
  const uint4 lo = reinterpret_cast<const uint4*>(stage + g * R::kCodes)[c];
  const uint4 hi = reinterpret_cast<const uint4*>(stage + (g + 8) * R::kCodes)[c];
  st.lo.w[0] = lo.x; st.lo.w[1] = lo.y; st.lo.w[2] = lo.z; st.lo.w[3] = lo.w;
  st.hi.w[0] = hi.x; st.hi.w[1] = hi.y; st.hi.w[2] = hi.z; st.hi.w[3] = hi.w;
  st.lo_scales = smem_scales<F>(stage + 16 * R::kCodes + g * R::kScales, c);
  st.hi_scales = smem_scales<F>(stage + 16 * R::kCodes + (g + 8) * R::kScales, c);
  return st;
}

// One step of a tile with the activations in registers (b[q] = word q of the chunk, mma order).
__device__ __forceinline__ void tile_step_regs(float (&d0)[4], float (&d1)[4], const uint32_t (&lo)[16], const uint32_t (&hi)[16],
                                               const uint4 (&b)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t a0[4] = {lo[4 * q], hi[4 * q], lo[4 * q + 1], hi[4 * q + 1]};
    const uint32_t a1[4] = {lo[4 * q + 2], hi[4 * q + 2], lo[4 * q + 3], hi[4 * q + 3]};
    mf::mma_bf16_16816(d0, a0, b[q].x, b[q].y);
    mf::mma_bf16_16816(d1, a1, b[q].z, b[q].w);
  }
}

// NVFP4 with the decode replaced by one XOR per pair (wrong values; timing only): how much of the
// tensor-core kernels' time the E2M1 decode and scale take.
struct NoDecodeNvfp4 : mf::Nvfp4Weights {};

// One layer's device buffers: gate_up and down codes, K-block scales, FP32 row (or tensor) factors,
// and the routing of its tokens.
struct Layer {
  void* gu_codes; void* gu_scales; float* gu_row;
  void* dn_codes; void* dn_scales; float* dn_row;
  int* ids; float* tw;
};

template <class F>
size_t scale_bytes(size_t rows, int k) {
  if constexpr (F::kBlockScale == mf::BlockScale::kNone) return 0;
  else return rows * (k / F::kBlock) * (F::kBlockScale == mf::BlockScale::kF32 ? 4 : 1);
}

// Random K-block scales in a modest range: the mask and the bits or-ed in.
template <class F>
uint32_t scale_mask(uint32_t& orv) {
  if constexpr (F::kBlockScale == mf::BlockScale::kE4M3) { orv = 0x20202020u; return 0x2f2f2f2fu; }   // E4M3 2^-4 .. ~2^4
  else if constexpr (F::kBlockScale == mf::BlockScale::kE8M0) { orv = 0x78787878u; return 0x0f0f0f0fu; } // 2^-7 .. 2^8 (past 2^1)
  else { orv = 0x3c000000u; return 0x007fffffu; }                                                         // FP32 2^-7 .. 2^-6
}

// Bytes of one layer's 4-bit weights, all experts: codes and scales of gate_up and down.
template <class F, int H, int I, int E>
struct LayerBytes {
  static constexpr size_t kGateUpCodes = (size_t)E * 2 * I * H / 2, kDownCodes = (size_t)E * H * I / 2;
  static size_t gate_up_scales() { return scale_bytes<F>((size_t)E * 2 * I, H); }
  static size_t down_scales() { return scale_bytes<F>((size_t)E * H, I); }
  // what M=1 reads: the k routed experts' share
  static double routed(int k) { return (double)(kGateUpCodes + gate_up_scales() + kDownCodes + down_scales()) / E * std::min(E, k); }
};

// `count` random layers, each with m tokens routed to K distinct experts (the first `unrouted`
// slots of each token set to -1) and routing weights in [0.05, 0.3].
template <class F, int H, int I, int E, int K>
std::vector<Layer> make_layers(int count, int m, int unrouted, std::mt19937& rng) {
  using B = LayerBytes<F, H, I, E>;
  const size_t gus = B::gate_up_scales(), dns = B::down_scales();
  uint32_t orv = 0; const uint32_t smask = scale_mask<F>(orv);
  std::vector<Layer> layers(count);
  for (int l = 0; l < count; ++l) {
    Layer& b = layers[l];
    CK(cudaMalloc(&b.gu_codes, B::kGateUpCodes)); fill_dev(b.gu_codes, B::kGateUpCodes, 11 + l);
    CK(cudaMalloc(&b.dn_codes, B::kDownCodes)); fill_dev(b.dn_codes, B::kDownCodes, 101 + l);
    b.gu_scales = b.dn_scales = nullptr;
    if (gus) { CK(cudaMalloc(&b.gu_scales, gus)); fill_dev(b.gu_scales, gus, 5 + l, smask, orv); }
    if (dns) { CK(cudaMalloc(&b.dn_scales, dns)); fill_dev(b.dn_scales, dns, 55 + l, smask, orv); }
    CK(cudaMalloc(&b.gu_row, E * 2 * I * 4)); fill_dev(b.gu_row, E * 2 * I * 4, 7 + l, 0x007fffffu, 0x3c000000u);
    CK(cudaMalloc(&b.dn_row, E * H * 4)); fill_dev(b.dn_row, E * H * 4, 77 + l, 0x007fffffu, 0x3c000000u);
    std::vector<int> ids(m * K);
    std::vector<float> tw(m * K);
    for (int t = 0; t < m; ++t) {
      std::vector<int> perm(E);
      for (int i = 0; i < E; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int j = 0; j < K; ++j) {
        ids[t * K + j] = j < unrouted ? -1 : perm[j];
        tw[t * K + j] = std::uniform_real_distribution<float>(0.05f, 0.3f)(rng);
      }
    }
    CK(cudaMalloc(&b.ids, m * K * 4)); CK(cudaMemcpy(b.ids, ids.data(), m * K * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&b.tw, m * K * 4)); CK(cudaMemcpy(b.tw, tw.data(), m * K * 4, cudaMemcpyHostToDevice));
  }
  return layers;
}

inline void free_layers(std::vector<Layer>& layers) {
  for (auto& b : layers) {
    cudaFree(b.gu_codes); cudaFree(b.dn_codes); cudaFree(b.gu_scales); cudaFree(b.dn_scales);
    cudaFree(b.gu_row); cudaFree(b.dn_row); cudaFree(b.ids); cudaFree(b.tw);
  }
  layers.clear();
}

inline float bf16_to_float(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline uint16_t float_to_bf16(float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }

// max |a - b| / max |b|; a NaN in either is reported and counts as infinitely different
inline double rel_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double d = 0, m = 0;
  size_t nan_a = 0, nan_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    nan_a += std::isnan(bf16_to_float(a[i]));
    nan_b += std::isnan(bf16_to_float(b[i]));
  }
  if (nan_a || nan_b) {
    std::printf("  [NaN: new %zu, old %zu of %zu]", nan_a, nan_b, a.size());
    return INFINITY;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    d = std::max(d, std::fabs(x - y)); m = std::max(m, std::fabs(y));
  }
  return m > 0 ? d / m : d;
}

}  // namespace probe

namespace mf {
template <>
__device__ __forceinline__ void decode_tile_chunk<probe::NoDecodeNvfp4>(const Lane<16>& codes, uint32_t raw_scales, uint32_t (&p)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) p[i] = codes.w[i & 3] ^ (raw_scales << (i & 7));
}
}  // namespace mf
