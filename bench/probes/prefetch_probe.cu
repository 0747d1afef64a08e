// Probe (not part of the toolkit): does warming L2 with down's weights help the M=1 expert layer?
// Times gate_up + down over 16 layers in one graph with programmatic dependent launch, as
// `moeforge bench formats` does, for several ways of fetching down's weights early:
//   base      : the catalogue kernels as generated (launch_dependents; wait)
//   gu_bulk   : gate_up, after its wait, issues cp.async.bulk.prefetch.L2 of the routed experts'
//               down codes and scales (each block a slice)
//   dn_early  : gate_up waits before launch_dependents (so the router's ids are final when down
//               starts); down prefetches its own rows to L2 before its wait
//   both      : gu_bulk + dn_early
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> prefetch_probe.cu
#include "moeforge_device.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); std::exit(1); } } while (0)

namespace {
constexpr int kH = 2048, kI = 768, kE = 128, kK = 8, kLayers = 16;

struct Silu {
  __device__ float operator()(float g, float u) const { return mf::silu(g) * u; }
};
struct Combine {
  __device__ float operator()(float c) const { return c; }
};

template <class F, int N, int K>
__host__ __device__ constexpr size_t code_bytes() { return static_cast<size_t>(kE) * N * K * F::kCodeBits / 8; }
template <class F, int N, int K>
__host__ __device__ constexpr size_t scale_bytes() {
  if constexpr (F::kBlockScale == mf::BlockScale::kNone) return 0;
  else return static_cast<size_t>(kE) * N * (K / F::kBlock) * (F::kBlockScale == mf::BlockScale::kF32 ? 4 : 1);
}

__device__ __forceinline__ void bulk_prefetch(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}

// Block (bx, slot) prefetches slice bx of gridDim.x of expert topk_ids[slot]'s region.
__device__ __forceinline__ void prefetch_slice(const void* base, size_t per_expert, int e) {
  if (base == nullptr || per_expert == 0) return;
  const size_t slice = ((per_expert + gridDim.x - 1) / gridDim.x + 15) & ~size_t{15};
  const size_t begin = slice * blockIdx.x;
  if (begin >= per_expert) return;
  const size_t bytes = slice < per_expert - begin ? slice : per_expert - begin;
  bulk_prefetch(static_cast<const char*>(base) + static_cast<size_t>(e) * per_expert + begin, static_cast<uint32_t>(bytes));
}

template <class F, int W, int U, int S, int MODE>
__global__ void __launch_bounds__(32 * W) gate_up(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids,
                                                  __nv_bfloat16* inter, int m, const void* dn_codes,
                                                  const void* dn_scales) {
  if constexpr (MODE == 0) {
    mf::begin_after_previous_kernel();
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if ((MODE & 1) && threadIdx.x == 0 && blockIdx.y < m * kK) {
      const int e = ids[blockIdx.y];
      prefetch_slice(dn_codes, kH * (size_t)kI * F::kCodeBits / 8, e);
      prefetch_slice(dn_scales, scale_bytes<F, kH, kI>() / kE, e);
    }
  }
  mf::gate_up_single_token<F, kH, kI, kE, kK, mf::GateUpLayout::kStacked, W, 16, U, S>(x, w, ids, inter, m, Silu{});
}

template <class F, int W, int U, int S, bool EARLY>
__global__ void __launch_bounds__(32 * W) down(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids,
                                               const float* tw, __nv_bfloat16* y, int m) {
  if constexpr (EARLY) {
    // this warp's k rows of output h, each lane a 128-byte line of the stream
    const int h = blockIdx.x * (W / S) + (threadIdx.x >> 5) / S;
    const int part = (threadIdx.x >> 5) % S;
    constexpr int kRowBytes = kI * F::kCodeBits / 8;
    constexpr int kLines = (kRowBytes + 127) / 128;
    const int token = blockIdx.y;
    if (h < kH && token < m) {
      for (int t = (threadIdx.x & 31) + 32 * part; t < kK * kLines; t += 32 * S) {
        const int j = t / kLines, l = t % kLines;
        const int e = __ldg(ids + token * kK + j);
        const char* p = mf::row_codes<F, kH, kI>(w, e, h) + l * 128;
        asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
      }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  } else {
    mf::begin_after_previous_kernel();
  }
  mf::down_single_token<F, kH, kI, kE, kK, W, 16, U, S>(inter, w, ids, tw, y, m, Combine{});
}

__global__ void empty_kernel(int) { mf::begin_after_previous_kernel(); }

__global__ void fill(uint32_t* p, size_t words, uint32_t seed, uint32_t mask, uint32_t orv) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    v ^= v >> 15; v *= 2246822519u; v ^= v >> 13;
    p[i] = (v & mask) | orv;
  }
}

void fill_dev(void* p, size_t bytes, uint32_t seed, uint32_t mask = 0xffffffffu, uint32_t orv = 0u) {
  fill<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, mask, orv);
  CK(cudaGetLastError());
}

template <class KernelT, class... Args>
void launch(KernelT kernel, dim3 grid, dim3 block, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = 1024; cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// Per-layer times of `reps` replays after 10 warm-ups (us, sorted).
std::vector<float> per_layer_us(cudaGraphExec_t ge, cudaStream_t s, cudaEvent_t a, cudaEvent_t z, int reps) {
  std::vector<float> t;
  for (int r = 0; r < reps + 10; ++r) {
    CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(z, s));
    CK(cudaEventSynchronize(z));
    float ms; CK(cudaEventElapsedTime(&ms, a, z));
    if (r >= 10) t.push_back(ms * 1000.0f / kLayers);
  }
  std::sort(t.begin(), t.end());
  return t;
}

struct LayerBufs {
  void* gu_codes; void* gu_scales; float* gu_row;
  void* dn_codes; void* dn_scales; float* dn_row;
  int* ids; float* tw;
};

// E4M3 1.0 = 0x38; E8M0 1.0 = 0x7f; f32 scales 1/64 so sums stay small
template <class F>
uint32_t scale_word() {
  if constexpr (F::kBlockScale == mf::BlockScale::kE4M3) return 0x38383838u;
  else if constexpr (F::kBlockScale == mf::BlockScale::kE8M0) return 0x7a7a7a7au;
  else return 0x3c800000u;
}

template <class F, int GW, int GU, int GS, int DW, int DU, int DS>
void run_format(const char* name, std::mt19937& rng, int reps) {
  std::vector<LayerBufs> layers(kLayers);
  const size_t guc = code_bytes<F, 2 * kI, kH>(), gus = scale_bytes<F, 2 * kI, kH>();
  const size_t dnc = code_bytes<F, kH, kI>(), dns = scale_bytes<F, kH, kI>();
  const uint32_t code_mask = F::kElement == mf::Element::kE4M3 ? 0xbfbfbfbfu  // no NaN
                           : F::kElement == mf::Element::kBf16 ? 0xbcffbcffu : 0xffffffffu;
  for (int l = 0; l < kLayers; ++l) {
    LayerBufs& b = layers[l];
    CK(cudaMalloc(&b.gu_codes, guc)); fill_dev(b.gu_codes, guc, 11 + l, code_mask);
    CK(cudaMalloc(&b.dn_codes, dnc)); fill_dev(b.dn_codes, dnc, 101 + l, code_mask);
    b.gu_scales = b.dn_scales = nullptr;
    if (gus) { CK(cudaMalloc(&b.gu_scales, gus)); fill_dev(b.gu_scales, gus, 0, 0u, scale_word<F>()); }
    if (dns) { CK(cudaMalloc(&b.dn_scales, dns)); fill_dev(b.dn_scales, dns, 0, 0u, scale_word<F>()); }
    CK(cudaMalloc(&b.gu_row, kE * 2 * kI * 4)); fill_dev(b.gu_row, kE * 2 * kI * 4, 0, 0u, 0x3c800000u);
    CK(cudaMalloc(&b.dn_row, kE * kH * 4)); fill_dev(b.dn_row, kE * kH * 4, 0, 0u, 0x3c800000u);
    std::vector<int> perm(kE);
    for (int i = 0; i < kE; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> tw(kK, 1.0f / kK);
    CK(cudaMalloc(&b.ids, kK * 4)); CK(cudaMemcpy(b.ids, perm.data(), kK * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&b.tw, kK * 4)); CK(cudaMemcpy(b.tw, tw.data(), kK * 4, cudaMemcpyHostToDevice));
  }
  __nv_bfloat16 *x, *inter;
  CK(cudaMalloc(&x, (kLayers + 1) * kH * 2)); fill_dev(x, (kLayers + 1) * kH * 2, 7, 0x3c7f3c7fu);
  CK(cudaMalloc(&inter, kK * kI * 2));
  CK(cudaDeviceSynchronize());
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, z; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&z));
  const char* modes[] = {"base", "gu_bulk", "dn_early", "both"};
  for (int mode = 0; mode < 4; ++mode) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < kLayers; ++l) {
      const LayerBufs& b = layers[l];
      const mf::WeightArgs gw{b.gu_codes, b.gu_scales, b.gu_row}, dw{b.dn_codes, b.dn_scales, b.dn_row};
      const dim3 ggrid(mf::ceil_div(kI, GW / GS), kK), dgrid(mf::ceil_div(kH, DW / DS), 1);
      const void* pc = (mode & 1) ? b.dn_codes : nullptr;
      const void* ps = (mode & 1) ? b.dn_scales : nullptr;
      switch (mode) {
        case 0: launch(gate_up<F, GW, GU, GS, 0>, ggrid, dim3(32 * GW), s, x + l * kH, gw, (const int*)b.ids, inter, 1, pc, ps); break;
        case 1: launch(gate_up<F, GW, GU, GS, 1>, ggrid, dim3(32 * GW), s, x + l * kH, gw, (const int*)b.ids, inter, 1, pc, ps); break;
        case 2: launch(gate_up<F, GW, GU, GS, 2>, ggrid, dim3(32 * GW), s, x + l * kH, gw, (const int*)b.ids, inter, 1, pc, ps); break;
        default: launch(gate_up<F, GW, GU, GS, 3>, ggrid, dim3(32 * GW), s, x + l * kH, gw, (const int*)b.ids, inter, 1, pc, ps); break;
      }
      if (mode >= 2) launch(down<F, DW, DU, DS, true>, dgrid, dim3(32 * DW), s, (const __nv_bfloat16*)inter, dw, (const int*)b.ids, (const float*)b.tw, x + (l + 1) * kH, 1);
      else launch(down<F, DW, DU, DS, false>, dgrid, dim3(32 * DW), s, (const __nv_bfloat16*)inter, dw, (const int*)b.ids, (const float*)b.tw, x + (l + 1) * kH, 1);
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const std::vector<float> t = per_layer_us(ge, s, a, z, reps);
    const double bytes = (double)(guc + gus + dnc + dns) / kE * kK;
    std::printf("%-14s %-9s layer %7.2f us  p10 %7.2f p90 %7.2f  %.1f MB  %.0f GB/s\n", name, modes[mode],
                t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10], bytes / 1e6, bytes / (t[t.size() / 2] * 1e3));
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  }
  // components: chains of one kernel kind, over distinct layers (weights from DRAM) and over
  // layer 0 repeated (weights L2-resident after the first)
  for (int part = 0; part < 5; ++part) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < kLayers; ++l) {
      const LayerBufs& b = layers[part == 1 || part == 3 ? 0 : l];
      const mf::WeightArgs gw{b.gu_codes, b.gu_scales, b.gu_row}, dw{b.dn_codes, b.dn_scales, b.dn_row};
      const dim3 ggrid(mf::ceil_div(kI, GW / GS), kK), dgrid(mf::ceil_div(kH, DW / DS), 1);
      if (part <= 1) launch(gate_up<F, GW, GU, GS, 0>, ggrid, dim3(32 * GW), s, x + l * kH, gw, (const int*)b.ids, inter, 1, (const void*)nullptr, (const void*)nullptr);
      else if (part <= 3) launch(down<F, DW, DU, DS, false>, dgrid, dim3(32 * DW), s, (const __nv_bfloat16*)inter, dw, (const int*)b.ids, (const float*)b.tw, x + (l + 1) * kH, 1);
      else launch(empty_kernel, ggrid, dim3(32 * GW), s, 0);
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const std::vector<float> t = per_layer_us(ge, s, a, z, reps);
    const char* parts[] = {"gate_up dram", "gate_up l2", "down dram", "down l2", "empty"};
    std::printf("%-14s %-13s %7.2f us\n", name, parts[part], t[t.size() / 2]);
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  }
  for (auto& b : layers) {
    cudaFree(b.gu_codes); cudaFree(b.dn_codes); cudaFree(b.gu_scales); cudaFree(b.dn_scales);
    cudaFree(b.gu_row); cudaFree(b.dn_row); cudaFree(b.ids); cudaFree(b.tw);
  }
  cudaFree(x); cudaFree(inter);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261122);
  // each format with the catalogue's schedules (gate_up W,U,S; down W,U,S)
  run_format<mf::Nvfp4Weights, 4, 2, 1, 8, 2, 2>("nvfp4", rng, reps);
  run_format<mf::Mxfp4Weights, 4, 2, 1, 8, 2, 2>("mxfp4", rng, reps);
  run_format<mf::Int4ChannelWeights, 4, 2, 1, 8, 2, 2>("int4_channel", rng, reps);
  run_format<mf::Fp8ChannelWeights, 8, 2, 2, 8, 2, 2>("fp8_channel", rng, reps);
  run_format<mf::Bf16Weights, 4, 2, 1, 8, 2, 2>("bf16", rng, reps);
  return 0;
}
