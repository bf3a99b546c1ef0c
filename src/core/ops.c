/* The op layer (see ops.h for the contract, docs/math.md §0 for the conventions).
 *
 * Every op here is a forward/backward pair. The forward checks shapes, allocates the result in
 * ctx->arena, fills it, and — only when ctx->grad is set — records a tape entry (autograd.h) naming
 * its backward. The backward, written right above its forward, adds Jᵀ·dy to the gradient of each
 * input that requires grad (ttt_grad gives NULL for the others). Nothing is ever written to an
 * input's data; backward functions read the inputs and the output straight from the tensors, which
 * is why ops must stay functional.
 *
 * Numerics: matrix products go through OpenBLAS (cblas_sgemm / cblas_strsm, row-major with the
 * transpose flags, never an explicit transposed copy). Reductions accumulate in double so that long
 * sums (T up to 1e5 tokens, cumulative log gates) do not drift; the backward of a reduction over
 * many terms (broadcast operands, parameters shared across rows) accumulates in double too.
 * Elementwise kernels are plain loops over restrict pointers so the compiler can vectorize them. */
#include "ops.h"

#include "cuda_kernels.h" /* op codes of the device half */
#include "ops_device.h"

#include "blas.h"
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"    /* the host twin of mixed precision's rounding */
#include "fastexp.h" /* ttt_fast_expf for the sigmoid family */

/* --------------------------------------------------------------------------------------------- */
/* shape checking, recording                                                                      */

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

static ttt_tape_entry *record_named(ttt_ctx *ctx, const char *name, ttt_backward_fn fn,
                                    ttt_tensor *r, const ttt_tensor *const *in, int n) {
    ttt_tape_entry *e = ttt_tape_record(ctx, fn, r, in, n);
    if (e) e->name = name;
    return e;
}

/* Record r = op(inputs...) with backward fn; evaluates to the entry, or NULL when nothing was
 * recorded. In no-grad mode the whole cost is the test of ctx->grad. */
#define RECORD(ctx, name, fn, r, ...)                                                      \
    ((ctx)->grad ? record_named((ctx), (name), (fn), (r),                                  \
                                (const ttt_tensor *const[]){__VA_ARGS__},                  \
                                (int)(sizeof((const ttt_tensor *const[]){__VA_ARGS__}) /   \
                                      sizeof(const ttt_tensor *)))                         \
                 : NULL)

/* Number of rows when a tensor is read as a matrix (leading dims, cols): a 1-D tensor is one row
 * vector (docs/math.md §0: row vectors). */
static size_t rows_of(const ttt_tensor *t) {
    size_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= (size_t)t->shape[i];
    return r;
}

static int max1(int x) { return x > 1 ? x : 1; }

/* Scratch space for double accumulators, taken from the arena and given back before returning
 * (ttt_arena_release), so an op's footprint is only its result. In a backward function, take the
 * mark only after every ttt_grad call: ttt_grad may allocate, and the release would free it. */
static double *scratch_doubles(ttt_ctx *ctx, size_t n) {
    double *p = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(double));
    TTT_ASSERT(p != NULL);
    memset(p, 0, n * sizeof(double));
    return p;
}

static float *scratch_floats(ttt_ctx *ctx, size_t n) {
    float *p = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(float));
    TTT_ASSERT(p != NULL);
    return p;
}

/* g += acc (n), rounding the double accumulators once. */
static void add_doubles(float *restrict g, const double *restrict acc, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] += (float)acc[i];
}

/* The same for a gradient from ttt_grad_acc: g = acc when this is its first writer (add = 0),
 * else g += acc (autograd.h "First writer assigns"). */
static void put_doubles(float *restrict g, const double *restrict acc, size_t n, int add) {
    if (add)
        add_doubles(g, acc, n);
    else
        for (size_t i = 0; i < n; i++) g[i] = (float)acc[i];
}

/* g = v (n) for the first writer, g += v otherwise. */
static void put_floats(float *restrict g, const float *restrict v, size_t n, int add) {
    if (add)
        for (size_t i = 0; i < n; i++) g[i] += v[i];
    else
        memcpy(g, v, n * sizeof *g);
}

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

/* Under ttt_ctx.mixed the host's products take their operands rounded to bfloat16, summed in
 * fp32 as before: the device's mixed precision (docs/gpu.md "bfloat16 training") done on the
 * host, which tests/test_train_bf16.c uses as its stand-in where there is no GPU. The trainer
 * never asks it of the host (train.dtype: bfloat16 is refused there). x (n) rounded into arena
 * scratch, or x itself without mixed precision; the caller releases the scratch. */
static const float *mixed_operand(ttt_ctx *ctx, const float *x, size_t n) {
    if (!ctx->mixed) return x;
    float *r = scratch_floats(ctx, n);
    for (size_t i = 0; i < n; i++) r[i] = ttt_bf16_round(x[i]);
    return r;
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

/* Gradients of C = alpha·op(A)·op(B) (batched like ttt_matmul) given dC, into ga / gb when
 * non-NULL: assigned (beta = 0) where add_a / add_b is 0 (their first writer, autograd.h), else
 * accumulated (beta = 1). With op(A) (m,k), op(B) (k,n):
 *   d op(A) = alpha·dC·op(B)ᵀ,  d op(B) = alpha·op(A)ᵀ·dC,
 * and a transposed operand receives the transpose, written as a product with swapped factors so
 * that no transposed copy is made. A shared (2-D) operand of a batched product sums its gradient
 * over the batch, which beta = 1 after the first matrix does by itself. */
static void matmul_grads(ttt_ctx *ctx, float *ga, int add_a, float *gb, int add_b, float alpha,
                         const ttt_tensor *a, int ta, const ttt_tensor *b, int tb,
                         const float *dc) {
    mat_view va = mat_view_of(a), vb = mat_view_of(b);
    int m = ta ? va.cols : va.rows, k = ta ? va.rows : va.cols, n = tb ? vb.rows : vb.cols;
    int batch = va.batch ? va.batch : vb.batch, nb = batch ? batch : 1;
    size_t sa = va.batch ? (size_t)va.rows * va.cols : 0; /* batch strides, 0 = shared */
    size_t sb = vb.batch ? (size_t)vb.rows * vb.cols : 0;
    size_t sc = (size_t)m * n;
    /* under mixed precision: bf16-rounded copies, released at the end (after the ttt_grad
     * calls of the caller, autograd.h) */
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const float *dcm = mixed_operand(ctx, dc, sc * nb);
    const float *am = gb ? mixed_operand(ctx, a->data, a->n) : a->data;
    const float *bm = ga ? mixed_operand(ctx, b->data, b->n) : b->data;
    for (int i = 0; i < nb; i++) {
        const float *dci = dcm + i * sc;       /* (m, n) */
        const float *ai = am + i * sa;         /* stored (va.rows, va.cols) */
        const float *bi = bm + i * sb;         /* stored (vb.rows, vb.cols) */
        /* a batched operand's matrix i is written once; a shared one by every i */
        const float beta_a = add_a || (i > 0 && !sa) ? 1.0f : 0.0f;
        const float beta_b = add_b || (i > 0 && !sb) ? 1.0f : 0.0f;
        if (ga) {
            if (!ta) /* dA (m,k) = dC (m,n) · op(B)ᵀ (n,k) */
                sgemm_rm(ga + i * sa, alpha, dci, 0, n, bi, !tb, vb.cols, beta_a, m, k, n);
            else /* dA (k,m) = op(B) (k,n) · dCᵀ (n,m) */
                sgemm_rm(ga + i * sa, alpha, bi, tb, vb.cols, dci, 1, n, beta_a, k, m, n);
        }
        if (gb) {
            if (!tb) /* dB (k,n) = op(A)ᵀ (k,m) · dC (m,n) */
                sgemm_rm(gb + i * sb, alpha, ai, !ta, va.cols, dci, 0, n, beta_b, k, n, m);
            else /* dB (n,k) = dCᵀ (n,m) · op(A) (m,k) */
                sgemm_rm(gb + i * sb, alpha, dci, 1, n, ai, ta, va.cols, beta_b, n, k, m);
        }
    }
    if (ctx->mixed) ttt_arena_release(ctx->arena, mark);
}

static void matmul_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dc) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    int add_a, add_b;
    float *ga = ttt_grad_acc(ctx, a, &add_a);
    if (b == a) { /* a·aᵀ: the second product adds to the first */
        matmul_grads(ctx, ga, add_a, NULL, 1, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
        matmul_grads(ctx, NULL, 1, ga, 1, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
        return;
    }
    float *gb = ttt_grad_acc(ctx, b, &add_b);
    matmul_grads(ctx, ga, add_a, gb, add_b, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
}

ttt_tensor *ttt_matmul(ttt_ctx *ctx, const ttt_tensor *a, int trans_a, const ttt_tensor *b,
                       int trans_b) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b)) return ttt_dev_matmul(ctx, a, trans_a, b, trans_b);
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
        c = ttt_tensor_1d(ctx, n); /* row vector times matrix stays a vector: q_t S (docs/math.md §0) */
    else
        c = ttt_tensor_2d(ctx, m, n);

    size_t sa = va.batch ? (size_t)va.rows * va.cols : 0; /* batch strides, 0 = shared */
    size_t sb = vb.batch ? (size_t)vb.rows * vb.cols : 0;
    size_t sc = (size_t)m * n;
    int nb = batch ? batch : 1;
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const float *am = mixed_operand(ctx, a->data, a->n), *bm = mixed_operand(ctx, b->data, b->n);
    for (int i = 0; i < nb; i++)
        sgemm_rm(c->data + i * sc, 1.0f, am + i * sa, trans_a, va.cols, bm + i * sb, trans_b,
                 vb.cols, 0.0f, m, n, ka);
    if (ctx->mixed) ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *e = RECORD(ctx, "matmul", matmul_backward, c, a, b);
    if (e) {
        e->iarg[0] = trans_a;
        e->iarg[1] = trans_b;
        e->kind = TTT_TAPE_PRODUCT;
    }
    return c;
}

/* r = alpha·op(a)·op(b) + beta·c: the product part as matmul (scaled), dc = beta·dr. */
static void gemm_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1], *c = e->in[2];
    float alpha = e->farg[0], beta = e->farg[1];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    matmul_grads(ctx, ga, 1, gb, 1, alpha, a, e->iarg[0], b, e->iarg[1], dr);
    float *gc = ttt_grad(ctx, c);
    if (gc)
        for (size_t i = 0; i < c->n; i++) gc[i] += beta * dr[i];
}

ttt_tensor *ttt_gemm(ttt_ctx *ctx, float alpha, const ttt_tensor *a, int trans_a,
                     const ttt_tensor *b, int trans_b, float beta, const ttt_tensor *c) {
    if (TTT_OPS_ON_DEVICE3(ctx, a, b, c))
        return ttt_dev_gemm(ctx, alpha, a, trans_a, b, trans_b, beta, c);
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
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    sgemm_rm(r->data, alpha, mixed_operand(ctx, a->data, a->n), trans_a, a->shape[1],
             mixed_operand(ctx, b->data, b->n), trans_b, b->shape[1], beta, m, n, ka);
    if (ctx->mixed) ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *e = RECORD(ctx, "gemm", gemm_backward, r, a, b, c);
    if (e) {
        e->iarg[0] = trans_a;
        e->iarg[1] = trans_b;
        e->farg[0] = alpha;
        e->farg[1] = beta;
    }
    return r;
}

/* A vector: at most one dimension differs from 1 (so a (1, n) row slice also counts). */
static int is_vector(const ttt_tensor *t) {
    int big = 0;
    for (int i = 0; i < t->ndim; i++) big += t->shape[i] != 1;
    return big <= 1;
}

/* r = xᵀy (m,n): dx = dr·yᵀ (m), dy = x·dr (n), both as rank-1 sgemms. */
static void outer_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *x = e->in[0], *y = e->in[1];
    int m = (int)x->n, n = (int)y->n;
    float *gx = ttt_grad(ctx, x), *gy = ttt_grad(ctx, y);
    if (gx) sgemm_rm(gx, 1.0f, dr, 0, n, y->data, 1, n, 1.0f, m, 1, n);
    if (gy) sgemm_rm(gy, 1.0f, x->data, 0, m, dr, 0, n, 1.0f, 1, n, m);
}

ttt_tensor *ttt_outer(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *y) {
    if (TTT_OPS_ON_DEVICE(ctx, x, y)) return ttt_dev_outer(ctx, x, y);
    /* xᵀy is a rank-1 product with k = 1: x as an (m,1) column, y as a (1,n) row. */
    SHAPE_CHECK(is_vector(x) && is_vector(y), "outer (needs vectors)", x, y);
    int m = (int)x->n, n = (int)y->n;
    ttt_tensor *r = ttt_tensor_2d(ctx, m, n);
    sgemm_rm(r->data, 1.0f, x->data, 0, 1, y->data, 0, n, 0.0f, m, n, 1);
    RECORD(ctx, "outer", outer_backward, r, x, y);
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

/* Backward of r = a ∘ b with b broadcast as in the forward (same shape, scalar, or row vector):
 *   add: da = dr, db = dr;   sub: da = dr, db = −dr;
 *   mul: da = dr·b, db = dr·a;   div: da = dr/b, db = −dr·a/b²;
 * and db is summed over the positions a broadcast b to (all of them for a scalar, the rows for a
 * row vector), in double. a and b may be the same tensor (x·x): the two contributions are added
 * in separate loops. */
static void binary_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    const binop op = (binop)e->iarg[0];
    /* both write every element of their gradient (b's summed over the broadcast); for a = b
     * the second one finds the first one's values and adds */
    int add_a, add_b;
    float *ga = ttt_grad_acc(ctx, a, &add_a);
    /* b's element for a's element (i, j) is bd[i·rs + j·cs] */
    const int same = ttt_tensor_same_shape(a, b), scalar = !same && b->n == 1;
    const size_t rows = same ? 1 : rows_of(a), cols = same ? a->n : (size_t)TTT_COLS(a);
    const size_t rs = same ? cols : 0, cs = scalar ? 0 : 1;
    const float *ad = a->data, *bd = b->data;
    if (ga) {
        for (size_t i = 0; i < rows; i++) {
            const float *dri = dr + i * cols, *bi = bd + i * rs;
            float *gai = ga + i * cols;
            if (add_a) {
                switch (op) {
                case BINOP_ADD:
                case BINOP_SUB: for (size_t j = 0; j < cols; j++) gai[j] += dri[j]; break;
                case BINOP_MUL: for (size_t j = 0; j < cols; j++) gai[j] += dri[j] * bi[j * cs]; break;
                case BINOP_DIV: for (size_t j = 0; j < cols; j++) gai[j] += dri[j] / bi[j * cs]; break;
                }
            } else {
                switch (op) {
                case BINOP_ADD:
                case BINOP_SUB: memcpy(gai, dri, cols * sizeof *gai); break;
                case BINOP_MUL: for (size_t j = 0; j < cols; j++) gai[j] = dri[j] * bi[j * cs]; break;
                case BINOP_DIV: for (size_t j = 0; j < cols; j++) gai[j] = dri[j] / bi[j * cs]; break;
                }
            }
        }
    }
    float *gb = ttt_grad_acc(ctx, b, &add_b);
    if (gb && same && op != BINOP_DIV) {
        /* nothing is summed: the double of the general case rounds exactly what float does
         * (a product of two floats is exact in double), so one float pass gives the same bits */
        const float sg = op == BINOP_SUB ? -1.0f : 1.0f;
        if (op == BINOP_MUL && add_b)
            for (size_t j = 0; j < cols; j++) gb[j] += dr[j] * ad[j];
        else if (op == BINOP_MUL)
            for (size_t j = 0; j < cols; j++) gb[j] = dr[j] * ad[j];
        else if (add_b)
            for (size_t j = 0; j < cols; j++) gb[j] += sg * dr[j];
        else
            for (size_t j = 0; j < cols; j++) gb[j] = sg * dr[j];
    } else if (gb) {
        ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        size_t nb = same ? cols : scalar ? 1 : cols;
        double *acc = scratch_doubles(ctx, nb); /* (b->n) */
        for (size_t i = 0; i < rows; i++) {
            const float *dri = dr + i * cols, *ai = ad + i * cols, *bi = bd + i * rs;
            for (size_t j = 0; j < cols; j++) {
                double d = dri[j], bv = bi[j * cs], v;
                switch (op) {
                case BINOP_ADD: v = d; break;
                case BINOP_SUB: v = -d; break;
                case BINOP_MUL: v = d * ai[j]; break;
                default: v = -d * ai[j] / (bv * bv); break;
                }
                acc[j * cs] += v;
            }
        }
        put_doubles(gb, acc, nb, add_b);
        ttt_arena_release(ctx->arena, mark);
    }
}

static ttt_tensor *binary(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, binop op,
                          const char *name) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b)) {
        static const int map_of[] = {[BINOP_ADD] = TTT_MAP_ADD, [BINOP_SUB] = TTT_MAP_SUB,
                                     [BINOP_MUL] = TTT_MAP_MUL, [BINOP_DIV] = TTT_MAP_DIV};
        return ttt_dev_binary(ctx, a, b, map_of[op], name);
    }
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
    ttt_tape_entry *e = RECORD(ctx, name, binary_backward, r, a, b);
    if (e) e->iarg[0] = (int)op, e->kind = op == BINOP_ADD ? TTT_TAPE_SUM : TTT_TAPE_OTHER;
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

/* r = alpha·a + beta·b: da = alpha·dr, db = beta·dr. */
static void axpby_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    for (int k = 0; k < 2; k++) {
        float *g = ttt_grad(ctx, e->in[k]), s = e->farg[k];
        if (g)
            for (size_t i = 0; i < e->out->n; i++) g[i] += s * dr[i];
    }
}

ttt_tensor *ttt_axpby(ttt_ctx *ctx, float alpha, const ttt_tensor *a, float beta,
                      const ttt_tensor *b) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b)) return ttt_dev_axpby(ctx, alpha, a, beta, b);
    SHAPE_CHECK(ttt_tensor_same_shape(a, b), "axpby", a, b);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    float *restrict o = r->data;
    const float *restrict x = a->data, *restrict y = b->data;
    for (size_t i = 0; i < a->n; i++) o[i] = alpha * x[i] + beta * y[i];
    ttt_tape_entry *e = RECORD(ctx, "axpby", axpby_backward, r, a, b);
    if (e) {
        e->farg[0] = alpha;
        e->farg[1] = beta;
    }
    return r;
}

/* r = s·a (farg[0] = s; add_scalar records s = 1): da = s·dr. */
static void scale_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    int add;
    float *restrict g = ttt_grad_acc(ctx, e->in[0], &add);
    const float s = e->farg[0];
    if (add)
        for (size_t i = 0; i < e->out->n; i++) g[i] += s * dr[i];
    else
        for (size_t i = 0; i < e->out->n; i++) g[i] = s * dr[i];
}

ttt_tensor *ttt_scale(ttt_ctx *ctx, const ttt_tensor *a, float s) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_scale(ctx, a, s, 0);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    binop_vs(r->data, a->data, s, a->n, BINOP_MUL);
    ttt_tape_entry *e = RECORD(ctx, "scale", scale_backward, r, a);
    if (e) e->farg[0] = s;
    return r;
}

ttt_tensor *ttt_add_scalar(ttt_ctx *ctx, const ttt_tensor *a, float s) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_scale(ctx, a, s, 1);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    binop_vs(r->data, a->data, s, a->n, BINOP_ADD);
    ttt_tape_entry *e = RECORD(ctx, "add_scalar", scale_backward, r, a);
    if (e) e->farg[0] = 1.0f;
    return r;
}

/* r_ij = a_ij·v_i: da_ij = dr_ij·v_i, dv_i = Σ_j dr_ij·a_ij. */
static void scale_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *v = e->in[1];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    int add_a;
    float *ga = ttt_grad_acc(ctx, a, &add_a), *gv = ttt_grad(ctx, v);
    for (size_t i = 0; i < rows; i++) {
        const float *dri = dr + i * cols, *ai = a->data + i * cols;
        if (ga) {
            const float vi = v->data[i];
            if (add_a)
                for (size_t j = 0; j < cols; j++) ga[i * cols + j] += dri[j] * vi;
            else
                for (size_t j = 0; j < cols; j++) ga[i * cols + j] = dri[j] * vi;
        }
        if (gv) {
            double s = 0.0;
            for (size_t j = 0; j < cols; j++) s += (double)dri[j] * ai[j];
            gv[i] += (float)s;
        }
    }
}

ttt_tensor *ttt_scale_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    if (TTT_OPS_ON_DEVICE(ctx, a, v)) return ttt_dev_scale_rows(ctx, a, v);
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    SHAPE_CHECK(v->n == rows, "scale_rows (v needs one element per row of a)", a, v);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < rows; i++)
        binop_vs(r->data + i * cols, a->data + i * cols, v->data[i], cols, BINOP_MUL);
    RECORD(ctx, "scale_rows", scale_rows_backward, r, a, v);
    return r;
}

/* r_ij = a_ij·v_j: da_ij = dr_ij·v_j, dv_j = Σ_i dr_ij·a_ij. */
static void scale_cols_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *v = e->in[1];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    float *ga = ttt_grad(ctx, a), *gv = ttt_grad(ctx, v);
    if (ga)
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++) ga[i * cols + j] += dr[i * cols + j] * v->data[j];
    if (gv) {
        ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        double *acc = scratch_doubles(ctx, cols); /* (n) */
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++)
                acc[j] += (double)dr[i * cols + j] * a->data[i * cols + j];
        add_doubles(gv, acc, cols);
        ttt_arena_release(ctx->arena, mark);
    }
}

ttt_tensor *ttt_scale_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    if (TTT_OPS_ON_DEVICE(ctx, a, v)) return ttt_dev_scale_cols(ctx, a, v);
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    SHAPE_CHECK(v->n == cols, "scale_cols (v needs one element per column of a)", a, v);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < rows; i++)
        binop_vv(r->data + i * cols, a->data + i * cols, v->data, cols, BINOP_MUL);
    RECORD(ctx, "scale_cols", scale_cols_backward, r, a, v);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* elementwise, unary                                                                             */

/* Every unary op is one forward/backward pair generated from two expressions: `expr` computes
 * the output from x (the input element), `dexpr` the derivative dy/dx from x and y (the output
 * element, often the cheaper way to write it). The backward is da = dr · dexpr. */
#define UNARY_OP(fname, expr, dexpr, fop, bop, bp0)                                       \
    static void fname##_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) { \
        const ttt_tensor *a = e->in[0];                                                    \
        int add;                                                                           \
        float *restrict g = ttt_grad_acc(ctx, a, &add);                                    \
        const float *restrict in = a->data, *restrict out = e->out->data;                  \
        if (add)                                                                           \
            for (size_t i = 0; i < a->n; i++) {                                            \
                const float x = in[i], y = out[i];                                         \
                (void)x;                                                                   \
                (void)y;                                                                   \
                g[i] += dr[i] * (dexpr);                                                   \
            }                                                                              \
        else /* the first writer (autograd.h) */                                           \
            for (size_t i = 0; i < a->n; i++) {                                            \
                const float x = in[i], y = out[i];                                         \
                (void)x;                                                                   \
                (void)y;                                                                   \
                g[i] = dr[i] * (dexpr);                                                    \
            }                                                                              \
    }                                                                                      \
    ttt_tensor *fname(ttt_ctx *ctx, const ttt_tensor *a) {                                 \
        if (TTT_OPS_ON_DEVICE(ctx, a, NULL))                                               \
            return ttt_dev_unary(ctx, a, fop, 0.0f, 0.0f, bop, bp0, 0.0f, &#fname[4]);     \
        ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);                            \
        float *restrict o = r->data;                                                       \
        const float *restrict in = a->data;                                                \
        for (size_t i = 0; i < a->n; i++) {                                                \
            const float x = in[i];                                                         \
            o[i] = (expr);                                                                 \
        }                                                                                  \
        RECORD(ctx, &#fname[4], fname##_backward, r, a);                                   \
        return r;                                                                          \
    }

/* σ(x) without overflow for either sign: with e = exp(−|x|) ∈ (0, 1],
 * σ(x) = 1/(1+e) for x ≥ 0 and e/(1+e) for x < 0; 1 − σ(x) is the other one, so neither is ever
 * formed by the cancelling subtraction 1 − σ.
 * exp is src/core/fastexp.h's branch-free polynomial (≤ 2 ulp on [−87, 0], the argument range
 * here), so that the elementwise loops below vectorize: through libm's scalar expf, silu and its
 * backward on the short-convolution outputs took ~25 % of a training step (perf, docs/math.md §7
 * setting). Below −87 it returns 0 where expf would give a value < 1.7e-38, which changes σ(x)
 * for x < −87 from a float denormal to 0 only. When σ(x) and 1 − σ(x) are both used (the
 * derivatives), the compiler computes the shared exp once (both helpers are pure and inline). */
/* e^(−|x|). A NaN argument must not reach ttt_fast_expf (its float-to-int conversion of NaN is
 * undefined behaviour): |x| is clamped to 1000 (e = 0, as for any |x| > 87) on the bit pattern,
 * where NaN and inf are the largest values, and the callers return x itself for NaN so that NaN
 * still propagates (the trainer's non-finite checks rely on it). Integer selects only: a float
 * compare-and-select against NaN kept these loops from vectorizing (measured: silu and its
 * backward back at 34 % of a step). */
#define ABS_BITS_1000 0x447A0000u /* 1000.0f */
#define ABS_BITS_INF 0x7F800000u
static inline uint32_t abs_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7FFFFFFFu;
}
static inline float exp_neg_abs(float x) {
    uint32_t u = abs_bits(x);
    u = u < ABS_BITS_1000 ? u : ABS_BITS_1000;
    float a;
    memcpy(&a, &u, sizeof a);
    return ttt_fast_expf(-a);
}
static inline float sigmoid_f(float x) {
    float e = exp_neg_abs(x), s = 1.0f / (1.0f + e);
    float r = x >= 0.0f ? s : e * s;
    return abs_bits(x) > ABS_BITS_INF ? x : r;
}
static inline float sigmoid_c(float x) { /* 1 − σ(x) = σ(−x) */
    float e = exp_neg_abs(x), s = 1.0f / (1.0f + e);
    float r = x >= 0.0f ? e * s : s;
    return abs_bits(x) > ABS_BITS_INF ? x : r;
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

/* gelu''(x), the backward of ttt_gelu_grad (needed to train through the analytic inner gradient
 * of the MLP fast-weight model, docs/math.md §2). With s = σ(2u), s' = 2u'·s(1−s) and
 * (s(1−s))' = 2u'·s(1−s)(1−2s), differentiating gelu' = s + 2x·s(1−s)·u' gives
 *   gelu'' = s(1−s)·(4u' + 4x(1−2s)u'² + 2x·u''),   u'' = √(2/π)·6·0.044715·x,
 * with 1 − 2s written as (1−s) − s. Same clamp as gelu_grad_f: s(1−s) is 0 in float there. */
static inline float gelu_grad2_f(float x) {
    float xc = fminf(fmaxf(x, -30.0f), 30.0f);
    float u = GELU_C * (xc + GELU_A * xc * xc * xc);
    float du = GELU_C * (1.0f + 3.0f * GELU_A * xc * xc);
    float ddu = GELU_C * 6.0f * GELU_A * xc;
    float s = sigmoid_f(2.0f * u), sc = sigmoid_c(2.0f * u);
    return s * sc * (4.0f * du + 4.0f * xc * (sc - s) * du * du + 2.0f * xc * ddu);
}

UNARY_OP(ttt_neg, -x, -1.0f, TTT_MAP_NEG, TTT_MAP_SCALE, -1.0f)
UNARY_OP(ttt_exp, expf(x), y, TTT_MAP_EXP, TTT_MAP_D_EXP, 0.0f)
UNARY_OP(ttt_log, logf(x), 1.0f / x, TTT_MAP_LOG, TTT_MAP_D_LOG, 0.0f)
UNARY_OP(ttt_sqrt, sqrtf(x), 0.5f / y, TTT_MAP_SQRT, TTT_MAP_D_SQRT, 0.0f)
UNARY_OP(ttt_square, x * x, 2.0f * x, TTT_MAP_SQUARE, TTT_MAP_D_SQUARE, 0.0f)
/* σ' = σ(1 − σ) */
UNARY_OP(ttt_sigmoid, sigmoid_f(x), sigmoid_f(x) * sigmoid_c(x), TTT_MAP_SIGMOID,
         TTT_MAP_D_SIGMOID, 0.0f)
/* silu' below (ttt_silu_grad) */
UNARY_OP(ttt_silu, x * sigmoid_f(x), sigmoid_f(x) * (1.0f + x * sigmoid_c(x)), TTT_MAP_SILU,
         TTT_MAP_D_SILU, 0.0f)
UNARY_OP(ttt_gelu, gelu_f(x), gelu_grad_f(x), TTT_MAP_GELU, TTT_MAP_D_GELU, 0.0f)
/* softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^(−|x|)): no overflow for large x, no loss of
 * the tiny value for very negative x (hence libm's expf here, not the fast exp, which flushes
 * below −87: softplus(−100) ≈ 3.7e-44 must stay positive; log1pf is a library call anyway, and
 * softplus only runs on the (B·T, H) gate pre-activations). softplus' = σ. */
UNARY_OP(ttt_softplus, fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))), sigmoid_f(x), TTT_MAP_SOFTPLUS,
         TTT_MAP_D_SOFTPLUS, 0.0f)
/* elu(x) + 1: x + 1 for x > 0, eˣ otherwise (elu = eˣ − 1 there, so the +1 cancels exactly).
 * Derivative 1 or eˣ = y; at the kink x = 0 the left derivative e⁰ = 1 agrees. */
UNARY_OP(ttt_elu1, x > 0.0f ? x + 1.0f : expf(x), x > 0.0f ? 1.0f : y, TTT_MAP_ELU1,
         TTT_MAP_D_ELU1, 0.0f)
/* relu' = [x > 0] (0 at the kink). */
UNARY_OP(ttt_relu, x > 0.0f ? x : 0.0f, x > 0.0f ? 1.0f : 0.0f, TTT_MAP_RELU, TTT_MAP_D_RELU,
         0.0f)
/* silu'(x) = σ(x)(1 + x(1 − σ(x))) (docs/math.md §2, SwiGLU gradient); its own derivative, for
 * training through the inner gradient: silu'' = σ(1−σ)(2 + x(1−2σ)), 1−2σ = (1−σ) − σ. */
UNARY_OP(ttt_silu_grad, sigmoid_f(x) * (1.0f + x * sigmoid_c(x)),
         sigmoid_f(x) * sigmoid_c(x) * (2.0f + x * (sigmoid_c(x) - sigmoid_f(x))),
         TTT_MAP_SILU_GRAD, TTT_MAP_D_SILU_GRAD, 0.0f)
UNARY_OP(ttt_gelu_grad, gelu_grad_f(x), gelu_grad2_f(x), TTT_MAP_GELU_GRAD, TTT_MAP_D_GELU_GRAD,
         0.0f)
/* Ops for optimizer rules; gradient conventions in ops.h (docs/extending.md "Adding an op"). */
UNARY_OP(ttt_sign, (float)((x > 0.0f) - (x < 0.0f)), 0.0f, TTT_MAP_SIGN, TTT_MAP_SCALE, 0.0f)
UNARY_OP(ttt_abs, fabsf(x), (float)((x > 0.0f) - (x < 0.0f)), TTT_MAP_ABS, TTT_MAP_D_ABS, 0.0f)

/* r = min(max(a, lo), hi) (farg = lo, hi): da = dr where lo ≤ a ≤ hi. */
static void clamp_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *restrict g = ttt_grad(ctx, a);
    const float lo = e->farg[0], hi = e->farg[1];
    for (size_t i = 0; i < a->n; i++)
        if (a->data[i] >= lo && a->data[i] <= hi) g[i] += dr[i];
}

ttt_tensor *ttt_clamp(ttt_ctx *ctx, const ttt_tensor *a, float lo, float hi) {
    TTT_ASSERT(lo <= hi);
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL))
        return ttt_dev_unary(ctx, a, TTT_MAP_CLAMP, lo, hi, TTT_MAP_D_CLAMP, lo, hi, "clamp");
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < a->n; i++) r->data[i] = fminf(fmaxf(a->data[i], lo), hi);
    ttt_tape_entry *e = RECORD(ctx, "clamp", clamp_backward, r, a);
    if (e) {
        e->farg[0] = lo;
        e->farg[1] = hi;
    }
    return r;
}

/* r = max(a, b) (iarg[0] = 1) or min(a, b) (iarg[0] = 0), same shapes: the gradient goes to the
 * selected input, half to each on a tie. */
static void extremum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    const int is_max = e->iarg[0];
    for (size_t i = 0; i < a->n; i++) {
        const float x = a->data[i], y = b->data[i];
        const float wa = x == y ? 0.5f : ((x > y) == is_max ? 1.0f : 0.0f);
        if (ga) ga[i] += wa * dr[i];
        if (gb) gb[i] += (1.0f - wa) * dr[i];
    }
}

static ttt_tensor *extremum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, int is_max) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b)) return ttt_dev_extremum(ctx, a, b, is_max);
    SHAPE_CHECK(ttt_tensor_same_shape(a, b), is_max ? "maximum" : "minimum", a, b);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < a->n; i++)
        r->data[i] = is_max ? fmaxf(a->data[i], b->data[i]) : fminf(a->data[i], b->data[i]);
    ttt_tape_entry *e =
        RECORD(ctx, is_max ? "maximum" : "minimum", extremum_backward, r, a, b);
    if (e) e->iarg[0] = is_max;
    return r;
}

ttt_tensor *ttt_maximum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return extremum(ctx, a, b, 1);
}
ttt_tensor *ttt_minimum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return extremum(ctx, a, b, 0);
}

/* r = a^p (farg[0] = p): da = dr·p·a^(p−1), 0 for p = 0. */
static void pow_scalar_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *restrict g = ttt_grad(ctx, a);
    const float p = e->farg[0];
    if (p == 0.0f) return;
    for (size_t i = 0; i < a->n; i++) g[i] += dr[i] * p * powf(a->data[i], p - 1.0f);
}

ttt_tensor *ttt_pow_scalar(ttt_ctx *ctx, const ttt_tensor *a, float p) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL))
        return ttt_dev_unary(ctx, a, TTT_MAP_POW, p, 0.0f, TTT_MAP_D_POW, p, 0.0f, "pow_scalar");
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    for (size_t i = 0; i < a->n; i++) r->data[i] = powf(a->data[i], p);
    ttt_tape_entry *e = RECORD(ctx, "pow_scalar", pow_scalar_backward, r, a);
    if (e) e->farg[0] = p;
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* reductions (accumulated in double)                                                             */

static ttt_tensor *scalar_result(ttt_ctx *ctx, double v) {
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    r->data[0] = (float)v;
    return r;
}

/* s = Σ a: da = ds (every element). */
static void sum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *ds) {
    const ttt_tensor *a = e->in[0];
    int add;
    float *restrict g = ttt_grad_acc(ctx, a, &add);
    const float d = ds[0] * e->farg[0]; /* farg[0]: 1 for sum, 1/n for mean */
    for (size_t i = 0; i < a->n; i++) g[i] = (add ? g[i] : 0.0f) + d;
}

ttt_tensor *ttt_sum(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_sum(ctx, a, 1.0, "sum");
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += a->data[i];
    ttt_tensor *r = scalar_result(ctx, s);
    ttt_tape_entry *e = RECORD(ctx, "sum", sum_backward, r, a);
    if (e) e->farg[0] = 1.0f;
    return r;
}

ttt_tensor *ttt_mean(ttt_ctx *ctx, const ttt_tensor *a) {
    SHAPE_CHECK(a->n > 0, "mean (of an empty tensor)", a, NULL);
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_sum(ctx, a, 1.0 / (double)a->n, "mean");
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += a->data[i];
    ttt_tensor *r = scalar_result(ctx, s / (double)a->n);
    ttt_tape_entry *e = RECORD(ctx, "mean", sum_backward, r, a);
    if (e) e->farg[0] = (float)(1.0 / (double)a->n);
    return r;
}

/* s = a·b: da = ds·b, db = ds·a (a and b may be the same tensor: two separate additions). */
static void dot_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *ds) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    if (ga)
        for (size_t i = 0; i < a->n; i++) ga[i] += ds[0] * b->data[i];
    if (gb)
        for (size_t i = 0; i < b->n; i++) gb[i] += ds[0] * a->data[i];
}

ttt_tensor *ttt_dot(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b)) return ttt_dev_dot(ctx, a, b);
    SHAPE_CHECK(a->n == b->n, "dot (element counts)", a, b);
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += (double)a->data[i] * b->data[i];
    ttt_tensor *r = scalar_result(ctx, s);
    RECORD(ctx, "dot", dot_backward, r, a, b);
    return r;
}

/* s = ‖a‖_F: da = ds·a/s (0 at a = 0, the minimum-norm subgradient). */
static void norm_fro_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *ds) {
    const ttt_tensor *a = e->in[0];
    float *restrict g = ttt_grad(ctx, a);
    const float s = e->out->data[0];
    if (s == 0.0f) return;
    const float d = ds[0] / s;
    for (size_t i = 0; i < a->n; i++) g[i] += d * a->data[i];
}

ttt_tensor *ttt_norm_fro(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_norm_fro(ctx, a);
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) s += (double)a->data[i] * a->data[i];
    ttt_tensor *r = scalar_result(ctx, sqrt(s));
    RECORD(ctx, "norm_fro", norm_fro_backward, r, a);
    return r;
}

/* r_j = Σ_i a_ij: da_ij = dr_j (dr broadcast down the rows). */
static void sum_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    float *restrict g = ttt_grad(ctx, a);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) g[i * cols + j] += dr[j];
}

ttt_tensor *ttt_sum_rows(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_sum_rows(ctx, a);
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
    RECORD(ctx, "sum_rows", sum_rows_backward, r, a);
    return r;
}

/* r_i = Σ_j a_ij: da_ij = dr_i (dr broadcast along the row). */
static void sum_cols_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    float *restrict g = ttt_grad(ctx, a);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) g[i * cols + j] += dr[i];
}

ttt_tensor *ttt_sum_cols(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_sum_cols(ctx, a);
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict row = a->data + i * cols; /* (n) */
        double s = 0.0;
        for (size_t j = 0; j < cols; j++) s += row[j];
        r->data[i] = (float)s;
    }
    RECORD(ctx, "sum_cols", sum_cols_backward, r, a);
    return r;
}

/* r_i = ‖a_i‖: da_ij = dr_i·a_ij/r_i (0 for a zero row). */
static void row_norms_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    float *restrict g = ttt_grad(ctx, a);
    for (size_t i = 0; i < rows; i++) {
        const float ri = e->out->data[i];
        if (ri == 0.0f) continue;
        const float d = dr[i] / ri;
        for (size_t j = 0; j < cols; j++) g[i * cols + j] += d * a->data[i * cols + j];
    }
}

ttt_tensor *ttt_row_norms(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_row_norms(ctx, a);
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    for (size_t i = 0; i < rows; i++) {
        const float *restrict row = a->data + i * cols; /* (n) */
        double s = 0.0;
        for (size_t j = 0; j < cols; j++) s += (double)row[j] * row[j];
        r->data[i] = (float)sqrt(s);
    }
    RECORD(ctx, "row_norms", row_norms_backward, r, a);
    return r;
}

/* r_t = Σ_{s ≤ t} a_s: da_t = Σ_{s ≥ t} dr_s, a suffix sum (in double, like the forward). */
static void cumsum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t T = (size_t)a->shape[0], d = a->ndim == 2 ? (size_t)a->shape[1] : 1;
    float *restrict g = ttt_grad(ctx, a);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *restrict acc = scratch_doubles(ctx, d); /* (d) */
    for (size_t t = T; t-- > 0;)
        for (size_t j = 0; j < d; j++) {
            acc[j] += dr[t * d + j];
            g[t * d + j] += (float)acc[j];
        }
    ttt_arena_release(ctx->arena, mark);
}

/* Prefix sums along dim 0. Used for cumulative log gates G = cumsum(log α) (docs/math.md §5.1, §5.3),
 * where the double running sum keeps late entries exact enough for exp(G_i − G_j). */
ttt_tensor *ttt_cumsum(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_cumsum(ctx, a);
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
    RECORD(ctx, "cumsum", cumsum_backward, r, a);
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

/* y = x̂·γ + β, x̂ = (x − μ)·r. With ĝ = dy ⊙ γ (the same formula as ttt_layernorm_backward):
 *   dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂)),   dγ = Σ_rows dy ⊙ x̂,   dβ = Σ_rows dy. */
static void layernorm_op_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *gamma = e->in[1], *beta = e->in[2];
    const float eps = e->farg[0];
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    float *gx = ttt_grad(ctx, x), *gg = ttt_grad(ctx, gamma), *gb = ttt_grad(ctx, beta);
    const float *g = gamma ? gamma->data : NULL; /* (n) or NULL */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *acc_g = scratch_doubles(ctx, n), *acc_b = scratch_doubles(ctx, n); /* (n), (n) */
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * n, *dyr = dy + i * n; /* (n), (n) */
        double mu, rs;
        row_moments(&mu, &rs, xr, n, eps);
        double sg = 0.0, sgx = 0.0; /* Σ ĝ, Σ ĝ x̂ */
        for (size_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs, gh = g ? (double)dyr[j] * g[j] : (double)dyr[j];
            sg += gh;
            sgx += gh * xh;
            acc_g[j] += dyr[j] * xh;
            acc_b[j] += dyr[j];
        }
        if (gx) {
            double mg = sg / (double)n, mgx = sgx / (double)n;
            for (size_t j = 0; j < n; j++) {
                double xh = (xr[j] - mu) * rs, gh = g ? (double)dyr[j] * g[j] : (double)dyr[j];
                gx[i * n + j] += (float)(rs * (gh - mg - xh * mgx));
            }
        }
    }
    if (gg) add_doubles(gg, acc_g, n);
    if (gb) add_doubles(gb, acc_b, n);
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_layernorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma,
                          const ttt_tensor *beta, float eps) {
    if (TTT_OPS_ON_DEVICE3(ctx, x, gamma, beta))
        return ttt_dev_rownorm(ctx, TTT_NORM_LAYER, x, gamma, beta, eps, "layernorm");
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
    ttt_tape_entry *e = RECORD(ctx, "layernorm", layernorm_op_backward, r, x, gamma, beta);
    if (e) e->farg[0] = eps;
    return r;
}

/* Backward of the LN backward (a second derivative of LN), for training through the analytic
 * inner gradient of TTT-Linear / TTT-MLP (docs/math.md §2, "through LN backward"). Per row, with
 * P = I − 11ᵀ/n − x̂x̂ᵀ/n (symmetric), the forward is dx = r·P·ĝ, ĝ = dy ⊙ γ. For an upstream
 * gradient w of dx:
 *   ∂/∂ĝ = r·P·w   (dx is linear in ĝ), so d(dy) = (r P w) ⊙ γ and dγ = Σ_rows (r P w) ⊙ dy
 *   ∂/∂x = −(r²/n)·[(w·Pĝ)·x̂ + (x̂·ĝ)·P w + (w·x̂)·P ĝ]
 * The second line differentiates r(x) and x̂(x) using ∂r/∂x = −r²x̂/n and ∂x̂/∂x = r·P. */
static void layernorm_backward_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *w) {
    const ttt_tensor *dy = e->in[0], *x = e->in[1], *gamma = e->in[2];
    const float eps = e->farg[0];
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    float *gdy = ttt_grad(ctx, dy), *gx = ttt_grad(ctx, x), *gg = ttt_grad(ctx, gamma);
    const float *g = gamma ? gamma->data : NULL; /* (n) or NULL */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *xh = scratch_doubles(ctx, n), *gh = scratch_doubles(ctx, n);  /* (n), (n) */
    double *pw = scratch_doubles(ctx, n), *pg = scratch_doubles(ctx, n);  /* (n), (n) */
    double *acc_g = scratch_doubles(ctx, n);                               /* (n) */
    const double dn = (double)n;
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * n, *dyr = dy->data + i * n, *wr = w + i * n;
        double mu, rs;
        row_moments(&mu, &rs, xr, n, eps);
        double sw = 0, sg = 0, xw = 0, xg = 0; /* Σw, Σĝ, x̂·w, x̂·ĝ */
        for (size_t j = 0; j < n; j++) {
            xh[j] = (xr[j] - mu) * rs;
            gh[j] = g ? (double)dyr[j] * g[j] : (double)dyr[j];
            sw += wr[j];
            sg += gh[j];
            xw += xh[j] * wr[j];
            xg += xh[j] * gh[j];
        }
        double wpg = 0.0; /* w·Pĝ */
        for (size_t j = 0; j < n; j++) {
            pw[j] = wr[j] - sw / dn - xh[j] * xw / dn;
            pg[j] = gh[j] - sg / dn - xh[j] * xg / dn;
            wpg += wr[j] * pg[j];
        }
        for (size_t j = 0; j < n; j++) {
            double u = rs * pw[j]; /* ∂/∂ĝ_j */
            if (gdy) gdy[i * n + j] += (float)(g ? u * g[j] : u);
            acc_g[j] += u * dyr[j];
            if (gx)
                gx[i * n + j] += (float)(-(rs * rs / dn) * (wpg * xh[j] + xg * pw[j] + xw * pg[j]));
        }
    }
    if (gg) add_doubles(gg, acc_g, n);
    ttt_arena_release(ctx->arena, mark);
}

/* With x̂ = (x − μ)·r, r = 1/sqrt(var + eps), and ĝ = dy ⊙ γ, the gradient of Σ dy·LN(x) is
 *   dx = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂))
 * (differentiating μ and var, both biased means over the row). This is the "through LN backward"
 * step of the TTT reconstruction loss (docs/math.md §2). */
ttt_tensor *ttt_layernorm_backward(ttt_ctx *ctx, const ttt_tensor *dy, const ttt_tensor *x,
                                   const ttt_tensor *gamma, float eps) {
    if (TTT_OPS_ON_DEVICE3(ctx, dy, x, gamma))
        return ttt_dev_layernorm_backward(ctx, dy, x, gamma, eps);
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
    ttt_tape_entry *e =
        RECORD(ctx, "layernorm_backward", layernorm_backward_backward, r, dy, x, gamma);
    if (e) e->farg[0] = eps;
    return r;
}

/* y = γ ⊙ x·s, s = (mean(x²) + eps)^(−1/2), ∂s/∂x = −s³x/n. With ĝ = dy ⊙ γ:
 *   dx = s·ĝ − s³·x·(x·ĝ)/n,   dγ = Σ_rows dy ⊙ x·s. */
static void rmsnorm_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *gamma = e->in[1];
    const float eps = e->farg[0];
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    int add_x, add_g;
    float *gx = ttt_grad_acc(ctx, x, &add_x), *gg = ttt_grad_acc(ctx, gamma, &add_g);
    const float *g = gamma ? gamma->data : NULL; /* (n) or NULL */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *acc_g = scratch_doubles(ctx, n); /* (n) */
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * n, *dyr = dy + i * n; /* (n), (n) */
        double ss = 0.0, xg = 0.0;
        for (size_t j = 0; j < n; j++) {
            ss += (double)xr[j] * xr[j];
            xg += (double)xr[j] * (g ? (double)dyr[j] * g[j] : (double)dyr[j]);
        }
        double s = 1.0 / sqrt((n ? ss / (double)n : 0.0) + (double)eps);
        double c = s * s * s * xg / (double)n;
        for (size_t j = 0; j < n; j++) {
            double gh = g ? (double)dyr[j] * g[j] : (double)dyr[j];
            if (gx) gx[i * n + j] = (add_x ? gx[i * n + j] : 0.0f) + (float)(s * gh - c * xr[j]);
            acc_g[j] += (double)dyr[j] * xr[j] * s;
        }
    }
    if (gg) put_doubles(gg, acc_g, n, add_g);
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_rmsnorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma, float eps) {
    if (TTT_OPS_ON_DEVICE(ctx, x, gamma))
        return ttt_dev_rownorm(ctx, TTT_NORM_RMS, x, gamma, NULL, eps, "rmsnorm");
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
    ttt_tape_entry *e = RECORD(ctx, "rmsnorm", rmsnorm_backward, r, x, gamma);
    if (e) e->farg[0] = eps;
    return r;
}

/* y = x·s, s = (Σx² + eps)^(−1/2): dx = s·dy − s³·x·(x·dy). */
static void l2norm_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    const float eps = e->farg[0];
    size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    int add;
    float *restrict gx = ttt_grad_acc(ctx, x, &add);
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * n, *dyr = dy + i * n; /* (n), (n) */
        double ss = 0.0, xd = 0.0;
        for (size_t j = 0; j < n; j++) {
            ss += (double)xr[j] * xr[j];
            xd += (double)xr[j] * dyr[j];
        }
        double s = 1.0 / sqrt(ss + (double)eps), c = s * s * s * xd;
        for (size_t j = 0; j < n; j++)
            gx[i * n + j] = (add ? gx[i * n + j] : 0.0f) + (float)(s * dyr[j] - c * xr[j]);
    }
}

ttt_tensor *ttt_l2norm_rows(ttt_ctx *ctx, const ttt_tensor *x, float eps) {
    if (TTT_OPS_ON_DEVICE(ctx, x, NULL))
        return ttt_dev_rownorm(ctx, TTT_NORM_L2, x, NULL, NULL, eps, "l2norm_rows");
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
    ttt_tape_entry *e = RECORD(ctx, "l2norm_rows", l2norm_rows_backward, r, x);
    if (e) e->farg[0] = eps;
    return r;
}

/* y = softmax(a) per row: da = y ⊙ (dy − y·dy). Masked (−inf) entries have y = 0 and get 0. */
static void softmax_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *a = e->in[0];
    size_t rows = rows_of(a), n = (size_t)TTT_COLS(a);
    float *restrict g = ttt_grad(ctx, a);
    for (size_t i = 0; i < rows; i++) {
        const float *y = e->out->data + i * n, *dyr = dy + i * n; /* (n), (n) */
        double s = 0.0;
        for (size_t j = 0; j < n; j++) s += (double)y[j] * dyr[j];
        const float sf = (float)s;
        for (size_t j = 0; j < n; j++) g[i * n + j] += y[j] * (dyr[j] - sf);
    }
}

/* Softmax of each row after subtracting its max (so exp never overflows). -INFINITY entries are
 * masked positions (causal_fill, log M in docs/math.md §4) and get exactly 0; a row with no finite
 * entry at all (fully masked) is all zeros rather than 0/0 = NaN. */
ttt_tensor *ttt_softmax_rows(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL))
        return ttt_dev_rownorm(ctx, TTT_NORM_SOFTMAX, a, NULL, NULL, 0.0f, "softmax_rows");
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
    RECORD(ctx, "softmax_rows", softmax_rows_backward, r, a);
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

/* Kept entries pass their gradient through, zeroed ones get none. */
static void tril_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    const long k = e->iarg[0];
    size_t nb = mats_of(a);
    long m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    float *restrict g = ttt_grad(ctx, a);
    for (size_t b = 0; b < nb; b++)
        for (long i = 0; i < m; i++) {
            size_t off = (b * (size_t)m + (size_t)i) * (size_t)n;
            long keep = i + k + 1;
            keep = keep < 0 ? 0 : keep > n ? n : keep;
            for (long j = 0; j < keep; j++) g[off + (size_t)j] += dr[off + (size_t)j];
        }
}

ttt_tensor *ttt_tril(ttt_ctx *ctx, const ttt_tensor *a, int k) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_mask(ctx, a, TTT_MASK_TRIL, k, "tril");
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
    ttt_tape_entry *e = RECORD(ctx, "tril", tril_backward, r, a);
    if (e) e->iarg[0] = k;
    return r;
}

/* D_ij = exp(g_i − g_j) inside the mask: ∂D_ij/∂g_i = D_ij, ∂D_ij/∂g_j = −D_ij, so
 *   dg_i += Σ_j dD_ij·D_ij (row sums),   dg_j −= Σ_i dD_ij·D_ij (column sums);
 * outside the mask D is a constant 0. */
static void decay_mask_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dD) {
    const ttt_tensor *gt = e->in[0];
    const int strict = e->iarg[0], T = gt->shape[0];
    const float *D = e->out->data; /* (T, T) */
    float *gg = ttt_grad(ctx, gt);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *acc = scratch_doubles(ctx, (size_t)T); /* (T) */
    for (int i = 0; i < T; i++) {
        int end = strict ? i : i + 1;
        for (int j = 0; j < end; j++) {
            double v = (double)dD[(size_t)i * T + j] * D[(size_t)i * T + j];
            acc[i] += v;
            acc[j] -= v;
        }
    }
    add_doubles(gg, acc, (size_t)T);
    ttt_arena_release(ctx->arena, mark);
}

/* D_ij = exp(g_i − g_j) for j ≤ i (docs/math.md §5.1, Γ in §5.3). Taking exp of the difference keeps
 * every entry in (0, 1] for decaying gates even when exp(g_i) alone would underflow to 0. */
ttt_tensor *ttt_decay_mask(ttt_ctx *ctx, const ttt_tensor *g, int strict) {
    if (TTT_OPS_ON_DEVICE(ctx, g, NULL)) return ttt_dev_decay_mask(ctx, g, strict);
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
    ttt_tape_entry *e = RECORD(ctx, "decay_mask", decay_mask_backward, r, g);
    if (e) e->iarg[0] = strict;
    return r;
}

/* Entries j ≤ i are copies of a; the −inf ones do not depend on a. */
static void causal_fill_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t nb = mats_of(a), m = (size_t)a->shape[a->ndim - 1];
    float *restrict g = ttt_grad(ctx, a);
    for (size_t b = 0; b < nb; b++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j <= i; j++) g[(b * m + i) * m + j] += dr[(b * m + i) * m + j];
}

ttt_tensor *ttt_causal_fill(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL))
        return ttt_dev_mask(ctx, a, TTT_MASK_CAUSAL_FILL, 0, "causal_fill");
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
    RECORD(ctx, "causal_fill", causal_fill_backward, r, a);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* triangular solve                                                                               */

/* X = L⁻¹B. From dX = −L⁻¹·dL·X + L⁻¹·dB, with Y = L⁻ᵀ·dX (a solve with Lᵀ, strsm Trans):
 *   dB = Y,   dL = −Y·Xᵀ restricted to the entries the forward reads (lower triangle; strictly
 *   lower when unit, since the unit diagonal is not read and so gets no gradient). */
static void solve_lower_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dX) {
    const ttt_tensor *L = e->in[0], *B = e->in[1], *X = e->out;
    const int unit = e->iarg[0];
    int n = L->shape[0], m = B->ndim == 2 ? B->shape[1] : 1;
    float *gL = ttt_grad(ctx, L), *gB = ttt_grad(ctx, B);
    if (n == 0 || m == 0) return;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *Y = scratch_floats(ctx, (size_t)n * m); /* (n, m) */
    memcpy(Y, dX, (size_t)n * m * sizeof *Y);
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, unit ? CblasUnit : CblasNonUnit,
                n, m, 1.0f, L->data, n, Y, m);
    if (gB)
        for (size_t i = 0; i < (size_t)n * m; i++) gB[i] += Y[i];
    if (gL) {
        float *P = scratch_floats(ctx, (size_t)n * n); /* (n, n) = Y·Xᵀ */
        sgemm_rm(P, 1.0f, Y, 0, m, X->data, 1, m, 0.0f, n, n, m);
        for (int i = 0; i < n; i++) {
            int end = unit ? i : i + 1;
            for (int j = 0; j < end; j++) gL[(size_t)i * n + j] -= P[(size_t)i * n + j];
        }
    }
    ttt_arena_release(ctx->arena, mark);
}

/* Forward substitution L·X = B through strsm on a copy of B (strsm works in place). Used for the
 * WY/UT transform A⁻¹ of the chunkwise delta rule (docs/math.md §5.3) with unit diagonal. */
ttt_tensor *ttt_solve_lower(ttt_ctx *ctx, const ttt_tensor *L, const ttt_tensor *B, int unit) {
    if (TTT_OPS_ON_DEVICE(ctx, L, B)) return ttt_dev_solve_lower(ctx, L, B, unit);
    SHAPE_CHECK(L->ndim == 2 && L->shape[0] == L->shape[1], "solve_lower (L square)", L, B);
    SHAPE_CHECK((B->ndim == 1 || B->ndim == 2) && B->shape[0] == L->shape[0],
                "solve_lower (rows of B)", L, B);
    int n = L->shape[0], m = B->ndim == 2 ? B->shape[1] : 1;
    /* The copy is plain memory work, not the recorded ttt_tensor_copy: X depends on B only
     * through the solve, whose backward covers it. */
    ttt_tensor *X = ttt_tensor_new(ctx, B->ndim, B->shape);
    memcpy(X->data, B->data, B->n * sizeof(float));
    if (n > 0 && m > 0)
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans,
                    unit ? CblasUnit : CblasNonUnit, n, m, 1.0f, L->data, n, X->data, m);
    ttt_tape_entry *e = RECORD(ctx, "solve_lower", solve_lower_backward, X, L, B);
    if (e) e->iarg[0] = unit;
    return X;
}

/* --------------------------------------------------------------------------------------------- */
/* shape                                                                                          */

/* y (…, n, m) = xᵀ per matrix, tiled; dst[j·m + i] = src[i·n + j] for src (m, n). */
static inline void transpose_tiles(float *restrict y, const float *restrict x, int m, int n,
                                   int add) {
    enum { TILE = 32 };
    for (int i0 = 0; i0 < m; i0 += TILE)
        for (int j0 = 0; j0 < n; j0 += TILE) {
            int i1 = i0 + TILE < m ? i0 + TILE : m, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++) {
                    if (add)
                        y[(size_t)j * m + i] += x[(size_t)i * n + j];
                    else
                        y[(size_t)j * m + i] = x[(size_t)i * n + j];
                }
        }
}

/* r = aᵀ per matrix: da += drᵀ. */
static void transpose_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    int m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    size_t nb = mats_of(a), mn = (size_t)m * n;
    for (size_t b = 0; b < nb; b++) transpose_tiles(g + b * mn, dr + b * mn, n, m, 1);
}

/* Swap the last two dims (batched over a leading dim for 3-D). Tiled so that both the reads and
 * the writes stay within a few cache lines per tile. */
ttt_tensor *ttt_transpose(ttt_ctx *ctx, const ttt_tensor *a) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_transpose(ctx, a);
    SHAPE_CHECK(a->ndim == 2 || a->ndim == 3, "transpose (2-D or 3-D)", a, NULL);
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    int m = shp[a->ndim - 2], n = shp[a->ndim - 1];
    shp[a->ndim - 2] = n;
    shp[a->ndim - 1] = m;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t nb = mats_of(a), mn = (size_t)m * n;
    for (size_t b = 0; b < nb; b++) transpose_tiles(r->data + b * mn, a->data + b * mn, m, n, 0);
    RECORD(ctx, "transpose", transpose_backward, r, a);
    return r;
}

/* Elements per index of dim 0. */
static size_t row_stride(const ttt_tensor *t) {
    return t->shape[0] ? t->n / (size_t)t->shape[0] : 0;
}

/* r = a[r0:r1]: the gradient lands in the same rows of a. */
static void slice_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a) + (size_t)e->iarg[0] * row_stride(a);
    for (size_t i = 0; i < e->out->n; i++) g[i] += dr[i];
}

ttt_tensor *ttt_slice_rows(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_slice_rows(ctx, a, r0, r1);
    if (!(0 <= r0 && r0 <= r1 && r1 <= a->shape[0])) {
        char s[64];
        fprintf(stderr, "ttt: slice_rows: rows [%d, %d) out of range for %s\n", r0, r1,
                ttt_tensor_shape_str(a, s, sizeof s));
        TTT_ASSERT(0 <= r0 && r0 <= r1 && r1 <= a->shape[0]);
    }
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = r1 - r0;
    size_t st = row_stride(a);
    ttt_tensor *r;
    if (ttt_recording(ctx) && a->requires_grad) {
        /* Recorded: the rows are contiguous and a tensor on the tape is never written in place
         * (autograd.h), so r shares a's storage, as ttt_reshape does, instead of keeping a
         * second copy of them until the backward (docs/training.md "Memory of a training
         * step"); its gradient stays its own. */
        r = ttt_arena_alloc(ctx->arena, sizeof *r);
        TTT_ASSERT(r != NULL);
        *r = ttt_tensor_view(a->data + (size_t)r0 * st, a->ndim, shp);
    } else {
        r = ttt_tensor_new(ctx, a->ndim, shp);
        if (r->n) memcpy(r->data, a->data + (size_t)r0 * st, r->n * sizeof(float));
    }
    ttt_tape_entry *e = RECORD(ctx, "slice_rows", slice_rows_backward, r, a);
    if (e) e->iarg[0] = r0;
    return r;
}

/* r = [a; b]: the first a->n elements of dr belong to a, the rest to b. */
static void concat_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    int add;
    float *ga = ttt_grad_acc(ctx, a, &add);
    if (ga) put_floats(ga, dr, a->n, add);
    float *gb = ttt_grad_acc(ctx, b, &add);
    if (gb) put_floats(gb, dr + a->n, b->n, add);
}

ttt_tensor *ttt_concat_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    if (TTT_OPS_ON_DEVICE(ctx, a, b))
        return ttt_dev_concat_rows_n(ctx, (const ttt_tensor *const[]){a, b}, 2);
    int ok = a->ndim == b->ndim;
    for (int i = 1; ok && i < a->ndim; i++) ok = a->shape[i] == b->shape[i];
    SHAPE_CHECK(ok, "concat_rows (all dims but the first must match)", a, b);
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = a->shape[0] + b->shape[0];
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    if (a->n) memcpy(r->data, a->data, a->n * sizeof(float));
    if (b->n) memcpy(r->data + a->n, b->data, b->n * sizeof(float));
    RECORD(ctx, "concat_rows", concat_rows_backward, r, a, b);
    return r;
}

/* r = [p_0; p_1; …] along dim 0: part p gets the next p->n elements of dr back. */
static void concat_rows_n_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    size_t off = 0;
    for (int p = 0; p < e->n_in; p++) {
        const ttt_tensor *t = e->in[p];
        int add;
        float *g = ttt_grad_acc(ctx, t, &add);
        if (g) put_floats(g, dr + off, t->n, add);
        off += t->n;
    }
}

ttt_tensor *ttt_concat_rows_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n) {
    TTT_ASSERT(n >= 1);
    if (TTT_OPS_ON_DEVICE_N(ctx, parts, n)) return ttt_dev_concat_rows_n(ctx, parts, n);
    const ttt_tensor *a = parts[0];
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = 0;
    for (int p = 0; p < n; p++) {
        const ttt_tensor *t = parts[p];
        int ok = t->ndim == a->ndim;
        for (int i = 1; ok && i < a->ndim; i++) ok = t->shape[i] == a->shape[i];
        SHAPE_CHECK(ok, "concat_rows (all dims but the first must match)", a, t);
        shp[0] += t->shape[0];
    }
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t off = 0;
    for (int p = 0; p < n; p++) {
        if (parts[p]->n) memcpy(r->data + off, parts[p]->data, parts[p]->n * sizeof(float));
        off += parts[p]->n;
    }
    if (ctx->grad) record_named(ctx, "concat_rows_n", concat_rows_n_backward, r, parts, n);
    return r;
}

/* r = a[..., c0:c1]: the gradient lands in the same columns of a. */
static void slice_cols_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a), w = (size_t)TTT_COLS(e->out);
    float *g = ttt_grad(ctx, a) + e->iarg[0];
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < w; j++) g[i * cols + j] += dr[i * w + j];
}

ttt_tensor *ttt_slice_cols(ttt_ctx *ctx, const ttt_tensor *a, int c0, int c1) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL))
        return ttt_dev_slice_block(ctx, a, 0, (int)rows_of(a), c0, c1, 1);
    const int nc = TTT_COLS(a);
    if (!(0 <= c0 && c0 <= c1 && c1 <= nc)) {
        char s[64];
        fprintf(stderr, "ttt: slice_cols: columns [%d, %d) out of range for %s\n", c0, c1,
                ttt_tensor_shape_str(a, s, sizeof s));
        TTT_ASSERT(0 <= c0 && c0 <= c1 && c1 <= nc);
    }
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[a->ndim - 1] = c1 - c0;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t rows = rows_of(a), w = (size_t)(c1 - c0);
    if (w)
        for (size_t i = 0; i < rows; i++)
            memcpy(r->data + i * w, a->data + i * (size_t)nc + c0, w * sizeof(float));
    ttt_tape_entry *e = RECORD(ctx, "slice_cols", slice_cols_backward, r, a);
    if (e) e->iarg[0] = c0;
    return r;
}

/* r = [p_0, p_1, …] along the last dim: each part gets its block of columns back. */
static void concat_cols_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    size_t rows = rows_of(e->out), cols = (size_t)TTT_COLS(e->out), c0 = 0;
    for (int p = 0; p < e->n_in; p++) {
        const ttt_tensor *t = e->in[p];
        size_t w = (size_t)TTT_COLS(t);
        int add;
        float *g = ttt_grad_acc(ctx, t, &add);
        if (g)
            for (size_t i = 0; i < rows; i++) put_floats(g + i * w, dr + i * cols + c0, w, add);
        c0 += w;
    }
}

ttt_tensor *ttt_concat_cols_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n) {
    TTT_ASSERT(n >= 1);
    if (TTT_OPS_ON_DEVICE_N(ctx, parts, n)) return ttt_dev_concat_grid(ctx, parts, 1, n, 1);
    const ttt_tensor *a = parts[0];
    int shp[TTT_MAX_DIMS], total = 0;
    for (int p = 0; p < n; p++) {
        const ttt_tensor *t = parts[p];
        int ok = t->ndim == a->ndim;
        for (int i = 0; ok && i + 1 < a->ndim; i++) ok = t->shape[i] == a->shape[i];
        SHAPE_CHECK(ok, "concat_cols (all dims but the last must match)", a, t);
        total += TTT_COLS(t);
    }
    memcpy(shp, a->shape, sizeof shp);
    shp[a->ndim - 1] = total;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t rows = rows_of(a), c0 = 0;
    for (int p = 0; p < n; p++) {
        size_t w = (size_t)TTT_COLS(parts[p]);
        if (w)
            for (size_t i = 0; i < rows; i++)
                memcpy(r->data + i * (size_t)total + c0, parts[p]->data + i * w,
                       w * sizeof(float));
        c0 += w;
    }
    ttt_tape_entry *e = ctx->grad ? record_named(ctx, "concat_cols", concat_cols_backward, r,
                                                 parts, n) : NULL;
    if (e) e->kind = TTT_TAPE_JOIN_COLS;
    return r;
}

/* r = a[r0:r1, c0:c1] (a as a matrix): the gradient lands in the same block of a, the rest of
 * a's gradient untouched (a partial writer: ttt_grad). */
static void slice_block_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    const size_t cols = (size_t)TTT_COLS(a), h = (size_t)e->out->shape[0],
                 w = (size_t)e->out->shape[1];
    float *g = ttt_grad(ctx, a) + (size_t)e->iarg[0] * cols + (size_t)e->iarg[1];
    for (size_t i = 0; i < h; i++)
        for (size_t j = 0; j < w; j++) g[i * cols + j] += dr[i * w + j];
}

ttt_tensor *ttt_slice_block(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1, int c0, int c1) {
    if (TTT_OPS_ON_DEVICE(ctx, a, NULL)) return ttt_dev_slice_block(ctx, a, r0, r1, c0, c1, 0);
    const size_t rows = rows_of(a);
    const int nc = TTT_COLS(a);
    if (!(0 <= r0 && r0 <= r1 && (size_t)r1 <= rows && 0 <= c0 && c0 <= c1 && c1 <= nc)) {
        char s[64];
        fprintf(stderr, "ttt: slice_block: rows [%d, %d), columns [%d, %d) out of range for %s\n",
                r0, r1, c0, c1, ttt_tensor_shape_str(a, s, sizeof s));
        TTT_ASSERT(0);
    }
    const size_t h = (size_t)(r1 - r0), w = (size_t)(c1 - c0);
    ttt_tensor *r = ttt_tensor_2d(ctx, (int)h, (int)w);
    if (w)
        for (size_t i = 0; i < h; i++)
            memcpy(r->data + i * w, a->data + ((size_t)r0 + i) * (size_t)nc + (size_t)c0,
                   w * sizeof(float));
    ttt_tape_entry *e = RECORD(ctx, "slice_block", slice_block_backward, r, a);
    if (e) {
        e->iarg[0] = r0;
        e->iarg[1] = c0;
    }
    return r;
}

/* r = the grid of parts: each part gets its block back, every element of it (first writer). */
static void concat_grid_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const int nr = e->iarg[0], nc = e->iarg[1];
    const size_t cols = (size_t)TTT_COLS(e->out);
    size_t r0 = 0;
    for (int i = 0; i < nr; i++) {
        size_t c0 = 0;
        const size_t h = (size_t)e->in[(size_t)i * nc]->shape[0];
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = e->in[(size_t)i * nc + j];
            const size_t w = (size_t)t->shape[1];
            int add;
            float *g = ttt_grad_acc(ctx, t, &add);
            if (g)
                for (size_t k = 0; k < h; k++) put_floats(g + k * w, dr + (r0 + k) * cols + c0, w, add);
            c0 += w;
        }
        r0 += h;
    }
}

ttt_tensor *ttt_concat_grid(ttt_ctx *ctx, const ttt_tensor *const *parts, int nr, int nc) {
    TTT_ASSERT(nr >= 1 && nc >= 1);
    if (TTT_OPS_ON_DEVICE_N(ctx, parts, nr * nc))
        return ttt_dev_concat_grid(ctx, parts, nr, nc, 0);
    int rows = 0, cols = 0;
    for (int i = 0; i < nr; i++) rows += parts[(size_t)i * nc]->shape[0];
    for (int j = 0; j < nc; j++) cols += parts[j]->shape[1];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = parts[(size_t)i * nc + j];
            SHAPE_CHECK(t->ndim == 2 && t->shape[0] == parts[(size_t)i * nc]->shape[0] &&
                            t->shape[1] == parts[j]->shape[1],
                        "concat_grid (a grid row's parts share rows, a grid column's columns)",
                        parts[(size_t)i * nc], t);
        }
    ttt_tensor *r = ttt_tensor_2d(ctx, rows, cols);
    size_t r0 = 0;
    for (int i = 0; i < nr; i++) {
        size_t c0 = 0;
        const size_t h = (size_t)parts[(size_t)i * nc]->shape[0];
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = parts[(size_t)i * nc + j];
            const size_t w = (size_t)t->shape[1];
            if (w)
                for (size_t k = 0; k < h; k++)
                    memcpy(r->data + (r0 + k) * (size_t)cols + c0, t->data + k * w,
                           w * sizeof(float));
            c0 += w;
        }
        r0 += h;
    }
    if (ctx->grad) {
        ttt_tape_entry *e = record_named(ctx, "concat_grid", concat_grid_backward, r, parts,
                                         nr * nc);
        if (e) {
            e->iarg[0] = nr;
            e->iarg[1] = nc;
        }
    }
    return r;
}

ttt_tensor *ttt_concat_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    return ttt_concat_cols_n(ctx, (const ttt_tensor *const[]){a, b}, 2);
}

ttt_tensor *ttt_reshape(ttt_ctx *ctx, const ttt_tensor *a, int ndim, const int *shape) {
    TTT_ASSERT(ndim >= 1 && ndim <= TTT_MAX_DIMS);
    ttt_tensor view = ttt_tensor_view_on(ttt_tensor_device(a), a->data, ndim, shape);
    SHAPE_CHECK(view.n == a->n, "reshape (element counts)", a, &view);
    ttt_tensor *r = ttt_arena_alloc(ttt_arena_host(ctx->arena), sizeof *r);
    TTT_ASSERT(r != NULL);
    *r = view;
    /* r shares a's storage but is a tensor of its own on the tape: it gets its own gradient
     * buffer, which its entry adds into a's element for element (same order, same count). */
    RECORD(ctx, "reshape", ttt_backward_identity, r, a);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* sequence-model ops                                                                             */

/* r_i = table[ids_i]: the backward scatter-adds dr_i into row ids_i (repeated ids accumulate).
 * aux holds a copy of ids (the caller's array need not outlive the forward). */
static void embedding_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *table = e->in[0];
    const int *ids = e->aux, n = e->iarg[0];
    const size_t d = (size_t)table->shape[1];
    float *g = ttt_grad(ctx, table);
    for (int i = 0; i < n; i++) {
        float *restrict gi = g + (size_t)ids[i] * d;   /* (d) */
        const float *restrict di = dr + (size_t)i * d; /* (d) */
        for (size_t j = 0; j < d; j++) gi[j] += di[j];
    }
}

ttt_tensor *ttt_embedding(ttt_ctx *ctx, const ttt_tensor *table, const int *ids, int n) {
    if (TTT_OPS_ON_DEVICE(ctx, table, NULL)) return ttt_dev_embedding(ctx, table, ids, n);
    SHAPE_CHECK(table->ndim == 2, "embedding (table must be (V, d))", table, NULL);
    const int V = table->shape[0], d = table->shape[1];
    TTT_ASSERT(n >= 0);
    ttt_tensor *r = ttt_tensor_2d(ctx, n, d);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) {
            fprintf(stderr, "ttt: embedding: id %d at position %d is outside [0, %d)\n", ids[i], i,
                    V);
            TTT_ASSERT(ids[i] >= 0 && ids[i] < V);
        }
        memcpy(r->data + (size_t)i * d, table->data + (size_t)ids[i] * d,
               (size_t)d * sizeof(float));
    }
    ttt_tape_entry *e = RECORD(ctx, "embedding", embedding_backward, r, table);
    if (e) {
        int *saved = ttt_tape_alloc(ctx, (size_t)(n ? n : 1) * sizeof(int));
        if (n) memcpy(saved, ids, (size_t)n * sizeof(int));
        e->aux = saved;
        e->iarg[0] = n;
    }
    return r;
}

/* Saved by the cross-entropy forward for its backward. */
typedef struct ce_saved {
    int *targets; /* (N) copy of the targets */
    float *lse;   /* (N) log Σ_j exp(z_ij) of each counted row */
    int count;    /* rows with a target ≥ 0 */
} ce_saved;

/* L = (1/count)·Σ_{i counted} (lse_i − z_{i,t_i}):
 *   dz_ij = dL/count · (softmax(z_i)_j − [j = t_i]) for counted rows, 0 for ignored ones.
 * softmax is recomputed from the saved lse as exp(z_ij − lse_i), which is ≤ 1 (no overflow). */
static void cross_entropy_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dl) {
    const ttt_tensor *z = e->in[0];
    const ce_saved *s = e->aux;
    int add;
    /* created even when nothing is counted: zero; over z's values when the op consumed z
     * (iarg[0], ttt_cross_entropy_consume), each element of a row read before it is written */
    float *g = e->iarg[0] ? ttt_grad_acc_over_values(ctx, z, &add) : ttt_grad_acc(ctx, z, &add);
    const size_t N = rows_of(z), V = (size_t)TTT_COLS(z);
    if (s->count == 0) {
        if (!add) memset(g, 0, N * V * sizeof *g);
        return;
    }
    const float scale = dl[0] / (float)s->count;
    for (size_t i = 0; i < N; i++) {
        float *gi = g + i * V; /* (V); may be zi (above) */
        if (s->targets[i] < 0) {
            if (!add) memset(gi, 0, V * sizeof *gi); /* the first writer of an ignored row */
            continue;
        }
        const float *zi = z->data + i * V; /* (V) */
        const float lse = s->lse[i];
        if (add)
            for (size_t j = 0; j < V; j++) gi[j] += scale * expf(zi[j] - lse);
        else
            for (size_t j = 0; j < V; j++) gi[j] = scale * expf(zi[j] - lse);
        gi[s->targets[i]] -= scale;
    }
}

/* Mean token cross-entropy (nats) with log-sum-exp after subtracting the row max, so no exp
 * overflows and a confident row (huge margin) still gives an exact small loss. */
static ttt_tensor *cross_entropy(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets,
                                 int N, ttt_ce_stats *stats, int consume) {
    if (TTT_OPS_ON_DEVICE(ctx, logits, NULL))
        return ttt_dev_cross_entropy(ctx, logits, targets, N, stats, consume);
    SHAPE_CHECK(logits->ndim >= 1 && rows_of(logits) == (size_t)N,
                "cross_entropy (logits must have N rows)", logits, NULL);
    const size_t V = (size_t)TTT_COLS(logits);
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    ce_saved *s = NULL;
    if (ttt_recording(ctx) && logits->requires_grad) {
        s = ttt_tape_alloc(ctx, sizeof *s);
        s->targets = ttt_tape_alloc(ctx, (size_t)(N ? N : 1) * sizeof(int));
        s->lse = ttt_tape_alloc(ctx, (size_t)(N ? N : 1) * sizeof(float));
        if (N) memcpy(s->targets, targets, (size_t)N * sizeof(int));
    }
    double total = 0.0;
    int count = 0, correct = 0;
    for (int i = 0; i < N; i++) {
        const int t = targets[i];
        if (t < 0) continue; /* ignored position (padding, prompt) */
        if ((size_t)t >= V) {
            fprintf(stderr, "ttt: cross_entropy: target %d at row %d is outside [0, %zu)\n", t, i,
                    V);
            TTT_ASSERT((size_t)t < V);
        }
        const float *restrict z = logits->data + (size_t)i * V; /* (V) */
        float mx = z[0];
        size_t arg = 0;
        for (size_t j = 1; j < V; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        double se = 0.0;
        for (size_t j = 0; j < V; j++) se += exp((double)z[j] - mx);
        double lse = mx + log(se);
        total += lse - z[t];
        count++;
        correct += arg == (size_t)t;
        if (s) s->lse[i] = (float)lse;
    }
    r->data[0] = count ? (float)(total / count) : 0.0f;
    if (stats) {
        stats->count = count;
        stats->correct = correct;
        stats->loss_sum = total;
    }
    if (s) {
        s->count = count;
        ttt_tape_entry *e = RECORD(ctx, "cross_entropy", cross_entropy_backward, r, logits);
        e->aux = s;
        e->iarg[0] = consume;
    }
    return r;
}

ttt_tensor *ttt_cross_entropy(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets, int N,
                              ttt_ce_stats *stats) {
    return cross_entropy(ctx, logits, targets, N, stats, 0);
}

ttt_tensor *ttt_cross_entropy_consume(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets,
                                      int N, ttt_ce_stats *stats) {
    return cross_entropy(ctx, logits, targets, N, stats, 1);
}

/* Sequences of a conv1d input: (T, C) is one, (B, T, C) is B. */
static void conv_dims(const ttt_tensor *x, int *B, int *T, int *C) {
    *B = x->ndim == 3 ? x->shape[0] : 1;
    *T = x->shape[x->ndim - 2];
    *C = x->shape[x->ndim - 1];
}

/* Row t of the causal convolution's backward for one sequence: dW_j += d_t ⊗ x_{t−j} (in double)
 * and dx_t = Σ_{j<K, t+j<T} w_j ⊙ d_{t+j}, gathered in one pass, j ascending (the order the terms
 * were once added in): each row written once, assigned by the first writer (autograd.h).
 * d: (T − t, C) the upstream gradient from row t on; x0: (T, C) the sequence's input; gs: (C)
 * row t of dx, or NULL. */
static void conv_row_backward(double *restrict aw, float *restrict gs, int add_x,
                              const float *restrict d, const float *restrict x0,
                              const float *restrict w, int t, int T, int K, int C) {
    for (int j = 0; j < K && j <= t; j++) {
        const float *restrict xs = x0 + (size_t)(t - j) * C; /* (C) */
        double *restrict awj = aw + (size_t)j * C;           /* (C) */
        for (int c = 0; c < C; c++) awj[c] += (double)d[c] * xs[c];
    }
    if (!gs) return;
    if (!add_x)
        for (int c = 0; c < C; c++) gs[c] = w[c] * d[c];
    else
        for (int c = 0; c < C; c++) gs[c] += w[c] * d[c];
    for (int j = 1; j < K && t + j < T; j++) {
        const float *restrict wj = w + (size_t)j * C; /* (C) */
        const float *restrict dj = d + (size_t)j * C; /* (C) d_{t+j} */
        for (int c = 0; c < C; c++) gs[c] += wj[c] * dj[c];
    }
}

/* y_t = b + Σ_{j<K, j≤t} w_j ⊙ x_{t−j} (per sequence): with dy_t,
 *   dx_s += Σ_j w_j ⊙ dy_{s+j} (s + j < T),   dw_j += Σ_t dy_t ⊙ x_{t−j},   db += Σ_t dy_t,
 * the parameter sums over every position of every sequence accumulated in double. */
static void conv1d_causal_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *w = e->in[1], *bias = e->in[2];
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    const int K = w->shape[0];
    int add_x, add_w, add_b;
    float *gx = ttt_grad_acc(ctx, x, &add_x), *gw = ttt_grad_acc(ctx, w, &add_w),
          *gb = ttt_grad_acc(ctx, bias, &add_b);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *aw = scratch_doubles(ctx, (size_t)K * C), *ab = scratch_doubles(ctx, (size_t)C);
    for (int b = 0; b < B; b++) {
        const size_t off = (size_t)b * T * C;
        for (int t = 0; t < T; t++) {
            const float *restrict dyt = dy + off + (size_t)t * C; /* (C) */
            for (int c = 0; c < C; c++) ab[c] += dyt[c];
            conv_row_backward(aw, gx ? gx + off + (size_t)t * C : NULL, add_x, dyt,
                              x->data + off, w->data, t, T, K, C);
        }
    }
    if (gw) put_doubles(gw, aw, (size_t)K * C, add_w);
    if (gb) put_doubles(gb, ab, (size_t)C, add_b);
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_conv1d_causal(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w,
                              const ttt_tensor *bias) {
    if (TTT_OPS_ON_DEVICE3(ctx, x, w, bias)) return ttt_dev_conv1d(ctx, x, w, bias, 0);
    SHAPE_CHECK(x->ndim == 2 || x->ndim == 3, "conv1d_causal (x must be (T, C) or (B, T, C))", x,
                NULL);
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    SHAPE_CHECK(w->ndim == 2 && w->shape[1] == C, "conv1d_causal (w must be (K, C))", x, w);
    if (bias) SHAPE_CHECK(bias->n == (size_t)C, "conv1d_causal (bias must have C elements)", x,
                          bias);
    const int K = w->shape[0];
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    for (int b = 0; b < B; b++) {
        const size_t off = (size_t)b * T * C;
        for (int t = 0; t < T; t++) {
            float *restrict yt = y->data + off + (size_t)t * C; /* (C) */
            if (bias)
                memcpy(yt, bias->data, (size_t)C * sizeof *yt);
            else
                memset(yt, 0, (size_t)C * sizeof *yt);
            for (int j = 0; j < K && j <= t; j++) { /* zero padding before t = 0 */
                const float *restrict wj = w->data + (size_t)j * C;            /* (C) */
                const float *restrict xs = x->data + off + (size_t)(t - j) * C; /* (C) */
                for (int c = 0; c < C; c++) yt[c] += wj[c] * xs[c];
            }
        }
    }
    RECORD(ctx, "conv1d_causal", conv1d_causal_backward, y, x, w, bias);
    return y;
}

/* z_t = Σ_{j<K, j≤t} w_j ⊙ x_{t−j} for one row t of one sequence (x0: the sequence's first row),
 * the sum in the order of ttt_conv1d_causal so that both give the same bits. */
static void conv_row(float *restrict z, const float *restrict x0, const float *restrict w, int t,
                     int K, int C) {
    memset(z, 0, (size_t)C * sizeof *z);
    for (int j = 0; j < K && j <= t; j++) {
        const float *restrict wj = w + (size_t)j * C;              /* (C) */
        const float *restrict xs = x0 + (size_t)(t - j) * C;       /* (C) */
        for (int c = 0; c < C; c++) z[c] += wj[c] * xs[c];
    }
}

/* y = silu(z), z = conv(x): per sequence, dz = dy ⊙ silu'(z) with z recomputed into a (T, C)
 * scratch that stays in cache, then the convolution's backward on dz exactly as in
 * conv1d_causal_backward (the same sums in the same order). */
static void conv1d_silu_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *w = e->in[1];
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    const int K = w->shape[0];
    int add_x, add_w;
    float *gx = ttt_grad_acc(ctx, x, &add_x), *gw = ttt_grad_acc(ctx, w, &add_w);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *aw = scratch_doubles(ctx, (size_t)K * C);
    float *dz = scratch_floats(ctx, (size_t)T * C); /* (T, C) one sequence's dz */
    for (int b = 0; b < B; b++) {
        const size_t off = (size_t)b * T * C;
        for (int t = 0; t < T; t++) {
            float *restrict dzt = dz + (size_t)t * C; /* (C) z_t, then dz_t */
            const float *restrict dyt = dy + off + (size_t)t * C;
            conv_row(dzt, x->data + off, w->data, t, K, C);
            for (int c = 0; c < C; c++) {
                const float z = dzt[c];
                dzt[c] = dyt[c] * (sigmoid_f(z) * (1.0f + z * sigmoid_c(z)));
            }
        }
        for (int t = 0; t < T; t++) {
            conv_row_backward(aw, gx ? gx + off + (size_t)t * C : NULL, add_x, dz + (size_t)t * C,
                              x->data + off, w->data, t, T, K, C);
        }
    }
    if (gw) put_doubles(gw, aw, (size_t)K * C, add_w);
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_conv1d_causal_silu(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w) {
    if (TTT_OPS_ON_DEVICE(ctx, x, w)) return ttt_dev_conv1d(ctx, x, w, NULL, 1);
    SHAPE_CHECK(x->ndim == 2 || x->ndim == 3,
                "conv1d_causal_silu (x must be (T, C) or (B, T, C))", x, NULL);
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    SHAPE_CHECK(w->ndim == 2 && w->shape[1] == C, "conv1d_causal_silu (w must be (K, C))", x, w);
    const int K = w->shape[0];
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    for (int b = 0; b < B; b++) {
        const size_t off = (size_t)b * T * C;
        for (int t = 0; t < T; t++) {
            float *restrict yt = y->data + off + (size_t)t * C; /* (C) */
            conv_row(yt, x->data + off, w->data, t, K, C);
            for (int c = 0; c < C; c++) {
                const float z = yt[c];
                yt[c] = z * sigmoid_f(z);
            }
        }
    }
    RECORD(ctx, "conv1d_causal_silu", conv1d_silu_backward, y, x, w);
    return y;
}

/* --------------------------------------------------------------------------------------------- */
/* fused causal attention                                                                         */

/* The reference of the fused op (docs/device_ops.md "Fused causal attention"): each score, each
 * softmax sum and each output is a sum in double over the float inputs, rounded to float once,
 * so the host op is within one rounding of the exact O; the CUDA kernel is checked against it. */

typedef struct attn_dims {
    size_t B;   /* sequences (or heads × sequences) */
    int T;      /* tokens */
    int dk, dv; /* widths of q/k and of v */
} attn_dims;

static attn_dims attn_check(const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v) {
    SHAPE_CHECK(q->ndim == 2 || q->ndim == 3,
                "attention_causal (q must be (T, D) or (B, T, D))", q, NULL);
    SHAPE_CHECK(ttt_tensor_same_shape(q, k), "attention_causal (k must have q's shape)", q, k);
    int same_lead = v->ndim == q->ndim;
    for (int i = 0; same_lead && i + 1 < q->ndim; i++) same_lead = v->shape[i] == q->shape[i];
    SHAPE_CHECK(same_lead, "attention_causal (v must be (T, Dv) or (B, T, Dv) like q)", q, v);
    attn_dims d;
    d.B = q->ndim == 3 ? (size_t)q->shape[0] : 1;
    d.T = q->shape[q->ndim - 2];
    d.dk = TTT_COLS(q);
    d.dv = TTT_COLS(v);
    return d;
}

/* xt (d, T) = xᵀ in double for one sequence's x (T, d): the scores and dP of a row are then
 * sums over d of contiguous rows of xt, which the compiler vectorizes (a dot product per key,
 * as a reduction, it does not). */
static void attn_transpose(double *restrict xt, const float *restrict x, int T, int d) {
    for (int j = 0; j < T; j++)
        for (int c = 0; c < d; c++) xt[(size_t)c * T + j] = x[(size_t)j * d + c];
}

/* s_j = scale·Σ_c a_c·xt[c][j] for the keys j ≤ i, in double (a = q_i with xt = Kᵀ, or
 * a = dO_i with xt = Vᵀ and scale 1). */
static void attn_row(double *restrict s, const float *restrict a, const double *restrict xt,
                     int i, int T, int d, double scale) {
    for (int j = 0; j <= i; j++) s[j] = 0.0;
    for (int c = 0; c < d; c++) {
        const double ac = a[c], *restrict xc = xt + (size_t)c * T; /* (T) */
        for (int j = 0; j <= i; j++) s[j] += ac * xc[j];
    }
    if (scale != 1.0)
        for (int j = 0; j <= i; j++) s[j] *= scale;
}

/* With P = exp(S − lse) (rows recomputed from the saved log-sum-exp), dP = dO Vᵀ and
 * D_i = Σ_j P_ij dP_ij (= rowsum(dO ∘ O)): dS = P ∘ (dP − D), dQ = scale·dS K, dK = scale·dSᵀ Q,
 * dV = Pᵀ dO. All in double; each gradient is rounded once (first writer assigns). */
static void attention_causal_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dO) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2];
    const attn_dims d = attn_check(q, k, v);
    const double scale = e->farg[0];
    const double *lse = e->aux; /* (B·T) */
    int add_q, add_k, add_v;
    float *gq = ttt_grad_acc(ctx, q, &add_q), *gk = ttt_grad_acc(ctx, k, &add_k),
          *gv = ttt_grad_acc(ctx, v, &add_v);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const size_t T = (size_t)d.T, nk = d.B * T * (size_t)d.dk, nv = d.B * T * (size_t)d.dv;
    double *dq = scratch_doubles(ctx, nk), *dk = scratch_doubles(ctx, nk);
    double *dv = scratch_doubles(ctx, nv);
    double *p = scratch_doubles(ctx, T), *ds = scratch_doubles(ctx, T);
    double *kt = scratch_doubles(ctx, T * (size_t)d.dk);
    double *vt = scratch_doubles(ctx, T * (size_t)d.dv);
    for (size_t b = 0; b < d.B; b++) {
        const float *qb = q->data + b * T * d.dk, *kb = k->data + b * T * d.dk; /* (T, dk) */
        const float *vb = v->data + b * T * d.dv, *gob = dO + b * T * d.dv;    /* (T, dv) */
        double *dqb = dq + b * T * d.dk, *dkb = dk + b * T * d.dk, *dvb = dv + b * T * d.dv;
        attn_transpose(kt, kb, d.T, d.dk);
        attn_transpose(vt, vb, d.T, d.dv);
        for (int i = 0; i < d.T; i++) {
            const float *qi = qb + (size_t)i * d.dk, *goi = gob + (size_t)i * d.dv;
            attn_row(p, qi, kt, i, d.T, d.dk, scale);
            attn_row(ds, goi, vt, i, d.T, d.dv, 1.0); /* dP_ij */
            const double li = lse[b * T + (size_t)i];
            double Di = 0.0;
            for (int j = 0; j <= i; j++) {
                p[j] = exp(p[j] - li);
                Di += p[j] * ds[j];
            }
            double *restrict dqi = dqb + (size_t)i * d.dk;
            for (int j = 0; j <= i; j++) {
                const double dsj = p[j] * (ds[j] - Di), sdj = scale * dsj, pj = p[j];
                const float *restrict kj = kb + (size_t)j * d.dk;
                double *restrict dkj = dkb + (size_t)j * d.dk;
                double *restrict dvj = dvb + (size_t)j * d.dv;
                for (int c = 0; c < d.dk; c++) {
                    dqi[c] += sdj * kj[c];
                    dkj[c] += sdj * qi[c];
                }
                for (int c = 0; c < d.dv; c++) dvj[c] += pj * goi[c];
            }
        }
    }
    /* in the order the buffers were taken: when q, k or v are one tensor, the later writers add */
    if (gq) put_doubles(gq, dq, nk, add_q);
    if (gk) put_doubles(gk, dk, nk, add_k);
    if (gv) put_doubles(gv, dv, nv, add_v);
    ttt_arena_release(ctx->arena, mark);
}

/* Row i: s_j = scale·q_i·k_j (j ≤ i), m = max s, l = Σ exp(s_j − m), o_i = Σ exp(s_j − m) v_j / l,
 * lse_i = m + log l, all in double (docs/device_ops.md "Fused causal attention"). */
ttt_tensor *ttt_attention_causal(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                                 const ttt_tensor *v, float scale) {
    if (TTT_OPS_ON_DEVICE3(ctx, q, k, v)) return ttt_dev_attention_causal(ctx, q, k, v, scale);
    const attn_dims d = attn_check(q, k, v);
    const size_t T = (size_t)d.T;
    int shp[TTT_MAX_DIMS];
    memcpy(shp, v->shape, sizeof shp);
    ttt_tensor *r = ttt_tensor_new(ctx, v->ndim, shp);
    const int keep = ttt_recording(ctx) &&
                     (q->requires_grad || k->requires_grad || v->requires_grad);
    /* the backward's log-sum-exp first (it stays), then the scratch released below */
    const size_t rows = d.B * T;
    double *lse = keep ? ttt_tape_alloc(ctx, (rows > 0 ? rows : 1) * sizeof(double)) : NULL;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *s = scratch_doubles(ctx, T), *acc = scratch_doubles(ctx, (size_t)d.dv);
    double *kt = scratch_doubles(ctx, T * (size_t)d.dk);
    const double sc = scale;
    for (size_t b = 0; b < d.B; b++) {
        const float *qb = q->data + b * T * d.dk, *kb = k->data + b * T * d.dk; /* (T, dk) */
        const float *vb = v->data + b * T * d.dv;                               /* (T, dv) */
        attn_transpose(kt, kb, d.T, d.dk);
        for (int i = 0; i < d.T; i++) {
            attn_row(s, qb + (size_t)i * d.dk, kt, i, d.T, d.dk, sc);
            double m = s[0];
            for (int j = 1; j <= i; j++) m = s[j] > m ? s[j] : m;
            double l = 0.0;
            memset(acc, 0, (size_t)d.dv * sizeof *acc);
            for (int j = 0; j <= i; j++) {
                const double pj = exp(s[j] - m);
                const float *restrict vj = vb + (size_t)j * d.dv;
                l += pj;
                for (int c = 0; c < d.dv; c++) acc[c] += pj * vj[c];
            }
            float *o = r->data + (b * T + (size_t)i) * (size_t)d.dv;
            for (int c = 0; c < d.dv; c++) o[c] = (float)(acc[c] / l);
            if (lse) lse[b * T + (size_t)i] = m + log(l);
        }
    }
    ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *e = RECORD(ctx, "attention_causal", attention_causal_backward, r, q, k, v);
    if (e) {
        e->farg[0] = scale;
        e->aux = lse;
    }
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
