extern "C" __global__ void spiller(const float* in, float* out, int n, int k) {
    float acc[64];
    #pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = in[threadIdx.x * 64 + j];
    for (int r = 0; r < n; ++r) {
        #pragma unroll
        for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + 1) & 63] + acc[(j + 7) & 63];
    }
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < 64; ++j) s += acc[j];
    out[threadIdx.x] = s + acc[k & 63];
}
