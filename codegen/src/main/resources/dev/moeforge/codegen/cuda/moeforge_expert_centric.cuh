// moeforge_expert_centric.cuh: the expert-centric family's device code (schedule expert_centric),
// on top of moeforge_device.cuh. Only expert_centric kernels include it, so it is part of their
// cache key alone.
#pragma once

#include "moeforge_device.cuh"

namespace mf {

// ---------------------------------------------------------------------------------------------
// Expert-centric (schedule expert_centric): the routed (token, slot) pairs grouped by expert, then
// grouped GEMM tiles on the tensor cores, BM pairs of one expert x BN outputs per block.
//
// The routing plan, written from topk_ids by the two align kernels below:
//   sorted_slots   [M*k] int32: the flat pairs m*k + j grouped by expert, ascending within each
//                  expert (the same routing always gives the same order)
//   expert_offsets [E+2] int32: bucket b's pairs are sorted_slots[offsets[b] .. offsets[b+1]);
//                  bucket E collects ids outside [0, E), which down counts as zero rows
// The plan does not depend on a kernel's tile height, so gate_up and down share one.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ int align_bucket(int id, int experts) {
  return static_cast<unsigned>(id) < static_cast<unsigned>(experts) ? id : experts;
}

// Align, step 1 (one warp per block): block s counts the buckets of pairs [s * segment, (s + 1) * segment)
// into segment_counts[s][0..E]. smem: E + 1 ints.
__device__ __forceinline__ void routing_align_count(const int* __restrict__ topk_ids, int* __restrict__ segment_counts,
                                                    int pairs, int experts, int segment, int* smem) {
  const int lane = threadIdx.x, s = blockIdx.x, buckets = experts + 1;
  for (int b = lane; b < buckets; b += 32) smem[b] = 0;
  __syncwarp();
  const int end = min(pairs, (s + 1) * segment);
  for (int i = s * segment + lane; i < end; i += 32) atomicAdd(&smem[align_bucket(__ldg(topk_ids + i), experts)], 1);
  __syncwarp();
  for (int b = lane; b < buckets; b += 32) segment_counts[static_cast<size_t>(s) * buckets + b] = smem[b];
}

// Align, step 2 (one warp per block): block s places its segment's pairs. A pair's place is the
// pairs of all lower buckets, plus its bucket's pairs in earlier segments, plus those before it in
// its own segment (a warp ranks 32 pairs at a time with match_any, in pair order). Block 0 also
// writes expert_offsets. smem: 2 (E + 1) ints.
__device__ __forceinline__ void routing_align_scatter(const int* __restrict__ topk_ids, const int* __restrict__ segment_counts,
                                                      int* __restrict__ sorted_slots, int* __restrict__ expert_offsets,
                                                      int pairs, int experts, int segment, int segments, int* smem) {
  const int lane = threadIdx.x, s = blockIdx.x, buckets = experts + 1;
  int* next = smem;            // where this segment's next pair of bucket b goes
  int* total = smem + buckets;  // bucket b's pairs in every segment
  for (int b = lane; b < buckets; b += 32) {
    int before = 0, all = 0;
    for (int t = 0; t < segments; ++t) {
      const int c = segment_counts[static_cast<size_t>(t) * buckets + b];
      all += c;
      before += t < s ? c : 0;
    }
    next[b] = before;
    total[b] = all;
  }
  __syncwarp();
  // exclusive scan of the totals: lane l takes buckets [l per, (l + 1) per)
  const int per = ceil_div(buckets, 32), first = lane * per, last = min(buckets, first + per);
  int mine = 0;
  for (int b = first; b < last; ++b) mine += total[b];
  int inclusive = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(kFullMask, inclusive, d);
    if (lane >= d) inclusive += v;
  }
  int base = inclusive - mine;
  for (int b = first; b < last; ++b) {
    if (s == 0) expert_offsets[b] = base;
    next[b] += base;
    base += total[b];
  }
  if (s == 0 && lane == 31) expert_offsets[buckets] = inclusive;
  __syncwarp();
  const int end = min(pairs, (s + 1) * segment);
  for (int i0 = s * segment; i0 < end; i0 += 32) {
    const int i = i0 + lane;
    const bool live = i < end;
    const int b = live ? align_bucket(__ldg(topk_ids + i), experts) : buckets + lane;  // dead lanes match nobody
    const unsigned peers = __match_any_sync(kFullMask, b);
    const unsigned lower = peers & ((1u << lane) - 1u);
    if (live) sorted_slots[next[b] + __popc(lower)] = i;
    __syncwarp();
    if (live && lower == 0) next[b] += __popc(peers);
    __syncwarp();
  }
}

// Byte offset of 16-byte piece p of staged row r: rows of 4 pieces swizzle in pairs, longer rows
// XOR the piece's low three bits with r % 8, so ldmatrix's 8 rows at one logical piece hit 8
// distinct bank groups. Rows of 8 pieces are exactly wgmma's 128-byte swizzle.
template <int P>
__device__ __forceinline__ uint32_t tile_swizzled(int row, int piece) {
  static_assert(P == 4 || P == 8 || P == 16, "rows of 4, 8 or 16 pieces");
  const int mix = P == 4 ? (row >> 1) & 3 : row & 7;
  return 16u * static_cast<uint32_t>(row * P + (piece ^ mix));
}

// The sizes of a grouped GEMM tile; ExpertCentric.Layout (Java) states the same, and the kernel
// static_asserts that the shared memory agrees.
template <class Config, bool GATE_UP>
struct ExpertTileShape {
  static constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  static constexpr int BM = Config::kBlockM, BN = Config::kBlockN, BK = Config::kBlockK;
  static constexpr int WM = Config::kWarpsM, WN = Config::kWarpsN, S = Config::kStages, GM = Config::kGroupM;
  static constexpr bool kWgmma = Config::kWgmma;
  static constexpr bool kTma = Config::kTma;  // weight tiles by the copy engine
  static constexpr bool kGateUp = GATE_UP;
  static constexpr int kReduce = GATE_UP ? H : I;          // the GEMM's K
  static constexpr int kOutputs = GATE_UP ? I : H;         // outputs per pair
  static constexpr int kWeightRows = GATE_UP ? 2 * I : H;  // rows of one expert's weight
  // weight rows per tile: gate_up stages the gate and up rows of its BN neurons interleaved (gate of
  // neuron i at 2i, up at 2i + 1), so each accumulator pair of an mma is one neuron's (gate, up)
  static constexpr int kRows = GATE_UP ? 2 * BN : BN;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int TM = BM / WM, TN = kRows / WN;  // one warp's part of the tile
  static constexpr int FM = TM / 16, FN = TN / 8;      // its m16 and n8 fragments
  static constexpr int P = BK / 8;                     // 16-byte pieces per staged row
  static constexpr int kStageBytes = 2 * (BM + kRows) * BK;
  static constexpr int kOutStride = GATE_UP ? BN + 8 : BN + 4;  // staged output row, in elements
  static constexpr int kOutBytes = BM * kOutStride * (GATE_UP ? 2 : 4);
  static constexpr int kTableBytes = 8 * BM;  // each row's pair (or -1), then down's reducing token (or -1)
  static constexpr int kPipeBytes = S * kStageBytes;
  static constexpr int kBarrierBytes = kTma ? 8 * S : 0;  // one mbarrier per stage: its weight tile has landed
  // wgmma reads and the copy engine writes the stages in the 128-byte swizzle, whose pattern needs
  // 1024-byte aligned stages: the pipeline starts at the first such address past the table and barriers
  static constexpr int kAlignSlack = kWgmma || kTma ? 1024 : 0;
  static constexpr int kSharedBytes =
      kTableBytes + kBarrierBytes + kAlignSlack + (kPipeBytes > kOutBytes ? kPipeBytes : kOutBytes);
  static constexpr int kKTiles = ceil_div(kReduce, BK);
  static constexpr int kNTiles = ceil_div(kOutputs, BN);
  static constexpr int kBuckets = GATE_UP ? E : E + 1;  // gate_up skips the ids outside [0, E)
  static_assert(BM % 16 == 0 && TM % 16 == 0 && WM * TM == BM, "a warp owns whole m16 rows of the tile");
  static_assert(TN % 16 == 0 && WN * TN == kRows, "a warp owns whole pairs of n8 columns of the tile");
  static_assert(BK == 32 || BK == 64 || BK == 128, "a staged row is 4, 8 or 16 16-byte pieces");
  static_assert(BN % 8 == 0 && kReduce % 8 == 0 && kOutputs % 8 == 0, "rows move in 16-byte pieces");
  static_assert(S >= 2, "a pipeline of at least two stages");
  static_assert(!kTma || BK == 64, "tma: 128-byte rows, the copy engine's 128-byte swizzle");
  static_assert(!kWgmma || (BK == 64 && (WN == 1 || WN == 2) && TM == 16 && WM % 4 == 0 && TN % 64 == 0 && TN <= 256 && S >= 3),
                "wgmma: 128-byte rows, a warpgroup per 64 rows owning every weight row or half of them, at least three stages");
  static_assert(Config::kThreadsPerCta == kThreads, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == kSharedBytes, "the schedule's Layout (Java) and ExpertTileShape disagree on shared memory");

  // m tiles the grid is launched for: every tile of the worst-case routing (each bucket's last tile partial)
  __device__ static int max_m_tiles(int pairs) { return ceil_div(pairs, BM) + min_int(kBuckets, pairs); }
};

// The tile a block owns: its bucket, its first pair in sorted_slots, the end of the bucket's
// pairs, and its n tile; false past the routing's last tile. Blocks walk m tiles in groups of GM
// (the GROUP_M order: blocks running together share weight tiles and activation rows in L2).
template <class T>
__device__ __forceinline__ bool expert_tile_of_block(const int* __restrict__ offsets, int pairs, int* found, int& n_tile) {
  const int num_m = T::max_m_tiles(pairs);
  const int pid = blockIdx.x, in_group = T::GM * T::kNTiles;
  const int first_m = pid / in_group * T::GM;
  const int group_size = min_int(num_m - first_m, T::GM);
  const int m_tile = first_m + pid % in_group % group_size;
  n_tile = pid % in_group / group_size;
  if (threadIdx.x < 32) {  // warp 0 scans the buckets' tile counts
    const int lane = threadIdx.x;
    if (lane == 0) found[0] = -1;
    __syncwarp();
    int before = 0;
    for (int b0 = 0; b0 < T::kBuckets && before <= m_tile; b0 += 32) {
      const int b = b0 + lane;
      const int begin = b < T::kBuckets ? offsets[b] : 0;
      const int end = b < T::kBuckets ? offsets[b + 1] : 0;
      const int tiles = ceil_div(end - begin, T::BM);
      int inclusive = tiles;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(kFullMask, inclusive, d);
        if (lane >= d) inclusive += v;
      }
      const int first_tile = before + inclusive - tiles;
      if (m_tile >= first_tile && m_tile < first_tile + tiles) {
        found[0] = b;
        found[1] = begin + (m_tile - first_tile) * T::BM;
        found[2] = end;
      }
      before += __shfl_sync(kFullMask, inclusive, 31);
    }
  }
  __syncthreads();
  return found[0] >= 0;
}

// The copies one thread issues for every k slice of a tile. A thread keeps one 16-byte
// column of the slice (the block's threads are a multiple of its pieces) and every kStep-th row from
// its first, at every k: so the gather through the pair table is done once per tile (a pointer per
// activation row it owns), its weight rows are one pointer and a fixed stride, and its places in a
// stage a fixed stride too (kStep is a multiple of the swizzle's 8 rows, or the swizzle is redone).
// A slice then costs an add per copy. Rows past the bucket or the outputs, and columns past K, are
// copied as zeros.
template <class T, GateUpLayout L>
struct ExpertTileCopies {
  static constexpr int P = T::P;
  static_assert(T::kThreads % P == 0, "each thread keeps one piece column");
  static constexpr int kStep = T::kThreads / P;  // rows between a thread's consecutive pieces
  static_assert(kStep % 2 == 0, "gate_up: a thread's weight rows are all gate rows or all up rows");
  static constexpr int kACopies = ceil_div(T::BM, kStep);
  static constexpr int kWCopies = T::kTma ? 0 : ceil_div(T::kRows, kStep);  // with tma the copy engine brings them
  // weight rows between a thread's consecutive pieces: gate_up's tile rows are (gate, up) per neuron
  static constexpr int kWRowStep = !T::kGateUp ? kStep : L == GateUpLayout::kStacked ? kStep / 2 : kStep;
  const __nv_bfloat16* a_src[kACopies];  // activation piece j at k = 0 (the row's base when zeros)
  const __nv_bfloat16* w_src;            // weight piece 0 at k = 0
  // bit j: activation piece j is a routed pair's (else zeros); past 64 pieces the table says
  static constexpr bool kMask = kACopies <= 64;
  using Mask = std::conditional_t<kACopies <= 32, unsigned, unsigned long long>;
  Mask a_live;
  const int* pairs;
  int a_present, w_present, w_live;      // pieces within the tile; weight pieces of real outputs
  int row, column;                       // the first tile row and the column (elements) of this thread

  __device__ __forceinline__ ExpertTileCopies(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ w,
                                              const int* table, int e, int n0) {
    row = threadIdx.x / P;
    column = threadIdx.x % P * 8;
    a_live = 0;
    pairs = table;
#pragma unroll
    for (int j = 0; j < kACopies; ++j) {
      const int r = row + j * kStep;
      const int pair = r < T::BM ? table[r] : -1;
      // gate_up reads the pair's token's x row; down reads the pair's own inter row
      const size_t src_row = T::kGateUp ? static_cast<size_t>(pair / T::K) : static_cast<size_t>(pair);
      a_src[j] = pair >= 0 ? a + src_row * T::kReduce + column : a;
      if constexpr (kMask) a_live |= pair >= 0 ? Mask{1} << j : Mask{0};
    }
    a_present = row < T::BM ? ceil_div(T::BM - row, kStep) : 0;
    w_present = row < T::kRows ? ceil_div(T::kRows - row, kStep) : 0;
    int w_row, outputs_left;  // the first weight row, and outputs from its own to the last real one
    if constexpr (T::kGateUp) {  // gate of neuron i at tile row 2i, up at 2i + 1
      const int neuron = n0 + (row >> 1);
      w_row = (row & 1) ? up_row_of<L>(neuron, T::I) : gate_row_of<L>(neuron, T::I);
      outputs_left = T::I - neuron;
      w_live = outputs_left > 0 ? ceil_div(outputs_left, kStep / 2) : 0;
    } else {
      w_row = n0 + row;
      outputs_left = T::H - w_row;
      w_live = outputs_left > 0 ? ceil_div(outputs_left, kStep) : 0;
    }
    if (outputs_left <= 0 || T::kTma) w_row = 0;  // every piece zeros: any row in the matrix is a safe address
    w_src = w + (static_cast<size_t>(e) * T::kWeightRows + w_row) * T::kReduce + column;
  }

  __device__ __forceinline__ uint32_t place(int r) const { return tile_swizzled<P>(r, column / 8); }

  // Slice [k0, k0 + BK) into the stage at shared address `stage`.
  __device__ __forceinline__ void issue(uint32_t stage, int k0) const {
    const bool in_k = T::kReduce % T::BK == 0 || k0 + column < T::kReduce;
    const uint32_t a_at = stage + place(row), w_at = stage + place(T::BM + row);
#pragma unroll
    for (int j = 0; j < kACopies; ++j) {
      if (j >= a_present) break;
      const bool live = in_k && (kMask ? (a_live >> j & Mask{1}) != 0 : pairs[row + j * kStep] >= 0);
      // kStep a multiple of 8: the same swizzle every piece, so a fixed stride
      const uint32_t at = kStep % 8 == 0 ? a_at + 16u * j * kStep * P : stage + place(row + j * kStep);
      cp_async_16(at, live ? a_src[j] + k0 : a_src[j], live);
    }
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
      if (j >= w_present) break;
      const bool live = in_k && j < w_live;
      const uint32_t at = kStep % 8 == 0 ? w_at + 16u * j * kStep * P : stage + place(T::BM + row + j * kStep);
      const __nv_bfloat16* src = w_src + static_cast<size_t>(j) * kWRowStep * T::kReduce;
      cp_async_16(at, live ? src + k0 : w_src, live);
    }
  }
};

// Orders the block's generic-proxy accesses to shared memory (cp.async writes, ldmatrix reads)
// before the async proxy's (wgmma's reads, the copy engine's writes).
__device__ __forceinline__ void fence_shared_for_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The copy engine (sm_90 on): a thread arms a stage's mbarrier with the bytes it expects and starts
// one bulk tensor copy into the stage; the copy's bytes complete the barrier's phase, which every
// thread then waits for by parity.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }
}
// Box (c0, c1, c2, c3) of the 4-dimensional tensor `map` into this block's shared memory at dst (the
// .shared::cta destination: the .shared::cluster form costs sm_120a kernels a stack frame).
__device__ __forceinline__ void tensor_copy_4d(uint32_t dst, const TensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
#else
  __trap();  // the Validator lets tma only into sm_90 and later kernels
#endif
}

// A tile's weight slices by the copy engine: the map walks (K, gate or up, output row, expert), so
// one box is the slice's kRows weight rows in the stage's order and swizzle, zeros past the
// outputs and past K. Thread 0 starts each copy; every thread waits for its slice.
template <class T>
struct ExpertTileWeights {
  const TensorMap* map;
  uint32_t bars;  // S mbarriers, 8 bytes apart
  int n0, e;

  // Thread 0 sets up the barriers (with tma); the caller's block barrier makes them visible before any use.
  __device__ __forceinline__ ExpertTileWeights(const TensorMap* m, uint32_t barriers, int first_output, int expert)
      : map(m), bars(barriers), n0(first_output), e(expert) {
    if (T::kTma && threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < T::S; ++s) mbarrier_init(bars + 8 * s, 1);
      fence_barrier_init();
    }
  }

  // Thread 0: slice kt into its stage (base of the pipeline `pipe`).
  __device__ __forceinline__ void issue(uint32_t pipe, int kt) const {
    if (threadIdx.x == 0) {
      const int s = kt % T::S;
      const uint32_t bar = bars + 8 * s;
      mbarrier_expect_bytes(bar, T::kRows * 2 * T::BK);
      tensor_copy_4d(pipe + s * T::kStageBytes + T::BM * 2 * T::BK, map, bar, kt * T::BK, 0, n0, e);
    }
  }

  // Every thread: slice kt has landed.
  __device__ __forceinline__ void wait(int kt) const { mbarrier_wait(bars + 8 * (kt % T::S), (kt / T::S) & 1); }
};

// The tile's FP32 sums: acc[i][j] is m16 fragment i x n8 fragment j of this warp's TM x TN part.
template <class T, GateUpLayout L>
__device__ __forceinline__ void expert_tile_sums(float (&acc)[T::FM][T::FN][4], const __nv_bfloat16* __restrict__ a,
                                                 const __nv_bfloat16* __restrict__ w, const TensorMap* map, uint32_t bars,
                                                 const int* table, int e, int n0, uint32_t base) {
  constexpr int P = T::P, S = T::S;
  const ExpertTileCopies<T, L> copies(a, w, table, e, n0);
  const ExpertTileWeights<T> weights(map, bars, n0, e);
  if constexpr (T::kTma) __syncthreads();  // the barriers are set up
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
#pragma unroll
  for (int i = 0; i < T::FM; ++i)
#pragma unroll
    for (int j = 0; j < T::FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < T::kKTiles) {
      copies.issue(base + s * T::kStageBytes, s * T::BK);
      if constexpr (T::kTma) weights.issue(base, s);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < T::kKTiles; ++kt) {
    cp_async_wait<S - 2>();
    // ldmatrix's reads of slice kt - 1 come before the copy engine's writes of its stage
    if constexpr (T::kTma) fence_shared_for_async();
    __syncthreads();  // slice kt is in; every warp is done with slice kt - 1, whose stage is refilled next
    if constexpr (T::kTma) weights.wait(kt);
    const int next = kt + S - 1;
    if (next < T::kKTiles) {
      copies.issue(base + next % S * T::kStageBytes, next * T::BK);
      if constexpr (T::kTma) weights.issue(base, next);
    }
    cp_async_commit();
    const uint32_t stage = base + kt % S * T::kStageBytes;
#pragma unroll
    for (int kk = 0; kk < T::BK / 16; ++kk) {
      uint32_t af[T::FM][4];
#pragma unroll
      for (int i = 0; i < T::FM; ++i) ldmatrix_x4(af[i], stage + tile_swizzled<P>(row0 + 16 * i + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
      for (int j = 0; j < T::FN / 2; ++j) {
        uint32_t b[4];
        const int n = col0 + 16 * j + ((lane >> 4) << 3) + (lane & 7);
        ldmatrix_x4(b, stage + tile_swizzled<P>(T::BM + n, 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
        for (int i = 0; i < T::FM; ++i) {
          mma_bf16_16816(acc[i][2 * j], af[i], b[0], b[1]);
          mma_bf16_16816(acc[i][2 * j + 1], af[i], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the output staging
}

// Where a block's pipeline (and later its output staging) starts: right after the pair table (and
// the barriers), or for wgmma and tma at the next 1024-byte boundary.
template <class T>
__device__ __forceinline__ unsigned char* expert_tile_pipe(unsigned char* smem) {
  unsigned char* p = smem + T::kTableBytes + T::kBarrierBytes;
  if constexpr (T::kWgmma || T::kTma) {
    const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    p += ((at + 1023u) & ~1023u) - at;
  }
  return p;
}

// Hopper warpgroup MMA (sm_90a): operands in shared memory, K-major rows of 128 bytes in the
// 128-byte swizzle that ExpertTileCopies' layout already is (piece p of row r at p ^ (r % 8)).
// A descriptor: start address, stride of 8-row groups (1024 bytes), 128-byte swizzle; a k16 step
// within the 64-element row advances the start by 32 bytes.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// d (this warpgroup's 64 x N FP32, N / 2 per thread in mma.sync's m16n8 order per warp, n8 after n8)
// += A (64 x 16) B (N x 16)^T, both K-major in shared memory. One instruction over all the tile's
// weight rows: A is read from shared memory once per N columns, not once per 64.
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float* d, uint64_t a, uint64_t b) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma over 64, 128 or 256 weight rows");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(a), "l"(b));
  }
#else
  __trap();  // the Validator lets wgmma only into sm_90a kernels
#endif
}

// expert_tile_sums on wgmma: warpgroup g multiplies pair rows [64 m, 64 m + 64) by weight rows
// [TN n, TN n + TN) of the tile (m = g % (BM / 64), n = g / (BM / 64): warps_n = 1 gives each
// warpgroup every weight row), one instruction per k16 step. The pipeline keeps S - 2 slices loading and one
// warpgroup MMA group in flight: slice kt + S - 2 refills the stage of slice kt - 2, whose MMAs
// every warpgroup has waited for before the barrier of step kt.
template <class T, GateUpLayout L>
__device__ __forceinline__ void expert_tile_sums_wgmma(float (&acc)[T::FM][T::FN][4], const __nv_bfloat16* __restrict__ a,
                                                       const __nv_bfloat16* __restrict__ w, const TensorMap* map, uint32_t bars,
                                                       const int* table, int e, int n0, uint32_t base) {
  constexpr int S = T::S, D = S - 2;
  const ExpertTileCopies<T, L> copies(a, w, table, e, n0);
  const ExpertTileWeights<T> weights(map, bars, n0, e);
  if constexpr (T::kTma) __syncthreads();  // the barriers are set up
  const int group = threadIdx.x >> 7;
  const uint32_t a_rows = group % (T::BM / 64) * 64 * 128, w_rows = (T::BM + group / (T::BM / 64) * T::TN) * 128;
#pragma unroll
  for (int j = 0; j < T::FN; ++j) acc[0][j][0] = acc[0][j][1] = acc[0][j][2] = acc[0][j][3] = 0.0f;
#pragma unroll
  for (int s = 0; s < D; ++s) {
    if (s < T::kKTiles) {
      copies.issue(base + s * T::kStageBytes, s * T::BK);
      if constexpr (T::kTma) weights.issue(base, s);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < T::kKTiles; ++kt) {
    cp_async_wait<D - 1>();
    __syncthreads();  // slice kt is in for every thread; every warpgroup is done with slice kt - 2
    fence_shared_for_async();
    if constexpr (T::kTma) weights.wait(kt);
    const uint32_t stage = base + kt % S * T::kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::BK / 16; ++kk) {
      wgmma_m64k16<T::TN>(&acc[0][0][0], wgmma_descriptor(stage + a_rows + kk * 32), wgmma_descriptor(stage + w_rows + kk * 32));
    }
    wgmma_commit();
    wgmma_wait<1>();
    const int next = kt + D;
    if (next < T::kKTiles) {
      copies.issue(base + next % S * T::kStageBytes, next * T::BK);
      if constexpr (T::kTma) weights.issue(base, next);
    }
    cp_async_commit();
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the output staging
}

// The tile's sums by the schedule's MMA and pipeline.
template <class T, GateUpLayout L>
__device__ __forceinline__ void expert_tile_run(float (&acc)[T::FM][T::FN][4], const __nv_bfloat16* __restrict__ a,
                                                const WeightArgs& w, const int* table, int e, int n0, unsigned char* smem,
                                                uint32_t base) {
  const __nv_bfloat16* codes = static_cast<const __nv_bfloat16*>(w.codes);
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(smem + T::kTableBytes));
  if constexpr (T::kWgmma) {
    expert_tile_sums_wgmma<T, L>(acc, a, codes, w.map, bars, table, e, n0, base);
  } else {
    expert_tile_sums<T, L>(acc, a, codes, w.map, bars, table, e, n0, base);
  }
}

// Fills the block's pair table: row r is pair sorted_slots[first + r], or -1 past the bucket's end.
template <class T>
__device__ __forceinline__ void expert_tile_table(int* table, const int* __restrict__ sorted_slots, int first, int end) {
  for (int r = threadIdx.x; r < T::BM; r += T::kThreads) table[r] = first + r < end ? sorted_slots[first + r] : -1;
  __syncthreads();
}

template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_expert_centric(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                       const int* __restrict__ topk_ids, const int* __restrict__ sorted_slots,
                                                       const int* __restrict__ expert_offsets,
                                                       __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi) {
  using T = ExpertTileShape<Config, true>;
  static_assert(Config::Format::kElement == Element::kBf16, "expert_centric takes bf16 weights");
  constexpr GateUpLayout L = Config::kLayout;
  constexpr bool BIAS = Config::kBias;
  constexpr int I = T::I, BN = T::BN;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int found[3];
  int n_tile;
  if (!expert_tile_of_block<T>(expert_offsets, num_tokens * T::K, found, n_tile)) return;  // uniform over the block
  const int e = found[0], n0 = n_tile * BN;
  int* table = reinterpret_cast<int*>(smem);
  expert_tile_table<T>(table, sorted_slots, found[1], found[2]);
  unsigned char* pipe = expert_tile_pipe<T>(smem);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(pipe));
  float acc[T::FM][T::FN][4];
  expert_tile_run<T, L>(acc, x, w_gate_up, table, e, n0, smem, base);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
  __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(pipe);
#pragma unroll
  for (int j = 0; j < T::FN; ++j) {
    const int local = (col0 + 8 * j + 2 * t) >> 1;  // the neuron of this thread's (gate, up) pair
    const int neuron = n0 + local;
    const bool real = neuron < I;
    const float gate_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, gate_row_of<L>(neuron, I)) : 0.0f;
    const float up_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, up_row_of<L>(neuron, I)) : 0.0f;
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v = epi(add_bias<BIAS>(acc[i][j][2 * h], gate_bias), add_bias<BIAS>(acc[i][j][2 * h + 1], up_bias));
        out[(row0 + 16 * i + g + 8 * h) * T::kOutStride + local] = __float2bfloat16_rn(v);
      }
  }
  __syncthreads();
  constexpr int kPieces = BN / 8;
  for (int i = threadIdx.x; i < T::BM * kPieces; i += T::kThreads) {
    const int r = i / kPieces, piece = i % kPieces, n = n0 + piece * 8;
    const int pair = table[r];
    if (pair >= 0 && n < I) {
      *reinterpret_cast<uint4*>(inter + static_cast<size_t>(pair) * I + n) =
          *reinterpret_cast<const uint4*>(out + r * T::kOutStride + piece * 8);
    }
  }
}

// Four floats as four bf16 (round to nearest) in 8 bytes, and back (a bf16 is a float's high half).
__device__ __forceinline__ uint32_t bf16x2_bits(float a, float b) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(a))) |
         static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(b))) << 16;
}
__device__ __forceinline__ uint2 bf16x4_of(float4 v) { return make_uint2(bf16x2_bits(v.x, v.y), bf16x2_bits(v.z, v.w)); }
__device__ __forceinline__ float4 float4_of_bf16x4(uint2 u) {
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xFFFF0000u));
}

// sum[0..4) += v in L2, one vector reduction where the target has it (sm_90 on), else four.
__device__ __forceinline__ void add_float4_at(float* sum, float4 v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(sum), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
#else
  atomicAdd(sum, v.x);
  atomicAdd(sum + 1, v.y);
  atomicAdd(sum + 2, v.z);
  atomicAdd(sum + 3, v.w);
#endif
}

// down: each pair's weighted partial row (routing weight x (sum + bias), rounded to bf16) goes to
// partials [M*k][H]; the block that completes a token's k partials of an n tile (a ticket per token
// and n tile, reset by that block) adds them in slot order in FP32 and stores y. Deterministic: the
// sum's order is fixed whatever order the blocks run in. With kAtomicCombine, partials is FP32 [M][H]
// instead: each pair's row is added atomically into its token's sum, which the completing block
// stores and zeroes (less traffic; the additions' order, so y's last bits, may vary).
template <class Config, class Epilogue, class Partial>
__device__ __forceinline__ void down_expert_centric(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down,
                                                    const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                                    const int* __restrict__ sorted_slots, const int* __restrict__ expert_offsets,
                                                    __nv_bfloat16* __restrict__ y, Partial* __restrict__ partials,
                                                    int* __restrict__ tickets, int num_tokens, Epilogue epi) {
  using T = ExpertTileShape<Config, false>;
  static_assert(Config::Format::kElement == Element::kBf16, "expert_centric takes bf16 weights");
  constexpr bool BIAS = Config::kBias;
  constexpr int H = T::H, K = T::K, E = T::E, BN = T::BN;
  static_assert(std::is_same_v<Partial, std::conditional_t<Config::kAtomicCombine, float, __nv_bfloat16>>,
                "partials: FP32 sums with the atomic combine, bf16 rows with the ordered one");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int found[3];
  int n_tile;
  if (!expert_tile_of_block<T>(expert_offsets, num_tokens * K, found, n_tile)) return;  // uniform over the block
  const int e = found[0], n0 = n_tile * BN;
  int* table = reinterpret_cast<int*>(smem);
  int* reducing = table + T::BM;
  expert_tile_table<T>(table, sorted_slots, found[1], found[2]);
  unsigned char* pipe = expert_tile_pipe<T>(smem);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(pipe));
  float acc[T::FM][T::FN][4];
  const bool routed = e < E;  // bucket E: ids outside [0, E) add zero rows
  if (routed) {
    expert_tile_run<T, GateUpLayout::kStacked>(acc, inter, w_down, table, e, n0, smem, base);
  } else {
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int j = 0; j < T::FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
  float* out = reinterpret_cast<float*>(pipe);
#pragma unroll
  for (int i = 0; i < T::FM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * i + g + 8 * h;
      const int pair = table[r];
      const float weight = routed && pair >= 0 ? __ldg(topk_weights + pair) : 0.0f;
#pragma unroll
      for (int j = 0; j < T::FN; ++j) {
        const int col = col0 + 8 * j + 2 * t;
        const bool real = routed && n0 + col < H;
        const float b0 = real ? load_bias<BIAS, H>(w_down, e, n0 + col) : 0.0f;
        const float b1 = real ? load_bias<BIAS, H>(w_down, e, n0 + col + 1) : 0.0f;
        *reinterpret_cast<float2*>(out + r * T::kOutStride + col) =
            make_float2(weight * add_bias<BIAS>(acc[i][j][2 * h], b0), weight * add_bias<BIAS>(acc[i][j][2 * h + 1], b1));
      }
    }
  __syncthreads();
  constexpr int kPieces = BN / 4;
  for (int i = threadIdx.x; i < T::BM * kPieces; i += T::kThreads) {
    const int r = i / kPieces, piece = i % kPieces, n = n0 + piece * 4;
    const int pair = table[r];
    if (pair >= 0 && n < H) {
      const float4 v = *reinterpret_cast<const float4*>(out + r * T::kOutStride + piece * 4);
      if constexpr (Config::kAtomicCombine) {  // partials is [M][H]: each token's running sum
        add_float4_at(partials + static_cast<size_t>(pair / K) * H + n, v);
      } else {  // partials is [M*k][H]: each pair's own row
        *reinterpret_cast<uint2*>(partials + static_cast<size_t>(pair) * H + n) = bf16x4_of(v);
      }
    }
  }
  __threadfence();  // the partials are visible before the tickets that announce them
  __syncthreads();
  for (int r = threadIdx.x; r < T::BM; r += T::kThreads) {
    const int pair = table[r];
    int token = -1;
    if (pair >= 0) {
      int* ticket = tickets + static_cast<size_t>(pair / K) * T::kNTiles + n_tile;
      if (atomicAdd(ticket, 1) == K - 1) {
        token = pair / K;
        *ticket = 0;  // every partial has arrived: ready for the next launch
      }
    }
    reducing[r] = token;
  }
  __syncthreads();
  __threadfence();
  for (int i = threadIdx.x; i < T::BM * kPieces; i += T::kThreads) {
    const int r = i / kPieces, piece = i % kPieces, n = n0 + piece * 4;
    const int token = reducing[r];
    if (token < 0 || n >= H) continue;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (Config::kAtomicCombine) {
      float4* at = reinterpret_cast<float4*>(partials + static_cast<size_t>(token) * H + n);
      sum = __ldcg(at);
      __stcg(at, make_float4(0.0f, 0.0f, 0.0f, 0.0f));  // zero again for the next launch
    } else {
#pragma unroll 4
      for (int j = 0; j < K; ++j) {
        const float4 v = float4_of_bf16x4(__ldcg(reinterpret_cast<const uint2*>(partials + (static_cast<size_t>(token) * K + j) * H + n)));
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
    }
    __nv_bfloat16* dst = y + static_cast<size_t>(token) * H + n;
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(epi(sum.x), epi(sum.y));
    *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(epi(sum.z), epi(sum.w));
  }
}

}  // namespace mf
