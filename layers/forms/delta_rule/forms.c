/* Registry entries (form.h) of the delta rule: recurrent, parallel and chunkwise (docs/math.md
 * §5.1, §5.3). The tuple: a linear map, a loss with ∂ℓ/∂z = z − v, plain SGD, b = 1,
 * update_then_apply, no position scale, and no decay or coupled placement (the closed forms
 * decay before the error is measured). Inputs: a scalar gate per token or none; the recurrent
 * form also a gate per token and key dimension (KDA, docs/math.md §4.5). */
#include <math.h>
#include "composed.h"
#include "fused_grad.h"
#include "kda_grad.h"

static const char *delta_available(const ttt_layer *L, const ttt_form_inputs *in) {
    const char *one = ttt_form_one_step(L);
    if (one) return one;
    if (!(L->model->traits & TTT_MODEL_LINEAR_MAP) || !(L->loss->traits & TTT_LOSS_RESIDUAL) ||
        !ttt_layer_optim_traits(L).plain_sgd || L->mini_batch != 1 ||
        L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->pos_inverse)
        return "the delta rule's closed forms need a linear model, the squared loss, plain sgd, "
               "mini_batch 1, update_then_apply and no position scale; use form: generic";
    if (!L->coupled && L->decay != 1.0f)
        return "the closed delta-rule forms decay before the error is measured "
               "(decay_placement: coupled); this layer decays with decoupled placement: use "
               "form: generic or decay_placement: coupled";
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "this closed form takes a scalar decay per token, not a vector; use form: recurrent "
               "or generic";
    if (in && in->gate == TTT_FORM_GATE_TOKEN && !L->coupled)
        return "the closed delta-rule forms decay before the error is measured "
               "(decay_placement: coupled); this layer has per-token gates with decoupled "
               "placement: use form: generic or decay_placement: coupled";
    return NULL;
}

/* The recurrent form also takes a gate per key dimension (KDA): its forward is the fused
 * recurrence of recurrent.c, its differentiable path the generic driver's ops. */
static const char *delta_available_recurrent(const ttt_layer *L, const ttt_form_inputs *in) {
    if (in && in->gate == TTT_FORM_GATE_KEY) {
        ttt_form_inputs tok = *in;
        tok.gate = TTT_FORM_GATE_TOKEN;
        return delta_available(L, &tok);
    }
    return delta_available(L, in);
}

static ttt_status delta_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                ttt_layer_state *st, const ttt_form_args *a, int C,
                                ttt_error *err) {
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const float *la = a->log_alpha ? a->log_alpha->data : NULL;
    float *S = st->W[0]->data;
    if (a->alpha_vec && la) {
        const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
        if (ttt_delta_rule_recurrent_key_ld(o->data, S, a->q->data, a->k->data, a->v->data, beta,
                                            la, T, d_k, d_v, &ld) != TTT_OK)
            return ttt_form_rows_out_of_memory(err, "delta rule", d_k, d_v);
    } else if (C == 0) {
        if (ttt_delta_rule_recurrent(o->data, S, a->q->data, a->k->data, a->v->data, beta, la, T,
                                     d_k, d_v) != TTT_OK)
            return ttt_form_rows_out_of_memory(err, "delta rule", d_k, d_v);
    } else if (C < 0)
        ttt_delta_rule_parallel(ctx, o->data, S, a->q->data, a->k->data, a->v->data, beta, la,
                                T, d_k, d_v);
    else
        ttt_delta_rule_chunkwise(ctx, o->data, S, a->q->data, a->k->data, a->v->data, beta, la,
                                 T, d_k, d_v, C);
    return TTT_OK;
}

static ttt_status delta_recurrent(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return delta_forward(ctx, L, o, st, a, 0, err);
}
static ttt_status delta_parallel(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                 ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return delta_forward(ctx, L, o, st, a, -1, err);
}
static ttt_status delta_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return delta_forward(ctx, L, o, st, a, L->chunk, err);
}

/* Differentiable: the UT-transform chunkwise math (recurrent: chunk L->chunk; parallel: T). */
static ttt_status delta_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_form_args *a, int C) {
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = a->fused ? ttt_delta_chunkwise_fused(ctx, &S, a->q, a->k, a->v, beta,
                                                         a->log_alpha, st->W[0], C)
                             : ttt_delta_chunkwise_composed(ctx, &S, a->q, a->k, a->v, beta,
                                                            a->log_alpha, st->W[0], C);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}
static ttt_status delta_diff_chunk(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                   ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    return delta_diff(ctx, L, o, st, a, L->chunk);
}
/* The recurrent entry's differentiable path for a gate per key dimension (KDA): the recurrent
 * kernel with its hand-written backward (kda_grad.c; fused), or the generic driver's ops, the
 * same tuple token by token (the composed reference). */
static ttt_status delta_diff_recurrent(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                       ttt_layer_state *st, const ttt_form_args *a,
                                       ttt_error *err) {
    if (!a->alpha_vec || !a->log_alpha) return delta_diff(ctx, L, o, st, a, L->chunk);
    if (!a->fused)
        return ttt_forward_generic(ctx, L, o, st, a->q, a->k, a->v, a->eta, a->log_alpha, 1,
                                   err);
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = ttt_kda_recurrent_fused(ctx, &S, a->q, a->k, a->v, beta, a->log_alpha,
                                            st->W[0], L->chunk > 0 ? L->chunk : 64);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}
static ttt_status delta_diff_parallel(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                      ttt_layer_state *st, const ttt_form_args *a,
                                      ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k);
    return delta_diff(ctx, L, o, st, a, T > 0 ? T : 1);
}

static ttt_status delta_strided_recurrent(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                          const ttt_form_strided *a, ttt_error *err) {
    (void)ctx;
    const ttt_status s =
        a->alpha_vec && a->log_alpha
            ? ttt_delta_rule_recurrent_key_ld(a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha,
                                              a->T, L->d_k, L->d_v, &a->ld)
            : ttt_delta_rule_recurrent_ld(a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha, a->T,
                                          L->d_k, L->d_v, &a->ld);
    return s == TTT_OK ? TTT_OK : ttt_form_rows_out_of_memory(err, "delta rule", L->d_k, L->d_v);
}
/* the parallel form is the chunkwise one with one chunk of T tokens (kernels.h) */
static ttt_status delta_strided_parallel(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                         const ttt_form_strided *a, ttt_error *err) {
    (void)err;
    ttt_delta_rule_chunkwise_ld(ctx, a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha, a->T,
                                L->d_k, L->d_v, a->T > 0 ? a->T : 1, &a->ld);
    return TTT_OK;
}
static ttt_status delta_strided_chunkwise(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                          const ttt_form_strided *a, ttt_error *err) {
    (void)err;
    ttt_delta_rule_chunkwise_ld(ctx, a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha, a->T,
                                L->d_k, L->d_v, L->chunk, &a->ld);
    return TTT_OK;
}

/* Scratch following delta_rule/chunkwise.c (scratch_alloc): A, Γ (C, C); X (C, d_k + C);
 * Y (d_k + C, d_v); W (C, d_k); three (C) rows, one in double; plus the β array (T); 16
 * floats per allocation for the arena's alignment. */
static double delta_chunk_bytes(const ttt_layer *L, long T, double C) {
    if (C > (double)T) C = (double)T;
    const double dk = L->d_k, dv = L->d_v;
    /* + the float64 inverse (Cp, Cp), C rounded up to 8, of chunks of at most 128 tokens
     * (chunkwise.c, ttt_unit_lower_invert) */
    const double Cp = 8 * ceil(C / 8);
    const double inverse = C <= 128 ? 2 * Cp * Cp : 0;
    return (3 * C * C + inverse + 2 * C * dk + (dk + C) * dv + 4 * C + (double)T + 9 * 16) *
           sizeof(float);
}
static double delta_scratch_recurrent(const ttt_layer *L, long T) {
    return (2.0 * L->d_k * L->d_v + 2.0 * (L->d_k + L->d_v) + (double)T + 16) * sizeof(float);
}
static double delta_scratch_parallel(const ttt_layer *L, long T) {
    return delta_chunk_bytes(L, T, (double)T);
}
static double delta_scratch_chunkwise(const ttt_layer *L, long T) {
    return delta_chunk_bytes(L, T, L->chunk);
}

/* FLOPs per chunk of n tokens: the scores, the triangular solve and the read-out,
 * n²(5 d_k + 3 d_v); the state products, 6 n d_k d_v. */
static double delta_flops_chunked(const ttt_layer *L, long T, long C) {
    double f = 0;
    for (long t0 = 0; t0 < T; t0 += C) {
        const double n = (double)(t0 + C <= T ? C : T - t0);
        f += n * n * (5.0 * L->d_k + 3.0 * L->d_v) + 6.0 * n * L->d_k * L->d_v;
    }
    return f;
}
static double delta_flops_recurrent(const ttt_layer *L, long T) {
    return (double)T * L->d_k * L->d_v * 6.0;
}
static double delta_flops_parallel(const ttt_layer *L, long T) {
    return delta_flops_chunked(L, T, T > 0 ? T : 1);
}
static double delta_flops_chunkwise(const ttt_layer *L, long T) {
    return delta_flops_chunked(L, T, L->chunk);
}

#include "delta_rates.h"

/* Measured (experiments/equivalence.yaml, T = 1000, d = 64, one thread): the chunkwise delta
 * rule runs at 0.6–0.8× the recurrent kernel (its per-chunk triangular solves do not pay off at
 * d = 64 yet), so auto prefers the recurrence. */
const ttt_form_entry ttt_form_delta_rule_recurrent = {
    .family = "delta_rule",
    .form = "recurrent",
    .help = "the delta rule token by token, S_t = (I - beta_t k_t^T k_t) Diag(alpha_t) S_{t-1} + "
            "beta_t k_t^T v_t (alpha_t scalar or per key)",
    .auto_rank = 10,
    .available = delta_available_recurrent,
    .forward = delta_recurrent,
    .forward_diff = delta_diff_recurrent,
    .forward_strided = delta_strided_recurrent,
    .scratch_bytes = delta_scratch_recurrent,
    .flops = delta_flops_recurrent,
    .rates = delta_rates_recurrent,
};

const ttt_form_entry ttt_form_delta_rule_parallel = {
    .family = "delta_rule",
    .form = "parallel",
    .help = "the delta rule as one chunk of T tokens (docs/math.md §5.1)",
    .auto_rank = 0,
    .available = delta_available,
    .forward = delta_parallel,
    .forward_diff = delta_diff_parallel,
    .forward_strided = delta_strided_parallel,
    .scratch_bytes = delta_scratch_parallel,
    .flops = delta_flops_parallel,
    .precise_t = 128, /* docs/forms.md "Precision on hard inputs" */
};

const ttt_form_entry ttt_form_delta_rule_chunkwise = {
    .family = "delta_rule",
    .form = "chunkwise",
    .chunked = 1,
    .help = "the delta rule in chunks via the UT transform (docs/math.md §5.3)",
    .auto_rank = 5,
    .available = delta_available,
    .forward = delta_chunkwise,
    .forward_diff = delta_diff_chunk,
    .forward_strided = delta_strided_chunkwise,
    .scratch_bytes = delta_scratch_chunkwise,
    .flops = delta_flops_chunkwise,
    .rates = delta_rates_chunkwise,
};
