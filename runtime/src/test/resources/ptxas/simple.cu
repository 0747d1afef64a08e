extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void smem_reduce(const float* x, float* out, int n) {
    __shared__ float buf[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) { if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s]; __syncthreads(); }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}
__device__ __noinline__ float helper(float a) { return a * a + 1.0f; }
template <int N> __global__ void tmpl(float* x) { x[threadIdx.x] = helper(x[threadIdx.x]) * N; }
template __global__ void tmpl<4>(float*);
