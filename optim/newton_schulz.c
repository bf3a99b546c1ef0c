/* Newton–Schulz orthogonalization (MATH.md §3): see newton_schulz.h. */
#include "newton_schulz.h"

#include <string.h>

/* Keller Jordan's Muon quintic, used at every step. */
static const double ns_muon[3] = {3.4445, -4.7750, 2.0315};
/* LaCT's per-step quintics (MATH.md §3), in order. */
static const double ns_lact[5][3] = {
    {4.0848, -6.8946, 2.9270}, {3.9505, -6.3029, 2.6377}, {3.7418, -5.5913, 2.3037},
    {2.8769, -3.1427, 1.2046}, {2.8366, -3.0525, 1.2012},
};
/* Classical cubic Newton–Schulz for the polar factor. */
static const double ns_cubic[3] = {1.5, -0.5, 0.0};

void ttt_ns_coefficients(ttt_ns_set set, int step, double abc[3]) {
    const double *c = ns_muon;
    if (set == TTT_NS_LACT) c = ns_lact[step < 4 ? step : 4]; /* clamp: repeat the last tuple */
    if (set == TTT_NS_CUBIC) c = ns_cubic;
    memcpy(abc, c, 3 * sizeof(double));
}

void ttt_ns_parse(ttt_ns_cfg *out, const ttt_cfg_node *opts) {
    const char *s = ttt_cfg_str(opts, "coefficients");
    out->set = strcmp(s, "lact") == 0    ? TTT_NS_LACT
               : strcmp(s, "cubic") == 0 ? TTT_NS_CUBIC
                                         : TTT_NS_MUON;
    out->steps = (int)ttt_cfg_int(opts, "steps");
}

void ttt_ns_matrix_dims(const ttt_tensor *W, int *rows, int *cols) {
    if (W->ndim == 1) {
        *rows = 1; /* a vector is one row: NS gives its normalized direction */
        *cols = W->shape[0];
    } else {
        *rows = W->shape[0];
        *cols = (int)(W->n / (size_t)W->shape[0]);
    }
}

ttt_tensor *ttt_newton_schulz(ttt_ctx *ctx, const ttt_tensor *A, ttt_ns_set set, int steps) {
    int r, c;
    ttt_ns_matrix_dims(A, &r, &c);
    const int tape = ttt_recording(ctx);
    /* Without a tape the iterations' temporaries are released and only the result is kept; with
     * one, every iterate stays on the tape so the outer loop differentiates through NS. */
    ttt_tensor *out = tape ? NULL : ttt_tensor_new(ctx, A->ndim, A->shape);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const ttt_tensor *A2 = A->ndim == 2 ? A : ttt_reshape(ctx, A, 2, (int[]){r, c}); /* (r, c) */
    /* Work on the wide orientation so that P = X Xᵀ is the smaller Gram matrix. */
    const int tr = r > c;
    ttt_tensor *X = tr ? ttt_transpose(ctx, A2) : (ttt_tensor *)A2;       /* (m, n), m ≤ n */
    ttt_tensor *den = ttt_add_scalar(ctx, ttt_norm_fro(ctx, X), 1e-7f); /* ‖A‖_F + 1e-7 */
    X = ttt_div(ctx, X, den);
    for (int i = 0; i < steps; i++) {
        double abc[3];
        ttt_ns_coefficients(set, i, abc);
        ttt_tensor *P = ttt_matmul(ctx, X, 0, X, 1); /* X Xᵀ (m, m) */
        /* B = bP + cP² (the cubic set has c = 0: skip the product) */
        ttt_tensor *B = abc[2] != 0.0
                            ? ttt_gemm(ctx, (float)abc[2], P, 0, P, 0, (float)abc[1], P)
                            : ttt_scale(ctx, P, (float)abc[1]);
        X = ttt_gemm(ctx, 1.0f, B, 0, X, 0, (float)abc[0], X); /* aX + B X (m, n) */
    }
    if (tr) X = ttt_transpose(ctx, X);
    if (A->ndim != 2) X = ttt_reshape(ctx, X, A->ndim, A->shape);
    if (tape) return X;
    memcpy(out->data, X->data, out->n * sizeof(float));
    ttt_arena_release(ctx->arena, mark);
    return out;
}
