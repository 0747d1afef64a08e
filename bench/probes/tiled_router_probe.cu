// Probe (not part of the toolkit): the prefill router (router_tiled) on `bench router`'s larger GEMM
// shapes with their rule, softmax(topk(acc, 4)), timed as `moeforge bench router` times routers: one
// launch per copy of W_r (256 copies), all in one graph, per call = replay / copies, median of
// REPS replays. Every variant's ids and weights are compared with the catalogue schedule's (the
// first row of each shape) and with an FP64 reference on the host (ids whose 4th and 5th scores
// are further apart than 1e-3 must agree).
// The catalogue's schedules are launched plainly and with programmatic dependent launch, triggered
// at the start, after the scores phase, or at exit. (Commit ffcf460's version of this probe and of
// moeforge_device.cuh also computes the scores by warpgroup wgmmas: `tiled_router_probe REPS wgmma`.)
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I<dir of moeforge_device.cuh> tiled_router_probe.cu
#include "moeforge_device.cuh"
#include "probe_harness.cuh"

#include <cmath>
#include <cstring>
#include <random>

namespace {

uint16_t float_to_bf16(float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
float bf16_to_float(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }

// When a launch lets the next one begin (programmatic dependent launch): kPlain, launched without
// PDL; kAtStart, as generated kernels do (mf::begin_after_previous_kernel); kAfterScores, once the
// block's scores are in shared memory (the next launch's blocks then need this one's shared memory
// only for the epilogue); kAtExit, PDL without an explicit trigger.
enum Trigger { kPlain, kAtStart, kAfterScores, kAtExit };

template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C, Trigger T>
__global__ void __launch_bounds__(32 * W) tiled(const __nv_bfloat16* x, const __nv_bfloat16* w, float* tw, int* ids, int num_tokens) {
  using Tile = mf::RouterTile<H, E, BM, TM, W, BK, S, KG, C>;
  extern __shared__ __align__(128) unsigned char smem[];
  if constexpr (T == kAtStart) mf::let_next_kernel_begin();
  mf::wait_for_previous_kernel();
  const float* scores = mf::router_tile_scores<H, E, BM, TM, W, BK, S, KG, C>(x, w, smem, num_tokens);
  if constexpr (T == kAfterScores) mf::let_next_kernel_begin();
#pragma unroll
  for (int i = 0; i < Tile::kOwnRows / W; ++i) {
    const int tile_row = (threadIdx.x >> 5) + i * W;
    const int token = mf::router_tile_token<BM, C>(tile_row);
    const mf::Row<E> v0 = mf::load_row_shared<E>(scores + tile_row * Tile::kScoreStride);
    const mf::TopK<4> v1 = mf::softmax(mf::topk<4, 1, 1>(v0, v0));
    if (token < num_tokens) mf::store_topk(v1, tw + static_cast<size_t>(token) * 4, ids + static_cast<size_t>(token) * 4);
  }
}

struct Result { std::vector<int> ids; std::vector<float> w; float us; };

template <int H, int E, int BM, int TM, int W, int BK, int S, int KG, int C, Trigger T>
Result run(const __nv_bfloat16* x, const __nv_bfloat16* w, int copies, int m, int reps, cudaStream_t s) {
  using Tile = mf::RouterTile<H, E, BM, TM, W, BK, S, KG, C>;
  auto kernel = tiled<H, E, BM, TM, W, BK, S, KG, C, T>;
  constexpr size_t kSmem = Tile::kSharedBytes;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
  float* tw; int* ids;
  CK(cudaMalloc(&tw, (size_t)m * 16)); CK(cudaMalloc(&ids, (size_t)m * 16));
  CK(cudaMemsetAsync(tw, 0xff, (size_t)m * 16, s)); CK(cudaMemsetAsync(ids, 0xff, (size_t)m * 16, s));
  const dim3 grid(mf::ceil_div(m, BM) * C), block(32 * W);
  const probe::LaunchAs plain{T != kPlain, false, C};
  probe::launch_as(plain, kernel, grid, block, kSmem, s, x, w, tw, ids, m);
  CK(cudaStreamSynchronize(s));
  Result r{std::vector<int>((size_t)m * 4), std::vector<float>((size_t)m * 4), 0.0f};
  CK(cudaMemcpy(r.ids.data(), ids, r.ids.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.w.data(), tw, r.w.size() * 4, cudaMemcpyDeviceToHost));
  if (reps > 0) {
    r.us = probe::graph_us(s, reps, copies, [&] {
      for (int c = 0; c < copies; ++c) probe::launch_as(plain, kernel, grid, block, kSmem, s, x, w + (size_t)c * E * H, tw, ids, m);
    });
  }
  cudaFree(tw); cudaFree(ids);
  return r;
}

// Host FP64 scores of copy 0; per token the top-4 ids when the 4th and 5th are clearly apart (else -1).
template <int H, int E>
std::vector<int> reference_ids(const std::vector<uint16_t>& xh, const std::vector<uint16_t>& wh, int m) {
  std::vector<int> out((size_t)m * 4, -1);
  std::vector<double> sc(E);
  for (int t = 0; t < m; ++t) {
    for (int e = 0; e < E; ++e) {
      double acc = 0;
      for (int k = 0; k < H; ++k) acc += (double)bf16_to_float(xh[(size_t)t * H + k]) * bf16_to_float(wh[(size_t)e * H + k]);
      sc[e] = acc;
    }
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int a, int b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
    bool apart = true;
    for (int j = 0; j < 4; ++j) apart = apart && sc[order[j]] - sc[order[j + 1]] > 1e-3;
    if (apart)
      for (int j = 0; j < 4; ++j) out[(size_t)t * 4 + j] = order[j];
  }
  return out;
}

template <int M_, int E, int H>
struct Shape {
  static constexpr int kM = M_, kE = E, kH = H;
};

template <class Sh, class Base, class... Variants>
void shape(int reps, std::mt19937& rng) {
  constexpr int M = Sh::kM, E = Sh::kE, H = Sh::kH;
  const int copies = 256;
  std::vector<uint16_t> wh((size_t)E * H * copies), xh((size_t)M * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = float_to_bf16(nd(rng));
  for (auto& v : wh) v = float_to_bf16(0.02f * nd(rng));
  __nv_bfloat16 *w, *x;
  CK(cudaMalloc(&w, wh.size() * 2)); CK(cudaMemcpy(w, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&x, xh.size() * 2)); CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  cudaStream_t s = probe::stream_after_setup();
  const std::vector<int> ref = reference_ids<H, E>(xh, wh, M);
  const Result base = Base::template run<H, E>(x, w, copies, M, reps, s);
  auto report = [&](const char* what, const Result& r) {
    size_t vs_base = 0, vs_ref = 0, checked = 0; double dw = 0;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      vs_base += r.ids[i] != base.ids[i];
      dw = std::max(dw, (double)std::fabs(r.w[i] - base.w[i]));
      if (ref[i] >= 0) { ++checked; vs_ref += r.ids[i] != ref[i]; }
    }
    std::printf("  %-52s %7.2f us | ids vs catalogue %zu of %zu, vs FP64 %zu of %zu, largest weight difference %.3g\n", what, r.us, vs_base,
                r.ids.size(), vs_ref, checked, dw);
  };
  std::printf("seed (%d, %d, %d), k=4\n", M, E, H);
  report(Base::name(), base);
  (report(Variants::name(), Variants::template run<H, E>(x, w, copies, M, reps, s)), ...);
  cudaFree(w); cudaFree(x); cudaStreamDestroy(s);
}

// A schedule: (tokens per block, tokens per warp, warps, k tile, stages, k groups, split, mma).
template <int BM, int TM, int W, int BK, int S, int KG, int C, Trigger T = kPlain>
struct V {
  static const char* name() {
    static const char* triggers[] = {"", ", PDL at start", ", PDL after scores", ", PDL at exit"};
    static char buf[128];
    std::snprintf(buf, sizeof buf, "(%d, %d, %d, %d, %d, %d, %d)%s", BM, TM, W, BK, S, KG, C, triggers[T]);
    return buf;
  }
  template <int H, int E>
  static Result run(const __nv_bfloat16* x, const __nv_bfloat16* w, int copies, int m, int reps, cudaStream_t s) {
    return ::run<H, E, BM, TM, W, BK, S, KG, C, T>(x, w, copies, m, reps, s);
  }
};


}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 40;
  std::mt19937 rng(20261123);
  // the catalogue's schedules, launched plainly (as bench router does) and with PDL triggered at
  // the start, after the scores phase, or at exit
#define TRIGGERS(BM, TM, W, BK, S, KG, C) \
  V<BM, TM, W, BK, S, KG, C>, V<BM, TM, W, BK, S, KG, C, kAtStart>, V<BM, TM, W, BK, S, KG, C, kAfterScores>, \
      V<BM, TM, W, BK, S, KG, C, kAtExit>
  shape<Shape<512, 8, 128>, TRIGGERS(16, 16, 8, 64, 4, 1, 1)>(reps, rng);
  shape<Shape<1024, 64, 512>, TRIGGERS(16, 16, 8, 64, 4, 2, 2)>(reps, rng);
  shape<Shape<2048, 128, 1024>, TRIGGERS(32, 32, 16, 64, 3, 4, 2)>(reps, rng);
  shape<Shape<4096, 64, 2048>, TRIGGERS(64, 32, 16, 64, 4, 4, 2)>(reps, rng);
  shape<Shape<4096, 128, 2048>, TRIGGERS(64, 32, 16, 64, 4, 2, 2)>(reps, rng);
#undef TRIGGERS
  return 0;
}
