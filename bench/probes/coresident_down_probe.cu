// Probe (not part of the toolkit): the M=1 4-bit tensor-core pair with a down whose blocks sit beside
// gate_up's and have every weight byte in shared memory before gate_up ends.
//   * gate_up (the header's gate_up_tensor_core) waits for its predecessor before it lets down launch,
//     so down may read the routing at once; MB: the blocks per SM its launch bounds promise (4: 64
//     registers, three blocks of 8 warps leave an SM room for one down block);
//   * down_smem: one block of W warps (at most 64 registers) per 16 hidden outputs reads the routing,
//     copies its rows of every routed expert into shared memory by cp.async.bulk, and only then waits
//     for gate_up; it stages inter and reduces from shared memory on the tensor cores (the header's
//     TileStep), U steps of a warp in flight, the warps' sums added in warp order.
// Checked against the catalogue's pair on the same random layers, then both timed over 16 layers
// rotated in one graph with programmatic dependent launch, with one launch of down traced per block.
// Findings: bench/NOTES.md, "down beside gate_up".
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> coresident_down_probe.cu -o coresident_down_probe
// Run:   coresident_down_probe [reps]      (0: the checks alone)
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {
using namespace mf;
using probe::Layer;
using probe::rel_diff;
constexpr int kLayers = 16;

template <class F, int H, int I, int E, int K, int W, int U, int S, int MB>
__global__ void __launch_bounds__(32 * W, MB) gate_up_wait_first(const __nv_bfloat16* x, WeightArgs w, const int* ids, __nv_bfloat16* inter, int m) {
  wait_for_previous_kernel();
  let_next_kernel_begin();
  gate_up_tensor_core<F, H, I, E, K, GateUpLayout::kStacked, W, U, S>(x, w, ids, inter, m, probe::Silu{});
}

template <class F, int H, int I, int K, int W>
struct DownSmem {
  using R = probe::Rows<F, I>;
  using Row = TileRow<I>;
  static constexpr int kSlot = (R::kStage + 127) / 128 * 128;
  static constexpr int kOffXs = K * kSlot, kOffPartial = kOffXs + 64 * K * Row::kPadded, kOffFactors = kOffPartial + W * 64;
  static constexpr int kOffBar = kOffFactors + K * 16 * 4, kOffIds = kOffBar + 8;
  static constexpr int kBytes = kOffIds + 4 * K;
};

template <class F, int H, int I, int E, int K, int W, int U>
__global__ void __launch_bounds__(32 * W, 2048 / (32 * W) < 4 ? 2048 / (32 * W) : 4)
    down_smem(const __nv_bfloat16* inter, WeightArgs w, const int* ids, const float* tw, __nv_bfloat16* y, unsigned long long* stamps) {
  using D = DownSmem<F, H, I, K, W>;
  using R = typename D::R;
  using Row = typename D::Row;
  constexpr int kSteps = K * R::kSteps;
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* xs = reinterpret_cast<uint4*>(smem + D::kOffXs);
  float* factors = reinterpret_cast<float*>(smem + D::kOffFactors);  // [K][16]: routing weight x row factor
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + D::kOffBar);
  int* s_ids = reinterpret_cast<int*>(smem + D::kOffIds);
  let_next_kernel_begin();
  const int h0 = blockIdx.x * 16;
  if (stamps && threadIdx.x == 0) stamps[blockIdx.x * 4] = probe::now_ns();
  // The routing is final: gate_up waited for its predecessor before it let this kernel launch.
  if (threadIdx.x < K) {
    const int e = __ldg(ids + threadIdx.x);
    s_ids[threadIdx.x] = static_cast<unsigned>(e) < static_cast<unsigned>(E) ? e : -1;
  }
  if (threadIdx.x == 0) {
    probe::bar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned bytes = 0;
    for (int j = 0; j < K; ++j) bytes += s_ids[j] >= 0 ? R::kStage : 0;
    probe::bar_expect(bar, bytes);
    for (int j = 0; j < K; ++j) {
      const int e = s_ids[j];
      if (e < 0) continue;
      unsigned char* dst = smem + j * D::kSlot;
      probe::bulk(dst, static_cast<const char*>(w.codes) + (static_cast<size_t>(e) * H + h0) * R::kCodes, 16 * R::kCodes, bar);
      if constexpr (R::kScales > 0)
        probe::bulk(dst + 16 * R::kCodes, static_cast<const char*>(w.block_scales) + (static_cast<size_t>(e) * H + h0) * R::kScales,
                    16 * R::kScales, bar);
    }
  }
  for (int i = threadIdx.x; i < K * 16; i += blockDim.x) {
    const int j = i / 16, e = s_ids[j];
    factors[i] = e >= 0 ? apply_factor<F>(__ldg(tw + j), row_factor<F, H, 1>(w, e, h0 + i % 16, 0)) : 0.0f;
  }
  wait_for_previous_kernel();
  if (stamps && threadIdx.x == 0) stamps[blockIdx.x * 4 + 1] = probe::now_ns();
  stage_tile_activations<K, I, true>(inter, xs);  // ends in __syncthreads: the factors are visible too
  probe::bar_wait(bar, 0);
  if (stamps && threadIdx.x == 0) stamps[blockIdx.x * 4 + 2] = probe::now_ns();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float lo = 0.0f, hi = 0.0f;
#pragma unroll 1
  for (int s0 = warp; s0 < kSteps; s0 += W * U) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int s = s0 + i * W, j = s / R::kSteps, sj = s - j * R::kSteps;
      if (s < kSteps && s_ids[j] >= 0) {  // uniform over the warp; an unrouted slot's staged inter is never read
        const StepSums sums = probe::stage_step<F, I>(smem + j * D::kSlot, g, 4 * sj + t).reduce(xs + j * Row::kPadded + 4 * sj + t, K * Row::kPadded);
        lo = fmaf(factors[j * 16 + g], sums.lo, lo);
        hi = fmaf(factors[j * 16 + 8 + g], sums.hi, hi);
      }
    }
  }
  if (!combine_tile_warps<W>(lo, hi, reinterpret_cast<float*>(smem + D::kOffPartial))) return;
  if (t == 0) {
    store_bf16(y + h0 + g, lo * TileDecode<F>::kUnscale);
    store_bf16(y + h0 + 8 + g, hi * TileDecode<F>::kUnscale);
  }
  if (stamps && threadIdx.x == 0) stamps[blockIdx.x * 4 + 3] = probe::now_ns();
}

template <class F, int H, int I, int E, int K>
struct Run {
  const std::vector<Layer>& layers;
  __nv_bfloat16 *x, *inter, *y;
  cudaStream_t s;
  int reps;
  double bytes;
  std::vector<uint16_t> y_ref;

  template <int W, int U, int S, int MB>
  void gate_up(int l) const {
    const Layer& b = layers[l];
    const size_t smem = 64 * TileRow<H>::kPadded + (S > 1 ? W * 64 : 0);
    probe::launch(false, gate_up_wait_first<F, H, I, E, K, W, U, S, MB>, dim3(ceil_div(I, 8 * (W / S)), K), dim3(32 * W), smem, s,
                  (const __nv_bfloat16*)(x + (size_t)l * H), WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, inter, 1);
  }
  template <int W, int U>
  void down(int l, __nv_bfloat16* out, unsigned long long* stamps) const {
    using D = DownSmem<F, H, I, K, W>;
    const Layer& b = layers[l];
    auto kernel = down_smem<F, H, I, E, K, W, U>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, D::kBytes));
    probe::launch(false, kernel, dim3(H / 16), dim3(32 * W), D::kBytes, s, (const __nv_bfloat16*)inter,
                  WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, stamps);
  }
  // The catalogue's down (down_tensor_core, DW warps on one tile, groups of one step).
  template <int DW>
  void catalogue_down(int l, __nv_bfloat16* out) const {
    const Layer& b = layers[l];
    probe::launch(false, probe::tc_down<F, H, I, E, K, DW, 1, DW>, dim3(ceil_div(H, 16)), dim3(32 * DW), 64 * K * TileRow<I>::kPadded + DW * 64, s,
                  (const __nv_bfloat16*)inter, WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, 1);
  }

  template <class Pair>
  void time(const char* label, Pair pair) const {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s));
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    pair(0, y);
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> yb(H);
    CK(cudaMemcpy(yb.data(), y, H * 2, cudaMemcpyDeviceToHost));
    const double d = y_ref.empty() ? 0.0 : rel_diff(yb, y_ref);
    const float us = reps > 0 ? probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) pair(l, x + (size_t)(l + 1) * H); }) : 0.0f;
    if (reps > 0) std::printf("   %-58s y diff %.2e  layer %6.2f us (%.1f%% of 3.10 TB/s)\n", label, d, us, 100.0 * bytes / (us * 1e3) / 3100.0);
    else std::printf("   %-58s y diff %.2e\n", label, d);
  }
};

// The catalogue's pair (gate_up GW GU GS, down DW) against down_smem beside gate_up.
template <class F, int H, int I, int E, int K, int GW, int GU, int GS, int DW>
void compare(const char* name, std::mt19937& rng, int reps) {
  std::vector<Layer> layers = probe::make_layers<F, H, I, E, K>(kLayers, 1, 0, rng);
  std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = probe::float_to_bf16(nd(rng));
  __nv_bfloat16 *x, *inter, *y;
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&inter, (size_t)K * I * 2)); CK(cudaMalloc(&y, (size_t)H * 2));
  cudaStream_t s = probe::stream_after_setup();
  Run<F, H, I, E, K> r{layers, x, inter, y, s, reps, probe::LayerBytes<F, H, I, E>::routed(K), {}};
  std::printf("%s (%.1f MB)\n", name, r.bytes / 1e6);
  // the reference: the catalogue's pair as the runtime launches it (trigger, then wait)
  auto catalogue = [&](int l, __nv_bfloat16* out) {
    const Layer& b = layers[l];
    probe::launch(false, probe::tc_gate_up<F, H, I, E, K, GateUpLayout::kStacked, GW, GU, GS>, dim3(ceil_div(I, 8 * (GW / GS)), K), dim3(32 * GW),
                  64 * TileRow<H>::kPadded + (GS > 1 ? GW * 64 : 0), s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, inter, 1);
    r.template catalogue_down<DW>(l, out);
  };
  r.time("catalogue pair", catalogue);
  {
    std::vector<uint16_t> yr(H);
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    catalogue(0, y);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(yr.data(), y, H * 2, cudaMemcpyDeviceToHost));
    r.y_ref = yr;
  }
  r.time("gate_up waits first (MB 1), catalogue down", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 1>(l); r.template catalogue_down<DW>(l, o); });
  r.time("gate_up waits first (MB 4), catalogue down", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 4>(l); r.template catalogue_down<DW>(l, o); });
  r.time("gate_up (MB 1), down_smem W8 U2", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 1>(l); r.template down<8, 2>(l, o, nullptr); });
  r.time("gate_up (MB 4), down_smem W8 U2", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 4>(l); r.template down<8, 2>(l, o, nullptr); });
  r.time("gate_up (MB 4), down_smem W8 U3", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 4>(l); r.template down<8, 3>(l, o, nullptr); });
  r.time("gate_up (MB 4), down_smem W4 U3", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 4>(l); r.template down<4, 3>(l, o, nullptr); });
  r.time("gate_up (MB 3), down_smem W4 U3", [&](int l, __nv_bfloat16* o) { r.template gate_up<GW, GU, GS, 3>(l); r.template down<4, 3>(l, o, nullptr); });
  if (reps > 0) {
    const float t_gu1 = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) r.template gate_up<GW, GU, GS, 1>(l); });
    const float t_gu4 = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) r.template gate_up<GW, GU, GS, 4>(l); });
    std::printf("   gate_up alone: MB 1 %.2f us, MB 4 %.2f us\n", t_gu1, t_gu4);
    // one pair traced: when down's blocks start, pass their wait, have their weights, store y
    unsigned long long* stamps; CK(cudaMalloc(&stamps, (H / 16) * 32)); CK(cudaMemset(stamps, 0, (H / 16) * 32));
    for (int rep = 0; rep < 3; ++rep) { r.template gate_up<GW, GU, GS, 4>(5); r.template down<8, 2>(5, y, stamps); }
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> st((size_t)(H / 16) * 4);
    CK(cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    const char* names[4] = {"down start", "wait passed", "weights in", "y stored"};
    std::printf("   down_smem W8 U2 after gate_up MB 4,");
    probe::print_trace(st, H / 16, 4, names, {0, 1, 2, 3});
    cudaFree(stamps);
  }
  probe::free_layers(layers);
  cudaFree(x); cudaFree(inter); cudaFree(y);
  cudaStreamDestroy(s);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261125);
  compare<Nvfp4Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("nvfp4, Qwen3-30B-A3B", rng, reps);
  compare<Mxfp4Weights, 2048, 768, 128, 8, 4, 2, 4, 32>("mxfp4, Qwen3-30B-A3B", rng, reps);
  compare<Int4Group128Weights, 2048, 768, 128, 8, 8, 2, 4, 32>("int4_group128, Qwen3-30B-A3B", rng, reps);
  compare<Int4ChannelWeights, 2048, 768, 128, 8, 8, 2, 4, 24>("int4_channel, Qwen3-30B-A3B", rng, reps);
  compare<Nvfp4Weights, 2048, 512, 512, 10, 8, 2, 4, 24>("nvfp4, Qwen3-Next-80B-A3B", rng, reps);
  return 0;
}
