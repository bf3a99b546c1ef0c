/* The forms of each family and the choice among them (see form.h). */
#include "form.h"

#include <string.h>

#include "composed.h"
#include "kernels.h"
#include "ttt_dual.h"

static const char *const form_names[TTT_FORM_COUNT] = {
    [TTT_FORM_GENERIC] = "generic",     [TTT_FORM_RECURRENT] = "recurrent",
    [TTT_FORM_PARALLEL] = "parallel",   [TTT_FORM_CHUNKWISE] = "chunkwise",
    [TTT_FORM_DUAL] = "dual",
};

const char *ttt_form_name(ttt_form f) {
    return (f >= 0 && f < TTT_FORM_COUNT) ? form_names[f] : "?";
}

int ttt_form_from_name(const char *s) {
    for (int i = 0; s && i < TTT_FORM_COUNT; i++)
        if (strcmp(form_names[i], s) == 0) return i;
    return -1;
}

int ttt_layer_family(const ttt_layer *L) {
    const char *m = L->model->name, *l = L->loss->name;
    /* LaCT: every gradient of a block at its start weights and one step per block, so the block
     * is one batched gradient and one optimizer step (layers/forms/lact/block.c). η = β/θ needs
     * θ > 0; coupled placement with a decay would take each gradient at other weights. */
    if (L->order == TTT_ORDER_APPLY_THEN_UPDATE && strcmp(m, "swiglu") == 0 &&
        strcmp(L->optim->name, "large_batch") == 0 && !L->step_per_token && L->lr > 0.0f &&
        (!L->coupled || L->decay == 1.0f) &&
        (strcmp(l, "dot") == 0 || strcmp(l, "squared") == 0 || strcmp(l, "recon") == 0))
        return TTT_FAMILY_LACT;
    if (L->order != TTT_ORDER_UPDATE_THEN_APPLY) return TTT_FAMILY_NONE;
    if (L->momentum_plain && strcmp(m, "linear") == 0 && strcmp(l, "squared") == 0 &&
        L->step_per_token && !L->pos_inverse && (!L->coupled || L->decay == 1.0f))
        return TTT_FAMILY_TITANS;
    if (!L->sgd_plain) return TTT_FAMILY_NONE;
    if (strcmp(m, "linear") == 0 && strcmp(l, "dot") == 0 && !L->pos_inverse)
        return TTT_FAMILY_LINEAR_ATTENTION;
    /* The closed delta rule decays before the error is measured (coupled placement). */
    if (strcmp(m, "linear") == 0 && strcmp(l, "squared") == 0 && L->mini_batch == 1 &&
        !L->pos_inverse && (L->coupled || L->decay == 1.0f))
        return TTT_FAMILY_DELTA_RULE;
    if (strcmp(m, "ttt_linear") == 0 && L->pos_inverse && L->decay == 1.0f &&
        (strcmp(l, "recon") == 0 || strcmp(l, "squared") == 0))
        return TTT_FAMILY_TTT_LINEAR;
    return TTT_FAMILY_NONE;
}

const char *ttt_layer_form_unavailable(const ttt_layer *L, ttt_form f) {
    if (f == TTT_FORM_GENERIC) return NULL;
    int fam = ttt_layer_family(L);
    int ok = (fam == TTT_FAMILY_LINEAR_ATTENTION || fam == TTT_FAMILY_DELTA_RULE)
                 ? (f == TTT_FORM_RECURRENT || f == TTT_FORM_PARALLEL || f == TTT_FORM_CHUNKWISE)
                 : fam == TTT_FAMILY_TTT_LINEAR ? f == TTT_FORM_DUAL
                 : fam == TTT_FAMILY_TITANS     ? f == TTT_FORM_CHUNKWISE
                 : fam == TTT_FAMILY_LACT       ? f == TTT_FORM_CHUNKWISE
                                            : 0;
    if (!ok)
        return fam == TTT_FAMILY_NONE
                   ? "closed forms exist for linear attention (model linear, loss dot, plain sgd, "
                     "update_then_apply), the delta rule (model linear, loss squared, plain sgd, "
                     "mini_batch 1, update_then_apply, no decay or coupled decay) and "
                     "TTT-Linear (model ttt_linear, position_scale inverse, no decay: dual) and "
                     "Titans (model linear, loss squared, momentum without nesterov, steps "
                     "per_token, decoupled decay: chunkwise) and LaCT (model swiglu, loss dot, "
                     "squared or recon, optimizer large_batch, apply_then_update, steps "
                     "per_block, lr > 0, no coupled decay: chunkwise)"
                   : "this tuple's family does not have that form";
    return NULL;
}

ttt_form ttt_layer_auto_form(const ttt_layer *L) {
    /* Measured side by side (experiments/equivalence.yaml, T = 1000, d = 64, one thread):
     * chunkwise linear attention 1.5× the recurrent kernel; the chunkwise delta rule 0.6–0.8× (its
     * per-chunk triangular solves do not pay off at d = 64 yet), so the recurrence stays the
     * default there; Titans' chunked form 6× and the TTT-Linear dual form 4.7× the generic
     * driver. LaCT's per-block form (layers/forms/lact/block.c), forward + backward under the tape
     * at T = 64, b = 16, d = 8: 435 tape entries against 1992, 2.5–3× faster. */
    switch (ttt_layer_family(L)) {
    case TTT_FAMILY_LINEAR_ATTENTION: return TTT_FORM_CHUNKWISE;
    case TTT_FAMILY_DELTA_RULE: return TTT_FORM_RECURRENT;
    case TTT_FAMILY_TITANS: return TTT_FORM_CHUNKWISE;
    case TTT_FAMILY_TTT_LINEAR: return TTT_FORM_DUAL;
    case TTT_FAMILY_LACT: return TTT_FORM_CHUNKWISE;
    default: return TTT_FORM_GENERIC;
    }
}

ttt_status ttt_forward_closed(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_tensor *q,
                                    const ttt_tensor *k, const ttt_tensor *v,
                                    const ttt_tensor *eta, const ttt_tensor *log_alpha,
                                    int alpha_vec, ttt_error *err) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    ttt_tensor *beta = ttt_tensor_1d(ctx, T); /* β_t = θ η_t */
    for (int t = 0; t < T; t++) beta->data[t] = L->lr * (eta ? eta->data[t] : 1.0f);
    const float *la = log_alpha ? log_alpha->data : NULL;
    float *S = st->W[0]->data;
    const int fam = ttt_layer_family(L), C = L->chunk;
    if (fam == TTT_FAMILY_DELTA_RULE && log_alpha && !L->coupled)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "the closed delta-rule forms decay before the error is measured "
                             "(decay_placement: coupled); this layer has per-token gates with "
                             "decoupled placement: use form: generic or decay_placement: coupled");
    if (fam == TTT_FAMILY_TTT_LINEAR && log_alpha)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "the TTT-Linear dual form has no forget gate; use form: generic");
    if ((fam == TTT_FAMILY_DELTA_RULE || fam == TTT_FAMILY_TITANS || fam == TTT_FAMILY_TTT_LINEAR) &&
        alpha_vec)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "this closed form takes a scalar decay per token, not a vector; use "
                             "form: generic");
    if (fam == TTT_FAMILY_LINEAR_ATTENTION) {
        switch (L->form) {
        case TTT_FORM_RECURRENT:
            ttt_linear_attention_recurrent(o->data, S, q->data, k->data, v->data, beta->data, la,
                                           alpha_vec, T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_PARALLEL:
            ttt_linear_attention_parallel(ctx, o->data, S, q->data, k->data, v->data, beta->data,
                                          la, alpha_vec, T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_CHUNKWISE:
            ttt_linear_attention_chunkwise(ctx, o->data, S, q->data, k->data, v->data,
                                           beta->data, la, alpha_vec, T, d_k, d_v, C);
            return TTT_OK;
        default: break;
        }
    } else if (fam == TTT_FAMILY_DELTA_RULE) {
        switch (L->form) {
        case TTT_FORM_RECURRENT:
            ttt_delta_rule_recurrent(o->data, S, q->data, k->data, v->data, beta->data, la, T,
                                     d_k, d_v);
            return TTT_OK;
        case TTT_FORM_PARALLEL:
            ttt_delta_rule_parallel(ctx, o->data, S, q->data, k->data, v->data, beta->data, la,
                                    T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_CHUNKWISE:
            ttt_delta_rule_chunkwise(ctx, o->data, S, q->data, k->data, v->data, beta->data, la,
                                     T, d_k, d_v, C);
            return TTT_OK;
        default: break;
        }
    } else if (fam == TTT_FAMILY_TITANS && L->form == TTT_FORM_CHUNKWISE) {
        /* gradients are taken once per mini-batch: the chunk of the closed form is b */
        ttt_momentum_chunked(ctx, o->data, S, st->opt[0][0]->data, q->data, k->data, v->data,
                             eta ? eta->data : NULL, la, L->lr, L->momentum_mu, T, d_k, d_v,
                             L->mini_batch);
        return TTT_OK;
    } else if (fam == TTT_FAMILY_TTT_LINEAR && L->form == TTT_FORM_DUAL) {
        /* lr_j = θ η_j; the layer state is (W, b) */
        ttt_ttt_linear_dual(ctx, o->data, S, st->W[1]->data, q->data, k->data, v->data,
                            beta->data, T, d_k, L->mini_batch);
        return TTT_OK;
    } else if (fam == TTT_FAMILY_LACT && L->form == TTT_FORM_CHUNKWISE) {
        /* the composed form runs untaped: per block, temporaries released */
        return ttt_lact_composed(ctx, L, o, st, q, k, v, eta, log_alpha, err);
    }
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "layer form %s is not available here: %s",
                         ttt_form_name(L->form),
                         ttt_layer_form_unavailable(L, L->form) ? ttt_layer_form_unavailable(L, L->form) : "internal");
}

