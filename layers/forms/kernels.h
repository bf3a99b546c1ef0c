/* Closed-form kernels of the classic layers: the fast paths presets pick, each tied to the generic
 * TTT driver (layer.c) by the equivalence tests.
 *
 * Raw row-major float arrays, outputs first, then inputs, then sizes. Per head, per sequence.
 * Gates: `log_alpha` holds log retentions (docs/math.md §0: log space), either one per token (T) or,
 * with alpha_vec set, one per token and key dimension (T, d_k) (GLA); NULL = no decay.
 * `beta` (T) holds the per-token write strength (θ·η_t); NULL = 1. */
#ifndef TTT_FORMS_H
#define TTT_FORMS_H

#include "status.h"

/* Fused multiply-adds in the recurrent kernels' register blocks: gcc's per-function option
 * (the build's default keeps a·b + c as two roundings); clang contracts within an expression by
 * default and has no such attribute. */
#if defined(__clang__) || !defined(__GNUC__)
#define TTT_FP_CONTRACT
#else
#define TTT_FP_CONTRACT __attribute__((optimize("fp-contract=fast")))
#endif

/* `#pragma omp simd reduction(+ : vars)` on the loop that follows: the loop's sums in `vars` may be
 * reordered into vector lanes (gcc and clang keep a scalar sum in order otherwise, which is one
 * add per element in a dependency chain). The sums it is used for are in float64, where the
 * order changes only the last bits. Nothing without OpenMP, whose pragmas would be unknown. */
#define TTT_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#define TTT_SIMD_SUM(...) TTT_PRAGMA(omp simd reduction(+ : __VA_ARGS__))
#else
#define TTT_SIMD_SUM(...)
#endif

/* Hard resets (docs/math.md §0 "Hard resets"). A log retention at or below TTT_GATE_RESET is a
 * reset: its retention is exactly 0 (float32's exp underflows to 0 below −103.98, so the float32
 * recurrence already computes α = 0 there) and the gradient with respect to it is 0. log α = −inf
 * is the canonical reset. The chunked forms take differences of cumulative sums G_i − G_j of the
 * gates, which a −inf (or −1e30, which swallows the small gates after it in float64) turns into
 * (−inf) − (−inf) = NaN, so they sum ttt_gate_floor(log α) instead: every exponential that spans a
 * reset is then ≤ e^−104, 0 in float, and the sums stay small enough for float64 to keep the
 * in-between gates. A NaN gate stays NaN. */
#define TTT_GATE_RESET (-104.0f)

static inline float ttt_gate_floor(float log_alpha) {
    return log_alpha < TTT_GATE_RESET ? TTT_GATE_RESET : log_alpha;
}

/* A retention α = exp(log α) rounded to float32 so that the running product of the retentions
 * a form multiplies its state by stays within one rounding of the exact exp(Σ log α), however
 * many steps (docs/forms.md "Precision on hard inputs"). Rounding each α to nearest on its own
 * errs to the same side every step when the gate is constant: a relative error of up to 3e-8 per
 * step that adds up over T steps (1.2e-5 at T = 1024 for log α = −1e-5, 1e-4 at 16K). Here each
 * factor is rounded from α divided by the product's drift so far (`*drift`, one per state row or
 * per state, starting at 1.0), which carries the error forward instead of repeating it.
 * `alpha` is exp(log α) in double. */
static inline float ttt_gate_dither(double *drift, double alpha) {
    if (alpha < 1e-30) { /* the state is wiped: nothing to carry */
        *drift = 1.0;
        return (float)alpha;
    }
    const float a = (float)(alpha / *drift);
    *drift *= (double)a / alpha;
    return a;
}

/* Row strides (leading dimensions, in floats) of a sequence's arrays, for the `_ld` variants of the
 * kernels below, which read and write sequences lying inside larger arrays without copying them:
 * one head of a (B, T, H, D) tensor has row stride H·D (layers/batch.c, behind ttt apply). Row t
 * of q is at q + t·ld.q, value t of beta at beta + t·ld.beta, and so on; a contiguous (T, D)
 * array has stride D, and beta and a scalar log_alpha stride 1. Strides only change where values are read
 * and written, never the arithmetic: an `_ld` call returns the same bits as the contiguous call on
 * a copy of the rows (tests/test_la_forms.c, tests/test_delta_forms.c). */
typedef struct ttt_form_ld {
    int o, q, k, v; /* ≥ d_v, d_k, d_k, d_v */
    int beta;       /* ≥ 1 (unused when beta is NULL) */
    int la;         /* ≥ 1 for a gate per token, ≥ d_k for a vector gate (unused when NULL) */
} ttt_form_ld;

/* Ask for `rows` rows of `cols` floats, `ld` floats apart, ahead of their use (into L2; `write`:
 * for writing). Rows of one head of a (B, T, H, D) tensor are H·D floats apart, a pattern the
 * hardware prefetchers do not follow far enough ahead, so with such strides the chunkwise kernels
 * request the next chunk's rows while they compute the current one, and the recurrent kernels a
 * token's rows a few tokens before it (measured at H = 8, d = 64, one thread: 10–20 % of the
 * strided kernels' time). A prefetch never faults and changes no result. */
static inline void ttt_prefetch_rows(const float *p, /* (rows, ld) */
                                     size_t ld, int rows, int cols, int write) {
#if defined(__GNUC__)
    for (int r = 0; r < rows; r++) {
        const float *row = p + (size_t)r * ld;
        for (int c = 0; c < cols; c += 16) { /* one per 64-byte line, and the row's last one */
            if (write) __builtin_prefetch(row + c, 1, 2);
            else __builtin_prefetch(row + c, 0, 2);
        }
        if (write) __builtin_prefetch(row + cols - 1, 1, 2);
        else __builtin_prefetch(row + cols - 1, 0, 2);
    }
#else
    (void)p, (void)ld, (void)rows, (void)cols, (void)write;
#endif
}

/* Whether rows lie apart (a head inside a (B, T, H, D) tensor): only then does prefetching pay. */
static inline int ttt_form_ld_spread(const ttt_form_ld *ld, int d_k, int d_v) {
    return ld->q > d_k || ld->k > d_k || ld->v > d_v || ld->o > d_v;
}

/* Request rows [r, r + n) of a sequence's arrays: q, k, v to read, o to write, and beta and
 * log_alpha (gk values per row) when not NULL. */
static inline void ttt_prefetch_seq(const ttt_form_ld *ld, const float *o, const float *q,
                                    const float *k, const float *v, const float *beta,
                                    const float *log_alpha, int gk, size_t r, int n, int d_k,
                                    int d_v) {
    ttt_prefetch_rows(q + r * ld->q, ld->q, n, d_k, 0);
    ttt_prefetch_rows(k + r * ld->k, ld->k, n, d_k, 0);
    ttt_prefetch_rows(v + r * ld->v, ld->v, n, d_v, 0);
    ttt_prefetch_rows(o + r * ld->o, ld->o, n, d_v, 1);
    if (log_alpha) ttt_prefetch_rows(log_alpha + r * ld->la, ld->la, n, gk, 0);
    if (beta) ttt_prefetch_rows(beta + r * ld->beta, ld->beta, n, 1, 0);
}

/* ---- recurrent kernels ----
 * Their row buffers live on the stack up to a width of 256 (d_v, d_k or the row group); wider
 * rows take one allocation per call. When that fails they return TTT_ERR_NOMEM before writing
 * anything (o and S untouched); otherwise TTT_OK. */

/* Recurrent (gated) linear attention (docs/math.md §4, rows linear_attention/retnet/mamba2/gla):
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 * S is the state: initial on entry, final on return. */
ttt_status ttt_linear_attention_recurrent(float *o,             /* (T, d_v) */
                                    float *S,             /* (d_k, d_v) in/out */
                                    const float *q,       /* (T, d_k) */
                                    const float *k,       /* (T, d_k) */
                                    const float *v,       /* (T, d_v) */
                                    const float *beta,    /* (T) or NULL */
                                    const float *log_alpha, /* (T) or (T, d_k) or NULL */
                                    int alpha_vec, int T, int d_k, int d_v);

/* The same with row strides (ttt_form_ld). */
ttt_status ttt_linear_attention_recurrent_ld(float *o, float *S, const float *q, const float *k,
                                       const float *v, const float *beta,
                                       const float *log_alpha, int alpha_vec, int T, int d_k,
                                       int d_v, const ttt_form_ld *ld);

/* Recurrent (gated) delta rule (docs/math.md §4, rows deltanet/gated_deltanet; coupled decay):
 *     S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t. */
ttt_status ttt_delta_rule_recurrent(float *o,               /* (T, d_v) */
                              float *S,               /* (d_k, d_v) in/out */
                              const float *q,         /* (T, d_k) */
                              const float *k,         /* (T, d_k) */
                              const float *v,         /* (T, d_v) */
                              const float *beta,      /* (T) or NULL */
                              const float *log_alpha, /* (T) or NULL */
                              int T, int d_k, int d_v);
/* The same with row strides (ttt_form_ld; the vector gate's stride is unused). */
ttt_status ttt_delta_rule_recurrent_ld(float *o, float *S, const float *q, const float *k,
                                 const float *v, const float *beta, const float *log_alpha,
                                 int T, int d_k, int d_v, const ttt_form_ld *ld);
/* KDA (docs/math.md §4.5): the delta rule with a gate per token and key dimension,
 *     S_t = (I − β_t k_tᵀ k_t) Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t,
 * log_alpha (T, d_k) with row stride ld->la (≥ d_k); −inf is a hard reset of that key row. */
ttt_status ttt_delta_rule_recurrent_key_ld(float *o, float *S, const float *q, const float *k,
                                     const float *v, const float *beta, const float *log_alpha,
                                     int T, int d_k, int d_v, const ttt_form_ld *ld);

/* ---- matmul-heavy forms (each must equal the recurrent kernel above; docs/math.md §5, §6) ----
 * Scratch memory comes from ctx->arena and is released before returning. S is the state
 * (initial on entry, final on return) exactly as for the recurrent kernels, so a sequence can be
 * processed in pieces. `chunk` is the chunk size C (≥ 1); T need not be a multiple of it. */

#include "tensor.h"

/* Parallel (quadratic) gated linear attention, docs/math.md §5.1:
 *     O = (Q ⊙ exp(G)) S_0 + ((Q Kᵀ) ⊙ D) diag(β) V,  D_ij = exp(G_i − G_j)[i ≥ j], G = cumsum(log α)
 * (vector decay: the decay enters per key dimension, Q_i ⊙ exp(G_i), K_j ⊙ exp(−G_j) with the
 * products formed in a numerically safe way). */
void ttt_linear_attention_parallel(ttt_ctx *ctx, float *o, float *S, const float *q,
                                   const float *k, const float *v, const float *beta,
                                   const float *log_alpha, int alpha_vec, int T, int d_k,
                                   int d_v);
/* Chunkwise gated linear attention, docs/math.md §5.2. */
void ttt_linear_attention_chunkwise(ttt_ctx *ctx, float *o, float *S, const float *q,
                                    const float *k, const float *v, const float *beta,
                                    const float *log_alpha, int alpha_vec, int T, int d_k,
                                    int d_v, int chunk);
/* The same with row strides (ttt_form_ld). The parallel form is this with chunk = T. */
void ttt_linear_attention_chunkwise_ld(ttt_ctx *ctx, float *o, float *S, const float *q,
                                       const float *k, const float *v, const float *beta,
                                       const float *log_alpha, int alpha_vec, int T, int d_k,
                                       int d_v, int chunk, const ttt_form_ld *ld);
/* Chunkwise (gated) delta rule via the WY / UT transform, docs/math.md §5.3. */
void ttt_delta_rule_chunkwise(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                              const float *v, const float *beta, const float *log_alpha, int T,
                              int d_k, int d_v, int chunk);
/* The same with row strides (ttt_form_ld; the vector gate's stride is unused). The parallel form
 * is this with chunk = T. */
void ttt_delta_rule_chunkwise_ld(ttt_ctx *ctx, float *o, float *S, const float *q,
                                 const float *k, const float *v, const float *beta,
                                 const float *log_alpha, int T, int d_k, int d_v, int chunk,
                                 const ttt_form_ld *ld);
/* In place: the strictly lower part L of A (n, n) becomes that of (I + L)⁻¹ (unit diagonal
 * implied), formed in float64 and rounded once (delta_rule/chunkwise.c; the chunk inverse of the
 * delta-rule forms). X: scratch of np × np doubles, np = n rounded up to 8. */
void ttt_unit_lower_invert(float *A, double *X, int n);
/* U ← (I + L)⁻¹ U (n, d_v) and W ← (I + L)⁻¹ W (n, d_k), L the strictly lower part of A: through
 * the float64 inverse when X (scratch as above) is given (A is then overwritten by it), by
 * triangular solves otherwise (long chunks). The delta rule's pseudo-values and keys. */
void ttt_unit_lower_apply(float *A, double *X, int n, float *U, int d_v, float *W, int d_k);
/* Parallel (quadratic) delta rule, docs/math.md §5.1 (with an initial state through the pseudo-values
 * V' = U − W S_0; decay as in §5.3 with a single chunk of length T). */
void ttt_delta_rule_parallel(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                             const float *v, const float *beta, const float *log_alpha, int T,
                             int d_k, int d_v);

/* Titans' chunked momentum (docs/math.md §3 "momentum", §6 item 5; layers/forms/titans/chunked.c): the linear model
 * with the squared loss, decoupled decay and gradients taken at the chunk start — what the generic
 * driver computes with optimizer `momentum` (no Nesterov), `steps: per_token`, mini_batch = chunk:
 *     g_t = η_t k_tᵀ(k_t S_0 − v_t),  M_t = μ M_{t−1} − θ g_t,  S_t = α_t S_{t−1} + M_t,  o_t = q_t S_t
 * (S_0 = the state at the start of t's chunk), evaluated per chunk with matmuls. S and M are the
 * state and the momentum (initial on entry, final on return). eta (T) may be NULL (= 1);
 * log_alpha is one log retention per token (T) or NULL (no decay). */
void ttt_momentum_chunked(ttt_ctx *ctx, float *o, /* (T, d_v) */
                          float *S,               /* (d_k, d_v) in/out */
                          float *M,               /* (d_k, d_v) in/out */
                          const float *q,         /* (T, d_k) */
                          const float *k,         /* (T, d_k) */
                          const float *v,         /* (T, d_v) */
                          const float *eta,       /* (T) or NULL */
                          const float *log_alpha, /* (T) or NULL */
                          float theta, float mu, int T, int d_k, int d_v, int chunk);

/* The backward of one delta-rule write S += β kᵀ e at a token (the write of KDA's and Gated
 * DeltaProduct's recurrent kernels, docs/math.md §4.5 and §4.7), given dS, the gradient of the
 * state after it: de = β·(k dS)ᵀ (d_v, overwritten), dβ += Σ_i k_i (dS e)_i (accumulated in
 * float64), dk += β·(dS e) and dv += de, each only when its pointer is not NULL. */
static inline void ttt_delta_write_grad(const float *dS, /* (d_k, d_v) */
                                        const float *e,  /* (d_v) the written residual */
                                        const float *kt, /* (d_k) */
                                        float b, int d_k, int d_v,
                                        float *de,       /* (d_v) out */
                                        float *gb,       /* (1) or NULL */
                                        float *gk,       /* (d_k) or NULL */
                                        float *gv) {     /* (d_v) or NULL */
    double db = 0.0;
    for (int j = 0; j < d_v; j++) de[j] = 0.0f;
    for (int i = 0; i < d_k; i++) {
        float dse = 0.0f;
        for (int j = 0; j < d_v; j++) {
            const float g = dS[(size_t)i * d_v + j];
            dse += g * e[j];
            de[j] += kt[i] * g;
        }
        db += (double)kt[i] * dse;
        if (gk) gk[i] += b * dse;
    }
    if (gb) *gb += (float)db;
    for (int j = 0; j < d_v; j++) {
        de[j] *= b;
        if (gv) gv[j] += de[j];
    }
}

#endif
