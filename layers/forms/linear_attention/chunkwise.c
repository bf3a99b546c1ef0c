/* Matmul-heavy forms of (gated) linear attention: parallel (docs/math.md §5.1) and chunkwise (§5.2).
 * Both must reproduce the recurrence of ttt_linear_attention_recurrent (layers/forms/linear_attention/recurrent.c):
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 *
 * One chunk of n tokens starting from state S (G = cumulative log decay inside the chunk,
 * inclusive of the token itself, so G_i = Σ_{r ≤ i} log α_r counted from the chunk start):
 *     O   = (Q ⊙ exp(G)) S + ((Q Kᵀ) ⊙ Γ) diag(β) V,        Γ_ij = exp(G_i − G_j) [i ≥ j]
 *     S  ← exp(G_n) S + (exp(G_n − G) ⊙ K)ᵀ diag(β) V
 * (with vector decay every exp(·) is per key dimension and "⊙ Γ" sits inside the q·k sum:
 * score_ij = Σ_c q_ic k_jc exp(G_ic − G_jc)). The parallel form is this with one chunk of
 * length T; the chunkwise form walks the chunks carrying S. Nearly all FLOPs are in four sgemm
 * calls per chunk (scores, inter-chunk read, intra-chunk read, state update); scratch is
 * allocated once per call from ctx->arena (C² + O(C d_k) floats) and released on return.
 *
 * Numerics (docs/math.md §0, gates in log space; retentions α ≤ 1, i.e. log α ≤ 0):
 * - G is accumulated in float64 and exponentiated once per token (and key dimension) as
 *   E = exp(G) ≤ 1, or as differences G_i − G_j; nothing is a product of many gates. For long
 *   sequences (the parallel form over T = 2048 with log α ≈ −1 reaches G ≈ −2000) E underflows
 *   to 0, which is exact to float precision for the terms it multiplies (the state read
 *   exp(G_i) S_0, the state decay exp(G_n)); the write factors exp(G_n − G_j) ≤ 1 are formed from
 *   differences.
 * - Scores, the chunk-GLA trick: (Q ⊙ E)(K ⊙ 1/E)ᵀ with the chunk start as reference. Every
 *   term q_ic E_ic · k_jc / E_jc equals its true value q_ic k_jc exp(G_ic − G_jc) to a few float
 *   roundings, provided no factor overflows or underflows. It is used when the chunk's decay
 *   span (max over key dims of max(0, max_i G_ic) − min(0, min_i G_ic)) is at most
 *   LA_SPAN_MAX = 60 nats, so every factor lies in [e^−60, e^60] ≈ [9e−27, 1e26], far inside
 *   float range (1.2e−38 … 3.4e38). With log α ≥ −0.9 that holds for C = 64, with log α ≥ −0.45
 *   for C = 128. Entries above the diagonal may be large (≤ |q||k|e^60); they are overwritten
 *   with zeros. Its E and K ⊙ 1/E are reused for the read and the write (with a vector gate the
 *   keys carry β, β ⊙ K ⊙ 1/E, and the write's factor E_n scales the rows of the state update).
 * - Longer spans (strong gates, long chunks, the parallel form): scalar decay takes
 *   exp(G_i − G_j) per pair (ttt_fast_exp_d, fastexp.h: 0 below −87); vector decay,
 *   where the decay cannot be pulled out of the q·k sum, goes through vec_scores: a block whose
 *   span (relative to its first row) is ≤ 60 nats uses the trick with its first row as
 *   reference; a larger block is split in two halves, the off-diagonal quarter uses the first
 *   row of the lower half as reference, where both factors are ≤ 1 whatever the span, and the
 *   two diagonal quarters recurse. With log α ≈ −1 and C = 128 this is one split; the parallel
 *   form over T = 1000 with log α ≈ −0.5 recurses down to blocks of ~62 rows.
 * - Hard resets (log α < −104, −inf included; docs/math.md §0 "Hard resets") enter G as −104
 *   (ttt_gate_floor, kernels.h), so that no difference G_i − G_j is (−inf) − (−inf); every factor
 *   across a reset is then ≤ e^−104, 0 in float. A chunk holding a reset has a span above
 *   LA_SPAN_MAX and takes the exact paths for long spans above, except that with a vector gate
 *   a row resetting every key dimension starts a chunk of its own (la_run), from a zero state
 *   with its gates taken as 0, whose span is then that of its ordinary gates.
 * - Gates with log α > 0 (retention above one) go through the same formulas but without the
 *   overflow guarantee. */
#include "blas.h"
#include <math.h>
#include <string.h>

#include "fastexp.h"
#include "kernels.h"

/* Largest decay span (nats) over which scores use one reference row (see above). */
#define LA_SPAN_MAX 60.0
/* A vector gate's cumulative sums below −LA_G_FLOORED are formed again from floored gates
 * (la_chunk): −inf, −1e30, or sums so large that float64 loses the small gates in them. */
#define LA_G_FLOORED 1e6

typedef struct la_work {
    float *A;   /* (C, C) intra-chunk scores */
    float *qs;  /* (C, d_k) scaled queries (inter-chunk read) */
    float *qs2; /* (C, d_k) scaled queries (vec_scores scratch) */
    float *ks;  /* (C, d_k) scaled keys */
    float *f;   /* (C) per-column factors (scalar decay) */
    float *E;   /* (C, gdim) exp(G) */
    double *G;  /* (C, gdim) cumulative log decay inside the chunk */
    double *glo, *ghi; /* (d_k) per key dimension: lowest and highest G in the chunk */
    float *Sw;     /* (d_k, d_v) the chunk's write to the state */
    float *lf;     /* (C, d_k) vector gate: a chunk's gates from a reset (la_run) or floored
                    * (la_chunk) */
    double *drift; /* (gdim) the state decays' accumulated rounding over the chunks so far
                    * (ttt_gate_dither, kernels.h) */
} la_work;

static void *scratch(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ctx->arena, bytes);
    TTT_ASSERT(p != NULL); /* callers size-check huge T (the parallel form needs T² floats) */
    return p;
}

/* C = A Bᵀ for row-major A (m, kd), B (n, kd), C (m, n) with leading dimensions lda, ldb, ldc. */
static void gemm_abt(float *c, int ldc, const float *a, int lda, const float *b, int ldb, int m,
                     int n, int kd) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kd, 1.0f, a, lda, b, ldb, 0.0f, c,
                ldc);
}

/* β_j of a strided beta (NULL = 1). */
static inline float beta_at(const float *beta, int ldb, int j) {
    return beta ? beta[(size_t)j * ldb] : 1.0f;
}

/* Vector-decay scores of a block of n rows (see the header comment):
 *   A_ij = Σ_c q_ic k_jc exp(G_ic − G_jc) for i ≥ j; entries above the diagonal are garbage.
 * A (n, n) with leading dimension lda; q, k (n, d_k) with row strides ldq, ldk; G (n, d_k);
 * qs, ks scratch (n, d_k). */
static void vec_scores(float *A, int lda, const float *q, int ldq, const float *k, int ldk,
                       const double *G, int n, int d_k, float *qs, float *ks) {
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
        /* one reference row (row 0): factors within [e^−span, e^span]; 2n·d_k exponentials
         * through the vectorizable ttt_fast_exp_d (fastexp.h, float accuracy) */
        for (int i = 0; i < n; i++) {
            const double *restrict Gi = G + (size_t)i * d_k;
            const float *restrict qi = q + (size_t)i * ldq, *restrict ki = k + (size_t)i * ldk;
            float *restrict qsi = qs + (size_t)i * d_k, *restrict ksi = ks + (size_t)i * d_k;
            for (int c = 0; c < d_k; c++) {
                const double d = Gi[c] - G[c];
                qsi[c] = qi[c] * ttt_fast_exp_d(d);
                ksi[c] = ki[c] * ttt_fast_exp_d(-d);
            }
        }
        gemm_abt(A, lda, qs, d_k, ks, d_k, n, n, d_k);
        return;
    }
    /* split: rows [m, n) against columns [0, m) with reference row m (factors ≤ 1). (A row
     * that resets every key dimension never lies inside a block: la_run starts a chunk there.) */
    const int m = n / 2;
    const double *Gm = G + (size_t)m * d_k;
    for (int i = m; i < n; i++)
        for (int c = 0; c < d_k; c++) {
            size_t ic = (size_t)i * d_k + c;
            qs[ic] = q[(size_t)i * ldq + c] * ttt_fast_exp_d(G[ic] - Gm[c]);
        }
    for (int j = 0; j < m; j++)
        for (int c = 0; c < d_k; c++) {
            size_t jc = (size_t)j * d_k + c;
            ks[jc] = k[(size_t)j * ldk + c] * ttt_fast_exp_d(Gm[c] - G[jc]);
        }
    gemm_abt(A + (size_t)m * lda, lda, qs + (size_t)m * d_k, d_k, ks, d_k, n - m, m, d_k);
    vec_scores(A, lda, q, ldq, k, ldk, G, m, d_k, qs, ks);
    vec_scores(A + (size_t)m * lda + m, lda, q + (size_t)m * ldq, ldq, k + (size_t)m * ldk, ldk,
               Gm, n - m, d_k, qs + (size_t)m * d_k, ks + (size_t)m * d_k);
}

/* A vector gate's row (d_k) resets every key dimension (docs/math.md §0 "Hard resets"). The
 * first dimension decides for nearly every row, so that the scan for resets reads one gate per
 * token (the whole row took 5–10 % of GLA's forward at d = 64). */
static int la_row_resets(const float *la, int d_k) {
    if (!(la[0] < TTT_GATE_RESET)) return 0;
    int kept = 0;
    for (int c = 0; c < d_k; c++) kept |= !(la[c] < TTT_GATE_RESET);
    return !kept;
}

/* One chunk of n tokens from state S (in/out), see the header comment. Pointers start at the
 * chunk's first token; rows are ld->q, ld->k, … floats apart (kernels.h, ttt_form_ld).
 * kind: LA_NONE, LA_SCALAR (log_alpha (n)), LA_VECTOR (log_alpha (n, d_k)).
 *
 * E = exp(G) is taken once per token (and key dimension). It gives the inter-chunk read
 * Q ⊙ E, and when the chunk's span from its start (see the header comment) is ≤ LA_SPAN_MAX also
 * the scores (Q ⊙ E)(K ⊙ 1/E)ᵀ and the state write (K ⊙ 1/E) ⊙ E_n. Longer spans take the exact
 * but costlier paths: per-pair exponentials (scalar) or vec_scores (vector), and the write
 * factors exp(G_n − G_j) directly. */
enum { LA_NONE, LA_SCALAR, LA_VECTOR };

static void la_chunk(float *o,               /* (n, d_v) row stride ld->o */
                     float *S,               /* (d_k, d_v) in/out */
                     const float *q,         /* (n, d_k) row stride ld->q */
                     const float *k,         /* (n, d_k) row stride ld->k */
                     const float *v,         /* (n, d_v) row stride ld->v */
                     const float *beta,      /* (n) stride ld->beta, or NULL */
                     const float *log_alpha, /* (n) or (n, d_k), row stride ld->la, or NULL */
                     int kind, int n, int d_k, int d_v, const ttt_form_ld *ld, la_work *w) {
    const int ldq = ld->q, ldk = ld->k, ldv = ld->v, ldo = ld->o, ldb = ld->beta;
    const int gdim = kind == LA_NONE ? 0 : kind == LA_SCALAR ? 1 : d_k;
    float *A = w->A, *E = w->E, *qs = w->qs, *ks = w->ks;
    double *G = w->G;
    /* G: inclusive cumulative log decay from the chunk start, in float64; E = exp(G) */
    double span = 0.0;
    if (kind == LA_SCALAR) {
        double g = 0.0, lo = 0.0, hi = 0.0;
        for (int i = 0; i < n; i++) {
            g += (double)ttt_gate_floor(log_alpha[(size_t)i * ld->la]); /* resets: kernels.h */
            G[i] = g;
            E[i] = (float)exp(g);
            lo = g < lo ? g : lo;
            hi = g > hi ? g : hi;
        }
        span = hi - lo;
    } else if (kind == LA_VECTOR) {
        /* row by row, vectorized over the key dimensions; C·d_k exponentials per chunk through
         * the vectorizable ttt_fast_exp_d (fastexp.h: float accuracy for a float64 argument) —
         * libm's scalar exp took ~30 % of the chunk's time here (d = 128, C = 64). The same pass
         * forms the read's queries Q ⊙ E and the scores' keys β ⊙ K / E, so that each input row
         * is read once (the passes are bound by reading the inputs; docs/benchmarks.md "What
         * would close the remaining gaps"). K / E is valid when the span is ≤ LA_SPAN_MAX
         * (decided below); otherwise ks is overwritten before use.
         *
         * Hard resets: the gates are summed as given, and only when a sum falls below
         * LA_G_FLOORED (a −inf, −1e30 or a long run of resets) is the pass repeated on the gates
         * raised to the reset floor (ttt_gate_floor, kernels.h; in w->lf). A gate between
         * −LA_G_FLOORED and −104 is a reset all the same: every factor across it is ≤ e^−104,
         * 0 in float, and its sum keeps the small gates after it in float64. (Flooring inside
         * this loop made gcc give up vectorizing it, and a pass of its own cost 5–10 % of GLA's
         * forward at d = 64.) */
        double *lo = w->glo, *hi = w->ghi;
        const float *la = log_alpha;
        int ldl = ld->la;
        for (int pass = 0; pass < 2; pass++) {
            for (int c = 0; c < d_k; c++) lo[c] = hi[c] = 0.0;
            for (int i = 0; i < n; i++) {
                const double *Gp = i ? G + (size_t)(i - 1) * d_k : NULL;
                double *Gi = G + (size_t)i * d_k;
                float *restrict Ei = E + (size_t)i * d_k;
                float *restrict qsi = qs + (size_t)i * d_k, *restrict ksi = ks + (size_t)i * d_k;
                const float *li = la + (size_t)i * ldl;
                const float *qi = q + (size_t)i * ldq, *ki = k + (size_t)i * ldk;
                const float b = beta_at(beta, ldb, i);
                for (int c = 0; c < d_k; c++) {
                    const double g = (Gp ? Gp[c] : 0.0) + (double)li[c];
                    Gi[c] = g;
                    Ei[c] = ttt_fast_exp_d(g);
                    lo[c] = g < lo[c] ? g : lo[c];
                    hi[c] = g > hi[c] ? g : hi[c];
                }
                for (int c = 0; c < d_k; c++) { /* the row's E is in L1 */
                    qsi[c] = qi[c] * Ei[c];
                    ksi[c] = b * (ki[c] / Ei[c]);
                }
            }
            double low = 0.0;
            for (int c = 0; c < d_k; c++) low = lo[c] < low ? lo[c] : low;
            if (pass || !(low < -LA_G_FLOORED)) break;
            for (int i = 0; i < n; i++) /* in place when la_run passed w->lf */
                for (int c = 0; c < d_k; c++)
                    w->lf[(size_t)i * d_k + c] =
                        ttt_gate_floor(log_alpha[(size_t)i * ld->la + c]);
            la = w->lf;
            ldl = d_k;
        }
        for (int c = 0; c < d_k; c++)
            if (hi[c] - lo[c] > span) span = hi[c] - lo[c];
    }
    const int trick = span <= LA_SPAN_MAX;
    const double *Gn = G + (size_t)(n - 1) * gdim; /* decay of the whole chunk */
    const float *En = E + (size_t)(n - 1) * gdim;

    /* queries of the inter-chunk read: Q ⊙ E (E ≤ 1 for α ≤ 1; underflow to 0 is exact enough) */
    const float *qread = q;
    int ldqr = ldq;
    if (kind == LA_SCALAR)
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d_k; c++) qs[(size_t)i * d_k + c] = q[(size_t)i * ldq + c] * E[i];
    if (kind != LA_NONE) { /* LA_VECTOR: formed with E above */
        qread = qs;
        ldqr = d_k;
    }

    /* ---- scores A = ((Q Kᵀ) ⊙ Γ) diag(β), lower triangular (n, n) ---- */
    if (kind == LA_VECTOR && trick) {
        /* (Q ⊙ E)(β ⊙ K ⊙ 1/E)ᵀ: β is in the keys already; factors ≤ e^60 */
        gemm_abt(A, n, qs, d_k, ks, d_k, n, n, d_k);
    } else if (kind == LA_VECTOR) {
        vec_scores(A, n, q, ldq, k, ldk, G, n, d_k, w->qs2, w->ks);
    } else {
        gemm_abt(A, n, q, ldq, k, ldk, n, n, d_k);
    }
    if (kind == LA_SCALAR && trick) {
        /* Γ_ij β_j = E_i · (β_j / E_j), both factors within [e^−60, e^60] */
        for (int j = 0; j < n; j++) w->f[j] = beta_at(beta, ldb, j) / E[j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) A[(size_t)i * n + j] *= E[i] * w->f[j];
    } else if (kind == LA_SCALAR) {
        /* n²/2 exponentials of differences ≤ 0 through the vectorizable ttt_fast_exp_d
         * (fastexp.h: float accuracy, 0 below −87, where the float value underflows anyway) */
        for (int j = 0; j < n; j++) w->f[j] = beta_at(beta, ldb, j);
        for (int i = 0; i < n; i++) {
            float *restrict Ai = A + (size_t)i * n;
            const double gi = G[i];
            for (int j = 0; j <= i; j++) Ai[j] *= ttt_fast_exp_d(gi - G[j]) * w->f[j];
        }
    } else if (beta && !(kind == LA_VECTOR && trick)) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) A[(size_t)i * n + j] *= beta[(size_t)j * ldb];
    }
    for (int i = 0; i < n; i++)
        memset(A + (size_t)i * n + i + 1, 0, sizeof(float) * (size_t)(n - 1 - i));

    /* ---- read: O = (Q ⊙ E) S + A V ---- */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, d_k, 1.0f, qread, ldqr, S, d_v,
                0.0f, o, ldo);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, n, 1.0f, A, n, v, ldv, 1.0f, o,
                ldo);

    /* ---- state S ← E_n S + (exp(G_n − G) ⊙ K)ᵀ diag(β) V ---- */
    const float *kwrite = k;
    int ldkw = ldk;
    if (kind == LA_VECTOR && trick) {
        /* ks = β ⊙ K ⊙ 1/E from the scores; its factor E_n (≤ 1) scales row c of the write,
         * and is applied with the state's decay below */
        kwrite = ks;
        ldkw = d_k;
    } else if (kind != LA_NONE) {
        for (int j = 0; j < n; j++) {
            const float b = beta_at(beta, ldb, j);
            const float *restrict kj = k + (size_t)j * ldk;
            float *restrict ksj = ks + (size_t)j * d_k;
            if (kind == LA_SCALAR) {
                const float fs = (float)exp(Gn[0] - G[j]) * b;
                for (int c = 0; c < d_k; c++) ksj[c] = kj[c] * fs;
            } else { /* n·d_k exponentials: the vectorizable ttt_fast_exp_d, as above */
                const double *Gj = G + (size_t)j * d_k;
                for (int c = 0; c < d_k; c++) ksj[c] = kj[c] * (ttt_fast_exp_d(Gn[c] - Gj[c]) * b);
            }
        }
        kwrite = ks;
        ldkw = d_k;
    } else if (beta) {
        for (int j = 0; j < n; j++)
            for (int c = 0; c < d_k; c++)
                ks[(size_t)j * d_k + c] = k[(size_t)j * ldk + c] * beta[(size_t)j * ldb];
        kwrite = ks;
        ldkw = d_k;
    }
    /* The chunk's write W = (exp(G_n − G) ⊙ K)ᵀ diag(β) V is formed on its own and added in the
     * same sweep that decays the state, S ← E_n S + W: one rounding per state entry per chunk
     * whatever order the BLAS sums in (accumulating into S with β = 1 let a BLAS without
     * blocking, the reference CBLAS, round the state n times per chunk: the recurrent form's
     * float32 floor; docs/forms.md "Precision on hard inputs"). E_n is rounded so that its
     * product over the chunks stays exact: with a weak gate the same rounding each chunk would
     * add up. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_k, d_v, n, 1.0f, kwrite, ldkw, v, ldv,
                0.0f, w->Sw, d_v);
    const float as = kind == LA_SCALAR ? ttt_gate_dither(&w->drift[0], exp(Gn[0])) : 1.0f;
    for (int c = 0; c < d_k; c++) {
        const float a = kind == LA_VECTOR ? ttt_gate_dither(&w->drift[c], exp(Gn[c])) : as;
        float *restrict Sc = S + (size_t)c * d_v;
        const float *restrict Wc = w->Sw + (size_t)c * d_v;
        if (kind == LA_NONE)
            for (int j = 0; j < d_v; j++) Sc[j] += Wc[j];
        else if (kind == LA_VECTOR && trick) {
            const float en = En[c]; /* the write's factor E_n of key dimension c (above) */
            for (int j = 0; j < d_v; j++) Sc[j] = a * Sc[j] + en * Wc[j];
        } else
            for (int j = 0; j < d_v; j++) Sc[j] = a * Sc[j] + Wc[j];
    }
}

static void la_run(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                   const float *v, const float *beta, const float *log_alpha, int alpha_vec,
                   int T, int d_k, int d_v, int chunk, const ttt_form_ld *ld) {
    TTT_ASSERT(chunk >= 1 && T >= 0 && d_k >= 1 && d_v >= 1);
    TTT_ASSERT(ld->q >= d_k && ld->k >= d_k && ld->v >= d_v && ld->o >= d_v);
    TTT_ASSERT(!beta || ld->beta >= 1);
    TTT_ASSERT(!log_alpha || ld->la >= (alpha_vec ? d_k : 1));
    if (T == 0) return;
    const int C = chunk < T ? chunk : T;
    const int kind = !log_alpha ? LA_NONE : alpha_vec ? LA_VECTOR : LA_SCALAR;
    const int gdim = kind == LA_NONE ? 1 : kind == LA_SCALAR ? 1 : d_k; /* ≥ 1 for the sizes */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    la_work w;
    w.A = scratch(ctx, sizeof(float) * (size_t)C * C);
    w.qs = scratch(ctx, sizeof(float) * (size_t)C * d_k);
    w.qs2 = scratch(ctx, sizeof(float) * (size_t)C * d_k);
    w.ks = scratch(ctx, sizeof(float) * (size_t)C * d_k);
    w.f = scratch(ctx, sizeof(float) * (size_t)C);
    w.E = scratch(ctx, sizeof(float) * (size_t)C * gdim);
    w.G = scratch(ctx, sizeof(double) * (size_t)C * gdim);
    w.glo = scratch(ctx, sizeof(double) * (size_t)d_k);
    w.ghi = scratch(ctx, sizeof(double) * (size_t)d_k);
    w.Sw = scratch(ctx, sizeof(float) * (size_t)d_k * d_v);
    w.drift = scratch(ctx, sizeof(double) * (size_t)gdim);
    w.lf = kind == LA_VECTOR ? scratch(ctx, sizeof(float) * (size_t)C * d_k) : NULL;
    for (int c = 0; c < gdim; c++) w.drift[c] = 1.0;
    /* rows apart (a head of a (B, T, H, D) tensor): request the next chunk's rows ahead */
    const int gk = kind == LA_VECTOR ? d_k : 1;
    const int spread = ttt_form_ld_spread(ld, d_k, d_v);
    /* Chunks of C tokens, except that with a vector gate a row resetting every key dimension
     * (docs/math.md §0 "Hard resets") starts a chunk of its own, run from a zero state with the
     * reset's gates taken as 0: the same function (the state before the reset is multiplied by
     * 0 either way, the reset's own write is kept), but the chunk's gates then span what
     * ordinary gates do, so it keeps the one-reference-row products (a span across a reset takes
     * the exact long-span paths: GLA with a reset in every chunk of 64 took 1.5× the time
     * without resets, T = 16384, d = 128). */
    for (int t0 = 0, t1; t0 < T; t0 = t1) {
        t1 = t0 + C <= T ? t0 + C : T;
        int from_reset = 0;
        if (kind == LA_VECTOR) {
            from_reset = la_row_resets(log_alpha + (size_t)t0 * ld->la, d_k);
            for (int t = t0 + 1; t < t1; t++)
                if (la_row_resets(log_alpha + (size_t)t * ld->la, d_k)) t1 = t;
        }
        const int n = t1 - t0;
        const size_t r = (size_t)t0;
        if (spread && t0 + C < T) {
            const int n1 = t0 + 2 * C <= T ? C : T - t0 - C;
            ttt_prefetch_seq(ld, o, q, k, v, beta, log_alpha, gk, r + (size_t)C, n1, d_k, d_v);
        }
        const float *la = log_alpha ? log_alpha + r * ld->la : NULL;
        ttt_form_ld ldc = *ld;
        if (from_reset) {
            memset(S, 0, sizeof(float) * (size_t)d_k * d_v);
            for (int c = 0; c < gdim; c++) w.drift[c] = 1.0; /* nothing to carry */
            for (int i = 0; i < n; i++)
                memcpy(w.lf + (size_t)i * d_k, la + (size_t)i * ld->la, sizeof(float) * d_k);
            memset(w.lf, 0, sizeof(float) * d_k);
            la = w.lf;
            ldc.la = d_k;
        }
        la_chunk(o + r * ld->o, S, q + r * ld->q, k + r * ld->k, v + r * ld->v,
                 beta ? beta + r * ld->beta : NULL, la, kind, n, d_k, d_v, &ldc, &w);
    }
    ttt_arena_release(ctx->arena, mark);
}

/* The strides of contiguous (T, d) arrays. */
static ttt_form_ld dense_ld(int alpha_vec, int d_k, int d_v) {
    return (ttt_form_ld){.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1,
                         .la = alpha_vec ? d_k : 1};
}

/* docs/math.md §5.1: the whole sequence as one chunk (T² scores in scratch). */
void ttt_linear_attention_parallel(ttt_ctx *ctx, float *o, float *S, const float *q,
                                   const float *k, const float *v, const float *beta,
                                   const float *log_alpha, int alpha_vec, int T, int d_k,
                                   int d_v) {
    const ttt_form_ld ld = dense_ld(alpha_vec, d_k, d_v);
    la_run(ctx, o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k, d_v, T > 0 ? T : 1, &ld);
}

/* docs/math.md §5.2: chunks of C tokens (the last may be shorter) carrying the state. */
void ttt_linear_attention_chunkwise(ttt_ctx *ctx, float *o, float *S, const float *q,
                                    const float *k, const float *v, const float *beta,
                                    const float *log_alpha, int alpha_vec, int T, int d_k,
                                    int d_v, int chunk) {
    const ttt_form_ld ld = dense_ld(alpha_vec, d_k, d_v);
    la_run(ctx, o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k, d_v, chunk, &ld);
}

/* docs/math.md §5.2 on rows ld floats apart (kernels.h): what ttt apply runs on a head of a
 * (B, T, H, D) tensor in place. */
void ttt_linear_attention_chunkwise_ld(ttt_ctx *ctx, float *o, float *S, const float *q,
                                       const float *k, const float *v, const float *beta,
                                       const float *log_alpha, int alpha_vec, int T, int d_k,
                                       int d_v, int chunk, const ttt_form_ld *ld) {
    la_run(ctx, o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k, d_v, chunk, ld);
}
