// Probe (not part of the toolkit): the one-kernel decode layer with warps of two jobs
// (dataflow_layer.cuh) against the catalogue's two tensor-core kernels (gate_up_tensor_core,
// down_tensor_core) on the same random 4-bit layer, M = 1: differences of inter and y, the time
// of a layer over 16 layers of weights rotated in one graph with programmatic dependent launch
// (as `moeforge bench formats` does), and one launch traced per block (%globaltimer).
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> dataflow_probe.cu -o dataflow_probe
// Run:   dataflow_probe [reps]
#include "dataflow_layer.cuh"
#include "moeforge_device.cuh"
#include "expert_probe.cuh"
#include "probe_harness.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using probe::NoDecodeNvfp4;

namespace {
constexpr int kLayers = 16;

using probe::Combine;
using probe::Silu;
using probe::tc_down;
using probe::tc_gate_up;

template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int GW, int GU, bool DOWN = true>
__global__ void __launch_bounds__(32 * (GW + K), 1) dataflow(const __nv_bfloat16* x, mf::WeightArgs gu, mf::WeightArgs dn, const int* ids,
                                                            const float* tw, __nv_bfloat16* inter, __nv_bfloat16* y, unsigned* counters,
                                                            unsigned long long* stamps) {
  mf::begin_after_previous_kernel();
  mf::dataflow_mlp<F, H, I, E, K, L, GW, GU, DOWN>(x, gu, dn, ids, tw, inter, y, counters, Silu{}, Combine{}, stamps);
}

// The pair with down's weights asked for before its wait: gate_up waits for its predecessor (the
// router, which writes the ids) before it lets down launch, so down may read the ids and issue its
// first group of weight loads while gate_up still runs, then wait for inter.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int W, int U, int S>
__global__ void __launch_bounds__(32 * W, 1) tc_gate_up_wait_first(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids, __nv_bfloat16* inter, int m) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  mf::gate_up_tensor_core<F, H, I, E, K, L, W, U, S>(x, w, ids, inter, m, Silu{});
}
template <class F, int H, int I, int E, int K, int W, int U, int S>
__global__ void __launch_bounds__(32 * W, 1) tc_down_early(const __nv_bfloat16* __restrict__ inter, mf::WeightArgs w_down, const int* __restrict__ topk_ids,
                                                          const float* __restrict__ topk_weights, __nv_bfloat16* __restrict__ y, int num_tokens) {
  using namespace mf;
  using Row = TileRow<I>;
  constexpr int kSteps = K * Row::kSteps;
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  extern __shared__ __align__(16) unsigned char smem[];
  const int token = blockIdx.y;
  if (token >= num_tokens) return;
  const probe::DownLane<H, E, K, W, S> me(topk_ids, topk_weights, token);
  const int t = me.t, part = me.part, lane_expert = me.lane_expert, h_lo = me.h_lo, h_hi = me.h_hi;
  const float routing_weight = me.routing_weight;
  const bool active = me.active;
  DownTileGroup<F, H, I, E, K, U> group;
  group.load(w_down, part * U, lane_expert, routing_weight, h_lo, h_hi, t);  // before the wait: only the ids are read
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  uint4* xs = reinterpret_cast<uint4*>(smem);
  stage_tile_activations<K, I>(inter + static_cast<size_t>(token) * K * I, xs);
  float lo = 0.0f, hi = 0.0f;
#pragma unroll 1
  for (int s0 = part * U; s0 < kSteps; s0 += S * U) {
    if (s0 != part * U) group.load(w_down, s0, lane_expert, routing_weight, h_lo, h_hi, t);
    group.reduce(lo, hi, xs, s0, t);
  }
  if constexpr (S > 1) {
    if (!combine_tile_warps<S>(lo, hi, reinterpret_cast<float*>(smem + 64 * K * Row::kPadded))) return;
  }
  constexpr float kUnscale = TileDecode<F>::kUnscale;
  if (t == 0 && active) {
    if (h_lo < H) store_bf16(y + static_cast<size_t>(token) * H + h_lo, lo * kUnscale);
    if (h_hi < H) store_bf16(y + static_cast<size_t>(token) * H + h_hi, hi * kUnscale);
  }
}


using probe::bf16_to_float;
using probe::float_to_bf16;
using probe::Layer;
using probe::rel_diff;

// The early pair (gate_up GW U S, down DW U S) on the probe's layers: y against `y_ref` (the
// catalogue pair's, layer 0) and the layer time over the rotation.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int GW, int GU, int GS, int DW, int DU, int DS>
void time_early(const std::vector<Layer>& layers, __nv_bfloat16* x, __nv_bfloat16* inter, __nv_bfloat16* y, cudaStream_t s, int reps,
                const std::vector<uint16_t>& y_ref) {
  const dim3 ng(mf::ceil_div(I, 8 * (GW / GS)), K), nd2(mf::ceil_div(H, 16 * (DW / DS)), 1);
  const size_t ngs = 64 * mf::TileRow<H>::kPadded + (GS > 1 ? GW * 64 : 0);
  const size_t nds = 64 * K * mf::TileRow<I>::kPadded + (DS > 1 ? DW * 64 : 0);
  auto gu = [&](int l) { const Layer& b = layers[l]; probe::launch(false, tc_gate_up_wait_first<F, H, I, E, K, L, GW, GU, GS>, ng, dim3(32 * GW), ngs, s, (const __nv_bfloat16*)(x + (size_t)l * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, inter, 1); };
  auto dn = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, tc_down_early<F, H, I, E, K, DW, DU, DS>, nd2, dim3(32 * DW), nds, s, (const __nv_bfloat16*)inter, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, 1); };
  CK(cudaMemsetAsync(y, 0xff, (size_t)H * 2, s));
  gu(0); dn(0, y);
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> yb(H);
  CK(cudaMemcpy(yb.data(), y, H * 2, cudaMemcpyDeviceToHost));
  const float t = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { gu(l); dn(l, x + (size_t)(l + 1) * H); } });
  std::printf("   early pair gu(W%d U%d S%d) dn(W%d U%d S%d): y diff %.2e against the pair, layer %6.2f us\n", GW, GU, GS, DW, DU, DS, rel_diff(yb, y_ref), t);
}

// GW gate warps per block, GU steps loaded ahead; the pair: gate_up (W U S), down (W U S).
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int GW, int GU, int PGW, int PGU, int PGS, int PDW, int PDU, int PDS>
void compare(const char* name, std::mt19937& rng, int reps, int unrouted, bool early = false) {
  constexpr int m = 1;
  using D = mf::DataflowMlp<F, H, I, K, GW>;
  using Bytes = probe::LayerBytes<F, H, I, E>;
  std::vector<Layer> layers = probe::make_layers<F, H, I, E, K>(kLayers, m, unrouted, rng);
  std::vector<uint16_t> xh((size_t)(kLayers + 1) * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = float_to_bf16(nd(rng));
  __nv_bfloat16 *x, *inter_tc, *inter_df, *y_tc, *y_df, *y_chk;
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&inter_tc, (size_t)K * I * 2)); CK(cudaMalloc(&inter_df, (size_t)K * I * 2));
  CK(cudaMalloc(&y_tc, (size_t)H * 2)); CK(cudaMalloc(&y_df, (size_t)H * 2)); CK(cudaMalloc(&y_chk, (size_t)H * 2));
  unsigned* counters; CK(cudaMalloc(&counters, 2 * K * 4)); CK(cudaMemset(counters, 0, 2 * K * 4));
  cudaStream_t s = probe::stream_after_setup();

  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const dim3 ng(mf::ceil_div(I, 8 * (PGW / PGS)), K), nd2(mf::ceil_div(H, 16 * (PDW / PDS)), 1);
  const size_t ngs = 64 * mf::TileRow<H>::kPadded + (PGS > 1 ? PGW * 64 : 0);
  const size_t nds = 64 * K * mf::TileRow<I>::kPadded + (PDS > 1 ? PDW * 64 : 0);
  auto tc_gu = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, tc_gate_up<F, H, I, E, K, L, PGW, PGU, PGS>, ng, dim3(32 * PGW), ngs, s, (const __nv_bfloat16*)(x + (size_t)l * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, m); };
  auto tc_dn = [&](int l, const __nv_bfloat16* in, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, tc_down<F, H, I, E, K, PDW, PDU, PDS>, nd2, dim3(32 * PDW), nds, s, in, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, m); };
  auto kernel = dataflow<F, H, I, E, K, L, GW, GU>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, D::kBytes));
  int per_sm = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * D::kWarps, D::kBytes));
  cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, kernel));
  if (per_sm < 1 || D::kDownTiles > sms || D::kGateUnits > sms * GW) {
    std::printf("%-16s dataflow GW%d GU%d: does not fit (%d per SM, %d B shared, %d down tiles, %d gate units)\n", name, GW, GU, per_sm, D::kBytes, D::kDownTiles, D::kGateUnits);
    return;
  }
  auto df = [&](int l, __nv_bfloat16* inter, __nv_bfloat16* out, unsigned long long* stamps) {
    const Layer& b = layers[l];
    probe::launch(true, kernel, dim3(sms), dim3(32 * D::kWarps), D::kBytes, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                  mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                  (const int*)b.ids, (const float*)b.tw, inter, out, counters, stamps);
  };
  // correctness: three layers; y against the tensor-core down on the dataflow's own inter
  double worst_inter = 0, worst_y = 0;
  for (int l = 0; l < 3; ++l) {
    CK(cudaMemsetAsync(inter_df, 0xff, (size_t)K * I * 2, s)); CK(cudaMemsetAsync(y_df, 0xff, (size_t)H * 2, s));
    tc_gu(l, inter_tc);
    df(l, inter_df, y_df, nullptr);
    tc_dn(l, inter_df, y_chk);
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> a((size_t)K * I), b2((size_t)K * I), ya(H), yb(H);
    CK(cudaMemcpy(a.data(), inter_tc, a.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b2.data(), inter_df, b2.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ya.data(), y_chk, ya.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yb.data(), y_df, yb.size() * 2, cudaMemcpyDeviceToHost));
    if (unrouted > 0) {  // unrouted slots' inter is unspecified in both: compare routed rows only
      a.erase(a.begin(), a.begin() + (size_t)unrouted * I); b2.erase(b2.begin(), b2.begin() + (size_t)unrouted * I);
    }
    worst_inter = std::max(worst_inter, rel_diff(b2, a));
    worst_y = std::max(worst_y, rel_diff(yb, ya));
  }
  std::vector<unsigned> cnt(2 * K);
  CK(cudaMemcpy(cnt.data(), counters, cnt.size() * 4, cudaMemcpyDeviceToHost));
  unsigned left = 0;
  for (unsigned c : cnt) left |= c;
  std::printf("%-16s dataflow GW%d GU%d (%d warps, %d regs, %d B shared): inter diff %.2e  y diff %.2e  counters %s\n", name, GW, GU,
              D::kWarps, fa.numRegs, D::kBytes, worst_inter, worst_y, left == 0 ? "left zero" : "NOT ZERO");
  if (reps > 0 && early) {  // layer 0's y from the catalogue pair, then the early pairs (they overwrite x's later layers: last)
    CK(cudaMemsetAsync(y_tc, 0xff, (size_t)H * 2, s));
    tc_gu(0, inter_tc); tc_dn(0, inter_tc, y_tc);
    CK(cudaStreamSynchronize(s));
    std::vector<uint16_t> yr(H);
    CK(cudaMemcpy(yr.data(), y_tc, H * 2, cudaMemcpyDeviceToHost));
    const float t_pair = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { tc_gu(l, inter_tc); tc_dn(l, inter_tc, x + (size_t)(l + 1) * H); } });
    std::printf("%-16s catalogue pair layer %6.2f us\n", name, t_pair);
    time_early<F, H, I, E, K, L, PGW, PGU, PGS, PDW, PDU, PDS>(layers, x, inter_tc, y_df, s, reps, yr);
    time_early<F, H, I, E, K, L, PGW, PGU, PGS, 8, 3, 8>(layers, x, inter_tc, y_df, s, reps, yr);
    time_early<F, H, I, E, K, L, PGW, PGU, PGS, 8, 2, 8>(layers, x, inter_tc, y_df, s, reps, yr);
    time_early<F, H, I, E, K, L, PGW, PGU, PGS, 16, 2, 16>(layers, x, inter_tc, y_df, s, reps, yr);
    time_early<F, H, I, E, K, L, PGW, PGU, PGS, 4, 3, 4>(layers, x, inter_tc, y_df, s, reps, yr);
    const float t_pair2 = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { tc_gu(l, inter_tc); tc_dn(l, inter_tc, x + (size_t)(l + 1) * H); } });
    std::printf("%-16s catalogue pair layer again %6.2f us\n", name, t_pair2);
  } else if (reps > 0) {
    const float t_gu = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) tc_gu(l, inter_tc); });
    const float t_dn = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) tc_dn(l, inter_tc, y_tc); });
    const float t_pair = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { tc_gu(l, inter_tc); tc_dn(l, inter_tc, x + (size_t)(l + 1) * H); } });
    const float t_df = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) df(l, inter_df, x + (size_t)(l + 1) * H, nullptr); });
    auto gate_only = dataflow<F, H, I, E, K, L, GW, GU, false>;
    CK(cudaFuncSetAttribute(gate_only, cudaFuncAttributeMaxDynamicSharedMemorySize, D::kBytes));
    const float t_gate = probe::graph_us(s, reps, kLayers, [&] {
      for (int l = 0; l < kLayers; ++l) {
        const Layer& b = layers[l];
        probe::launch(true, gate_only, dim3(sms), dim3(32 * D::kWarps), D::kBytes, s, (const __nv_bfloat16*)(x + (size_t)l * H),
                      mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr},
                      (const int*)b.ids, (const float*)b.tw, inter_df, y_df, counters, (unsigned long long*)nullptr);
      }
    });
    CK(cudaMemsetAsync(counters, 0, 2 * K * 4, s));  // gate_up alone leaves its counts behind
    const double bytes = Bytes::routed(K);
    std::printf("   pair: gate_up %6.2f down %6.2f layer %6.2f us (%.0f GB/s) | dataflow layer %6.2f us (%.0f GB/s, %.1f MB), its gate_up alone %6.2f us\n", t_gu, t_dn,
                t_pair, bytes / (t_pair * 1e3), t_df, bytes / (t_df * 1e3), bytes / 1e6, t_gate);
    unsigned long long* stamps; CK(cudaMalloc(&stamps, sms * 64));
    std::vector<unsigned long long> st((size_t)sms * 8);
    for (int rep = 0; rep < 3; ++rep) {  // the last of three launches, each on fresh weights
      CK(cudaMemsetAsync(stamps, 0, sms * 64, s));
      df(rep + 4, inter_df, y_df, stamps);
      CK(cudaStreamSynchronize(s));
    }
    CK(cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    const char* names[6] = {"start", "x staged", "down parked", "gate done", "slot 0 ready", "y stored"};
    std::printf("   trace,");
    probe::print_trace(st, sms, 8, names, {0, 1, 2, 3, 4, 5});
    cudaFree(stamps);
  }
  probe::free_layers(layers);
  cudaFree(x); cudaFree(inter_tc); cudaFree(inter_df); cudaFree(y_tc); cudaFree(y_df); cudaFree(y_chk); cudaFree(counters);
  cudaStreamDestroy(s);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261123);
  using St = mf::GateUpLayout;
  if (argc > 2 && std::strcmp(argv[2], "early") == 0) {  // down's weights asked for before its wait
    compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 2, 16>("nvfp4", rng, reps, 0, true);
    compare<mf::Mxfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 3, 16>("mxfp4", rng, reps, 0, true);
    compare<mf::Int4Group128Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 8, 2, 8>("int4_group128", rng, reps, 0, true);
    compare<mf::Nvfp4Weights, 2048, 512, 512, 10, St::kStacked, 10, 4, 8, 2, 4, 16, 3, 16>("nvfp4 q3next", rng, reps, 0, true);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "nodecode") == 0) {  // the pair with and without the decode (diffs meaningless for the latter)
    compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 2, 16>("nvfp4", rng, reps, 0);
    compare<NoDecodeNvfp4, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 2, 16>("nvfp4 no decode", rng, reps, 0);
    return 0;
  }
  // Qwen3-30B-A3B (H 2048, I 768, E 128, top-8) against the catalogue's tensor-core pairs
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 2, 16>("nvfp4", rng, 0, 2);  // two slots unrouted
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 2, 16>("nvfp4", rng, reps, 0);
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 2, 8, 2, 4, 16, 2, 16>("nvfp4", rng, reps, 0);
  compare<mf::Mxfp4Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 16, 3, 16>("mxfp4", rng, reps, 0);
  compare<mf::Int4Group128Weights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 8, 2, 8>("int4_group128", rng, reps, 0);
  compare<mf::Int4ChannelWeights, 2048, 768, 128, 8, St::kStacked, 12, 4, 8, 2, 4, 8, 2, 8>("int4_channel", rng, reps, 0);
  // Qwen3-Next-80B-A3B in NVFP4 (H 2048, I 512, E 512, top-10)
  compare<mf::Nvfp4Weights, 2048, 512, 512, 10, St::kStacked, 10, 4, 8, 2, 4, 16, 3, 16>("nvfp4 q3next", rng, reps, 0);
  return 0;
}
