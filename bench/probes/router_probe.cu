// Probe (not part of the toolkit): where the decode router's time goes, and a faster top-k.
// The catalogue's router_gemv kernels of Qwen3-Next-80B-A3B (E 512, top-10, softmax first) and
// DeepSeek-V3 (E 256, top-8 of 4 of 8 groups, sigmoid + correction bias) are timed as
// `moeforge bench router` times them: one call per copy of the router weights (copies exceed the
// L2), all in one graph with programmatic dependent launch, per call = replay / copies. Then:
//   empty       the same grid doing nothing but the PDL wait (the launch floor)
//   scores      phase 1 and the ticket only (no epilogue)
//   epilogue    the epilogue alone, one warp on scores already in L2
//   trace       one launch with %globaltimer stamps per block
// and each epilogue's tail (the K-round top-k, reference::topk_rounds below; select_top; the
// softmax_topk form; the block's block_topk) checked against the one before it on random score
// rows with ties, NaNs, infinities and rows of one value, and timed alone (once to four times in a
// launch) and in the router; the cycles of select_top's stages. `router_probe REPS seed` instead
// times `bench router`'s two M=4096 GEMM shapes (the mode keeps the name they once had) under
// router_tiled warp-tile, k-group and cluster-split variants (each checked against the catalogue
// kernel's ids and weights).
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> router_probe.cu
#include "moeforge_device.cuh"
#include "probe_harness.cuh"

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>

namespace reference {

// The header's top-k before select_top (K dependent rounds for every selection, groups one after
// the other), kept here to check select_top against and to time.
template <int K, int G, int TG, int E>
__device__ __forceinline__ mf::TopK<K> topk_rounds(const mf::Row<E>& sel, const mf::Row<E>& val) {
  using mf::kFullMask;
  unsigned valid = 0u;
#pragma unroll
  for (int i = 0; i < mf::Row<E>::kPer; ++i) valid |= (mf::row_index(i) < E ? 1u : 0u) << i;
  if constexpr (G == 1) {
    return mf::select_top_rounds<K, E>(sel, val, valid);
  } else {
    constexpr int kSize = E / G;
    float group_score = 0.0f;
#pragma unroll 1
    for (int g = 0; g < G; ++g) {
      unsigned in_group = 0u;
#pragma unroll
      for (int i = 0; i < mf::Row<E>::kPer; ++i) in_group |= (mf::row_index(i) / kSize == g ? 1u : 0u) << i;
      const mf::TopK<2> two = mf::select_top_rounds<2, E>(sel, sel, valid & in_group);
      const float best2 = __shfl_sync(kFullMask, two.value, 0) + __shfl_sync(kFullMask, two.value, 1);
      if ((threadIdx.x & 31) == g) group_score = best2;
    }
    unsigned kept_groups = 0u;
    unsigned group_key = (threadIdx.x & 31) < G ? mf::rank_key(group_score) : 0u;
#pragma unroll 1
    for (int r = 0; r < TG; ++r) {
      const unsigned top = __reduce_max_sync(kFullMask, group_key);
      const unsigned code = __reduce_max_sync(kFullMask, group_key == top ? ~(threadIdx.x & 31) : 0u);
      const unsigned g = ~code;
      kept_groups |= 1u << g;
      if ((threadIdx.x & 31) == g) group_key = 0u;
    }
    unsigned allowed = 0u;
#pragma unroll
    for (int i = 0; i < mf::Row<E>::kPer; ++i) {
      const int e = mf::row_index(i);
      allowed |= (e < E && ((kept_groups >> (e / kSize)) & 1u) ? 1u : 0u) << i;
    }
    return mf::select_top_rounds<K, E>(sel, val, allowed);
  }
}

// The header's phase 2 before 2026-11-23 ("The grouped tail"): the token's last block to store
// its scores (an acquire-release end ticket) reads them all back through L2.
__device__ __forceinline__ bool last_block_of_token(int* counter) {
  __syncthreads();
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    int ticket;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(ticket) : "l"(counter) : "memory");
    is_last = ticket == static_cast<int>(gridDim.x) - 1;
    if (is_last) *counter = 0;
  }
  __syncthreads();
  return is_last;
}

template <int E>
__device__ __forceinline__ mf::Row<E> load_scores(const float* __restrict__ p) {
  mf::Row<E> r;
#pragma unroll
  for (int i = 0; i < mf::Row<E>::kPer; ++i) r.v[i] = mf::row_index(i) < E ? __ldcg(p + mf::row_index(i)) : 0.0f;
  return r;
}

// One token's router, end-ticket form: plain stores, then last_block_of_token.
template <int H, int E, int W, int LB, int U, int EPC, int SPLIT>
__device__ __forceinline__ bool router_scores(const __nv_bfloat16* x, const __nv_bfloat16* w, float* scores, int* counters) {
  const int first = blockIdx.x * EPC;
  mf::block_scores<H, EPC, W, LB, U, SPLIT>(w, reinterpret_cast<const char*>(x), first, mf::min_int(E, first + EPC),
                                            [&](int e, float v) { scores[e] = v; });
  return last_block_of_token(counters);
}

}  // namespace reference

namespace {

using mf::Row;
using mf::TopK;

// The scores published in place of the ticket (probe of 2026-11-23, "await"): every block stores
// its scores as the complement of their bits (a NaN canonicalised first, so a stored word is never
// 0), and the token's block that took the last *start* ticket (all the token's other blocks have
// begun, so none of them waits on it) reads its slice of the token's scores as they land, polling
// the words still 0, and clears them to 0 for the next launch. No end ticket, no reload after it,
// and each warp of the tail works on its slice as soon as that slice is complete.
namespace awaited {

__device__ unsigned long long* g_arrivals;  // traced runs: when each warp's scores were all in

// The row's PARTS partial sums (STRIDE apart; PARTS 1: the scores), every word requested before
// any is polled again, added in part order from 0.
template <int E, int PARTS = 1, int STRIDE = 0>
__device__ __forceinline__ Row<E> await_scores(float* p) {
  constexpr int P = Row<E>::kPer;
  unsigned got[PARTS][P];
#pragma unroll
  for (int q = 0; q < PARTS; ++q)
#pragma unroll
    for (int i = 0; i < P; ++i) got[q][i] = mf::row_index(i) < E ? mf::peek_score(p + q * STRIDE + mf::row_index(i)) : ~0u;
  bool waiting;
  do {
    waiting = false;
#pragma unroll
    for (int q = 0; q < PARTS; ++q)
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (got[q][i] == 0u) {
          got[q][i] = mf::peek_score(p + q * STRIDE + mf::row_index(i));
          waiting |= got[q][i] == 0u;
        }
      }
  } while (waiting);
  __syncwarp();
  if (g_arrivals != nullptr && (threadIdx.x & 31) == 0) g_arrivals[threadIdx.x >> 5] = probe::now_ns();
  Row<E> r;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    r.v[i] = 0.0f;
#pragma unroll
    for (int q = 0; q < PARTS; ++q) {
      if (mf::row_index(i) < E) {
        r.v[i] += __uint_as_float(~got[q][i]);
        asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p + q * STRIDE + mf::row_index(i)), "r"(0u) : "memory");
      }
    }
  }
  return r;
}

}  // namespace awaited


// The two routing rules by the epilogue's form: kRounds the K-round top-k (reference::), kWarp
// the header's select_top in one warp as the row's softmax is written, kRewrite one warp with
// Qwen3-Next's softmax/top-k/renormalize as softmax_topk, kBlock the tail over the block's warps
// (block_topk); the block form is called by every thread and returns in warp 0.
enum Tail { kRounds, kWarp, kRewrite, kBlock };

// A token's scores: read after the end ticket (load_scores), or awaited as they land.
// PARTS 0: after the end ticket; 1: awaited; > 1: awaited as PARTS partial sums STRIDE apart
// (the k-sliced router), added in part order from 0 as block_scores adds its warps' parts.
template <int S, int PARTS, int STRIDE>
__device__ __forceinline__ Row<S> scores_row(const float* p) {
  if constexpr (PARTS == 0) return reference::load_scores<S>(p);
  else return awaited::await_scores<S, PARTS, STRIDE>(const_cast<float*>(p));
}

// softmax_topk over the block (block_topk's warps and slices), the result in warp 0: tried for
// Qwen3-Next (no groups), slower than one warp's; the generated kernels use block_topk for
// grouped trees only.
template <int K, int S, int W>
__device__ __forceinline__ TopK<K> block_softmax_topk(const Row<S>& x, mf::BlockTopKScratch<K, W>& s) {
  const bool poisoned = __syncthreads_or(mf::poisons_softmax(x));
  const TopK<K> top = mf::block_topk<K, 1, 1, S, W>(x, x, s);
  return mf::softmax_best_first(poisoned ? mf::poisoned_selection<K>() : top);
}

template <int MODE>
struct Qwen3NextRule {
  static constexpr int kH = 2048, kE = 512, kK = 10, kW = 8, kU = 8, kEpc = 4, kSplit = 2;
  static constexpr bool kAllWarps = MODE == kBlock;
  template <int PARTS = 0>
  __device__ static TopK<kK> apply(const float* scores, const float*) {
    if constexpr (MODE == kBlock) {
      __shared__ mf::BlockTopKScratch<kK, kW> scratch;
      constexpr int S = kE / kW;
      return block_softmax_topk<kK, S, kW>(scores_row<S, PARTS, kE>(scores + (threadIdx.x >> 5) * S), scratch);
    } else {
      const Row<kE> v0 = scores_row<kE, PARTS, kE>(scores);
      __shared__ mf::TopKScratch scratch;
      if constexpr (MODE == kRewrite) return mf::softmax_topk<kK>(v0, &scratch);
      const Row<kE> v1 = mf::softmax(v0);
      if constexpr (MODE == kWarp) return mf::renormalize(mf::topk<kK, 1, 1>(v1, v1, &scratch));
      else return mf::renormalize(reference::topk_rounds<kK, 1, 1>(v1, v1));
    }
  }
};
template <int MODE>
struct DeepSeekRule {
  static constexpr int kH = 7168, kE = 256, kK = 8, kW = 8, kU = 8, kEpc = 2, kSplit = 4;
  static constexpr bool kAllWarps = MODE == kBlock;
  template <int PARTS = 0>
  __device__ static TopK<kK> apply(const float* scores, const float* bias) {
    TopK<kK> v4;
    if constexpr (MODE == kBlock) {
      __shared__ mf::BlockTopKScratch<kK, kW> scratch;
      constexpr int S = kE / kW;
      const int first = (threadIdx.x >> 5) * S;
      const Row<S> v1 = mf::sigmoid(scores_row<S, PARTS, kE>(scores + first));
      const Row<S> v3 = mf::add(v1, mf::load_row<S>(bias + first));
      v4 = mf::block_topk<kK, 8, 4, S, kW>(v3, v1, scratch);
    } else {
      const Row<kE> v1 = mf::sigmoid(scores_row<kE, PARTS, kE>(scores));
      const Row<kE> v3 = mf::add(v1, mf::load_row<kE>(bias));
      __shared__ mf::TopKScratch scratch;
      if constexpr (MODE == kRounds) v4 = reference::topk_rounds<kK, 8, 4>(v3, v1);
      else v4 = mf::topk<kK, 8, 4>(v3, v1, &scratch);
    }
    return mf::scale(mf::renormalize(v4), 2.5f);
  }
};

// The rule's epilogue on a token's scores: by warp 0, or by every warp (kBlock); stored by warp 0.
template <class R, int PARTS = 0>
__device__ __forceinline__ void tail(const float* scores, const float* bias, float* tw, int* ids) {
  if (!R::kAllWarps && threadIdx.x >= 32) return;
  const TopK<R::kK> t = R::template apply<PARTS>(scores, bias);
  if (threadIdx.x < 32) mf::store_topk(t, tw, ids);
}

// The generated router_gemv kernel's body, the rule as a parameter.
template <class R>
__global__ void __launch_bounds__(256, 1) router(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                              int* counters, float* tw, int* ids) {
  mf::begin_after_previous_kernel();
  if (!reference::router_scores<R::kH, R::kE, R::kW, 16, R::kU, R::kEpc, R::kSplit>(x, w, scores, counters)) return;
  tail<R>(scores, bias, tw, ids);
}

// The header's router (start ticket, scores awaited; mf::router_scores) with the rule's tail.
template <class R>
__global__ void __launch_bounds__(256, 1) router_await(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                                       int* counters, float* tw, int* ids) {
  mf::begin_after_previous_kernel();
  if (!mf::router_scores<R::kH, R::kE, R::kW, 16, R::kU, R::kEpc, R::kSplit>(x, w, scores, counters, 1)) return;
  tail<R, 1>(scores, bias, tw, ids);
}

// The k-sliced router: block b scores the W experts [(b % (E / W)) W, ...) over k span b / (E / W)
// of SPLIT (one warp per expert), so each block reads 1 / SPLIT of x instead of all of it (x read
// by every block slowed DeepSeek-V3's scores: bench/NOTES.md, "The grouped tail"); it publishes
// partial sums [SPLIT][E], and the tail
// awaits and adds them in part order (the same bits as block_scores' in-block sum).
template <class R>
__global__ void __launch_bounds__(256, 1) router_ksliced(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                                      int* counters, float* tw, int* ids, unsigned long long* stamps) {
  unsigned long long* mine = stamps + blockIdx.x * 3;
  mf::begin_after_previous_kernel();
  if (stamps != nullptr && threadIdx.x == 0) { mine[0] = probe::now_ns(); mine[2] = 0; }
  int ticket = 0;
  if (threadIdx.x == 0) ticket = atomicAdd(counters, 1);
  constexpr int kChunks = R::kH / 8;
  constexpr int kSpan = mf::ceil_div(mf::ceil_div(kChunks, R::kSplit), 32) * 32;
  constexpr int kBlocksPerPart = R::kE / R::kW;
  const int part = blockIdx.x / kBlocksPerPart;
  const int e = (blockIdx.x % kBlocksPerPart) * R::kW + (threadIdx.x >> 5);
  const int begin = part * kSpan;
  const float v = begin < kChunks ? mf::router_score_span<16, R::kU>(w + static_cast<size_t>(e) * R::kH, reinterpret_cast<const char*>(x), begin,
                                                                     mf::min_int(kChunks, begin + kSpan))
                                  : 0.0f;
  if ((threadIdx.x & 31) == 0) mf::publish_score(scores + part * R::kE + e, v);
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    is_last = ticket == static_cast<int>(gridDim.x) - 1;
    if (is_last) *counters = 0;
  }
  __syncthreads();
  if (stamps != nullptr && threadIdx.x == 0) mine[1] = probe::now_ns();
  if (!is_last) return;
  tail<R, R::kSplit>(scores, bias, tw, ids);
  if (stamps != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) mine[2] = probe::now_ns();
  }
}

// router_await with stamps per block: 0 after the wait, 1 its scores published; in the tail's
// block 2 the tail done (and g_arrivals: when each warp had its scores).
template <class R>
__global__ void __launch_bounds__(256, 1) router_await_traced(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                                           int* counters, float* tw, int* ids, unsigned long long* stamps) {
  unsigned long long* mine = stamps + blockIdx.x * 3;
  mf::begin_after_previous_kernel();
  if (threadIdx.x == 0) { mine[0] = probe::now_ns(); mine[2] = 0; }
  int ticket = 0;
  if (threadIdx.x == 0) ticket = atomicAdd(counters, 1);
  const int first = blockIdx.x * R::kEpc;
  mf::block_scores<R::kH, R::kEpc, R::kW, 16, R::kU, R::kSplit>(w, reinterpret_cast<const char*>(x), first, mf::min_int(R::kE, first + R::kEpc),
                                                                 [&](int e, float v) { mf::publish_score(scores + e, v); });
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    is_last = ticket == static_cast<int>(gridDim.x) - 1;
    if (is_last) *counters = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) mine[1] = probe::now_ns();
  if (!is_last) return;
  tail<R, 1>(scores, bias, tw, ids);
  __syncthreads();
  if (threadIdx.x == 0) mine[2] = probe::now_ns();
}

// A warp's part of expert e's score, added over the expert's SPLIT warps in warp order (as
// block_scores adds them) and stored by the first; every thread of the block calls it.
template <class R>
__device__ __forceinline__ void store_split_score(float acc, int e, float* scores) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  acc = mf::warp_sum(acc);
  __shared__ float parts[R::kW];
  if (lane == 0) parts[warp] = acc;
  __syncthreads();
  if (warp % R::kSplit == 0 && lane == 0) {
    float total = 0.0f;
#pragma unroll
    for (int p = 0; p < R::kSplit; ++p) total += parts[warp + p];
    scores[e] = total;
  }
}

// The router with its weight loads issued before the PDL wait (the weights are constants; x, the
// scores and the ticket are touched only after it): each warp's part of a row is one step of
// U loads per lane, held in registers across the wait. TRIGGER_FIRST: launch_dependents before
// the loads (the next launch may start at once, so launches pile up); otherwise after the wait
// (at most the next launch overlaps this one).
template <class R, bool TRIGGER_FIRST = true>
__global__ void __launch_bounds__(256, 1) router_early(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                                    int* counters, float* tw, int* ids) {
  constexpr int kChunks = R::kH / 8;
  constexpr int kSpan = mf::ceil_div(mf::ceil_div(kChunks, R::kSplit), 32) * 32;
  static_assert(kSpan <= 32 * R::kU, "one step of loads per warp");
  if constexpr (TRIGGER_FIRST) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % R::kSplit;
  const int e = blockIdx.x * R::kEpc + warp / R::kSplit;
  const int begin = part * kSpan, end = mf::min_int(kChunks, begin + kSpan);
  const char* row = reinterpret_cast<const char*>(w + static_cast<size_t>(e) * R::kH);
  mf::Lane<16> wv[R::kU];
#pragma unroll
  for (int i = 0; i < R::kU; ++i) {
    const int c = begin + i * 32 + lane;
    wv[i] = c < end ? mf::load_weights<16>(row + c * 16) : mf::zero_lane<16>();
  }
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if constexpr (!TRIGGER_FIRST) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const char* x_row = reinterpret_cast<const char*>(x);
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < R::kU; ++i) {
    const int c = begin + i * 32 + lane;
    const mf::Lane<16> av = c < end ? mf::load_activations<16>(x_row + c * 16) : mf::zero_lane<16>();
    acc = mf::dot_bf16<16>(wv[i], av, acc);
  }
  store_split_score<R>(acc, e, scores);
  if (!reference::last_block_of_token(counters)) return;
  tail<R>(scores, bias, tw, ids);
}

template <class R>
__global__ void __launch_bounds__(256, 1) scores_only(const __nv_bfloat16* x, const __nv_bfloat16* w, float* scores, int* counters) {
  mf::begin_after_previous_kernel();
  reference::router_scores<R::kH, R::kE, R::kW, 16, R::kU, R::kEpc, R::kSplit>(x, w, scores, counters);
}

// Pieces of the epilogue alone: 0 load and store the row, 1 with the rule's first map between
// (softmax or sigmoid), 2 with expf between.
template <class R, int PART>
__global__ void part_only(const float* scores, float* out) {
  mf::begin_after_previous_kernel();
  Row<R::kE> v = reference::load_scores<R::kE>(scores);
  if constexpr (PART == 1) {
    if constexpr (R::kE == 512) v = mf::softmax(v);
    else v = mf::sigmoid(v);
  } else if constexpr (PART == 2) {
#pragma unroll
    for (int i = 0; i < Row<R::kE>::kPer; ++i) v.v[i] = expf(v.v[i]);
  }
  mf::store_row(v, out);
}

__global__ void empty_kernel() { mf::begin_after_previous_kernel(); }

// rows: one score row per block (epilogue-only timing and the comparison of the tails)
template <class R>
__global__ void epilogue_only(const float* scores, const float* bias, float* tw, int* ids) {
  mf::begin_after_previous_kernel();
  tail<R>(scores + blockIdx.x * R::kE, bias, tw + blockIdx.x * R::kK, ids + blockIdx.x * R::kK);
}

// The tail REPS times in one launch over REPS rows, the same code each time (a loop): the second
// pass runs from a warm instruction cache.
template <class R, int REPS>
__global__ void epilogue_repeated(const float* scores, const float* bias, float* tw, int* ids) {
  mf::begin_after_previous_kernel();
#pragma unroll 1
  for (int r = 0; r < REPS; ++r) tail<R>(scores + r * R::kE, bias, tw + r * R::kK, ids + r * R::kK);
}

// The router with stamps: 0 start (after the wait), 1 scores stored (block), 2 ticket taken,
// and in the last block 3 scores loaded, 4 epilogue done; 5 the block began (before the wait).
template <class R>
__global__ void __launch_bounds__(256, 1) router_traced(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias, float* scores,
                                                     int* counters, float* tw, int* ids, unsigned long long* stamps) {
  unsigned long long* mine = stamps + blockIdx.x * 6;
  if (threadIdx.x == 0) mine[5] = probe::now_ns();
  mf::begin_after_previous_kernel();
  if (threadIdx.x == 0) mine[0] = probe::now_ns();
  const char* x_row = reinterpret_cast<const char*>(x);
  const int first = blockIdx.x * R::kEpc;
  mf::block_scores<R::kH, R::kEpc, R::kW, 16, R::kU, R::kSplit>(w, x_row, first, mf::min_int(R::kE, first + R::kEpc),
                                                                 [&](int e, float v) { scores[e] = v; });
  __syncthreads();
  if (threadIdx.x == 0) {
    mine[1] = probe::now_ns();
    mine[3] = mine[4] = 0;
  }
  const bool is_last = reference::last_block_of_token(counters);
  if (threadIdx.x == 0) mine[2] = probe::now_ns();
  if (!is_last) return;
  tail<R>(scores, bias, tw, ids);
  if (threadIdx.x == 0) mine[4] = probe::now_ns();
}

__device__ __forceinline__ long long clk() { long long t; asm volatile("mov.u64 %0, %clock64;" : "=l"(t)::"memory"); return t; }

// Cycles of one warp: 64 dependent redux.sync / shfl / ballot, and the pieces of the Qwen3-Next
// epilogue on one row (select_top_rounds and select_top at K 10 over 512, softmax as written and
// with one reciprocal).
// A value of each result kind for the timing below to wait on.
template <int K>
__device__ __forceinline__ float sample(const TopK<K>& t) { return t.value; }
template <int E>
__device__ __forceinline__ float sample(const Row<E>& r) { return r.v[0] + r.v[Row<E>::kPer - 1]; }
__device__ __forceinline__ float sample(float v) { return v; }

__global__ void latency(const float* row, long long* out, float* sink) {
  const int lane = threadIdx.x;
  __shared__ volatile float keep[32];
  __shared__ mf::TopKScratch scratch;
  // cycles of f() into out[slot], divided by `per` (its dependent steps); the result is stored
  // before the clock is read again, so the clock waits for it
  auto timed = [&](int slot, int per, auto f) {
    const long long t0 = clk();
    const auto v = f();
    keep[lane] = sample(v);
    const long long t1 = clk();
    if (lane == 0) out[slot] = (t1 - t0) / per;
    return v;
  };
  timed(0, 64, [&] { unsigned v = lane; for (int i = 0; i < 64; ++i) v = __reduce_max_sync(mf::kFullMask, v) + lane; return float(v); });
  timed(1, 64, [&] { float f = lane; for (int i = 0; i < 64; ++i) f = __shfl_sync(mf::kFullMask, f, (lane + 1) & 31) + 1.0f; return f; });
  timed(2, 64, [&] { unsigned v = lane; for (int i = 0; i < 64; ++i) v = __ballot_sync(mf::kFullMask, (v >> (lane & 7)) & 1u) + lane; return float(v); });
  const unsigned all = 0xffffu;
  const Row<512> r = mf::load_row<512>(row);
  keep[lane] = sample(r);
  const TopK<10> a = timed(3, 1, [&] { return mf::select_top_rounds<10, 512>(r, r, all); });
  const TopK<10> b = timed(4, 1, [&] { return mf::select_top<10, 512>(r, r, all, scratch); });
  const Row<512> sm = timed(5, 1, [&] { return mf::softmax(r); });
  const TopK<1> c = timed(6, 1, [&] { return mf::select_top_rounds<1, 512>(r, r, all); });
  const TopK<1> d = timed(7, 1, [&] { return mf::select_top<1, 512>(r, r, all, scratch); });
  // DeepSeek-V3's top-k (E 256, 8 groups, top 4 groups, K 8) and a plain K 8 of 128
  const Row<256> r2 = mf::load_row<256>(row);
  keep[lane] = sample(r2);
  const TopK<8> g0 = timed(8, 1, [&] { return reference::topk_rounds<8, 8, 4>(r2, r2); });
  const TopK<8> g1 = timed(9, 1, [&] { return mf::topk<8, 8, 4>(r2, r2, &scratch); });
  const Row<128> r3 = mf::load_row<128>(row);
  keep[lane] = sample(r3);
  const TopK<8> h0 = timed(10, 1, [&] { return mf::select_top_rounds<8, 128>(r3, r3, 0xfu); });
  const TopK<8> h1 = timed(11, 1, [&] { return mf::select_top<8, 128>(r3, r3, 0xfu, scratch); });
  const Row<256> sg = timed(12, 1, [&] { return mf::sigmoid(r2); });
  const float rk = timed(13, 1, [&] { return float(mf::lane_rank(__float_as_uint(r.v[0]), 32)); });
  sink[lane] = keep[lane] + a.value + b.value + c.value + d.value + sm.v[0] + g0.value + g1.value + h0.value + h1.value + sg.v[2] + rk;
}

// select_top<10, 512> with a clock stamp after each stage (a copy of the header's, for timing
// only; the stage's results are stored to shared memory before each stamp, so the clock waits for
// them), run 4 times over 4 rows in one launch: stamps of the last run.
__global__ void select_top_stages(const float* rows, long long* out, float* sink) {
  constexpr int K = 10, E = 512, P = 16;
  using mf::kFullMask;
  __shared__ mf::TopKScratch s;
  __shared__ volatile unsigned keep[32];
  const int lane = threadIdx.x;
  long long t[10];
  float acc = 0.0f;
#pragma unroll 1
  for (int rep = 0; rep < 4; ++rep) {
    const Row<E> sel = mf::load_row<E>(rows + rep * E);
    keep[lane] = __float_as_uint(sel.v[0] + sel.v[15]);
    t[0] = clk();
    unsigned key[P];
#pragma unroll
    for (int i = 0; i < P; ++i) key[i] = mf::rank_key(sel.v[i]);
    const unsigned best = mf::max_key<P>(key);
    keep[lane] = best;
    t[1] = clk();
    __syncwarp();
    s.best[lane] = best;
    s.key[lane] = 0u;
    __syncwarp();
    const int lanes_above = mf::shared_count_above(s.best, best);
    keep[lane] = lanes_above;
    t[2] = clk();
    const unsigned th = max(1u, __reduce_min_sync(kFullMask, lanes_above < K ? best : ~0u));
    keep[lane] = th;
    t[3] = clk();
    const unsigned below = (1u << lane) - 1u;
    int total = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const unsigned in = __ballot_sync(kFullMask, key[i] >= th);
      const int at = total + __popc(in & below);
      if (key[i] >= th && at < 32) {
        s.key[at] = key[i];
        s.id[at] = lane + 32 * i;
        s.value[at] = sel.v[i];
      }
      total += __popc(in);
    }
    keep[lane] = total;
    t[4] = clk();
    __syncwarp();
    keep[lane] = s.key[lane];
    t[5] = clk();
    const bool has = lane < total;
    const int rank = has ? mf::shared_rank(s.key, 32, s.key[lane], lane) : 32;
    keep[lane] = rank;
    t[6] = clk();
    __syncwarp();
    if (has && rank < K) s.best[rank] = static_cast<unsigned>(lane);
    __syncwarp();
    float v = 0.0f;
    if (lane < K && lane < total) v = s.value[s.best[lane]];
    keep[lane] = __float_as_uint(v);
    t[7] = clk();
    const TopK<K> sm = mf::softmax_best_first(TopK<K>{v, 0, 0u});
    keep[lane] = __float_as_uint(sm.value);
    t[8] = clk();
    acc += sm.value;
  }
  if (lane == 0)
    for (int i = 0; i < 8; ++i) out[i] = t[i + 1] - t[i];
  sink[lane] = acc;
}

// DeepSeek-V3's block tail with clock stamps in warp 0 after each stage (each stage's result is
// stored to shared memory before its stamp, so the clock waits for it), run 4 times over 4 rows in
// one launch: stamps of the last run. Stages 0 scores and bias loaded (L2), 1 sigmoid and add, then
// HEADER: 2 the header's block_topk, 3 renormalise and scale; otherwise a copy of the merge before
// "The grouped tail": 2 the group's two-best sum, 3 the warp's select_top, 4 its candidates stored
// and the block barrier, 5 the kept groups, 6 warp 0's candidates gathered, 7 their select_top, 8
// ids mapped back, renormalised and scaled.
template <bool HEADER>
__global__ void __launch_bounds__(256, 1) deepseek_tail_stages(const float* rows, const float* bias, long long* out, float* sink) {
  constexpr int K = 8, G = 8, TG = 4, S = 32, W = 8;
  constexpr int kStages = HEADER ? 4 : 9;
  using mf::kFullMask;
  __shared__ mf::BlockTopKScratch<K, W> s;
  __shared__ volatile unsigned keep[256];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long t[kStages + 1];
  float acc = 0.0f;
  auto stamp = [&](int i, unsigned v) { keep[threadIdx.x] = v; t[i] = clk(); };
#pragma unroll 1
  for (int rep = 0; rep < 4; ++rep) {
    t[0] = clk();
    const Row<S> v0 = reference::load_scores<S>(rows + rep * 256 + warp * S);
    const Row<S> b = mf::load_row<S>(bias + warp * S);
    stamp(1, __float_as_uint(v0.v[0] + b.v[0]));
    const Row<S> v1 = mf::sigmoid(v0);
    const Row<S> sel = mf::add(v1, b);
    stamp(2, __float_as_uint(sel.v[0]));
    if constexpr (HEADER) {
      TopK<K> top = mf::block_topk<K, G, TG, S, W>(sel, v1, s);
      stamp(3, top.key);
      top = mf::scale(mf::renormalize(top), 2.5f);
      stamp(4, __float_as_uint(top.value) + top.id);
      acc += top.value;
    } else {
      const float score = mf::warp_best_two_sum<1>(sel.v);
      if (lane == 0) s.group_key[warp] = mf::rank_key(score);
      stamp(3, __float_as_uint(score));
      const TopK<K> mine = mf::select_top<K, S>(sel, v1, 1u, s.warp[warp]);
      stamp(4, mine.key);
      if (lane < K) {
        s.key[warp * K + lane] = mine.key;
        s.id[warp * K + lane] = mine.id >= 0 ? warp * S + mine.id : -1;
        s.value[warp * K + lane] = mine.value;
      }
      __syncthreads();
      stamp(5, 0u);
      if (warp == 0) {
        const unsigned group_key = lane < G ? s.group_key[lane] : 0u;
        const int group_rank = mf::shared_rank(s.group_key, G, group_key, lane);
        const unsigned kept = __ballot_sync(kFullMask, lane < G && group_rank < TG);
        stamp(6, kept);
        constexpr int N = TG * K;
        Row<N> csel, cval;
        const int slot = __fns(kept, 0, lane / K + 1) * K + lane % K;
        const bool has = s.id[slot] >= 0;
        csel.v[0] = has ? mf::key_value(s.key[slot]) : 0.0f;
        cval.v[0] = has ? s.value[slot] : 0.0f;
        stamp(7, __float_as_uint(csel.v[0] + cval.v[0]));
        TopK<K> top = mf::select_top<K, N>(csel, cval, has ? 1u : 0u, s.warp[0]);
        stamp(8, top.key);
        if (top.id >= 0) top.id = s.id[__fns(kept, 0, top.id / K + 1) * K + top.id % K];
        top = mf::scale(mf::renormalize(top), 2.5f);
        stamp(9, __float_as_uint(top.value) + top.id);
        acc += top.value;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int i = 0; i < kStages; ++i) out[i] = t[i + 1] - t[i];
  sink[threadIdx.x] = acc;
}

// Scores for the top-k checks, by row kind: normal; quarter steps and integers (ties); integers
// with NaN and infinities; one value for the whole row (every key ties: the fallback); mostly
// NaN; normal x 30 (peaked softmax, tiny quotients); -inf but for a few.
float test_score(int row, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  switch (row % 8) {
    case 0: return nd(rng);
    case 1: return std::floor(nd(rng) * 4.0f) / 4.0f;
    case 2: return std::floor(nd(rng));
    case 3: {
      const uint32_t u = rng();
      return u % 97 == 0 ? NAN : u % 193 == 0 ? ((u >> 9) & 1 ? INFINITY : -INFINITY) : std::floor(nd(rng));
    }
    case 4: return 0.75f;
    case 5: return rng() % 10 == 0 ? nd(rng) : NAN;
    case 6: return 30.0f * nd(rng);
    default: return rng() % 50 == 0 ? nd(rng) : -INFINITY;
  }
}

// A top-k alone over raw scores (sel = val), the header's or the K-round one, one row per block.
template <int E, int K, int G, int TG, bool ROUNDS>
__global__ void topk_only(const float* scores, float* tw, int* ids) {
  const Row<E> v = reference::load_scores<E>(scores + blockIdx.x * E);
  TopK<K> t;
  if constexpr (ROUNDS) t = reference::topk_rounds<K, G, TG>(v, v);
  else {
    __shared__ mf::TopKScratch scratch;
    t = mf::topk<K, G, TG>(v, v, &scratch);
  }
  mf::store_topk(t, tw + blockIdx.x * K, ids + blockIdx.x * K);
}

// select_top against the K-round top-k on `rows` rows of every kind: counts of differing ids and
// weights (NaN equals NaN).
template <int E, int K, int G, int TG>
void check_topk(std::mt19937& rng) {
  const int rows = 4096;
  std::vector<float> sh((size_t)rows * E);
  for (int r = 0; r < rows; ++r)
    for (int e = 0; e < E; ++e) sh[(size_t)r * E + e] = test_score(r, rng);
  float *sd, *w[2]; int* id[2];
  CK(cudaMalloc(&sd, sh.size() * 4)); CK(cudaMemcpy(sd, sh.data(), sh.size() * 4, cudaMemcpyHostToDevice));
  for (int k = 0; k < 2; ++k) { CK(cudaMalloc(&w[k], rows * K * 4)); CK(cudaMalloc(&id[k], rows * K * 4)); }
  topk_only<E, K, G, TG, true><<<rows, 32>>>(sd, w[0], id[0]);
  topk_only<E, K, G, TG, false><<<rows, 32>>>(sd, w[1], id[1]);
  CK(cudaDeviceSynchronize());
  std::vector<uint32_t> a(rows * K), b(rows * K), ia(rows * K), ib(rows * K);
  CK(cudaMemcpy(a.data(), w[0], a.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), w[1], b.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ia.data(), id[0], ia.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(ib.data(), id[1], ib.size() * 4, cudaMemcpyDeviceToHost));
  size_t id_diff = 0, w_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    id_diff += ia[i] != ib[i];
    const bool both_nan = (a[i] & 0x7fffffffu) > 0x7f800000u && (b[i] & 0x7fffffffu) > 0x7f800000u;
    w_diff += a[i] != b[i] && !both_nan;
  }
  std::printf("top-k E=%d K=%d groups %d/%d: select_top vs K rounds on %d rows: %zu ids differ, %zu weights differ\n", E, K, TG, G, rows, id_diff, w_diff);
  cudaFree(sd);
  for (int k = 0; k < 2; ++k) { cudaFree(w[k]); cudaFree(id[k]); }
}

uint16_t float_to_bf16(float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }

// The prefill router (router_tiled) on the GEMM shapes' rule, softmax(topk(acc, 4)), split over a
// cluster of C blocks along K (C = 1: as the catalogue's kernels). Rule == false: the scores phase
// alone (each row's first score is stored), to time the tail by difference.
template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C, bool Rule>
__device__ __forceinline__ void tiled_body(const __nv_bfloat16* x, const __nv_bfloat16* w, float* tw, int* ids, int num_tokens) {
  using Tile = mf::RouterTile<H, E, BM, TM, W, BK, S, KG, C>;
  extern __shared__ __align__(128) unsigned char smem[];
  const float* scores = mf::router_tile_scores<H, E, BM, TM, W, BK, S, KG, C>(x, w, smem, num_tokens);
  if constexpr (!Rule) {
    for (int r = threadIdx.x; r < Tile::kOwnRows; r += 32 * W) {
      const int token = mf::router_tile_token<BM, C>(r);
      if (token < num_tokens) tw[static_cast<size_t>(token) * 4] = scores[r * Tile::kScoreStride];
    }
  } else {
#pragma unroll
    for (int i = 0; i < Tile::kOwnRows / W; ++i) {
      const int tile_row = (threadIdx.x >> 5) + i * W;
      const int token = mf::router_tile_token<BM, C>(tile_row);
      const Row<E> v0 = mf::load_row_shared<E>(scores + tile_row * Tile::kScoreStride);
      const TopK<4> v1 = mf::softmax(mf::topk<4, 1, 1>(v0, v0));
      if (token < num_tokens) mf::store_topk(v1, tw + static_cast<size_t>(token) * 4, ids + static_cast<size_t>(token) * 4);
    }
  }
}

template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C, bool Rule = true>
__global__ void __launch_bounds__(32 * W) tiled(const __nv_bfloat16* x, const __nv_bfloat16* w, float* tw, int* ids, int num_tokens) {
  mf::begin_after_previous_kernel();
  tiled_body<H, E, BM, TM, W, BK, S, KG, C, Rule>(x, w, tw, ids, num_tokens);
}

// The same with the cluster size compiled in (__cluster_dims__, as the generated kernels declare it).
template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(32 * W) tiled_static(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                                                               float* tw, int* ids, int num_tokens) {
  tiled_body<H, E, BM, TM, W, BK, S, KG, C, true>(x, w, tw, ids, num_tokens);
}

struct SeedResult { std::vector<int> ids; std::vector<float> w; float us; };

// Static: the kernel with __cluster_dims__, launched without a cluster attribute. Pad: bytes of
// dynamic shared memory asked beyond the tile's (enough makes one block per multiprocessor).
template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C, bool Rule = true, bool Static = false, int Pad = 0>
SeedResult seed_run(const __nv_bfloat16* x, const __nv_bfloat16* w, int copies, int m, int reps, cudaStream_t s) {
  using Tile = mf::RouterTile<H, E, BM, TM, W, BK, S, KG, C>;
  auto kernel = Static ? tiled_static<H, E, BM, TM, W, BK, S, KG, C> : tiled<H, E, BM, TM, W, BK, S, KG, C, Rule>;
  constexpr int kLaunchCluster = Static ? 1 : C;
  constexpr size_t kSmem = Tile::kSharedBytes + Pad;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
  float* tw; int* ids;
  CK(cudaMalloc(&tw, (size_t)m * 16)); CK(cudaMalloc(&ids, (size_t)m * 16));
  CK(cudaMemset(tw, 0xff, (size_t)m * 16)); CK(cudaMemset(ids, 0xff, (size_t)m * 16));
  const dim3 grid(mf::ceil_div(m, BM) * C), block(32 * W);
  probe::launch_as(probe::LaunchAs{false, false, kLaunchCluster}, kernel, grid, block, kSmem, s, x, w, tw, ids, m);
  CK(cudaStreamSynchronize(s));
  SeedResult r{std::vector<int>((size_t)m * 4), std::vector<float>((size_t)m * 4), 0.0f};
  CK(cudaMemcpy(r.ids.data(), ids, r.ids.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.w.data(), tw, r.w.size() * 4, cudaMemcpyDeviceToHost));
  if (reps > 0) {
    r.us = probe::graph_us(s, reps, copies, [&] {
      for (int c = 0; c < copies; ++c)
        probe::launch_as(probe::LaunchAs{false, false, kLaunchCluster}, kernel, grid, block, kSmem, s, x, w + (size_t)c * E * H, tw, ids, m);
    });
  }
  cudaFree(tw); cudaFree(ids);
  return r;
}

// The two largest GEMM shapes: the catalogue's router_tiled against splits over clusters, each
// launched plainly after its predecessor as `bench router` does (with PDL the parked blocks of the
// next launches hold these kernels' 70-96 KB of shared memory and about double their time:
// bench/NOTES.md, "The M=4096 GEMM shapes: split along K over a cluster").
template <int E>
void seed_shapes(int reps, std::mt19937& rng, const char* catalogue_name) {
  constexpr int H = 2048, M = 4096;
  const int copies = 256;
  __nv_bfloat16* w; CK(cudaMalloc(&w, (size_t)E * H * 2 * copies));
  probe::fill_dev(w, (size_t)E * H * 2 * copies, 31, 0x807f807fu, 0x3c803c80u);
  std::vector<uint16_t> xh((size_t)M * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = float_to_bf16(nd(rng));
  __nv_bfloat16* x; CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  cudaStream_t s = probe::stream_after_setup();
  const SeedResult base = E == 64 ? seed_run<H, E, 32, 16, 8, 64, 4, 1, 1>(x, w, copies, M, reps, s) : seed_run<H, E, 32, 16, 16, 64, 3, 1, 1>(x, w, copies, M, reps, s);
  std::printf("seed (%d, %d, %d), k=4: catalogue router_tiled (%s) %.2f us\n", M, E, H, catalogue_name, base.us);
  auto report = [&](const char* what, const SeedResult& r) {
    size_t ids = 0; double dw = 0;
    for (size_t i = 0; i < r.ids.size(); ++i) { ids += r.ids[i] != base.ids[i]; dw = std::max(dw, (double)std::fabs(r.w[i] - base.w[i])); }
    std::printf("  %s: %.2f us | ids differing from the catalogue kernel's %zu of %zu, largest weight difference %.3g\n", what, r.us, ids, r.ids.size(), dw);
  };
  // (tokens per block, tokens per warp, warps, k tile, stages, k groups, cluster split)
#define V(BM, TM, W, BK, S, KG, C) report("(" #BM ", " #TM ", " #W ", " #BK ", " #S ", " #KG ", " #C ")", seed_run<H, E, BM, TM, W, BK, S, KG, C>(x, w, copies, M, reps, s))
  V(64, 16, 16, 64, 4, 1, 2);
  if constexpr (E == 64) {
    V(64, 32, 16, 64, 4, 4, 2);
    V(64, 32, 16, 64, 6, 4, 2);  // deeper pipelines: more of each block's bytes in flight
    V(64, 32, 16, 64, 8, 4, 2);
    V(64, 32, 16, 64, 3, 4, 2);
    V(128, 32, 16, 64, 4, 4, 4);
    report("(64, 32, 16, 64, 4, 4, 2), __cluster_dims__", seed_run<H, E, 64, 32, 16, 64, 4, 4, 2, true, true>(x, w, copies, M, reps, s));
    report("(64, 32, 16, 64, 4, 4, 2), __cluster_dims__, one block per SM",
           seed_run<H, E, 64, 32, 16, 64, 4, 4, 2, true, true, 48 * 1024>(x, w, copies, M, reps, s));
    report("(64, 32, 16, 64, 4, 4, 2), one block per SM", seed_run<H, E, 64, 32, 16, 64, 4, 4, 2, true, false, 48 * 1024>(x, w, copies, M, reps, s));
  } else {
    V(64, 32, 16, 64, 4, 2, 2);
    V(64, 32, 16, 64, 3, 2, 2);
    V(64, 32, 16, 64, 6, 2, 2);  // deeper pipelines: more of each block's bytes in flight
    V(64, 32, 16, 64, 8, 2, 2);
    V(64, 32, 16, 64, 6, 4, 2);
    V(128, 32, 16, 64, 4, 2, 4);
  }
#undef V
  std::printf("  scores alone (no rule): (64, 32, 16, 64, 4, %d, 2) %.2f us\n", E == 64 ? 4 : 2,
              (E == 64 ? seed_run<H, E, 64, 32, 16, 64, 4, 4, 2, false>(x, w, copies, M, reps, s)
                       : seed_run<H, E, 64, 32, 16, 64, 4, 2, 2, false>(x, w, copies, M, reps, s)).us);
  cudaFree(w); cudaFree(x); cudaStreamDestroy(s);
}


// A decode router's inputs: `copies` copies of random router weights (bf16 +-[2^-6, 2^-5): scores
// of about unit size), one random token per copy, and a correction bias.
template <class R>
struct RouterInputs {
  __nv_bfloat16 *w, *x;
  float* bias;
  RouterInputs(int copies, std::mt19937& rng) {
    const size_t wbytes = (size_t)R::kE * R::kH * 2;
    CK(cudaMalloc(&w, wbytes * copies));
    probe::fill_dev(w, wbytes * copies, 17, 0x807f807fu, 0x3c803c80u);
    std::vector<uint16_t> xh((size_t)copies * R::kH);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : xh) v = float_to_bf16(nd(rng));
    CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
    std::vector<float> bh(R::kE);
    for (auto& v : bh) v = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
    CK(cudaMalloc(&bias, R::kE * 4)); CK(cudaMemcpy(bias, bh.data(), R::kE * 4, cudaMemcpyHostToDevice));
  }
};

template <template <int> class Rule>
void run(const char* name, int copies, int reps, std::mt19937& rng) {
  using R = Rule<kRounds>;
  const RouterInputs<R> in(copies, rng);
  __nv_bfloat16 *w = in.w, *x = in.x;
  float* bias = in.bias;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float *scores, *tw; int *counters, *ids;
  CK(cudaMalloc(&scores, R::kE * 4)); CK(cudaMalloc(&counters, 4)); CK(cudaMemset(counters, 0, 4));
  CK(cudaMalloc(&tw, 4096 * R::kK * 4)); CK(cudaMalloc(&ids, 4096 * R::kK * 4));
  cudaStream_t s = probe::stream_after_setup();
  const dim3 grid(R::kE / R::kEpc), block(32 * R::kW);
  auto wc = [&](int c) { return w + (size_t)c * R::kE * R::kH; };
  auto threads = [](auto rule) { return dim3(decltype(rule)::kAllWarps ? 32 * R::kW : 32); };

  // The tails on 4096 random rows of every kind (ties, NaN, inf): each against the one before it
  // (the rewrite against select_top also on the normal rows alone: FP32 softmax ties apart).
  {
    const int rows = 4096;
    std::vector<float> sh((size_t)rows * R::kE);
    for (int r = 0; r < rows; ++r)
      for (int e = 0; e < R::kE; ++e) sh[(size_t)r * R::kE + e] = test_score(r, rng);
    float* sd; CK(cudaMalloc(&sd, sh.size() * 4)); CK(cudaMemcpy(sd, sh.data(), sh.size() * 4, cudaMemcpyHostToDevice));
    std::vector<uint32_t> wt[4], it[4];
    float* tw2; int* ids2; CK(cudaMalloc(&tw2, rows * R::kK * 4)); CK(cudaMalloc(&ids2, rows * R::kK * 4));
    auto fetch = [&](int m) {
      CK(cudaDeviceSynchronize());
      wt[m].resize(rows * R::kK); it[m].resize(rows * R::kK);
      CK(cudaMemcpy(wt[m].data(), tw2, rows * R::kK * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(it[m].data(), ids2, rows * R::kK * 4, cudaMemcpyDeviceToHost));
    };
    epilogue_only<Rule<kRounds>><<<rows, threads(Rule<kRounds>{})>>>(sd, bias, tw2, ids2); fetch(kRounds);
    epilogue_only<Rule<kWarp>><<<rows, threads(Rule<kWarp>{})>>>(sd, bias, tw2, ids2); fetch(kWarp);
    epilogue_only<Rule<kRewrite>><<<rows, threads(Rule<kRewrite>{})>>>(sd, bias, tw2, ids2); fetch(kRewrite);
    epilogue_only<Rule<kBlock>><<<rows, threads(Rule<kBlock>{})>>>(sd, bias, tw2, ids2); fetch(kBlock);
    auto compare = [&](int a, int b, const char* what, bool normal_only) {
      size_t id_diff = 0, w_diff = 0, n = 0; double rel = 0;
      for (size_t i = 0; i < wt[a].size(); ++i) {
        if (normal_only && (i / R::kK) % 8 != 0) continue;
        ++n;
        id_diff += it[a][i] != it[b][i];
        const uint32_t x = wt[a][i], y = wt[b][i];
        const bool both_nan = (x & 0x7fffffffu) > 0x7f800000u && (y & 0x7fffffffu) > 0x7f800000u;
        w_diff += x != y && !both_nan;
        float fx, fy; std::memcpy(&fx, &x, 4); std::memcpy(&fy, &y, 4);
        if (!both_nan && fx != fy) rel = std::max(rel, (double)std::fabs(fx - fy) / std::max(1e-30, (double)std::fabs(fx)));
      }
      std::printf("%s: %s: %zu of %zu ids differ, %zu weights differ (largest relative difference %.2g)\n", name, what, id_diff, n, w_diff, rel);
    };
    compare(kRounds, kWarp, "select_top vs the K rounds, every row kind", false);
    compare(kWarp, kRewrite, "softmax_topk vs softmax then select_top, every row kind", false);
    compare(kWarp, kRewrite, "softmax_topk vs softmax then select_top, normal rows", true);
    compare(kRewrite, kBlock, "the block's tail vs one warp's, every row kind", false);
    if (reps == 0) return;  // checks only (under compute-sanitizer)
    // each tail on 100 different rows of normal scores, one block per call (as in the chain)
    auto rows_us = [&](auto rule) {
      using Q = decltype(rule);
      return probe::graph_us(s, reps, 100, [&] { for (int c = 0; c < 100; ++c) probe::launch(false, epilogue_only<Q>, dim3(1), threads(rule), 0, s, (const float*)(sd + (size_t)8 * c * R::kE), (const float*)bias, tw, ids); });
    };
    const float t_rows[4] = {rows_us(Rule<kRounds>{}), rows_us(Rule<kWarp>{}), rows_us(Rule<kRewrite>{}), rows_us(Rule<kBlock>{})};
    const float t_parts[3] = {
      probe::graph_us(s, reps, 100, [&] { for (int c = 0; c < 100; ++c) probe::launch(false, part_only<R, 0>, dim3(1), dim3(32), 0, s, (const float*)(sd + (size_t)8 * c * R::kE), tw); }),
      probe::graph_us(s, reps, 100, [&] { for (int c = 0; c < 100; ++c) probe::launch(false, part_only<R, 1>, dim3(1), dim3(32), 0, s, (const float*)(sd + (size_t)8 * c * R::kE), tw); }),
      probe::graph_us(s, reps, 100, [&] { for (int c = 0; c < 100; ++c) probe::launch(false, part_only<R, 2>, dim3(1), dim3(32), 0, s, (const float*)(sd + (size_t)8 * c * R::kE), tw); })};
    std::printf("%s: epilogue alone on normal random rows: rounds %.2f, select_top %.2f, softmax_topk %.2f, block tail %.2f | load+store %.2f, load+sigmoid/softmax+store %.2f, load+exp+store %.2f\n",
                name, t_rows[0], t_rows[1], t_rows[2], t_rows[3], t_parts[0], t_parts[1], t_parts[2]);
    cudaFree(sd); cudaFree(tw2); cudaFree(ids2);
  }

  auto chain = [&](auto kernel_launch) { return probe::graph_us(s, reps, copies, [&] { for (int c = 0; c < copies; ++c) kernel_launch(c); }); };
  auto router_us = [&](auto kernel) {
    return chain([&](int c) { probe::launch(false, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH), (const __nv_bfloat16*)wc(c), (const float*)bias, scores, counters, tw, ids); });
  };
  const float t_router[4] = {router_us(router<Rule<kRounds>>), router_us(router<Rule<kWarp>>), router_us(router<Rule<kRewrite>>), router_us(router<Rule<kBlock>>)};
  const float t_early = router_us(router_early<Rule<kBlock>>);
  {  // the routing of each router form equals the rounds' on one copy
    auto routing = [&](auto kernel) {
      std::vector<int> a(R::kK);
      probe::launch(false, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x + 3 * R::kH), (const __nv_bfloat16*)wc(3), (const float*)bias, scores, counters, tw, ids);
      CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(a.data(), ids, R::kK * 4, cudaMemcpyDeviceToHost));
      return a;
    };
    const std::vector<int> base = routing(router<Rule<kRounds>>);
    const bool same = routing(router<Rule<kWarp>>) == base && routing(router<Rule<kRewrite>>) == base &&
                      routing(router<Rule<kBlock>>) == base && routing(router_early<Rule<kBlock>>) == base;
    std::printf("%s: the routers' ids on one token %s\n", name, same ? "all equal" : "DIFFER");
  }
  const float t_empty = chain([&](int) { probe::launch(false, empty_kernel, grid, block, 0, s); });
  const float t_scores = chain([&](int c) { probe::launch(false, scores_only<R>, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH), (const __nv_bfloat16*)wc(c), scores, counters); });
  auto epi_us = [&](auto rule) {
    using Q = decltype(rule);
    return chain([&](int) { probe::launch(false, epilogue_only<Q>, dim3(1), threads(rule), 0, s, (const float*)scores, (const float*)bias, tw, ids); });
  };
  const float t_epi[4] = {epi_us(Rule<kRounds>{}), epi_us(Rule<kWarp>{}), epi_us(Rule<kRewrite>{}), epi_us(Rule<kBlock>{})};
  const float t_empty1 = chain([&](int) { probe::launch(false, empty_kernel, dim3(1), dim3(32), 0, s); });
  {  // instruction fetch: the tail once and twice per launch (a loop), rows already in L2
    std::vector<float> rh(4 * R::kE);
    for (auto& v : rh) v = nd(rng);
    float* rows4; CK(cudaMalloc(&rows4, rh.size() * 4)); CK(cudaMemcpy(rows4, rh.data(), rh.size() * 4, cudaMemcpyHostToDevice));
    auto rep_us = [&](auto rule, auto reps_c) {
      using Q = decltype(rule);
      return chain([&](int) { probe::launch(false, epilogue_repeated<Q, decltype(reps_c)::value>, dim3(1), threads(rule), 0, s, (const float*)rows4, (const float*)bias, tw, ids); });
    };
    using One = std::integral_constant<int, 1>;
    using Two = std::integral_constant<int, 2>;
    using Four = std::integral_constant<int, 4>;
    std::printf("%s: the tail 1 / 2 / 4 times per launch (us): select_top %.2f / %.2f / %.2f | softmax_topk %.2f / %.2f / %.2f | block tail %.2f / %.2f / %.2f\n", name,
                rep_us(Rule<kWarp>{}, One{}), rep_us(Rule<kWarp>{}, Two{}), rep_us(Rule<kWarp>{}, Four{}),
                rep_us(Rule<kRewrite>{}, One{}), rep_us(Rule<kRewrite>{}, Two{}), rep_us(Rule<kRewrite>{}, Four{}),
                rep_us(Rule<kBlock>{}, One{}), rep_us(Rule<kBlock>{}, Two{}), rep_us(Rule<kBlock>{}, Four{}));
    cudaFree(rows4);
  }
  std::printf("%s (%d copies, us per call): router: rounds %.2f | select_top %.2f | softmax_topk %.2f | block tail %.2f | block tail, weights before the wait %.2f\n",
              name, copies, t_router[0], t_router[1], t_router[2], t_router[3], t_early);
  std::printf("%s: empty grid %.2f | scores+ticket %.2f | epilogue alone: rounds %.2f, select_top %.2f, softmax_topk %.2f, block tail %.2f | empty 1 warp %.2f\n",
              name, t_empty, t_scores, t_epi[0], t_epi[1], t_epi[2], t_epi[3], t_empty1);

  {
    std::vector<float> sc(R::kE);
    CK(cudaMemcpy(sc.data(), scores, R::kE * 4, cudaMemcpyDeviceToHost));
    float lo = INFINITY, hi = -INFINITY; int nan = 0;
    for (float v : sc) { if (std::isnan(v)) ++nan; else { lo = std::min(lo, v); hi = std::max(hi, v); } }
    std::printf("  router scores of the last call: min %g max %g, %d NaN\n", lo, hi, nan);
  }
  // one traced launch per tail after a warm-up chain, weights of a cold copy
  unsigned long long* st; CK(cudaMalloc(&st, grid.x * 6 * 8)); CK(cudaMemset(st, 0, grid.x * 6 * 8));
  auto traced = [&](auto kernel, const char* what) {
    for (int c = 0; c < copies - 1; ++c) probe::launch(false, router<Rule<kWarp>>, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH), (const __nv_bfloat16*)wc(c), (const float*)bias, scores, counters, tw, ids);
    probe::launch(false, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x), (const __nv_bfloat16*)wc(copies - 1), (const float*)bias, scores, counters, tw, ids, st);
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> h(grid.x * 6);
    CK(cudaMemcpy(h.data(), st, h.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull, s1 = 0, s2 = 0, l4 = 0, s0max = 0;
    for (unsigned b = 0; b < grid.x; ++b) t0 = std::min(t0, h[b * 6]);
    for (unsigned b = 0; b < grid.x; ++b) {
      s0max = std::max(s0max, h[b * 6] - t0); s1 = std::max(s1, h[b * 6 + 1] - t0); s2 = std::max(s2, h[b * 6 + 2] - t0);
      if (h[b * 6 + 4]) l4 = h[b * 6 + 4] - t0;
    }
    std::printf("  trace (%s), ns after the first block's start: last block start %llu, last scores stored %llu, "
                "last ticket %llu, epilogue done %llu\n", what, s0max, s1, s2, l4);
  };
  traced(router_traced<Rule<kRounds>>, "K rounds");
  traced(router_traced<Rule<kWarp>>, "select_top");
  traced(router_traced<Rule<kBlock>>, "block tail");
  // two traced launches back to back: when the second's blocks begin and pass the wait, against
  // the first's last ticket and epilogue
  {
    unsigned long long* st2; CK(cudaMalloc(&st2, grid.x * 6 * 8 * 2)); CK(cudaMemset(st2, 0, grid.x * 6 * 8 * 2));
    for (int c = 0; c < copies - 2; ++c) probe::launch(false, router<Rule<kRounds>>, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH), (const __nv_bfloat16*)wc(c), (const float*)bias, scores, counters, tw, ids);
    for (int k = 0; k < 2; ++k)
      probe::launch(false, router_traced<Rule<kRounds>>, grid, block, 0, s, (const __nv_bfloat16*)(x), (const __nv_bfloat16*)wc(copies - 2 + k), (const float*)bias, scores, counters, tw, ids, st2 + k * grid.x * 6);
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> h(grid.x * 12);
    CK(cudaMemcpy(h.data(), st2, h.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long a_begin = ~0ull, a_end = 0, b_begin = ~0ull, b_pass = ~0ull, b_last_pass = 0;
    for (unsigned b = 0; b < grid.x; ++b) {
      const unsigned long long* A = &h[b * 6];
      const unsigned long long* B = &h[(grid.x + b) * 6];
      a_begin = std::min(a_begin, A[0]); a_end = std::max({a_end, A[2], A[4]});
      b_begin = std::min(b_begin, B[5]); b_pass = std::min(b_pass, B[0]); b_last_pass = std::max(b_last_pass, B[0]);
    }
    std::printf("  two launches, ns after the first's first pass: its end %lld | second: first block began %lld, "
                "first passed the wait %lld, last passed %lld\n", (long long)(a_end - a_begin), (long long)(b_begin - a_begin),
                (long long)(b_pass - a_begin), (long long)(b_last_pass - a_begin));
    cudaFree(st2);
  }
  cudaFree(st); cudaFree(w); cudaFree(x); cudaFree(bias); cudaFree(scores); cudaFree(counters); cudaFree(tw); cudaFree(ids);
  cudaStreamDestroy(s);
}

// A stand-in for the kernel before the router in a layer (the previous layer's down): BYTES of
// weights streamed from DRAM by 132 x 8 warps, one 16-byte load per lane per step, summed.
__global__ void __launch_bounds__(256, 1) stream_read(const uint4* src, size_t words16, float* sink) {
  mf::begin_after_previous_kernel();
  float acc = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words16; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldg(src + i);
    acc += __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
  }
  if (acc == 1.2345f) sink[0] = acc;  // keeps the loads
}

// A 6 MB streaming call per copy before each router call (a stand-in for the layer's down), and
// chains of `copies` calls with or without it, graph-timed per call.
struct StreamFiller {
  static constexpr size_t kBytes = 6u << 20;
  uint4* big;
  cudaStream_t s;
  float* sink;
  int copies;
  StreamFiller(int copies_, cudaStream_t s_, float* sink_) : s(s_), sink(sink_), copies(copies_) {
    CK(cudaMalloc(&big, kBytes * copies)); probe::fill_dev(big, kBytes * copies, 5);
  }
  ~StreamFiller() { cudaFree(big); }
  void operator()(bool pdl, int c) const {
    probe::launch_as(probe::LaunchAs{pdl, false, 1}, stream_read, dim3(132 * 4), dim3(256), 0, s,
                     (const uint4*)((const char*)big + kBytes * c), kBytes / 16, sink);
  }
  template <class Call>
  float chain(int reps, bool pdl, bool with_filler, Call call) const {
    return probe::graph_us(s, reps, copies, [&] {
      for (int c = 0; c < copies; ++c) { if (with_filler) (*this)(pdl, c); call(c); }
    });
  }
};

// Programmatic dependent launch and the router's weight loads: the catalogue router launched
// plainly and with PDL, and the weights-before-the-wait router with launch_dependents first or
// after the wait; alone back to back, and after a 6 MB streaming kernel (a layer's down) each call.
template <template <int> class Rule>
void run_pdl(const char* name, int copies, int reps, std::mt19937& rng) {
  using R = Rule<kBlock>;
  const RouterInputs<R> in(copies, rng);
  __nv_bfloat16 *w = in.w, *x = in.x;
  float* bias = in.bias;
  float *scores, *tw, *sink; int *counters, *ids;
  CK(cudaMalloc(&scores, R::kE * 4)); CK(cudaMalloc(&counters, 4)); CK(cudaMemset(counters, 0, 4));
  CK(cudaMalloc(&tw, copies * R::kK * 4)); CK(cudaMalloc(&ids, copies * R::kK * 4)); CK(cudaMalloc(&sink, 64));
  cudaStream_t s = probe::stream_after_setup();
  const dim3 grid(R::kE / R::kEpc), block(32 * R::kW);
  auto wc = [&](int c) { return w + (size_t)c * R::kE * R::kH; };
  // every call writes its own token's outputs, so the chains' results can be compared call by call
  auto call = [&](auto kernel, bool pdl, int c) {
    probe::launch_as(probe::LaunchAs{pdl, false, 1}, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH),
                     (const __nv_bfloat16*)wc(c), (const float*)bias, scores, counters, tw + c * R::kK, ids + c * R::kK);
  };
  const StreamFiller filler(copies, s, sink);
  auto chain = [&](auto kernel, bool pdl, bool with_filler) {
    return filler.chain(reps, pdl, with_filler, [&](int c) { call(kernel, pdl, c); });
  };
  auto routing = [&](auto kernel, bool pdl) {
    CK(cudaMemset(ids, 0xff, copies * R::kK * 4));
    for (int c = 0; c < copies; ++c) { filler(pdl, c); call(kernel, pdl, c); }
    CK(cudaStreamSynchronize(s));
    std::vector<int> a((size_t)copies * R::kK); std::vector<float> b(a.size());
    CK(cudaMemcpy(a.data(), ids, a.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), tw, b.size() * 4, cudaMemcpyDeviceToHost));
    return std::make_pair(a, b);
  };
  const auto base = routing(router<R>, false);
  const bool same = routing(router<R>, true) == base && routing(router_early<R, true>, true) == base &&
                    routing(router_early<R, false>, true) == base;
  const float filler_alone = probe::graph_us(s, reps, copies, [&] { for (int c = 0; c < copies; ++c) filler(true, c); });
  std::printf("%s (%d copies), us per call; outputs of every form over the chain %s\n", name, copies, same ? "equal (ids and weights)" : "DIFFER");
  std::printf("  routers back to back: plain %.2f | PDL %.2f | weights before the wait, trigger first %.2f | trigger after the wait %.2f\n",
              chain(router<R>, false, false), chain(router<R>, true, false), chain(router_early<R, true>, true, false), chain(router_early<R, false>, true, false));
  std::printf("  each after a 6 MB stream (stream alone %.2f): plain %.2f | PDL %.2f | weights before the wait, trigger first %.2f | trigger after the wait %.2f\n",
              filler_alone, chain(router<R>, false, true), chain(router<R>, true, true), chain(router_early<R, true>, true, true), chain(router_early<R, false>, true, true));
  cudaFree(w); cudaFree(x); cudaFree(bias); cudaFree(scores); cudaFree(counters); cudaFree(tw); cudaFree(ids); cudaFree(sink);
  cudaStreamDestroy(s);
}

// The scores phase in parts: the router's blocks storing their scores without a ticket, and reads
// alone of the same 3.67 MB (each warp one span of CPW 16-byte chunks, all its loads in flight,
// summed and dropped) by grids of 128 x 8, 256 x 4 and 64 x 16 warps.
template <class R>
__global__ void __launch_bounds__(256, 1) scores_no_ticket(const __nv_bfloat16* x, const __nv_bfloat16* w, float* scores) {
  mf::begin_after_previous_kernel();
  const int first = blockIdx.x * R::kEpc;
  mf::block_scores<R::kH, R::kEpc, R::kW, 16, R::kU, R::kSplit>(w, reinterpret_cast<const char*>(x), first, mf::min_int(R::kE, first + R::kEpc),
                                                                 [&](int e, float v) { scores[e] = v; });
}
template <int CPW>
__global__ void __launch_bounds__(512) read_spans(const uint4* w, float* sink) {
  mf::begin_after_previous_kernel();
  const int lane = threadIdx.x & 31;
  const size_t warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const uint4* span = w + warp * CPW;
  constexpr int U = (CPW + 31) / 32;
  uint4 v[U];
#pragma unroll
  for (int i = 0; i < U; ++i) v[i] = i * 32 + lane < CPW ? __ldg(span + i * 32 + lane) : make_uint4(0, 0, 0, 0);
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < U; ++i) acc += v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (acc == 0x12345678u) sink[0] = 1.0f;
}

// The scores phase with one thing changed (FLAGS): 1 x of copy 0 for every call (hot in L2), 2
// the weights by plain __ldg (no L1::no_allocate / L2::256B hints), 4 x staged in shared memory by
// the whole block after the weight loads are issued (each x line fetched once per block).
template <class R, int FLAGS>
__global__ void __launch_bounds__(256, 1) scores_variant(const __nv_bfloat16* x, const __nv_bfloat16* w, float* scores, int* counters,
                                                      const float* bias, float* tw, int* ids) {
  mf::begin_after_previous_kernel();
  constexpr int kChunks = R::kH / 8;
  constexpr int kSpan = mf::ceil_div(mf::ceil_div(kChunks, R::kSplit), 32) * 32;
  static_assert(kSpan <= 32 * R::kU, "one step of loads per warp");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % R::kSplit;
  const int e = blockIdx.x * R::kEpc + warp / R::kSplit;
  const int begin = part * kSpan, end = mf::min_int(kChunks, begin + kSpan);
  const char* row = reinterpret_cast<const char*>(w + static_cast<size_t>(e) * R::kH);
  mf::Lane<16> wv[R::kU], av[R::kU];
  const char* x_row = reinterpret_cast<const char*>(x + (FLAGS & 32 ? (blockIdx.x % 58) * R::kH : 0));
  if constexpr (FLAGS & 64) {  // the header's order before 2026-11-23: weights and x interleaved
#pragma unroll
    for (int i = 0; i < R::kU; ++i) {
      const int c = begin + i * 32 + lane;
      wv[i] = c < end ? mf::load_weights<16>(row + c * 16) : mf::zero_lane<16>();
      av[i] = c < end ? mf::load_activations<16>(x_row + c * 16) : mf::zero_lane<16>();
    }
  }
#pragma unroll
  for (int i = 0; i < R::kU && !(FLAGS & 64); ++i) {
    const int c = begin + i * 32 + lane;
    if constexpr (FLAGS & 2) {
      const uint4 q = c < end ? __ldg(reinterpret_cast<const uint4*>(row) + c) : make_uint4(0, 0, 0, 0);
      wv[i].w[0] = q.x; wv[i].w[1] = q.y; wv[i].w[2] = q.z; wv[i].w[3] = q.w;
    } else {
      wv[i] = c < end ? mf::load_weights<16>(row + c * 16) : mf::zero_lane<16>();
    }
  }
  if constexpr (FLAGS & 64) {
  } else if constexpr (FLAGS & 8) {
#pragma unroll
    for (int i = 0; i < R::kU; ++i) av[i] = wv[i];
  } else if constexpr (FLAGS & 4) {
    __shared__ uint4 xs[kChunks];
    for (int c = threadIdx.x; c < kChunks; c += blockDim.x) xs[c] = __ldg(reinterpret_cast<const uint4*>(x_row) + c);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < R::kU; ++i) {
      const int c = begin + i * 32 + lane;
      const uint4 q = c < end ? xs[c] : make_uint4(0, 0, 0, 0);
      av[i].w[0] = q.x; av[i].w[1] = q.y; av[i].w[2] = q.z; av[i].w[3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < R::kU; ++i) {
      const int c = begin + i * 32 + lane;
      av[i] = c < end ? mf::load_activations<16>(x_row + c * 16) : mf::zero_lane<16>();
    }
  }
  float acc = 0.0f;
  if constexpr (FLAGS & 16) {
    unsigned bits = 0u;
#pragma unroll
    for (int i = 0; i < R::kU; ++i) bits += (wv[i].w[0] ^ av[i].w[1]) + (wv[i].w[2] ^ av[i].w[3]) + (wv[i].w[1] ^ av[i].w[0]) + (wv[i].w[3] ^ av[i].w[2]);
    acc = static_cast<float>(bits & 0xffu);
  } else {
#pragma unroll
    for (int i = 0; i < R::kU; ++i) acc = mf::dot_bf16<16>(wv[i], av[i], acc);
  }
  store_split_score<R>(acc, e, scores);
  if constexpr ((FLAGS & 128) != 0) {  // the whole router: end ticket and the tail
    if (!reference::last_block_of_token(counters)) return;
    tail<R>(scores, bias, tw, ids);
  }
}

template <template <int> class Rule>
void run_scores_parts(const char* name, int copies, int reps, std::mt19937& rng) {
  using R = Rule<kBlock>;
  const RouterInputs<R> in(copies, rng);
  float *scores, *sink, *tw; int *counters, *ids;
  CK(cudaMalloc(&scores, R::kE * 4)); CK(cudaMalloc(&counters, 4)); CK(cudaMemset(counters, 0, 4)); CK(cudaMalloc(&sink, 64));
  CK(cudaMalloc(&tw, 64 * 4)); CK(cudaMalloc(&ids, 64 * 4));
  cudaStream_t s = probe::stream_after_setup();
  const dim3 grid(R::kE / R::kEpc), block(32 * R::kW);
  const size_t wbytes = (size_t)R::kE * R::kH * 2;
  auto wc = [&](int c) { return in.w + (size_t)c * R::kE * R::kH; };
  constexpr int kCpw = R::kH * 2 * R::kEpc / 16 / R::kW;  // 16-byte chunks per warp, as the router's warps
  const int warps = (int)(wbytes / 16 / kCpw);
  for (int pdl = 0; pdl < 2; ++pdl) {
    auto chain = [&](auto launch_one) { return probe::graph_us(s, reps, copies, [&] { for (int c = 0; c < copies; ++c) launch_one(c); }); };
    const probe::LaunchAs how{pdl == 1, false, 1};
    const float t_ticket = chain([&](int c) { probe::launch_as(how, scores_only<R>, grid, block, 0, s, (const __nv_bfloat16*)(in.x + c * R::kH), (const __nv_bfloat16*)wc(c), scores, counters); });
    const float t_none = chain([&](int c) { probe::launch_as(how, scores_no_ticket<R>, grid, block, 0, s, (const __nv_bfloat16*)(in.x + c * R::kH), (const __nv_bfloat16*)wc(c), scores); });
    auto reads = [&](int per_block) {
      return chain([&](int c) { probe::launch_as(how, read_spans<kCpw>, dim3(warps / per_block), dim3(32 * per_block), 0, s, (const uint4*)wc(c), sink); });
    };
    const float t_empty = chain([&](int) { probe::launch_as(how, empty_kernel, grid, block, 0, s); });
    auto variant = [&](auto kernel, bool hot_x) {
      return chain([&](int c) { probe::launch_as(how, kernel, grid, block, 0, s, (const __nv_bfloat16*)(in.x + (hot_x ? 0 : c) * R::kH), (const __nv_bfloat16*)wc(c), scores,
                                                 counters, (const float*)in.bias, tw, ids); });
    };
    std::printf("%s, %s: scores variants, us per call: as the router %.2f | x hot in L2 %.2f | weights by plain ldg %.2f | x staged in shared %.2f | x staged, hot %.2f\n",
                name, pdl ? "PDL" : "plain", variant(scores_variant<R, 0>, false), variant(scores_variant<R, 1>, true), variant(scores_variant<R, 2>, false),
                variant(scores_variant<R, 4>, false), variant(scores_variant<R, 5>, true));
    std::printf("%s, %s: scores variants, us per call: no x loads (w . w) %.2f | no math (x loaded, words xor-ed) %.2f | neither %.2f\n", name, pdl ? "PDL" : "plain",
                variant(scores_variant<R, 8>, false), variant(scores_variant<R, 16>, false), variant(scores_variant<R, 24>, false));
    std::printf("%s, %s: x of 58 tokens by block (each line read by 2-3 blocks, not all) %.2f | interleaved loads (the header before) %.2f\n", name, pdl ? "PDL" : "plain",
                variant(scores_variant<R, 32>, false), variant(scores_variant<R, 64>, false));
    std::printf("%s, %s: whole routers (end ticket, block tail): weights first %.2f | interleaved %.2f | the header's router %.2f\n", name, pdl ? "PDL" : "plain",
                variant(scores_variant<R, 128>, false), variant(scores_variant<R, 192>, false),
                chain([&](int c) { probe::launch_as(how, router<R>, grid, block, 0, s, (const __nv_bfloat16*)(in.x + c * R::kH), (const __nv_bfloat16*)wc(c), (const float*)in.bias, scores, counters, tw, ids); }));
    std::printf("%s, %s, us per call (%d copies): empty grid %.2f | scores + end ticket %.2f | scores, no ticket %.2f | reads alone of the %.2f MB, %d chunks per warp: %d x 8 warps %.2f, %d x 4 %.2f, %d x 16 %.2f\n",
                name, pdl ? "PDL" : "plain", copies, t_empty, t_ticket, t_none, wbytes / 1e6, kCpw, warps / 8, reads(8), warps / 4, reads(4), warps / 16, reads(16));
  }
  cudaFree(scores); cudaFree(sink); cudaFree(counters); cudaFree(in.w); cudaFree(in.x); cudaFree(in.bias);
  cudaStreamDestroy(s);
}

// The awaited scores against the end ticket (the catalogue's form: MODE kRewrite for Qwen3-Next,
// kBlock for DeepSeek-V3): outputs call by call over a chain (plain, PDL, each after a 6 MB
// stream, several tokens), then timed as run_pdl times.
template <template <int> class Rule, int MODE>
void run_await(const char* name, int copies, int reps, std::mt19937& rng) {
  using R = Rule<MODE>;
  const RouterInputs<R> in(copies, rng);
  __nv_bfloat16 *w = in.w, *x = in.x;
  float* bias = in.bias;
  float *scores, *scores_await, *tw, *sink; int *counters, *ids;
  CK(cudaMalloc(&scores, R::kE * 4)); CK(cudaMalloc(&counters, 4)); CK(cudaMemset(counters, 0, 4));
  CK(cudaMalloc(&scores_await, R::kSplit * R::kE * 4)); CK(cudaMemset(scores_await, 0, R::kSplit * R::kE * 4));
  CK(cudaMalloc(&tw, copies * R::kK * 4)); CK(cudaMalloc(&ids, copies * R::kK * 4)); CK(cudaMalloc(&sink, 64));
  cudaStream_t s = probe::stream_after_setup();
  const dim3 grid(R::kE / R::kEpc), block(32 * R::kW);
  auto wc = [&](int c) { return w + (size_t)c * R::kE * R::kH; };
  auto call = [&](auto kernel, bool pdl, int c) {
    if constexpr (std::is_same_v<decltype(kernel), decltype(&router_ksliced<R>)>) {
      probe::launch_as(probe::LaunchAs{pdl, false, 1}, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH), (const __nv_bfloat16*)wc(c),
                       (const float*)bias, scores_await, counters, tw + c * R::kK, ids + c * R::kK, (unsigned long long*)nullptr);
    } else {
      const bool awaits = (void*)kernel == (void*)router_await<R>;
      probe::launch_as(probe::LaunchAs{pdl, false, 1}, kernel, grid, block, 0, s, (const __nv_bfloat16*)(x + c * R::kH),
                       (const __nv_bfloat16*)wc(c), (const float*)bias, awaits ? scores_await : scores, counters, tw + c * R::kK, ids + c * R::kK);
    }
  };
  const StreamFiller filler(copies, s, sink);
  auto chain = [&](auto kernel, bool pdl, bool with_filler) {
    return filler.chain(reps, pdl, with_filler, [&](int c) { call(kernel, pdl, c); });
  };
  auto routing = [&](auto kernel, bool pdl, bool with_filler) {
    CK(cudaMemset(ids, 0xff, copies * R::kK * 4)); CK(cudaMemset(tw, 0xff, copies * R::kK * 4));
    for (int c = 0; c < copies; ++c) { if (with_filler) filler(pdl, c); call(kernel, pdl, c); }
    CK(cudaStreamSynchronize(s));
    std::vector<int> a((size_t)copies * R::kK); std::vector<uint32_t> b(a.size());
    CK(cudaMemcpy(a.data(), ids, a.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), tw, b.size() * 4, cudaMemcpyDeviceToHost));
    return std::make_pair(a, b);
  };
  const auto base = routing(router<R>, false, false);
  int differ = 0;
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int f = 0; f < 2; ++f) differ += (routing(router_await<R>, pdl, f) != base) + (routing(router_ksliced<R>, pdl, f) != base);
  std::vector<float> left(R::kSplit * R::kE); int ctr = -1;
  CK(cudaMemcpy(left.data(), scores_await, left.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&ctr, counters, 4, cudaMemcpyDeviceToHost));
  int nonzero = 0;
  for (float v : left) nonzero += v != 0.0f || std::signbit(v);
  std::printf("%s (%d copies): awaited scores and the k-sliced router vs the end ticket, ids and weights bit for bit over 4 chains each: %s; workspace left: %d nonzero score words, counter %d\n",
              name, copies, differ == 0 ? "equal" : "DIFFER", nonzero, ctr);
  if (reps == 0) return;
  const float filler_alone = probe::graph_us(s, reps, copies, [&] { for (int c = 0; c < copies; ++c) filler(true, c); });
  std::printf("  back to back, us per call: end ticket plain %.2f, PDL %.2f | awaited plain %.2f, PDL %.2f\n",
              chain(router<R>, false, false), chain(router<R>, true, false), chain(router_await<R>, false, false), chain(router_await<R>, true, false));
  std::printf("  each after a 6 MB stream (alone %.2f): end ticket plain %.2f, PDL %.2f | awaited plain %.2f, PDL %.2f\n", filler_alone,
              chain(router<R>, false, true), chain(router<R>, true, true), chain(router_await<R>, false, true), chain(router_await<R>, true, true));
  std::printf("  k-sliced: back to back plain %.2f, PDL %.2f | after the stream plain %.2f, PDL %.2f\n", chain(router_ksliced<R>, false, false),
              chain(router_ksliced<R>, true, false), chain(router_ksliced<R>, false, true), chain(router_ksliced<R>, true, true));
  {  // one traced launch after a chain of the awaited router
    unsigned long long *st, *arr;
    CK(cudaMalloc(&st, grid.x * 3 * 8)); CK(cudaMalloc(&arr, 32 * 8)); CK(cudaMemset(arr, 0, 32 * 8));
    for (int sliced = 0; sliced < 2; ++sliced) {
    CK(cudaMemset(arr, 0, 32 * 8));
    for (int c = 0; c < copies - 1; ++c) call(router_await<R>, false, c);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpyToSymbol(awaited::g_arrivals, &arr, sizeof(arr)));
    probe::launch_as(probe::LaunchAs{false, false, 1}, sliced ? router_ksliced<R> : router_await_traced<R>, grid, block, 0, s, (const __nv_bfloat16*)x,
                     (const __nv_bfloat16*)wc(copies - 1), (const float*)bias, scores_await, counters, tw, ids, st);
    CK(cudaStreamSynchronize(s));
    unsigned long long* none = nullptr;
    CK(cudaMemcpyToSymbol(awaited::g_arrivals, &none, sizeof(none)));
    std::vector<unsigned long long> h(grid.x * 3), a(32);
    CK(cudaMemcpy(h.data(), st, h.size() * 8, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(a.data(), arr, 32 * 8, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull, last_start = 0, first_pub = ~0ull, last_pub = 0, done = 0, tail_pub = 0;
    for (unsigned b = 0; b < grid.x; ++b) t0 = std::min(t0, h[b * 3]);
    for (unsigned b = 0; b < grid.x; ++b) {
      last_start = std::max(last_start, h[b * 3] - t0);
      first_pub = std::min(first_pub, h[b * 3 + 1] - t0); last_pub = std::max(last_pub, h[b * 3 + 1] - t0);
      if (h[b * 3 + 2]) { done = h[b * 3 + 2] - t0; tail_pub = h[b * 3 + 1] - t0; }
    }
    std::printf("  trace (%s), ns after the first block's start: last start %llu | scores published: first %llu, last %llu, the tail block's own %llu | warps' scores all in:",
                sliced ? "k-sliced" : "awaited", last_start, first_pub, last_pub, tail_pub);
    for (int i = 0; i < 32; ++i) if (a[i]) std::printf(" %llu", a[i] - t0);
    std::printf(" | tail done %llu\n", done);
    }
    cudaFree(st); cudaFree(arr);
  }
  cudaFree(w); cudaFree(x); cudaFree(bias); cudaFree(scores); cudaFree(scores_await); cudaFree(counters); cudaFree(tw); cudaFree(ids);
  cudaFree(sink);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261123);
  if (reps > 0) {
    std::vector<float> row(512);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : row) v = nd(rng);
    float *rd, *sink; long long* od;
    CK(cudaMalloc(&rd, 2048)); CK(cudaMalloc(&sink, 128)); CK(cudaMalloc(&od, 16 * 8));
    CK(cudaMemcpy(rd, row.data(), 2048, cudaMemcpyHostToDevice));
    long long o[16];
    for (int pass = 0; pass < 2; ++pass) {  // the second pass runs with a warm instruction cache
      latency<<<1, 32>>>(rd, od, sink);
      CK(cudaMemcpy(o, od, 16 * 8, cudaMemcpyDeviceToHost));
    }
    std::printf("cycles (one warp): redux.sync %lld, shfl %lld, ballot %lld per dependent op | select_top_rounds K=10 of 512 %lld, select_top %lld | "
                "K=1 %lld, select_top %lld | softmax of 512 %lld\n", o[0], o[1], o[2], o[3], o[4], o[6], o[7], o[5]);
    std::printf("cycles (one warp): DeepSeek-V3 top-k rounds %lld, select_top %lld | K=8 of 128 rounds %lld, select_top %lld | "
                "sigmoid of 256 %lld | lane_rank of 32 lanes %lld\n", o[8], o[9], o[10], o[11], o[12], o[13]);
    {
      std::vector<float> rows4(4 * 512);
      for (auto& v : rows4) v = nd(rng);
      float* r4; CK(cudaMalloc(&r4, rows4.size() * 4)); CK(cudaMemcpy(r4, rows4.data(), rows4.size() * 4, cudaMemcpyHostToDevice));
      select_top_stages<<<1, 32>>>(r4, od, sink);
      CK(cudaMemcpy(o, od, 8 * 8, cudaMemcpyDeviceToHost));
      std::printf("cycles of select_top<10, 512>'s stages (one warp, fourth of four rows): keys and best %lld | lanes' counts above %lld | threshold %lld | "
                  "candidates stored %lld | syncwarp %lld | their ranks %lld | the selection read %lld | softmax of the 10 %lld\n", o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]);
      cudaFree(r4);
    }
    {
      std::vector<float> rows4(4 * 256), bh(256);
      for (auto& v : rows4) v = nd(rng);
      for (auto& v : bh) v = 0.05f * nd(rng);
      float *r4, *bd, *sk; CK(cudaMalloc(&r4, rows4.size() * 4)); CK(cudaMalloc(&bd, 1024)); CK(cudaMalloc(&sk, 1024));
      CK(cudaMemcpy(r4, rows4.data(), rows4.size() * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(bd, bh.data(), 1024, cudaMemcpyHostToDevice));
      deepseek_tail_stages<false><<<1, 256>>>(r4, bd, od, sk);
      CK(cudaMemcpy(o, od, 9 * 8, cudaMemcpyDeviceToHost));
      std::printf("cycles of DeepSeek-V3's block tail (warp 0, fourth of four rows): scores and bias loaded %lld | sigmoid, add %lld | two-best sum %lld | "
                  "the warp's select_top %lld | stored, barrier %lld | kept groups %lld | candidates gathered %lld | their select_top %lld | ids, renormalize, scale %lld\n",
                  o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8]);
      deepseek_tail_stages<true><<<1, 256>>>(r4, bd, od, sk);
      CK(cudaMemcpy(o, od, 4 * 8, cudaMemcpyDeviceToHost));
      std::printf("cycles of the header's DeepSeek-V3 tail (warp 0, fourth of four rows): scores and bias loaded %lld | sigmoid, add %lld | block_topk %lld | renormalize, scale %lld\n",
                  o[0], o[1], o[2], o[3]);
      cudaFree(r4); cudaFree(bd); cudaFree(sk);
    }
    cudaFree(rd); cudaFree(sink); cudaFree(od);
  }
  if (argc > 2 && std::strcmp(argv[2], "stages") == 0) return 0;
  if (argc > 2 && std::strcmp(argv[2], "scores") == 0) {
    if (argc <= 3) run_scores_parts<Qwen3NextRule>("qwen3-next (1, 512, 2048)", 100, reps, rng);
    run_scores_parts<DeepSeekRule>("deepseek-v3 (1, 256, 7168)", 58, reps, rng);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "await") == 0) {
    run_await<Qwen3NextRule, kRewrite>("qwen3-next (1, 512, 2048, k=10)", 100, reps, rng);
    run_await<DeepSeekRule, kBlock>("deepseek-v3 (1, 256, 7168, k=8, groups)", 58, reps, rng);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "pdl") == 0) {
    run_pdl<Qwen3NextRule>("qwen3-next (1, 512, 2048, k=10)", 100, reps, rng);
    run_pdl<DeepSeekRule>("deepseek-v3 (1, 256, 7168, k=8, groups)", 58, reps, rng);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "seed") == 0) {
    seed_shapes<64>(reps, rng, "32 tokens, 8 warps, k 64, 4 stages");
    seed_shapes<128>(reps, rng, "32 tokens, 16 warps, k 64, 3 stages");
    return 0;
  }
  check_topk<512, 10, 1, 1>(rng);
  check_topk<128, 8, 1, 1>(rng);
  check_topk<32, 4, 1, 1>(rng);
  check_topk<1024, 16, 1, 1>(rng);
  check_topk<96, 5, 1, 1>(rng);
  check_topk<64, 1, 1, 1>(rng);
  check_topk<256, 8, 8, 4>(rng);
  check_topk<160, 7, 5, 2>(rng);
  check_topk<64, 6, 8, 3>(rng);
  check_topk<48, 16, 1, 1>(rng);
  run<Qwen3NextRule>("qwen3-next (1, 512, 2048, k=10)", 100, reps, rng);
  run<DeepSeekRule>("deepseek-v3 (1, 256, 7168, k=8, groups)", 58, reps, rng);
  return 0;
}
