// Probe (not part of the toolkit): the expert MLP of a decode step as ONE kernel, on the building
// blocks of moeforge_device.cuh's tensor-core decode (TileStep, TileDecode, combine_tile_warps).
// Included by tensor_core_probe.cu, which checks it against the warp decode and times it; the
// findings (slower than the two tensor-core kernels, and why) are in bench/NOTES.md, "One kernel
// per layer: a probe". Kept out of the device header because no generated kernel uses it.
#pragma once

#include "moeforge_device.cuh"

namespace mf {

__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// ---------------------------------------------------------------------------------------------
// The expert MLP of a token in one kernel: gate_up on the tensor cores, one grid-wide barrier,
// down on the tensor cores. Two dependent kernels each pay a launch and a dependency before a byte
// moves (bench/NOTES.md, "Where the 4-bit time goes"; "What a kernel boundary costs, by grid"
// measured it again by grid), and warps that load their own weights keep too
// few bytes in flight to stream one wave at full bandwidth (the same notes, "One kernel per
// layer"). Here one wave of blocks (every block resident) asks the copy engine (cp.async.bulk) for
// all its weights at once: first its gate_up tiles, then its share of down's rows, into shared
// memory. Each gate_up tile completes its own mbarrier, so a warp may start on a tile as soon as
// its bytes are in (measured: a block's tiles arrive together). After the grid-wide barrier down
// reads its weights from shared memory and only the token's k rows of inter from L2.
//
// Work split, per token: gate_up's k * I / 8 tiles go to the blocks in contiguous runs, and a
// block's steps (its tiles times ceil(H / 128)) to its warps in contiguous runs, so every warp
// reduces the same number of steps, give or take one. Warp w's partial sums of the block's tile T
// sit at partials[w + T] (unique: a warp's run advances one tile per boundary it crosses) and one
// warp per tile adds them in warp order (deterministic). down's H / 16 tiles go to the blocks in
// contiguous runs; the W warps of a block share each of its tiles.
// ---------------------------------------------------------------------------------------------

__host__ __device__ constexpr int run_begin(int part, int items, int parts) {
  return static_cast<int>(static_cast<long long>(part) * items / parts);
}

// Bulk copies global -> shared that complete an mbarrier's transaction count.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(shared_address(bar)) : "memory");
}

// The K-block scale bytes of one row of length L (0 without K-block scales).
template <class F, int L>
constexpr int row_scale_bytes() {
  if constexpr (F::kBlockScale == BlockScale::kNone) return 0;
  else return (L / F::kBlock) * (F::kBlockScale == BlockScale::kF32 ? 4 : 1);
}

// The fused kernel's shared memory for a grid of `blocks`. Regions, each a multiple of 16 bytes:
//   staged      the token's x (gate_up), then its k rows of inter (down), in the mma's order
//   partials    [W + gate tiles per block][16] FP32 (gate_up), then [W][16] (down)
//   gate        [gate tiles per block][16 rows][H / 2] codes, then [..][16][scale bytes of a row]
//   down        [down tiles per block][k][16 rows][I / 2] codes, then [..][k][16][scale bytes],
//               then [..][k][16] FP32 row factors (per-row formats)
//   barriers    one mbarrier per gate tile and one for down
// The rows of a tile sit in memory order (stacked: 8 gate rows, then 8 up rows; interleaved:
// gate and up alternating), each run one bulk copy: a few large copies keep the copy engine's
// queue short (one copy per row kept the copying warp busy while the others waited on it:
// bench/NOTES.md, "One kernel per layer"). Rows H / 2 bytes apart put
// rows g and g + 1 of a quarter warp's reads in the same banks: a 2-way conflict, paid for it.
template <class F, int H, int I, int K, int W>
struct FusedMlp {
  using HRow = TileRow<H>;
  using IRow = TileRow<I>;
  static_assert(H % 32 == 0 && I % 32 == 0, "rows are whole 16-byte chunks");
  static_assert(I % 8 == 0 && H % 16 == 0, "whole tiles");
  static constexpr int kGateTilesPerSlot = I / 8;
  static constexpr int kGateTiles = K * kGateTilesPerSlot;
  static constexpr int kDownTiles = H / 16;
  static constexpr int kDownSteps = K * IRow::kSteps;  // steps of one down tile
  static constexpr int kGateScaleBytes = row_scale_bytes<F, H>();
  static constexpr int kDownScaleBytes = row_scale_bytes<F, I>();
  static constexpr bool kRowFactors = F::kRowFactor == RowFactor::kPerRow;
  static_assert(8 * kGateScaleBytes % 16 == 0 && 16 * kDownScaleBytes % 16 == 0, "scale runs are whole 16-byte units");
  static constexpr int kStagedBytes = 64 * (HRow::kPadded > K * IRow::kPadded ? HRow::kPadded : K * IRow::kPadded);
  static constexpr int kGateRowBytes = H / 2, kDownRowBytes = I / 2;  // 4-bit codes
  static constexpr int kGateTileBytes = 16 * kGateRowBytes + 16 * kGateScaleBytes;
  static constexpr int kDownSlotBytes = 16 * kDownRowBytes + 16 * kDownScaleBytes + (kRowFactors ? 64 : 0);

  int gate_tiles, down_tiles;  // the most tiles one block has

  __host__ __device__ explicit FusedMlp(int blocks)
      : gate_tiles(ceil_div(kGateTiles, blocks)), down_tiles(ceil_div(kDownTiles, blocks)) {}
  __host__ __device__ int partials_offset() const { return kStagedBytes; }
  __host__ __device__ int gate_offset() const { return partials_offset() + 64 * (W + gate_tiles); }
  __host__ __device__ int down_offset() const { return gate_offset() + gate_tiles * kGateTileBytes; }
  __host__ __device__ int barriers_offset() const { return down_offset() + down_tiles * K * kDownSlotBytes; }
  __host__ __device__ int bytes() const { return barriers_offset() + 8 * (gate_tiles + 1); }
};

// The raw K-block scales of chunk c, from a row of scale bytes in shared memory (as load_tile_scales).
template <class F>
__device__ __forceinline__ uint32_t shared_tile_scales(const unsigned char* row, int c) {
  if constexpr (F::kBlockScale == BlockScale::kNone) return 0u;
  else if constexpr (F::kBlockScale == BlockScale::kF32) return *reinterpret_cast<const uint32_t*>(row + 4 * (c / 4));
  else if constexpr (F::kBlock == 16) return *reinterpret_cast<const unsigned short*>(row + 2 * c);
  else return row[c];
}

// Chunk c of one row in shared memory (null: zeros) and its K-block scales.
template <class F>
__device__ __forceinline__ void shared_chunk(const unsigned char* row, const unsigned char* scales, int c, Lane<16>& codes,
                                             uint32_t& raw_scales) {
  if (row) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + 16 * c);
    codes = Lane<16>{{v.x, v.y, v.z, v.w}};
    raw_scales = shared_tile_scales<F>(scales, c);
  } else {
    codes = zero_lane<16>();
    raw_scales = 0u;
  }
}

// One step of a tile from shared memory: chunk c of rows `lo` and `hi` and their K-block scales.
template <class F>
__device__ __forceinline__ TileStep<F> shared_step(const unsigned char* lo, const unsigned char* hi, const unsigned char* lo_scales,
                                                   const unsigned char* hi_scales, int c) {
  TileStep<F> st;
  shared_chunk<F>(lo, lo_scales, c, st.lo, st.lo_scales);
  shared_chunk<F>(hi, hi_scales, c, st.hi, st.hi_scales);
  return st;
}

// Grid-wide barriers of the fused kernel. CooperativeBarrier: cooperative_groups' grid sync, for a
// cooperative launch. CountingBarrier: an arrival count and a generation in global memory (zero
// before the first launch, left consistent after each), for a plain launch whose blocks the
// launcher has checked are all resident at once.
struct CooperativeBarrier {
  __device__ __forceinline__ void sync() const { cooperative_groups::this_grid().sync(); }
};
struct CountingBarrier {
  unsigned* state;  // [0] blocks arrived, [1] generation
  __device__ __forceinline__ void sync() const {
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned generation;
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(generation) : "l"(state + 1) : "memory");
      __threadfence();  // this block's writes before its arrival
      if (atomicAdd(state, 1u) == gridDim.x - 1) {
        state[0] = 0u;
        __threadfence();
        atomicAdd(state + 1, 1u);
      } else {
        unsigned now;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(state + 1) : "memory");
        } while (now == generation);
      }
    }
    __syncthreads();
  }
};

// One block of the fused kernel: its share of the work, its shared memory, and the parts of a
// token (the weight copies, gate_up, the barrier between, down).
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, bool BIAS>
struct FusedMlpBlock {
  using Mlp = FusedMlp<F, H, I, K, W>;
  using HRow = typename Mlp::HRow;
  using IRow = typename Mlp::IRow;
  static_assert(K <= 32, "one lane per routed slot");
  static constexpr float kUnscale = TileDecode<F>::kUnscale;
  static_assert(W >= 2, "warp 0 copies, the others reduce gate_up");
  static constexpr int kReducers = W - 1;

  uint4* staged;
  float* partials;
  unsigned char* gate_codes;   // [tile][16][H / 2]
  unsigned char* gate_scales;  // [tile][16][scale bytes]
  unsigned char* down;         // [tile][k][slot bytes]
  uint64_t* barriers;          // one per gate tile
  uint64_t* down_barrier;
  int gate0, gate_count, down0, down_count, steps, n0, n1;
  int lane, g, t, warp;
  int lane_expert;  // lane j < K: the current token's slot j
  float routing_weight;
  unsigned parity;  // of the current token's mbarrier phase

  __device__ __forceinline__ explicit FusedMlpBlock(unsigned char* smem) {
    const Mlp mlp(gridDim.x);
    staged = reinterpret_cast<uint4*>(smem);
    partials = reinterpret_cast<float*>(smem + mlp.partials_offset());
    gate_codes = smem + mlp.gate_offset();
    gate_scales = gate_codes + mlp.gate_tiles * 16 * Mlp::kGateRowBytes;
    down = smem + mlp.down_offset();
    barriers = reinterpret_cast<uint64_t*>(smem + mlp.barriers_offset());
    down_barrier = barriers + mlp.gate_tiles;
    lane = threadIdx.x & 31; g = lane >> 2; t = lane & 3; warp = threadIdx.x >> 5;
    gate0 = run_begin(blockIdx.x, Mlp::kGateTiles, gridDim.x);
    gate_count = run_begin(blockIdx.x + 1, Mlp::kGateTiles, gridDim.x) - gate0;
    down0 = run_begin(blockIdx.x, Mlp::kDownTiles, gridDim.x);
    down_count = run_begin(blockIdx.x + 1, Mlp::kDownTiles, gridDim.x) - down0;
    steps = gate_count * HRow::kSteps;
    n0 = warp == 0 ? 0 : run_begin(warp - 1, steps, kReducers);
    n1 = warp == 0 ? 0 : run_begin(warp, steps, kReducers);
    parity = 0u;
    for (int i = threadIdx.x; i < gate_count; i += blockDim.x) mbarrier_init(barriers + i, 1);  // the lane copying the tile
    if (threadIdx.x == 0) mbarrier_init(down_barrier, K);                                       // lanes j < K, slot j each
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
  }

  __device__ __forceinline__ static bool routed(int e) { return static_cast<unsigned>(e) < static_cast<unsigned>(E); }
  __device__ __forceinline__ unsigned char* down_slot(int d, int j) const { return down + (d * K + j) * Mlp::kDownSlotBytes; }

  // Token m's routing, one slot per lane; every thread of the block must call it, after the
  // previous token is done with shared memory.
  __device__ __forceinline__ void route(const int* __restrict__ topk_ids, const float* __restrict__ topk_weights, int m) {
    lane_expert = lane < K ? __ldg(topk_ids + m * K + lane) : -1;
    routing_weight = routed(lane_expert) ? __ldg(topk_weights + m * K + lane) : 0.0f;
    // shared memory the generic proxy read is rewritten by the copy engine next
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }

  // Warp 0 asks for every weight byte of the token: gate_up's tiles (lane i tiles i, i + 32, ...;
  // a lane sets its tile's expected bytes before issuing the tile's copies), then down's rows
  // (lane j slot j). Stacked gate_up takes four copies per tile (gate and up codes, gate and up
  // scales), interleaved two; down two or three per routed slot.
  __device__ __forceinline__ void copy_weights(const WeightArgs& w_gate_up, const WeightArgs& w_down) const {
    if (warp != 0) return;
    constexpr int kRow = Mlp::kGateRowBytes, kScales = Mlp::kGateScaleBytes;
    constexpr int kRuns = L == GateUpLayout::kStacked ? 2 : 1;
#pragma unroll 1
    for (int base = 0; base < gate_count; base += 32) {
      const int tile = base + lane;
      const int j = min_int(gate0 + tile, Mlp::kGateTiles - 1) / Mlp::kGateTilesPerSlot;
      const int n = (gate0 + tile - j * Mlp::kGateTilesPerSlot) * 8;
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      if (tile < gate_count) {
        uint64_t* bar = barriers + tile;
        mbarrier_arrive_expect(bar, routed(e) ? 16 * (kRow + kScales) : 0u);
        if (routed(e)) {
          unsigned char* codes = gate_codes + tile * 16 * kRow;
          unsigned char* scales = gate_scales + tile * 16 * kScales;
#pragma unroll
          for (int r = 0; r < kRuns; ++r) {  // stacked: gate rows n.., up rows I + n..; interleaved: rows 2n..
            const int first = r == 0 ? gate_row_of<L>(n, I) : up_row_of<L>(n, I);
            bulk_copy(codes + r * 8 * kRow, row_codes<F, 2 * I, H>(w_gate_up, e, first), 16 / kRuns * kRow, bar);
            if constexpr (kScales > 0) {
              bulk_copy(scales + r * 8 * kScales, row_block_scales<F, 2 * I, H>(w_gate_up, e, first), 16 / kRuns * kScales, bar);
            }
          }
        }
      }
    }
    if (lane < K) {
      constexpr int kDownRow = Mlp::kDownRowBytes, kDownScales = Mlp::kDownScaleBytes;
      uint64_t* bar = down_barrier;
      const int e = lane_expert;
      mbarrier_arrive_expect(bar, routed(e) ? down_count * 16 * (kDownRow + kDownScales + (Mlp::kRowFactors ? 4 : 0)) : 0u);
      if (routed(e)) {
#pragma unroll 1
        for (int d = 0; d < down_count; ++d) {
          const int h = (down0 + d) * 16;
          unsigned char* slot = down_slot(d, lane);
          bulk_copy(slot, row_codes<F, H, I>(w_down, e, h), 16 * kDownRow, bar);
          if constexpr (kDownScales > 0) bulk_copy(slot + 16 * kDownRow, row_block_scales<F, H, I>(w_down, e, h), 16 * kDownScales, bar);
          if constexpr (Mlp::kRowFactors) {
            bulk_copy(slot + 16 * (kDownRow + kDownScales), w_down.row_scales + static_cast<size_t>(e) * H + h, 64, bar);
          }
        }
      }
    }
  }

  // Token m's x, staged for the mma (its loads overlap those of route()). Every thread must call it.
  __device__ __forceinline__ void stage_x(const __nv_bfloat16* __restrict__ x, int m) {
    stage_tile_activations<1, H>(x + static_cast<size_t>(m) * H, staged);
  }

  // gate_up of token m: the reducing warps' runs of steps from shared memory, each waiting for its
  // tiles' copies; then each tile's sums in warp order, the epilogue, and inter. Every thread
  // must call it.
  template <class Epilogue>
  __device__ __forceinline__ void gate_up(const WeightArgs& w, __nv_bfloat16* inter, int m, Epilogue epi) {
    float gate = 0.0f, up = 0.0f;
    int waited = -1;
    constexpr int kScales = Mlp::kGateScaleBytes;
#pragma unroll 2
    for (int n = n0; n < n1; ++n) {
      const int tile = n / HRow::kSteps, s = n - tile * HRow::kSteps;
      const int j = (gate0 + tile) / Mlp::kGateTilesPerSlot, neuron = (gate0 + tile - j * Mlp::kGateTilesPerSlot) * 8 + g;
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      if (tile != waited) {  // uniform over the warp
        mbarrier_wait(barriers + tile, parity);
        waited = tile;
      }
      if (routed(e)) {  // uniform
        const int c = 4 * s + t;
        const bool in_row = c < HRow::kChunks;
        const unsigned char* codes = gate_codes + tile * 16 * Mlp::kGateRowBytes;
        const unsigned char* scales = gate_scales + tile * 16 * kScales;
        const int gate_row = gate_row_of<L>(g, 8), up_row = up_row_of<L>(g, 8);  // a tile's rows, in memory order
        const TileStep<F> st = shared_step<F>(in_row ? codes + gate_row * Mlp::kGateRowBytes : nullptr,
                                              in_row ? codes + up_row * Mlp::kGateRowBytes : nullptr,
                                              scales + gate_row * kScales, scales + up_row * kScales, c);
        const StepSums sums = st.reduce(staged + s * 4 + t, HRow::kPadded);
        gate += sums.lo;
        up += sums.hi;
      }
      if (s == HRow::kSteps - 1 || n == n1 - 1) {  // the warp's last step of this tile
        if (t == 0) {
          partials[(warp - 1 + tile) * 16 + g] = gate;
          partials[(warp - 1 + tile) * 16 + 8 + g] = up;
        }
        gate = 0.0f;
        up = 0.0f;
      }
    }
    if (warp == 0) return;  // the copying warp joins again at the grid barrier
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kReducers) : "memory");  // the reducers' partial sums are in
#pragma unroll 1
    for (int tile = warp - 1; tile < gate_count; tile += kReducers) {  // reducer r finishes tiles r, r + W - 1, ...
      const int j = (gate0 + tile) / Mlp::kGateTilesPerSlot;
      const int neuron = (gate0 + tile - j * Mlp::kGateTilesPerSlot) * 8 + g;
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      if (t == 0 && routed(e)) {
        float gate_sum = 0.0f, up_sum = 0.0f;
        for (int v = 0; v < kReducers; ++v) {  // the reducers whose runs meet this tile, in warp order
          const int a = run_begin(v, steps, kReducers), b = run_begin(v + 1, steps, kReducers);
          if (a < b && a < (tile + 1) * HRow::kSteps && b > tile * HRow::kSteps) {
            gate_sum += partials[(v + tile) * 16 + g];
            up_sum += partials[(v + tile) * 16 + 8 + g];
          }
        }
        const int gate_n = gate_row_of<L>(neuron, I), up_n = up_row_of<L>(neuron, I);
        gate_sum = apply_factor<F>(gate_sum, row_factor<F, 2 * I, 2>(w, e, gate_n, 0)) * kUnscale;
        up_sum = apply_factor<F>(up_sum, row_factor<F, 2 * I, 2>(w, e, up_n, 1)) * kUnscale;
        const float gate_bias = load_bias<BIAS, 2 * I>(w, e, gate_n);
        const float up_bias = load_bias<BIAS, 2 * I>(w, e, up_n);
        store_bf16(inter + (static_cast<size_t>(m) * K + j) * I + neuron,
                   epi(add_bias<BIAS>(gate_sum, gate_bias), add_bias<BIAS>(up_sum, up_bias)));
      }
    }
  }

  // down of token m from the copied weights and the token's k rows of inter (written by every
  // block before the barrier): the block's tiles of 16 hidden outputs, all W warps on each, every
  // W-th step, added in warp order. Every thread must call it.
  template <class Epilogue>
  __device__ __forceinline__ void down_tiles(const __nv_bfloat16* inter, const WeightArgs& w, __nv_bfloat16* __restrict__ y, int m,
                                             Epilogue epi) {
    constexpr int kScales = Mlp::kDownScaleBytes;
    stage_tile_activations<K, I, true>(inter + static_cast<size_t>(m) * K * I, staged);  // ends in __syncthreads
    const float lane_factor = F::kRowFactor == RowFactor::kPerTensor && routed(lane_expert) ? row_factor<F, H, 1>(w, lane_expert, 0, 0) : 1.0f;
    if (down_count > 0) mbarrier_wait(down_barrier, parity);
#pragma unroll 1
    for (int d = 0; d < down_count; ++d) {
      const int h_lo = (down0 + d) * 16 + g, h_hi = h_lo + 8;
      float lo = 0.0f, hi = 0.0f;
#pragma unroll 2
      for (int q = warp; q < Mlp::kDownSteps; q += W) {
        const int j = q / IRow::kSteps, s = q - j * IRow::kSteps;
        const int e = __shfl_sync(kFullMask, lane_expert, j);
        const float weight = __shfl_sync(kFullMask, routing_weight, j) * __shfl_sync(kFullMask, lane_factor, j);
        if (routed(e)) {  // uniform; an unrouted slot's inter is never read
          const int c = 4 * s + t;
          const bool in_row = c < IRow::kChunks;
          const unsigned char* slot = down_slot(d, j);
          const unsigned char* scales = slot + 16 * Mlp::kDownRowBytes;
          const TileStep<F> st = shared_step<F>(in_row ? slot + g * Mlp::kDownRowBytes : nullptr,
                                                in_row ? slot + (g + 8) * Mlp::kDownRowBytes : nullptr,
                                                scales + g * kScales, scales + (g + 8) * kScales, c);
          const StepSums sums = st.reduce(staged + j * IRow::kPadded + s * 4 + t, K * IRow::kPadded);
          float w_lo = weight, w_hi = weight;
          if constexpr (Mlp::kRowFactors) {
            const float* factors = reinterpret_cast<const float*>(scales + 16 * kScales);
            w_lo *= factors[g];
            w_hi *= factors[g + 8];
          }
          lo = fmaf(w_lo, sums.lo, lo);
          hi = fmaf(w_hi, sums.hi, hi);
        }
      }
      if (combine_tile_warps<W>(lo, hi, partials)) {
        lo *= kUnscale;
        hi *= kUnscale;
        if constexpr (BIAS) {  // slot j's w_j * b[e_j][h], after the combine (as down_tensor_core)
#pragma unroll 1
          for (int j = 0; j < K; ++j) {
            const int e = __shfl_sync(kFullMask, lane_expert, j);
            const float weight = __shfl_sync(kFullMask, routing_weight, j);
            if (routed(e) && t == 0) {
              lo = fmaf(weight, load_bias<BIAS, H>(w, e, h_lo), lo);
              hi = fmaf(weight, load_bias<BIAS, H>(w, e, h_hi), hi);
            }
          }
        }
        if (t == 0) {
          store_bf16(y + static_cast<size_t>(m) * H + h_lo, epi(lo));
          store_bf16(y + static_cast<size_t>(m) * H + h_hi, epi(hi));
        }
      }
      __syncthreads();  // partials are the next tile's
    }
    parity ^= 1u;
  }
};

// Grid: exactly the resident blocks, x only (see the barriers above). Block: 32 * W threads.
// Shared memory: FusedMlp<F, H, I, K, W>(gridDim.x).bytes(). inter is [M][k][I] bf16 scratch.
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, bool BIAS, class Barrier, class GateEpilogue,
          class CombineEpilogue>
__device__ __forceinline__ void fused_mlp_tensor_core(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, WeightArgs w_down,
                                                      const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                                      __nv_bfloat16* inter, __nv_bfloat16* __restrict__ y, int num_tokens,
                                                      Barrier barrier, GateEpilogue gate_epi, CombineEpilogue combine_epi) {
  extern __shared__ __align__(16) unsigned char smem[];
  FusedMlpBlock<F, H, I, E, K, L, W, BIAS> block(smem);
#pragma unroll 1
  for (int m = 0; m < num_tokens; ++m) {
    if (m > 0) __syncthreads();  // the previous token is done with shared memory
    block.route(topk_ids, topk_weights, m);
    block.stage_x(x, m);
    block.copy_weights(w_gate_up, w_down);
    block.gate_up(w_gate_up, inter, m, gate_epi);
    __threadfence();
    barrier.sync();  // every block's inter is written
    block.down_tiles(inter, w_down, y, m, combine_epi);
  }
}

}  // namespace mf
