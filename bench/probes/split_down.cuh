// Probe (not part of the toolkit): the split-K expert layer of splitk_layer_probe.cu in the general
// form a generated kernel would call (every 4-bit format, any H multiple of 64, M tokens, the buffer
// zeroed for a later launch), over the device header's tensor-core pieces. Measured in
// splitk_layer_probe.cu; findings in bench/NOTES.md, "down split along its K inside gate_up's blocks".
// What keeps it out of the header for now: under the 80 registers of 3 blocks per SM, ptxas schedules
// this form's gate_up loop worse than the probe's hand-written NVFP4 kernel (13.7 us against 12.6).
#pragma once

#include "moeforge_device.cuh"

namespace mf {

// gate_up_tensor_core's tile loop as a function. A warp's part of a gate_up tile: the gate (lo) and
// up (hi) sums of lane group g's neuron over every S-th group of U steps from group `part` (U
// steps' loads in flight per lane); x staged in xs.
// `mine`: the lane's neuron is in range (otherwise it reads zeros).
// `zero`: a value that is 0 at run time but unknown to the compiler (e.g. num_tokens >> 31), or
// kNoLoadOrder. With one, every code word of a group is XOR-ed with (the group's scales & zero): no
// decode can then be scheduled before all of the group's scale loads are issued. Under
// mlp_split_down's 80 registers ptxas otherwise decoded the first step before asking for the last
// three scales, a second DRAM round trip per group (bench/NOTES.md, "down split along its K").
constexpr uint32_t kNoLoadOrder = 0xffffffffu;

template <class F, int H, int I, int U, int S>
__device__ __forceinline__ StepSums gate_up_tile_sums(const GateUpTileRows<F, H, I>& rows, const uint4* xs, int part, int t,
                                                      bool mine, uint32_t zero = kNoLoadOrder) {
  using Row = TileRow<H>;
  StepSums total{0.0f, 0.0f};
#pragma unroll 1
  for (int s0 = part * U; s0 < Row::kSteps; s0 += S * U) {
    TileStep<F> step[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = (s0 + i) * 4 + t;
      rows.load(step[i], c, mine && c < Row::kChunks);
    }
    if constexpr (F::kBlockScale != BlockScale::kNone) {
      if (zero != kNoLoadOrder) {
        uint32_t all = 0;
#pragma unroll
        for (int i = 0; i < U; ++i) all ^= step[i].lo_scales ^ step[i].hi_scales;
        all &= zero;
#pragma unroll
        for (int i = 0; i < U; ++i) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            step[i].lo.w[w] ^= all;
            step[i].hi.w[w] ^= all;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (s0 + i < Row::kSteps) {  // uniform over the warp; the staged x ends there
        const StepSums sums = step[i].reduce(xs + (s0 + i) * 4 + t, Row::kPadded);
        total.lo += sums.lo;
        total.hi += sums.hi;
      }
    }
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// The whole expert MLP in one kernel (a candidate schedule, split_down). A block takes one (token, routed slot)
// and 16 neurons: gate_up's tile loop gives their h, rounded to bf16 as a stored inter would be;
// then the same warps multiply the 16 h into down's 16 matching columns, for all H rows, and add
// the products times the routing weight into the token's FP32 y, 16 bytes per atomic add. No block
// waits for another, so the layer is one kernel with gate_up's warps per SM (bench/NOTES.md, "down
// split along its K inside gate_up's blocks": NVFP4 at M=1 12.62 us against 13.89 for the pair).
// The order of the adds varies from launch to launch, and with it y's last bits.
//
// Down's layout (repacked once on load; repack_split_down in splitk_layer_probe.cu): columns [16j, 16j + 16) of expert e's H
// rows form tile j. In quad q (64 rows), lane (g, t) holds 16 bytes whose word m is its m16n8k16 A
// fragment of rows 64q + 8g + m (nibbles 0, 4, 2, 6) and 64q + 8g + 4 + m (nibbles 1, 5, 3, 7) at
// columns 2t, 2t + 1, 2t + 8, 2t + 9. B carries the 16 h in all eight columns, so after the quad's
// four mmas lane t = 0 of group g holds rows 8g..8g+3 and lane t = 1 rows 8g+4..8g+7.
// K-block scales per quad, of the scale block the tile lies in: E4M3 / E8M0 bytes [g][m][row 8g+m,
// row 8g+4+m]; FP32 per 128: [g][rows 8g..8g+7].
// ---------------------------------------------------------------------------------------------

template <class F, int H, int I>
struct SplitDownLayout {
  static_assert(F::kCodeBits == 4, "split_down takes 4-bit codes");
  static_assert(H % 64 == 0 && I % 16 == 0, "whole 64-row quads and 16-column tiles");
  static constexpr int kQuads = H / 64, kTiles = I / 16;
  static constexpr int kTilesPerScale = F::kBlockScale == BlockScale::kNone ? 1 : F::kBlock / 16;
  static constexpr int kScaleBytesPerQuad = F::kBlockScale == BlockScale::kF32 ? 256 : F::kBlockScale == BlockScale::kNone ? 0 : 64;
  static_assert(!F::kBlockRows, "split_down takes scales along K");
};

// One quad of a warp's down rows: the lane's codes and scales, loaded before they are needed.
template <class F, int H, int I>
struct SplitDownQuad {
  using D = SplitDownLayout<F, H, I>;
  Lane<16> codes;
  uint2 folded;  // E4M3 / E8M0: the lane group's 8 scale bytes
  float4 step;   // FP32 per 128: the scales of the lane's four rows

  __device__ __forceinline__ void load(const WeightArgs& w, int e, int tile, int q, int lane, int g, int t) {
    const size_t quad = (static_cast<size_t>(e) * D::kTiles + tile) * D::kQuads + q;
    codes = load_weights<16>(static_cast<const char*>(w.codes) + quad * 512 + lane * 16);
    if constexpr (D::kScaleBytesPerQuad > 0) {
      const size_t scale_quad = (static_cast<size_t>(e) * (D::kTiles / D::kTilesPerScale) + tile / D::kTilesPerScale) * D::kQuads + q;
      const unsigned char* scales = static_cast<const unsigned char*>(w.block_scales) + scale_quad * D::kScaleBytesPerQuad;
      if constexpr (F::kBlockScale == BlockScale::kF32) step = __ldg(reinterpret_cast<const float4*>(scales) + 2 * g + (t & 1));
      else folded = __ldg(reinterpret_cast<const uint2*>(scales) + g);
    }
  }

  // The lane's four row sums (t = 0: rows 8g..8g+3 of the quad, t = 1: 8g+4..8g+7; t = 2, 3 hold
  // copies), K-block scales applied; b0, b1: the B fragment of the 16 h.
  __device__ __forceinline__ float4 reduce(uint32_t b0, uint32_t b1, int t) const {
    float lo[4], hi[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t word = codes.w[m];
      uint32_t a[4];
      if constexpr (F::kElement == Element::kE2M1) {
        a[0] = e2m1_pair_bf16<0>(word); a[1] = e2m1_pair_bf16<1>(word);
        a[2] = e2m1_pair_bf16<2>(word); a[3] = e2m1_pair_bf16<3>(word);
        const uint32_t pair = ((m < 2 ? folded.x : folded.y) >> (16 * (m & 1))) & 0xffffu;  // rows 8g+m, 8g+4+m
        uint32_t s_lo, s_hi;
        if constexpr (F::kBlockScale == BlockScale::kE4M3) {  // times 2^117 as in decode_tile_chunk
          const uint32_t s2 = e4m3x2_to_half2(pair);
          s_lo = bf16x2_bits(__float2bfloat162_rn(half_lo(s2) * 0x1p117f));
          s_hi = bf16x2_bits(__float2bfloat162_rn(half_hi(s2) * 0x1p117f));
        } else {
          static_assert(F::kBlockScale == BlockScale::kE8M0, "E2M1 takes E4M3 or E8M0 block scales");
          const uint32_t b_lo = pair & 0xffu, b_hi = pair >> 8;
          const uint32_t e_lo = b_lo == 0xffu ? 0x7fc0u : b_lo == 0u ? 0x0040u : b_lo << 7;
          const uint32_t e_hi = b_hi == 0xffu ? 0x7fc0u : b_hi == 0u ? 0x0040u : b_hi << 7;
          s_lo = e_lo | (e_lo << 16);
          s_hi = e_hi | (e_hi << 16);
#pragma unroll
          for (int j = 0; j < 4; ++j) a[j] = bf16x2_mul(a[j], 0x7e807e80u);  // 2^126 first: the code's value
        }
        a[0] = bf16x2_mul(a[0], s_lo); a[2] = bf16x2_mul(a[2], s_lo);
        a[1] = bf16x2_mul(a[1], s_hi); a[3] = bf16x2_mul(a[3], s_hi);
      } else {
        static_assert(F::kElement == Element::kInt4, "split_down decodes E2M1 or INT4 codes");
        const uint32_t biased = word ^ 0x88888888u;
        a[0] = int4_pair_bf16<0>(biased); a[1] = int4_pair_bf16<1>(biased);
        a[2] = int4_pair_bf16<2>(biased); a[3] = int4_pair_bf16<3>(biased);
      }
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_bf16_16816(d, a, b0, b1);
      lo[m] = d[0];
      hi[m] = d[2];
    }
    float4 v = (t & 1) ? make_float4(hi[0], hi[1], hi[2], hi[3]) : make_float4(lo[0], lo[1], lo[2], lo[3]);
    if constexpr (F::kBlockScale == BlockScale::kF32) {
      v.x *= step.x; v.y *= step.y; v.z *= step.z; v.w *= step.w;
    }
    return v;
  }
};

// Sets this block's share of `count` floats (a multiple of 8) to zero, the buffer a later launch
// adds into, in whole 32-byte sectors.
__device__ __forceinline__ void zero_share(float* __restrict__ p, int count) {
  const int blocks = gridDim.x * gridDim.y;
  const int sectors = count / 8;
  const int share = (sectors + blocks - 1) / blocks;
  const int first = (blockIdx.y * gridDim.x + blockIdx.x) * share;
  for (int i = threadIdx.x; i < 2 * share && first * 2 + i < 2 * sectors; i += blockDim.x)
    reinterpret_cast<float4*>(p)[first * 2 + i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Grid: x = I / 16, y = M * k slots. Block: 32 * W threads, W / S = 2 tiles of 8 neurons. y [M][H]
// FP32 is added to (zero before the launch); y_zero [M][H] FP32 is set to zero for a later launch.
// Shared memory: the token's staged x, [W][16] FP32 partial sums (S > 1), the 16 h. ORDER: force
// gate_up's loads of a group before its decode (gate_up_tile_sums' `zero`).
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int U, int S, bool ORDER, class Epilogue>
__device__ __forceinline__ void mlp_split_down(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, WeightArgs w_down,
                                               const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                               float* __restrict__ y, float* __restrict__ y_zero, int num_tokens, Epilogue epi) {
  using Row = TileRow<H>;
  using D = SplitDownLayout<F, H, I>;
  static_assert(W % S == 0 && W / S == 2, "a block is two tiles of 8 neurons: one 16-column tile of down");
  constexpr int kQuadsPerWarp = ceil_div(D::kQuads, W);
  extern __shared__ __align__(16) unsigned char smem[];
  zero_share(y_zero, num_tokens * H);  // M * H < 2^31: M <= 65535 / k, H <= 2^16
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;  // uniform over the block
  const int e = __ldg(topk_ids + slot);
  if (static_cast<unsigned>(e) >= static_cast<unsigned>(E)) return;  // an unrouted slot adds nothing
  const int token = slot / K;
  uint4* xs = reinterpret_cast<uint4*>(smem);
  float* partial = reinterpret_cast<float*>(smem + 64 * Row::kPadded);
  __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(smem + 64 * Row::kPadded + (S > 1 ? W * 64 : 0));
  stage_tile_activations<1, H>(x + static_cast<size_t>(token) * H, xs);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S, tile = warp / S;
  const int neuron = (blockIdx.x * 2 + tile) * 8 + g;
  const int gate_n = gate_row_of<L>(neuron, I), up_n = up_row_of<L>(neuron, I);
  const uint32_t zero = ORDER ? static_cast<uint32_t>(num_tokens) >> 31 : kNoLoadOrder;  // 0: num_tokens >= 1
  StepSums sums = gate_up_tile_sums<F, H, I, U, S>(GateUpTileRows<F, H, I>(w_gate_up, e, gate_n, up_n), xs, part, t, true, zero);
  // down's loads after gate_up's: issued earlier they return first and delay gate_up's (NOTES)
  // warp w takes the run of quads [w Q, (w + 1) Q) where W divides them (no guard compiled), else
  // quads w, w + W, ...
  constexpr bool kWhole = D::kQuads % W == 0;
  SplitDownQuad<F, H, I> quad[kQuadsPerWarp];
#pragma unroll
  for (int i = 0; i < kQuadsPerWarp; ++i) {
    const int q = kWhole ? warp * kQuadsPerWarp + i : warp + i * W;
    if (kWhole || q < D::kQuads) quad[i].load(w_down, e, blockIdx.x, q, lane, g, t);
  }
  const bool first = S > 1 ? combine_tile_warps<S>(sums.lo, sums.hi, partial) : true;
  if (first && t == 0) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    const float gate = apply_factor<F>(sums.lo, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0)) * kUnscale;
    const float up = apply_factor<F>(sums.hi, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1)) * kUnscale;
    h[tile * 8 + g] = __float2bfloat16_rn(epi(gate, up));
  }
  __syncthreads();
  const uint32_t b0 = reinterpret_cast<const uint32_t*>(h)[t], b1 = reinterpret_cast<const uint32_t*>(h)[t + 4];
  float weight = __ldg(topk_weights + slot) * TileDecode<F>::kUnscale;
  if constexpr (F::kRowFactor == RowFactor::kPerTensor) weight *= __ldg(w_down.row_scales + e);
  float* y_token = y + static_cast<size_t>(token) * H;
#pragma unroll
  for (int i = 0; i < kQuadsPerWarp; ++i) {
    const int q = kWhole ? warp * kQuadsPerWarp + i : warp + i * W;
    if (!kWhole && q >= D::kQuads) continue;  // uniform over the warp
    const int row = 64 * q + 8 * g + 4 * (t & 1);
    float4 v = quad[i].reduce(b0, b1, t);
    float4 f = make_float4(weight, weight, weight, weight);
    if constexpr (F::kRowFactor == RowFactor::kPerRow) {
      const float4 r = __ldg(reinterpret_cast<const float4*>(w_down.row_scales + static_cast<size_t>(e) * H + row));
      f = make_float4(weight * r.x, weight * r.y, weight * r.z, weight * r.w);
    }
    if (t < 2) atomicAdd(reinterpret_cast<float4*>(y_token + row), make_float4(v.x * f.x, v.y * f.y, v.z * f.z, v.w * f.w));
  }
}

}  // namespace mf
