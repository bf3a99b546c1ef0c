/* The associative-scan (prefix-sum) form of linear recurrences (docs/math.md §5.5).
 *
 * A linear recurrence h_t = A_t h_{t−1} + b_t is the prefix "sum" of the pairs (A_t, b_t) under
 *     (A₂, b₂) ∘ (A₁, b₁) = (A₂A₁, A₂b₁ + b₂),
 * an associative operation, so the states can be computed by any parallel prefix algorithm. The
 * kernels here use the two-level (reduce, carry, fix-up) scan:
 *   1. the T tokens are cut into P blocks; each block runs its recurrence from a zero state, in
 *      parallel over blocks (OpenMP), giving local states and the block's pair (Ā_b, B_b);
 *   2. a scan over the P block pairs gives every block's true starting state h_{start,b};
 *   3. a fix-up adds Ā_{t0..t} h_{start,b} to each local state (outputs: its read-out), in
 *      parallel over blocks.
 * P depends only on T and the requested block length (never on the thread count), so a result is
 * the same bits on any number of threads. Each kernel has a naive sequential twin that folds the
 * pairs one by one with the operation above: the reference tests/test_scan.c ties them to. */
#ifndef TTT_SCAN_H
#define TTT_SCAN_H

#include "tensor.h"

/* Most blocks of one scan: bounds the carries' memory (P states). */
#define TTT_SCAN_MAX_BLOCKS 64

/* The pragma before a loop over the P blocks of a scan (for (int p = 0; p < P; p++)), which every
 * parallel phase of the forward scans and of their backward shares: blocks in parallel when there
 * are several, handed out one at a time (the trailing blocks may be shorter or empty). Nothing
 * without OpenMP. */
#ifdef _OPENMP
#define TTT_SCAN_PRAGMA_(x) _Pragma(#x)
#define TTT_SCAN_PARALLEL_BLOCKS(P)                                                              \
    TTT_SCAN_PRAGMA_(omp parallel for schedule(dynamic, 1) if ((P) > 1))
#else
#define TTT_SCAN_PARALLEL_BLOCKS(P)
#endif

/* Blocks of a scan over T tokens with blocks of at least `block` tokens (≥ 1), at most
 * TTT_SCAN_MAX_BLOCKS; 1 for T ≤ block. */
int ttt_scan_blocks(long T, int block);
/* Block b of P over T tokens covers [*t0, *t1); the block length is ceil(T / P), so trailing
 * blocks may be empty. The forward scans and their backward (linear_attention/scan_grad.c)
 * share it, so both cut a sequence the same way. */
void ttt_scan_block_range(int b, int P, int T, int *t0, int *t1);

/* Real diagonal recurrence h_t = a_t ⊙ h_{t−1} + b_t, n channels. h receives every state; h0 is
 * the initial state on entry and the final one on return; scratch from ctx->arena. `lda` is the row stride of a: n for a
 * gate per token, 0 for one constant gate (a has n values). */
void ttt_scan_diag(ttt_ctx *ctx, float *h, /* (T, n) */
                   float *h0,       /* (n) in/out */
                   const float *a,  /* (T, n) rows lda apart */
                   const float *b,  /* (T, n) */
                   int lda, int T, int n, int blocks);
void ttt_scan_diag_sequential(float *h, float *h0, const float *a, const float *b, int lda,
                              int T, int n);

/* Complex diagonal recurrence (LRU), values as (re, im) pairs: h_t = λ_t h_{t−1} + b_t with
 * complex products. Arrays hold n complex numbers per row (2n floats). */
void ttt_scan_cdiag(ttt_ctx *ctx, float *h, /* (T, 2n) */
                    float *h0,        /* (2n) in/out */
                    const float *lam, /* (T, 2n) rows lda apart; lda 0 = constant λ (2n) */
                    const float *b,   /* (T, 2n) */
                    int lda, int T, int n, int blocks);
void ttt_scan_cdiag_sequential(float *h, float *h0, const float *lam, const float *b, int lda,
                               int T, int n);

/* Gated linear attention as a scan over (Diag(α_t), β_t k_tᵀ v_t) with the read-out
 * o_t = q_t S_t (kernels.h ttt_linear_attention_recurrent's arguments): blocks run the recurrent
 * kernel from zero, the fix-up is o_t += (q_t ⊙ Π_{s=t0..t} α_s) S_{start,b}, one matrix product
 * per block. Scratch from ctx->arena (released before returning). TTT_ERR_NOMEM when a block's
 * recurrent kernel cannot allocate its rows (kernels.h; S is then untouched). */
ttt_status ttt_linear_attention_scan(ttt_ctx *ctx, float *o, /* (T, d_v) */
                               float *S,               /* (d_k, d_v) in/out */
                               const float *q,         /* (T, d_k) */
                               const float *k,         /* (T, d_k) */
                               const float *v,         /* (T, d_v) */
                               const float *beta,      /* (T) or NULL */
                               const float *log_alpha, /* (T) or (T, d_k) or NULL */
                               int alpha_vec, int T, int d_k, int d_v, int blocks);
/* The naive sequential twin: the pairs (A, B) folded token by token with the operation above
 * (A a vector of d_k retentions, B a (d_k, d_v) matrix), the read-out from A S_0 + B. */
void ttt_linear_attention_scan_sequential(float *o, float *S, const float *q, const float *k,
                                          const float *v, const float *beta,
                                          const float *log_alpha, int alpha_vec, int T, int d_k,
                                          int d_v);
/* Bytes ttt_linear_attention_scan takes from the arena. */
double ttt_linear_attention_scan_bytes(long T, int d_k, int d_v, int blocks);

#endif
