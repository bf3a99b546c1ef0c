/* RoPE of (B, T, H, d) rows by token position on a CUDA device (rope_device.h). One thread per
 * pair, the angle formed in double exactly as rope_kernel of src/core/cuda/ops_shape.cu and
 * ttt_rope_apply form it; only the position differs: the row's token t, not its row index.
 * C-shaped: extern "C". */
#include <cuda_runtime.h>

#include "device.h"
#include "rope_device.h"

namespace {

constexpr int kThreads = 256;

__global__ void rope_heads_kernel(float *y, int add, const float *x, size_t rows, int T, int H,
                                  int d, double base, int inverse) {
    const int half = d / 2, per_row = half + (d & 1);
    const size_t total = rows * (size_t)per_row;
    for (size_t idx = blockIdx.x * (size_t)kThreads + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * kThreads) {
        const size_t r = idx / per_row;
        const int i = (int)(idx % per_row);
        const int t = (int)((r / (size_t)H) % (size_t)T); /* row r = (b·T + t)·H + h */
        const size_t o = r * (size_t)d + 2 * (size_t)i;
        if (i == half) { /* the unrotated last element of an odd d */
            y[o] = add ? y[o] + x[o] : x[o];
            continue;
        }
        const double w = pow(base, -2.0 * i / (double)d);
        const double ang = (double)t * w;
        double sn, cs;
        sincos(ang, &sn, &cs);
        if (inverse) sn = -sn;
        const double x0 = x[o], x1 = x[o + 1];
        const float y0 = (float)(x0 * cs - x1 * sn), y1 = (float)(x0 * sn + x1 * cs);
        y[o] = add ? y[o] + y0 : y0;
        y[o + 1] = add ? y[o + 1] + y1 : y1;
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_rope_heads(float *y, int add, const float *x, int B, int T, int H,
                                          int d, float base, int inverse, void *stream,
                                          ttt_error *err) {
    const size_t rows = (size_t)B * T * H, total = rows * (size_t)(d / 2 + (d & 1));
    if (total == 0) return TTT_OK;
    size_t blocks = (total + kThreads - 1) / kThreads;
    if (blocks > 65535) blocks = 65535;
    rope_heads_kernel<<<(unsigned)blocks, kThreads, 0, (cudaStream_t)stream>>>(
        y, add, x, rows, T, H, d, (double)base, inverse);
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)cudaGetLastError(), ttt_device_cuda(dev), err,
                                 "rope_heads_kernel(rows = %zu, d = %d)", rows, d);
}
