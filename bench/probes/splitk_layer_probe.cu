// Probe (not part of the toolkit): the M=1 4-bit expert layer as ONE kernel with no grid-wide wait,
// down split along its K (the intermediate neurons) and added into an FP32 output by atomics.
//
// Why: every structure tried so far either pays two kernels' ramps and drains (the pair, even with
// no decode at all) or waits for all of gate_up inside one kernel (grid barrier, rings, counters),
// which leaves few warps to decode (bench/NOTES.md, "One kernel fed by the copy engine"). Here a gate_up block, once it has its 16 neurons' h, multiplies
// them into down's 16 matching columns at once: nothing waits for another block, and every block
// keeps gate_up's 24 warps per SM loading their own weights.
//   * gate_up: the header's tensor-core tile (8 neurons, S warps per tile, U steps in flight);
//   * down: a one-time repack puts expert e's columns [16j, 16j + 16) of all H rows in one run of
//     H * 8 bytes, ordered so that one 16-byte load per lane is the A fragments of four m16n8k16
//     mmas (64 rows), and their E4M3 scales in 64 bytes per 64 rows; B holds the 16 h in all eight
//     columns, so lane (g, t) keeps mma t's rows g and g + 8;
//   * the sums go into y (FP32) by `red.global.add.f32`, scaled by the routing weight and factor.
//     The kernel zeroes the buffer two layers on (three rotate), so no memset node is needed.
// The hand-written kernel (splitk_layer, NVFP4 only) takes template switches for where down's loads
// are issued (kLate: after gate_up's loop; kEarly: before it; kMid: with the warp's last group of
// gate_up loads), how the sums reach y (scalar or float4 adds; clusters of 2-8 adding first through
// distributed shared memory; warps' runs rotated), and diagnostics (8 copies of y; kLateStore:
// plain stores to a per-block scratch; kNoOut: no output at all). V4 lays the rows out so that a
// lane ends with four consecutive ones (one float4 add). general_split_down runs the device
// header's general form (mf::mlp_split_down, every 4-bit format) with and without its forced load order.
// Each is checked against the catalogue's pair on the same random layers (y rounded to bf16), then
// both timed over 16 layers rotated in one graph with programmatic dependent launch.
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> splitk_layer_probe.cu -o splitk_layer_probe
// Run:   splitk_layer_probe [reps]      (0: the checks alone)
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <type_traits>
#include <vector>

namespace {
using namespace mf;
using probe::Layer;
using probe::rel_diff;
constexpr int kLayers = 16;

enum Mode { kLate, kEarly, kLateStore, kMid, kNoOut, kGeneral };

// Down repacked: for expert e and column tile j (16 neurons), 64-row quad q, lane (g, t): word m of
// the lane's 16 bytes holds rows 64q + 16m + g (nibbles 0, 4, 2, 6) and + 8 (1, 5, 3, 7) at columns
// 2t, 2t + 1, 2t + 8, 2t + 9 (the mma's A fragment; nibbles j and j + 4 make pair j). Scales: per
// quad, [g][m][row g, row g + 8] bytes.
template <class F, int H, int I, int E, bool V4>
__global__ void repack_down(const unsigned char* codes, const unsigned char* scales, uint4* rc, uint2* rs) {
  constexpr int kQuads = H / 64, kTiles = I / 16;
  const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (idx >= (size_t)E * kTiles * kQuads * 32) return;
  const int lane = idx % 32, q = (idx / 32) % kQuads, tile = (idx / 32 / kQuads) % kTiles, e = idx / (32 * kQuads * kTiles);
  const int g = lane / 4, t = lane % 4;
  auto nib = [&](int h, int k) -> uint32_t {
    const unsigned char b = codes[((size_t)e * H + h) * (I / 2) + (16 * tile + k) / 2];
    return (k & 1) ? b >> 4 : b & 15u;
  };
  uint32_t w[4];
  int rows[8];  // the lane group's rows: [m][row 8g + m (V4), row 8g + 4 + m]
  for (int m = 0; m < 4; ++m) {
    // V4: fragment rows g and g + 8 of mma m are rows 8g + m and 8g + 4 + m, so lanes t = 0, 1 of
    // group g end with four consecutive rows each
    const int h = V4 ? 64 * q + 8 * g + m : 64 * q + 16 * m + g, h8 = V4 ? h + 4 : h + 8;
    w[m] = nib(h, 2 * t) | nib(h8, 2 * t) << 4 | nib(h, 2 * t + 8) << 8 | nib(h8, 2 * t + 8) << 12 | nib(h, 2 * t + 1) << 16 |
           nib(h8, 2 * t + 1) << 20 | nib(h, 2 * t + 9) << 24 | nib(h8, 2 * t + 9) << 28;
    rows[2 * m] = h;
    rows[2 * m + 1] = h8;
  }
  const size_t quad = ((size_t)e * kTiles + tile) * kQuads + q;
  rc[quad * 32 + lane] = make_uint4(w[0], w[1], w[2], w[3]);
  if (t != 0) return;
  if constexpr (F::kBlockScale == BlockScale::kE4M3 || F::kBlockScale == BlockScale::kE8M0) {
    // bytes [g][m][2] of the scale block the tile lies in (E8M0: one per 32, so every second tile)
    constexpr int kPer = F::kBlock / 16, kBlocks = I / F::kBlock;
    if (tile % kPer != 0) return;
    unsigned char sb[8];
    for (int r = 0; r < 8; ++r) sb[r] = scales[((size_t)e * H + rows[r]) * kBlocks + tile / kPer];
    rs[(((size_t)e * kBlocks + tile / kPer) * kQuads + q) * 8 + g] =
        make_uint2(sb[0] | sb[1] << 8 | sb[2] << 16 | (uint32_t)sb[3] << 24, sb[4] | sb[5] << 8 | sb[6] << 16 | (uint32_t)sb[7] << 24);
  } else if constexpr (F::kBlockScale == BlockScale::kF32) {
    // FP32 [g][rows 8g .. 8g + 7] of the tile's group of 128 (V4 only)
    constexpr int kPer = 8, kGroups = I / 128;
    if (tile % kPer != 0 || !V4) return;
    float* out = reinterpret_cast<float*>(rs) + (((size_t)e * kGroups + tile / kPer) * kQuads + q) * 64 + g * 8;
    const float* in = reinterpret_cast<const float*>(scales);
    for (int m = 0; m < 4; ++m) {
      out[m] = in[((size_t)e * H + rows[2 * m]) * kGroups + tile / kPer];
      out[4 + m] = in[((size_t)e * H + rows[2 * m + 1]) * kGroups + tile / kPer];
    }
  }
}

template <class F, int H, int I, int E, int K, int W, int U, int S, int MB, Mode MODE, int CL = 1, bool ROT = false, bool V4 = false, int R = 1>
__global__ void __launch_bounds__(32 * W, MB)
    splitk_layer(const __nv_bfloat16* x, WeightArgs wgu, const uint4* dn_codes, const uint2* dn_scales, const float* dn_tensor_scale,
                 const int* ids, const float* tw, float* y, float* y_clear, float* scratch) {
  static_assert(F::kBlockScale == BlockScale::kE4M3 && F::kBlock == 16, "the probe's down decode is NVFP4's");
  static_assert(W / S == 2, "a block is 16 neurons: two tiles of 8");
  constexpr int kQuads = H / 64, kQW = kQuads / W;
  static_assert(kQuads % W == 0, "whole quads per warp");
  using Row = TileRow<H>;
  extern __shared__ __align__(16) unsigned char smem[];
  begin_after_previous_kernel();
  {
    const int lin = blockIdx.y * gridDim.x + blockIdx.x;  // the buffer two layers on: 8 floats per block
    if (threadIdx.x < 8 && lin * 8 + (int)threadIdx.x < H) y_clear[lin * 8 + threadIdx.x] = 0.0f;
  }
  const int slot = blockIdx.y;
  const int e = __ldg(ids + slot);
  // uniform over the block (and its cluster: one slot); the probe's layers are all routed
  if (CL == 1 && static_cast<unsigned>(e) >= static_cast<unsigned>(E)) return;
  uint4* xs = reinterpret_cast<uint4*>(smem);
  float* partial = reinterpret_cast<float*>(smem + 64 * Row::kPadded);
  __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(smem + 64 * Row::kPadded + W * 64);
  float* red_rows = reinterpret_cast<float*>(smem + 64 * Row::kPadded + W * 64 + 64);  // [H] (CL > 1)
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S, tile = warp / S;
  const int neuron0 = (blockIdx.x * (W / S) + tile) * 8;
  const int neuron = neuron0 + g;
  // ROT: warp w of block b takes quad run (w + b) % W, so that the blocks' adds do not meet on the
  // same rows at once
  const int run = ROT ? (warp + blockIdx.x + blockIdx.y) % W : warp;
  const size_t quad0 = ((size_t)e * (I / 16) + blockIdx.x) * kQuads + run * kQW;
  uint4 dc[kQW];
  uint2 ds[kQW];
  auto load_down = [&] {
#pragma unroll
    for (int i = 0; i < kQW; ++i) {
      const Lane<16> v = load_weights<16>(dn_codes + (quad0 + i) * 32 + lane);
      dc[i] = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
      ds[i] = __ldg(dn_scales + (quad0 + i) * 8 + g);
    }
  };
  if constexpr (MODE == kEarly) load_down();
  stage_tile_activations<1, H>(x, xs);
  const int gate_n = gate_row_of<GateUpLayout::kStacked>(neuron, I), up_n = up_row_of<GateUpLayout::kStacked>(neuron, I);
  float gate = 0.0f, up = 0.0f;
  {
    const GateUpTileRows<F, H, I> rows(wgu, e, gate_n, up_n);
#pragma unroll 1
    for (int s0 = part * U; s0 < Row::kSteps; s0 += S * U) {
      TileStep<F> step[U];
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = (s0 + i) * 4 + t;
        rows.load(step[i], c, c < Row::kChunks);
      }
      if constexpr (MODE == kMid) {
        if (s0 + S * U >= Row::kSteps) load_down();  // with the warp's last group of gate_up loads
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        if (s0 + i < Row::kSteps) {
          const StepSums sums = step[i].reduce(xs + (s0 + i) * 4 + t, Row::kPadded);
          gate += sums.lo;
          up += sums.hi;
        }
      }
    }
  }
  if constexpr (MODE == kLate || MODE == kLateStore || MODE == kNoOut) load_down();
  if (combine_tile_warps<S>(gate, up, partial) && t == 0) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(wgu, e, gate_n, 0)) * kUnscale;
    up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(wgu, e, up_n, 1)) * kUnscale;
    hs[tile * 8 + g] = __float2bfloat16_rn(probe::Silu{}(gate, up));  // rounded as the pair's inter
  }
  __syncthreads();
  const uint32_t b0 = reinterpret_cast<const uint32_t*>(hs)[t], b1 = reinterpret_cast<const uint32_t*>(hs)[t + 4];
  const float factor = __ldg(tw + slot) * __ldg(dn_tensor_scale + e) * TileDecode<F>::kUnscale;
#pragma unroll
  for (int i = 0; i < kQW; ++i) {
    const uint32_t words[4] = {dc[i].x, dc[i].y, dc[i].z, dc[i].w};
    float keep_lo = 0.0f, keep_hi = 0.0f;
    float4 lo4, hi4;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t pair = (m < 2 ? ds[i].x : ds[i].y) >> (16 * (m & 1)) & 0xffffu;
      const uint32_t s2 = e4m3x2_to_half2(pair);
      const uint32_t s_lo = bf16x2_bits(__float2bfloat162_rn(half_lo(s2) * 0x1p117f));
      const uint32_t s_hi = bf16x2_bits(__float2bfloat162_rn(half_hi(s2) * 0x1p117f));
      const uint32_t a[4] = {bf16x2_mul(e2m1_pair_bf16<0>(words[m]), s_lo), bf16x2_mul(e2m1_pair_bf16<1>(words[m]), s_hi),
                             bf16x2_mul(e2m1_pair_bf16<2>(words[m]), s_lo), bf16x2_mul(e2m1_pair_bf16<3>(words[m]), s_hi)};
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_bf16_16816(d, a, b0, b1);
      if (m == t) {
        keep_lo = d[0];
        keep_hi = d[2];
      }
      (&lo4.x)[m] = d[0] * factor;
      (&hi4.x)[m] = d[2] * factor;
    }
    if constexpr (V4) {
      const int row4 = (run * kQW + i) * 64 + 8 * g + 4 * t;
      if constexpr (MODE == kNoOut) {
        if (t < 2 && lo4.x + lo4.y + lo4.z + lo4.w + hi4.x + hi4.y + hi4.z + hi4.w == 12345.0f) y[row4] = hi4.y;  // never true: the sums are computed, nothing is written
      } else if constexpr (CL > 1) {
        if (t < 2) *reinterpret_cast<float4*>(red_rows + row4) = t == 0 ? lo4 : hi4;
      } else {
        float* yr = y + (blockIdx.y * gridDim.x + blockIdx.x) % R * H;
        if (t < 2) atomicAdd(reinterpret_cast<float4*>(yr + row4), t == 0 ? lo4 : hi4);
      }
      continue;
    }
    const int row = (run * kQW + i) * 64 + 16 * t + g;
    if constexpr (MODE == kLateStore) {
      float* mine = scratch + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * H;
      mine[row] = keep_lo * factor;
      mine[row + 8] = keep_hi * factor;
    } else if constexpr (CL > 1) {
      red_rows[row] = keep_lo * factor;
      red_rows[row + 8] = keep_hi * factor;
    } else {
      float* yr = y + (blockIdx.y * gridDim.x + blockIdx.x) % R * H;
      atomicAdd(yr + row, keep_lo * factor);
      atomicAdd(yr + row + 8, keep_hi * factor);
    }
  }
  if constexpr (CL > 1) {
    // the cluster's C blocks (same slot, neighbouring neuron tiles) add their rows in rank order,
    // block c the rows [c H / C, (c + 1) H / C), then one atomic add per row and cluster
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int c = cluster.block_rank();
    if constexpr (V4) {
      for (int r = c * (H / CL) + 4 * threadIdx.x; r < (c + 1) * (H / CL); r += 4 * blockDim.x) {
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < CL; ++k) {
          const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red_rows, k) + r);
          sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
        }
        atomicAdd(reinterpret_cast<float4*>(y + r), sum);
      }
    } else {
      for (int r = c * (H / CL) + threadIdx.x; r < (c + 1) * (H / CL); r += blockDim.x) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < CL; ++k) sum += cluster.map_shared_rank(red_rows, k)[r];
        atomicAdd(y + r, sum);
      }
    }
    cluster.sync();  // no block leaves while another reads its rows
  }
}

// The general form of the float4 variant (the device header's mlp_split_down, schedule split_down),
// as a generated kernel calls it; the token count arrives at run time, as there.
template <class F, int H, int I, int E, int K, int W, int U, int S, int MB, bool ORDER>
__global__ void __launch_bounds__(32 * W, MB)
    general_split_down(const __nv_bfloat16* x, WeightArgs wgu, WeightArgs wdn, const int* ids, const float* tw, float* y, float* y_zero, int m) {
  begin_after_previous_kernel();
  mlp_split_down<F, H, I, E, K, GateUpLayout::kStacked, W, U, S, ORDER>(x, wgu, wdn, ids, tw, y, y_zero, m, probe::Silu{});
}

template <class F, int H, int I, int E, int K>
struct Run {
  const std::vector<Layer>& layers;
  std::vector<uint4*> rcodes, rcodes4;
  std::vector<uint2*> rscales, rscales4;
  __nv_bfloat16 *x, *inter, *y;
  float *ybuf, *scratch;
  cudaStream_t s;
  int reps;
  double bytes;
  std::vector<uint16_t> y_ref;

  template <int W, int U, int S, int MB, Mode MODE, int CL = 1, bool ROT = false, bool V4 = false, int R = 1>
  void fused(int l, float* acc, float* clear) const {
    const Layer& b = layers[l];
    if constexpr (MODE == kGeneral) {
      probe::launch(false, general_split_down<F, H, I, E, K, W, U, S, MB, R == 1>, dim3(I / 16, K), dim3(32 * W),
                    64 * TileRow<H>::kPadded + W * 64 + 32, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                    WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, WeightArgs{rcodes4[l], rscales4[l], b.dn_row, nullptr},
                    (const int*)b.ids, (const float*)b.tw, acc, clear, 1);
    } else {
      const size_t smem = 64 * TileRow<H>::kPadded + W * 64 + 64 + (CL > 1 ? H * 4 : 0);
      probe::launch_as(probe::LaunchAs{true, false, CL}, splitk_layer<F, H, I, E, K, W, U, S, MB, MODE, CL, ROT, V4, R>, dim3(I / 16, K),
                       dim3(32 * W), smem, s, (const __nv_bfloat16*)(x + (size_t)l * H), WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr},
                       (const uint4*)(V4 ? rcodes4[l] : rcodes[l]), (const uint2*)(V4 ? rscales4[l] : rscales[l]), (const float*)b.dn_row,
                       (const int*)b.ids, (const float*)b.tw, acc, clear, scratch);
    }
  }

  template <int W, int U, int S, int MB, Mode MODE, int CL = 1, bool ROT = false, bool V4 = false, int R = 1>
  void time_fused(const char* label) const {
    constexpr int RB = MODE == kGeneral ? 1 : R;  // kGeneral: R == 1 forces the load order
    CK(cudaMemsetAsync(ybuf, 0, 3 * 8 * H * 4, s));
    fused<W, U, S, MB, MODE, CL, ROT, V4, R>(0, ybuf, ybuf + RB * H);
    CK(cudaStreamSynchronize(s));
    std::vector<float> yf(RB * H);
    CK(cudaMemcpy(yf.data(), ybuf, RB * H * 4, cudaMemcpyDeviceToHost));
    std::vector<uint16_t> yb(H);
    for (int i = 0; i < H; ++i) {
      float v = 0.0f;
      for (int c = 0; c < RB; ++c) v += yf[c * H + i];
      yb[i] = probe::float_to_bf16(v);
    }
    const double d = MODE == kLateStore || MODE == kNoOut ? -1.0 : rel_diff(yb, y_ref);
    float us = 0.0f;
    if (reps > 0)
      us = probe::graph_us(s, reps, kLayers, [&] {
        for (int l = 0; l < kLayers; ++l) fused<W, U, S, MB, MODE, CL, ROT, V4, R>(l, ybuf + (l % 3) * RB * H, ybuf + ((l + 1) % 3) * RB * H);
      });
    if (reps <= 0) std::printf("   %-58s y diff %9.2e\n", label, d);
    else if (d < 0) std::printf("   %-58s y unchecked  layer %6.2f us (%.1f%% of 3.10 TB/s)\n", label, us, 100.0 * bytes / (us * 1e3) / 3100.0);
    else std::printf("   %-58s y diff %9.2e  layer %6.2f us (%.1f%% of 3.10 TB/s)\n", label, d, us, 100.0 * bytes / (us * 1e3) / 3100.0);
  }
};

// The catalogue's pair (gate_up GW GU GS, down DW) against the split-K layer.
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW>
void compare(const char* name, std::mt19937& rng, int reps) {
  std::vector<Layer> layers = probe::make_layers<F, H, I, E, K>(kLayers, 1, 0, rng);
  std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = probe::float_to_bf16(nd(rng));
  __nv_bfloat16 *x, *inter, *y;
  float *ybuf, *scratch;
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&inter, (size_t)K * I * 2)); CK(cudaMalloc(&y, (size_t)H * 2));
  CK(cudaMalloc(&ybuf, 3 * 8 * H * 4)); CK(cudaMalloc(&scratch, (size_t)(I / 16) * K * H * 4));
  std::vector<uint4*> rc(kLayers), rc4(kLayers);
  std::vector<uint2*> rs(kLayers), rs4(kLayers);
  const size_t quads = (size_t)E * (I / 16) * (H / 64);
  for (int l = 0; l < kLayers; ++l) {
    CK(cudaMalloc(&rc[l], quads * 32 * 16)); CK(cudaMalloc(&rs[l], quads * 64));
    CK(cudaMalloc(&rc4[l], quads * 32 * 16)); CK(cudaMalloc(&rs4[l], quads * 64));
    repack_down<F, H, I, E, false><<<(quads * 32 + 255) / 256, 256>>>((const unsigned char*)layers[l].dn_codes, (const unsigned char*)layers[l].dn_scales, rc[l], rs[l]);
    repack_down<F, H, I, E, true><<<(quads * 32 + 255) / 256, 256>>>((const unsigned char*)layers[l].dn_codes, (const unsigned char*)layers[l].dn_scales, rc4[l], rs4[l]);
    CK(cudaGetLastError());
  }
  cudaStream_t s = probe::stream_after_setup();
  Run<F, H, I, E, K> r{layers, rc, rc4, rs, rs4, x, inter, y, ybuf, scratch, s, reps, probe::LayerBytes<F, H, I, E>::routed(K), {}};
  std::printf("%s (%.1f MB)\n", name, r.bytes / 1e6);
  auto gate_up = [&](int l) {
    const Layer& b = layers[l];
    probe::launch(false, probe::tc_gate_up<F, H, I, E, K, GateUpLayout::kStacked, GW, GU, GS>, dim3(ceil_div(I, 8 * (GW / GS)), K), dim3(32 * GW),
                  64 * TileRow<H>::kPadded + (GS > 1 ? GW * 64 : 0), s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, inter, 1);
  };
  auto pair = [&](int l, __nv_bfloat16* out) {
    const Layer& b = layers[l];
    gate_up(l);
    probe::launch(false, probe::tc_down<F, H, I, E, K, DW, 1, DW>, dim3(ceil_div(H, 16)), dim3(32 * DW), 64 * K * TileRow<I>::kPadded + DW * 64, s,
                  (const __nv_bfloat16*)inter, WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, 1);
  };
  {
    std::vector<uint16_t> yr(H);
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    pair(0, y);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(yr.data(), y, H * 2, cudaMemcpyDeviceToHost));
    r.y_ref = yr;
  }
  if (reps > 0) {
    const float t_pair = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) pair(l, y + 0); });
    const float t_gu = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) gate_up(l); });
    std::printf("   %-58s               layer %6.2f us (%.1f%% of 3.10 TB/s); its gate_up alone %.2f us\n", "catalogue pair", t_pair,
                100.0 * r.bytes / (t_pair * 1e3) / 3100.0, t_gu);
  }
  // the fused kernel: 8 warps, two tiles of 8 neurons, 4 warps per tile, 2 steps in flight
  r.template time_fused<8, 2, 4, 3, kGeneral, 1, false, true, 1>("header's mlp_split_down (general form), load order forced");
  r.template time_fused<8, 2, 4, 3, kGeneral, 1, false, true, 2>("header's mlp_split_down, ptxas's load order");
  if constexpr (std::is_same_v<F, Nvfp4Weights>) {  // the hand-written variants decode NVFP4 only
    // where down's loads are issued, and the register promise (MB 1: about 100 registers, two blocks
    // per SM, two waves; MB 3: 80 registers, one wave)
    r.template time_fused<8, 2, 4, 1, kLate>("late (down's loads after gate_up's loop), MB 1");
    r.template time_fused<8, 2, 4, 1, kEarly>("early (down's loads before gate_up's), MB 1");
    r.template time_fused<8, 2, 4, 3, kLate>("late, MB 3");
    r.template time_fused<8, 2, 4, 3, kEarly>("early, MB 3");
    r.template time_fused<8, 2, 4, 3, kMid>("mid (with the warp's last gate_up loads), MB 3");
    // how the sums reach y (all late, MB 3)
    r.template time_fused<8, 2, 4, 3, kLate, 1, true>("scalar adds, runs rotated");
    r.template time_fused<8, 2, 4, 3, kLate, 2>("scalar, clusters of 2 add first (DSMEM)");
    r.template time_fused<8, 2, 4, 3, kLate, 4>("scalar, clusters of 4 add first");
    r.template time_fused<8, 2, 4, 3, kLate, 8>("scalar, clusters of 8 add first");
    r.template time_fused<8, 2, 4, 3, kLate, 1, false, true>("float4 adds");
    r.template time_fused<8, 2, 4, 3, kLate, 1, true, true>("float4 adds, runs rotated");
    // diagnostics: y is not a usable output in these
    r.template time_fused<8, 2, 4, 3, kLate, 1, false, false, 8>("diagnostic: scalar, 8 copies of y (summed on the host)");
    r.template time_fused<8, 2, 4, 3, kLate, 1, false, true, 8>("diagnostic: float4, 8 copies of y (summed on the host)");
    r.template time_fused<8, 2, 4, 3, kLateStore>("diagnostic: plain stores to a per-block scratch");
    r.template time_fused<8, 2, 4, 3, kNoOut, 1, false, true>("diagnostic: no output at all (the ceiling)");
  }
  probe::free_layers(layers);
  for (int l = 0; l < kLayers; ++l) { cudaFree(rc[l]); cudaFree(rs[l]); cudaFree(rc4[l]); cudaFree(rs4[l]); }
  cudaFree(x); cudaFree(inter); cudaFree(y); cudaFree(ybuf); cudaFree(scratch);
  cudaStreamDestroy(s);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261126);
  compare<Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("nvfp4, Qwen3-30B-A3B", rng, reps);
  compare<Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32>("mxfp4, Qwen3-30B-A3B", rng, reps);
  compare<Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("int4_group128, Qwen3-30B-A3B", rng, reps);
  compare<Int4ChannelWeights, 2048, 768, 128, 8, 8, 2, 4, 24>("int4_channel, Qwen3-30B-A3B", rng, reps);
  compare<Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 24>("nvfp4, Qwen3-Next-80B-A3B", rng, reps);
  return 0;
}
