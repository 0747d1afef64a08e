// late_writer.cu: a kernel that writes the next kernel's input late. It lets the next kernel of the
// stream launch at once (programmatic dependent launch), waits `delay_ns` on the global timer, then
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
