// moeforge_decoder.cu: the decoder's own kernels around the DSL's (linear projections, router,
// experts): embedding, RMSNorm, q/k norm with RoPE and the KV cache write, attention over the
// cache, residual adds, and the next token's pick. Sizes are arguments, so one build serves every
// model. The residual stream is FP32; what a DSL kernel reads is bf16; the KV cache is bf16.
// Positions live on the device and advance inside the step, so one CUDA graph serves every step.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

// Sum over the block (at most 32 warps); every thread gets the total. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// Programmatic dependent launch (sm_90+; under a plain launch both return at once): the next kernel
// of the step starts launching now and parks in its own wait, so launches overlap the work instead
// of following it; this kernel waits until the previous one has finished and its writes are visible.
__device__ __forceinline__ void let_next_kernel_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void begin_after_previous_kernel() {
  let_next_kernel_launch();
  wait_for_previous_kernel();
}

}  // namespace

// x[b][:] = table[ids[b]][:] in FP32. Grid: tokens; block: any.
extern "C" __global__ void embed_tokens(const int* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                                        float* __restrict__ x, int hidden) {
  begin_after_previous_kernel();
  const int b = blockIdx.x;
  const __nv_bfloat16* row = table + static_cast<size_t>(ids[b]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[static_cast<size_t>(b) * hidden + i] = __bfloat162float(row[i]);
}

// Each thread's elements of a row, at most kPerThread of them: every load is issued before the first
// is used (a loop of load-then-use would pay one memory latency per element).
constexpr int kPerThread = 16;
constexpr int kRowThreads = 512;  // the row kernels' block: 512 x 16 values at most

// out[b] = bf16(w * x[b] / sqrt(mean(x[b]^2) + eps)), with x[b] += y[b] first where y is given.
// Grid: tokens; block: kRowThreads threads; n at most kRowThreads * kPerThread.
template <bool kAdd, class Y>
__device__ __forceinline__ void add_then_norm(float* __restrict__ x, const Y* __restrict__ y, const float* __restrict__ w,
                              __nv_bfloat16* __restrict__ out, int n, float eps) {
  __shared__ float scratch[32];
  float* row = x + static_cast<size_t>(blockIdx.x) * n;
  float v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    v[j] = i < n ? row[i] : 0.0f;
  }
  if constexpr (kAdd) {
    const Y* add = y + static_cast<size_t>(blockIdx.x) * n;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < n) v[j] += static_cast<float>(add[i]);
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) ss += v[j] * v[j];
  const float r = rsqrtf(block_sum(ss, scratch) / n + eps);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n) {
      if constexpr (kAdd) row[i] = v[j];
      out[static_cast<size_t>(blockIdx.x) * n + i] = __float2bfloat16_rn(w[i] * (v[j] * r));
    }
  }
}

extern "C" __global__ void __launch_bounds__(kRowThreads) rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                                            __nv_bfloat16* __restrict__ out, int n, float eps) {
  begin_after_previous_kernel();
  add_then_norm<false, float>(const_cast<float*>(x), nullptr, w, out, n, eps);
}

// RMSNorm over [0, n) of v (shared memory) with weight w, in place, by the whole block.
__device__ __forceinline__ void norm_span(float* v, const float* __restrict__ w, int n, float eps, float* scratch) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += v[i] * v[i];
  const float r = rsqrtf(block_sum(ss, scratch) / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = w[i] * (v[i] * r);
  __syncthreads();
}

// RoPE's cos and sin at position pos of a pair of that frequency (inv_freq[i] of pair i; NeoX pairs
// i, i + head_dim/2), times `scaling`: the angle frequency * pos in FP32 as transformers computes it,
// reduced to [-pi, pi] in FP64 (exactly enough), so the fast sine needs no slow path.
__device__ __forceinline__ void rope_angle_cos_sin(float frequency, int pos, float scaling, float& c, float& s) {
  const float angle = frequency * static_cast<float>(pos);
  float sn, cs;
  __sincosf(static_cast<float>(remainder(static_cast<double>(angle), 6.283185307179586)), &sn, &cs);
  c = cs * scaling;
  s = sn * scaling;
}
// The same for pair i of the frequency table.
__device__ __forceinline__ void rope_cos_sin(const float* __restrict__ inv_freq, int i, int pos, float scaling, float& c,
                                             float& s) {
  rope_angle_cos_sin(inv_freq[i], pos, scaling, c, s);
}

// Where a row's k and v go: decode rows (copies 0) each to their own sequence b of the cache; the
// rows of a prompt chunk (copies > 0, one prompt for every sequence) to sequences 0 .. copies-1.
__device__ __forceinline__ void cache_store(__nv_bfloat16* __restrict__ cache, int b, int copies, int pos, int context, int kn,
                                            int i, float value) {
  const __nv_bfloat16 v = __float2bfloat16_rn(value);
  if (copies == 0) {
    cache[(static_cast<size_t>(b) * context + pos) * kn + i] = v;
  } else {
    for (int s = 0; s < copies; ++s) cache[(static_cast<size_t>(s) * context + pos) * kn + i] = v;
  }
}

__device__ __forceinline__ float value_of(float v) { return v; }
__device__ __forceinline__ float value_of(__nv_bfloat16 v) { return __bfloat162float(v); }

// A token's fused q, k, v row [(heads + 2 kv_heads) * head_dim] (FP32 from the decode projection, bf16
// from the prompt's) under OLMoE's norm, which spans every head: RMSNorm over the whole q and the whole
// k, the clamp to +-clip (clip > 0), RoPE at the token's position, then q to q_out (FP32) and k, v to
// the cache at the position (cache_store). Grid: tokens; block: kRowThreads threads (the row at most
// kRowThreads * kPerThread values); dynamic shared memory: the row as floats.
template <class In>
__device__ __forceinline__ void qk_norm_rope_row(
    const In* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, float clip, float eps,
    const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling, float* __restrict__ q_out,
    __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads, int kv_heads, int head_dim,
    int context, int copies) {
  extern __shared__ float row[];
  __shared__ float scratch[32];
  const int b = blockIdx.x;
  const int qn = heads * head_dim, kn = kv_heads * head_dim, n = qn + 2 * kn;
  {
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      v[j] = i < n ? value_of(qkv[static_cast<size_t>(b) * n + i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < n) row[i] = v[j];
    }
  }
  __syncthreads();
  float* q = row;
  float* k = row + qn;
  float* v = row + qn + kn;
  norm_span(q, q_norm, qn, eps, scratch);
  norm_span(k, k_norm, kn, eps, scratch);
  if (clip > 0.0f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = fminf(clip, fmaxf(-clip, row[i]));
    __syncthreads();
  }
  const int pos = positions[b];
  const int half = head_dim / 2;
  for (int p = threadIdx.x; p < (heads + kv_heads) * half; p += blockDim.x) {
    const int h = p / half, i = p % half;
    float* head = h < heads ? q + h * head_dim : k + (h - heads) * head_dim;
    float c, s;
    rope_cos_sin(inv_freq, i, pos, scaling, c, s);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < qn; i += blockDim.x) q_out[static_cast<size_t>(b) * qn + i] = q[i];
  for (int i = threadIdx.x; i < kn; i += blockDim.x) {
    cache_store(k_cache, b, copies, pos, context, kn, i, k[i]);
    cache_store(v_cache, b, copies, pos, context, kn, i, v[i]);
  }
}

#define MOEFORGE_QK_NORM_ROPE_ROW(NAME, IN)                                                                              \
  extern "C" __global__ void __launch_bounds__(kRowThreads) NAME(                                                       \
      const IN* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, float clip,        \
      float eps, const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling,                  \
      float* __restrict__ q_out, __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads, \
      int kv_heads, int head_dim, int context, int copies) {                                                            \
    begin_after_previous_kernel();                                                                                      \
    qk_norm_rope_row(qkv, q_norm, k_norm, clip, eps, positions, inv_freq, scaling, q_out, k_cache, v_cache, heads,      \
                     kv_heads, head_dim, context, copies);                                                              \
  }
MOEFORGE_QK_NORM_ROPE_ROW(qk_norm_rope_cache, float)
MOEFORGE_QK_NORM_ROPE_ROW(qk_norm_rope_cache_bf16, __nv_bfloat16)

// The same one head per block, for every other model (per-head q/k norm with a [head_dim] weight
// where norm_mode is 1, Qwen3; none where 0): block (h, b) takes head h of the token's fused row
// (q heads, then k heads, then v heads), one value per thread. Block: head_dim rounded up to whole
// warps (at most 256 threads).
template <class In>
__device__ __forceinline__ void qk_norm_rope_head(
    const In* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, int norm_mode,
    float eps, const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling,
    float* __restrict__ q_out, __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads,
    int kv_heads, int head_dim, int context, int copies) {
  __shared__ float head[256];
  __shared__ float scratch[32];
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const bool in = d < head_dim;
  const bool roped_head = h < heads + kv_heads;
  const int half = head_dim / 2;
  // the norm's weight and RoPE's frequency (no kernel of the step writes them) before the wait, the
  // row and the position after it by plain loads (ptxas may hoist a load it takes for read-only above it)
  const float norm_weight = roped_head && in && norm_mode == 1 ? (h < heads ? q_norm : k_norm)[d] : 0.0f;
  const float frequency = roped_head && in ? inv_freq[d < half ? d : d - half] : 0.0f;
  wait_for_previous_kernel();
  const int n = (heads + 2 * kv_heads) * head_dim;
  const float v = in ? value_of(__ldca(qkv + static_cast<size_t>(b) * n + static_cast<size_t>(h) * head_dim + d)) : 0.0f;
  const int pos = __ldca(positions + b);
  const int kn = kv_heads * head_dim;
  if (!roped_head) {  // a v head: to the cache as it is
    if (in) cache_store(v_cache, b, copies, pos, context, kn, (h - heads - kv_heads) * head_dim + d, v);
    return;
  }
  float x = v;
  if (norm_mode == 1) {
    const float r = rsqrtf(block_sum(v * v, scratch) / head_dim + eps);
    x = in ? norm_weight * (v * r) : 0.0f;
  }
  head[d] = x;
  __syncthreads();
  if (!in) return;
  float c, s;
  rope_angle_cos_sin(frequency, pos, scaling, c, s);
  const float roped = d < half ? head[d] * c - head[d + half] * s : head[d] * c + head[d - half] * s;
  if (h < heads) {
    q_out[(static_cast<size_t>(b) * heads + h) * head_dim + d] = roped;
  } else {
    cache_store(k_cache, b, copies, pos, context, kn, (h - heads) * head_dim + d, roped);
  }
}

#define MOEFORGE_QK_NORM_ROPE_HEAD(NAME, IN)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) NAME(                                                               \
      const IN* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, int norm_mode,     \
      float eps, const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling,                  \
      float* __restrict__ q_out, __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads, \
      int kv_heads, int head_dim, int context, int copies) {                                                            \
    let_next_kernel_launch();                                                                                           \
    qk_norm_rope_head(qkv, q_norm, k_norm, norm_mode, eps, positions, inv_freq, scaling, q_out, k_cache, v_cache,       \
                      heads, kv_heads, head_dim, context, copies);                                                      \
  }
MOEFORGE_QK_NORM_ROPE_HEAD(qk_norm_rope_cache_heads, float)
MOEFORGE_QK_NORM_ROPE_HEAD(qk_norm_rope_cache_heads_bf16, __nv_bfloat16)

// Attention of one (token, head) over the token's cache [context][kv_heads][head_dim], positions
// max(0, pos - window + 1) .. pos (window 0: all), GQA (head h reads kv head h / (heads /
// kv_heads)), scores scaled by `scale`, softmax in FP32 with the head's sink logit in the
// denominator where `sinks` is given (gpt-oss). Block (h, split, b) takes its slice of the
// positions (the window's positions cut into gridDim.y slices of equal length); its threads work
// in groups of 8 lanes, each group on every 16th position of the slice with an online softmax of
// its own, each lane on head_dim / 8 of the dimensions, two positions' k and v loads in flight
// per group before either is used (one lane of a warp per position left the slice's walk a chain of
// memory latencies). With one slice the block writes the output; with several each writes its part
// (max, sum, [head_dim] sums) and the block that finishes a head's last slice (a ticket per
// (token, head), left at zero) merges the parts with the sink. Grid: (heads, splits, tokens);
// block: 32 * kAttnWarps threads.
constexpr int kAttnWarps = 4;
constexpr int kAttnGroups = kAttnWarps * 4;  // groups of 8 lanes
constexpr int kAttnInFlight = 2;              // positions per group whose loads are issued together
constexpr int kAttnMaxSlices = 64;            // the most slices a head's positions are cut into (the merge's scratch)
constexpr int kAttnClusterSlices = 8;         // attention in clusters: the slices of a head, one block each
constexpr int kAttnClusterInFlight = 4;       // and each group's positions in flight: 512 a head in one round

// n bf16 from 2n-byte aligned memory as n/2 32-bit words, in 16-byte loads where n allows. kFresh:
// a plain load (ld.global.ca), for what the previous kernel writes: ptxas treats a read-only load of a
// const __restrict__ pointer as invariant and may move it above griddepcontrol.wait once the kernel
// does work before its wait (seen on sm_90a: q's loads ahead of the wait, the first decode step wrong);
// ld.global.cg keeps the order too, but its strong loads made attention slower (bench/NOTES.md).
template <int N, bool kFresh = false>
__device__ __forceinline__ void load_bf16_words(const __nv_bfloat16* p, uint32_t (&w)[N / 2]) {
  if constexpr (N >= 8) {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      const uint4* at = reinterpret_cast<const uint4*>(p + 8 * c);
      const uint4 u = kFresh ? __ldca(at) : *at;
      w[4 * c] = u.x;
      w[4 * c + 1] = u.y;
      w[4 * c + 2] = u.z;
      w[4 * c + 3] = u.w;
    }
  } else if constexpr (N == 4) {
    const uint2* at = reinterpret_cast<const uint2*>(p);
    const uint2 u = kFresh ? __ldca(at) : *at;
    w[0] = u.x;
    w[1] = u.y;
  } else {
    const unsigned int* at = reinterpret_cast<const unsigned int*>(p);
    w[0] = kFresh ? __ldca(at) : *at;
  }
}

__device__ __forceinline__ float bf16_low(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_high(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The factor that moves a sum kept against max m to max top (0 for an empty one, whose m is -inf).
__device__ __forceinline__ float rescale(float m, float top) { return m == -INFINITY ? 0.0f : __expf(m - top); }

// Each warp's max, sum and [HD] sums of a slice, where the block meets them.
template <int HD>
struct AttnWarpParts {
  float max[kAttnWarps], sum[kAttnWarps];
  float acc[kAttnWarps][HD];
};

// Block (h, ., b) takes slice `split` of `splits` of the token's positions for head h: the walk
// described above, then the warps' parts in s and the block's max and sum in top and sum (each warp's
// sums stay against its own max: the caller weighs them).
template <int HD, int kInFlight>
__device__ __forceinline__ void attention_slice(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ positions, int heads, int kv_heads, int context, int window, float scale, int split, int splits,
    AttnWarpParts<HD>& s, float& top, float& sum) {
  static_assert(HD % 16 == 0 && HD <= 256, "head_dim: 16, 32, 64, 128 or 256");
  constexpr int D = HD / 8;  // dimensions per lane
  const int h = blockIdx.x, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = threadIdx.x >> 3, sub = threadIdx.x & 7;
  const int kvh = h / (heads / kv_heads);
  const int pos = positions[b];  // written before this step's launch (the last step's pick, or the host)
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int span = (pos - first + splits) / splits;  // ceil((pos - first + 1) / splits)
  const int begin = first + split * span, end = min(pos, begin + span - 1);
  const size_t stride = static_cast<size_t>(kv_heads) * HD;
  const __nv_bfloat16* kb = k_cache + static_cast<size_t>(b) * context * stride + kvh * HD + sub * D;
  const __nv_bfloat16* vb = v_cache + static_cast<size_t>(b) * context * stride + kvh * HD + sub * D;
  // The slice's first rows are asked for before the wait: earlier steps wrote every position before
  // the token's own, so only the token's row (the previous kernel writes it) waits.
  uint32_t kw[kInFlight][D / 2], vw[kInFlight][D / 2];
  if (begin <= end) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int t = min(begin + group + u * kAttnGroups, end);
      if (t < pos) {
        load_bf16_words<D>(kb + t * stride, kw[u]);
        load_bf16_words<D>(vb + t * stride, vw[u]);
      }
    }
  }
  wait_for_previous_kernel();
  float qv[D], acc[D];
  {
    const float* qh = q + (static_cast<size_t>(b) * heads + h) * HD + sub * D;
#pragma unroll
    for (int i = 0; i < D; ++i) {
      qv[i] = __ldca(qh + i) * scale;  // the previous kernel's output: a read-only load could be hoisted above the wait
      acc[i] = 0.0f;
    }
  }
  float m = -INFINITY, l = 0.0f;
  // the same trip count for every group (their shuffles need the whole warp); positions past the slice are dropped
  for (int base = begin; base <= end; base += kAttnGroups * kInFlight) {
    const int t0 = base + group;
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int t = min(t0 + u * kAttnGroups, end);  // past the slice: a position in it, loaded and dropped
      if (base != begin || t >= pos) {  // the first round's earlier positions are in flight already
        load_bf16_words<D, true>(kb + t * stride, kw[u]);
        load_bf16_words<D, true>(vb + t * stride, vw[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < D / 2; ++i) dot += qv[2 * i] * bf16_low(kw[u][i]) + qv[2 * i + 1] * bf16_high(kw[u][i]);
      dot += __shfl_xor_sync(kFullMask, dot, 1);
      dot += __shfl_xor_sync(kFullMask, dot, 2);
      dot += __shfl_xor_sync(kFullMask, dot, 4);
      if (t0 + u * kAttnGroups > end) continue;
      const float m_new = fmaxf(m, dot);
      const float correction = __expf(m - m_new);
      const float p = __expf(dot - m_new);
      l = l * correction + p;
#pragma unroll
      for (int i = 0; i < D / 2; ++i) {
        acc[2 * i] = acc[2 * i] * correction + p * bf16_low(vw[u][i]);
        acc[2 * i + 1] = acc[2 * i + 1] * correction + p * bf16_high(vw[u][i]);
      }
      m = m_new;
    }
  }
  // the warp's four groups, then the block's four warps
#pragma unroll
  for (int d = 8; d < 32; d <<= 1) {
    const float m_other = __shfl_xor_sync(kFullMask, m, d);
    const float l_other = __shfl_xor_sync(kFullMask, l, d);
    const float top = fmaxf(m, m_other);
    const float f = rescale(m, top), f_other = rescale(m_other, top);
    l = l * f + l_other * f_other;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[i] = acc[i] * f + __shfl_xor_sync(kFullMask, acc[i], d) * f_other;
    m = top;
  }
  if (lane < 8) {
#pragma unroll
    for (int i = 0; i < D; ++i) s.acc[warp][sub * D + i] = acc[i];
    if (lane == 0) {
      s.max[warp] = m;
      s.sum[warp] = l;
    }
  }
  __syncthreads();
  top = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) top = fmaxf(top, s.max[w]);
  sum = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) sum += s.sum[w] * rescale(s.max[w], top);
}

template <int HD>
__device__ __forceinline__ void attention_decode_head(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ positions, const float* __restrict__ sinks, float* __restrict__ parts, int* __restrict__ tickets,
    __nv_bfloat16* __restrict__ out, int heads, int kv_heads, int context, int window, float scale) {
  __shared__ AttnWarpParts<HD> s;
  __shared__ int finishing;
  const int h = blockIdx.x, split = blockIdx.y, splits = gridDim.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float top, sum;
  attention_slice<HD, kAttnInFlight>(q, k_cache, v_cache, positions, heads, kv_heads, context, window, scale, split, splits, s,
                                     top, sum);
  const size_t head_row = static_cast<size_t>(b) * heads + h;
  if (splits == 1) {
    const float sink_top = sinks != nullptr ? fmaxf(top, sinks[h]) : top;
    const float denominator = sum * rescale(top, sink_top) + (sinks != nullptr ? __expf(sinks[h] - sink_top) : 0.0f);
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
      float numerator = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) numerator += s.acc[w][d] * rescale(s.max[w], sink_top);
      out[head_row * HD + d] = __float2bfloat16_rn(numerator / denominator);
    }
    return;
  }
  float* mine = parts + (head_row * splits + split) * (HD + 2);
  if (threadIdx.x == 0) {
    mine[0] = top;
    mine[1] = sum;
  }
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float numerator = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) numerator += s.acc[w][d] * rescale(s.max[w], top);
    mine[2 + d] = numerator;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) finishing = atomicAdd(tickets + head_row, 1) == splits - 1;
  __syncthreads();
  if (!finishing) return;
  __threadfence();
  // the merge: every slice's max and sum first (one load each, all in flight), their factors (over the
  // denominator) in shared memory, then each dimension's sums over the slices (loads unrolled, none
  // waiting on another: a loop that loaded a slice's max before each of its sums paid a latency a slice)
  __shared__ float slice_max[kAttnMaxSlices], slice_factor[kAttnMaxSlices];
  const float* all = parts + head_row * splits * (HD + 2);
  for (int slice = threadIdx.x; slice < splits; slice += blockDim.x) {
    slice_max[slice] = __ldcg(all + slice * (HD + 2));
    slice_factor[slice] = __ldcg(all + slice * (HD + 2) + 1);
  }
  __syncthreads();
  if (warp == 0) {
    float total_max = sinks != nullptr ? sinks[h] : -INFINITY;
    for (int slice = lane; slice < splits; slice += 32) total_max = fmaxf(total_max, slice_max[slice]);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) total_max = fmaxf(total_max, __shfl_xor_sync(kFullMask, total_max, d));
    float denominator = 0.0f;
    for (int slice = lane; slice < splits; slice += 32) {
      const float f = rescale(slice_max[slice], total_max);
      denominator += slice_factor[slice] * f;
      slice_factor[slice] = f;
    }
    denominator = warp_sum(denominator) + (sinks != nullptr ? __expf(sinks[h] - total_max) : 0.0f);
    for (int slice = lane; slice < splits; slice += 32) slice_factor[slice] /= denominator;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float numerator = 0.0f;
#pragma unroll 8
    for (int slice = 0; slice < splits; ++slice) numerator += __ldcg(all + slice * (HD + 2) + 2 + d) * slice_factor[slice];
    out[head_row * HD + d] = __float2bfloat16_rn(numerator);
  }
  if (threadIdx.x == 0) tickets[head_row] = 0;  // for the next layer and step
}

// The same walk for short caches with the slices of a head in one thread block cluster
// (kAttnClusterSlices blocks along y, 4 positions in flight a group: 512 positions a head in one round),
// merged through distributed shared memory instead of parts in global memory and a ticket: each block
// weighs its warps' sums into its own numerators, and after the cluster's barrier block r merges
// dimensions [r HD/8, (r + 1) HD/8) from every block's shared memory, with the sink. Grid: (heads,
// kAttnClusterSlices, tokens), y exactly one cluster (each block's slice is blockIdx.y of
// kAttnClusterSlices); block: 32 * kAttnWarps threads; parts and tickets are not used.
template <int HD>
__device__ __forceinline__ void attention_decode_cluster(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ positions, const float* __restrict__ sinks, float* __restrict__, int* __restrict__,
    __nv_bfloat16* __restrict__ out, int heads, int kv_heads, int context, int window, float scale) {
  namespace cg = cooperative_groups;
  static_assert(HD % kAttnClusterSlices == 0, "each block of the cluster merges a whole share of the head");
  constexpr int kDims = HD / kAttnClusterSlices;  // the dimensions each block merges
  __shared__ AttnWarpParts<HD> s;
  __shared__ float numerators[HD];  // this block's sums against its max
  __shared__ float block_max, block_sum;
  const int h = blockIdx.x, b = blockIdx.z;
  float top, sum;
  attention_slice<HD, kAttnClusterInFlight>(q, k_cache, v_cache, positions, heads, kv_heads, context, window, scale,
                                            blockIdx.y, kAttnClusterSlices, s, top, sum);
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float numerator = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) numerator += s.acc[w][d] * rescale(s.max[w], top);
    numerators[d] = numerator;
  }
  if (threadIdx.x == 0) {
    block_max = top;
    block_sum = sum;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's numerators, max and sum are in its shared memory
  if (threadIdx.x < kDims) {
    const int d = static_cast<int>(cluster.block_rank()) * kDims + threadIdx.x;
    float maxes[kAttnClusterSlices], sums[kAttnClusterSlices], values[kAttnClusterSlices];
#pragma unroll
    for (int r = 0; r < kAttnClusterSlices; ++r) {  // every read issued before the first is used
      maxes[r] = *cluster.map_shared_rank(&block_max, r);
      sums[r] = *cluster.map_shared_rank(&block_sum, r);
      values[r] = cluster.map_shared_rank(numerators, r)[d];
    }
    float total_max = sinks != nullptr ? sinks[h] : -INFINITY;
#pragma unroll
    for (int r = 0; r < kAttnClusterSlices; ++r) total_max = fmaxf(total_max, maxes[r]);
    float denominator = sinks != nullptr ? __expf(sinks[h] - total_max) : 0.0f, numerator = 0.0f;
#pragma unroll
    for (int r = 0; r < kAttnClusterSlices; ++r) {
      const float f = rescale(maxes[r], total_max);
      denominator += sums[r] * f;
      numerator += values[r] * f;
    }
    out[(static_cast<size_t>(b) * heads + h) * HD + d] = __float2bfloat16_rn(numerator / denominator);
  }
  cluster.sync();  // no block leaves while another reads its shared memory
}

// A decode attention entry point. Every kind takes the same arguments, so the decoder launches the
// one it chose with one argument list; each waits for the previous kernel itself, after asking for
// its first cache rows, which do not depend on that kernel.
#define MOEFORGE_DECODE_ATTENTION_ENTRY(NAME, BODY, BOUNDS)                                                             \
  extern "C" __global__ void __launch_bounds__ BOUNDS NAME(                                                            \
      const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache, \
      const int* __restrict__ positions, const float* __restrict__ sinks, float* __restrict__ parts,                    \
      int* __restrict__ tickets, __nv_bfloat16* __restrict__ out, int heads, int kv_heads, int context, int window,     \
      float scale) {                                                                                                    \
    let_next_kernel_launch();                                                                                           \
    BODY(q, k_cache, v_cache, positions, sinks, parts, tickets, out, heads, kv_heads, context, window, scale);          \
  }
#define MOEFORGE_ATTENTION_DECODE(HD) \
  MOEFORGE_DECODE_ATTENTION_ENTRY(attention_decode_##HD, attention_decode_head<HD>, (32 * kAttnWarps))
#define MOEFORGE_ATTENTION_DECODE_CLUSTER(HD)                                                          \
  MOEFORGE_DECODE_ATTENTION_ENTRY(__cluster_dims__(1, kAttnClusterSlices, 1) attention_decode_cluster_##HD, \
                                  attention_decode_cluster<HD>, (32 * kAttnWarps))
MOEFORGE_ATTENTION_DECODE(16)
MOEFORGE_ATTENTION_DECODE(32)
MOEFORGE_ATTENTION_DECODE(64)
MOEFORGE_ATTENTION_DECODE(128)
MOEFORGE_ATTENTION_DECODE(256)
MOEFORGE_ATTENTION_DECODE_CLUSTER(16)
MOEFORGE_ATTENTION_DECODE_CLUSTER(32)
MOEFORGE_ATTENTION_DECODE_CLUSTER(64)
MOEFORGE_ATTENTION_DECODE_CLUSTER(128)
MOEFORGE_ATTENTION_DECODE_CLUSTER(256)

// Causal attention of a prompt chunk on the tensor cores (mma.sync m16n8k16: bf16 in, FP32 sums).
// Block (head, q tile) takes kPrefillRows rows of the chunk (row t at position first_pos + t) against
// sequence 0's cache at every position up to the row's own (within the window where one is given),
// kPrefillKeys keys at a time staged in shared memory by cp.async two tiles deep; each warp owns 16
// rows and keeps their online softmax in registers; the head's sink joins the denominator at the end.
// Grid: (heads, ceil(rows / kPrefillRows)), the last q tiles (the most keys) first; block:
// 32 * kPrefillWarps threads; dynamic shared memory: PrefillTile<HD>::kBytes.
constexpr int kPrefillRows = 64;
constexpr int kPrefillKeys = 64;
constexpr int kPrefillWarps = kPrefillRows / 16;

template <int HD>
struct PrefillTile {
  static_assert(HD % 16 == 0 && HD <= 128, "head_dim: a multiple of 16 up to 128");
  // 16 bytes of padding per staged row keep the fragments' 32-bit loads and ldmatrix free of bank conflicts
  static constexpr int kStride = HD + 8;
  static constexpr int kElements = kPrefillKeys * kStride;
  static constexpr int kBytes = 2 * 2 * kElements * 2;  // two stages of a k tile and a v tile, bf16
};

__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two rows of q (r0 and r1; null: zeros) as mma.sync's A fragments in bf16, one per 16 dimensions:
// lane (g, t) holds dimensions 2t, 2t + 1, 2t + 8 and 2t + 9 of each 16 of rows g (r0) and g + 8 (r1).
template <int HD>
__device__ __forceinline__ void q_fragments(const float* r0, const float* r1, int t, uint32_t (&qa)[HD / 16][4]) {
#pragma unroll
  for (int c = 0; c < HD / 16; ++c) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = c * 16 + half * 8 + 2 * t;
      // plain loads: a read-only load may be hoisted above griddepcontrol.wait past copies issued before it
      const float2 a = r0 != nullptr ? __ldca(reinterpret_cast<const float2*>(r0 + col)) : make_float2(0.0f, 0.0f);
      const float2 b = r1 != nullptr ? __ldca(reinterpret_cast<const float2*>(r1 + col)) : make_float2(0.0f, 0.0f);
      qa[c][2 * half] = bf16x2_bits(a.x, a.y);
      qa[c][2 * half + 1] = bf16x2_bits(b.x, b.y);
    }
  }
}

// Stages keys [first, first + kPrefillKeys) of k and v (row `key` at k_rows + key * stride; keys from
// `end` on zero-filled; key `skip`, where one is given, left alone for a copy of its own) into stage
// `slot` of `tiles`, by the block's `threads` threads, as one cp.async group.
template <int HD>
__device__ __forceinline__ void stage_kv(__nv_bfloat16* tiles, int slot, const __nv_bfloat16* k_rows, const __nv_bfloat16* v_rows,
                                         size_t stride, int first, int end, int threads, int skip = -1) {
  using Tile = PrefillTile<HD>;
  __nv_bfloat16* ks = tiles + (2 * slot) * Tile::kElements;
  __nv_bfloat16* vs = ks + Tile::kElements;
  for (int i = threadIdx.x; i < kPrefillKeys * (HD / 8); i += threads) {
    const int r = i / (HD / 8), piece = (i % (HD / 8)) * 8;
    const int key = first + r;
    if (key == skip) continue;
    const bool valid = key < end;
    const size_t at = valid ? static_cast<size_t>(key) * stride + piece : 0;
    cp_async_16_or_zero(ks + r * Tile::kStride + piece, k_rows + at, valid);
    cp_async_16_or_zero(vs + r * Tile::kStride + piece, v_rows + at, valid);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// One tile's scores (J tiles of 8 keys for rows g and g + 8) into probabilities against the running
// max m, with the running sums l and the output sums o moved to the new max. scaled(j, e, score)
// gives each score in the log2 domain, -inf where masked. Each lane's sums are its own columns';
// the row max is the quad's.
template <int J, int N, class Scaled>
__device__ __forceinline__ void online_softmax(float (&s)[J][4], float (&m)[2], float (&l)[2], float (&o)[N][4], Scaled scaled) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = scaled(j, e, s[j][e]);
      tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[j][e]);
    }
  }
  float base[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 2));
    const float m_new = fmaxf(m[r], tile_max[r]);
    base[r] = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet: every p is 0, not NaN
    const float correction = exp2f(m[r] - base[r]);
    l[r] *= correction;
#pragma unroll
    for (int n = 0; n < N; ++n) {
      o[n][2 * r] *= correction;
      o[n][2 * r + 1] *= correction;
    }
    m[r] = m_new;
  }
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = exp2f(s[j][e] - base[e >> 1]);
      sum[e >> 1] += s[j][e];
    }
  }
  l[0] += sum[0];
  l[1] += sum[1];
}

// o += p . v for 16 keys: p is two 8-key tiles of probabilities in the scores' accumulator layout
// (which is mma.sync's A fragment), v the keys' 16 staged rows from `v_rows` (taken by ldmatrix.trans).
template <int HD>
__device__ __forceinline__ void accumulate_pv(float (&o)[HD / 8][4], const float (&p0)[4], const float (&p1)[4],
                                              const __nv_bfloat16* v_rows, int lane) {
  const uint32_t pa[4] = {bf16x2_bits(p0[0], p0[1]), bf16x2_bits(p0[2], p0[3]), bf16x2_bits(p1[0], p1[1]), bf16x2_bits(p1[2], p1[3])};
  const int matrix = lane >> 3;
  const __nv_bfloat16* row = v_rows + ((matrix & 1) * 8 + (lane & 7)) * PrefillTile<HD>::kStride + (matrix >> 1) * 8;
#pragma unroll
  for (int c = 0; c < HD / 16; ++c) {
    const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(row + c * 16));
    uint32_t b[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(at));
    mma_bf16_16816(o[2 * c], pa, b[0], b[1]);
    mma_bf16_16816(o[2 * c + 1], pa, b[2], b[3]);
  }
}

template <int HD>
__device__ __forceinline__ void attention_prefill_heads(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const float* __restrict__ sinks, __nv_bfloat16* __restrict__ out, int rows, int first_pos, int heads, int kv_heads,
    int window, float scale) {
  using Tile = PrefillTile<HD>;
  constexpr int kChunks = HD / 16;  // k16 steps of q . k, and pairs of 8-wide output tiles of p . v
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char prefill_smem[];
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(prefill_smem);  // [stage][k | v][key][kStride]
  const int h = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * kPrefillRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int kvh = h / (heads / kv_heads);
  const size_t kn = static_cast<size_t>(kv_heads) * HD;
  const float scale_log2 = scale * kLog2e;

  // this warp's 16 rows of q as A fragments (bf16), one per k16 step
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  uint32_t qa[kChunks][4];
  q_fragments<HD>(row0 < rows ? q + (static_cast<size_t>(row0) * heads + h) * HD : nullptr,
                  row1 < rows ? q + (static_cast<size_t>(row1) * heads + h) * HD : nullptr, t, qa);

  const int last_row = min(rows, q0 + kPrefillRows) - 1;
  const int key_end = first_pos + last_row + 1;  // keys [0, key_end) exist for this tile
  const int lowest = window > 0 ? max(0, first_pos + q0 - window + 1) : 0;
  const int first_tile = lowest / kPrefillKeys, last_tile = (key_end - 1) / kPrefillKeys;
  auto stage = [&](int tile, int slot) {
    stage_kv<HD>(tiles, slot, k_cache + static_cast<size_t>(kvh) * HD, v_cache + static_cast<size_t>(kvh) * HD, kn,
                 tile * kPrefillKeys, key_end, 32 * kPrefillWarps);
  };

  float o[2 * kChunks][4];
#pragma unroll
  for (int n = 0; n < 2 * kChunks; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int pos[2] = {first_pos + row0, first_pos + row1};

  stage(first_tile, 0);
  for (int tile = first_tile; tile <= last_tile; ++tile) {
    const int slot = (tile - first_tile) & 1;
    if (tile < last_tile) {
      stage(tile + 1, slot ^ 1);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    __syncthreads();
    const __nv_bfloat16* ks = tiles + (2 * slot) * Tile::kElements;
    const __nv_bfloat16* vs = ks + Tile::kElements;
    const int k0 = tile * kPrefillKeys;

    float s[kPrefillKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kPrefillKeys / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int j = 0; j < kPrefillKeys / 8; ++j) {
        const __nv_bfloat16* kr = ks + (8 * j + g) * Tile::kStride + c * 16 + 2 * t;
        mma_bf16_16816(s[j], qa[c], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    }
    // the causal and window mask, in the log2 domain of the scaled scores
    online_softmax(s, m, l, o, [&](int j, int e, float score) {
      const int key = k0 + 8 * j + 2 * t + (e & 1), r = e >> 1;
      const bool seen = key <= pos[r] && (window == 0 || key > pos[r] - window);
      return seen ? score * scale_log2 : -INFINITY;
    });
#pragma unroll
    for (int kk = 0; kk < kPrefillKeys / 16; ++kk) accumulate_pv<HD>(o, s[2 * kk], s[2 * kk + 1], vs + 16 * kk * Tile::kStride, lane);
    __syncthreads();  // this slot is staged again two tiles on
  }

  const int row[2] = {row0, row1};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
    float keep = 1.0f;
    if (sinks != nullptr) {
      const float sink = sinks[h] * kLog2e;
      const float top = fmaxf(m[r], sink);
      keep = exp2f(m[r] - top);
      l[r] = l[r] * keep + exp2f(sink - top);
    }
    if (row[r] >= rows) continue;
    const float f = keep / l[r];
    __nv_bfloat16* dst = out + (static_cast<size_t>(row[r]) * heads + h) * HD + 2 * t;
#pragma unroll
    for (int n = 0; n < 2 * kChunks; ++n) {
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = bf16x2_bits(o[n][2 * r] * f, o[n][2 * r + 1] * f);
    }
  }
}

#define MOEFORGE_ATTENTION_PREFILL(HD)                                                                                   \
  extern "C" __global__ void __launch_bounds__(32 * kPrefillWarps, 1) attention_prefill_##HD(                              \
      const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache, \
      const float* __restrict__ sinks, __nv_bfloat16* __restrict__ out, int rows, int first_pos, int heads,             \
      int kv_heads, int window, float scale) {                                                                          \
    begin_after_previous_kernel();                                                                                      \
    attention_prefill_heads<HD>(q, k_cache, v_cache, sinks, out, rows, first_pos, heads, kv_heads, window, scale);      \
  }
MOEFORGE_ATTENTION_PREFILL(16)
MOEFORGE_ATTENTION_PREFILL(32)
MOEFORGE_ATTENTION_PREFILL(64)
MOEFORGE_ATTENTION_PREFILL(128)

// A decode step's attention with the q heads of a kv group as the rows of the tensor cores' tiles
// (GQA groups of 2 to 16 heads, head_dim up to 128): block (kv head, slice, token) stages its slice
// of the token's k and v rows kGroupKeys at a time by cp.async, two tiles deep, and scores every
// head of the group against each row it loads (mma.sync m16n8k16, the group's q rows padded to 16),
// so a kv row is read once for the group, not once per head. Each warp takes 16 keys of a tile with
// an online softmax of its own; the warps meet in shared memory; with one slice the block writes
// the output, else its part (max and sum in the log2 domain, the [head_dim] sums per head) and the
// block that finishes the (token, kv head)'s last slice (a ticket, left at zero) merges the parts
// with each head's sink. Grid: (kv_heads, slices, tokens), at most kGroupMaxSlices slices and
// groups of at most kGroupRows heads (the merge's scratch is sized for them); block:
// 32 * kGroupWarps threads; dynamic shared memory: GroupTile<HD>::kBytes.
constexpr int kGroupWarps = 4;
constexpr int kGroupKeys = 16 * kGroupWarps;
constexpr int kGroupRows = 16;  // an mma tile's rows: the most heads a group may have
constexpr int kGroupMaxSlices = 64;
// Blocks per SM the register budget is cut for: three fit an SM's shared memory on sm_90 and sm_100;
// sm_120's holds one (and its ptxas spilled under the tighter cap).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kGroupBlocksPerSm = 1;
#else
constexpr int kGroupBlocksPerSm = 3;
#endif

template <int HD>
struct GroupTile {
  static_assert(kGroupKeys == kPrefillKeys, "the staged tiles are the prompt's");
  static constexpr int kStaged = PrefillTile<HD>::kBytes;
  // once the keys are done, in the staged tiles' place: each warp's max and sum per row and [row][HD]
  // sums, then the slices' max and scale per (row, slice)
  static constexpr int kWarpsBytes = kGroupWarps * kGroupRows * (HD + 2) * 4;
  static constexpr int kSlicesBytes = 2 * kGroupRows * kGroupMaxSlices * 4;
  static constexpr int kBytes = kStaged > kWarpsBytes + kSlicesBytes ? kStaged : kWarpsBytes + kSlicesBytes;
};

template <int HD>
__device__ __forceinline__ void attention_decode_group(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ positions, const float* __restrict__ sinks, float* __restrict__ parts, int* __restrict__ tickets,
    __nv_bfloat16* __restrict__ out, int heads, int kv_heads, int context, int window, float scale) {
  using Tile = PrefillTile<HD>;
  constexpr int kChunks = HD / 16;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char group_smem[];
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(group_smem);  // [stage][k | v][key][kStride]
  __shared__ int finishing;
  const int kvh = blockIdx.x, split = blockIdx.y, splits = gridDim.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = heads / kv_heads;
  const int head0 = kvh * group;
  const int pos = positions[b];  // written before this step's launch (the last step's pick, or the host)
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int span = (pos - first + splits) / splits;  // ceil((pos - first + 1) / splits)
  const int begin = first + split * span, end = min(pos, begin + span - 1);  // empty where begin > end
  const size_t kn = static_cast<size_t>(kv_heads) * HD;
  const __nv_bfloat16* kb = k_cache + static_cast<size_t>(b) * context * kn + static_cast<size_t>(kvh) * HD;
  const __nv_bfloat16* vb = v_cache + static_cast<size_t>(b) * context * kn + static_cast<size_t>(kvh) * HD;
  const float scale_log2 = scale * kLog2e;
  auto stage = [&](int tile, int slot, int skip = -1) {
    stage_kv<HD>(tiles, slot, kb, vb, kn, begin + tile * kGroupKeys, end + 1, 32 * kGroupWarps, skip);
  };
  const int tiles_in_slice = end >= begin ? (end - begin) / kGroupKeys + 1 : 0;
  // The slice's first tile is copied before the wait, all but the token's own row: earlier steps wrote
  // every position before it, the previous kernel writes the token's, which gets a copy of its own after.
  const bool own_row_first = tiles_in_slice > 0 && end == pos && pos < begin + kGroupKeys;
  if (tiles_in_slice > 0) stage(0, 0, own_row_first ? pos : -1);
  wait_for_previous_kernel();
  if (own_row_first) {
    __nv_bfloat16* ks = tiles + (pos - begin) * Tile::kStride;
    for (int piece = threadIdx.x; piece < HD / 8; piece += 32 * kGroupWarps) {
      cp_async_16_or_zero(ks + 8 * piece, kb + static_cast<size_t>(pos) * kn + 8 * piece, true);
      cp_async_16_or_zero(ks + Tile::kElements + 8 * piece, vb + static_cast<size_t>(pos) * kn + 8 * piece, true);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");

  // the group's q rows g and g + 8 as A fragments (bf16), zero past the group
  uint32_t qa[kChunks][4];
  const float* qb = q + (static_cast<size_t>(b) * heads + head0) * HD;
  q_fragments<HD>(g < group ? qb + g * HD : nullptr, g + 8 < group ? qb + (g + 8) * HD : nullptr, t, qa);

  float o[2 * kChunks][4];
#pragma unroll
  for (int n = 0; n < 2 * kChunks; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int tile = 0; tile < tiles_in_slice; ++tile) {
    const int slot = tile & 1;
    if (tile + 1 < tiles_in_slice) {
      stage(tile + 1, slot ^ 1);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    __syncthreads();
    const __nv_bfloat16* ks = tiles + (2 * slot) * Tile::kElements + (16 * warp) * Tile::kStride;
    const __nv_bfloat16* vs = ks + Tile::kElements;
    const int k0 = begin + tile * kGroupKeys + 16 * warp;  // this warp's 16 keys
    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __nv_bfloat16* kr = ks + (8 * j + g) * Tile::kStride + c * 16 + 2 * t;
        mma_bf16_16816(s[j], qa[c], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    }
    online_softmax(s, m, l, o, [&](int j, int e, float score) {
      return k0 + 8 * j + 2 * t + (e & 1) <= end ? score * scale_log2 : -INFINITY;
    });
    accumulate_pv<HD>(o, s[0], s[1], vs, lane);  // the warp's 16 keys
    __syncthreads();  // this slot is staged again two tiles on
  }

  // the warps meet: each row's max, sum and [HD] sums per warp, in the staged tiles' place
  float* warp_max = reinterpret_cast<float*>(group_smem);        // [warp][row]
  float* warp_sum = warp_max + kGroupWarps * kGroupRows;         // [warp][row]
  float* warp_acc = warp_sum + kGroupWarps * kGroupRows;         // [warp][row][HD]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
    const int row = g + 8 * r;
    if (t == 0) {
      warp_max[warp * kGroupRows + row] = m[r];
      warp_sum[warp * kGroupRows + row] = l[r];
    }
#pragma unroll
    for (int n = 0; n < 2 * kChunks; ++n) {
      float* dst = warp_acc + (warp * kGroupRows + row) * HD + 8 * n + 2 * t;
      dst[0] = o[n][2 * r];
      dst[1] = o[n][2 * r + 1];
    }
  }
  __syncthreads();
  const size_t head_row0 = static_cast<size_t>(b) * heads + head0;
  // this block's (max, sum, sums) per row of the group, in the log2 domain
  auto block_row = [&](int row, float& top, float& total) {
    top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) top = fmaxf(top, warp_max[w * kGroupRows + row]);
    total = 0.0f;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) total += warp_sum[w * kGroupRows + row] * (top == -INFINITY ? 0.0f : exp2f(warp_max[w * kGroupRows + row] - top));
  };
  auto block_acc = [&](int row, int d, float top) {
    float numerator = 0.0f;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) {
      const float mw = warp_max[w * kGroupRows + row];
      numerator += warp_acc[(w * kGroupRows + row) * HD + d] * (top == -INFINITY ? 0.0f : exp2f(mw - top));
    }
    return numerator;
  };
  if (splits == 1) {
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
      const int row = i / HD, d = i - row * HD;
      float top, total;
      block_row(row, top, total);
      float keep = 1.0f;
      if (sinks != nullptr) {
        const float sink = sinks[head0 + row] * kLog2e;
        const float with_sink = fmaxf(top, sink);
        keep = top == -INFINITY ? 0.0f : exp2f(top - with_sink);
        total = total * keep + exp2f(sink - with_sink);
      }
      out[(head_row0 + row) * HD + d] = __float2bfloat16_rn(block_acc(row, d, top) * keep / total);
    }
    return;
  }
  for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
    const int row = i / HD, d = i - row * HD;
    float top, total;
    block_row(row, top, total);
    float* mine = parts + ((head_row0 + row) * splits + split) * (HD + 2);
    if (d == 0) {
      mine[0] = top;
      mine[1] = total;
    }
    mine[2 + d] = block_acc(row, d, top);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) finishing = atomicAdd(tickets + static_cast<size_t>(b) * kv_heads + kvh, 1) == splits - 1;
  __syncthreads();
  if (!finishing) return;
  __threadfence();
  // the merge: every slice's max and sum per row first (one load each, all in flight), then the sums
  float* slice_max = warp_acc + kGroupWarps * kGroupRows * HD;  // [row][slice]
  float* slice_scale = slice_max + kGroupRows * kGroupMaxSlices;  // [row][slice]: 2^(max - top), then / denominator
  for (int i = threadIdx.x; i < group * splits; i += blockDim.x) {
    const int row = i / splits, sl = i - row * splits;
    const float* part = parts + ((head_row0 + row) * splits + sl) * (HD + 2);
    slice_max[row * kGroupMaxSlices + sl] = __ldcg(part);
    slice_scale[row * kGroupMaxSlices + sl] = __ldcg(part + 1);
  }
  __syncthreads();
  if (threadIdx.x < group) {
    const int row = threadIdx.x;
    float top = sinks != nullptr ? sinks[head0 + row] * kLog2e : -INFINITY;
    for (int sl = 0; sl < splits; ++sl) top = fmaxf(top, slice_max[row * kGroupMaxSlices + sl]);
    float denominator = sinks != nullptr ? exp2f(sinks[head0 + row] * kLog2e - top) : 0.0f;
    for (int sl = 0; sl < splits; ++sl) {
      const float mx = slice_max[row * kGroupMaxSlices + sl];
      const float f = mx == -INFINITY ? 0.0f : exp2f(mx - top);
      denominator += slice_scale[row * kGroupMaxSlices + sl] * f;
      slice_scale[row * kGroupMaxSlices + sl] = f;
    }
    for (int sl = 0; sl < splits; ++sl) slice_scale[row * kGroupMaxSlices + sl] /= denominator;
  }
  __syncthreads();
  // each thread's outputs side by side, so one slice's loads for all of them are in flight together
  constexpr int kItems = kGroupRows * HD / (32 * kGroupWarps);
  float numerator[kItems];
  const float* part[kItems];
  int scale_at[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = threadIdx.x + j * 32 * kGroupWarps;
    const int row = min(i / HD, group - 1), d = i % HD;  // rows past the group: the last row's, not stored
    part[j] = parts + (head_row0 + row) * splits * (HD + 2) + 2 + d;
    scale_at[j] = row * kGroupMaxSlices;
    numerator[j] = 0.0f;
  }
#pragma unroll 2
  for (int sl = 0; sl < splits; ++sl) {
#pragma unroll
    for (int j = 0; j < kItems; ++j) numerator[j] += __ldcg(part[j] + sl * (HD + 2)) * slice_scale[scale_at[j] + sl];
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = threadIdx.x + j * 32 * kGroupWarps;
    if (i < group * HD) out[head_row0 * HD + i] = __float2bfloat16_rn(numerator[j]);
  }
  if (threadIdx.x == 0) tickets[static_cast<size_t>(b) * kv_heads + kvh] = 0;  // for the next layer and step
}

#define MOEFORGE_ATTENTION_DECODE_GROUP(HD)                                                                \
  MOEFORGE_DECODE_ATTENTION_ENTRY(attention_decode_group_##HD, attention_decode_group<HD>,                 \
                                  (32 * kGroupWarps, kGroupBlocksPerSm))
MOEFORGE_ATTENTION_DECODE_GROUP(16)
MOEFORGE_ATTENTION_DECODE_GROUP(32)
MOEFORGE_ATTENTION_DECODE_GROUP(64)
MOEFORGE_ATTENTION_DECODE_GROUP(128)

// out[b][:] = in[row][:] for each of gridDim.x rows b: the prompt's last normed row for every sequence's LM head.
extern "C" __global__ void repeat_row_bf16(const __nv_bfloat16* __restrict__ in, int row, __nv_bfloat16* __restrict__ out, int n) {
  begin_after_previous_kernel();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[static_cast<size_t>(blockIdx.x) * n + i] = in[static_cast<size_t>(row) * n + i];
}

// The residual add and the next norm in one: x[b] += y[b], then out[b] = bf16(w * x[b] / rms(x[b])).
extern "C" __global__ void __launch_bounds__(kRowThreads) add_f32_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                                                    const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                                                                    int n, float eps) {
  begin_after_previous_kernel();
  add_then_norm<true>(x, y, w, out, n, eps);
}

extern "C" __global__ void __launch_bounds__(kRowThreads) add_bf16_rms_norm(float* __restrict__ x, const __nv_bfloat16* __restrict__ y,
                                                                     const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                                                                     int n, float eps) {
  begin_after_previous_kernel();
  add_then_norm<true>(x, y, w, out, n, eps);
}

// A 64-bit mix of (seed, step, token, index) to a uniform in (0, 1): counter-based, so a graph replay
// draws fresh numbers from the step counter alone.
__device__ __forceinline__ float uniform01(unsigned long long seed, unsigned long long step, int b, int i) {
  unsigned long long z = seed ^ (step * 0x9E3779B97F4A7C15ull) ^ (static_cast<unsigned long long>(b) << 40) ^ i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<float>(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

// A logit's bits in an order that compares as the values do; NaN is 0, below every number.
__device__ __forceinline__ unsigned logit_key(float v) {
  if (isnan(v)) return 0u;
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_logit(unsigned k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

__device__ __forceinline__ unsigned long long pick_key(float v, int i) {
  return (static_cast<unsigned long long>(logit_key(v)) << 32) | static_cast<unsigned>(0x7fffffff - i);
}

// Whether token i (key k) is inside a sequence's cut (cut[0], cut[1]): above the cut's key, or equal
// to it at an index no later than the cut's.
__device__ __forceinline__ bool inside_cut(unsigned k, int i, unsigned cut_key, int cut_index) {
  return k > cut_key || (k == cut_key && i <= cut_index);
}

// ---------------------------------------------------------------------------------------------
// Top-k and top-p on the device. The tokens a sequence may sample are a prefix of its logits in
// the host sampler's order (value descending, then index ascending): top-k keeps the first k,
// top-p then the shortest prefix of those whose share of their softmax(logits / T) mass reaches p.
// sample_cut writes where the prefix ends as (key, index) for inside_cut, and pick_next draws
// among the tokens inside. One cluster of kCutBlocks blocks per sequence (grid (kCutBlocks, batch)),
// each block a span of the row, their sums met in distributed shared memory; each selection is a
// radix select over the keys, 8 bits a pass, counting tokens (top-k) or summing fixed-point masses
// (top-p: integers, so the cut does not depend on the order of the adds). Every block takes the same
// decisions from the same sums.
// ---------------------------------------------------------------------------------------------
constexpr int kCutBlocks = 8;
constexpr int kCutThreads = 512;
constexpr int kCutWarps = kCutThreads / 32;
constexpr float kMassOne = 1099511627776.0f;  // 2^40: a mass exp((l - max) / T) <= 1, in 40 fraction bits

// Logits crowd into a few buckets of the first passes (their sign and exponent bits), so a warp adds
// its lanes of one bucket together first, and pairs of warps keep histograms of their own.
constexpr int kCutHistograms = kCutWarps / 2;

struct CutScratch {
  unsigned long long histograms[kCutHistograms][256];
  unsigned long long buckets[256];  // this block's, read by the cluster
  unsigned long long totals[256];   // the cluster's
  unsigned long long warp_totals[kCutWarps];
  unsigned long long partial;       // this block's share of a cluster-wide sum or maximum, read by the cluster
  unsigned prefix;
  unsigned long long above, at;
  int index;                        // rank 0's: the tie the cluster found
};

// Calls f(i, logit) for every index of [begin, end), in whole-block rounds whose kCutLoads loads per
// thread are all issued before the first is used (one round's latency, not kCutLoads); every thread
// calls f the same number of times (with i >= end, a NaN, past the end), so f may use warp-wide steps.
constexpr int kCutLoads = 16;
template <class F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ row, int begin, int end, F f) {
  for (int base = begin; base < end; base += kCutLoads * blockDim.x) {
    float v[kCutLoads];
#pragma unroll
    for (int u = 0; u < kCutLoads; ++u) {
      const int i = base + u * blockDim.x + threadIdx.x;
      v[u] = i < end ? row[i] : __int_as_float(0x7fffffff);
    }
#pragma unroll
    for (int u = 0; u < kCutLoads; ++u) f(base + u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x), v[u]);
  }
}

// The cluster's sum (or maximum) of v, in every thread of every block.
template <bool kMax>
__device__ __forceinline__ unsigned long long cut_cluster_reduce(unsigned long long v, CutScratch& s) {
  namespace cg = cooperative_groups;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const unsigned long long o = __shfl_xor_sync(kFullMask, v, d);
    v = kMax ? max(v, o) : v + o;
  }
  if ((threadIdx.x & 31) == 0) s.warp_totals[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = kMax ? max(v, s.warp_totals[w]) : v + s.warp_totals[w];
    s.partial = v;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  v = 0;
  for (int r = 0; r < kCutBlocks; ++r) {
    const unsigned long long o = *cluster.map_shared_rank(&s.partial, r);
    v = kMax ? max(v, o) : v + o;
  }
  cluster.sync();  // every block has read every partial before one is written again
  return v;
}

// Among the tokens admit(i, key) lets in, the largest key K whose tokens at or above it weigh at
// least target (1 <= target <= their total weight), the weight of those strictly above K, and the
// weight of those at K.
template <class Admit, class Weight>
__device__ __forceinline__ void select_cut_key(const float* __restrict__ row, int begin, int end, unsigned long long target,
                                               Admit admit, Weight weight, CutScratch& s, unsigned& key,
                                               unsigned long long& above, unsigned long long& at) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  unsigned prefix = 0;
  unsigned long long heavier = 0;  // weight of the admitted tokens above the prefix's range
  unsigned long long* histogram = s.histograms[(threadIdx.x >> 5) % kCutHistograms];
  const int lane = threadIdx.x & 31;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < kCutHistograms * 256; d += blockDim.x) s.histograms[d / 256][d % 256] = 0;
    __syncthreads();
    const unsigned high = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
    for_each_logit(row, begin, end, [&](int i, float v) {
      const unsigned k = logit_key(v);
      const bool counted = i < end && (k & high) == prefix && admit(i, k);
      if (__any_sync(kFullMask, counted)) {
        const unsigned long long w = counted ? weight(v) : 0ull;
        // the lanes of one bucket (the uncounted ones apart), their weights summed in two 32-bit
        // halves (a weight is below 2^41: 20-bit low parts, and the rest), one add by the first
        const unsigned group = __match_any_sync(kFullMask, counted ? static_cast<int>((k >> shift) & 255) : -1);
        const unsigned low = __reduce_add_sync(group, static_cast<unsigned>(w & 0xfffffu));
        const unsigned rest = __reduce_add_sync(group, static_cast<unsigned>(w >> 20));
        if (counted && lane == __ffs(group) - 1) {
          atomicAdd(&histogram[(k >> shift) & 255], (static_cast<unsigned long long>(rest) << 20) + low);
        }
      }
    });
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      unsigned long long total = 0;
      for (int h = 0; h < kCutHistograms; ++h) total += s.histograms[h][d];
      s.buckets[d] = total;
    }
    cluster.sync();
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      unsigned long long total = 0;
      for (int r = 0; r < kCutBlocks; ++r) total += *cluster.map_shared_rank(&s.buckets[d], r);
      s.totals[d] = total;
    }
    cluster.sync();  // every block has read every block's buckets before the next pass writes them
    if (threadIdx.x < 32) {  // warp 0 walks the buckets from the top; lane l holds 255 - 8l down to 248 - 8l
      unsigned long long mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += s.totals[255 - 8 * lane - j];
      unsigned long long before = mine;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const unsigned long long o = __shfl_up_sync(kFullMask, before, d);
        if (lane >= d) before += o;
      }
      before = heavier + before - mine;
      const unsigned lanes = __ballot_sync(kFullMask, before < target && before + mine >= target);
      if (lane == (lanes == 0 ? 31 : __ffs(lanes) - 1)) {
        for (int j = 0; j < 8; ++j) {
          const int d = 255 - 8 * lane - j;
          if (before + s.totals[d] >= target || j == 7) {
            s.prefix = prefix | (static_cast<unsigned>(d) << shift);
            s.above = before;
            s.at = s.totals[d];
            break;
          }
          before += s.totals[d];
        }
      }
    }
    __syncthreads();
    prefix = s.prefix;
    heavier = s.above;
  }
  key = prefix;
  above = heavier;
  at = s.at;
  __syncthreads();
}

// The index of the m-th token (1-based, in index order over the whole row) that admit lets in with
// key `key`; the last index of the row if there is none.
template <class Admit>
__device__ __forceinline__ int nth_cut_tie(const float* __restrict__ row, int vocab, int begin, int end, unsigned key, long long m,
                                           Admit admit, CutScratch& s) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) s.index = vocab - 1;
  const int chunk = (end - begin + blockDim.x - 1) / blockDim.x;
  const int first = begin + threadIdx.x * chunk, last = min(end, first + chunk);
  long long count = 0;
  for (int i = first; i < last; ++i) count += logit_key(row[i]) == key && admit(i, key);
  // exclusive scan of the counts over the threads, in thread order
  long long before = count;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long o = __shfl_up_sync(kFullMask, before, d);
    if (lane >= d) before += o;
  }
  if (lane == 31) s.warp_totals[warp] = static_cast<unsigned long long>(before);
  __syncthreads();
  before -= count;
  for (int w = 0; w < warp; ++w) before += static_cast<long long>(s.warp_totals[w]);
  if (threadIdx.x == blockDim.x - 1) s.partial = static_cast<unsigned long long>(before + count);  // the block's ties
  cluster.sync();
  for (int r = 0; r < static_cast<int>(cluster.block_rank()); ++r) before += static_cast<long long>(*cluster.map_shared_rank(&s.partial, r));
  if (before < m && before + count >= m) {
    for (int i = first; i < last; ++i) {
      if (logit_key(row[i]) == key && admit(i, key) && ++before == m) {
        *cluster.map_shared_rank(&s.index, 0) = i;
        break;
      }
    }
  }
  cluster.sync();
  const int index = *cluster.map_shared_rank(&s.index, 0);
  cluster.sync();  // read before rank 0 resets it
  return index;
}

extern "C" __global__ void __cluster_dims__(kCutBlocks, 1, 1) __launch_bounds__(kCutThreads, 1)
    sample_cut(const float* __restrict__ logits, int vocab, float temperature, int top_k, float top_p, unsigned* __restrict__ cut) {
  begin_after_previous_kernel();
  __shared__ CutScratch s;
  const int b = blockIdx.y;
  const float* row = logits + static_cast<size_t>(b) * vocab;
  const int rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
  const int span = (vocab + kCutBlocks - 1) / kCutBlocks;
  const int begin = min(vocab, rank * span), end = min(vocab, begin + span);
  // how many numbers the row holds, and its largest
  unsigned long long numbers = 0;
  unsigned top = 0;
  for_each_logit(row, begin, end, [&](int, float v) {  // past the end is NaN: key 0
    const unsigned k = logit_key(v);
    numbers += k != 0u;
    top = max(top, k);
  });
  numbers = cut_cluster_reduce<false>(numbers, s);
  top = static_cast<unsigned>(cut_cluster_reduce<true>(top, s));
  unsigned cut_key = 1u;  // every number
  int cut_index = vocab - 1;
  auto number = [](int, unsigned k) { return k != 0u; };
  if (top_k > 0 && static_cast<unsigned long long>(top_k) < numbers) {
    unsigned long long above, ties;
    select_cut_key(row, begin, end, static_cast<unsigned long long>(top_k), number, [](float) { return 1ull; }, s, cut_key, above, ties);
    const unsigned long long wanted = top_k - above;  // of the ties at the key, in index order
    if (wanted < ties) cut_index = nth_cut_tie(row, vocab, begin, end, cut_key, static_cast<long long>(wanted), number, s);
  }
  if (top_p < 1.0f && numbers > 0) {
    const unsigned k_key = cut_key;
    const int k_index = cut_index;
    auto kept = [=](int i, unsigned k) { return k != 0u && inside_cut(k, i, k_key, k_index); };
    const float top_logit = key_logit(top), per_logit = 1.4426950408889634f / temperature;
    auto mass = [=](float v) { return static_cast<unsigned long long>(exp2f((v - top_logit) * per_logit) * kMassOne); };
    unsigned long long total = 0;
    for_each_logit(row, begin, end, [&](int i, float v) {
      if (kept(i, logit_key(v))) total += mass(v);
    });
    total = cut_cluster_reduce<false>(total, s);
    const unsigned long long target =
        max(1ull, min(total, static_cast<unsigned long long>(ceil(static_cast<double>(top_p) * static_cast<double>(total)))));
    unsigned long long above, at;
    select_cut_key(row, begin, end, target, kept, mass, s, cut_key, above, at);
    // every tie weighs the same: the fewest of them that carry the rest of the target (a 64-bit or
    // double division would be a call with a stack frame; the float quotient, corrected, is exact)
    const unsigned long long each = mass(key_logit(cut_key)), rest = target - above;
    unsigned long long ties = each == 0 ? 1 : static_cast<unsigned long long>(ceilf(__fdividef(static_cast<float>(rest), static_cast<float>(each))));
    if (each != 0) {
      while (ties * each < rest) ++ties;
      while (ties > 1 && (ties - 1) * each >= rest) --ties;
    }
    ties = max(1ull, ties);
    if (each != 0 && ties < at / each) {
      cut_index = nth_cut_tie(row, vocab, begin, end, cut_key, static_cast<long long>(ties), kept, s);
    } else if (cut_key != k_key) {  // every tie at the key kept (at the top-k cut's key, its index stands)
      cut_index = vocab - 1;
    }
  }
  if (rank == 0 && threadIdx.x == 0) {
    cut[2 * b] = cut_key;
    cut[2 * b + 1] = static_cast<unsigned>(cut_index);
  }
}

// The next token of each sequence: the first maximum of the logits (temperature 0), or of
// logits / T + Gumbel noise (an exact draw from softmax(logits / T)) among the tokens inside the
// sequence's cut (all of them when cut is null); NaN never wins. Each block
// takes a slice of the row and offers its best as one 64-bit key (the value's order-preserving bits,
// then the complement of its index, so equal values go to the lower index) to an atomic max; the
// token's last block (by ticket) reads the winner and does the step's bookkeeping: next[b] is the
// token, history[b][step] keeps it, positions[b] advances; it leaves the key and the ticket zero for
// the next replay. Grid: (blocks per row, tokens); block: 256 threads.
extern "C" __global__ void __launch_bounds__(256) pick_next(const float* __restrict__ logits, int vocab, float temperature,
                                                            unsigned long long seed, const unsigned* __restrict__ cut,
                                                            int* __restrict__ next,
                                                            int* __restrict__ positions, int* __restrict__ step,
                                                            int* __restrict__ history, int max_steps,
                                                            unsigned long long* __restrict__ best, int* __restrict__ tickets) {
  begin_after_previous_kernel();
  __shared__ unsigned long long block_best[8];
  __shared__ int is_last;
  const int b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned long long s = static_cast<unsigned long long>(*step);
  const float* row = logits + static_cast<size_t>(b) * vocab;
  const int per_block = (vocab + gridDim.x - 1) / gridDim.x;
  const int begin = blockIdx.x * per_block, end = min(vocab, begin + per_block);
  const unsigned cut_key = cut != nullptr ? cut[2 * b] : 0u;
  const int cut_index = cut != nullptr ? static_cast<int>(cut[2 * b + 1]) : vocab;
  unsigned long long key = 0;  // below every real key: an all-NaN slice offers nothing
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float x = row[i];
    if (!inside_cut(logit_key(x), i, cut_key, cut_index)) continue;
    if (temperature > 0.0f) x = x / temperature - __logf(-__logf(uniform01(seed, s, b, i)));
    if (!isnan(x)) key = max(key, pick_key(x, i));
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) key = max(key, __shfl_xor_sync(kFullMask, key, d));
  if (lane == 0) block_best[warp] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (blockDim.x >> 5); ++w) key = max(key, block_best[w]);
    atomicMax(best + b, key);
    __threadfence();
    is_last = atomicAdd(tickets + b, 1) == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (is_last && threadIdx.x == 0) {
    __threadfence();
    const unsigned long long won = atomicExch(best + b, 0ull);
    tickets[b] = 0;
    const int at = won == 0 ? 0 : 0x7fffffff - static_cast<int>(won & 0xffffffffull);  // every logit NaN: token 0
    next[b] = at;
    if (s < static_cast<unsigned long long>(max_steps)) history[static_cast<size_t>(b) * max_steps + s] = at;
    positions[b] += 1;
  }
}

// After every sequence's pick: the step counter advances once. Grid 1, block 1.
extern "C" __global__ void end_step(int* __restrict__ step) {
  begin_after_previous_kernel();
  *step += 1;
}

// Random weights made on the device (the built-in model): element i of a tensor is
// mean + std * N(0, 1), the normal drawn by Box-Muller from two counter-based uniforms of (seed, i),
// so a tensor's values depend on its seed alone. Grid-stride.
extern "C" __global__ void fill_normal_bf16(__nv_bfloat16* __restrict__ out, long long n, unsigned long long seed, float mean,
                                            float std) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float u1 = uniform01(seed, 0, 0, static_cast<int>(i)) , u2 = uniform01(seed, 1 + (i >> 31), 1, static_cast<int>(i));
    out[i] = __float2bfloat16_rn(mean + std * sqrtf(-2.0f * __logf(u1)) * __cosf(6.283185307f * u2));
  }
}

extern "C" __global__ void fill_normal_f32(float* __restrict__ out, long long n, unsigned long long seed, float mean, float std) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float u1 = uniform01(seed, 0, 0, static_cast<int>(i)), u2 = uniform01(seed, 1 + (i >> 31), 1, static_cast<int>(i));
    out[i] = mean + std * sqrtf(-2.0f * __logf(u1)) * __cosf(6.283185307f * u2);
  }
}
