// Probe (not part of the toolkit): the tensor-core 4-bit kernels with every weight byte of a warp
// asked for in one trip, before the activations are staged, and with grids that fit one wave.
// streaming_probe.cu measured what the bytes alone need at M=1 (NVFP4, Qwen3-30B-A3B): gate_up's
// 14.2 MB in 5.7 us and down's 7.1 MB in 3.5 us when every thread asks for all its bytes at once,
// 9.1 us for the pair, against 7.7 + 6.3 us for the catalogue's kernels, whose warps take two
// trips (two groups of U steps, the second asked for only after the first is reduced) and ask only
// after staging the activations.
//   v1     : the header's gate_up_tensor_core / down_tensor_core (catalogue order)
//   v2     : ids, then all U steps' loads, then the staging, then the reduction (U * S covers a
//            tile's steps, so one trip)
//   early  : v2 down asking for its weights before griddepcontrol.wait (its gate_up waits first)
// Each variant's inter and y are checked against v1's on the same random layer (the partial sums
// are added in another order: differences at the bf16 rounding), then timed over 16 layers in one
// graph with programmatic dependent launch: each half alone and the pair.
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> one_trip_probe.cu
// Run:   one_trip_probe [reps]
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace mf {

// gate_up_tensor_core with one trip: the warp's U steps are asked for before the staging.
template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int U, int S, class Epilogue>
__device__ __forceinline__ void gate_up_one_trip(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, const int* __restrict__ topk_ids,
                                                 __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi) {
  using Row = TileRow<H>;
  static_assert(U * S >= Row::kSteps, "one trip: U * S covers the tile's steps");
  extern __shared__ __align__(16) unsigned char smem[];
  const int slot = blockIdx.y;
  if (slot >= num_tokens * K) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S;
  const int neuron0 = (blockIdx.x * (W / S) + warp / S) * 8;
  const int neuron = neuron0 + g;
  const bool active = neuron0 < I;
  const int e = active ? __ldg(topk_ids + slot) : -1;
  const bool routed = static_cast<unsigned>(e) < static_cast<unsigned>(E);
  const bool mine = routed && neuron < I;
  const int gate_n = gate_row_of<L>(mine ? neuron : neuron0, I), up_n = up_row_of<L>(mine ? neuron : neuron0, I);
  TileStep<F> step[U];
  if (routed) {
    const GateUpTileRows<F, H, I> rows(w_gate_up, e, gate_n, up_n);
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = (part * U + i) * 4 + t;
      rows.load(step[i], c, mine && c < Row::kChunks);
    }
  }
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<1, H>(x + static_cast<size_t>(slot / K) * H, xs);
  float gate = 0.0f, up = 0.0f;
  if (routed) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (part * U + i < Row::kSteps) {
        const StepSums sums = step[i].reduce(xs + (part * U + i) * 4 + t, Row::kPadded);
        gate += sums.lo;
        up += sums.hi;
      }
    }
  }
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(gate, up, reinterpret_cast<float*>(smem + 64 * Row::kPadded))) return;
  }
  if (t == 0 && mine) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0)) * kUnscale;
    up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1)) * kUnscale;
    store_bf16(inter + static_cast<size_t>(slot) * I + neuron, epi(gate, up));
  }
}

// down_tensor_core with one trip; EARLY: the loads go out before griddepcontrol.wait (only the
// ids, written two kernels back, are read before it).
template <class F, int H, int I, int E, int K, int W, int U, int S, bool EARLY, class Epilogue>
__device__ __forceinline__ void down_one_trip(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                              const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens,
                                              Epilogue epi) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  static_assert(U * S >= kSteps, "one trip: U * S covers the tile's steps");
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = threadIdx.x >> 5, part = warp % S;
  const int h0 = (blockIdx.x * (W / S) + warp / S) * 16;
  const bool active = h0 < H;
  const int lane_expert = lane < K && active ? __ldg(topk_ids + token * K + lane) : -1;
  const bool lane_routed = static_cast<unsigned>(lane_expert) < static_cast<unsigned>(E);
  const float routing_weight = lane_routed ? __ldg(topk_weights + token * K + lane) : 0.0f;
  const int h_lo = h0 + g, h_hi = h0 + g + 8;
  DownTileGroup<F, H, I, E, K, U> group;
  group.load(w_down, part * U, lane_expert, routing_weight, h_lo, h_hi, t);
  if constexpr (EARLY) wait_for_previous_kernel();
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
  float lo = 0.0f, hi = 0.0f;
  group.reduce(lo, hi, xs, part * U, t);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem + 64 * K * Row::kPadded))) return;
  }
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if (t == 0 && active) {
    if (h_lo < H) store_bf16(y + static_cast<size_t>(token) * H + h_lo, epi(lo * kUnscale));
    if (h_hi < H) store_bf16(y + static_cast<size_t>(token) * H + h_hi, epi(hi * kUnscale));
  }
}

}  // namespace mf

namespace {
constexpr int kLayers = 16;
using probe::Combine;
using probe::Layer;
using probe::Silu;

// Kernels: V 1 = header (catalogue), 2 = one trip; MB the launch bounds' blocks per SM.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int V, int W, int U, int S, int MB, bool WAIT_FIRST>
__global__ void __launch_bounds__(32 * W, MB) gate_up_kernel(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids, __nv_bfloat16* inter, int m) {
  if constexpr (WAIT_FIRST) {
    mf::wait_for_previous_kernel();
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
  }
  if constexpr (V == 1) mf::gate_up_tensor_core<F, H, I, E, K, L, W, U, S>(x, w, ids, inter, m, Silu{});
  else mf::gate_up_one_trip<F, H, I, E, K, L, W, U, S>(x, w, ids, inter, m, Silu{});
}
template <class F, int H, int I, int E, int K, int V, int W, int U, int S, int MB, bool EARLY>
__global__ void __launch_bounds__(32 * W, MB) down_kernel(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids, const float* tw, __nv_bfloat16* y, int m) {
  if constexpr (EARLY) {
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
  }
  if constexpr (V == 1) mf::down_tensor_core<F, H, I, E, K, W, U, S>(inter, w, ids, tw, y, m, Combine{});
  else mf::down_one_trip<F, H, I, E, K, W, U, S, EARLY>(inter, w, ids, tw, y, m, Combine{});
}

template <int V, int W, int U, int S, int MB>
struct Cfg {
  static constexpr int kV = V, kW = W, kU = U, kS = S, kMB = MB;
};

template <class F, int H, int I, int E, int K, mf::GateUpLayout L>
struct Bench {
  std::vector<Layer> layers;
  __nv_bfloat16 *x, *inter, *inter_ref, *y, *y_ref, *sink;
  cudaStream_t s;
  int reps;
  std::vector<uint16_t> inter_host, y_host;
  double bytes_gu, bytes_dn;

  Bench(std::mt19937& rng, int reps_) : reps(reps_) {
    layers = probe::make_layers<F, H, I, E, K>(kLayers, 1, 0, rng);
    std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : xh) v = probe::float_to_bf16(nd(rng));
    CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&inter, (size_t)K * I * 2)); CK(cudaMalloc(&inter_ref, (size_t)K * I * 2));
    CK(cudaMalloc(&y, (size_t)H * 2)); CK(cudaMalloc(&y_ref, (size_t)H * 2)); CK(cudaMalloc(&sink, (size_t)(kLayers + 1) * H * 2));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    using B = probe::LayerBytes<F, H, I, E>;
    bytes_gu = (double)(B::kGateUpCodes + B::gate_up_scales()) / E * K;
    bytes_dn = (double)(B::kDownCodes + B::down_scales()) / E * K;
  }
  ~Bench() {
    probe::free_layers(layers);
    cudaFree(x); cudaFree(inter); cudaFree(inter_ref); cudaFree(y); cudaFree(y_ref); cudaFree(sink);
    cudaStreamDestroy(s);
  }

  template <class G, bool WAIT_FIRST = false>
  void gate_up(int l, __nv_bfloat16* out) {
    auto k = gate_up_kernel<F, H, I, E, K, L, G::kV, G::kW, G::kU, G::kS, G::kMB, WAIT_FIRST>;
    const size_t smem = 64 * mf::TileRow<H>::kPadded + (G::kS > 1 ? G::kW * 64 : 0);
    const Layer& b = layers[l];
    probe::launch(false, k, dim3(mf::ceil_div(I, 8 * (G::kW / G::kS)), K), dim3(32 * G::kW), smem, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, 1);
  }
  template <class D, bool EARLY = false>
  void down(int l, const __nv_bfloat16* in, __nv_bfloat16* out) {
    auto k = down_kernel<F, H, I, E, K, D::kV, D::kW, D::kU, D::kS, D::kMB, EARLY>;
    const size_t smem = 64 * K * mf::TileRow<I>::kPadded + (D::kS > 1 ? D::kW * 64 : 0);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const Layer& b = layers[l];
    probe::launch(false, k, dim3(mf::ceil_div(H, 16 * (D::kW / D::kS)), 1), dim3(32 * D::kW), smem, s, in,
                  mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, 1);
  }

  std::vector<uint16_t> fetch(const __nv_bfloat16* p, size_t n) {
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> h(n);
    CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return h;
  }

  // The reference: v1 with the catalogue's schedules, layer 3.
  template <class G, class D>
  void reference() {
    CK(cudaMemsetAsync(inter_ref, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y_ref, 0xff, (size_t)H * 2, s));
    gate_up<G>(3, inter_ref);
    down<D>(3, inter_ref, y_ref);
    inter_host = fetch(inter_ref, (size_t)K * I);
    y_host = fetch(y_ref, H);
  }

  template <class G, bool WAIT_FIRST = false>
  float time_gate_up() { return probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) gate_up<G, WAIT_FIRST>(l, inter); }); }
  template <class D, bool EARLY = false>
  float time_down() { return probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) down<D, EARLY>(l, inter, y); }); }
  template <class G, class D, bool EARLY = false>
  float time_pair() {
    return probe::graph_us(s, reps, kLayers, [&] {
      for (int l = 0; l < kLayers; ++l) { gate_up<G, EARLY>(l, inter); down<D, EARLY>(l, inter, sink + (size_t)(l + 1) * H); }
    });
  }

  template <class G>
  void check_gate_up(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s));
    gate_up<G>(3, inter);
    const double d = probe::rel_diff(fetch(inter, (size_t)K * I), inter_host);
    const float t = time_gate_up<G>();
    std::printf("  gate_up %-26s inter diff %.2e  %6.2f us  %5.0f GB/s\n", name, d, t, bytes_gu / t / 1e3);
  }
  template <class D, bool EARLY = false>
  void check_down(const char* name) {
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    down<D>(3, inter_ref, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float t = time_down<D, EARLY>();
    std::printf("  down    %-26s y diff %.2e      %6.2f us  %5.0f GB/s\n", name, d, t, bytes_dn / t / 1e3);
  }
  template <class G, class D, bool EARLY = false>
  void check_pair(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    gate_up<G, EARLY>(3, inter);
    down<D, EARLY>(3, inter, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float t = time_pair<G, D, EARLY>();
    std::printf("  pair    %-26s y diff %.2e      %6.2f us  %5.0f GB/s  %.1f%% of 3.1 TB/s\n", name, d, t, (bytes_gu + bytes_dn) / t / 1e3,
                100.0 * (bytes_gu + bytes_dn) / t / 3.1e6);
  }
};

template <class F>
void qwen3_30b(const char* fmt, std::mt19937& rng, int reps) {
  using St = mf::GateUpLayout;
  Bench<F, 2048, 768, 128, 8, St::kStacked> b(rng, reps);
  std::printf("## %s, Qwen3-30B-A3B, M=1: gate_up %.1f MB, down %.1f MB\n", fmt, b.bytes_gu / 1e6, b.bytes_dn / 1e6);
  using G1 = Cfg<1, 8, 2, 4, 1>;     // catalogue gate_up
  using D1 = Cfg<1, 16, 2, 16, 1>;   // catalogue down (nvfp4; mxfp4 takes U 3)
  b.template reference<G1, D1>();
  b.template check_gate_up<G1>("v1 W8 U2 S4 mb1");
  b.template check_gate_up<Cfg<1, 8, 4, 4, 3>>("v1 W8 U4 S4 mb3");
  b.template check_gate_up<Cfg<2, 8, 4, 4, 3>>("v2 W8 U4 S4 mb3");
  b.template check_gate_up<Cfg<2, 8, 4, 4, 2>>("v2 W8 U4 S4 mb2");
  b.template check_gate_up<Cfg<2, 4, 4, 4, 6>>("v2 W4 U4 S4 mb6");
  b.template check_gate_up<Cfg<2, 16, 4, 4, 1>>("v2 W16 U4 S4 mb1");
  b.template check_gate_up<Cfg<2, 8, 8, 2, 3>>("v2 W8 U8 S2 mb3");
  b.template check_gate_up<Cfg<2, 8, 2, 8, 3>>("v2 W8 U2 S8 mb3");
  b.template check_down<D1>("v1 W16 U2 S16 mb1");
  b.template check_down<Cfg<1, 16, 3, 16, 1>>("v1 W16 U3 S16 mb1");
  b.template check_down<Cfg<2, 16, 3, 16, 1>>("v2 W16 U3 S16 mb1");
  b.template check_down<Cfg<2, 24, 2, 24, 1>>("v2 W24 U2 S24 mb1");
  b.template check_down<Cfg<2, 32, 2, 32, 1>>("v2 W32 U2 S32 mb1");
  b.template check_down<Cfg<2, 8, 6, 8, 1>>("v2 W8 U6 S8 mb1");
  b.template check_down<Cfg<2, 16, 3, 16, 1>, true>("v2 W16 U3 S16 early");
  b.template check_pair<G1, D1>("v1 catalogue");
  b.template check_pair<Cfg<2, 8, 4, 4, 3>, Cfg<2, 16, 3, 16, 1>>("v2 g(W8U4S4) d(W16U3S16)");
  b.template check_pair<Cfg<2, 8, 4, 4, 3>, Cfg<2, 24, 2, 24, 1>>("v2 g(W8U4S4) d(W24U2S24)");
  b.template check_pair<Cfg<2, 4, 4, 4, 6>, Cfg<2, 16, 3, 16, 1>>("v2 g(W4U4S4) d(W16U3S16)");
  b.template check_pair<Cfg<2, 8, 4, 4, 3>, Cfg<2, 16, 3, 16, 1>, true>("v2 early");
  b.template check_pair<Cfg<2, 8, 4, 4, 3>, Cfg<2, 24, 2, 24, 1>, true>("v2 early d(W24U2S24)");
  b.template check_pair<G1, D1>("v1 catalogue again");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261124);
  qwen3_30b<mf::Nvfp4Weights>("nvfp4", rng, reps);
  qwen3_30b<mf::Mxfp4Weights>("mxfp4", rng, reps);
  qwen3_30b<mf::Int4Group128Weights>("int4_group128", rng, reps);
  return 0;
}
