/* Matmul-heavy forms of (gated) linear attention: parallel (MATH.md §5.1) and chunkwise (§5.2).
 * Both must reproduce the recurrence of ttt_linear_attention_recurrent (layers/linear_attention.c):
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 *
 * One chunk of n tokens starting from state S (G = cumulative log decay inside the chunk,
 * inclusive of the token itself, so G_i = Σ_{r ≤ i} log α_r counted from the chunk start):
 *     O   = (Q ⊙ exp(G)) S + ((Q Kᵀ) ⊙ Γ) diag(β) V,        Γ_ij = exp(G_i − G_j) [i ≥ j]
 *     S  ← exp(G_n) S + (exp(G_n − G) ⊙ K)ᵀ diag(β) V
 * (with vector decay every exp(·) is per key dimension and "⊙ Γ" sits inside the q·k sum:
 * score_ij = Σ_c q_ic k_jc exp(G_ic − G_jc)). The parallel form is this with one chunk of
 * length T; the chunkwise form walks the chunks carrying S. Nearly all FLOPs are in four sgemm
 * calls per chunk (scores, inter-chunk read, intra-chunk read, state update).
 *
 * Numerics (MATH.md §0, gates in log space):
 * - G is accumulated in float64 and only differences G_i − G_j are exponentiated, so long
 *   sequences (the parallel form over T = 2048 reaches G ≈ −2000) lose no precision in the
 *   decay factors and nothing overflows: for retentions α ≤ 1 every exponent used outside the
 *   score matrix is ≤ 0 (exp(G_i) for the initial-state read, exp(G_n − G_j) for the write).
 * - Scalar decay: Γ is a scalar per (i, j) and multiplies Q Kᵀ after the sgemm.
 * - Vector decay: Γ cannot be pulled out of the q·k sum, so the scores are formed as
 *   (q_i ⊙ exp(G_i − G_r)) · (k_j ⊙ exp(G_r − G_j)) relative to a reference row r (the standard
 *   chunk-GLA trick). Each term then equals its true value q_ic k_jc exp(G_ic − G_jc) up to
 *   float rounding, as long as the factors neither overflow nor underflow. The trick is used on
 *   a block of rows only when the decay span of the block (max over key dims of
 *   max_i G_ic − min_i G_ic) is at most LA_SPAN_MAX = 60 nats, so every factor lies in
 *   [e^−60, e^60] ≈ [9e−27, 1e26], far inside float range (1.2e−38 … 3.4e38). Otherwise the block
 *   is split in two halves: the off-diagonal quarter uses the first row of the lower half as
 *   reference, where both factors are ≤ 1 for any span (for α ≤ 1), and the two diagonal
 *   quarters recurse. With log α ≈ −1 and C = 64 this is one split; the parallel form over
 *   T = 1000 with log α ≈ −0.5 recurses down to blocks of ~62 rows. Entries above the diagonal
 *   of a trick block may be large (≤ |q||k|e^60) and are overwritten with zeros.
 *   Gates with log α > 0 (retention above one) are computed by the same formulas but without
 *   the overflow guarantee. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "forms.h"

/* Largest decay span (nats) over which a block's scores use one reference row (see above). */
#define LA_SPAN_MAX 60.0

typedef struct la_work {
    float *A;  /* (C, C) intra-chunk scores */
    float *qs; /* (C, d_k) scaled queries */
    float *ks; /* (C, d_k) scaled keys */
    float *e;  /* (C) per-row factors (scalar decay) */
    float *f;  /* (C) per-column factors (scalar decay) */
    double *G; /* (C, gdim) cumulative log decay inside the chunk */
} la_work;

static void *scratch(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ctx->arena, bytes);
    TTT_ASSERT(p != NULL); /* callers size-check huge T (the parallel form needs T² floats) */
    return p;
}

/* C = A Bᵀ for row-major A (m, kd), B (n, kd), C (m, n) with leading dimension ldc. */
static void gemm_abt(float *c, int ldc, const float *a, const float *b, int m, int n, int kd) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kd, 1.0f, a, kd, b, kd, 0.0f, c,
                ldc);
}

/* Vector-decay scores of a block of n rows (see the header comment):
 *   A_ij = Σ_c q_ic k_jc exp(G_ic − G_jc) for i ≥ j; entries above the diagonal are garbage.
 * A (n, n) with leading dimension lda; q, k (n, d_k); G (n, d_k); qs, ks scratch (n, d_k). */
static void vec_scores(float *A, int lda, const float *q, const float *k, const double *G, int n,
                       int d_k, float *qs, float *ks) {
    double span = 0.0;
    for (int c = 0; c < d_k; c++) {
        double lo = G[c], hi = G[c];
        for (int i = 1; i < n; i++) {
            double g = G[(size_t)i * d_k + c];
            lo = g < lo ? g : lo;
            hi = g > hi ? g : hi;
        }
        if (hi - lo > span) span = hi - lo;
    }
    if (span <= LA_SPAN_MAX) {
        /* one reference row (row 0): factors within [e^−span, e^span] */
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d_k; c++) {
                size_t ic = (size_t)i * d_k + c;
                double d = G[ic] - G[c];
                qs[ic] = q[ic] * (float)exp(d);
                ks[ic] = k[ic] * (float)exp(-d);
            }
        gemm_abt(A, lda, qs, ks, n, n, d_k);
        return;
    }
    /* split: rows [m, n) against columns [0, m) with reference row m (factors ≤ 1) */
    const int m = n / 2;
    const double *Gm = G + (size_t)m * d_k;
    for (int i = m; i < n; i++)
        for (int c = 0; c < d_k; c++) {
            size_t ic = (size_t)i * d_k + c;
            qs[ic] = q[ic] * (float)exp(G[ic] - Gm[c]);
        }
    for (int j = 0; j < m; j++)
        for (int c = 0; c < d_k; c++) {
            size_t jc = (size_t)j * d_k + c;
            ks[jc] = k[jc] * (float)exp(Gm[c] - G[jc]);
        }
    gemm_abt(A + (size_t)m * lda, lda, qs + (size_t)m * d_k, ks, n - m, m, d_k);
    vec_scores(A, lda, q, k, G, m, d_k, qs, ks);
    vec_scores(A + (size_t)m * lda + m, lda, q + (size_t)m * d_k, k + (size_t)m * d_k, Gm, n - m,
               d_k, qs + (size_t)m * d_k, ks + (size_t)m * d_k);
}

/* One chunk of n tokens from state S (in/out), see the header comment. Pointers start at the
 * chunk's first token. gdim: 0 (no decay), 1 (scalar per token), d_k (vector). */
static void la_chunk(float *o,               /* (n, d_v) */
                     float *S,               /* (d_k, d_v) in/out */
                     const float *q,         /* (n, d_k) */
                     const float *k,         /* (n, d_k) */
                     const float *v,         /* (n, d_v) */
                     const float *beta,      /* (n) or NULL */
                     const float *log_alpha, /* (n, gdim) or NULL */
                     int gdim, int n, int d_k, int d_v, la_work *w) {
    float *A = w->A;
    double *G = w->G;
    /* G: inclusive cumulative log decay from the chunk start, in float64 */
    for (int i = 0; i < n; i++)
        for (int c = 0; c < gdim; c++) {
            double prev = i ? G[(size_t)(i - 1) * gdim + c] : 0.0;
            G[(size_t)i * gdim + c] = prev + (double)log_alpha[(size_t)i * gdim + c];
        }
    const double *Gn = G + (size_t)(n - 1) * gdim; /* decay of the whole chunk */

    /* ---- scores A = ((Q Kᵀ) ⊙ Γ) diag(β), lower triangular (n, n) ---- */
    if (gdim <= 1) {
        gemm_abt(A, n, q, k, n, n, d_k);
        if (gdim == 0) {
            for (int i = 0; i < n; i++)
                for (int j = 0; j <= i; j++) A[(size_t)i * n + j] *= beta ? beta[j] : 1.0f;
        } else {
            double lo = G[0], hi = G[0];
            for (int i = 1; i < n; i++) {
                lo = G[i] < lo ? G[i] : lo;
                hi = G[i] > hi ? G[i] : hi;
            }
            if (hi - lo <= LA_SPAN_MAX) {
                /* Γ_ij = e_i f_j with both factors in [e^−60, e^60] */
                for (int i = 0; i < n; i++) {
                    w->e[i] = (float)exp(G[i] - G[0]);
                    w->f[i] = (float)exp(G[0] - G[i]) * (beta ? beta[i] : 1.0f);
                }
                for (int i = 0; i < n; i++)
                    for (int j = 0; j <= i; j++) A[(size_t)i * n + j] *= w->e[i] * w->f[j];
            } else {
                for (int i = 0; i < n; i++)
                    for (int j = 0; j <= i; j++)
                        A[(size_t)i * n + j] *=
                            (float)exp(G[i] - G[j]) * (beta ? beta[j] : 1.0f);
            }
        }
    } else {
        vec_scores(A, n, q, k, G, n, d_k, w->qs, w->ks);
        if (beta)
            for (int i = 0; i < n; i++)
                for (int j = 0; j <= i; j++) A[(size_t)i * n + j] *= beta[j];
    }
    for (int i = 0; i < n; i++)
        memset(A + (size_t)i * n + i + 1, 0, sizeof(float) * (size_t)(n - 1 - i));

    /* ---- inter-chunk read O = (Q ⊙ exp(G)) S ---- */
    const float *qs = q;
    if (gdim > 0) {
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d_k; c++) {
                double g = gdim == 1 ? G[i] : G[(size_t)i * d_k + c];
                w->qs[(size_t)i * d_k + c] = q[(size_t)i * d_k + c] * (float)exp(g);
            }
        qs = w->qs;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, d_k, 1.0f, qs, d_k, S, d_v,
                0.0f, o, d_v);
    /* ---- intra-chunk read O += A V ---- */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, n, 1.0f, A, n, v, d_v, 1.0f, o,
                d_v);

    /* ---- state S ← exp(G_n) S + (exp(G_n − G) ⊙ K)ᵀ diag(β) V ---- */
    const float *ks = k;
    if (gdim > 0 || beta) {
        for (int j = 0; j < n; j++) {
            float b = beta ? beta[j] : 1.0f;
            for (int c = 0; c < d_k; c++) {
                double d = gdim == 0   ? 0.0
                           : gdim == 1 ? Gn[0] - G[j]
                                       : Gn[c] - G[(size_t)j * d_k + c];
                w->ks[(size_t)j * d_k + c] = k[(size_t)j * d_k + c] * (float)exp(d) * b;
            }
        }
        ks = w->ks;
    }
    if (gdim > 0)
        for (int c = 0; c < d_k; c++) {
            float a = (float)exp(gdim == 1 ? Gn[0] : Gn[c]);
            float *Sc = S + (size_t)c * d_v;
            for (int j = 0; j < d_v; j++) Sc[j] *= a;
        }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_k, d_v, n, 1.0f, ks, d_k, v, d_v, 1.0f,
                S, d_v);
}

static void la_run(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                   const float *v, const float *beta, const float *log_alpha, int alpha_vec,
                   int T, int d_k, int d_v, int chunk) {
    TTT_ASSERT(chunk >= 1 && T >= 0 && d_k >= 1 && d_v >= 1);
    if (T == 0) return;
    const int C = chunk < T ? chunk : T;
    const int gdim = log_alpha ? (alpha_vec ? d_k : 1) : 0;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    la_work w;
    w.A = scratch(ctx, sizeof(float) * (size_t)C * C);
    w.qs = scratch(ctx, sizeof(float) * (size_t)C * d_k);
    w.ks = scratch(ctx, sizeof(float) * (size_t)C * d_k);
    w.e = scratch(ctx, sizeof(float) * (size_t)C);
    w.f = scratch(ctx, sizeof(float) * (size_t)C);
    w.G = scratch(ctx, sizeof(double) * (size_t)C * (gdim ? gdim : 1));
    for (int t0 = 0; t0 < T; t0 += C) {
        const int n = t0 + C <= T ? C : T - t0;
        la_chunk(o + (size_t)t0 * d_v, S, q + (size_t)t0 * d_k, k + (size_t)t0 * d_k,
                 v + (size_t)t0 * d_v, beta ? beta + t0 : NULL,
                 log_alpha ? log_alpha + (size_t)t0 * gdim : NULL, gdim, n, d_k, d_v, &w);
    }
    ttt_arena_release(ctx->arena, mark);
}

/* MATH.md §5.1: the whole sequence as one chunk (T² scores in scratch). */
void ttt_linear_attention_parallel(ttt_ctx *ctx, float *o, float *S, const float *q,
                                   const float *k, const float *v, const float *beta,
                                   const float *log_alpha, int alpha_vec, int T, int d_k,
                                   int d_v) {
    la_run(ctx, o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k, d_v, T > 0 ? T : 1);
}

/* MATH.md §5.2: chunks of C tokens (the last may be shorter) carrying the state. */
void ttt_linear_attention_chunkwise(ttt_ctx *ctx, float *o, float *S, const float *q,
                                    const float *k, const float *v, const float *beta,
                                    const float *log_alpha, int alpha_vec, int T, int d_k,
                                    int d_v, int chunk) {
    la_run(ctx, o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k, d_v, chunk);
}
