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
// writes expert_offsets. With one segment (a decode batch's few hundred pairs) the warp counts the
// pairs itself and segment_counts is not read: the plan is this launch alone. smem: 2 (E + 1) ints.
__device__ __forceinline__ void routing_align_scatter(const int* __restrict__ topk_ids, const int* __restrict__ segment_counts,
                                                      int* __restrict__ sorted_slots, int* __restrict__ expert_offsets,
                                                      int pairs, int experts, int segment, int segments, int* smem) {
  const int lane = threadIdx.x, s = blockIdx.x, buckets = experts + 1;
  int* next = smem;            // where this segment's next pair of bucket b goes
  int* total = smem + buckets;  // bucket b's pairs in every segment
  if (segments == 1) {
    for (int b = lane; b < buckets; b += 32) {
      next[b] = 0;
      total[b] = 0;
    }
    __syncwarp();
    for (int i = lane; i < pairs; i += 32) atomicAdd(&total[align_bucket(__ldg(topk_ids + i), experts)], 1);
  } else {
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
// distinct bank groups. Rows of 8 pieces are exactly wgmma's 128-byte swizzle. PIECE_READS (the
// 4-bit tiles' activation rows, read a 16-byte piece a lane, rows g and g + 1 in one quarter warp
// at pieces 4c..4c + 3): consecutive rows XOR opposite halves of the eight bank groups.
template <int P, bool PIECE_READS = false>
__device__ __forceinline__ uint32_t tile_swizzled(int row, int piece) {
  static_assert(P == 4 || P == 8 || P == 16, "rows of 4, 8 or 16 pieces");
  static_assert(!PIECE_READS || P >= 8, "piece reads: rows of 8 or 16 pieces");
  const int mix = P == 4 ? (row >> 1) & 3 : PIECE_READS ? (row & 1) << 2 | (row >> 1) & 3 : row & 7;
  return 16u * static_cast<uint32_t>(row * P + (piece ^ mix));
}

// Byte offset of 16-byte piece p of a staged row of 4-bit codes (PIECES of them): each lane of an
// n8 fragment reads one word of its row's piece, so the fragment's 8 rows must fill 8 distinct
// bank groups; the piece is XORed with the row bits above those that already spread the rows.
template <int PIECES>
__device__ __forceinline__ uint32_t code_swizzled(int row, int piece) {
  static_assert(PIECES == 2 || PIECES == 4, "code rows of 32 or 64 bytes");
  const int mix = PIECES == 4 ? (row >> 1) & 3 : (row >> 2) & 1;
  return 16u * static_cast<uint32_t>(row * PIECES + (piece ^ mix));
}

// W8A8 activation rows (Fp8ActivationRows, Java): a row of n values as E4M3 codes in groups of 128,
// then each group's FP32 scale (amax / 448, so the largest lands on E4M3's largest), padded to 16 bytes.
__host__ __device__ constexpr int fp8_row_bytes(int n) { return n + (n / 128 * 4 + 15) / 16 * 16; }

// Two floats as E4M3 codes, a in the low byte: round to nearest even, saturating at +-448.
__device__ __forceinline__ uint32_t e4m3x2_of(float a, float b) {
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(pair) : "f"(b), "f"(a));
  return pair;
}

// One group of 128 bf16 values at src (4 per lane) quantised: codes to dst (4 bytes per lane), the scale
// (lane 0) to scale. The whole warp takes part.
__device__ __forceinline__ void quantise_group_e4m3(const __nv_bfloat16* src, uint8_t* dst, float* scale, int lane) {
  const uint2 raw = *reinterpret_cast<const uint2*>(src + 4 * lane);
  const float v0 = bf16_lo(raw.x), v1 = bf16_hi(raw.x), v2 = bf16_lo(raw.y), v3 = bf16_hi(raw.y);
  float amax = fmaxf(fmaxf(fabsf(v0), fabsf(v1)), fmaxf(fabsf(v2), fabsf(v3)));
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, d));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;  // divisions as the reference rounds them
  *reinterpret_cast<uint32_t*>(dst + 4 * lane) = e4m3x2_of(v0 / s, v1 / s) | e4m3x2_of(v2 / s, v3 / s) << 16;
  if (lane == 0) *scale = s;
}

// rows x N bf16 (x) into quantised rows (out), a warp per group of 128; the grid covers rows x N / 128 warps.
template <int N>
__device__ __forceinline__ void quantise_rows_fp8(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ out, int rows) {
  static_assert(N % 128 == 0, "whole groups of 128");
  constexpr int kGroups = N / 128;
  const long long task = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (task >= static_cast<long long>(rows) * kGroups) return;  // uniform over the warp
  const int row = static_cast<int>(task / kGroups), group = static_cast<int>(task % kGroups);
  uint8_t* dst = out + static_cast<size_t>(row) * fp8_row_bytes(N);
  quantise_group_e4m3(x + static_cast<size_t>(row) * N + group * 128, dst + group * 128, reinterpret_cast<float*>(dst + N) + group,
                      threadIdx.x & 31);
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
  // swap-AB (wgmma, bf16): the tile's weight rows are the MMA's M side, 64 a slab, and its BM pairs the
  // N side; every warp takes all the pairs, warpgroups split the weight rows
  static constexpr bool kSwapAb = Config::kSwapAb;
  // producer warps after the MMA warps fill the stages (activation rows by cp.async, weight tiles by
  // the copy engine) and stage barriers replace the block barrier of each slice
  static constexpr int kProducerThreads = 32 * Config::kProducerWarps;
  static constexpr bool kProducer = kProducerThreads > 0;
  // W8A8: E4M3 weights in 128 x 128 blocks times activations quantised per row in groups of 128; a
  // slice is one block, whose sums are scaled before they join the accumulators
  static constexpr bool kFp8 = Config::Format::kElement == Element::kE4M3;
  // 4-bit weights (E2M1 codes with E4M3 or E8M0 K-block scales): a stage holds a slice's codes and
  // scales. With one warp row each warp decodes the B fragments of its own columns in registers
  // (four_bit_slice_mmas); with several, whose warps share columns, the block decodes the slice once
  // into bf16 weight rows that the MMAs then read (decode_weight_slice)
  static constexpr bool kFourBit = Config::Format::kElement == Element::kE2M1;
  static constexpr bool kDecodeInRegisters = kFourBit && WM == 1;
  static constexpr bool kDecodeSlice = kFourBit && WM > 1;
  using Format = typename Config::Format;
  static constexpr int kElementBytes = kFp8 ? 1 : 2;  // a staged activation element (and a decoded slice's weight)
  static constexpr bool kGateUp = GATE_UP;
  static constexpr int kReduce = GATE_UP ? H : I;          // the GEMM's K
  static constexpr int kOutputs = GATE_UP ? I : H;         // outputs per pair
  static constexpr int kWeightRows = GATE_UP ? 2 * I : H;  // rows of one expert's weight
  // weight rows per tile: gate_up stages the gate and up rows of its BN neurons interleaved (gate of
  // neuron i at 2i, up at 2i + 1), so each accumulator pair of an mma is one neuron's (gate, up)
  static constexpr int kRows = GATE_UP ? 2 * BN : BN;
  static constexpr int kMmaThreads = 32 * WM * WN;  // the warps that own the tile's sums
  static constexpr int kThreads = kMmaThreads + kProducerThreads;
  static constexpr int kCopyThreads = kProducer ? kProducerThreads : kThreads;  // the threads that issue the cp.async copies
  static constexpr int TM = BM / WM, TN = kRows / WN;  // one warp's part of the tile
  // its m16 and n8 fragments; swap-AB: m16 along its weight rows (one per 64-row slab), n8 along the pairs
  static constexpr int FM = kSwapAb ? TN / 16 : TM / 16, FN = kSwapAb ? BM / 8 : TN / 8;
  static constexpr int kSwapGroupRows = kSwapAb && WN >= 4 ? kRows / (WN / 4) : 0;  // swap-AB: a warpgroup's weight rows
  static constexpr int kRowBytes = BK * kElementBytes;  // a staged row of a slice
  static constexpr int P = kRowBytes / 16;              // its 16-byte pieces
  static constexpr int kCodeRowBytes = kFourBit ? BK / 2 : 0;                  // a weight row's codes in a slice
  static constexpr int kScaleRowBytes = kFourBit ? BK / Config::Format::kBlock : 0;  // and its K-block scales
  static constexpr int kStageBytes = kFourBit ? BM * kRowBytes + kRows * (kCodeRowBytes + kScaleRowBytes) : (BM + kRows) * kRowBytes;
  static constexpr int kDecodedBytes = kDecodeSlice ? kRows * kRowBytes : 0;  // the slice's weight rows as bf16
  // elements between consecutive activation rows: x or inter rows, or their quantised rows (codes, then scales)
  static constexpr int kAStride = kFp8 ? fp8_row_bytes(kReduce) : kReduce;
  static constexpr int kOutRowElements = kFp8 ? fp8_row_bytes(kOutputs) : kOutputs;  // gate_up's rows of inter
  static constexpr int kOutStride = GATE_UP ? BN + 8 : BN + 4;  // staged output row, in elements
  static constexpr int kOutBytes = BM * kOutStride * (GATE_UP ? 2 : 4);
  static constexpr int kTableBytes = 8 * BM;  // each row's pair (or -1), then down's reducing token (or -1)
  static constexpr int kPipeBytes = S * kStageBytes + kDecodedBytes;
  // one mbarrier per stage (its weight tile has landed; with the producer: its slice has landed), and
  // with the producer one more per stage (every MMA warp with a pair in its rows is done with it)
  static constexpr int kBarrierBytes = kTma ? 8 * S * (kProducer ? 2 : 1) : 0;
  // wgmma reads and the copy engine writes the stages in the 128-byte swizzle, whose pattern needs
  // 1024-byte aligned stages: the pipeline starts at the first such address past the table and barriers
  static constexpr int kAlignSlack = kWgmma || kTma ? 1024 : 0;
  static constexpr int kSharedBytes =
      kTableBytes + kBarrierBytes + kAlignSlack + (kPipeBytes > kOutBytes ? kPipeBytes : kOutBytes);
  static constexpr int kKTiles = ceil_div(kReduce, BK);
  static constexpr int kNTiles = ceil_div(kOutputs, BN);
  static constexpr int kBuckets = GATE_UP ? E : E + 1;  // gate_up skips the ids outside [0, E)
  static_assert(kSwapAb ? BM % 8 == 0 && WM == 1 : BM % 16 == 0 && TM % 16 == 0 && WM * TM == BM,
                "a warp owns whole m16 rows of the tile (swap-AB: every pair, in n8 columns)");
  static_assert(TN % 16 == 0 && WN * TN == kRows, "a warp owns whole pairs of n8 columns of the tile");
  static_assert(kRowBytes == 64 || kRowBytes == 128 || kRowBytes == 256, "a staged row is 4, 8 or 16 16-byte pieces");
  static_assert(BN % 8 == 0 && kReduce % 8 == 0 && kOutputs % 8 == 0, "rows move in 16-byte pieces");
  static_assert(S >= 2, "a pipeline of at least two stages");
  static_assert(!kTma || kRowBytes == 128, "tma: 128-byte rows, the copy engine's 128-byte swizzle");
  static_assert(!kFp8 || (kTma && BK == 128 && kReduce % 128 == 0 && kOutputs % 128 == 0 && (!GATE_UP || BN % 128 == 0)),
                "fp8: weight tiles by the copy engine, a slice per 128 x 128 scale block, whole groups of 128");
  static_assert(!kFp8 || TN % 128 == 0 || 128 % TN == 0, "fp8: a warp's columns cover whole scale blocks or lie in one");
  static_assert(!kFourBit || (!kTma && !kWgmma && (BK == 64 || BK == 128) && kReduce % BK == 0 && kScaleRowBytes >= 4),
                "4-bit weights: mma.sync on cp.async stages, slices of 64 or 128 in whole slices of K, 4 or 8 scale bytes a row");
  static_assert(!kWgmma || kSwapAb || (kRowBytes == 128 && (WN == 1 || WN == 2) && TM == 16 && WM % 4 == 0 && TN % 64 == 0 && TN <= 256 && S >= 3),
                "wgmma: 128-byte rows, a warpgroup per 64 rows owning every weight row or half of them, at least three stages");
  static_assert(!kSwapAb || (kWgmma && !kFp8 && !kFourBit && kRowBytes == 128 && (WN == 4 || WN == 8) && kSwapGroupRows % 64 == 0 &&
                             (BM == 8 || BM == 16 || BM == 32 || BM == 64) && S >= 3),
                "swap-AB: wgmma on bf16, one or two warpgroups of whole 64-row slabs, 8 to 64 pairs, at least three stages");
  static_assert(!kProducer || (kWgmma && kTma), "the producer feeds wgmma tiles whose weights come by the copy engine");
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

// The weight row of tile row r (gate_up: gate of neuron i at tile row 2i, up at 2i + 1), and how
// many outputs there are from its own to the last real one; row 0 where it is past them (any row
// of the matrix is a safe address for a copy of zeros).
template <class T, GateUpLayout L>
__device__ __forceinline__ int expert_tile_weight_row(int r, int n0, int& outputs_left) {
  if constexpr (T::kGateUp) {
    const int neuron = n0 + (r >> 1);
    outputs_left = T::I - neuron;
    return outputs_left <= 0 ? 0 : (r & 1) ? up_row_of<L>(neuron, T::I) : gate_row_of<L>(neuron, T::I);
  } else {
    outputs_left = T::H - (n0 + r);
    return outputs_left <= 0 ? 0 : n0 + r;
  }
}

// Weight rows between a thread's copies kStep tile rows apart: gate_up's tile rows are (gate, up)
// per neuron, so stacked gate_up steps kStep / 2 rows of its matrix.
template <class T, GateUpLayout L, int kStep>
constexpr int kExpertTileWeightRowStep = !T::kGateUp ? kStep : L == GateUpLayout::kStacked ? kStep / 2 : kStep;

// The copies one thread issues for every k slice of a tile. A thread keeps one 16-byte
// column of the slice (the block's threads are a multiple of its pieces) and every kStep-th row from
// its first, at every k: so the gather through the pair table is done once per tile (a pointer per
// activation row it owns), its weight rows (without tma) are one pointer and a fixed stride, and its
// places in a stage a fixed stride too (kStep is a multiple of the swizzle's 8 rows, or the swizzle
// is redone). A slice then costs an add per copy. Rows past the bucket or the outputs, and columns
// past K, are copied as zeros. With tma the copy engine brings the weight rows (ExpertTileWeights).
template <class T, GateUpLayout L>
struct ExpertTileCopies {
  static constexpr int P = T::P;
  static_assert(T::kCopyThreads % P == 0, "each thread keeps one piece column");
  static constexpr int kStep = T::kCopyThreads / P;  // rows between a thread's consecutive pieces
  static_assert(kStep % 2 == 0, "gate_up: a thread's weight rows are all gate rows or all up rows");
  static constexpr int kPieceElements = 16 / T::kElementBytes;
  static constexpr int kACopies = ceil_div(T::BM, kStep);
  static constexpr int kWCopies = T::kTma || T::kFourBit ? 0 : ceil_div(T::kRows, kStep);
  static constexpr int kWRowStep = kExpertTileWeightRowStep<T, L, kStep>;
  using AElement = std::conditional_t<T::kFp8, uint8_t, __nv_bfloat16>;  // an activation row's element
  const AElement* a_src[kACopies];        // activation piece j at k = 0 (the row's base when zeros)
  const __nv_bfloat16* w_src = nullptr;   // weight piece 0 at k = 0 (without tma)
  // bit j: activation piece j is a routed pair's (else zeros); past 64 pieces the table says
  static constexpr bool kMask = kACopies <= 64;
  using Mask = std::conditional_t<kACopies <= 32, unsigned, unsigned long long>;
  Mask a_live;
  const int* pairs;
  int a_present, w_present = 0, w_live = 0;  // pieces within the tile; weight pieces of real outputs
  int row, column;                           // the first tile row and the column (elements) of this thread

  // copier: this thread's place among the T::kCopyThreads threads that issue copies
  __device__ __forceinline__ ExpertTileCopies(const AElement* __restrict__ a, const void* __restrict__ w, const int* table,
                                              int e, int n0, int copier) {
    row = copier / P;
    column = copier % P * kPieceElements;
    a_live = 0;
    pairs = table;
#pragma unroll
    for (int j = 0; j < kACopies; ++j) {
      const int r = row + j * kStep;
      const int pair = r < T::BM ? table[r] : -1;
      // gate_up reads the pair's token's x row; down reads the pair's own inter row
      const size_t src_row = T::kGateUp ? static_cast<size_t>(pair / T::K) : static_cast<size_t>(pair);
      a_src[j] = pair >= 0 ? a + src_row * T::kAStride + column : a;
      if constexpr (kMask) a_live |= pair >= 0 ? Mask{1} << j : Mask{0};
    }
    a_present = row < T::BM ? ceil_div(T::BM - row, kStep) : 0;
    if constexpr (!T::kTma && !T::kFourBit) {
      w_present = row < T::kRows ? ceil_div(T::kRows - row, kStep) : 0;
      int outputs_left;
      const int w_row = expert_tile_weight_row<T, L>(row, n0, outputs_left);
      w_live = outputs_left > 0 ? ceil_div(outputs_left, T::kGateUp ? kStep / 2 : kStep) : 0;
      w_src = static_cast<const __nv_bfloat16*>(w) + (static_cast<size_t>(e) * T::kWeightRows + w_row) * T::kReduce + column;
    }
  }

  __device__ __forceinline__ uint32_t place(int r) const { return tile_swizzled<P, T::kDecodeInRegisters>(r, column / kPieceElements); }

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

// 4 or 8 bytes global -> shared (cp.async's .ca form, the only one for copies under 16 bytes);
// valid == false writes zeros.
template <int BYTES>
__device__ __forceinline__ void cp_async_small(uint32_t dst, const void* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8, "cp.async copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(valid ? BYTES : 0)
               : "memory");
}

// 4-bit weights: the copies of a slice's codes and K-block scales into a stage, after its
// activation rows: the codes of the tile's weight rows (kCodeRowBytes each, pieces placed by
// code_swizzled), then their scales (kScaleRowBytes each). As in
// ExpertTileCopies a thread keeps one piece column and every kStep-th row, so a slice costs an add
// per copy; rows past the outputs arrive as zeros (codes and scales 0: zero weights).
template <class T, GateUpLayout L>
struct ExpertTileCodes {
  using F = typename T::Format;
  static constexpr int kPieces = T::kCodeRowBytes / 16;
  static_assert(T::kCopyThreads % kPieces == 0, "each thread keeps one piece column of the codes");
  static constexpr int kStep = T::kCopyThreads / kPieces;
  static_assert(kStep % 8 == 0, "a thread's code rows 8 apart: one code swizzle for them all (and gate_up's all gate or all up rows)");
  static constexpr int kCopies = ceil_div(T::kRows, kStep);
  static constexpr int kScaleCopies = ceil_div(T::kRows, T::kCopyThreads);
  static constexpr int kWRowStep = kExpertTileWeightRowStep<T, L, kStep>;
  static constexpr int kCodeBytes = T::kReduce / 2;                 // a weight row's codes
  static constexpr int kScaleBytes = T::kReduce / F::kBlock;        // and its scales
  const unsigned char* code_src;                 // piece 0's row at k = 0
  const unsigned char* scale_src[kScaleCopies];  // each scale row's at k = 0
  int row, piece, present, live;                 // first tile row, piece column, pieces in the tile, of real outputs
  unsigned scale_live = 0;                       // bit j: scale row j is of a real output

  __device__ __forceinline__ ExpertTileCodes(const WeightArgs& w, int e, int n0, int copier) {
    row = copier / kPieces;
    piece = copier % kPieces;
    present = row < T::kRows ? ceil_div(T::kRows - row, kStep) : 0;
    int outputs_left;
    const int w_row = expert_tile_weight_row<T, L>(row, n0, outputs_left);
    live = outputs_left > 0 ? ceil_div(outputs_left, T::kGateUp ? kStep / 2 : kStep) : 0;
    code_src = reinterpret_cast<const unsigned char*>(row_codes<F, T::kWeightRows, T::kReduce>(w, e, w_row)) + 16 * piece;
#pragma unroll
    for (int j = 0; j < kScaleCopies; ++j) {
      const int r = copier + j * T::kCopyThreads;
      const int scale_row = expert_tile_weight_row<T, L>(r < T::kRows ? r : 0, n0, outputs_left);
      scale_live |= r < T::kRows && outputs_left > 0 ? 1u << j : 0u;
      scale_src[j] = row_block_scales<F, T::kWeightRows, T::kReduce>(w, e, scale_row);
    }
  }

  // Slice [k0, k0 + BK)'s codes and scales into the stage at shared address `stage`.
  __device__ __forceinline__ void issue(uint32_t stage, int k0) const {
    const uint32_t codes = stage + T::BM * T::kRowBytes;
    const uint32_t scales = codes + T::kRows * T::kCodeRowBytes;
    const uint32_t at = codes + code_swizzled<kPieces>(row, piece);  // kStep rows on: the same swizzle
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      if (j >= present) break;
      const bool ok = j < live;
      const unsigned char* src = code_src + static_cast<size_t>(j) * kWRowStep * kCodeBytes;
      cp_async_16(at + j * kStep * T::kCodeRowBytes, ok ? src + k0 / 2 : code_src, ok);
    }
    const int copier = row * kPieces + piece;
#pragma unroll
    for (int j = 0; j < kScaleCopies; ++j) {
      const int r = copier + j * T::kCopyThreads;
      if (r >= T::kRows) break;
      const bool ok = (scale_live >> j & 1u) != 0;
      cp_async_small<T::kScaleRowBytes>(scales + r * T::kScaleRowBytes, ok ? scale_src[j] + k0 / F::kBlock : scale_src[0], ok);
    }
  }
};

// 4-bit weights on tiles of several warp rows (kDecodeSlice), whose warps share columns: the block
// decodes the slice's codes in `stage` once into bf16 weight rows at `decoded`, in the swizzled order
// the bf16 stages have, so the MMAs read them as they read bf16 weights. The
// K-block scales fold into the bf16 values exactly (TileDecode); the power of two left and the
// tensor's factor multiply the sums in the epilogue (expert_tile_factor). A thread takes 32 codes
// of a row at a time: four 16-byte pieces of the row out.
template <class T>
__device__ __forceinline__ void decode_weight_slice(uint32_t stage, uint32_t decoded) {
  using F = typename T::Format;
  constexpr int kPerRow = T::kCodeRowBytes / 16;
  const uint32_t codes = stage + T::BM * T::kRowBytes;
  const uint32_t scales = codes + T::kRows * T::kCodeRowBytes;
  for (int c = threadIdx.x; c < T::kRows * kPerRow; c += T::kThreads) {
    const int r = c / kPerRow, q = c % kPerRow;
    Lane<16> chunk;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(chunk.w[0]), "=r"(chunk.w[1]), "=r"(chunk.w[2]), "=r"(chunk.w[3])
                 : "r"(codes + code_swizzled<kPerRow>(r, q))
                 : "memory");
    uint32_t raw;  // NVFP4: the chunk's two E4M3 scales; MXFP4: its one E8M0 scale
    if constexpr (F::kBlock == 16) {
      unsigned short two;
      asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(two) : "r"(scales + r * T::kScaleRowBytes + 2 * q) : "memory");
      raw = two;
    } else {
      static_assert(F::kBlock == 32, "a chunk of 32 codes spans one or two K-blocks");
      asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(raw) : "r"(scales + r * T::kScaleRowBytes + q) : "memory");
    }
    uint32_t p[16];  // pair j of word w: codes 8w + j and 8w + j + 4
    decode_tile_chunk<F>(chunk, raw, p);
#pragma unroll
    for (int w = 0; w < 4; ++w) {  // word w's 8 codes in row order: one 16-byte piece
      const uint32_t* v = p + 4 * w;
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(decoded + tile_swizzled<T::P>(r, 4 * q + w)),
                   "r"(__byte_perm(v[0], v[1], 0x5410)), "r"(__byte_perm(v[2], v[3], 0x5410)), "r"(__byte_perm(v[0], v[1], 0x7632)),
                   "r"(__byte_perm(v[2], v[3], 0x7632))
                   : "memory");
    }
  }
}

// 4-bit weights on tiles of one warp row (kDecodeInRegisters), where each weight column belongs to
// one warp: its MMAs of a slice straight from the codes in `stage`, no shared bf16 slice and no
// barrier for one. K inside an mma is in any order A and B agree on: lane t of a quad takes code word
// t of each 32-code chunk (nibbles j and j + 4 one bf16x2) and the same 8 activations, paired alike.
// A chunk's loads are issued one chunk ahead of its MMAs, so their latencies overlap.
template <class T>
__device__ __forceinline__ void four_bit_slice_mmas(float (&acc)[T::FM][T::FN][4], uint32_t stage, int row0, int col0) {
  using F = typename T::Format;
  constexpr int kChunks = T::BK / 32;
  constexpr int kPieces = T::kCodeRowBytes / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t codes = stage + T::BM * T::kRowBytes;
  const uint32_t scales = codes + T::kRows * T::kCodeRowBytes;
  uint32_t scale[T::FN][kChunks];  // column g of fragment j: the folded scale of lane t's codes of chunk c
#pragma unroll
  for (int j = 0; j < T::FN; ++j) {
    const uint32_t at = scales + (col0 + 8 * j + g) * T::kScaleRowBytes;
    uint32_t lo, hi = 0u;  // the row's K-block scales of the slice, 4 or 8 bytes
    if constexpr (T::kScaleRowBytes == 8) {
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(lo), "=r"(hi) : "r"(at) : "memory");
    } else {
      static_assert(T::kScaleRowBytes == 4, "4 or 8 scale bytes a row");
      asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(lo) : "r"(at) : "memory");
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if constexpr (F::kBlock == 16) {  // NVFP4: lane t's codes of chunk c lie in block 2c + t / 2
        if (c % 2 == 0) {
          const int b = 2 * c + (t >> 1);
          e4m3_scale_pair_bf16x2(__byte_perm(lo, hi, b | (b + 2) << 4), scale[j][c], scale[j][c + 1]);
        }
      } else {
        static_assert(F::kBlock == 32, "MXFP4: chunk c is block c");
        scale[j][c] = e8m0_scale_bf16x2(lo >> 8 * c & 0xffu);
      }
    }
  }
  struct Chunk {
    uint4 a[T::FM][2];  // rows g and g + 8 of each m16 fragment: activations 32c + 8t..8t + 7
    uint32_t w[T::FN];  // each n8 fragment's column g: code word t of chunk c
  };
  const auto load = [&](int c, Chunk& into) {
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(into.a[i][h].x), "=r"(into.a[i][h].y), "=r"(into.a[i][h].z), "=r"(into.a[i][h].w)
                     : "r"(stage + tile_swizzled<T::P, true>(row0 + 16 * i + 8 * h + g, 4 * c + t))
                     : "memory");
#pragma unroll
    for (int j = 0; j < T::FN; ++j)
      asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(into.w[j]) : "r"(codes + code_swizzled<kPieces>(col0 + 8 * j + g, c) + 4 * t) : "memory");
  };
  Chunk chunks[2];
  load(0, chunks[0]);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (c + 1 < kChunks) load(c + 1, chunks[(c + 1) % 2]);
    const Chunk& now = chunks[c % 2];
    uint32_t a[T::FM][2][4];  // paired as the codes are (pair_activation_word)
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = pair_activation_word(now.a[i][h]);
        a[i][h][0] = v.x, a[i][h][1] = v.y, a[i][h][2] = v.z, a[i][h][3] = v.w;
      }
#pragma unroll
    for (int j = 0; j < T::FN; ++j) {
      uint32_t b[4];
      e2m1_word_pairs(now.w[j], b);
#pragma unroll
      for (int q = 0; q < 4; ++q) b[q] = fold_block_scale<F>(b[q], scale[j][c]);
#pragma unroll
      for (int i = 0; i < T::FM; ++i) {
        const uint32_t a0[4] = {a[i][0][0], a[i][1][0], a[i][0][1], a[i][1][1]};
        const uint32_t a1[4] = {a[i][0][2], a[i][1][2], a[i][0][3], a[i][1][3]};
        mma_bf16_16816(acc[i][j], a0, b[0], b[1]);
        mma_bf16_16816(acc[i][j], a1, b[2], b[3]);
      }
    }
  }
}

// sum times factor where the format has one; the bf16 and FP8 sums as they are (bit for bit).
template <class T>
__device__ __forceinline__ float scaled_sum(float sum, float factor) {
  if constexpr (T::kFourBit) return sum * factor; else return sum;
}

// What a tile's sums are multiplied by before bias and activation: with 4-bit weights the tensor's
// factor (NVFP4) times the power of two the folded decode leaves in; 1 otherwise. proj: gate_up's
// gate (0) or up (1).
template <class T, int N, int P>
__device__ __forceinline__ float expert_tile_factor(const WeightArgs& w, int e, int n, int proj) {
  if constexpr (T::kFourBit) {
    using F = typename T::Format;
    return row_factor<F, N, P>(w, e, n, proj) * TileDecode<F>::kUnscale;
  } else {
    return 1.0f;
  }
}

// W8A8: the scales of this thread's accumulators, one per slice (a slice is one 128 x 128 weight
// block and one group of each activation row). Rows: the pair's activation row's scales (a row
// without a pair has zero sums, so any row's scale serves). Columns: a warp's columns lie in one
// scale block or cover whole ones (static_assert), so fragment j reads block j / 16; gate_up's
// column pairs are (gate, up) rows, which may lie in different blocks.
template <class T, GateUpLayout L>
struct ExpertTileScales {
  static constexpr int kSegments = T::TN >= 128 ? T::TN / 128 : 1;
  static constexpr int kKinds = T::kGateUp ? 2 : 1;  // gate_up: gate and up columns
  const float* a_scales[T::FM][2];   // the scales of rows g and g + 8 of each m16 fragment
  const float* w_scales[kSegments][kKinds];

  __device__ __forceinline__ ExpertTileScales(const uint8_t* __restrict__ a, const WeightArgs& w, const int* table, int e, int n0,
                                              int row0, int col0) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int pair = table[row0 + 16 * i + g + 8 * h];
        const size_t src_row = pair < 0 ? 0 : T::kGateUp ? static_cast<size_t>(pair / T::K) : static_cast<size_t>(pair);
        a_scales[i][h] = reinterpret_cast<const float*>(a + src_row * T::kAStride + T::kReduce);
      }
    constexpr int kRowBlocks = ceil_div(T::kWeightRows, 128);
    const float* blocks = static_cast<const float*>(w.block_scales) + static_cast<size_t>(e) * kRowBlocks * T::kKTiles;
#pragma unroll
    for (int s = 0; s < kSegments; ++s)
#pragma unroll
      for (int c = 0; c < kKinds; ++c) {
        int weight_row;
        if constexpr (T::kGateUp) {  // the segment's first neuron
          const int neuron = n0 + ((col0 + 128 * s) >> 1);
          weight_row = neuron >= T::I ? 0 : c ? up_row_of<L>(neuron, T::I) : gate_row_of<L>(neuron, T::I);
        } else {
          weight_row = n0 + col0 + 128 * s;
          if (weight_row >= T::H) weight_row = 0;  // columns past the outputs: zero sums
        }
        w_scales[s][c] = blocks + weight_row / 128 * T::kKTiles;
      }
  }

  // The slice's scales, then each sum of `part` scaled into acc.
  struct Slice {
    float a[T::FM][2];
    float w[kSegments][kKinds];
  };
  __device__ __forceinline__ Slice load(int kt) const {
    Slice v;
#pragma unroll
    for (int i = 0; i < T::FM; ++i) v.a[i][0] = __ldg(a_scales[i][0] + kt), v.a[i][1] = __ldg(a_scales[i][1] + kt);
#pragma unroll
    for (int s = 0; s < kSegments; ++s)
#pragma unroll
      for (int c = 0; c < kKinds; ++c) v.w[s][c] = __ldg(w_scales[s][c] + kt);
    return v;
  }
  __device__ __forceinline__ static void add_scaled(float (&acc)[T::FM][T::FN][4], float (&part)[T::FM][T::FN][4], const Slice& v) {
#pragma unroll
    for (int i = 0; i < T::FM; ++i)
#pragma unroll
      for (int j = 0; j < T::FN; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[i][j][q] = fmaf(part[i][j][q], v.a[i][q >> 1] * v.w[j / 16][kKinds == 2 ? q & 1 : 0], acc[i][j][q]);
          part[i][j][q] = 0.0f;
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
      mbarrier_expect_bytes(bar, T::kRows * T::kRowBytes);
      tensor_copy_4d(pipe + s * T::kStageBytes + T::BM * T::kRowBytes, map, bar, kt * T::BK, 0, n0, e);
    }
  }

  // Every thread: slice kt has landed.
  __device__ __forceinline__ void wait(int kt) const { mbarrier_wait(bars + 8 * (kt % T::S), (kt / T::S) & 1); }
};

// d += a (16x32, row) * b (32x8, col), E4M3 in, FP32 accumulate (sm_89 on). Its fragments hold the
// same bytes as mma_bf16_16816's, so the same ldmatrix loads feed it.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // every target the Validator knows has it
#endif
}

// Tiles of bf16 or FP8 weights copy no codes of their own (ExpertTileCopies or the copy engine bring the rows).
struct NoTileCodes {
  template <class... Any>
  __device__ __forceinline__ explicit NoTileCodes(Any...) {}
  __device__ __forceinline__ void issue(uint32_t, int) const {}
};

// bf16 tiles have no scales: the sums go straight into the accumulators.
struct NoTileScales {
  struct Slice {};
  template <class... Any>
  __device__ __forceinline__ explicit NoTileScales(Any...) {}
  __device__ __forceinline__ Slice load(int) const { return {}; }
};
template <class T, GateUpLayout L>
using TileScales = std::conditional_t<T::kFp8, ExpertTileScales<T, L>, NoTileScales>;

// Whether tile row `row` holds a routed pair. The table holds a bucket's pairs as a prefix, so a warp
// or warpgroup whose first row is padding has no pair at all: it skips its MMAs (its sums stay zero
// and none of its rows is stored). An expert's last tile is often mostly padding; row 0 never is (a
// block has a tile only where its bucket has a pair).
__device__ __forceinline__ bool tile_rows_live(const int* table, int row) { return table[row] >= 0; }

template <class T>
__device__ __forceinline__ void zero_tile_sums(float (&acc)[T::FM][T::FN][4]) {
#pragma unroll
  for (int i = 0; i < T::FM; ++i)
#pragma unroll
    for (int j = 0; j < T::FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
}

// The tile's FP32 sums: acc[i][j] is m16 fragment i x n8 fragment j of this warp's TM x TN part.
// fp8: each slice's sums gather in part, then join acc scaled.
template <class T, GateUpLayout L, class A>
__device__ __forceinline__ void expert_tile_sums(float (&acc)[T::FM][T::FN][4], const A* __restrict__ a, const WeightArgs& w,
                                                 uint32_t bars, const int* table, int e, int n0, uint32_t base) {
  constexpr int P = T::P, S = T::S;
  const ExpertTileCopies<T, L> copies(a, w.codes, table, e, n0, threadIdx.x);
  const ExpertTileWeights<T> weights(w.map, bars, n0, e);
  using Codes = std::conditional_t<T::kFourBit, ExpertTileCodes<T, L>, NoTileCodes>;
  const Codes codes(w, e, n0, threadIdx.x);
  // decoding a slice in shared memory: its weight rows in bf16, after the stages
  const uint32_t decoded = base + T::S * T::kStageBytes;
  if constexpr (T::kTma) __syncthreads();  // the barriers are set up
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
  const bool live = T::WM == 1 || tile_rows_live(table, row0);  // one warp row: row 0, always a pair
  const TileScales<T, L> scales(a, w, table, e, n0, row0, col0);
  float part[T::FM][T::FN][4];
  zero_tile_sums<T>(acc);
  zero_tile_sums<T>(part);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < T::kKTiles) {
      copies.issue(base + s * T::kStageBytes, s * T::BK);
      codes.issue(base + s * T::kStageBytes, s * T::BK);
      if constexpr (T::kTma) weights.issue(base, s);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < T::kKTiles; ++kt) {
    const auto slice_scales = scales.load(kt);
    cp_async_wait<S - 2>();
    // ldmatrix's reads of slice kt - 1 come before the copy engine's writes of its stage
    if constexpr (T::kTma) fence_shared_for_async();
    __syncthreads();  // slice kt is in; every warp is done with slice kt - 1, whose stage is refilled next
    if constexpr (T::kTma) weights.wait(kt);
    const int next = kt + S - 1;
    if (next < T::kKTiles) {
      copies.issue(base + next % S * T::kStageBytes, next * T::BK);
      codes.issue(base + next % S * T::kStageBytes, next * T::BK);
      if constexpr (T::kTma) weights.issue(base, next);
    }
    cp_async_commit();
    const uint32_t stage = base + kt % S * T::kStageBytes;
    if constexpr (T::kDecodeSlice) {
      decode_weight_slice<T>(stage, decoded);
      __syncthreads();  // every row is decoded before any warp reads it
    }
    if (!live) continue;  // this warp's rows are padding: its sums stay zero
    if constexpr (T::kDecodeInRegisters) {
      four_bit_slice_mmas<T>(acc, stage, row0, col0);
    } else {
      // the weight rows the MMAs read: the stage's, or the decoded slice's, rows numbered from 0
      const uint32_t w_rows = T::kDecodeSlice ? decoded : stage;
      constexpr int kW0 = T::kDecodeSlice ? 0 : T::BM;
#pragma unroll
      for (int kk = 0; kk < T::kRowBytes / 32; ++kk) {  // k16 of bf16 or k32 of E4M3: 32 bytes of each row
        uint32_t af[T::FM][4];
#pragma unroll
        for (int i = 0; i < T::FM; ++i) ldmatrix_x4(af[i], stage + tile_swizzled<P>(row0 + 16 * i + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < T::FN / 2; ++j) {
          uint32_t b[4];
          const int n = col0 + 16 * j + ((lane >> 4) << 3) + (lane & 7);
          ldmatrix_x4(b, w_rows + tile_swizzled<P>(kW0 + n, 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
          for (int i = 0; i < T::FM; ++i) {
            if constexpr (T::kFp8) {
              mma_e4m3_16832(part[i][2 * j], af[i], b[0], b[1]);
              mma_e4m3_16832(part[i][2 * j + 1], af[i], b[2], b[3]);
            } else {
              mma_bf16_16816(acc[i][2 * j], af[i], b[0], b[1]);
              mma_bf16_16816(acc[i][2 * j + 1], af[i], b[2], b[3]);
            }
          }
        }
      }
      if constexpr (T::kFp8) ExpertTileScales<T, L>::add_scaled(acc, part, slice_scales);
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
// A descriptor: start address, stride of 8-row groups (1024 bytes), 128-byte swizzle; a k step
// (k16 of bf16, k32 of E4M3: 32 bytes of each row) advances the start by 32 bytes.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// The operands of one warpgroup MMA over N columns: N / 2 accumulators per thread, then the descriptors.
#define MF_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MF_WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MF_WGMMA_D16(i) MF_WGMMA_D8(i), MF_WGMMA_D8(i + 8)
#define MF_WGMMA_D32(i) MF_WGMMA_D8(i), MF_WGMMA_D8(i + 8), MF_WGMMA_D8(i + 16), MF_WGMMA_D8(i + 24)
#define MF_WGMMA_D64 MF_WGMMA_D32(0), MF_WGMMA_D32(32)
#define MF_WGMMA_D128 MF_WGMMA_D64, MF_WGMMA_D32(64), MF_WGMMA_D32(96)
#define MF_WGMMA_N8 "{%0, %1, %2, %3}, %4, %5"
#define MF_WGMMA_N16 "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9"
#define MF_WGMMA_N32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17"
#define MF_WGMMA_N64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33"
#define MF_WGMMA_N128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65"
#define MF_WGMMA_N256 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129"
// One instruction (scale-d true: d is added to): bf16 with its scale and transpose immediates, E4M3 with scales only.
#define MF_WGMMA(SHAPE, OPERANDS, ACCUMULATORS)                                                                           \
  if constexpr (FP8) {                                                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE "k32.f32.e4m3.e4m3 " OPERANDS \
                 ", p, 1, 1;\n}\n" : ACCUMULATORS : "l"(a), "l"(b));                                                       \
  } else {                                                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE "k16.f32.bf16.bf16 " OPERANDS \
                 ", p, 1, 1, 0, 0;\n}\n" : ACCUMULATORS : "l"(a), "l"(b));                                                 \
  }

// d (this warpgroup's 64 x N FP32, N / 2 per thread in mma.sync's m16n8 order per warp, n8 after n8)
// += A (64 x k) B (N x k)^T for one k step, both K-major in shared memory: k16 of bf16, or with FP8
// k32 of E4M3. One instruction over all the tile's weight rows: A is read from shared memory once per
// N columns, not once per 64.
// Swap-AB tiles take A from a 64-row slab of weight rows and B from their 8 to 64 pairs.
template <int N, bool FP8>
__device__ __forceinline__ void wgmma_m64(float* d, uint64_t a, uint64_t b) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma over 8 to 256 columns");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 8) {
    MF_WGMMA("m64n8", MF_WGMMA_N8, MF_WGMMA_D4(0))
  }
  if constexpr (N == 16) {
    MF_WGMMA("m64n16", MF_WGMMA_N16, MF_WGMMA_D8(0))
  }
  if constexpr (N == 32) {
    MF_WGMMA("m64n32", MF_WGMMA_N32, MF_WGMMA_D16(0))
  }
  if constexpr (N == 64) {
    MF_WGMMA("m64n64", MF_WGMMA_N64, MF_WGMMA_D32(0))
  }
  if constexpr (N == 128) {
    MF_WGMMA("m64n128", MF_WGMMA_N128, MF_WGMMA_D64)
  }
  if constexpr (N == 256) {
    MF_WGMMA("m64n256", MF_WGMMA_N256, MF_WGMMA_D128)
  }
#else
  __trap();  // the Validator lets wgmma only into sm_90a kernels
#endif
}
#undef MF_WGMMA
#undef MF_WGMMA_N256
#undef MF_WGMMA_N128
#undef MF_WGMMA_N64
#undef MF_WGMMA_N32
#undef MF_WGMMA_N16
#undef MF_WGMMA_N8
#undef MF_WGMMA_D128
#undef MF_WGMMA_D64
#undef MF_WGMMA_D32
#undef MF_WGMMA_D16
#undef MF_WGMMA_D8
#undef MF_WGMMA_D4

// A warpgroup's rows in a stage (byte offsets): its 64 pairs and its weight rows (swap-AB: every pair,
// and its slabs of 64 weight rows). multiply issues one slice's MMAs from `stage` as one committed
// group, into acc (bf16) or into part, to be scaled (fp8).
template <class T>
struct WarpgroupRows {
  uint32_t a, w;  // byte offsets in a stage
  __device__ __forceinline__ WarpgroupRows() {
    const int group = threadIdx.x >> 7;
    if constexpr (T::kSwapAb) {
      a = 0;
      w = (T::BM + group * T::kSwapGroupRows) * 128;
    } else {
      a = group % (T::BM / 64) * 64 * 128;
      w = (T::BM + group / (T::BM / 64) * T::TN) * 128;
    }
  }
  __device__ __forceinline__ void multiply(float (&acc)[T::FM][T::FN][4], float (&part)[T::FM][T::FN][4], uint32_t stage) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kRowBytes / 32; ++kk) {
      if constexpr (T::kSwapAb) {  // slab f: weight rows [64 f, 64 f + 64) of the warpgroup's, times every pair
#pragma unroll
        for (int f = 0; f < T::FM; ++f) {
          wgmma_m64<T::BM, false>(&acc[f][0][0], wgmma_descriptor(stage + w + f * 64 * 128 + kk * 32),
                                  wgmma_descriptor(stage + a + kk * 32));
        }
      } else {
        wgmma_m64<T::TN, T::kFp8>(T::kFp8 ? &part[0][0][0] : &acc[0][0][0], wgmma_descriptor(stage + a + kk * 32),
                                  wgmma_descriptor(stage + w + kk * 32));
      }
    }
    wgmma_commit();
  }
};

// Swap-AB: the tile weight row of this thread's sums acc[f][.][2 h + .] (rows g and g + 8 of its warp's
// 16 in slab f of its warpgroup's); their pair columns are 8 j + 2 t + c, as mma.sync's n8 fragments.
template <class T>
__device__ __forceinline__ int swap_tile_row(int f, int h) {
  const int lane = threadIdx.x & 31;
  return (threadIdx.x >> 7) * T::kSwapGroupRows + 64 * f + 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2) + 8 * h;
}

// Whether a warpgroup's 64 rows (row block `block` of the tile) hold a pair: the one rule the MMA warps
// skip by and the stage barriers count by. Row block 0 always does.
template <class T>
__device__ __forceinline__ bool row_block_live(const int* table, int block) {
  return T::BM == 64 || block == 0 || tile_rows_live(table, 64 * block);
}

// The MMA warps with a pair in their rows (4 a live warpgroup): the count each stage's `empty` barrier waits for.
template <class T>
__device__ __forceinline__ uint32_t live_mma_warps(const int* table) {
  if constexpr (T::kSwapAb) return T::WN;  // every warp takes all the pairs
  uint32_t live = 0;
#pragma unroll
  for (int m = 0; m < T::BM / 64; ++m) live += row_block_live<T>(table, m) ? 4 * T::WN : 0;
  return live;
}

// expert_tile_sums on wgmma: warpgroup g multiplies pair rows [64 m, 64 m + 64) by weight rows
// [TN n, TN n + TN) of the tile (m = g % (BM / 64), n = g / (BM / 64): warps_n = 1 gives each
// warpgroup every weight row), one instruction per k step. bf16 keeps S - 2 slices loading and one
// warpgroup MMA group in flight: slice kt + S - 2 refills the stage of slice kt - 2, whose MMAs
// every warpgroup has waited for before the barrier of step kt. fp8 waits for each slice's group
// at once, to scale its sums into acc, so slice kt - 1's stage is free at that barrier: S - 1 slices load.
template <class T, GateUpLayout L, class A>
__device__ __forceinline__ void expert_tile_sums_wgmma(float (&acc)[T::FM][T::FN][4], const A* __restrict__ a, const WeightArgs& w,
                                                       uint32_t bars, const int* table, int e, int n0, uint32_t base) {
  constexpr int S = T::S, D = T::kFp8 ? S - 1 : S - 2;
  const ExpertTileCopies<T, L> copies(a, w.codes, table, e, n0, threadIdx.x);
  const ExpertTileWeights<T> weights(w.map, bars, n0, e);
  if constexpr (T::kTma) __syncthreads();  // the barriers are set up
  const int warp = threadIdx.x >> 5;
  const WarpgroupRows<T> rows;
  const bool live = row_block_live<T>(table, warp % T::WM * T::TM / 64);  // this warpgroup's 64 rows
  const TileScales<T, L> scales(a, w, table, e, n0, warp % T::WM * T::TM, warp / T::WM * T::TN);
  float part[T::FM][T::FN][4];
  zero_tile_sums<T>(acc);
  zero_tile_sums<T>(part);
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
    const auto slice_scales = scales.load(kt);
    cp_async_wait<D - 1>();
    __syncthreads();  // slice kt is in for every thread; every warpgroup is done with slice kt - 2
    fence_shared_for_async();
    if constexpr (T::kTma) weights.wait(kt);
    if (live) {
      rows.multiply(acc, part, base + kt % S * T::kStageBytes);
      if constexpr (T::kFp8) {
        wgmma_wait<0>();
        ExpertTileScales<T, L>::add_scaled(acc, part, slice_scales);
      } else {
        wgmma_wait<1>();
      }
    }
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

// A stage barrier's arrival when this thread's cp.async copies so far have landed (the barrier's
// expected count includes it: no increment).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// expert_tile_sums_wgmma with a producer warpgroup: the threads past the MMA warps fill the stages,
// the activation rows by cp.async (each thread's copies counted on the stage's `full` barrier) and
// the weight tile by the copy engine (its bytes on the same barrier), and refill a stage once every
// live MMA warp (one with a pair in its rows) has marked it `empty`. The MMA warpgroups wait only for
// the slice they multiply, so no block barrier ties them to each other or to the copies; each keeps
// one MMA group in flight and frees slice kt - 1's stage when it has waited for that group (fp8: each
// slice's group at once, its sums scaled into acc, its stage freed).
template <class T, GateUpLayout L, class A>
__device__ __forceinline__ void expert_tile_sums_producer(float (&acc)[T::FM][T::FN][4], const A* __restrict__ a,
                                                          const WeightArgs& w, uint32_t bars, const int* table, int e, int n0,
                                                          uint32_t base) {
  constexpr int S = T::S;
  const uint32_t full = bars, empty = bars + 8 * S;
  if (threadIdx.x == 0) {
    const uint32_t live_warps = live_mma_warps<T>(table);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      mbarrier_init(full + 8 * s, T::kProducerThreads + 1);  // every copier's cp.async, and the weight tile's bytes
      mbarrier_init(empty + 8 * s, live_warps);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the barriers are set up
  if (threadIdx.x >= T::kMmaThreads) {
    const int copier = threadIdx.x - T::kMmaThreads;
    const ExpertTileCopies<T, L> copies(a, w.codes, table, e, n0, copier);
#pragma unroll 1
    for (int kt = 0; kt < T::kKTiles; ++kt) {
      const int s = kt % S;
      if (kt >= S) mbarrier_wait(empty + 8 * s, (kt / S - 1) & 1);
      const uint32_t stage = base + s * T::kStageBytes;
      copies.issue(stage, kt * T::BK);
      if (copier == 0) {
        mbarrier_expect_bytes(full + 8 * s, T::kRows * T::kRowBytes);
        tensor_copy_4d(stage + T::BM * T::kRowBytes, w.map, full + 8 * s, kt * T::BK, 0, n0, e);
      }
      cp_async_arrive(full + 8 * s);
    }
    cp_async_wait<0>();
  } else {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const WarpgroupRows<T> rows;
    const TileScales<T, L> scales(a, w, table, e, n0, warp % T::WM * T::TM, warp / T::WM * T::TN);
    float part[T::FM][T::FN][4];
    zero_tile_sums<T>(acc);
    zero_tile_sums<T>(part);
    // a warpgroup of padding rows neither multiplies nor frees stages (the barriers count only live warps)
    const bool live = row_block_live<T>(table, warp % T::WM * T::TM / 64);
    const int kt_end = live ? T::kKTiles : 0;
#pragma unroll 1
    for (int kt = 0; kt < kt_end; ++kt) {
      const auto slice_scales = scales.load(kt);
      const int s = kt % S;
      mbarrier_wait(full + 8 * s, (kt / S) & 1);
      fence_shared_for_async();  // the producer's cp.async rows, seen through the barrier, before wgmma reads them
      rows.multiply(acc, part, base + s * T::kStageBytes);
      if constexpr (T::kFp8) {
        wgmma_wait<0>();
        if (lane == 0) mbarrier_arrive(empty + 8 * s);
        ExpertTileScales<T, L>::add_scaled(acc, part, slice_scales);
      } else {
        wgmma_wait<1>();
        if (kt > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((kt - 1) % S));
      }
    }
    wgmma_wait<0>();
  }
  __syncthreads();  // the pipeline's shared memory becomes the output staging
}

// The tile's sums by the schedule's MMA and pipeline.
template <class T, GateUpLayout L, class A>
__device__ __forceinline__ void expert_tile_run(float (&acc)[T::FM][T::FN][4], const A* __restrict__ a, const WeightArgs& w,
                                                const int* table, int e, int n0, unsigned char* smem, uint32_t base) {
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(smem + T::kTableBytes));
  if constexpr (T::kProducer) {
    expert_tile_sums_producer<T, L>(acc, a, w, bars, table, e, n0, base);
  } else if constexpr (T::kWgmma) {
    expert_tile_sums_wgmma<T, L>(acc, a, w, bars, table, e, n0, base);
  } else {
    expert_tile_sums<T, L>(acc, a, w, bars, table, e, n0, base);
  }
}

// Fills the block's pair table: row r is pair sorted_slots[first + r], or -1 past the bucket's end.
template <class T>
__device__ __forceinline__ void expert_tile_table(int* table, const int* __restrict__ sorted_slots, int first, int end) {
  for (int r = threadIdx.x; r < T::BM; r += T::kThreads) table[r] = first + r < end ? sorted_slots[first + r] : -1;
  __syncthreads();
}

// The formats expert_centric multiplies: bf16, FP8 blocks as W8A8, and NVFP4 and MXFP4 decoded to bf16.
template <class Config>
constexpr bool kExpertCentricFormat =
    std::is_same_v<typename Config::Format, Bf16Weights> || std::is_same_v<typename Config::Format, Fp8Block128Weights> ||
    std::is_same_v<typename Config::Format, Nvfp4Weights> || std::is_same_v<typename Config::Format, Mxfp4Weights>;

// gate_up's tiles: activation rows a (x, or x quantised), inter as bf16 rows or quantised rows.
template <class Config, class Epilogue, class A, class Out>
__device__ __forceinline__ void gate_up_expert_tiles(const A* __restrict__ a, const WeightArgs& w_gate_up,
                                                     const int* __restrict__ sorted_slots, const int* __restrict__ expert_offsets,
                                                     Out* __restrict__ inter, int num_tokens, Epilogue epi) {
  using T = ExpertTileShape<Config, true>;
  static_assert(kExpertCentricFormat<Config>, "expert_centric takes bf16, FP8 block, NVFP4 or MXFP4 weights");
  static_assert(!Config::kAtomicCombine && !Config::kCombineKernel, "only down combines a token's slots");
  static_assert(std::is_same_v<A, typename ExpertTileCopies<T, Config::kLayout>::AElement> &&
                std::is_same_v<Out, std::conditional_t<T::kFp8, uint8_t, __nv_bfloat16>>, "rows as the format moves them");
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
  expert_tile_run<T, L>(acc, a, w_gate_up, table, e, n0, smem, base);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
  __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(pipe);
  if constexpr (T::kSwapAb) {
    // a neuron's gate row (even tile row) and up row (the next) sit in lanes 4 apart: the gate's lane
    // takes the up sum from its neighbour and stores the activation for its pair columns
    if (threadIdx.x < T::kMmaThreads) {
#pragma unroll
      for (int f = 0; f < T::FM; ++f)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int local = swap_tile_row<T>(f, h) >> 1;
          const int neuron = n0 + local;
          const bool real = neuron < I;
          const float gate_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, gate_row_of<L>(neuron, I)) : 0.0f;
          const float up_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, up_row_of<L>(neuron, I)) : 0.0f;
#pragma unroll
          for (int j = 0; j < T::FN; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float up = __shfl_xor_sync(kFullMask, acc[f][j][2 * h + c], 4);
              if ((g & 1) == 0) {
                const float v = epi(add_bias<BIAS>(acc[f][j][2 * h + c], gate_bias), add_bias<BIAS>(up, up_bias));
                out[(8 * j + 2 * t + c) * T::kOutStride + local] = __float2bfloat16_rn(v);
              }
            }
        }
    }
  } else if (threadIdx.x < T::kMmaThreads) {  // the MMA warps' sums (not the producer's)
#pragma unroll
    for (int j = 0; j < T::FN; ++j) {
      const int local = (col0 + 8 * j + 2 * t) >> 1;  // the neuron of this thread's (gate, up) pair
      const int neuron = n0 + local;
      const bool real = neuron < I;
      const float gate_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, gate_row_of<L>(neuron, I)) : 0.0f;
      const float up_bias = real ? load_bias<BIAS, 2 * I>(w_gate_up, e, up_row_of<L>(neuron, I)) : 0.0f;
      const float gate_factor = real ? expert_tile_factor<T, 2 * I, 2>(w_gate_up, e, gate_row_of<L>(neuron, I), 0) : 0.0f;
      const float up_factor = real ? expert_tile_factor<T, 2 * I, 2>(w_gate_up, e, up_row_of<L>(neuron, I), 1) : 0.0f;
#pragma unroll
      for (int i = 0; i < T::FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v = epi(add_bias<BIAS>(scaled_sum<T>(acc[i][j][2 * h], gate_factor), gate_bias),
                              add_bias<BIAS>(scaled_sum<T>(acc[i][j][2 * h + 1], up_factor), up_bias));
          out[(row0 + 16 * i + g + 8 * h) * T::kOutStride + local] = __float2bfloat16_rn(v);
        }
    }
  }
  __syncthreads();
  if constexpr (T::kFp8) {  // a warp per (row, group of 128 neurons), quantised into the pair's row
    constexpr int kGroups = BN / 128;
    for (int task = warp; task < T::BM * kGroups; task += T::kThreads / 32) {
      const int r = task / kGroups, n = n0 + task % kGroups * 128;
      const int pair = table[r];
      if (pair < 0 || n >= I) continue;  // uniform over the warp
      uint8_t* row = inter + static_cast<size_t>(pair) * T::kOutRowElements;
      quantise_group_e4m3(out + r * T::kOutStride + (n - n0), row + n, reinterpret_cast<float*>(row + I) + n / 128, lane);
    }
  } else {
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
}

template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_expert_centric(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                       const int* __restrict__ topk_ids, const int* __restrict__ sorted_slots,
                                                       const int* __restrict__ expert_offsets,
                                                       __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi) {
  gate_up_expert_tiles<Config>(x, w_gate_up, sorted_slots, expert_offsets, inter, num_tokens, epi);
}

// W8A8: the module's quantise entry point has left x quantised in x_fp8; inter leaves quantised too.
template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_expert_centric(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                       const int* __restrict__ topk_ids, const int* __restrict__ sorted_slots,
                                                       const int* __restrict__ expert_offsets, uint8_t* __restrict__ inter,
                                                       uint8_t* __restrict__ x_fp8, int num_tokens, Epilogue epi) {
  gate_up_expert_tiles<Config>(static_cast<const uint8_t*>(x_fp8), w_gate_up, sorted_slots, expert_offsets, inter, num_tokens, epi);
}

// Four floats as four bf16 (round to nearest) in 8 bytes, and back.
__device__ __forceinline__ uint2 bf16x4_of(float4 v) {
  return make_uint2(bf16x2_bits(__floats2bfloat162_rn(v.x, v.y)), bf16x2_bits(__floats2bfloat162_rn(v.z, v.w)));
}
__device__ __forceinline__ float4 float4_of_bf16x4(uint2 u) { return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y)); }

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

// A token's k partial rows [M*k][H] (bf16) at outputs n..n+3, added in slot order in FP32: the one
// order both the in-tile combine and the combine entry point add in, so both give the same y.
template <int K, int H>
__device__ __forceinline__ float4 slot_rows_sum(const __nv_bfloat16* __restrict__ partials, int token, int n) {
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
  for (int j = 0; j < K; ++j) {
    const float4 v = float4_of_bf16x4(__ldcg(reinterpret_cast<const uint2*>(partials + (static_cast<size_t>(token) * K + j) * H + n)));
    sum.x += v.x;
    sum.y += v.y;
    sum.z += v.z;
    sum.w += v.w;
  }
  return sum;
}

template <class Epilogue>
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* dst, float4 sum, Epilogue epi) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(epi(sum.x), epi(sum.y));
  *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(epi(sum.z), epi(sum.w));
}

// down: each pair's weighted partial row (routing weight x (sum + bias), rounded to bf16) goes to
// partials [M*k][H]; the block that completes a token's k partials of an n tile (a ticket per token
// and n tile, reset by that block) adds them in slot order in FP32 and stores y. Deterministic: the
// sum's order is fixed whatever order the blocks run in. With kAtomicCombine, partials is FP32 [M][H]
// instead: each pair's row is added atomically into its token's sum, which the completing block
// stores and zeroes (less traffic; the additions' order, so y's last bits, may vary). With
// kCombineKernel the block leaves once its partials are written (no tickets): the module's combine
// entry point (add_slot_rows) adds them after the kernel. At top-1 (kSlotIsY) a row is its token's
// y: the block stores it, no partials or tickets.
template <class Config, class Epilogue, class A, class Partial>
__device__ __forceinline__ void down_expert_centric(const A* __restrict__ inter, WeightArgs w_down,
                                                    const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                                    const int* __restrict__ sorted_slots, const int* __restrict__ expert_offsets,
                                                    __nv_bfloat16* __restrict__ y, Partial* __restrict__ partials,
                                                    int* __restrict__ tickets, int num_tokens, Epilogue epi) {
  using T = ExpertTileShape<Config, false>;
  static_assert(kExpertCentricFormat<Config>, "expert_centric takes bf16, FP8 block, NVFP4 or MXFP4 weights");
  static_assert(std::is_same_v<A, std::conditional_t<T::kFp8, uint8_t, __nv_bfloat16>>, "inter: bf16 rows, or quantised rows with fp8");
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
    zero_tile_sums<T>(acc);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = warp % T::WM * T::TM, col0 = warp / T::WM * T::TN;
  float* out = reinterpret_cast<float*>(pipe);
  if constexpr (T::kSwapAb) {  // this thread's sums are outputs swap_tile_row of pairs 8 j + 2 t + c
    if (threadIdx.x < T::kMmaThreads) {
      float weight[T::FN][2];
#pragma unroll
      for (int j = 0; j < T::FN; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int pair = table[8 * j + 2 * t + c];
          weight[j][c] = routed && pair >= 0 ? __ldg(topk_weights + pair) : 0.0f;
        }
#pragma unroll
      for (int f = 0; f < T::FM; ++f)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = swap_tile_row<T>(f, h);
          const bool real = routed && n0 + col < H;
          const float b = real ? load_bias<BIAS, H>(w_down, e, n0 + col) : 0.0f;
#pragma unroll
          for (int j = 0; j < T::FN; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) out[(8 * j + 2 * t + c) * T::kOutStride + col] = weight[j][c] * add_bias<BIAS>(acc[f][j][2 * h + c], b);
        }
    }
  } else if (threadIdx.x < T::kMmaThreads) {  // the MMA warps' sums (not the producer's)
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
          const float f0 = real ? expert_tile_factor<T, H, 1>(w_down, e, n0 + col, 0) : 0.0f;
          const float f1 = real ? expert_tile_factor<T, H, 1>(w_down, e, n0 + col + 1, 0) : 0.0f;
          *reinterpret_cast<float2*>(out + r * T::kOutStride + col) =
              make_float2(weight * add_bias<BIAS>(scaled_sum<T>(acc[i][j][2 * h], f0), b0),
                          weight * add_bias<BIAS>(scaled_sum<T>(acc[i][j][2 * h + 1], f1), b1));
        }
      }
  }
  __syncthreads();
  constexpr int kPieces = BN / 4;
  // top-1 (a dense projection as one expert): a token's one slot row is its y, stored from the tile as the
  // combine would (its bf16 row added alone), with no partial row, ticket or reload
  constexpr bool kSlotIsY = K == 1 && !Config::kAtomicCombine && !Config::kCombineKernel;
  const auto store_piece = [&](int i) {
    const int r = i / kPieces, piece = i % kPieces, n = n0 + piece * 4;
    const int pair = table[r];
    if (pair >= 0 && n < H) {
      const float4 v = *reinterpret_cast<const float4*>(out + r * T::kOutStride + piece * 4);
      if constexpr (kSlotIsY) {
        const float4 row = float4_of_bf16x4(bf16x4_of(v));  // added to the slot sum's zero, as the combine does (-0 to +0)
        store_bf16x4(y + static_cast<size_t>(pair) * H + n, make_float4(0.0f + row.x, 0.0f + row.y, 0.0f + row.z, 0.0f + row.w), epi);
      } else if constexpr (Config::kAtomicCombine) {  // partials is [M][H]: each token's running sum
        add_float4_at(partials + static_cast<size_t>(pair / K) * H + n, v);
      } else {  // partials is [M*k][H]: each pair's own row
        *reinterpret_cast<uint2*>(partials + static_cast<size_t>(pair) * H + n) = bf16x4_of(v);
      }
    }
  };
  if constexpr (kSlotIsY) {
#pragma unroll 1  // unrolled, the top-1 producer tiles spill at their 168 registers (ptxas 13.0)
    for (int i = threadIdx.x; i < T::BM * kPieces; i += T::kThreads) store_piece(i);
  } else {
    for (int i = threadIdx.x; i < T::BM * kPieces; i += T::kThreads) store_piece(i);
  }
  if constexpr (!Config::kCombineKernel && !kSlotIsY) {  // else the combine entry point adds the slots, or top-1 stored y
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
      float4 sum;
      if constexpr (Config::kAtomicCombine) {
        float4* at = reinterpret_cast<float4*>(partials + static_cast<size_t>(token) * H + n);
        sum = __ldcg(at);
        __stcg(at, make_float4(0.0f, 0.0f, 0.0f, 0.0f));  // zero again for the next launch
      } else {
        sum = slot_rows_sum<K, H>(partials, token, n);
      }
      store_bf16x4(y + static_cast<size_t>(token) * H + n, sum, epi);
    }
  }
}

// down with kCombineKernel: the same body, which takes no tickets (the combine entry point adds the slots).
template <class Config, class Epilogue, class A>
__device__ __forceinline__ void down_expert_centric(const A* __restrict__ inter, WeightArgs w_down,
                                                    const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                                    const int* __restrict__ sorted_slots, const int* __restrict__ expert_offsets,
                                                    __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ partials,
                                                    int num_tokens, Epilogue epi) {
  static_assert(Config::kCombineKernel, "tickets are the in-tile combine's: only a down with combine_kernel goes without");
  down_expert_centric<Config>(inter, w_down, topk_ids, topk_weights, sorted_slots, expert_offsets, y, partials,
                              static_cast<int*>(nullptr), num_tokens, epi);
}

// The combine entry point of a down with kCombineKernel: y[token][n..n+3] = epi(the token's slot rows
// added in slot order), a thread per N = 4 outputs (ExpertCentric.COMBINE_OUTPUTS_PER_THREAD), the grid
// over every token's row.
template <class Config, int N, class Epilogue>
__device__ __forceinline__ void add_slot_rows(const __nv_bfloat16* __restrict__ partials, __nv_bfloat16* __restrict__ y,
                                              int num_tokens, Epilogue epi) {
  static_assert(N == 4, "a thread adds a bf16x4 of each slot row");
  constexpr int H = Config::kHidden, K = Config::kTopk, kPieces = H / N;
  static_assert(H % N == 0, "rows of whole bf16x4 pieces");
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_tokens) * kPieces) return;
  const int token = static_cast<int>(i / kPieces), n = static_cast<int>(i % kPieces) * N;
  store_bf16x4(y + static_cast<size_t>(token) * H + n, slot_rows_sum<K, H>(partials, token, n), epi);
}

}  // namespace mf
