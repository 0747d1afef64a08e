// Probe (not part of the toolkit): when the tensor-core 4-bit kernels ask for their weights, and
// where their time goes. streaming_probe.cu measured what the bytes alone need at M=1 (NVFP4,
// Qwen3-30B-A3B: gate_up's 14.2 MB and down's 7.1 MB), well under what the catalogue's kernels
// take (bench/NOTES.md, "When the 4-bit kernels ask for their weights"); this probe's first version (one_trip_probe.cu, commit
// 1504fed) found that asking for all of a warp's weights at once is slower for gate_up (the bytes
// arrive together and the decode follows them).
//
// Modes (findings in bench/NOTES.md, "When the 4-bit kernels ask for their weights"):
//   decode_pipeline_probe [reps]           rings: the header's steps with R groups of U steps in
//                                          flight (the next asked for before the current is reduced),
//                                          and gate_up warming L2 with its expert's down weights
//   decode_pipeline_probe reps orders      each warp's P consecutive steps in batches of D, or with D
//                                          in flight; loads before the staging; down's loads before
//                                          its griddepcontrol.wait (its gate_up waiting first)
//   decode_pipeline_probe reps prologue    the header's kernels with the expert ids, the activations
//                                          and the first group read together before the staging
//   decode_pipeline_probe reps direct      the catalogue's pairs with no staging: the activations
//                                          asked into L1 at the start, each step reading its chunk
//   decode_pipeline_probe reps early       the catalogue's pairs with down's first weights asked for
//                                          before its wait (gate_up waiting before it lets down launch)
// Since commit 0fe5912 ("A ring for down") the header's down_tensor_core is itself a ring of two
// groups, so the "header" rows of down are that: the recorded results of the default, orders and
// prologue modes came from the tree before it, those of direct and early from the tree after.
// Every variant's inter and y are checked against the header kernels' on the same random layer (the
// partial sums are added in another order: differences at the bf16 rounding). Times: 16 layers
// rotated in one graph with programmatic dependent launch (each kernel alone, weights from DRAM; the
// same with one layer's weights 16 times, so from L2; the pair), and one launch in the middle of a
// chain traced per block (%globaltimer, warp 0): entry, waited, staged, reduced, combined, stored.
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> decode_pipeline_probe.cu
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace mf {

// Where a traced block writes its stamps: [block][8].
struct Stamps {
  unsigned long long* at;
  __device__ __forceinline__ void mark(int k) const {
    if (at != nullptr && threadIdx.x == 0) at[(blockIdx.x + static_cast<size_t>(blockIdx.y) * gridDim.x) * 8 + k] = probe::now_ns();
  }
};

// A gate_up tile's end: the S warps' sums added in warp order, the row factors and the unscale
// applied, epi(gate, up) stored by lane 4g of the tile's first warp (`out`: the neuron's element).
template <class F, int H, int I, int S, class Epilogue>
__device__ __forceinline__ void finish_gate_up(float gate, float up, unsigned char* smem, const WeightArgs& w, int e, int gate_n, int up_n,
                                               bool mine, __nv_bfloat16* out, Epilogue epi, Stamps stamps) {
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(gate, up, reinterpret_cast<float*>(smem + 64 * TileRow<H>::kPadded))) return;
  }
  stamps.mark(4);
  if ((threadIdx.x & 3) == 0 && mine) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(w, e, gate_n, 0)) * kUnscale;
    up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(w, e, up_n, 1)) * kUnscale;
    store_bf16(out, epi(gate, up));
  }
  stamps.mark(5);
}

// A down tile's end: the S warps' sums added in warp order, unscaled, rows h_lo and h_hi of the
// token's y (`y_row`) stored by lane 4g of the tile's first warp.
template <class F, int H, int I, int K, int S, class Epilogue>
__device__ __forceinline__ void finish_down(float lo, float hi, unsigned char* smem, bool active, int h_lo, int h_hi, __nv_bfloat16* y_row,
                                            Epilogue epi, Stamps stamps) {
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem + 64 * K * TileRow<I>::kPadded))) return;
  }
  stamps.mark(4);
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if ((threadIdx.x & 3) == 0 && active) {
    if (h_lo < H) store_bf16(y_row + h_lo, epi(lo * kUnscale));
    if (h_hi < H) store_bf16(y_row + h_hi, epi(hi * kUnscale));
  }
  stamps.mark(5);
}

// The order in which a warp asks for its P steps and reduces them (see the file's comment).
template <int P, int D, bool PREFETCH, bool LOADS_FIRST>
struct StepOrder {
  static_assert(D >= 1 && D <= P, "1 <= steps in flight <= steps per warp");
  static_assert(PREFETCH || P % D == 0, "batches of D divide P");
  template <class Issue, class Stage, class Reduce>
  __device__ __forceinline__ static void run(Issue issue, Stage stage, Reduce reduce) {
    if constexpr (LOADS_FIRST) {
#pragma unroll
      for (int i = 0; i < D; ++i) issue(i);
      stage();
    } else {
      stage();
#pragma unroll
      for (int i = 0; i < D; ++i) issue(i);
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if constexpr (PREFETCH) {
        if (i + D < P) issue(i + D);
      } else {
        if (i > 0 && i % D == 0) {
#pragma unroll
          for (int j = 0; j < D; ++j) issue(i + j);
        }
      }
      reduce(i);
    }
  }
};

template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int S, class Order, int P, class Epilogue>
__device__ __forceinline__ void gate_up_probe(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, const int* __restrict__ topk_ids,
                                              __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi, Stamps stamps) {
  using Row = TileRow<H>;
  static_assert(P * S >= Row::kSteps, "S warps of P steps cover the tile");
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;
  const probe::GateUpLane<I, E, L, W, S> me(topk_ids, slot);
  const int t = me.t, part = me.part, e = me.e, gate_n = me.gate_n, up_n = me.up_n, neuron = me.neuron;
  const bool routed = me.routed, mine = me.mine;
  const GateUpTileRows<F, H, I> rows(w_gate_up, e < 0 ? 0 : e, gate_n, up_n);
  uint4* xs = reinterpret_cast<uint4*>(smem);
  TileStep<F> step[P];
  float gate = 0.0f, up = 0.0f;
  Order::run(
      [&](int i) {
        const int c = (part * P + i) * 4 + t;
        if (routed) rows.load(step[i], c, mine && c < Row::kChunks);
      },
      [&] {
        stage_tile_activations<1, H>(x + static_cast<size_t>(slot / K) * H, xs);
        stamps.mark(2);
      },
      [&](int i) {
        if (routed && part * P + i < Row::kSteps) {
          const StepSums sums = step[i].reduce(xs + (part * P + i) * 4 + t, Row::kPadded);
          gate += sums.lo;
          up += sums.hi;
        }
      });
  finish_gate_up<F, H, I, S>(gate, up, smem, w_gate_up, e, gate_n, up_n, mine, inter + static_cast<size_t>(slot) * I + neuron, epi, stamps);
}

// EARLY: the weights are asked for before griddepcontrol.wait (only the ids, written two kernels
// back, are read before it), then the wait, then the staging of inter.
template <class F, int H, int I, int E, int K, int W, int S, class Order, int P, bool EARLY, class Epilogue>
__device__ __forceinline__ void down_probe(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                           const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi,
                                           Stamps stamps) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  static_assert(P * S >= kSteps, "S warps of P steps cover the tile");
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  const probe::DownLane<H, E, K, W, S> me(topk_ids, topk_weights, token);
  const int t = me.t, part = me.part, lane_expert = me.lane_expert, h_lo = me.h_lo, h_hi = me.h_hi;
  const float routing_weight = me.routing_weight;
  const bool active = me.active;
  uint4* xs = reinterpret_cast<uint4*>(smem);
  DownTileGroup<F, H, I, E, K, 1> step[P];
  float lo = 0.0f, hi = 0.0f;
  Order::run(
      [&](int i) { step[i].load(w_down, part * P + i, lane_expert, routing_weight, h_lo, h_hi, t); },
      [&] {
        if constexpr (EARLY) {
          wait_for_previous_kernel();
          stamps.mark(1);
        }
        stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
        stamps.mark(2);
      },
      [&](int i) { step[i].reduce(lo, hi, xs, part * P + i, t); });
  finish_down<F, H, I, K, S>(lo, hi, smem, active, h_lo, h_hi, y + static_cast<size_t>(token) * H, epi, stamps);
}

// The activations of a tile read into registers (load) and written to shared memory in the mma's
// order (store, then a block barrier): stage_tile_activations in two halves, so that the reads
// can go out beside the ids' read instead of one L2 round trip after it.
template <int R, int L, int THREADS>
struct StagedRows {
  using Row = TileRow<L>;
  static constexpr int kWords = 4 * R * Row::kPadded;
  static constexpr int kPerThread = ceil_div(kWords, THREADS);
  uint4 v[kPerThread];

  __device__ __forceinline__ void load(const __nv_bfloat16* __restrict__ src) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int p = threadIdx.x + i * THREADS;
      const int q = p % 4, c = (p / 4) % Row::kPadded, r = p / (4 * Row::kPadded);
      v[i] = p < kWords && c < Row::kChunks ? __ldg(reinterpret_cast<const uint4*>(src + static_cast<size_t>(r) * L + 32 * c) + q)
                                            : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  __device__ __forceinline__ void store(uint4* dst) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int p = threadIdx.x + i * THREADS;
      const int q = p % 4, c = (p / 4) % Row::kPadded, r = p / (4 * Row::kPadded);
      if (p < kWords) dst[q * (R * Row::kPadded) + r * Row::kPadded + c] = pair_activation_word(v[i]);
    }
    __syncthreads();
  }
};

// The header's gate_up_tensor_core (same steps, same order of sums) with its prologue overlapped:
// the slot's expert id and x are read together, the first U steps are asked for, then x is staged.
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int U, int S, class Epilogue>
__device__ __forceinline__ void gate_up_overlapped(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, const int* __restrict__ topk_ids,
                                                   __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi, Stamps stamps) {
  using Row = TileRow<H>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;
  StagedRows<1, H, 32 * W> staged;
  staged.load(x + static_cast<size_t>(slot / K) * H);  // in flight beside the id's read
  const probe::GateUpLane<I, E, L, W, S> me(topk_ids, slot);
  const int t = me.t, part = me.part, e = me.e, gate_n = me.gate_n, up_n = me.up_n, neuron = me.neuron;
  const bool routed = me.routed, mine = me.mine;
  const GateUpTileRows<F, H, I> rows(w_gate_up, routed ? e : 0, gate_n, up_n);
  TileStep<F> step[U];
  auto load_group = [&](int s0) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = (s0 + i) * 4 + t;
      rows.load(step[i], c, mine && c < Row::kChunks);
    }
  };
  if (routed) load_group(part * U);
  uint4* xs = reinterpret_cast<uint4*>(smem);
  staged.store(xs);
  stamps.mark(2);
  float gate = 0.0f, up = 0.0f;
  if (routed) {
#pragma unroll 1
    for (int s0 = part * U; s0 < Row::kSteps; s0 += S * U) {
      if (s0 != part * U) load_group(s0);
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
  finish_gate_up<F, H, I, S>(gate, up, smem, w_gate_up, e, gate_n, up_n, mine, inter + static_cast<size_t>(slot) * I + neuron, epi, stamps);
}

// The header's down_tensor_core with its prologue overlapped: ids, routing weights and the k rows
// of inter are read together, the first U steps are asked for, then inter is staged.
template <class F, int H, int I, int E, int K, int W, int U, int S, class Epilogue>
__device__ __forceinline__ void down_overlapped(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                                const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens,
                                                Epilogue epi, Stamps stamps) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  StagedRows<K, I, 32 * W> staged;
  staged.load(inter + static_cast<size_t>(token) * K * I);  // in flight beside the routing's reads
  const probe::DownLane<H, E, K, W, S, true> me(topk_ids, topk_weights, token);
  const int t = me.t, part = me.part, lane_expert = me.lane_expert, h_lo = me.h_lo, h_hi = me.h_hi;
  const float routing_weight = me.routing_weight;
  const bool active = me.active;
  DownTileGroup<F, H, I, E, K, U> group;
  if (active) group.load(w_down, part * U, lane_expert, routing_weight, h_lo, h_hi, t);
  uint4* xs = reinterpret_cast<uint4*>(smem);
  staged.store(xs);
  stamps.mark(2);
  float lo = 0.0f, hi = 0.0f;
  if (active) {
#pragma unroll 1
    for (int s0 = part * U; s0 < kSteps; s0 += S * U) {
      if (s0 != part * U) group.load(w_down, s0, lane_expert, routing_weight, h_lo, h_hi, t);
      group.reduce(lo, hi, xs, s0, t);
    }
  }
  finish_down<F, H, I, K, S>(lo, hi, smem, active, h_lo, h_hi, y + static_cast<size_t>(token) * H, epi, stamps);
}

// The header's gate_up_tensor_core (staging first; group k of warp `part` is steps (k * S + part) * U
// .. + U - 1, so the S warps of a tile read whole runs of each row together) with a ring: D groups
// in flight, group k + D asked for before group k is reduced. PREFETCH_DOWN: each block, after its
// last group is asked for, warms L2 with its share (1 / gridDim.x) of its slot's expert's down
// weights (codes and K-block scales), for the down kernel that follows.
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int U, int S, int D, bool PREFETCH_DOWN, class Epilogue>
__device__ __forceinline__ void gate_up_ring(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, WeightArgs w_down,
                                             const int* __restrict__ topk_ids, __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi,
                                             Stamps stamps) {
  using Row = TileRow<H>;
  constexpr int kGroups = ceil_div(Row::kSteps, S * U);
  static_assert(D >= 1 && D <= kGroups, "1 <= groups in flight <= groups per warp");
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<1, H>(x + static_cast<size_t>(slot / K) * H, xs);
  stamps.mark(2);
  const probe::GateUpLane<I, E, L, W, S> me(topk_ids, slot);
  const int t = me.t, part = me.part, e = me.e, gate_n = me.gate_n, up_n = me.up_n, neuron = me.neuron;
  const bool routed = me.routed, mine = me.mine;
  float gate = 0.0f, up = 0.0f;
  if (routed) {
    const GateUpTileRows<F, H, I> rows(w_gate_up, e, gate_n, up_n);
    TileStep<F> ring[kGroups][U];
    auto issue = [&](int k) {
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = ((k * S + part) * U + i) * 4 + t;
        rows.load(ring[k][i], c, mine && c < Row::kChunks);
      }
    };
#pragma unroll
    for (int k = 0; k < D; ++k) issue(k);
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      if (k + D < kGroups) issue(k + D);
      if constexpr (PREFETCH_DOWN) {
        if (k + D == kGroups && threadIdx.x == 0) {
          constexpr unsigned kCodes = H * (I * F::kCodeBits / 8), kScales = H * (I / (F::kBlock ? F::kBlock : I)) * 1;
          const unsigned code_share = (kCodes / gridDim.x) & ~15u, scale_share = (kScales / gridDim.x) & ~15u;
          const char* codes = static_cast<const char*>(w_down.codes) + static_cast<size_t>(e) * kCodes + blockIdx.x * code_share;
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(codes), "r"(code_share) : "memory");
          if (F::kBlockScale == BlockScale::kE4M3 || F::kBlockScale == BlockScale::kE8M0) {
            const char* scales = static_cast<const char*>(w_down.block_scales) + static_cast<size_t>(e) * kScales + blockIdx.x * scale_share;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(scales), "r"(scale_share) : "memory");
          }
        }
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int s = (k * S + part) * U + i;
        if (s < Row::kSteps) {
          const StepSums sums = ring[k][i].reduce(xs + s * 4 + t, Row::kPadded);
          gate += sums.lo;
          up += sums.hi;
        }
      }
    }
  }
  finish_gate_up<F, H, I, S>(gate, up, smem, w_gate_up, e, gate_n, up_n, mine, inter + static_cast<size_t>(slot) * I + neuron, epi, stamps);
}

// The header's down_tensor_core (group k of warp `part`: steps (k * S + part) * U ..) with a ring
// of D groups in flight. EARLY: the ids, the routing weights and the first D groups are read before
// griddepcontrol.wait (its gate_up waits before it lets down launch, so the router has finished),
// then the wait, then the staging of inter.
template <class F, int H, int I, int E, int K, int W, int U, int S, int D, bool EARLY, class Epilogue>
__device__ __forceinline__ void down_ring(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                          const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi,
                                          Stamps stamps) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  constexpr int kGroups = ceil_div(kSteps, S * U);
  static_assert(D >= 1 && D <= kGroups, "1 <= groups in flight <= groups per warp");
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  uint4* xs = reinterpret_cast<uint4*>(smem);
  auto stage = [&] {
    stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
    stamps.mark(2);
  };
  if constexpr (!EARLY) stage();
  const probe::DownLane<H, E, K, W, S> me(topk_ids, topk_weights, token);
  const int t = me.t, part = me.part, lane_expert = me.lane_expert, h_lo = me.h_lo, h_hi = me.h_hi;
  const float routing_weight = me.routing_weight;
  const bool active = me.active;
  float lo = 0.0f, hi = 0.0f;
  DownTileGroup<F, H, I, E, K, U> ring[kGroups];
  if (active) {
#pragma unroll
    for (int k = 0; k < D; ++k) ring[k].load(w_down, (k * S + part) * U, lane_expert, routing_weight, h_lo, h_hi, t);
  }
  if constexpr (EARLY) {
    wait_for_previous_kernel();
    stamps.mark(1);
    stage();
  }
  if (active) {
#pragma unroll
    for (int k = 0; k < kGroups; ++k) {
      if (k + D < kGroups) ring[k + D].load(w_down, ((k + D) * S + part) * U, lane_expert, routing_weight, h_lo, h_hi, t);
      ring[k].reduce(lo, hi, xs, (k * S + part) * U, t);
    }
  }
  finish_down<F, H, I, K, S>(lo, hi, smem, active, h_lo, h_hi, y + static_cast<size_t>(token) * H, epi, stamps);
}

// x's chunk c (32 codes' activations) in the mma's order, read from global memory (L1) instead of
// a staged copy: the four 16-byte words of stage_tile_activations' [q][c], zeros past the row's end.
template <int L>
__device__ __forceinline__ void chunk_activations(const __nv_bfloat16* __restrict__ row, int c, uint4 (&xb)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    xb[q] = c < TileRow<L>::kChunks ? pair_activation_word(__ldg(reinterpret_cast<const uint4*>(row + 32 * c) + q)) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Asks for `bytes` of a row into L1 (16 bytes a thread), so that the warps' later reads hit.
__device__ __forceinline__ void prefetch_l1(const void* p, int bytes) {
  for (int i = 16 * threadIdx.x; i < bytes; i += 16 * blockDim.x) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const char*>(p) + i));
  }
}

// The header's gate_up_tensor_core (same groups, same order of sums) with no staging: x is asked
// into L1 at the start, each step reads its chunk of x itself, and the row factors are read
// beside the first weights instead of after the warps' combine.
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int U, int S, class Epilogue>
__device__ __forceinline__ void gate_up_direct(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, const int* __restrict__ topk_ids,
                                               __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi, Stamps stamps) {
  using Row = TileRow<H>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;
  const __nv_bfloat16* x_row = x + static_cast<size_t>(slot / K) * H;
  prefetch_l1(x_row, 2 * H);
  const probe::GateUpLane<I, E, L, W, S> me(topk_ids, slot);
  const int t = me.t, part = me.part, e = me.e, gate_n = me.gate_n, up_n = me.up_n, neuron = me.neuron;
  const bool routed = me.routed, mine = me.mine;
  float gate = 0.0f, up = 0.0f, gate_factor = 0.0f, up_factor = 0.0f;
  if (routed) {
    const GateUpTileRows<F, H, I> rows(w_gate_up, e, gate_n, up_n);
#pragma unroll 1
    for (int s0 = part * U; s0 < Row::kSteps; s0 += S * U) {
      TileStep<F> step[U];
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = (s0 + i) * 4 + t;
        rows.load(step[i], c, mine && c < Row::kChunks);
      }
      if (s0 == part * U && mine && t == 0) {
        gate_factor = row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0);
        up_factor = row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1);
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        if (s0 + i < Row::kSteps) {
          uint4 xb[4];
          chunk_activations<H>(x_row, (s0 + i) * 4 + t, xb);
          const StepSums sums = step[i].reduce(xb, 1);
          gate += sums.lo;
          up += sums.hi;
        }
      }
    }
  }
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(gate, up, reinterpret_cast<float*>(smem))) return;
  }
  stamps.mark(4);
  if (t == 0 && mine) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, gate_factor) * kUnscale;
    up = apply_factor<F>(up, up_factor) * kUnscale;
    store_bf16(inter + static_cast<size_t>(slot) * I + neuron, epi(gate, up));
  }
  stamps.mark(5);
}

// The header's down_tensor_core (two groups in turn, same order of sums) with no staging: the
// token's k rows of inter are asked into L1 at the start and each step reads its chunk itself.
template <class F, int H, int I, int E, int K, int W, int U, int S, class Epilogue>
__device__ __forceinline__ void down_direct(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                            const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi,
                                            Stamps stamps) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  const __nv_bfloat16* rows_x = inter + static_cast<size_t>(token) * K * I;
  prefetch_l1(rows_x, 2 * K * I);
  const probe::DownLane<H, E, K, W, S> me(topk_ids, topk_weights, token);
  const int t = me.t, part = me.part, lane_expert = me.lane_expert, h_lo = me.h_lo, h_hi = me.h_hi;
  const float routing_weight = me.routing_weight;
  const bool active = me.active;
  float lo = 0.0f, hi = 0.0f;
  auto reduce = [&](const DownTileGroup<F, H, I, E, K, U>& group, int s0) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (group.live[i]) {
        const int st = s0 + i, j = st / Row::kSteps;
        uint4 xb[4];
        chunk_activations<I>(rows_x + static_cast<size_t>(j) * I, (st - j * Row::kSteps) * 4 + t, xb);
        const StepSums sums = group.step[i].reduce(xb, 1);
        lo = fmaf(group.w_lo[i], sums.lo, lo);
        hi = fmaf(group.w_hi[i], sums.hi, hi);
      }
    }
  };
  DownTileGroup<F, H, I, E, K, U> a, b;
  int s = part * U;
  if (s < kSteps) a.load(w_down, s, lane_expert, routing_weight, h_lo, h_hi, t);
#pragma unroll 1
  while (s < kSteps) {
    const int next = s + S * U;
    if (next < kSteps) b.load(w_down, next, lane_expert, routing_weight, h_lo, h_hi, t);
    reduce(a, s);
    if (next >= kSteps) break;
    s = next + S * U;
    if (s < kSteps) a.load(w_down, s, lane_expert, routing_weight, h_lo, h_hi, t);
    reduce(b, next);
  }
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem))) return;
  }
  stamps.mark(4);
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if (t == 0 && active) {
    if (h_lo < H) store_bf16(y + static_cast<size_t>(token) * H + h_lo, epi(lo * kUnscale));
    if (h_hi < H) store_bf16(y + static_cast<size_t>(token) * H + h_hi, epi(hi * kUnscale));
  }
  stamps.mark(5);
}

}  // namespace mf

namespace {
constexpr int kLayers = 16;
using probe::Combine;
using probe::Layer;
using probe::Silu;

// A schedule of the probe: the kernel body (the header's, the probe's step orders, the header's
// with its prologue overlapped; the header's and the overlapped take U = D), W, S, P, D, and MB
// the launch bounds' blocks per SM.
enum Body { kHeader, kOrder, kOverlapped, kRing, kRingPrefetchDown, kDirect };
template <Body BODY, int W, int S, int P, int D, bool PREFETCH, bool LOADS_FIRST, int MB>
struct Cfg {
  static constexpr Body kBody = BODY;
  static constexpr int kW = W, kS = S, kP = P, kD = D, kMB = MB;
  using Order = mf::StepOrder<P, D, PREFETCH, LOADS_FIRST>;
};
// The header's schedule (W, U, S), and the same with the prologue overlapped.
template <int W, int U, int S>
using HeaderCfg = Cfg<kHeader, W, S, 1, U, true, false, 1>;
template <int W, int U, int S>
using OverlappedCfg = Cfg<kOverlapped, W, S, 1, U, true, false, 1>;
// The header's schedule with no staging (activations read by each step from L1).
template <int W, int U, int S, int MB = 1>
using DirectCfg = Cfg<kDirect, W, S, 1, U, true, false, MB>;
// The header's steps with a ring of R groups of U steps in flight (P = U); MB blocks per SM.
template <int W, int U, int S, int R, int MB = 1, Body B = kRing>
using RingCfg = Cfg<B, W, S, U, R, true, false, MB>;

template <class F, int H, int I, int E, int K, mf::GateUpLayout L, class C, bool WAIT_FIRST>
__global__ void __launch_bounds__(32 * C::kW, C::kMB) gate_up_kernel(const __nv_bfloat16* x, mf::WeightArgs w, mf::WeightArgs w_down, const int* ids,
                                                                     __nv_bfloat16* inter, int m, unsigned long long* stamps) {
  const mf::Stamps st{stamps};
  st.mark(0);
  if constexpr (WAIT_FIRST) {
    mf::wait_for_previous_kernel();
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
  }
  st.mark(1);
  if constexpr (C::kBody == kHeader) mf::gate_up_tensor_core<F, H, I, E, K, L, C::kW, C::kD, C::kS>(x, w, ids, inter, m, Silu{});
  else if constexpr (C::kBody == kOrder) mf::gate_up_probe<F, H, I, E, K, L, C::kW, C::kS, typename C::Order, C::kP>(x, w, ids, inter, m, Silu{}, st);
  else if constexpr (C::kBody == kOverlapped) mf::gate_up_overlapped<F, H, I, E, K, L, C::kW, C::kD, C::kS>(x, w, ids, inter, m, Silu{}, st);
  else if constexpr (C::kBody == kDirect) mf::gate_up_direct<F, H, I, E, K, L, C::kW, C::kD, C::kS>(x, w, ids, inter, m, Silu{}, st);
  else mf::gate_up_ring<F, H, I, E, K, L, C::kW, C::kP, C::kS, C::kD, C::kBody == kRingPrefetchDown>(x, w, w_down, ids, inter, m, Silu{}, st);
  if constexpr (C::kBody == kHeader) st.mark(5);
}
template <class F, int H, int I, int E, int K, class C, bool EARLY>
__global__ void __launch_bounds__(32 * C::kW, C::kMB) down_kernel(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids, const float* tw,
                                                                  __nv_bfloat16* y, int m, unsigned long long* stamps) {
  const mf::Stamps st{stamps};
  st.mark(0);
  if constexpr (EARLY) {
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
    st.mark(1);
  }
  if constexpr (C::kBody == kHeader) mf::down_tensor_core<F, H, I, E, K, C::kW, C::kD, C::kS>(inter, w, ids, tw, y, m, Combine{});
  else if constexpr (C::kBody == kOrder) mf::down_probe<F, H, I, E, K, C::kW, C::kS, typename C::Order, C::kP, EARLY>(inter, w, ids, tw, y, m, Combine{}, st);
  else if constexpr (C::kBody == kOverlapped) mf::down_overlapped<F, H, I, E, K, C::kW, C::kD, C::kS>(inter, w, ids, tw, y, m, Combine{}, st);
  else if constexpr (C::kBody == kDirect) mf::down_direct<F, H, I, E, K, C::kW, C::kD, C::kS>(inter, w, ids, tw, y, m, Combine{}, st);
  else mf::down_ring<F, H, I, E, K, C::kW, C::kP, C::kS, C::kD, EARLY>(inter, w, ids, tw, y, m, Combine{}, st);
  if constexpr (C::kBody == kHeader) st.mark(5);
}

template <class F, int H, int I, int E, int K, mf::GateUpLayout L>
struct Bench {
  std::vector<Layer> layers;
  __nv_bfloat16 *x, *inter, *inter_ref, *y, *y_ref, *sink;
  unsigned long long* stamps;
  cudaStream_t s;
  int reps, sms;
  std::vector<uint16_t> inter_host, y_host;
  double bytes_gu, bytes_dn;

  Bench(std::mt19937& rng, int reps_) : reps(reps_) {
    layers = probe::make_layers<F, H, I, E, K>(kLayers, 1, 0, rng);
    std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : xh) v = probe::float_to_bf16(nd(rng));
    CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&inter, (size_t)K * I * 2)); CK(cudaMalloc(&inter_ref, (size_t)K * I * 2));
    CK(cudaMalloc(&y, (size_t)H * 2)); CK(cudaMalloc(&y_ref, (size_t)H * 2)); CK(cudaMalloc(&sink, (size_t)(kLayers + 1) * H * 2));
    CK(cudaMalloc(&stamps, (size_t)K * I * 64));
    s = probe::stream_after_setup();
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    using B = probe::LayerBytes<F, H, I, E>;
    bytes_gu = (double)(B::kGateUpCodes + B::gate_up_scales()) / E * K;
    bytes_dn = (double)(B::kDownCodes + B::down_scales()) / E * K;
  }
  ~Bench() {
    probe::free_layers(layers);
    cudaFree(x); cudaFree(inter); cudaFree(inter_ref); cudaFree(y); cudaFree(y_ref); cudaFree(sink); cudaFree(stamps);
    cudaStreamDestroy(s);
  }

  template <class C>
  static dim3 gate_up_grid() { return dim3(mf::ceil_div(I, 8 * (C::kW / C::kS)), K); }
  template <class C>
  static dim3 down_grid() { return dim3(mf::ceil_div(H, 16 * (C::kW / C::kS)), 1); }

  // wl: the layer whose weights are read (l, or 0 for L2-resident chains); st: stamps or null
  template <class C, bool WAIT_FIRST = false>
  void gate_up(int l, int wl, __nv_bfloat16* out, unsigned long long* st = nullptr) {
    auto k = gate_up_kernel<F, H, I, E, K, L, C, WAIT_FIRST>;
    const size_t smem = 64 * mf::TileRow<H>::kPadded + (C::kS > 1 ? C::kW * 64 : 0);
    const Layer& b = layers[wl];
    probe::launch(false, k, gate_up_grid<C>(), dim3(32 * C::kW), smem, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                  (const int*)b.ids, out, 1, st);
  }
  template <class C, bool EARLY = false>
  void down(int l, int wl, const __nv_bfloat16* in, __nv_bfloat16* out, unsigned long long* st = nullptr) {
    auto k = down_kernel<F, H, I, E, K, C, EARLY>;
    const size_t smem = 64 * K * mf::TileRow<I>::kPadded + (C::kS > 1 ? C::kW * 64 : 0);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const Layer& b = layers[wl];
    (void)l;
    probe::launch(false, k, down_grid<C>(), dim3(32 * C::kW), smem, s, in, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                  (const int*)b.ids, (const float*)b.tw, out, 1, st);
  }

  std::vector<uint16_t> fetch(const __nv_bfloat16* p, size_t n) {
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> h(n);
    CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return h;
  }

  // The stamps of `blocks` traced blocks: for each mark, min / median / max over blocks in us from
  // the earliest mark 0.
  std::string trace(int blocks) {
    std::vector<unsigned long long> h((size_t)blocks * 8);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < blocks; ++b) if (h[b * 8]) t0 = std::min(t0, h[b * 8]);
    static const char* names[6] = {"entry", "waited", "staged", "reduced", "combined", "stored"};
    std::string out;
    char buf[96];
    for (int k = 0; k < 6; ++k) {
      std::vector<double> v;
      for (int b = 0; b < blocks; ++b) if (h[b * 8 + k]) v.push_back((h[b * 8 + k] - t0) * 1e-3);
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::snprintf(buf, sizeof buf, " %s %.2f/%.2f/%.2f", names[k], v.front(), v[v.size() / 2], v.back());
      out += buf;
    }
    return out;
  }

  template <class G, class D>
  void reference() {
    CK(cudaMemsetAsync(inter_ref, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y_ref, 0xff, (size_t)H * 2, s));
    gate_up<G>(3, 3, inter_ref);
    down<D>(3, 3, inter_ref, y_ref);
    inter_host = fetch(inter_ref, (size_t)K * I);
    y_host = fetch(y_ref, H);
  }

  template <class One>
  float chain(One one) { return probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) one(l); }); }

  template <class C>
  void check_gate_up(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s));
    gate_up<C>(3, 3, inter);
    const double d = probe::rel_diff(fetch(inter, (size_t)K * I), inter_host);
    const float dram = chain([&](int l) { gate_up<C>(l, l, inter); });
    const float l2 = chain([&](int l) { gate_up<C>(l, 0, inter); });
    const dim3 grid = gate_up_grid<C>();
    CK(cudaMemsetAsync(stamps, 0, (size_t)grid.x * grid.y * 64, s));
    chain([&](int l) { gate_up<C>(l, l, inter, l == 8 ? stamps : nullptr); });
    std::printf("  gate_up %-30s diff %.1e  %6.2f us (%4.0f GB/s), L2 %6.2f |%s\n", name, d, dram, bytes_gu / dram / 1e3, l2,
                trace(grid.x * grid.y).c_str());
  }
  template <class C, bool EARLY = false>
  void check_down(const char* name) {
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    down<C, EARLY>(3, 3, inter_ref, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float dram = chain([&](int l) { down<C, EARLY>(l, l, inter, y); });
    const float l2 = chain([&](int l) { down<C, EARLY>(l, 0, inter, y); });
    const dim3 grid = down_grid<C>();
    CK(cudaMemsetAsync(stamps, 0, (size_t)grid.x * grid.y * 64, s));
    chain([&](int l) { down<C, EARLY>(l, l, inter, y, l == 8 ? stamps : nullptr); });
    std::printf("  down    %-30s diff %.1e  %6.2f us (%4.0f GB/s), L2 %6.2f |%s\n", name, d, dram, bytes_dn / dram / 1e3, l2,
                trace(grid.x * grid.y).c_str());
  }
  template <class G, class D, bool EARLY = false>
  void check_pair(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    gate_up<G, EARLY>(3, 3, inter);
    down<D, EARLY>(3, 3, inter, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float t = chain([&](int l) { gate_up<G, EARLY>(l, l, inter); down<D, EARLY>(l, l, inter, sink + (size_t)(l + 1) * H); });
    std::printf("  pair    %-30s diff %.1e  %6.2f us (%4.0f GB/s, %.1f%% of 3.1 TB/s)\n", name, d, t, (bytes_gu + bytes_dn) / t / 1e3,
                100.0 * (bytes_gu + bytes_dn) / t / 3.1e6);
  }
};

// Cfg<header, W, S, P, D, prefetch, loads first, min blocks>
using GateUpCatalogue = HeaderCfg<8, 2, 4>;
using DownCatalogue = HeaderCfg<16, 2, 16>;

template <class F>
void qwen3_30b(const char* fmt, std::mt19937& rng, int reps) {
  using St = mf::GateUpLayout;
  Bench<F, 2048, 768, 128, 8, St::kStacked> b(rng, reps);
  std::printf("## %s, Qwen3-30B-A3B, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", fmt, b.bytes_gu / 1e6,
              b.bytes_dn / 1e6);
  b.template reference<GateUpCatalogue, DownCatalogue>();
  b.template check_gate_up<GateUpCatalogue>("header W8 U2 S4");
  b.template check_gate_up<Cfg<kOrder, 8, 4, 4, 2, false, false, 1>>("W8 S4 P4 batches of 2");
  b.template check_gate_up<Cfg<kOrder, 8, 4, 4, 2, false, true, 1>>("W8 S4 P4 batches of 2, first");
  b.template check_gate_up<Cfg<kOrder, 8, 4, 4, 2, true, true, 3>>("W8 S4 P4 prefetch 2, first");
  b.template check_gate_up<Cfg<kOrder, 8, 4, 4, 1, true, true, 3>>("W8 S4 P4 prefetch 1, first");
  b.template check_gate_up<Cfg<kOrder, 8, 4, 4, 3, true, true, 3>>("W8 S4 P4 prefetch 3, first");
  b.template check_gate_up<Cfg<kOrder, 4, 2, 8, 2, true, true, 6>>("W4 S2 P8 prefetch 2, first");
  b.template check_gate_up<Cfg<kOrder, 4, 2, 8, 3, true, true, 6>>("W4 S2 P8 prefetch 3, first");
  b.template check_gate_up<Cfg<kOrder, 8, 8, 2, 1, true, true, 3>>("W8 S8 P2 prefetch 1, first");
  b.template check_down<DownCatalogue>("header W16 U2 S16");
  b.template check_down<Cfg<kOrder, 16, 16, 3, 3, false, false, 1>>("W16 S16 P3 batch of 3");
  b.template check_down<Cfg<kOrder, 16, 16, 3, 3, false, true, 1>>("W16 S16 P3 batch of 3, first");
  b.template check_down<Cfg<kOrder, 16, 16, 3, 1, true, true, 1>>("W16 S16 P3 prefetch 1, first");
  b.template check_down<Cfg<kOrder, 16, 16, 3, 2, true, true, 1>>("W16 S16 P3 prefetch 2, first");
  b.template check_down<Cfg<kOrder, 24, 24, 2, 2, false, true, 1>>("W24 S24 P2 batch of 2, first");
  b.template check_down<Cfg<kOrder, 24, 24, 2, 1, true, true, 1>>("W24 S24 P2 prefetch 1, first");
  b.template check_down<Cfg<kOrder, 12, 12, 4, 2, true, true, 1>>("W12 S12 P4 prefetch 2, first");
  b.template check_down<Cfg<kOrder, 16, 16, 3, 3, false, true, 1>, true>("W16 S16 P3 batch of 3, early");
  b.template check_down<Cfg<kOrder, 24, 24, 2, 2, false, true, 1>, true>("W24 S24 P2 batch of 2, early");
  b.template check_pair<GateUpCatalogue, DownCatalogue>("catalogue");
  b.template check_pair<Cfg<kOrder, 8, 4, 4, 2, true, true, 3>, Cfg<kOrder, 24, 24, 2, 2, false, true, 1>>("g P4 prefetch 2, d W24");
  b.template check_pair<Cfg<kOrder, 8, 4, 4, 2, true, true, 3>, Cfg<kOrder, 16, 16, 3, 2, true, true, 1>>("g P4 prefetch 2, d W16 pf 2");
  b.template check_pair<GateUpCatalogue, Cfg<kOrder, 24, 24, 2, 2, false, true, 1>>("g header, d W24");
  b.template check_pair<Cfg<kOrder, 8, 4, 4, 2, true, true, 3>, Cfg<kOrder, 24, 24, 2, 2, false, true, 1>, true>("g P4 prefetch 2, d W24 early");
  b.template check_pair<Cfg<kOrder, 8, 4, 4, 2, true, true, 3>, Cfg<kOrder, 16, 16, 3, 3, false, true, 1>, true>("g P4 prefetch 2, d W16 early");
  b.template check_pair<GateUpCatalogue, DownCatalogue>("catalogue again");
}

// The header's pair (gate_up GW GU GS, down DW DU DS) against the same with overlapped prologues.
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW, int DU, int DS>
void prologue(const char* name, std::mt19937& rng, int reps) {
  Bench<F, H, I, E, K, mf::GateUpLayout::kStacked> b(rng, reps);
  std::printf("## %s, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", name, b.bytes_gu / 1e6, b.bytes_dn / 1e6);
  using GH = HeaderCfg<GW, GU, GS>;
  using DH = HeaderCfg<DW, DU, DS>;
  using GO = OverlappedCfg<GW, GU, GS>;
  using DO = OverlappedCfg<DW, DU, DS>;
  b.template reference<GH, DH>();
  b.template check_gate_up<GH>("header");
  b.template check_gate_up<GO>("overlapped");
  b.template check_down<DH>("header");
  b.template check_down<DO>("overlapped");
  b.template check_pair<GH, DH>("header");
  b.template check_pair<GO, DO>("overlapped");
  b.template check_pair<GH, DH>("header again");
  b.template check_pair<GO, DO>("overlapped again");
}

// The header's schedules against rings of U-step groups (R in flight), and gate_up warming L2 with
// down's weights.
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW, int DU, int DS>
void rings(const char* name, std::mt19937& rng, int reps) {
  Bench<F, H, I, E, K, mf::GateUpLayout::kStacked> b(rng, reps);
  std::printf("## %s, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", name, b.bytes_gu / 1e6, b.bytes_dn / 1e6);
  using GH = HeaderCfg<GW, GU, GS>;
  using DH = HeaderCfg<DW, DU, DS>;
  b.template reference<GH, DH>();
  b.template check_gate_up<GH>("header");
  b.template check_gate_up<RingCfg<8, 1, 4, 1, 3>>("ring W8 U1 S4 R1");
  b.template check_gate_up<RingCfg<8, 1, 4, 2, 3>>("ring W8 U1 S4 R2");
  b.template check_gate_up<RingCfg<8, 1, 4, 3, 3>>("ring W8 U1 S4 R3");
  b.template check_gate_up<RingCfg<4, 1, 4, 2, 6>>("ring W4 U1 S4 R2");
  b.template check_gate_up<RingCfg<4, 1, 2, 2, 6>>("ring W4 U1 S2 R2");
  b.template check_gate_up<RingCfg<4, 1, 2, 3, 6>>("ring W4 U1 S2 R3");
  b.template check_gate_up<RingCfg<4, 1, 2, 4, 6>>("ring W4 U1 S2 R4");
  b.template check_gate_up<RingCfg<8, 1, 4, 2, 3, kRingPrefetchDown>>("ring W8 U1 S4 R2, warms down");
  b.template check_down<DH>("header");
  b.template check_down<RingCfg<16, 1, 16, 1>>("ring W16 U1 S16 R1");
  b.template check_down<RingCfg<16, 1, 16, 2>>("ring W16 U1 S16 R2");
  b.template check_down<RingCfg<24, 1, 24, 1>>("ring W24 U1 S24 R1");
  b.template check_down<RingCfg<12, 1, 12, 2>>("ring W12 U1 S12 R2");
  b.template check_down<RingCfg<8, 1, 8, 2>>("ring W8 U1 S8 R2");
  b.template check_down<RingCfg<8, 1, 8, 3>>("ring W8 U1 S8 R3");
  b.template check_pair<GH, DH>("header");
  b.template check_pair<RingCfg<8, 1, 4, 2, 3>, DH>("g ring R2, d header");
  b.template check_pair<GH, RingCfg<16, 1, 16, 2>>("g header, d ring W16 R2");
  b.template check_pair<RingCfg<8, 1, 4, 2, 3>, RingCfg<16, 1, 16, 2>>("g ring R2, d ring W16 R2");
  b.template check_pair<RingCfg<8, 1, 4, 2, 3, kRingPrefetchDown>, DH>("g ring R2 warms down, d header");
  b.template check_pair<RingCfg<8, 1, 4, 2, 3, kRingPrefetchDown>, RingCfg<16, 1, 16, 2>>("g ring R2 warms down, d ring");
  b.template check_pair<RingCfg<4, 1, 2, 3, 6>, RingCfg<16, 1, 16, 2>>("g ring W4 S2 R3, d ring W16 R2");
  b.template check_pair<GH, DH>("header again");
}

}  // namespace

// The catalogue's pair against the same with no staging (activations read from L1 by each step).
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW, int DU, int DS>
void direct(const char* name, std::mt19937& rng, int reps) {
  Bench<F, H, I, E, K, mf::GateUpLayout::kStacked> b(rng, reps);
  std::printf("## %s, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", name, b.bytes_gu / 1e6, b.bytes_dn / 1e6);
  using GH = HeaderCfg<GW, GU, GS>;
  using DH = HeaderCfg<DW, DU, DS>;
  using GD = DirectCfg<GW, GU, GS, 24 / GW>;  // as many blocks per SM as the header's 80 registers allow
  using DD = DirectCfg<DW, DU, DS>;
  b.template reference<GH, DH>();
  b.template check_gate_up<GH>("header");
  b.template check_gate_up<GD>("direct");
  b.template check_down<DH>("header (ring)");
  b.template check_down<DD>("direct");
  b.template check_pair<GH, DH>("header");
  b.template check_pair<GD, DH>("g direct, d header");
  b.template check_pair<GH, DD>("g header, d direct");
  b.template check_pair<GD, DD>("direct");
  b.template check_pair<GH, DH>("header again");
  b.template check_pair<GD, DD>("direct again");
}

// The catalogue's pair against the same with down asking for its first weights before its wait
// (gate_up waiting before it lets down launch), and gate_up waiting first alone.
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW>
void early(const char* name, std::mt19937& rng, int reps) {
  Bench<F, H, I, E, K, mf::GateUpLayout::kStacked> b(rng, reps);
  std::printf("## %s, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", name, b.bytes_gu / 1e6, b.bytes_dn / 1e6);
  using GH = HeaderCfg<GW, GU, GS>;
  using DH = HeaderCfg<DW, 1, DW>;
  using DR = RingCfg<DW, 1, DW, 1>;
  b.template reference<GH, DH>();
  b.template check_down<DH>("header (ring)");
  b.template check_down<DR>("probe ring R1");
  b.template check_down<DR, true>("probe ring R1, early");
  b.template check_pair<GH, DH>("header");
  b.template check_pair<GH, DR>("g header, d probe ring");
  b.template check_pair<GH, DR, true>("g waits first, d early");
  b.template check_pair<GH, DH>("header again");
  b.template check_pair<GH, DR, true>("g waits first, d early again");
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261124);
  if (argc > 2 && std::strcmp(argv[2], "orders") == 0) {
    qwen3_30b<mf::Nvfp4Weights>("nvfp4", rng, reps);
    qwen3_30b<mf::Mxfp4Weights>("mxfp4", rng, reps);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "prologue") == 0) {
    prologue<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 16, 2, 16>("nvfp4, Qwen3-30B-A3B", rng, reps);
    prologue<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 16, 3, 16>("mxfp4, Qwen3-30B-A3B", rng, reps);
    prologue<mf::Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 16, 3, 16>("int4_group128, Qwen3-30B-A3B", rng, reps);
    prologue<mf::Int4ChannelWeights, 2048, 768, 128, 8, 8, 2, 4, 16, 3, 16>("int4_channel, Qwen3-30B-A3B", rng, reps);
    prologue<mf::Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 16, 3, 16>("nvfp4, Qwen3-Next-80B-A3B", rng, reps);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "early") == 0) {  // the catalogue's pairs since "A ring for down"
    early<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("nvfp4, Qwen3-30B-A3B", rng, reps);
    early<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32>("mxfp4, Qwen3-30B-A3B", rng, reps);
    early<mf::Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("int4_group128, Qwen3-30B-A3B", rng, reps);
    early<mf::Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 24>("nvfp4, Qwen3-Next-80B-A3B (tc gate_up)", rng, reps);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "direct") == 0) {  // the catalogue's pairs since "A ring for down"
    direct<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("nvfp4, Qwen3-30B-A3B", rng, reps);
    direct<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32, 1, 32>("mxfp4, Qwen3-30B-A3B", rng, reps);
    direct<mf::Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 32, 1, 32>("int4_group128, Qwen3-30B-A3B", rng, reps);
    direct<mf::Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 24, 1, 24>("nvfp4, Qwen3-Next-80B-A3B (tc gate_up)", rng, reps);
    return 0;
  }
  rings<mf::Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 16, 2, 16>("nvfp4, Qwen3-30B-A3B", rng, reps);
  rings<mf::Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 16, 3, 16>("mxfp4, Qwen3-30B-A3B", rng, reps);
  rings<mf::Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 16, 3, 16>("nvfp4, Qwen3-Next-80B-A3B", rng, reps);
  return 0;
}
