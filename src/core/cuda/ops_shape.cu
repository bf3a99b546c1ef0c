/* Shape moves, masks, cumulative sums, embeddings, the causal convolution and RoPE of the device
 * ops (cuda_kernels.h, docs/device_ops.md). Plain grid-stride kernels: each output element is
 * computed by one thread from the same formula as the CPU op (src/core/ops.c, rope_op.c), sums
 * over time in double. */
#include "ops_common.cuh"

#include <math.h>

namespace {

using namespace ttt_ops;

#define GRID_LOOP(i, n)                                                                    \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void transpose_kernel(float *y, int add, const float *x, size_t batch, int m, int n) {
    const size_t mn = (size_t)m * n;
    GRID_LOOP(idx, batch * mn) { /* idx over y (batch, n, m) */
        const size_t b = idx / mn, r = idx % mn, j = r / m, i = r % m;
        put(y, idx, x[b * mn + i * n + j], add);
    }
}

__global__ void copy2d_kernel(float *dst, size_t ldd, int add, const float *src, size_t lds,
                              size_t rows, size_t cols) {
    GRID_LOOP(idx, rows * cols) {
        const size_t i = idx / cols, j = idx % cols;
        put(dst, i * ldd + j, src[i * lds + j], add);
    }
}

__global__ void cumsum_kernel(float *y, int add, const float *x, size_t T, size_t d, int rev) {
    GRID_LOOP(j, d) {
        double s = 0.0;
        for (size_t k = 0; k < T; k++) {
            const size_t t = rev ? T - 1 - k : k;
            s += x[t * d + j];
            put(y, t * d + j, (float)s, add);
        }
    }
}

__global__ void mask_kernel(int kind, float *y, int add, const float *x, size_t mats, int m,
                            int n, int k) {
    const size_t mn = (size_t)m * n;
    GRID_LOOP(idx, mats * mn) {
        const long i = (long)((idx % mn) / n), j = (long)(idx % n);
        float v;
        if (kind == TTT_MASK_TRIL)
            v = j <= i + k ? x[idx] : 0.0f;
        else
            v = j <= i ? x[idx] : -INFINITY;
        put(y, idx, v, add);
    }
}

__global__ void decay_mask_kernel(float *D, const float *g, int T, int strict) {
    GRID_LOOP(idx, (size_t)T * T) {
        const int i = (int)(idx / T), j = (int)(idx % T);
        D[idx] = (strict ? j < i : j <= i) ? expf(g[i] - g[j]) : 0.0f;
    }
}

__global__ void gather_kernel(float *y, const float *table, const int *ids, int n, int d, int V) {
    GRID_LOOP(idx, (size_t)n * d) {
        const size_t i = idx / d, j = idx % d;
        const int id = ids[i];
        y[idx] = id >= 0 && id < V ? table[(size_t)id * d + j] : 0.0f;
    }
}

__global__ void scatter_add_kernel(float *g, const float *dy, const int *ids, int n, int d,
                                   int V) {
    GRID_LOOP(idx, (size_t)n * d) {
        const size_t i = idx / d, j = idx % d;
        const int id = ids[i];
        if (id >= 0 && id < V) atomicAdd(&g[(size_t)id * d + j], dy[idx]);
    }
}

__device__ inline float sig(float x) {
    const float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}

/* y_{b,t,c} = Σ_{j<K, t−j ≥ 0} w_{j,c}·x_{b,t−j,c} (+ bias_c), summed in double like the host. */
__global__ void conv1d_kernel(float *y, const float *x, const float *w, const float *bias, int B,
                              int T, int C, int K, int silu) {
    GRID_LOOP(idx, (size_t)B * T * C) {
        const int c = (int)(idx % C), t = (int)((idx / C) % T);
        const size_t row0 = idx - (size_t)t * C - c; /* element (b, 0, 0) */
        double s = bias ? (double)bias[c] : 0.0;
        for (int j = 0; j < K && j <= t; j++)
            s += (double)w[(size_t)j * C + c] * x[row0 + (size_t)(t - j) * C + c];
        const float z = (float)s;
        y[idx] = silu ? z * sig(z) : z;
    }
}

/* dx_{b,t,c} = Σ_j w_{j,c}·dz_{b,t+j,c}. */
__global__ void conv1d_dx_kernel(float *gx, int add, const float *dz, const float *w, int B, int T,
                                 int C, int K) {
    GRID_LOOP(idx, (size_t)B * T * C) {
        const int c = (int)(idx % C), t = (int)((idx / C) % T);
        const size_t row0 = idx - (size_t)t * C - c;
        double s = 0.0;
        for (int j = 0; j < K && t + j < T; j++)
            s += (double)w[(size_t)j * C + c] * dz[row0 + (size_t)(t + j) * C + c];
        put(gx, idx, (float)s, add);
    }
}

/* dw_{j,c} = Σ_{b,t ≥ j} dz_{b,t,c}·x_{b,t−j,c}: one thread per (j, c), in double. */
/* gw[j, c] (+)= Σ_b Σ_{t ≥ j} dz[b, t, c] · x[b, t − j, c]: a sum over the B·T rows for each
 * (tap, channel), as reduce_rows_kernel sums columns (ops_common.cuh col_tile_sum): block
 * (blockIdx.x, blockIdx.y) owns channels kColTile·blockIdx.x … of tap blockIdx.y. */
__global__ void conv1d_dw_kernel(float *gw, int add, const float *dz, const float *x, int B, int T,
                                 int C, int K) {
    __shared__ double sh[kColTile][kColTile + 1];
    const int j = (int)blockIdx.y;
    for (int c0 = (int)blockIdx.x * kColTile; c0 < C; c0 += (int)gridDim.x * kColTile) {
        const int c = c0 + (int)threadIdx.x;
        double s = 0.0;
        if (c < C)
            for (size_t r = threadIdx.y; r < (size_t)B * T; r += kColTile) {
                const int t = (int)(r % (size_t)T);
                if (t >= j) s += (double)dz[r * C + c] * x[(r - j) * C + c];
            }
        s = col_tile_sum(s, sh);
        if (threadIdx.y == 0 && c < C) put(gw, (size_t)j * C + c, (float)s, add);
    }
}

/* Interleaved pairs (rope.h): [y0 y1] = [x0 x1]·[[cos, sin], [−sin, cos]] of angle p·ω_i, in
 * double as ttt_rope_apply; the inverse turns by −angle. An odd last element passes. */
__global__ void rope_kernel(float *y, int add, const float *x, int T, int d, int pos0,
                            double base, int inverse) {
    const int half = d / 2, per_row = half + (d & 1);
    GRID_LOOP(idx, (size_t)T * per_row) {
        const int t = (int)(idx / per_row), i = (int)(idx % per_row);
        const size_t o = (size_t)t * d + 2 * (size_t)i;
        if (i == half) { /* the unrotated last element of an odd d */
            put(y, o, x[o], add);
            continue;
        }
        const double w = pow(base, -2.0 * i / (double)d);
        const double ang = ((double)pos0 + (double)t) * w;
        double sn, cs;
        sincos(ang, &sn, &cs);
        if (inverse) sn = -sn;
        const double x0 = x[o], x1 = x[o + 1];
        put(y, o, (float)(x0 * cs - x1 * sn), add);
        put(y, o + 1, (float)(x0 * sn + x1 * cs), add);
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_transpose(float *y, int add, const float *x, size_t batch, int m,
                                         int n, void *stream, ttt_error *err) {
    const size_t total = batch * (size_t)m * n;
    if (total == 0) return TTT_OK;
    transpose_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(y, add, x, batch,
                                                                                m, n);
    return launched("transpose_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_copy2d(float *dst, size_t ldd, int add, const float *src,
                                      size_t lds, size_t rows, size_t cols, void *stream,
                                      ttt_error *err) {
    if (rows * cols == 0) return TTT_OK;
    if (!add && ldd == cols && lds == cols) /* contiguous: one copy */
        return ttt_device_cuda_error(
            (int)cudaMemcpyAsync(dst, src, rows * cols * sizeof(float), cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)stream),
            ttt_device_cuda(0), err, "cudaMemcpyAsync(%zu floats)", rows * cols);
    copy2d_kernel<<<blocks_for(rows * cols), kThreads, 0, (cudaStream_t)stream>>>(
        dst, ldd, add, src, lds, rows, cols);
    return launched("copy2d_kernel", rows * cols, err);
}

extern "C" ttt_status ttt_cuda_cumsum(float *y, int add, const float *x, size_t T, size_t d,
                                      int reverse, void *stream, ttt_error *err) {
    if (T * d == 0) return TTT_OK;
    cumsum_kernel<<<blocks_for(d), kThreads, 0, (cudaStream_t)stream>>>(y, add, x, T, d, reverse);
    return launched("cumsum_kernel", T * d, err);
}

extern "C" ttt_status ttt_cuda_mask(int kind, float *y, int add, const float *x, size_t mats,
                                    int m, int n, int k, void *stream, ttt_error *err) {
    const size_t total = mats * (size_t)m * n;
    if (total == 0) return TTT_OK;
    mask_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(kind, y, add, x, mats, m,
                                                                           n, k);
    return launched("mask_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_decay_mask(float *D, const float *g, int T, int strict,
                                          void *stream, ttt_error *err) {
    const size_t total = (size_t)T * T;
    if (total == 0) return TTT_OK;
    decay_mask_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(D, g, T, strict);
    return launched("decay_mask_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_gather_rows(float *y, const float *table, const int *ids, int n,
                                           int d, int V, void *stream, ttt_error *err) {
    const size_t total = (size_t)n * d;
    if (total == 0) return TTT_OK;
    gather_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(y, table, ids, n, d, V);
    return launched("gather_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_scatter_add_rows(float *g, const float *dy, const int *ids, int n,
                                                int d, int V, void *stream, ttt_error *err) {
    const size_t total = (size_t)n * d;
    if (total == 0) return TTT_OK;
    scatter_add_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(g, dy, ids, n, d,
                                                                                  V);
    return launched("scatter_add_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_conv1d(float *y, const float *x, const float *w, const float *bias,
                                      int B, int T, int C, int K, int silu, void *stream,
                                      ttt_error *err) {
    const size_t total = (size_t)B * T * C;
    if (total == 0) return TTT_OK;
    conv1d_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(y, x, w, bias, B, T, C,
                                                                             K, silu);
    return launched("conv1d_kernel", total, err);
}

extern "C" ttt_status ttt_cuda_conv1d_backward(float *gx, int add_x, float *gw, int add_w,
                                               const float *dz, const float *x, const float *w,
                                               int B, int T, int C, int K, void *stream,
                                               ttt_error *err) {
    const size_t total = (size_t)B * T * C;
    cudaStream_t s = (cudaStream_t)stream;
    if (gx && total) {
        conv1d_dx_kernel<<<blocks_for(total), kThreads, 0, s>>>(gx, add_x, dz, w, B, T, C, K);
        TTT_TRY(launched("conv1d_dx_kernel", total, err));
    }
    if (gw && K > 0 && C > 0) {
        const int tiles = (C + kColTile - 1) / kColTile;
        conv1d_dw_kernel<<<dim3(tiles < 65535 ? tiles : 65535, K), dim3(kColTile, kColTile), 0,
                           s>>>(gw, add_w, dz, x, B, T, C, K);
        TTT_TRY(launched("conv1d_dw_kernel", (size_t)K * C, err));
    }
    return TTT_OK;
}

extern "C" ttt_status ttt_cuda_rope(float *y, int add, const float *x, int T, int d, int pos0,
                                    float base, int inverse, void *stream, ttt_error *err) {
    const size_t total = (size_t)T * (size_t)(d / 2 + (d & 1));
    if (total == 0) return TTT_OK;
    rope_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(y, add, x, T, d, pos0,
                                                                           (double)base, inverse);
    return launched("rope_kernel", total, err);
}
