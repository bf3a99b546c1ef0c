/* Registry entry (form.h) of TTT-Linear's mini-batch dual form (docs/math.md §5.4,
 * layers/forms/ttt_linear/dual.c): the residual layer-norm linear model x + LN(x W + b), a loss
 * with ∂ℓ/∂z = z − v, plain SGD, position_scale inverse, update_then_apply, no decay. */
#include "composed.h"
#include "dual_grad.h"
#include "ttt_dual.h"

static const char *dual_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (!(L->model->traits & TTT_MODEL_RESIDUAL_LN) || !(L->loss->traits & TTT_LOSS_RESIDUAL) ||
        !ttt_layer_optim_traits(L).plain_sgd || !L->pos_inverse ||
        L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->decay != 1.0f)
        return "the dual form needs model ttt_linear, loss recon or squared, plain sgd, "
               "position_scale inverse, update_then_apply and no decay; use form: generic";
    if (in && in->gate != TTT_FORM_GATE_NONE)
        return "the TTT-Linear dual form has no forget gate; use form: generic";
    return NULL;
}

static ttt_status dual_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k), d = TTT_COLS(a->k);
    /* lr_j = θ η_j; the layer state is (W, b) */
    const float *lr = ttt_form_beta_array(ctx, L, a->eta, T);
    ttt_ttt_linear_dual(ctx, o->data, st->W[0]->data, st->W[1]->data, a->q->data, a->k->data,
                        a->v->data, lr, T, d, L->mini_batch);
    return TTT_OK;
}

static ttt_status dual_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                            ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *lr = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *W = NULL, *b = NULL;
    ttt_tensor *O = a->fused
                        ? ttt_ttt_linear_dual_fused(ctx, &W, &b, a->q, a->k, a->v, lr, st->W[0],
                                                    st->W[1], L->mini_batch)
                        : ttt_ttt_linear_dual_composed(ctx, &W, &b, a->q, a->k, a->v, lr,
                                                       st->W[0], st->W[1], L->mini_batch);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], W);
    ttt_form_set_state(ctx, &st->W[1], b);
    return TTT_OK;
}

/* ttt_linear/dual.c: G, Zb (B, d); M (B, B); the lr array (T); block sums (d, d) and bias
 * vectors; 16 floats per allocation for alignment. */
static double dual_scratch(const ttt_layer *L, long T) {
    double C = L->mini_batch < T ? L->mini_batch : (double)T;
    const double d = L->d_k;
    return (C * C + 2 * C * d + 3 * d * d + 8 * d + (double)T + 8 * 16) * sizeof(float);
}

/* Measured: 4.7× the generic driver (experiments/equivalence.yaml). */
const ttt_form_entry ttt_form_ttt_linear_dual = {
    .family = "ttt_linear",
    .form = "dual",
    .help = "TTT-Linear's mini-batch dual form: matrix products per block, no per-token weights",
    .auto_rank = 10,
    .available = dual_available,
    .forward = dual_forward,
    .forward_diff = dual_diff,
    .forward_strided = NULL,
    .scratch_bytes = dual_scratch,
    .flops = NULL,
};
