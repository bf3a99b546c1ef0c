/* Reductions, row normalizations, softmax and the cross-entropy of the device ops
 * (cuda_kernels.h, docs/device_ops.md). Every sum is accumulated in double, as the CPU ops do
 * (src/core/ops.c "reductions"), so the two agree to the rounding of the final float; the order
 * of the terms differs (a tree over a block's threads instead of a left-to-right loop), which
 * double makes invisible at float precision. A row's work is one block of kRowThreads. */
#include "ops_common.cuh"

#include <math.h>

namespace {

using namespace ttt_ops;

constexpr int kRowThreads = 256;

/* Blocks for one per row, at most 65535 (a grid-stride loop over rows covers the rest). */
unsigned row_blocks(size_t rows) { return (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows); }

/* y[j] (+)= scale · Σ_i x[i, j] (· x2[i, j]): a block per kColTile columns (col_tile_sum). */
__global__ void reduce_rows_kernel(float *y, int add, const float *x, const float *x2,
                                   size_t rows, size_t cols, double scale) {
    __shared__ double sh[kColTile][kColTile + 1];
    for (size_t j0 = (size_t)blockIdx.x * kColTile; j0 < cols; j0 += (size_t)gridDim.x * kColTile) {
        const size_t j = j0 + threadIdx.x;
        double s = 0.0;
        if (j < cols)
            for (size_t i = threadIdx.y; i < rows; i += kColTile)
                s += x2 ? (double)x[i * cols + j] * x2[i * cols + j] : (double)x[i * cols + j];
        s = col_tile_sum(s, sh);
        if (threadIdx.y == 0 && j < cols) put(y, j, (float)(s * scale), add);
    }
}

/* Blocks of reduce_rows_kernel: one per tile of columns, at most 65535 (a loop covers more). */
unsigned col_tiles(size_t cols) {
    const size_t t = (cols + kColTile - 1) / kColTile;
    return (unsigned)(t < 1 ? 1 : t > 65535 ? 65535 : t);
}

__global__ void reduce_cols_kernel(float *y, int add, const float *x, const float *x2,
                                   size_t rows, size_t cols, double scale, int root) {
    __shared__ double sh[kRowThreads];
    for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const float *xr = x + i * cols, *x2r = x2 ? x2 + i * cols : nullptr;
        double s = 0.0;
        for (size_t j = threadIdx.x; j < cols; j += blockDim.x)
            s += x2r ? (double)xr[j] * x2r[j] : (double)xr[j];
        s = block_sum(s, sh);
        if (threadIdx.x == 0) put(y, i, (float)(root ? sqrt(s) * scale : s * scale), add);
    }
}

__global__ void rownorm_kernel(int kind, float *y, const float *x, const float *gamma,
                               const float *beta, size_t rows, size_t n, float eps) {
    __shared__ double sh[kRowThreads];
    __shared__ float shf[kRowThreads];
    for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const float *xr = x + i * n;
        float *yr = y + i * n;
        if (kind == TTT_NORM_SOFTMAX) {
            float mx = -INFINITY;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, xr[j]);
            mx = block_max(mx, shf);
            if (mx == -INFINITY) { /* a fully masked row is all zeros (ops.h) */
                for (size_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = 0.0f;
                continue;
            }
            double s = 0.0;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                const float e = expf(xr[j] - mx);
                yr[j] = e;
                s += e;
            }
            s = block_sum(s, sh);
            const float inv = (float)(1.0 / s);
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= inv;
            continue;
        }
        double s1 = 0.0, s2 = 0.0;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            s1 += xr[j];
            s2 += (double)xr[j] * xr[j];
        }
        s1 = block_sum(s1, sh);
        if (kind == TTT_NORM_LAYER) {
            const double mu = n ? s1 / (double)n : 0.0;
            double v = 0.0; /* two-pass variance, as row_moments on the host */
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                const double d = xr[j] - mu;
                v += d * d;
            }
            v = block_sum(v, sh);
            v = n ? v / (double)n : 0.0;
            const float m = (float)mu, r = (float)(1.0 / sqrt(v + (double)eps));
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                float o = (xr[j] - m) * r;
                if (gamma) o *= gamma[j];
                if (beta) o += beta[j];
                yr[j] = o;
            }
        } else {
            s2 = block_sum(s2, sh);
            const double ms = kind == TTT_NORM_RMS ? (n ? s2 / (double)n : 0.0) : s2;
            const float r = (float)(1.0 / sqrt(ms + (double)eps));
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                float o = xr[j] * r;
                if (gamma && kind == TTT_NORM_RMS) o *= gamma[j];
                yr[j] = o;
            }
        }
    }
}

/* The backwards of ops.c's layernorm_op_backward, rmsnorm_backward, l2norm_rows_backward and
 * softmax_rows_backward, one row per block, in double. */
__global__ void rownorm_backward_kernel(int kind, float *gx, int add, float *dyxh,
                                        const float *dy, const float *x, const float *gamma,
                                        size_t rows, size_t n, float eps) {
    __shared__ double sh[kRowThreads];
    for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const float *xr = x + i * n, *dr = dy + i * n;
        if (kind == TTT_NORM_SOFTMAX) { /* x is y: dx = y ⊙ (dy − Σ y dy) */
            double s = 0.0;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) s += (double)xr[j] * dr[j];
            const float sf = (float)block_sum(s, sh);
            if (gx)
                for (size_t j = threadIdx.x; j < n; j += blockDim.x)
                    put(gx, i * n + j, xr[j] * (dr[j] - sf), add);
            continue;
        }
        if (kind == TTT_NORM_LAYER) {
            double s1 = 0.0;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) s1 += xr[j];
            const double mu = n ? block_sum(s1, sh) / (double)n : 0.0;
            double v = 0.0;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                const double d = xr[j] - mu;
                v += d * d;
            }
            v = block_sum(v, sh);
            const double rs = 1.0 / sqrt((n ? v / (double)n : 0.0) + (double)eps);
            double sg = 0.0, sgx = 0.0;
            for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                const double xh = (xr[j] - mu) * rs;
                const double gh = gamma ? (double)dr[j] * gamma[j] : (double)dr[j];
                sg += gh;
                sgx += gh * xh;
                if (dyxh) dyxh[i * n + j] = (float)(dr[j] * xh);
            }
            sg = block_sum(sg, sh);
            sgx = block_sum(sgx, sh);
            const double mg = sg / (double)n, mgx = sgx / (double)n;
            if (gx)
                for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
                    const double xh = (xr[j] - mu) * rs;
                    const double gh = gamma ? (double)dr[j] * gamma[j] : (double)dr[j];
                    put(gx, i * n + j, (float)(rs * (gh - mg - xh * mgx)), add);
                }
            continue;
        }
        /* RMS: y = γ ⊙ x·s, s = (Σx²/n + eps)^(−1/2): dx = s·ĝ − s³·x·(x·ĝ)/n.
         * L2: y = x·s, s = (Σx² + eps)^(−1/2): dx = s·dy − s³·x·(x·dy). */
        const int rms = kind == TTT_NORM_RMS;
        double ss = 0.0, xg = 0.0;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            const double gh = rms && gamma ? (double)dr[j] * gamma[j] : (double)dr[j];
            ss += (double)xr[j] * xr[j];
            xg += (double)xr[j] * gh;
        }
        ss = block_sum(ss, sh);
        xg = block_sum(xg, sh);
        const double nn = rms ? (double)n : 1.0;
        const double s = 1.0 / sqrt((n ? ss / nn : 0.0) + (double)eps), c = s * s * s * xg / nn;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            const double gh = rms && gamma ? (double)dr[j] * gamma[j] : (double)dr[j];
            if (gx) put(gx, i * n + j, (float)(s * gh - c * xr[j]), add);
            if (dyxh) dyxh[i * n + j] = (float)((double)dr[j] * xr[j] * s);
        }
    }
}

/* One row of the cross-entropy: lse, the row's loss and whether it counts / is correct
 * (bit 0 / bit 1 of row_flag). The arg-max is the first index of the maximum, as on the host. */
__global__ void ce_rows_kernel(float *lse, double *row_loss, int *row_flag, const float *z,
                               const int *targets, int N, int V) {
    __shared__ double sh[kRowThreads];
    __shared__ float shf[kRowThreads];
    __shared__ int shi[kRowThreads];
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const int t = targets[i];
        if (t < 0 || t >= V) { /* ignored (negative) or out of range: not counted */
            if (threadIdx.x == 0) {
                row_loss[i] = 0.0;
                row_flag[i] = 0;
                lse[i] = 0.0f;
            }
            continue;
        }
        const float *zr = z + (size_t)i * V;
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, zr[j]);
        mx = block_max(mx, shf);
        int arg = V;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            if (zr[j] == mx && j < arg) arg = j;
        shi[threadIdx.x] = arg;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) shi[threadIdx.x] = min(shi[threadIdx.x], shi[threadIdx.x + s]);
            __syncthreads();
        }
        arg = shi[0];
        double se = 0.0;
        for (int j = threadIdx.x; j < V; j += blockDim.x) se += exp((double)zr[j] - mx);
        se = block_sum(se, sh);
        if (threadIdx.x == 0) {
            const double l = mx + log(se);
            lse[i] = (float)l;
            row_loss[i] = l - zr[t];
            row_flag[i] = 1 | (arg == t ? 2 : 0);
        }
    }
}

__global__ void ce_total_kernel(float *loss, ttt_cuda_ce_stats *stats, const double *row_loss,
                                const int *row_flag, int N) {
    __shared__ double sh[kRowThreads];
    double s = 0.0, cnt = 0.0, cor = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        s += row_loss[i];
        cnt += row_flag[i] & 1;
        cor += (row_flag[i] >> 1) & 1;
    }
    s = block_sum(s, sh);
    cnt = block_sum(cnt, sh);
    cor = block_sum(cor, sh);
    if (threadIdx.x == 0) {
        stats->loss_sum = s;
        stats->count = (int)cnt;
        stats->correct = (int)cor;
        loss[0] = cnt > 0.0 ? (float)(s / cnt) : 0.0f;
    }
}

__global__ void ce_backward_kernel(float *g, int add, const float *z, const int *targets,
                                   const float *lse, const ttt_cuda_ce_stats *stats,
                                   const float *dl, int N, int V) {
    const int count = stats->count;
    const float scale = count ? dl[0] / (float)count : 0.0f;
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const int t = targets[i];
        const int counted = count && t >= 0 && t < V;
        const float *zr = z + (size_t)i * V;
        float *gr = g + (size_t)i * V;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float v = 0.0f;
            if (counted) {
                v = scale * expf(zr[j] - lse[i]);
                if (j == t) v -= scale;
            }
            gr[j] = add ? gr[j] + v : v;
        }
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_reduce(int mode, float *y, int add, const float *x,
                                      const float *x2, size_t rows, size_t cols, double scale,
                                      void *stream, ttt_error *err) {
    cudaStream_t s = (cudaStream_t)stream;
    if (mode == TTT_RED_ROWS) {
        if (cols == 0) return TTT_OK;
        reduce_rows_kernel<<<col_tiles(cols), dim3(kColTile, kColTile), 0, s>>>(y, add, x, x2,
                                                                               rows, cols, scale);
        return launched("reduce_rows_kernel", rows * cols, err);
    }
    if (rows == 0) return TTT_OK;
    reduce_cols_kernel<<<row_blocks(rows), kRowThreads, 0, s>>>(y, add, x, x2, rows, cols, scale,
                                                               mode == TTT_RED_COLS_SQRT);
    return launched("reduce_cols_kernel", rows * cols, err);
}

extern "C" ttt_status ttt_cuda_rownorm(int kind, float *y, const float *x, const float *gamma,
                                       const float *beta, size_t rows, size_t n, float eps,
                                       void *stream, ttt_error *err) {
    if (rows == 0 || n == 0) return TTT_OK;
    rownorm_kernel<<<row_blocks(rows), kRowThreads, 0, (cudaStream_t)stream>>>(kind, y, x, gamma,
                                                                              beta, rows, n, eps);
    return launched("rownorm_kernel", rows * n, err);
}

extern "C" ttt_status ttt_cuda_rownorm_backward(int kind, float *gx, int add, float *dyxh,
                                                const float *dy, const float *x,
                                                const float *gamma, size_t rows, size_t n,
                                                float eps, void *stream, ttt_error *err) {
    if (rows == 0 || n == 0) return TTT_OK;
    rownorm_backward_kernel<<<row_blocks(rows), kRowThreads, 0, (cudaStream_t)stream>>>(
        kind, gx, add, dyxh, dy, x, gamma, rows, n, eps);
    return launched("rownorm_backward_kernel", rows * n, err);
}

extern "C" ttt_status ttt_cuda_cross_entropy(float *loss, float *lse, ttt_cuda_ce_stats *stats,
                                             double *row_loss, int *row_flag, const float *z,
                                             const int *targets, int N, int V, void *stream,
                                             ttt_error *err) {
    cudaStream_t s = (cudaStream_t)stream;
    if (N > 0) {
        ce_rows_kernel<<<row_blocks((size_t)N), kRowThreads, 0, s>>>(lse, row_loss, row_flag, z,
                                                                     targets, N, V);
        TTT_TRY(launched("ce_rows_kernel", (size_t)N * V, err));
    }
    ce_total_kernel<<<1, kRowThreads, 0, s>>>(loss, stats, row_loss, row_flag, N);
    return launched("ce_total_kernel", (size_t)N, err);
}

extern "C" ttt_status ttt_cuda_cross_entropy_backward(float *g, int add, const float *z,
                                                      const int *targets, const float *lse,
                                                      const ttt_cuda_ce_stats *stats,
                                                      const float *dl, int N, int V,
                                                      void *stream, ttt_error *err) {
    if (N == 0 || V == 0) return TTT_OK;
    ce_backward_kernel<<<row_blocks((size_t)N), kRowThreads, 0, (cudaStream_t)stream>>>(
        g, add, z, targets, lse, stats, dl, N, V);
    return launched("ce_backward_kernel", (size_t)N * V, err);
}
