// Probe (not part of the toolkit): when the tensor-core 4-bit kernels ask for their weights, and
// where their time goes. streaming_probe.cu measured what the bytes alone need at M=1 (NVFP4,
// Qwen3-30B-A3B: gate_up's 14.2 MB in 5.7 us, down's 7.1 MB in 3.5 us, the pair 9.1 us) against
// 7.7 + 6.3 us for the catalogue's kernels; its first version (one_trip_probe.cu, commit 1504fed)
// found that asking for all of a warp's weights at once is slower for gate_up (the bytes arrive
// together and the decode follows them).
//
// Each warp takes P consecutive steps (128 codes of its tile's rows each) of its tile:
//   batches  : D steps asked for, D steps reduced, and so on (the header's order with U = D)
//   prefetch : D steps in flight; step i + D is asked for before step i is reduced
//   loads first: the first D steps are asked for before the activations are staged
// The catalogue's kernels (header, "v1") are the reference: inter and y of every variant are
// checked against theirs on the same random layer (the partial sums are added in another order:
// differences at the bf16 rounding). Times: 16 layers rotated in one graph with programmatic
// dependent launch (each kernel alone, weights from DRAM; the same with one layer's weights 16
// times, so from L2; the pair), and one launch in the middle of a chain traced per block
// (%globaltimer, warp 0): waited, staged, reduced, combined, stored.
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> decode_pipeline_probe.cu
// Run:   decode_pipeline_probe [reps]
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace mf {

// Where a traced block writes its stamps: [block][8].
struct Stamps {
  unsigned long long* at;
  __device__ __forceinline__ void mark(int k) const {
    if (at != nullptr && threadIdx.x == 0) at[(blockIdx.x + static_cast<size_t>(blockIdx.y) * gridDim.x) * 8 + k] = probe::now_ns();
  }
};

// The order in which a warp asks for its P steps and reduces them (see the file's comment).
template <int P, int D, bool PREFETCH, bool LOADS_FIRST>
struct StepOrder {
  static_assert(D >= 1 && D <= P, "1 <= steps in flight <= steps per warp");
  static_assert(PREFETCH || P % D == 0, "batches of D divide P");
  template <class Issue, class Stage, class Reduce>
  __device__ __forceinline__ static void run(Issue issue, Stage stage, Reduce reduce) {
    if constexpr (LOADS_FIRST) {
#pragma unroll
      for (int i = 0; i < D; ++i) issue(i);
      stage();
    } else {
      stage();
#pragma unroll
      for (int i = 0; i < D; ++i) issue(i);
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if constexpr (PREFETCH) {
        if (i + D < P) issue(i + D);
      } else {
        if (i > 0 && i % D == 0) {
#pragma unroll
          for (int j = 0; j < D; ++j) issue(i + j);
        }
      }
      reduce(i);
    }
  }
};

template <class F, int H, int I, int E, int K, GateUpLayout L, int W, int S, class Order, int P, class Epilogue>
__device__ __forceinline__ void gate_up_probe(const __nv_bfloat16* __restrict__ x, WeightArgs w_gate_up, const int* __restrict__ topk_ids,
                                              __nv_bfloat16* __restrict__ inter, int num_tokens, Epilogue epi, Stamps stamps) {
  using Row = TileRow<H>;
  static_assert(P * S >= Row::kSteps, "S warps of P steps cover the tile");
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
  const GateUpTileRows<F, H, I> rows(w_gate_up, e < 0 ? 0 : e, gate_n, up_n);
  uint4* xs = reinterpret_cast<uint4*>(smem);
  TileStep<F> step[P];
  float gate = 0.0f, up = 0.0f;
  Order::run(
      [&](int i) {
        const int c = (part * P + i) * 4 + t;
        if (routed) rows.load(step[i], c, mine && c < Row::kChunks);
      },
      [&] {
        stage_tile_activations<1, H>(x + static_cast<size_t>(slot / K) * H, xs);
        stamps.mark(2);
      },
      [&](int i) {
        if (routed && part * P + i < Row::kSteps) {
          const StepSums sums = step[i].reduce(xs + (part * P + i) * 4 + t, Row::kPadded);
          gate += sums.lo;
          up += sums.hi;
        }
      });
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(gate, up, reinterpret_cast<float*>(smem + 64 * Row::kPadded))) return;
  }
  stamps.mark(4);
  if (t == 0 && mine) {
    constexpr float kUnscale = TileDecode<F>::kUnscale;
    gate = apply_factor<F>(gate, row_factor<F, 2 * I, 2>(w_gate_up, e, gate_n, 0)) * kUnscale;
    up = apply_factor<F>(up, row_factor<F, 2 * I, 2>(w_gate_up, e, up_n, 1)) * kUnscale;
    store_bf16(inter + static_cast<size_t>(slot) * I + neuron, epi(gate, up));
  }
  stamps.mark(5);
}

// EARLY: the weights are asked for before griddepcontrol.wait (only the ids, written two kernels
// back, are read before it), then the wait, then the staging of inter.
template <class F, int H, int I, int E, int K, int W, int S, class Order, int P, bool EARLY, class Epilogue>
__device__ __forceinline__ void down_probe(const __nv_bfloat16* __restrict__ inter, WeightArgs w_down, const int* __restrict__ topk_ids,
                                           const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens, Epilogue epi,
                                           Stamps stamps) {
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  static_assert(P * S >= kSteps, "S warps of P steps cover the tile");
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
  uint4* xs = reinterpret_cast<uint4*>(smem);
  DownTileGroup<F, H, I, E, K, 1> step[P];
  float lo = 0.0f, hi = 0.0f;
  Order::run(
      [&](int i) { step[i].load(w_down, part * P + i, lane_expert, routing_weight, h_lo, h_hi, t); },
      [&] {
        if constexpr (EARLY) {
          wait_for_previous_kernel();
          stamps.mark(1);
        }
        stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
        stamps.mark(2);
      },
      [&](int i) { step[i].reduce(lo, hi, xs, part * P + i, t); });
  stamps.mark(3);
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem + 64 * K * Row::kPadded))) return;
  }
  stamps.mark(4);
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if (t == 0 && active) {
    if (h_lo < H) store_bf16(y + static_cast<size_t>(token) * H + h_lo, epi(lo * kUnscale));
    if (h_hi < H) store_bf16(y + static_cast<size_t>(token) * H + h_hi, epi(hi * kUnscale));
  }
  stamps.mark(5);
}

}  // namespace mf

namespace {
constexpr int kLayers = 16;
using probe::Combine;
using probe::Layer;
using probe::Silu;

// A schedule of the probe. HEADER: the header's kernel body (W, U = D, S; P unused).
template <bool HEADER, int W, int S, int P, int D, bool PREFETCH, bool LOADS_FIRST, int MB>
struct Cfg {
  static constexpr bool kHeader = HEADER;
  static constexpr int kW = W, kS = S, kP = P, kD = D, kMB = MB;
  using Order = mf::StepOrder<P, D, PREFETCH, LOADS_FIRST>;
};

template <class F, int H, int I, int E, int K, mf::GateUpLayout L, class C, bool WAIT_FIRST>
__global__ void __launch_bounds__(32 * C::kW, C::kMB) gate_up_kernel(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids, __nv_bfloat16* inter,
                                                                     int m, unsigned long long* stamps) {
  const mf::Stamps st{stamps};
  st.mark(0);
  if constexpr (WAIT_FIRST) {
    mf::wait_for_previous_kernel();
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
  }
  st.mark(1);
  if constexpr (C::kHeader) mf::gate_up_tensor_core<F, H, I, E, K, L, C::kW, C::kD, C::kS>(x, w, ids, inter, m, Silu{});
  else mf::gate_up_probe<F, H, I, E, K, L, C::kW, C::kS, typename C::Order, C::kP>(x, w, ids, inter, m, Silu{}, st);
  if constexpr (C::kHeader) st.mark(5);
}
template <class F, int H, int I, int E, int K, class C, bool EARLY>
__global__ void __launch_bounds__(32 * C::kW, C::kMB) down_kernel(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids, const float* tw,
                                                                  __nv_bfloat16* y, int m, unsigned long long* stamps) {
  const mf::Stamps st{stamps};
  st.mark(0);
  if constexpr (EARLY) {
    mf::let_next_kernel_begin();
  } else {
    mf::begin_after_previous_kernel();
    st.mark(1);
  }
  if constexpr (C::kHeader) mf::down_tensor_core<F, H, I, E, K, C::kW, C::kD, C::kS>(inter, w, ids, tw, y, m, Combine{});
  else mf::down_probe<F, H, I, E, K, C::kW, C::kS, typename C::Order, C::kP, EARLY>(inter, w, ids, tw, y, m, Combine{}, st);
  if constexpr (C::kHeader) st.mark(5);
}

template <class F, int H, int I, int E, int K, mf::GateUpLayout L>
struct Bench {
  std::vector<Layer> layers;
  __nv_bfloat16 *x, *inter, *inter_ref, *y, *y_ref, *sink;
  unsigned long long* stamps;
  cudaStream_t s;
  int reps, sms;
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
    CK(cudaMalloc(&stamps, (size_t)K * I * 64));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    using B = probe::LayerBytes<F, H, I, E>;
    bytes_gu = (double)(B::kGateUpCodes + B::gate_up_scales()) / E * K;
    bytes_dn = (double)(B::kDownCodes + B::down_scales()) / E * K;
  }
  ~Bench() {
    probe::free_layers(layers);
    cudaFree(x); cudaFree(inter); cudaFree(inter_ref); cudaFree(y); cudaFree(y_ref); cudaFree(sink); cudaFree(stamps);
    cudaStreamDestroy(s);
  }

  template <class C>
  static dim3 gate_up_grid() { return dim3(mf::ceil_div(I, 8 * (C::kW / C::kS)), K); }
  template <class C>
  static dim3 down_grid() { return dim3(mf::ceil_div(H, 16 * (C::kW / C::kS)), 1); }

  // wl: the layer whose weights are read (l, or 0 for L2-resident chains); st: stamps or null
  template <class C, bool WAIT_FIRST = false>
  void gate_up(int l, int wl, __nv_bfloat16* out, unsigned long long* st = nullptr) {
    auto k = gate_up_kernel<F, H, I, E, K, L, C, WAIT_FIRST>;
    const size_t smem = 64 * mf::TileRow<H>::kPadded + (C::kS > 1 ? C::kW * 64 : 0);
    const Layer& b = layers[wl];
    probe::launch(false, k, gate_up_grid<C>(), dim3(32 * C::kW), smem, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, 1, st);
  }
  template <class C, bool EARLY = false>
  void down(int l, int wl, const __nv_bfloat16* in, __nv_bfloat16* out, unsigned long long* st = nullptr) {
    auto k = down_kernel<F, H, I, E, K, C, EARLY>;
    const size_t smem = 64 * K * mf::TileRow<I>::kPadded + (C::kS > 1 ? C::kW * 64 : 0);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const Layer& b = layers[wl];
    (void)l;
    probe::launch(false, k, down_grid<C>(), dim3(32 * C::kW), smem, s, in, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                  (const int*)b.ids, (const float*)b.tw, out, 1, st);
  }

  std::vector<uint16_t> fetch(const __nv_bfloat16* p, size_t n) {
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> h(n);
    CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return h;
  }

  // The stamps of `blocks` traced blocks: for each mark, min / median / max over blocks in us from
  // the earliest mark 0.
  std::string trace(int blocks) {
    std::vector<unsigned long long> h((size_t)blocks * 8);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < blocks; ++b) if (h[b * 8]) t0 = std::min(t0, h[b * 8]);
    static const char* names[6] = {"entry", "waited", "staged", "reduced", "combined", "stored"};
    std::string out;
    char buf[96];
    for (int k = 0; k < 6; ++k) {
      std::vector<double> v;
      for (int b = 0; b < blocks; ++b) if (h[b * 8 + k]) v.push_back((h[b * 8 + k] - t0) * 1e-3);
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::snprintf(buf, sizeof buf, " %s %.2f/%.2f/%.2f", names[k], v.front(), v[v.size() / 2], v.back());
      out += buf;
    }
    return out;
  }

  template <class G, class D>
  void reference() {
    CK(cudaMemsetAsync(inter_ref, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y_ref, 0xff, (size_t)H * 2, s));
    gate_up<G>(3, 3, inter_ref);
    down<D>(3, 3, inter_ref, y_ref);
    inter_host = fetch(inter_ref, (size_t)K * I);
    y_host = fetch(y_ref, H);
  }

  template <class One>
  float chain(One one) { return probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) one(l); }); }

  template <class C>
  void check_gate_up(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s));
    gate_up<C>(3, 3, inter);
    const double d = probe::rel_diff(fetch(inter, (size_t)K * I), inter_host);
    const float dram = chain([&](int l) { gate_up<C>(l, l, inter); });
    const float l2 = chain([&](int l) { gate_up<C>(l, 0, inter); });
    const dim3 grid = gate_up_grid<C>();
    CK(cudaMemsetAsync(stamps, 0, (size_t)grid.x * grid.y * 64, s));
    chain([&](int l) { gate_up<C>(l, l, inter, l == 8 ? stamps : nullptr); });
    std::printf("  gate_up %-30s diff %.1e  %6.2f us (%4.0f GB/s), L2 %6.2f |%s\n", name, d, dram, bytes_gu / dram / 1e3, l2,
                trace(grid.x * grid.y).c_str());
  }
  template <class C, bool EARLY = false>
  void check_down(const char* name) {
    CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    down<C>(3, 3, inter_ref, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float dram = chain([&](int l) { down<C, EARLY>(l, l, inter, y); });
    const float l2 = chain([&](int l) { down<C, EARLY>(l, 0, inter, y); });
    const dim3 grid = down_grid<C>();
    CK(cudaMemsetAsync(stamps, 0, (size_t)grid.x * grid.y * 64, s));
    chain([&](int l) { down<C, EARLY>(l, l, inter, y, l == 8 ? stamps : nullptr); });
    std::printf("  down    %-30s diff %.1e  %6.2f us (%4.0f GB/s), L2 %6.2f |%s\n", name, d, dram, bytes_dn / dram / 1e3, l2,
                trace(grid.x * grid.y).c_str());
  }
  template <class G, class D, bool EARLY = false>
  void check_pair(const char* name) {
    CK(cudaMemsetAsync(inter, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
    gate_up<G, EARLY>(3, 3, inter);
    down<D, EARLY>(3, 3, inter, y);
    const double d = probe::rel_diff(fetch(y, H), y_host);
    const float t = chain([&](int l) { gate_up<G, EARLY>(l, l, inter); down<D, EARLY>(l, l, inter, sink + (size_t)(l + 1) * H); });
    std::printf("  pair    %-30s diff %.1e  %6.2f us (%4.0f GB/s, %.1f%% of 3.1 TB/s)\n", name, d, t, (bytes_gu + bytes_dn) / t / 1e3,
                100.0 * (bytes_gu + bytes_dn) / t / 3.1e6);
  }
};

// Cfg<header, W, S, P, D, prefetch, loads first, min blocks>
using GateUpCatalogue = Cfg<true, 8, 4, 4, 2, false, false, 1>;
using DownCatalogue = Cfg<true, 16, 16, 3, 2, false, false, 1>;

template <class F>
void qwen3_30b(const char* fmt, std::mt19937& rng, int reps) {
  using St = mf::GateUpLayout;
  Bench<F, 2048, 768, 128, 8, St::kStacked> b(rng, reps);
  std::printf("## %s, Qwen3-30B-A3B, M=1: gate_up %.1f MB, down %.1f MB; trace: min/median/max us over blocks\n", fmt, b.bytes_gu / 1e6,
              b.bytes_dn / 1e6);
  b.template reference<GateUpCatalogue, DownCatalogue>();
  b.template check_gate_up<GateUpCatalogue>("header W8 U2 S4");
  b.template check_gate_up<Cfg<false, 8, 4, 4, 2, false, false, 1>>("W8 S4 P4 batches of 2");
  b.template check_gate_up<Cfg<false, 8, 4, 4, 2, false, true, 1>>("W8 S4 P4 batches of 2, first");
  b.template check_gate_up<Cfg<false, 8, 4, 4, 2, true, true, 3>>("W8 S4 P4 prefetch 2, first");
  b.template check_gate_up<Cfg<false, 8, 4, 4, 1, true, true, 3>>("W8 S4 P4 prefetch 1, first");
  b.template check_gate_up<Cfg<false, 8, 4, 4, 3, true, true, 3>>("W8 S4 P4 prefetch 3, first");
  b.template check_gate_up<Cfg<false, 4, 2, 8, 2, true, true, 6>>("W4 S2 P8 prefetch 2, first");
  b.template check_gate_up<Cfg<false, 4, 2, 8, 3, true, true, 6>>("W4 S2 P8 prefetch 3, first");
  b.template check_gate_up<Cfg<false, 8, 8, 2, 1, true, true, 3>>("W8 S8 P2 prefetch 1, first");
  b.template check_down<DownCatalogue>("header W16 U2 S16");
  b.template check_down<Cfg<false, 16, 16, 3, 3, false, false, 1>>("W16 S16 P3 batch of 3");
  b.template check_down<Cfg<false, 16, 16, 3, 3, false, true, 1>>("W16 S16 P3 batch of 3, first");
  b.template check_down<Cfg<false, 16, 16, 3, 1, true, true, 1>>("W16 S16 P3 prefetch 1, first");
  b.template check_down<Cfg<false, 16, 16, 3, 2, true, true, 1>>("W16 S16 P3 prefetch 2, first");
  b.template check_down<Cfg<false, 24, 24, 2, 2, false, true, 1>>("W24 S24 P2 batch of 2, first");
  b.template check_down<Cfg<false, 24, 24, 2, 1, true, true, 1>>("W24 S24 P2 prefetch 1, first");
  b.template check_down<Cfg<false, 12, 12, 4, 2, true, true, 1>>("W12 S12 P4 prefetch 2, first");
  b.template check_down<Cfg<false, 16, 16, 3, 3, false, true, 1>, true>("W16 S16 P3 batch of 3, early");
  b.template check_down<Cfg<false, 24, 24, 2, 2, false, true, 1>, true>("W24 S24 P2 batch of 2, early");
  b.template check_pair<GateUpCatalogue, DownCatalogue>("catalogue");
  b.template check_pair<Cfg<false, 8, 4, 4, 2, true, true, 3>, Cfg<false, 24, 24, 2, 2, false, true, 1>>("g P4 prefetch 2, d W24");
  b.template check_pair<Cfg<false, 8, 4, 4, 2, true, true, 3>, Cfg<false, 16, 16, 3, 2, true, true, 1>>("g P4 prefetch 2, d W16 pf 2");
  b.template check_pair<GateUpCatalogue, Cfg<false, 24, 24, 2, 2, false, true, 1>>("g header, d W24");
  b.template check_pair<Cfg<false, 8, 4, 4, 2, true, true, 3>, Cfg<false, 24, 24, 2, 2, false, true, 1>, true>("g P4 prefetch 2, d W24 early");
  b.template check_pair<Cfg<false, 8, 4, 4, 2, true, true, 3>, Cfg<false, 16, 16, 3, 3, false, true, 1>, true>("g P4 prefetch 2, d W16 early");
  b.template check_pair<GateUpCatalogue, DownCatalogue>("catalogue again");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261124);
  qwen3_30b<mf::Nvfp4Weights>("nvfp4", rng, reps);
  qwen3_30b<mf::Mxfp4Weights>("mxfp4", rng, reps);
  return 0;
}
