/* The op layer (see ops.h for the contract, MATH.md §0 for the conventions).
 *
 * Every op here is one function: check shapes, allocate the result in ctx->arena, fill it. Nothing
 * is written to the inputs, and nothing is recorded yet (ctx->grad is reserved for the autodiff
 * tape; keeping each op a single inputs → output function is what lets a tape wrap it later).
 *
 * Numerics: matrix products go through OpenBLAS (cblas_sgemm / cblas_strsm, row-major with the
 * transpose flags, never an explicit transposed copy). Reductions accumulate in double so that long
 * sums (T up to 1e5 tokens, cumulative log gates) do not drift. Elementwise kernels are plain loops
 * over restrict pointers so the compiler can vectorize them. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* --------------------------------------------------------------------------------------------- */
/* shape checking                                                                                 */

/* A shape mismatch is a programmer error: say which op and which shapes, then abort through
 * TTT_ASSERT so the report also carries file:line of the failing check. */
static void shape_report(const char *op, const char *cond, const ttt_tensor *a,
                         const ttt_tensor *b) {
    char sa[64], sb[64];
    fprintf(stderr, "ttt: %s: shape check '%s' failed: %s%s%s\n", op, cond,
            a ? ttt_tensor_shape_str(a, sa, sizeof sa) : "", b ? " vs " : "",
            b ? ttt_tensor_shape_str(b, sb, sizeof sb) : "");
}

#define SHAPE_CHECK(cond, op, a, b)                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            shape_report((op), #cond, (a), (b));                                           \
            TTT_ASSERT(cond);                                                              \
        }                                                                                  \
    } while (0)

/* Number of rows when a tensor is read as a matrix (leading dims, cols): a 1-D tensor is one row
 * vector (MATH.md §0: row vectors). */
static size_t rows_of(const ttt_tensor *t) {
    size_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= (size_t)t->shape[i];
    return r;
}

static int max1(int x) { return x > 1 ? x : 1; }

/* --------------------------------------------------------------------------------------------- */
/* matrix products                                                                                */

/* One row-major sgemm: c = alpha·op(a)·op(b) + beta·c with op(a) (m,k), op(b) (k,n), c (m,n).
 * lda/ldb are the stored row lengths. BLAS rejects leading dimensions of 0, and k = 0 must still
 * scale c, so the degenerate sizes are handled here. */
static void sgemm_rm(float *c, float alpha, const float *a, int trans_a, int lda, const float *b,
                     int trans_b, int ldb, float beta, int m, int n, int k) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        size_t mn = (size_t)m * (size_t)n;
        if (beta == 0.0f)
            memset(c, 0, mn * sizeof *c);
        else
            for (size_t i = 0; i < mn; i++) c[i] *= beta;
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, max1(lda), b, max1(ldb),
                beta, c, max1(n));
}

/* The matrix view of a matmul operand: its last two dims (a 1-D tensor is a (1, n) row vector),
 * and how many matrices it holds along dim 0 (1 for a 2-D operand, shared by every batch). */
typedef struct mat_view {
    int batch; /* 0: not batched (shared) */
    int rows, cols;
} mat_view;

static mat_view mat_view_of(const ttt_tensor *t) {
    mat_view v = {0, 1, t->shape[0]};
    if (t->ndim == 2) {
        v.rows = t->shape[0];
        v.cols = t->shape[1];
    } else if (t->ndim == 3) {
        v.batch = t->shape[0];
        v.rows = t->shape[1];
        v.cols = t->shape[2];
    }
    return v;
}

ttt_tensor *ttt_matmul(ttt_ctx *ctx, const ttt_tensor *a, int trans_a, const ttt_tensor *b,
                       int trans_b) {
    SHAPE_CHECK(a->ndim <= 3 && b->ndim <= 3, "matmul", a, b);
    mat_view va = mat_view_of(a), vb = mat_view_of(b);
    int m = trans_a ? va.cols : va.rows, ka = trans_a ? va.rows : va.cols;
    int kb = trans_b ? vb.cols : vb.rows, n = trans_b ? vb.rows : vb.cols;
    SHAPE_CHECK(ka == kb, "matmul (inner dimensions)", a, b);
    SHAPE_CHECK(va.batch == 0 || vb.batch == 0 || va.batch == vb.batch, "matmul (batch)", a, b);
    int batch = va.batch ? va.batch : vb.batch;

    ttt_tensor *c;
    if (batch)
        c = ttt_tensor_3d(ctx, batch, m, n);
    else if (a->ndim == 1 && !trans_a && b->ndim == 2)
        c = ttt_tensor_1d(ctx, n); /* row vector times matrix stays a vector: q_t S (MATH.md §0) */
    else
        c = ttt_tensor_2d(ctx, m, n);

    size_t sa = va.batch ? (size_t)va.rows * va.cols : 0; /* batch strides, 0 = shared */
    size_t sb = vb.batch ? (size_t)vb.rows * vb.cols : 0;
    size_t sc = (size_t)m * n;
    int nb = batch ? batch : 1;
    for (int i = 0; i < nb; i++)
        sgemm_rm(c->data + i * sc, 1.0f, a->data + i * sa, trans_a, va.cols, b->data + i * sb,
                 trans_b, vb.cols, 0.0f, m, n, ka);
    return c;
}

ttt_tensor *ttt_gemm(ttt_ctx *ctx, float alpha, const ttt_tensor *a, int trans_a,
                     const ttt_tensor *b, int trans_b, float beta, const ttt_tensor *c) {
    SHAPE_CHECK(a->ndim == 2 && b->ndim == 2, "gemm", a, b);
    int m = trans_a ? a->shape[1] : a->shape[0], ka = trans_a ? a->shape[0] : a->shape[1];
    int kb = trans_b ? b->shape[1] : b->shape[0], n = trans_b ? b->shape[0] : b->shape[1];
    SHAPE_CHECK(ka == kb, "gemm (inner dimensions)", a, b);
    ttt_tensor *r = ttt_tensor_2d(ctx, m, n);
    if (c) {
        SHAPE_CHECK(c->ndim == 2 && c->shape[0] == m && c->shape[1] == n, "gemm (c)", r, c);
        memcpy(r->data, c->data, r->n * sizeof(float));
    } else {
        beta = 0.0f;
    }
    sgemm_rm(r->data, alpha, a->data, trans_a, a->shape[1], b->data, trans_b, b->shape[1], beta, m,
             n, ka);
    return r;
}

/* A vector: at most one dimension differs from 1 (so a (1, n) row slice also counts). */
static int is_vector(const ttt_tensor *t) {
    int big = 0;
    for (int i = 0; i < t->ndim; i++) big += t->shape[i] != 1;
    return big <= 1;
}

ttt_tensor *ttt_outer(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *y) {
    /* xᵀy is a rank-1 product with k = 1: x as an (m,1) column, y as a (1,n) row. */
    SHAPE_CHECK(is_vector(x) && is_vector(y), "outer (needs vectors)", x, y);
    int m = (int)x->n, n = (int)y->n;
    ttt_tensor *r = ttt_tensor_2d(ctx, m, n);
    sgemm_rm(r->data, 1.0f, x->data, 0, 1, y->data, 0, n, 0.0f, m, n, 1);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* elementwise, binary                                                                            */

typedef enum binop { BINOP_ADD, BINOP_SUB, BINOP_MUL, BINOP_DIV } binop;

/* out = a ∘ b elementwise, n elements. One loop per operator so each one vectorizes. */
static void binop_vv(float *restrict out, const float *restrict a, const float *restrict b,
                     size_t n, binop op) {
    switch (op) {
    case BINOP_ADD: for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i]; break;
    case BINOP_SUB: for (size_t i = 0; i < n; i++) out[i] = a[i] - b[i]; break;
    case BINOP_MUL: for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i]; break;
    case BINOP_DIV: for (size_t i = 0; i < n; i++) out[i] = a[i] / b[i]; break;
    }
}

/* out = a ∘ s for a scalar s. Division stays a division (not a multiply by 1/s) so results match
 * the same-shape path bit for bit. */
static void binop_vs(float *restrict out, const float *restrict a, float s, size_t n, binop op) {
    switch (op) {
    case BINOP_ADD: for (size_t i = 0; i < n; i++) out[i] = a[i] + s; break;
    case BINOP_SUB: for (size_t i = 0; i < n; i++) out[i] = a[i] - s; break;
    case BINOP_MUL: for (size_t i = 0; i < n; i++) out[i] = a[i] * s; break;
    case BINOP_DIV: for (size_t i = 0; i < n; i++) out[i] = a[i] / s; break;
    }
}

/* b is a row vector for a when its only non-unit dimension is the last one and it matches a's
 * last dimension. */
static int is_row_vector_for(const ttt_tensor *b, const ttt_tensor *a) {
    if (b->shape[b->ndim - 1] != TTT_COLS(a)) return 0;
    for (int i = 0; i + 1 < b->ndim; i++)
        if (b->shape[i] != 1) return 0;
    return 1;
}

static ttt_tensor *binary(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, binop op,
                          const char *name) {
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    if (ttt_tensor_same_shape(a, b)) {
        binop_vv(r->data, a->data, b->data, a->n, op);
    } else if (b->n == 1) {
        binop_vs(r->data, a->data, b->data[0], a->n, op);
    } else {
        SHAPE_CHECK(is_row_vector_for(b, a), name, a, b);
        size_t cols = (size_t)TTT_COLS(a), rows = rows_of(a);
        for (size_t i = 0; i < rows; i++)
            binop_vv(r->data + i * cols, a->data + i * cols, b->data, cols, op);
    }
    return r;
}

ttt_tensor *ttt_add(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return binary(ctx, a, b, BINOP_ADD, "add");
}
ttt_tensor *ttt_sub(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return binary(ctx, a, b, BINOP_SUB, "sub");
}
ttt_tensor *ttt_mul(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return binary(ctx, a, b, BINOP_MUL, "mul");
}
ttt_tensor *ttt_div(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return binary(ctx, a, b, BINOP_DIV, "div");
}

ttt_tensor *ttt_axpby(ttt_ctx *ctx, float alpha, const ttt_tensor *a, float beta,
                      const ttt_tensor *b) {
    SHAPE_CHECK(ttt_tensor_same_shape(a, b), "axpby", a, b);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    float *restrict o = r->data;
    const float *restrict x = a->data, *restrict y = b->data;
    for (size_t i = 0; i < a->n; i++) o[i] = alpha * x[i] + beta * y[i];
    return r;
}

ttt_tensor *ttt_scale(ttt_ctx *ctx, const ttt_tensor *a, float s) {
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    binop_vs(r->data, a->data, s, a->n, BINOP_MUL);
    return r;
}

ttt_tensor *ttt_add_scalar(ttt_ctx *ctx, const ttt_tensor *a, float s) {
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    binop_vs(r->data, a->data, s, a->n, BINOP_ADD);
    return r;
}

ttt_tensor *ttt_scale_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    SHAPE_CHECK(v->n == rows, "scale_rows (v needs one element per row of a)", a, v);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < rows; i++)
        binop_vs(r->data + i * cols, a->data + i * cols, v->data[i], cols, BINOP_MUL);
    return r;
}

ttt_tensor *ttt_scale_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    SHAPE_CHECK(v->n == cols, "scale_cols (v needs one element per column of a)", a, v);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < rows; i++)
        binop_vv(r->data + i * cols, a->data + i * cols, v->data, cols, BINOP_MUL);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* elementwise, unary                                                                             */

/* Every unary op: allocate a same-shape result and run one loop over `x` (input) into `o`. */
#define UNARY_OP(fname, expr)                                                              \
    ttt_tensor *fname(ttt_ctx *ctx, const ttt_tensor *a) {                                 \
        ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);                            \
        float *restrict o = r->data;                                                       \
        const float *restrict in = a->data;                                                \
        for (size_t i = 0; i < a->n; i++) {                                                \
            const float x = in[i];                                                         \
            o[i] = (expr);                                                                 \
        }                                                                                  \
        return r;                                                                          \
    }

/* σ(x) without overflow for either sign: with e = exp(−|x|) ∈ (0, 1],
 * σ(x) = 1/(1+e) for x ≥ 0 and e/(1+e) for x < 0; 1 − σ(x) is the other one, so neither is ever
 * formed by the cancelling subtraction 1 − σ. */
static inline float sigmoid_f(float x) {
    float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}
static inline float sigmoid_c(float x) { /* 1 − σ(x) = σ(−x) */
    float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0.0f ? e * s : s;
}

/* gelu (tanh approximation, ops.h): 0.5x(1 + tanh(u)) = x·σ(2u), u = √(2/π)(x + 0.044715x³).
 * The σ form keeps relative accuracy for negative x, where 1 + tanh(u) would cancel. */
#define GELU_C 0.7978845608028654f /* √(2/π) */
#define GELU_A 0.044715f

static inline float gelu_f(float x) {
    float u = GELU_C * (x + GELU_A * x * x * x);
    return x * sigmoid_f(2.0f * u);
}

/* d/dx x·σ(2u) = σ(2u) + 2x·σ(2u)(1 − σ(2u))·u'(x), u' = √(2/π)(1 + 3·0.044715x²).
 * Beyond |x| = 30 the second term is far below float resolution (σ(1−σ) ≈ e^(−2|u|) with
 * 2|u| > 2000); clamping there keeps x·u' from reaching inf and turning 0·inf into NaN. */
static inline float gelu_grad_f(float x) {
    float xc = fminf(fmaxf(x, -30.0f), 30.0f);
    float u = GELU_C * (xc + GELU_A * xc * xc * xc);
    float du = GELU_C * (1.0f + 3.0f * GELU_A * xc * xc);
    float s = sigmoid_f(2.0f * u), sc = sigmoid_c(2.0f * u);
    return s + 2.0f * xc * s * sc * du;
}

UNARY_OP(ttt_neg, -x)
UNARY_OP(ttt_exp, expf(x))
UNARY_OP(ttt_log, logf(x))
UNARY_OP(ttt_sqrt, sqrtf(x))
UNARY_OP(ttt_square, x * x)
UNARY_OP(ttt_sigmoid, sigmoid_f(x))
UNARY_OP(ttt_silu, x * sigmoid_f(x))
UNARY_OP(ttt_gelu, gelu_f(x))
/* softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^(−|x|)): no overflow for large x, no loss of
 * the tiny value for very negative x. */
UNARY_OP(ttt_softplus, fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))))
/* elu(x) + 1: x + 1 for x > 0, eˣ otherwise (elu = eˣ − 1 there, so the +1 cancels exactly). */
UNARY_OP(ttt_elu1, x > 0.0f ? x + 1.0f : expf(x))
UNARY_OP(ttt_relu, x > 0.0f ? x : 0.0f)
/* silu'(x) = σ(x)(1 + x(1 − σ(x))) (MATH.md §2, SwiGLU gradient). */
UNARY_OP(ttt_silu_grad, sigmoid_f(x) * (1.0f + x * sigmoid_c(x)))
UNARY_OP(ttt_gelu_grad, gelu_grad_f(x))

/* --------------------------------------------------------------------------------------------- */
/* reductions (accumulated in double)                                                             */

static ttt_tensor *scalar_result(ttt_ctx *ctx, double v) {
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    r->data[0] = (float)v;
    return r;
}

ttt_tensor *ttt_sum(ttt_ctx *ctx, const ttt_tensor *a) {
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += a->data[i];
    return scalar_result(ctx, s);
}

ttt_tensor *ttt_dot(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    SHAPE_CHECK(a->n == b->n, "dot (element counts)", a, b);
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += (double)a->data[i] * b->data[i];
    return scalar_result(ctx, s);
}

ttt_tensor *ttt_norm_fro(ttt_ctx *ctx, const ttt_tensor *a) {
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += (double)a->data[i] * a->data[i];
    return scalar_result(ctx, sqrt(s));
}

/* Scratch space for double accumulators, taken from the arena after the result and given back
 * before returning (ttt_arena_release), so an op's footprint is only its result. */
static double *scratch_doubles(ttt_ctx *ctx, size_t n) {
    double *p = ttt_arena_alloc(ctx->arena, n * sizeof(double));
    TTT_ASSERT(p != NULL);
    memset(p, 0, n * sizeof(double));
    return p;
}

ttt_tensor *ttt_sum_rows(ttt_ctx *ctx, const ttt_tensor *a) {
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)cols);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *restrict acc = scratch_doubles(ctx, cols); /* (n) */
    for (size_t i = 0; i < rows; i++) {
        const float *restrict row = a->data + i * cols; /* (n) */
        for (size_t j = 0; j < cols; j++) acc[j] += row[j];
    }
    for (size_t j = 0; j < cols; j++) r->data[j] = (float)acc[j];
    ttt_arena_release(ctx->arena, mark);
    return r;
}

ttt_tensor *ttt_sum_cols(ttt_ctx *ctx, const ttt_tensor *a) {
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict row = a->data + i * cols; /* (n) */
        double s = 0.0;
        for (size_t j = 0; j < cols; j++) s += row[j];
        r->data[i] = (float)s;
    }
    return r;
}

ttt_tensor *ttt_row_norms(ttt_ctx *ctx, const ttt_tensor *a) {
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict row = a->data + i * cols; /* (n) */
        double s = 0.0;
        for (size_t j = 0; j < cols; j++) s += (double)row[j] * row[j];
        r->data[i] = (float)sqrt(s);
    }
    return r;
}

/* Prefix sums along dim 0. Used for cumulative log gates G = cumsum(log α) (MATH.md §5.1, §5.3),
 * where the double running sum keeps late entries exact enough for exp(G_i − G_j). */
ttt_tensor *ttt_cumsum(ttt_ctx *ctx, const ttt_tensor *a) {
    SHAPE_CHECK(a->ndim == 1 || a->ndim == 2, "cumsum (1-D or 2-D)", a, NULL);
    size_t T = (size_t)a->shape[0], d = a->ndim == 2 ? (size_t)a->shape[1] : 1;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *restrict acc = scratch_doubles(ctx, d); /* (d) */
    for (size_t t = 0; t < T; t++) {
        const float *restrict in = a->data + t * d; /* (d) */
        float *restrict out = r->data + t * d;      /* (d) */
        for (size_t j = 0; j < d; j++) {
            acc[j] += in[j];
            out[j] = (float)acc[j];
        }
    }
    ttt_arena_release(ctx->arena, mark);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* norms                                                                                          */

/* Mean and 1/sqrt(biased variance + eps) of one row, two-pass in double. */
static void row_moments(double *mean, double *rstd, const float *restrict x, size_t n, float eps) {
    double s = 0.0;
    for (size_t j = 0; j < n; j++) s += x[j];
    double mu = n ? s / (double)n : 0.0, v = 0.0;
    for (size_t j = 0; j < n; j++) {
        double d = x[j] - mu;
        v += d * d;
    }
    v = n ? v / (double)n : 0.0;
    *mean = mu;
    *rstd = 1.0 / sqrt(v + (double)eps);
}

static void check_norm_param(const char *op, const ttt_tensor *x, const ttt_tensor *p) {
    if (p) SHAPE_CHECK(p->n == (size_t)TTT_COLS(x), op, x, p);
}

ttt_tensor *ttt_layernorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma,
                          const ttt_tensor *beta, float eps) {
    check_norm_param("layernorm (gamma)", x, gamma);
    check_norm_param("layernorm (beta)", x, beta);
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    const float *restrict g = gamma ? gamma->data : NULL; /* (n) or NULL */
    const float *restrict b = beta ? beta->data : NULL;   /* (n) or NULL */
    for (size_t i = 0; i < rows; i++) {
        const float *restrict xr = x->data + i * n; /* (n) */
        float *restrict yr = r->data + i * n;       /* (n) */
        double mu, rs;
        row_moments(&mu, &rs, xr, n, eps);
        float m = (float)mu, s = (float)rs;
        for (size_t j = 0; j < n; j++) yr[j] = (xr[j] - m) * s;
        if (g)
            for (size_t j = 0; j < n; j++) yr[j] *= g[j];
        if (b)
            for (size_t j = 0; j < n; j++) yr[j] += b[j];
    }
    return r;
}

/* With x̂ = (x − μ)·r, r = 1/sqrt(var + eps), and ĝ = dy ⊙ γ, the gradient of Σ dy·LN(x) is
 *   dx = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂))
 * (differentiating μ and var, both biased means over the row). This is the "through LN backward"
 * step of the TTT reconstruction loss (MATH.md §2). */
ttt_tensor *ttt_layernorm_backward(ttt_ctx *ctx, const ttt_tensor *dy, const ttt_tensor *x,
                                   const ttt_tensor *gamma, float eps) {
    SHAPE_CHECK(ttt_tensor_same_shape(dy, x), "layernorm_backward (dy vs x)", dy, x);
    check_norm_param("layernorm_backward (gamma)", x, gamma);
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    const float *restrict g = gamma ? gamma->data : NULL; /* (n) or NULL */
    for (size_t i = 0; i < rows; i++) {
        const float *restrict xr = x->data + i * n;   /* (n) */
        const float *restrict dyr = dy->data + i * n; /* (n) */
        float *restrict dxr = r->data + i * n;        /* (n) */
        double mu, rs;
        row_moments(&mu, &rs, xr, n, eps);
        double sg = 0.0, sgx = 0.0; /* Σ ĝ, Σ ĝ x̂ */
        for (size_t j = 0; j < n; j++) {
            double gh = g ? (double)dyr[j] * g[j] : (double)dyr[j];
            sg += gh;
            sgx += gh * ((xr[j] - mu) * rs);
        }
        float mg = (float)(sg / (double)n), mgx = (float)(sgx / (double)n);
        float m = (float)mu, s = (float)rs;
        for (size_t j = 0; j < n; j++) {
            float gh = g ? dyr[j] * g[j] : dyr[j];
            float xh = (xr[j] - m) * s;
            dxr[j] = s * (gh - mg - xh * mgx);
        }
    }
    return r;
}

ttt_tensor *ttt_rmsnorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma, float eps) {
    check_norm_param("rmsnorm (gamma)", x, gamma);
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    const float *restrict g = gamma ? gamma->data : NULL; /* (n) or NULL */
    for (size_t i = 0; i < rows; i++) {
        const float *restrict xr = x->data + i * n; /* (n) */
        float *restrict yr = r->data + i * n;       /* (n) */
        double ss = 0.0;
        for (size_t j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
        float s = (float)(1.0 / sqrt((n ? ss / (double)n : 0.0) + (double)eps));
        for (size_t j = 0; j < n; j++) yr[j] = xr[j] * s;
        if (g)
            for (size_t j = 0; j < n; j++) yr[j] *= g[j];
    }
    return r;
}

ttt_tensor *ttt_l2norm_rows(ttt_ctx *ctx, const ttt_tensor *x, float eps) {
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict xr = x->data + i * n; /* (n) */
        float *restrict yr = r->data + i * n;       /* (n) */
        double ss = 0.0;
        for (size_t j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
        float s = (float)(1.0 / sqrt(ss + (double)eps));
        for (size_t j = 0; j < n; j++) yr[j] = xr[j] * s;
    }
    return r;
}

/* Softmax of each row after subtracting its max (so exp never overflows). -INFINITY entries are
 * masked positions (causal_fill, log M in MATH.md §4) and get exactly 0; a row with no finite
 * entry at all (fully masked) is all zeros rather than 0/0 = NaN. */
ttt_tensor *ttt_softmax_rows(ttt_ctx *ctx, const ttt_tensor *a) {
    size_t rows = rows_of(a), n = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict x = a->data + i * n; /* (n) */
        float *restrict y = r->data + i * n;       /* (n) */
        float mx = -INFINITY;
        for (size_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
        if (mx == -INFINITY) {
            memset(y, 0, n * sizeof *y);
            continue;
        }
        double s = 0.0;
        for (size_t j = 0; j < n; j++) {
            y[j] = expf(x[j] - mx);
            s += y[j];
        }
        float inv = (float)(1.0 / s);
        for (size_t j = 0; j < n; j++) y[j] *= inv;
    }
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* masks                                                                                          */

/* Masks act on the last two dims; leading dims (batch, heads) are independent copies. */
static size_t mats_of(const ttt_tensor *t) {
    size_t b = 1;
    for (int i = 0; i + 2 < t->ndim; i++) b *= (size_t)t->shape[i];
    return b;
}

ttt_tensor *ttt_tril(ttt_ctx *ctx, const ttt_tensor *a, int k) {
    SHAPE_CHECK(a->ndim >= 2, "tril (needs a matrix)", a, NULL);
    size_t nb = mats_of(a);
    long m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t b = 0; b < nb; b++)
        for (long i = 0; i < m; i++) {
            const float *restrict x = a->data + (b * (size_t)m + (size_t)i) * (size_t)n; /* (n) */
            float *restrict y = r->data + (b * (size_t)m + (size_t)i) * (size_t)n;       /* (n) */
            long keep = i + k + 1; /* columns j < keep, i.e. j ≤ i + k */
            keep = keep < 0 ? 0 : keep > n ? n : keep;
            memcpy(y, x, (size_t)keep * sizeof *y);
            memset(y + keep, 0, (size_t)(n - keep) * sizeof *y);
        }
    return r;
}

/* D_ij = exp(g_i − g_j) for j ≤ i (MATH.md §5.1, Γ in §5.3). Taking exp of the difference keeps
 * every entry in (0, 1] for decaying gates even when exp(g_i) alone would underflow to 0. */
ttt_tensor *ttt_decay_mask(ttt_ctx *ctx, const ttt_tensor *g, int strict) {
    SHAPE_CHECK(g->ndim == 1, "decay_mask (g must be 1-D)", g, NULL);
    int T = g->shape[0];
    ttt_tensor *r = ttt_tensor_2d(ctx, T, T);
    const float *restrict gv = g->data; /* (T) */
    for (int i = 0; i < T; i++) {
        float *restrict d = r->data + (size_t)i * T; /* (T) */
        int end = strict ? i : i + 1;                /* columns j < end are inside the mask */
        float gi = gv[i];
        for (int j = 0; j < end; j++) d[j] = expf(gi - gv[j]);
        memset(d + end, 0, (size_t)(T - end) * sizeof *d);
    }
    return r;
}

ttt_tensor *ttt_causal_fill(ttt_ctx *ctx, const ttt_tensor *a) {
    SHAPE_CHECK(a->ndim >= 2 && a->shape[a->ndim - 2] == a->shape[a->ndim - 1],
                "causal_fill (needs square matrices)", a, NULL);
    size_t nb = mats_of(a), m = (size_t)a->shape[a->ndim - 1];
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t b = 0; b < nb; b++)
        for (size_t i = 0; i < m; i++) {
            const float *restrict x = a->data + (b * m + i) * m; /* (m) */
            float *restrict y = r->data + (b * m + i) * m;       /* (m) */
            memcpy(y, x, (i + 1) * sizeof *y);
            for (size_t j = i + 1; j < m; j++) y[j] = -INFINITY; /* x + (−inf) */
        }
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* triangular solve                                                                               */

/* Forward substitution L·X = B through strsm on a copy of B (strsm works in place). Used for the
 * WY/UT transform A⁻¹ of the chunkwise delta rule (MATH.md §5.3) with unit diagonal. */
ttt_tensor *ttt_solve_lower(ttt_ctx *ctx, const ttt_tensor *L, const ttt_tensor *B, int unit) {
    SHAPE_CHECK(L->ndim == 2 && L->shape[0] == L->shape[1], "solve_lower (L square)", L, B);
    SHAPE_CHECK((B->ndim == 1 || B->ndim == 2) && B->shape[0] == L->shape[0],
                "solve_lower (rows of B)", L, B);
    int n = L->shape[0], m = B->ndim == 2 ? B->shape[1] : 1;
    ttt_tensor *X = ttt_tensor_copy(ctx, B);
    if (n > 0 && m > 0)
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans,
                    unit ? CblasUnit : CblasNonUnit, n, m, 1.0f, L->data, n, X->data, m);
    return X;
}

/* --------------------------------------------------------------------------------------------- */
/* shape                                                                                          */

/* Swap the last two dims (batched over a leading dim for 3-D). Tiled so that both the reads and
 * the writes stay within a few cache lines per tile. */
ttt_tensor *ttt_transpose(ttt_ctx *ctx, const ttt_tensor *a) {
    SHAPE_CHECK(a->ndim == 2 || a->ndim == 3, "transpose (2-D or 3-D)", a, NULL);
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    int m = shp[a->ndim - 2], n = shp[a->ndim - 1];
    shp[a->ndim - 2] = n;
    shp[a->ndim - 1] = m;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t nb = mats_of(a), mn = (size_t)m * n;
    enum { TILE = 32 };
    for (size_t b = 0; b < nb; b++) {
        const float *restrict x = a->data + b * mn; /* (m, n) */
        float *restrict y = r->data + b * mn;       /* (n, m) */
        for (int i0 = 0; i0 < m; i0 += TILE)
            for (int j0 = 0; j0 < n; j0 += TILE) {
                int i1 = i0 + TILE < m ? i0 + TILE : m, j1 = j0 + TILE < n ? j0 + TILE : n;
                for (int i = i0; i < i1; i++)
                    for (int j = j0; j < j1; j++) y[(size_t)j * m + i] = x[(size_t)i * n + j];
            }
    }
    return r;
}

/* Elements per index of dim 0. */
static size_t row_stride(const ttt_tensor *t) {
    return t->shape[0] ? t->n / (size_t)t->shape[0] : 0;
}

ttt_tensor *ttt_slice_rows(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1) {
    if (!(0 <= r0 && r0 <= r1 && r1 <= a->shape[0])) {
        char s[64];
        fprintf(stderr, "ttt: slice_rows: rows [%d, %d) out of range for %s\n", r0, r1,
                ttt_tensor_shape_str(a, s, sizeof s));
        TTT_ASSERT(0 <= r0 && r0 <= r1 && r1 <= a->shape[0]);
    }
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = r1 - r0;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t st = row_stride(a);
    if (r->n) memcpy(r->data, a->data + (size_t)r0 * st, r->n * sizeof(float));
    return r;
}

ttt_tensor *ttt_concat_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    int ok = a->ndim == b->ndim;
    for (int i = 1; ok && i < a->ndim; i++) ok = a->shape[i] == b->shape[i];
    SHAPE_CHECK(ok, "concat_rows (all dims but the first must match)", a, b);
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = a->shape[0] + b->shape[0];
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    if (a->n) memcpy(r->data, a->data, a->n * sizeof(float));
    if (b->n) memcpy(r->data + a->n, b->data, b->n * sizeof(float));
    return r;
}

ttt_tensor *ttt_reshape(ttt_ctx *ctx, const ttt_tensor *a, int ndim, const int *shape) {
    TTT_ASSERT(ndim >= 1 && ndim <= TTT_MAX_DIMS);
    ttt_tensor view = ttt_tensor_view(a->data, ndim, shape);
    SHAPE_CHECK(view.n == a->n, "reshape (element counts)", a, &view);
    ttt_tensor *r = ttt_arena_alloc(ctx->arena, sizeof *r);
    TTT_ASSERT(r != NULL);
    *r = view;
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* comparisons                                                                                    */

/* NaN anywhere makes the result NaN: an equivalence report must never hide a NaN behind a
 * plausible maximum. */
float ttt_max_abs(const ttt_tensor *a) {
    float m = 0.0f;
    for (size_t i = 0; i < a->n; i++) {
        float d = fabsf(a->data[i]);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

float ttt_max_abs_diff(const ttt_tensor *a, const ttt_tensor *b) {
    SHAPE_CHECK(a->n == b->n, "max_abs_diff (element counts)", a, b);
    float m = 0.0f;
    for (size_t i = 0; i < a->n; i++) {
        float d = fabsf(a->data[i] - b->data[i]);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

double ttt_rel_rms_diff(const ttt_tensor *a, const ttt_tensor *b) {
    SHAPE_CHECK(a->n == b->n, "rel_rms_diff (element counts)", a, b);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a->n; i++) {
        double d = (double)a->data[i] - b->data[i];
        num += d * d;
        den += (double)b->data[i] * b->data[i];
    }
    if (num == 0.0) return 0.0; /* identical (including both zero) */
    return sqrt(num) / sqrt(den); /* reference zero but a not: +inf */
}

long ttt_find_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}
