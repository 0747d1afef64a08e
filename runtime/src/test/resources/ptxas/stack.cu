extern "C" __global__ void runtime_indexed(const float* in, float* out, int k) {
    float a[48];
    for (int j = 0; j < 48; ++j) a[j] = in[j * blockDim.x + threadIdx.x];
    for (int j = 0; j < 48; ++j) a[(j * k) % 48] += a[j];
    out[threadIdx.x] = a[k % 48];
}
