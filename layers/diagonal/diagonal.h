/* Diagonal (non-outer-product) recurrences: the LRU (docs/math.md §8.1) and Mamba(1)'s selective
 * scan (docs/math.md §8.2). Each comes as a recurrent kernel (the definition), a scan form (the
 * two-level associative scan of layers/forms/scan.h) and a recorded autograd op whose backward is
 * the adjoint recurrence run backward in time, so blocks built from them train.
 *
 * Raw row-major float arrays, outputs first, then inputs, then sizes. `blocks` ≤ 1 runs the
 * recurrence; more runs the scan with that many blocks (ttt_scan_blocks). */
#ifndef TTT_DIAGONAL_H
#define TTT_DIAGONAL_H

#include "rng.h"
#include "tensor.h"

/* ---- LRU: h_t = λ ⊙ h_{t−1} + γ ⊙ u_t, λ = exp(−exp(ν) + i exp(θ)), γ = sqrt(1 − |λ|²) ----
 * Complex vectors of n entries are stored as (2n) floats in halves: [Re_0 … Re_{n−1},
 * Im_0 … Im_{n−1}] (u_t = B x_t with B complex is then one real product X W_B). */
void ttt_lru_forward(ttt_ctx *ctx, float *h, /* (T, 2n) every state */
                     float *h0,              /* (2n) initial state in, final out */
                     const float *nu,        /* (n) */
                     const float *theta,     /* (n) */
                     const float *u,         /* (T, 2n) */
                     int T, int n, int blocks);

/* H (T, 2n) = the states, as a recorded op: gradients to ν, θ, U and h0 (h0 may be NULL: zero). */
ttt_tensor *ttt_lru_op(ttt_ctx *ctx, const ttt_tensor *nu, const ttt_tensor *theta,
                       const ttt_tensor *U, const ttt_tensor *h0, int blocks);

/* Ring initialization (Orvieto et al. 2023): |λ| uniform on the ring r ∈ [r_min, r_max] of the
 * complex plane (r² uniform in [r_min², r_max²]), phase uniform in [0, θ_max];
 * ν = log(−log r), θ = log(phase). */
void ttt_lru_init_ring(float *nu, float *theta, int n, float r_min, float r_max, float theta_max,
                       ttt_rng *rng);

/* ---- Mamba(1) selective scan: state (d, N) ----
 *     h_t = exp(Δ_t A) ⊙ h_{t−1} + (Δ_t ⊗ B_t) x_t,     y_t = h_t C_t + D ⊙ x_t
 * per channel i and state n: h_t[i,n] = exp(Δ_t[i] A[i,n]) h_{t−1}[i,n] + Δ_t[i] B_t[n] x_t[i],
 * y_t[i] = Σ_n C_t[n] h_t[i,n] + D[i] x_t[i]. A = −exp(A_log) < 0. */
void ttt_selective_scan(ttt_ctx *ctx, float *y, /* (T, d) */
                        float *h,               /* (d, N) initial state in, final out */
                        const float *x,         /* (T, d) */
                        const float *delta,     /* (T, d) Δ > 0 */
                        const float *A,         /* (d, N) */
                        const float *B,         /* (T, N) */
                        const float *C,         /* (T, N) */
                        const float *D,         /* (d) or NULL */
                        int T, int d, int N, int blocks);
/* FLOPs of the recurrence (per token and (i, n): exp argument, decay, input, read-out: 7 plus
 * the exp, counted as 1) and of the scan (the fix-up adds an exp and 3 per (t, i, n)). */
double ttt_selective_scan_flops(long T, int d, int N, int blocks);

/* y (T, d) as a recorded op: gradients to x, Δ, A_log, B, C, D and h0 (D, h0 may be NULL). */
ttt_tensor *ttt_selective_scan_op(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *delta,
                                  const ttt_tensor *A_log, const ttt_tensor *B,
                                  const ttt_tensor *C, const ttt_tensor *D, const ttt_tensor *h0,
                                  int blocks);

/* ---- the papers' blocks around the recurrences, as recorded ops on a batch of B sequences of
 * T rows, x (B·T, d) (docs/math.md §8.1, §8.2) ---- */

typedef struct ttt_lru_weights {
    const ttt_tensor *w_b;       /* (d_in, 2n): u_t = B x_t as [Re | Im] */
    const ttt_tensor *nu, *theta; /* (n) */
    const ttt_tensor *w_c;       /* (2n, d_out): Re(C h) = h W_C */
    const ttt_tensor *d;         /* (d_in) skip D ⊙ x (d_in = d_out), or NULL */
} ttt_lru_weights;
/* The LRU layer: y_t = Re(C h_t) + D ⊙ x_t, (B·T, d_out). */
ttt_tensor *ttt_lru_block(ttt_ctx *ctx, const ttt_lru_weights *w, const ttt_tensor *x, int B,
                          int T, int blocks);

typedef struct ttt_mamba_weights {
    const ttt_tensor *w_in;   /* (d, 2·d_inner): the x branch, then the z branch */
    const ttt_tensor *conv_w; /* (K, d_inner) depthwise causal kernel */
    const ttt_tensor *conv_b; /* (d_inner) or NULL */
    const ttt_tensor *w_x;    /* (d_inner, r + 2N): Δ's low-rank input, B_t, C_t */
    const ttt_tensor *w_dt;   /* (r, d_inner) */
    const ttt_tensor *b_dt;   /* (d_inner) */
    const ttt_tensor *a_log;  /* (d_inner, N) */
    const ttt_tensor *d;      /* (d_inner) */
} ttt_mamba_weights;
/* Mamba's block up to its output projection: x' = SiLU(conv(x W_in,x)), z = x W_in,z,
 * Δ = softplus(x' W_x,Δ W_dt + b_dt), B = x' W_x,B, C = x' W_x,C, y = selective_scan(x', Δ, A,
 * B, C, D) ⊙ SiLU(z): (B·T, d_inner). The caller applies the output projection. */
ttt_tensor *ttt_mamba_block(ttt_ctx *ctx, const ttt_mamba_weights *w, const ttt_tensor *x, int B,
                            int T, int blocks);
/* S4D-real: A_log[i, n] = log(n + 1). */
void ttt_mamba_init_a_log(float *a_log, int d_inner, int N);
/* b_dt = softplus⁻¹(dt), dt log-uniform in [dt_min, dt_max] (Mamba's dt initialization). */
void ttt_mamba_init_dt_bias(float *b_dt, int d_inner, double dt_min, double dt_max,
                            ttt_rng *rng);

#endif
