/* The CUDA kernels of the device ops (docs/design.md "Devices", docs/device_ops.md): a small
 * C-shaped interface, implemented in src/core/cuda/ops_*.cu, that src/core/ops_device.c composes
 * into the ops of ops.h and their backwards. Every pointer is device memory of the calling
 * thread's current device, every launch is queued on `stream` (a cudaStream_t, NULL = the
 * default stream), every float is fp32 and accumulations are in double where the CPU op
 * accumulates in double. `add` nonzero: the kernel adds to y instead of assigning it (a
 * gradient's later writer, autograd.h "First writer assigns"). A failed launch or library call
 * returns TTT_ERR_DEVICE naming it; built without CUDA every entry returns TTT_ERR_UNSUPPORTED
 * (src/core/cuda_kernels_stub.c), and nothing calls them, as no device tensor can exist. */
#ifndef TTT_CUDA_KERNELS_H
#define TTT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element-wise maps: y[i] (+)= f(a[i], B(i), c[i]) for i < n, where B(i) is b read by bmode. */
typedef enum ttt_map_op {
    TTT_MAP_ADD, TTT_MAP_SUB, TTT_MAP_MUL, TTT_MAP_DIV, /* a ∘ B */
    TTT_MAP_SAFE_DIV,   /* a / B, 0 where B = 0 (the minimum-norm subgradient of a norm) */
    TTT_MAP_AXPBY,      /* p0·a + p1·B */
    TTT_MAP_SCALE,      /* p0·a */
    TTT_MAP_ADD_SCALAR, /* a + p0 */
    TTT_MAP_BCAST,      /* p0·B: a broadcast read of b */
    TTT_MAP_MAX, TTT_MAP_MIN, /* max(a, B), min(a, B) */
    /* unary forwards: f(a) */
    TTT_MAP_NEG, TTT_MAP_EXP, TTT_MAP_LOG, TTT_MAP_SQRT, TTT_MAP_SQUARE, TTT_MAP_SIGMOID,
    TTT_MAP_SILU, TTT_MAP_GELU, TTT_MAP_SOFTPLUS, TTT_MAP_ELU1, TTT_MAP_RELU, TTT_MAP_SILU_GRAD,
    TTT_MAP_GELU_GRAD, TTT_MAP_SIGN, TTT_MAP_ABS,
    TTT_MAP_CLAMP, /* min(max(a, p0), p1) */
    TTT_MAP_POW,   /* a^p0 */
    /* unary backwards: a = dy, c = the op's input x: dy·f'(x) */
    TTT_MAP_D_EXP, TTT_MAP_D_LOG, TTT_MAP_D_SQRT, TTT_MAP_D_SQUARE, TTT_MAP_D_SIGMOID,
    TTT_MAP_D_SILU, TTT_MAP_D_GELU, TTT_MAP_D_SOFTPLUS, TTT_MAP_D_ELU1, TTT_MAP_D_RELU,
    TTT_MAP_D_SILU_GRAD, TTT_MAP_D_GELU_GRAD, TTT_MAP_D_ABS,
    TTT_MAP_D_CLAMP, /* dy where p0 ≤ x ≤ p1 */
    TTT_MAP_D_POW,   /* dy·p0·x^(p0−1) */
    TTT_MAP_D_DIV_B, /* −a·c/B²: the divisor's gradient before the broadcast sum */
    TTT_MAP_D_EXT_A, /* a·w, w = 1/2 on a tie of B = x_a and c = x_b, else [(B > c) = p0] */
    TTT_MAP_D_EXT_B, /* a·(1 − w) */
} ttt_map_op;

typedef enum ttt_bmode {
    TTT_B_SAME = 0,   /* b[i] */
    TTT_B_SCALAR = 1, /* b[0] */
    TTT_B_ROW = 2,    /* b[i mod cols]: a row vector applied to every row */
    TTT_B_PER_ROW = 3 /* b[i / cols]: one value per row */
} ttt_bmode;

ttt_status ttt_cuda_map(int op, float *y, int add, const float *a, const float *b, int bmode,
                        const float *c, size_t cols, size_t n, float p0, float p1, void *stream,
                        ttt_error *err);

/* Sums of a (rows, cols) matrix x, or of x ⊙ x2 when x2 is given, in double, times scale:
 * ROWS: over the rows → y (cols); COLS: along each row → y (rows); COLS_SQRT: the square root
 * of each row's sum (norms). */
enum { TTT_RED_ROWS, TTT_RED_COLS, TTT_RED_COLS_SQRT };
ttt_status ttt_cuda_reduce(int mode, float *y, int add, const float *x, const float *x2,
                           size_t rows, size_t cols, double scale, void *stream, ttt_error *err);

/* Row-wise normalizations of x (rows, n) over the last dim (ops.h "norms"). */
enum { TTT_NORM_LAYER, TTT_NORM_RMS, TTT_NORM_L2, TTT_NORM_SOFTMAX };
ttt_status ttt_cuda_rownorm(int kind, float *y, const float *x, const float *gamma,
                            const float *beta, size_t rows, size_t n, float eps, void *stream,
                            ttt_error *err);
/* gx (+)= dL/dx given dy; for SOFTMAX, x is the op's output y. dyxh (rows, n), when not NULL,
 * receives dy ⊙ x̂ (LAYER, RMS), whose column sums are dγ. */
ttt_status ttt_cuda_rownorm_backward(int kind, float *gx, int add, float *dyxh, const float *dy,
                                     const float *x, const float *gamma, size_t rows, size_t n,
                                     float eps, void *stream, ttt_error *err);

/* Row-major C = alpha·op(A)·op(B) + beta·C through cuBLAS, `batch` products with element
 * strides sa, sb, sc (0: the operand is shared). lda, ldb: stored row lengths. */
ttt_status ttt_cuda_sgemm(float *c, float alpha, const float *a, int ta, int lda, long long sa,
                          const float *b, int tb, int ldb, long long sb, float beta,
                          long long sc, int m, int n, int k, int batch, void *stream,
                          ttt_error *err);

/* The product of mixed precision (docs/gpu.md "bfloat16 training"): as ttt_cuda_sgemm, with A
 * and B bfloat16 (the bits of bf16.h), C fp32, the sums in fp32 (CUBLAS_COMPUTE_32F). */
ttt_status ttt_cuda_gemm_bf16(float *c, float alpha, const uint16_t *a, int ta, int lda,
                              long long sa, const uint16_t *b, int tb, int ldb, long long sb,
                              float beta, long long sc, int m, int n, int k, int batch,
                              void *stream, ttt_error *err);
/* y (n) = x rounded to bfloat16, to nearest with ties to even (bf16.h ttt_bf16_from_float, bit
 * for bit); from_bf16: y (+)= x widened to fp32 (exact). */
ttt_status ttt_cuda_to_bf16(uint16_t *y, const float *x, size_t n, void *stream, ttt_error *err);
ttt_status ttt_cuda_from_bf16(float *y, int add, const uint16_t *x, size_t n, void *stream,
                              ttt_error *err);

/* Row-major triangular solve with lower-triangular L (n, n): X (n, m) ← L⁻¹·X (trans = 0) or
 * L⁻ᵀ·X (trans = 1); unit: L's diagonal is taken as 1 and not read. */
ttt_status ttt_cuda_strsm_lower(float *x, const float *L, int n, int m, int trans, int unit,
                                void *stream, ttt_error *err);

/* Shape moves. transpose: y (batch, n, m) (+)= x (batch, m, n)ᵀ. copy2d: rows × cols from src
 * (row stride lds) to dst (row stride ldd). */
ttt_status ttt_cuda_transpose(float *y, int add, const float *x, size_t batch, int m, int n,
                              void *stream, ttt_error *err);
ttt_status ttt_cuda_copy2d(float *dst, size_t ldd, int add, const float *src, size_t lds,
                           size_t rows, size_t cols, void *stream, ttt_error *err);
/* Prefix sums along dim 0 of x (T, d), in double; reverse: suffix sums. */
ttt_status ttt_cuda_cumsum(float *y, int add, const float *x, size_t T, size_t d, int reverse,
                           void *stream, ttt_error *err);
/* Masks on mats (m, n) matrices: TRIL keeps j ≤ i + k (else 0); CAUSAL_FILL keeps j ≤ i (else
 * −inf). */
enum { TTT_MASK_TRIL, TTT_MASK_CAUSAL_FILL };
ttt_status ttt_cuda_mask(int kind, float *y, int add, const float *x, size_t mats, int m, int n,
                         int k, void *stream, ttt_error *err);
/* D (T, T) = exp(g_i − g_j) for j ≤ i (j < i when strict), else 0. */
ttt_status ttt_cuda_decay_mask(float *D, const float *g, int T, int strict, void *stream,
                               ttt_error *err);

/* Embedding rows: y (n, d) = table[ids]; the backward scatter-adds dy into gtable (atomics). An
 * id outside [0, V) gives a zero row and no gradient. */
ttt_status ttt_cuda_gather_rows(float *y, const float *table, const int *ids, int n, int d,
                                int V, void *stream, ttt_error *err);
ttt_status ttt_cuda_scatter_add_rows(float *gtable, const float *dy, const int *ids, int n,
                                     int d, int V, void *stream, ttt_error *err);

/* What the device cross-entropy keeps on the device: the summed loss, counted rows, correct
 * arg-maxes (ttt_ce_stats). */
typedef struct ttt_cuda_ce_stats {
    double loss_sum;
    int count;
    int correct;
} ttt_cuda_ce_stats;
/* loss (1) = loss_sum / count (0 when nothing counts), lse (N), *stats; row_loss (N doubles)
 * and row_flag (N ints) are scratch. */
ttt_status ttt_cuda_cross_entropy(float *loss, float *lse, ttt_cuda_ce_stats *stats,
                                  double *row_loss, int *row_flag, const float *z,
                                  const int *targets, int N, int V, void *stream,
                                  ttt_error *err);
ttt_status ttt_cuda_cross_entropy_backward(float *g, int add, const float *z, const int *targets,
                                           const float *lse, const ttt_cuda_ce_stats *stats,
                                           const float *dl, int N, int V, void *stream,
                                           ttt_error *err);

/* Depthwise causal convolution (ops.h): y (B, T, C) = Σ_j w_j ⊙ x_{t−j} + bias, silu of it
 * when `silu`. The backward takes dz, the gradient of the convolution's output. */
ttt_status ttt_cuda_conv1d(float *y, const float *x, const float *w, const float *bias, int B,
                           int T, int C, int K, int silu, void *stream, ttt_error *err);
ttt_status ttt_cuda_conv1d_backward(float *gx, int add_x, float *gw, int add_w, const float *dz,
                                    const float *x, const float *w, int B, int T, int C, int K,
                                    void *stream, ttt_error *err);

/* RoPE (rope.h) of rows at positions pos0 + t; inverse: the rotation by −angle (the
 * backward). */
ttt_status ttt_cuda_rope(float *y, int add, const float *x, int T, int d, int pos0, float base,
                         int inverse, void *stream, ttt_error *err);

/* Fused causal attention (docs/device_ops.md "Fused causal attention") of B independent
 * sequences: q, k (B, T, dk), v (B, T, dv), dk and dv ≤ TTT_CUDA_ATTENTION_MAX_D.
 * Forward: o (B, T, dv) = softmax(scale·q kᵀ + log M) v, lse (B·T) each row's log-sum-exp.
 * Backward, given dO (the gradient of o) and lse: gq, gk, gv (+)= the gradients of q, k, v
 * (NULL: not wanted; a non-NULL one must not alias another); delta (B·T doubles) is scratch. */
#define TTT_CUDA_ATTENTION_MAX_D 128
ttt_status ttt_cuda_attention_causal(float *o, float *lse, const float *q, const float *k,
                                     const float *v, int B, int T, int dk, int dv, float scale,
                                     void *stream, ttt_error *err);
ttt_status ttt_cuda_attention_causal_backward(float *gq, int add_q, float *gk, int add_k,
                                              float *gv, int add_v, double *delta,
                                              const float *dO, const float *q, const float *k,
                                              const float *v, const float *lse, int B, int T,
                                              int dk, int dv, float scale, void *stream,
                                              ttt_error *err);

/* ---- recurrences (src/core/cuda/ops_recur.cu, docs/device_ops.md "Recurrences") ----
 * Sequential in time per independent lane, the CPU ops' expressions in their order. */

/* The LRU (docs/math.md §8.1, layers/diagonal/diagonal.h): complex vectors of n entries as
 * (2n) floats [Re | Im]; λ = exp(−e^ν + i e^θ), γ = sqrt(1 − |λ|²), h_t = λ h_{t−1} + γ u_t. */
ttt_status ttt_cuda_lru(float *h,           /* (T, 2n) out: every state */
                        const float *h0,    /* (2n) initial state, or NULL: zero */
                        const float *nu,    /* (n) */
                        const float *theta, /* (n) */
                        const float *u,     /* (T, 2n) */
                        int T, int n, void *stream, ttt_error *err);
/* Gradients of the states' loss given dH; any g may be NULL (not wanted); add: as above. */
ttt_status ttt_cuda_lru_backward(float *gnu, int add_nu,  /* (n) */
                                 float *gth, int add_th,  /* (n) */
                                 float *gU, int add_u,    /* (T, 2n) */
                                 float *gh0, int add_h0,  /* (2n) */
                                 const float *dH,         /* (T, 2n) ∂L/∂H */
                                 const float *H,          /* (T, 2n) the forward's states */
                                 const float *U,          /* (T, 2n) */
                                 const float *h0,         /* (2n) or NULL */
                                 const float *nu,         /* (n) */
                                 const float *theta,      /* (n) */
                                 int T, int n, void *stream, ttt_error *err);

/* Mamba(1)'s selective scan (docs/math.md §8.2): h_t = exp(Δ_t A) ⊙ h_{t−1} + (Δ_t ⊗ B_t) x_t,
 * y_t = h_t C_t + D ⊙ x_t, A = −exp(A_log). Hs is scratch of T·d·N floats (every state). */
ttt_status ttt_cuda_selective_scan(float *y,           /* (T, d) out */
                                   float *Hs,          /* (T, d, N) scratch */
                                   const float *h0,    /* (d, N) or NULL: zero */
                                   const float *x,     /* (T, d) */
                                   const float *delta, /* (T, d) Δ > 0 */
                                   const float *A_log, /* (d, N) */
                                   const float *B,     /* (T, N) */
                                   const float *C,     /* (T, N) */
                                   const float *D,     /* (d) or NULL */
                                   int T, int d, int N, void *stream, ttt_error *err);
/* Its backward given dy: the states recomputed into Hs, the adjoint into Dl (both scratch). */
ttt_status ttt_cuda_selective_scan_backward(float *gx, int add_x,     /* (T, d) */
                                            float *gdel, int add_del, /* (T, d) */
                                            float *gAl, int add_al,   /* (d, N) */
                                            float *gB, int add_b,     /* (T, N) */
                                            float *gC, int add_c,     /* (T, N) */
                                            float *gh0, int add_h0,   /* (d, N) */
                                            float *Hs,                /* (T, d, N) scratch */
                                            float *Dl,                /* (T, d, N) scratch */
                                            const float *dy,          /* (T, d) ∂L/∂y */
                                            const float *h0,          /* (d, N) or NULL */
                                            const float *x,           /* (T, d) */
                                            const float *delta,       /* (T, d) */
                                            const float *A_log,       /* (d, N) */
                                            const float *B,           /* (T, N) */
                                            const float *C,           /* (T, N) */
                                            const float *D,           /* (d) or NULL */
                                            int T, int d, int N, void *stream, ttt_error *err);
/* (∂D = Σ_t dy ⊙ x is ttt_cuda_reduce's TTT_RED_ROWS of dy ⊙ x.) */

/* The DPLR delta rule of RWKV-7 (docs/math.md "RWKV-7", layers/forms/delta_rule/dplr.h):
 * u_t = a_t S_{t−1}, S_t = Diag(w_t) S_{t−1} + b_tᵀ u_t + k_tᵀ v_t, o_t = q_t S_t, in chunks of C
 * tokens (the host op's chunks: the gates' drift restarts at each, the backward recomputes one
 * chunk's states at a time from its saved start). Gates first: W = the retentions as the host
 * forward rounds them (ttt_gate_dither per key row). */
ttt_status ttt_cuda_dplr_gates(float *W,           /* (T, d_k) out */
                               const float *log_w, /* (T, d_k), or NULL: w = 1 */
                               int T, int d_k, int C, void *stream, ttt_error *err);
ttt_status ttt_cuda_dplr(float *o,        /* (T, d_v) out */
                         float *S,        /* (d_k, d_v) S_0 in, S_T out */
                         float *saved,    /* (ceil(T / C), d_k, d_v) chunk starts out, or NULL */
                         const float *q,  /* (T, d_k) */
                         const float *k,  /* (T, d_k) */
                         const float *v,  /* (T, d_v) */
                         const float *a,  /* (T, d_k) */
                         const float *b,  /* (T, d_k) */
                         const float *W,  /* (T, d_k) from ttt_cuda_dplr_gates */
                         int T, int d_k, int d_v, int C, void *stream, ttt_error *err);
/* The backward given dO and dS = ∂L/∂S_T (overwritten with ∂L/∂S_0); St and U are scratch.
 * d_v ≤ TTT_CUDA_DPLR_MAX_DV: its du row is shared memory (48 KB), else TTT_ERR_UNSUPPORTED. */
#define TTT_CUDA_DPLR_MAX_DV 12288
ttt_status ttt_cuda_dplr_backward(float *gq, int add_q,   /* (T, d_k) */
                                  float *gk, int add_k,   /* (T, d_k) */
                                  float *gv, int add_v,   /* (T, d_v) */
                                  float *ga, int add_a,   /* (T, d_k) */
                                  float *gb, int add_b,   /* (T, d_k) */
                                  float *glw, int add_lw, /* (T, d_k) */
                                  float *dS,              /* (d_k, d_v) in and out */
                                  float *St,              /* (C + 1, d_k, d_v) scratch */
                                  float *U,               /* (C, d_v) scratch */
                                  const float *dO,        /* (T, d_v) */
                                  const float *q,         /* (T, d_k) */
                                  const float *k,         /* (T, d_k) */
                                  const float *v,         /* (T, d_v) */
                                  const float *a,         /* (T, d_k) */
                                  const float *b,         /* (T, d_k) */
                                  const float *log_w,     /* (T, d_k) or NULL */
                                  const float *W,         /* (T, d_k) from ttt_cuda_dplr_gates */
                                  const float *S0s,       /* (ceil(T / C), d_k, d_v) */
                                  int T, int d_k, int d_v, int C, void *stream, ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
