/* Registry entry (form.h) of Titans' chunked momentum (layers/forms/titans/chunked.c): a linear
 * model, a loss with ∂ℓ/∂z = z − v, heavy-ball momentum (no Nesterov), steps per_token (every
 * gradient of a block at its start weights), update_then_apply, no position scale and decoupled
 * decay. The chunk of the closed form is the mini-batch b. Inputs: a scalar gate per token or
 * none. */
#include "composed.h"

static const char *titans_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (!(L->model->traits & TTT_MODEL_LINEAR_MAP) || !(L->loss->traits & TTT_LOSS_RESIDUAL) ||
        !ttt_layer_optim_traits(L).momentum || !L->step_per_token ||
        L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->pos_inverse)
        return "Titans' chunked form needs a linear model, the squared loss, momentum without "
               "nesterov, steps per_token, update_then_apply and no position scale; use form: "
               "generic";
    if (L->coupled && L->decay != 1.0f)
        return "Titans' chunked form takes every gradient at the chunk-start weights "
               "(decay_placement: decoupled); use form: generic";
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "this closed form takes a scalar decay per token, not a vector; use form: generic";
    if (in && in->gate == TTT_FORM_GATE_TOKEN && L->coupled)
        return "Titans' chunked form takes every gradient at the chunk-start weights "
               "(decay_placement: decoupled); this layer has per-token gates with coupled "
               "placement: use form: generic or decay_placement: decoupled";
    return NULL;
}

static ttt_status titans_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                 ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    ttt_momentum_chunked(ctx, o->data, st->W[0]->data, st->opt[0][0]->data, a->q->data,
                         a->k->data, a->v->data, a->eta ? a->eta->data : NULL,
                         a->log_alpha ? a->log_alpha->data : NULL, L->lr,
                         ttt_layer_optim_traits(L).mu, T, d_k, d_v, L->mini_batch);
    return TTT_OK;
}

static ttt_status titans_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL, *M = NULL;
    ttt_tensor *O = ttt_titans_chunked_composed(ctx, &S, &M, a->q, a->k, a->v, beta,
                                                a->log_alpha, st->W[0], st->opt[0][0],
                                                ttt_layer_optim_traits(L).mu, L->mini_batch);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    ttt_form_set_state(ctx, &st->opt[0][0], M);
    return TTT_OK;
}

/* Per chunk of C = b tokens (titans/chunked.c): D in float and double, Q Kᵀ and its masked
 * product (C, C); four (C) coefficient rows and three in double; about eight (C, d_v) matmul
 * results, two scaled key blocks (C, d_k) and four (d_k, d_v) state results; 32 floats per
 * tensor for headers and alignment. */
static double titans_scratch(const ttt_layer *L, long T) {
    double C = L->mini_batch < T ? L->mini_batch : (double)T;
    const double dk = L->d_k, dv = L->d_v;
    return (5 * C * C + C * (2 * dk + 8 * dv + 16) + 4 * dk * dv + 32 * 32) * sizeof(float);
}

/* Measured: 6× the generic driver (experiments/equivalence.yaml). */
const ttt_form_entry ttt_form_titans_chunkwise = {
    .family = "titans",
    .form = "chunkwise",
    .help = "Titans' momentum with gradients per chunk of b tokens, as matmuls per chunk",
    .auto_rank = 10,
    .available = titans_available,
    .forward = titans_forward,
    .forward_diff = titans_diff,
    .forward_strided = NULL,
    .scratch_bytes = titans_scratch,
    .flops = NULL,
};
