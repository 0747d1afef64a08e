// Probe (not part of the toolkit): the tensor-core decode of 4-bit weights (gate_up_tensor_core,
// down_tensor_core) and the one-kernel layer (fused_mlp_tensor_core, a cooperative launch) against
// the FP32 warp decode (gate_up_single_token, down_single_token) on the same random layer: largest
// difference of their outputs, relative to the largest output, and the time of each kernel and of
// the layer over 16 layers of weights rotated in one graph with programmatic dependent launch (as
// `moeforge bench formats` does).
// The fused kernel's parts are timed too, and one launch is traced (%globaltimer per block).
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> tensor_core_probe.cu
#include "fused_layer.cuh"
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


namespace {
constexpr int kLayers = 16;

using probe::Combine;
using probe::Silu;
using probe::tc_down;
using probe::tc_gate_up;

// Old kernels: the catalogue's warp decode (gate_up W=4 U=2 S=1, down W=8 U=2 S=2, 16-byte loads).
template <class F, int H, int I, int E, int K, mf::GateUpLayout L>
__global__ void __launch_bounds__(128) old_gate_up(const __nv_bfloat16* x, mf::WeightArgs w, const int* ids, __nv_bfloat16* inter, int m) {
  mf::begin_after_previous_kernel();
  mf::gate_up_single_token<F, H, I, E, K, L, 4, 16, 2, 1>(x, w, ids, inter, m, Silu{});
}
template <class F, int H, int I, int E, int K>
__global__ void __launch_bounds__(256) old_down(const __nv_bfloat16* inter, mf::WeightArgs w, const int* ids, const float* tw, __nv_bfloat16* y, int m) {
  mf::begin_after_previous_kernel();
  mf::down_single_token<F, H, I, E, K, 8, 16, 2, 2>(inter, w, ids, tw, y, m, Combine{});
}
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int W, class Barrier>
__global__ void __launch_bounds__(32 * W, 1) fused_mlp(const __nv_bfloat16* x, mf::WeightArgs gu, mf::WeightArgs dn, const int* ids,
                                                       const float* tw, __nv_bfloat16* inter, __nv_bfloat16* y, int m, Barrier barrier) {
  mf::begin_after_previous_kernel();
  mf::fused_mlp_tensor_core<F, H, I, E, K, L, W, false>(x, gu, dn, ids, tw, inter, y, m, barrier, Silu{}, Combine{});
}
// Parts of the fused kernel, for where its time goes. 1: the weight copies alone (waiting for
// every byte); 2: the copies and gate_up; 3: that and the barrier.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int W, int PARTS>
__global__ void __launch_bounds__(32 * W, 1) fused_parts(const __nv_bfloat16* x, mf::WeightArgs gu, mf::WeightArgs dn, const int* ids,
                                                         const float* tw, __nv_bfloat16* inter, __nv_bfloat16* y, int m, mf::CooperativeBarrier barrier) {
  mf::begin_after_previous_kernel();
  extern __shared__ __align__(16) unsigned char smem[];
  mf::FusedMlpBlock<F, H, I, E, K, L, W, false> block(smem);
  block.route(ids, tw, 0);
  block.stage_x(x, 0);
  block.copy_weights(gu, dn);
  if constexpr (PARTS == 1) {
    for (int i = 0; i < block.gate_count; ++i) mf::mbarrier_wait(block.barriers + i, 0);
  } else {
    block.gate_up(gu, inter, 0, Silu{});
    if constexpr (PARTS == 3) {
      __threadfence();
      barrier.sync();
    }
  }
  if (block.down_count > 0) mf::mbarrier_wait(block.down_barrier, 0);
}
// The full fused kernel with %globaltimer stamps per block: start, after routing, copies issued,
// every gate_up tile arrived, gate_up done, barrier passed, down's weights arrived, end.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int W>
__global__ void __launch_bounds__(32 * W, 1) fused_traced(const __nv_bfloat16* x, mf::WeightArgs gu, mf::WeightArgs dn, const int* ids,
                                                          const float* tw, __nv_bfloat16* inter, __nv_bfloat16* y, unsigned long long* stamps) {
  unsigned long long* mine = stamps + blockIdx.x * 8;
  mf::begin_after_previous_kernel();
  if (threadIdx.x == 0) mine[0] = probe::now_ns();
  extern __shared__ __align__(16) unsigned char smem[];
  mf::FusedMlpBlock<F, H, I, E, K, L, W, false> block(smem);
  block.route(ids, tw, 0);
  block.stage_x(x, 0);
  if (threadIdx.x == 0) mine[1] = probe::now_ns();
  block.copy_weights(gu, dn);
  if (threadIdx.x == 0) mine[2] = probe::now_ns();
  if (threadIdx.x == 32) {
    mf::mbarrier_wait(block.barriers, 0);
    mine[3] = probe::now_ns();
  }
  block.gate_up(gu, inter, 0, Silu{});
  if (threadIdx.x == 32) mine[4] = probe::now_ns();
  __syncthreads();
  __threadfence();
  mf::CooperativeBarrier{}.sync();
  if (threadIdx.x == 0) mine[5] = probe::now_ns();
  if (threadIdx.x == 0 && block.down_count > 0) mf::mbarrier_wait(block.down_barrier, 0);
  if (threadIdx.x == 0) mine[6] = probe::now_ns();
  block.down_tiles(inter, dn, y, 0, Combine{});
  __syncthreads();
  if (threadIdx.x == 0) mine[7] = probe::now_ns();
}

using probe::bf16_to_float;
using probe::float_to_bf16;
using probe::Layer;
using probe::rel_diff;

// Old and new kernels on one random layer: differences, then times.
template <class F, int H, int I, int E, int K, mf::GateUpLayout L, int GW, int GU, int GS, int DW, int DU, int DS, int FW = 16>
void compare(const char* name, int m, std::mt19937& rng, int reps, bool time) {
  using Bytes = probe::LayerBytes<F, H, I, E>;
  std::vector<Layer> layers = probe::make_layers<F, H, I, E, K>(kLayers, m, 0, rng);
  std::vector<uint16_t> xh((size_t)(kLayers + 1) * m * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = float_to_bf16(nd(rng));
  __nv_bfloat16 *x, *inter_old, *inter_new, *y_old, *y_new;
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&inter_old, (size_t)m * K * I * 2)); CK(cudaMalloc(&inter_new, (size_t)m * K * I * 2));
  CK(cudaMalloc(&y_old, (size_t)m * H * 2)); CK(cudaMalloc(&y_new, (size_t)m * H * 2));
  cudaStream_t s = probe::stream_after_setup();

  const dim3 og(mf::ceil_div(I, 4), m * K), od(mf::ceil_div(H, 4), m);
  const dim3 ng(mf::ceil_div(I, 8 * (GW / GS)), m * K), nd2(mf::ceil_div(H, 16 * (DW / DS)), m);
  const size_t ngs = 64 * mf::TileRow<H>::kPadded + (GS > 1 ? GW * 64 : 0);
  const size_t nds = 64 * K * mf::TileRow<I>::kPadded + (DS > 1 ? DW * 64 : 0);
  auto old_gu = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, old_gate_up<F, H, I, E, K, L>, og, dim3(128), 0, s, (const __nv_bfloat16*)(x + (size_t)l * m * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, m); };
  auto new_gu = [&](int l, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, tc_gate_up<F, H, I, E, K, L, GW, GU, GS>, ng, dim3(32 * GW), ngs, s, (const __nv_bfloat16*)(x + (size_t)l * m * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, (const int*)b.ids, out, m); };
  auto old_dn = [&](int l, const __nv_bfloat16* in, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, old_down<F, H, I, E, K>, od, dim3(256), 256 * 4, s, in, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, m); };
  auto new_dn = [&](int l, const __nv_bfloat16* in, __nv_bfloat16* out) { const Layer& b = layers[l]; probe::launch(false, tc_down<F, H, I, E, K, DW, DU, DS>, nd2, dim3(32 * DW), nds, s, in, mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, out, m); };

  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t fs = mf::FusedMlp<F, H, I, K, FW>(sms).bytes();
  int optin = 0; CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  int per_sm = 0;
  if (fs <= (size_t)optin) {
    CK(cudaFuncSetAttribute(fused_mlp<F, H, I, E, K, L, FW, mf::CountingBarrier>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fs));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_mlp<F, H, I, E, K, L, FW, mf::CountingBarrier>, 32 * FW, fs));
  }
  const bool fits = per_sm >= 1;  // every block resident: the counting barrier's condition
  if (fits) {
    CK(cudaFuncSetAttribute(fused_mlp<F, H, I, E, K, L, FW, mf::CooperativeBarrier>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fs));
    CK(cudaFuncSetAttribute(fused_mlp<F, H, I, E, K, L, FW, mf::CountingBarrier>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fs));
  } else {
    std::printf("   fused: %zu bytes of shared memory do not fit (%d) or no block fits an SM\n", fs, optin);
  }
  unsigned* barrier_state; CK(cudaMalloc(&barrier_state, 8)); CK(cudaMemset(barrier_state, 0, 8));
  __nv_bfloat16* inter_fused; CK(cudaMalloc(&inter_fused, (size_t)m * K * I * 2));
  // mode 0: cooperative, 1: counting barrier, plain launch; tokens: m, or 0 for the empty kernel
  auto fused_as = [&](int l, __nv_bfloat16* out, int mode, int tokens) {
    const Layer& b = layers[l];
    const mf::WeightArgs gu{b.gu_codes, b.gu_scales, b.gu_row, nullptr}, dn{b.dn_codes, b.dn_scales, b.dn_row, nullptr};
    const __nv_bfloat16* xin = x + (size_t)l * m * H;
    if (mode == 0) { probe::launch(true, fused_mlp<F, H, I, E, K, L, FW, mf::CooperativeBarrier>, dim3(sms), dim3(32 * FW), fs, s, xin, gu, dn, (const int*)b.ids, (const float*)b.tw, inter_fused, out, tokens, mf::CooperativeBarrier{}); }
    else probe::launch(false, fused_mlp<F, H, I, E, K, L, FW, mf::CountingBarrier>, dim3(sms), dim3(32 * FW), fs, s, xin, gu, dn, (const int*)b.ids, (const float*)b.tw, inter_fused, out, tokens, mf::CountingBarrier{barrier_state});
  };
  auto fused = [&](int l, __nv_bfloat16* out) { fused_as(l, out, 0, m); };
  CK(cudaMemset(inter_old, 0, (size_t)m * K * I * 2)); CK(cudaMemset(inter_new, 0, (size_t)m * K * I * 2));
  CK(cudaMemset(y_old, 0, (size_t)m * H * 2)); CK(cudaMemset(y_new, 0, (size_t)m * H * 2));
  CK(cudaDeviceSynchronize());
  old_gu(0, inter_old); new_gu(0, inter_new);
  old_dn(0, inter_old, y_old); new_dn(0, inter_old, y_new);  // both downs on the same inter
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> a((size_t)m * K * I), b2((size_t)m * K * I), ya((size_t)m * H), yb((size_t)m * H);
  CK(cudaMemcpy(a.data(), inter_old, a.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b2.data(), inter_new, b2.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ya.data(), y_old, ya.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(yb.data(), y_new, yb.size() * 2, cudaMemcpyDeviceToHost));
  std::printf("%-14s M=%-2d gu(W%d U%d S%d) dn(W%d U%d S%d): gate_up diff %.2e  down diff %.2e\n", name, m, GW, GU, GS, DW, DU, DS,
              rel_diff(b2, a), rel_diff(yb, ya));
  __nv_bfloat16* y_fused; CK(cudaMalloc(&y_fused, (size_t)m * H * 2)); CK(cudaMemset(y_fused, 0xff, (size_t)m * H * 2));
  CK(cudaMemset(inter_fused, 0xff, (size_t)m * K * I * 2));
  if (fits) fused(0, y_fused);
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> yf((size_t)m * H), inf((size_t)m * K * I);
  CK(cudaMemcpy(yf.data(), y_fused, yf.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(inf.data(), inter_fused, inf.size() * 2, cudaMemcpyDeviceToHost));
  if (fits) {
    std::vector<uint16_t> yc((size_t)m * H);
    CK(cudaMemset(y_fused, 0xff, (size_t)m * H * 2));
    fused_as(0, y_fused, 1, m);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(yc.data(), y_fused, yc.size() * 2, cudaMemcpyDeviceToHost));
    std::printf("   fused, counting barrier: y diff %.2e against the cooperative one\n", rel_diff(yc, yf));
  }
  if (fits) std::printf("   fused(W%d, %d blocks, %zu B shared): inter diff %.2e  y diff %.2e (against the warp decode)\n", FW, sms, fs,
              rel_diff(inf, a), rel_diff(yf, ya));
  if (time) {
    const float t_old_gu = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) old_gu(l, inter_old); });
    const float t_new_gu = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) new_gu(l, inter_new); });
    const float t_old_dn = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) old_dn(l, inter_old, y_old); });
    const float t_new_dn = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) new_dn(l, inter_new, y_new); });
    const float t_old = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { old_gu(l, inter_old); old_dn(l, inter_old, x + (size_t)(l + 1) * m * H); } });
    const float t_new = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) { new_gu(l, inter_new); new_dn(l, inter_new, x + (size_t)(l + 1) * m * H); } });
    const float t_fused = fits ? probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) fused(l, x + (size_t)(l + 1) * m * H); }) : NAN;
    if (fits) {
      float t[4];
      for (int mode = 0; mode < 2; ++mode)
        for (int tokens = 0; tokens < 2; ++tokens)
          t[2 * mode + tokens] = probe::graph_us(s, reps, kLayers, [&] { for (int l = 0; l < kLayers; ++l) fused_as(l, x + (size_t)(l + 1) * m * H, mode, tokens == 0 ? 0 : m); });
      std::printf("   fused: cooperative empty %6.2f full %6.2f | counting barrier empty %6.2f full %6.2f us\n", t[0], t[1], t[2], t[3]);
      float part[4];
      auto parts = [&](auto kernel, int p) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fs));
        part[p] = probe::graph_us(s, reps, kLayers, [&] {
          for (int l = 0; l < kLayers; ++l) {
            const Layer& b = layers[l];
            probe::launch(true, kernel, dim3(sms), dim3(32 * FW), fs, s, (const __nv_bfloat16*)(x + (size_t)l * m * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr},
                   mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, inter_fused, y_fused, m, mf::CooperativeBarrier{});
          }
        });
      };
      parts(fused_parts<F, H, I, E, K, L, FW, 1>, 1);
      parts(fused_parts<F, H, I, E, K, L, FW, 2>, 2);
      parts(fused_parts<F, H, I, E, K, L, FW, 3>, 3);
      {
        auto kernel = fused_traced<F, H, I, E, K, L, FW>;
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fs));
        unsigned long long* stamps; CK(cudaMalloc(&stamps, sms * 64));
        for (int rep = 0; rep < 3; ++rep) {
          const Layer& b = layers[rep + 1];
          probe::launch(true, kernel, dim3(sms), dim3(32 * FW), fs, s, (const __nv_bfloat16*)(x + (size_t)(rep + 1) * m * H), mf::WeightArgs{b.gu_codes, b.gu_scales, b.gu_row, nullptr},
                 mf::WeightArgs{b.dn_codes, b.dn_scales, b.dn_row, nullptr}, (const int*)b.ids, (const float*)b.tw, inter_fused, y_fused, stamps);
          CK(cudaStreamSynchronize(s));
        }
        std::vector<unsigned long long> st((size_t)sms * 8);
        CK(cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost));
        unsigned long long t0 = ~0ull;
        for (int b = 0; b < sms; ++b) t0 = std::min(t0, st[b * 8]);
        const char* names[8] = {"start", "routed", "issued", "tile 0 bytes", "warp 1 gate_up", "barrier", "down bytes", "end"};
        std::printf("   trace (us from the first block's start; min / median / max over blocks):");
        for (int k = 0; k < 8; ++k) {
          std::vector<double> v;
          for (int b = 0; b < sms; ++b) v.push_back((st[b * 8 + k] - t0) * 1e-3);
          std::sort(v.begin(), v.end());
          std::printf(" %s %.2f/%.2f/%.2f", names[k], v.front(), v[v.size() / 2], v.back());
        }
        std::printf("\n");
        cudaFree(stamps);
      }
      std::printf("   fused parts: copies %6.2f | + gate_up %6.2f | + barrier %6.2f us\n", part[1], part[2], part[3]);
    }
    const double bytes = Bytes::routed(m * K);  // distinct experts at M=1
    std::printf("   old: gate_up %6.2f down %6.2f layer %6.2f us | new: gate_up %6.2f down %6.2f layer %6.2f us (%.1f MB, %.0f GB/s)"
                " | fused layer %6.2f us (%.0f GB/s)\n",
                t_old_gu, t_old_dn, t_old, t_new_gu, t_new_dn, t_new, bytes / 1e6, bytes / (t_new * 1e3), t_fused, bytes / (t_fused * 1e3));
  }
  probe::free_layers(layers);
  cudaFree(inter_fused); cudaFree(y_fused); cudaFree(barrier_state);
  cudaFree(x); cudaFree(inter_old); cudaFree(inter_new); cudaFree(y_old); cudaFree(y_new);
  cudaStreamDestroy(s);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::mt19937 rng(20261123);
  using St = mf::GateUpLayout;
  // correctness on ragged and interleaved geometries (gpt-oss: H = I = 2880, 22.5 steps per row;
  // its fused layer does not fit in shared memory)
  compare<mf::Mxfp4Weights, 2880, 2880, 32, 4, St::kInterleaved, 8, 2, 4, 8, 2, 8>("mxfp4 gpt-oss", 3, rng, reps, false);
  compare<mf::Nvfp4Weights, 2880, 2880, 32, 4, St::kInterleaved, 4, 3, 2, 4, 3, 4>("nvfp4 gpt-oss", 5, rng, reps, false);
  compare<mf::Int4ChannelWeights, 1056, 96, 9, 3, St::kStacked, 4, 1, 1, 4, 1, 1>("int4ch odd", 4, rng, reps, false);
  compare<mf::Int4Group128Weights, 1024, 256, 9, 3, St::kStacked, 8, 2, 8, 8, 2, 4>("int4g odd", 4, rng, reps, false);
  // Qwen3-30B-A3B, M = 1: the catalogue's pairs against the one-kernel layer (16 or 8 warps per block)
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 8, 1, 8, 16, 3, 16, 16>("nvfp4", 1, rng, reps, true);
  compare<mf::Nvfp4Weights, 2048, 768, 128, 8, St::kStacked, 8, 1, 8, 16, 3, 16, 8>("nvfp4", 1, rng, reps, true);
  compare<mf::Mxfp4Weights, 2048, 768, 128, 8, St::kStacked, 4, 2, 4, 16, 3, 16>("mxfp4", 1, rng, reps, true);
  compare<mf::Int4Group128Weights, 2048, 768, 128, 8, St::kStacked, 8, 2, 4, 8, 2, 8>("int4_group128", 1, rng, reps, true);
  compare<mf::Int4ChannelWeights, 2048, 768, 128, 8, St::kStacked, 8, 2, 4, 8, 2, 8>("int4_channel", 1, rng, reps, true);
  // Qwen3-Next-80B-A3B in NVFP4 (H 2048, I 512, E 512, top-10)
  compare<mf::Nvfp4Weights, 2048, 512, 512, 10, St::kStacked, 8, 2, 4, 16, 3, 16>("nvfp4 q3next", 1, rng, reps, true);
  return 0;
}
