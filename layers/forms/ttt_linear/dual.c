/* TTT-Linear mini-batch dual form and its primal twin (docs/math.md §5.4; rule in ttt_dual.h).
 *
 * Why the dual form equals the primal one: z̄_i = q_i W_i + b_i with W_i, b_i from ttt_dual.h
 * expands to q_i W_0 + b_0 − Σ_{j ≤ i} E_ij (q_i·k_j) g_j − Σ_{j ≤ i} E_ij g_j, i.e. row i of
 *     Z̄ = Q W_0 + b_0 − (E ⊙ (tril(Q Kᵀ) + 1)) G,
 * one b×b mask applied to G instead of b weight matrices of d×d. */
#include "ttt_dual.h"

#include "blas.h"
#include <math.h>
#include <string.h>

/* Mean and 1/sqrt(var + eps) of a row (biased variance, in double like ops.c's layer norm). */
static void ln_moments(double *mu, double *rstd, const float *x, int d) {
    double s = 0.0, s2 = 0.0;
    for (int j = 0; j < d; j++) s += x[j];
    double m = s / d;
    for (int j = 0; j < d; j++) s2 += (x[j] - m) * (x[j] - m);
    *mu = m;
    *rstd = 1.0 / sqrt(s2 / d + (double)TTT_LINEAR_DUAL_LN_EPS);
}

/* Rows of Z = K W_0 + b_0 turned in place into G = ∂ℓ/∂Z of the reconstruction loss
 * ℓ = ½‖LN(z) − (v − k)‖² (docs/math.md §2): with x̂ = LN(z), dy = x̂ − (v − k), r = 1/σ,
 *     g = r (dy − mean(dy) − x̂ mean(dy ⊙ x̂)). */
static void recon_grad(float *zg,      /* (n, d) in: Z, out: G */
                       const float *k, /* (n, d) */
                       const float *v, /* (n, d) */
                       int n, int d) {
    for (int i = 0; i < n; i++) {
        float *z = zg + (size_t)i * d;
        const float *ki = k + (size_t)i * d, *vi = v + (size_t)i * d;
        double mu, r, sdy = 0.0, sdyx = 0.0;
        ln_moments(&mu, &r, z, d);
        for (int j = 0; j < d; j++) {
            double xh = (z[j] - mu) * r, dy = xh - ((double)vi[j] - ki[j]);
            sdy += dy;
            sdyx += dy * xh;
        }
        double mdy = sdy / d, mdyx = sdyx / d;
        for (int j = 0; j < d; j++) {
            double xh = (z[j] - mu) * r, dy = xh - ((double)vi[j] - ki[j]);
            z[j] = (float)(r * (dy - mdy - xh * mdyx));
        }
    }
}

/* o = x + LN(z) for one row. */
static void residual_ln(float *o, const float *x, const float *z, int d) {
    double mu, r;
    ln_moments(&mu, &r, z, d);
    for (int j = 0; j < d; j++) o[j] = x[j] + (float)((z[j] - mu) * r);
}

/* Z = K W_0 + b_0, then G in place. */
static void block_grad(float *G,          /* (n, d) */
                       const float *W,    /* (d, d) */
                       const float *bias, /* (d) */
                       const float *k, const float *v, int n, int d) {
    for (int i = 0; i < n; i++) memcpy(G + (size_t)i * d, bias, (size_t)d * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, d, 1.0f, k, d, W, d, 1.0f, G, d);
    recon_grad(G, k, v, n, d);
}

void ttt_ttt_linear_dual(ttt_ctx *ctx, float *o, float *W, float *bias, const float *q,
                         const float *k, const float *v, const float *lr, int T, int d,
                         int mini_batch) {
    TTT_ASSERT(mini_batch >= 1 && T >= 0 && d >= 1);
    if (T == 0) return;
    const int B = mini_batch < T ? mini_batch : T;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *G = ttt_arena_alloc(ctx->arena, (size_t)B * d * sizeof(float));  /* (B, d) */
    float *Zb = ttt_arena_alloc(ctx->arena, (size_t)B * d * sizeof(float)); /* (B, d) */
    float *M = ttt_arena_alloc(ctx->arena, (size_t)B * B * sizeof(float));  /* (B, B) */
    TTT_ASSERT(G && Zb && M);
    for (int t0 = 0; t0 < T; t0 += B) {
        const int n = t0 + B <= T ? B : T - t0;
        const float *qb = q + (size_t)t0 * d, *kb = k + (size_t)t0 * d, *vb = v + (size_t)t0 * d;
        const float *lb = lr ? lr + t0 : NULL;
        block_grad(G, W, bias, kb, vb, n, d);
        /* M = E ⊙ (tril(Q Kᵀ) + 1), E_ij = τ_i lr_j; only the lower triangle is formed and
         * read (strmm) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, 1.0f, qb, d, kb, d, 0.0f, M,
                    n);
        for (int i = 0; i < n; i++) {
            float tau = 1.0f / (float)(i + 1), *Mi = M + (size_t)i * n;
            for (int j = 0; j <= i; j++) Mi[j] = tau * (lb ? lb[j] : 1.0f) * (Mi[j] + 1.0f);
        }
        /* Z̄ = Q W_0 + b_0 − M G */
        memcpy(Zb, G, (size_t)n * d * sizeof(float));
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, d, -1.0f,
                    M, n, Zb, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, d, 1.0f, qb, d, W, d, 1.0f,
                    Zb, d);
        for (int i = 0; i < n; i++) {
            float *zi = Zb + (size_t)i * d;
            for (int j = 0; j < d; j++) zi[j] += bias[j];
            residual_ln(o + (size_t)(t0 + i) * d, qb + (size_t)i * d, zi, d);
        }
        /* W ← W_0 − (E_{n−1,·}ᵀ ⊙ K)ᵀ G, b ← b_0 − E_{n−1,·} G: rows of G scaled by E_{n−1,j}
         * (G is not needed any more) */
        const float tau_n = 1.0f / (float)n;
        for (int i = 0; i < n; i++) {
            float e = tau_n * (lb ? lb[i] : 1.0f), *gi = G + (size_t)i * d;
            for (int j = 0; j < d; j++) {
                gi[j] *= e;
                bias[j] -= gi[j];
            }
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, n, -1.0f, kb, d, G, d, 1.0f, W,
                    d);
    }
    ttt_arena_release(ctx->arena, mark);
}

void ttt_ttt_linear_primal(ttt_ctx *ctx, float *o, float *W, float *bias, const float *q,
                           const float *k, const float *v, const float *lr, int T, int d,
                           int mini_batch) {
    TTT_ASSERT(mini_batch >= 1 && T >= 0 && d >= 1);
    if (T == 0) return;
    const int B = mini_batch < T ? mini_batch : T;
    const size_t dd = (size_t)d * d;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *G = ttt_arena_alloc(ctx->arena, (size_t)B * d * sizeof(float)); /* (B, d) */
    float *SW = ttt_arena_alloc(ctx->arena, dd * sizeof(float));           /* (d, d) Σ lr k g */
    float *Wi = ttt_arena_alloc(ctx->arena, dd * sizeof(float));           /* (d, d) W_i */
    float *Sb = ttt_arena_alloc(ctx->arena, (size_t)d * sizeof(float));    /* (d) Σ lr g */
    float *bi = ttt_arena_alloc(ctx->arena, (size_t)d * sizeof(float));    /* (d) b_i */
    float *z = ttt_arena_alloc(ctx->arena, (size_t)d * sizeof(float));     /* (d) z̄_i */
    TTT_ASSERT(G && SW && Wi && Sb && bi && z);
    for (int t0 = 0; t0 < T; t0 += B) {
        const int n = t0 + B <= T ? B : T - t0;
        const float *kb = k + (size_t)t0 * d, *vb = v + (size_t)t0 * d;
        block_grad(G, W, bias, kb, vb, n, d); /* every gradient at (W_0, b_0) */
        memset(SW, 0, dd * sizeof(float));
        memset(Sb, 0, (size_t)d * sizeof(float));
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            const float l = lr ? lr[t] : 1.0f, tau = 1.0f / (float)(i + 1);
            const float *gi = G + (size_t)i * d;
            /* Σ_{j ≤ i} lr_j k_jᵀ g_j, then W_i = W_0 − τ_i Σ (E_ij = τ_i lr_j) */
            cblas_sger(CblasRowMajor, d, d, l, kb + (size_t)i * d, 1, gi, 1, SW, d);
            for (int j = 0; j < d; j++) Sb[j] += l * gi[j];
            for (size_t e = 0; e < dd; e++) Wi[e] = W[e] - tau * SW[e];
            for (int j = 0; j < d; j++) bi[j] = bias[j] - tau * Sb[j];
            /* o_i = q_i + LN(q_i W_i + b_i) */
            memcpy(z, bi, (size_t)d * sizeof(float));
            cblas_sgemv(CblasRowMajor, CblasTrans, d, d, 1.0f, Wi, d, q + (size_t)t * d, 1, 1.0f,
                        z, 1);
            residual_ln(o + (size_t)t * d, q + (size_t)t * d, z, d);
        }
        /* the block ends with its last token's weights */
        memcpy(W, Wi, dd * sizeof(float));
        memcpy(bias, bi, (size_t)d * sizeof(float));
    }
    ttt_arena_release(ctx->arena, mark);
}
