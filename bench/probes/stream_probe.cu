// Probe (not part of the toolkit): how fast can 128 blocks stream the router_tiled split-2 tile
// pattern of `bench router`'s M=4096 GEMM shapes into shared memory? Each block b (tile b / 2, half b % 2)
// reads 64 rows of x and the E rows of W_r over its half of K = 2048, in 64-element slices
// (rows of 128 bytes), as mf::router_tile_scores with a 64-token tile split 2 does:
//   cp.async  : 16-byte cp.async.cg by every thread, S stages, one __syncthreads per slice
//   bulk      : cp.async.bulk per 128-byte row (issued by the block's first warps) completing on
//               one mbarrier per stage, rows 144 bytes apart
//   ldg       : every warp loads its share of each slice into registers (no shared memory)
// and the cp.async form again with the ldmatrix reads of 16 warps of 16 x E/4 tiles, then with
// their mmas too. The time of each is against the bytes moved (x 16.8 MB + 128 blocks x E x 1024 x 2 bytes).
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> stream_probe.cu -o stream_probe
#include "moeforge_device.cuh"

#include <cstdio>

#include "probe_harness.cuh"

namespace {
constexpr int kH = 2048, kM = 4096, kBM = 64, kHalf = kH / 2, kBK = 64, kSlices = kHalf / kBK;

// Work per slice: 0 none, 1 the ldmatrix reads of router_tile_scores (16 warps: 4 rows x 4
// column groups of 16-token x E/4 warp tiles), 2 those and the mmas.
template <int E, int S, int W, int WORK = 0>
__global__ void __launch_bounds__(32 * W) stream_cp_async(const __nv_bfloat16* x, const __nv_bfloat16* w, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kRows = kBM + E, kStage = kRows * 128;
  constexpr int kWarpRows = kBM / 16, kCols = E / (W / kWarpRows), NT = kCols / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (warp % kWarpRows) * 16, col0 = (warp / kWarpRows) * kCols;
  float c[NT > 0 ? NT : 1][4] = {};
  const int tile = blockIdx.x / 2, part = blockIdx.x % 2;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto load = [&](int s, int slice) {
    const int k0 = part * kHalf + slice * kBK;
    for (int i = threadIdx.x; i < kRows * 8; i += 32 * W) {
      const int row = i / 8, piece = i % 8;
      const __nv_bfloat16* src = row < kBM ? x + (size_t)(tile * kBM + row) * kH + k0 + piece * 8
                                           : w + (size_t)(row - kBM) * kH + k0 + piece * 8;
      mf::cp_async_16(base + s * kStage + mf::swizzled<8>(row, piece), src, true);
    }
  };
  for (int s = 0; s < S - 1; ++s) { load(s, s); asm volatile("cp.async.commit_group;\n" ::: "memory"); }
  float acc = 0.0f;
  for (int kt = 0; kt < kSlices; ++kt) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2) : "memory");
    __syncthreads();
    if (kt + S - 1 < kSlices) load((kt + S - 1) % S, kt + S - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    const uint32_t stage = base + (kt % S) * kStage;
    if constexpr (WORK == 0 || NT == 0) {
      acc += reinterpret_cast<const float*>(smem + (kt % S) * kStage)[threadIdx.x];
    } else {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t a[4];
        mf::ldmatrix_x4(a, stage + mf::swizzled<8>(row0 + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
          uint32_t b[4];
          mf::ldmatrix_x4(b, stage + mf::swizzled<8>(kBM + col0 + 16 * j + ((lane >> 4) << 3) + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
          if constexpr (WORK == 2) {
            mf::mma_bf16_16816(c[2 * j], a, b[0], b[1]);
            mf::mma_bf16_16816(c[2 * j + 1], a, b[2], b[3]);
          } else {
            c[2 * j][0] += __uint_as_float(a[0] ^ b[0] ^ a[2]);
            c[2 * j][1] += __uint_as_float(a[1] ^ b[1] ^ a[3] ^ b[2] ^ b[3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < (NT > 0 ? NT : 1); ++j) acc += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (acc == 1.2345f) sink[0] = acc;
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(bar),
      "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_row(uint32_t dst, const void* src, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 128, [%2];" ::"r"(dst),
               "l"(src), "r"(bar) : "memory");
}

template <int E, int S, int W>
__global__ void __launch_bounds__(32 * W) stream_bulk(const __nv_bfloat16* x, const __nv_bfloat16* w, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kRows = kBM + E, kStage = kRows * 144;
  __shared__ __align__(8) unsigned long long bars[S];
  const int tile = blockIdx.x / 2, part = blockIdx.x % 2;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(bar0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto load = [&](int s, int slice) {  // rows spread over the first kRows threads
    const int k0 = part * kHalf + slice * kBK;
    if (threadIdx.x == 0) mbar_expect(bar0 + 8 * s, kRows * 128);
    __syncwarp();
    for (int row = threadIdx.x; row < kRows; row += 32 * W) {
      const __nv_bfloat16* src = row < kBM ? x + (size_t)(tile * kBM + row) * kH + k0 : w + (size_t)(row - kBM) * kH + k0;
      bulk_row(base + s * kStage + row * 144, src, bar0 + 8 * s);
    }
  };
  for (int s = 0; s < S - 1; ++s) load(s, s);
  float acc = 0.0f;
  for (int kt = 0; kt < kSlices; ++kt) {
    mbar_wait(bar0 + 8 * (kt % S), (kt / S) & 1);
    __syncthreads();  // every warp is done with slice kt - 1, whose stage is refilled next
    if (kt + S - 1 < kSlices) load((kt + S - 1) % S, kt + S - 1);
    acc += reinterpret_cast<const float*>(smem + (kt % S) * kStage)[threadIdx.x];
  }
  if (acc == 1.2345f) sink[0] = acc;
}

// Every warp loads rows of each slice straight into registers: 8 rows (128 bytes each) per
// instruction, U slices ahead.
template <int E, int U, int W>
__global__ void __launch_bounds__(32 * W) stream_ldg(const __nv_bfloat16* x, const __nv_bfloat16* w, float* sink) {
  constexpr int kRows = kBM + E;
  const int tile = blockIdx.x / 2, part = blockIdx.x % 2;
  float acc = 0.0f;
  for (int kt = 0; kt < kSlices; kt += U) {
    float part_sum = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k0 = part * kHalf + (kt + u) * kBK;
      for (int i = threadIdx.x; i < kRows * 8; i += 32 * W) {
        const int row = i / 8, piece = i % 8;
        const __nv_bfloat16* src = row < kBM ? x + (size_t)(tile * kBM + row) * kH + k0 + piece * 8
                                             : w + (size_t)(row - kBM) * kH + k0 + piece * 8;
        const uint4 q = __ldcg(reinterpret_cast<const uint4*>(src));
        part_sum += __uint_as_float(q.x ^ q.y ^ q.z ^ q.w);
      }
    }
    acc += part_sum;
  }
  if (acc == 1.2345f) sink[0] = acc;
}

template <class K>
void time_it(const char* name, K kernel, size_t smem, int threads, const __nv_bfloat16* x, const __nv_bfloat16* w,
             size_t w_elems, int copies, float* sink, double bytes, cudaStream_t s) {
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const float us = probe::graph_us(s, 40, copies, [&] {
    for (int c = 0; c < copies; ++c) kernel<<<kM / kBM * 2, threads, smem, s>>>(x, w + (size_t)c * w_elems, sink);
  });
  CK(cudaGetLastError());
  std::printf("  %-28s %6.2f us  %5.2f TB/s\n", name, us, bytes / us * 1e-6);
}

template <int E>
void run() {
  const int copies = 256;
  const size_t w_elems = (size_t)(E > 0 ? E : 1) * kH;
  __nv_bfloat16 *x, *w;
  float* sink;
  CK(cudaMalloc(&x, (size_t)kM * kH * 2)); CK(cudaMalloc(&w, w_elems * 2 * copies)); CK(cudaMalloc(&sink, 64));
  probe::fill_dev(x, (size_t)kM * kH * 2, 3); probe::fill_dev(w, w_elems * 2 * copies, 5);
  cudaStream_t s = probe::stream_after_setup();
  const double bytes = (double)kM * kH * 2 + 128.0 * E * kHalf * 2;
  std::printf("E=%d: %d blocks, each 64 rows of x + %d rows of W_r over K/2; %.1f MB moved per call\n", E, kM / kBM * 2, E, bytes * 1e-6);
  constexpr int kRows = kBM + E;
  time_it("cp.async S=4, 16 warps", stream_cp_async<E, 4, 16>, (size_t)4 * kRows * 128, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("cp.async S=8, 16 warps", stream_cp_async<E, 8, 16>, (size_t)8 * kRows * 128, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("cp.async S=8, 32 warps", stream_cp_async<E, 8, 32>, (size_t)8 * kRows * 128, 1024, x, w, w_elems, copies, sink, bytes, s);
  time_it("+ ldmatrix S=4, 16 warps", stream_cp_async<E, 4, 16, 1>, (size_t)4 * kRows * 128, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("+ mma S=4, 16 warps", stream_cp_async<E, 4, 16, 2>, (size_t)4 * kRows * 128, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("+ mma S=8, 16 warps", stream_cp_async<E, 8, 16, 2>, (size_t)8 * kRows * 128, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("bulk S=4, 16 warps", stream_bulk<E, 4, 16>, (size_t)4 * kRows * 144, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("bulk S=8, 16 warps", stream_bulk<E, 8, 16>, (size_t)8 * kRows * 144, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("bulk S=8, 4 warps", stream_bulk<E, 8, 4>, (size_t)8 * kRows * 144, 128, x, w, w_elems, copies, sink, bytes, s);
  time_it("ldg U=2, 16 warps", stream_ldg<E, 2, 16>, 0, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("ldg U=4, 16 warps", stream_ldg<E, 4, 16>, 0, 512, x, w, w_elems, copies, sink, bytes, s);
  time_it("ldg U=4, 32 warps", stream_ldg<E, 4, 32>, 0, 1024, x, w, w_elems, copies, sink, bytes, s);
  cudaFree(x); cudaFree(w); cudaFree(sink); cudaStreamDestroy(s);
}
}  // namespace

int main() {
  run<0>();  // x alone: what DRAM must deliver at the least
  run<64>();
  run<128>();
  return 0;
}
