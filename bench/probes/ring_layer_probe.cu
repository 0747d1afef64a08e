// Probe (not part of the toolkit): the M=1 4-bit expert layer as one kernel fed by the copy engine.
// One block per SM; warp 0's lane 0 streams the block's share of gate_up through a ring of S stages
// of shared memory by cp.async.bulk (an mbarrier per stage) and copies the block's rows of down into
// a region of their own; CW consumer warps decode on the tensor cores with the header's pieces
// (TileStep, decode_tile_chunk, mma m16n8k16).
//   * gate_up tiles (8 neurons of one routed slot: 8 gate rows + 8 up rows, all of K) are dealt
//     slot-major over the blocks, so slot j's tiles are done early for small j;
//   * each block then owns one down tile (16 hidden rows) over every slot's expert; slot j waits only
//     for slot j's gate_up tiles (a counter per slot, release/acquire), and its bytes were copied
//     while gate_up ran (after the first S tiles, or after the last: `late`);
//   * an item's partial sums are added in warp order by the warp that arrives last (no barrier per
//     item), and the down tile's slot results in slot order: outputs are deterministic.
// Checked against the tensor-core pair on the same random layers (inter and y), then both are timed
// over 16 layers rotated in one graph with programmatic dependent launch; one launch traced per block.
// Findings: bench/NOTES.md, "One kernel fed by the copy engine".
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> ring_layer_probe.cu -o ring_layer_probe
// Run:   ring_layer_probe [reps]            the five workloads: pair, then the rings
//        ring_layer_probe 0 check           checks only (all slots routed), the first mismatches shown
//        ring_layer_probe [reps] nodecode   NVFP4 with the E2M1 decode replaced by one XOR per pair
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace ring {
using namespace mf;

using probe::bar_arrive;
using probe::bar_expect;
using probe::bar_init;
using probe::bar_wait;
using probe::bulk;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void consumers_sync(int cw) { asm volatile("bar.sync 1, %0;\n" ::"r"(32 * cw) : "memory"); }

using probe::Rows;
using probe::stage_step;

template <class F>
__device__ __forceinline__ StepSums reduce_regs(const TileStep<F>& st, const uint4 (&x)[4]) {
  uint32_t a_lo[16], a_hi[16];
  decode_tile_chunk<F>(st.lo, st.lo_scales, a_lo);
  decode_tile_chunk<F>(st.hi, st.hi_scales, a_hi);
  float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  probe::tile_step_regs(d0, d1, a_lo, a_hi, x);
  StepSums s{d0[0] + d1[0], d0[2] + d1[2]};
  if constexpr (TileDecode<F>::kStepScale) {
    s.lo *= __uint_as_float(st.lo_scales);
    s.hi *= __uint_as_float(st.hi_scales);
  }
  return s;
}

template <class F, int H, int I, int E, int K, int CW, int S>
struct RingLayer {
  using GU = Rows<F, H>;
  using DN = Rows<F, I>;
  static constexpr int kStage = (GU::kStage + 127) / 128 * 128;      // a gate_up tile
  static constexpr int kDownSlot = (DN::kStage + 127) / 128 * 128;   // a slot's rows of the block's down tile
  static constexpr int kGateTiles = K * (I / 8);
  static constexpr int kDownTiles = H / 16;
  static constexpr int kMaxGate = 8;  // gate tiles per block at most (the grid must be >= kGateTiles / 8)
  static constexpr int kItems = kMaxGate + K;
  static constexpr int kXsBytes = 64 * TileRow<H>::kPadded;
  static constexpr int kOffDown = S * kStage, kOffXs = kOffDown + K * kDownSlot, kOffPartial = kOffXs + kXsBytes;
  static constexpr int kOffRes = kOffPartial + kItems * CW * 16 * 4;
  static constexpr int kOffBars = kOffRes + K * 16 * 4;
  static constexpr int kOffInts = kOffBars + (2 * S + K) * 8;
  static constexpr int kBytes = kOffInts + 4 * (kItems + 1 + 2 * K);
  static constexpr int kThreads = 32 * (CW + 1);
};

// This block's items: gate tiles block, block + blocks, ... (slot-major), then the K slots of its
// down tile (if it has one). Producer and consumers walk the same list; unrouted slots are skipped.
template <class L>
struct Items {
  int gate, down;
  __device__ __forceinline__ Items(int block, int blocks, int k) {
    gate = block < L::kGateTiles ? (L::kGateTiles - 1 - block) / blocks + 1 : 0;
    down = block < L::kDownTiles ? k : 0;
  }
};

struct Args {
  const __nv_bfloat16* x;
  WeightArgs gu, dn;
  const int* ids;
  const float* tw;
  __nv_bfloat16* inter;
  __nv_bfloat16* y;
  unsigned* counters;  // [K] gate tiles done per slot, then the blocks' exit ticket
};

// Version 2 (version 1, commit b341836, put down's rows through the same ring and released
// a stage only after its last warp's reduction, store, fence and count: 27-31 us per layer):
//   * a warp releases a ring stage as soon as its own steps have read it; the partial sums live
//     per item, so the reduction and inter's store happen off the ring's path;
//   * down's rows of every slot are copied at the start into a region of their own (one mbarrier
//     per slot), behind the first S gate_up tiles: their bytes are in flight during gate_up;
//   * each warp loads its rows' FP32 factors when it starts an item, before its steps;
//   * a slot's count is published with red.release.gpu after a __syncwarp (no membar.gl).
template <class F, int H, int I, int E, int K, int CW, int S, bool DOWN_LATE, class GateEpi>
__global__ void __launch_bounds__(32 * (CW + 1), 1) ring_layer(Args a, unsigned long long* stamps) {
  using Lay = RingLayer<F, H, I, E, K, CW, S>;
  using GU = typename Lay::GU;
  using DN = typename Lay::DN;
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* xs = reinterpret_cast<uint4*>(smem + Lay::kOffXs);
  float* partial = reinterpret_cast<float*>(smem + Lay::kOffPartial);
  float* res = reinterpret_cast<float*>(smem + Lay::kOffRes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Lay::kOffBars);
  uint64_t* empty = full + S;
  uint64_t* down_full = empty + S;
  int* arrivals = reinterpret_cast<int*>(smem + Lay::kOffInts);
  int* down_done = arrivals + Lay::kItems;
  int* s_ids = down_done + 1;
  float* s_tw = reinterpret_cast<float*>(s_ids + K);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int block = blockIdx.x, blocks = gridDim.x;
  begin_after_previous_kernel();
  if (stamps && threadIdx.x == 0) stamps[block * 8] = probe::now_ns();
  const Items<Lay> items(block, blocks, K);
  if (items.gate > Lay::kMaxGate) __trap();  // the grid is too small for the partial buffers
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) { bar_init(full + s, 1); bar_init(empty + s, CW); }
    for (int j = 0; j < K; ++j) bar_init(down_full + j, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < Lay::kItems + 1; i += blockDim.x) arrivals[i] = 0;  // and down_done
  if (threadIdx.x < K) {
    const int e = __ldg(a.ids + threadIdx.x);
    s_ids[threadIdx.x] = static_cast<unsigned>(e) < static_cast<unsigned>(E) ? e : -1;
    s_tw[threadIdx.x] = __ldg(a.tw + threadIdx.x);
  }
  __syncthreads();
  int live_down = 0;
  for (int j = 0; j < items.down; ++j) live_down += s_ids[j] >= 0;
  const int h0 = block * 16;

  if (warp == 0) {  // the producer
    if (lane == 0) {
      auto issue_down = [&] {
        for (int j = 0; j < items.down; ++j) {
          const int e = s_ids[j];
          if (e < 0) continue;
          unsigned char* dst = smem + Lay::kOffDown + j * Lay::kDownSlot;
          bar_expect(down_full + j, DN::kStage);
          bulk(dst, static_cast<const char*>(a.dn.codes) + (static_cast<size_t>(e) * H + h0) * DN::kCodes, 16 * DN::kCodes, down_full + j);
          if constexpr (DN::kScales > 0)
            bulk(dst + 16 * DN::kCodes, static_cast<const char*>(a.dn.block_scales) + (static_cast<size_t>(e) * H + h0) * DN::kScales,
                 16 * DN::kScales, down_full + j);
        }
      };
      int r = 0;
      for (int n = 0; n < items.gate; ++n) {
        const int tile = block + n * blocks, slot = tile / (I / 8), e = s_ids[slot];
        if (e < 0) continue;
        const int st = r % S, round = r / S;
        if (!DOWN_LATE && r == S) issue_down();  // behind the first S tiles
        if (round > 0) bar_wait(empty + st, (round - 1) & 1);
        unsigned char* dst = smem + st * Lay::kStage;
        const int n0 = (tile % (I / 8)) * 8;
        bar_expect(full + st, GU::kStage);
        const char* codes = static_cast<const char*>(a.gu.codes) + (static_cast<size_t>(e) * 2 * I) * GU::kCodes;
        bulk(dst, codes + static_cast<size_t>(n0) * GU::kCodes, 8 * GU::kCodes, full + st);
        bulk(dst + 8 * GU::kCodes, codes + static_cast<size_t>(I + n0) * GU::kCodes, 8 * GU::kCodes, full + st);
        if constexpr (GU::kScales > 0) {
          const char* sc = static_cast<const char*>(a.gu.block_scales) + (static_cast<size_t>(e) * 2 * I) * GU::kScales;
          bulk(dst + 16 * GU::kCodes, sc + static_cast<size_t>(n0) * GU::kScales, 8 * GU::kScales, full + st);
          bulk(dst + 16 * GU::kCodes + 8 * GU::kScales, sc + static_cast<size_t>(I + n0) * GU::kScales, 8 * GU::kScales, full + st);
        }
        ++r;
      }
      if (DOWN_LATE || r <= S) issue_down();
    }
  } else {  // the consumers
    const int cw = warp - 1;
    {  // the token's x, staged as the mma reads it (consumers only)
      using Row = TileRow<H>;
      for (int p = threadIdx.x - 32; p < 4 * Row::kPadded; p += 32 * CW) {
        const int q = p % 4, c = p / 4;
        const uint4* word = reinterpret_cast<const uint4*>(a.x + 32 * c) + q;
        xs[q * Row::kPadded + c] = c < Row::kChunks ? pair_activation_word(__ldg(word)) : make_uint4(0u, 0u, 0u, 0u);
      }
      consumers_sync(CW);
    }
    if (stamps && threadIdx.x == 32) stamps[block * 8 + 1] = probe::now_ns();
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    int r = 0;
    for (int n = 0; n < items.gate + items.down; ++n) {
      const bool gate = n < items.gate;
      const int tile = block + n * blocks;
      const int slot = gate ? tile / (I / 8) : n - items.gate;
      const int e = s_ids[slot];
      if (e < 0) continue;
      const int steps = gate ? GU::kSteps : DN::kSteps;
      float* part = partial + (n * CW) * 16;
      float lo = 0.0f, hi = 0.0f, f_lo = 1.0f, f_hi = 1.0f;
      const int n0 = (tile % (I / 8)) * 8;
      if (gate) {
        if (t == 0) {
          f_lo = row_factor<F, 2 * I, 2>(a.gu, e, n0 + g, 0);
          f_hi = row_factor<F, 2 * I, 2>(a.gu, e, I + n0 + g, 1);
        }
        const int st = r % S, round = r / S;
        bar_wait(full + st, round & 1);
        if (stamps && r == 0 && threadIdx.x == 32) stamps[block * 8 + 4] = probe::now_ns();
        const unsigned char* stage = smem + st * Lay::kStage;
        constexpr int kPer = (GU::kSteps + CW - 1) / CW;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const int s = cw + i * CW;
          if (s < GU::kSteps) {
            const StepSums sums = stage_step<F, H>(stage, g, 4 * s + t).reduce(xs + 4 * s + t, TileRow<H>::kPadded);
            lo += sums.lo;
            hi += sums.hi;
          }
        }
        __syncwarp();
        if (lane == 0) bar_arrive(empty + st);
        ++r;
      } else {
        if (t == 0) {
          f_lo = apply_factor<F>(s_tw[slot], row_factor<F, H, 1>(a.dn, e, h0 + g, 0));
          f_hi = apply_factor<F>(s_tw[slot], row_factor<F, H, 1>(a.dn, e, h0 + 8 + g, 0));
        }
        if (cw < steps) {
          const unsigned char* rows = smem + Lay::kOffDown + slot * Lay::kDownSlot;
          bar_wait(down_full + slot, 0);
          while (ld_acquire(a.counters + slot) < static_cast<unsigned>(I / 8)) {}
          constexpr int kPer = (DN::kSteps + CW - 1) / CW;
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            const int s = cw + i * CW;
            if (s < DN::kSteps) {
              const int c = 4 * s + t;
              const uint4* src = reinterpret_cast<const uint4*>(a.inter + static_cast<size_t>(slot) * I + 32 * c);
              uint4 xw[4];
#pragma unroll
              for (int q = 0; q < 4; ++q) xw[q] = pair_activation_word(__ldcg(src + q));
              const StepSums sums = reduce_regs<F>(stage_step<F, I>(rows, g, c), xw);
              lo += sums.lo;
              hi += sums.hi;
            }
          }
        }
      }
      if (cw < steps && t == 0) { part[cw * 16 + g] = lo; part[cw * 16 + 8 + g] = hi; }
      __syncwarp();
      int last = 0;
      if (lane == 0) {
        __threadfence_block();
        last = atomicAdd(arrivals + n, 1) == CW - 1;
      }
      if (!__shfl_sync(kFullMask, last, 0)) continue;
      __threadfence_block();  // the item's last warp: add the partial sums in warp order
      const int used = steps < CW ? steps : CW;
      lo = 0.0f;
      hi = 0.0f;
      for (int w = 0; w < used; ++w) { lo += part[w * 16 + g]; hi += part[w * 16 + 8 + g]; }
      if (gate) {
        if (t == 0)
          store_bf16(a.inter + static_cast<size_t>(slot) * I + n0 + g,
                     GateEpi{}(apply_factor<F>(lo, f_lo) * kUnscale, apply_factor<F>(hi, f_hi) * kUnscale));
        __syncwarp();
        if (lane == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(a.counters + slot) : "memory");
      } else {
        if (t == 0) { res[slot * 16 + g] = f_lo * lo; res[slot * 16 + 8 + g] = f_hi * hi; }
        __syncwarp();
        int final_slot = 0;
        if (lane == 0) {
          __threadfence_block();
          final_slot = atomicAdd(down_done, 1) == live_down - 1;
        }
        if (__shfl_sync(kFullMask, final_slot, 0)) {
          __threadfence_block();
          if (t == 0) {
            float ylo = 0.0f, yhi = 0.0f;
            for (int j = 0; j < K; ++j) {
              if (s_ids[j] >= 0) { ylo += res[j * 16 + g]; yhi += res[j * 16 + 8 + g]; }
            }
            store_bf16(a.y + h0 + g, ylo * kUnscale);
            store_bf16(a.y + h0 + 8 + g, yhi * kUnscale);
          }
          if (stamps && lane == 0) stamps[block * 8 + 3] = probe::now_ns();
        }
      }
      if (gate && n == items.gate - 1 && stamps && lane == 0) stamps[block * 8 + 2] = probe::now_ns();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the last block out leaves the counters zero for the next launch
    __threadfence();
    if (atomicAdd(a.counters + K, 1u) == static_cast<unsigned>(blocks - 1)) {
      for (int j = 0; j <= K; ++j) a.counters[j] = 0u;
      __threadfence();
    }
  }
}

}  // namespace ring

using probe::NoDecodeNvfp4;

namespace {
constexpr int kLayers = 16;
using probe::float_to_bf16;
using probe::Layer;
using probe::rel_diff;

template <class F, int H, int I, int E, int K, int CW, int S, bool LATE = false>
void run_ring(const char* name, const std::vector<Layer>& layers, __nv_bfloat16* x, __nv_bfloat16* inter, __nv_bfloat16* y, unsigned* counters,
              cudaStream_t s, int reps, int sms, const std::vector<uint16_t>& inter_ref, const std::vector<uint16_t>& y_ref, int unrouted, double bytes) {
  using Lay = ring::RingLayer<F, H, I, E, K, CW, S>;
  auto kernel = ring::ring_layer<F, H, I, E, K, CW, S, LATE, probe::Silu>;
  if (Lay::kBytes > 232448) {
    std::printf("%-14s ring CW%-2d S%d: %d B of shared memory, over the 227 KB a block may have\n", name, CW, S, Lay::kBytes);
    return;
  }
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Lay::kBytes));
  cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, kernel));
  auto launch = [&](int l, __nv_bfloat16* out, unsigned long long* stamps) {
    const Layer& b = layers[l];
    ring::Args a{x + (size_t)l * H, mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                 b.ids, b.tw, inter, out, counters};
    probe::launch(false, kernel, dim3(sms), dim3(Lay::kThreads), Lay::kBytes, s, a, stamps);
  };
  CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
  launch(0, y, nullptr);
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> ib((size_t)K * I), yb(H);
  CK(cudaMemcpy(ib.data(), inter, ib.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(yb.data(), y, yb.size() * 2, cudaMemcpyDeviceToHost));
  if (reps == 0) {  // where the ring's inter and the pair's part (slot, neuron, ring, pair): the first eight
    int shown = 0;
    for (size_t i = 0; i < ib.size() && shown < 8; ++i) {
      const float u = probe::bf16_to_float(ib[i]), v = probe::bf16_to_float(inter_ref[i]);
      if (!(std::fabs(u - v) <= 1e-2f * std::fabs(v) + 1e-3f) && !(std::isnan(u) && std::isnan(v))) {
        std::printf("  [slot %zu neuron %zu: ring %g pair %g]", i / I, i % I, u, v);
        ++shown;
      }
    }
  }
  std::vector<uint16_t> ir(inter_ref);
  ib.erase(ib.begin(), ib.begin() + (size_t)unrouted * I); ir.erase(ir.begin(), ir.begin() + (size_t)unrouted * I);
  std::vector<unsigned> cnt(2 * K);
  CK(cudaMemcpy(cnt.data(), counters, cnt.size() * 4, cudaMemcpyDeviceToHost));
  unsigned left = 0;
  for (unsigned c : cnt) left |= c;
  std::printf("%-14s ring CW%-2d S%d%s (%d regs, %d B shared, %d B stage): inter diff %.2e  y diff %.2e  counters %s", name, CW, S, LATE ? " late" : "", fa.numRegs, Lay::kBytes,
              Lay::kStage, rel_diff(ib, ir), rel_diff(yb, y_ref), left == 0 ? "zero" : "NOT ZERO");
  if (reps > 0) {
    const float t = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) launch(l, x + (size_t)(l + 1) * H, nullptr); });
    std::printf("  layer %6.2f us (%.1f%% of 3.10 TB/s)", t, 100.0 * bytes / (t * 1e3) / 3100.0);
  }
  std::printf("\n");
  if (reps > 0 && unrouted == 0) {  // one launch traced per block
    unsigned long long* stamps; CK(cudaMalloc(&stamps, sms * 64)); CK(cudaMemset(stamps, 0, sms * 64));
    launch(5, y, stamps);
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> st((size_t)sms * 8);
    CK(cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    const char* names[5] = {"start", "x staged", "last gate tile reduced", "y stored", "first tile in"};
    std::printf("      trace");
    probe::print_trace(st, sms, 8, names, {0, 1, 4, 2, 3});
    cudaFree(stamps);
  }
}

// The catalogue-like tensor-core pair (gate_up W GU GS, down W DU DS) against the rings.
template <class F, int H, int I, int E, int K, int PGW, int PGU, int PGS, int PDW, int PDU, int PDS>
void compare(const char* name, std::mt19937& rng, int reps, int unrouted) {
  using namespace probe;
  std::vector<Layer> layers = make_layers<F, H, I, E, K>(kLayers, 1, unrouted, rng);
  std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = float_to_bf16(nd(rng));
  __nv_bfloat16 *x, *inter, *y;
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&inter, (size_t)K * I * 2)); CK(cudaMalloc(&y, (size_t)H * 2));
  unsigned* counters; CK(cudaMalloc(&counters, 2 * K * 4)); CK(cudaMemset(counters, 0, 2 * K * 4));
  cudaStream_t s = probe::stream_after_setup();
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const dim3 ng(mf::ceil_div(I, 8 * (PGW / PGS)), K), nd2(mf::ceil_div(H, 16 * (PDW / PDS)), 1);
  const size_t ngs = 64 * mf::TileRow<H>::kPadded + (PGS > 1 ? PGW * 64 : 0);
  const size_t nds = 64 * K * mf::TileRow<I>::kPadded + (PDS > 1 ? PDW * 64 : 0);
  auto gu = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; launch(false, tc_gate_up<F, H, I, E, K, mf::GateUpLayout::kStacked, PGW, PGU, PGS>, ng, dim3(32 * PGW), ngs, s, (const __nv_bfloat16*)(x + (size_t)l * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, 1); };
  auto dn = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; launch(false, tc_down<F, H, I, E, K, PDW, PDU, PDS>, nd2, dim3(32 * PDW), nds, s, (const __nv_bfloat16*)inter, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, 1); };
  CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
  gu(0, inter); dn(0, y);
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> inter_ref((size_t)K * I), y_ref(H);
  CK(cudaMemcpy(inter_ref.data(), inter, inter_ref.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y_ref.data(), y, y_ref.size() * 2, cudaMemcpyDeviceToHost));
  const double bytes = LayerBytes<F, H, I, E>::routed(K - unrouted);
  if (reps > 0) {
    const float t = graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { gu(l, inter); dn(l, x + (size_t)(l + 1) * H); } });
    std::printf("%-14s tensor-core pair gu(W%d U%d S%d) dn(W%d U%d S%d): layer %6.2f us (%.1f%% of 3.10 TB/s, %.1f MB)\n", name, PGW, PGU, PGS, PDW, PDU, PDS,
                t, 100.0 * bytes / (t * 1e3) / 3100.0, bytes / 1e6);
  }
  run_ring<F, H, I, E, K, 16, 8>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  run_ring<F, H, I, E, K, 16, 2, true>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  run_ring<F, H, I, E, K, 16, 3, true>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  run_ring<F, H, I, E, K, 16, 4, true>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  run_ring<F, H, I, E, K, 8, 2, true>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  run_ring<F, H, I, E, K, 8, 3, true>(name, layers, x, inter, y, counters, s, reps, sms, inter_ref, y_ref, unrouted, bytes);
  if (reps > 0) {
    const float t = graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { gu(l, inter); dn(l, x + (size_t)(l + 1) * H); } });
    std::printf("%-14s tensor-core pair again: layer %6.2f us\n", name, t);
  }
  free_layers(layers);
  cudaFree(x); cudaFree(inter); cudaFree(y); cudaFree(counters);
  cudaStreamDestroy(s);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261125);
  if (argc > 2 && std::strcmp(argv[2], "nodecode") == 0) {  // the pair and the rings with and without the decode
    compare<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4", rng, reps, 0);
    compare<NoDecodeNvfp4, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4 nodecode", rng, reps, 0);
    return 0;
  }
  if (argc > 2) {  // checks only, with the first mismatches shown: the all-routed NVFP4 layers
    for (int i = 0; i < 3; ++i) compare<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4 check", rng, 0, 0);
    compare<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32, 1, 32>("mxfp4 check", rng, 0, 0);
    return 0;
  }
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4 unrouted", rng, 0, 2);  // two slots unrouted: checks only
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4", rng, reps, 0);
  compare<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32, 1, 32>("mxfp4", rng, reps, 0);
  compare<mf::Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("int4_group128", rng, reps, 0);
  compare<mf::Int4ChannelWeights, 2048, 768, 128, 8, 8, 2, 4, 24, 1, 24>("int4_channel", rng, reps, 0);
  compare<mf::Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 24, 1, 24>("nvfp4 q3next", rng, reps, 0);
  return 0;
}
