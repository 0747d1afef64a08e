// Probe (not part of the toolkit): what a kernel boundary costs in a graph by grid shape. Chains of
// 100 kernels that only pass the PDL wait (moeforge_device.cuh's begin_after_previous_kernel),
// launched with programmatic dependent launch (as the layer's kernels) or plainly, with and
// without dynamic shared memory that limits the blocks per SM; per kernel = replay / 100.
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I<dir of moeforge_device.cuh> launch_probe.cu
#include "moeforge_device.cuh"
#include "probe_harness.cuh"

__global__ void empty_kernel(int* sink) {
  mf::begin_after_previous_kernel();
  extern __shared__ int smem[];
  if (sink[0] == 12345) smem[threadIdx.x] = 1;  // never taken; keeps the shared memory
}

int main() {
  int* sink; CK(cudaMalloc(&sink, 4)); CK(cudaMemset(sink, 0, 4));
  CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaStream_t s = probe::stream_after_setup();
  const int grids[][2] = {{128, 256}, {132, 512}, {264, 256}, {384, 256}, {528, 256}, {768, 256}, {768, 128}, {1056, 256}, {1536, 128}, {2112, 128}, {4224, 128}};
  const int smems[] = {0, 100 * 1024};
  std::printf("# per kernel in a chain of 100 (us): grid x threads, shared bytes per block: PDL | plain\n");
  for (auto& g : grids) {
    for (int sm : smems) {
      auto us = [&](bool pdl) {
        return probe::graph_us(s, 40, 100, [&] {
          for (int i = 0; i < 100; ++i) probe::launch_as(probe::LaunchAs{pdl, false, 1}, empty_kernel, dim3(g[0]), dim3(g[1]), (size_t)sm, s, sink);
        });
      };
      std::printf("%5d x %3d, %6d B: %.2f | %.2f\n", g[0], g[1], sm, us(true), us(false));
    }
  }
  return 0;
}
