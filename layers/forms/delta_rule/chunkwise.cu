/* CUDA kernels of the (gated) delta rule, forward and backward (docs/gpu.md "Delta rule
 * kernels"; the interface is layers/forms/chunk_cuda.h).
 *
 * Per sequence (b, h), with the state S (d_k × d_v, fp32), a_t = e^{g_t}:
 *     S_t = a_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,     o_t = scale · S_tᵀ q_t.
 * Chunks of C = 64 tokens. Within a chunk (local index t = 0..C−1, chunk-start state S) let
 * γ_t be the log decay since the chunk start or since the last hard reset before t (a reset is
 * a token with expf(g) == 0: the state before it is forgotten exactly), Γ_t = e^{γ_t} when no
 * reset lies in [0, t] and 0 otherwise, and D(t, s) = e^{γ_t − γ_s} for s ≤ t when no reset lies
 * in (s, t], 0 otherwise (γ in float64, only the difference rounded to fp32: never −inf − −inf).
 * Writing S_t = a_t S_{t−1} + k_t δ_tᵀ, the pseudo-values δ solve the unit lower-triangular system
 *     (I + A) δ = β ⊙ (V − Γ ⊙ (K S)),      A_ts = β_t D(t,s) k_t·k_s  (s < t),
 * so with T = (I + A)⁻¹ (inverted in float64 per chunk), U = V − Γ ⊙ (K S), R = β ⊙ U:
 *     δ = T R,   O = scale (Γ ⊙ (Q S) + M δ),   M_ts = D(t,s) q_t·k_s (s ≤ t),
 *     S ← Γ_{C−1} S + Kᵀ (λ ⊙ δ),              λ_s = D(C−1, s).
 * A partial last chunk is padded with k = q = v = 0, β = 0, g = 0, which leaves all of this
 * unchanged. The backward equations are derived in docs/gpu.md and restated at each kernel.
 *
 * Kernels (fp32 FFMA in shared-memory tiles; inputs of type E = float or bf16 are widened to
 * fp32 on load, everything computed stays fp32 and the chunk inverse float64). For bf16 inputs
 * (d_k ≤ 128, aligned) delta_fwd_mma, delta_bwd_mma, delta_bwd_cc_mma and delta_bwd_qk_mma do
 * the work of the sequential and chunk kernels on the tensor cores (docs/gpu.md "Tensor-core
 * forward", "Tensor-core backward"); the FFMA kernels stay as their reference twins:
 *   delta_prep      one block per chunk: K Kᵀ, Q Kᵀ, the gates, A' = D ⊙ K Kᵀ, M, T, Γ, λ
 *   delta_fwd_seq   one block per (sequence, 32-column value tile), over the chunks in order:
 *                   the state tile stays in shared memory; o, ht (and, for the backward, the
 *                   chunk-start states and U)
 *   delta_bwd_seq   the same in reverse order for dS: dδ, dR, d_v, the chunk-end state
 *                   gradients, d_h0
 *   delta_bwd_cc    one block per chunk: δ, the C×C gradients of M and A, d_β, gate terms
 *   delta_bwd_qk    one block per (chunk, 64-column key tile): d_q, d_k, gate terms
 *   delta_bwd_gate  one thread per chunk: the segmented reverse cumulative sum giving d_g */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunk_cuda.h"
#include "cuda_common.cuh"

#define DC 64      /* chunk length */
#define DLC 68     /* row stride of C×C matrices in shared memory (float4-aligned) */
#define DBV 32     /* value-tile width of the sequential kernels (one warp's lanes) */
#define DKT 64     /* key-tile width of delta_bwd_qk */
#define DT1 33     /* row stride of 32-wide tiles (conflict-free column reads) */
#define NTHR 256
#define DW_OUT 1  /* delta_params.write_out: o and ht */
#define DW_SAVE 2 /* the chunk-start states and U, for the backward's kernels */

typedef struct delta_params {
    int B, T, H, dk, dv, nc, nvt, nkt;
    int kvec; /* q and k are read four elements at a time: d_k % 4 == 0, 16-byte aligned */
    float scale;
    const void *q, *k, *v, *d_o;
    const float *beta, *g, *h0, *d_ht;
    void *o, *d_q, *d_k, *d_v;
    float *ht, *d_beta, *d_g, *d_h0;
    int write_out; /* the forward kernels' outputs: DW_OUT (o, ht) and/or DW_SAVE (S0, U) */
    /* workspace */
    float *Tw, *Mw, *Aw;   /* (BH, nc, C, C): T; M then F; A' then E */
    float *Gw, *Lw;        /* (BH, nc, C): Γ, λ */
    float *S0w, *dSw;      /* (BH, nc, d_k, d_v): chunk-start states, chunk-end gradients */
    float *Uw, *dRw;       /* (BH, nc, C, d_v): U then δ; dR */
    float *gaw, *gbw;      /* (BH, nc, C) and (nkt, BH, nc, C): terms of dγ */
    int mma;               /* the forward runs on the tensor cores (delta_fwd_mma) */
    __nv_bfloat16 *Tsw;    /* (BH, nc, 4, C, C): T and M as bf16 hi + lo (tensor-core path) */
    float *Bw;             /* (BH, nc, C): β, 0 past T (tensor-core path) */
} delta_params;

__device__ __forceinline__ size_t drow(const delta_params &p, int b, int t, int h) {
    return ((size_t)b * p.T + t) * p.H + h;
}

/* The chunk's gate prefix: gam[i] = γ_i (float64), rho[i] = the last reset index ≤ i or −1.
 * Called by all 32 lanes of one warp (lane l holds tokens 2l and 2l+1): every gate is loaded at
 * once, then a segmented inclusive scan over the lanes, a reset restarting the sum, in float64.
 * (One thread walking the chunk waited on 64 loads in a row.) A range's summary is (S, R): the
 * sum since its last reset (or of all of it) and that reset's index (or −1); ranges combine as
 * (R_r ≥ 0 ? S_r : S_l + S_r, max(R_l, R_r)). */
__device__ void chunk_gates(const delta_params &p, int b, int h, int t0, double *gam, int *rho) {
    const int lane = threadIdx.x & 31;
    double v[2];
    int r[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int i = 2 * lane + e, t = t0 + i;
        float x = (p.g && t < p.T) ? p.g[drow(p, b, t, h)] : 0.f;
        bool reset = expf(x) == 0.f;
        v[e] = reset ? 0.0 : (double)x;
        r[e] = reset ? i : -1;
    }
    double acc = r[1] >= 0 ? v[1] : v[0] + v[1]; /* the lane's pair */
    int rr = max(r[0], r[1]);
    for (int o = 1; o < 32; o <<= 1) {
        double pv = __shfl_up_sync(0xffffffffu, acc, o);
        int pr = __shfl_up_sync(0xffffffffu, rr, o);
        if (lane >= o) {
            if (rr < 0) acc = pv + acc;
            rr = max(pr, rr);
        }
    }
    double ex = __shfl_up_sync(0xffffffffu, acc, 1); /* the lanes before this one */
    int er = __shfl_up_sync(0xffffffffu, rr, 1);
    if (lane == 0) {
        ex = 0;
        er = -1;
    }
    double g0 = r[0] >= 0 ? 0.0 : ex + v[0];
    double g1 = r[1] >= 0 ? 0.0 : g0 + v[1];
    gam[2 * lane] = g0;
    gam[2 * lane + 1] = g1;
    rho[2 * lane] = max(er, r[0]);
    rho[2 * lane + 1] = max(max(er, r[0]), r[1]);
}
__device__ __forceinline__ float gate_d(const double *gam, const int *rho, int t, int s) {
    return (s > t || rho[t] > s) ? 0.f : expf((float)(gam[t] - gam[s]));
}

/* ---------------------------------------------------------------------------------------------
 * delta_prep: per chunk, G = K Kᵀ and P = Q Kᵀ, A'_ts = D(t,s) G_ts (s < t), M_ts = D(t,s) P_ts
 * (s ≤ t), T = (I + diag(β) A')⁻¹ by column-wise forward substitution in float64, Γ_t and λ_t.
 * G and P come from prep_products: fp32 FFMA for fp32 inputs; for bf16 inputs one bf16
 * tensor-core product, which is as exact (a product of two bf16 values is exact in fp32 and the
 * sum accumulates in fp32). With the tensor-core forward (p.Tsw set) the chunk's T and M are
 * also written as two-term bf16 splits, and β per chunk (zero past T) for its loads. */

/* FFMA: 4 × 4 outputs per thread (t = ty + 16i, s = tx + 16j) over 32-wide key slices staged
 * as fp32 in `stage` (2 × 32 × (C + 1) floats). */
template <typename E>
__device__ __forceinline__ void prep_products(const delta_params &p, int b, int h, int t0,
                                              void *stage, float (*Gs)[DC + 1],
                                              float (*Ps)[DC + 1]) {
    float(*Kt)[DC + 1] = (float(*)[DC + 1])stage;
    float(*Qt)[DC + 1] = Kt + 32;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const E *q = (const E *)p.q, *k = (const E *)p.k;
    float G[4][4] = {}, P[4][4] = {};
    for (int k0 = 0; k0 < p.dk; k0 += 32) {
        __syncthreads();
        for (int idx = tid; idx < 32 * DC; idx += NTHR) {
            int kk = idx & 31, t = idx >> 5, gt = t0 + t;
            float kv = 0.f, qv = 0.f;
            if (gt < p.T && k0 + kk < p.dk) {
                size_t o = drow(p, b, gt, h) * p.dk + k0 + kk;
                kv = ttt_ld<E>(k, o);
                qv = ttt_ld<E>(q, o);
            }
            Kt[kk][t] = kv;
            Qt[kk][t] = qv;
        }
        __syncthreads();
        for (int kk = 0; kk < 32; kk++) {
            float kr[4], kc[4], qr[4];
            for (int i = 0; i < 4; i++) {
                kr[i] = Kt[kk][ty + 16 * i];
                qr[i] = Qt[kk][ty + 16 * i];
                kc[i] = Kt[kk][tx + 16 * i];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    G[i][j] = fmaf(kr[i], kc[j], G[i][j]);
                    P[i][j] = fmaf(qr[i], kc[j], P[i][j]);
                }
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            Gs[ty + 16 * i][tx + 16 * j] = G[i][j];
            Ps[ty + 16 * i][tx + 16 * j] = P[i][j];
        }
}

/* bf16 (the tensor-core path: d_k % 8 == 0 and q, k 16-byte aligned): 64-column slices of K and
 * Q staged as bf16 (2 × C × MSC); warp w computes rows 16(w % 4).. and columns 32(w / 4).. */
#define MSC 72 /* row stride (bf16) of 64-column tiles in shared memory: ldmatrix rows on distinct banks */
template <>
__device__ __forceinline__ void prep_products<__nv_bfloat16>(const delta_params &p, int b, int h,
                                                             int t0, void *stage,
                                                             float (*Gs)[DC + 1],
                                                             float (*Ps)[DC + 1]) {
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)stage, *Qs = Ks + DC * MSC;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)p.q, *k = (const __nv_bfloat16 *)p.k;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, mt = w & 3, nt0 = 4 * (w >> 2);
    float G[4][4] = {}, P[4][4] = {};
    for (int k0 = 0; k0 < p.dk; k0 += 64) {
        __syncthreads();
        for (int u = tid; u < DC * 8; u += NTHR) {
            int t = u >> 3, c8 = 8 * (u & 7), gt = t0 + t;
            bool in = gt < p.T && k0 + c8 < p.dk;
            size_t o = in ? drow(p, b, gt, h) * p.dk + k0 + c8 : 0;
            ttt_cp_async16(Ks + t * MSC + c8, k + o, in);
            ttt_cp_async16(Qs + t * MSC + c8, q + o, in);
        }
        ttt_cp_async_commit();
        ttt_cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 64; kk += 16) {
            uint32_t ak[4], aq[4];
            const int ar = (16 * mt + (lane & 15)) * MSC + kk + (lane >> 4) * 8;
            ttt_ldsm4(ak, Ks + ar);
            ttt_ldsm4(aq, Qs + ar);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                /* B = Kᵀ: B[i][s] = K[s][i], read untransposed from K's rows s */
                uint32_t bk[4];
                int sr = 8 * (nt0 + 2 * np) + (lane >> 4) * 8 + (lane & 7);
                ttt_ldsm4(bk, Ks + sr * MSC + kk + ((lane >> 3) & 1) * 8);
                ttt_mma_bf16(G[2 * np], ak, bk[0], bk[1]);
                ttt_mma_bf16(G[2 * np + 1], ak, bk[2], bk[3]);
                ttt_mma_bf16(P[2 * np], aq, bk[0], bk[1]);
                ttt_mma_bf16(P[2 * np + 1], aq, bk[2], bk[3]);
            }
        }
    }
    const int g = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int t = 16 * mt + g + 8 * (e >> 1), s = 8 * (nt0 + n) + c2 + (e & 1);
            Gs[t][s] = G[n][e];
            Ps[t][s] = P[n][e];
        }
}

/* d (8 × 8, float64) += a (8 × 4) · b (4 × 8) on the float64 tensor cores (sm_80 on). Lane l holds
 * a[l / 4][l % 4], b[l % 4][l / 4] and d[l / 4][2 (l % 4) .. + 1]. */
__device__ __forceinline__ void ttt_dmma(double d[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(d[0]), "+d"(d[1])
                 : "d"(a), "d"(b));
}

/* T = (I + A)⁻¹ (unit lower triangular, A strictly lower) in float64, in 16 × 16 blocks: the
 * four diagonal blocks by forward substitution, T_tj = −Σ_{j≤s<t} A_ts T_sj (column j by the
 * four threads 4j..4j+3, which share a warp with the other columns of its block), then the
 * blocks below the diagonal one block-diagonal at a time, T_ij = −T_ii Σ_{j≤k<i} A_ik T_kj
 * (docs/gpu.md "Tensor-core forward"). The serial chain is 15 substitution steps and three block
 * levels rather than 63 steps. W: 3 · 256 doubles of scratch. Ends with __syncthreads. */
__device__ void chunk_inverse(double (*Ad)[DC + 1], double (*Td)[DC + 1], double *W) {
    const int tid = threadIdx.x;
    {
        const int j = tid >> 2, r = tid & 3, i0 = j & ~15;
        if (r == 0) {
            for (int t = 0; t < j; t++) Td[t][j] = 0;
            Td[j][j] = 1;
        }
        __syncwarp();
        for (int t = i0 + 1; t < i0 + 16; t++) {
            double acc = 0;
            if (t > j)
                for (int s = j + r; s < t; s += 4) acc = fma(Ad[t][s], Td[s][j], acc);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (t > j && r == 0) Td[t][j] = -acc;
            __syncwarp();
        }
    }
    __syncthreads();
    /* the blocks below the diagonal, level d = i − j at a time, on the float64 tensor cores
     * (mma m8n8k4): each warp computes 8 × 8 tiles, W = Σ_{j≤k<i} A_ik T_kj, then
     * T_ij = −T_ii W (a warp's four lanes of a row hold k = c, the rows g = lane / 4) */
    const int w = tid >> 5, g = (tid & 31) >> 2, c = tid & 3;
    for (int d = 1; d < DC / 16; d++) {
        const int ntile = (DC / 16 - d) * 4;
        for (int tile = w; tile < ntile; tile += NTHR / 32) {
            const int blk = tile >> 2, i = d + blk, jb = i - d;
            const int r0 = 16 * i + 8 * ((tile >> 1) & 1), c0 = 16 * jb + 8 * (tile & 1);
            double acc[2] = {0.0, 0.0};
            for (int s = 16 * jb; s < 16 * i; s += 4)
                ttt_dmma(acc, Ad[r0 + g][s + c], Td[s + c][c0 + g]);
            double *wr = W + blk * 256 + (r0 - 16 * i + g) * 16 + (c0 - 16 * jb) + 2 * c;
            wr[0] = acc[0];
            wr[1] = acc[1];
        }
        __syncthreads();
        for (int tile = w; tile < ntile; tile += NTHR / 32) {
            const int blk = tile >> 2, i = d + blk, jb = i - d;
            const int r0 = 16 * i + 8 * ((tile >> 1) & 1), cw = 8 * (tile & 1);
            double acc[2] = {0.0, 0.0};
            for (int s = 0; s < 16; s += 4)
                ttt_dmma(acc, Td[r0 + g][16 * i + s + c], W[blk * 256 + (s + c) * 16 + cw + g]);
            Td[r0 + g][16 * jb + cw + 2 * c] = -acc[0];
            Td[r0 + g][16 * jb + cw + 2 * c + 1] = -acc[1];
        }
        __syncthreads();
    }
}

template <typename E>
__global__ void __launch_bounds__(NTHR) delta_prep(delta_params p, int bwd) {
    extern __shared__ double smd[];
    double(*Ad)[DC + 1] = (double(*)[DC + 1])smd;
    double(*Td)[DC + 1] = Ad + DC;
    double *gam = (double *)(Td + DC);
    double *W = gam + DC; /* chunk_inverse's scratch */
    int *rho = (int *)(W + 3 * 256);
    float *bs = (float *)(rho + DC);
    /* G and P (fp32) live where T will be built, the staged inputs where A will be: both are
     * consumed before those are written */
    float(*Gs)[DC + 1] = (float(*)[DC + 1])Td;
    float(*Ps)[DC + 1] = Gs + DC;
    const int tid = threadIdx.x;
    const int bh = blockIdx.x / p.nc, c = blockIdx.x % p.nc, b = bh / p.H, h = bh % p.H;
    const int t0 = c * DC;
    if (tid < 32) chunk_gates(p, b, h, t0, gam, rho);
    if (tid < DC)
        bs[tid] = t0 + tid < p.T ? (p.beta ? p.beta[drow(p, b, t0 + tid, h)] : 1.f) : 0.f;
    prep_products<E>(p, b, h, t0, (void *)Ad, Gs, Ps);
    __syncthreads(); /* G, P, gam, rho; the staging area is free */
    const size_t ch = (size_t)bh * p.nc + c, cc = ch * DC * DC;
    /* fp32 T and M for the reference forward and the backward; bf16 splits for the tensor-core
     * forward (a forward on the tensor cores needs only those) */
    const bool f32 = bwd || !p.Tsw;
    __nv_bfloat162 *ts = (__nv_bfloat162 *)(p.Tsw ? p.Tsw + 4 * cc : NULL);
    const int h2 = DC * DC / 2;
    for (int i2 = tid; i2 < h2; i2 += NTHR) {
        int t = (2 * i2) / DC, s0 = (2 * i2) % DC;
        float m[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int s = s0 + e;
            float d = gate_d(gam, rho, t, s);
            float ap = s < t ? Gs[t][s] * d : 0.f;
            m[e] = s <= t ? Ps[t][s] * d : 0.f;
            if (bwd) p.Aw[cc + 2 * i2 + e] = ap;
            Ad[t][s] = (double)bs[t] * (double)ap;
        }
        if (f32) *(float2 *)&p.Mw[cc + 2 * i2] = make_float2(m[0], m[1]);
        if (ts) ttt_split2(m[0], m[1], &ts[2 * h2 + i2], &ts[3 * h2 + i2]);
    }
    if (tid < DC) {
        size_t o = ch * DC + tid;
        p.Gw[o] = rho[tid] >= 0 ? 0.f : expf((float)gam[tid]);
        p.Lw[o] = gate_d(gam, rho, DC - 1, tid);
        if (p.Bw) p.Bw[o] = bs[tid];
    }
    __syncthreads();
    chunk_inverse(Ad, Td, W);
    /* (ch, 4, C, C) bf16: T hi, T lo (here), M hi, M lo (above) */
    for (int i2 = tid; i2 < h2; i2 += NTHR) {
        int t = (2 * i2) / DC, s = (2 * i2) % DC;
        float t0f = (float)Td[t][s], t1f = (float)Td[t][s + 1];
        if (f32) *(float2 *)&p.Tw[cc + 2 * i2] = make_float2(t0f, t1f);
        if (ts) ttt_split2(t0f, t1f, &ts[i2], &ts[h2 + i2]);
    }
}

/* ---- staging of a chunk into shared memory ----
 * The sequential kernels wait on every chunk's loads, with one block (8 warps) or two per SM:
 * each thread issues all its loads of a tensor before its first store, so that a chunk costs
 * one memory round trip per tensor rather than one per element. K and Q stay in their input
 * type in shared memory (bf16: half the space, two blocks per SM at d_k ≤ 128) and are widened
 * when read. */
template <typename E> struct vec4_of;
template <> struct vec4_of<float> { typedef float4 type; };
template <> struct vec4_of<__nv_bfloat16> { typedef uint2 type; };

template <typename E> __device__ __forceinline__ E ezero();
template <> __device__ __forceinline__ float ezero<float>() { return 0.f; }
template <> __device__ __forceinline__ __nv_bfloat16 ezero<__nv_bfloat16>() {
    return __float2bfloat16(0.f);
}

/* four consecutive elements of shared memory, widened */
__device__ __forceinline__ float4 ld4s(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld4s(const __nv_bfloat16 *p) {
    uint2 u = *(const uint2 *)p;
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
    float2 c = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, c.x, c.y);
}

/* rows t0..t0+C−1 of two (B, T, H, d_k) tensors into C × LDK shared arrays (zero padded) */
template <typename E, int LDK>
__device__ __forceinline__ void stage_kq(E *Ks, E *Qs, const E *k, const E *q,
                                         const delta_params &p, int b, int h, int t0) {
    typedef typename vec4_of<E>::type V;
    constexpr int GR = LDK / 4, NG = DC * GR / NTHR;
    V rk[NG], rq[NG];
    const bool vec = p.kvec;
#pragma unroll
    for (int u = 0; u < NG; u++) {
        int gi = threadIdx.x + u * NTHR, t = gi / GR, kk = (gi % GR) * 4, gt = t0 + t;
        if (gt < p.T && vec && kk < p.dk) {
            size_t o = drow(p, b, gt, h) * p.dk + kk;
            rk[u] = *(const V *)(k + o);
            rq[u] = *(const V *)(q + o);
        } else {
            E ek[4], eq[4];
            for (int e = 0; e < 4; e++) {
                bool in = gt < p.T && kk + e < p.dk;
                size_t o = in ? drow(p, b, gt, h) * p.dk + kk + e : 0;
                ek[e] = in ? k[o] : ezero<E>();
                eq[e] = in ? q[o] : ezero<E>();
            }
            rk[u] = *(const V *)ek;
            rq[u] = *(const V *)eq;
        }
    }
#pragma unroll
    for (int u = 0; u < NG; u++) {
        int gi = threadIdx.x + u * NTHR, t = gi / GR, kk = (gi % GR) * 4;
        *(V *)(Ks + t * LDK + kk) = rk[u];
        *(V *)(Qs + t * LDK + kk) = rq[u];
    }
}

/* the chunk's T and M (fp32, C × C in the workspace) into DLC-strided shared arrays; with
 * transpose, stored as Tᵀ and Mᵀ */
template <bool transpose>
__device__ __forceinline__ void stage_tm(float *Ts, float *Ms, const float *Tw, const float *Mw) {
    constexpr int NG = DC * DC / 4 / NTHR;
    float4 rt[NG], rm[NG];
#pragma unroll
    for (int u = 0; u < NG; u++) {
        int gi = threadIdx.x + u * NTHR;
        rt[u] = *(const float4 *)(Tw + 4 * gi);
        rm[u] = *(const float4 *)(Mw + 4 * gi);
    }
#pragma unroll
    for (int u = 0; u < NG; u++) {
        int gi = threadIdx.x + u * NTHR, r = (4 * gi) / DC, c = (4 * gi) % DC;
        if (!transpose) {
            *(float4 *)(Ts + r * DLC + c) = rt[u];
            *(float4 *)(Ms + r * DLC + c) = rm[u];
        } else {
            Ts[c * DLC + r] = rt[u].x;
            Ts[(c + 1) * DLC + r] = rt[u].y;
            Ts[(c + 2) * DLC + r] = rt[u].z;
            Ts[(c + 3) * DLC + r] = rt[u].w;
            Ms[c * DLC + r] = rm[u].x;
            Ms[(c + 1) * DLC + r] = rm[u].y;
            Ms[(c + 2) * DLC + r] = rm[u].z;
            Ms[(c + 3) * DLC + r] = rm[u].w;
        }
    }
}

/* Shared memory of the two sequential kernels, in bytes, and how many blocks fit on an SM
 * (227 KiB per SM, 1 KiB reserved per block): the register cap follows from it. */
__host__ __device__ constexpr size_t seq_smem_bytes(int ldk, size_t esize) {
    return 2 * (size_t)DC * ldk * esize +
           sizeof(float) * ((size_t)ldk * DBV + 3 * (size_t)DC * DBV + 2 * (size_t)DC * DLC +
                            3 * DC);
}
__host__ __device__ constexpr int seq_blocks_per_sm(int ldk, size_t esize) {
    return 2 * (seq_smem_bytes(ldk, esize) + 1024) <= 227 * 1024 ? 2 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * delta_fwd_seq: one block per (sequence, value tile j0..j0+31), chunks in order. Per chunk:
 *     X = K S, Y = Q S                       (C × 32; lane = column, warp w has rows w + 8a)
 *     U = V − Γ ⊙ X,  R = β ⊙ U,  δ = T R
 *     O = scale (Γ ⊙ Y + M δ)
 *     S ← Γ_{C−1} S + Kᵀ (λ ⊙ δ)            (warp w updates rows 4(w + 8m) .. +3)
 * The state tile never leaves shared memory. For the backward (write_out & DW_SAVE) it stores the
 * chunk-start state S and U, and o and ht as well when write_out & DW_OUT. LDK: d_k rounded up to 32, 64, 128 or 256. */
template <typename E, int LDK>
__global__ void __launch_bounds__(NTHR, seq_blocks_per_sm(LDK, sizeof(E)))
    delta_fwd_seq(delta_params p) {
    extern __shared__ float4 sm4[];
    E *Ks = (E *)sm4, *Qs = Ks + DC * LDK;
    float *Ss = (float *)(Qs + DC * LDK), *Rs = Ss + LDK * DBV;
    float *Vs = Rs + DC * DBV, *Ds = Vs + DC * DBV, *Ts = Ds + DC * DBV, *Ms = Ts + DC * DLC;
    float *Gs = Ms + DC * DLC, *Ls = Gs + DC, *Bs = Ls + DC;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int bh = blockIdx.x / p.nvt, j0 = (blockIdx.x % p.nvt) * DBV, b = bh / p.H,
              h = bh % p.H;
    const int j = j0 + lane;
    const bool jv = j < p.dv;
    const E *q = (const E *)p.q, *k = (const E *)p.k, *v = (const E *)p.v;
    for (int i = w; i < LDK; i += 8)
        Ss[i * DBV + lane] = (p.h0 && jv && i < p.dk) ? p.h0[((size_t)bh * p.dk + i) * p.dv + j]
                                                      : 0.f;
    for (int c = 0; c < p.nc; c++) {
        const int t0 = c * DC;
        const size_t ch = (size_t)bh * p.nc + c;
        __syncthreads();
        stage_kq<E, LDK>(Ks, Qs, k, q, p, b, h, t0);
        {
            float vr[8];
#pragma unroll
            for (int a = 0; a < 8; a++) {
                int gt = t0 + w + 8 * a;
                vr[a] = (gt < p.T && jv) ? ttt_ld<E>(v, drow(p, b, gt, h) * p.dv + j) : 0.f;
            }
            stage_tm<false>(Ts, Ms, p.Tw + ch * DC * DC, p.Mw + ch * DC * DC);
#pragma unroll
            for (int a = 0; a < 8; a++) Vs[(w + 8 * a) * DBV + lane] = vr[a];
        }
        if (tid < DC) {
            int gt = t0 + tid;
            Gs[tid] = p.Gw[ch * DC + tid];
            Ls[tid] = p.Lw[ch * DC + tid];
            Bs[tid] = gt < p.T ? (p.beta ? p.beta[drow(p, b, gt, h)] : 1.f) : 0.f;
        }
        if ((p.write_out & DW_SAVE) && jv)
            for (int i = w; i < p.dk; i += 8)
                p.S0w[(ch * p.dk + i) * p.dv + j] = Ss[i * DBV + lane];
        __syncthreads();
        float x[8], y[8];
#pragma unroll
        for (int a = 0; a < 8; a++) x[a] = y[a] = 0.f;
#pragma unroll 2
        for (int kk = 0; kk < LDK; kk += 4) {
            float s0 = Ss[kk * DBV + lane], s1 = Ss[(kk + 1) * DBV + lane],
                  s2 = Ss[(kk + 2) * DBV + lane], s3 = Ss[(kk + 3) * DBV + lane];
#pragma unroll
            for (int a = 0; a < 8; a++) {
                int t = w + 8 * a;
                float4 k4 = ld4s(Ks + t * LDK + kk);
                float4 q4 = ld4s(Qs + t * LDK + kk);
                x[a] = fmaf(k4.x, s0, fmaf(k4.y, s1, fmaf(k4.z, s2, fmaf(k4.w, s3, x[a]))));
                y[a] = fmaf(q4.x, s0, fmaf(q4.y, s1, fmaf(q4.z, s2, fmaf(q4.w, s3, y[a]))));
            }
        }
#pragma unroll
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float u = Vs[t * DBV + lane] - Gs[t] * x[a];
            if ((p.write_out & DW_SAVE) && jv) p.Uw[(ch * DC + t) * p.dv + j] = u;
            Rs[t * DBV + lane] = Bs[t] * u;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float acc = 0.f;
            for (int s = 0; s <= t; s += 4) { /* T_ts = 0 for s > t */
                float4 t4 = *(const float4 *)&Ts[t * DLC + s];
                acc = fmaf(t4.x, Rs[s * DBV + lane], acc);
                acc = fmaf(t4.y, Rs[(s + 1) * DBV + lane], acc);
                acc = fmaf(t4.z, Rs[(s + 2) * DBV + lane], acc);
                acc = fmaf(t4.w, Rs[(s + 3) * DBV + lane], acc);
            }
            Ds[t * DBV + lane] = acc;
        }
        __syncthreads();
        if (p.write_out & DW_OUT) {
            E *o = (E *)p.o;
#pragma unroll
            for (int a = 0; a < 8; a++) {
                int t = w + 8 * a, gt = t0 + t;
                float acc = 0.f;
                for (int s = 0; s <= t; s += 4) {
                    float4 m4 = *(const float4 *)&Ms[t * DLC + s];
                    acc = fmaf(m4.x, Ds[s * DBV + lane], acc);
                    acc = fmaf(m4.y, Ds[(s + 1) * DBV + lane], acc);
                    acc = fmaf(m4.z, Ds[(s + 2) * DBV + lane], acc);
                    acc = fmaf(m4.w, Ds[(s + 3) * DBV + lane], acc);
                }
                if (gt < p.T && jv)
                    ttt_st<E>(o, drow(p, b, gt, h) * p.dv + j, p.scale * fmaf(Gs[t], y[a], acc));
            }
        }
        /* S ← Γ_{C−1} S + Kᵀ (λ ⊙ δ); thread (w, lane) owns rows 4(w + 8m) + r of column lane */
        const float gl = Gs[DC - 1];
#pragma unroll
        for (int g4 = w; 4 * g4 < LDK; g4 += 8) {
            float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
#pragma unroll 4
            for (int s = 0; s < DC; s++) {
                float d = Ls[s] * Ds[s * DBV + lane];
                float4 k4 = ld4s(Ks + s * LDK + 4 * g4);
                acc0 = fmaf(k4.x, d, acc0);
                acc1 = fmaf(k4.y, d, acc1);
                acc2 = fmaf(k4.z, d, acc2);
                acc3 = fmaf(k4.w, d, acc3);
            }
            float *sr = &Ss[4 * g4 * DBV + lane];
            sr[0] = fmaf(gl, sr[0], acc0);
            sr[DBV] = fmaf(gl, sr[DBV], acc1);
            sr[2 * DBV] = fmaf(gl, sr[2 * DBV], acc2);
            sr[3 * DBV] = fmaf(gl, sr[3 * DBV], acc3);
        }
    }
    __syncthreads();
    if ((p.write_out & DW_OUT) && p.ht && jv)
        for (int i = w; i < p.dk; i += 8)
            p.ht[((size_t)bh * p.dk + i) * p.dv + j] = Ss[i * DBV + lane];
}

/* ---------------------------------------------------------------------------------------------
 * delta_fwd_mma: the forward of delta_fwd_seq on the tensor cores, for bf16 inputs with d_k ≤ 128,
 * d_k and d_v multiples of 8 and 16-byte aligned q, k, v (docs/gpu.md "Tensor-core forward").
 * One block of BV/8 warps per (sequence, BV-column value tile), BV = 64 or 128, chunks in order;
 * the same equations as delta_fwd_seq. Every product is m16n8k16 bf16 with fp32 accumulation:
 *     X = K S, Y = Q S      K, Q are bf16 inputs (exact); S = S_hi + S_lo (two products each)
 *     δ = T R, M δ          T, M, R, δ split in two; T_hi R_hi + T_hi R_lo + T_lo R_hi
 *     S ← Γ S + Kᵀ (λ ⊙ δ)  λ ⊙ δ split in two
 * so every fp32 operand carries 16 significant bits into a product whose sum is fp32, and the
 * dropped T_lo R_lo term is 2^-18 of the product. The state S stays in fp32 registers for the
 * whole sequence (each warp owns 16-row × 64-column pieces); only its bf16 split goes to shared
 * memory. K and the gates of the next chunk are copied with cp.async while this chunk computes;
 * Q, V and the chunk's T and M (bf16 splits written by delta_prep) while X is formed. One shared
 * buffer holds R, then δ, then λ ⊙ δ. With write_out & DW_SAVE it stores the chunk-start states
 * and U for the backward (and o and ht with write_out & DW_OUT). */

__host__ __device__ constexpr int mma_sk(int ldk) { return ldk + 8; }
__host__ __device__ constexpr size_t mma_smem_bytes(int ldk, int bv) {
    return 2 * (3 * (size_t)DC * mma_sk(ldk) /* K ×2, Q */ + (size_t)DC * (bv + 8) /* V */ +
                4 * (size_t)DC * MSC /* T, M splits */ + 2 * (size_t)ldk * (bv + 8) /* S split */ +
                2 * (size_t)DC * (bv + 8) /* R, δ, λδ split */) +
           2 * 3 * DC * sizeof(float) /* Γ, λ, β ×2 */;
}

template <int LDK, int BV>
__global__ void __launch_bounds__(4 * BV, 1) delta_fwd_mma(delta_params p) {
    constexpr int SK = mma_sk(LDK), SV = BV + 8, NT = 4 * BV;
    constexpr int NTU = LDK >= 128 ? 8 : 4; /* n-tiles of the state update per warp */
    extern __shared__ float4 sm4[];
    __nv_bfloat16 *K0 = (__nv_bfloat16 *)sm4; /* buffer i at K0 + i·DC·SK */
    __nv_bfloat16 *Qs = K0 + 2 * DC * SK, *Vs = Qs + DC * SK;
    __nv_bfloat16 *T1 = Vs + DC * SV, *T2 = T1 + DC * MSC, *M1 = T2 + DC * MSC,
                  *M2 = M1 + DC * MSC;
    __nv_bfloat16 *S1 = M2 + DC * MSC, *S2 = S1 + LDK * SV;
    __nv_bfloat16 *R1 = S2 + LDK * SV, *R2 = R1 + DC * SV;
    float *gts = (float *)(R2 + DC * SV); /* [2][3][C]: Γ, λ, β of the two buffered chunks */

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c2 = 2 * (lane & 3);
    const int nvt = (p.dv + BV - 1) / BV;
    const int bh = blockIdx.x / nvt, j0 = (blockIdx.x % nvt) * BV, b = bh / p.H, h = bh % p.H;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)p.q, *k = (const __nv_bfloat16 *)p.k,
                        *v = (const __nv_bfloat16 *)p.v;
    /* C × BV products: rows 16 mt.., n-tiles nt0..nt0+3; the update: rows 16 mu.., n-tiles
     * nu0..nu0+NTU−1 */
    const int mt = w & 3, nt0 = 4 * (w >> 2);
    const int mu = LDK >= 128 ? (w & 7) : (w & 3);
    const int nu0 = LDK >= 128 ? 8 * (w >> 3) : 4 * (w >> 2);
    /* ldmatrix lane offsets: A untransposed (row, col) and B transposed (row, col) */
    const int a_r = lane & 15, a_c = (lane >> 4) * 8;
    const int b_r = (lane & 7) + ((lane >> 3) & 1) * 8, b_c = (lane >> 4) * 8;

    auto load_kg = [&](int c, int buf) { /* K and Γ, λ, β of chunk c → buffer buf */
        const int t0 = c * DC;
        for (int u = tid; u < DC * (LDK / 8); u += NT) {
            int t = u / (LDK / 8), c8 = 8 * (u % (LDK / 8)), gt = t0 + t;
            bool in = gt < p.T && c8 < p.dk;
            size_t o = in ? drow(p, b, gt, h) * p.dk + c8 : 0;
            ttt_cp_async16(K0 + buf * DC * SK + t * SK + c8, k + o, in);
        }
        if (tid < 48) {
            const size_t ch = (size_t)bh * p.nc + c;
            const float *src = tid < 16 ? p.Gw : tid < 32 ? p.Lw : p.Bw;
            int part = tid >> 4, q4 = 4 * (tid & 15);
            ttt_cp_async16(gts + (buf * 3 + part) * DC + q4, src + ch * DC + q4, true);
        }
    };
    auto load_qvtm = [&](int c) { /* Q, V and the T, M splits of chunk c */
        const int t0 = c * DC;
        for (int u = tid; u < DC * (LDK / 8); u += NT) {
            int t = u / (LDK / 8), c8 = 8 * (u % (LDK / 8)), gt = t0 + t;
            bool in = gt < p.T && c8 < p.dk;
            size_t o = in ? drow(p, b, gt, h) * p.dk + c8 : 0;
            ttt_cp_async16(Qs + t * SK + c8, q + o, in);
        }
        for (int u = tid; u < DC * (BV / 8); u += NT) {
            int t = u / (BV / 8), c8 = 8 * (u % (BV / 8)), gt = t0 + t;
            bool in = gt < p.T && j0 + c8 < p.dv;
            size_t o = in ? drow(p, b, gt, h) * p.dv + j0 + c8 : 0;
            ttt_cp_async16(Vs + t * SV + c8, v + o, in);
        }
        const __nv_bfloat16 *src = p.Tsw + ((size_t)bh * p.nc + c) * 4 * DC * DC;
        for (int u = tid; u < 4 * DC * 8; u += NT) {
            int m = u / (DC * 8), r = (u / 8) % DC, c8 = 8 * (u & 7);
            ttt_cp_async16(T1 + m * DC * MSC + r * MSC + c8, src + (m * DC + r) * DC + c8, true);
        }
    };
    /* a 16 × 8 accumulator tile (rows row0, row0 + 8; columns col0, col0 + 1) as hi + lo */
    auto store_split = [&](__nv_bfloat16 *hi, __nv_bfloat16 *lo, int stride, int row0, int col0,
                           const float *f) {
        ttt_split2(f[0], f[1], (__nv_bfloat162 *)(hi + row0 * stride + col0),
                   (__nv_bfloat162 *)(lo + row0 * stride + col0));
        ttt_split2(f[2], f[3], (__nv_bfloat162 *)(hi + (row0 + 8) * stride + col0),
                   (__nv_bfloat162 *)(lo + (row0 + 8) * stride + col0));
    };
    /* acc[0..3] += A (rows 16 mt.., from a1 + a2 split, C × C) · B (split, rows 0..16 mt + 15);
     * with a2 = NULL, A is exact (one term) */
    auto tri_product = [&](float (*acc)[4], const __nv_bfloat16 *a1, const __nv_bfloat16 *a2,
                           const __nv_bfloat16 *bh1, const __nv_bfloat16 *bh2) {
        for (int kk = 0; kk <= 16 * mt; kk += 16) {
            uint32_t x1[4], x2[4];
            ttt_ldsm4(x1, a1 + (16 * mt + a_r) * MSC + kk + a_c);
            ttt_ldsm4(x2, a2 + (16 * mt + a_r) * MSC + kk + a_c);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t y1[4], y2[4];
                int off = (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c;
                ttt_ldsm4_t(y1, bh1 + off);
                ttt_ldsm4_t(y2, bh2 + off);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(acc[2 * np + hh], x1, y1[2 * hh], y1[2 * hh + 1]);
                    ttt_mma_bf16(acc[2 * np + hh], x1, y2[2 * hh], y2[2 * hh + 1]);
                    ttt_mma_bf16(acc[2 * np + hh], x2, y1[2 * hh], y1[2 * hh + 1]);
                }
            }
        }
    };
    /* acc[0..3] = A (rows 16 mt.. of the C × LDK input tile `in`, exact) · S (split) */
    auto state_product = [&](float (*acc)[4], const __nv_bfloat16 *in) {
#pragma unroll 2
        for (int kk = 0; kk < LDK; kk += 16) {
            uint32_t a[4];
            ttt_ldsm4(a, in + (16 * mt + a_r) * SK + kk + a_c);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t s1[4], s2[4];
                int off = (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c;
                ttt_ldsm4_t(s1, S1 + off);
                ttt_ldsm4_t(s2, S2 + off);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(acc[2 * np + hh], a, s1[2 * hh], s1[2 * hh + 1]);
                    ttt_mma_bf16(acc[2 * np + hh], a, s2[2 * hh], s2[2 * hh + 1]);
                }
            }
        }
    };

    /* the initial state */
    float S[NTU][4];
#pragma unroll
    for (int n = 0; n < NTU; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mu + g + 8 * (e >> 1), j = j0 + 8 * (nu0 + n) + c2 + (e & 1);
            S[n][e] = (p.h0 && i < p.dk && j < p.dv) ? p.h0[((size_t)bh * p.dk + i) * p.dv + j]
                                                     : 0.f;
        }
#pragma unroll
    for (int n = 0; n < NTU; n++) store_split(S1, S2, SV, 16 * mu + g, 8 * (nu0 + n) + c2, S[n]);

    load_kg(0, 0);
    ttt_cp_async_commit();
    for (int c = 0; c < p.nc; c++) {
        const int buf = c & 1, t0 = c * DC;
        const size_t ch = (size_t)bh * p.nc + c;
        const __nv_bfloat16 *Kc = K0 + buf * DC * SK;
        const float *Gc = gts + buf * 3 * DC, *Lc = Gc + DC, *Bc = Lc + DC;
        load_qvtm(c);
        ttt_cp_async_commit();
        if (c + 1 < p.nc) load_kg(c + 1, buf ^ 1);
        ttt_cp_async_commit();
        ttt_cp_async_wait<2>(); /* this chunk's K and gates */
        __syncthreads();        /* … from every thread; and S's split */

        if ((p.write_out & DW_SAVE)) /* the chunk-start state, for the backward */
#pragma unroll
            for (int n = 0; n < NTU; n++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + n) + c2;
                    if (i < p.dk && j < p.dv)
                        *(float2 *)&p.S0w[(ch * p.dk + i) * p.dv + j] =
                            make_float2(S[n][e], S[n][e + 1]);
                }

        float X[4][4] = {};
        state_product(X, Kc); /* X = K S */
        ttt_cp_async_wait<1>(); /* Q, V, T, M */
        __syncthreads();
        /* U = V − Γ ⊙ X, R = β ⊙ U (split) */
#pragma unroll
        for (int n = 0; n < 4; n++) {
            float r[4];
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int t = 16 * mt + g + 4 * e, jj = 8 * (nt0 + n) + c2;
                float2 vv = __bfloat1622float2(*(const __nv_bfloat162 *)(Vs + t * SV + jj));
                float u0 = vv.x - Gc[t] * X[n][e], u1 = vv.y - Gc[t] * X[n][e + 1];
                if ((p.write_out & DW_SAVE) && j0 + jj < p.dv) /* padded rows too: U = 0 there */
                    *(float2 *)&p.Uw[(ch * DC + t) * p.dv + j0 + jj] = make_float2(u0, u1);
                r[e] = Bc[t] * u0;
                r[e + 1] = Bc[t] * u1;
            }
            store_split(R1, R2, SV, 16 * mt + g, 8 * (nt0 + n) + c2, r);
        }
        __syncthreads();
        float Dl[4][4] = {};
        tri_product(Dl, T1, T2, R1, R2); /* δ = T R (T lower triangular) */
        __syncthreads();                 /* every warp has read R */
        if (p.write_out & DW_OUT) {
#pragma unroll
            for (int n = 0; n < 4; n++) store_split(R1, R2, SV, 16 * mt + g, 8 * (nt0 + n) + c2, Dl[n]);
            __syncthreads();
            /* O = scale (Γ ⊙ Q S + M δ) */
            float Y[4][4] = {};
            state_product(Y, Qs);
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) Y[n][e] *= Gc[16 * mt + g + 8 * (e >> 1)];
            tri_product(Y, M1, M2, R1, R2);
            __nv_bfloat16 *o = (__nv_bfloat16 *)p.o;
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    int t = 16 * mt + g + 4 * e, j = j0 + 8 * (nt0 + n) + c2;
                    if (t0 + t < p.T && j < p.dv)
                        *(__nv_bfloat162 *)(o + drow(p, b, t0 + t, h) * p.dv + j) =
                            __floats2bfloat162_rn(p.scale * Y[n][e], p.scale * Y[n][e + 1]);
                }
            __syncthreads(); /* every warp has read δ and S's split */
        }
        /* λ ⊙ δ (split) */
#pragma unroll
        for (int n = 0; n < 4; n++) {
            float l[4];
#pragma unroll
            for (int e = 0; e < 4; e++) l[e] = Lc[16 * mt + g + 8 * (e >> 1)] * Dl[n][e];
            store_split(R1, R2, SV, 16 * mt + g, 8 * (nt0 + n) + c2, l);
        }
        __syncthreads();
        /* S ← Γ_{C−1} S + Kᵀ (λ ⊙ δ); A = Kᵀ read transposed from K's rows */
        {
            const float gl = Gc[DC - 1];
#pragma unroll
            for (int n = 0; n < NTU; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[n][e] *= gl;
#pragma unroll
            for (int kk = 0; kk < DC; kk += 16) {
                uint32_t a[4];
                ttt_ldsm4_t(a, Kc + (kk + (lane >> 4) * 8 + (lane & 7)) * SK + 16 * mu +
                                   ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int np = 0; np < NTU / 2; np++) {
                    uint32_t e1[4], e2[4];
                    int off = (kk + b_r) * SV + 8 * (nu0 + 2 * np) + b_c;
                    ttt_ldsm4_t(e1, R1 + off);
                    ttt_ldsm4_t(e2, R2 + off);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        ttt_mma_bf16(S[2 * np + hh], a, e1[2 * hh], e1[2 * hh + 1]);
                        ttt_mma_bf16(S[2 * np + hh], a, e2[2 * hh], e2[2 * hh + 1]);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < NTU; n++)
                store_split(S1, S2, SV, 16 * mu + g, 8 * (nu0 + n) + c2, S[n]);
        }
        __syncthreads(); /* S's split, and every read of this chunk's buffers, are done */
    }
    if ((p.write_out & DW_OUT) && p.ht)
#pragma unroll
        for (int n = 0; n < NTU; n++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + n) + c2;
                if (i < p.dk && j < p.dv)
                    *(float2 *)&p.ht[((size_t)bh * p.dk + i) * p.dv + j] =
                        make_float2(S[n][e], S[n][e + 1]);
            }
}

/* ---------------------------------------------------------------------------------------------
 * delta_bwd_mma: delta_bwd_seq on the tensor cores (bf16 inputs, the conditions of
 * delta_fwd_mma; docs/gpu.md "Tensor-core backward"). One block of 8 warps per (sequence,
 * 64-column value tile), chunks in reverse; dS (the gradient of the chunk-end state) stays in fp32
 * registers. Per chunk, with the products and splits of the forward:
 *     Z = K dS                              K exact, dS split
 *     dδ = scale Mᵀ dO + λ ⊙ Z              Mᵀ split (read transposed), dO exact (a bf16 input)
 *     dR = Tᵀ dδ,  d_v = β ⊙ dR             Tᵀ and dδ split
 *     dS ← Γ_{C−1} dS + Qᵀ (scale Γ ⊙ dO) + Kᵀ (−β ⊙ Γ ⊙ dR)   Qᵀ, Kᵀ exact, the rest split
 * It writes the chunk-end gradients and dR for delta_bwd_cc and delta_bwd_qk, d_v and d_h0. */
__host__ __device__ constexpr size_t mma_bwd_smem_bytes(int ldk) {
    return 2 * (3 * (size_t)DC * mma_sk(ldk) /* K ×2, Q */ + (size_t)DC * 72 /* dO */ +
                4 * (size_t)DC * MSC /* T, M splits */ + 2 * (size_t)ldk * 72 /* dS split */ +
                4 * (size_t)DC * 72 /* dδ (then −βΓ dR) and scale Γ dO splits */) +
           2 * 3 * DC * sizeof(float);
}

template <int LDK>
__global__ void __launch_bounds__(NTHR, 1) delta_bwd_mma(delta_params p) {
    constexpr int SK = mma_sk(LDK), BV = 64, SV = 72;
    constexpr int NTU = LDK >= 128 ? 8 : 4;
    extern __shared__ float4 sm4[];
    __nv_bfloat16 *K0 = (__nv_bfloat16 *)sm4;
    __nv_bfloat16 *Qs = K0 + 2 * DC * SK, *Os = Qs + DC * SK;
    __nv_bfloat16 *T1 = Os + DC * SV, *T2 = T1 + DC * MSC, *M1 = T2 + DC * MSC,
                  *M2 = M1 + DC * MSC;
    __nv_bfloat16 *S1 = M2 + DC * MSC, *S2 = S1 + LDK * SV;
    __nv_bfloat16 *R1 = S2 + LDK * SV, *R2 = R1 + DC * SV, *A1 = R2 + DC * SV,
                  *A2 = A1 + DC * SV;
    float *gts = (float *)(A2 + DC * SV);

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c2 = 2 * (lane & 3);
    const int nvt = (p.dv + BV - 1) / BV;
    const int bh = blockIdx.x / nvt, j0 = (blockIdx.x % nvt) * BV, b = bh / p.H, h = bh % p.H;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)p.q, *k = (const __nv_bfloat16 *)p.k,
                        *dO = (const __nv_bfloat16 *)p.d_o;
    const int mt = w & 3, nt0 = 4 * (w >> 2);
    const int mu = LDK >= 128 ? w : (w & 3), nu0 = LDK >= 128 ? 0 : 4 * (w >> 2);
    const int a_r = lane & 15, a_c = (lane >> 4) * 8;
    const int b_r = (lane & 7) + ((lane >> 3) & 1) * 8, b_c = (lane >> 4) * 8;
    /* A transposed (Aᵀ of a tile stored by rows k): row and column offsets */
    const int t_r = (lane >> 4) * 8 + (lane & 7), t_c = ((lane >> 3) & 1) * 8;

    auto load_kg = [&](int c, int buf) {
        const int t0 = c * DC;
        for (int u = tid; u < DC * (LDK / 8); u += NTHR) {
            int t = u / (LDK / 8), c8 = 8 * (u % (LDK / 8)), gt = t0 + t;
            bool in = gt < p.T && c8 < p.dk;
            size_t o = in ? drow(p, b, gt, h) * p.dk + c8 : 0;
            ttt_cp_async16(K0 + buf * DC * SK + t * SK + c8, k + o, in);
        }
        if (tid < 48) {
            const size_t ch = (size_t)bh * p.nc + c;
            const float *src = tid < 16 ? p.Gw : tid < 32 ? p.Lw : p.Bw;
            int part = tid >> 4, q4 = 4 * (tid & 15);
            ttt_cp_async16(gts + (buf * 3 + part) * DC + q4, src + ch * DC + q4, true);
        }
    };
    auto load_qotm = [&](int c) {
        const int t0 = c * DC;
        for (int u = tid; u < DC * (LDK / 8); u += NTHR) {
            int t = u / (LDK / 8), c8 = 8 * (u % (LDK / 8)), gt = t0 + t;
            bool in = gt < p.T && c8 < p.dk;
            size_t o = in ? drow(p, b, gt, h) * p.dk + c8 : 0;
            ttt_cp_async16(Qs + t * SK + c8, q + o, in);
        }
        for (int u = tid; u < DC * (BV / 8); u += NTHR) {
            int t = u / (BV / 8), c8 = 8 * (u % (BV / 8)), gt = t0 + t;
            bool in = gt < p.T && j0 + c8 < p.dv;
            size_t o = in ? drow(p, b, gt, h) * p.dv + j0 + c8 : 0;
            ttt_cp_async16(Os + t * SV + c8, dO + o, in);
        }
        const __nv_bfloat16 *src = p.Tsw + ((size_t)bh * p.nc + c) * 4 * DC * DC;
        for (int u = tid; u < 4 * DC * 8; u += NTHR) {
            int m = u / (DC * 8), r = (u / 8) % DC, c8 = 8 * (u & 7);
            ttt_cp_async16(T1 + m * DC * MSC + r * MSC + c8, src + (m * DC + r) * DC + c8, true);
        }
    };
    auto store_split = [&](__nv_bfloat16 *hi, __nv_bfloat16 *lo, int row0, int col0,
                           const float *f) {
        ttt_split2(f[0], f[1], (__nv_bfloat162 *)(hi + row0 * SV + col0),
                   (__nv_bfloat162 *)(lo + row0 * SV + col0));
        ttt_split2(f[2], f[3], (__nv_bfloat162 *)(hi + (row0 + 8) * SV + col0),
                   (__nv_bfloat162 *)(lo + (row0 + 8) * SV + col0));
    };

    float S[NTU][4]; /* dS */
#pragma unroll
    for (int n = 0; n < NTU; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mu + g + 8 * (e >> 1), j = j0 + 8 * (nu0 + n) + c2 + (e & 1);
            S[n][e] = (p.d_ht && i < p.dk && j < p.dv)
                          ? p.d_ht[((size_t)bh * p.dk + i) * p.dv + j]
                          : 0.f;
        }
#pragma unroll
    for (int n = 0; n < NTU; n++) store_split(S1, S2, 16 * mu + g, 8 * (nu0 + n) + c2, S[n]);

    load_kg(p.nc - 1, (p.nc - 1) & 1);
    ttt_cp_async_commit();
    for (int c = p.nc - 1; c >= 0; c--) {
        const int buf = c & 1, t0 = c * DC;
        const size_t ch = (size_t)bh * p.nc + c;
        const __nv_bfloat16 *Kc = K0 + buf * DC * SK;
        const float *Gc = gts + buf * 3 * DC, *Lc = Gc + DC, *Bc = Lc + DC;
        load_qotm(c);
        ttt_cp_async_commit();
        if (c > 0) load_kg(c - 1, buf ^ 1);
        ttt_cp_async_commit();
        ttt_cp_async_wait<2>();
        __syncthreads();

        /* the chunk-end gradient, for delta_bwd_qk */
#pragma unroll
        for (int n = 0; n < NTU; n++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + n) + c2;
                if (i < p.dk && j < p.dv)
                    *(float2 *)&p.dSw[(ch * p.dk + i) * p.dv + j] =
                        make_float2(S[n][e], S[n][e + 1]);
            }
        /* Z = K dS */
        float Z[4][4] = {};
#pragma unroll 2
        for (int kk = 0; kk < LDK; kk += 16) {
            uint32_t a[4];
            ttt_ldsm4(a, Kc + (16 * mt + a_r) * SK + kk + a_c);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t s1[4], s2[4];
                int off = (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c;
                ttt_ldsm4_t(s1, S1 + off);
                ttt_ldsm4_t(s2, S2 + off);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(Z[2 * np + hh], a, s1[2 * hh], s1[2 * hh + 1]);
                    ttt_mma_bf16(Z[2 * np + hh], a, s2[2 * hh], s2[2 * hh + 1]);
                }
            }
        }
        ttt_cp_async_wait<1>(); /* Q, dO, T, M */
        __syncthreads();
        /* dδ = scale Mᵀ dO + λ ⊙ Z; (Mᵀ)_ts = M_st vanishes for s < t: k-tiles from the diagonal */
        float Dd[4][4] = {};
        for (int kk = 16 * mt; kk < DC; kk += 16) {
            uint32_t x1[4], x2[4];
            ttt_ldsm4_t(x1, M1 + (kk + t_r) * MSC + 16 * mt + t_c);
            ttt_ldsm4_t(x2, M2 + (kk + t_r) * MSC + 16 * mt + t_c);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t y[4];
                ttt_ldsm4_t(y, Os + (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(Dd[2 * np + hh], x1, y[2 * hh], y[2 * hh + 1]);
                    ttt_mma_bf16(Dd[2 * np + hh], x2, y[2 * hh], y[2 * hh + 1]);
                }
            }
        }
#pragma unroll
        for (int n = 0; n < 4; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                Dd[n][e] = fmaf(p.scale, Dd[n][e], Lc[16 * mt + g + 8 * (e >> 1)] * Z[n][e]);
            store_split(R1, R2, 16 * mt + g, 8 * (nt0 + n) + c2, Dd[n]);
        }
        __syncthreads();
        /* dR = Tᵀ dδ (T lower triangular: k-tiles from the diagonal) */
        float dR[4][4] = {};
        for (int kk = 16 * mt; kk < DC; kk += 16) {
            uint32_t x1[4], x2[4];
            ttt_ldsm4_t(x1, T1 + (kk + t_r) * MSC + 16 * mt + t_c);
            ttt_ldsm4_t(x2, T2 + (kk + t_r) * MSC + 16 * mt + t_c);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t y1[4], y2[4];
                int off = (kk + b_r) * SV + 8 * (nt0 + 2 * np) + b_c;
                ttt_ldsm4_t(y1, R1 + off);
                ttt_ldsm4_t(y2, R2 + off);
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    ttt_mma_bf16(dR[2 * np + hh], x1, y1[2 * hh], y1[2 * hh + 1]);
                    ttt_mma_bf16(dR[2 * np + hh], x1, y2[2 * hh], y2[2 * hh + 1]);
                    ttt_mma_bf16(dR[2 * np + hh], x2, y1[2 * hh], y1[2 * hh + 1]);
                }
            }
        }
        __syncthreads(); /* every warp has read dδ */
        __nv_bfloat16 *dv = (__nv_bfloat16 *)p.d_v;
#pragma unroll
        for (int n = 0; n < 4; n++) {
            float a1[4], a2[4];
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int t = 16 * mt + g + 4 * e, jj = 8 * (nt0 + n) + c2, j = j0 + jj;
                if (j < p.dv) {
                    *(float2 *)&p.dRw[(ch * DC + t) * p.dv + j] =
                        make_float2(dR[n][e], dR[n][e + 1]);
                    if (dv && t0 + t < p.T)
                        *(__nv_bfloat162 *)(dv + drow(p, b, t0 + t, h) * p.dv + j) =
                            __floats2bfloat162_rn(Bc[t] * dR[n][e], Bc[t] * dR[n][e + 1]);
                }
                float2 o2 = __bfloat1622float2(*(const __nv_bfloat162 *)(Os + t * SV + jj));
                float sg = p.scale * Gc[t], bg = -Bc[t] * Gc[t];
                a1[e] = sg * o2.x;
                a1[e + 1] = sg * o2.y;
                a2[e] = bg * dR[n][e];
                a2[e + 1] = bg * dR[n][e + 1];
            }
            store_split(A1, A2, 16 * mt + g, 8 * (nt0 + n) + c2, a1);
            store_split(R1, R2, 16 * mt + g, 8 * (nt0 + n) + c2, a2);
        }
        __syncthreads();
        /* dS ← Γ_{C−1} dS + Qᵀ a1 + Kᵀ a2 */
        {
            const float gl = Gc[DC - 1];
#pragma unroll
            for (int n = 0; n < NTU; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[n][e] *= gl;
#pragma unroll
            for (int kk = 0; kk < DC; kk += 16) {
                uint32_t aq[4], ak[4];
                ttt_ldsm4_t(aq, Qs + (kk + t_r) * SK + 16 * mu + t_c);
                ttt_ldsm4_t(ak, Kc + (kk + t_r) * SK + 16 * mu + t_c);
#pragma unroll
                for (int np = 0; np < NTU / 2; np++) {
                    uint32_t e1[4], e2[4], f1[4], f2[4];
                    int off = (kk + b_r) * SV + 8 * (nu0 + 2 * np) + b_c;
                    ttt_ldsm4_t(e1, A1 + off);
                    ttt_ldsm4_t(e2, A2 + off);
                    ttt_ldsm4_t(f1, R1 + off);
                    ttt_ldsm4_t(f2, R2 + off);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        ttt_mma_bf16(S[2 * np + hh], aq, e1[2 * hh], e1[2 * hh + 1]);
                        ttt_mma_bf16(S[2 * np + hh], aq, e2[2 * hh], e2[2 * hh + 1]);
                        ttt_mma_bf16(S[2 * np + hh], ak, f1[2 * hh], f1[2 * hh + 1]);
                        ttt_mma_bf16(S[2 * np + hh], ak, f2[2 * hh], f2[2 * hh + 1]);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < NTU; n++)
                store_split(S1, S2, 16 * mu + g, 8 * (nu0 + n) + c2, S[n]);
        }
        __syncthreads();
    }
    if (p.d_h0)
#pragma unroll
        for (int n = 0; n < NTU; n++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mu + g + 4 * e, j = j0 + 8 * (nu0 + n) + c2;
                if (i < p.dk && j < p.dv)
                    *(float2 *)&p.d_h0[((size_t)bh * p.dk + i) * p.dv + j] =
                        make_float2(S[n][e], S[n][e + 1]);
            }
}

/* ---------------------------------------------------------------------------------------------
 * delta_bwd_seq: one block per (sequence, value tile), chunks in reverse order; dS (the gradient
 * with respect to the chunk-end state, starting from d_ht) stays in shared memory. Per chunk:
 *     store dS (the chunk-end gradient, for delta_bwd_qk)
 *     dδ = scale Mᵀ dO + λ ⊙ (K dS)
 *     dR = Tᵀ dδ,   d_v = β ⊙ dR
 *     dS ← Γ_{C−1} dS + scale Qᵀ (Γ ⊙ dO) − Kᵀ (β ⊙ Γ ⊙ dR)
 * and after the first chunk dS = d_h0. Tᵀ and Mᵀ are stored transposed in shared memory so
 * that each row is read as float4 (their zero triangles make the padded reads harmless). */
template <typename E, int LDK>
__global__ void __launch_bounds__(NTHR, seq_blocks_per_sm(LDK, sizeof(E)))
    delta_bwd_seq(delta_params p) {
    extern __shared__ float4 sm4[];
    E *Ks = (E *)sm4, *Qs = Ks + DC * LDK;
    float *dS = (float *)(Qs + DC * LDK), *dOs = dS + LDK * DBV;
    float *Dd = dOs + DC * DBV, *dRs = Dd + DC * DBV, *Tt = dRs + DC * DBV, *Mt = Tt + DC * DLC;
    float *Gs = Mt + DC * DLC, *Ls = Gs + DC, *Bs = Ls + DC;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int bh = blockIdx.x / p.nvt, j0 = (blockIdx.x % p.nvt) * DBV, b = bh / p.H,
              h = bh % p.H;
    const int j = j0 + lane;
    const bool jv = j < p.dv;
    const E *q = (const E *)p.q, *k = (const E *)p.k, *dO = (const E *)p.d_o;
    for (int i = w; i < LDK; i += 8)
        dS[i * DBV + lane] =
            (p.d_ht && jv && i < p.dk) ? p.d_ht[((size_t)bh * p.dk + i) * p.dv + j] : 0.f;
    for (int c = p.nc - 1; c >= 0; c--) {
        const int t0 = c * DC;
        const size_t ch = (size_t)bh * p.nc + c;
        __syncthreads();
        stage_kq<E, LDK>(Ks, Qs, k, q, p, b, h, t0);
        {
            float orr[8];
#pragma unroll
            for (int a = 0; a < 8; a++) {
                int gt = t0 + w + 8 * a;
                orr[a] = (gt < p.T && jv) ? ttt_ld<E>(dO, drow(p, b, gt, h) * p.dv + j) : 0.f;
            }
            stage_tm<true>(Tt, Mt, p.Tw + ch * DC * DC, p.Mw + ch * DC * DC);
#pragma unroll
            for (int a = 0; a < 8; a++) dOs[(w + 8 * a) * DBV + lane] = orr[a];
        }
        if (tid < DC) {
            int gt = t0 + tid;
            Gs[tid] = p.Gw[ch * DC + tid];
            Ls[tid] = p.Lw[ch * DC + tid];
            Bs[tid] = gt < p.T ? (p.beta ? p.beta[drow(p, b, gt, h)] : 1.f) : 0.f;
        }
        if (jv)
            for (int i = w; i < p.dk; i += 8)
                p.dSw[(ch * p.dk + i) * p.dv + j] = dS[i * DBV + lane];
        __syncthreads();
        float z[8];
#pragma unroll
        for (int a = 0; a < 8; a++) z[a] = 0.f;
#pragma unroll 2
        for (int kk = 0; kk < LDK; kk += 4) {
            float s0 = dS[kk * DBV + lane], s1 = dS[(kk + 1) * DBV + lane],
                  s2 = dS[(kk + 2) * DBV + lane], s3 = dS[(kk + 3) * DBV + lane];
#pragma unroll
            for (int a = 0; a < 8; a++) {
                float4 k4 = ld4s(Ks + (w + 8 * a) * LDK + kk);
                z[a] = fmaf(k4.x, s0, fmaf(k4.y, s1, fmaf(k4.z, s2, fmaf(k4.w, s3, z[a]))));
            }
        }
#pragma unroll
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float acc = 0.f;
            for (int s = t & ~3; s < DC; s += 4) { /* (Mᵀ)_ts = M_st = 0 for s < t */
                float4 m4 = *(const float4 *)&Mt[t * DLC + s];
                acc = fmaf(m4.x, dOs[s * DBV + lane], acc);
                acc = fmaf(m4.y, dOs[(s + 1) * DBV + lane], acc);
                acc = fmaf(m4.z, dOs[(s + 2) * DBV + lane], acc);
                acc = fmaf(m4.w, dOs[(s + 3) * DBV + lane], acc);
            }
            Dd[t * DBV + lane] = fmaf(p.scale, acc, Ls[t] * z[a]);
        }
        __syncthreads();
        E *dv = (E *)p.d_v;
#pragma unroll
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a, gt = t0 + t;
            float acc = 0.f;
            for (int s = t & ~3; s < DC; s += 4) {
                float4 t4 = *(const float4 *)&Tt[t * DLC + s];
                acc = fmaf(t4.x, Dd[s * DBV + lane], acc);
                acc = fmaf(t4.y, Dd[(s + 1) * DBV + lane], acc);
                acc = fmaf(t4.z, Dd[(s + 2) * DBV + lane], acc);
                acc = fmaf(t4.w, Dd[(s + 3) * DBV + lane], acc);
            }
            dRs[t * DBV + lane] = acc;
            if (jv) p.dRw[(ch * DC + t) * p.dv + j] = acc;
            if (dv && jv && gt < p.T) ttt_st<E>(dv, drow(p, b, gt, h) * p.dv + j, Bs[t] * acc);
        }
        __syncthreads();
        const float gl = Gs[DC - 1];
#pragma unroll
        for (int g4 = w; 4 * g4 < LDK; g4 += 8) {
            float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
#pragma unroll 4
            for (int s = 0; s < DC; s++) {
                float a1 = p.scale * Gs[s] * dOs[s * DBV + lane];
                float a2 = -Bs[s] * Gs[s] * dRs[s * DBV + lane];
                float4 q4 = ld4s(Qs + s * LDK + 4 * g4);
                float4 k4 = ld4s(Ks + s * LDK + 4 * g4);
                acc0 = fmaf(q4.x, a1, fmaf(k4.x, a2, acc0));
                acc1 = fmaf(q4.y, a1, fmaf(k4.y, a2, acc1));
                acc2 = fmaf(q4.z, a1, fmaf(k4.z, a2, acc2));
                acc3 = fmaf(q4.w, a1, fmaf(k4.w, a2, acc3));
            }
            float *sr = &dS[4 * g4 * DBV + lane];
            sr[0] = fmaf(gl, sr[0], acc0);
            sr[DBV] = fmaf(gl, sr[DBV], acc1);
            sr[2 * DBV] = fmaf(gl, sr[2 * DBV], acc2);
            sr[3 * DBV] = fmaf(gl, sr[3 * DBV], acc3);
        }
    }
    __syncthreads();
    if (p.d_h0 && jv)
        for (int i = w; i < p.dk; i += 8)
            p.d_h0[((size_t)bh * p.dk + i) * p.dv + j] = dS[i * DBV + lane];
}
/* ---------------------------------------------------------------------------------------------
 * delta_bwd_cc: one block per chunk, over 32-column value slices. With dδ = (I + A)ᵀ dR:
 *     δ = T (β ⊙ U)                             (written over U)
 *     dM = scale dO δᵀ (s ≤ t),  dA = −dR δᵀ (s < t)
 *     F = dM ⊙ D,  E_ts = dA_ts β_t D(t,s)     (written over M and A', for delta_bwd_qk)
 *     d_β_t = Σ_s dA_ts A'_ts + dR_t · U_t
 * and the terms of dγ that need no key dimension:
 *     −β_t dR_t·(V_t − U_t)            (the Γ in U; V − U = Γ ⊙ K S)
 *     + Σ_s (H+J)_ts − Σ_r (H+J)_rt    (H = dM ⊙ M, J = dA ⊙ A: the D inside M and A)
 *     − l_t, and Σ_s l_s at C−1        (l_s = δ_s · λ_s (K dS)_s, the λ of the state update,
 *                                       with λ ⊙ (K dS) = (I + A)ᵀ dR − scale Mᵀ dO) */
/* delta_bwd_cc(_mma)'s element (t, s) of the C × C gradients: F = dM ⊙ D and E = dA ⊙ β ⊙ D to
 * the workspace (where M and A' were), H + J and dA ⊙ A' to shared memory for the sums below */
__device__ __forceinline__ void cc_element(const delta_params &p, size_t cc, int t, int s,
                                           float dM, float dA, float d, const float *Ms,
                                           const float *As, const float *Bs, float *HJ,
                                           float *DB) {
    p.Mw[cc + t * DC + s] = dM * d;
    p.Aw[cc + t * DC + s] = dA * Bs[t] * d;
    HJ[t * DLC + s] = dM * Ms[t * DLC + s] + dA * Bs[t] * As[t * DLC + s];
    DB[t * DLC + s] = dA * As[t * DLC + s];
}
/* ... and, once every element is in, the chunk's terms of dγ without the key dimension (row and
 * column sums of H + J, the row sums r1 r2 r3) and d_β (threads 0..C−1) */
__device__ __forceinline__ void cc_gate_terms(const delta_params &p, size_t ch, int b, int h,
                                              int t0, const float *HJ, const float *DB,
                                              const float *Bs, const float *r1, const float *r2,
                                              const float *r3) {
    if (threadIdx.x >= DC) return;
    const int t = threadIdx.x, gt = t0 + t;
    float row = 0.f, col = 0.f, db = 0.f, lsum = 0.f;
    for (int s = 0; s < DC; s++) {
        row += HJ[t * DLC + s];
        col += HJ[s * DLC + t];
        db += DB[t * DLC + s];
    }
    if (t == DC - 1)
        for (int s = 0; s < DC; s++) lsum += r3[s];
    p.gaw[ch * DC + t] = -Bs[t] * r1[t] + row - col - r3[t] + lsum;
    if (p.d_beta && gt < p.T) p.d_beta[drow(p, b, gt, h)] = db + r2[t];
}

template <typename E>
__global__ void __launch_bounds__(NTHR) delta_bwd_cc(delta_params p) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    float *Ts = sm, *Ms = Ts + DC * DLC, *As = Ms + DC * DLC;
    float *Us = As + DC * DLC, *Vs = Us + DC * DT1, *dRs = Vs + DC * DT1, *dOs = dRs + DC * DT1;
    float *Dl = dOs + DC * DT1, *Bs = Dl + DC * DT1, *r1 = Bs + DC, *r2 = r1 + DC, *r3 = r2 + DC;
    double *gam = (double *)(r3 + DC);
    int *rho = (int *)(gam + DC);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, tx = tid & 15, ty = tid >> 4;
    const int bh = blockIdx.x / p.nc, c = blockIdx.x % p.nc, b = bh / p.H, h = bh % p.H;
    const int t0 = c * DC;
    const size_t ch = (size_t)bh * p.nc + c, cc = ch * DC * DC;
    const E *v = (const E *)p.v, *dO = (const E *)p.d_o;
    if (tid < 32) chunk_gates(p, b, h, t0, gam, rho);
    for (int idx = tid; idx < DC * DC; idx += NTHR) {
        int r = idx / DC, s = idx % DC;
        Ts[r * DLC + s] = p.Tw[cc + idx];
        Ms[r * DLC + s] = p.Mw[cc + idx];
        As[r * DLC + s] = p.Aw[cc + idx];
    }
    if (tid < DC) {
        int gt = t0 + tid;
        Bs[tid] = gt < p.T ? (p.beta ? p.beta[drow(p, b, gt, h)] : 1.f) : 0.f;
    }
    float aM[4][4] = {}, aA[4][4] = {};
    float q1[8] = {}, q2[8] = {}, q3[8] = {};
    for (int j0 = 0; j0 < p.dv; j0 += 32) {
        const int j = j0 + lane;
        const bool jv = j < p.dv;
        __syncthreads();
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a, gt = t0 + t;
            bool in = jv && gt < p.T;
            Us[t * DT1 + lane] = jv ? p.Uw[(ch * DC + t) * p.dv + j] : 0.f;
            dRs[t * DT1 + lane] = jv ? p.dRw[(ch * DC + t) * p.dv + j] : 0.f;
            Vs[t * DT1 + lane] = in ? ttt_ld<E>(v, drow(p, b, gt, h) * p.dv + j) : 0.f;
            dOs[t * DT1 + lane] = in ? ttt_ld<E>(dO, drow(p, b, gt, h) * p.dv + j) : 0.f;
        }
        __syncthreads();
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float acc = 0.f;
            for (int s = 0; s <= t; s++)
                acc = fmaf(Ts[t * DLC + s], Bs[s] * Us[s * DT1 + lane], acc);
            Dl[t * DT1 + lane] = acc;
            float du = dRs[t * DT1 + lane], u = Us[t * DT1 + lane];
            q1[a] = fmaf(du, Vs[t * DT1 + lane] - u, q1[a]);
            q2[a] = fmaf(du, u, q2[a]);
        }
        __syncthreads();
        for (int a = 0; a < 8; a++) {
            int s = w + 8 * a;
            float acc = dRs[s * DT1 + lane];
            for (int t = s + 1; t < DC; t++)
                acc = fmaf(Bs[t] * As[t * DLC + s], dRs[t * DT1 + lane], acc);
            float m = 0.f;
            for (int t = s; t < DC; t++) m = fmaf(Ms[t * DLC + s], dOs[t * DT1 + lane], m);
            acc = fmaf(-p.scale, m, acc);
            q3[a] = fmaf(Dl[s * DT1 + lane], acc, q3[a]);
        }
        if (jv)
            for (int a = 0; a < 8; a++) {
                int t = w + 8 * a;
                p.Uw[(ch * DC + t) * p.dv + j] = Dl[t * DT1 + lane];
            }
        for (int jj = 0; jj < 32; jj++) {
            float o_[4], r_[4], d_[4];
            for (int i = 0; i < 4; i++) {
                o_[i] = dOs[(ty + 16 * i) * DT1 + jj];
                r_[i] = dRs[(ty + 16 * i) * DT1 + jj];
                d_[i] = Dl[(tx + 16 * i) * DT1 + jj];
            }
            for (int i = 0; i < 4; i++)
                for (int jx = 0; jx < 4; jx++) {
                    aM[i][jx] = fmaf(o_[i], d_[jx], aM[i][jx]);
                    aA[i][jx] = fmaf(r_[i], d_[jx], aA[i][jx]);
                }
        }
    }
    for (int a = 0; a < 8; a++) {
        float s1 = ttt_warp_sum(q1[a]), s2 = ttt_warp_sum(q2[a]), s3 = ttt_warp_sum(q3[a]);
        if (lane == 0) {
            int t = w + 8 * a;
            r1[t] = s1;
            r2[t] = s2;
            r3[t] = s3;
        }
    }
    __syncthreads(); /* everyone is done with Ts and Us: reuse them for H + J and dA ⊙ A' */
    float *HJ = Ts, *DB = Vs; /* Vs, dRs, dOs, Dl together: 4·C·DT1 ≥ C·DLC floats */
    for (int i = 0; i < 4; i++) {
        int t = ty + 16 * i;
        for (int jx = 0; jx < 4; jx++) {
            int s = tx + 16 * jx;
            float d = gate_d(gam, rho, t, s);
            float dM = s <= t ? p.scale * aM[i][jx] : 0.f;
            float dA = s < t ? -aA[i][jx] : 0.f;
            cc_element(p, cc, t, s, dM, dA, d, Ms, As, Bs, HJ, DB);
        }
    }
    __syncthreads();
    cc_gate_terms(p, ch, b, h, t0, HJ, DB, Bs, r1, r2, r3);
}

/* ---------------------------------------------------------------------------------------------
 * delta_bwd_qk: one block per (chunk, 64-column key tile), over 32-column value slices:
 *     d_q = scale Γ ⊙ (dO S0ᵀ) + F K
 *     d_k = −(β ⊙ Γ ⊙ dR) S0ᵀ + (λ ⊙ δ) dSᵀ + Fᵀ Q + E K + Eᵀ K
 * (S0 the chunk-start state, dS the chunk-end gradient), and the key-tile's part of dγ:
 *     q_t · (scale Γ_t S0 dO_t)   and, at C−1, Γ_{C−1} ⟨dS, S0⟩. */
/* delta_bwd_qk(_mma)'s key tile's part of dγ: t2 per token, and at C − 1 also Γ_{C−1} ⟨dS, S0⟩
 * over the tile (ip: this thread's share of the inner product; red: a float per warp) */
__device__ __forceinline__ void qk_gate_terms(const delta_params &p, int kt, size_t ch, float ip,
                                              float *red, const float *Gs, const float *t2s) {
    const int tid = threadIdx.x;
    ip = ttt_warp_sum(ip);
    if ((tid & 31) == 0) red[tid >> 5] = ip;
    __syncthreads();
    if (tid < DC) {
        float extra = 0.f;
        if (tid == DC - 1) {
            float tot = 0.f;
            for (int i = 0; i < NTHR / 32; i++) tot += red[i];
            extra = Gs[DC - 1] * tot;
        }
        p.gbw[((size_t)kt * p.B * p.H * p.nc + ch) * DC + tid] = t2s[tid] + extra;
    }
}

template <typename E>
__global__ void __launch_bounds__(NTHR) delta_bwd_qk(delta_params p) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    float *Ks = sm, *Qs = Ks + DC * DKT, *Fs = Qs + DC * DKT, *Es = Fs + DC * DLC;
    float *S0t = Es + DC * DLC, *dSt = S0t + DKT * DT1, *dOs = dSt + DKT * DT1;
    float *dRs = dOs + DC * DT1, *Dls = dRs + DC * DT1, *Gs = Dls + DC * DT1, *Ls = Gs + DC;
    float *Bs = Ls + DC, *t2s = Bs + DC, *red = t2s + DC;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int blk = blockIdx.x / p.nkt, i0 = (blockIdx.x % p.nkt) * DKT;
    const int kt = blockIdx.x % p.nkt;
    const int bh = blk / p.nc, c = blk % p.nc, b = bh / p.H, h = bh % p.H;
    const int t0 = c * DC;
    const size_t ch = (size_t)bh * p.nc + c, cc = ch * DC * DC;
    const E *q = (const E *)p.q, *k = (const E *)p.k, *dO = (const E *)p.d_o;
    for (int idx = tid; idx < DC * DKT; idx += NTHR) {
        int t = idx / DKT, ii = idx % DKT, gt = t0 + t;
        float kv = 0.f, qv = 0.f;
        if (gt < p.T && i0 + ii < p.dk) {
            size_t o = drow(p, b, gt, h) * p.dk + i0 + ii;
            kv = ttt_ld<E>(k, o);
            qv = ttt_ld<E>(q, o);
        }
        Ks[idx] = kv;
        Qs[idx] = qv;
    }
    for (int idx = tid; idx < DC * DC; idx += NTHR) {
        Fs[(idx / DC) * DLC + idx % DC] = p.Mw[cc + idx];
        Es[(idx / DC) * DLC + idx % DC] = p.Aw[cc + idx];
    }
    if (tid < DC) {
        int gt = t0 + tid;
        Gs[tid] = p.Gw[ch * DC + tid];
        Ls[tid] = p.Lw[ch * DC + tid];
        Bs[tid] = gt < p.T ? (p.beta ? p.beta[drow(p, b, gt, h)] : 1.f) : 0.f;
    }
    float aQ[8][2] = {}, aK[8][2] = {};
    float ip = 0.f;
    for (int j0 = 0; j0 < p.dv; j0 += 32) {
        const int j = j0 + lane;
        const bool jv = j < p.dv;
        __syncthreads();
        for (int idx = tid; idx < DKT * 32; idx += NTHR) {
            int ii = idx >> 5, jj = idx & 31;
            bool in = i0 + ii < p.dk && j0 + jj < p.dv;
            size_t o = (ch * p.dk + i0 + ii) * p.dv + j0 + jj;
            S0t[ii * DT1 + jj] = in ? p.S0w[o] : 0.f;
            dSt[ii * DT1 + jj] = in ? p.dSw[o] : 0.f;
        }
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a, gt = t0 + t;
            dOs[t * DT1 + lane] =
                (jv && gt < p.T) ? ttt_ld<E>(dO, drow(p, b, gt, h) * p.dv + j) : 0.f;
            dRs[t * DT1 + lane] = jv ? p.dRw[(ch * DC + t) * p.dv + j] : 0.f;
            Dls[t * DT1 + lane] = jv ? p.Uw[(ch * DC + t) * p.dv + j] : 0.f; /* δ */
        }
        __syncthreads();
        for (int idx = tid; idx < DKT * 32; idx += NTHR)
            ip = fmaf(S0t[(idx >> 5) * DT1 + (idx & 31)], dSt[(idx >> 5) * DT1 + (idx & 31)], ip);
        for (int jj = 0; jj < 32; jj++) {
            float s0[2], ds[2];
            for (int bb = 0; bb < 2; bb++) {
                s0[bb] = S0t[(lane + 32 * bb) * DT1 + jj];
                ds[bb] = dSt[(lane + 32 * bb) * DT1 + jj];
            }
            for (int a = 0; a < 8; a++) {
                int t = w + 8 * a;
                float o_ = dOs[t * DT1 + jj];
                float r_ = -Bs[t] * Gs[t] * dRs[t * DT1 + jj];
                float d_ = Ls[t] * Dls[t * DT1 + jj];
                for (int bb = 0; bb < 2; bb++) {
                    aQ[a][bb] = fmaf(o_, s0[bb], aQ[a][bb]);
                    aK[a][bb] = fmaf(r_, s0[bb], fmaf(d_, ds[bb], aK[a][bb]));
                }
            }
        }
    }
    /* the scale Γ of the first term of d_q, its part of dγ, then the C×C products */
    for (int a = 0; a < 8; a++) {
        int t = w + 8 * a;
        float part = 0.f;
        for (int bb = 0; bb < 2; bb++) {
            aQ[a][bb] *= p.scale * Gs[t];
            part = fmaf(Qs[t * DKT + lane + 32 * bb], aQ[a][bb], part);
        }
        part = ttt_warp_sum(part);
        if (lane == 0) t2s[t] = part;
    }
    for (int s = 0; s < DC; s++) {
        float kv[2], qv[2];
        for (int bb = 0; bb < 2; bb++) {
            kv[bb] = Ks[s * DKT + lane + 32 * bb];
            qv[bb] = Qs[s * DKT + lane + 32 * bb];
        }
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float f = Fs[t * DLC + s], ft = Fs[s * DLC + t];
            float e = Es[t * DLC + s] , et = Es[s * DLC + t];
            for (int bb = 0; bb < 2; bb++) {
                aQ[a][bb] = fmaf(f, kv[bb], aQ[a][bb]);
                aK[a][bb] = fmaf(ft, qv[bb], fmaf(et + e, kv[bb], aK[a][bb]));
            }
        }
    }
    E *dq = (E *)p.d_q, *dk = (E *)p.d_k;
    for (int a = 0; a < 8; a++) {
        int t = w + 8 * a, gt = t0 + t;
        if (gt >= p.T) continue;
        for (int bb = 0; bb < 2; bb++) {
            int i = i0 + lane + 32 * bb;
            if (i >= p.dk) continue;
            size_t o = drow(p, b, gt, h) * p.dk + i;
            if (dq) ttt_st<E>(dq, o, aQ[a][bb]);
            if (dk) ttt_st<E>(dk, o, aK[a][bb]);
        }
    }
    qk_gate_terms(p, kt, ch, ip, red, Gs, t2s);
}

/* ---------------------------------------------------------------------------------------------
 * The chunk kernels of the backward on the tensor cores (docs/gpu.md "Tensor-core backward"):
 * the same equations as delta_bwd_cc and delta_bwd_qk above, for bf16 inputs under the tensor-core
 * forward's conditions, every product a warp product of ttt_warp_gemm (computed operands split
 * into bf16 hi + lo, the bf16 inputs exact, fp32 accumulation). 32-column value slices; the
 * strides keep the fragment gathers within two-way bank conflicts. */
#define XV 32 /* value-slice width */
#define XS 36 /* row stride of value slices read as B operands (pairs down a column) */
#define XR 40 /* row stride of value slices read as A operands (pairs along a row) */
#define XT 72 /* row stride of C × C matrices read along rows */

/* rows t0..t0+C−1, columns j0..j0+XV−1 of a (ch, C, d_v) fp32 workspace slice and of a
 * (B, T, H, d_v) bf16 tensor into shared memory (zero past d_v and T); 4 columns per load */
__device__ __forceinline__ void xload_ws(float *dst, int ld, const float *src, const delta_params &p,
                                         size_t ch, int j0) {
    for (int u = threadIdx.x; u < DC * XV / 4; u += NTHR) {
        int t = u / (XV / 4), j = j0 + 4 * (u % (XV / 4));
        float4 x = j < p.dv ? *(const float4 *)(src + (ch * DC + t) * p.dv + j)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
        *(float4 *)(dst + t * ld + 4 * (u % (XV / 4))) = x; /* ld % 4 == 0 */
    }
}
__device__ __forceinline__ void xload_in(float *dst, int ld, const __nv_bfloat16 *src,
                                         const delta_params &p, int b, int h, int t0, int j0) {
    for (int u = threadIdx.x; u < DC * XV / 4; u += NTHR) {
        int t = u / (XV / 4), j = j0 + 4 * (u % (XV / 4)), gt = t0 + t;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j < p.dv && gt < p.T) x = ld4s(src + drow(p, b, gt, h) * p.dv + j);
        *(float4 *)(dst + t * ld + 4 * (u % (XV / 4))) = x; /* ld % 4 == 0 */
    }
}

/* delta_bwd_cc on the tensor cores. Per value slice, warp w (rows 16(w % 4).., columns
 * 16(w / 4).. of a C × XV result, or rows 16(w % 4).., columns 32(w / 4).. of a C × C one):
 *     δ = T (β ⊙ U)                                     T split, U split
 *     Y = dR + (diag(β) A')ᵀ dR − scale Mᵀ dO,  q3 += Σ_j δ ⊙ Y
 *     aM += dO δᵀ,  aA += dR δᵀ                         (C × C, lower triangle) */
__global__ void __launch_bounds__(NTHR, 2) delta_bwd_cc_mma(delta_params p) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    float *Ts = sm, *Ms = Ts + DC * XT, *As = Ms + DC * DLC;
    float *Us = As + DC * DLC, *Vs = Us + DC * XS, *dRs = Vs + DC * XS, *dOs = dRs + DC * XR;
    float *Dl = dOs + DC * XR, *Bs = Dl + DC * XR, *r1 = Bs + DC, *r2 = r1 + DC, *r3 = r2 + DC;
    double *gam = (double *)(r3 + DC);
    int *rho = (int *)(gam + DC);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    const int bh = blockIdx.x / p.nc, c = blockIdx.x % p.nc, b = bh / p.H, h = bh % p.H;
    const int t0 = c * DC;
    const size_t ch = (size_t)bh * p.nc + c, cc = ch * DC * DC;
    const __nv_bfloat16 *v = (const __nv_bfloat16 *)p.v, *dO = (const __nv_bfloat16 *)p.d_o;
    if (tid < 32) chunk_gates(p, b, h, t0, gam, rho);
    for (int u = tid; u < DC * DC / 4; u += NTHR) {
        int r = (4 * u) / DC, s = (4 * u) % DC;
        *(float4 *)(Ts + r * XT + s) = *(const float4 *)(p.Tw + cc + 4 * u);
        *(float4 *)(Ms + r * DLC + s) = *(const float4 *)(p.Mw + cc + 4 * u);
        *(float4 *)(As + r * DLC + s) = *(const float4 *)(p.Aw + cc + 4 * u);
    }
    if (tid < DC) {
        Bs[tid] = p.Bw[ch * DC + tid];
        r3[tid] = 0.f;
    }
    const int mt = w & 3, nh = w >> 2; /* C × XV results */
    const int cn = w >> 2;             /* C × C results: columns 32 cn.. */
    const bool lower = 32 * cn <= 16 * mt + 15;
    float aM[1][4][4] = {}, aA[1][4][4] = {};
    float q1[8] = {}, q2[8] = {}, q3[2] = {};
    for (int j0 = 0; j0 < p.dv; j0 += XV) {
        __syncthreads();
        xload_ws(Us, XS, p.Uw, p, ch, j0);
        xload_ws(dRs, XR, p.dRw, p, ch, j0);
        xload_in(Vs, XS, v, p, b, h, t0, j0);
        xload_in(dOs, XR, dO, p, b, h, t0, j0);
        __syncthreads();
        for (int a = 0; a < 8; a++) {
            int t = w + 8 * a;
            float du = dRs[t * XR + lane], u = Us[t * XS + lane];
            q1[a] = fmaf(du, Vs[t * XS + lane] - u, q1[a]);
            q2[a] = fmaf(du, u, q2[a]);
        }
        { /* δ = T (β ⊙ U): T is lower triangular, k-tiles up to the diagonal */
            float dl[1][2][4] = {};
            ttt_warp_gemm<1, 2, false, false>(
                dl, [&](int r, int k) { return *(const float2 *)(Ts + r * XT + k); },
                [&](int k, int n) {
                    return make_float2(Bs[k] * Us[k * XS + n], Bs[k + 1] * Us[(k + 1) * XS + n]);
                },
                16 * mt, 16 * nh, 0, 16 * mt + 16);
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    *(float2 *)(Dl + (16 * mt + g + 8 * e) * XR + 16 * nh + 8 * j + c2) =
                        make_float2(dl[0][j][2 * e], dl[0][j][2 * e + 1]);
        }
        __syncthreads();
        for (int u = tid; u < DC * XV / 4; u += NTHR) { /* δ replaces U in the workspace */
            int t = u / (XV / 4), jj = 4 * (u % (XV / 4)), j = j0 + jj;
            if (j < p.dv)
                *(float4 *)(p.Uw + (ch * DC + t) * p.dv + j) = *(const float4 *)(Dl + t * XR + jj);
        }
        { /* Y = dR + (diag(β) A')ᵀ dR − scale Mᵀ dO: rows s, k = t ≥ the tile's first row */
            float ya[1][2][4] = {}, ym[1][2][4] = {};
            ttt_warp_gemm<1, 2, false, false>(
                ya,
                [&](int r, int k) {
                    return make_float2(Bs[k] * As[k * DLC + r], Bs[k + 1] * As[(k + 1) * DLC + r]);
                },
                [&](int k, int n) { return make_float2(dRs[k * XR + n], dRs[(k + 1) * XR + n]); },
                16 * mt, 16 * nh, 16 * mt, DC);
            ttt_warp_gemm<1, 2, false, true>(
                ym, [&](int r, int k) { return make_float2(Ms[k * DLC + r], Ms[(k + 1) * DLC + r]); },
                [&](int k, int n) { return make_float2(dOs[k * XR + n], dOs[(k + 1) * XR + n]); },
                16 * mt, 16 * nh, 16 * mt, DC);
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int s = 16 * mt + g + 8 * (e >> 1), n = 16 * nh + 8 * j + c2 + (e & 1);
                    float y = dRs[s * XR + n] + ya[0][j][e] - p.scale * ym[0][j][e];
                    q3[e >> 1] = fmaf(Dl[s * XR + n], y, q3[e >> 1]);
                }
        }
        if (lower) { /* aM += dO δᵀ, aA += dR δᵀ: rows t, columns s, k = j */
            auto dl_t = [&](int k, int n) { return *(const float2 *)(Dl + n * XR + k); };
            ttt_warp_gemm<1, 4, true, false>(
                aM, [&](int r, int k) { return *(const float2 *)(dOs + r * XR + k); }, dl_t,
                16 * mt, 32 * cn, 0, XV);
            ttt_warp_gemm<1, 4, false, false>(
                aA, [&](int r, int k) { return *(const float2 *)(dRs + r * XR + k); }, dl_t,
                16 * mt, 32 * cn, 0, XV);
        }
    }
    for (int a = 0; a < 8; a++) {
        float s1 = ttt_warp_sum(q1[a]), s2 = ttt_warp_sum(q2[a]);
        if (lane == 0) {
            r1[w + 8 * a] = s1;
            r2[w + 8 * a] = s2;
        }
    }
#pragma unroll
    for (int e = 0; e < 2; e++) { /* the four lanes of a row, then the two warps of its rows */
        float x = q3[e];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        if ((lane & 3) == 0) atomicAdd(&r3[16 * mt + g + 8 * e], x);
    }
    __syncthreads(); /* T and the slices are free: H + J and dA ⊙ A' go there */
    float *HJ = Ts, *DB = Us;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int t = 16 * mt + g + 8 * (e >> 1), s = 32 * cn + 8 * j + c2 + (e & 1);
            float d = gate_d(gam, rho, t, s);
            float dM = s <= t ? p.scale * aM[0][j][e] : 0.f;
            float dA = s < t ? -aA[0][j][e] : 0.f;
            cc_element(p, cc, t, s, dM, dA, d, Ms, As, Bs, HJ, DB);
        }
    __syncthreads();
    cc_gate_terms(p, ch, b, h, t0, HJ, DB, Bs, r1, r2, r3);
}

#define XK 72 /* row stride (bf16) of the K and Q tiles */
/* one value slice of delta_bwd_qk_mma in shared memory: S0 and dS (key rows i, fp32), dR and δ
 * (token rows t, fp32), dO (token rows, bf16) */
#define QK_SLICE_FLOATS (2 * DKT * XR + 2 * DC * XR + DC * XR / 2)
/* its asynchronous copy (16 bytes at a time, zero past d_k, d_v and T) */
__device__ __forceinline__ void qk_slice_issue(float *buf, const delta_params &p, size_t ch, int b,
                                               int h, int t0, int i0, int j0) {
    float *S0t = buf, *dSt = S0t + DKT * XR, *dRs = dSt + DKT * XR, *Dls = dRs + DC * XR;
    __nv_bfloat16 *dOb = (__nv_bfloat16 *)(Dls + DC * XR);
    const __nv_bfloat16 *dO = (const __nv_bfloat16 *)p.d_o;
    for (int u = threadIdx.x; u < DC * XV / 4; u += NTHR) { /* DKT == DC rows */
        int r = u / (XV / 4), jj = 4 * (u % (XV / 4)), j = j0 + jj;
        bool ik = i0 + r < p.dk && j < p.dv, iv = j < p.dv;
        size_t os = ik ? (ch * p.dk + i0 + r) * p.dv + j : 0, ot = iv ? (ch * DC + r) * p.dv + j : 0;
        ttt_cp_async16(S0t + r * XR + jj, p.S0w + os, ik);
        ttt_cp_async16(dSt + r * XR + jj, p.dSw + os, ik);
        ttt_cp_async16(dRs + r * XR + jj, p.dRw + ot, iv);
        ttt_cp_async16(Dls + r * XR + jj, p.Uw + ot, iv); /* δ */
    }
    for (int u = threadIdx.x; u < DC * XV / 8; u += NTHR) {
        int t = u / (XV / 8), jj = 8 * (u % (XV / 8)), j = j0 + jj, gt = t0 + t;
        bool in = j < p.dv && gt < p.T;
        ttt_cp_async16(dOb + t * XR + jj, dO + (in ? drow(p, b, gt, h) * p.dv + j : 0), in);
    }
}

/* delta_bwd_qk on the tensor cores: one block per (chunk, 64-column key tile); warp w holds rows
 * t = 16(w % 4).., key columns i = 32(w / 4).. of
 *     XQ = dO S0ᵀ                       dO exact, S0 split
 *     XK = (−β Γ ⊙ dR) S0ᵀ + (λ ⊙ δ) dSᵀ  both sides split
 * over the value slices (copied asynchronously, the next while the current one is used), then
 * d_q = scale Γ ⊙ XQ + F K, d_k = XK + Fᵀ Q + (E + Eᵀ) K (F, E split, K and Q exact, their
 * fragments by ldmatrix), and the key tile's part of dγ as delta_bwd_qk. */
__global__ void __launch_bounds__(NTHR, 2) delta_bwd_qk_mma(delta_params p) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    float *buf0 = sm, *buf1 = buf0 + QK_SLICE_FLOATS; /* after the slices: F and E */
    float *Fs = sm, *Es = Fs + DC * XT;
    float *Gs = buf1 + QK_SLICE_FLOATS, *Ls = Gs + DC, *Bs = Ls + DC, *t2s = Bs + DC,
          *red = t2s + DC;
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)(red + 8), *Qs = Ks + DC * XK;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    const int blk = blockIdx.x / p.nkt, kt = blockIdx.x % p.nkt, i0 = kt * DKT;
    const int bh = blk / p.nc, c = blk % p.nc, b = bh / p.H, h = bh % p.H;
    const int t0 = c * DC;
    const size_t ch = (size_t)bh * p.nc + c, cc = ch * DC * DC;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)p.q, *k = (const __nv_bfloat16 *)p.k;
    for (int u = tid; u < DC * 8; u += NTHR) { /* K, Q: 8 bf16 per copy */
        int t = u >> 3, c8 = 8 * (u & 7), gt = t0 + t;
        bool in = gt < p.T && i0 + c8 < p.dk;
        size_t o = in ? drow(p, b, gt, h) * p.dk + i0 + c8 : 0;
        ttt_cp_async16(Ks + t * XK + c8, k + o, in);
        ttt_cp_async16(Qs + t * XK + c8, q + o, in);
    }
    ttt_cp_async_commit();
    qk_slice_issue(buf0, p, ch, b, h, t0, i0, 0);
    ttt_cp_async_commit();
    if (tid < DC) {
        Gs[tid] = p.Gw[ch * DC + tid];
        Ls[tid] = p.Lw[ch * DC + tid];
        Bs[tid] = p.Bw[ch * DC + tid];
        t2s[tid] = 0.f;
    }
    const int mt = w & 3, cn = w >> 2;
    float aQ[1][4][4] = {}, aK[1][4][4] = {};
    float ip = 0.f;
    const int ns = (p.dv + XV - 1) / XV;
    for (int si = 0; si < ns; si++) {
        float *cur = (si & 1) ? buf1 : buf0;
        if (si + 1 < ns) {
            qk_slice_issue((si & 1) ? buf0 : buf1, p, ch, b, h, t0, i0, (si + 1) * XV);
            ttt_cp_async_commit();
            ttt_cp_async_wait<1>();
        } else {
            ttt_cp_async_wait<0>();
        }
        __syncthreads();
        const float *S0t = cur, *dSt = S0t + DKT * XR, *dRs = dSt + DKT * XR, *Dls = dRs + DC * XR;
        const __nv_bfloat16 *dOb = (const __nv_bfloat16 *)(Dls + DC * XR);
        for (int u = tid; u < DKT * XV; u += NTHR)
            ip = fmaf(S0t[(u >> 5) * XR + (u & 31)], dSt[(u >> 5) * XR + (u & 31)], ip);
        auto s0_t = [&](int kk, int n) { return *(const float2 *)(S0t + n * XR + kk); };
        ttt_warp_gemm<1, 4, true, false>(
            aQ,
            [&](int r, int kk) {
                return __bfloat1622float2(*(const __nv_bfloat162 *)(dOb + r * XR + kk));
            },
            s0_t, 16 * mt, 32 * cn, 0, XV);
        ttt_warp_gemm<1, 4, false, false>(
            aK,
            [&](int r, int kk) {
                float2 x = *(const float2 *)(dRs + r * XR + kk);
                float f = -Bs[r] * Gs[r];
                return make_float2(f * x.x, f * x.y);
            },
            s0_t, 16 * mt, 32 * cn, 0, XV);
        ttt_warp_gemm<1, 4, false, false>(
            aK,
            [&](int r, int kk) {
                float2 x = *(const float2 *)(Dls + r * XR + kk);
                return make_float2(Ls[r] * x.x, Ls[r] * x.y);
            },
            [&](int kk, int n) { return *(const float2 *)(dSt + n * XR + kk); }, 16 * mt,
            32 * cn, 0, XV);
        __syncthreads(); /* the buffer is refilled next */
    }
    /* F and E where the slices were */
    for (int u = tid; u < DC * DC / 4; u += NTHR) {
        int r = (4 * u) / DC, s = (4 * u) % DC;
        *(float4 *)(Fs + r * XT + s) = *(const float4 *)(p.Mw + cc + 4 * u);
        *(float4 *)(Es + r * XT + s) = *(const float4 *)(p.Aw + cc + 4 * u);
    }
    /* the scale Γ of d_q's first term and its part of dγ: q_t · (scale Γ_t S0 dO_t) */
    float part[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int t = 16 * mt + g + 8 * (e >> 1), i = 32 * cn + 8 * j + c2 + (e & 1);
            aQ[0][j][e] *= p.scale * Gs[t];
            part[e >> 1] = fmaf(__bfloat162float(Qs[t * XK + i]), aQ[0][j][e], part[e >> 1]);
        }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        float x = part[e];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        if ((lane & 3) == 0) atomicAdd(&t2s[16 * mt + g + 8 * e], x);
    }
    __syncthreads(); /* F and E */
    ttt_warp_gemm_bk<1, 4, false>(
        aQ, [&](int r, int s) { return *(const float2 *)(Fs + r * XT + s); }, Ks, XK, 16 * mt,
        32 * cn, 0, DC);
    ttt_warp_gemm_bk<1, 4, false>(
        aK, [&](int r, int s) { return make_float2(Fs[s * XT + r], Fs[(s + 1) * XT + r]); }, Qs,
        XK, 16 * mt, 32 * cn, 0, DC);
    ttt_warp_gemm_bk<1, 4, false>(
        aK,
        [&](int r, int s) {
            float2 x = *(const float2 *)(Es + r * XT + s);
            return make_float2(x.x + Es[s * XT + r], x.y + Es[(s + 1) * XT + r]);
        },
        Ks, XK, 16 * mt, 32 * cn, 0, DC);
    __nv_bfloat16 *dq = (__nv_bfloat16 *)p.d_q, *dk = (__nv_bfloat16 *)p.d_k;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            int t = 16 * mt + g + 8 * e2, gt = t0 + t, i = i0 + 32 * cn + 8 * j + c2;
            if (gt >= p.T || i >= p.dk) continue;
            size_t o = drow(p, b, gt, h) * p.dk + i;
            if (dq)
                *(__nv_bfloat162 *)(dq + o) =
                    __floats2bfloat162_rn(aQ[0][j][2 * e2], aQ[0][j][2 * e2 + 1]);
            if (dk)
                *(__nv_bfloat162 *)(dk + o) =
                    __floats2bfloat162_rn(aK[0][j][2 * e2], aK[0][j][2 * e2 + 1]);
        }
    qk_gate_terms(p, kt, ch, ip, red, Gs, t2s);
}

/* delta_bwd_gate: d_g_u = Σ_{r ≥ u, no reset in (u, r]} dγ_r within the chunk (a reverse
 * cumulative sum, in float64, that restarts at each reset), 0 at a reset. */
__global__ void delta_bwd_gate(delta_params p) {
    const size_t ch = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= (size_t)p.B * p.H * p.nc) return;
    const int bh = (int)(ch / p.nc), c = (int)(ch % p.nc), b = bh / p.H, h = bh % p.H;
    const size_t nch = (size_t)p.B * p.H * p.nc;
    double acc = 0;
    for (int i = DC - 1; i >= 0; i--) {
        int t = c * DC + i;
        float x = t < p.T ? p.g[drow(p, b, t, h)] : 0.f;
        double s = p.gaw[ch * DC + i];
        for (int kt = 0; kt < p.nkt; kt++) s += p.gbw[((size_t)kt * nch + ch) * DC + i];
        float out;
        if (expf(x) == 0.f) {
            acc = 0;
            out = 0.f;
        } else {
            acc += s;
            out = (float)acc;
        }
        if (t < p.T) p.d_g[drow(p, b, t, h)] = out;
    }
}

/* ---- host side ---- */

static size_t delta_prep_smem(void) {
    return sizeof(double) * (2 * (size_t)DC * (DC + 1) + DC + 3 * 256) + sizeof(int) * DC +
           sizeof(float) * DC;
}
static size_t delta_bwd_cc_smem(void) {
    return sizeof(float) * (3 * (size_t)DC * DLC + 5 * (size_t)DC * DT1 + 4 * DC) +
           sizeof(double) * DC + sizeof(int) * DC;
}
static size_t delta_bwd_qk_smem(void) {
    return sizeof(float) * (2 * (size_t)DC * DKT + 2 * (size_t)DC * DLC + 2 * (size_t)DKT * DT1 +
                            3 * (size_t)DC * DT1 + 4 * DC + 8);
}

/* The workspace parts, in bytes. The first DK_FWD are the forward's; the first DK_KEPT are what
 * the backward reads of its recomputed forward, and what a forward with a->kept stores there
 * instead (docs/gpu.md "Kept forward"); the rest are the backward's own. */
#define DK_FWD 6
#define DK_KEPT 9
#define DK_ALL 13
typedef struct delta_layout {
    size_t nch;                /* B·H·nc */
    size_t off[DK_ALL], total; /* byte offsets of Tw Mw Gw Lw Tsw Bw | Aw S0w Uw | dSw dRw gaw gbw */
} delta_layout;

static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* parts: DK_FWD (the forward), DK_ALL (the backward) */
static int delta_layout_of(const ttt_chunk_args *a, int parts, delta_layout *L) {
    size_t nc = ((size_t)a->T + DC - 1) / DC, nch, cc, st, tok, nkt = (a->d_k + DKT - 1) / DKT;
    if (!mul_ok((size_t)a->B, (size_t)a->H, &nch) || !mul_ok(nch, nc, &nch)) return 0;
    if (!mul_ok(nch, (size_t)DC * DC * sizeof(float), &cc)) return 0;
    if (!mul_ok(nch, (size_t)a->d_k * a->d_v * sizeof(float), &st)) return 0;
    if (!mul_ok(nch, (size_t)DC * a->d_v * sizeof(float), &tok)) return 0;
    if (cc > SIZE_MAX / 2) return 0;
    size_t vec = nch * DC * sizeof(float);
    size_t per[DK_ALL] = {cc, cc, vec, vec, 2 * cc /* 4 C×C bf16 */, vec,
                          cc, st, tok, st, tok, vec, nkt * vec};
    size_t off = 0;
    for (int i = 0; i < DK_ALL; i++) {
        L->off[i] = off;
        if (i < parts) {
            size_t al = ttt_cu_align(per[i]);
            if (al < per[i] || off > SIZE_MAX - al) return 0;
            off += al;
        }
    }
    L->nch = nch;
    L->total = off;
    return 1;
}

/* bwd: the backward (o not needed); bwd = 2: shapes only (the workspace query). */
static ttt_status delta_check(const ttt_chunk_args *a, int bwd, ttt_error *err) {
    if (!a) return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): arguments are NULL");
    if (a->B < 1 || a->T < 1 || a->H < 1)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): B = %d, T = %d, H = %d: each must be >= 1", a->B,
                             a->T, a->H);
    if (a->d_k < 1 || a->d_k > TTT_CHUNK_MAX_D || a->d_v < 1 || a->d_v > TTT_CHUNK_MAX_D)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): d_k = %d, d_v = %d: each must be in [1, %d]",
                             a->d_k, a->d_v, TTT_CHUNK_MAX_D);
    if (a->dtype != TTT_CHUNK_F32 && a->dtype != TTT_CHUNK_BF16)
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): dtype %d is neither F32 (0) "
                                               "nor BF16 (1)", (int)a->dtype);
    if (a->gate_per_key)
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): gate_per_key is for linear "
                                               "attention only (the delta rule's gate is scalar)");
    if (bwd < 2 && (!a->q || !a->k || !a->v))
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): q, k and v are required");
    if (!bwd && !a->o)
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): the output o is required");
    /* every index is a size_t; the grids count chunks × sequences in 31 bits */
    size_t n = (size_t)a->B * (size_t)a->T;
    size_t nc = ((size_t)a->T + DC - 1) / DC;
    if (n / (size_t)a->B != (size_t)a->T || n > (SIZE_MAX / TTT_CHUNK_MAX_D) / (size_t)a->H ||
        (size_t)a->B * a->H * nc * ((TTT_CHUNK_MAX_D + DKT - 1) / DKT) > (size_t)INT32_MAX)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): B·T·H = %d·%d·%d is too large for one call",
                             a->B, a->T, a->H);
    return TTT_OK;
}

size_t ttt_cuda_delta_workspace(const ttt_chunk_args *a, int backward) {
    delta_layout L;
    if (delta_check(a, 2, NULL) != TTT_OK ||
        !delta_layout_of(a, backward ? DK_ALL : DK_FWD, &L))
        return 0;
    if (backward == 2) return L.total - L.off[DK_KEPT]; /* after a kept forward */
    if (backward == 0 && a->kept) return 0;              /* a kept forward writes a->kept only */
    return L.total;
}

size_t ttt_cuda_delta_kept_bytes(const ttt_chunk_args *a) {
    delta_layout L;
    if (delta_check(a, 2, NULL) != TTT_OK || !delta_layout_of(a, DK_ALL, &L)) return 0;
    return L.off[DK_KEPT];
}

static ttt_status delta_setup(const ttt_chunk_args *a, int bwd, void *ws, size_t ws_bytes,
                              delta_params *p, ttt_error *err) {
    TTT_TRY(delta_check(a, bwd, err));
    delta_layout L;
    /* with a->kept, parts [0, DK_KEPT) live there and the workspace holds the rest, rebased */
    const int kept = a->kept != NULL;
    if (!delta_layout_of(a, kept || bwd ? DK_ALL : DK_FWD, &L))
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule (CUDA): workspace size overflows");
    const size_t need = !kept ? L.total : bwd ? L.total - L.off[DK_KEPT] : 0;
    if (need && (!ws || ws_bytes < need))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): workspace of %zu bytes at %p, %zu needed "
                             "(ttt_cuda_delta_workspace)", ws_bytes, ws, need);
    if (need && ((uintptr_t)ws & 255) != 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): workspace %p is not 256-byte aligned", ws);
    if (kept && ((uintptr_t)a->kept & 255) != 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "delta rule (CUDA): kept buffer %p is not 256-byte aligned", a->kept);
    memset(p, 0, sizeof *p);
    p->B = a->B;
    p->T = a->T;
    p->H = a->H;
    p->dk = a->d_k;
    p->dv = a->d_v;
    p->nc = (a->T + DC - 1) / DC;
    p->nvt = (a->d_v + DBV - 1) / DBV;
    p->nkt = (a->d_k + DKT - 1) / DKT;
    p->kvec = (a->d_k & 3) == 0 && (((uintptr_t)a->q | (uintptr_t)a->k) & 15) == 0;
    p->scale = a->scale;
    p->q = a->q;
    p->k = a->k;
    p->v = a->v;
    p->beta = a->beta;
    p->g = a->g;
    p->h0 = a->h0;
    p->o = a->o;
    p->ht = a->ht;
    char *w = (char *)ws, *kw = (char *)a->kept;
    float *tsw = NULL;
    float **parts[DK_ALL] = {&p->Tw,  &p->Mw, &p->Gw,  &p->Lw,  &tsw,    &p->Bw, &p->Aw,
                             &p->S0w, &p->Uw, &p->dSw, &p->dRw, &p->gaw, &p->gbw};
    const int nparts = kept || bwd ? DK_ALL : DK_FWD;
    for (int i = 0; i < nparts; i++) {
        if (kept && i < DK_KEPT)
            *parts[i] = (float *)(kw + L.off[i]);
        else if (kept)
            *parts[i] = bwd ? (float *)(w + (L.off[i] - L.off[DK_KEPT])) : NULL;
        else
            *parts[i] = (float *)(w + L.off[i]);
    }
    /* the tensor-core kernels (delta_fwd_mma and the backward's): bf16, d_k ≤ 128, rows of
     * 16-byte multiples on 16-byte boundaries (cp.async), and not asked for the reference
     * kernels; the forward also stores o two elements at a time */
    const bool tc = a->dtype == TTT_CHUNK_BF16 && !a->reference && a->d_k <= 128 &&
                    a->d_k % 8 == 0 && a->d_v % 8 == 0 &&
                    (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v) & 15) == 0;
    p->mma = tc && (bwd || ((uintptr_t)a->o & 3) == 0);
    /* a kept forward stores the splits whenever the tensor-core backward could read them, also
     * when its own forward kernel is the fp32 one (o not 4-byte aligned) */
    if (p->mma || (kept && tc)) {
        p->Tsw = (__nv_bfloat16 *)tsw;
    } else {
        p->Tsw = NULL;
        p->Bw = NULL;
    }
    return TTT_OK;
}

template <typename E, int LDK>
static ttt_status delta_launch_seq(delta_params &p, int bwd, cudaStream_t st, ttt_error *err) {
    size_t sm = seq_smem_bytes(LDK, sizeof(E));
    const unsigned nb = (unsigned)((size_t)p.B * p.H * p.nvt);
    if (!bwd) {
        TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_fwd_seq<E, LDK>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        delta_fwd_seq<E, LDK><<<nb, NTHR, sm, st>>>(p);
        TTT_CUDA_CHECK_LAUNCH("delta_fwd_seq");
    } else {
        TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_seq<E, LDK>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        delta_bwd_seq<E, LDK><<<nb, NTHR, sm, st>>>(p);
        TTT_CUDA_CHECK_LAUNCH("delta_bwd_seq");
    }
    return TTT_OK;
}

/* the sequential kernel (bwd = 0: forward, 1: reverse) for d_k rounded up to 32, 64, 128, 256 */
template <typename E>
static ttt_status delta_seq(delta_params &p, int bwd, cudaStream_t st, ttt_error *err) {
    if (p.dk <= 32) return delta_launch_seq<E, 32>(p, bwd, st, err);
    if (p.dk <= 64) return delta_launch_seq<E, 64>(p, bwd, st, err);
    if (p.dk <= 128) return delta_launch_seq<E, 128>(p, bwd, st, err);
    return delta_launch_seq<E, 256>(p, bwd, st, err);
}

template <int LDK, int BV>
static ttt_status delta_launch_mma(delta_params &p, cudaStream_t st, ttt_error *err) {
    size_t sm = mma_smem_bytes(LDK, BV);
    const unsigned nb = (unsigned)((size_t)p.B * p.H * ((p.dv + BV - 1) / BV));
    TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_fwd_mma<LDK, BV>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    delta_fwd_mma<LDK, BV><<<nb, 4 * BV, sm, st>>>(p);
    TTT_CUDA_CHECK_LAUNCH("delta_fwd_mma");
    return TTT_OK;
}

/* The value-tile width of the tensor-core forward. A block of 128 columns (16 warps, K and Q
 * loaded once per sequence) took 1.64× the time of a 64-column block (8 warps) on an H200 for
 * twice the work, so 128 columns are chosen when the 64-column grid needs at least twice as many
 * waves of blocks (one block per SM) as the 128-column grid: B·H = 128 on 132 SMs gives 1 wave
 * against 2 (docs/gpu.md "Tensor-core forward"). */
static ttt_status delta_mma(delta_params &p, cudaStream_t st, ttt_error *err) {
    int dev = 0, sms = 0;
    TTT_CUDA_CHECK(cudaGetDevice(&dev));
    TTT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t bh = (size_t)p.B * p.H, sm = (size_t)(sms > 0 ? sms : 1);
    const size_t waves64 = (bh * ((p.dv + 63) / 64) + sm - 1) / sm;
    const size_t waves128 = (bh * ((p.dv + 127) / 128) + sm - 1) / sm;
    const bool wide = waves64 >= 2 * waves128;
    if (p.dk <= 64)
        return wide ? delta_launch_mma<64, 128>(p, st, err) : delta_launch_mma<64, 64>(p, st, err);
    return wide ? delta_launch_mma<128, 128>(p, st, err) : delta_launch_mma<128, 64>(p, st, err);
}

template <typename E>
static ttt_status delta_launch_fwd(delta_params &p, int bwd, cudaStream_t st, ttt_error *err) {
    const unsigned nblk_c = (unsigned)((size_t)p.B * p.H * p.nc);
    size_t sp = delta_prep_smem();
    TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_prep<E>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sp));
    delta_prep<E><<<nblk_c, NTHR, sp, st>>>(p, bwd);
    TTT_CUDA_CHECK_LAUNCH("delta_prep");
    if (p.mma) return delta_mma(p, st, err);
    return delta_seq<E>(p, 0, st, err);
}

template <int LDK>
static ttt_status delta_launch_bwd_mma(delta_params &p, cudaStream_t st, ttt_error *err) {
    size_t sm = mma_bwd_smem_bytes(LDK);
    const unsigned nb = (unsigned)((size_t)p.B * p.H * ((p.dv + 63) / 64));
    TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_mma<LDK>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    delta_bwd_mma<LDK><<<nb, NTHR, sm, st>>>(p);
    TTT_CUDA_CHECK_LAUNCH("delta_bwd_mma");
    return TTT_OK;
}

template <typename E>
static ttt_status delta_launch_bwd(delta_params &p, bool kept, cudaStream_t st, ttt_error *err) {
    if (!kept) /* else a forward with the same kept buffer stored all of it */
        TTT_TRY(delta_launch_fwd<E>(p, 1, st, err));
    if (p.mma)
        TTT_TRY(p.dk <= 64 ? delta_launch_bwd_mma<64>(p, st, err)
                           : delta_launch_bwd_mma<128>(p, st, err));
    else
        TTT_TRY(delta_seq<E>(p, 1, st, err));
    const unsigned nblk_c = (unsigned)((size_t)p.B * p.H * p.nc);
    if (p.mma) {
        size_t sc = sizeof(float) * ((size_t)DC * XT + 2 * (size_t)DC * DLC + 2 * (size_t)DC * XS +
                                     3 * (size_t)DC * XR + 4 * DC) +
                    sizeof(double) * DC + sizeof(int) * DC;
        TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_cc_mma,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sc));
        delta_bwd_cc_mma<<<nblk_c, NTHR, sc, st>>>(p);
        TTT_CUDA_CHECK_LAUNCH("delta_bwd_cc_mma");
        size_t sq = sizeof(float) * (2 * (size_t)QK_SLICE_FLOATS + 4 * DC + 8) +
                    sizeof(__nv_bfloat16) * 2 * (size_t)DC * XK;
        TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_qk_mma,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sq));
        delta_bwd_qk_mma<<<nblk_c * (unsigned)p.nkt, NTHR, sq, st>>>(p);
        TTT_CUDA_CHECK_LAUNCH("delta_bwd_qk_mma");
        if (p.d_g) {
            delta_bwd_gate<<<(nblk_c + 127) / 128, 128, 0, st>>>(p);
            TTT_CUDA_CHECK_LAUNCH("delta_bwd_gate");
        }
        return TTT_OK;
    }
    size_t sm = delta_bwd_cc_smem();
    TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_cc<E>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    delta_bwd_cc<E><<<nblk_c, NTHR, sm, st>>>(p);
    TTT_CUDA_CHECK_LAUNCH("delta_bwd_cc");
    sm = delta_bwd_qk_smem();
    TTT_CUDA_CHECK(cudaFuncSetAttribute(delta_bwd_qk<E>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    delta_bwd_qk<E><<<nblk_c * (unsigned)p.nkt, NTHR, sm, st>>>(p);
    TTT_CUDA_CHECK_LAUNCH("delta_bwd_qk");
    if (p.d_g) {
        delta_bwd_gate<<<(nblk_c + 127) / 128, 128, 0, st>>>(p);
        TTT_CUDA_CHECK_LAUNCH("delta_bwd_gate");
    }
    return TTT_OK;
}

extern "C" ttt_status ttt_cuda_delta_forward(const ttt_chunk_args *a, void *workspace,
                                             size_t ws_bytes, void *stream, ttt_error *err) {
    delta_params p;
    TTT_TRY(delta_setup(a, 0, workspace, ws_bytes, &p, err));
    /* a kept forward is the backward's recomputed one: the prep kernel's fp32 parts and the
     * chunk-start states and U too */
    const int keep = a->kept != NULL;
    p.write_out = DW_OUT | (keep ? DW_SAVE : 0);
    cudaStream_t st = (cudaStream_t)stream;
    if (a->dtype == TTT_CHUNK_BF16) return delta_launch_fwd<__nv_bfloat16>(p, keep, st, err);
    return delta_launch_fwd<float>(p, keep, st, err);
}

extern "C" ttt_status ttt_cuda_delta_backward(const ttt_chunk_args *a, const ttt_chunk_grad *g,
                                              void *workspace, size_t ws_bytes, void *stream,
                                              ttt_error *err) {
    if (!g || !g->d_o)
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule backward (CUDA): the gradient d_o "
                                               "is required");
    if (g->d_beta && !(a && a->beta))
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule backward (CUDA): d_beta asked for "
                                               "without beta");
    if (g->d_g && !(a && a->g))
        return ttt_error_set(err, TTT_ERR_ARG, "delta rule backward (CUDA): d_g asked for "
                                               "without g");
    delta_params p{};
    TTT_TRY(delta_setup(a, 1, workspace, ws_bytes, &p, err));
    /* the tensor-core kernels load d_o 16 bytes at a time and store o two elements at a time */
    if (p.mma && (((uintptr_t)g->d_o & 15) != 0 || ((uintptr_t)a->o & 3) != 0)) {
        p.mma = 0;
        p.Tsw = NULL;
        p.Bw = NULL;
    }
    /* the recomputed forward also writes o and ht when they are asked for: a caller of the
     * backward then needs no forward call of its own (ttt_cuda_delta_backward, chunk_cuda.h) */
    p.write_out = DW_SAVE | (a->o ? DW_OUT : 0);
    p.d_o = g->d_o;
    p.d_ht = g->d_ht;
    p.d_q = g->d_q;
    p.d_k = g->d_k;
    p.d_v = g->d_v;
    p.d_beta = g->d_beta;
    p.d_g = g->d_g;
    p.d_h0 = g->d_h0;
    cudaStream_t st = (cudaStream_t)stream;
    const bool kept = a->kept != NULL;
    if (a->dtype == TTT_CHUNK_BF16) return delta_launch_bwd<__nv_bfloat16>(p, kept, st, err);
    return delta_launch_bwd<float>(p, kept, st, err);
}
