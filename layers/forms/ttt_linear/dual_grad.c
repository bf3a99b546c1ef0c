/* TTT-Linear dual form with a hand-written backward (dual_grad.h; the forward is ttt_linear/dual.c).
 *
 * The op records ONE tape entry whose result packs [O (T·d) | W_final (d·d) | b_final (d)]; the
 * three are handed out as recorded views of it (`part`), so the backward receives dO, dW' and db'
 * together and walks the blocks once, from last to first, carrying dW = dL/dW and db = dL/db from
 * the end of a block to its start. The forward saves (W, b) at every block start; everything
 * inside a block is recomputed from them. Products are float sgemms (accumulating with beta = 1);
 * per-row layer-norm reductions and the per-token sums for lr are in double, as in ttt_linear/dual.c.
 *
 * Forward of one block of n tokens (docs/math.md §5.4; pointers start at its first token), with the
 * block-start weights (W, b), τ_i = 1/(i + 1), E_ij = τ_i lr_j [i ≥ j], e_j = E_{n−1,j} = lr_j/n:
 *     Z  = K W + 1bᵀ,   x̂ = LN(Z) row by row (μ, r = 1/sqrt(var + eps)),   u = x̂ − (V − K)
 *     G  = LN'(Z)ᵀ u:   g = r P u,  P u = u − mean(u) − x̂·mean(u ⊙ x̂)      (docs/math.md §2)
 *     A  = Q Kᵀ,   M = E ⊙ (A + 1) (lower triangle, diagonal included)
 *     Z̄  = Q W + 1bᵀ − M G,   O = Q + LN(Z̄)
 *     W' = W − Kᵀ Ge,   b' = b − 1ᵀ Ge,   Ge = diag(e) G
 * (P is the projection of LN's Jacobian: for one row LN'(z) = r P, symmetric, P x̂ = 0, P 1 = 0.)
 *
 * Backward, given dO, dW', db' (each line is the chain rule through one line above):
 *     dZ̄  = r̄ P̄ dO  (LN backward at Z̄),   dQ += dO
 *     dGe = −(K dW' + 1db'ᵀ),   dK −= Ge dW'ᵀ,   de_j = dGe_j·g_j → dlr_j += de_j / n
 *     dG  = diag(e) dGe − Mᵀ dZ̄,   dM = −dZ̄ Gᵀ
 *     dlr_j += Σ_{i ≥ j} dM_ij τ_i (A_ij + 1),   D = dM ⊙ E → dQ += D K, dK += Dᵀ Q
 *     dQ += dZ̄ Wᵀ,   dW += Qᵀ dZ̄,   db += 1ᵀ dZ̄
 *     G = r P u depends on u (linearly) and on Z through r and x̂. For one row with upstream
 *     h = dG_row, L = h·g = r (h·u − mean(u) Σh − (h·x̂)(u·x̂)/d):
 *       ∂L/∂u  = r P h                                        (=: du; LN' is symmetric)
 *       ∂L/∂x̂ = −(r/d) (h (u·x̂) + u (h·x̂))                 (=: gx, r held fixed)
 *       ∂L/∂r  = L / r,  and ∂r/∂z = −r² x̂ / d
 *     u = x̂ − V + K adds du to the x̂ gradient and gives dV −= du, dK += du; then both x̂
 *     gradients go through LN's backward (which includes x̂'s own dependence on r):
 *       dz = r P (gx + du) − (r (h·g) / d) x̂
 *     (the same second derivative of LN as ops.c's layernorm_backward_backward, grouped once).
 *     dK += dZ Wᵀ,   dW += Kᵀ dZ,   db += 1ᵀ dZ
 * dW and db now hold the gradient at the block start: the previous block's dW', db'. After the
 * first block they are dW0, db0. dW is a float matrix updated by sgemm; db is carried in double.
 * Zeros above the diagonal of M and D make plain sgemms of the n × n factors exact. Z and Q W
 * share W, so they are one product of the stacked [K; Q] (2n × d), and so are the two ways back
 * through W ([dZ; dZ̄] Wᵀ and [K; Q]ᵀ [dZ; dZ̄]): 11 sgemm calls per block in all. */
#include "dual_grad.h"

#include "blas.h"
#include <math.h>
#include <string.h>

#include "fused_grad.h" /* the shared gemm, scratch and part helpers */
#include "ttt_dual.h" /* ttt_ttt_linear_dual and TTT_LINEAR_DUAL_LN_EPS */

#define gemm ttt_fused_gemm
#define scratch ttt_fused_scratch

/* Sums over one row in double with four partial sums: the same values as one running sum up to
 * double rounding, in four independent chains instead of one dependent add per element (which
 * the compiler may not reorder). */
static double sum_d(const double *x, int n) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        a0 += x[j];
        a1 += x[j + 1];
        a2 += x[j + 2];
        a3 += x[j + 3];
    }
    for (; j < n; j++) a0 += x[j];
    return (a0 + a1) + (a2 + a3);
}

static double dot_d(const double *x, const double *y, int n) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        a0 += x[j] * y[j];
        a1 += x[j + 1] * y[j + 1];
        a2 += x[j + 2] * y[j + 2];
        a3 += x[j + 3] * y[j + 3];
    }
    for (; j < n; j++) a0 += x[j] * y[j];
    return (a0 + a1) + (a2 + a3);
}

/* x (n) floats into xd as doubles, returning their sum. */
static double load_sum(double *xd, const float *x, int n) {
    for (int j = 0; j < n; j++) xd[j] = x[j];
    return sum_d(xd, n);
}

/* x̂ = LN(z) of one row into xh (double), with its mean and 1/sqrt(var + eps): biased variance,
 * eps TTT_LINEAR_DUAL_LN_EPS, in double as ttt_linear/dual.c and ops.c. */
static void ln_row(double *xh, double *mu, double *rstd, const float *z, int d) {
    const double m = load_sum(xh, z, d) / d;
    for (int j = 0; j < d; j++) xh[j] -= m;
    const double r = 1.0 / sqrt(dot_d(xh, xh, d) / d + (double)TTT_LINEAR_DUAL_LN_EPS);
    for (int j = 0; j < d; j++) xh[j] *= r;
    *mu = m;
    *rstd = r;
}

/* ------------------------------------------------------------------------------------------ */
/* the packed result and its views */

static ttt_tensor *part(ttt_ctx *ctx, ttt_tensor *P, size_t off, int ndim, const int *shape) {
    return ttt_fused_part(ctx, P, off, ndim, shape, "dual_part");
}

typedef struct dual_saved {
    float *Wb; /* (nb, d·d + d) [W | b] at every block start */
    int T, d, B;
} dual_saved;

/* ------------------------------------------------------------------------------------------ */
/* backward of one block */

typedef struct dual_ws {
    float *KQ;               /* (2B, d) [K; Q] of the block, stacked for one product */
    float *ZZ;               /* (2B, d) [Z; Z̄] */
    float *dZZ;              /* (2B, d) [dZ; dZ̄] */
    float *T2;               /* (2B, d) [dZ; dZ̄] Wᵀ */
    float *G, *Ge, *dGe, *H; /* (B, d) each */
    float *A, *M, *dM;       /* (B, B) each */
    double *XH, *U;          /* (B, d) each: x̂ = LN(Z) and u = x̂ − (V − K) */
    double *r, *su, *sux;    /* (B) each: 1/σ of Z's rows, Σu, Σ u ⊙ x̂ */
    double *dlr;             /* (B) */
    double *t1, *t2, *t3;    /* (d) each: one row */
} dual_ws;

static void dual_block_backward(const dual_ws *ws, float *dW, /* (d, d) in: dW', out: dW */
                                double *db,                   /* (d) in: db', out: db */
                                const float *W,               /* (d, d) block-start weights */
                                const float *bias,            /* (d) block-start bias */
                                const float *q, const float *k, const float *v, /* (n, d) */
                                const float *lr,                                /* (n) or NULL */
                                const float *dO,                                /* (n, d) */
                                float *gq, float *gk, float *gv, /* (n, d) or NULL */
                                float *glr,                      /* (n) or NULL */
                                int n, int d) {
    const size_t nd = (size_t)n * d;
    float *KQ = ws->KQ, *Z = ws->ZZ, *Zb = ws->ZZ + nd, *dZ = ws->dZZ, *dZb = ws->dZZ + nd;
    float *G = ws->G, *Ge = ws->Ge, *dGe = ws->dGe, *H = ws->H, *A = ws->A, *M = ws->M,
          *dM = ws->dM;
    double *XH = ws->XH, *U = ws->U, *r = ws->r, *su = ws->su, *sux = ws->sux, *dlr = ws->dlr;
    double *t1 = ws->t1, *t2 = ws->t2, *t3 = ws->t3;
    const double id = 1.0 / (double)d, inv_n = 1.0 / (double)n;
#define LR(j) (lr ? lr[j] : 1.0f)

    /* ---- recompute the block (as ttt_linear/dual.c) ---- */
    /* [Z; Q W + 1bᵀ] = [K; Q] W + 1bᵀ in one product */
    memcpy(KQ, k, sizeof(float) * nd);
    memcpy(KQ + nd, q, sizeof(float) * nd);
    for (int i = 0; i < 2 * n; i++) memcpy(ws->ZZ + (size_t)i * d, bias, sizeof(float) * (size_t)d);
    gemm(0, 0, 2 * n, d, d, 1.0f, KQ, d, W, d, 1.0f, ws->ZZ, d);
    /* x̂, u and G = r P u row by row, Ge = diag(e) G */
    for (int i = 0; i < n; i++) {
        const size_t o = (size_t)i * d;
        double *xh = XH + o, *u = U + o, mu;
        ln_row(xh, &mu, &r[i], Z + o, d);
        for (int j = 0; j < d; j++) u[j] = xh[j] - ((double)v[o + j] - k[o + j]);
        su[i] = sum_d(u, d);
        sux[i] = dot_d(u, xh, d);
        const double mu_ = su[i] * id, mx = sux[i] * id, ri = r[i];
        const float e = (float)(LR(i) * inv_n);
        for (int j = 0; j < d; j++) {
            const float g = (float)(ri * (u[j] - mu_ - xh[j] * mx));
            G[o + j] = g;
            Ge[o + j] = e * g;
        }
    }
    /* A = Q Kᵀ; M = E ⊙ (A + 1), zero above the diagonal */
    gemm(0, 1, n, n, d, 1.0f, q, d, k, d, 0.0f, A, n);
    for (int i = 0; i < n; i++) {
        const float tau = 1.0f / (float)(i + 1);
        for (int j = 0; j < n; j++)
            M[(size_t)i * n + j] = j <= i ? tau * LR(j) * (A[(size_t)i * n + j] + 1.0f) : 0.0f;
    }
    /* Z̄ = Q W + 1bᵀ − M G */
    gemm(0, 0, n, d, n, -1.0f, M, n, G, d, 1.0f, Zb, d);

    /* ---- backward ---- */
    /* read-out: dZ̄ = r̄ P̄ dO; the residual gives dQ += dO */
    for (int i = 0; i < n; i++) {
        const size_t o = (size_t)i * d;
        double m, rb;
        ln_row(t1, &m, &rb, Zb + o, d); /* x̄ */
        const double s = load_sum(t2, dO + o, d) * id, sx = dot_d(t2, t1, d) * id;
        for (int j = 0; j < d; j++) dZb[o + j] = (float)(rb * (t2[j] - s - t1[j] * sx));
        if (gq)
            for (int j = 0; j < d; j++) gq[o + j] += dO[o + j];
    }
    /* block-end weights: dGe = −(K dW' + 1db'ᵀ), dK −= Ge dW'ᵀ (dW, db still hold dW', db') */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++) dGe[(size_t)i * d + j] = (float)-db[j];
    gemm(0, 0, n, d, d, -1.0f, k, d, dW, d, 1.0f, dGe, d);
    if (gk) gemm(0, 1, n, d, d, -1.0f, Ge, d, dW, d, 1.0f, gk, d);
    /* dG = diag(e) dGe − Mᵀ dZ̄; de_j = dGe_j·g_j, e_j = lr_j / n */
    for (int i = 0; i < n; i++) {
        const size_t o = (size_t)i * d;
        const float e = (float)(LR(i) * inv_n);
        for (int j = 0; j < d; j++) {
            H[o + j] = e * dGe[o + j];
            t1[j] = (double)dGe[o + j] * G[o + j];
        }
        dlr[i] = sum_d(t1, d) * inv_n;
    }
    gemm(1, 0, n, d, n, -1.0f, M, n, dZb, d, 1.0f, H, d);
    /* dM = −dZ̄ Gᵀ (lower triangle used); dlr_j += Σ_i dM_ij τ_i (A_ij + 1); D = dM ⊙ E into dM */
    gemm(0, 1, n, n, d, -1.0f, dZb, d, G, d, 0.0f, dM, n);
    for (int i = 0; i < n; i++) {
        const double tau = 1.0 / (double)(i + 1);
        float *dMi = dM + (size_t)i * n;
        const float *Ai = A + (size_t)i * n;
        for (int j = 0; j <= i; j++) {
            dlr[j] += (double)dMi[j] * tau * ((double)Ai[j] + 1.0);
            dMi[j] = (float)((double)dMi[j] * tau * LR(j));
        }
        for (int j = i + 1; j < n; j++) dMi[j] = 0.0f;
    }
    /* A = Q Kᵀ: dQ += D K, dK += Dᵀ Q */
    if (gq) gemm(0, 0, n, d, n, 1.0f, dM, n, k, d, 1.0f, gq, d);
    if (gk) gemm(1, 0, n, d, n, 1.0f, dM, n, q, d, 1.0f, gk, d);
    /* G = r P u: through u (dV −= du, dK += du) and through LN's second derivative into dZ.
     * Row by row with h = dG_i in t1: du = r P h, w = du + gx (t2), g·h (t3 = g ⊙ h) */
    for (int i = 0; i < n; i++) {
        const size_t o = (size_t)i * d;
        const double *xh = XH + o, *u = U + o, ri = r[i];
        double *h = t1, *w = t2, *gh = t3;
        const double mh = load_sum(h, H + o, d) * id, shx = dot_d(h, xh, d), mhx = shx * id;
        const double mu_ = su[i] * id, mx = sux[i] * id, c = ri * id;
        for (int j = 0; j < d; j++) {
            const double du = ri * (h[j] - mh - xh[j] * mhx);
            gh[j] = h[j] * ri * (u[j] - mu_ - xh[j] * mx);
            w[j] = du - c * (h[j] * sux[i] + u[j] * shx); /* du + gx */
            if (gv) gv[o + j] -= (float)du;
            if (gk) gk[o + j] += (float)du;
        }
        const double ch = c * sum_d(gh, d), mw = sum_d(w, d) * id, mwx = dot_d(w, xh, d) * id;
        for (int j = 0; j < d; j++)
            dZ[o + j] = (float)(ri * (w[j] - mw - xh[j] * mwx) - ch * xh[j]);
    }
    /* [Z; Z̄] = [K; Q] W + 1bᵀ (+ terms without W or b): [dK; dQ] += [dZ; dZ̄] Wᵀ,
     * dW += [K; Q]ᵀ [dZ; dZ̄], db += 1ᵀ [dZ; dZ̄] */
    if (gq || gk) {
        gemm(0, 1, 2 * n, d, d, 1.0f, ws->dZZ, d, W, d, 0.0f, ws->T2, d);
        for (size_t i = 0; i < nd; i++) {
            if (gk) gk[i] += ws->T2[i];
            if (gq) gq[i] += ws->T2[nd + i];
        }
    }
    gemm(1, 0, d, d, 2 * n, 1.0f, KQ, d, ws->dZZ, d, 1.0f, dW, d);
    for (int i = 0; i < 2 * n; i++) {
        const float *row = ws->dZZ + (size_t)i * d;
        for (int j = 0; j < d; j++) db[j] += row[j];
    }
    if (glr)
        for (int j = 0; j < n; j++) glr[j] += (float)dlr[j];
#undef LR
}

static void dual_fused_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dP) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *lr = e->in[3],
                     *W0 = e->in[4], *b0 = e->in[5];
    const dual_saved *sv = e->aux;
    /* every gradient buffer before the scratch mark (autograd.h) */
    float *gq = ttt_grad(ctx, q), *gk = ttt_grad(ctx, k), *gv = ttt_grad(ctx, v);
    float *glr = ttt_grad(ctx, lr), *gW0 = ttt_grad(ctx, W0), *gb0 = ttt_grad(ctx, b0);
    const int T = sv->T, d = sv->d, B = sv->B, nb = (T + B - 1) / B;
    const size_t dd = (size_t)d * d, Bd = (size_t)B * d, BB = (size_t)B * B;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    dual_ws w = {
        .KQ = scratch(ctx, sizeof(float) * 2 * Bd),
        .ZZ = scratch(ctx, sizeof(float) * 2 * Bd),
        .dZZ = scratch(ctx, sizeof(float) * 2 * Bd),
        .T2 = scratch(ctx, sizeof(float) * 2 * Bd),
        .G = scratch(ctx, sizeof(float) * Bd),
        .Ge = scratch(ctx, sizeof(float) * Bd),
        .dGe = scratch(ctx, sizeof(float) * Bd),
        .H = scratch(ctx, sizeof(float) * Bd),
        .A = scratch(ctx, sizeof(float) * BB),
        .M = scratch(ctx, sizeof(float) * BB),
        .dM = scratch(ctx, sizeof(float) * BB),
        .XH = scratch(ctx, sizeof(double) * Bd),
        .U = scratch(ctx, sizeof(double) * Bd),
        .r = scratch(ctx, sizeof(double) * (size_t)B),
        .su = scratch(ctx, sizeof(double) * (size_t)B),
        .sux = scratch(ctx, sizeof(double) * (size_t)B),
        .dlr = scratch(ctx, sizeof(double) * (size_t)B),
        .t1 = scratch(ctx, sizeof(double) * (size_t)d),
        .t2 = scratch(ctx, sizeof(double) * (size_t)d),
        .t3 = scratch(ctx, sizeof(double) * (size_t)d),
    };
    float *dW = scratch(ctx, sizeof(float) * dd);            /* (d, d) dL/dW, carried backward */
    double *db = scratch(ctx, sizeof(double) * (size_t)d);   /* (d) dL/db, carried backward */
    memcpy(dW, dP + (size_t)T * d, sizeof(float) * dd);
    for (int j = 0; j < d; j++) db[j] = dP[(size_t)T * d + dd + (size_t)j];
    for (int c = nb - 1; c >= 0; c--) {
        const int t0 = c * B, n = t0 + B <= T ? B : T - t0;
        const size_t rq = (size_t)t0 * d;
        const float *Wc = sv->Wb + (size_t)c * (dd + (size_t)d);
        dual_block_backward(&w, dW, db, Wc, Wc + dd, q->data + rq, k->data + rq, v->data + rq,
                            lr ? lr->data + t0 : NULL, dP + rq, gq ? gq + rq : NULL,
                            gk ? gk + rq : NULL, gv ? gv + rq : NULL, glr ? glr + t0 : NULL, n,
                            d);
    }
    if (gW0)
        for (size_t i = 0; i < dd; i++) gW0[i] += dW[i];
    if (gb0)
        for (int j = 0; j < d; j++) gb0[j] += (float)db[j];
    ttt_arena_release(ctx->arena, mark);
}

/* ------------------------------------------------------------------------------------------ */
/* forward */

ttt_tensor *ttt_ttt_linear_dual_fused(ttt_ctx *ctx, ttt_tensor **W_out, ttt_tensor **b_out,
                                      const ttt_tensor *q, const ttt_tensor *k,
                                      const ttt_tensor *v, const ttt_tensor *lr,
                                      const ttt_tensor *W0, const ttt_tensor *b0,
                                      int mini_batch) {
    TTT_ASSERT(mini_batch >= 1 && q->ndim == 2 && k->ndim == 2 && v->ndim == 2);
    const int T = TTT_ROWS(k), d = TTT_COLS(k);
    TTT_ASSERT(d >= 1 && TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d &&
               TTT_COLS(v) == d);
    TTT_ASSERT(W0->n == (size_t)d * d && b0->n == (size_t)d);
    TTT_ASSERT(!lr || lr->n == (size_t)T);
    if (T == 0) { /* nothing happens: the state is the initial one (as the composed form) */
        *W_out = W0->ndim == 2 ? (ttt_tensor *)W0 : ttt_reshape(ctx, W0, 2, (int[]){d, d});
        *b_out = b0->ndim == 1 ? (ttt_tensor *)b0 : ttt_reshape(ctx, b0, 1, (int[]){d});
        return ttt_tensor_2d(ctx, 0, d);
    }
    const size_t dd = (size_t)d * d, wb = dd + (size_t)d;
    ttt_tensor *P = ttt_tensor_1d(ctx, (int)((size_t)T * d + wb));
    float *o = P->data, *W = P->data + (size_t)T * d, *bias = W + dd; /* [W | b] contiguous */
    memcpy(W, W0->data, dd * sizeof(float));
    memcpy(bias, b0->data, (size_t)d * sizeof(float));
    const ttt_tensor *in[6] = {q, k, v, lr, W0, b0};
    int any = 0;
    for (int i = 0; i < 6; i++) any |= in[i] && in[i]->requires_grad;
    const int rec = ttt_recording(ctx) && any;
    const int B = mini_batch < T ? mini_batch : T, nb = (T + B - 1) / B;
    float *saved = rec ? ttt_tape_alloc(ctx, (size_t)nb * wb * sizeof(float)) : NULL;
    /* one kernel call per block (each call starts a block, so this is the kernel over all T) */
    for (int c = 0; c < nb; c++) {
        const int t0 = c * B, n = t0 + B <= T ? B : T - t0;
        const size_t rq = (size_t)t0 * d;
        if (saved) memcpy(saved + (size_t)c * wb, W, wb * sizeof(float));
        ttt_ttt_linear_dual(ctx, o + rq, W, bias, q->data + rq, k->data + rq, v->data + rq,
                            lr ? lr->data + t0 : NULL, n, d, n);
    }
    ttt_tape_entry *e = ttt_tape_record(ctx, dual_fused_backward, P, in, 6);
    if (e) {
        dual_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (dual_saved){.Wb = saved, .T = T, .d = d, .B = B};
        e->aux = sv;
        e->name = "ttt_linear_dual_fused";
    }
    *W_out = part(ctx, P, (size_t)T * d, 2, (int[]){d, d});
    *b_out = part(ctx, P, (size_t)T * d + dd, 1, (int[]){d});
    return part(ctx, P, 0, 2, (int[]){T, d});
}
