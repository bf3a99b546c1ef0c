/* Reusable pieces of inner optimizers: see parts.h. */
#include "parts.h"

#include <math.h>

ttt_tensor *ttt_part_momentum(ttt_ctx *ctx, ttt_tensor **M_out, const ttt_tensor *M,
                              const ttt_tensor *G, float mu, float g, int nesterov) {
    ttt_tensor *Mn = ttt_axpby(ctx, mu, M, g, G); /* μM + gG */
    *M_out = Mn;
    return nesterov ? ttt_axpby(ctx, mu, Mn, g, G) /* μM_new + gG */ : Mn;
}

ttt_tensor *ttt_part_orthogonalize(ttt_ctx *ctx, const ttt_tensor *A, const ttt_ns_cfg *ns) {
    return ttt_newton_schulz(ctx, A, ns->set, ns->steps);
}

ttt_tensor *ttt_part_update(ttt_ctx *ctx, const ttt_tensor *W, const ttt_optim_block *blk,
                            float keep, float scale, const ttt_tensor *U) {
    ttt_tensor *Wd = ttt_optim_apply_decay(ctx, W, blk); /* αW */
    return ttt_axpby(ctx, keep, Wd, scale, U);
}

/* The matrix view of a weight for renormalization: (rows, cols), and whether the norms run per
 * row. A 1-D weight is a single row with a single norm. */
static void norm_layout(ttt_renorm_axis axis, const int *w_shape, int w_ndim, int *rows,
                        int *cols, int *per_row) {
    if (w_ndim == 1) {
        *rows = 1, *cols = w_shape[0], *per_row = 1;
        return;
    }
    size_t n = 1;
    for (int d = 0; d < w_ndim; d++) n *= (size_t)w_shape[d];
    *rows = w_shape[0], *cols = (int)(n / (size_t)w_shape[0]);
    *per_row = axis == TTT_RENORM_ROWS;
}

int ttt_part_renorm_shape(int *shape, ttt_renorm_axis axis, const int *w_shape, int w_ndim) {
    int rows, cols, per_row;
    norm_layout(axis, w_shape, w_ndim, &rows, &cols, &per_row);
    shape[0] = per_row ? rows : cols;
    return 1;
}

void ttt_part_renorm_init(ttt_tensor *N, ttt_renorm_axis axis, const ttt_tensor *W) {
    int rows, cols, per_row;
    norm_layout(axis, W->shape, W->ndim, &rows, &cols, &per_row);
    TTT_ASSERT(N->n == (size_t)(per_row ? rows : cols));
    if (per_row) {
        for (int i = 0; i < rows; i++) {
            const float *w = W->data + (size_t)i * cols; /* (cols) */
            double acc = 0;
            for (int j = 0; j < cols; j++) acc += (double)w[j] * w[j];
            N->data[i] = (float)sqrt(acc);
        }
    } else {
        for (int j = 0; j < cols; j++) {
            double acc = 0;
            for (int i = 0; i < rows; i++) {
                double w = W->data[(size_t)i * cols + j];
                acc += w * w;
            }
            N->data[j] = (float)sqrt(acc);
        }
    }
}

/* t as a (rows, cols) matrix: t itself when it already is one (no tape entry), else a recorded
 * reshape. */
static ttt_tensor *as_matrix(ttt_ctx *ctx, const ttt_tensor *t, int rows, int cols) {
    if (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) return (ttt_tensor *)t;
    return ttt_reshape(ctx, t, 2, (int[]){rows, cols});
}

/* ‖·‖ of every channel of the (rows, cols) matrix Wm, through ops: (channels). */
static ttt_tensor *channel_norms(ttt_ctx *ctx, ttt_tensor *Wm, int per_row) {
    return per_row ? ttt_row_norms(ctx, Wm) : ttt_row_norms(ctx, ttt_transpose(ctx, Wm));
}

ttt_tensor *ttt_part_renorm_init_ops(ttt_ctx *ctx, ttt_renorm_axis axis, const ttt_tensor *W) {
    int rows, cols, per_row;
    norm_layout(axis, W->shape, W->ndim, &rows, &cols, &per_row);
    return channel_norms(ctx, as_matrix(ctx, W, rows, cols), per_row);
}

ttt_tensor *ttt_part_renormalize(ttt_ctx *ctx, const ttt_tensor *W, const ttt_tensor *N,
                                 ttt_renorm_axis axis) {
    int rows, cols, per_row;
    norm_layout(axis, W->shape, W->ndim, &rows, &cols, &per_row);
    const int nch = per_row ? rows : cols;
    TTT_ASSERT(N->n == (size_t)nch);
    /* factor per channel ‖W_init‖/(‖W‖ + 1e-5), in ops so that the outer loop differentiates
     * through the current norms, and through the initial norms when N is a graph node */
    ttt_tensor *Wm = as_matrix(ctx, W, rows, cols); /* (rows, cols) */
    ttt_tensor *nrm = channel_norms(ctx, Wm, per_row); /* (nch) */
    ttt_tensor *keep = ttt_tensor_1d(ctx, nch), *pass = ttt_tensor_1d(ctx, nch);
    for (int ch = 0; ch < nch; ch++) {
        /* a channel that started at zero has no norm to return to: leave it (factor 1; its
         * target's gradient is then 0, as row_norms' is at a zero row) */
        keep->data[ch] = N->data[ch] > 0.0f ? 1.0f : 0.0f;
        pass->data[ch] = N->data[ch] > 0.0f ? 0.0f : 1.0f;
    }
    ttt_tensor *ratio = ttt_div(ctx, N, ttt_add_scalar(ctx, nrm, 1e-5f));
    ttt_tensor *f = ttt_add(ctx, ttt_mul(ctx, ratio, keep), pass); /* (nch) */
    ttt_tensor *R = per_row ? ttt_scale_rows(ctx, Wm, f) : ttt_scale_cols(ctx, Wm, f);
    return W->ndim == 2 ? R : ttt_reshape(ctx, R, W->ndim, W->shape);
}
