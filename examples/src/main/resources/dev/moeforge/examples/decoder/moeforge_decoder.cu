// moeforge_decoder.cu: the decoder's own kernels around the DSL's (linear projections, router,
// experts): embedding, RMSNorm, q/k norm with RoPE and the KV cache write, attention over the
// cache, residual adds, and the next token's pick. Sizes are arguments, so one build serves every
// model. The residual stream is FP32; what a DSL kernel reads is bf16; the KV cache is bf16.
// Positions live on the device and advance inside the step, so one CUDA graph serves every step.
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
__device__ __forceinline__ void begin_after_previous_kernel() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
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

// RoPE's cos and sin of pair i at position pos (NeoX pairs i, i + head_dim/2), times `scaling`:
// the angle inv_freq[i] * pos in FP32 as transformers computes it, reduced to [-pi, pi] in FP64
// (exactly enough), so the fast sine needs no slow path.
__device__ __forceinline__ void rope_cos_sin(const float* __restrict__ inv_freq, int i, int pos, float scaling, float& c,
                                             float& s) {
  const float angle = inv_freq[i] * static_cast<float>(pos);
  float sn, cs;
  __sincosf(static_cast<float>(remainder(static_cast<double>(angle), 6.283185307179586)), &sn, &cs);
  c = cs * scaling;
  s = sn * scaling;
}

// A token's fused q, k, v row [(heads + 2 kv_heads) * head_dim] (FP32, from the qkv projection)
// under OLMoE's norm, which spans every head: RMSNorm over the whole q and the whole k, the clamp to
// +-clip (clip > 0), RoPE at the token's position, then q to q_out (FP32) and k, v to the cache at
// the position. Grid: tokens; block: kRowThreads threads (the row at most kRowThreads * kPerThread
// values); dynamic shared memory: the row as floats.
extern "C" __global__ void __launch_bounds__(kRowThreads) qk_norm_rope_cache(
    const float* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, float clip, float eps,
    const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling, float* __restrict__ q_out,
    __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads, int kv_heads, int head_dim,
    int context) {
  begin_after_previous_kernel();
  extern __shared__ float row[];
  __shared__ float scratch[32];
  const int b = blockIdx.x;
  const int qn = heads * head_dim, kn = kv_heads * head_dim, n = qn + 2 * kn;
  {
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      v[j] = i < n ? qkv[static_cast<size_t>(b) * n + i] : 0.0f;
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
  const size_t at = (static_cast<size_t>(b) * context + pos) * kn;
  for (int i = threadIdx.x; i < kn; i += blockDim.x) {
    k_cache[at + i] = __float2bfloat16_rn(k[i]);
    v_cache[at + i] = __float2bfloat16_rn(v[i]);
  }
}

// The same one head per block, for every other model (per-head q/k norm with a [head_dim] weight
// where norm_mode is 1, Qwen3; none where 0): block (h, b) takes head h of the token's fused row
// (q heads, then k heads, then v heads), one value per thread. Block: head_dim rounded up to whole
// warps (at most 256 threads).
extern "C" __global__ void __launch_bounds__(256) qk_norm_rope_cache_heads(
    const float* __restrict__ qkv, const float* __restrict__ q_norm, const float* __restrict__ k_norm, int norm_mode,
    float eps, const int* __restrict__ positions, const float* __restrict__ inv_freq, float scaling,
    float* __restrict__ q_out, __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int heads,
    int kv_heads, int head_dim, int context) {
  begin_after_previous_kernel();
  __shared__ float head[256];
  __shared__ float scratch[32];
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const bool in = d < head_dim;
  const int n = (heads + 2 * kv_heads) * head_dim;
  const float v = in ? qkv[static_cast<size_t>(b) * n + static_cast<size_t>(h) * head_dim + d] : 0.0f;
  const int pos = positions[b];
  const int kn = kv_heads * head_dim;
  if (h >= heads + kv_heads) {  // a v head: to the cache as it is
    if (in) v_cache[(static_cast<size_t>(b) * context + pos) * kn + (h - heads - kv_heads) * head_dim + d] = __float2bfloat16_rn(v);
    return;
  }
  float x = v;
  if (norm_mode == 1) {
    const float r = rsqrtf(block_sum(v * v, scratch) / head_dim + eps);
    x = in ? (h < heads ? q_norm : k_norm)[d] * (v * r) : 0.0f;
  }
  head[d] = x;
  __syncthreads();
  if (!in) return;
  const int half = head_dim / 2;
  float c, s;
  rope_cos_sin(inv_freq, d < half ? d : d - half, pos, scaling, c, s);
  const float roped = d < half ? head[d] * c - head[d + half] * s : head[d] * c + head[d - half] * s;
  if (h < heads) {
    q_out[(static_cast<size_t>(b) * heads + h) * head_dim + d] = roped;
  } else {
    k_cache[(static_cast<size_t>(b) * context + pos) * kn + (h - heads) * head_dim + d] = __float2bfloat16_rn(roped);
  }
}

// Attention of one (token, head) over the token's cache [context][kv_heads][head_dim], positions
// max(0, pos - window + 1) .. pos (window 0: all), GQA (head h reads kv head h / (heads /
// kv_heads)), scores scaled by `scale`, softmax in FP32 with the head's sink logit in the
// denominator where `sinks` is given (gpt-oss); each warp of a block keeps an online softmax over
// every kAttnWarps-th position of its slice.
constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 256;
// Attention split over blocks (for long contexts): block (h, split, b) takes its slice of the
// token's positions (the window's positions cut into gridDim.y slices of equal length), keeps an
// online softmax over it (as described above), and writes its part (max, sum, [head_dim] sums)
// to `parts`; attention_merge then combines a head's parts with its sink. An empty slice writes
// max -inf and sum 0. Grid: (heads, splits, tokens); block: 32 * kAttnWarps threads.
extern "C" __global__ void __launch_bounds__(32 * kAttnWarps) attention_split(
    const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
    const int* __restrict__ positions, float* __restrict__ parts, int heads, int kv_heads, int head_dim, int context,
    int window, float scale) {
  begin_after_previous_kernel();
  constexpr int kPerLane = kMaxHeadDim / 32;
  __shared__ float part_max[kAttnWarps], part_sum[kAttnWarps];
  __shared__ float part_acc[kAttnWarps][kMaxHeadDim];
  const int h = blockIdx.x, split = blockIdx.y, splits = gridDim.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (heads / kv_heads);
  const int pos = positions[b];
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int span = (pos - first + splits) / splits;  // ceil((pos - first + 1) / splits)
  const int begin = first + split * span, end = min(pos, begin + span - 1);
  const float* qh = q + (static_cast<size_t>(b) * heads + h) * head_dim;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    qv[j] = d < head_dim ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const size_t stride = static_cast<size_t>(kv_heads) * head_dim;
  const __nv_bfloat16* kb = k_cache + static_cast<size_t>(b) * context * stride + kvh * head_dim;
  const __nv_bfloat16* vb = v_cache + static_cast<size_t>(b) * context * stride + kvh * head_dim;
  for (int t = begin + warp; t <= end; t += kAttnWarps) {
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < head_dim) dot += qv[j] * __bfloat162float(kb[t * stride + d]);
    }
    const float sc = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, sc);
    const float correction = __expf(m - m_new);
    const float p = __expf(sc - m_new);
    l = l * correction + p;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < head_dim ? p * __bfloat162float(vb[t * stride + d]) : 0.0f);
    }
    m = m_new;
  }
  if (lane == 0) {
    part_max[warp] = m;
    part_sum[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < head_dim) part_acc[warp][d] = acc[j];
  }
  __syncthreads();
  float block_max = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) block_max = fmaxf(block_max, part_max[w]);
  float* out = parts + ((static_cast<size_t>(b) * heads + h) * splits + split) * (head_dim + 2);
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (part_sum[w] > 0.0f) sum += part_sum[w] * __expf(part_max[w] - block_max);
    }
    out[0] = block_max;
    out[1] = sum;
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float numerator = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (part_sum[w] > 0.0f) numerator += part_acc[w][d] * __expf(part_max[w] - block_max);
    }
    out[2 + d] = numerator;
  }
}

// A head's parts from attention_split, merged with its sink (where given) into the bf16 output.
// Grid: (heads, tokens); block: head_dim threads.
extern "C" __global__ void attention_merge(const float* __restrict__ parts, int splits, const float* __restrict__ sinks,
                                           __nv_bfloat16* __restrict__ out, int heads, int head_dim) {
  begin_after_previous_kernel();
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const float* p = parts + (static_cast<size_t>(b) * heads + h) * splits * (head_dim + 2);
  float total_max = sinks != nullptr ? sinks[h] : -INFINITY;
  for (int s = 0; s < splits; ++s) total_max = fmaxf(total_max, p[s * (head_dim + 2)]);
  float denominator = sinks != nullptr ? __expf(sinks[h] - total_max) : 0.0f;
  float numerator = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* part = p + s * (head_dim + 2);
    if (part[1] > 0.0f) {
      const float f = __expf(part[0] - total_max);
      denominator += part[1] * f;
      numerator += part[2 + d] * f;
    }
  }
  if (d < head_dim) out[(static_cast<size_t>(b) * heads + h) * head_dim + d] = __float2bfloat16_rn(numerator / denominator);
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

// The next token of each sequence: the first maximum of the logits (temperature 0), or of
// logits / T + Gumbel noise (an exact draw from softmax(logits / T)); NaN never wins. Each block
// takes a slice of the row and offers its best as one 64-bit key (the value's order-preserving bits,
// then the complement of its index, so equal values go to the lower index) to an atomic max; the
// token's last block (by ticket) reads the winner and does the step's bookkeeping: next[b] is the
// token, history[b][step] keeps it, positions[b] advances; it leaves the key and the ticket zero for
// the next replay. Grid: (blocks per row, tokens); block: 256 threads.
__device__ __forceinline__ unsigned long long pick_key(float v, int i) {
  const unsigned u = __float_as_uint(v);
  const unsigned ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | static_cast<unsigned>(0x7fffffff - i);
}

extern "C" __global__ void __launch_bounds__(256) pick_next(const float* __restrict__ logits, int vocab, float temperature,
                                                            unsigned long long seed, int* __restrict__ next,
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
  unsigned long long key = 0;  // below every real key: an all-NaN slice offers nothing
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float x = row[i];
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
