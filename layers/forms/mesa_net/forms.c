/* MesaNet (von Oswald et al. 2025; docs/math.md §3.11): the tuple (linear, squared, mesa) read
 * at the query without forming the weights. Per token t, with write strength β_t = θη_t and
 * retention γ_t,
 *     H_t = γ_t H_{t−1} + β_t k_tᵀ k_t,   G_t = γ_t G_{t−1} + β_t k_tᵀ v_t,
 *     (H_t + λI)ᵀ x_t = q_t,              o_t = x_tᵀ G_t  (= q_t W_t, W_t = (H_t + λI)⁻¹ G_t).
 * H_t is symmetric, so the transpose changes no value; it makes o_t the same function of a
 * state H that is not (a caller's, or a finite difference of one entry) as q_t W_t, the
 * generic driver's, and so the same gradient with respect to it.
 * Three registry entries:
 *   recurrent — x_t by an LU solve in double (O(d_k³) per token): the exact layer, which the
 *               generic driver computes through the optimizer's own step (optim/mesa.c);
 *   cg        — x_t by `cg_steps` steps of conjugate gradients from x = 0 (FLA's training
 *               kernel's start) or, with cg_start: jacobi, from q_t/(diag H_t + λ) (its
 *               decoding step's), in double: MesaNet as its paper runs it, O(cg_steps·d_k²) per
 *               token; with cg_steps ≥ d_k it is the exact solve in exact arithmetic;
 *   chunkwise — the same CG steps for a chunk of layer.chunk tokens at once, with H_t p from the
 *               chunk's start state and its keys (mesa_chunk), never forming H_t.
 * All keep H and G in float32 (the layer state, optim/mesa.c's two state tensors) and end with
 * the weights W_T = (H_T + λI)⁻¹ G_T solved exactly, so every form leaves the same state.
 *
 * Under a tape each entry is one custom op whose backward is written by hand (mesa_backward):
 * the implicit-function gradient of the solve, dq_t = (H_t + λI)⁻¹ (G_t dO_t) and
 * dH_t −= x_t dq_tᵀ, with the adjoint solved as the forward solved x_t (exactly, or by the same
 * CG steps, token by token, as FLA's backward does), then the two linear recurrences backward. */
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "fused_grad.h"
#include "kernels.h"
#include "ridge.h"

static int is_mesa(const ttt_layer *L) { return ttt_layer_optim_traits(L).ridge > 0.0f; }

static const char *mesa_available_common(const ttt_layer *L, const ttt_form_inputs *in) {
    if (!is_mesa(L) || !(L->model->traits & TTT_MODEL_LINEAR_MAP) ||
        !(L->loss->traits & TTT_LOSS_RESIDUAL))
        return "the mesa_net forms compute MesaNet's tuple (a linear model, the squared loss, "
               "optimizer mesa)";
    if (L->mini_batch != 1 || L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->pos_inverse ||
        L->step_per_token)
        return "MesaNet steps once per token and reads after its own write (mini_batch 1, "
               "update_then_apply, steps per_block, position_scale none)";
    if (L->normalize != TTT_NORMALIZE_NONE || L->fmap)
        return "the mesa_net forms take no output normalization or feature map";
    const char *one = ttt_form_one_step(L);
    if (one) return one;
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "MesaNet takes a scalar gate per token, not one per key dimension";
    return NULL;
}

static const char *mesa_recurrent_available(const ttt_layer *L, const ttt_form_inputs *in) {
    return mesa_available_common(L, in);
}

static const char *mesa_cg_available(const ttt_layer *L, const ttt_form_inputs *in) {
    const char *why = mesa_available_common(L, in);
    if (why) return why;
    if (ttt_layer_optim_traits(L).cg_steps < 1)
        return "the cg and chunkwise forms solve by optimizer.cg_steps ≥ 1 conjugate-gradient "
               "steps; cg_steps: 0 is the exact solve of form: recurrent";
    return NULL;
}

/* ---- the kernel ---- */

typedef struct mesa_ws {
    int d_k, d_v, cg; /* cg: steps, 0 = exact */
    int jacobi;       /* CG starts from q/(diag H + λ), else from 0 */
    double lam;
    double *A;        /* (d_k, d_k) H + λI, then its LU factors */
    int *piv;
    double *r, *p, *w; /* (d_k) CG's residual, direction, A·p */
} mesa_ws;

static mesa_ws mesa_ws_new(ttt_ctx *ctx, const ttt_layer *L, int cg) {
    const int d = L->d_k;
    mesa_ws w = {.d_k = d, .d_v = L->d_v, .cg = cg, .lam = ttt_layer_optim_traits(L).ridge,
                 .jacobi = ttt_layer_optim_traits(L).cg_jacobi};
    w.A = ttt_fused_scratch(ctx, sizeof(double) * ((size_t)d * d + 3 * (size_t)d));
    w.r = w.A + (size_t)d * d, w.p = w.r + d, w.w = w.p + d;
    w.piv = ttt_fused_scratch(ctx, sizeof(int) * (size_t)(d > 0 ? d : 1));
    return w;
}

/* H ← γH + β kᵀk, G ← γG + β kᵀv (one rounding per entry; H's products β(k_i k_j) are
 * symmetric in i, j so H stays exactly symmetric). */
TTT_FP_CONTRACT static void mesa_write(float *restrict H, float *restrict G,
                                       const float *restrict k, const float *restrict v, float b,
                                       float a, int d_k, int d_v) {
    for (int i = 0; i < d_k; i++) {
        float *restrict Hi = H + (size_t)i * d_k, *restrict Gi = G + (size_t)i * d_v;
        const float bki = b * k[i];
        for (int j = 0; j < d_k; j++) Hi[j] = a * Hi[j] + b * (k[i] * k[j]);
        for (int j = 0; j < d_v; j++) Gi[j] = a * Gi[j] + bki * v[j];
    }
}

/* x = (H + λI)⁻¹ b, or its transpose's solve (trans; the same for a symmetric H), exactly by LU
 * or by w->cg CG steps from 0 or from the Jacobi guess b/(diag H + λ); b (d_k) float, x (d_k)
 * double. Returns 0 when A is singular (only
 * a caller's state can make it so). */
static int mesa_solve(mesa_ws *w, const float *H, const float *b, double *x, int trans) {
    const int d = w->d_k;
    if (!w->cg) {
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                w->A[(size_t)i * d + j] = trans ? H[(size_t)j * d + i] : H[(size_t)i * d + j];
        for (int i = 0; i < d; i++) w->A[(size_t)i * d + i] += w->lam;
        for (int i = 0; i < d; i++) x[i] = b[i];
        if (!ttt_ridge_lu(w->A, w->piv, d)) return 0;
        ttt_ridge_lu_solve1(w->A, w->piv, d, x);
        return 1;
    }
    /* conjugate gradients on the symmetric positive definite H + λI (the transpose is the same
     * matrix), from x = 0; stops early only when the residual is exactly 0 or a direction has no
     * positive curvature (then x is the best it had) */
    double *r = w->r, *p = w->p, *Ap = w->w, delta = 0.0;
    for (int i = 0; i < d; i++)
        x[i] = w->jacobi ? b[i] / ((double)H[(size_t)i * d + i] + w->lam) : 0.0;
    for (int i = 0; i < d; i++) { /* r = b − A x */
        double acc = b[i] - w->lam * x[i];
        if (w->jacobi)
            for (int j = 0; j < d; j++) acc -= (double)H[(size_t)i * d + j] * x[j];
        r[i] = p[i] = acc;
        delta += acc * acc;
    }
    for (int s = 0; s < w->cg && delta > 0.0; s++) {
        double pAp = 0.0;
        for (int i = 0; i < d; i++) {
            const float *Hi = H + (size_t)i * d;
            double acc = w->lam * p[i];
            for (int j = 0; j < d; j++) acc += (double)Hi[j] * p[j];
            Ap[i] = acc;
            pAp += p[i] * acc;
        }
        if (!(pAp > 0.0)) break;
        const double alpha = delta / pAp;
        double dn = 0.0;
        for (int i = 0; i < d; i++) {
            x[i] += alpha * p[i];
            r[i] -= alpha * Ap[i];
            dn += r[i] * r[i];
        }
        const double bb = dn / delta;
        for (int i = 0; i < d; i++) p[i] = r[i] + bb * p[i];
        delta = dn;
    }
    return 1;
}

/* o = xᵀ G (d_v), accumulated in double. */
static void mesa_read(float *o, const double *x, const float *G, int d_k, int d_v, double *acc) {
    for (int j = 0; j < d_v; j++) acc[j] = 0.0;
    for (int i = 0; i < d_k; i++) {
        const float *Gi = G + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) acc[j] += x[i] * Gi[j];
    }
    for (int j = 0; j < d_v; j++) o[j] = (float)acc[j];
}

/* The retentions γ_t = exp(log γ_t), dithered as every recurrent kernel rounds them
 * (kernels.h ttt_gate_dither); NULL without gates. */
static float *mesa_alphas(ttt_ctx *ctx, const float *la, int T) {
    if (!la) return NULL;
    float *al = ttt_arena_alloc(ctx->arena, (size_t)(T > 0 ? T : 1) * sizeof(float));
    TTT_ASSERT(al);
    double drift = 1.0;
    for (int t = 0; t < T; t++) al[t] = ttt_gate_dither(&drift, exp((double)la[t]));
    return al;
}

/* Tokens [0, T): o (T, d_v) written, H (d_k, d_k), G (d_k, d_v) in/out; xs (T, d_k) the solves
 * x_t kept for the backward, or NULL. Returns 0 when a solve met a singular matrix. */
static int mesa_run(mesa_ws *w, float *o, float *H, float *G, const float *q, const float *k,
                    const float *v, const float *beta, const float *al, int T, float *xs,
                    double *x, double *acc) {
    const int d_k = w->d_k, d_v = w->d_v;
    int ok = 1;
    for (int t = 0; t < T; t++) {
        mesa_write(H, G, k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta[t] : 1.0f,
                   al ? al[t] : 1.0f, d_k, d_v);
        ok &= mesa_solve(w, H, q + (size_t)t * d_k, x, 1);
        if (xs)
            for (int i = 0; i < d_k; i++) xs[(size_t)t * d_k + i] = (float)x[i];
        mesa_read(o + (size_t)t * d_v, x, G, d_k, d_v, acc);
    }
    return ok;
}

/* ---- the chunkwise CG form ----
 * A chunk of n tokens from the state H_0, G_0 at its start, without forming any H_t: with
 * D_ts = γ_{s+1} ⋯ γ_t (s ≤ t, products in double, so a reset gives exact zeros), e_t = D_t0 γ_0
 * and M_ts = D_ts β_s,
 *     H_t p = e_t H_0 p + Σ_{s≤t} M_ts (k_s · p) k_s,
 *     o_t = e_t x_tᵀ G_0 + Σ_{s≤t} M_ts (k_s · x_t) v_s,
 * so the CG steps of all n tokens run together as matrix products, P H_0ᵀ and ((P Kᵀ) ⊙ M) K,
 * each token with its own step sizes (FLA's chunk kernel; docs/math.md §3.11). Arithmetic in
 * double; the state moves to the chunk's end once, H ← e_{n−1} H_0 + Kᵀ Diag(M_{n−1,·}) K. */

typedef struct mesa_chunk_ws {
    int C;
    double *D, *e, *H0, *X, *R, *P, *AP, *delta, *acc; /* (C,C) (C) (d,d) (C,d)×4 (C) (d_v) */
    unsigned char *live;                              /* (C) */
} mesa_chunk_ws;

static mesa_chunk_ws mesa_chunk_ws_new(ttt_ctx *ctx, int C, int d_k, int d_v) {
    mesa_chunk_ws c = {.C = C};
    const size_t cc = (size_t)C * C, cd = (size_t)C * d_k;
    c.D = ttt_fused_scratch(ctx, sizeof(double) * (cc + 2 * (size_t)C + (size_t)d_k * d_k +
                                                   4 * cd + (size_t)d_v));
    c.e = c.D + cc, c.H0 = c.e + C, c.X = c.H0 + (size_t)d_k * d_k;
    c.R = c.X + cd, c.P = c.R + cd, c.AP = c.P + cd, c.delta = c.AP + cd, c.acc = c.delta + C;
    c.live = ttt_fused_scratch(ctx, (size_t)C);
    return c;
}

/* AP = A_t p_t for every live row: e_t H_0 p_t + Σ_s M_ts (k_s · p_t) k_s + λ p_t. */
static void mesa_chunk_apply(const mesa_chunk_ws *c, const float *k, int n, int d, double lam,
                             const double *P, double *AP) {
    for (int t = 0; t < n; t++) {
        if (!c->live[t]) continue;
        const double *pt = P + (size_t)t * d;
        double *at = AP + (size_t)t * d;
        for (int i = 0; i < d; i++) {
            const double *Hi = c->H0 + (size_t)i * d;
            double acc = 0.0;
            for (int j = 0; j < d; j++) acc += Hi[j] * pt[j];
            at[i] = c->e[t] * acc + lam * pt[i];
        }
        for (int s = 0; s <= t; s++) {
            const double m = c->D[(size_t)t * c->C + s];
            if (m == 0.0) continue;
            const float *ks = k + (size_t)s * d;
            double kp = 0.0;
            for (int j = 0; j < d; j++) kp += ks[j] * pt[j];
            kp *= m;
            for (int i = 0; i < d; i++) at[i] += kp * ks[i];
        }
    }
}

static void mesa_chunk(mesa_chunk_ws *c, mesa_ws *w, float *o, float *H, float *G,
                       const float *q, const float *k, const float *v, const float *beta,
                       const float *al, int n, float *xs) {
    const int d = w->d_k, dv = w->d_v, C = c->C;
    /* M_ts = D_ts β_s (kept in D), e_t */
    for (int t = 0; t < n; t++) {
        double prod = 1.0;
        for (int s = t; s >= 0; s--) {
            c->D[(size_t)t * C + s] = prod * (beta ? beta[s] : 1.0);
            prod *= al ? al[s] : 1.0;
        }
        c->e[t] = prod; /* γ_0 ⋯ γ_t */
    }
    for (size_t i = 0; i < (size_t)d * d; i++) c->H0[i] = H[i];
    /* CG from 0 or from the Jacobi guess q_t/(diag H_t + λ), every token at once:
     * diag H_t = e_t diag H_0 + Σ_s M_ts k_s², and R = Q − A X */
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < d; i++) {
            double x0 = 0.0;
            if (w->jacobi) {
                double h = c->e[t] * c->H0[(size_t)i * d + i];
                for (int s = 0; s <= t; s++) {
                    const double ki = k[(size_t)s * d + i];
                    h += c->D[(size_t)t * C + s] * (ki * ki);
                }
                x0 = q[(size_t)t * d + i] / (h + w->lam);
            }
            c->X[(size_t)t * d + i] = x0;
        }
        c->live[t] = 1;
    }
    if (w->jacobi) mesa_chunk_apply(c, k, n, d, w->lam, c->X, c->AP);
    for (int t = 0; t < n; t++) {
        double dl = 0.0;
        for (int i = 0; i < d; i++) {
            const double ri = q[(size_t)t * d + i] - (w->jacobi ? c->AP[(size_t)t * d + i] : 0.0);
            c->R[(size_t)t * d + i] = c->P[(size_t)t * d + i] = ri;
            dl += ri * ri;
        }
        c->delta[t] = dl;
        c->live[t] = dl > 0.0;
    }
    for (int step = 0; step < w->cg; step++) {
        mesa_chunk_apply(c, k, n, d, w->lam, c->P, c->AP);
        int any = 0;
        for (int t = 0; t < n; t++) {
            if (!c->live[t]) continue;
            double *xt = c->X + (size_t)t * d, *rt = c->R + (size_t)t * d;
            double *pt = c->P + (size_t)t * d, *at = c->AP + (size_t)t * d;
            double pAp = 0.0;
            for (int i = 0; i < d; i++) pAp += pt[i] * at[i];
            if (!(pAp > 0.0)) {
                c->live[t] = 0;
                continue;
            }
            const double alpha = c->delta[t] / pAp;
            double dn = 0.0;
            for (int i = 0; i < d; i++) {
                xt[i] += alpha * pt[i];
                rt[i] -= alpha * at[i];
                dn += rt[i] * rt[i];
            }
            const double bb = dn / c->delta[t];
            for (int i = 0; i < d; i++) pt[i] = rt[i] + bb * pt[i];
            c->delta[t] = dn;
            c->live[t] = dn > 0.0;
            any |= c->live[t];
        }
        if (!any) break;
    }
    /* the outputs: e_t x_tᵀ G_0 + Σ_s M_ts (k_s · x_t) v_s */
    for (int t = 0; t < n; t++) {
        const double *xt = c->X + (size_t)t * d;
        if (xs)
            for (int i = 0; i < d; i++) xs[(size_t)t * d + i] = (float)xt[i];
        double *acc = c->acc;
        for (int j = 0; j < dv; j++) {
            double sum = 0.0;
            for (int i = 0; i < d; i++) sum += xt[i] * G[(size_t)i * dv + j];
            acc[j] = c->e[t] * sum;
        }
        for (int s = 0; s <= t; s++) {
            const double m = c->D[(size_t)t * C + s];
            if (m == 0.0) continue;
            const float *ks = k + (size_t)s * d, *vs = v + (size_t)s * dv;
            double kx = 0.0;
            for (int i = 0; i < d; i++) kx += ks[i] * xt[i];
            kx *= m;
            for (int j = 0; j < dv; j++) acc[j] += kx * vs[j];
        }
        for (int j = 0; j < dv; j++) o[(size_t)t * dv + j] = (float)acc[j];
    }
    /* the state at the chunk's end, one rounding per entry */
    const double eN = c->e[n - 1];
    const double *MN = c->D + (size_t)(n - 1) * C;
    for (int i = 0; i < d; i++) {
        for (int j = 0; j < d; j++) {
            double acc = eN * c->H0[(size_t)i * d + j];
            for (int s = 0; s < n; s++)
                acc += MN[s] * ((double)k[(size_t)s * d + i] * k[(size_t)s * d + j]);
            H[(size_t)i * d + j] = (float)acc;
        }
        for (int j = 0; j < dv; j++) {
            double acc = eN * G[(size_t)i * dv + j];
            for (int s = 0; s < n; s++)
                acc += MN[s] * ((double)k[(size_t)s * d + i] * v[(size_t)s * dv + j]);
            G[(size_t)i * dv + j] = (float)acc;
        }
    }
}

/* W = (H + λI)⁻¹ G exactly (the state's weights, whichever solve the tokens used). */
static int mesa_weights(mesa_ws *w, float *W, const float *H, const float *G, double *X) {
    const int d = w->d_k, dv = w->d_v;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) w->A[(size_t)i * d + j] = H[(size_t)i * d + j];
    for (int i = 0; i < d; i++) w->A[(size_t)i * d + i] += w->lam;
    for (size_t i = 0; i < (size_t)d * dv; i++) X[i] = G[i];
    if (!ttt_ridge_lu(w->A, w->piv, d)) return 0;
    ttt_ridge_lu_solve(w->A, w->piv, d, X, dv);
    for (size_t i = 0; i < (size_t)d * dv; i++) W[i] = (float)X[i];
    return 1;
}

static ttt_status singular(ttt_error *err) {
    return ttt_error_set(err, TTT_ERR_NUMERIC,
                         "mesa_net: H + lambda I is singular (the carried state H is not positive "
                         "semidefinite); start from the zero state or a state this layer wrote");
}

/* The chunk of tokens [t0, t0 + n): token by token (mesa_run), or as one chunk (mesa_chunk) when
 * cw is given. */
static int mesa_span(mesa_ws *w, mesa_chunk_ws *cw, float *o, float *H, float *G, const float *q,
                     const float *k, const float *v, const float *beta, const float *al, int t0,
                     int n, float *xs, double *x, double *acc) {
    const int d_k = w->d_k, d_v = w->d_v;
    q += (size_t)t0 * d_k, k += (size_t)t0 * d_k, v += (size_t)t0 * d_v, o += (size_t)t0 * d_v;
    if (beta) beta += t0;
    if (al) al += t0;
    if (xs) xs += (size_t)t0 * d_k;
    if (!cw) return mesa_run(w, o, H, G, q, k, v, beta, al, n, xs, x, acc);
    mesa_chunk(cw, w, o, H, G, q, k, v, beta, al, n, xs);
    return 1;
}

/* The chunk the forms run in: layer.chunk (the chunkwise form's chunk, and the backward's
 * stretch of recomputed states) within [1, T]. */
static int mesa_chunk_len(const ttt_layer *L, int T) {
    return T > 0 ? (L->chunk > 0 && L->chunk < T ? L->chunk : T) : 1;
}

static ttt_status mesa_forward_with(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                    ttt_layer_state *st, const ttt_form_args *a, int cg,
                                    int chunked, ttt_error *err) {
    const int T = TTT_ROWS(a->q), d_k = L->d_k, d_v = L->d_v, C = mesa_chunk_len(L, T);
    mesa_ws w = mesa_ws_new(ctx, L, cg);
    mesa_chunk_ws cw;
    if (chunked) cw = mesa_chunk_ws_new(ctx, C, d_k, d_v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const float *al = mesa_alphas(ctx, a->log_alpha ? a->log_alpha->data : NULL, T);
    double *x = ttt_fused_scratch(ctx, sizeof(double) * ((size_t)d_k + d_v + (size_t)d_k * d_v));
    int ok = 1;
    for (int t0 = 0; t0 < T; t0 += C)
        ok &= mesa_span(&w, chunked ? &cw : NULL, o->data, st->opt[0][0]->data,
                        st->opt[0][1]->data, a->q->data, a->k->data, a->v->data, beta, al, t0,
                        t0 + C <= T ? C : T - t0, NULL, x, x + d_k);
    ok &= mesa_weights(&w, st->W[0]->data, st->opt[0][0]->data, st->opt[0][1]->data, x + d_k + d_v);
    return ok ? TTT_OK : singular(err);
}

static ttt_status mesa_recurrent_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a,
                                         ttt_error *err) {
    return mesa_forward_with(ctx, L, o, st, a, 0, 0, err);
}
static ttt_status mesa_cg_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return mesa_forward_with(ctx, L, o, st, a, ttt_layer_optim_traits(L).cg_steps, 0, err);
}
static ttt_status mesa_chunk_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                     ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return mesa_forward_with(ctx, L, o, st, a, ttt_layer_optim_traits(L).cg_steps, 1, err);
}

/* ---- the backward, by hand ----
 * Packed result P = [O (T, d_v); H_T (d_k²); G_T (d_k d_v); W_T (d_k d_v)]. From the end, with
 * dH, dG the adjoints of the state (the final state's at first):
 *     weights:  U = (H_T + λI)⁻ᵀ dW;  dG += U;  dH −= U W_Tᵀ;
 *     token t, read:   dG += x_t dO_tᵀ;  y = (H_t + λI)⁻¹ (G_t dO_t);  dq_t += y;  dH −= x_t yᵀ;
 *              write:  dβ_t += k_t dH k_tᵀ + k_t dG v_tᵀ;  dk_t += β_t (dH + dHᵀ) k_t + β_t dG v_t;
 *                      dv_t += β_t dGᵀ k_t;  d log γ_t += γ_t (⟨H_{t−1}, dH⟩ + ⟨G_{t−1}, dG⟩);
 *                      dH ← γ_t dH, dG ← γ_t dG.
 * The forward saves the state at every chunk start and the solves x_t; the backward recomputes
 * a chunk's states from its start with the forward's own arithmetic (mesa_write). */

typedef struct mesa_saved {
    const float *S;  /* (nch, d_k² + d_k d_v) H then G at each chunk start */
    const float *xs; /* (T, d_k) the forward's solves */
    const float *al; /* (T) the retentions, or NULL */
    const float *W;  /* (d_k, d_v) the final weights (inside P) */
    int T, C, cg, jacobi;
    double lam;
} mesa_saved;

static void mesa_backward(ttt_ctx *ctx, const ttt_tape_entry *ent, const float *dP) {
    const ttt_tensor *q = ent->in[0], *k = ent->in[1], *v = ent->in[2], *bt = ent->in[3];
    const ttt_tensor *H0 = ent->in[5], *G0 = ent->in[6];
    float *gq = ttt_grad(ctx, q), *gk = ttt_grad(ctx, k), *gv = ttt_grad(ctx, v);
    float *gb = ttt_grad(ctx, bt), *gla = ttt_grad(ctx, ent->in[4]);
    float *gH0 = ttt_grad(ctx, H0), *gG0 = ttt_grad(ctx, G0);
    const mesa_saved *sv = ent->aux;
    const int T = sv->T, C = sv->C, d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    const int nch = (T + C - 1) / C;
    const size_t dkk = (size_t)d_k * d_k, dkv = (size_t)d_k * d_v, all = dkk + dkv;
    const float *beta = bt ? bt->data : NULL, *al = sv->al;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    mesa_ws w = {.d_k = d_k, .d_v = d_v, .cg = sv->cg, .lam = sv->lam, .jacobi = sv->jacobi};
    w.A = ttt_fused_scratch(ctx, sizeof(double) * (dkk + 3 * (size_t)d_k));
    w.r = w.A + dkk, w.p = w.r + d_k, w.w = w.p + d_k;
    w.piv = ttt_fused_scratch(ctx, sizeof(int) * (size_t)(d_k > 0 ? d_k : 1));
    float *Ss = ttt_fused_scratch(ctx, sizeof(float) * ((size_t)C + 1) * all); /* states */
    float *dH = ttt_fused_scratch(ctx, sizeof(float) * dkk);
    float *dG = ttt_fused_scratch(ctx, sizeof(float) * dkv);
    float *dx = ttt_fused_scratch(ctx, sizeof(float) * (size_t)(d_k > d_v ? d_k : d_v));
    double *y = ttt_fused_scratch(ctx, sizeof(double) * dkv);
    memcpy(dH, dP + (size_t)T * d_v, dkk * sizeof(float));
    memcpy(dG, dP + (size_t)T * d_v + dkk, dkv * sizeof(float));
    { /* the final weights W = A⁻¹ G: U = A⁻ᵀ dW column by column (A is H_T + λI) */
        const float *dW = dP + (size_t)T * d_v + dkk + dkv;
        const float *Hf = ent->out->data + (size_t)T * d_v;
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_k; j++) w.A[(size_t)i * d_k + j] = Hf[(size_t)j * d_k + i];
        for (int i = 0; i < d_k; i++) w.A[(size_t)i * d_k + i] += w.lam;
        for (size_t i = 0; i < dkv; i++) y[i] = dW[i];
        if (ttt_ridge_lu(w.A, w.piv, d_k)) {
            ttt_ridge_lu_solve(w.A, w.piv, d_k, y, d_v);
            for (int i = 0; i < d_k; i++)
                for (int j = 0; j < d_k; j++) {
                    double acc = 0.0;
                    for (int c = 0; c < d_v; c++)
                        acc += y[(size_t)i * d_v + c] * sv->W[(size_t)j * d_v + c];
                    dH[(size_t)i * d_k + j] -= (float)acc;
                }
            for (size_t i = 0; i < dkv; i++) dG[i] += (float)y[i];
        }
    }
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        memcpy(Ss, sv->S + (size_t)c * all, all * sizeof(float));
        for (int tt = 0; tt < n; tt++) { /* the states after each token's write */
            const int t = t0 + tt;
            float *Sn = Ss + (size_t)(tt + 1) * all;
            memcpy(Sn, Ss + (size_t)tt * all, all * sizeof(float));
            mesa_write(Sn, Sn + dkk, k->data + (size_t)t * d_k, v->data + (size_t)t * d_v,
                       beta ? beta[t] : 1.0f, al ? al[t] : 1.0f, d_k, d_v);
        }
        for (int tt = n - 1; tt >= 0; tt--) {
            const int t = t0 + tt;
            const float *Ht = Ss + (size_t)(tt + 1) * all, *Gt = Ht + dkk;
            const float *Hp = Ss + (size_t)tt * all, *Gp = Hp + dkk;
            const float *xt = sv->xs + (size_t)t * d_k, *dO = dP + (size_t)t * d_v;
            const float *kt = k->data + (size_t)t * d_k, *vt = v->data + (size_t)t * d_v;
            const float a = al ? al[t] : 1.0f, b = beta ? beta[t] : 1.0f;
            /* the read-out o = xᵀ G */
            for (int i = 0; i < d_k; i++) {
                double acc = 0.0;
                for (int j = 0; j < d_v; j++) {
                    acc += (double)Gt[(size_t)i * d_v + j] * dO[j];
                    dG[(size_t)i * d_v + j] += xt[i] * dO[j];
                }
                dx[i] = (float)acc;
            }
            /* the solve Aᵀx = q: y = A⁻¹ dx, dq += y, dA −= x yᵀ */
            if (mesa_solve(&w, Ht, dx, y, 0)) {
                for (int i = 0; i < d_k; i++) {
                    if (gq) gq[(size_t)t * d_k + i] += (float)y[i];
                    for (int j = 0; j < d_k; j++) dH[(size_t)i * d_k + j] -= (float)(xt[i] * y[j]);
                }
            }
            /* the writes */
            double db = 0.0, dla = 0.0;
            for (int i = 0; i < d_k; i++) {
                const float *dHi = dH + (size_t)i * d_k, *dGi = dG + (size_t)i * d_v;
                double kdH = 0.0, dHk = 0.0, dGv = 0.0;
                for (int j = 0; j < d_k; j++) {
                    kdH += (double)dHi[j] * kt[j];                   /* (dH k)_i */
                    dHk += (double)dH[(size_t)j * d_k + i] * kt[j];  /* (dHᵀ k)_i */
                    dla += (double)Hp[(size_t)i * d_k + j] * dHi[j];
                }
                for (int j = 0; j < d_v; j++) {
                    dGv += (double)dGi[j] * vt[j];
                    dla += (double)Gp[(size_t)i * d_v + j] * dGi[j];
                }
                db += kt[i] * (kdH + dGv);
                if (gk) gk[(size_t)t * d_k + i] += (float)(b * (kdH + dHk + dGv));
            }
            if (gv)
                for (int j = 0; j < d_v; j++) {
                    double acc = 0.0;
                    for (int i = 0; i < d_k; i++) acc += (double)dG[(size_t)i * d_v + j] * kt[i];
                    gv[(size_t)t * d_v + j] += (float)(b * acc);
                }
            if (gb) gb[t] += (float)db;
            if (gla && al) gla[t] += (float)(a * dla);
            for (size_t i = 0; i < dkk; i++) dH[i] *= a;
            for (size_t i = 0; i < dkv; i++) dG[i] *= a;
        }
    }
    if (gH0)
        for (size_t i = 0; i < dkk; i++) gH0[i] += dH[i];
    if (gG0)
        for (size_t i = 0; i < dkv; i++) gG0[i] += dG[i];
    ttt_arena_release(ctx->arena, mark);
}

static ttt_status mesa_forward_diff_with(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a, int cg,
                                         int chunked, ttt_error *err) {
    const int T = TTT_ROWS(a->q), d_k = L->d_k, d_v = L->d_v;
    const size_t dkk = (size_t)d_k * d_k, dkv = (size_t)d_k * d_v, all = dkk + dkv;
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    const ttt_tensor *in[7] = {a->q, a->k, a->v, beta, a->log_alpha, st->opt[0][0],
                               st->opt[0][1]};
    int any = 0;
    for (int i = 0; i < 7; i++) any |= in[i] && in[i]->requires_grad;
    const int rec = ttt_recording(ctx) && any;
    ttt_tensor *P = ttt_tensor_1d(ctx, (int)((size_t)T * d_v + all + dkv));
    float *O = P->data, *H = O + (size_t)T * d_v, *G = H + dkk, *W = G + dkv;
    memcpy(H, st->opt[0][0]->data, dkk * sizeof(float));
    memcpy(G, st->opt[0][1]->data, dkv * sizeof(float));
    const int C = mesa_chunk_len(L, T), nch = (T + C - 1) / C;
    float *saved = rec && nch ? ttt_tape_alloc(ctx, (size_t)nch * all * sizeof(float)) : NULL;
    float *xs = rec ? ttt_tape_alloc(ctx, (size_t)(T > 0 ? T : 1) * d_k * sizeof(float)) : NULL;
    mesa_ws w = mesa_ws_new(ctx, L, cg);
    mesa_chunk_ws cw;
    if (chunked) cw = mesa_chunk_ws_new(ctx, C, d_k, d_v);
    const float *al = mesa_alphas(ctx, a->log_alpha ? a->log_alpha->data : NULL, T);
    double *x = ttt_fused_scratch(ctx, sizeof(double) * ((size_t)d_k + d_v + dkv));
    int ok = 1;
    for (int c = 0; c < nch; c++) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        if (saved) {
            memcpy(saved + (size_t)c * all, H, dkk * sizeof(float));
            memcpy(saved + (size_t)c * all + dkk, G, dkv * sizeof(float));
        }
        ok &= mesa_span(&w, chunked ? &cw : NULL, O, H, G, a->q->data, a->k->data, a->v->data,
                        beta ? beta->data : NULL, al, t0, n, xs, x, x + d_k);
    }
    ok &= mesa_weights(&w, W, H, G, x + d_k + d_v);
    if (!ok) return singular(err);
    ttt_tape_entry *ent = ttt_tape_record(ctx, mesa_backward, P, in, 7);
    if (ent) {
        mesa_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (mesa_saved){.S = saved, .xs = xs, .al = al, .W = W, .T = T, .C = C, .cg = cg,
                           .jacobi = w.jacobi, .lam = w.lam};
        ent->aux = sv;
        ent->name = "mesa_net_fused";
    }
    ttt_tensor *On = ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "mesa_net_o");
    ttt_tensor *Hn = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){d_k, d_k},
                                    "mesa_net_H");
    ttt_tensor *Gn = ttt_fused_part(ctx, P, (size_t)T * d_v + dkk, 2, (const int[]){d_k, d_v},
                                    "mesa_net_G");
    ttt_tensor *Wn = ttt_fused_part(ctx, P, (size_t)T * d_v + all, 2, (const int[]){d_k, d_v},
                                    "mesa_net_W");
    ttt_form_diff_output(ctx, o, On);
    ttt_form_set_state(ctx, &st->opt[0][0], Hn);
    ttt_form_set_state(ctx, &st->opt[0][1], Gn);
    ttt_form_set_state(ctx, &st->W[0], Wn);
    return TTT_OK;
}

static ttt_status mesa_recurrent_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                      ttt_layer_state *st, const ttt_form_args *a,
                                      ttt_error *err) {
    return mesa_forward_diff_with(ctx, L, o, st, a, 0, 0, err);
}
static ttt_status mesa_cg_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return mesa_forward_diff_with(ctx, L, o, st, a, ttt_layer_optim_traits(L).cg_steps, 0, err);
}
static ttt_status mesa_chunk_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return mesa_forward_diff_with(ctx, L, o, st, a, ttt_layer_optim_traits(L).cg_steps, 1, err);
}

/* ---- estimates ---- */

static double mesa_scratch(const ttt_layer *L, long T) {
    /* β and the retentions (2T floats), the solve's workspace (d_k² + 3 d_k doubles, d_k
     * ints), x, the read's accumulator and the final solve (d_k + d_v + d_k d_v doubles); 128
     * floats cover the arena's headers and alignment */
    const double dk = L->d_k, dv = L->d_v;
    /* forward_diff's packed result [O; H; G; W] besides */
    return (2.0 * T + T * dv + dk * dk + 2 * dk * dv) * sizeof(float) +
           (dk * dk + 4 * dk + dv + dk * dv) * sizeof(double) +
           dk * sizeof(int) + 256 * sizeof(float);
}
static double mesa_chunk_scratch(const ttt_layer *L, long T) {
    /* the token-by-token scratch, and the chunk's: D (C²), e, δ (2C), H_0 (d_k²), X, R, P, AP
     * (4 C d_k), the read's accumulator (d_v) in doubles, the live flags (C bytes) */
    const double C = L->chunk > 0 ? (L->chunk < T ? L->chunk : (double)T) : 1, dk = L->d_k;
    return mesa_scratch(L, T) + (C * C + 2 * C + dk * dk + 4 * C * dk + L->d_v) * sizeof(double) +
           C + 64;
}
static double mesa_chunk_flops(const ttt_layer *L, long T) {
    /* per token and CG step: H_0 p (2 d_k²) and the chunk's keys twice (4 C d_k), 10 d_k more;
     * per token the read (2 d_k d_v + 2 C (d_k + d_v)) and, per chunk, the state (2 C d_k (d_k +
     * d_v)) */
    const double dk = L->d_k, dv = L->d_v, s = ttt_layer_optim_traits(L).cg_steps;
    const double C = L->chunk > 0 ? L->chunk : 16;
    return (double)T * (s * (2 * dk * dk + 4 * C * dk + 10 * dk) + 2 * dk * dv +
                        2 * C * (dk + dv) + 2 * dk * (dk + dv));
}
static double mesa_recurrent_flops(const ttt_layer *L, long T) {
    /* per token: the writes 3 d_k² + 3 d_k d_v, the LU 2d_k³/3 and its solve 2 d_k², the read
     * 2 d_k d_v */
    const double dk = L->d_k, dv = L->d_v;
    return (double)T * (5 * dk * dk + 5 * dk * dv + 2.0 / 3.0 * dk * dk * dk);
}
static double mesa_cg_flops(const ttt_layer *L, long T) {
    /* per token: the writes, the read, and per CG step A·p (2 d_k²) plus 10 d_k */
    const double dk = L->d_k, dv = L->d_v, s = ttt_layer_optim_traits(L).cg_steps;
    return (double)T * (3 * dk * dk + 5 * dk * dv + s * (2 * dk * dk + 10 * dk));
}

const ttt_form_entry ttt_form_mesa_net_recurrent = {
    .family = "mesa_net",
    .form = "recurrent",
    .help = "MesaNet token by token: H, G by their recurrences, (H + lambda I) x = q solved "
            "exactly (LU in double), o = x^T G (docs/math.md 3.11)",
    .auto_rank = 10,
    .available = mesa_recurrent_available,
    .forward = mesa_recurrent_forward,
    .forward_diff = mesa_recurrent_diff,
    .scratch_bytes = mesa_scratch,
    .flops = mesa_recurrent_flops,
};

const ttt_form_entry ttt_form_mesa_net_cg = {
    .family = "mesa_net",
    .form = "cg",
    .help = "MesaNet token by token with (H + lambda I) x = q solved by optimizer.cg_steps "
            "conjugate-gradient steps from 0, as the paper's layer (docs/math.md 3.11)",
    .auto_rank = 11,
    .available = mesa_cg_available,
    .forward = mesa_cg_forward,
    .forward_diff = mesa_cg_diff,
    .scratch_bytes = mesa_scratch,
    .flops = mesa_cg_flops,
};

const ttt_form_entry ttt_form_mesa_net_chunkwise = {
    .family = "mesa_net",
    .form = "chunkwise",
    .help = "MesaNet in chunks of layer.chunk tokens: every token's optimizer.cg_steps "
            "conjugate-gradient steps at once, H_t p from the chunk's start state and keys, "
            "never forming H_t (FLA's chunk kernel; docs/math.md 3.11)",
    .auto_rank = 0,
    .chunked = 1,
    .available = mesa_cg_available,
    .forward = mesa_chunk_forward,
    .forward_diff = mesa_chunk_diff,
    .scratch_bytes = mesa_chunk_scratch,
    .flops = mesa_chunk_flops,
};
