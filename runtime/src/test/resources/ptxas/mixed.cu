__constant__ float coeffs[64];
extern "C" __global__ void use_const(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * coeffs[i & 63];
}
extern "C" __global__ void dyn_smem(float* x) {
    extern __shared__ float s[];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}
__device__ int counter;
extern "C" __global__ void local_arr(float* x, int k) {
    float a[32];
    for (int j = 0; j < 32; ++j) a[j] = x[j * blockDim.x + threadIdx.x];
    x[threadIdx.x] = a[k & 31];
    atomicAdd(&counter, 1);
}
