/* CUDA chunk kernels of (gated) linear attention, forward and backward (layers/forms/chunk_cuda.h;
 * design, equations and precision in docs/gpu.md "Linear attention kernels").
 *
 * Recurrence per sequence (b, h), S (d_k, d_v) in fp32:
 *     S_t = diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ,      o_t = scale · S_tᵀ q_t,
 * with g_t a scalar per token, a vector per key (gate_per_key), or absent. The sequence is cut
 * into chunks of C = 64 tokens. Inside a chunk starting from state S0, with
 *     dec(j→i) = Π_{j<r≤i} e^{g_r}   (per key; dec(−1→i) counts from the chunk start),
 *     a_i = dec(−1→i),  b_j = dec(j→n−1),  e = dec(−1→n−1)   (n tokens in the chunk),
 * the chunk form is
 *     o_i   = scale·(q_i ⊙ a_i)ᵀ S0 + Σ_{j≤i} A_ij β_j v_j,   A_ij = scale·Σ_m q_im k_jm dec(j→i)_m
 *     S_end = diag(e) S0 + Σ_j (β_j k_j ⊙ b_j) v_jᵀ.
 * Every dec is exp of a difference of float64 cumulative log gates G' that restart at a hard
 * reset (a gate whose fp32 exponential is 0): dec(j→i) = 0 when a reset lies in (j, i], so no
 * (−inf) − (−inf) is ever formed.
 *
 * Kernels (all 256 threads, fp32 FFMA on shared-memory tiles; bf16 inputs are converted to fp32
 * on load and results rounded to bf16 only on the final store; every tile's loads are issued
 * together; the sequential kernels run two blocks per SM):
 *   la_scores      (B·H, chunks)       A with β_j and scale folded in, to the workspace
 *   la_state       (B·H, d_v/32)       sequential over chunks: o, S (forward) or the chunk-start
 *                                      states (backward recompute)
 *   la_dstate      (B·H, d_v/32)       reverse over chunks: the gradient of each chunk-end state
 *   la_bwd_chunk   (B·H, chunks)       dq, dk, dv, dβ and the chunk-local part of dg
 *   la_dg_carry / la_dg_add            the cross-chunk suffix sums of dg */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "chunk_cuda.h"
#include "cuda_common.cuh"
#include "status.h"

#define LA_C 64   /* tokens per chunk */
#define LA_KT 64  /* key tile */
#define LA_VT 64  /* value tile of la_bwd_chunk */
#define LA_BV 32  /* value tile of the sequential kernels */
#define LA_NT 256 /* threads per block */
#define LA_LD 65  /* row stride (floats) of 64-column tiles: conflict-free column reads */
#define LA_SLD 33 /* row stride of the (d_k, 32) state tiles */
#define LA_GLD 65 /* row stride (elements) of the gate arrays G' (double) and R (char) */

/* A gate below this is a hard reset: its fp32 exponential rounds to 0 (e^x < 2^−150). */
#define LA_RESET_G (-103.972077f)

/* Everything a kernel needs, by value. */
struct la_dev {
    int B, T, H, dk, dv, NC, per_key;
    float scale;
    const void *q, *k, *v;
    const float *beta, *g, *h0;
    void *o;
    float *ht;
    const void *d_o;
    const float *d_ht;
    void *dq, *dkk, *dvv;
    float *dbeta, *dg, *dh0;
    float *Aw;     /* (B·H, NC, C, C) forward scores */
    float *Sst;    /* (B·H, NC, d_k, d_v) state at each chunk start (backward) */
    float *dSe;    /* (B·H, NC, d_k, d_v) gradient of the state at each chunk end */
    float *ST;     /* (B·H, d_k, d_v) final state (backward, for dg) */
    double *head;  /* (B·H, NC, gdim) chunk sums of q⊙dq − k⊙dk up to the first reset */
    double *carry; /* (B·H, NC, gdim) dg carried into each chunk from the later ones */
    int *flag;     /* (B·H, NC, gdim) 1 when the chunk holds a reset */
    /* tensor-core path (bf16; "Tensor-core kernels" of docs/gpu.md), per chunk ch = bh·NC + c: */
    __nv_bfloat16 *Ahl; /* (B·H·NC, 2, C, C) the forward's scores A ⊙ β_j, hi then lo part */
    __nv_bfloat16 *Qhl; /* (B·H·NC, 2, C, d_k) scale·q ⊙ a, hi then lo */
    __nv_bfloat16 *Khl; /* (B·H·NC, 2, C, d_k) β k ⊙ b, hi then lo */
    double *gnw;        /* (B·H·NC, gdim) G'_{n−1}, the chunk's restarted log decay */
    int *rnw;           /* (B·H·NC, gdim) R_{n−1}, its last reset (−1: none) */
    int fold_beta;      /* la_prep_mma: 1 (forward) A ⊙ β_j, 0 (backward) A alone */
};

__device__ __forceinline__ bool la_reset(float g) { return g < LA_RESET_G; }

/* Row index (b, t, h) of a (B, T, H, ·) tensor. */
__device__ __forceinline__ size_t la_row(const la_dev &P, int b, int t, int h) {
    return ((size_t)b * P.T + t) * P.H + h;
}

/* ---- gates ----
 * Thread (col = tid & 63, seg = tid >> 6) of a 256-thread block owns rows 16·seg … 16·seg + 15
 * of gate column col (a key m0 + col, or the single scalar gate in column 0). la_gate_fetch
 * issues its 16 loads at once; la_scan_rows forms the restarted cumulative log gate G'_i
 * (float64) and R_i, the last reset at or before token i (−1: none): each segment is scanned,
 * then the earlier segments' carry (their sum since their last reset, or their reset) is added
 * to the rows before the segment's first reset. Rows past n continue with g = 0. */
template <bool PK>
__device__ __forceinline__ void la_gate_fetch(const la_dev &P, int b, int h, int t0, int n, int m0,
                                              float (&gv)[16]) {
    const int col = threadIdx.x & 63, seg = threadIdx.x >> 6, m = m0 + col;
    const bool has = P.g != nullptr && (PK ? m < P.dk : col == 0);
    const size_t gd = PK ? (size_t)P.dk : 1, rs = (size_t)P.H * gd;
    const float *p = has ? P.g + la_row(P, b, t0 + 16 * seg, h) * gd + (PK ? m : 0) : P.g;
#pragma unroll
    for (int r = 0; r < 16; ++r)
        gv[r] = (has && 16 * seg + r < n) ? p[(size_t)r * rs] : 0.0f;
}

/* Contains __syncthreads: every thread of the block calls it. */
__device__ __forceinline__ void la_scan_rows(const float (&gv)[16], double (&G)[16], int (&R)[16]) {
    __shared__ double sg[LA_NT];
    __shared__ int sr[LA_NT];
    const int col = threadIdx.x & 63, seg = threadIdx.x >> 6;
    double acc = 0.0;
    int rr = -1;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        if (la_reset(gv[r])) {
            acc = 0.0;
            rr = 16 * seg + r;
        } else {
            acc += (double)gv[r];
        }
        G[r] = acc;
        R[r] = rr;
    }
    sg[threadIdx.x] = acc;
    sr[threadIdx.x] = rr;
    __syncthreads();
    double cg = 0.0;
    int cr = -1;
    for (int s2 = 0; s2 < seg; ++s2) {
        const int r2 = sr[s2 * 64 + col];
        if (r2 >= 0) {
            cg = sg[s2 * 64 + col];
            cr = r2;
        } else {
            cg += sg[s2 * 64 + col];
        }
    }
#pragma unroll
    for (int r = 0; r < 16; ++r)
        if (R[r] < 0) {
            G[r] += cg;
            R[r] = cr;
        }
    __syncthreads();
}

/* G'_i and R_i of the tile's gate columns into shared memory (stride LA_GLD), for la_dec. */
template <bool PK>
__device__ __forceinline__ void la_scan(const la_dev &P, int b, int h, int t0, int n, int m0,
                                        double *Gd, signed char *Rr) {
    float gv[16];
    double G[16];
    int R[16];
    la_gate_fetch<PK>(P, b, h, t0, n, m0, gv);
    la_scan_rows(gv, G, R);
    const int col = threadIdx.x & 63, seg = threadIdx.x >> 6;
    if (PK || col == 0) {
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            Gd[(16 * seg + r) * LA_GLD + col] = G[r];
            Rr[(16 * seg + r) * LA_GLD + col] = (signed char)R[r];
        }
    }
}

/* The thread holding row n − 1 of its column publishes G'_{n−1} and R_{n−1}. */
__device__ __forceinline__ void la_publish_last(int n, const double (&G)[16], const int (&R)[16],
                                                double *Gn, int *Rn) {
    const int col = threadIdx.x & 63, seg = threadIdx.x >> 6;
#pragma unroll
    for (int r = 0; r < 16; ++r)
        if (16 * seg + r == n - 1) {
            Gn[col] = G[r];
            Rn[col] = R[r];
        }
}

/* dec(j→i) for column col, j ≤ i (j = −1: from the chunk start): 0 when a reset lies in (j, i],
 * else exp(G'_i − G'_j), the difference formed in float64 (both G' restart at the same reset). */
__device__ __forceinline__ float la_dec(const double *Gd, const signed char *Rr, int j, int i,
                                        int col) {
    if (Rr[i * LA_GLD + col] > j)
        return 0.0f;
    const double x = Gd[i * LA_GLD + col] - (j >= 0 ? Gd[j * LA_GLD + col] : 0.0);
    return expf((float)x);
}

/* The chunk's state decay e = dec(−1→n−1), rounded with the drift of the decays so far carried
 * forward (as the CPU chunkwise form does, layers/forms/kernels.h ttt_gate_dither): a weak gate
 * rounds e to the same side every chunk, which would otherwise grow linearly in T. */
__device__ __forceinline__ float la_dither(double *drift, double gn, int rn) {
    const double alpha = rn >= 0 ? 0.0 : exp(gn);
    if (alpha < 1e-30) {
        *drift = 1.0;
        return (float)alpha;
    }
    const float a = (float)(alpha / *drift);
    *drift *= (double)a / alpha;
    return a;
}

/* ---- tiles ---- */

/* Tile loads: each thread first issues all its loads (PER of them), then stores them, so a tile
 * costs one memory latency. la_fetch/la_put: X[t0 + r, c0 + c] of a (B, T, H, D) tensor X for
 * r < C, c < NCOLS, zero outside the n valid rows and the D columns. */
template <typename E, int NCOLS>
__device__ __forceinline__ void la_fetch(float (&v)[LA_C * NCOLS / LA_NT], const E *X,
                                         const la_dev &P, int b, int h, int t0, int n, int c0,
                                         int D) {
    constexpr int RSTEP = LA_NT / NCOLS; /* rows per step */
    const int r0 = threadIdx.x / NCOLS, c = threadIdx.x % NCOLS;
    const size_t rs = (size_t)P.H * D * RSTEP;
    const E *p = X + la_row(P, b, t0 + r0, h) * D + c0 + c;
    const bool cok = c0 + c < D;
#pragma unroll
    for (int k = 0; k < LA_C * NCOLS / LA_NT; ++k)
        v[k] = (cok && r0 + k * RSTEP < n) ? ttt_ld<E>(p, (size_t)k * rs) : 0.0f;
}
template <int NCOLS>
__device__ __forceinline__ void la_put(float *dst, int ld, const float (&v)[LA_C * NCOLS / LA_NT]) {
#pragma unroll
    for (int k = 0; k < LA_C * NCOLS / LA_NT; ++k) {
        const int e = threadIdx.x + k * LA_NT, r = e / NCOLS, c = e % NCOLS;
        dst[r * ld + c] = v[k];
    }
}
template <typename E, int NCOLS>
__device__ __forceinline__ void la_load(float *dst, int ld, const E *X, const la_dev &P, int b,
                                        int h, int t0, int n, int c0, int D) {
    float v[LA_C * NCOLS / LA_NT];
    la_fetch<E, NCOLS>(v, X, P, b, h, t0, n, c0, D);
    la_put<NCOLS>(dst, ld, v);
}

/* dst[r·ld + c] = M[m0 + r, n0 + c] of a (d_k, d_v) fp32 matrix, 64 × 64, zero outside. */
__device__ __forceinline__ void la_load_state(float *dst, const float *M, int dk, int dv, int m0,
                                              int n0, int ld = LA_LD) {
    float v[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int e = threadIdx.x + k * LA_NT, r = e >> 6, c = e & 63;
        v[k] = (m0 + r < dk && n0 + c < dv) ? M[(size_t)(m0 + r) * dv + n0 + c] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int e = threadIdx.x + k * LA_NT;
        dst[(e >> 6) * ld + (e & 63)] = v[k];
    }
}

/* acc[r][c] += Σ_{x<K} A(i_r, x)·B(x, j_c) with i_r = tr + 16r, j_c = tc + 16c (a 256-thread
 * block covers 16·NR × 16·NC outputs). A(i, x) = TA ? a[x·lda + i] : a[i·lda + x], and
 * B(x, j) = TB ? b[j·ldb + x] : b[x·ldb + j]. With the padded strides every read is a broadcast
 * or conflict-free. */
template <int NR, int NC, bool TA, bool TB>
__device__ __forceinline__ void la_mm(float (&acc)[NR][NC], const float *a, int lda, const float *b,
                                      int ldb, int K, int tr, int tc) {
#pragma unroll 4
    for (int x = 0; x < K; ++x) {
        float av[NR], bv[NC];
#pragma unroll
        for (int r = 0; r < NR; ++r)
            av[r] = TA ? a[x * lda + tr + 16 * r] : a[(tr + 16 * r) * lda + x];
#pragma unroll
        for (int c = 0; c < NC; ++c)
            bv[c] = TB ? b[(tc + 16 * c) * ldb + x] : b[x * ldb + tc + 16 * c];
#pragma unroll
        for (int r = 0; r < NR; ++r)
#pragma unroll
            for (int c = 0; c < NC; ++c)
                acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
    }
}

template <int NR, int NC> __device__ __forceinline__ void la_zero(float (&acc)[NR][NC]) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c)
            acc[r][c] = 0.0f;
}

/* ---- intra-chunk scores ----
 * A[i][j] = scale·Σ_m q_im k_jm dec(j→i)_m for j ≤ i < n, 0 elsewhere (the C × C block, stride
 * LA_LD). Scalar gate: (Q Kᵀ) ⊙ Γ with Γ_ij = dec(j→i). Per-key gate (docs/gpu.md "Per-key
 * gates"): the chunk is cut into four sub-blocks of 16 rows; for a row block I above a column
 * block J the decay factors through the last token p = 16I − 1 before block I,
 *     dec(j→i) = dec(p→i)·dec(j→p),  both ≤ 1 (exactly 0 across a reset),
 * so that block is a plain product of (q ⊙ dec(p→·)) and (k ⊙ dec(·→p)); the four diagonal
 * blocks take dec(j→i) element by element (first, from the raw tiles; then Qs is scaled in
 * place and the columns before each row block are scaled into Kh, one row block at a time). */
struct la_sc_smem {
    float *A, *Qs, *Ks, *Kh; /* C × LA_LD each; Kh: 48 rows used */
    double *Gd;
    signed char *Rr;
};

template <typename E, bool PK>
__device__ void la_chunk_scores(const la_dev &P, int b, int h, int t0, int n, const la_sc_smem &s) {
    const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
    if constexpr (!PK) {
        float acc[4][4];
        la_zero(acc);
        la_scan<false>(P, b, h, t0, n, 0, s.Gd, s.Rr);
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            la_load<E, LA_KT>(s.Qs, LA_LD, (const E *)P.q, P, b, h, t0, n, m0, P.dk);
            la_load<E, LA_KT>(s.Ks, LA_LD, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
            __syncthreads();
            la_mm<4, 4, false, true>(acc, s.Qs, LA_LD, s.Ks, LA_LD, LA_KT, tr, tc);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int i = tr + 16 * r, j = tc + 16 * c;
                s.A[i * LA_LD + j] =
                    (j <= i && i < n) ? P.scale * acc[r][c] * la_dec(s.Gd, s.Rr, j, i, 0) : 0.0f;
            }
        __syncthreads();
    } else {
        for (int e = tid; e < LA_C * LA_LD; e += blockDim.x)
            s.A[e] = 0.0f;
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            la_scan<true>(P, b, h, t0, n, m0, s.Gd, s.Rr);
            la_load<E, LA_KT>(s.Qs, LA_LD, (const E *)P.q, P, b, h, t0, n, m0, P.dk);
            la_load<E, LA_KT>(s.Ks, LA_LD, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
            __syncthreads();
            /* diagonal blocks: the 4 × 136 pairs j ≤ i inside a block, element by element */
            for (int pidx = tid; pidx < 4 * 136; pidx += blockDim.x) {
                const int I = pidx / 136, qq = pidx - 136 * I;
                int r = (int)((sqrtf(8.0f * qq + 1.0f) - 1.0f) * 0.5f);
                while ((r + 1) * (r + 2) / 2 <= qq)
                    ++r;
                while (r * (r + 1) / 2 > qq)
                    --r;
                const int c = qq - r * (r + 1) / 2;
                const int i = 16 * I + r, j = 16 * I + c;
                float sum = 0.0f;
                for (int col = 0; col < LA_KT; ++col)
                    sum = fmaf(s.Qs[i * LA_LD + col] * s.Ks[j * LA_LD + col],
                               la_dec(s.Gd, s.Rr, j, i, col), sum);
                s.A[i * LA_LD + j] += sum;
            }
            __syncthreads();
            /* rows 16..63 of Qs in place: q_i ⊙ dec(p_I→i), p_I = 16I − 1 the token before block I */
            for (int e = tid; e < 48 * LA_KT; e += blockDim.x) {
                const int i = 16 + e / LA_KT, col = e % LA_KT, p = (i & ~15) - 1;
                s.Qs[i * LA_LD + col] *= la_dec(s.Gd, s.Rr, p, i, col);
            }
            /* row block I against the columns before it: Kh rows j < 16I hold k_j ⊙ dec(j→p_I) */
            for (int I = 1; I < 4; ++I) {
                const int p = 16 * I - 1;
                for (int e = tid; e < 16 * I * LA_KT; e += blockDim.x) {
                    const int j = e / LA_KT, col = e % LA_KT;
                    s.Kh[j * LA_LD + col] = s.Ks[j * LA_LD + col] * la_dec(s.Gd, s.Rr, j, p, col);
                }
                __syncthreads();
                for (int o = tid; o < 256 * I; o += blockDim.x) {
                    const int r = o / (16 * I), j = o - r * 16 * I, i = 16 * I + r;
                    const float *qa = s.Qs + i * LA_LD, *kb = s.Kh + j * LA_LD;
                    float sum = 0.0f;
#pragma unroll 8
                    for (int col = 0; col < LA_KT; ++col)
                        sum = fmaf(qa[col], kb[col], sum);
                    s.A[i * LA_LD + j] += sum;
                }
                __syncthreads();
            }
        }
        for (int e = tid; e < LA_C * LA_C; e += blockDim.x) {
            const int i = e >> 6, j = e & 63;
            const float x = s.A[i * LA_LD + j];
            s.A[i * LA_LD + j] = (j <= i && i < n) ? P.scale * x : 0.0f;
        }
        __syncthreads();
    }
}

/* Shared-memory carve-up of la_chunk_scores (floats, then doubles, then chars). */
#define LA_SC_FLOATS ((3 * LA_C + 48) * LA_LD)
#define LA_SC_BYTES (LA_SC_FLOATS * 4 + LA_C * LA_GLD * 8 + LA_C * LA_GLD)

/* ---- forward: scores ----
 * Aw[bh, c] = A ⊙ β_j (columns), the intra-chunk operator of the output (C × C, zero above the
 * diagonal and outside the chunk). */
template <typename E, bool PK> __global__ void __launch_bounds__(LA_NT, 2) la_scores(la_dev P) {
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
    float *f = (float *)la_smem;
    la_sc_smem s;
    s.A = f;
    s.Qs = f + LA_C * LA_LD;
    s.Ks = f + 2 * LA_C * LA_LD;
    s.Kh = f + 3 * LA_C * LA_LD;
    s.Gd = (double *)(f + LA_SC_FLOATS);
    s.Rr = (signed char *)(s.Gd + LA_C * LA_GLD);
    la_chunk_scores<E, PK>(P, b, h, t0, n, s);
    float *out = P.Aw + ((size_t)bh * P.NC + c) * LA_C * LA_C;
    for (int e = threadIdx.x; e < LA_C * LA_C; e += blockDim.x) {
        const int i = e >> 6, j = e & 63;
        const float bj = (P.beta && j < n) ? P.beta[la_row(P, b, t0 + j, h)] : 1.0f;
        out[e] = s.A[i * LA_LD + j] * bj;
    }
}

/* ---- sequential state kernels ----
 * One block per (sequence, 32 columns of the state); S (d_k × 32) stays in shared memory across
 * the chunks. Per chunk and key tile: Qa = scale·q ⊙ a, Kb = β k ⊙ b (the gates applied by the
 * thread that scanned them, from registers), then
 *     MODE 0 (forward):   O = Aw·V + Σ_tiles Qa·S_tile;   S_tile ← e ⊙ S_tile + Kbᵀ V
 *     MODE 1 (backward):  the chunk-start S to the workspace, then the same update.
 * A scalar gate is scanned once per chunk into the factor vectors af, bf. */
struct la_seq_smem {
    float *S, *Vs, *As, *Qa, *Kb, *bet, *af, *bf, *es;
    double *Gn, *drift;
    int *Rn;
};

/* Carve-up: S (dkp × LA_SLD), Vs (C × LA_SLD), As, Qa, Kb (C × LA_LD), then small vectors. */
static __host__ __device__ size_t la_seq_bytes(int dk) {
    const int dkp = (dk + LA_KT - 1) / LA_KT * LA_KT;
    return ((size_t)dkp * LA_SLD + LA_C * LA_SLD + 3 * LA_C * LA_LD + 3 * LA_C + 256) * 4 +
           (64 + 256) * 8 + 64 * 4;
}

__device__ __forceinline__ la_seq_smem la_seq_carve(unsigned char *base, int dk) {
    const int dkp = (dk + LA_KT - 1) / LA_KT * LA_KT;
    la_seq_smem m;
    m.S = (float *)base;
    m.Vs = m.S + dkp * LA_SLD;
    m.As = m.Vs + LA_C * LA_SLD;
    m.Qa = m.As + LA_C * LA_LD;
    m.Kb = m.Qa + LA_C * LA_LD;
    m.bet = m.Kb + LA_C * LA_LD;
    m.af = m.bet + LA_C;
    m.bf = m.af + LA_C;
    m.es = m.bf + LA_C;
    /* every size above is a multiple of 8 bytes: (dkp·33 + 64·33 + 3·64·65 + 3·64 + 256)·4 */
    m.Gn = (double *)(m.es + 256);
    m.drift = m.Gn + 64;
    m.Rn = (int *)(m.drift + 256);
    return m;
}

/* Gate factors of one chunk for key tile m0 (PK) or the scalar gate (all tiles): scans, then
 *   PK:     Qa[i][col] *= scale·a_i, Kb[i][col] *= β_i·b_i in place, es[m0 + col] = dithered e;
 *   scalar: af[i] = a_i, bf[i] = b_i, es[0] = dithered e.
 * gv: the thread's gates (la_gate_fetch, issued by the caller together with its tile loads).
 * Qa (when WQ) and Kb (when WK) must hold the raw tiles, written before the call (the scan's
 * barriers order them). Contains __syncthreads. */
template <bool PK, bool WQ, bool WK>
__device__ __forceinline__ void la_seq_gates(const la_dev &P, const la_seq_smem &m,
                                             const float (&gv)[16], int n, int m0) {
    const int col = threadIdx.x & 63, seg = threadIdx.x >> 6;
    double G[16];
    int R[16];
    la_scan_rows(gv, G, R);
    la_publish_last(n, G, R, m.Gn, m.Rn);
    __syncthreads();
    const double gn = m.Gn[col];
    const int rn = m.Rn[col];
    if (PK ? m0 + col < P.dk : col == 0) {
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int i = 16 * seg + r;
            const float a = (i < n && R[r] < 0) ? expf((float)G[r]) : 0.0f;
            const float bb = (i < n && rn <= i) ? expf((float)(gn - G[r])) : 0.0f;
            if (PK) {
                if (WQ)
                    m.Qa[i * LA_LD + col] *= P.scale * a;
                if (WK)
                    m.Kb[i * LA_LD + col] *= m.bet[i] * bb;
            } else {
                m.af[i] = a;
                m.bf[i] = bb;
            }
        }
        if (seg == 0)
            m.es[PK ? m0 + col : 0] = la_dither(&m.drift[PK ? m0 + col : 0], gn, rn);
    }
    __syncthreads();
}

template <typename E, bool PK, int MODE>
__global__ void __launch_bounds__(LA_NT, 2) la_state(la_dev P) {
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, n0 = blockIdx.y * LA_BV, b = bh / P.H, h = bh % P.H;
    const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
    const int dkp = (P.dk + LA_KT - 1) / LA_KT * LA_KT;
    const la_seq_smem m = la_seq_carve(la_smem, P.dk);
    float *S = m.S;
    const size_t sq = (size_t)bh * P.dk * P.dv;

    for (int e = tid; e < dkp * LA_BV; e += blockDim.x) {
        const int r = e / LA_BV, c = e % LA_BV;
        float x = 0.0f;
        if (P.h0 && r < P.dk && n0 + c < P.dv)
            x = P.h0[sq + (size_t)r * P.dv + n0 + c];
        S[r * LA_SLD + c] = x;
    }
    for (int e = tid; e < 256; e += blockDim.x)
        m.drift[e] = 1.0;
    __syncthreads();

    for (int c = 0; c < P.NC; ++c) {
        const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
        float acc[4][2], gv[16];
        la_zero(acc);
        if (MODE == 1) {
            float *dst = P.Sst + ((size_t)bh * P.NC + c) * P.dk * P.dv;
            for (int e = tid; e < P.dk * LA_BV; e += blockDim.x) {
                const int r = e / LA_BV, cc = e % LA_BV;
                if (n0 + cc < P.dv)
                    dst[(size_t)r * P.dv + n0 + cc] = S[r * LA_SLD + cc];
            }
        }
        {
            float vv[LA_C * LA_BV / LA_NT];
            la_fetch<E, LA_BV>(vv, (const E *)P.v, P, b, h, t0, n, n0, P.dv);
            if (!PK)
                la_gate_fetch<false>(P, b, h, t0, n, 0, gv);
            float av[16];
            if (MODE == 0) {
                const float *src = P.Aw + ((size_t)bh * P.NC + c) * LA_C * LA_C;
#pragma unroll
                for (int k = 0; k < 16; ++k)
                    av[k] = src[tid + k * LA_NT];
            }
            if (tid < LA_C)
                m.bet[tid] = (P.beta && tid < n) ? P.beta[la_row(P, b, t0 + tid, h)] : 1.0f;
            la_put<LA_BV>(m.Vs, LA_SLD, vv);
            if (MODE == 0) {
#pragma unroll
                for (int k = 0; k < 16; ++k) {
                    const int e = tid + k * LA_NT;
                    m.As[(e >> 6) * LA_LD + (e & 63)] = av[k];
                }
            }
        }
        if (!PK)
            la_seq_gates<false, false, false>(P, m, gv, n, 0);
        __syncthreads();
        if (MODE == 0)
            la_mm<4, 2, false, false>(acc, m.As, LA_LD, m.Vs, LA_SLD, LA_C, tr, tc);
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            {
                float qv[16], kv[16];
                if (MODE == 0)
                    la_fetch<E, LA_KT>(qv, (const E *)P.q, P, b, h, t0, n, m0, P.dk);
                la_fetch<E, LA_KT>(kv, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
                if (PK)
                    la_gate_fetch<true>(P, b, h, t0, n, m0, gv);
                if (MODE == 0)
                    la_put<LA_KT>(m.Qa, LA_LD, qv);
                la_put<LA_KT>(m.Kb, LA_LD, kv);
            }
            if (PK) {
                la_seq_gates<true, MODE == 0, true>(P, m, gv, n, m0);
            } else {
                __syncthreads();
                for (int e = tid; e < LA_C * LA_KT; e += blockDim.x) {
                    const int i = e / LA_KT, col = e % LA_KT;
                    if (MODE == 0)
                        m.Qa[i * LA_LD + col] *= P.scale * m.af[i];
                    m.Kb[i * LA_LD + col] *= m.bet[i] * m.bf[i];
                }
                __syncthreads();
            }
            if (MODE == 0)
                la_mm<4, 2, false, false>(acc, m.Qa, LA_LD, S + m0 * LA_SLD, LA_SLD, LA_KT, tr, tc);
            __syncthreads();
            {
                float up[4][2];
                la_zero(up);
                la_mm<4, 2, true, false>(up, m.Kb, LA_LD, m.Vs, LA_SLD, LA_C, tr, tc);
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int mm = m0 + tr + 16 * r;
                    const float em = mm < P.dk ? m.es[PK ? mm : 0] : 0.0f;
#pragma unroll
                    for (int cc = 0; cc < 2; ++cc) {
                        float *sp = &S[mm * LA_SLD + tc + 16 * cc];
                        *sp = fmaf(em, *sp, up[r][cc]);
                    }
                }
            }
            __syncthreads();
        }
        if (MODE == 0) {
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int cc = 0; cc < 2; ++cc) {
                    const int i = tr + 16 * r, col = n0 + tc + 16 * cc;
                    if (i < n && col < P.dv)
                        ttt_st<E>((E *)P.o, la_row(P, b, t0 + i, h) * P.dv + col, acc[r][cc]);
                }
        }
    }
    float *fin = MODE == 0 ? P.ht : P.ST;
    if (fin) {
        for (int e = tid; e < P.dk * LA_BV; e += blockDim.x) {
            const int r = e / LA_BV, cc = e % LA_BV;
            if (n0 + cc < P.dv)
                fin[sq + (size_t)r * P.dv + n0 + cc] = S[r * LA_SLD + cc];
        }
    }
}

/* ---- backward: state gradients ----
 * Reverse over the chunks, dS the gradient of the state at the current chunk's end (d_ht at the
 * last): store it (la_bwd_chunk reads it), then
 *     dS ← diag(e) dS + (scale·q ⊙ a)ᵀ dO,
 * the gradient of the chunk-start state; after chunk 0 it is dh0. Same carve-up as la_state
 * (Vs holds dO). */
template <typename E, bool PK> __global__ void __launch_bounds__(LA_NT, 2) la_dstate(la_dev P) {
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, n0 = blockIdx.y * LA_BV, b = bh / P.H, h = bh % P.H;
    const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
    const int dkp = (P.dk + LA_KT - 1) / LA_KT * LA_KT;
    const la_seq_smem m = la_seq_carve(la_smem, P.dk);
    float *S = m.S;
    const size_t sq = (size_t)bh * P.dk * P.dv;

    for (int e = tid; e < dkp * LA_BV; e += blockDim.x) {
        const int r = e / LA_BV, c = e % LA_BV;
        float x = 0.0f;
        if (P.d_ht && r < P.dk && n0 + c < P.dv)
            x = P.d_ht[sq + (size_t)r * P.dv + n0 + c];
        S[r * LA_SLD + c] = x;
    }
    for (int e = tid; e < 256; e += blockDim.x)
        m.drift[e] = 1.0;
    __syncthreads();
    for (int c = P.NC - 1; c >= 0; --c) {
        const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
        float *dst = P.dSe + ((size_t)bh * P.NC + c) * P.dk * P.dv;
        for (int e = tid; e < P.dk * LA_BV; e += blockDim.x) {
            const int r = e / LA_BV, cc = e % LA_BV;
            if (n0 + cc < P.dv)
                dst[(size_t)r * P.dv + n0 + cc] = S[r * LA_SLD + cc];
        }
        float gv[16];
        {
            float ov[LA_C * LA_BV / LA_NT];
            la_fetch<E, LA_BV>(ov, (const E *)P.d_o, P, b, h, t0, n, n0, P.dv);
            if (!PK)
                la_gate_fetch<false>(P, b, h, t0, n, 0, gv);
            la_put<LA_BV>(m.Vs, LA_SLD, ov);
        }
        if (!PK)
            la_seq_gates<false, false, false>(P, m, gv, n, 0);
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            {
                float qv[16];
                la_fetch<E, LA_KT>(qv, (const E *)P.q, P, b, h, t0, n, m0, P.dk);
                if (PK)
                    la_gate_fetch<true>(P, b, h, t0, n, m0, gv);
                la_put<LA_KT>(m.Qa, LA_LD, qv);
            }
            if (PK) {
                la_seq_gates<true, true, false>(P, m, gv, n, m0);
            } else {
                __syncthreads();
                for (int e = tid; e < LA_C * LA_KT; e += blockDim.x) {
                    const int i = e / LA_KT, col = e % LA_KT;
                    m.Qa[i * LA_LD + col] *= P.scale * m.af[i];
                }
                __syncthreads();
            }
            float up[4][2];
            la_zero(up);
            la_mm<4, 2, true, false>(up, m.Qa, LA_LD, m.Vs, LA_SLD, LA_C, tr, tc);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int mm = m0 + tr + 16 * r;
                const float em = mm < P.dk ? m.es[PK ? mm : 0] : 0.0f;
#pragma unroll
                for (int cc = 0; cc < 2; ++cc) {
                    float *sp = &S[mm * LA_SLD + tc + 16 * cc];
                    *sp = fmaf(em, *sp, up[r][cc]);
                }
            }
            __syncthreads();
        }
    }
    if (P.dh0) {
        for (int e = tid; e < P.dk * LA_BV; e += blockDim.x) {
            const int r = e / LA_BV, cc = e % LA_BV;
            if (n0 + cc < P.dv)
                P.dh0[sq + (size_t)r * P.dv + n0 + cc] = S[r * LA_SLD + cc];
        }
    }
}

/* ---- backward: one chunk ----
 * With S0 the chunk-start state, dSe the chunk-end state gradient, M_ij = scale·β_j·(do_i·v_j)
 * for j ≤ i (0 above), A the scores of la_chunk_scores (without β):
 *     dṽ_j = Σ_{i≥j} A_ij do_i + dSeᵀ (k_j ⊙ b_j)           dv_j = β_j dṽ_j,  dβ_j = v_j·dṽ_j
 *     dq_i = scale·a_i ⊙ (S0 do_i) + Σ_{j≤i} M_ij dec(j→i) ⊙ k_j
 *     dk_j = β_j b_j ⊙ (dSe v_j)   + Σ_{i≥j} M_ij dec(j→i) ⊙ q_i
 *     x_i  = q_i ⊙ dq_i − k_i ⊙ dk_i   (summed over keys for a scalar gate),
 * dg_t = Σ_{s ≥ t, up to the next reset} x_s (+ the final-state term), of which this kernel
 * writes the in-chunk part and, per gate column, the sum up to the chunk's first reset. The
 * per-key intra terms use the sub-block factorization of la_chunk_scores, one thread per
 * (sub-block, key): dq rows of block I and dk rows of block I. */
#define LA_BW_FLOATS (6 * LA_C * LA_LD + 2 * LA_C)
#define LA_BW_BYTES (LA_BW_FLOATS * 4 + LA_C * LA_GLD * 8 + LA_C * 8 + LA_C * LA_GLD)

/* The end of a key tile in la_bwd_chunk and la_bwd_mma (row stride ld of the C × 64 tiles): dq
 * and dk to memory, and the tile's part of dg — per key, the in-chunk suffix sums of
 * q ⊙ dq − k ⊙ dk restarting at resets (and the chunk's head and reset flag for la_dg_carry); for
 * a scalar gate the row sums, added into xs for la_bwd_chunk_out. (P by value and plain
 * pointers, as in the kernels: the sm_90 code of both kernels is then the same bytes as before
 * these lines moved here.) */
template <typename E, bool PK, int ld>
__device__ __forceinline__ void la_bwd_tile_out(la_dev P, int b, int h, int bh, int c, int t0,
                                                int n, int m0, int gdim, float *R1, float *R2,
                                                float *R3, float *R4, signed char *Rr, double *xs) {
    const int tid = threadIdx.x;
    /* dq, dk to memory */
    for (int e = tid; e < LA_C * LA_KT; e += blockDim.x) {
        const int i = e / LA_KT, col = e % LA_KT;
        if (i < n && m0 + col < P.dk) {
            const size_t idx = la_row(P, b, t0 + i, h) * P.dk + m0 + col;
            if (P.dq)
                ttt_st<E>((E *)P.dq, idx, R3[i * ld + col]);
            if (P.dkk)
                ttt_st<E>((E *)P.dkk, idx, R4[i * ld + col]);
        }
    }
    if (P.dg) {
        if (PK) {
            const int col = tid, m = m0 + col;
            if (col < LA_KT && m < P.dk) {
                double sacc = 0.0;
                int any = 0;
                for (int i = n - 1; i >= 0; --i) {
                    const size_t idx = la_row(P, b, t0 + i, h) * P.dk + m;
                    if (Rr[i * LA_GLD + col] == i) {
                        sacc = 0.0;
                        any = 1;
                        P.dg[idx] = 0.0f;
                    } else {
                        sacc += (double)(R1[i * ld + col] * R3[i * ld + col]) -
                                (double)(R2[i * ld + col] * R4[i * ld + col]);
                        P.dg[idx] = (float)sacc;
                    }
                }
                const size_t hz = ((size_t)bh * P.NC + c) * gdim + m;
                P.head[hz] = sacc;
                P.flag[hz] = any;
            }
        } else if (tid < n) {
            double x = 0.0;
            for (int col = 0; col < LA_KT; ++col)
                x += (double)(R1[tid * ld + col] * R3[tid * ld + col]) -
                     (double)(R2[tid * ld + col] * R4[tid * ld + col]);
            xs[tid] += x;
        }
    }
}

/* The end of la_bwd_chunk and la_bwd_mma: a scalar gate's in-chunk suffix sums of dg (one thread
 * over the summed rows xs), and dβ. */
template <bool PK>
__device__ __forceinline__ void la_bwd_chunk_out(la_dev P, int b, int h, int bh, int c,
                                                 int t0, int n, const signed char *Rr,
                                                 const double *xs, const float *dbet) {
    const int tid = threadIdx.x;
    if (P.dg && !PK && tid == 0) {
        double sacc = 0.0;
        int any = 0;
        for (int i = n - 1; i >= 0; --i) {
            const size_t idx = la_row(P, b, t0 + i, h);
            if (Rr[i * LA_GLD] == i) {
                sacc = 0.0;
                any = 1;
                P.dg[idx] = 0.0f;
            } else {
                sacc += xs[i];
                P.dg[idx] = (float)sacc;
            }
        }
        const size_t hz = (size_t)bh * P.NC + c;
        P.head[hz] = sacc;
        P.flag[hz] = any;
    }
    if (P.dbeta && tid < n)
        P.dbeta[la_row(P, b, t0 + tid, h)] = dbet[tid];
}

template <typename E, bool PK> __global__ void __launch_bounds__(LA_NT) la_bwd_chunk(la_dev P) {
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
    const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
    const int gdim = PK ? P.dk : 1;
    float *f = (float *)la_smem;
    float *Am = f, *Mm = f + LA_C * LA_LD;
    float *R1 = f + 2 * LA_C * LA_LD, *R2 = f + 3 * LA_C * LA_LD, *R3 = f + 4 * LA_C * LA_LD,
          *R4 = f + 5 * LA_C * LA_LD;
    float *bet = f + 6 * LA_C * LA_LD, *dbet = bet + LA_C;
    double *Gd = (double *)(dbet + LA_C);
    double *xs = Gd + LA_C * LA_GLD;
    signed char *Rr = (signed char *)(xs + LA_C);
    const size_t st = ((size_t)bh * P.NC + c) * P.dk * P.dv;
    const float *S0 = P.Sst + st, *dSe = P.dSe + st;

    for (int i = tid; i < LA_C; i += blockDim.x) {
        bet[i] = (P.beta && i < n) ? P.beta[la_row(P, b, t0 + i, h)] : (i < n ? 1.0f : 0.0f);
        dbet[i] = 0.0f;
        xs[i] = 0.0;
    }
    if (!PK)
        la_scan<false>(P, b, h, t0, n, 0, Gd, Rr);
    __syncthreads();

    /* M = scale·β_j·dO Vᵀ (⊙ Γ for a scalar gate), masked */
    {
        float acc[4][4];
        la_zero(acc);
        for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
            la_load<E, LA_VT>(R1, LA_LD, (const E *)P.d_o, P, b, h, t0, n, v0, P.dv);
            la_load<E, LA_VT>(R2, LA_LD, (const E *)P.v, P, b, h, t0, n, v0, P.dv);
            __syncthreads();
            la_mm<4, 4, false, true>(acc, R1, LA_LD, R2, LA_LD, LA_VT, tr, tc);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const int i = tr + 16 * r, j = tc + 16 * cc;
                float x = 0.0f;
                if (j <= i && i < n) {
                    x = P.scale * bet[j] * acc[r][cc];
                    if (!PK)
                        x *= la_dec(Gd, Rr, j, i, 0);
                }
                Mm[i * LA_LD + j] = x;
            }
        __syncthreads();
    }
    /* A (scale, no β) */
    {
        la_sc_smem s;
        s.A = Am;
        s.Qs = R1;
        s.Ks = R2;
        s.Kh = R3;
        s.Gd = Gd;
        s.Rr = Rr;
        la_chunk_scores<E, PK>(P, b, h, t0, n, s);
    }
    /* dṽ, dv, dβ per value tile */
    for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
        float acc[4][4];
        la_zero(acc);
        la_load<E, LA_VT>(R1, LA_LD, (const E *)P.d_o, P, b, h, t0, n, v0, P.dv);
        __syncthreads();
        la_mm<4, 4, true, false>(acc, Am, LA_LD, R1, LA_LD, LA_C, tr, tc);
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            __syncthreads();
            if (PK)
                la_scan<true>(P, b, h, t0, n, m0, Gd, Rr);
            la_load<E, LA_KT>(R2, LA_LD, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
            la_load_state(R3, dSe, P.dk, P.dv, m0, v0);
            __syncthreads();
            for (int e = tid; e < LA_C * LA_KT; e += blockDim.x) {
                const int j = e / LA_KT, col = e % LA_KT;
                if (j < n)
                    R2[j * LA_LD + col] *= la_dec(Gd, Rr, j, n - 1, PK ? col : 0);
            }
            __syncthreads();
            la_mm<4, 4, false, false>(acc, R2, LA_LD, R3, LA_LD, LA_KT, tr, tc);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int j = tr + 16 * r;
            float part = 0.0f;
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const int col = v0 + tc + 16 * cc;
                if (j < n && col < P.dv) {
                    const size_t idx = la_row(P, b, t0 + j, h) * P.dv + col;
                    part = fmaf(ttt_ld<E>((const E *)P.v, idx), acc[r][cc], part);
                    if (P.dvv)
                        ttt_st<E>((E *)P.dvv, idx, bet[j] * acc[r][cc]);
                }
            }
            if (j < n)
                atomicAdd(&dbet[j], part);
        }
        __syncthreads();
    }
    /* dq, dk and x per key tile */
    for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
        if (PK)
            la_scan<true>(P, b, h, t0, n, m0, Gd, Rr);
        la_load<E, LA_KT>(R1, LA_LD, (const E *)P.q, P, b, h, t0, n, m0, P.dk);
        la_load<E, LA_KT>(R2, LA_LD, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
        float aq[4][4], ak[4][4];
        la_zero(aq);
        la_zero(ak);
        for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
            la_load<E, LA_VT>(R3, LA_LD, (const E *)P.d_o, P, b, h, t0, n, v0, P.dv);
            la_load_state(R4, S0, P.dk, P.dv, m0, v0);
            __syncthreads();
            la_mm<4, 4, false, true>(aq, R3, LA_LD, R4, LA_LD, LA_VT, tr, tc);
            __syncthreads();
            la_load<E, LA_VT>(R3, LA_LD, (const E *)P.v, P, b, h, t0, n, v0, P.dv);
            la_load_state(R4, dSe, P.dk, P.dv, m0, v0);
            __syncthreads();
            la_mm<4, 4, false, true>(ak, R3, LA_LD, R4, LA_LD, LA_VT, tr, tc);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const int i = tr + 16 * r, col = tc + 16 * cc, gc = PK ? col : 0;
                if (i < n) {
                    aq[r][cc] *= P.scale * la_dec(Gd, Rr, -1, i, gc);
                    ak[r][cc] *= bet[i] * la_dec(Gd, Rr, i, n - 1, gc);
                } else {
                    aq[r][cc] = 0.0f;
                    ak[r][cc] = 0.0f;
                }
            }
        if (!PK) {
            la_mm<4, 4, false, false>(aq, Mm, LA_LD, R2, LA_LD, LA_C, tr, tc);
            la_mm<4, 4, true, false>(ak, Mm, LA_LD, R1, LA_LD, LA_C, tr, tc);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const int i = tr + 16 * r, col = tc + 16 * cc;
                R3[i * LA_LD + col] = aq[r][cc];
                R4[i * LA_LD + col] = ak[r][cc];
            }
        __syncthreads();
        if (PK) {
            /* thread (I, col): dq rows of block I and dk rows of block I, key m0 + col */
            const int I = tid >> 6, col = tid & 63, base = 16 * I;
            float a[16];
#pragma unroll
            for (int r = 0; r < 16; ++r)
                a[r] = 0.0f;
            if (I > 0) {
                const int p = base - 1;
                for (int j = 0; j < base; ++j) {
                    const float kw = R2[j * LA_LD + col] * la_dec(Gd, Rr, j, p, col);
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        a[r] = fmaf(Mm[(base + r) * LA_LD + j], kw, a[r]);
                }
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    a[r] *= la_dec(Gd, Rr, p, base + r, col);
            }
#pragma unroll
            for (int jj = 0; jj < 16; ++jj) {
                const int j = base + jj;
                const float kj = R2[j * LA_LD + col];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    if (r >= jj)
                        a[r] = fmaf(Mm[(base + r) * LA_LD + j] * kj,
                                    la_dec(Gd, Rr, j, base + r, col), a[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r)
                R3[(base + r) * LA_LD + col] += a[r];
#pragma unroll
            for (int r = 0; r < 16; ++r)
                a[r] = 0.0f;
            for (int I2 = I + 1; I2 < 4; ++I2) {
                const int p = 16 * I2 - 1;
                float t[16];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    t[r] = 0.0f;
                for (int ii = 0; ii < 16; ++ii) {
                    const int i = 16 * I2 + ii;
                    const float qu = R1[i * LA_LD + col] * la_dec(Gd, Rr, p, i, col);
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        t[r] = fmaf(Mm[i * LA_LD + base + r], qu, t[r]);
                }
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    a[r] = fmaf(t[r], la_dec(Gd, Rr, base + r, p, col), a[r]);
            }
#pragma unroll
            for (int ii = 0; ii < 16; ++ii) {
                const int i = base + ii;
                const float qi = R1[i * LA_LD + col];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    if (r <= ii)
                        a[r] = fmaf(Mm[i * LA_LD + base + r] * qi, la_dec(Gd, Rr, base + r, i, col),
                                    a[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r)
                R4[(base + r) * LA_LD + col] += a[r];
            __syncthreads();
        }
        la_bwd_tile_out<E, PK, LA_LD>(P, b, h, bh, c, t0, n, m0, gdim, R1, R2, R3, R4, Rr, xs);
        __syncthreads();
    }
    la_bwd_chunk_out<PK>(P, b, h, bh, c, t0, n, Rr, xs, dbet);
}

/* ---- backward: dg across chunks ----
 * carry_c, the part of dg_t (t in chunk c, no reset after t in the chunk) from the later chunks:
 *     carry_{NC−1} = Σ_n ht ⊙ d_ht (per key row; summed over keys for a scalar gate),
 *     carry_{c−1}  = head_c + (chunk c has a reset ? 0 : carry_c).          (float64) */
__global__ void __launch_bounds__(LA_NT) la_dg_carry(la_dev P, int gdim) {
    const int bh = blockIdx.x;
    for (int z = threadIdx.x; z < gdim; z += blockDim.x) {
        double carry = 0.0;
        if (P.d_ht) {
            const size_t sq = (size_t)bh * P.dk * P.dv;
            const int m_lo = gdim == 1 ? 0 : z, m_hi = gdim == 1 ? P.dk : z + 1;
            for (int m = m_lo; m < m_hi; ++m)
                for (int nn = 0; nn < P.dv; ++nn)
                    carry += (double)P.ST[sq + (size_t)m * P.dv + nn] *
                             (double)P.d_ht[sq + (size_t)m * P.dv + nn];
        }
        for (int c = P.NC - 1; c >= 0; --c) {
            const size_t hz = ((size_t)bh * P.NC + c) * gdim + z;
            P.carry[hz] = carry;
            carry = P.flag[hz] ? P.head[hz] : P.head[hz] + carry;
        }
    }
}

/* dg_t += carry_c for the tokens of chunk c after its last reset (loads issued together). */
__global__ void __launch_bounds__(LA_NT) la_dg_add(la_dev P, int gdim) {
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
    for (int z = threadIdx.x; z < gdim; z += blockDim.x) {
        const double carry = P.carry[((size_t)bh * P.NC + c) * gdim + z];
        int last = -1;
#pragma unroll 16
        for (int i = 0; i < LA_C; ++i)
            if (i < n && la_reset(P.g[la_row(P, b, t0 + i, h) * (size_t)gdim + z]))
                last = i;
#pragma unroll 16
        for (int i = 0; i < LA_C; ++i)
            if (i > last && i < n) {
                const size_t idx = la_row(P, b, t0 + i, h) * (size_t)gdim + z;
                P.dg[idx] = (float)((double)P.dg[idx] + carry);
            }
    }
}

/* ---- tensor-core kernels (bf16 inputs; docs/gpu.md "Tensor-core kernels") ----
 * The same chunk form on mma.sync m16n8k16 bf16 products with fp32 accumulation, for bf16 inputs
 * with d_k ≤ 128, d_k and d_v multiples of 8, v and d_o on 16-byte boundaries and o on 4-byte
 * ones, unless ttt_chunk_args.reference asks for the fp32 kernels above. Every computed operand
 * (the gated q and k, the scores, the state) enters a product as its two-term bf16 split
 * x ≈ hi + lo (ttt_split2: 16 significant bits); bf16 inputs (v, d_o) enter whole. The gate
 * arithmetic is that of the fp32 kernels (la_gate_fetch, la_scan_rows, la_dec, la_dither).
 *
 *   la_prep_mma  (B·H, chunks)       per chunk: the gate scan; Qa = scale·q ⊙ a and
 *                                    Kb = β k ⊙ b as bf16 splits; G'_{n−1}, R_{n−1} per gate
 *                                    column; with SC the scores A ⊙ β_j (split) on the tensor cores
 *   la_seq_mma   (B·H, d_v/BV[, 2])  sequential over the chunks, the state in fp32 registers:
 *                                    MODE 0 O = Qa S + (A ⊙ β) V, S ← e ⊙ S + Kbᵀ V (o, ht)
 *                                    MODE 1 (the backward; two recurrences in one launch)
 *                                      z = 0: the chunk-start states, S ← e ⊙ S + Kbᵀ V
 *                                      z = 1: in reverse, the chunk-end state gradients,
 *                                             dS ← e ⊙ dS + Qaᵀ dO (dh0) */
#define LA_MP 72  /* row stride (floats) of la_prep_mma's tiles: float2 fragment reads conflict-free */
#define LA_MSC 72 /* row stride (bf16) of the C × C score splits in la_seq_mma */

#define LA_BLD 72 /* row stride (floats) of la_bwd_mma's tiles */
/* Loads issued together (one memory latency for two tiles): la_load_state in two halves, and
 * two 64-column input tiles at once. */
__device__ __forceinline__ void la_fetch_state(float (&v)[16], const float *M, int dk, int dv,
                                               int m0, int n0) {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int e = threadIdx.x + k * LA_NT, r = e >> 6, c = e & 63;
        v[k] = (m0 + r < dk && n0 + c < dv) ? M[(size_t)(m0 + r) * dv + n0 + c] : 0.0f;
    }
}
__device__ __forceinline__ void la_put_state(float *dst, int ld, const float (&v)[16]) {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int e = threadIdx.x + k * LA_NT;
        dst[(e >> 6) * ld + (e & 63)] = v[k];
    }
}
template <typename E1, typename E2>
__device__ __forceinline__ void la_load2(float *d1, const E1 *X1, float *d2, const E2 *X2,
                                         const la_dev &P, int b, int h, int t0, int n, int c0,
                                         int D, int ld = LA_BLD) {
    float x1[16], x2[16];
    la_fetch<E1, 64>(x1, X1, P, b, h, t0, n, c0, D);
    la_fetch<E2, 64>(x2, X2, P, b, h, t0, n, c0, D);
    la_put<64>(d1, ld, x1);
    la_put<64>(d2, ld, x2);
}

/* Shared memory of la_prep_mma: A, Qs, Ks (C × LA_MP floats), β, a, b (C), G' (C × LA_GLD
 * doubles), G'_{n−1} (64 doubles), R_{n−1} (64 ints), R (C × LA_GLD chars). */
#define LA_PREP_BYTES                                                                      \
    ((3 * LA_C * LA_MP + 3 * LA_C) * 4 + LA_C * LA_GLD * 8 + 64 * 8 + 64 * 4 + LA_C * LA_GLD)

template <bool PK, bool SC>
__global__ void __launch_bounds__(LA_NT, 2) la_prep_mma(la_dev P) {
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, c2 = 2 * (lane & 3);
    const int col = tid & 63, seg = tid >> 6;
    const int gdim = PK ? P.dk : 1;
    const size_t ch = (size_t)bh * P.NC + c;
    float *A = (float *)la_smem, *Qs = A + LA_C * LA_MP, *Ks = Qs + LA_C * LA_MP;
    float *bet = Ks + LA_C * LA_MP, *af = bet + LA_C, *bfv = af + LA_C;
    double *Gd = (double *)(bfv + LA_C), *Gn = Gd + LA_C * LA_GLD; /* 8-byte aligned: 14016 floats */
    int *Rn = (int *)(Gn + 64);
    signed char *Rr = (signed char *)(Rn + 64);
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)P.q, *k = (const __nv_bfloat16 *)P.k;

    for (int i = tid; i < LA_C; i += LA_NT)
        bet[i] = (P.beta && i < n) ? P.beta[la_row(P, b, t0 + i, h)] : 1.0f;
    if (SC && PK)
        for (int e = tid; e < LA_C * LA_MP; e += LA_NT)
            A[e] = 0.0f;
    float gv[16];
    double G[16];
    int R[16];
    if (!PK) { /* the scalar gate, once: a_i, b_i per row */
        la_gate_fetch<false>(P, b, h, t0, n, 0, gv);
        la_scan_rows(gv, G, R);
        if (col == 0)
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                Gd[(16 * seg + r) * LA_GLD] = G[r];
                Rr[(16 * seg + r) * LA_GLD] = (signed char)R[r];
            }
        la_publish_last(n, G, R, Gn, Rn);
        __syncthreads();
        if (col == 0) {
            const double gn = Gn[0];
            const int rn = Rn[0];
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int i = 16 * seg + r;
                af[i] = (i < n && R[r] < 0) ? expf((float)G[r]) : 0.0f;
                bfv[i] = (i < n && rn <= i) ? expf((float)(gn - G[r])) : 0.0f;
            }
        }
        if (tid == 0) {
            P.gnw[ch] = Gn[0];
            P.rnw[ch] = Rn[0];
        }
    }
    /* scores: scalar gate; per key, the off-diagonal 16 × 16 blocks and the 8 × 8 ones below
     * the diagonal inside the diagonal blocks */
    float acc[1][4][4] = {}, accp[1][2][4] = {}; /* accp: warps 0..5 one 16 × 16 block, 6 and 7
                                                  * two 16 × 8 blocks */
    /* per-key off-diagonal 16 × 16 blocks (I, J), J < I: warp w < 6 takes one */
    const int oI = w < 1 ? 1 : (w < 3 ? 2 : 3), oJ = w - oI * (oI - 1) / 2, op = 16 * oI - 1;
    const int smt = w & 3, snh = w >> 2; /* scalar gate: rows 16 smt.., columns 32 snh.. */
    const bool sdo = 32 * snh <= 16 * smt + 15;
    for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
        if (PK)
            la_gate_fetch<true>(P, b, h, t0, n, m0, gv);
        la_load2(Qs, q, Ks, k, P, b, h, t0, n, m0, P.dk, LA_MP);
        if (PK) {
            la_scan_rows(gv, G, R);
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                Gd[(16 * seg + r) * LA_GLD + col] = G[r];
                Rr[(16 * seg + r) * LA_GLD + col] = (signed char)R[r];
            }
            la_publish_last(n, G, R, Gn, Rn);
        }
        __syncthreads();
        if constexpr (SC) {
            if constexpr (PK) {
                /* diagonal 8 × 8 blocks: the 8 × 36 pairs j ≤ i inside one, element by element */
                for (int pidx = tid; pidx < 8 * 36; pidx += LA_NT) {
                    const int I8 = pidx / 36, qq = pidx - 36 * I8;
                    int r = (int)((sqrtf(8.0f * qq + 1.0f) - 1.0f) * 0.5f);
                    while ((r + 1) * (r + 2) / 2 <= qq)
                        ++r;
                    while (r * (r + 1) / 2 > qq)
                        --r;
                    const int cc = qq - r * (r + 1) / 2;
                    const int i = 8 * I8 + r, j = 8 * I8 + cc;
                    float sum = 0.0f;
                    for (int m = 0; m < LA_KT; ++m)
                        sum = fmaf(Qs[i * LA_MP + m] * Ks[j * LA_MP + m], la_dec(Gd, Rr, j, i, m),
                                   sum);
                    A[i * LA_MP + j] += sum;
                }
                /* block (I, J) below the diagonal: (q ⊙ dec(p→·)) (k ⊙ dec(·→p))ᵀ, p = 16I − 1,
                 * both factors ≤ 1, both operands computed (split) */
                if (w < 6)
                    ttt_warp_gemm<1, 2, false, false>(
                        accp,
                        [&](int r, int m) {
                            return make_float2(Qs[r * LA_MP + m] * la_dec(Gd, Rr, op, r, m),
                                               Qs[r * LA_MP + m + 1] * la_dec(Gd, Rr, op, r, m + 1));
                        },
                        [&](int m, int j) {
                            return make_float2(Ks[j * LA_MP + m] * la_dec(Gd, Rr, j, op, m),
                                               Ks[j * LA_MP + m + 1] * la_dec(Gd, Rr, j, op, m + 1));
                        },
                        16 * oI, 16 * oJ, 0, LA_KT);
                /* inside diagonal block I, rows 16I + 8.. against columns 16I..16I + 7: the
                 * same through p' = 16I + 7 (rows up to p' give 0 and are not kept); warps 6
                 * and 7 take two blocks each */
                if (w >= 6)
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int I = 2 * (w - 6) + u, pp = 16 * I + 7;
                        ttt_warp_gemm<1, 1, false, false>(
                            reinterpret_cast<float(*)[1][4]>(accp[0][u]),
                            [&](int r, int m) {
                                return r > pp ? make_float2(
                                                    Qs[r * LA_MP + m] * la_dec(Gd, Rr, pp, r, m),
                                                    Qs[r * LA_MP + m + 1] *
                                                        la_dec(Gd, Rr, pp, r, m + 1))
                                              : make_float2(0.0f, 0.0f);
                            },
                            [&](int m, int j) {
                                return make_float2(Ks[j * LA_MP + m] * la_dec(Gd, Rr, j, pp, m),
                                                   Ks[j * LA_MP + m + 1] *
                                                       la_dec(Gd, Rr, j, pp, m + 1));
                            },
                            16 * I, 16 * I, 0, LA_KT);
                    }
            } else if (sdo) { /* Q Kᵀ: bf16 inputs, exact */
                ttt_warp_gemm<1, 4, true, true>(
                    acc, [&](int r, int m) { return *(const float2 *)(Qs + r * LA_MP + m); },
                    [&](int m, int j) { return *(const float2 *)(Ks + j * LA_MP + m); }, 16 * smt,
                    32 * snh, 0, LA_KT);
            }
            __syncthreads(); /* every read of the raw tiles is done */
        }
        /* Qa = scale·q ⊙ a, Kb = β k ⊙ b in place (the thread that scanned the column) */
        if (!PK || m0 + col < P.dk) {
            const double gn = PK ? Gn[col] : 0.0;
            const int rn = PK ? Rn[col] : 0;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int i = 16 * seg + r;
                float a, bb;
                if (PK) { /* G'_i, R_i from shared memory: the scan's registers are dead here */
                    const double Gi = Gd[i * LA_GLD + col];
                    a = (i < n && Rr[i * LA_GLD + col] < 0) ? expf((float)Gi) : 0.0f;
                    bb = (i < n && rn <= i) ? expf((float)(gn - Gi)) : 0.0f;
                } else {
                    a = af[i];
                    bb = bfv[i];
                }
                Qs[i * LA_MP + col] *= P.scale * a;
                Ks[i * LA_MP + col] *= bet[i] * bb;
            }
            if (PK && seg == 0) {
                P.gnw[ch * gdim + m0 + col] = gn;
                P.rnw[ch * gdim + m0 + col] = rn;
            }
        }
        __syncthreads();
        /* their splits to the workspace, two columns per thread and store */
        for (int u = tid; u < LA_C * (LA_KT / 2); u += LA_NT) {
            const int i = u / (LA_KT / 2), cc = 2 * (u % (LA_KT / 2)), m = m0 + cc;
            if (m < P.dk) {
                const size_t o = (ch * 2 * LA_C + i) * P.dk + m, lo = (size_t)LA_C * P.dk;
                const float2 x = *(const float2 *)(Qs + i * LA_MP + cc);
                const float2 y = *(const float2 *)(Ks + i * LA_MP + cc);
                __nv_bfloat162 hi2, lo2;
                ttt_split2(x.x, x.y, &hi2, &lo2);
                *(__nv_bfloat162 *)(P.Qhl + o) = hi2;
                *(__nv_bfloat162 *)(P.Qhl + o + lo) = lo2;
                ttt_split2(y.x, y.y, &hi2, &lo2);
                *(__nv_bfloat162 *)(P.Khl + o) = hi2;
                *(__nv_bfloat162 *)(P.Khl + o + lo) = lo2;
            }
        }
        __syncthreads(); /* before the next key tile overwrites the tiles and gates */
    }
    if constexpr (SC) {
        /* the products' accumulators into A (scalar gate: ⊙ dec(j→i)) */
        if constexpr (PK) {
            if (w < 6)
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        A[(16 * oI + g + 8 * (e >> 1)) * LA_MP + 16 * oJ + 8 * j + c2 + (e & 1)] =
                            accp[0][j][e];
            else
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int I = 2 * (w - 6) + u; /* rows 16I + 8 + g (c2, c3 of the tile) */
                    A[(16 * I + 8 + g) * LA_MP + 16 * I + c2] = accp[0][u][2];
                    A[(16 * I + 8 + g) * LA_MP + 16 * I + c2 + 1] = accp[0][u][3];
                }
        } else if (sdo) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = 16 * smt + g + 8 * (e >> 1), jj = 32 * snh + 8 * j + c2 + (e & 1);
                    A[i * LA_MP + jj] = jj <= i ? acc[0][j][e] * la_dec(Gd, Rr, jj, i, 0) : 0.0f;
                }
        }
        __syncthreads();
        /* A ⊙ β_j, scaled and masked, as its split */
        for (int u = tid; u < LA_C * LA_C / 2; u += LA_NT) {
            const int i = u / (LA_C / 2), j = 2 * (u % (LA_C / 2));
            const float b0 = P.fold_beta ? bet[j] : 1.0f, b1 = P.fold_beta ? bet[j + 1] : 1.0f;
            const float x0 = (j <= i && i < n) ? P.scale * A[i * LA_MP + j] * b0 : 0.0f;
            const float x1 = (j + 1 <= i && i < n) ? P.scale * A[i * LA_MP + j + 1] * b1 : 0.0f;
            __nv_bfloat162 hi2, lo2;
            ttt_split2(x0, x1, &hi2, &lo2);
            const size_t o = ch * 2 * LA_C * LA_C + (size_t)i * LA_C + j;
            *(__nv_bfloat162 *)(P.Ahl + o) = hi2;
            *(__nv_bfloat162 *)(P.Ahl + o + LA_C * LA_C) = lo2;
        }
    }
}

/* Shared memory of la_seq_mma: X splits (two buffers of hi, lo: C × (LDK + 8) bf16), Y (two
 * buffers, C × (BV + 8)); MODE 0 also the score split (one buffer of hi, lo, C × LA_MSC), the Qa
 * split (one buffer) and the state's split (LDK × (BV + 8), hi and lo); the decays e (two
 * buffers of LDK floats). Every part is a multiple of 16 bytes. MODE 0 at d_k = 128: 175 KiB
 * with 64 columns, 223 KiB with 128. */
__host__ __device__ constexpr size_t la_mma_smem(int ldk, int bv, int mode) {
    return 2 * (4 * (size_t)LA_C * (ldk + 8) + 2 * (size_t)LA_C * (bv + 8) +
                (mode == 0 ? 2 * (size_t)LA_C * LA_MSC + 2 * (size_t)LA_C * (ldk + 8) +
                                 2 * (size_t)ldk * (bv + 8)
                           : 0)) +
           2 * (size_t)ldk * 4;
}
static_assert(la_mma_smem(128, 128, 0) <= 227 * 1024, "la_seq_mma: shared memory over the limit");

/* One block of BV/8 warps per (sequence, BV columns of the state[, recurrence]). The state (or
 * its gradient) stays in fp32 registers for the whole sequence: warp w owns rows 16·mu.., NTU
 * n-tiles from column 8·nu0 (LDK = 128: mu = w mod 8; LDK = 64: mu = w mod 4). What the update
 * reads is copied with cp.async one chunk ahead (MODE 0's Qa and A splits, single-buffered,
 * while the state update runs). Per chunk, with X = Kb (forward, states) or Qa (gradients) and
 * Y = V or dO (exact: inputs):
 *     MODE 0: O = Qa·S (split × split: 3 mma) + (A⊙β)·V (split × exact: 2 mma, k-tiles up to the
 *             diagonal), warps owning 16 × 32 pieces of O;
 *     all:    S ← e ⊙ S + Xᵀ Y (Xᵀ read transposed by ldmatrix; split × exact: 2 mma),
 * e the per-key (or scalar) chunk decay rounded with the drift carried (la_dither), in the
 * order the chunks are visited. */
template <int LDK, int BV, int MODE>
__global__ void __launch_bounds__(4 * BV, 1) la_seq_mma(la_dev P) {
    constexpr int SK = LDK + 8, SV = BV + 8, NT = 4 * BV;
    constexpr int NTU = LDK >= 128 ? 8 : 4;
    extern __shared__ float4 la_sm4[];
    __nv_bfloat16 *X0 = (__nv_bfloat16 *)la_sm4;   /* [2 buffers][hi, lo][C][SK] */
    __nv_bfloat16 *Y0 = X0 + 4 * LA_C * SK;         /* [2][C][SV] */
    __nv_bfloat16 *A0 = Y0 + 2 * LA_C * SV;         /* MODE 0: [hi, lo][C][LA_MSC] */
    __nv_bfloat16 *Qb = A0 + (MODE == 0 ? 2 * LA_C * LA_MSC : 0); /* MODE 0: [hi, lo][C][SK] */
    __nv_bfloat16 *S1 = Qb + (MODE == 0 ? 2 * LA_C * SK : 0), *S2 = S1 + LDK * SV;
    float *es = (float *)(S1 + (MODE == 0 ? 2 * LDK * SV : 0)); /* [2][LDK] */

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c2 = 2 * (lane & 3);
    const int bh = blockIdx.x, j0 = blockIdx.y * BV, b = bh / P.H, h = bh % P.H;
    const int gdim = P.per_key ? P.dk : 1;
    /* the backward's launch holds both recurrences: blockIdx.z = 0 the states, 1 the gradients */
    const int md = MODE == 0 ? 0 : 1 + (int)blockIdx.z;
    const __nv_bfloat16 *Xw = md == 2 ? P.Qhl : P.Khl;
    const __nv_bfloat16 *Yg = (const __nv_bfloat16 *)(md == 2 ? P.d_o : P.v);
    const int mt = w & 3, nt0 = 4 * (w >> 2);
    const int mu = LDK >= 128 ? (w & 7) : (w & 3);
    const int nu0 = LDK >= 128 ? 8 * (w >> 3) : 4 * (w >> 2);
    /* ldmatrix lane offsets: A untransposed (row, col) and B transposed (row, col) */
    const int a_r = lane & 15, a_c = (lane >> 4) * 8;
    const int b_r = (lane & 7) + ((lane >> 3) & 1) * 8, b_c = (lane >> 4) * 8;
    const size_t cdk = (size_t)LA_C * P.dk, sq = (size_t)bh * P.dk * P.dv;

    /* the two C × d_k split parts at src (zero past d_k) into dst [2][C][SK] */
    auto load_split = [&](__nv_bfloat16 *dst, const __nv_bfloat16 *src) {
        for (int u = tid; u < 2 * LA_C * (LDK / 8); u += NT) {
            const int r = u / (LDK / 8), c8 = 8 * (u % (LDK / 8)); /* r = part·C + row */
            const bool in = c8 < P.dk;
            ttt_cp_async16(dst + r * SK + c8, src + (size_t)r * P.dk + (in ? c8 : 0), in);
        }
    };
    auto load_y = [&](int c, int buf) {
        const int t0 = c * LA_C;
        for (int u = tid; u < LA_C * (BV / 8); u += NT) {
            const int t = u / (BV / 8), c8 = 8 * (u % (BV / 8)), gt = t0 + t;
            const bool in = gt < P.T && j0 + c8 < P.dv;
            const size_t o = in ? la_row(P, b, gt, h) * P.dv + j0 + c8 : 0;
            ttt_cp_async16(Y0 + (buf * LA_C + t) * SV + c8, Yg + o, in);
        }
    };
    auto load_a = [&](int c) {
        const __nv_bfloat16 *src = P.Ahl + ((size_t)bh * P.NC + c) * 2 * LA_C * LA_C;
        for (int u = tid; u < 2 * LA_C * 8; u += NT) {
            const int r = u >> 3, c8 = 8 * (u & 7);
            ttt_cp_async16(A0 + r * LA_MSC + c8, src + r * LA_C + c8, true);
        }
    };
    auto chunk_of = [&](const __nv_bfloat16 *base, int c) {
        return base + ((size_t)bh * P.NC + c) * 2 * cdk;
    };
    /* a 16 × 8 accumulator tile (rows row0, row0 + 8; columns col0, col0 + 1) as hi + lo */
    auto store_split = [&](int row0, int col0, const float *f) {
        ttt_split2(f[0], f[1], (__nv_bfloat162 *)(S1 + row0 * SV + col0),
                   (__nv_bfloat162 *)(S2 + row0 * SV + col0));
        ttt_split2(f[2], f[3], (__nv_bfloat162 *)(S1 + (row0 + 8) * SV + col0),
                   (__nv_bfloat162 *)(S2 + (row0 + 8) * SV + col0));
    };

    /* the initial state (h0) or its gradient (d_ht) */
    float S[NTU][4];
    {
        const float *S0 = md == 2 ? P.d_ht : P.h0;
#pragma unroll
        for (int nn = 0; nn < NTU; nn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 16 * mu + g + 8 * (e >> 1), j = j0 + 8 * (nu0 + nn) + c2 + (e & 1);
                S[nn][e] = (S0 && i < P.dk && j < P.dv) ? S0[sq + (size_t)i * P.dv + j] : 0.f;
            }
        if (MODE == 0)
#pragma unroll
            for (int nn = 0; nn < NTU; nn++)
                store_split(16 * mu + g, 8 * (nu0 + nn) + c2, S[nn]);
    }
    /* the chunk decays: thread z < gdim keeps column z's drift and fetches G'_{n−1}, R_{n−1} of
     * the next chunk to visit one chunk ahead */
    double drift = 1.0, gn = 0.0;
    int rn = -1;
    auto fetch_g = [&](int c) {
        if (tid < gdim) {
            const size_t z = ((size_t)bh * P.NC + c) * gdim + tid;
            gn = P.gnw[z];
            rn = P.rnw[z];
        }
    };
    const int first = md == 2 ? P.NC - 1 : 0, step = md == 2 ? -1 : 1;
    load_split(X0, chunk_of(Xw, first));
    load_y(first, 0);
    if (MODE == 0) {
        load_a(first);
        load_split(Qb, chunk_of(P.Qhl, first));
    }
    ttt_cp_async_commit();
    fetch_g(first);

    for (int it = 0; it < P.NC; ++it) {
        const int c = first + step * it, buf = it & 1, t0 = c * LA_C, n = min(LA_C, P.T - t0);
        const size_t ch = (size_t)bh * P.NC + c;
        if (tid < gdim)
            es[buf * LDK + tid] = la_dither(&drift, gn, rn);
        if (it + 1 < P.NC)
            fetch_g(c + step);
        ttt_cp_async_wait<0>(); /* this chunk's tiles */
        __syncthreads();        /* … from every thread; the state's split; e */
        if (it + 1 < P.NC) {
            const int cn = c + step;
            load_split(X0 + (buf ^ 1) * 2 * LA_C * SK, chunk_of(Xw, cn));
            load_y(cn, buf ^ 1);
            ttt_cp_async_commit();
        }
        const __nv_bfloat16 *Xh = X0 + buf * 2 * LA_C * SK, *Xl = Xh + LA_C * SK;
        const __nv_bfloat16 *Yb = Y0 + buf * LA_C * SV;
        if (MODE != 0) { /* the chunk-start state (md 1) or chunk-end gradient (md 2) */
            float *dst = (md == 1 ? P.Sst : P.dSe) + ch * P.dk * P.dv;
#pragma unroll
            for (int nn = 0; nn < NTU; nn++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + nn) + c2;
                    if (i < P.dk && j < P.dv)
                        *(float2 *)&dst[(size_t)i * P.dv + j] = make_float2(S[nn][e], S[nn][e + 1]);
                }
        }
        if (MODE == 0) {
            float O[4][4] = {};
            /* Qa·S: both split */
            const __nv_bfloat16 *Qh = Qb, *Ql = Qb + LA_C * SK;
#pragma unroll 2
            for (int kk = 0; kk < LDK; kk += 16) {
                uint32_t x1[4], x2[4];
                ttt_ldsm4(x1, Qh + (16 * mt + a_r) * SK + kk + a_c);
                ttt_ldsm4(x2, Ql + (16 * mt + a_r) * SK + kk + a_c);
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t s1[4], s2[4];
                    const int off = (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c;
                    ttt_ldsm4_t(s1, S1 + off);
                    ttt_ldsm4_t(s2, S2 + off);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        ttt_mma_bf16(O[2 * np + hh], x1, s1[2 * hh], s1[2 * hh + 1]);
                        ttt_mma_bf16(O[2 * np + hh], x1, s2[2 * hh], s2[2 * hh + 1]);
                        ttt_mma_bf16(O[2 * np + hh], x2, s1[2 * hh], s1[2 * hh + 1]);
                    }
                }
            }
            /* (A ⊙ β)·V: A split, lower triangular (k-tiles up to the diagonal), V exact */
            const __nv_bfloat16 *Ah = A0, *Al = A0 + LA_C * LA_MSC;
            for (int kk = 0; kk <= 16 * mt; kk += 16) {
                uint32_t x1[4], x2[4];
                ttt_ldsm4(x1, Ah + (16 * mt + a_r) * LA_MSC + kk + a_c);
                ttt_ldsm4(x2, Al + (16 * mt + a_r) * LA_MSC + kk + a_c);
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t y[4];
                    ttt_ldsm4_t(y, Yb + (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        ttt_mma_bf16(O[2 * np + hh], x1, y[2 * hh], y[2 * hh + 1]);
                        ttt_mma_bf16(O[2 * np + hh], x2, y[2 * hh], y[2 * hh + 1]);
                    }
                }
            }
            __nv_bfloat16 *o = (__nv_bfloat16 *)P.o;
#pragma unroll
            for (int nn = 0; nn < 4; nn++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int t = 16 * mt + g + 4 * e, j = j0 + 8 * (nt0 + nn) + c2;
                    if (t < n && j < P.dv)
                        *(__nv_bfloat162 *)(o + la_row(P, b, t0 + t, h) * P.dv + j) =
                            __floats2bfloat162_rn(O[nn][e], O[nn][e + 1]);
                }
            __syncthreads(); /* every warp is done with Qa, A and the state's split */
            if (it + 1 < P.NC) { /* the next chunk's Qa and A, while the update runs */
                load_split(Qb, chunk_of(P.Qhl, c + step));
                load_a(c + step);
                ttt_cp_async_commit();
            }
        }
        /* S ← e ⊙ S + Xᵀ Y */
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const int i = 16 * mu + g + 8 * e2;
            const float em = i < P.dk ? es[buf * LDK + (P.per_key ? i : 0)] : 0.0f;
#pragma unroll
            for (int nn = 0; nn < NTU; nn++) {
                S[nn][2 * e2] *= em;
                S[nn][2 * e2 + 1] *= em;
            }
        }
#pragma unroll
        for (int kk = 0; kk < LA_C; kk += 16) {
            uint32_t x1[4], x2[4];
            const int aoff = (kk + (lane >> 4) * 8 + (lane & 7)) * SK + 16 * mu + ((lane >> 3) & 1) * 8;
            ttt_ldsm4_t(x1, Xh + aoff);
            ttt_ldsm4_t(x2, Xl + aoff);
#pragma unroll
            for (int np = 0; np < NTU / 2; np++) {
                uint32_t y[4];
                ttt_ldsm4_t(y, Yb + (kk + b_r) * SV + 8 * (nu0 + 2 * np) + b_c);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(S[2 * np + hh], x1, y[2 * hh], y[2 * hh + 1]);
                    ttt_mma_bf16(S[2 * np + hh], x2, y[2 * hh], y[2 * hh + 1]);
                }
            }
        }
        if (MODE == 0) /* the next chunk's Qa·S reads it after the loop's barrier */
#pragma unroll
            for (int nn = 0; nn < NTU; nn++)
                store_split(16 * mu + g, 8 * (nu0 + nn) + c2, S[nn]);
    }
    float *fin = md == 0 ? P.ht : (md == 1 ? P.ST : P.dh0);
    if (fin)
#pragma unroll
        for (int nn = 0; nn < NTU; nn++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + nn) + c2;
                if (i < P.dk && j < P.dv)
                    *(float2 *)&fin[sq + (size_t)i * P.dv + j] = make_float2(S[nn][e], S[nn][e + 1]);
            }
}

/* la_bwd_chunk on the tensor cores (bf16, the tensor-core path's conditions; docs/gpu.md
 * "Tensor-core kernels"): the same equations, tiles and per-key intra-chunk loops, with every
 * C × 64 product a warp product of ttt_warp_gemm on operands gathered from shared memory (row
 * stride LA_BLD): dO Vᵀ (exact × exact), Aᵀ dO (A from la_prep_mma's split × exact),
 * (k ⊙ b) dSe (split × split), dO S0ᵀ and V dSeᵀ (exact × split), and with a scalar gate
 * (M ⊙ Γ) K and (M ⊙ Γ)ᵀ Q (split × exact). Warp w owns rows 16(w mod 4).., columns
 * 32⌊w/4⌋.. of each result. */
#define LA_BWM_BYTES ((6 * LA_C * LA_BLD + 2 * LA_C) * 4 + LA_C * LA_GLD * 8 + LA_C * 8 + LA_C * LA_GLD)

template <bool PK> __global__ void __launch_bounds__(LA_NT) la_bwd_mma(la_dev P) {
    typedef __nv_bfloat16 E;
    constexpr int LD = LA_BLD;
    extern __shared__ __align__(16) unsigned char la_smem[];
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int t0 = c * LA_C, n = min(LA_C, P.T - t0);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, c2 = 2 * (lane & 3);
    const int mt = w & 3, nh = w >> 2; /* the warp's 16 × 32 piece of a C × 64 result */
    const bool lowtile = 32 * nh <= 16 * mt + 15; /* of a C × C one: touches j ≤ i */
    auto row_of = [&](int e) { return 16 * mt + g + 8 * (e >> 1); };
    auto col_of = [&](int jn, int e) { return 32 * nh + 8 * jn + c2 + (e & 1); };
    const int gdim = PK ? P.dk : 1;
    float *f = (float *)la_smem;
    float *Am = f, *Mm = f + LA_C * LD;
    float *R1 = f + 2 * LA_C * LD, *R2 = f + 3 * LA_C * LD, *R3 = f + 4 * LA_C * LD,
          *R4 = f + 5 * LA_C * LD;
    float *bet = f + 6 * LA_C * LD, *dbet = bet + LA_C;
    double *Gd = (double *)(dbet + LA_C);
    double *xs = Gd + LA_C * LA_GLD;
    signed char *Rr = (signed char *)(xs + LA_C);
    const size_t ch = (size_t)bh * P.NC + c, st = ch * P.dk * P.dv;
    const float *S0 = P.Sst + st, *dSe = P.dSe + st;

    for (int i = tid; i < LA_C; i += blockDim.x) {
        bet[i] = (P.beta && i < n) ? P.beta[la_row(P, b, t0 + i, h)] : (i < n ? 1.0f : 0.0f);
        dbet[i] = 0.0f;
        xs[i] = 0.0;
    }
    if (!PK)
        la_scan<false>(P, b, h, t0, n, 0, Gd, Rr);
    /* A (scale, no β) from its split, written by la_prep_mma */
    for (int u = tid; u < LA_C * LA_C / 2; u += LA_NT) {
        const int i = u / (LA_C / 2), j = 2 * (u % (LA_C / 2));
        const size_t o = ch * 2 * LA_C * LA_C + (size_t)i * LA_C + j;
        const float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)(P.Ahl + o));
        const float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)(P.Ahl + o + LA_C * LA_C));
        Am[i * LD + j] = hi.x + lo.x;
        Am[i * LD + j + 1] = hi.y + lo.y;
    }
    __syncthreads();

    /* M = scale·β_j·dO Vᵀ (⊙ Γ for a scalar gate), masked */
    {
        float acc[1][4][4] = {};
        for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
            la_load2<E, E>(R1, (const E *)P.d_o, R2, (const E *)P.v, P, b, h, t0, n, v0, P.dv);
            __syncthreads();
            if (lowtile) /* dO Vᵀ: bf16 inputs, exact */
                ttt_warp_gemm<1, 4, true, true>(
                    acc, [&](int r, int x) { return *(const float2 *)(R1 + r * LD + x); },
                    [&](int x, int j) { return *(const float2 *)(R2 + j * LD + x); }, 16 * mt,
                    32 * nh, 0, LA_VT);
            __syncthreads();
        }
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), j = col_of(jn, e);
                float x = 0.0f;
                if (j <= i && i < n) {
                    x = P.scale * bet[j] * acc[0][jn][e];
                    if (!PK)
                        x *= la_dec(Gd, Rr, j, i, 0);
                }
                Mm[i * LD + j] = x;
            }
        __syncthreads();
    }
    /* dṽ, dv, dβ per value tile */
    for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
        float acc[1][4][4] = {};
        la_load<E, LA_VT>(R1, LD, (const E *)P.d_o, P, b, h, t0, n, v0, P.dv);
        __syncthreads();
        /* Aᵀ dO: rows j, k = i ≥ j (A lower triangular); A split, dO exact */
        ttt_warp_gemm<1, 4, false, true>(
            acc, [&](int r, int x) { return make_float2(Am[x * LD + r], Am[(x + 1) * LD + r]); },
            [&](int x, int cc) { return make_float2(R1[x * LD + cc], R1[(x + 1) * LD + cc]); },
            16 * mt, 32 * nh, 16 * mt, LA_C);
        for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
            __syncthreads();
            if (PK)
                la_scan<true>(P, b, h, t0, n, m0, Gd, Rr);
            {
                float x1[16], x2[16];
                la_fetch<E, LA_KT>(x1, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
                la_fetch_state(x2, dSe, P.dk, P.dv, m0, v0);
                la_put<LA_KT>(R2, LD, x1);
                la_put_state(R3, LD, x2);
            }
            __syncthreads();
            for (int e = tid; e < LA_C * LA_KT; e += blockDim.x) {
                const int j = e / LA_KT, col = e % LA_KT;
                if (j < n)
                    R2[j * LD + col] *= la_dec(Gd, Rr, j, n - 1, PK ? col : 0);
            }
            __syncthreads();
            /* (k ⊙ b) dSe: both computed, split */
            ttt_warp_gemm<1, 4, false, false>(
                acc, [&](int r, int x) { return *(const float2 *)(R2 + r * LD + x); },
                [&](int x, int cc) { return make_float2(R3[x * LD + cc], R3[(x + 1) * LD + cc]); },
                16 * mt, 32 * nh, 0, LA_KT);
        }
        float part[2] = {0.0f, 0.0f};
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = row_of(e), col = v0 + col_of(jn, e);
                if (j < n && col < P.dv) {
                    const size_t idx = la_row(P, b, t0 + j, h) * P.dv + col;
                    part[e >> 1] = fmaf(ttt_ld<E>((const E *)P.v, idx), acc[0][jn][e], part[e >> 1]);
                    if (P.dvv)
                        ttt_st<E>((E *)P.dvv, idx, bet[j] * acc[0][jn][e]);
                }
            }
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) { /* the four lanes of a row, then one atomic per row */
            float x = part[e2];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            const int j = 16 * mt + g + 8 * e2;
            if ((lane & 3) == 0 && j < n)
                atomicAdd(&dbet[j], x);
        }
        __syncthreads();
    }
    /* dq, dk and x per key tile */
    for (int m0 = 0; m0 < P.dk; m0 += LA_KT) {
        if (PK)
            la_scan<true>(P, b, h, t0, n, m0, Gd, Rr);
        la_load2<E, E>(R1, (const E *)P.q, R2, (const E *)P.k, P, b, h, t0, n, m0, P.dk);
        float aq[1][4][4] = {}, ak[1][4][4] = {};
        for (int v0 = 0; v0 < P.dv; v0 += LA_VT) {
            {
                float x1[16], x2[16];
                la_fetch<E, LA_VT>(x1, (const E *)P.d_o, P, b, h, t0, n, v0, P.dv);
                la_fetch_state(x2, S0, P.dk, P.dv, m0, v0);
                la_put<LA_VT>(R3, LD, x1);
                la_put_state(R4, LD, x2);
            }
            __syncthreads();
            /* dO S0ᵀ: dO exact, S0 split */
            ttt_warp_gemm<1, 4, true, false>(
                aq, [&](int r, int x) { return *(const float2 *)(R3 + r * LD + x); },
                [&](int x, int mm) { return *(const float2 *)(R4 + mm * LD + x); }, 16 * mt,
                32 * nh, 0, LA_VT);
            __syncthreads();
            {
                float x1[16], x2[16];
                la_fetch<E, LA_VT>(x1, (const E *)P.v, P, b, h, t0, n, v0, P.dv);
                la_fetch_state(x2, dSe, P.dk, P.dv, m0, v0);
                la_put<LA_VT>(R3, LD, x1);
                la_put_state(R4, LD, x2);
            }
            __syncthreads();
            /* V dSeᵀ: V exact, dSe split */
            ttt_warp_gemm<1, 4, true, false>(
                ak, [&](int r, int x) { return *(const float2 *)(R3 + r * LD + x); },
                [&](int x, int mm) { return *(const float2 *)(R4 + mm * LD + x); }, 16 * mt,
                32 * nh, 0, LA_VT);
            __syncthreads();
        }
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), col = col_of(jn, e), gc = PK ? col : 0;
                if (i < n) {
                    aq[0][jn][e] *= P.scale * la_dec(Gd, Rr, -1, i, gc);
                    ak[0][jn][e] *= bet[i] * la_dec(Gd, Rr, i, n - 1, gc);
                } else {
                    aq[0][jn][e] = 0.0f;
                    ak[0][jn][e] = 0.0f;
                }
            }
        if (!PK) { /* (M ⊙ Γ) K and (M ⊙ Γ)ᵀ Q: M split, K and Q exact */
            ttt_warp_gemm<1, 4, false, true>(
                aq, [&](int r, int x) { return *(const float2 *)(Mm + r * LD + x); },
                [&](int x, int cc) { return make_float2(R2[x * LD + cc], R2[(x + 1) * LD + cc]); },
                16 * mt, 32 * nh, 0, 16 * mt + 16);
            ttt_warp_gemm<1, 4, false, true>(
                ak, [&](int r, int x) { return make_float2(Mm[x * LD + r], Mm[(x + 1) * LD + r]); },
                [&](int x, int cc) { return make_float2(R1[x * LD + cc], R1[(x + 1) * LD + cc]); },
                16 * mt, 32 * nh, 16 * mt, LA_C);
        }
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), col = col_of(jn, e);
                R3[i * LD + col] = aq[0][jn][e];
                R4[i * LD + col] = ak[0][jn][e];
            }
        __syncthreads();
        if (PK) {
            /* thread (I, col): dq rows of block I and dk rows of block I, key m0 + col */
            const int I = tid >> 6, col = tid & 63, base = 16 * I;
            float a[16];
#pragma unroll
            for (int r = 0; r < 16; ++r)
                a[r] = 0.0f;
            if (I > 0) {
                const int p = base - 1;
                for (int j = 0; j < base; ++j) {
                    const float kw = R2[j * LD + col] * la_dec(Gd, Rr, j, p, col);
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        a[r] = fmaf(Mm[(base + r) * LD + j], kw, a[r]);
                }
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    a[r] *= la_dec(Gd, Rr, p, base + r, col);
            }
            /* the diagonal block: rows 8.. against columns ..7 through pp = base + 7 (both
             * factors ≤ 1), the two 8 × 8 diagonal halves element by element */
            {
                const int pp = base + 7;
                float t[8];
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    t[r] = 0.0f;
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) {
                    const int j = base + jj;
                    const float kw = R2[j * LD + col] * la_dec(Gd, Rr, j, pp, col);
#pragma unroll
                    for (int r = 0; r < 8; ++r)
                        t[r] = fmaf(Mm[(base + 8 + r) * LD + j], kw, t[r]);
                }
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    a[8 + r] = fmaf(t[r], la_dec(Gd, Rr, pp, base + 8 + r, col), a[8 + r]);
            }
#pragma unroll
            for (int jj = 0; jj < 16; ++jj) {
                const int j = base + jj;
                const float kj = R2[j * LD + col];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    if (r >= jj && (r < 8) == (jj < 8))
                        a[r] = fmaf(Mm[(base + r) * LD + j] * kj,
                                    la_dec(Gd, Rr, j, base + r, col), a[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r)
                R3[(base + r) * LD + col] += a[r];
#pragma unroll
            for (int r = 0; r < 16; ++r)
                a[r] = 0.0f;
            for (int I2 = I + 1; I2 < 4; ++I2) {
                const int p = 16 * I2 - 1;
                float t[16];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    t[r] = 0.0f;
                for (int ii = 0; ii < 16; ++ii) {
                    const int i = 16 * I2 + ii;
                    const float qu = R1[i * LD + col] * la_dec(Gd, Rr, p, i, col);
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        t[r] = fmaf(Mm[i * LD + base + r], qu, t[r]);
                }
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    a[r] = fmaf(t[r], la_dec(Gd, Rr, base + r, p, col), a[r]);
            }
            {
                const int pp = base + 7;
                float t[8];
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    t[r] = 0.0f;
#pragma unroll
                for (int ii = 8; ii < 16; ++ii) {
                    const int i = base + ii;
                    const float qu = R1[i * LD + col] * la_dec(Gd, Rr, pp, i, col);
#pragma unroll
                    for (int r = 0; r < 8; ++r)
                        t[r] = fmaf(Mm[i * LD + base + r], qu, t[r]);
                }
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    a[r] = fmaf(t[r], la_dec(Gd, Rr, base + r, pp, col), a[r]);
            }
#pragma unroll
            for (int ii = 0; ii < 16; ++ii) {
                const int i = base + ii;
                const float qi = R1[i * LD + col];
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    if (r <= ii && (r < 8) == (ii < 8))
                        a[r] = fmaf(Mm[i * LD + base + r] * qi, la_dec(Gd, Rr, base + r, i, col),
                                    a[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r)
                R4[(base + r) * LD + col] += a[r];
            __syncthreads();
        }
        la_bwd_tile_out<E, PK, LD>(P, b, h, bh, c, t0, n, m0, gdim, R1, R2, R3, R4, Rr, xs);
        __syncthreads();
    }
    la_bwd_chunk_out<PK>(P, b, h, bh, c, t0, n, Rr, xs, dbet);
}

/* ---- host side ---- */

/* Sizes of the workspace parts; 0 for arguments out of range. */
struct la_ws {
    size_t Aw, Sst, dSe, ST, head, carry, flag, Qhl, Khl, gnw, rnw, total;
};

/* The shapes the tensor-core kernels take (the pointers' alignment is checked per call):
 * bf16, not asked for the reference kernels, d_k ≤ 128, d_k and d_v multiples of 8. */
static bool la_mma_shape(const ttt_chunk_args *a) {
    return a->dtype == TTT_CHUNK_BF16 && !a->reference && a->d_k <= 128 && a->d_k % 8 == 0 &&
           a->d_v % 8 == 0;
}

static int la_sizes(const ttt_chunk_args *a, int backward, la_ws *w) {
    *w = la_ws{};
    if (!a || a->B < 1 || a->T < 1 || a->H < 1 || a->d_k < 1 || a->d_v < 1 ||
        a->d_k > TTT_CHUNK_MAX_D || a->d_v > TTT_CHUNK_MAX_D)
        return 0;
    const size_t BH = (size_t)a->B * a->H, NC = ((size_t)a->T + LA_C - 1) / LA_C;
    if (BH > (size_t)INT_MAX || NC > 65535)
        return 0;
    const size_t rows = BH * (size_t)a->T; /* ≤ 2^31 · 2^31: no overflow in 64 bits */
    if (rows > ((size_t)1 << 40))
        return 0;
    const size_t gdim = (a->g && a->gate_per_key) ? (size_t)a->d_k : 1;
    const size_t kv = (size_t)a->d_k * a->d_v;
    if (!backward) {
        w->Aw = ttt_cu_align(BH * NC * LA_C * LA_C * 4);
    } else {
        w->Sst = ttt_cu_align(BH * NC * kv * 4);
        w->dSe = w->Sst;
        w->ST = ttt_cu_align(BH * kv * 4);
        w->head = ttt_cu_align(BH * NC * gdim * 8);
        w->carry = w->head;
        w->flag = ttt_cu_align(BH * NC * gdim * 4);
    }
    if (la_mma_shape(a)) { /* the splits of Qa, Kb and the chunk decays; Aw holds A's split */
        w->Aw = ttt_cu_align(BH * NC * LA_C * LA_C * 4);
        w->Qhl = ttt_cu_align(BH * NC * 2 * LA_C * (size_t)a->d_k * 2);
        w->Khl = w->Qhl;
        w->gnw = ttt_cu_align(BH * NC * gdim * 8);
        w->rnw = ttt_cu_align(BH * NC * gdim * 4);
    }
    w->total = w->Aw + w->Sst + w->dSe + w->ST + w->head + w->carry + w->flag + w->Qhl + w->Khl +
               w->gnw + w->rnw;
    return 1;
}

extern "C" size_t ttt_cuda_la_workspace(const ttt_chunk_args *a, int backward) {
    la_ws w;
    return la_sizes(a, backward, &w) ? w.total : 0;
}

static ttt_status la_check(const ttt_chunk_args *a, void *workspace, size_t ws_bytes, int backward,
                           la_ws *w, ttt_error *err) {
    if (!a)
        return ttt_error_set(err, TTT_ERR_ARG, "linear attention (CUDA): args is NULL");
    if (a->B < 1 || a->T < 1 || a->H < 1)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA): B, T, H must be ≥ 1 (got %d, %d, %d)", a->B,
                             a->T, a->H);
    if (a->d_k < 1 || a->d_v < 1 || a->d_k > TTT_CHUNK_MAX_D || a->d_v > TTT_CHUNK_MAX_D)
        return ttt_error_set(
            err, TTT_ERR_ARG,
            "linear attention (CUDA): d_k and d_v must lie in [1, %d] (got %d, %d)",
            TTT_CHUNK_MAX_D, a->d_k, a->d_v);
    if (a->dtype != TTT_CHUNK_F32 && a->dtype != TTT_CHUNK_BF16)
        return ttt_error_set(err, TTT_ERR_ARG, "linear attention (CUDA): unknown dtype %d",
                             (int)a->dtype);
    if (!la_sizes(a, backward, w))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA): B·H = %lld or T = %d too large (B·H ≤ "
                             "2^31 − 1, T ≤ %d)",
                             (long long)a->B * a->H, a->T, 65535 * LA_C);
    if (!a->q || !a->k || !a->v)
        return ttt_error_set(err, TTT_ERR_ARG, "linear attention (CUDA): q, k and v are required");
    if (!backward && !a->o)
        return ttt_error_set(err, TTT_ERR_ARG, "linear attention (CUDA): o is required");
    if (w->total > 0 && (!workspace || ws_bytes < w->total))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA): workspace of %zu bytes given, %zu needed",
                             workspace ? ws_bytes : (size_t)0, w->total);
    if (((uintptr_t)workspace & 255) != 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA): workspace not 256-byte aligned");
    return TTT_OK;
}

static la_dev la_make(const ttt_chunk_args *a) {
    la_dev P = la_dev{};
    P.B = a->B;
    P.T = a->T;
    P.H = a->H;
    P.dk = a->d_k;
    P.dv = a->d_v;
    P.NC = (a->T + LA_C - 1) / LA_C;
    P.per_key = a->g && a->gate_per_key;
    P.scale = a->scale;
    P.q = a->q;
    P.k = a->k;
    P.v = a->v;
    P.beta = a->beta;
    P.g = a->g;
    P.h0 = a->h0;
    P.o = a->o;
    P.ht = a->ht;
    return P;
}

/* Raise a kernel's dynamic shared-memory limit to `bytes` (above the default 48 KB). */
template <typename K> static cudaError_t la_smem_attr(K kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

static size_t la_state_bytes(int dk) { return la_seq_bytes(dk) + 16; }

template <typename E, bool PK>
static ttt_status la_forward_t(const la_dev &P, cudaStream_t st, ttt_error *err) {
    const dim3 blk(LA_NT);
    TTT_CUDA_CHECK(la_smem_attr(la_scores<E, PK>, LA_SC_BYTES));
    la_scores<E, PK><<<dim3(P.B * P.H, P.NC), blk, LA_SC_BYTES, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_scores");
    const size_t sb = la_state_bytes(P.dk);
    TTT_CUDA_CHECK(la_smem_attr(la_state<E, PK, 0>, sb));
    la_state<E, PK, 0><<<dim3(P.B * P.H, (P.dv + LA_BV - 1) / LA_BV), blk, sb, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_state");
    return TTT_OK;
}

template <typename E, bool PK>
static ttt_status la_backward_t(const la_dev &P, cudaStream_t st, ttt_error *err) {
    const dim3 blk(LA_NT);
    const int BH = P.B * P.H, NVB = (P.dv + LA_BV - 1) / LA_BV;
    const size_t sb = la_state_bytes(P.dk);
    TTT_CUDA_CHECK(la_smem_attr(la_state<E, PK, 1>, sb));
    la_state<E, PK, 1><<<dim3(BH, NVB), blk, sb, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_state (recompute)");
    TTT_CUDA_CHECK(la_smem_attr(la_dstate<E, PK>, sb));
    la_dstate<E, PK><<<dim3(BH, NVB), blk, sb, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_dstate");
    TTT_CUDA_CHECK(la_smem_attr(la_bwd_chunk<E, PK>, LA_BW_BYTES + 16));
    la_bwd_chunk<E, PK><<<dim3(BH, P.NC), blk, LA_BW_BYTES + 16, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_bwd_chunk");
    if (P.dg) {
        const int gdim = PK ? P.dk : 1;
        la_dg_carry<<<dim3(BH), blk, 0, st>>>(P, gdim);
        TTT_CUDA_CHECK_LAUNCH("la_dg_carry");
        la_dg_add<<<dim3(BH, P.NC), blk, 0, st>>>(P, gdim);
        TTT_CUDA_CHECK_LAUNCH("la_dg_add");
    }
    return TTT_OK;
}

/* The tensor-core path (bf16; docs/gpu.md "Tensor-core kernels"). */
template <bool PK, bool SC>
static ttt_status la_prep_launch(const la_dev &P, cudaStream_t st, ttt_error *err) {
    TTT_CUDA_CHECK(la_smem_attr(la_prep_mma<PK, SC>, LA_PREP_BYTES));
    la_prep_mma<PK, SC><<<dim3(P.B * P.H, P.NC), LA_NT, LA_PREP_BYTES, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_prep_mma");
    return TTT_OK;
}

template <int LDK, int BV, int MODE>
static ttt_status la_seq_launch(const la_dev &P, cudaStream_t st, ttt_error *err) {
    const size_t sm = la_mma_smem(LDK, BV, MODE);
    TTT_CUDA_CHECK(la_smem_attr(la_seq_mma<LDK, BV, MODE>, sm));
    la_seq_mma<LDK, BV, MODE>
        <<<dim3(P.B * P.H, (P.dv + BV - 1) / BV, MODE == 0 ? 1 : 2), 4 * BV, sm, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH(MODE == 0 ? "la_seq_mma (forward)" : "la_seq_mma (backward)");
    return TTT_OK;
}

/* 128-column tiles (16 warps) when the 64-column grid needs at least twice the waves of blocks
 * (one block per SM) of the 128-column grid, as the delta rule's forward does. */
template <int MODE>
static ttt_status la_seq_pick(const la_dev &P, cudaStream_t st, ttt_error *err) {
    int dev = 0, sms = 0;
    TTT_CUDA_CHECK(cudaGetDevice(&dev));
    TTT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* blocks per value tile: B·H, twice that for the backward's two recurrences */
    const size_t bh = (size_t)P.B * P.H * (MODE == 0 ? 1 : 2), sm = (size_t)(sms > 0 ? sms : 1);
    const size_t waves64 = (bh * ((P.dv + 63) / 64) + sm - 1) / sm;
    const size_t waves128 = (bh * ((P.dv + 127) / 128) + sm - 1) / sm;
    const bool wide = waves64 >= 2 * waves128;
    if (P.dk <= 64)
        return wide ? la_seq_launch<64, 128, MODE>(P, st, err)
                    : la_seq_launch<64, 64, MODE>(P, st, err);
    return wide ? la_seq_launch<128, 128, MODE>(P, st, err)
                : la_seq_launch<128, 64, MODE>(P, st, err);
}

static ttt_status la_forward_mma(const la_dev &P, cudaStream_t st, ttt_error *err) {
    const ttt_status s = P.per_key ? la_prep_launch<true, true>(P, st, err)
                                   : la_prep_launch<false, true>(P, st, err);
    if (s != TTT_OK)
        return s;
    return la_seq_pick<0>(P, st, err);
}

template <bool PK>
static ttt_status la_backward_mma(const la_dev &P, cudaStream_t st, ttt_error *err) {
    const dim3 blk(LA_NT);
    const int BH = P.B * P.H;
    TTT_TRY((la_prep_launch<PK, true>(P, st, err))); /* A without β (fold_beta = 0) */
    TTT_TRY(la_seq_pick<1>(P, st, err)); /* the states and their gradients, one launch */
    TTT_CUDA_CHECK(la_smem_attr(la_bwd_mma<PK>, LA_BWM_BYTES + 16));
    la_bwd_mma<PK><<<dim3(BH, P.NC), blk, LA_BWM_BYTES + 16, st>>>(P);
    TTT_CUDA_CHECK_LAUNCH("la_bwd_mma");
    if (P.dg) {
        const int gdim = PK ? P.dk : 1;
        la_dg_carry<<<dim3(BH), blk, 0, st>>>(P, gdim);
        TTT_CUDA_CHECK_LAUNCH("la_dg_carry");
        la_dg_add<<<dim3(BH, P.NC), blk, 0, st>>>(P, gdim);
        TTT_CUDA_CHECK_LAUNCH("la_dg_add");
    }
    return TTT_OK;
}

extern "C" ttt_status ttt_cuda_la_forward(const ttt_chunk_args *a, void *workspace, size_t ws_bytes,
                                          void *stream, ttt_error *err) {
    la_ws w;
    const ttt_status s = la_check(a, workspace, ws_bytes, 0, &w, err);
    if (s != TTT_OK)
        return s;
    la_dev P = la_make(a);
    P.Aw = (float *)workspace;
    cudaStream_t st = (cudaStream_t)stream;
    const bool bf = a->dtype == TTT_CHUNK_BF16;
    /* tensor cores: v is copied 16 bytes at a time, o stored two elements at a time */
    if (la_mma_shape(a) && ((uintptr_t)a->v & 15) == 0 && ((uintptr_t)a->o & 3) == 0) {
        unsigned char *p = (unsigned char *)workspace + w.Aw;
        P.Ahl = (__nv_bfloat16 *)workspace;
        P.Qhl = (__nv_bfloat16 *)p;
        P.Khl = (__nv_bfloat16 *)(p + w.Qhl);
        P.gnw = (double *)(p + w.Qhl + w.Khl);
        P.rnw = (int *)(p + w.Qhl + w.Khl + w.gnw);
        P.fold_beta = 1;
        return la_forward_mma(P, st, err);
    }
    if (bf)
        return P.per_key ? la_forward_t<__nv_bfloat16, true>(P, st, err)
                         : la_forward_t<__nv_bfloat16, false>(P, st, err);
    return P.per_key ? la_forward_t<float, true>(P, st, err)
                     : la_forward_t<float, false>(P, st, err);
}

extern "C" ttt_status ttt_cuda_la_backward(const ttt_chunk_args *a, const ttt_chunk_grad *g,
                                           void *workspace, size_t ws_bytes, void *stream,
                                           ttt_error *err) {
    la_ws w;
    const ttt_status s = la_check(a, workspace, ws_bytes, 1, &w, err);
    if (s != TTT_OK)
        return s;
    if (!g || !g->d_o)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA) backward: grad and grad->d_o are required");
    if (g->d_beta && !a->beta)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA) backward: d_beta asked for without beta");
    if (g->d_g && !a->g)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "linear attention (CUDA) backward: d_g asked for without g");
    la_dev P = la_make(a);
    P.d_o = g->d_o;
    P.d_ht = g->d_ht;
    P.dq = g->d_q;
    P.dkk = g->d_k;
    P.dvv = g->d_v;
    P.dbeta = g->d_beta;
    P.dg = g->d_g;
    P.dh0 = g->d_h0;
    unsigned char *p = (unsigned char *)workspace;
    P.Ahl = (__nv_bfloat16 *)p; /* the tensor-core path's A split (w.Aw = 0 otherwise) */
    p += w.Aw;
    P.Sst = (float *)p;
    p += w.Sst;
    P.dSe = (float *)p;
    p += w.dSe;
    P.ST = (float *)p;
    p += w.ST;
    P.head = (double *)p;
    p += w.head;
    P.carry = (double *)p;
    p += w.carry;
    P.flag = (int *)p;
    p += w.flag;
    cudaStream_t st = (cudaStream_t)stream;
    const bool bf = a->dtype == TTT_CHUNK_BF16;
    /* tensor cores: v and d_o are copied 16 bytes at a time */
    if (la_mma_shape(a) && (((uintptr_t)a->v | (uintptr_t)g->d_o) & 15) == 0) {
        P.Qhl = (__nv_bfloat16 *)p;
        P.Khl = (__nv_bfloat16 *)(p + w.Qhl);
        P.gnw = (double *)(p + w.Qhl + w.Khl);
        P.rnw = (int *)(p + w.Qhl + w.Khl + w.gnw);
        return P.per_key ? la_backward_mma<true>(P, st, err) : la_backward_mma<false>(P, st, err);
    }
    if (bf)
        return P.per_key ? la_backward_t<__nv_bfloat16, true>(P, st, err)
                         : la_backward_t<__nv_bfloat16, false>(P, st, err);
    return P.per_key ? la_backward_t<float, true>(P, st, err)
                     : la_backward_t<float, false>(P, st, err);
}
