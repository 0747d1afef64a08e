// late_writer.cu: a kernel that writes the next kernel's input late. It lets the next kernel of the
// graph launch at once (programmatic dependent launch), waits `delay_ns` on the global timer, then
// copies `words` 32-bit words from src to dst: a kernel launched after it that reads dst before its
// own griddepcontrol.wait, or whose loads of dst the compiler moved above that wait, reads the old dst.
#include <stdint.h>

extern "C" __global__ void late_copy(const uint32_t* __restrict__ src, uint32_t* __restrict__ dst, long long words,
                                     long long delay_ns) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < static_cast<unsigned long long>(delay_ns));
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// The check's own check: copies src to dst reading src before its griddepcontrol.wait, on purpose
// (a volatile load, so that it stays there). Launched overlapping late_copy, it must see the old src.
__device__ __forceinline__ void copy_reading_early(const uint32_t* src, uint32_t* dst, long long words) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const uint32_t v = i < words ? __ldcv(src + i) : 0u;
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (i < words) dst[i] = v;
}

extern "C" __global__ void early_copy(const uint32_t* src, uint32_t* dst, long long words) {
  copy_reading_early(src, dst, words);
}

// The same in clusters of 8 blocks, as router_cluster launches.
extern "C" __global__ void __cluster_dims__(8, 1, 1) early_copy_cluster(const uint32_t* src, uint32_t* dst, long long words) {
  copy_reading_early(src, dst, words);
}
