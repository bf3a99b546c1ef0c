/* Elementwise helpers of the device seam (device.h): filling and scaling fp32 arrays on the
 * caller's stream, for what the CUDA form entries form before the chunk kernels run (β = θ·η,
 * the constant decay as a per-token gate; docs/design.md "Devices"). C-shaped: extern "C". */
#include <cuda_runtime.h>

#include "device.h"

namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(float *dst, float value, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

__global__ void scale_kernel(float *dst, const float *src, float a, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = a * src[i];
}

/* Enough blocks to cover n once, at most 65535 (the grid-stride loops cover the rest). */
unsigned blocks_for(size_t n) {
    const size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > 65535 ? 65535 : b);
}

ttt_status launched(const char *what, size_t n, ttt_error *err) {
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)cudaGetLastError(), ttt_device_cuda(dev), err,
                                 "%s<<<%u, %d>>>(n = %zu)", what, blocks_for(n), kThreads, n);
}

} // namespace

extern "C" ttt_status ttt_cuda_fill_f32(float *dst, float value, size_t n, void *stream,
                                        ttt_error *err) {
    if (n == 0) return TTT_OK;
    fill_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, value, n);
    return launched("fill_kernel", n, err);
}

extern "C" ttt_status ttt_cuda_scale_f32(float *dst, const float *src, float a, size_t n,
                                         void *stream, ttt_error *err) {
    if (n == 0) return TTT_OK;
    scale_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, src, a, n);
    return launched("scale_kernel", n, err);
}
