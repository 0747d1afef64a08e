// Hand-written helper kernels of MoeForge's benchmark: a read-bandwidth probe and a device-side
// random fill (so gigabytes of weights need not cross PCIe, and are never zeros).
#include <stdint.h>

// Reads n16 16-byte words once, four loads in flight per thread, grid-stride. The XOR of all
// words is written per block so the loads cannot be optimised away; it costs one store a block.
extern "C" __global__ void __launch_bounds__(512) read_bandwidth(const uint4* __restrict__ src, long long n16,
                                                                  unsigned int* __restrict__ sink) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldcs(src + i);
    const uint4 b = __ldcs(src + i + stride);
    const uint4 c = __ldcs(src + i + 2 * stride);
    const uint4 d = __ldcs(src + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldcs(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  __shared__ uint32_t block_acc;
  if (threadIdx.x == 0) block_acc = 0;
  __syncthreads();
  atomicXor(&block_acc, acc);
  __syncthreads();
  if (threadIdx.x == 0) sink[blockIdx.x] = block_acc;
}

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  // splitmix64 finaliser: a well-distributed hash of the element index and seed
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 32);
}

// n bf16 values uniform in [-scale, scale): the hash of (seed, index) mapped to a float.
extern "C" __global__ void fill_uniform_bf16(unsigned short* __restrict__ dst, long long n, unsigned long long seed,
                                             float scale) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = (mix(seed * 0x100000001b3ull + static_cast<uint64_t>(i)) >> 8) * (1.0f / 16777216.0f);
    const float v = (2.0f * u - 1.0f) * scale;
    dst[i] = static_cast<unsigned short>(__float_as_uint(v) >> 16);  // truncation is fine for benchmark data
  }
}
