/* Registry entries (form.h) of linear attention: recurrent, parallel and chunkwise
 * (docs/math.md §5.1, §5.2). The tuple: a linear map (rows = key dimensions), a loss whose
 * gradient does not depend on W (the dot loss), plain SGD, update_then_apply, no position scale.
 * Any b: with a W-independent gradient every block size gives the same recurrence. Any gate:
 * scalar or per key dimension, given or the constant decay. */
#include <math.h>

#include "composed.h"
#include "fused_grad.h"

int ttt_layer_is_linear_attention(const ttt_layer *L) {
    return (L->model->traits & TTT_MODEL_LINEAR_MAP) && L->loss->z_free &&
           ttt_layer_optim_traits(L).plain_sgd && L->order == TTT_ORDER_UPDATE_THEN_APPLY &&
           !L->pos_inverse;
}

static const char *la_available(const ttt_layer *L, const ttt_form_inputs *in) {
    (void)in;
    return ttt_layer_is_linear_attention(L)
               ? NULL
               : "linear attention's closed forms need a linear model, a loss whose gradient "
                 "does not depend on W (dot), plain sgd, update_then_apply and no position "
                 "scale; use form: generic";
}

static ttt_status la_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_form_args *a, int C, ttt_error *err) {
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const float *la = a->log_alpha ? a->log_alpha->data : NULL;
    float *S = st->W[0]->data;
    if (C == 0) {
        if (ttt_linear_attention_recurrent(o->data, S, a->q->data, a->k->data, a->v->data, beta,
                                           la, a->alpha_vec, T, d_k, d_v) != TTT_OK)
            return ttt_form_rows_out_of_memory(err, "linear attention", d_k, d_v);
    } else if (C < 0)
        ttt_linear_attention_parallel(ctx, o->data, S, a->q->data, a->k->data, a->v->data, beta,
                                      la, a->alpha_vec, T, d_k, d_v);
    else
        ttt_linear_attention_chunkwise(ctx, o->data, S, a->q->data, a->k->data, a->v->data,
                                       beta, la, a->alpha_vec, T, d_k, d_v, C);
    return TTT_OK;
}

static ttt_status la_recurrent(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return la_forward(ctx, L, o, st, a, 0, err);
}
static ttt_status la_parallel(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return la_forward(ctx, L, o, st, a, -1, err);
}
static ttt_status la_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    return la_forward(ctx, L, o, st, a, L->chunk, err);
}

/* Differentiable: the chunkwise math (the recurrent form's chunk is L->chunk, the parallel
 * form's the whole sequence). */
static ttt_status la_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                          const ttt_form_args *a, int C) {
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = a->fused ? ttt_la_chunkwise_fused(ctx, &S, a->q, a->k, a->v, beta,
                                                      a->log_alpha, st->W[0], C)
                             : ttt_la_chunkwise_composed(ctx, &S, a->q, a->k, a->v, beta,
                                                         a->log_alpha, st->W[0], C);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}
static ttt_status la_diff_chunk(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    return la_diff(ctx, L, o, st, a, L->chunk);
}
static ttt_status la_diff_parallel(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                   ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    const int T = TTT_ROWS(a->k);
    return la_diff(ctx, L, o, st, a, T > 0 ? T : 1);
}

static ttt_status la_strided_recurrent(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                       const ttt_form_strided *a, ttt_error *err) {
    (void)ctx;
    if (ttt_linear_attention_recurrent_ld(a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha,
                                          a->alpha_vec, a->T, L->d_k, L->d_v, &a->ld) != TTT_OK)
        return ttt_form_rows_out_of_memory(err, "linear attention", L->d_k, L->d_v);
    return TTT_OK;
}
/* the parallel form is the chunkwise one with one chunk of T tokens (kernels.h) */
static ttt_status la_strided_parallel(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                      const ttt_form_strided *a, ttt_error *err) {
    (void)err;
    ttt_linear_attention_chunkwise_ld(ctx, a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha,
                                      a->alpha_vec, a->T, L->d_k, L->d_v, a->T, &a->ld);
    return TTT_OK;
}
static ttt_status la_strided_chunkwise(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                       const ttt_form_strided *a, ttt_error *err) {
    (void)err;
    ttt_linear_attention_chunkwise_ld(ctx, a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha,
                                      a->alpha_vec, a->T, L->d_k, L->d_v, L->chunk, &a->ld);
    return TTT_OK;
}

/* Scratch following layers/forms/linear_attention/chunkwise.c: A (C, C); qs, qs2, ks (C, d_k);
 * f (C); E, G (C, d_k) for a vector gate, G in double; the chunk's state write (d_k, d_v); the
 * decays' drift (d_k doubles); a chunk's gates from a reset or floored (C, d_k); plus the β
 * array (T) the entry forms; 16 floats per allocation for the arena's 64-byte alignment. */
static double la_chunk_bytes(const ttt_layer *L, long T, double C) {
    if (C > (double)T) C = (double)T; /* the kernel clamps its chunk to the sequence */
    return (C * C + C * (7.0 * L->d_k + 4) + 2.0 * L->d_k + (double)L->d_k * L->d_v + (double)T +
            11 * 16) *
           sizeof(float);
}
static double la_scratch_recurrent(const ttt_layer *L, long T) {
    return (2.0 * L->d_k * L->d_v + 2.0 * (L->d_k + L->d_v) + (double)T + 16) * sizeof(float);
}
static double la_scratch_parallel(const ttt_layer *L, long T) {
    return la_chunk_bytes(L, T, (double)T);
}
static double la_scratch_chunkwise(const ttt_layer *L, long T) {
    return la_chunk_bytes(L, T, L->chunk);
}

/* FLOPs per chunk of n tokens: Q Kᵀ and the masked product with V, 2n²(d_k + d_v); the state
 * read and write, 4 n d_k d_v. */
static double la_flops_chunked(const ttt_layer *L, long T, long C) {
    double f = 0;
    for (long t0 = 0; t0 < T; t0 += C) {
        const double n = (double)(t0 + C <= T ? C : T - t0);
        f += 2.0 * n * n * (L->d_k + L->d_v) + 4.0 * n * L->d_k * L->d_v;
    }
    return f;
}
static double la_flops_recurrent(const ttt_layer *L, long T) {
    return (double)T * L->d_k * L->d_v * 4.0;
}
static double la_flops_parallel(const ttt_layer *L, long T) {
    return la_flops_chunked(L, T, T > 0 ? T : 1);
}
static double la_flops_chunkwise(const ttt_layer *L, long T) {
    return la_flops_chunked(L, T, L->chunk);
}

#include "la_rates.h"

/* Measured (experiments/equivalence.yaml, T = 1000, d = 64, one thread): chunkwise 1.5× the
 * recurrent kernel, so auto prefers it; the parallel form is quadratic in T. */
const ttt_form_entry ttt_form_linear_attention_recurrent = {
    .family = "linear_attention",
    .form = "recurrent",
    .help = "linear attention token by token, S_t = Diag(alpha_t) S_{t-1} + beta_t k_t^T v_t",
    .auto_rank = 5,
    .available = la_available,
    .forward = la_recurrent,
    .forward_diff = la_diff_chunk,
    .forward_strided = la_strided_recurrent,
    .scratch_bytes = la_scratch_recurrent,
    .flops = la_flops_recurrent,
    .rates = la_rates_recurrent,
    .precise_t = 8192, /* docs/forms.md "Precision on hard inputs" */
};

const ttt_form_entry ttt_form_linear_attention_parallel = {
    .family = "linear_attention",
    .form = "parallel",
    .help = "linear attention as one masked T x T product (docs/math.md §5.1)",
    .auto_rank = 0,
    .available = la_available,
    .forward = la_parallel,
    .forward_diff = la_diff_parallel,
    .forward_strided = la_strided_parallel,
    .scratch_bytes = la_scratch_parallel,
    .flops = la_flops_parallel,
};

const ttt_form_entry ttt_form_linear_attention_chunkwise = {
    .family = "linear_attention",
    .form = "chunkwise",
    .chunked = 1,
    .help = "linear attention in chunks of `chunk` tokens (docs/math.md §5.2)",
    .auto_rank = 10,
    .available = la_available,
    .forward = la_chunkwise,
    .forward_diff = la_diff_chunk,
    .forward_strided = la_strided_chunkwise,
    .scratch_bytes = la_scratch_chunkwise,
    .flops = la_flops_chunkwise,
    .rates = la_rates_chunkwise,
};
