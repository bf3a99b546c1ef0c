/* Log-linear attention (docs/math.md §4.8): the linear-attention and delta-rule tuples with
 * ttt_layer.levels = Λ > 1 fast weights S^0 … S^{Λ−1} at different time scales, each (d_k, d_v),
 * the layer state W (Λ·d_k, d_v) holding them level after level. Token p (its absolute
 * position, the state's pos plus its row) first merges the levels by the Fenwick schedule, then
 * takes the rule's step on every level and writes into level 0, then reads every level with its
 * own query:
 *     merge:  m = min(ctz(p) + 1, Λ − 1) for p > 0: S^m += S^0 + … + S^{m−1}, those set to 0;
 *     step:   S̃^ℓ = α_p S^ℓ,  e^ℓ = [ℓ = 0] v_p − δ k_p S̃^ℓ,  S^ℓ = S̃^ℓ + β_p k_pᵀ e^ℓ
 *             (δ = 1 for the delta rule, 0 for linear attention);
 *     read:   o_p = Σ_ℓ q_p^ℓ S^ℓ,  q_p^ℓ = columns ℓ·d_k … of q's row (λ_p^ℓ q_p in the papers).
 * Token j < p then sits at level min(bitlen(p xor j), Λ − 1) and p itself at level 0: the
 * Fenwick partition of the prefix (Guo et al. 2025), its buckets older than 2^{Λ−2} tokens kept
 * together in the top level. Every level's sum is the ordinary rule's state, so Λ = 1 (or every
 * λ equal) is the ordinary layer.
 *
 * One registry entry (family loglinear, form recurrent): token by token, O(T·Λ·d_k·d_v) — with
 * Λ = ⌈log₂ T⌉ + 1, O(T log T); under a tape one custom op whose backward is written by hand
 * (ll_backward). Every other entry refuses Λ > 1 (registry.c). */
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "fused_grad.h"
#include "kernels.h"

static int n_lev(const ttt_layer *L) { return L->levels > 1 ? L->levels : 1; }
static int is_delta(const ttt_layer *L) { return (L->loss->traits & TTT_LOSS_RESIDUAL) != 0; }

static const char *ll_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (L->levels <= 1)
        return "the loglinear forms compute levels > 1 (log-linear attention); one level is the "
               "ordinary rule's forms";
    if (!ttt_layer_is_linear_attention(L) &&
        !((L->model->traits & TTT_MODEL_LINEAR_MAP) && (L->loss->traits & TTT_LOSS_RESIDUAL) &&
          ttt_layer_optim_traits(L).plain_sgd && L->mini_batch == 1 &&
          L->order == TTT_ORDER_UPDATE_THEN_APPLY && !L->pos_inverse))
        return "log-linear attention is defined on linear attention and the delta rule (a "
               "linear model, the linear or squared loss, plain sgd, mini_batch 1, "
               "update_then_apply)";
    if (is_delta(L) && !L->coupled && L->decay != 1.0f)
        return "the log-linear delta rule decays before the error is measured "
               "(decay_placement: coupled)";
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "log-linear attention takes a scalar gate per token, not one per key dimension";
    if (in && in->gate == TTT_FORM_GATE_TOKEN && is_delta(L) && !L->coupled)
        return "the log-linear delta rule decays before the error is measured "
               "(decay_placement: coupled)";
    return NULL;
}

/* The level that levels 0 … m − 1 merge into before token p, or 0 when nothing merges. */
static int ll_merge_target(long p, int nl) {
    if (p <= 0 || nl <= 1) return 0;
    int tz = 0;
    while (!((p >> tz) & 1)) tz++;
    return tz + 1 < nl - 1 ? tz + 1 : nl - 1;
}

/* Linear attention's levels above 0 only decay between merges: α·S rounded every token with S
 * otherwise unchanged errs the same way every token (with log α = −1e-6 the top level drifted
 * by 5e-5 over 16K tokens on the hard inputs). Their decay is kept aside instead, c_ℓ = Π α in
 * double over the tokens since the level last changed, and applied once, when the level merges
 * or the call ends (ll_settle); reads scale the level's query by c_ℓ. c == NULL (the delta rule,
 * whose every level changes every token) keeps each level as it stands. */

/* Levels 0 … m − 1 of S (nl·dkv) added into level m and cleared (their pending decays c
 * applied). */
static void ll_merge(float *S, double *c, int m, size_t dkv) {
    float *restrict Sm = S + (size_t)m * dkv;
    const float cm = c ? (float)c[m] : 1.0f;
    if (cm != 1.0f)
        for (size_t x = 0; x < dkv; x++) Sm[x] *= cm;
    for (int l = 0; l < m; l++) {
        float *restrict Sl = S + (size_t)l * dkv;
        const float cl = c ? (float)c[l] : 1.0f;
        for (size_t x = 0; x < dkv; x++) {
            Sm[x] += cl * Sl[x];
            Sl[x] = 0.0f;
        }
        if (c) c[l] = 1.0;
    }
    if (c) c[m] = 1.0;
}

/* The pending decays applied: S^ℓ ← c_ℓ S^ℓ, c_ℓ = 1. */
static void ll_settle(float *S, double *c, int nl, size_t dkv) {
    if (!c) return;
    for (int l = 0; l < nl; l++) {
        const float cl = (float)c[l];
        if (cl != 1.0f)
            for (size_t x = 0; x < dkv; x++) S[(size_t)l * dkv + x] *= cl;
        c[l] = 1.0;
    }
}

/* dst = the levels as they stand: c_ℓ S^ℓ (a copy without pending decays). */
static void ll_effective(float *dst, const float *S, const double *c, int nl, size_t dkv) {
    for (int l = 0; l < nl; l++) {
        const float cl = c ? (float)c[l] : 1.0f;
        for (size_t x = 0; x < dkv; x++) dst[(size_t)l * dkv + x] = cl * S[(size_t)l * dkv + x];
    }
}

/* The step on one level at the decayed state a·S, as the delta rule's recurrent kernel takes it
 * (one rounding per state entry): e = c·v − δ·a (k S), S ← a S + b kᵀ e; c = 1 on level 0, else
 * 0 (v may then be NULL). Linear attention (δ = 0) writes only level 0 and decays the others.
 * e (d_v) scratch, left holding e. */
TTT_FP_CONTRACT static void ll_step(float *restrict S, const float *restrict k,
                                    const float *restrict v, float b, float a, int delta,
                                    float *restrict e, int d_k, int d_v) {
    if (!delta && !v) { /* a level linear attention only decays */
        for (size_t x = 0; x < (size_t)d_k * d_v; x++) S[x] *= a;
        return;
    }
    for (int j = 0; j < d_v; j++) e[j] = 0.0f;
    if (delta)
        for (int i = 0; i < d_k; i++) {
            const float ki = k[i];
            const float *restrict Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) e[j] += ki * Si[j];
        }
    for (int j = 0; j < d_v; j++) e[j] = (v ? v[j] : 0.0f) - a * e[j];
    for (int i = 0; i < d_k; i++) {
        const float bki = b * k[i];
        float *restrict Si = S + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) Si[j] = a * Si[j] + bki * e[j];
    }
}

/* One token at absolute position p: merge, the step on every level (S (nl·dkv) in/out; c the
 * pending decays of linear attention's levels, or NULL). */
static void ll_token(float *S, double *c, long p, const float *k, const float *v, float b,
                     float a, int delta, int nl, int d_k, int d_v, float *e) {
    const size_t dkv = (size_t)d_k * d_v;
    const int m = ll_merge_target(p, nl);
    if (m) ll_merge(S, c, m, dkv);
    for (int l = 0; l < nl; l++) {
        if (c && l) {
            c[l] *= a;
            continue;
        }
        ll_step(S + (size_t)l * dkv, k, l ? NULL : v, b, a, delta, e, d_k, d_v);
    }
}

/* o_t = Σ_ℓ c_ℓ q^ℓ S^ℓ: q (nl·d_k), S (nl·dkv), c or NULL, o (d_v) written. */
TTT_FP_CONTRACT static void ll_read(float *restrict o, const float *restrict q,
                                    const float *restrict S, const double *c, int nl, int d_k,
                                    int d_v) {
    for (int j = 0; j < d_v; j++) o[j] = 0.0f;
    for (int r = 0; r < nl * d_k; r++) {
        const float qr = c ? (float)c[r / d_k] * q[r] : q[r];
        const float *restrict Sr = S + (size_t)r * d_v;
        for (int j = 0; j < d_v; j++) o[j] += qr * Sr[j];
    }
}

/* α_t = exp(log α_t) for every token, dithered so that their running product stays within one
 * rounding of the exact one (kernels.h ttt_gate_dither), as the delta rule's recurrent kernel
 * rounds them; NULL without gates. The backward reads the same factors. */
static float *ll_alphas(ttt_ctx *ctx, const float *la, int T) {
    if (!la) return NULL;
    float *al = ttt_arena_alloc(ctx->arena, (size_t)(T > 0 ? T : 1) * sizeof(float));
    TTT_ASSERT(al);
    double drift = 1.0;
    for (int t = 0; t < T; t++) al[t] = ttt_gate_dither(&drift, exp((double)la[t]));
    return al;
}

/* Tokens [0, T) from absolute position p0: o (T, d_v) written, S (nl·d_k, d_v) in/out;
 * q (T, nl·d_k), k (T, d_k), v (T, d_v), beta (T) or NULL (= 1), al (T) or NULL. */
static void ll_recurrent(float *o, float *S, double *c, const float *q, const float *k,
                         const float *v, const float *beta, const float *al, int T, long p0,
                         int delta, int nl, int d_k, int d_v, float *e) {
    for (int t = 0; t < T; t++) {
        ll_token(S, c, p0 + t, k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta[t] : 1.0f,
                 al ? al[t] : 1.0f, delta, nl, d_k, d_v, e);
        ll_read(o + (size_t)t * d_v, q + (size_t)t * nl * d_k, S, c, nl, d_k, d_v);
    }
}

/* The pending decays of a call (ll_merge's comment): nl ones for linear attention, else NULL. */
static double *ll_pending(ttt_ctx *ctx, int delta, int nl) {
    if (delta) return NULL;
    double *c = ttt_arena_alloc(ctx->arena, (size_t)nl * sizeof(double));
    TTT_ASSERT(c);
    for (int l = 0; l < nl; l++) c[l] = 1.0;
    return c;
}

static ttt_status ll_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                             const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->q), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    float *e = ttt_arena_alloc(ctx->arena, (size_t)d_v * sizeof(float));
    TTT_ASSERT(e);
    double *c = ll_pending(ctx, is_delta(L), n_lev(L));
    ll_recurrent(o->data, st->W[0]->data, c, a->q->data, a->k->data, a->v->data, beta,
                 ll_alphas(ctx, a->log_alpha ? a->log_alpha->data : NULL, T), T, st->pos,
                 is_delta(L), n_lev(L), d_k, d_v, e);
    ll_settle(st->W[0]->data, c, n_lev(L), (size_t)d_k * d_v);
    return TTT_OK;
}

/* ---- the backward, by hand ----
 * Token by token from the last, with the carried dS^ℓ = ∂L/∂S^ℓ (the final state's at first):
 *     read:   dq^ℓ = dO S^ℓᵀ;  dS^ℓ += q^ℓᵀ dO;
 *     step, per level, with S̃^ℓ = a S^ℓ the decayed state and e^ℓ its residual:
 *             de = b k dS;  dβ += k dS eᵀ;  dk += b dS eᵀ;  dv += de on level 0;
 *             delta rule: dk −= de S̃ᵀ, dS ← dS − kᵀ de;
 *             d log α += Σ S̃ ⊙ dS;  dS ← a dS;
 *     merge into m: dS^ℓ = dS^m for ℓ < m.
 * The forward saves the levels at the start of every chunk of tokens; the backward recomputes a
 * chunk's per-token states from it with the forward's own arithmetic (ll_token). */

typedef struct ll_saved {
    const float *S;  /* (nch, nl·dkv) the levels at each chunk start */
    const double *c; /* (nch, nl) their pending decays (linear attention), or NULL */
    const float *al; /* (T) the forward's retentions, or NULL */
    long p0;
    int T, nl, delta, d_k, d_v, C;
} ll_saved;

static void ll_backward(ttt_ctx *ctx, const ttt_tape_entry *ent, const float *dP) {
    const ttt_fused_io io = ttt_fused_io_get(ctx, ent);
    const ll_saved *sv = ent->aux;
    const float *q = io.q->data, *k = io.k->data, *v = io.v->data;
    const float *beta = io.beta ? io.beta->data : NULL, *al = sv->al;
    float *gq = io.gq, *gk = io.gk, *gv = io.gv, *gb = io.gb, *gla = io.gla;
    const int T = sv->T, nl = sv->nl, d_k = sv->d_k, d_v = sv->d_v, C = sv->C;
    const int delta = sv->delta, nch = (T + C - 1) / C;
    const size_t dkv = (size_t)d_k * d_v, all = (size_t)nl * dkv;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    /* per token of the chunk: the merged levels before the step, and after it */
    float *Sa = ttt_fused_scratch(ctx, (size_t)C * all * sizeof(float));
    float *Sb = ttt_fused_scratch(ctx, (size_t)C * all * sizeof(float));
    float *Sc = ttt_fused_scratch(ctx, all * sizeof(float));
    double *cc = sv->c ? ttt_fused_scratch(ctx, (size_t)nl * sizeof(double)) : NULL;
    float *dS = ttt_fused_scratch(ctx, all * sizeof(float));
    float *e = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    float *de = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    memcpy(dS, dP + (size_t)T * d_v, all * sizeof(float));
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        memcpy(Sc, sv->S + (size_t)c * all, all * sizeof(float));
        if (cc) memcpy(cc, sv->c + (size_t)c * nl, (size_t)nl * sizeof(double));
        for (int tt = 0; tt < n; tt++) { /* the levels as they stood, before and after the step */
            const int t = t0 + tt;
            const int m = ll_merge_target(sv->p0 + t, nl);
            if (m) ll_merge(Sc, cc, m, dkv);
            ll_effective(Sa + (size_t)tt * all, Sc, cc, nl, dkv);
            for (int l = 0; l < nl; l++) {
                if (cc && l) {
                    cc[l] *= al ? al[t] : 1.0f;
                    continue;
                }
                ll_step(Sc + (size_t)l * dkv, k + (size_t)t * d_k, l ? NULL : v + (size_t)t * d_v,
                        beta ? beta[t] : 1.0f, al ? al[t] : 1.0f, delta, e, d_k, d_v);
            }
            ll_effective(Sb + (size_t)tt * all, Sc, cc, nl, dkv);
        }
        for (int tt = n - 1; tt >= 0; tt--) {
            const int t = t0 + tt;
            const float a = al ? al[t] : 1.0f, b = beta ? beta[t] : 1.0f;
            const float *Sn = Sb + (size_t)tt * all, *Sp = Sa + (size_t)tt * all;
            const float *qt = q + (size_t)t * nl * d_k, *dOt = dP + (size_t)t * d_v;
            const float *kt = k + (size_t)t * d_k, *vt = v + (size_t)t * d_v;
            for (int r = 0; r < nl * d_k; r++) { /* the read-out */
                float acc = 0.0f;
                for (int j = 0; j < d_v; j++) {
                    acc += dOt[j] * Sn[(size_t)r * d_v + j];
                    dS[(size_t)r * d_v + j] += qt[r] * dOt[j];
                }
                if (gq) gq[(size_t)t * nl * d_k + r] += acc;
            }
            double dla = 0.0;
            for (int l = 0; l < nl; l++) {
                float *dSl = dS + (size_t)l * dkv;
                const float *Sl = Sp + (size_t)l * dkv; /* before the decay */
                /* the residual e = c v − δ a (k S) as the forward formed it */
                for (int j = 0; j < d_v; j++) e[j] = 0.0f;
                if (delta)
                    for (int i = 0; i < d_k; i++)
                        for (int j = 0; j < d_v; j++) e[j] += kt[i] * Sl[(size_t)i * d_v + j];
                for (int j = 0; j < d_v; j++) e[j] = (l ? 0.0f : vt[j]) - a * e[j];
                if (delta || !l) /* linear attention writes level 0 only */
                    ttt_delta_write_grad(dSl, e, kt, b, d_k, d_v, de, gb ? gb + t : NULL,
                                     gk ? gk + (size_t)t * d_k : NULL,
                                     gv && !l ? gv + (size_t)t * d_v : NULL);
                if (delta) /* the prediction k S̃: dk −= de S̃ᵀ, dS̃ −= kᵀ de */
                    for (int i = 0; i < d_k; i++) {
                        float dk = 0.0f;
                        for (int j = 0; j < d_v; j++) {
                            const size_t ij = (size_t)i * d_v + j;
                            dk += de[j] * (a * Sl[ij]);
                            dSl[ij] -= kt[i] * de[j];
                        }
                        if (gk) gk[(size_t)t * d_k + i] -= dk;
                    }
                for (size_t x = 0; x < dkv; x++) {
                    dla += (double)(a * Sl[x]) * dSl[x];
                    dSl[x] *= a;
                }
            }
            if (gla && al) gla[t] += (float)dla;
            const int m = ll_merge_target(sv->p0 + t, nl);
            for (int l = 0; l < m; l++) /* the merge: levels below m were added into m */
                memcpy(dS + (size_t)l * dkv, dS + (size_t)m * dkv, dkv * sizeof(float));
        }
    }
    ttt_fused_io_end(ctx, &io, dS, all, mark);
}

/* The recurrent form as one custom op: q (T, nl·d_k), k (T, d_k), v (T, d_v), beta (T) or NULL,
 * log_alpha (T) or NULL, S0 (nl·d_k·d_v); O (T, d_v) and *S_out (nl·d_k, d_v). */
static ttt_tensor *ll_recurrent_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                      const ttt_tensor *k, const ttt_tensor *v,
                                      const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                      const ttt_tensor *S0, long p0, int delta, int nl,
                                      int chunk) {
    const int T = TTT_ROWS(q), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(TTT_COLS(q) == nl * d_k && TTT_ROWS(k) == T && TTT_ROWS(v) == T && chunk >= 1);
    const size_t dkv = (size_t)d_k * d_v, all = (size_t)nl * dkv;
    TTT_ASSERT(S0->n == all);
    const ttt_tensor *in[6] = {q, k, v, beta, log_alpha, S0};
    int rec;
    ttt_tensor *P = ttt_fused_result(ctx, in, T, d_v, all, &rec);
    float *o = P->data, *S = P->data + (size_t)T * d_v;
    const int C = T > 0 ? (chunk < T ? chunk : T) : 1, nch = (T + C - 1) / C;
    float *saved = rec && nch ? ttt_tape_alloc(ctx, (size_t)nch * all * sizeof(float)) : NULL;
    double *c = ll_pending(ctx, delta, nl);
    double *saved_c = saved && c ? ttt_tape_alloc(ctx, (size_t)nch * nl * sizeof(double)) : NULL;
    float *e = ttt_arena_alloc(ctx->arena, (size_t)d_v * sizeof(float));
    TTT_ASSERT(e);
    const float *al = ll_alphas(ctx, log_alpha ? log_alpha->data : NULL, T);
    for (int ch = 0; ch < nch; ch++) {
        const int t0 = ch * C, n = t0 + C <= T ? C : T - t0;
        if (saved) memcpy(saved + (size_t)ch * all, S, all * sizeof(float));
        if (saved_c) memcpy(saved_c + (size_t)ch * nl, c, (size_t)nl * sizeof(double));
        ll_recurrent(o + (size_t)t0 * d_v, S, c, q->data + (size_t)t0 * nl * d_k,
                     k->data + (size_t)t0 * d_k, v->data + (size_t)t0 * d_v,
                     beta ? beta->data + t0 : NULL, al ? al + t0 : NULL, n, p0 + t0, delta, nl,
                     d_k, d_v, e);
    }
    ll_settle(S, c, nl, dkv);
    ttt_tape_entry *ent = ttt_tape_record(ctx, ll_backward, P, in, 6);
    if (ent) {
        ll_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (ll_saved){.S = saved, .c = saved_c, .al = al, .p0 = p0, .T = T, .nl = nl, .delta = delta,
                         .d_k = d_k, .d_v = d_v, .C = C};
        ent->aux = sv;
        ent->name = "loglinear_recurrent_fused";
    }
    *S_out = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){nl * d_k, d_v},
                            "loglinear_state");
    return ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "loglinear_o");
}

static ttt_status ll_forward_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->q);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = ll_recurrent_fused(ctx, &S, a->q, a->k, a->v, beta, a->log_alpha, st->W[0],
                                       st->pos, is_delta(L), n_lev(L),
                                       L->chunk > 0 ? L->chunk : 64);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}

/* ---- estimates ---- */

static double ll_scratch(const ttt_layer *L, long T) {
    /* β (T) as a tensor, the retentions (T), e (d_v) and the pending decays (Λ doubles), each
     * rounded up to the arena's alignment: 128 floats cover the headers and roundings */
    return (2.0 * T + L->d_v + 2.0 * n_lev(L) + 128) * sizeof(float);
}
static double ll_flops(const ttt_layer *L, long T) {
    /* per level: the step (k S and the write for the delta rule, 4 d_k d_v; the decay d_k d_v
     * for linear attention), the read-out 2 d_k d_v; the merges add at most d_k d_v per level */
    const double per = (ttt_layer_is_linear_attention(L) ? 1.0 : 4.0) + 3.0;
    return (double)T * n_lev(L) * L->d_k * L->d_v * per;
}

const ttt_form_entry ttt_form_loglinear_recurrent = {
    .family = "loglinear",
    .form = "recurrent",
    .help = "log-linear attention token by token: levels Fenwick states, each stepped by the "
            "rule and read with its own query (docs/math.md 4.8)",
    .auto_rank = 10,
    .levels = 1,
    .available = ll_available,
    .forward = ll_forward,
    .forward_diff = ll_forward_diff,
    .scratch_bytes = ll_scratch,
    .flops = ll_flops,
};
