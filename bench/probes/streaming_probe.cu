// Probe (not part of the toolkit): how fast one kernel can stream the bytes of a 4-bit decode
// layer's halves (NVFP4 at the Qwen3-30B-A3B geometry, M=1: gate_up 14.2 MB, down 7.1 MB) with no
// decode at all, over 16 layers rotated in one graph with programmatic dependent launch (as
// `moeforge bench formats` times a layer). The floor each kernel structure sets before any decode:
//   ldg     : 16-byte loads, U in flight per thread, G blocks of 256 threads
//   ring    : one block per SM (or two); thread 0 streams the block's contiguous share into a ring
//             of S stages in shared memory by cp.async.bulk (one mbarrier per stage), the other
//             warps touch each stage and release it
//   pairs   : gate_up-like then down-like, by ldg or by rings; `early`: the down kernel issues its
//             copies before griddepcontrol.wait (its gate_up predecessor waits before it triggers);
//             and one ring over both halves' bytes (one kernel per layer)
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a streaming_probe.cu -o streaming_probe
// Run:   streaming_probe [reps]
#include "probe_harness.cuh"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kLayers = 16;
constexpr size_t kGateUpBytes = 8ull * 1536 * (1024 + 128);  // 8 experts x 1536 rows x (codes + E4M3 scales)
constexpr size_t kDownBytes = 8ull * 2048 * (384 + 48);

using probe::bar_arrive;
using probe::bar_expect;
using probe::bar_init;
using probe::bar_wait;
using probe::bulk;

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Every thread streams 16-byte words of the buffer, U in flight.
template <int U>
__global__ void __launch_bounds__(256) ldg_kernel(const char* src, size_t bytes, uint32_t* out) {
  asm volatile("griddepcontrol.launch_dependents;\ngriddepcontrol.wait;\n" ::: "memory");
  const size_t words = bytes / 16, stride = (size_t)gridDim.x * blockDim.x;
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * stride < words ? ldg_stream(src + 16 * (i + u * stride)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// One block per SM streams its contiguous share through S stages of STAGE bytes.
// EARLY: the copies of the first S stages are issued before griddepcontrol.wait (WAIT_FIRST: this
// kernel waits before it triggers, so its successor may issue early).
template <int S, int STAGE, bool EARLY, bool WAIT_FIRST>
__global__ void __launch_bounds__(256, 1) ring_kernel(const char* src, size_t bytes, uint32_t* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * STAGE);
  uint64_t* empty = full + S;
  if (WAIT_FIRST) asm volatile("griddepcontrol.wait;\ngriddepcontrol.launch_dependents;\n" ::: "memory");
  else if (!EARLY) asm volatile("griddepcontrol.launch_dependents;\ngriddepcontrol.wait;\n" ::: "memory");
  else asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const size_t per = (bytes / gridDim.x + 15) & ~size_t(15);
  const size_t begin = per * blockIdx.x, end = begin + per < bytes ? begin + per : bytes;
  const int stages = begin < end ? (int)((end - begin + STAGE - 1) / STAGE) : 0;
  const int consumers = blockDim.x / 32 - 1;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) { bar_init(full + s, 1); bar_init(empty + s, consumers); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp == 0) {
    if (lane == 0) {
      for (int i = 0; i < stages; ++i) {
        const int s = i % S;
        if (i >= S) bar_wait(empty + s, ((i / S) - 1) & 1);
        if (EARLY && i == S) asm volatile("griddepcontrol.wait;\n" ::: "memory");
        const size_t off = begin + (size_t)i * STAGE;
        const unsigned n = (unsigned)(end - off < (size_t)STAGE ? end - off : STAGE);
        bar_expect(full + s, n);
        bulk(smem + s * STAGE, src + off, n, full + s);
      }
      if (EARLY && stages <= S) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    }
  } else {
    uint32_t acc = 0;
    for (int i = 0; i < stages; ++i) {
      const int s = i % S;
      bar_wait(full + s, (i / S) & 1);
      const uint4 v = reinterpret_cast<const uint4*>(smem + s * STAGE)[(warp - 1) * 32 + lane];
      acc ^= v.x ^ v.w;
      __syncwarp();
      if (lane == 0) bar_arrive(empty + s);
    }
    if (acc == 0x12345678u) out[1] = acc;
  }
}

struct Bufs {
  std::vector<char*> gu, dn;
  uint32_t* out;
};

template <class KernelT>
void set_smem(KernelT k, int bytes) {
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int S, int STAGE, bool EARLY, bool WAIT_FIRST>
void ring(cudaStream_t st, const char* src, size_t bytes, uint32_t* out, int grid) {
  auto k = ring_kernel<S, STAGE, EARLY, WAIT_FIRST>;
  const int smem = S * STAGE + 16 * S;
  set_smem(k, smem);
  probe::launch(false, k, dim3(grid), dim3(256), smem, st, src, bytes, out);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("# streaming_probe, %s, %d SMs; gate_up-like %.1f MB, down-like %.1f MB per layer, %d layers\n", prop.name, sms,
              kGateUpBytes / 1e6, kDownBytes / 1e6, kLayers);
  Bufs b;
  for (int l = 0; l < kLayers; ++l) {
    char* p; CK(cudaMalloc(&p, kGateUpBytes + kDownBytes)); probe::fill_dev(p, kGateUpBytes + kDownBytes, 3 + l); b.gu.push_back(p);
    CK(cudaMalloc(&p, kDownBytes)); probe::fill_dev(p, kDownBytes, 303 + l); b.dn.push_back(p);
  }
  CK(cudaMalloc(&b.out, 64));
  cudaStream_t st = probe::stream_after_setup();
  auto report = [&](const char* name, double bytes, float us) {
    std::printf("  %-44s %7.2f us  %6.0f GB/s\n", name, us, bytes / us / 1e3);
  };
  auto chain = [&](auto one) { return probe::graph_us(st, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) one(l); }); };

  std::printf("## one kernel per layer (per layer, us; GB/s of its bytes)\n");
  for (int which = 0; which < 2; ++which) {
    const size_t bytes = which ? kDownBytes : kGateUpBytes;
    auto& bufs = which ? b.dn : b.gu;
    const char* tag = which ? "down" : "gate_up";
    char name[96];
    for (int g : {sms, 2 * sms, 4 * sms, 8 * sms}) {
      std::snprintf(name, sizeof name, "%s ldg U=4 grid %d", tag, g);
      report(name, bytes, chain([&](int l) { probe::launch(false, ldg_kernel<4>, dim3(g), dim3(256), 0, st, (const char*)bufs[l], bytes, b.out); }));
      std::snprintf(name, sizeof name, "%s ldg U=8 grid %d", tag, g);
      report(name, bytes, chain([&](int l) { probe::launch(false, ldg_kernel<8>, dim3(g), dim3(256), 0, st, (const char*)bufs[l], bytes, b.out); }));
    }
    std::snprintf(name, sizeof name, "%s ring 4 x 8 KB", tag);
    report(name, bytes, chain([&](int l) { ring<4, 8192, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 4 x 16 KB", tag);
    report(name, bytes, chain([&](int l) { ring<4, 16384, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 8 x 8 KB", tag);
    report(name, bytes, chain([&](int l) { ring<8, 8192, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 6 x 16 KB", tag);
    report(name, bytes, chain([&](int l) { ring<6, 16384, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 12 x 8 KB", tag);
    report(name, bytes, chain([&](int l) { ring<12, 8192, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 3 x 32 KB", tag);
    report(name, bytes, chain([&](int l) { ring<3, 32768, false, false>(st, bufs[l], bytes, b.out, sms); }));
    std::snprintf(name, sizeof name, "%s ring 4 x 8 KB, 2 blocks per SM", tag);
    report(name, bytes, chain([&](int l) { ring<4, 8192, false, false>(st, bufs[l], bytes, b.out, 2 * sms); }));
  }

  std::printf("## the pair per layer (gate_up-like, then down-like)\n");
  const double pair = (double)kGateUpBytes + kDownBytes;
  report("ldg U=8 grid 4x, ldg U=8 grid 4x", pair, chain([&](int l) {
    probe::launch(false, ldg_kernel<8>, dim3(4 * sms), dim3(256), 0, st, (const char*)b.gu[l], kGateUpBytes, b.out);
    probe::launch(false, ldg_kernel<8>, dim3(4 * sms), dim3(256), 0, st, (const char*)b.dn[l], kDownBytes, b.out);
  }));
  report("ring 6x16 KB, ring 4x16 KB", pair, chain([&](int l) {
    ring<6, 16384, false, false>(st, b.gu[l], kGateUpBytes, b.out, sms);
    ring<4, 16384, false, false>(st, b.dn[l], kDownBytes, b.out, sms);
  }));
  report("ring 4x16 KB (wait first), ring 4x16 KB early", pair, chain([&](int l) {
    ring<4, 16384, false, true>(st, b.gu[l], kGateUpBytes, b.out, sms);
    ring<4, 16384, true, false>(st, b.dn[l], kDownBytes, b.out, sms);
  }));
  report("ring 4x16 KB (wait first), ring 4x16 KB early, 2/SM", pair, chain([&](int l) {
    ring<4, 16384, false, true>(st, b.gu[l], kGateUpBytes, b.out, sms);
    ring<4, 16384, true, false>(st, b.dn[l], kDownBytes, b.out, 2 * sms);
  }));
  report("ring 4x16 KB (wait first), ring 2x32 KB early", pair, chain([&](int l) {
    ring<4, 16384, false, true>(st, b.gu[l], kGateUpBytes, b.out, sms);
    ring<2, 32768, true, false>(st, b.dn[l], kDownBytes, b.out, sms);
  }));
  report("one ring of both (4 x 16 KB)", pair, chain([&](int l) {
    ring<4, 16384, false, false>(st, b.gu[l], kGateUpBytes + kDownBytes, b.out, sms);
  }));
  CK(cudaDeviceSynchronize());
  return 0;
}
