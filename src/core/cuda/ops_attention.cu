/* Fused causal attention on the device (cuda_kernels.h ttt_cuda_attention_causal; what it
 * computes, its tiling and its numerics: docs/device_ops.md "Fused causal attention").
 *
 * O = softmax(scale·Q Kᵀ + log M) V per sequence, never storing the T × T scores. A block of
 * kAttnThreads threads owns a tile of kTile queries (forward, dQ) or kTile keys (dK, dV) and walks
 * the tiles of the other side that the causal mask leaves, kTile at a time, through shared
 * memory:
 *   forward  for each key tile: S = scale·Q Kᵀ (masked), the running row max m and sum l
 *            (online softmax: the accumulator and l are rescaled by exp(m_old − m_new) when the
 *            max grows), O += exp(S − m) V; at the end O /= l and lse = m + log l;
 *   backward P = exp(scale·Q Kᵀ − lse) is recomputed per tile from the saved lse, and
 *            dS = P ∘ (dO Vᵀ − D): one kernel per query tile forms D_i = Σ_j P_ij dP_ij over
 *            the key tiles (a first pass), then dQ = scale·dS K (a second); one kernel per key
 *            tile accumulates dV = Pᵀ dO and dK = scale·dSᵀ Q over the query tiles. No atomics:
 *            every gradient element has one writer, so the results are the same bits on every
 *            run.
 * Products are plain float32 FMAs (no tensor cores: TF32 rounds the operands to 10 bits), the
 * softmax sums and D are accumulated in double, as the CPU ops do.
 *
 * Thread layout of a tile product: thread t has ty = t / 8 and tx = t % 8 and owns the rows
 * ty, ty + 16, ty + 32, ty + 48 of the tile; of a 64 × 64 score tile the columns tx, tx + 8, …,
 * tx + 56, of an output tile (P X, width DP) the columns 4·tx + 32·m + u (u < 4). The 8 threads
 * of a row are consecutive lanes of one warp, so a row's max and sum are three shuffles. Tiles in
 * shared memory are row-major with a row stride of width + 4 floats: every read is a 16-byte
 * vector along a row (four terms of a sum at once), and the rows a warp reads together (4
 * consecutive ones, or 8 with the score tile's column layout) start in distinct 16-byte banks. */
#include "ops_common.cuh"

#include <math.h>

namespace {

using namespace ttt_ops;

constexpr int kTile = 64;      /* queries and keys per tile */
constexpr int kAttnThreads = 128; /* 16 row groups × 8 column lanes */
constexpr int kLdS = kTile + 4; /* row stride of a score tile */

/* The row stride of a tile of width DP (a multiple of 4, for the 16-byte reads). */
template <int DP>
__host__ __device__ constexpr int ld() {
    return DP + 4;
}

/* Rows [r0, r0 + kTile) of x (rows × d, row-major) into s (kTile × ld), zeros beyond the last
 * row and beyond column d. */
template <int DP>
__device__ void load_tile(float *s, const float *x, int r0, int rows, int d) {
    for (int idx = threadIdx.x; idx < kTile * DP; idx += kAttnThreads) {
        const int r = idx / DP, c = idx % DP, gr = r0 + r;
        s[r * ld<DP>() + c] = gr < rows && c < d ? x[(size_t)gr * d + c] : 0.0f;
    }
}

/* The thread's tile rows, score columns and output columns (the header's layout). */
__device__ int trow(int i) { return (int)(threadIdx.x >> 3) + 16 * i; }
__device__ int scol(int j) { return (int)(threadIdx.x & 7) + 8 * j; }
__device__ int ocol(int j) { return 4 * (int)(threadIdx.x & 7) + 32 * (j >> 2) + (j & 3); }

__device__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

/* Entries [r0, r0 + kTile) of x into s, 0 beyond n. */
__device__ void load_vec(float *s, const float *x, int r0, int n) {
    for (int r = threadIdx.x; r < kTile; r += kAttnThreads) s[r] = r0 + r < n ? x[r0 + r] : 0.0f;
}

/* acc[i][j] = Σ_c a[trow(i)][c]·b[scol(j)][c] over the DP columns of two tiles (A Bᵀ), the
 * terms taken in the order c = 0, 1, 2, … */
template <int DP>
__device__ void tile_abt(float (&acc)[4][8], const float *a, const float *b) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
#pragma unroll 2
    for (int c = 0; c < DP; c += 4) {
        float4 av[4], bv[8];
#pragma unroll
        for (int i = 0; i < 4; i++) av[i] = ld4(a + trow(i) * ld<DP>() + c);
#pragma unroll
        for (int j = 0; j < 8; j++) bv[j] = ld4(b + scol(j) * ld<DP>() + c);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                acc[i][j] = fmaf(av[i].x, bv[j].x, acc[i][j]);
                acc[i][j] = fmaf(av[i].y, bv[j].y, acc[i][j]);
                acc[i][j] = fmaf(av[i].z, bv[j].z, acc[i][j]);
                acc[i][j] = fmaf(av[i].w, bv[j].w, acc[i][j]);
            }
    }
}

/* acc[i][j] += Σ_c p[trow(i)][c]·x[c][ocol(j)] over the kTile columns of a score tile p and
 * the kTile rows of x (P X). */
template <int DP>
__device__ void tile_px(float (&acc)[4][DP / 8], const float *p, const float *x) {
#pragma unroll 2
    for (int c = 0; c < kTile; c += 4) {
        float4 pv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) pv[i] = ld4(p + trow(i) * kLdS + c);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            float4 xv[DP / 32];
#pragma unroll
            for (int m = 0; m < DP / 32; m++) xv[m] = ld4(x + (c + cc) * ld<DP>() + ocol(4 * m));
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float pc = cc == 0 ? pv[i].x : cc == 1 ? pv[i].y : cc == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                for (int m = 0; m < DP / 32; m++) {
                    acc[i][4 * m] = fmaf(pc, xv[m].x, acc[i][4 * m]);
                    acc[i][4 * m + 1] = fmaf(pc, xv[m].y, acc[i][4 * m + 1]);
                    acc[i][4 * m + 2] = fmaf(pc, xv[m].z, acc[i][4 * m + 2]);
                    acc[i][4 * m + 3] = fmaf(pc, xv[m].w, acc[i][4 * m + 3]);
                }
            }
        }
    }
}

/* The max and the sum over the 8 lanes of a row (lanes 8g … 8g + 7 of a warp). */
__device__ float row_max8(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
}
__device__ double row_sum8(double v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v + __shfl_xor_sync(0xffffffffu, v, 4);
}

/* Heaviest tiles first: query tile (tiles − 1 − y) has the most keys under the mask. */
__device__ int query_tile0(void) { return (int)(gridDim.y - 1 - blockIdx.y) * kTile; }

template <int DP>
constexpr size_t fwd_smem() {
    return (size_t)(3 * kTile * ld<DP>() + kTile * kLdS) * sizeof(float);
}
template <int DP>
constexpr size_t dq_smem() { /* Q, dO, K, V, dS, lse (floats), D (doubles) */
    return (size_t)(4 * kTile * ld<DP>() + kTile * kLdS + kTile) * sizeof(float) +
           kTile * sizeof(double);
}
template <int DP>
constexpr size_t dkv_smem() { /* K, V, Q, dO, Pᵀ then dSᵀ, lse (floats), D (doubles) */
    return (size_t)(4 * kTile * ld<DP>() + kTile * kLdS + kTile) * sizeof(float) +
           kTile * sizeof(double);
}

/* grid (B, query tiles). */
template <int DP>
__global__ void __launch_bounds__(kAttnThreads)
    attn_fwd_kernel(float *o, float *lse, const float *q, const float *k, const float *v, int T,
                    int dk, int dv, float scale) {
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + kTile * ld<DP>(), *Vs = Ks + kTile * ld<DP>();
    float *Ps = Vs + kTile * ld<DP>();
    const int tx = threadIdx.x & 7;
    const size_t base = (size_t)blockIdx.x * T;
    const float *qb = q + base * dk, *kb = k + base * dk, *vb = v + base * dv;
    const int m0 = query_tile0();
    load_tile<DP>(Qs, qb, m0, T, dk);
    float m[4], acc[4][DP / 8];
    double l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0;
#pragma unroll
        for (int j = 0; j < DP / 8; j++) acc[i][j] = 0.0f;
    }
    const int end = min(m0 + kTile, T); /* keys the tile's last query sees */
    for (int n0 = 0; n0 < end; n0 += kTile) {
        __syncthreads(); /* the previous tile's Ks, Vs and Ps are read */
        load_tile<DP>(Ks, kb, n0, T, dk);
        load_tile<DP>(Vs, vb, n0, T, dv);
        __syncthreads();
        float s[4][8];
        tile_abt<DP>(s, Qs, Ks);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = m0 + trow(i);
            float mx = m[i];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[i][j] = n0 + scol(j) <= r ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            /* finite: key 0 is in the first tile and every row sees it */
            mx = row_max8(mx);
            const float alpha = expf(m[i] - mx); /* 0 on the first tile (m = −∞) */
            m[i] = mx;
            double rs = 0.0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[i][j] = expf(s[i][j] - mx); /* masked: exp(−∞) = 0 */
                rs += s[i][j];
            }
            l[i] = l[i] * alpha + row_sum8(rs);
#pragma unroll
            for (int j = 0; j < DP / 8; j++) acc[i][j] *= alpha;
#pragma unroll
            for (int j = 0; j < 8; j++) Ps[trow(i) * kLdS + scol(j)] = s[i][j];
        }
        __syncthreads();
        tile_px<DP>(acc, Ps, Vs);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = m0 + trow(i);
        if (r >= T) continue;
        const double inv = 1.0 / l[i];
#pragma unroll
        for (int j = 0; j < DP / 8; j++) {
            const int c = ocol(j);
            if (c < dv) o[(base + r) * dv + c] = (float)(acc[i][j] * inv);
        }
        if (tx == 0) lse[base + r] = (float)((double)m[i] + log(l[i]));
    }
}

/* The probabilities and dP of one (query tile, key tile) pair: p = exp(scale·s − lse) inside
 * the mask (0 outside and for rows past T), dp = dO Vᵀ; Qs, Os, Ks, Vs in shared memory. */
template <int DP>
__device__ void tile_p_dp(float (&p)[4][8], float (&dp)[4][8], const float *Qs, const float *Os,
                          const float *Ks, const float *Vs, const float *Ls, int m0, int n0,
                          int T, float scale) {
    tile_abt<DP>(p, Qs, Ks);
    tile_abt<DP>(dp, Os, Vs);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int rl = trow(i), r = m0 + rl;
#pragma unroll
        for (int j = 0; j < 8; j++)
            p[i][j] = n0 + scol(j) <= r && r < T ? expf(p[i][j] * scale - Ls[rl]) : 0.0f;
    }
}

/* For one query tile over the key tiles it sees: first D_i = Σ_j P_ij dP_ij (in double, into
 * delta, which the dK/dV kernel reads), then, when gq is wanted, dQ = scale·dS K. D is formed
 * from the same float P and dP that dS = P ∘ (dP − D) uses (not as rowsum(dO ∘ O)), so that
 * Σ_j dS_ij cancels as in exact arithmetic: a row with one key gets dS = 0 exactly, and the
 * error of dQ stays proportional to how much the row's output depends on q
 * (docs/device_ops.md "Fused causal attention"). grid (B, query tiles). */
template <int DP>
__global__ void __launch_bounds__(kAttnThreads)
    attn_dq_kernel(float *gq, int add, double *delta, const float *dO, const float *q,
                   const float *k, const float *v, const float *lse, int T, int dk, int dv,
                   float scale) {
    extern __shared__ float sm[];
    float *Qs = sm, *Os = Qs + kTile * ld<DP>(), *Ks = Os + kTile * ld<DP>();
    float *Vs = Ks + kTile * ld<DP>(), *Ds = Vs + kTile * ld<DP>(), *Ls = Ds + kTile * kLdS;
    double *Es = reinterpret_cast<double *>(Ls + kTile);
    const size_t base = (size_t)blockIdx.x * T;
    const float *kb = k + base * dk, *vb = v + base * dv;
    const int m0 = query_tile0();
    load_tile<DP>(Qs, q + base * dk, m0, T, dk);
    load_tile<DP>(Os, dO + base * dv, m0, T, dv);
    load_vec(Ls, lse + base, m0, T);
    const int end = min(m0 + kTile, T);
    double dsum[4] = {0.0, 0.0, 0.0, 0.0}; /* this lane's part of D for its rows */
    for (int n0 = 0; n0 < end; n0 += kTile) {
        __syncthreads();
        load_tile<DP>(Ks, kb, n0, T, dk);
        load_tile<DP>(Vs, vb, n0, T, dv);
        __syncthreads();
        float p[4][8], dp[4][8];
        tile_p_dp<DP>(p, dp, Qs, Os, Ks, Vs, Ls, m0, n0, T, scale);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) dsum[i] += (double)p[i][j] * dp[i][j];
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int rl = trow(i);
        dsum[i] = row_sum8(dsum[i]);
        if ((threadIdx.x & 7) == 0) {
            Es[rl] = dsum[i];
            if (m0 + rl < T) delta[base + m0 + rl] = dsum[i];
        }
    }
    if (!gq) return; /* D only: q needs no gradient */
    float acc[4][DP / 8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < DP / 8; j++) acc[i][j] = 0.0f;
    for (int n0 = 0; n0 < end; n0 += kTile) {
        __syncthreads();
        load_tile<DP>(Ks, kb, n0, T, dk);
        load_tile<DP>(Vs, vb, n0, T, dv);
        __syncthreads();
        float p[4][8], dp[4][8];
        tile_p_dp<DP>(p, dp, Qs, Os, Ks, Vs, Ls, m0, n0, T, scale);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int rl = trow(i);
#pragma unroll
            for (int j = 0; j < 8; j++)
                Ds[rl * kLdS + scol(j)] = p[i][j] * (float)((double)dp[i][j] - Es[rl]);
        }
        __syncthreads();
        tile_px<DP>(acc, Ds, Ks);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = m0 + trow(i);
        if (r >= T) continue;
#pragma unroll
        for (int j = 0; j < DP / 8; j++) {
            const int c = ocol(j);
            if (c < dk) put(gq, (base + r) * dk + c, acc[i][j] * scale, add);
        }
    }
}

/* dV = Pᵀ dO and dK = scale·dSᵀ Q for one key tile over the query tiles that see it.
 * grid (B, key tiles); key tile y has the most queries for y = 0, which runs first. */
template <int DP>
__global__ void __launch_bounds__(kAttnThreads)
    attn_dkv_kernel(float *gk, int add_k, float *gv, int add_v, const float *dO, const float *q,
                    const float *k, const float *v, const float *lse, const double *delta, int T,
                    int dk, int dv, float scale) {
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + kTile * ld<DP>(), *Qs = Vs + kTile * ld<DP>();
    float *Os = Qs + kTile * ld<DP>(), *Ps = Os + kTile * ld<DP>();
    float *Ls = Ps + kTile * kLdS;
    double *Es = reinterpret_cast<double *>(Ls + kTile);
    const size_t base = (size_t)blockIdx.x * T;
    const float *qb = q + base * dk, *ob = dO + base * dv;
    const int n0 = (int)blockIdx.y * kTile;
    load_tile<DP>(Ks, k + base * dk, n0, T, dk);
    load_tile<DP>(Vs, v + base * dv, n0, T, dv);
    float ak[4][DP / 8], av[4][DP / 8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < DP / 8; j++) ak[i][j] = av[i][j] = 0.0f;
    for (int m0 = n0; m0 < T; m0 += kTile) { /* queries before n0 see none of these keys */
        __syncthreads();
        load_tile<DP>(Qs, qb, m0, T, dk);
        load_tile<DP>(Os, ob, m0, T, dv);
        load_vec(Ls, lse + base, m0, T);
        for (int r = threadIdx.x; r < kTile; r += kAttnThreads)
            Es[r] = m0 + r < T ? delta[base + m0 + r] : 0.0;
        __syncthreads();
        float st[4][8], dpt[4][8]; /* row: key n0 + trow(i), column: query m0 + scol(j) */
        tile_abt<DP>(st, Ks, Qs);
        tile_abt<DP>(dpt, Vs, Os);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = n0 + trow(i);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int rl = scol(j), r = m0 + rl;
                const float p = c <= r && r < T ? expf(st[i][j] * scale - Ls[rl]) : 0.0f;
                Ps[trow(i) * kLdS + rl] = p;
                st[i][j] = p * (float)((double)dpt[i][j] - Es[rl]); /* dSᵀ, until Ps is free */
            }
        }
        __syncthreads();
        tile_px<DP>(av, Ps, Os);
        __syncthreads(); /* Ps read: it takes dSᵀ (one score tile less of shared memory) */
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) Ps[trow(i) * kLdS + scol(j)] = st[i][j];
        __syncthreads();
        tile_px<DP>(ak, Ps, Qs);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int c = n0 + trow(i);
        if (c >= T) continue;
#pragma unroll
        for (int j = 0; j < DP / 8; j++) {
            const int e = ocol(j);
            if (gk && e < dk) put(gk, (base + c) * dk + e, ak[i][j] * scale, add_k);
            if (gv && e < dv) put(gv, (base + c) * dv + e, av[i][j], add_v);
        }
    }
}

/* The padded width for head dims dk, dv: 32, 64 or 128 (0: too wide). An output tile's row
 * is 8 threads × 4 columns wide, so 32 is the narrowest. */
int padded_width(int dk, int dv) {
    const int d = dk > dv ? dk : dv;
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 0;
}

ttt_status attr_error(cudaError_t e, const char *what, ttt_error *err) {
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)e, ttt_device_cuda(dev), err, "%s", what);
}

/* Dynamic shared memory above 48 KiB must be asked for per kernel. */
template <typename K>
ttt_status allow_smem(K kernel, size_t bytes, const char *what, ttt_error *err) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    return e == cudaSuccess ? TTT_OK : attr_error(e, what, err);
}

template <int DP>
ttt_status forward(float *o, float *lse, const float *q, const float *k, const float *v, int B,
                   int T, int dk, int dv, float scale, cudaStream_t s, ttt_error *err) {
    const size_t sm = fwd_smem<DP>();
    TTT_TRY(allow_smem(attn_fwd_kernel<DP>, sm, "attn_fwd_kernel (shared memory)", err));
    const dim3 grid((unsigned)B, (unsigned)((T + kTile - 1) / kTile));
    attn_fwd_kernel<DP><<<grid, kAttnThreads, sm, s>>>(o, lse, q, k, v, T, dk, dv, scale);
    return launched("attn_fwd_kernel", (size_t)B * T, err);
}

/* The dQ kernel first, always: it forms D, which the dK/dV kernel reads. */
template <int DP>
ttt_status backward(float *gq, int add_q, float *gk, int add_k, float *gv, int add_v,
                    double *delta, const float *dO, const float *q, const float *k,
                    const float *v, const float *lse, int B, int T, int dk, int dv, float scale,
                    cudaStream_t s, ttt_error *err) {
    const dim3 grid((unsigned)B, (unsigned)((T + kTile - 1) / kTile));
    {
        const size_t sm = dq_smem<DP>();
        TTT_TRY(allow_smem(attn_dq_kernel<DP>, sm, "attn_dq_kernel (shared memory)", err));
        attn_dq_kernel<DP><<<grid, kAttnThreads, sm, s>>>(gq, add_q, delta, dO, q, k, v, lse, T,
                                                          dk, dv, scale);
        TTT_TRY(launched("attn_dq_kernel", (size_t)B * T, err));
    }
    if (gk || gv) {
        const size_t sm = dkv_smem<DP>();
        TTT_TRY(allow_smem(attn_dkv_kernel<DP>, sm, "attn_dkv_kernel (shared memory)", err));
        attn_dkv_kernel<DP><<<grid, kAttnThreads, sm, s>>>(gk, add_k, gv, add_v, dO, q, k, v, lse,
                                                       delta, T, dk, dv, scale);
        TTT_TRY(launched("attn_dkv_kernel", (size_t)B * T, err));
    }
    return TTT_OK;
}

ttt_status bad_shape(int B, int T, int dk, int dv, ttt_error *err) {
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                         "attention_causal on the device: B = %d, T = %d, dk = %d, dv = %d "
                         "(head dims up to %d, T up to 65535 tiles of %d)",
                         B, T, dk, dv, TTT_CUDA_ATTENTION_MAX_D, kTile);
}

int shape_ok(int B, int T, int dk, int dv) {
    return B >= 0 && T >= 0 && dk >= 0 && dv >= 0 && padded_width(dk, dv) != 0 &&
           (T + kTile - 1) / kTile <= 65535;
}

} // namespace

extern "C" ttt_status ttt_cuda_attention_causal(float *o, float *lse, const float *q,
                                                const float *k, const float *v, int B, int T,
                                                int dk, int dv, float scale, void *stream,
                                                ttt_error *err) {
    if (!shape_ok(B, T, dk, dv)) return bad_shape(B, T, dk, dv, err);
    if (B == 0 || T == 0) return TTT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    switch (padded_width(dk, dv)) {
    case 32: return forward<32>(o, lse, q, k, v, B, T, dk, dv, scale, s, err);
    case 64: return forward<64>(o, lse, q, k, v, B, T, dk, dv, scale, s, err);
    default: return forward<128>(o, lse, q, k, v, B, T, dk, dv, scale, s, err);
    }
}

extern "C" ttt_status ttt_cuda_attention_causal_backward(
    float *gq, int add_q, float *gk, int add_k, float *gv, int add_v, double *delta,
    const float *dO, const float *q, const float *k, const float *v, const float *lse, int B,
    int T, int dk, int dv, float scale, void *stream, ttt_error *err) {
    if (!shape_ok(B, T, dk, dv)) return bad_shape(B, T, dk, dv, err);
    if (B == 0 || T == 0 || (!gq && !gk && !gv)) return TTT_OK;
    cudaStream_t s = (cudaStream_t)stream;
    switch (padded_width(dk, dv)) {
    case 32:
        return backward<32>(gq, add_q, gk, add_k, gv, add_v, delta, dO, q, k, v, lse, B, T, dk,
                            dv, scale, s, err);
    case 64:
        return backward<64>(gq, add_q, gk, add_k, gv, add_v, delta, dO, q, k, v, lse, B, T, dk,
                            dv, scale, s, err);
    default:
        return backward<128>(gq, add_q, gk, add_k, gv, add_v, delta, dO, q, k, v, lse, B, T, dk,
                             dv, scale, s, err);
    }
}
