// moeforge_device.cuh: the hand-written device library behind MoeForge's generated kernels.
//
// Generated kernels are thin: they fix the spec's constants and the epilogue, then call one of
// the kernel bodies below. Everything here is part of the kernel cache key.
//
// Conventions:
//   weights      [E][N][K] row-major, K contiguous: one output row is one contiguous run of memory
//   topk_ids     [M][k] int32, topk_weights [M][k] fp32, token-major
//   inter        [M][k][I] bf16: gate_up's output, down's input
//   accumulation FP32 always; bf16 -> fp32 is exact, fp32 -> bf16 rounds to nearest even
//
// What the kernels assume about routing (the launcher cannot check device data without a host
// sync; the CPU reference rejects such tables):
//   * the k expert ids of one token are distinct;
//   * an id outside [0, E) contributes nothing to y: its weight rows are never read and its
//     intermediate values are unspecified.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace mf {

constexpr unsigned kFullMask = 0xffffffffu;

enum class GateUpLayout : int {
  kStacked = 0,      // gate rows 0..I-1, then up rows I..2I-1 (Hugging Face gate_up_proj)
  kInterleaved = 1,  // gate row 2i, up row 2i+1 (gpt-oss)
};

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int align16(int bytes) { return (bytes + 15) & ~15; }
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }

// Programmatic dependent launch (sm_90+). Under a plain launch (LaunchOrder.AFTER_PREVIOUS) both
// instructions return at once.
// Lets the next kernel on the stream begin launching: its blocks park in their wait, so they
// overlap this kernel's tail, but they also take their shared memory while they park.
__device__ __forceinline__ void let_next_kernel_begin() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// Waits until the previous kernel has finished and its writes are visible.
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// First thing in every generated kernel but router_tiled: the next kernel's launch overlaps all of
// this one. router_tiled waits first and lets the next kernel begin after its scores phase, since
// blocks parked through its shared-memory pipeline slowed it 2x (bench/NOTES.md, "The tiled
// router and programmatic dependent launch").
__device__ __forceinline__ void begin_after_previous_kernel() {
  let_next_kernel_begin();
  wait_for_previous_kernel();
}

// ---------------------------------------------------------------------------------------------
// Loads. Weights are streamed once: the .nc path with L1::no_allocate keeps them from evicting
// the activations, which every warp of a block re-reads and which should stay in L1.
// ---------------------------------------------------------------------------------------------

template <int BYTES>
struct Lane {
  // weights: 4, 8 or 16 bytes; activations: up to 64 (the bf16 inputs of a load of 4-bit codes)
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16 || BYTES == 32 || BYTES == 64, "a lane holds 4 to 64 bytes");
  static constexpr int kWords = BYTES / 4;
  uint32_t w[kWords];
};

template <int BYTES>
__device__ __forceinline__ Lane<BYTES> load_weights(const void* p) {
  static_assert(BYTES <= 16, "one weight load is at most 16 bytes");
  Lane<BYTES> v;
  if constexpr (BYTES == 16) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p));
  } else if constexpr (BYTES == 8) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.w[0]), "=r"(v.w[1]) : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v.w[0]) : "l"(p));
  }
  return v;
}

// Activations (the previous kernel's output) through L1. kAfterLateWait: the kernel did work before
// its griddepcontrol.wait (weights asked for first), so the loads are plain (ld.global.ca): ptxas treats
// a read-only load (__ldg) as invariant and moved some above the wait, reading the input before the
// previous kernel had written it (seen in router_cluster on sm_90a).
template <class T, bool kAfterLateWait>
__device__ __forceinline__ T load_activation_word(const T* p) {
  if constexpr (kAfterLateWait) {
    return __ldca(p);
  } else {
    return __ldg(p);
  }
}

template <int BYTES, bool kAfterLateWait = false>
__device__ __forceinline__ Lane<BYTES> load_activations(const void* p) {
  Lane<BYTES> v;
  if constexpr (BYTES > 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      const uint4 q = load_activation_word<uint4, kAfterLateWait>(reinterpret_cast<const uint4*>(p) + i);
      v.w[4 * i] = q.x; v.w[4 * i + 1] = q.y; v.w[4 * i + 2] = q.z; v.w[4 * i + 3] = q.w;
    }
  } else if constexpr (BYTES == 16) {
    const uint4 q = load_activation_word<uint4, kAfterLateWait>(reinterpret_cast<const uint4*>(p));
    v.w[0] = q.x; v.w[1] = q.y; v.w[2] = q.z; v.w[3] = q.w;
  } else if constexpr (BYTES == 8) {
    const uint2 q = load_activation_word<uint2, kAfterLateWait>(reinterpret_cast<const uint2*>(p));
    v.w[0] = q.x; v.w[1] = q.y;
  } else {
    v.w[0] = load_activation_word<unsigned int, kAfterLateWait>(reinterpret_cast<const unsigned int*>(p));
  }
  return v;
}

template <int BYTES>
__device__ __forceinline__ Lane<BYTES> zero_lane() {
  Lane<BYTES> v;
#pragma unroll
  for (int i = 0; i < Lane<BYTES>::kWords; ++i) v.w[i] = 0u;
  return v;
}

// ---------------------------------------------------------------------------------------------
// BF16 arithmetic. A bf16 is the upper half of an fp32, so widening is a shift or a mask.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// acc + dot(weights, activations) over the lane's elements, in fp32.
template <int BYTES>
__device__ __forceinline__ float dot_bf16(const Lane<BYTES>& wt, const Lane<BYTES>& x, float acc) {
#pragma unroll
  for (int i = 0; i < Lane<BYTES>::kWords; ++i) {
    acc = fmaf(bf16_lo(wt.w[i]), bf16_lo(x.w[i]), acc);
    acc = fmaf(bf16_hi(wt.w[i]), bf16_hi(x.w[i]), acc);
  }
  return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// warp_sum when only lanes 0..N-1 hold values (the others zero): the butterfly's levels above N
// add zeros, so they are skipped (the same bits in lanes 0..N-1, fewer dependent shuffles).
template <int N>
__device__ __forceinline__ float warp_sum_first(float v) {
  int top = 1;
  while (top < N) top <<= 1;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < top) v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// silu(g) = g * sigmoid(g), IEEE division; expf(-g) overflowing to inf gives -0 for large negative g.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// gpt-oss's clamped SwiGLU (alpha 1.702, limit 7; dsl GateFunction.ClampedSwiglu): the clamps
// compare, so NaN stays NaN as in torch.clamp (fminf would drop it).
__device__ __forceinline__ float clamped_swiglu(float gate, float up) {
  const float g = gate > 7.0f ? 7.0f : gate;
  const float u = up > 7.0f ? 7.0f : (up < -7.0f ? -7.0f : up);
  return (u + 1.0f) * (g / (1.0f + expf(-1.702f * g)));
}

// ---------------------------------------------------------------------------------------------
// Weight formats (layouts as in the checkpoints that ship them: OCP MX v1.0 for MXFP8/MXFP4,
// NVIDIA ModelOpt for NVFP4, DeepSeek-V3's weight_scale_inv for FP8 128 x 128 blocks). A row of K
// codes decodes to FP32 in registers; scales multiply partial sums, never single elements: a
// K-block scale once per load's partial sum of its block, a row or tensor scale once per row.
// Decoders are arithmetic or a hardware conversion, never a table in memory: a lookup is one more
// dependent memory read per code in the decode's latency chain (bench/NOTES.md, "Weight formats").
// ---------------------------------------------------------------------------------------------

enum class Element : int { kBf16, kE4M3, kE2M1, kInt8, kInt4 };
enum class BlockScale : int { kNone, kE4M3, kE8M0, kF32 };  // type of the K-block scales
enum class RowFactor : int { kNone, kPerRow, kPerTensor };   // FP32 scale of a whole row

// One format: element, K-block scale (elements per block; 128 x 128 blocks for kBlockRows), and
// the factor of a whole row. kUnscale undoes the fixed power of two the decoder leaves in.
template <Element EL, BlockScale BS, int BLOCK, bool BLOCK_ROWS, RowFactor RF>
struct Format {
  static constexpr Element kElement = EL;
  static constexpr BlockScale kBlockScale = BS;
  static constexpr int kBlock = BLOCK;
  static constexpr bool kBlockRows = BLOCK_ROWS;
  static constexpr RowFactor kRowFactor = RF;
  static constexpr int kCodeBits = EL == Element::kBf16 ? 16 : (EL == Element::kE2M1 || EL == Element::kInt4) ? 4 : 8;
  static constexpr float kUnscale = EL == Element::kE2M1 ? 16384.0f : 1.0f;
  static_assert((BS == BlockScale::kNone) == (BLOCK == 0), "a K-block scale needs a block size");
};

using Bf16Weights = Format<Element::kBf16, BlockScale::kNone, 0, false, RowFactor::kNone>;
using Fp8ChannelWeights = Format<Element::kE4M3, BlockScale::kNone, 0, false, RowFactor::kPerRow>;
using Fp8Block128Weights = Format<Element::kE4M3, BlockScale::kF32, 128, true, RowFactor::kNone>;
using Mxfp8Weights = Format<Element::kE4M3, BlockScale::kE8M0, 32, false, RowFactor::kNone>;
using Nvfp4Weights = Format<Element::kE2M1, BlockScale::kE4M3, 16, false, RowFactor::kPerTensor>;
using Mxfp4Weights = Format<Element::kE2M1, BlockScale::kE8M0, 32, false, RowFactor::kNone>;
using Int8ChannelWeights = Format<Element::kInt8, BlockScale::kNone, 0, false, RowFactor::kPerRow>;
using Int8Group128Weights = Format<Element::kInt8, BlockScale::kF32, 128, false, RowFactor::kNone>;
using Int4ChannelWeights = Format<Element::kInt4, BlockScale::kNone, 0, false, RowFactor::kPerRow>;
using Int4Group128Weights = Format<Element::kInt4, BlockScale::kF32, 128, false, RowFactor::kNone>;

// E8M0 (OCP MX): byte b is 2^(b - 127); 0 is the subnormal 2^-127, 0xFF is NaN.
__device__ __forceinline__ float e8m0_to_float(uint32_t b) {
  return __uint_as_float(b == 0xffu ? 0x7fc00000u : b == 0u ? 0x00400000u : b << 23);
}

__device__ __forceinline__ float half_lo(uint32_t h2) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h2))); }
__device__ __forceinline__ float half_hi(uint32_t h2) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 >> 16))); }

// Two E4M3 codes (low byte first) to fp16x2 by the sm_89+ conversion instruction: exact, NaN kept.
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
__device__ __forceinline__ float e4m3_to_float(uint32_t code) { return half_lo(e4m3x2_to_half2(code & 0xffu)); }

template <int S>
__device__ __forceinline__ uint32_t shift_left(uint32_t w) {
  if constexpr (S >= 0) return w << S; else return w >> -S;
}

// Codes i and i + 4 of a word of eight E2M1 (code j in nibble j: element 2j of a byte is its low
// nibble) as fp16x2 bit patterns of value * 2^-14: the sign to bit 15, e1 e0 m to bits 11..9,
// which is exactly the fp16 encoding (e = 0 lands on fp16 subnormals). kUnscale takes the 2^-14 back.
template <int I>
__device__ __forceinline__ uint32_t e2m1_pair_scaled(uint32_t w) {
  return (shift_left<12 - 4 * I>(w) & 0x80008000u) | (shift_left<9 - 4 * I>(w) & 0x0e000e00u);
}

// The fp16 magic-number conversion, with the sign flip done on the word: (q ^ 0x80) is q + 128 as an
// unsigned byte; 0x64 above it makes the fp16 1024 + (q + 128), and one subtraction leaves q exactly.
template <int I>
__device__ __forceinline__ uint32_t int8_pair(uint32_t biased) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, I == 0 ? 0x4140 : 0x4342);
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The same for INT4: nibbles i and i + 4 (offset by 8) in the mantissas of 1024, minus 1032.
template <int I>
__device__ __forceinline__ uint32_t int4_pair(uint32_t biased) {
  const uint32_t h = ((biased >> (4 * I)) & 0x000f000fu) | 0x64006400u;
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Decodes the N codes of `words` (row order) into v[0..N), times 2^-14 for E2M1.
template <Element EL, int N>
__device__ __forceinline__ void decode_codes(const uint32_t* words, float* v) {
  if constexpr (EL == Element::kBf16) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) { v[2 * i] = bf16_lo(words[i]); v[2 * i + 1] = bf16_hi(words[i]); }
  } else if constexpr (EL == Element::kE4M3) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint32_t lo = e4m3x2_to_half2(words[i] & 0xffffu), hi = e4m3x2_to_half2(words[i] >> 16);
      v[4 * i] = half_lo(lo); v[4 * i + 1] = half_hi(lo); v[4 * i + 2] = half_lo(hi); v[4 * i + 3] = half_hi(hi);
    }
  } else if constexpr (EL == Element::kInt8) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint32_t b = words[i] ^ 0x80808080u;
      const uint32_t lo = int8_pair<0>(b), hi = int8_pair<1>(b);
      v[4 * i] = half_lo(lo); v[4 * i + 1] = half_hi(lo); v[4 * i + 2] = half_lo(hi); v[4 * i + 3] = half_hi(hi);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      uint32_t p[4];
      if constexpr (EL == Element::kE2M1) {
        p[0] = e2m1_pair_scaled<0>(words[i]); p[1] = e2m1_pair_scaled<1>(words[i]);
        p[2] = e2m1_pair_scaled<2>(words[i]); p[3] = e2m1_pair_scaled<3>(words[i]);
      } else {
        const uint32_t b = words[i] ^ 0x88888888u;
        p[0] = int4_pair<0>(b); p[1] = int4_pair<1>(b); p[2] = int4_pair<2>(b); p[3] = int4_pair<3>(b);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) { v[8 * i + j] = half_lo(p[j]); v[8 * i + j + 4] = half_hi(p[j]); }
    }
  }
}

template <BlockScale BS>
__device__ __forceinline__ float block_scale_value(uint32_t raw) {
  if constexpr (BS == BlockScale::kE4M3) return e4m3_to_float(raw);
  else if constexpr (BS == BlockScale::kE8M0) return e8m0_to_float(raw);
  else return __uint_as_float(raw);
}

// A kernel's weight argument: the codes [E][N][K * bits / 8], the K-block scales, the FP32 row
// or tensor scales, and the FP32 bias [E][N] (null where the format or the projection has none).
// The copy engine's description of a tensor (CUDA's CUtensorMap: 128 opaque bytes), which the runtime
// encodes and passes by value as a __grid_constant__ parameter.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

struct WeightArgs {
  const void* codes;
  const void* block_scales;
  const float* row_scales;
  const float* bias = nullptr;
  const TensorMap* map = nullptr;  // where the kernel's copy engine reads the codes through one
};

// Row n of expert e's bias, or nothing without one (B false: no load, no add, -0 kept).
template <bool B, int N>
__device__ __forceinline__ float load_bias(const WeightArgs& w, int e, int n) {
  if constexpr (B) return __ldg(w.bias + static_cast<size_t>(e) * N + n); else return 0.0f;
}
template <bool B>
__device__ __forceinline__ float add_bias(float sum, float bias) {
  if constexpr (B) return sum + bias; else return sum;
}

// Where row n of expert e starts: its codes, its K-block scales, and its FP32 factor. P: factors
// per expert for kPerTensor (gate and up keep their own), `proj` this row's.
template <class F, int N, int K>
__device__ __forceinline__ const char* row_codes(const WeightArgs& w, int e, int n) {
  return static_cast<const char*>(w.codes) + (static_cast<size_t>(e) * N + n) * (K * F::kCodeBits / 8);
}

template <class F, int N, int K>
__device__ __forceinline__ const unsigned char* row_block_scales(const WeightArgs& w, int e, int n) {
  if constexpr (F::kBlockScale == BlockScale::kNone) {
    return nullptr;
  } else {
    constexpr int kScaleBytes = F::kBlockScale == BlockScale::kF32 ? 4 : 1;
    const size_t first = F::kBlockRows
        ? (static_cast<size_t>(e) * ceil_div(N, F::kBlock) + n / F::kBlock) * ceil_div(K, F::kBlock)
        : (static_cast<size_t>(e) * N + n) * (K / F::kBlock);
    return static_cast<const unsigned char*>(w.block_scales) + first * kScaleBytes;
  }
}

template <class F, int N, int P>
__device__ __forceinline__ float row_factor(const WeightArgs& w, int e, int n, int proj) {
  if constexpr (F::kRowFactor == RowFactor::kPerRow) return __ldg(w.row_scales + static_cast<size_t>(e) * N + n);
  else if constexpr (F::kRowFactor == RowFactor::kPerTensor) return __ldg(w.row_scales + e * P + proj);
  else return 1.0f;
}

template <class F>
__device__ __forceinline__ float apply_factor(float acc, float factor) {
  if constexpr (F::kRowFactor == RowFactor::kNone) return acc; else return acc * factor;
}

// What one lane's weight load of LB bytes covers: kElems codes, kScales K-block scales, and the
// kXBytes of bf16 activations they meet.
template <class F, int LB>
struct Chunk {
  static constexpr int kElems = LB * 8 / F::kCodeBits;
  static constexpr int kXBytes = 2 * kElems;
  static constexpr int kScales = F::kBlock == 0 ? 0 : (kElems >= F::kBlock ? kElems / F::kBlock : 1);
  static_assert(F::kBlock == 0 || kElems % F::kBlock == 0 || F::kBlock % kElems == 0, "a load covers whole blocks or part of one");
};

// The raw K-block scales of chunk c (kScales of them, at most two bytes or one float).
template <class F, int LB>
struct ChunkScales {
  uint32_t raw;
};

template <class F, int LB>
__device__ __forceinline__ ChunkScales<F, LB> load_chunk_scales(const unsigned char* block_scales, int c) {
  using C = Chunk<F, LB>;
  ChunkScales<F, LB> s;
  if constexpr (C::kScales == 0) {
    s.raw = 0u;
  } else {
    const int first = C::kElems >= F::kBlock ? c * C::kScales : c * C::kElems / F::kBlock;
    if constexpr (F::kBlockScale == BlockScale::kF32) {
      s.raw = __float_as_uint(__ldg(reinterpret_cast<const float*>(block_scales) + first));
    } else if constexpr (C::kScales == 2) {
      s.raw = __ldg(reinterpret_cast<const unsigned short*>(block_scales) + first / 2);
    } else {
      static_assert(C::kScales == 1, "at most two byte scales per load");
      s.raw = __ldg(block_scales + first);
    }
  }
  return s;
}

// acc + the chunk's dot product with the activations xf (FP32, kElems of them), K-block scales
// applied once per partial sum of a block.
template <class F, int LB>
__device__ __forceinline__ float chunk_dot(const Lane<LB>& codes, const ChunkScales<F, LB>& s, const float* xf, float acc) {
  using C = Chunk<F, LB>;
  float v[C::kElems];
  decode_codes<F::kElement, C::kElems>(codes.w, v);
  if constexpr (C::kScales == 0) {
#pragma unroll
    for (int i = 0; i < C::kElems; ++i) acc = fmaf(v[i], xf[i], acc);
  } else {
    constexpr int kPer = C::kElems / C::kScales;
#pragma unroll
    for (int b = 0; b < C::kScales; ++b) {
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) part = fmaf(v[b * kPer + i], xf[b * kPer + i], part);
      const uint32_t raw = F::kBlockScale == BlockScale::kF32 ? s.raw : (s.raw >> (8 * b)) & 0xffu;
      if constexpr (F::kUnscale != 1.0f) part *= F::kUnscale;
      acc = fmaf(part, block_scale_value<F::kBlockScale>(raw), acc);
    }
  }
  return acc;
}

// The activations of a chunk widened to FP32.
template <int N>
__device__ __forceinline__ void widen_bf16(const uint32_t* words, float* xf) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) { xf[2 * i] = bf16_lo(words[i]); xf[2 * i + 1] = bf16_hi(words[i]); }
}

// ---------------------------------------------------------------------------------------------
// The routing table of a tile of T tokens, built by the whole thread block in shared memory:
// the tile's distinct experts in ascending id order (rank r -> expert), which of the tile's
// tokens use each one (a T-bit mask) and at which slot. Lets every weight row be read once per
// tile however many of its tokens are routed to the expert.
// ---------------------------------------------------------------------------------------------

template <int T, int K, int E>
struct TileRouting {
  static_assert(T >= 2 && T <= 32, "a tile's tokens form one 32-bit mask");
  static_assert(E <= 1024, "the expert bitmap is at most 32 words");
  static constexpr int kWords = ceil_div(E, 32);
  static constexpr int kMaxDistinct = min_int(T * K, E);
  // Layout; dsl OutputCentricLayout.sharedBytes states the same sizes.
  static constexpr int kHeaderBytes = align16(8 * kWords + 4);
  static constexpr int kRankBytes = align16(8 * kMaxDistinct);
  static constexpr int kSlotBytes = align16(kMaxDistinct * T);
  static constexpr int kBytes = kHeaderBytes + kRankBytes + kSlotBytes;

  uint32_t* present;  // [kWords] bit e set when expert e is routed to by a token of the tile
  int* word_rank;     // [kWords] rank of the first set bit of each word
  int* count;         // number of distinct experts
  int* expert;        // [kMaxDistinct] rank -> expert id
  uint32_t* tokens;   // [kMaxDistinct] rank -> tokens of the tile routed to it
  uint8_t* slot;      // [kMaxDistinct][T] rank, token -> slot j of that token

  __device__ explicit TileRouting(unsigned char* smem)
      : present(reinterpret_cast<uint32_t*>(smem)),
        word_rank(reinterpret_cast<int*>(smem + 4 * kWords)),
        count(reinterpret_cast<int*>(smem + 8 * kWords)),
        expert(reinterpret_cast<int*>(smem + kHeaderBytes)),
        tokens(reinterpret_cast<uint32_t*>(smem + kHeaderBytes + 4 * kMaxDistinct)),
        slot(smem + kHeaderBytes + kRankBytes) {}

  // ids: the tile's first token's row of topk_ids; nt: tokens in the tile (1..T).
  // Every thread of the block must call it; it ends with a barrier.
  __device__ void build(const int* __restrict__ ids, int nt) {
    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const int entries = nt * K;
    for (int i = tid; i < kWords; i += nthreads) present[i] = 0u;
    for (int i = tid; i < kMaxDistinct; i += nthreads) tokens[i] = 0u;
    __syncthreads();
    for (int f = tid; f < entries; f += nthreads) {
      const int e = __ldg(ids + f);
      if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) atomicOr(&present[e >> 5], 1u << (e & 31));
    }
    __syncthreads();
    if (tid < 32) {  // exclusive prefix sum of the words' popcounts, one word per lane
      const int c = tid < kWords ? __popc(present[tid]) : 0;
      int inclusive = c;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int v = __shfl_up_sync(kFullMask, inclusive, offset);
        if (tid >= offset) inclusive += v;
      }
      if (tid < kWords) word_rank[tid] = inclusive - c;
      if (tid == 31) *count = inclusive;
    }
    __syncthreads();
    for (int f = tid; f < entries; f += nthreads) {
      const int e = __ldg(ids + f);
      if (static_cast<unsigned>(e) >= static_cast<unsigned>(E)) continue;
      const int r = word_rank[e >> 5] + __popc(present[e >> 5] & ((1u << (e & 31)) - 1u));
      const int t = f / K;
      expert[r] = e;
      atomicOr(&tokens[r], 1u << t);
      slot[r * T + t] = static_cast<uint8_t>(f - t * K);
    }
    __syncthreads();
  }
};

template <int T, int K, int E>
constexpr int tile_routing_bytes() { return TileRouting<T, K, E>::kBytes; }

// ---------------------------------------------------------------------------------------------
// Warps per output (S). With S > 1 the S consecutive warps of an output each read every S-th
// piece of the reduction; their butterfly-reduced sums meet in shared memory and the first warp
// adds them in warp order (deterministic). Such blocks must not return before that barrier.
// ---------------------------------------------------------------------------------------------

// Adds the V values of the S warps sharing an output: `mine` are this warp's (lane 0 writes
// them), `partial` is [W][V] floats of shared memory. Every thread of the block must call it.
// Returns true in the group's first warp, whose `mine` then holds the totals.
template <int S, int V>
__device__ __forceinline__ bool combine_warps(float (&mine)[V], float* partial) {
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int v = 0; v < V; ++v) partial[warp * V + v] = mine[v];
  }
  __syncthreads();
  if (warp % S != 0) return false;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < S; ++s) total += partial[(warp + s) * V + v];
    mine[v] = total;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// gate_up: one warp per (token, routed slot, neuron) (S warps with warps_per_output = S). It
// streams the neuron's gate row and up row in format F, shares one activation load between them,
// reduces both with a butterfly and writes epi(gate, up) as bf16 to inter[m][j][i].
// Grid: x = ceil(I / (W / S)) neuron groups, y = M * k slots. Block: 32 * W threads.
// ---------------------------------------------------------------------------------------------

template <GateUpLayout L>
__device__ __forceinline__ int gate_row_of(int neuron, int intermediate) {
  return L == GateUpLayout::kStacked ? neuron : 2 * neuron;
}
template <GateUpLayout L>
__device__ __forceinline__ int up_row_of(int neuron, int intermediate) {
  return L == GateUpLayout::kStacked ? intermediate + neuron : 2 * neuron + 1;
}

template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_single_token(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                     const int* __restrict__ topk_ids,
                                                     __nv_bfloat16* __restrict__ inter, int num_tokens,
                                                     Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr GateUpLayout L = Config::kLayout;
  constexpr int W = Config::kWarpsPerCta, LB = Config::kLoadBytes, U = Config::kUnroll, S = Config::kWarpsPerOutput;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kTokensPerCta == 1, "one token per warp");
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == (S > 1 ? 4 * W * 2 : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  using C = Chunk<F, LB>;
  constexpr int kChunks = H / C::kElems;   // loads per row
  constexpr int kStep = 32 * U;            // loads per row per warp iteration
  constexpr bool kWhole = kChunks % kStep == 0;
  static_assert(W % S == 0, "warps_per_output divides warps_per_cta");
  const int lane = threadIdx.x & 31;
  const int part = (threadIdx.x >> 5) % S;  // this warp reads load blocks part, part + S, ...
  const int neuron = blockIdx.x * (W / S) + (threadIdx.x >> 5) / S;
  const int slot = blockIdx.y;
  const bool active = neuron < I && slot < num_tokens * K;
  if constexpr (S == 1) {
    if (!active) return;
  }
  const int token = slot / K;
  const int e = active ? __ldg(topk_ids + slot) : -1;
  float acc_gate = 0.0f, acc_up = 0.0f, gate_bias = 0.0f, up_bias = 0.0f;
  if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) {
    const int gate_n = gate_row_of<L>(neuron, I), up_n = up_row_of<L>(neuron, I);
    gate_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, gate_n);
    up_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, up_n);
    const char* gate_row = row_codes<F, 2 * I, H>(w_gate_up, e, gate_n);
    const char* up_row = row_codes<F, 2 * I, H>(w_gate_up, e, up_n);
    const unsigned char* gate_scales = row_block_scales<F, 2 * I, H>(w_gate_up, e, gate_n);
    const unsigned char* up_scales = row_block_scales<F, 2 * I, H>(w_gate_up, e, up_n);
    const char* x_row = reinterpret_cast<const char*>(x + static_cast<size_t>(token) * H);
#pragma unroll 1
    for (int c0 = part * kStep; c0 < kChunks; c0 += S * kStep) {
      Lane<LB> g[U], u[U];
      Lane<C::kXBytes> a[U];
      ChunkScales<F, LB> gs[U], us[U];
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = c0 + i * 32 + lane;
        if (kWhole || c < kChunks) {
          g[i] = load_weights<LB>(gate_row + c * LB);
          u[i] = load_weights<LB>(up_row + c * LB);
          gs[i] = load_chunk_scales<F, LB>(gate_scales, c);
          us[i] = load_chunk_scales<F, LB>(up_scales, c);
          a[i] = load_activations<C::kXBytes>(x_row + c * C::kXBytes);
        } else {
          g[i] = zero_lane<LB>(); u[i] = zero_lane<LB>(); a[i] = zero_lane<C::kXBytes>();
          gs[i].raw = 0u; us[i].raw = 0u;
        }
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        float xf[C::kElems];
        widen_bf16<C::kElems>(a[i].w, xf);
        acc_gate = chunk_dot<F, LB>(g[i], gs[i], xf, acc_gate);
        acc_up = chunk_dot<F, LB>(u[i], us[i], xf, acc_up);
      }
    }
    acc_gate = apply_factor<F>(acc_gate, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0));
    acc_up = apply_factor<F>(acc_up, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1));
  }
  float sums[2] = {warp_sum(acc_gate), warp_sum(acc_up)};
  if constexpr (S > 1) {
    extern __shared__ __align__(16) unsigned char smem[];
    if (!combine_warps<S, 2>(sums, reinterpret_cast<float*>(smem))) return;
  }
  if (lane == 0 && active) {
    store_bf16(inter + static_cast<size_t>(slot) * I + neuron, epi(add_bias<BIAS>(sums[0], gate_bias), add_bias<BIAS>(sums[1], up_bias)));
  }
}

// gate_up over a tile of T tokens: one block per (tile, distinct expert of the tile, neuron
// group); each warp reads its neuron's two rows once and applies them to every token of the
// tile routed to the expert. Grid: x = ceil(I / W), y = ceil(M / T) * min(T * k, E).
template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_token_tile(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                   const int* __restrict__ topk_ids,
                                                   __nv_bfloat16* __restrict__ inter, int num_tokens,
                                                   Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr GateUpLayout L = Config::kLayout;
  constexpr int W = Config::kWarpsPerCta, LB = Config::kLoadBytes, U = Config::kUnroll, T = Config::kTokensPerCta;
  constexpr int S = Config::kWarpsPerOutput;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  using Routing = TileRouting<T, K, E>;
  using C = Chunk<F, LB>;
  static_assert(S == 1, "the token-tiled gate_up keeps a warp's whole rows across the tile's tokens");
  constexpr int kChunks = H / C::kElems;
  constexpr int kStep = 32 * U;
  constexpr bool kWhole = kChunks % kStep == 0;
  constexpr int kBlocks = ceil_div(kChunks, kStep);
  static_assert(Config::kSharedBytes == Routing::kBytes + (kBlocks > 1 ? 4 * W * T * 64 : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  extern __shared__ __align__(16) unsigned char smem[];

  const int tile = blockIdx.y / Routing::kMaxDistinct;
  const int rank = blockIdx.y - tile * Routing::kMaxDistinct;
  const int t0 = tile * T;
  if (t0 >= num_tokens) return;  // uniform over the block
  const int nt = min_int(T, num_tokens - t0);
  Routing routing(smem);
  routing.build(topk_ids + static_cast<size_t>(t0) * K, nt);
  if (rank >= *routing.count) return;  // uniform over the block; no barrier follows

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int neuron = blockIdx.x * W + warp;
  if (neuron >= I) return;
  const int e = routing.expert[rank];
  const uint32_t tokens = routing.tokens[rank];
  const uint8_t* slots = routing.slot + rank * T;
  const int gate_n = gate_row_of<L>(neuron, I), up_n = up_row_of<L>(neuron, I);
  const char* gate_row = row_codes<F, 2 * I, H>(w_gate_up, e, gate_n);
  const char* up_row = row_codes<F, 2 * I, H>(w_gate_up, e, up_n);
  const unsigned char* gate_scales = row_block_scales<F, 2 * I, H>(w_gate_up, e, gate_n);
  const unsigned char* up_scales = row_block_scales<F, 2 * I, H>(w_gate_up, e, up_n);
  const float gate_factor = row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0);
  const float up_factor = row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1);
  const float gate_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, gate_n);
  const float up_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, up_n);
  // Per-lane partial sums, needed only when a row takes several passes: [W][T][2][32].
  float* partial = reinterpret_cast<float*>(smem + Routing::kBytes) + warp * T * 64;
  if constexpr (kBlocks > 1) {
    for (uint32_t m = tokens; m != 0u; m &= m - 1u) {
      const int t = __ffs(m) - 1;
      partial[t * 64 + lane] = 0.0f;
      partial[t * 64 + 32 + lane] = 0.0f;
    }
  }
#pragma unroll 1
  for (int c0 = 0; c0 < kChunks; c0 += kStep) {
    Lane<LB> g[U], u[U];
    ChunkScales<F, LB> gs[U], us[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = c0 + i * 32 + lane;
      if (kWhole || c < kChunks) {
        g[i] = load_weights<LB>(gate_row + c * LB);
        u[i] = load_weights<LB>(up_row + c * LB);
        gs[i] = load_chunk_scales<F, LB>(gate_scales, c);
        us[i] = load_chunk_scales<F, LB>(up_scales, c);
      } else {
        g[i] = zero_lane<LB>(); u[i] = zero_lane<LB>();
        gs[i].raw = 0u; us[i].raw = 0u;
      }
    }
    for (uint32_t m = tokens; m != 0u; m &= m - 1u) {
      const int t = __ffs(m) - 1;
      const char* x_row = reinterpret_cast<const char*>(x + static_cast<size_t>(t0 + t) * H);
      float acc_gate = 0.0f, acc_up = 0.0f;
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = c0 + i * 32 + lane;
        const Lane<C::kXBytes> a = (kWhole || c < kChunks) ? load_activations<C::kXBytes>(x_row + c * C::kXBytes)
                                                           : zero_lane<C::kXBytes>();
        float xf[C::kElems];
        widen_bf16<C::kElems>(a.w, xf);
        acc_gate = chunk_dot<F, LB>(g[i], gs[i], xf, acc_gate);
        acc_up = chunk_dot<F, LB>(u[i], us[i], xf, acc_up);
      }
      if constexpr (kBlocks == 1) {
        acc_gate = warp_sum(acc_gate);
        acc_up = warp_sum(acc_up);
        if (lane == 0) {
          const size_t slot = static_cast<size_t>(t0 + t) * K + slots[t];
          store_bf16(inter + slot * I + neuron,
                     epi(add_bias<BIAS>(apply_factor<F>(acc_gate, gate_factor), gate_bias),
                         add_bias<BIAS>(apply_factor<F>(acc_up, up_factor), up_bias)));
        }
      } else {
        partial[t * 64 + lane] += acc_gate;
        partial[t * 64 + 32 + lane] += acc_up;
      }
    }
  }
  if constexpr (kBlocks > 1) {
    for (uint32_t m = tokens; m != 0u; m &= m - 1u) {
      const int t = __ffs(m) - 1;
      const float acc_gate = warp_sum(partial[t * 64 + lane]);
      const float acc_up = warp_sum(partial[t * 64 + 32 + lane]);
      if (lane == 0) {
        const size_t slot = static_cast<size_t>(t0 + t) * K + slots[t];
        store_bf16(inter + slot * I + neuron,
                   epi(add_bias<BIAS>(apply_factor<F>(acc_gate, gate_factor), gate_bias),
                         add_bias<BIAS>(apply_factor<F>(acc_up, up_factor), up_bias)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// down: one warp per (token, hidden output h) (S warps with warps_per_output = S). The token's k
// routed rows W_down[e_j][h] form one stream of k * I elements, read with U loads in flight per
// lane across expert boundaries; each load's partial dot product is scaled by its slot's routing
// weight (times the row's FP32 factor) and added to the one fp32 accumulator (the combine), so the
// per-expert outputs never exist. Grid: x = ceil(H / (W / S)), y = M. Block: 32 * W threads.
// ---------------------------------------------------------------------------------------------

template <class Config, class Epilogue>
__device__ __forceinline__ void down_single_token(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down,
                                                  const int* __restrict__ topk_ids,
                                                  const float* __restrict__ topk_weights,
                                                  __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr int W = Config::kWarpsPerCta, LB = Config::kLoadBytes, U = Config::kUnroll, S = Config::kWarpsPerOutput;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kTokensPerCta == 1, "one token per warp");
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == (S > 1 ? 4 * W : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  static_assert(K <= 32, "one lane per routed slot");
  using C = Chunk<F, LB>;
  constexpr int kChunks = I / C::kElems;   // loads per row
  constexpr int kStream = K * kChunks;  // loads over the k routed rows
  constexpr int kStep = 32 * U;
  constexpr bool kWhole = kStream % kStep == 0;
  static_assert(W % S == 0, "warps_per_output divides warps_per_cta");
  const int lane = threadIdx.x & 31;
  const int part = (threadIdx.x >> 5) % S;  // this warp reads load blocks part, part + S, ...
  const int h = blockIdx.x * (W / S) + (threadIdx.x >> 5) / S;
  const int token = blockIdx.y;
  const bool active = h < H && token < num_tokens;
  if constexpr (S == 1) {
    if (!active) return;
  }
  // Lane j holds slot j's expert and weight (times its row factor); a load finds its slot's with one shuffle.
  const int lane_expert = lane < K && active ? __ldg(topk_ids + token * K + lane) : -1;
  const bool lane_routed = static_cast<unsigned>(lane_expert) < static_cast<unsigned>(E);
  const float routing_weight = lane_routed ? __ldg(topk_weights + token * K + lane) : 0.0f;
  const float lane_weight = lane_routed ? apply_factor<F>(routing_weight, row_factor<F, H, 1>(w_down, lane_expert, h, 0)) : 0.0f;
  const char* inter_rows = reinterpret_cast<const char*>(inter + static_cast<size_t>(token) * K * I);
  float acc = 0.0f;
  if constexpr (BIAS) {  // slot j's w_j * b[e_j][h], once: on lane j of the output's first warp
    if (lane_routed && part == 0) acc = routing_weight * load_bias<BIAS, H>(w_down, lane_expert, h);
  }
#pragma unroll 1
  for (int p0 = part * kStep; p0 < kStream; p0 += S * kStep) {
    Lane<LB> wv[U];
    Lane<C::kXBytes> av[U];
    ChunkScales<F, LB> ws[U];
    float scale[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int p = p0 + i * 32 + lane;
      const int j = min_int(p / kChunks, K - 1);
      const int c = p - j * kChunks;
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      scale[i] = __shfl_sync(kFullMask, lane_weight, j);
      if ((kWhole || p < kStream) && static_cast<unsigned>(e) < static_cast<unsigned>(E)) {
        wv[i] = load_weights<LB>(row_codes<F, H, I>(w_down, e, h) + c * LB);
        ws[i] = load_chunk_scales<F, LB>(row_block_scales<F, H, I>(w_down, e, h), c);
        av[i] = load_activations<C::kXBytes>(inter_rows + static_cast<size_t>(j) * I * 2 + c * C::kXBytes);
      } else {
        wv[i] = zero_lane<LB>(); av[i] = zero_lane<C::kXBytes>(); ws[i].raw = 0u; scale[i] = 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      float xf[C::kElems];
      widen_bf16<C::kElems>(av[i].w, xf);
      acc = fmaf(scale[i], chunk_dot<F, LB>(wv[i], ws[i], xf, 0.0f), acc);
    }
  }
  float sum[1] = {warp_sum(acc)};
  if constexpr (S > 1) {
    extern __shared__ __align__(16) unsigned char smem[];
    if (!combine_warps<S, 1>(sum, reinterpret_cast<float*>(smem))) return;
  }
  if (lane == 0 && active) store_bf16(y + static_cast<size_t>(token) * H + h, epi(sum[0]));
}

// down over a tile of T tokens: one warp per hidden output h (S warps with warps_per_output = S,
// taking every S-th distinct expert), for all tokens of the tile. A warp walks its distinct
// experts once each (row h of each read once), applying it to every token routed there; the next
// row block is loaded while the current one is used. Per-lane, per-token accumulators live in
// shared memory because a routed entry's token is only known at run time.
// Grid: x = ceil(H / (W / S)), y = ceil(M / T).
template <class Config, class Epilogue>
__device__ __forceinline__ void down_token_tile(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down,
                                                const int* __restrict__ topk_ids,
                                                const float* __restrict__ topk_weights,
                                                __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr int W = Config::kWarpsPerCta, LB = Config::kLoadBytes, U = Config::kUnroll, T = Config::kTokensPerCta;
  constexpr int S = Config::kWarpsPerOutput;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  using Routing = TileRouting<T, K, E>;
  using C = Chunk<F, LB>;
  constexpr int kChunks = I / C::kElems;
  constexpr int kStep = 32 * U;
  constexpr bool kWhole = kChunks % kStep == 0;
  constexpr int kBlocks = ceil_div(kChunks, kStep);
  static_assert(Config::kSharedBytes == Routing::kBytes + 4 * W * T * 32 + (S > 1 ? 4 * W * T : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  extern __shared__ __align__(16) unsigned char smem[];

  const int t0 = blockIdx.y * T;
  if (t0 >= num_tokens) return;  // uniform over the block
  const int nt = min_int(T, num_tokens - t0);
  Routing routing(smem);
  routing.build(topk_ids + static_cast<size_t>(t0) * K, nt);

  static_assert(W % S == 0, "warps_per_output divides warps_per_cta");
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int part = warp % S;  // this warp takes ranks part, part + S, ...
  const int h = blockIdx.x * (W / S) + warp / S;
  const bool active = h < H;
  if constexpr (S == 1) {
    if (!active) return;  // no barrier follows
  }
  float* acc = reinterpret_cast<float*>(smem + Routing::kBytes) + warp * T * 32;
  for (int t = 0; t < nt; ++t) acc[t * 32 + lane] = 0.0f;

  // (rank, row block) pairs of this warp's ranks
  const int total = active ? (*routing.count - part + S - 1) / S * kBlocks : 0;
  auto load_block = [&](int b, Lane<LB>* dst, ChunkScales<F, LB>* dst_scales) {
    const int e = routing.expert[part + S * (b / kBlocks)];
    const int c0 = (b % kBlocks) * kStep;
    const char* row = row_codes<F, H, I>(w_down, e, h);
    const unsigned char* row_scales = row_block_scales<F, H, I>(w_down, e, h);
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = c0 + i * 32 + lane;
      if (kWhole || c < kChunks) {
        dst[i] = load_weights<LB>(row + c * LB);
        dst_scales[i] = load_chunk_scales<F, LB>(row_scales, c);
      } else {
        dst[i] = zero_lane<LB>();
        dst_scales[i].raw = 0u;
      }
    }
  };
  Lane<LB> current[U];
  ChunkScales<F, LB> current_scales[U];
  if (total > 0) load_block(0, current, current_scales);
#pragma unroll 1
  for (int b = 0; b < total; ++b) {
    Lane<LB> next[U];
    ChunkScales<F, LB> next_scales[U];
    if (b + 1 < total) load_block(b + 1, next, next_scales);
    const int r = part + S * (b / kBlocks);
    const int c0 = (b % kBlocks) * kStep;
    const float factor = row_factor<F, H, 1>(w_down, routing.expert[r], h, 0);
    // the bias enters once per (expert, token): on lane 0, with the expert's first row block
    const float bias = BIAS && lane == 0 && b % kBlocks == 0 ? load_bias<BIAS, H>(w_down, routing.expert[r], h) : 0.0f;
    for (uint32_t m = routing.tokens[r]; m != 0u; m &= m - 1u) {
      const int t = __ffs(m) - 1;
      const int entry = (t0 + t) * K + routing.slot[r * T + t];
      const char* a_row = reinterpret_cast<const char*>(inter + static_cast<size_t>(entry) * I);
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = c0 + i * 32 + lane;
        const Lane<C::kXBytes> a = (kWhole || c < kChunks) ? load_activations<C::kXBytes>(a_row + c * C::kXBytes)
                                                           : zero_lane<C::kXBytes>();
        float xf[C::kElems];
        widen_bf16<C::kElems>(a.w, xf);
        part = chunk_dot<F, LB>(current[i], current_scales[i], xf, part);
      }
      const float weight = __ldg(topk_weights + entry);
      float sum = fmaf(apply_factor<F>(weight, factor), part, acc[t * 32 + lane]);
      if constexpr (BIAS) sum = fmaf(weight, bias, sum);
      acc[t * 32 + lane] = sum;
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      current[i] = next[i];
      current_scales[i] = next_scales[i];
    }
  }
  if constexpr (S == 1) {
    for (int t = 0; t < nt; ++t) {
      const float v = warp_sum(acc[t * 32 + lane]);
      if (lane == 0) store_bf16(y + static_cast<size_t>(t0 + t) * H + h, epi(v));
    }
  } else {
    // the S warps' per-token sums, [W][T], after the accumulators; added in warp order
    float* sums = reinterpret_cast<float*>(smem + Routing::kBytes) + W * T * 32;
    for (int t = 0; t < nt; ++t) {
      const float v = warp_sum(acc[t * 32 + lane]);
      if (lane == 0) sums[warp * T + t] = v;
    }
    __syncthreads();
    if (part != 0 || !active) return;
    for (int t = lane; t < nt; t += 32) {
      float total_t = 0.0f;
#pragma unroll
      for (int s = 0; s < S; ++s) total_t += sums[(warp + s) * T + t];
      store_bf16(y + static_cast<size_t>(t0 + t) * H + h, epi(total_t));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core decode of 4-bit weights (schedule output_tensor_core). On Hopper the 4-bit kernels
// above are bound by instruction issue, not DRAM (bench/NOTES.md, "Where the 4-bit time goes: a
// probe", and "What the SASS shows": about 13 instructions per code byte, most of them widening
// codes and activations to FP32 for FFMA). Here the codes become bf16 in registers and mma.sync
// m16n8k16 does the multiply-adds in FP32.
//
// A warp owns a tile of 16 weight rows for one token. Step s covers 128 codes of every row: lane
// (g = lane / 4, t = lane % 4) loads the 16-byte chunk 4s + t of rows g and g + 8, and the 32
// activations that chunk meets. All eight columns of the mma's B are that token, so every lane of
// group g ends with row g's sum in d[0] and row g + 8's in d[2].
// The order of K inside an mma is free as long as A and B agree: nibbles j and j + 4 of a code
// word form one bf16x2 (a shift and two masks), and the activations are paired alike (one
// byte_perm). The chunk's K-block scales fold into the bf16 codes where the product is exact
// (E4M3 and E8M0 scales of E2M1 codes: at most 6 significant bits); FP32 scales of 128-blocks
// multiply each step's FP32 sums instead.
// ---------------------------------------------------------------------------------------------

// d += a (16x16, row) * b (16x8, col), BF16 in, FP32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<const uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t w) { return *reinterpret_cast<const __nv_bfloat162*>(&w); }
// Exact whenever the product is a bf16 (subnormals included: the bf16 multiply does not flush).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) { return bf16x2_bits(__hmul2(as_bf16x2(a), as_bf16x2(b))); }

// Nibbles j and j + 4 of a word of E2M1 codes as the bf16x2 bit patterns of value * 2^-126: the
// sign to bit 15, e1 e0 m to bits 8..6, which is exactly the bf16 encoding (e = 0 lands on bf16
// subnormals).
template <int J>
__device__ __forceinline__ uint32_t e2m1_pair_bf16(uint32_t w) {
  return (shift_left<12 - 4 * J>(w) & 0x80008000u) | (shift_left<6 - 4 * J>(w) & 0x01c001c0u);
}

// Nibbles j and j + 4 of INT4 codes (offset by 8) in the mantissas of the bf16 128, minus 136.
template <int J>
__device__ __forceinline__ uint32_t int4_pair_bf16(uint32_t biased) {
  const uint32_t h = ((biased >> (4 * J)) & 0x000f000fu) | 0x43004300u;
  return bf16x2_bits(__hsub2(as_bf16x2(h), as_bf16x2(0x43084308u)));
}

// The activations of a tile live in shared memory, staged once per block in the order the mma
// reads them: word q of chunk c holds x[32c + 8q + j] and x[32c + 8q + j + 4] in its pair j, and
// sits at [q][c] (16-byte units), so the four lanes of a row group read 16 consecutive bytes each
// (no bank conflict) and the eight groups the same ones (a broadcast).
__device__ __forceinline__ uint4 pair_activation_word(uint4 v) {  // (x0..x7) -> (x0,x4) (x1,x5) (x2,x6) (x3,x7)
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                    __byte_perm(v.y, v.w, 0x7632));
}

// Chunks of 32 codes per row of length L, padded to whole steps of 4 chunks.
template <int L>
struct TileRow {
  static_assert(L % 32 == 0, "a row is whole 16-byte chunks of 32 codes");
  static constexpr int kChunks = L / 32;
  static constexpr int kSteps = ceil_div(kChunks, 4);
  static constexpr int kPadded = 4 * kSteps;
};

// Stages R activation rows of length L (row stride L) as [4][R * padded chunks] 16-byte words;
// the padding past a row's end is zeros. Every thread of the block must call it. WRITTEN_HERE:
// other blocks of the same kernel wrote the rows, so they are read through L2, not the .nc path
// (bench/probes/fused_layer.cuh).
template <int R, int L, bool WRITTEN_HERE = false>
__device__ __forceinline__ void stage_tile_activations(const __nv_bfloat16* __restrict__ src, uint4* dst) {
  using Row = TileRow<L>;
  constexpr int kWords = 4 * R * Row::kPadded;
  for (int p = threadIdx.x; p < kWords; p += blockDim.x) {
    const int q = p % 4, c = (p / 4) % Row::kPadded, r = p / (4 * Row::kPadded);
    const uint4* word = reinterpret_cast<const uint4*>(src + static_cast<size_t>(r) * L + 32 * c) + q;
    const uint4 v = c < Row::kChunks ? pair_activation_word(WRITTEN_HERE ? __ldcg(word) : __ldg(word)) : make_uint4(0u, 0u, 0u, 0u);
    dst[q * (R * Row::kPadded) + r * Row::kPadded + c] = v;
  }
  __syncthreads();
}

// How format F's 4-bit codes reach the tensor cores: whether K-block scales fold into the bf16
// codes (kFold) or multiply each step's FP32 sums (kStepScale), and the power of two left in.
template <class F>
struct TileDecode {
  static_assert(F::kCodeBits == 4, "tensor-core decode takes 4-bit codes");
  static constexpr bool kFold = F::kBlockScale == BlockScale::kE4M3 || F::kBlockScale == BlockScale::kE8M0;
  static constexpr bool kStepScale = F::kBlockScale == BlockScale::kF32;
  static_assert(!kStepScale || F::kBlock == 128, "FP32 K-block scales are per 128 codes, one step");
  // E4M3 scales fold in times 2^117 (at most 448 * 2^117 < 2^126, a finite bf16), the E2M1 codes
  // carry 2^-126: 2^-9 is left, taken back with the row factor.
  static constexpr float kUnscale = F::kBlockScale == BlockScale::kE4M3 ? 512.0f : 1.0f;
};

// The raw K-block scales of chunk c of a row (NVFP4: two E4M3 bytes, MXFP4: one E8M0 byte, INT4
// per group of 128: the FP32 of step c / 4).
template <class F>
__device__ __forceinline__ uint32_t load_tile_scales(const unsigned char* block_scales, int c) {
  if constexpr (F::kBlockScale == BlockScale::kNone) return 0u;
  else if constexpr (F::kBlockScale == BlockScale::kF32) return __float_as_uint(__ldg(reinterpret_cast<const float*>(block_scales) + c / 4));
  else if constexpr (F::kBlock == 16) return __ldg(reinterpret_cast<const unsigned short*>(block_scales) + c);
  else return __ldg(block_scales + c);
}

// Two E4M3 block scales (low byte first) as bf16x2 broadcasts times 2^117 (TileDecode's fold: the
// E2M1 codes carry 2^-126).
__device__ __forceinline__ void e4m3_scale_pair_bf16x2(uint32_t two_scales, uint32_t& lo, uint32_t& hi) {
  const uint32_t s2 = e4m3x2_to_half2(two_scales);
  lo = bf16x2_bits(__float2bfloat162_rn(half_lo(s2) * 0x1p117f));
  hi = bf16x2_bits(__float2bfloat162_rn(half_hi(s2) * 0x1p117f));
}

// 2^126 as bf16x2: an E2M1 pair times it is the codes' values (exact), before an E8M0 scale.
constexpr uint32_t kE2m1Unbias = 0x7e807e80u;

// An E8M0 scale byte b as a bf16x2 broadcast of 2^(b - 127) (same exponent range; 0 is the
// subnormal 2^-127, 0xFF NaN).
__device__ __forceinline__ uint32_t e8m0_scale_bf16x2(uint32_t b) {
  const uint32_t s = b == 0xffu ? 0x7fc0u : b == 0u ? 0x0040u : b << 7;
  return s | (s << 16);
}

// A word of 8 E2M1 codes as 4 bf16x2 (pair j: nibbles j and j + 4), before their K-block's scale.
__device__ __forceinline__ void e2m1_word_pairs(uint32_t w, uint32_t* p) {
  p[0] = e2m1_pair_bf16<0>(w); p[1] = e2m1_pair_bf16<1>(w); p[2] = e2m1_pair_bf16<2>(w); p[3] = e2m1_pair_bf16<3>(w);
}

// A decoded E2M1 pair times its K-block's folded scale: an E4M3 scale from e4m3_scale_pair_bf16x2,
// an E8M0 one from e8m0_scale_bf16x2.
template <class F>
__device__ __forceinline__ uint32_t fold_block_scale(uint32_t pair, uint32_t scale) {
  if constexpr (F::kBlockScale == BlockScale::kE4M3) {
    return bf16x2_mul(pair, scale);
  } else {
    static_assert(F::kBlockScale == BlockScale::kE8M0, "E2M1 takes E4M3 or E8M0 block scales");
    return bf16x2_mul(bf16x2_mul(pair, kE2m1Unbias), scale);
  }
}

// A row's chunk of 32 codes as 16 bf16x2 (pair j of word q at 4q + j), folded scales applied.
template <class F>
__device__ __forceinline__ void decode_tile_chunk(const Lane<16>& codes, uint32_t raw_scales, uint32_t (&p)[16]) {
  if constexpr (F::kElement == Element::kE2M1) {
#pragma unroll
    for (int q = 0; q < 4; ++q) e2m1_word_pairs(codes.w[q], p + 4 * q);
    uint32_t s0, s1;  // NVFP4: words 0-1 are block 0, words 2-3 block 1; MXFP4: one block
    if constexpr (F::kBlockScale == BlockScale::kE4M3) e4m3_scale_pair_bf16x2(raw_scales, s0, s1);
    else s0 = s1 = e8m0_scale_bf16x2(raw_scales & 0xffu);
#pragma unroll
    for (int i = 0; i < 16; ++i) p[i] = fold_block_scale<F>(p[i], i < 8 ? s0 : s1);
  } else {
    static_assert(F::kElement == Element::kInt4, "tensor-core decode takes E2M1 or INT4 codes");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t b = codes.w[q] ^ 0x88888888u;
      p[4 * q] = int4_pair_bf16<0>(b); p[4 * q + 1] = int4_pair_bf16<1>(b);
      p[4 * q + 2] = int4_pair_bf16<2>(b); p[4 * q + 3] = int4_pair_bf16<3>(b);
    }
  }
}

// One step of a tile: d0 + d1 += (rows g, g + 8) x activations over the chunk's 32 codes, as four
// mma pairs (two accumulators halve the chain of dependent mmas). x: the chunk's word 0 in the
// staged activations, `stride` 16-byte units to the next word.
__device__ __forceinline__ void tile_step(float (&d0)[4], float (&d1)[4], const uint32_t (&lo)[16], const uint32_t (&hi)[16],
                                          const uint4* x, int stride) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 b = x[q * stride];
    const uint32_t a0[4] = {lo[4 * q], hi[4 * q], lo[4 * q + 1], hi[4 * q + 1]};
    const uint32_t a1[4] = {lo[4 * q + 2], hi[4 * q + 2], lo[4 * q + 3], hi[4 * q + 3]};
    mma_bf16_16816(d0, a0, b.x, b.y);
    mma_bf16_16816(d1, a1, b.z, b.w);
  }
}

// Row g's and row g + 8's sums of one step.
struct StepSums {
  float lo, hi;
};

// The weights of one step of a tile: chunk c of rows `lo_row` and `hi_row` (null: a row outside
// the tile's range, or a chunk past the row's end, read as zeros) and their K-block scales.
template <class F>
struct TileStep {
  Lane<16> lo, hi;
  uint32_t lo_scales, hi_scales;

  __device__ __forceinline__ void load(const char* lo_row, const char* hi_row, const unsigned char* lo_block_scales,
                                       const unsigned char* hi_block_scales, int c) {
    lo = lo_row ? load_weights<16>(lo_row + c * 16) : zero_lane<16>();
    hi = hi_row ? load_weights<16>(hi_row + c * 16) : zero_lane<16>();
    lo_scales = lo_row ? load_tile_scales<F>(lo_block_scales, c) : 0u;
    hi_scales = hi_row ? load_tile_scales<F>(hi_block_scales, c) : 0u;
  }

  __device__ __forceinline__ StepSums reduce(const uint4* x, int stride) const {
    uint32_t a_lo[16], a_hi[16];
    decode_tile_chunk<F>(lo, lo_scales, a_lo);
    decode_tile_chunk<F>(hi, hi_scales, a_hi);
    float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    tile_step(d0, d1, a_lo, a_hi, x, stride);
    StepSums s{d0[0] + d1[0], d0[2] + d1[2]};
    if constexpr (TileDecode<F>::kStepScale) {
      s.lo *= __uint_as_float(lo_scales);
      s.hi *= __uint_as_float(hi_scales);
    }
    return s;
  }
};

// Adds the 16 row sums of the S warps sharing a tile (lane 4g holds rows g and g + 8) in warp
// order; `partial` is [W][16] floats of shared memory. Every thread of the block must call it.
// Returns true in the tile's first warp, whose lanes then hold the totals.
template <int S>
__device__ __forceinline__ bool combine_tile_warps(float& lo, float& hi, float* partial) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if ((lane & 3) == 0) {
    partial[warp * 16 + lane / 4] = lo;
    partial[warp * 16 + 8 + lane / 4] = hi;
  }
  __syncthreads();
  if (warp % S != 0) return false;
  lo = 0.0f;
  hi = 0.0f;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    lo += partial[(warp + s) * 16 + lane / 4];
    hi += partial[(warp + s) * 16 + 8 + lane / 4];
  }
  return true;
}

// A gate_up tile's rows for one lane group: expert e's gate row gate_n and up row up_n (codes and
// K-block scales); load() fills one step with chunk c of both, zeros where the lane has no row.
template <class F, int H, int I>
struct GateUpTileRows {
  const char* gate;
  const char* up;
  const unsigned char* gate_scales;
  const unsigned char* up_scales;

  __device__ __forceinline__ GateUpTileRows(const WeightArgs& w, int e, int gate_n, int up_n)
      : gate(row_codes<F, 2 * I, H>(w, e, gate_n)), up(row_codes<F, 2 * I, H>(w, e, up_n)),
        gate_scales(row_block_scales<F, 2 * I, H>(w, e, gate_n)), up_scales(row_block_scales<F, 2 * I, H>(w, e, up_n)) {}

  __device__ __forceinline__ void load(TileStep<F>& step, int c, bool in_row) const {
    step.load(in_row ? gate : nullptr, in_row ? up : nullptr, gate_scales, up_scales, c);
  }
};

// A warp's part of a gate_up tile: the gate (lo) and
// up (hi) sums of lane group g's neuron over every S-th group of U steps from group `part` (U
// steps' loads in flight per lane); x staged in xs.
// `mine`: the lane's neuron is in range (otherwise it reads zeros).
// `zero`: a value that is 0 at run time but unknown to the compiler (e.g. num_tokens >> 31), or
// kNoLoadOrder. With one, every code word of a group is XOR-ed with (the group's scales & zero): no
// decode can then be scheduled before all of the group's scale loads are issued. Under
// mlp_split_down's 80 registers ptxas otherwise decoded the first step before asking for the last
// three scales of an NVFP4 group, a second DRAM round trip per group (bench/NOTES.md, "down split
// along its K inside gate_up's blocks").
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

// gate_up on the tensor cores: a tile is 8 neurons of one (token, routed slot), their gate rows as
// rows 0-7 and their up rows as rows 8-15, so lane 4g holds neuron g's gate and up sums and
// applies the epilogue itself. S warps per tile take every S-th group of U steps. Shared memory:
// the token's staged x, then [W][16] FP32 partial sums (S > 1).
// Grid: x = ceil(I / (8 * W / S)), y = M * k slots. Block: 32 * W threads.
template <class Config, class Epilogue>
__device__ __forceinline__ void gate_up_tensor_core(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up,
                                                    const int* __restrict__ topk_ids,
                                                    __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr GateUpLayout L = Config::kLayout;
  constexpr int W = Config::kWarpsPerCta, U = Config::kUnroll, S = Config::kWarpsPerTile;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  using Row = TileRow<H>;
  static_assert(W % S == 0, "warps_per_tile divides warps_per_cta");
  static_assert(Config::kSharedBytes == 64 * Row::kPadded + (S > 1 ? 4 * 16 * W : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;  // uniform over the block
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<1, H>(x + static_cast<size_t>(slot / K) * H, xs);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S;
  const int neuron0 = (blockIdx.x * (W / S) + warp / S) * 8;
  const int neuron = neuron0 + g;
  const bool active = neuron0 < I;  // uniform over the warp
  if constexpr (S == 1) {
    if (!active) return;
  }
  const int e = active ? __ldg(topk_ids + slot) : -1;
  const bool routed = static_cast<unsigned>(e) < static_cast<unsigned>(E);
  const bool mine = routed && neuron < I;
  const int gate_n = gate_row_of<L>(mine ? neuron : neuron0, I), up_n = up_row_of<L>(mine ? neuron : neuron0, I);
  float gate = 0.0f, up = 0.0f;
  if (routed) {  // uniform over the warp
    const StepSums sums = gate_up_tile_sums<F, H, I, U, S>(GateUpTileRows<F, H, I>(w_gate_up, e, gate_n, up_n), xs, part, t, mine);
    gate = sums.lo;
    up = sums.hi;
  }
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(gate, up, reinterpret_cast<float*>(smem + 64 * Row::kPadded))) return;
  }
  if (t == 0 && mine) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0)) * kUnscale;
    up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1)) * kUnscale;
    const float gate_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, gate_n);
    const float up_bias = load_bias<BIAS, 2 * I>(w_gate_up, e, up_n);
    store_bf16(inter + static_cast<size_t>(slot) * I + neuron, epi(add_bias<BIAS>(gate, gate_bias), add_bias<BIAS>(up, up_bias)));
  }
}

// U consecutive steps s0.. of a down tile's reduction (rows h_lo and h_hi; step s is chunk group
// s % steps-per-row of routed slot s / steps-per-row, whose expert and routing weight lane j holds):
// the codes and K-block scales, each step's routing weight times its rows' factors, and whether the
// step is live (within the tile and routed; uniform over the warp).
template <class F, int H, int I, int E, int K, int U>
struct DownTileGroup {
  TileStep<F> step[U];
  float w_lo[U], w_hi[U];
  bool live[U];

  __device__ __forceinline__ void load(const WeightArgs& w_down, int s0, int lane_expert, float routing_weight, int h_lo, int h_hi,
                                       int t) {
    using Row = TileRow<I>;
    constexpr int kSteps = K * Row::kSteps;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int s = s0 + i;
      const int j = min_int(s / Row::kSteps, K - 1);
      const int c = (s - j * Row::kSteps) * 4 + t;
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      const float weight = __shfl_sync(kFullMask, routing_weight, j);
      live[i] = s < kSteps && static_cast<unsigned>(e) < static_cast<unsigned>(E);  // uniform over the warp
      const bool in_lo = live[i] && h_lo < H && c < Row::kChunks, in_hi = live[i] && h_hi < H && c < Row::kChunks;
      const int e_safe = live[i] ? e : 0;
      step[i].load(in_lo ? row_codes<F, H, I>(w_down, e_safe, h_lo) : nullptr,
                   in_hi ? row_codes<F, H, I>(w_down, e_safe, h_hi) : nullptr,
                   row_block_scales<F, H, I>(w_down, e_safe, in_lo ? h_lo : 0),
                   row_block_scales<F, H, I>(w_down, e_safe, in_hi ? h_hi : 0), c);
      w_lo[i] = in_lo ? apply_factor<F>(weight, row_factor<F, H, 1>(w_down, e_safe, h_lo, 0)) : 0.0f;
      w_hi[i] = in_hi ? apply_factor<F>(weight, row_factor<F, H, 1>(w_down, e_safe, h_hi, 0)) : 0.0f;
    }
  }

  // lo, hi += the live steps' weighted sums; xs: the token's k staged rows of inter.
  __device__ __forceinline__ void reduce(float& lo, float& hi, const uint4* xs, int s0, int t) const {
    using Row = TileRow<I>;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (live[i]) {  // an unrouted slot's staged rows are unspecified (maybe NaN): never multiplied
        const int s = s0 + i, j = s / Row::kSteps;
        const StepSums sums = step[i].reduce(xs + j * Row::kPadded + (s - j * Row::kSteps) * 4 + t, K * Row::kPadded);
        lo = fmaf(w_lo[i], sums.lo, lo);
        hi = fmaf(w_hi[i], sums.hi, hi);
      }
    }
  }
};

// down on the tensor cores: a tile is 16 hidden outputs of one token; its reduction runs over the
// k routed slots' rows, I / 128 steps per slot, and each step's sums are weighted by the slot's
// routing weight (times its row factor) in FP32. S warps per tile take every S-th group of U steps.
// Shared memory: the token's k staged rows of inter, then [W][16] FP32 partial sums (S > 1).
// Grid: x = ceil(H / (16 * W / S)), y = M. Block: 32 * W threads.
template <class Config, class Epilogue>
__device__ __forceinline__ void down_tensor_core(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down,
                                                 const int* __restrict__ topk_ids,
                                                 const float* __restrict__ topk_weights,
                                                 __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr int W = Config::kWarpsPerCta, U = Config::kUnroll, S = Config::kWarpsPerTile;
  constexpr bool BIAS = Config::kBias;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  using Row = TileRow<I>;
  static_assert(K <= 32, "one lane per routed slot");
  static_assert(W % S == 0, "warps_per_tile divides warps_per_cta");
  constexpr int kSteps = K * Row::kSteps;
  static_assert(Config::kSharedBytes == 64 * K * Row::kPadded + (S > 1 ? 4 * 16 * W : 0), "the schedule's Layout (Java) and this body disagree on shared memory");
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;  // uniform over the block
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S;
  const int h0 = (blockIdx.x * (W / S) + warp / S) * 16;
  const bool active = h0 < H;  // uniform over the warp
  if constexpr (S == 1) {
    if (!active) return;
  }
  const int lane_expert = lane < K && active ? __ldg(topk_ids + token * K + lane) : -1;
  const bool lane_routed = static_cast<unsigned>(lane_expert) < static_cast<unsigned>(E);
  const float routing_weight = lane_routed ? __ldg(topk_weights + token * K + lane) : 0.0f;
  const int h_lo = h0 + g, h_hi = h0 + g + 8;
  float lo = 0.0f, hi = 0.0f;
  // Two groups in turn: the warp's next group is asked for before the current one is reduced, so
  // its loads are in flight during the decode, which made down faster at M=1 (bench/NOTES.md, "When
  // the 4-bit kernels ask for their weights" and "A ring for down"). The sums are added in the same
  // order.
  DownTileGroup<F, H, I, E, K, U> a, b;
  int s = part * U;
  if (s < kSteps) a.load(w_down, s, lane_expert, routing_weight, h_lo, h_hi, t);
#pragma unroll 1
  while (s < kSteps) {  // uniform over the warp
    const int next = s + S * U;
    if (next < kSteps) b.load(w_down, next, lane_expert, routing_weight, h_lo, h_hi, t);
    a.reduce(lo, hi, xs, s, t);
    if (next >= kSteps) break;
    s = next + S * U;
    if (s < kSteps) a.load(w_down, s, lane_expert, routing_weight, h_lo, h_hi, t);
    b.reduce(lo, hi, xs, next, t);
  }
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem + 64 * K * Row::kPadded))) return;
  }
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  lo *= kUnscale;
  hi *= kUnscale;
  if constexpr (BIAS) {  // slot j's w_j * b[e_j][h], once per output: in the tile's first warp, after the combine
#pragma unroll 1
    for (int j = 0; j < K; ++j) {
      const int e = __shfl_sync(kFullMask, lane_expert, j);
      const float weight = __shfl_sync(kFullMask, routing_weight, j);
      if (static_cast<unsigned>(e) < static_cast<unsigned>(E) && t == 0) {
        if (h_lo < H) lo = fmaf(weight, load_bias<BIAS, H>(w_down, e, h_lo), lo);
        if (h_hi < H) hi = fmaf(weight, load_bias<BIAS, H>(w_down, e, h_hi), hi);
      }
    }
  }
  if (t == 0 && active) {
    if (h_lo < H) store_bf16(y + static_cast<size_t>(token) * H + h_lo, epi(lo));
    if (h_hi < H) store_bf16(y + static_cast<size_t>(token) * H + h_hi, epi(hi));
  }
}

// ---------------------------------------------------------------------------------------------
// The whole expert MLP in one kernel (schedule split_down). A block takes one (token, routed slot)
// and 16 neurons: gate_up's tile loop gives their h, rounded to bf16 as a stored inter would be;
// then the same warps multiply the 16 h into down's 16 matching columns, for all H rows, and add
// the products times the routing weight into the token's FP32 y, 16 bytes per atomic add. No block
// waits for another, so the layer is one kernel with gate_up's warps per SM; at M=1 it is faster
// than each 4-bit format's pair of kernels (bench/NOTES.md, "down split along its K inside gate_up's
// blocks").
// The order of the adds varies from launch to launch, and with it y's last bits.
//
// Down's layout (SplitDownWeights, repacked once on load): columns [16j, 16j + 16) of expert e's H
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
        if constexpr (F::kBlockScale == BlockScale::kE4M3) {
          e4m3_scale_pair_bf16x2(pair, s_lo, s_hi);
        } else {
          static_assert(F::kBlockScale == BlockScale::kE8M0, "E2M1 takes E4M3 or E8M0 block scales");
          s_lo = e8m0_scale_bf16x2(pair & 0xffu);
          s_hi = e8m0_scale_bf16x2(pair >> 8);
#pragma unroll
          for (int j = 0; j < 4; ++j) a[j] = bf16x2_mul(a[j], kE2m1Unbias);
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

// Sets this block's share of `count` floats (a multiple of 8) to zero with 16-byte stores: the
// buffer a later launch adds into.
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
template <class Config, class Epilogue>
__device__ __forceinline__ void mlp_split_down(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, WeightArgs w_down,
                                               const int* __restrict__ topk_ids, const float* __restrict__ topk_weights,
                                               float* __restrict__ y, float* __restrict__ y_zero, int num_tokens, Epilogue epi) {
  using F = typename Config::Format;
  constexpr int H = Config::kHidden, I = Config::kIntermediate, E = Config::kExperts, K = Config::kTopk;
  constexpr GateUpLayout L = Config::kLayout;
  constexpr int W = Config::kWarpsPerCta, U = Config::kUnroll, S = Config::kWarpsPerTile;
  constexpr bool ORDER = Config::kOrderLoads;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  using Row = TileRow<H>;
  using D = SplitDownLayout<F, H, I>;
  static_assert(W % S == 0 && W / S == 2, "a block is two tiles of 8 neurons: one 16-column tile of down");
  constexpr int kQuadsPerWarp = ceil_div(D::kQuads, W);
  static_assert(Config::kSharedBytes == 64 * Row::kPadded + (S > 1 ? W * 64 : 0) + 2 * 16, "the schedule's Layout (Java) and this body disagree on shared memory");
  extern __shared__ __align__(16) unsigned char smem[];
  zero_share(y_zero, num_tokens * H);  // an int: LaunchGeometry.maxTokens keeps M * H under 2^31
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
  // down's loads after gate_up's: issued earlier they return first and delay gate_up's
  // (bench/NOTES.md, "down split along its K inside gate_up's blocks")
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

// ---------------------------------------------------------------------------------------------
// Input rows. A decode kernel reads its activation rows as given (x), or makes them itself from
// the residual stream (a problem's input_norm): for token m, v = residual[m] + addend[m] in FP32
// and the row bf16(weight * v / sqrt(mean(v^2) + eps)), into shared memory. Every block that reads
// the token computes the same row (the same sums in the same order); the one block that stores
// for the token also writes v to residual_out and the row to normed_out, for the kernels after it.
// That saves the separate add-and-norm launch and its place in the chain of dependent kernels.
// ---------------------------------------------------------------------------------------------
template <class Addend>
struct AddRmsNormRows {
  const float* residual;
  const Addend* addend;
  const float* weight;
  float* residual_out;
  __nv_bfloat16* normed_out;
};

// Whether a block's rows live in its shared memory (made by an input norm) rather than in global memory.
template <class Rows>
struct RowsInShared {
  static constexpr bool value = false;
};
template <class Addend>
struct RowsInShared<AddRmsNormRows<Addend>> {
  static constexpr bool value = true;
};

__device__ __forceinline__ float4 load_addend4(const float* p) { return __ldca(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 load_addend4(const __nv_bfloat16* p) {
  const uint2 q = __ldca(reinterpret_cast<const uint2*>(p));
  return make_float4(bf16_lo(q.x), bf16_hi(q.x), bf16_lo(q.y), bf16_hi(q.y));
}

// Rows [token0, token0 + tokens) of x as given: the global rows, read after the kernel's wait.
template <int K, int T, int THREADS>
__device__ __forceinline__ const char* input_rows(const __nv_bfloat16* __restrict__ x, int token0, int, bool, float) {
  return reinterpret_cast<const char*>(x + static_cast<size_t>(token0) * K);
}

// Rows [token0, token0 + tokens) made by the input norm into shared memory (at most T), by every
// thread of the block: the norm's weights are read before the wait for the previous kernel (a
// constant of the step), the residual and addend after it (`stores`: this block also writes the
// tokens' residual_out and normed_out). Tokens go kTogether at a time (as many as keep a thread's
// sums within 8 float4, beside the weights the kernel holds in flight), their loads all in flight
// and their sums of squares added in one pass of the block, so a group pays a round trip and a
// barrier per kTogether tokens, not per token. Returns the rows, K bf16 each, after a block barrier.
template <int K, int T, int THREADS, class Addend>
__device__ __forceinline__ const char* input_rows(const AddRmsNormRows<Addend>& in, int token0, int tokens, bool stores,
                                                  float eps) {
  static_assert(K % 4 == 0, "the norm reads and writes its rows four elements at a time");
  constexpr int kGroups = K / 4;
  constexpr int kPer = ceil_div(kGroups, THREADS);
  constexpr int kWarps = THREADS / 32;
  constexpr int kTogether = kPer >= 8 ? 1 : (8 / kPer < T ? 8 / kPer : T);
  __shared__ __align__(16) __nv_bfloat16 rows[T * K];
  __shared__ float scratch[kTogether][kWarps];
  float4 w[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int g = threadIdx.x + j * THREADS;
    w[j] = g < kGroups ? *reinterpret_cast<const float4*>(in.weight + 4 * g) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  wait_for_previous_kernel();
  for (int t0 = 0; t0 < tokens; t0 += kTogether) {  // uniform over the block
    float4 v[kTogether][kPer];
    float squares[kTogether];
#pragma unroll
    for (int u = 0; u < kTogether; ++u) {
      const size_t base = static_cast<size_t>(token0 + t0 + u) * K;
      squares[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int g = threadIdx.x + j * THREADS;
        v[u][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t0 + u < tokens && g < kGroups) {
          const float4 r = __ldca(reinterpret_cast<const float4*>(in.residual + base + 4 * g));
          const float4 a = load_addend4(in.addend + base + 4 * g);
          v[u][j] = make_float4(r.x + a.x, r.y + a.y, r.z + a.z, r.w + a.w);
        }
        squares[u] += v[u][j].x * v[u][j].x + v[u][j].y * v[u][j].y + v[u][j].z * v[u][j].z + v[u][j].w * v[u][j].w;
      }
    }
    // the block's sums, the same bits in every thread: warp butterflies, then the warps in warp order
#pragma unroll
    for (int u = 0; u < kTogether; ++u) {
      const float total = warp_sum(squares[u]);
      if ((threadIdx.x & 31) == 0) scratch[u][threadIdx.x >> 5] = total;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kTogether; ++u) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < kWarps; ++i) total += scratch[u][i];
      squares[u] = rsqrtf(total / K + eps);  // now the token's scale
    }
    __syncthreads();  // scratch is free again
#pragma unroll
    for (int u = 0; u < kTogether; ++u) {
      if (t0 + u >= tokens) continue;
      const size_t base = static_cast<size_t>(token0 + t0 + u) * K;
      const float scale = squares[u];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int g = threadIdx.x + j * THREADS;
        if (g < kGroups) {
          const float4 x = v[u][j];
          const __nv_bfloat162 lo = __floats2bfloat162_rn(w[j].x * (x.x * scale), w[j].y * (x.y * scale));
          const __nv_bfloat162 hi = __floats2bfloat162_rn(w[j].z * (x.z * scale), w[j].w * (x.w * scale));
          uint2 packed;
          packed.x = *reinterpret_cast<const uint32_t*>(&lo);
          packed.y = *reinterpret_cast<const uint32_t*>(&hi);
          *reinterpret_cast<uint2*>(rows + (t0 + u) * K + 4 * g) = packed;
          if (stores) {
            *reinterpret_cast<float4*>(in.residual_out + base + 4 * g) = x;
            *reinterpret_cast<uint2*>(in.normed_out + base + 4 * g) = packed;
          }
        }
      }
    }
  }
  __syncthreads();
  return reinterpret_cast<const char*>(rows);
}

// A lane's BYTES of an input row: from shared memory where the kernel made its rows, else from
// global memory (after the wait: see load_activation_word).
template <int BYTES, bool kShared, bool kAfterLateWait>
__device__ __forceinline__ Lane<BYTES> load_input_lane(const char* p) {
  if constexpr (kShared) {
    Lane<BYTES> v;
#pragma unroll
    for (int i = 0; i < Lane<BYTES>::kWords; ++i) v.w[i] = reinterpret_cast<const uint32_t*>(p)[i];
    return v;
  } else {
    return load_activations<BYTES, kAfterLateWait>(p);
  }
}

// One step of a warp's weight row: lane loads c0 + 32 i + lane (i < U) of the row's load chunks
// [.., end), zero past the end.
template <int LB, int U>
__device__ __forceinline__ void load_weight_step(const char* w_row, int c0, int end, Lane<LB> (&wv)[U]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < U; ++i) {
    const int c = c0 + i * 32 + lane;
    wv[i] = c < end ? load_weights<LB>(w_row + c * LB) : zero_lane<LB>();
  }
}

// The first row and span of load chunks a warp takes where a block's rows [first, last) (at most
// N) go one warp per row, or SPLIT warps per row over contiguous spans of whole 32-load steps (as
// block_scores and linear_gemv split them); valid is false for a warp without one.
struct WarpSpan {
  int row, begin, end;
  bool valid;
};
template <int kChunks, int N, int SPLIT>
__device__ __forceinline__ WarpSpan first_warp_span(int first, int last) {
  const int warp = threadIdx.x >> 5;
  if constexpr (SPLIT == 1) {
    return WarpSpan{first + warp, 0, kChunks, first + warp < last};
  } else {
    constexpr int kSpan = ceil_div(ceil_div(kChunks, SPLIT), 32) * 32;
    const int row = first + warp / SPLIT;
    const int begin = (warp % SPLIT) * kSpan;
    return WarpSpan{row, begin, min_int(kChunks, begin + kSpan), warp / SPLIT < N && row < last && begin < kChunks};
  }
}

// ---------------------------------------------------------------------------------------------
// Router (schedule router_gemv). Phase 1, every block: the scores of its slice of experts for one
// token, one warp per expert or SPLIT warps per expert (W_r[e] . x[m], fp32; see block_scores),
// published to the scores workspace. Phase 2, the token's tail block (router_scores): its warps
// await the token's scores as they land and evaluate the epilogue tree in registers.
// ---------------------------------------------------------------------------------------------

// A warp's part of an expert's score: W_r[e] . x[m] over the load chunks [begin, end) of the row
// (16-byte loads, U in flight per lane), butterfly-summed in fp32. Each step issues its U weight
// loads (DRAM) before its U activation loads (L2, shared by every block); with kWaitAfterWeights
// the kernel has not yet waited for the previous one, and does so between the two. With the loads held to
// a few registers the interleaved order made DeepSeek-V3's scores slower; with all of them in
// flight (the routers' launch bounds) both orders measure the same (bench/NOTES.md, "The grouped
// tail").
template <int LB, int U, bool kWaitAfterWeights, bool kSharedRows>
__device__ __forceinline__ float router_score_span(const __nv_bfloat16* __restrict__ w_row, const char* x_row,
                                                   int begin, int end, const Lane<LB> (&preloaded)[U], bool use_preloaded) {
  constexpr int kStep = 32 * U;
  const int lane = threadIdx.x & 31;
  const char* row = reinterpret_cast<const char*>(w_row);
  float acc = 0.0f;
#pragma unroll 1
  for (int c0 = begin; c0 < end; c0 += kStep) {
    Lane<LB> wv[U], av[U];
    if (use_preloaded && c0 == begin) {
#pragma unroll
      for (int i = 0; i < U; ++i) wv[i] = preloaded[i];
    } else {
      load_weight_step<LB, U>(row, c0, end, wv);
    }
    if constexpr (kWaitAfterWeights) wait_for_previous_kernel();  // returns at once after the first time
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = c0 + i * 32 + lane;
      av[i] = c < end ? load_input_lane<LB, kSharedRows, kWaitAfterWeights>(x_row + c * LB) : zero_lane<LB>();
    }
#pragma unroll
    for (int i = 0; i < U; ++i) acc = dot_bf16<LB>(wv[i], av[i], acc);
  }
  return warp_sum(acc);
}

// The scores of the block's experts [first, last) (at most N of them) by its W warps; store(e, v)
// takes each. With SPLIT > 1 (the generator's choice, LaunchGeometry.routerWarpsPerScore) each
// expert's row is split over SPLIT warps (contiguous spans of whole 32-load steps), so a row takes
// fewer dependent load rounds; the parts meet in shared memory and are added in warp order
// (deterministic). Every thread of the block must call it. With kWaitAfterWeights each warp waits
// for the previous kernel after its first weight loads (a warp without a row never reads an input).
template <int H, int N, int W, int LB, int U, int SPLIT, bool kWaitAfterWeights, bool kSharedRows, class Store>
__device__ __forceinline__ void block_scores(const __nv_bfloat16* __restrict__ w_router, const char* x_row, int first,
                                             int last, Store store, const Lane<LB> (&preloaded)[U], bool use_preloaded) {
  constexpr int kChunks = H / (LB / 2);
  constexpr int kSplit = SPLIT;
  static_assert(kSplit >= 1 && (kSplit == 1 || kSplit * N <= W), "a split needs SPLIT warps for each of the N experts");
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if constexpr (kSplit == 1) {
    for (int e = first + warp; e < last; e += W) {
      const float score = router_score_span<LB, U, kWaitAfterWeights, kSharedRows>(w_router + static_cast<size_t>(e) * H, x_row, 0,
                                                                                  kChunks, preloaded, use_preloaded);
      use_preloaded = false;
      if (lane == 0) store(e, score);
    }
  } else {
    __shared__ float parts[W];
    const WarpSpan span = first_warp_span<kChunks, N, kSplit>(first, last);
    const float v = span.valid
        ? router_score_span<LB, U, kWaitAfterWeights, kSharedRows>(w_router + static_cast<size_t>(span.row) * H, x_row, span.begin,
                                                                   span.end, preloaded, use_preloaded)
        : 0.0f;
    if (lane == 0) parts[warp] = v;
    __syncthreads();
    if (warp / kSplit < N && span.row < last && warp % kSplit == 0 && lane == 0) {
      float total = 0.0f;
#pragma unroll
      for (int p = 0; p < kSplit; ++p) total += parts[warp + p];
      store(span.row, total);
    }
  }
}

// Rows [token0, token0 + tokens) of K inputs for a block whose warps take the rows [first, last)
// of `weights` (K bf16 each, at most N, SPLIT warps a row) as first_warp_span assigns them: x as
// given, or where an input norm makes them, each warp's first weight step issued into `preloaded`
// before the norm waits for the previous kernel (use_preloaded says whether it was), and `stores`
// the block that writes the tokens' residual_out and normed_out. Linear and router blocks alike.
template <class Config, int K, int T, int N, int SPLIT, class Rows>
__device__ __forceinline__ const char* rows_after_first_weights(const Rows& rows, int token0, int tokens, bool stores,
                                                                const char* weights, int first, int last,
                                                                Lane<Config::kLoadBytes> (&preloaded)[Config::kUnroll],
                                                                bool& use_preloaded) {
  constexpr int LB = Config::kLoadBytes, U = Config::kUnroll;
  use_preloaded = false;
  if constexpr (RowsInShared<Rows>::value) {
    const WarpSpan span = first_warp_span<K / (LB / 2), N, SPLIT>(first, last);
    if (span.valid) {
      load_weight_step<LB, U>(weights + static_cast<size_t>(span.row) * K * 2, span.begin, span.end, preloaded);
      use_preloaded = true;
    }
    return input_rows<K, T, Config::kThreadsPerCta>(rows, token0, tokens, stores, Config::kNormEps);
  } else {
    return input_rows<K, T, Config::kThreadsPerCta>(rows, token0, tokens, stores, 0.0f);
  }
}

// ---------------------------------------------------------------------------------------------
// Linear projection (schedule linear_gemv): block b computes outputs [slice * N, slice * N + N)
// of token group b % groups (slice b / groups, so a slice's groups run side by side and share its
// weights in L2), one warp (or SPLIT warps) per output row. A warp streams its row once and
// multiplies each weight load by the T tokens of its group; lane t adds the bias to token t's sum,
// applies the epilogue and stores. The kernel waits for the previous one only after its first weight loads
// are in flight: the weights are constants of the step, the activations are its input.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void store_output(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_output(float* p, float v) { *p = v; }

// A warp's sums of one weight row against the group's `tokens` activation rows (x_rows, each K
// elements apart) over the load chunks [begin, end), butterfly-summed in fp32 into acc[0..T). Each
// step's weight loads are issued before the wait for the previous kernel (a no-op after the first);
// with use_preloaded the first step's are `preloaded` (issued before an input norm waited).
template <int K, int LB, int U, int T, bool kSharedRows>
__device__ __forceinline__ void linear_row_span(const char* w_row, const char* x_rows, int tokens, int begin, int end,
                                                float (&acc)[T], const Lane<LB> (&preloaded)[U], bool use_preloaded) {
  constexpr int kStep = 32 * U;
  constexpr size_t kRowBytes = static_cast<size_t>(K) * 2;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
#pragma unroll 1
  for (int c0 = begin; c0 < end; c0 += kStep) {
    Lane<LB> wv[U];
    if (use_preloaded && c0 == begin) {
#pragma unroll
      for (int i = 0; i < U; ++i) wv[i] = preloaded[i];
    } else {
      load_weight_step<LB, U>(w_row, c0, end, wv);
    }
    wait_for_previous_kernel();
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t < tokens) {
        const char* x_row = x_rows + t * kRowBytes;
        Lane<LB> av[U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
          const int c = c0 + i * 32 + lane;
          av[i] = c < end ? load_input_lane<LB, kSharedRows, true>(x_row + c * LB) : zero_lane<LB>();
        }
#pragma unroll
        for (int i = 0; i < U; ++i) acc[t] = dot_bf16<LB>(wv[i], av[i], acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = warp_sum(acc[t]);
}

template <class Config, class Rows, class Out, class Epilogue>
__device__ __forceinline__ void linear_gemv(const Rows& x, const WeightArgs w, Out* __restrict__ y, int num_tokens, Epilogue epi) {
  constexpr int K = Config::kInputs, N = Config::kOutputs, W = Config::kWarpsPerCta, LB = Config::kLoadBytes;
  constexpr int U = Config::kUnroll, NPC = Config::kOutputsPerCta, SPLIT = Config::kWarpsPerOutput;
  constexpr int T = Config::kTokensPerCta;
  constexpr int kChunks = K / (LB / 2);
  constexpr bool kShared = RowsInShared<Rows>::value;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(SPLIT >= 1 && (SPLIT == 1 || SPLIT * NPC <= W), "a split needs SPLIT warps for each of the NPC outputs");
  const int groups = ceil_div(num_tokens, T);
  const int slice = static_cast<int>(blockIdx.x) / groups;
  const int group = static_cast<int>(blockIdx.x) - slice * groups;
  const int first = slice * NPC;
  const int last = min_int(N, first + NPC);
  const int token0 = group * T;
  const int tokens = min_int(T, num_tokens - token0);
  const char* codes = static_cast<const char*>(w.codes);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // with rows made by an input norm, the group's first slice stores the group's residual_out and normed_out
  Lane<LB> preloaded[U];
  bool use_preloaded;
  const char* x_rows = rows_after_first_weights<Config, K, T, NPC, SPLIT>(x, token0, tokens, slice == 0, codes, first, last,
                                                                          preloaded, use_preloaded);
  float acc[T];
  // Lane t stores token t's output (every lane holds every sum after the butterfly).
  auto store = [&](int n, const float (&sums)[T]) {
    float sum = sums[0];
#pragma unroll
    for (int t = 1; t < T; ++t) sum = lane == t ? sums[t] : sum;
    if (lane < tokens) store_output(y + static_cast<size_t>(token0 + lane) * N + n, epi(sum + load_bias<Config::kBias, N>(w, 0, n)));
  };
  if constexpr (SPLIT == 1) {
    for (int n = first + warp; n < last; n += W) {
      linear_row_span<K, LB, U, T, kShared>(codes + static_cast<size_t>(n) * K * 2, x_rows, tokens, 0, kChunks, acc, preloaded,
                                            use_preloaded);
      use_preloaded = false;
      store(n, acc);
    }
  } else {
    __shared__ float parts[W][T];
    const WarpSpan span = first_warp_span<kChunks, NPC, SPLIT>(first, last);
    if (span.valid) {
      linear_row_span<K, LB, U, T, kShared>(codes + static_cast<size_t>(span.row) * K * 2, x_rows, tokens, span.begin, span.end, acc,
                                            preloaded, use_preloaded);
    } else {
#pragma unroll
      for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    }
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < T; ++t) parts[warp][t] = acc[t];
    }
    __syncthreads();
    if (warp / SPLIT < NPC && span.row < last && warp % SPLIT == 0) {
      float sums[T];
#pragma unroll
      for (int t = 0; t < T; ++t) {
        sums[t] = 0.0f;
#pragma unroll
        for (int p = 0; p < SPLIT; ++p) sums[t] += parts[warp + p][t];
      }
      store(span.row, sums);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Linear projection on the tensor cores (schedule linear_mma): block b computes outputs
// [slice * NPC, slice * NPC + NPC) for the T tokens of group b % groups. The weight rows are the
// M side of mma.sync m16n8k16 and the tokens its N side. In a 32-input step lane (g, t) loads 16
// bytes of rows g and g + 8 of each row tile (inputs 8t .. 8t + 7 of the step) and 16 bytes of
// token g's activations at the same inputs: the first MMA takes words 0-1 of each, the second words
// 2-3, so A's and B's k orders agree and the sums are those of the plain product. Warp w takes
// steps w, w + W, ...; its U steps of weight loads are issued before their activations are read
// (the first before the wait for the previous kernel), and the warps' sums meet in shared memory,
// added in warp order, before the bias, the epilogue and a row-contiguous store.
// ---------------------------------------------------------------------------------------------
template <class Config, class Out, class Epilogue>
__device__ __forceinline__ void linear_mma(const __nv_bfloat16* __restrict__ x, const WeightArgs w, Out* __restrict__ y,
                                           int num_tokens, Epilogue epi) {
  constexpr int K = Config::kInputs, N = Config::kOutputs, W = Config::kWarpsPerCta, U = Config::kUnroll;
  constexpr int NPC = Config::kOutputsPerCta, T = Config::kTokensPerCta;
  constexpr int R = NPC / 16, NT = T / 8;
  constexpr int kSteps = ceil_div(K, 32);
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(K % 8 == 0 && NPC % 16 == 0 && T % 8 == 0, "rows of whole 16-byte loads, tiles of 16 rows and 8 tokens");
  __shared__ float parts[W][T][NPC];
  const int groups = ceil_div(num_tokens, T);
  const int slice = static_cast<int>(blockIdx.x) / groups;
  const int group = static_cast<int>(blockIdx.x) - slice * groups;
  const int row0 = slice * NPC;
  const int token0 = group * T;
  const int tokens = min_int(T, num_tokens - token0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const char* codes = static_cast<const char*>(w.codes);
  // rows g and g + 8 of each row tile, the last row standing in for those past N (loaded, never stored)
  const char* rows[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) rows[r][h] = codes + static_cast<size_t>(min_int(N - 1, row0 + 16 * r + 8 * h + g)) * K * 2;
  }
  const __nv_bfloat16* x_rows[NT];
  bool token_in[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    token_in[j] = 8 * j + g < tokens;
    x_rows[j] = x + static_cast<size_t>(token0 + min_int(tokens - 1, 8 * j + g)) * K;
  }
  float acc[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][j][i] = 0.0f;
    }
  }
#pragma unroll 1
  for (int s0 = warp; s0 < kSteps; s0 += W * U) {
    Lane<16> wv[U][R][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (s0 + u * W) * 32 + 8 * t;
      const bool in = k < K;
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][r][h] = in ? load_weights<16>(rows[r][h] + k * 2) : zero_lane<16>();
      }
    }
    wait_for_previous_kernel();  // returns at once after the first time
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (s0 + u * W) * 32 + 8 * t;
      const bool in = k < K;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const Lane<16> xv = in && token_in[j] ? load_activations<16, true>(x_rows[j] + k) : zero_lane<16>();
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t a0[4] = {wv[u][r][0].w[0], wv[u][r][1].w[0], wv[u][r][0].w[1], wv[u][r][1].w[1]};
          const uint32_t a1[4] = {wv[u][r][0].w[2], wv[u][r][1].w[2], wv[u][r][0].w[3], wv[u][r][1].w[3]};
          mma_bf16_16816(acc[r][j], a0, xv.w[0], xv.w[1]);
          mma_bf16_16816(acc[r][j], a1, xv.w[2], xv.w[3]);
        }
      }
    }
  }
  wait_for_previous_kernel();  // a warp without a step still must not store before the previous kernel is done
  // d[0], d[1]: row g, tokens 2t and 2t + 1 of the tile; d[2], d[3]: row g + 8
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) parts[warp][8 * j + 2 * t + (i & 1)][16 * r + g + 8 * (i >> 1)] = acc[r][j][i];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < T * NPC; i += blockDim.x) {
    const int token = i / NPC, row = i - token * NPC, n = row0 + row;
    if (token < tokens && n < N) {
      float sum = 0.0f;
#pragma unroll
      for (int p = 0; p < W; ++p) sum += parts[p][token][row];
      store_output(y + static_cast<size_t>(token0 + token) * N + n, epi(sum + load_bias<Config::kBias, N>(w, 0, n)));
    }
  }
}

// The scores workspace, published in place of an end ticket: each score is stored as the
// complement of its bits (a NaN canonicalised first), so a stored word is never 0 and 0 means
// "not yet". The workspace starts at zero and the token's tail block clears what it read, so the
// next launch (ordered after this one, also under PDL) finds it zero again.
__device__ __forceinline__ void publish_score(float* p, float v) {
  const unsigned u = isnan(v) ? 0x7fffffffu : __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(~u) : "memory");
}

// Returns true in the token's tail block (every thread of it): the block that took the token's
// last *start* ticket, so every other block of the token has begun and none of them waits on it
// (no co-residency assumed). Thread 0 takes the ticket before the block's weight loads and reads
// it after them, so its round trip hides under the loads; the tail block resets it for the next
// launch. The tail then awaits the scores (await_scores) instead of taking an end ticket and
// reloading them, which made the decode routers faster (bench/NOTES.md, "The grouped tail").
template <class Config, class Rows>
__device__ __forceinline__ bool router_scores(const Rows& x, const __nv_bfloat16* __restrict__ w_router,
                                              float* __restrict__ scores, int* __restrict__ counters, int num_tokens) {
  constexpr int H = Config::kHidden, E = Config::kExperts, W = Config::kWarpsPerCta, LB = Config::kLoadBytes;
  constexpr int U = Config::kUnroll, EPC = Config::kExpertsPerCta, SPLIT = Config::kWarpsPerScore;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == 0, "the decode router uses static shared memory only");
  const int token = blockIdx.y;
  if (token >= num_tokens) return false;  // uniform over the block
  int ticket = 0;
  if (threadIdx.x == 0) ticket = atomicAdd(counters + token, 1);
  const int first = blockIdx.x * EPC;
  Lane<LB> preloaded[U];
  bool use_preloaded;
  const char* x_row = rows_after_first_weights<Config, H, 1, EPC, SPLIT>(x, token, 1, blockIdx.x == 0,
                                                                         reinterpret_cast<const char*>(w_router), first,
                                                                         min_int(E, first + EPC), preloaded, use_preloaded);
  float* token_scores = scores + static_cast<size_t>(token) * E;
  block_scores<H, EPC, W, LB, U, SPLIT, false, RowsInShared<Rows>::value>(w_router, x_row, first, min_int(E, first + EPC),
                                        [&](int e, float v) { publish_score(token_scores + e, v); }, preloaded, use_preloaded);
  __shared__ int is_tail;
  if (threadIdx.x == 0) {
    is_tail = ticket == static_cast<int>(gridDim.x) - 1;
    if (is_tail) counters[token] = 0;  // every block of the token has taken its ticket
  }
  __syncthreads();
  return is_tail;
}

// The cluster form (schedule router_cluster): the C blocks of a token's cluster each score every
// C-th slice of E / C experts (one warp or SPLIT warps per expert), and store straight into block 0's shared memory
// (distributed shared memory); cluster.sync() orders those stores before block 0 reads them.
// Returns block 0's scores (to every thread of block 0) and nullptr in the other blocks.
template <class Config, class Rows>
__device__ __forceinline__ const float* router_scores_cluster(const Rows& x, const __nv_bfloat16* __restrict__ w_router,
                                                              int num_tokens) {
  constexpr int H = Config::kHidden, E = Config::kExperts, W = Config::kWarpsPerCta, LB = Config::kLoadBytes;
  constexpr int U = Config::kUnroll, C = Config::kClusterSize, SPLIT = Config::kWarpsPerScore;
  static_assert(Config::kThreadsPerCta == 32 * W, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == 0, "the cluster router uses static shared memory only");
  namespace cg = cooperative_groups;
  constexpr int kPerBlock = ceil_div(E, C);
  __shared__ float scores[E];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int token = blockIdx.y;
  if (token >= num_tokens) return nullptr;  // uniform over the cluster: it shares blockIdx.y
  float* first_block = cluster.map_shared_rank(scores, 0);
  const int first = rank * kPerBlock;
  Lane<LB> preloaded[U];
  bool use_preloaded;
  const char* x_row = rows_after_first_weights<Config, H, 1, kPerBlock, SPLIT>(x, token, 1, rank == 0,
                                                                               reinterpret_cast<const char*>(w_router), first,
                                                                               min_int(E, first + kPerBlock), preloaded, use_preloaded);
  // rows made by an input norm are past the wait already; rows as given are read after each warp's first weights
  constexpr bool kShared = RowsInShared<Rows>::value;
  block_scores<H, kPerBlock, W, LB, U, SPLIT, !kShared, kShared>(w_router, x_row, first, min_int(E, first + kPerBlock),
                                       [&](int e, float v) { first_block[e] = v; }, preloaded, use_preloaded);
  cluster.sync();
  return rank == 0 ? scores : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Router (schedule router_tiled): the scores of a tile of BM tokens x every expert on the tensor
// cores. Slices of BK elements of x and W_r stream through an S-stage cp.async pipeline in shared
// memory (16-byte pieces, XOR-swizzled so that ldmatrix's 8 rows hit distinct banks). Warps form
// kWarpRows x kWarpColumns x KG groups: each owns TM tokens x kColumnsPerWarp experts as m16n8k16
// BF16 mmas with FP32 accumulators, over every KG-th k16 step of each slice. Shared memory reads
// bound this loop: a slice's x rows are read once per warp column and its W_r rows once per warp
// row (bench/NOTES.md, "The M=4096 GEMM shapes: shared-memory reads, k groups and a push exchange":
// the ldmatrix reads alone took longer than streaming the slices), so the k groups give the block
// more warps without more reads. The KG partial sums are then added into a score table in shared
// memory (reusing the pipeline) in group order, where warps take whole rows. RouterTileLayout
// (Java) states the same sizes; the generated kernel static_asserts they agree.
// ---------------------------------------------------------------------------------------------

template <class Config>
struct RouterTile {
  static constexpr int H = Config::kHidden, E = Config::kExperts, BM = Config::kTokensPerCta, TM = Config::kTokensPerWarp;
  static constexpr int W = Config::kWarpsPerCta, BK = Config::kKTile, S = Config::kStages, KG = Config::kKGroups;
  static constexpr int C = Config::kClusterSplit;
  static_assert(BM % 16 == 0 && BM >= 16 && BM <= 128, "a tile is a whole number of 16-token mma rows");
  static_assert(TM % 16 == 0 && BM % TM == 0, "a warp owns a whole number of 16-token mma rows of the tile");
  static_assert(BK == 32 || BK == 64, "a slice row is 4 or 8 16-byte pieces");
  static_assert((BK / 16) % KG == 0, "the k groups take equal shares of a slice's k16 steps");
  static constexpr int kWarpRows = BM / TM;
  static_assert(W % (kWarpRows * KG) == 0, "every warp owns TM tokens of the tile in one k group");
  static constexpr int kWarpColumns = W / (kWarpRows * KG);
  static constexpr int kThreads = 32 * W;
  static constexpr int kPaddedExperts = ceil_div(E, 16 * kWarpColumns) * 16 * kWarpColumns;
  static constexpr int kColumnsPerWarp = kPaddedExperts / kWarpColumns;
  static constexpr int kScoreStride = ceil_div(kPaddedExperts, 32) * 32 + 8;  // 8 mod 32: conflict-free float2 stores
  static constexpr int kPieces = BK / 8;  // 16-byte pieces per slice row
  static constexpr int kRows = BM + kPaddedExperts;  // x rows, then W_r rows
  static constexpr int kStageBytes = 2 * kRows * BK;
  static constexpr int kSlices = ceil_div(H, BK);
  // split over a cluster of C blocks along K: block q sums slices [q n, (q + 1) n) (n = kShare; the
  // last share may be short or empty), then owns BM / C rows
  static_assert(C == 1 || C == 2 || C == 4 || C == 8, "a split is a portable cluster of 2, 4 or 8 blocks");
  static_assert(BM % C == 0, "the blocks of a split own equal numbers of rows");
  static constexpr int kShare = ceil_div(kSlices, C);
  static constexpr int kOwnRows = BM / C;
  static constexpr int kScoreBytes = 4 * BM * kScoreStride;
  // With a split, the other blocks' partial sums of this block's own rows arrive past the pipeline
  // (which this block may still be using when the first partials come in): C - 1 slots of kOwnRows rows.
  static constexpr int kInboxOffset = kStageBytes * S > kScoreBytes ? kStageBytes * S : kScoreBytes;
  static constexpr int kSharedBytes = kInboxOffset + 4 * (C - 1) * kOwnRows * kScoreStride;
  static_assert(Config::kThreadsPerCta == kThreads, "the block is the warps the schedule names");
  static_assert(Config::kSharedBytes == kSharedBytes, "the schedule's Layout (Java) and RouterTile disagree on shared memory");
};

// The token of row `row` of the rows a block evaluates (its tile's, or with a split its own part).
template <class Config>
__device__ __forceinline__ int router_tile_token(int row) {
  constexpr int BM = Config::kTokensPerCta, C = Config::kClusterSplit;
  return static_cast<int>(blockIdx.x / C) * BM + static_cast<int>(blockIdx.x % C) * (BM / C) + row;
}

// Byte offset of 16-byte piece p of slice row r: rows of 4 pieces swizzle in pairs, rows of 8 alone,
// so 8 consecutive rows at the same logical piece land in 8 distinct 16-byte bank groups.
template <int P>
__device__ __forceinline__ uint32_t swizzled(int row, int piece) {
  return 16u * static_cast<uint32_t>(row * P + (piece ^ ((row / (8 / P)) % P)));
}

// 16 bytes global -> shared without a register round trip; valid == false writes zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// Copies slice [k0, k0 + BK) of the tile's x rows and of every W_r row into one stage; tokens past
// num_tokens, padded experts and columns past H are zeros.
template <int H, int E, int BM, int BK, class L>
__device__ __forceinline__ void router_tile_load(uint32_t stage, const __nv_bfloat16* __restrict__ x,
                                                 const __nv_bfloat16* __restrict__ w_router, int m0, int num_tokens, int k0) {
  constexpr int P = L::kPieces;
#pragma unroll 4
  for (int i = threadIdx.x; i < L::kRows * P; i += L::kThreads) {
    const int row = i / P;
    const int piece = i % P;
    const int k = k0 + piece * 8;
    const bool in_k = H % BK == 0 || k < H;
    const bool is_x = row < BM;
    const int r = is_x ? m0 + row : row - BM;
    const bool valid = in_k && (is_x ? r < num_tokens : r < E);
    const __nv_bfloat16* src = (is_x ? x : w_router) + (valid ? static_cast<size_t>(r) * H + k : 0);
    cp_async_16(stage + swizzled<P>(row, piece), src, valid);
  }
}

// Every thread of the block: computes the tile's [BM][E] scores and returns them in shared memory,
// row r (token router_tile_token<Config>(r)) at scores + r * kScoreStride. With a split (C > 1, a
// cluster of C consecutive blocks per tile) block q of the cluster sums its share of the slices
// (RouterTile::kShare) into partial scores, sends the other blocks their rows' partials through
// distributed shared memory and adds the C partials of its own BM / C rows in block order
// (deterministic). Each block then streams 1 / C of W_r instead of all of it.
template <class Config>
__device__ __forceinline__ const float* router_tile_scores(const __nv_bfloat16* __restrict__ x,
                                                           const __nv_bfloat16* __restrict__ w_router, unsigned char* smem,
                                                           int num_tokens) {
  using L = RouterTile<Config>;
  constexpr int H = L::H, E = L::E, BM = L::BM, TM = L::TM, W = L::W, BK = L::BK, S = L::S, KG = L::KG, C = L::C;
  constexpr int P = L::kPieces;
  constexpr int MT = TM / 16;                 // m16 tiles per warp
  constexpr int NT = L::kColumnsPerWarp / 8;  // n8 tiles per warp
  constexpr int kGroupWarps = L::kWarpRows * L::kWarpColumns;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int k_group = warp / kGroupWarps;
  const int row0 = (warp % L::kWarpRows) * TM;
  const int col0 = (warp % kGroupWarps / L::kWarpRows) * L::kColumnsPerWarp;
  const int tile = static_cast<int>(blockIdx.x / C);
  const int part = static_cast<int>(blockIdx.x % C);
  const int m0 = tile * BM;
  const int my_first = part * L::kShare;
  // a compile-time count where the blocks' shares are equal (the slice order's modulo is then a constant's)
  const int my_slices = L::kSlices % C == 0 ? L::kShare : max(0, min(L::kSlices, my_first + L::kShare) - my_first);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // A block may write another's shared memory only once that block runs: arrive now, wait (long
  // since satisfied) just before the partials are sent.
  if constexpr (C > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  // Tile t sums its slices in the order t, t + 1, ... (mod the slices): blocks that all read the
  // same W_r slice at once queue on the same L2 lines. The order is fixed per block, so results are too.
  const int first = my_slices > 0 ? tile % my_slices : 0;
  auto slice_k0 = [first, my_first, my_slices](int s) { return (my_first + (first + s) % my_slices) * BK; };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < my_slices) router_tile_load<H, E, BM, BK, L>(base + s * L::kStageBytes, x, w_router, m0, num_tokens, slice_k0(s));
    cp_async_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < my_slices; ++kt) {
    cp_async_wait<S - 2>();
    __syncthreads();  // slice kt is in; every warp is done with slice kt - 1, whose stage is refilled next
    const int next = kt + S - 1;
    if (next < my_slices) {
      router_tile_load<H, E, BM, BK, L>(base + (next % S) * L::kStageBytes, x, w_router, m0, num_tokens, slice_k0(next));
    }
    cp_async_commit();
    const uint32_t stage = base + (kt % S) * L::kStageBytes;
#pragma unroll
    for (int step = 0; step < BK / 16 / KG; ++step) {
      const int kk = step * KG + k_group;
      uint32_t a[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) ldmatrix_x4(a[i], stage + swizzled<P>(row0 + 16 * i + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t b[4];
        const int n = col0 + 16 * j + ((lane >> 4) << 3) + (lane & 7);
        ldmatrix_x4(b, stage + swizzled<P>(BM + n, 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma_bf16_16816(acc[i][2 * j], a[i], b[0], b[1]);
          mma_bf16_16816(acc[i][2 * j + 1], a[i], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the score table
  float* scores = reinterpret_cast<float*>(smem);
  // k group 0 stores its partial sums, then each further group adds its own, in group order
  // (the same sum for the same inputs, launch after launch).
#pragma unroll 1
  for (int g = 0; g < KG; ++g) {
    if (g > 0) __syncthreads();
    if (k_group != g) continue;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int r = row0 + 16 * i + (lane >> 2);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float2* lo = reinterpret_cast<float2*>(scores + r * L::kScoreStride + col0 + 8 * j + 2 * (lane & 3));
        float2* hi = lo + 4 * L::kScoreStride;  // row r + 8
        if (g == 0) {
          *lo = make_float2(acc[i][j][0], acc[i][j][1]);
          *hi = make_float2(acc[i][j][2], acc[i][j][3]);
        } else {
          *lo = make_float2(lo->x + acc[i][j][0], lo->y + acc[i][j][1]);
          *hi = make_float2(hi->x + acc[i][j][2], hi->y + acc[i][j][3]);
        }
      }
    }
  }
  __syncthreads();
  if constexpr (C == 1) {
    return scores;
  } else {
    // Block q sends rows [r n, (r + 1) n) of its partial sums (n = BM / C) to block r's inbox slot
    // for q (slots skip the receiver's own index); after one cluster barrier every block adds its C partials of its own rows in block order
    // (deterministic) from local shared memory, and no block reads another's after it.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    constexpr int kQuads = L::kPaddedExperts / 4;
    constexpr int kSlot = L::kOwnRows * L::kScoreStride;  // floats
    float* inbox = reinterpret_cast<float*>(smem + L::kInboxOffset);
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#pragma unroll 1
    for (int r = 0; r < C; ++r) {
      if (r == part) continue;
      float* remote = cluster.map_shared_rank(inbox, r) + (part - (part > r)) * kSlot;
      for (int i = threadIdx.x; i < L::kOwnRows * kQuads; i += L::kThreads) {
        const int at = (i / kQuads) * L::kScoreStride + 4 * (i % kQuads);
        *reinterpret_cast<float4*>(remote + at) = *reinterpret_cast<const float4*>(scores + r * kSlot + at);
      }
    }
    cluster.sync();  // the partials have arrived
    float* own = scores + part * kSlot;
    for (int i = threadIdx.x; i < L::kOwnRows * kQuads; i += L::kThreads) {
      const int at = (i / kQuads) * L::kScoreStride + 4 * (i % kQuads);
      float4 sum = *reinterpret_cast<const float4*>((part == 0 ? own : inbox) + at);
#pragma unroll
      for (int q = 1; q < C; ++q) {
        const float4 v = *reinterpret_cast<const float4*>((q == part ? own : inbox + (q - (q > part)) * kSlot) + at);
        sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
      }
      *reinterpret_cast<float4*>(own + at) = sum;
    }
    __syncthreads();
    return own;
  }
}

// A row of E values held by one warp: lane l keeps experts l, l + 32, l + 64, ...
template <int E>
struct Row {
  static constexpr int kPer = ceil_div(E, 32);
  float v[kPer];
};

// A top-k selection held by one warp: lane j < K keeps the j-th best (value, expert id) and the
// key it was selected on (rank_key of its selection score: block_topk merges warps' selections by it).
template <int K>
struct TopK {
  float value;
  int id;
  unsigned key;
};

__device__ __forceinline__ int row_index(int i) { return (threadIdx.x & 31) + 32 * i; }

// The token's scores in the router_gemv workspace (publish_score above).
__device__ __forceinline__ unsigned peek_score(const float* p) {
  unsigned u;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(u) : "l"(p) : "memory");
  return u;
}

// The E scores at p as they land: every word requested at once, then those still 0 again until
// none is; each is cleared once read. A score's word is its own flag, so no fence is needed.
template <int E>
__device__ __forceinline__ Row<E> await_scores(float* p) {
  constexpr int P = Row<E>::kPer;
  unsigned got[P];
#pragma unroll
  for (int i = 0; i < P; ++i) got[i] = row_index(i) < E ? peek_score(p + row_index(i)) : ~0u;
  bool waiting;
  do {
    waiting = false;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (got[i] == 0u) {
        got[i] = peek_score(p + row_index(i));
        waiting |= got[i] == 0u;
      }
    }
  } while (waiting);
  __syncwarp();
  Row<E> r;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    r.v[i] = row_index(i) < E ? __uint_as_float(~got[i]) : 0.0f;
    if (row_index(i) < E) asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p + row_index(i)), "r"(0u) : "memory");
  }
  return r;
}

template <int E>
__device__ __forceinline__ Row<E> load_row_shared(const float* p) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = row_index(i) < E ? p[row_index(i)] : 0.0f;
  return r;
}

template <int E>
__device__ __forceinline__ Row<E> load_row(const float* __restrict__ p) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = row_index(i) < E ? __ldg(p + row_index(i)) : 0.0f;
  return r;
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

template <int E>
__device__ __forceinline__ Row<E> sigmoid(const Row<E>& a) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = sigmoid(a.v[i]);
  return r;
}
template <int K>
__device__ __forceinline__ TopK<K> sigmoid(TopK<K> a) {
  a.value = sigmoid(a.value);
  return a;
}

template <int E>
__device__ __forceinline__ Row<E> add(const Row<E>& a, const Row<E>& b) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}

template <int E>
__device__ __forceinline__ Row<E> scale(const Row<E>& a, float f) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = a.v[i] * f;
  return r;
}
template <int K>
__device__ __forceinline__ TopK<K> scale(TopK<K> a, float f) {
  a.value *= f;
  return a;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Softmax over the E values; a NaN anywhere makes every output NaN (fmaxf would skip it, the sum
// does not).
template <int E>
__device__ __forceinline__ Row<E> softmax(const Row<E>& a) {
  float m = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) {
    if (row_index(i) < E) {
      m = fmaxf(m, a.v[i]);
      nan |= isnan(a.v[i]);
    }
  }
  m = warp_max(m);
  Row<E> r;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) {
    r.v[i] = row_index(i) < E ? expf(a.v[i] - m) : 0.0f;
    sum += r.v[i];
  }
  // one division, then products: sixteen IEEE divisions each take a branch, and their slow path
  // (tiny quotients, as on peaked rows) slowed the whole epilogue (bench/NOTES.md, "A faster
  // top-k")
  const float inv = 1.0f / warp_sum(sum);
  nan = __any_sync(kFullMask, nan);
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = nan ? NAN : r.v[i] * inv;
  return r;
}

template <int K>
__device__ __forceinline__ TopK<K> softmax(TopK<K> a) {
  const bool mine = (threadIdx.x & 31) < K;
  const float m = warp_max(mine ? a.value : -INFINITY);
  const bool nan = __any_sync(kFullMask, mine && isnan(a.value));
  const float e = mine ? expf(a.value - m) : 0.0f;
  const float sum = warp_sum_first<K>(e);
  a.value = nan ? NAN : e / sum;
  return a;
}

// softmax over a selection of its own scores (topk without by=), whose values are best first: the
// maximum is lane 0's, one shuffle instead of a reduction. A NaN or +inf among them makes the sum
// NaN, and so every value, as softmax over the selection gives. One reciprocal, then products.
template <int K>
__device__ __forceinline__ TopK<K> softmax_best_first(TopK<K> a) {
  const float m = __shfl_sync(kFullMask, a.value, 0);
  const float e = (threadIdx.x & 31) < K ? expf(a.value - m) : 0.0f;
  a.value = e * (1.0f / warp_sum_first<K>(e));
  return a;
}

template <int K>
__device__ __forceinline__ TopK<K> renormalize(TopK<K> a) {
  const float sum = warp_sum_first<K>((threadIdx.x & 31) < K ? a.value : 0.0f);
  a.value *= 1.0f / sum;
  return a;
}

// The ranking of top-k as one unsigned key: a higher score gives a larger key (the IEEE order made
// unsigned), every NaN gives 1, below -inf (0x007FFFFF), and 0 marks "not a candidate". Equal keys
// go to the lower expert id. redux.sync then finds the best of a warp in one instruction.
__device__ __forceinline__ unsigned rank_key(float score) {
  const unsigned u = __float_as_uint(score);
  return isnan(score) ? 1u : ((u & 0x80000000u) ? ~u : (u | 0x80000000u));
}

// rank_key's inverse: the score a key came from (a NaN as the canonical NaN, key 0 as 0).
__device__ __forceinline__ float key_value(unsigned key) {
  if (key == 0u) return 0.0f;
  if (key == 1u) return __uint_as_float(0x7fffffffu);
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// K rounds of "best remaining candidate" among the row positions whose bit is set in `allowed`
// (bit i of lane l: expert l + 32 i). Each round: two warp reductions (the best key, then the
// lowest id holding it) and one shuffle for the value. Returns the selection with `val`'s values.
// select_top's fallback for rows with more than 32 candidates above its threshold.
template <int K, int E>
__device__ __forceinline__ TopK<K> select_top_rounds(const Row<E>& sel, const Row<E>& val, unsigned allowed) {
  const int lane = threadIdx.x & 31;
  TopK<K> out{0.0f, -1, 0u};
#pragma unroll 1
  for (int r = 0; r < K; ++r) {
    unsigned best = 0u;  // this lane's best key; ties keep the lower i, i.e. the lower expert id
    int best_i = 0;
    float best_v = 0.0f;
#pragma unroll
    for (int i = 0; i < Row<E>::kPer; ++i) {
      const unsigned key = ((allowed >> i) & 1u) ? rank_key(sel.v[i]) : 0u;
      if (key > best) {
        best = key;
        best_i = i;
        best_v = val.v[i];
      }
    }
    const unsigned top = __reduce_max_sync(kFullMask, best);
    // among the lanes holding the top key, the lowest expert id wins: maximise its complement
    const unsigned id_code =
        __reduce_max_sync(kFullMask, best == top && top != 0u ? ~static_cast<unsigned>(lane + 32 * best_i) : 0u);
    const int e = top != 0u ? static_cast<int>(~id_code) : -1;
    if (e >= 0 && (e & 31) == lane) allowed &= ~(1u << best_i);  // taken
    const float v = __shfl_sync(kFullMask, best_v, e >= 0 ? (e & 31) : 0);
    if (lane == r) {
      out.value = v;
      out.id = e;
      out.key = top;
    }
  }
  return out;
}

// The largest of N keys as a tree (depth log2 N, not a chain of N compares).
template <int N>
__device__ __forceinline__ unsigned max_key(const unsigned* k) {
  if constexpr (N == 1) return k[0];
  else return max(max_key<N / 2>(k), max_key<N - N / 2>(k + N / 2));
}

// How many of lanes 0..n-1 rank above this lane: a larger key, or an equal key and a lower lane
// (n uniform over the warp). Shuffles, one per lane: for the few lanes of group keys.
__device__ __forceinline__ int lane_rank(unsigned key, int n) {
  const int lane = threadIdx.x & 31;
  int rank = 0;
#pragma unroll 8
  for (int j = 0; j < n; ++j) {
    const unsigned kj = __shfl_sync(kFullMask, key, j);
    rank += kj > key || (kj == key && j < lane) ? 1 : 0;
  }
  return rank;
}

// Shared memory for select_top, one per warp evaluating a row (the decode routers' warp 0).
struct TopKScratch {
  unsigned best[32];  // each lane's best key; later, slot of the candidate of each rank
  unsigned key[32];   // the candidates, in expert id order (register by register, lane by lane)
  int id[32];
  float value[32];
};

// How many of the 32 keys in shared memory are larger than key: four per 16-byte broadcast read.
__device__ __forceinline__ int shared_count_above(const unsigned* keys, unsigned key) {
  int above = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint4 k4 = reinterpret_cast<const uint4*>(keys)[q];
    above += (k4.x > key) + (k4.y > key) + (k4.z > key) + (k4.w > key);
  }
  return above;
}

// How many of the n keys in shared memory rank above (key, slot): a larger key, or an equal key in
// a lower slot. Four per 16-byte broadcast read; n uniform over the warp.
__device__ __forceinline__ int shared_rank(const unsigned* keys, int n, unsigned key, int slot) {
  int rank = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    if (4 * q < n) {
      const uint4 k4 = reinterpret_cast<const uint4*>(keys)[q];
      const unsigned kj[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) rank += 4 * q + c < n && (kj[c] > key || (kj[c] == key && 4 * q + c < slot)) ? 1 : 0;
    }
  }
  return rank;
}

// select_top_rounds' result in a fixed number of steps instead of K dependent rounds of warp
// reductions, a shorter chain for the one warp that runs it (bench/NOTES.md, "A faster top-k"):
//  1. a threshold t, the K-th best of the 32 lanes' best keys (the smallest best with fewer than K
//     larger): at least K keys reach it, so the best K all do;
//  2. the keys >= t (about K + 1 on random scores; more than 32 only on rows of mass ties, which
//     take select_top_rounds) are written to shared memory in expert id order, over slots of key 0
//     (ranked below every candidate, so step 3 reads all 32 unguarded);
//  3. each candidate counts the candidates ranked above it (a larger key, or an equal key in a
//     lower slot), and lane r takes the one of rank r.
template <int K, int E>
__device__ __forceinline__ TopK<K> select_top(const Row<E>& sel, const Row<E>& val, unsigned allowed, TopKScratch& s) {
  constexpr int P = Row<E>::kPer;
  const int lane = threadIdx.x & 31;
  unsigned key[P];
#pragma unroll
  for (int i = 0; i < P; ++i) key[i] = ((allowed >> i) & 1u) ? rank_key(sel.v[i]) : 0u;
  const unsigned best = max_key<P>(key);
  __syncwarp();  // the scratch's previous use is over
  s.best[lane] = best;
  if constexpr (P == 1) s.value[lane] = val.v[0];
  else s.key[lane] = 0u;
  __syncwarp();
  if constexpr (P == 1) {  // one value per lane: the lanes' ranks are the selection's
    const int lanes_above = shared_rank(s.best, 32, best, lane);
    const int candidates = __popc(__ballot_sync(kFullMask, best != 0u));
    if (best != 0u && lanes_above < K) s.id[lanes_above] = lane;
    __syncwarp();
    TopK<K> out{0.0f, -1, 0u};
    if (lane < K && lane < candidates) {
      out.id = s.id[lane];
      out.value = s.value[out.id];
      out.key = s.best[out.id];
    }
    return out;
  } else {
    const unsigned t = max(1u, __reduce_min_sync(kFullMask, shared_count_above(s.best, best) < K ? best : ~0u));
    // register i's candidates, lane by lane, after register i - 1's: slot order is expert id order
    // (id = lane + 32 i), so equal keys rank by slot
    const unsigned below = (1u << lane) - 1u;
    int total = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const unsigned in = __ballot_sync(kFullMask, key[i] >= t);
      const int at = total + __popc(in & below);
      if (key[i] >= t && at < 32) {
        s.key[at] = key[i];
        s.id[at] = lane + 32 * i;
        s.value[at] = val.v[i];
      }
      total += __popc(in);
    }
    if (total > 32) return select_top_rounds<K, E>(sel, val, allowed);
    __syncwarp();
    const bool has = lane < total;
    const int rank = has ? shared_rank(s.key, 32, s.key[lane], lane) : 32;
    __syncwarp();  // every lane has read s.best
    if (has && rank < K) s.best[rank] = static_cast<unsigned>(lane);
    __syncwarp();
    TopK<K> out{0.0f, -1, 0u};
    if (lane < K && lane < total) {
      const int slot = static_cast<int>(s.best[lane]);
      out.value = s.value[slot];
      out.id = s.id[slot];
      out.key = s.key[slot];
    }
    return out;
  }
}

// The sum of the two best of the warp's 32 R values v[0..R) per lane (a DeepSeek-V3 group score),
// ranked as rank_key ranks (a NaN below every number): the best by one warp reduction, then the
// runner-up (the best key again when two lanes hold it) by a ballot and a reduction side by side.
template <int R>
__device__ __forceinline__ float warp_best_two_sum(const float* v) {
  unsigned first = 0u, second = 0u;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const unsigned k = rank_key(v[i]);
    second = max(second, min(first, k));
    first = max(first, k);
  }
  const unsigned a = __reduce_max_sync(kFullMask, first);
  // both after a, side by side: whether a is held twice, and the best once a's holder gives second
  const bool twice = __popc(__ballot_sync(kFullMask, first == a)) > 1;
  const unsigned runner_up = __reduce_max_sync(kFullMask, first == a ? second : first);
  return key_value(a) + key_value(twice ? a : runner_up);
}

// Top-K of a row, selecting on `sel` and keeping `val`'s values. With G > 1 groups (of E / G
// consecutive experts), each group scores the sum of its two best `sel` values and only the
// experts of the TG best groups compete (DeepSeek-V3's group-limited routing).
// With a scratch (one warp of the block evaluates the row) selections take select_top; without
// (the tiled router: every warp evaluates rows, interleaved) select_top_rounds.
template <int K, int E>
__device__ __forceinline__ TopK<K> select_best(const Row<E>& sel, const Row<E>& val, unsigned allowed, TopKScratch* scratch) {
  return scratch != nullptr ? select_top<K, E>(sel, val, allowed, *scratch) : select_top_rounds<K, E>(sel, val, allowed);
}

template <int K, int G, int TG, int E>
__device__ __forceinline__ TopK<K> topk(const Row<E>& sel, const Row<E>& val, TopKScratch* scratch = nullptr) {
  static_assert(Row<E>::kPer <= 32, "a row is at most 32 values per lane");
  static_assert(G <= 32, "one lane per group");
  constexpr int P = Row<E>::kPer;
  const int lane = threadIdx.x & 31;
  unsigned valid = 0u;
#pragma unroll
  for (int i = 0; i < P; ++i) valid |= (row_index(i) < E ? 1u : 0u) << i;
  if constexpr (G == 1) {
    return select_best<K, E>(sel, val, valid, scratch);
  } else {
    static_assert(E % G == 0, "groups divide the experts");
    constexpr int kSize = E / G;
    float group_score = 0.0f;  // lane g < G holds group g's score
    if constexpr (kSize % 32 == 0) {
      // group g is registers [g R, (g + 1) R) of every lane: all groups at once, the two best of
      // each by two warp reductions (one when the best key is held twice)
      constexpr int R = kSize / 32;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float score = warp_best_two_sum<R>(sel.v + g * R);
        if (lane == g) group_score = score;
      }
    } else {
#pragma unroll 1
      for (int g = 0; g < G; ++g) {
        unsigned in_group = 0u;
#pragma unroll
        for (int i = 0; i < P; ++i) in_group |= (row_index(i) / kSize == g ? 1u : 0u) << i;
        const TopK<2> two = select_best<2, E>(sel, sel, valid & in_group, scratch);
        const float best2 = __shfl_sync(kFullMask, two.value, 0) + __shfl_sync(kFullMask, two.value, 1);
        if (lane == g) group_score = best2;
      }
    }
    // the TG best groups, ranked like experts (lane g is candidate g; ties to the lower group)
    const unsigned group_key = lane < G ? rank_key(group_score) : 0u;
    int group_rank;
    if (scratch != nullptr) {  // G keys by broadcast reads from the scratch
      __syncwarp();
      scratch->best[lane] = group_key;
      __syncwarp();
      group_rank = shared_rank(scratch->best, G, group_key, lane);
    } else {
      group_rank = lane_rank(group_key, G);  // G shuffles
    }
    const unsigned kept_groups = __ballot_sync(kFullMask, lane < G && group_rank < TG);
    unsigned allowed = 0u;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int e = row_index(i);
      allowed |= (e < E && ((kept_groups >> (e / kSize)) & 1u) ? 1u : 0u) << i;
    }
    return select_best<K, E>(sel, val, allowed, scratch);
  }
}

// Whether this lane holds a NaN or +inf among the first E of the row: a softmax over such a row is
// NaN everywhere.
template <int E>
__device__ __forceinline__ bool poisons_softmax(const Row<E>& a) {
  bool p = false;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) p |= row_index(i) < E && (isnan(a.v[i]) || a.v[i] == INFINITY);
  return p;
}

// What renormalize(topk(softmax(row), K)) gives for a row the softmax turns into NaN: NaN weights
// at experts 0..K-1 (every value ties; the lower ids win).
template <int K>
__device__ __forceinline__ TopK<K> poisoned_selection() {
  const int lane = threadIdx.x & 31;
  return TopK<K>{NAN, lane < K ? lane : -1, 1u};
}

// renormalize(topk(softmax(x), K)) as the softmax of x's K best: softmax is monotone and its
// normaliser cancels in the renormalisation, so the row's exponentials and sums are skipped
// (bench/NOTES.md, "The router's tail: what one warp's selection costs, and less of it"). The
// selection ranks the raw scores, which softmax in FP32 would round into ties; the FP64 reference
// keeps them apart, as this does. A row with a NaN or +inf gives what the full softmax gives: NaN
// at experts 0..K-1.
template <int K, int E>
__device__ __forceinline__ TopK<K> softmax_topk(const Row<E>& x, TopKScratch* scratch = nullptr) {
  const bool poisoned = __any_sync(kFullMask, poisons_softmax(x));
  const TopK<K> top = topk<K, 1, 1>(x, x, scratch);
  return softmax_best_first(poisoned ? poisoned_selection<K>() : top);
}

// The decode routers' tail over the W warps of the token's last block (router_gemv): warp w holds
// the S = E / W experts [w S, (w + 1) S) as a Row<S> and ranks them; the K best of each warp are
// the candidates. Every selected key is among its warp's K best, and equal keys keep the lower
// expert id at both levels (a warp's candidates are in rank order, the warps' slices ascend), so
// the result is select_top's over the whole row, its selection steps spread over the block.
//  - G == 1: warp 0 selects the K best of the W K candidates (select_top).
//  - G > 1 groups, G == W: warp w's slice is group w, which scores the sum of its two best. After
//    one barrier every warp knows the TG best groups, and each candidate of a kept group counts
//    the candidates above it in the other kept groups' lists (rank order, so equal keys in a lower
//    group count) and stores itself at its final rank: no gather in one warp, no second select
//    (a shorter chain for DeepSeek-V3's selection, renormalisation and scale: bench/NOTES.md, "The
//    grouped tail").
template <int K, int W>
struct BlockTopKScratch {
  TopKScratch warp[W];
  alignas(16) unsigned key[W * K];  // warp w's K best keys at [w K, (w + 1) K), best first
  int id[W * K];
  float value[W * K];
  unsigned group_key[W];
  unsigned top_key[K];  // groups: the selection by final rank
  int top_id[K];
  float top_value[K];
};

// How many of a kept group's K candidate keys (best first) rank above a key of another group:
// a larger key, or an equal key when that group's experts come first (lower ids).
template <int K>
__device__ __forceinline__ int count_above(const unsigned* list, unsigned key, bool lower_group) {
  const unsigned t = lower_group ? key - 1u : key;  // candidate keys are >= 1
  int above = 0;
  if constexpr (K % 4 == 0) {
#pragma unroll
    for (int q = 0; q < K / 4; ++q) {
      const uint4 k4 = reinterpret_cast<const uint4*>(list)[q];
      above += (k4.x > t) + (k4.y > t) + (k4.z > t) + (k4.w > t);
    }
  } else {
#pragma unroll
    for (int j = 0; j < K; ++j) above += list[j] > t;
  }
  return above;
}

// Called by every thread of the block; the selection is returned in warp 0 (empty elsewhere).
template <int K, int G, int TG, int S, int W>
__device__ __forceinline__ TopK<K> block_topk(const Row<S>& sel, const Row<S>& val, BlockTopKScratch<K, W>& s) {
  static_assert(G == 1 || (G == W && S % 32 == 0), "groups: one per warp, whole registers");
  static_assert(TG <= G && K <= S, "the selection fits its slice");
  constexpr int P = Row<S>::kPer;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  unsigned valid = 0u;
#pragma unroll
  for (int i = 0; i < P; ++i) valid |= (row_index(i) < S ? 1u : 0u) << i;
  if constexpr (G > 1) {
    // this lane's candidate: its key, rank in the group and expert; every lane of a slice of whole
    // registers is valid, so each group has at least K candidates
    unsigned key;
    int rank, id;
    float value;
    if constexpr (P == 1) {  // one expert per lane: the lanes' ranks are the group's
      key = rank_key(sel.v[0]);
      __syncwarp();
      s.warp[warp].best[lane] = key;
      __syncwarp();
      rank = shared_rank(s.warp[warp].best, 32, key, lane);
      id = warp * S + lane;
      value = val.v[0];
    } else {
      const TopK<K> mine = select_top<K, S>(sel, val, valid, s.warp[warp]);
      key = mine.key;
      rank = lane < K ? lane : K;
      id = warp * S + mine.id;
      value = mine.value;
    }
    const float score = warp_best_two_sum<P>(sel.v);
    if (lane == 0) s.group_key[warp] = rank_key(score);
    if (rank < K) s.key[warp * K + rank] = key;
    __syncthreads();
    const unsigned group_key = lane < G ? s.group_key[lane] : 0u;
    const unsigned kept = __ballot_sync(kFullMask, lane < G && shared_rank(s.group_key, G, group_key, lane) < TG);
    if (((kept >> warp) & 1u) && rank < K) {
      int final_rank = rank;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g != warp && ((kept >> g) & 1u)) final_rank += count_above<K>(s.key + g * K, key, g < warp);
      }
      if (final_rank < K) {
        s.top_key[final_rank] = key;
        s.top_id[final_rank] = id;
        s.top_value[final_rank] = value;
      }
    }
    __syncthreads();
    if (warp != 0 || lane >= K) return TopK<K>{0.0f, -1, 0u};
    return TopK<K>{s.top_value[lane], s.top_id[lane], s.top_key[lane]};
  } else {
    const TopK<K> mine = select_top<K, S>(sel, val, valid, s.warp[warp]);
    if (lane < K) {
      s.key[warp * K + lane] = mine.key;
      s.id[warp * K + lane] = mine.id >= 0 ? warp * S + mine.id : -1;
      s.value[warp * K + lane] = mine.value;
    }
    __syncthreads();
    if (warp != 0) return TopK<K>{0.0f, -1, 0u};
    constexpr int N = W * K;
    Row<N> csel, cval;
    unsigned cvalid = 0u;
#pragma unroll
    for (int i = 0; i < Row<N>::kPer; ++i) {
      const int p = row_index(i);
      const bool has = p < N && s.id[p] >= 0;
      csel.v[i] = has ? key_value(s.key[p]) : 0.0f;
      cval.v[i] = has ? s.value[p] : 0.0f;
      cvalid |= (has ? 1u : 0u) << i;
    }
    TopK<K> top = select_top<K, N>(csel, cval, cvalid, s.warp[0]);
    if (top.id >= 0) top.id = s.id[top.id];
    return top;
  }
}

// A selection scattered back into a row: its values at its experts, zero elsewhere.
template <int E, int K>
__device__ __forceinline__ Row<E> dense(const TopK<K>& a) {
  Row<E> r;
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) r.v[i] = 0.0f;
#pragma unroll 1
  for (int j = 0; j < K; ++j) {
    const float v = __shfl_sync(kFullMask, a.value, j);
    const int e = __shfl_sync(kFullMask, a.id, j);
#pragma unroll
    for (int i = 0; i < Row<E>::kPer; ++i) {
      if (row_index(i) == e) r.v[i] = v;
    }
  }
  return r;
}

template <int K>
__device__ __forceinline__ void store_topk(const TopK<K>& a, float* __restrict__ weights, int* __restrict__ ids) {
  if ((threadIdx.x & 31) < K) {
    weights[threadIdx.x & 31] = a.value;
    ids[threadIdx.x & 31] = a.id;
  }
}
template <int K>
__device__ __forceinline__ void store_topk(const TopK<K>& a, __nv_bfloat16* __restrict__ weights, int* __restrict__ ids) {
  if ((threadIdx.x & 31) < K) {
    store_bf16(weights + (threadIdx.x & 31), a.value);
    ids[threadIdx.x & 31] = a.id;
  }
}

// The per-expert token histogram: one atomic add per routed (token, slot).
template <int K>
__device__ __forceinline__ void count_experts(const TopK<K>& a, int* __restrict__ counts) {
  if ((threadIdx.x & 31) < K && a.id >= 0) atomicAdd(counts + a.id, 1);
}

// A block's share of the histogram (the tiled router's blocks route 16 to 128 tokens each): counted
// in shared memory, then added to the global counts once per (block, expert). Global atomics per
// routed slot (32768 adds on 128 counters for Qwen3-30B-A3B at M=4096) were most of the prefill
// router's time beyond its GEMM (bench/NOTES.md, "The prefill router's histogram").
template <int E>
struct BlockExpertCounts {
  int count[E];

  // Before the first count, with a block barrier between (the tiled router's scores phase has several).
  __device__ __forceinline__ void zero() {
    for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  }

  // Every thread of the block, after its last count.
  __device__ __forceinline__ void flush(int* __restrict__ counts) {
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      if (count[e] != 0) atomicAdd(counts + e, count[e]);
    }
  }
};

template <int K, int E>
__device__ __forceinline__ void count_experts(const TopK<K>& a, BlockExpertCounts<E>& counts) {
  if ((threadIdx.x & 31) < K && a.id >= 0) atomicAdd(&counts.count[a.id], 1);
}

template <int E>
__device__ __forceinline__ void store_row(const Row<E>& a, float* __restrict__ out) {
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) {
    if (row_index(i) < E) out[row_index(i)] = a.v[i];
  }
}
template <int E>
__device__ __forceinline__ void store_row(const Row<E>& a, __nv_bfloat16* __restrict__ out) {
#pragma unroll
  for (int i = 0; i < Row<E>::kPer; ++i) {
    if (row_index(i) < E) store_bf16(out + row_index(i), a.v[i]);
  }
}

}  // namespace mf
