/* Shared by the device ops' kernels (src/core/cuda/ops_*.cu, docs/device_ops.md): launch sizes,
 * the launch check that turns a failed launch into TTT_ERR_DEVICE, and a block-wide sum in
 * double. */
#ifndef TTT_CUDA_OPS_COMMON_CUH
#define TTT_CUDA_OPS_COMMON_CUH

#include <cuda_runtime.h>

#include "cuda_kernels.h"
#include "device.h"

namespace ttt_ops {

constexpr int kThreads = 256;

/* Blocks to cover n once, at most 65535 (the grid-stride loops cover the rest). */
inline unsigned blocks_for(size_t n) {
    const size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

inline ttt_status launched(const char *what, size_t n, ttt_error *err) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return TTT_OK;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)e, ttt_device_cuda(dev), err, "%s (n = %zu)", what, n);
}

/* Sum of v over the block (blockDim.x a power of two ≤ 1024); every thread gets the result.
 * `sh` holds blockDim.x doubles. */
__device__ inline double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

__device__ inline float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

__device__ inline void put(float *y, size_t i, float v, int add) { y[i] = add ? y[i] + v : v; }

/* Sums down the columns of a tall matrix (docs/device_ops.md "Sums over rows"): a block of
 * kColTile × kColTile threads owns kColTile adjacent columns, each of its kColTile rows of
 * threads adds every kColTile-th row in double (a warp reads kColTile adjacent floats of a row:
 * one coalesced load), and the block's rows of partial sums are added in a fixed tree. One
 * thread per column walking every row, as before, left the GPU nearly idle on the few hundred
 * columns of a bias or a gain and read memory one warp at a time. */
constexpr int kColTile = 32;

/* The block's column sums of its threads' partials s: returned to threadIdx.y == 0 (the other
 * threads get 0). Every thread of the block must call it. */
__device__ inline double col_tile_sum(double s, double (*sh)[kColTile + 1]) {
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = kColTile / 2; h > 0; h /= 2) {
        if ((int)threadIdx.y < h) sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    const double r = threadIdx.y == 0 ? sh[0][threadIdx.x] : 0.0;
    __syncthreads(); /* sh is reused by the block's next tile */
    return r;
}

} // namespace ttt_ops

#endif
