/* Registry entry (form.h) of linear attention as an associative scan (docs/math.md §5.5): the
 * pairs (Diag(α_t), β_t k_tᵀ v_t) composed as (A₂A₁, A₂B₁ + B₂) by the two-level parallel scan of
 * layers/forms/scan.c, with the read-out o_t = q_t S_t. The same tuples and gates as the other
 * linear-attention entries (none, per token, per key dimension, given or the constant decay).
 * Blocks are at least `chunk` tokens long, at most TTT_SCAN_MAX_BLOCKS of them; the blocks run
 * on the OpenMP threads available to the call (one sequence over several threads, where the
 * chunkwise form parallelizes over heads). */
#include <math.h>

#include "autograd.h"
#include "composed.h"
#include "ops.h"
#include "scan.h"
#include "scan_grad.h"

static const char *scan_available(const ttt_layer *L, const ttt_form_inputs *in) {
    (void)in;
    return ttt_layer_is_linear_attention(L)
               ? NULL
               : "the scan form takes linear attention's tuples (a linear model, the dot loss, "
                 "plain sgd, update_then_apply, no position scale); use form: generic";
}

static ttt_status scan_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    if (ttt_linear_attention_scan(ctx, o->data, st->W[0]->data, a->q->data, a->k->data,
                                  a->v->data, beta, a->log_alpha ? a->log_alpha->data : NULL,
                                  a->alpha_vec, T, d_k, d_v,
                                  ttt_scan_blocks(T, L->chunk)) != TTT_OK)
        return ttt_form_rows_out_of_memory(err, "linear attention (scan)", d_k, d_v);
    return TTT_OK;
}

/* Under a tape: one recorded op whose backward is itself a two-level scan backward in time
 * (scan_grad.c); fused and composed are the same path here. Without a tape, the forward. */
static ttt_status scan_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                            const ttt_form_args *a, ttt_error *err) {
    if (!ttt_recording(ctx)) return scan_forward(ctx, L, o, st, a, err);
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *Y = ttt_la_scan_op(ctx, a->q, a->k, a->v, beta, a->log_alpha, a->alpha_vec,
                                   st->W[0], ttt_scan_blocks(T, L->chunk));
    ttt_form_diff_output(ctx, o, ttt_slice_rows(ctx, Y, 0, T));
    ttt_form_set_state(ctx, &st->W[0], ttt_slice_rows(ctx, Y, T, T + d_k));
    return TTT_OK;
}

/* The scan's scratch plus the β array (T) the entry forms, and the recurrent kernel's nothing;
 * the differentiable path is the chunkwise one (its scratch is larger than the scan's only for
 * huge chunks, and is counted by its own entries). */
static double scan_scratch(const ttt_layer *L, long T) {
    const int P = ttt_scan_blocks(T, L->chunk);
    return ttt_linear_attention_scan_bytes(T, L->d_k, L->d_v, P) + ((double)T + 16) * 4;
}

/* FLOPs: the blocks' recurrences 4·d_k·d_v per token, the fix-up (Q ⊙ Ā) S_start 2·d_k·d_v per
 * token, the carries 2·d_k·d_v per block. The recurrent form does 4·d_k·d_v per token: the scan
 * does 1.5× its work for the parallelism. */
static double scan_flops(const ttt_layer *L, long T) {
    const double dd = (double)L->d_k * L->d_v;
    return 6.0 * dd * (double)T + 2.0 * dd * ttt_scan_blocks(T, L->chunk);
}

/* Never chosen by auto: the chunkwise entry takes every call this one takes and is faster on
 * one thread and per head (docs/forms.md "How `auto` chooses", docs/benchmarks.md "Scan"). */
const ttt_form_entry ttt_form_linear_attention_scan = {
    .family = "linear_attention",
    .form = "scan",
    .chunked = 1, /* blocks of at least layer.chunk tokens */
    .help = "linear attention as a parallel prefix scan over (Diag(alpha_t), beta_t k_t^T v_t), "
            "blocks of >= `chunk` tokens on the OpenMP threads (docs/math.md §5.5)",
    .auto_rank = 0,
    .available = scan_available,
    .forward = scan_forward,
    .forward_diff = scan_diff,
    .forward_strided = NULL,
    .scratch_bytes = scan_scratch,
    .flops = scan_flops,
};
