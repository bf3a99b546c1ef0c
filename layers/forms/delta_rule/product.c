/* Gated DeltaProduct (docs/math.md §4.7): the delta rule's tuple taking n_h SGD steps per token
 * on n_h key/value pairs (ttt_layer.substeps = n_h), the gate applied once per token:
 *     S^(0) = α_t S_{t−1},
 *     S^(j+1) = S^(j) + β_{t,j} k_{t,j}ᵀ (v_{t,j} − k_{t,j} S^(j)),   j = 0 … n_h − 1,
 *     S_t = S^(n_h),   o_t = q_t S_t,
 * i.e. S_t = α_t Π_j (I − β_{t,j} k_{t,j}ᵀ k_{t,j}) S_{t−1} + …, a product of n_h generalized
 * Householder transitions per token. Rows n_h·t + j of k, v and η hold pair j of token t.
 *
 * Two registry entries (family delta_product):
 *   recurrent  token by token, the definition above; under a tape one custom op whose backward
 *              is written by hand (dp_backward below);
 *   chunkwise  the n_h·T sub-steps as an ordinary gated delta rule of n_h·T steps — the gate on
 *              the first sub-step of each token (log α = 0 on the others), the query on the
 *              last (the outputs of the others are dropped) — run by the delta rule's chunkwise
 *              entry (delta_rule/forms.c, chunkwise.c; its fused backward under a tape).
 * The interleaving as recorded ops (ttt_delta_product_interleaved, composed.h) is also how the
 * generic driver computes n_h > 1 (generic/driver.c): the definition the contract suite holds
 * both entries to. */
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "fused_grad.h"
#include "kernels.h"

extern const ttt_form_entry ttt_form_delta_rule_chunkwise;

static int n_sub(const ttt_layer *L) { return L->substeps > 1 ? L->substeps : 1; }

static const char *dp_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (L->substeps <= 1)
        return "the delta_product forms take n_h > 1 steps per token (layer.steps_per_token); "
               "one step per token is the delta rule's forms";
    if (!(L->model->traits & TTT_MODEL_LINEAR_MAP) || !(L->loss->traits & TTT_LOSS_RESIDUAL) ||
        !ttt_layer_optim_traits(L).plain_sgd || L->mini_batch != 1 ||
        L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->pos_inverse ||
        (!L->coupled && L->decay != 1.0f))
        return "Gated DeltaProduct is the delta rule's tuple (a linear model, the squared loss, "
               "plain sgd, mini_batch 1, update_then_apply, coupled decay)";
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "Gated DeltaProduct takes a scalar gate per token, not one per key dimension";
    if (in && in->gate == TTT_FORM_GATE_TOKEN && !L->coupled)
        return "the delta_product forms decay before the error is measured (decay_placement: "
               "coupled)";
    return NULL;
}

/* ---- the recurrent kernel ---- */

/* One sub-step at the decayed state a·S: e = v − a (k S), S ← a S + b kᵀ e (a = α_t on a
 * token's first sub-step, 1 on the others), as the delta rule's recurrent kernel takes its step
 * (recurrent.c): the decay costs no sweep of its own and each state entry is rounded once per
 * sub-step. e (d_v) scratch. The backward recomputes states with it, so they are the forward's
 * bits. */
TTT_FP_CONTRACT static void dp_step(float *restrict S, const float *restrict k,
                                    const float *restrict v, float b, float a,
                                    float *restrict e, int d_k, int d_v) {
    for (int j = 0; j < d_v; j++) e[j] = 0.0f;
    for (int i = 0; i < d_k; i++) {
        const float ki = k[i];
        const float *restrict Si = S + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) e[j] += ki * Si[j];
    }
    for (int j = 0; j < d_v; j++) e[j] = v[j] - a * e[j];
    for (int i = 0; i < d_k; i++) {
        const float bki = b * k[i];
        float *restrict Si = S + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) Si[j] = a * Si[j] + bki * e[j];
    }
}

/* α_t = exp(log α_t) for every token into al (T), rounded so that their running product stays
 * within one rounding of the exact one (kernels.h, ttt_gate_dither; a weak gate rounded on its
 * own errs the same way every token); −inf gives 0, a hard reset (docs/math.md §0). NULL
 * without gates. The backward reads the same factors. */
static float *dp_alphas(ttt_ctx *ctx, const float *la, int T) {
    if (!la) return NULL;
    float *al = ttt_arena_alloc(ctx->arena, (size_t)(T > 0 ? T : 1) * sizeof(float));
    TTT_ASSERT(al);
    double drift = 1.0;
    for (int t = 0; t < T; t++) al[t] = ttt_gate_dither(&drift, exp((double)la[t]));
    return al;
}

/* Tokens [0, T): o (T, d_v) written, S (d_k, d_v) in/out; q (T, d_k), k (n_h·T, d_k),
 * v (n_h·T, d_v), beta (n_h·T) or NULL (= 1), al (T) the retentions (dp_alphas) or NULL. */
TTT_FP_CONTRACT static void dp_recurrent(float *o, float *S, const float *q, const float *k,
                                         const float *v, const float *beta, const float *al,
                                         int T, int nh, int d_k, int d_v, float *e) {
    for (int t = 0; t < T; t++) {
        const float a = al ? al[t] : 1.0f;
        for (int j = 0; j < nh; j++) {
            const size_t r = (size_t)t * nh + j;
            dp_step(S, k + r * d_k, v + r * d_v, beta ? beta[r] : 1.0f, j ? 1.0f : a, e, d_k,
                    d_v);
        }
        float *restrict ot = o + (size_t)t * d_v;
        const float *restrict qt = q + (size_t)t * d_k;
        for (int j = 0; j < d_v; j++) ot[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            const float qi = qt[i];
            const float *restrict Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) ot[j] += qi * Si[j];
        }
    }
}

static ttt_status dp_forward_recurrent(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                       ttt_layer_state *st, const ttt_form_args *a,
                                       ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->q), nh = n_sub(L), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, nh * T);
    float *e = ttt_arena_alloc(ctx->arena, (size_t)d_v * sizeof(float));
    TTT_ASSERT(e);
    dp_recurrent(o->data, st->W[0]->data, a->q->data, a->k->data, a->v->data, beta,
                 dp_alphas(ctx, a->log_alpha ? a->log_alpha->data : NULL, T), T, nh, d_k, d_v,
                 e);
    return TTT_OK;
}

/* ---- its backward, by hand ----
 * Token by token from the last, with the carried dS = ∂L/∂S_t (the final state's gradient at
 * first):
 *     dS += q_tᵀ dO_t;   dq_t = dO_t S_tᵀ;
 *     sub-steps j = n_h − 1 … 0, with S^(j) the state before step j and e_j = v_j − k_j S^(j):
 *         dβ_j = k_j dS e_jᵀ;  de_j = β_j k_j dS;  dv_j = de_j;
 *         dk_j = β_j dS e_jᵀ − de_j S^(j)ᵀ;  dS ← dS − k_jᵀ de_j;
 *     the gate: d log α_t = Σ S^(0) ⊙ dS;  dS ← α_t dS.
 * The forward saves the state at the start of every chunk of tokens; the backward recomputes
 * one chunk's sub-step states from it with the forward's own step (dp_step). */

typedef struct dp_saved {
    const float *S;  /* (nch, d_k, d_v) the state at each chunk start */
    const float *al; /* (T) the forward's retentions (dp_alphas), or NULL without gates */
    int T, nh, d_k, d_v, C;
} dp_saved;

static void dp_backward(ttt_ctx *ctx, const ttt_tape_entry *ent, const float *dP) {
    const ttt_fused_io io = ttt_fused_io_get(ctx, ent);
    const dp_saved *sv = ent->aux;
    const float *q = io.q->data, *k = io.k->data, *v = io.v->data;
    const float *beta = io.beta ? io.beta->data : NULL, *al = sv->al;
    float *gq = io.gq, *gk = io.gk, *gv = io.gv, *gb = io.gb, *gla = io.gla;
    const int T = sv->T, nh = sv->nh, d_k = sv->d_k, d_v = sv->d_v, C = sv->C;
    const int nch = (T + C - 1) / C;
    const size_t dkv = (size_t)d_k * d_v;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    /* St: for each token of the chunk, the n_h + 1 states S^(0) … S^(n_h) */
    const size_t per = (size_t)(nh + 1) * dkv;
    float *St = ttt_fused_scratch(ctx, (size_t)C * per * sizeof(float));
    float *Sc = ttt_fused_scratch(ctx, dkv * sizeof(float));
    float *dS = ttt_fused_scratch(ctx, dkv * sizeof(float));
    float *e = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    float *de = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    memcpy(dS, dP + (size_t)T * d_v, dkv * sizeof(float));
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        memcpy(Sc, sv->S + (size_t)c * dkv, dkv * sizeof(float));
        for (int tt = 0; tt < n; tt++) { /* the chunk's states, as the forward made them */
            const int t = t0 + tt;
            const float a = al ? al[t] : 1.0f;
            float *Su = St + (size_t)tt * per;
            for (size_t m = 0; m < dkv; m++) Su[m] = a * Sc[m]; /* S^(0), for the gradients */
            for (int j = 0; j < nh; j++) {
                const size_t r = (size_t)t * nh + j;
                dp_step(Sc, k + r * d_k, v + r * d_v, beta ? beta[r] : 1.0f, j ? 1.0f : a, e,
                        d_k, d_v);
                memcpy(Su + (size_t)(j + 1) * dkv, Sc, dkv * sizeof(float));
            }
        }
        for (int tt = n - 1; tt >= 0; tt--) {
            const int t = t0 + tt;
            const float *Su = St + (size_t)tt * per, *Sn = Su + (size_t)nh * dkv;
            const float *qt = q + (size_t)t * d_k, *dOt = dP + (size_t)t * d_v;
            /* read-out: dq = dO S_tᵀ, dS += qᵀ dO */
            for (int i = 0; i < d_k; i++) {
                float acc = 0.0f;
                for (int j = 0; j < d_v; j++) {
                    acc += dOt[j] * Sn[(size_t)i * d_v + j];
                    dS[(size_t)i * d_v + j] += qt[i] * dOt[j];
                }
                if (gq) gq[(size_t)t * d_k + i] += acc;
            }
            for (int s = nh - 1; s >= 0; s--) {
                const size_t r = (size_t)t * nh + s;
                const float *Sp = Su + (size_t)s * dkv;
                const float *kt = k + r * d_k, *vt = v + r * d_v;
                const float b = beta ? beta[r] : 1.0f;
                for (int j = 0; j < d_v; j++) e[j] = vt[j];
                for (int i = 0; i < d_k; i++)
                    for (int j = 0; j < d_v; j++) e[j] -= kt[i] * Sp[(size_t)i * d_v + j];
                /* the write: dβ, dk from dS eᵀ, de */
                ttt_delta_write_grad(dS, e, kt, b, d_k, d_v, de, gb ? gb + r : NULL,
                                     gk ? gk + r * d_k : NULL, gv ? gv + r * d_v : NULL);
                /* the prediction p = k S^(j): dk −= de S^(j)ᵀ, dS −= kᵀ de */
                for (int i = 0; i < d_k; i++) {
                    float dk = 0.0f;
                    for (int j = 0; j < d_v; j++) {
                        const size_t ij = (size_t)i * d_v + j;
                        dk += de[j] * Sp[ij];
                        dS[ij] -= kt[i] * de[j];
                    }
                    if (gk) gk[r * d_k + i] -= dk;
                }
            }
            if (al) { /* the gate, applied once before the token's steps */
                const float a = al[t];
                double dla = 0.0;
                for (size_t m = 0; m < dkv; m++) {
                    dla += (double)Su[m] * dS[m];
                    dS[m] *= a;
                }
                if (gla) gla[t] += (float)dla;
            }
        }
    }
    ttt_fused_io_end(ctx, &io, dS, dkv, mark);
}

/* The recurrent form as one custom op: q (T, d_k), k (n_h·T, d_k), v (n_h·T, d_v), beta (n_h·T)
 * or NULL, log_alpha (T) or NULL, S0 (d_k·d_v); O (T, d_v) and *S_out. */
static ttt_tensor *dp_recurrent_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                      const ttt_tensor *k, const ttt_tensor *v,
                                      const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                      const ttt_tensor *S0, int nh, int chunk) {
    const int T = TTT_ROWS(q), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(TTT_ROWS(k) == nh * T && TTT_ROWS(v) == nh * T && chunk >= 1);
    TTT_ASSERT(!beta || beta->n == (size_t)nh * T);
    TTT_ASSERT(!log_alpha || log_alpha->n == (size_t)T);
    const size_t dkv = (size_t)d_k * d_v;
    TTT_ASSERT(S0->n == dkv);
    const ttt_tensor *in[6] = {q, k, v, beta, log_alpha, S0};
    int rec;
    ttt_tensor *P = ttt_fused_result(ctx, in, T, d_v, dkv, &rec);
    float *o = P->data, *S = P->data + (size_t)T * d_v;
    const int C = T > 0 ? (chunk < T ? chunk : T) : 1, nch = (T + C - 1) / C;
    float *saved = rec && nch ? ttt_tape_alloc(ctx, (size_t)nch * dkv * sizeof(float)) : NULL;
    float *e = ttt_arena_alloc(ctx->arena, (size_t)d_v * sizeof(float));
    TTT_ASSERT(e);
    const float *al = dp_alphas(ctx, log_alpha ? log_alpha->data : NULL, T);
    for (int c = 0; c < nch; c++) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        if (saved) memcpy(saved + (size_t)c * dkv, S, dkv * sizeof(float));
        dp_recurrent(o + (size_t)t0 * d_v, S, q->data + (size_t)t0 * d_k,
                     k->data + (size_t)t0 * nh * d_k, v->data + (size_t)t0 * nh * d_v,
                     beta ? beta->data + (size_t)t0 * nh : NULL,
                     al ? al + t0 : NULL, n, nh, d_k, d_v, e);
    }
    ttt_tape_entry *ent = ttt_tape_record(ctx, dp_backward, P, in, 6);
    if (ent) {
        dp_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (dp_saved){.S = saved, .al = al, .T = T, .nh = nh, .d_k = d_k, .d_v = d_v,
                         .C = C};
        ent->aux = sv;
        ent->name = "deltaproduct_recurrent_fused";
    }
    *S_out = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){d_k, d_v},
                            "deltaproduct_state");
    return ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "deltaproduct_o");
}

static ttt_status dp_diff_recurrent(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                    ttt_layer_state *st, const ttt_form_args *a,
                                    ttt_error *err) {
    if (!a->fused) { /* the composed reference: the interleaved delta rule's composed ops */
        extern const ttt_form_entry ttt_form_delta_product_chunkwise;
        return ttt_form_delta_product_chunkwise.forward_diff(ctx, L, o, st, a, err);
    }
    const int T = TTT_ROWS(a->q), nh = n_sub(L);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, nh * T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = dp_recurrent_fused(ctx, &S, a->q, a->k, a->v, beta, a->log_alpha, st->W[0],
                                       nh, L->chunk > 0 ? L->chunk : 64);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}

/* ---- the chunkwise form: the interleaved gated delta rule ---- */

/* The layer the delta rule's entry sees: one step per sub-step. */
static ttt_layer one_step(const ttt_layer *L) {
    ttt_layer in = *L;
    in.substeps = 1;
    return in;
}

static ttt_status dp_forward_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                       ttt_layer_state *st, const ttt_form_args *a,
                                       ttt_error *err) {
    const int T = TTT_ROWS(a->q), nh = n_sub(L), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const int Tx = nh * T;
    /* the query on the last sub-step of each token, zeros before it */
    ttt_tensor *qx = ttt_tensor_2d(ctx, Tx, d_k), *ox = ttt_tensor_2d(ctx, Tx, d_v);
    ttt_tensor_fill(qx, 0.0f);
    for (int t = 0; t < T; t++)
        memcpy(qx->data + ((size_t)t * nh + nh - 1) * d_k, a->q->data + (size_t)t * d_k,
               (size_t)d_k * sizeof(float));
    /* the gate on the first sub-step, log α = 0 on the others */
    ttt_tensor *lx = NULL;
    if (a->log_alpha) {
        lx = ttt_tensor_1d(ctx, Tx);
        ttt_tensor_fill(lx, 0.0f);
        for (int t = 0; t < T; t++) lx->data[(size_t)t * nh] = a->log_alpha->data[t];
    }
    const ttt_layer in = one_step(L);
    const ttt_form_args ax = {.q = qx, .k = a->k, .v = a->v, .eta = a->eta, .log_alpha = lx,
                              .fused = a->fused};
    TTT_TRY(ttt_form_delta_rule_chunkwise.forward(ctx, &in, ox, st, &ax, err));
    for (int t = 0; t < T; t++)
        memcpy(o->data + (size_t)t * d_v, ox->data + ((size_t)t * nh + nh - 1) * d_v,
               (size_t)d_v * sizeof(float));
    return TTT_OK;
}

ttt_status ttt_delta_product_interleaved(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a,
                                         ttt_one_step_fn run, ttt_error *err) {
    const int T = TTT_ROWS(a->q), nh = n_sub(L), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const int Tx = nh * T;
    ttt_tensor *zq = ttt_tensor_2d(ctx, T, (nh - 1) * d_k);
    ttt_tensor_fill(zq, 0.0f);
    ttt_tensor *qx = ttt_reshape(ctx, ttt_concat_cols(ctx, zq, a->q), 2, (int[]){Tx, d_k});
    ttt_tensor *lx = NULL;
    if (a->log_alpha) {
        ttt_tensor *zl = ttt_tensor_2d(ctx, T, nh - 1);
        ttt_tensor_fill(zl, 0.0f);
        lx = ttt_reshape(ctx,
                         ttt_concat_cols(ctx, ttt_reshape(ctx, a->log_alpha, 2, (int[]){T, 1}),
                                         zl),
                         1, (int[]){Tx});
    }
    const ttt_layer in = one_step(L);
    const ttt_form_args ax = {.q = qx, .k = a->k, .v = a->v, .eta = a->eta,
                              .beta = ttt_form_beta_node(ctx, L, a, Tx), .log_alpha = lx,
                              .fused = a->fused};
    ttt_tensor *ox = ttt_tensor_2d(ctx, Tx, d_v);
    TTT_TRY(run(ctx, &in, ox, st, &ax, err));
    ttt_tensor *O = ttt_slice_cols(ctx, ttt_reshape(ctx, ox, 2, (int[]){T, nh * d_v}),
                                   (nh - 1) * d_v, nh * d_v);
    ttt_form_diff_output(ctx, o, O);
    return TTT_OK;
}

/* Differentiable: the interleaving as recorded ops, then the delta rule's chunkwise
 * forward_diff (fused or composed as a->fused asks). */
static ttt_status dp_diff_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                    ttt_layer_state *st, const ttt_form_args *a,
                                    ttt_error *err) {
    return ttt_delta_product_interleaved(ctx, L, o, st, a,
                                         ttt_form_delta_rule_chunkwise.forward_diff, err);
}

/* ---- estimates ---- */

static double dp_scratch_recurrent(const ttt_layer *L, long T) {
    /* β (n_h·T) as a tensor (its header and data), the retentions (T) and e (d_v), each
     * rounded up to the arena's alignment: 128 floats cover the headers and roundings */
    return ((double)n_sub(L) * T + T + L->d_v + 128) * sizeof(float);
}
static double dp_scratch_chunkwise(const ttt_layer *L, long T) {
    const ttt_layer in = one_step(L);
    const long Tx = (long)n_sub(L) * T;
    /* the interleaved q, gates and outputs, then the delta rule's own scratch over n_h·T */
    return ((double)Tx * (L->d_k + L->d_v + 1) + 48) * sizeof(float) +
           ttt_form_delta_rule_chunkwise.scratch_bytes(&in, Tx);
}
static double dp_flops_recurrent(const ttt_layer *L, long T) {
    /* per sub-step k S and the write, 4 d_k d_v; per token the read-out and the gate */
    return (double)T * L->d_k * L->d_v * (4.0 * n_sub(L) + 3.0);
}
static double dp_flops_chunkwise(const ttt_layer *L, long T) {
    const ttt_layer in = one_step(L);
    return ttt_form_delta_rule_chunkwise.flops(&in, (long)n_sub(L) * T);
}

const ttt_form_entry ttt_form_delta_product_recurrent = {
    .family = "delta_product",
    .form = "recurrent",
    .help = "Gated DeltaProduct token by token: S_t = alpha_t prod_j (I - beta_tj k_tj^T k_tj) "
            "S_{t-1} + ..., n_h = steps_per_token pairs per token (docs/math.md 4.6)",
    .auto_rank = 10,
    .available = dp_available,
    .forward = dp_forward_recurrent,
    .forward_diff = dp_diff_recurrent,
    .scratch_bytes = dp_scratch_recurrent,
    .flops = dp_flops_recurrent,
};

const ttt_form_entry ttt_form_delta_product_chunkwise = {
    .family = "delta_product",
    .form = "chunkwise",
    .help = "Gated DeltaProduct as the chunkwise delta rule over n_h*T interleaved sub-steps "
            "(gate on the first, query on the last; docs/math.md 4.6)",
    .auto_rank = 5,
    .available = dp_available,
    .forward = dp_forward_chunkwise,
    .forward_diff = dp_diff_chunkwise,
    .scratch_bytes = dp_scratch_chunkwise,
    .flops = dp_flops_chunkwise,
};
