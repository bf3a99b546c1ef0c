/* Memory estimates of a layer run (see layer.h), so that sizes the machine cannot hold are refused
 * before anything is allocated. */
#include "layer.h"

/* ---- memory estimates ---- */

/* Elements of each fast-weight tensor, their sum, and Σ min(rows, cols)² over the matrices
 * (Newton–Schulz works on the Gram matrix of the smaller side). */
static double weight_floats(const ttt_layer *L, double *gram) {
    double total = 0;
    *gram = 0;
    for (int w = 0; w < L->model->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        const int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        double n = 1;
        for (int d = 0; d < nd; d++) n *= shape[d];
        total += n;
        if (nd == 2) {
            const double m = shape[0] < shape[1] ? shape[0] : shape[1];
            *gram += m * m;
        }
    }
    return total;
}

/* Floats of the optimizer state over all weights, from the shapes it declares (optim.h
 * state_shape: Adam's step count is one float, large_batch's norms one per channel). */
static double opt_state_floats(const ttt_layer *L) {
    double total = 0;
    for (int w = 0; w < L->model->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        const int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        total += ttt_optim_state_floats(L->optim, L->optim_cfg, shape, nd);
    }
    return total;
}

double ttt_layer_state_bytes(const ttt_layer *L) {
    double gram;
    const double w = weight_floats(L, &gram);
    double floats = w + opt_state_floats(L);
    if (L->normalize == TTT_NORMALIZE_RATIO) floats += L->d_k;
    return floats * sizeof(float);
}

/* Scratch of one form over `C` tokens at a time (the whole sequence for the parallel forms),
 * in floats, following the allocations in layers/forms/linear_attention/chunkwise.c, delta_rule/chunkwise.c, titans/chunked.c and
 * ttt_linear/dual.c (a double counts as two floats). */
static double form_floats(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v;
    double C;
    switch (L->form) {
    case TTT_FORM_PARALLEL: C = (double)T; break;
    case TTT_FORM_CHUNKWISE: /* Titans and LaCT take one gradient per mini-batch */
        C = ttt_layer_family(L) == TTT_FAMILY_TITANS || ttt_layer_family(L) == TTT_FAMILY_LACT
                ? L->mini_batch
                : L->chunk;
        break;
    case TTT_FORM_DUAL: C = L->mini_batch; break;
    default: C = 0; break;
    }
    if (C > (double)T) C = (double)T; /* every form clamps its block to the sequence */
    const int fam = ttt_layer_family(L);
    switch (L->form) {
    case TTT_FORM_PARALLEL:
    case TTT_FORM_CHUNKWISE:
        if (fam == TTT_FAMILY_LINEAR_ATTENTION) /* A (C, C); qs, qs2, ks, E (C, d_k); G double */
            return C * C + C * (6 * dk + 4);
        if (fam == TTT_FAMILY_DELTA_RULE) /* A, Γ (C, C); UW (C, d_k + d_v); exp G, G */
            return 2 * C * C + C * (dk + dv + 4);
        if (fam == TTT_FAMILY_LACT) {
            /* one block: the driver's weight-sized step temporaries (as the generic estimate
             * below, Newton–Schulz Gram matrices included) plus the block's activations, a
             * handful of (C, hidden) and (C, d) matrices; hidden from the SwiGLU weight count
             * w = hidden·(2 d_k + d_v) */
            double gram;
            const double w = weight_floats(L, &gram), hidden = w / (2 * dk + dv);
            return 12.0 * w + 3 * opt_state_floats(L) + 6 * gram +
                   C * (8 * hidden + 4 * (dk + dv));
        }
        /* Titans: D (n, n) float and double, per-row coefficients, and matmul results */
        return 3 * C * C + C * (4 * dk + 4 * dv + 16) + 4 * dk * dv;
    case TTT_FORM_DUAL: /* G, Zb (B, d); M (B, B); (d, d) sums; bias vectors */
        return C * C + 2 * C * dk + 3 * dk * dk + 8 * dk;
    case TTT_FORM_RECURRENT:
        return 2 * dk * dv + 2 * (dk + dv);
    default: {
        /* The generic driver keeps 2 weight-sized block buffers per weight plus one copy of
         * the declared state, and makes per token a handful of weight-sized temporaries
         * (decayed copy, gradient, sum, step results, new state); Newton–Schulz adds
         * Gram-sized matrices. Per-token activations are (1, width). */
        double gram;
        const double w = weight_floats(L, &gram);
        return 12.0 * w + 3 * opt_state_floats(L) + 6 * gram + 64 * (dk + dv);
    }
    }
}

double ttt_layer_forward_bytes(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v, t = (double)T;
    /* β, a constant log α (T); scaled, rotated and feature-mapped q and k (T, d_k) each; the
     * form's result, the normalized result and the ratio denominator (T, d_v) or (T) */
    double floats = t * (5 * dk + 3 * dv + 8);
    floats += form_floats(L, T);
    return floats * sizeof(float);
}
