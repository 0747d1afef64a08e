// Probe harness (not part of the toolkit): error check, device fill, PDL launches into a captured
// graph and its median replay time, %globaltimer stamps. Shared by the probes in this folder.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); std::exit(1); } } while (0)

namespace probe {

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// mbarriers and the bulk-copy engine (sm_90): copies into this block's shared memory complete on an
// mbarrier's transaction count (no cluster launch needed: shared::cluster of one's own block).
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(uint64_t* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* b, unsigned parity) {
  asm volatile("{\n.reg .pred d;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 d, [%0], %1;\n@!d bra W_%=;\n}\n" ::"r"(smem_addr(b)),
               "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(b)) : "memory");
}

// Deterministic pseudo-random words: (hash(i) & mask) | orv.
__global__ void fill(uint32_t* p, size_t words, uint32_t seed, uint32_t mask, uint32_t orv) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    v ^= v >> 15; v *= 2246822519u; v ^= v >> 13; v *= 3266489917u; v ^= v >> 16;
    p[i] = (v & mask) | orv;
  }
}
inline void fill_dev(void* p, size_t bytes, uint32_t seed, uint32_t mask = 0xffffffffu, uint32_t orv = 0u) {
  fill<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, mask, orv);
  CK(cudaGetLastError());
}

// The stream a probe times on, created once its setup has landed. The setup (fills, pageable
// cudaMemcpy) runs on the legacy default stream, which a non-blocking stream does not wait for, and a
// pageable copy may return before its bytes are on the device: ring_layer_probe's (deleted; in git
// history at 76632fc) first launch once read the previous run's x at the same reused address (bench/NOTES.md, "One kernel fed by the copy
// engine").
inline cudaStream_t stream_after_setup() {
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// How a launch is made: with programmatic stream serialization (PDL, as the runtime launches the
// layer's kernels) or plainly after its predecessor (as `bench router` launches); cooperative; in
// clusters of `cluster` blocks along x (sizes above 8 allowed).
struct LaunchAs {
  bool programmatic = true;
  bool cooperative = false;
  int cluster = 1;
};

template <class KernelT, class... Args>
void launch_as(LaunchAs how, KernelT kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  const bool cooperative = how.cooperative;
  const int cluster = how.cluster;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = s;
  cudaLaunchAttribute attr[3];
  int n = 0;
  if (how.programmatic) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  if (cluster > 1) {
    if (cluster > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster; attr[n].val.clusterDim.y = 1; attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr; cfg.numAttrs = n;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}
template <class KernelT, class... Args>
void launch(bool cooperative, KernelT kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  launch_as(LaunchAs{true, cooperative, 1}, kernel, grid, block, smem, s, args...);
}

// A per-block trace: `stride` %globaltimer stamps per block (0: not recorded). Prints, for each
// stamp k in `order`, its min/median/max over the blocks in us from the earliest stamp 0.
inline void print_trace(const std::vector<unsigned long long>& st, int blocks, int stride, const char* const* names,
                        std::initializer_list<int> order) {
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < blocks; ++b) if (st[(size_t)b * stride]) t0 = std::min(t0, st[(size_t)b * stride]);
  std::printf(" us from the first block's start (min/median/max over blocks):");
  for (int k : order) {
    std::vector<double> v;
    for (int b = 0; b < blocks; ++b) if (st[(size_t)b * stride + k] != 0) v.push_back((st[(size_t)b * stride + k] - t0) * 1e-3);
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    std::printf(" %s %.2f/%.2f/%.2f", names[k], v.front(), v[v.size() / 2], v.back());
  }
  std::printf("\n");
}

// Captures capture() into a graph and returns the median of `reps` replays (after 10 warm-ups)
// divided by `per` (the calls in one replay), in us.
template <class Capture>
float graph_us(cudaStream_t s, int reps, int per, Capture capture) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  capture();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, z; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&z));
  std::vector<float> t;
  for (int r = 0; r < reps + 10; ++r) {
    CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(z, s));
    CK(cudaEventSynchronize(z));
    float ms; CK(cudaEventElapsedTime(&ms, a, z));
    if (r >= 10) t.push_back(ms * 1000.0f / per);
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  cudaEventDestroy(a); cudaEventDestroy(z);
  return t[t.size() / 2];
}

}  // namespace probe
