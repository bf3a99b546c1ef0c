/* The composed (slow, reference) differentiable closed forms and ttt_layer_forward_diff
 * (composed.h). Every form is a chain of recorded ops per chunk (docs/math.md §5.2–5.4 and Titans'
 * chunked momentum), so the tape differentiates it without any hand-written derivative except
 * the trivial row gather at the end (cat_rows below). The state runs from chunk to chunk as a
 * graph node, so gradients reach the initial state and every gate.
 *
 * Numerics follow the fast kernels where ops allow it: cumulative log gates G = cumsum(log α)
 * (accumulated in double by ttt_cumsum), Γ = exp of differences (ttt_decay_mask) and write
 * factors exp(G_n − G_j) from differences, so with retentions α ≤ 1 no factor exceeds 1. The one
 * exception is the vector-decay score matrix, whose key factors reach e^60 (the chunk is cut
 * where they would exceed it; see composed.h and la_chunk_ops). Unlike the kernels, the float
 * rounding of G before the differences is not avoided: over long chunks (the parallel form) Γ
 * carries a relative error ~6e-8·|G|, which is 1e-5 at |G| = 170 and harmless for a reference. */
#include "composed.h"

#include <math.h>
#include <string.h>

#include "dual_grad.h"
#include "fused_grad.h"
#include "ttt_dual.h" /* TTT_LINEAR_DUAL_LN_EPS = the ttt_linear model's layer-norm eps */

/* ------------------------------------------------------------------------------------------ */
/* helpers */

/* Rows [r0, r1) of an optional tensor. */
static ttt_tensor *rows_of(ttt_ctx *ctx, const ttt_tensor *t, int r0, int r1) {
    return t ? ttt_slice_rows(ctx, t, r0, r1) : NULL;
}

/* Gather of per-chunk outputs into one (Σ rows, cols) tensor; each part gets its rows of the
 * gradient back. (A chain of ttt_concat_rows would copy O(T²/C) floats.) */
static void cat_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    size_t off = 0;
    for (int p = 0; p < e->n_in; p++) {
        const ttt_tensor *t = e->in[p];
        float *g = ttt_grad(ctx, t);
        if (g)
            for (size_t i = 0; i < t->n; i++) g[i] += dout[off + i];
        off += t->n;
    }
}

static ttt_tensor *cat_rows(ttt_ctx *ctx, ttt_tensor *const *parts, int n, int cols) {
    int rows = 0;
    for (int p = 0; p < n; p++) {
        TTT_ASSERT(parts[p]->ndim == 2 && TTT_COLS(parts[p]) == cols);
        rows += TTT_ROWS(parts[p]);
    }
    ttt_tensor *r = ttt_tensor_2d(ctx, rows, cols);
    size_t off = 0;
    for (int p = 0; p < n; p++) {
        if (parts[p]->n) memcpy(r->data + off, parts[p]->data, parts[p]->n * sizeof(float));
        off += parts[p]->n;
    }
    ttt_tape_entry *e = ttt_tape_record(ctx, cat_rows_backward, r,
                                        (const ttt_tensor *const *)parts, n);
    if (e) e->name = "cat_rows";
    return r;
}

/* A constant (T) tensor filled with x. */
static ttt_tensor *const_1d(ttt_ctx *ctx, int n, float x) {
    ttt_tensor *t = ttt_tensor_1d(ctx, n);
    ttt_tensor_fill(t, x);
    return t;
}

static void check_qkv(const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v,
                      const ttt_tensor *beta, const ttt_tensor *log_alpha, const ttt_tensor *S0) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(q->ndim == 2 && k->ndim == 2 && v->ndim == 2);
    TTT_ASSERT(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d_k);
    TTT_ASSERT(!beta || (beta->n == (size_t)T && beta->shape[0] == T));
    TTT_ASSERT(!log_alpha || (log_alpha->ndim == 1 && log_alpha->shape[0] == T) ||
               (log_alpha->ndim == 2 && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == d_k));
    TTT_ASSERT(S0 && S0->n == (size_t)d_k * d_v);
}

/* exp(G_n − G) for the cumulative gates G (n) or (n, d_k) of a chunk: the write factors, as
 * exp(−(G − G_n)) so that every exponent is a difference (≤ 0 for α ≤ 1). Gn is row n − 1. */
static ttt_tensor *write_factors(ttt_ctx *ctx, const ttt_tensor *G, const ttt_tensor *Gn) {
    return ttt_exp(ctx, ttt_neg(ctx, ttt_sub(ctx, G, Gn)));
}

/* Cumulative sums of −inf give (−inf) − (−inf) = NaN in the differences below; the floored
 * gates keep every difference finite and every factor across a reset ≤ e^−104 (kernels.h). */
const ttt_tensor *ttt_form_gates_floored(ttt_ctx *ctx, const ttt_tensor *la) {
    if (!la) return NULL;
    for (size_t i = 0; i < la->n; i++)
        if (la->data[i] < TTT_GATE_RESET) return ttt_clamp(ctx, la, TTT_GATE_RESET, INFINITY);
    return la;
}

/* ------------------------------------------------------------------------------------------ */
/* (a) gated linear attention, docs/math.md §5.2 */

/* Vector decay: the largest span (nats) of the cumulative gates inside one chunk, measured from
 * its first row, that the one-reference-row scores accept (factors within [e^−60, e^60], far
 * inside float range; the bound of linear_attention/chunkwise.c). Longer chunks are cut in halves: chunking does
 * not change the function, so the result is the same layer, only evaluated in more pieces. */
#define LA_COMPOSED_SPAN 60.0

/* max over key dims of (max − min) of the partial sums Σ_{t0 < r ≤ i} log α_rc, i in [t0, t1) */
static double vec_span(const float *la, /* (T, d_k) */ int t0, int t1, int d_k) {
    double span = 0.0;
    for (int c = 0; c < d_k; c++) {
        double g = 0.0, lo = 0.0, hi = 0.0;
        for (int i = t0 + 1; i < t1; i++) {
            g += (double)la[(size_t)i * d_k + c];
            lo = g < lo ? g : lo;
            hi = g > hi ? g : hi;
        }
        if (hi - lo > span) span = hi - lo;
    }
    return span;
}

/* One chunk: returns O_c (n, d_v), replaces *S by the state at the chunk end. */
static ttt_tensor *la_chunk_ops(ttt_ctx *ctx, ttt_tensor **S, const ttt_tensor *Q,
                                const ttt_tensor *K, const ttt_tensor *V, const ttt_tensor *b,
                                const ttt_tensor *la) {
    const int n = TTT_ROWS(K), d_k = TTT_COLS(K);
    const ttt_tensor *Vb = b ? ttt_scale_rows(ctx, V, b) : V; /* diag(β) V (n, d_v) */
    ttt_tensor *O, *Sn;
    if (!la) {
        ttt_tensor *P = ttt_tril(ctx, ttt_matmul(ctx, Q, 0, K, 1), 0); /* (Q Kᵀ) ⊙ M */
        O = ttt_add(ctx, ttt_matmul(ctx, Q, 0, *S, 0), ttt_matmul(ctx, P, 0, Vb, 0));
        Sn = ttt_add(ctx, *S, ttt_matmul(ctx, K, 1, Vb, 0));
    } else if (la->ndim == 1) {
        ttt_tensor *G = ttt_cumsum(ctx, la);               /* (n) */
        ttt_tensor *Gam = ttt_decay_mask(ctx, G, 0);       /* (n, n) Γ */
        ttt_tensor *P = ttt_mul(ctx, ttt_matmul(ctx, Q, 0, K, 1), Gam);
        O = ttt_add(ctx, ttt_scale_rows(ctx, ttt_matmul(ctx, Q, 0, *S, 0), ttt_exp(ctx, G)),
                    ttt_matmul(ctx, P, 0, Vb, 0));
        ttt_tensor *Gn = ttt_slice_rows(ctx, G, n - 1, n); /* (1) */
        ttt_tensor *Kd = ttt_scale_rows(ctx, K, write_factors(ctx, G, Gn));
        Sn = ttt_add(ctx, ttt_mul(ctx, *S, ttt_exp(ctx, Gn)), ttt_matmul(ctx, Kd, 1, Vb, 0));
    } else {
        /* scores Σ_c q_ic k_jc e^{G_ic − G_jc} = (Q ⊙ e^{G − G_0})(K ⊙ e^{G_0 − G})ᵀ with the
         * chunk's first row as reference: the query factors are ≤ 1, the key factors ≤ e^span,
         * span ≤ LA_COMPOSED_SPAN by the caller's choice of chunk ends */
        ttt_tensor *G = ttt_cumsum(ctx, la);                            /* (n, d_k) */
        ttt_tensor *D = ttt_sub(ctx, G, ttt_slice_rows(ctx, G, 0, 1)); /* G − G_0 */
        ttt_tensor *Qr = ttt_mul(ctx, Q, ttt_exp(ctx, D));
        ttt_tensor *Kr = ttt_mul(ctx, K, ttt_exp(ctx, ttt_neg(ctx, D)));
        ttt_tensor *P = ttt_tril(ctx, ttt_matmul(ctx, Qr, 0, Kr, 1), 0);
        ttt_tensor *Qe = ttt_mul(ctx, Q, ttt_exp(ctx, G)); /* Q ⊙ e^G, ≤ |Q| */
        O = ttt_add(ctx, ttt_matmul(ctx, Qe, 0, *S, 0), ttt_matmul(ctx, P, 0, Vb, 0));
        ttt_tensor *Gn = ttt_slice_rows(ctx, G, n - 1, n); /* (1, d_k) */
        ttt_tensor *Kd = ttt_mul(ctx, K, write_factors(ctx, G, Gn));
        ttt_tensor *en = ttt_reshape(ctx, ttt_exp(ctx, Gn), 1, (int[]){d_k});
        Sn = ttt_add(ctx, ttt_scale_rows(ctx, *S, en), ttt_matmul(ctx, Kd, 1, Vb, 0));
    }
    *S = Sn;
    return O;
}

ttt_tensor *ttt_la_chunkwise_composed(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                      const ttt_tensor *k, const ttt_tensor *v,
                                      const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                      const ttt_tensor *S0, int chunk) {
    check_qkv(q, k, v, beta, log_alpha, S0);
    TTT_ASSERT(chunk >= 1);
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    log_alpha = ttt_form_gates_floored(ctx, log_alpha);
    /* the state as a (d_k, d_v) node (S0 may be stored with another shape of the same size) */
    ttt_tensor *S = S0->ndim == 2 && TTT_ROWS(S0) == d_k
                        ? (ttt_tensor *)S0
                        : ttt_reshape(ctx, S0, 2, (int[]){d_k, d_v});
    if (T == 0) {
        *S_out = S;
        return ttt_tensor_2d(ctx, 0, d_v);
    }
    const int C = chunk < T ? chunk : T;
    ttt_tensor **parts = ttt_tape_alloc(ctx, (size_t)T * sizeof *parts); /* ≤ T chunks */
    int nch = 0;
    for (int t0 = 0; t0 < T; nch++) {
        int t1 = t0 + C < T ? t0 + C : T;
        if (log_alpha && log_alpha->ndim == 2) /* vector decay: halve until the span fits */
            while (t1 - t0 > 1 && vec_span(log_alpha->data, t0, t1, d_k) > LA_COMPOSED_SPAN)
                t1 = t0 + (t1 - t0 + 1) / 2;
        parts[nch] = la_chunk_ops(ctx, &S, ttt_slice_rows(ctx, q, t0, t1),
                                  ttt_slice_rows(ctx, k, t0, t1), ttt_slice_rows(ctx, v, t0, t1),
                                  rows_of(ctx, beta, t0, t1), rows_of(ctx, log_alpha, t0, t1));
        t0 = t1;
    }
    *S_out = S;
    return nch == 1 ? parts[0] : cat_rows(ctx, parts, nch, d_v);
}

/* ------------------------------------------------------------------------------------------ */
/* (a) gated delta rule, UT transform, docs/math.md §5.3 */

static ttt_tensor *delta_chunk_ops(ttt_ctx *ctx, ttt_tensor **S, const ttt_tensor *Q,
                                   const ttt_tensor *K, const ttt_tensor *V, const ttt_tensor *b,
                                   const ttt_tensor *la) {
    const int n = TTT_ROWS(K);
    ttt_tensor *KK = ttt_matmul(ctx, K, 0, K, 1); /* (n, n) */
    ttt_tensor *QK = ttt_matmul(ctx, Q, 0, K, 1); /* (n, n) */
    ttt_tensor *G = NULL, *eg = NULL, *A, *P;
    if (la) {
        G = ttt_cumsum(ctx, la); /* (n) */
        eg = ttt_exp(ctx, G);
        A = ttt_mul(ctx, KK, ttt_decay_mask(ctx, G, 1)); /* strictly lower K Kᵀ ⊙ Γ */
        P = ttt_mul(ctx, QK, ttt_decay_mask(ctx, G, 0)); /* (Q Kᵀ) ⊙ Γ, diagonal kept */
    } else {
        A = ttt_tril(ctx, KK, -1);
        P = ttt_tril(ctx, QK, 0);
    }
    if (b) A = ttt_scale_rows(ctx, A, b); /* diag(β) (…): row i carries β_i */
    /* right-hand sides β ⊙ V and β ⊙ e^G ⊙ K; the unit diagonal of A is implied (unit = 1) */
    const ttt_tensor *bk = b ? (eg ? ttt_mul(ctx, b, eg) : b) : eg;
    ttt_tensor *U = ttt_solve_lower(ctx, A, b ? ttt_scale_rows(ctx, V, b) : V, 1);
    ttt_tensor *W = ttt_solve_lower(ctx, A, bk ? ttt_scale_rows(ctx, K, bk) : K, 1);
    ttt_tensor *Vp = ttt_sub(ctx, U, ttt_matmul(ctx, W, 0, *S, 0)); /* V' = U − W S */
    ttt_tensor *QS = ttt_matmul(ctx, Q, 0, *S, 0);
    if (eg) QS = ttt_scale_rows(ctx, QS, eg);
    ttt_tensor *O = ttt_add(ctx, QS, ttt_matmul(ctx, P, 0, Vp, 0));
    if (la) {
        ttt_tensor *Gn = ttt_slice_rows(ctx, G, n - 1, n);
        ttt_tensor *Kd = ttt_scale_rows(ctx, K, write_factors(ctx, G, Gn));
        *S = ttt_add(ctx, ttt_mul(ctx, *S, ttt_exp(ctx, Gn)), ttt_matmul(ctx, Kd, 1, Vp, 0));
    } else {
        *S = ttt_add(ctx, *S, ttt_matmul(ctx, K, 1, Vp, 0));
    }
    return O;
}

ttt_tensor *ttt_delta_chunkwise_composed(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                         const ttt_tensor *k, const ttt_tensor *v,
                                         const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                         const ttt_tensor *S0, int chunk) {
    check_qkv(q, k, v, beta, log_alpha, S0);
    TTT_ASSERT(chunk >= 1 && (!log_alpha || log_alpha->ndim == 1));
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    log_alpha = ttt_form_gates_floored(ctx, log_alpha);
    ttt_tensor *S = S0->ndim == 2 && TTT_ROWS(S0) == d_k
                        ? (ttt_tensor *)S0
                        : ttt_reshape(ctx, S0, 2, (int[]){d_k, d_v});
    if (T == 0) {
        *S_out = S;
        return ttt_tensor_2d(ctx, 0, d_v);
    }
    const int C = chunk < T ? chunk : T, nch = (T + C - 1) / C;
    ttt_tensor **parts = ttt_tape_alloc(ctx, (size_t)nch * sizeof *parts);
    for (int c = 0; c < nch; c++) {
        const int t0 = c * C, t1 = t0 + C < T ? t0 + C : T;
        parts[c] = delta_chunk_ops(ctx, &S, ttt_slice_rows(ctx, q, t0, t1),
                                   ttt_slice_rows(ctx, k, t0, t1),
                                   ttt_slice_rows(ctx, v, t0, t1), rows_of(ctx, beta, t0, t1),
                                   rows_of(ctx, log_alpha, t0, t1));
    }
    *S_out = S;
    return nch == 1 ? parts[0] : cat_rows(ctx, parts, nch, d_v);
}

/* ------------------------------------------------------------------------------------------ */
/* (a) TTT-Linear dual form, docs/math.md §5.4 */

ttt_tensor *ttt_ttt_linear_dual_composed(ttt_ctx *ctx, ttt_tensor **W_out, ttt_tensor **b_out,
                                         const ttt_tensor *q, const ttt_tensor *k,
                                         const ttt_tensor *v, const ttt_tensor *lr,
                                         const ttt_tensor *W0, const ttt_tensor *b0,
                                         int mini_batch) {
    const int T = TTT_ROWS(k), d = TTT_COLS(k);
    const float eps = TTT_LINEAR_DUAL_LN_EPS;
    TTT_ASSERT(mini_batch >= 1 && q->ndim == 2 && k->ndim == 2 && v->ndim == 2);
    TTT_ASSERT(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d && TTT_COLS(v) == d);
    TTT_ASSERT(W0->n == (size_t)d * d && b0->n == (size_t)d);
    TTT_ASSERT(!lr || lr->n == (size_t)T);
    ttt_tensor *W = W0->ndim == 2 ? (ttt_tensor *)W0 : ttt_reshape(ctx, W0, 2, (int[]){d, d});
    ttt_tensor *bv = b0->ndim == 1 ? (ttt_tensor *)b0 : ttt_reshape(ctx, b0, 1, (int[]){d});
    if (T == 0) {
        *W_out = W;
        *b_out = bv;
        return ttt_tensor_2d(ctx, 0, d);
    }
    const int B = mini_batch < T ? mini_batch : T, nb = (T + B - 1) / B;
    ttt_tensor **parts = ttt_tape_alloc(ctx, (size_t)nb * sizeof *parts);
    for (int c = 0; c < nb; c++) {
        const int t0 = c * B, t1 = t0 + B < T ? t0 + B : T, n = t1 - t0;
        ttt_tensor *Qb = ttt_slice_rows(ctx, q, t0, t1), *Kb = ttt_slice_rows(ctx, k, t0, t1);
        ttt_tensor *Vb = ttt_slice_rows(ctx, v, t0, t1), *lb = rows_of(ctx, lr, t0, t1);
        /* G = ∂ℓ/∂Z at (W_0, b_0): the LN-reconstruction backward (docs/math.md §2) */
        ttt_tensor *Z = ttt_add(ctx, ttt_matmul(ctx, Kb, 0, W, 0), bv); /* (n, d) */
        ttt_tensor *dy = ttt_sub(ctx, ttt_layernorm(ctx, Z, NULL, NULL, eps),
                                 ttt_sub(ctx, Vb, Kb));
        ttt_tensor *G = ttt_layernorm_backward(ctx, dy, Z, NULL, eps); /* (n, d) */
        /* E ⊙ (tril(Q Kᵀ) + 1), E_ij = τ_i lr_j: τ a constant, lr a (possibly learned) tensor */
        ttt_tensor *tau = ttt_tensor_1d(ctx, n);
        for (int i = 0; i < n; i++) tau->data[i] = 1.0f / (float)(i + 1);
        ttt_tensor *Mq = ttt_tril(ctx, ttt_add_scalar(ctx, ttt_matmul(ctx, Qb, 0, Kb, 1), 1.0f), 0);
        if (lb) Mq = ttt_scale_cols(ctx, Mq, lb);
        Mq = ttt_scale_rows(ctx, Mq, tau);
        ttt_tensor *Zbar = ttt_sub(ctx, ttt_add(ctx, ttt_matmul(ctx, Qb, 0, W, 0), bv),
                                   ttt_matmul(ctx, Mq, 0, G, 0));
        parts[c] = ttt_add(ctx, Qb, ttt_layernorm(ctx, Zbar, NULL, NULL, eps));
        /* the block ends with the last row of E: E_{n−1,j} = lr_j / n */
        ttt_tensor *el =
            lb ? ttt_scale(ctx, lb, 1.0f / (float)n) : const_1d(ctx, n, 1.0f / (float)n);
        ttt_tensor *Ge = ttt_scale_rows(ctx, G, el);
        W = ttt_sub(ctx, W, ttt_matmul(ctx, Kb, 1, Ge, 0));
        bv = ttt_sub(ctx, bv, ttt_sum_rows(ctx, Ge));
    }
    *W_out = W;
    *b_out = bv;
    return nb == 1 ? parts[0] : cat_rows(ctx, parts, nb, d);
}

/* ------------------------------------------------------------------------------------------ */
/* (a) Titans' chunked momentum (layers/forms/titans/chunked.c) */

ttt_tensor *ttt_titans_chunked_composed(ttt_ctx *ctx, ttt_tensor **S_out, ttt_tensor **M_out,
                                        const ttt_tensor *q, const ttt_tensor *k,
                                        const ttt_tensor *v, const ttt_tensor *beta,
                                        const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                        const ttt_tensor *M0, float mu, int chunk) {
    check_qkv(q, k, v, beta, log_alpha, S0);
    TTT_ASSERT(chunk >= 1 && (!log_alpha || log_alpha->ndim == 1) && M0->n == S0->n);
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    log_alpha = ttt_form_gates_floored(ctx, log_alpha);
    const int shp[2] = {d_k, d_v};
    ttt_tensor *S = S0->ndim == 2 && TTT_ROWS(S0) == d_k ? (ttt_tensor *)S0
                                                         : ttt_reshape(ctx, S0, 2, shp);
    ttt_tensor *M = M0->ndim == 2 && TTT_ROWS(M0) == d_k ? (ttt_tensor *)M0
                                                         : ttt_reshape(ctx, M0, 2, shp);
    if (T == 0) {
        *S_out = S;
        *M_out = M;
        return ttt_tensor_2d(ctx, 0, d_v);
    }
    const int C = chunk < T ? chunk : T, nch = (T + C - 1) / C;
    ttt_tensor **parts = ttt_tape_alloc(ctx, (size_t)nch * sizeof *parts);
    double *pw = ttt_tape_alloc(ctx, sizeof(double) * (size_t)(C + 1)); /* μ^m */
    pw[0] = 1.0; /* μ^0 = 1 also for μ = 0: the fresh gradient enters undamped */
    for (int m = 1; m <= C; m++) pw[m] = pw[m - 1] * mu;
    for (int c = 0; c < nch; c++) {
        const int t0 = c * C, t1 = t0 + C < T ? t0 + C : T, n = t1 - t0;
        ttt_tensor *Qc = ttt_slice_rows(ctx, q, t0, t1), *Kc = ttt_slice_rows(ctx, k, t0, t1);
        ttt_tensor *Vc = ttt_slice_rows(ctx, v, t0, t1), *bc = rows_of(ctx, beta, t0, t1);
        /* constants: Mu_js = μ^{j−s} (j ≥ s), mup_j = μ^{j+1}, wm_s = μ^{n−1−s} */
        ttt_tensor *Mu = ttt_tensor_2d(ctx, n, n), *mup = ttt_tensor_2d(ctx, n, 1);
        ttt_tensor *wm = ttt_tensor_1d(ctx, n);
        for (int j = 0; j < n; j++) {
            for (int s = 0; s < n; s++)
                Mu->data[(size_t)j * n + s] = s <= j ? (float)pw[j - s] : 0.0f;
            mup->data[j] = (float)pw[j + 1];
            wm->data[j] = (float)pw[n - 1 - j];
        }
        /* A_i = e^{G_i}, D = Γ Mu, c = Γ mup (Γ = 1 on and below the diagonal without decay) */
        ttt_tensor *A = NULL, *D, *cv;
        if (log_alpha) {
            ttt_tensor *G = ttt_cumsum(ctx, ttt_slice_rows(ctx, log_alpha, t0, t1));
            ttt_tensor *Gam = ttt_decay_mask(ctx, G, 0);
            A = ttt_exp(ctx, G);
            D = ttt_matmul(ctx, Gam, 0, Mu, 0);
            cv = ttt_reshape(ctx, ttt_matmul(ctx, Gam, 0, mup, 0), 1, (int[]){n});
        } else {
            ttt_tensor *ones = ttt_tensor_2d(ctx, n, n);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) ones->data[(size_t)i * n + j] = j <= i ? 1.0f : 0.0f;
            D = ttt_matmul(ctx, ones, 0, Mu, 0);
            cv = ttt_reshape(ctx, ttt_matmul(ctx, ones, 0, mup, 0), 1, (int[]){n});
        }
        /* E = diag(β)(K S_0 − V): the chunk's weighted loss gradients at its start */
        ttt_tensor *E = ttt_sub(ctx, ttt_matmul(ctx, Kc, 0, S, 0), Vc);
        if (bc) E = ttt_scale_rows(ctx, E, bc);
        ttt_tensor *QS = ttt_matmul(ctx, Qc, 0, S, 0);
        if (A) QS = ttt_scale_rows(ctx, QS, A);
        ttt_tensor *O = ttt_add(ctx, QS, ttt_scale_rows(ctx, ttt_matmul(ctx, Qc, 0, M, 0), cv));
        ttt_tensor *P = ttt_mul(ctx, ttt_matmul(ctx, Qc, 0, Kc, 1), D);
        parts[c] = ttt_sub(ctx, O, ttt_matmul(ctx, P, 0, E, 0));
        /* chunk end: S = A_{n−1} S_0 + c_{n−1} M_in − (D_{n−1,·} ⊙ K)ᵀ E, M = μ^n M_in − … */
        ttt_tensor *cn = ttt_slice_rows(ctx, cv, n - 1, n);
        ttt_tensor *Dn = ttt_reshape(ctx, ttt_slice_rows(ctx, D, n - 1, n), 1, (int[]){n});
        ttt_tensor *Sd = A ? ttt_mul(ctx, S, ttt_slice_rows(ctx, A, n - 1, n)) : S;
        ttt_tensor *Sn = ttt_add(ctx, Sd, ttt_mul(ctx, M, cn));
        Sn = ttt_sub(ctx, Sn, ttt_matmul(ctx, ttt_scale_rows(ctx, Kc, Dn), 1, E, 0));
        ttt_tensor *Mn = ttt_sub(ctx, ttt_scale(ctx, M, (float)pw[n]),
                                 ttt_matmul(ctx, ttt_scale_rows(ctx, Kc, wm), 1, E, 0));
        S = Sn;
        M = Mn;
    }
    *S_out = S;
    *M_out = M;
    return nch == 1 ? parts[0] : cat_rows(ctx, parts, nch, d_v);
}

/* ------------------------------------------------------------------------------------------ */
/* the layer entry point */

float *ttt_form_beta_array(ttt_ctx *ctx, const ttt_layer *L, const ttt_tensor *eta, int T) {
    ttt_tensor *beta = ttt_tensor_1d(ctx, T);
    for (int t = 0; t < T; t++) beta->data[t] = L->lr * (eta ? eta->data[t] : 1.0f);
    return beta->data;
}

const ttt_tensor *ttt_form_beta_node(ttt_ctx *ctx, const ttt_layer *L, const ttt_form_args *a,
                                     int T) {
    return a->beta ? a->beta : const_1d(ctx, T, L->lr);
}

void ttt_form_diff_output(ttt_ctx *ctx, ttt_tensor *o, const ttt_tensor *O) {
    TTT_ASSERT(o->n == O->n);
    memcpy(o->data, O->data, O->n * sizeof(float));
    ttt_tape_entry *e = ttt_tape_record(ctx, ttt_backward_identity, o,
                                        (const ttt_tensor *const[]){O}, 1);
    if (e) e->name = "forward_diff_out";
}

void ttt_form_set_state(ttt_ctx *ctx, ttt_tensor **slot, ttt_tensor *val) {
    if (ttt_recording(ctx)) {
        if (val->ndim != (*slot)->ndim || !ttt_tensor_same_shape(val, *slot))
            val = ttt_reshape(ctx, val, (*slot)->ndim, (*slot)->shape);
        *slot = val;
    } else if (val != *slot) {
        TTT_ASSERT(val->n == (*slot)->n);
        memcpy((*slot)->data, val->data, val->n * sizeof(float));
    }
}

ttt_status ttt_layer_forward_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                                  const ttt_tensor *v, const ttt_tensor *beta,
                                  const ttt_tensor *log_alpha, int fused, ttt_error *err) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    const int alpha_vec = log_alpha && log_alpha->ndim == 2;
    if (TTT_ROWS(o) != T || TTT_COLS(o) != d_v || TTT_ROWS(q) != T || TTT_ROWS(v) != T ||
        TTT_COLS(q) != d_k || (beta && beta->n != (size_t)T))
        return ttt_error_set(err, TTT_ERR_SHAPE, "forward_diff: inputs do not fit T = %d", T);
    const ttt_form_inputs in = {.T = T, .eta = beta != NULL,
                                .gate = !log_alpha ? TTT_FORM_GATE_NONE
                                        : alpha_vec ? TTT_FORM_GATE_KEY
                                                    : TTT_FORM_GATE_TOKEN,
                                .tape = ttt_recording(ctx)};
    ttt_form_plan plan;
    const ttt_form_entry *e = ttt_form_plan_with(NULL, L, &in, &plan, err);
    if (!e) return TTT_ERR_UNSUPPORTED;
    ttt_layer run = *L; /* without a tape form: auto may pick another chunk (ttt_form_plan) */
    run.chunk = plan.chunk;
    L = &run;
    /* entries that step with η itself (the generic driver, LaCT: Newton–Schulz is not linear in
     * G) get η = β/θ */
    const ttt_tensor *eta = beta && L->lr != 0.0f ? ttt_scale(ctx, beta, 1.0f / L->lr) : NULL;
    const ttt_form_args a = {.q = q, .k = k, .v = v, .eta = eta, .beta = beta,
                             .log_alpha = log_alpha, .alpha_vec = alpha_vec, .fused = fused};
    return e->forward_diff(ctx, L, o, st, &a, err);
}
