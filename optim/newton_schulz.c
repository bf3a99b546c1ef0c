/* Newton–Schulz orthogonalization (docs/math.md §3): see newton_schulz.h. */
#include "newton_schulz.h"

#include "blas.h"
#include <string.h>

/* Keller Jordan's Muon quintic, used at every step. */
static const double ns_muon[3] = {3.4445, -4.7750, 2.0315};
/* LaCT's per-step quintics (docs/math.md §3), in order. */
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

void ttt_ns_parse(ttt_ns_cfg *out, const ttt_optim_args *opts) {
    const char *s = ttt_optim_arg_text(opts, "coefficients");
    out->set = strcmp(s, "lact") == 0    ? TTT_NS_LACT
               : strcmp(s, "cubic") == 0 ? TTT_NS_CUBIC
                                         : TTT_NS_MUON;
    out->steps = (int)ttt_optim_arg_num(opts, "steps");
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

/* The wide (m, n), m ≤ n, orientation of A, through recorded ops: Aᵀ when A is tall, so that
 * P = X Xᵀ is the smaller Gram matrix. *tr says whether A was transposed. */
static ttt_tensor *ns_wide(ttt_ctx *ctx, const ttt_tensor *A, int *tr) {
    int r, c;
    ttt_ns_matrix_dims(A, &r, &c);
    const ttt_tensor *A2 = A->ndim == 2 ? A : ttt_reshape(ctx, A, 2, (int[]){r, c}); /* (r, c) */
    *tr = r > c;
    return *tr ? ttt_transpose(ctx, A2) : (ttt_tensor *)A2;
}

/* The iteration from the normalized X (m, n), through ops: `steps` times P = X Xᵀ,
 * X ← aX + (bP + cP²)X. save (steps, m, n), or NULL, receives X before every step (what the
 * fused backward reverses). Both versions below run exactly these ops, so that their forwards
 * are the same float operations. */
static ttt_tensor *ns_iterate(ttt_ctx *ctx, ttt_tensor *X, ttt_ns_set set, int steps,
                              float *save) {
    for (int i = 0; i < steps; i++) {
        double abc[3];
        ttt_ns_coefficients(set, i, abc);
        if (save) memcpy(save + (size_t)i * X->n, X->data, X->n * sizeof(float));
        ttt_tensor *P = ttt_matmul(ctx, X, 0, X, 1); /* X Xᵀ (m, m) */
        /* B = bP + cP² (the cubic set has c = 0: skip the product) */
        ttt_tensor *B = abc[2] != 0.0
                            ? ttt_gemm(ctx, (float)abc[2], P, 0, P, 0, (float)abc[1], P)
                            : ttt_scale(ctx, P, (float)abc[1]);
        X = ttt_gemm(ctx, 1.0f, B, 0, X, 0, (float)abc[0], X); /* aX + B X (m, n) */
    }
    return X;
}

/* X (m, n) back to A's orientation and shape. */
static ttt_tensor *ns_unwide(ttt_ctx *ctx, ttt_tensor *X, const ttt_tensor *A, int tr) {
    if (tr) X = ttt_transpose(ctx, X);
    if (A->ndim != 2) X = ttt_reshape(ctx, X, A->ndim, A->shape);
    return X;
}

ttt_tensor *ttt_newton_schulz_composed(ttt_ctx *ctx, const ttt_tensor *A, ttt_ns_set set,
                                       int steps) {
    const int tape = ttt_recording(ctx);
    /* Without a tape the iterations' temporaries are released and only the result is kept; with
     * one, every iterate stays on the tape so the outer loop differentiates through NS. */
    ttt_tensor *out = tape ? NULL : ttt_tensor_new(ctx, A->ndim, A->shape);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    int tr;
    ttt_tensor *X = ns_wide(ctx, A, &tr);                                 /* (m, n), m ≤ n */
    ttt_tensor *den = ttt_add_scalar(ctx, ttt_norm_fro(ctx, X), 1e-7f); /* ‖A‖_F + 1e-7 */
    X = ns_unwide(ctx, ns_iterate(ctx, ttt_div(ctx, X, den), set, steps, NULL), A, tr);
    if (tape) return X;
    memcpy(out->data, X->data, out->n * sizeof(float));
    ttt_arena_release(ctx->arena, mark);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* The fused op: one tape entry, the backward below.
 *
 * Reverse of one step X' = aX + B X, B = bP + cP², P = X Xᵀ (P and B symmetric). With
 * G' = ∂L/∂X' and dP = dX Xᵀ + X dXᵀ:
 *     ⟨G', dX'⟩ = ⟨aG' + B G', dX⟩ + ⟨G' Xᵀ, dB⟩,   dB = b dP + c(dP P + P dP),
 *     ⟨Q, dB⟩ = ⟨R, dP⟩ with Q = G' Xᵀ, R = bQ + c(QP + PQ),
 *     ⟨R, dP⟩ = ⟨(R + Rᵀ) X, dX⟩,
 * so  ∂L/∂X = aG' + B G' + (R + Rᵀ) X.
 * Normalization X_0 = Â/s, s = ‖Â‖_F + 1e-7 (Â = A in the wide orientation), with
 * ∂‖Â‖/∂Â = Â/‖Â‖ (0 at Â = 0, as ttt_norm_fro):
 *     ∂L/∂Â = G_0/s − (⟨G_0, Â⟩/s²)·Â/‖Â‖ = G_0/s − (⟨G_0, X_0⟩/(s‖Â‖))·Â.
 * The iterates X_0 … X_{steps−1} are saved by the forward (steps·m·n floats); P, B, Q, R are
 * recomputed (m × m, the small side). */

/* C (m, n) = alpha·op(A)·op(B) + beta·C, row-major, contiguous operands. */
static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B,
                 float beta, float *C) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, A, ta ? m : k, B, tb ? k : n, beta, C, n);
}

static void ns_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    const ttt_tensor *A = e->in[0];
    float *gA = ttt_grad(ctx, A); /* before the scratch mark (autograd.h) */
    const ttt_ns_set set = (ttt_ns_set)e->iarg[0];
    const int steps = e->iarg[1];
    const float nrm = e->farg[0], den = e->farg[1]; /* ‖A‖_F, ‖A‖_F + 1e-7 as the forward had */
    const float *Xs = e->aux;                       /* (steps, m, n) */
    int r, c;
    ttt_ns_matrix_dims(A, &r, &c);
    const int tr = r > c, m = tr ? c : r, n = tr ? r : c;
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *G = ttt_arena_alloc(ctx->arena, (2 * mn + 4 * mm) * sizeof(float));
    TTT_ASSERT(G != NULL);
    float *Gn = G + mn, *P = Gn + mn, *B = P + mm, *Q = B + mm, *R = Q + mm; /* (m,n)², (m,m)⁴ */
    /* ∂L/∂X_steps in the wide orientation */
    if (tr) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) G[(size_t)j * n + i] = dout[(size_t)i * c + j];
    } else {
        memcpy(G, dout, mn * sizeof(float));
    }
    for (int k = steps - 1; k >= 0; k--) {
        double abc[3];
        ttt_ns_coefficients(set, k, abc);
        const float a = (float)abc[0], b = (float)abc[1], cc = (float)abc[2];
        const float *X = Xs + (size_t)k * mn; /* (m, n) */
        gemm(0, 1, m, m, n, 1.0f, X, X, 0.0f, P); /* P = X Xᵀ */
        gemm(0, 1, m, m, n, 1.0f, G, X, 0.0f, Q); /* Q = G' Xᵀ */
        for (size_t i = 0; i < mm; i++) B[i] = b * P[i], R[i] = b * Q[i];
        if (cc != 0.0f) {
            gemm(0, 0, m, m, m, cc, P, P, 1.0f, B); /* + cP² */
            gemm(0, 0, m, m, m, cc, Q, P, 1.0f, R); /* + cQP */
            gemm(0, 0, m, m, m, cc, P, Q, 1.0f, R); /* + cPQ */
        }
        for (int i = 0; i < m; i++) /* R ← R + Rᵀ (in place: each pair once) */
            for (int j = i; j < m; j++) {
                const float s = R[(size_t)i * m + j] + R[(size_t)j * m + i];
                R[(size_t)i * m + j] = R[(size_t)j * m + i] = s;
            }
        for (size_t i = 0; i < mn; i++) Gn[i] = a * G[i];
        gemm(0, 0, m, n, m, 1.0f, B, G, 1.0f, Gn); /* + B G' */
        gemm(0, 0, m, n, m, 1.0f, R, X, 1.0f, Gn); /* + (R + Rᵀ) X */
        float *t = G;
        G = Gn, Gn = t;
    }
    /* the normalization: ⟨G_0, X_0⟩ in the wide orientation (X_0 is the first saved iterate,
     * or with no steps the output itself, stored in A's orientation) */
    double dot = 0.0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            const size_t ia = (size_t)i * c + j, iw = tr ? (size_t)j * n + i : ia;
            dot += (double)G[iw] * (steps > 0 ? Xs[iw] : e->out->data[ia]);
        }
    const float radial = nrm > 0.0f ? (float)(dot / ((double)den * nrm)) : 0.0f;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            const size_t ia = (size_t)i * c + j, iw = tr ? (size_t)j * n + i : ia;
            gA[ia] += G[iw] / den - radial * A->data[ia];
        }
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_newton_schulz(ttt_ctx *ctx, const ttt_tensor *A, ttt_ns_set set, int steps) {
    const int grad = ctx->grad;
    if (!ttt_recording(ctx) || !A->requires_grad) {
        ctx->grad = 0; /* nothing to record: the composed form releases its temporaries */
        ttt_tensor *out = ttt_newton_schulz_composed(ctx, A, set, steps);
        ctx->grad = grad;
        return out;
    }
    int r, c;
    ttt_ns_matrix_dims(A, &r, &c);
    const size_t mn = (size_t)r * c;
    ttt_tensor *out = ttt_tensor_new(ctx, A->ndim, A->shape);
    float *save = ttt_tape_alloc(ctx, (steps > 0 ? (size_t)steps * mn : 1) * sizeof(float));
    /* the composed forward's own ops, unrecorded, saving the iterates */
    ctx->grad = 0;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    int tr;
    ttt_tensor *X = ns_wide(ctx, A, &tr);
    ttt_tensor *nrm = ttt_norm_fro(ctx, X), *den = ttt_add_scalar(ctx, nrm, 1e-7f);
    X = ns_unwide(ctx, ns_iterate(ctx, ttt_div(ctx, X, den), set, steps, save), A, tr);
    memcpy(out->data, X->data, mn * sizeof(float));
    const float nrm_v = nrm->data[0], den_v = den->data[0];
    ttt_arena_release(ctx->arena, mark);
    ctx->grad = grad;
    ttt_tape_entry *e = ttt_tape_record(ctx, ns_backward, out, (const ttt_tensor *const[]){A}, 1);
    TTT_ASSERT(e != NULL);
    e->name = "newton_schulz";
    e->aux = save;
    e->iarg[0] = (int)set;
    e->iarg[1] = steps;
    e->farg[0] = nrm_v;
    e->farg[1] = den_v;
    return out;
}
