/* The device implementations of the ops (ops_device.h, docs/device_ops.md).
 *
 * Each ttt_dev_<op> mirrors its CPU op in src/core/ops.c: the same shapes, the same tape entry
 * (name, inputs, iarg/farg), and a backward that writes the same gradients, computed by the
 * kernels of cuda_kernels.h on the arena's stream instead of host loops. Results, gradients and
 * scratch are device memory from ctx->arena (a device arena, tensor.h); tensor headers, tape
 * entries and saved scalars are host memory from its meta arena. Nothing here waits for the
 * device except the cross-entropy's statistics, which the caller asked for on the host.
 *
 * Mixed precision (ttt_ctx.mixed, docs/gpu.md "bfloat16 training"): matmul and gemm, forward
 * and backward, then take bfloat16 operands (fp32 sums and results); every other op, the outer
 * product and the triangular solves included, stays fp32.
 *
 * Errors: ops return tensors, so a failing launch or cuBLAS call cannot travel back as a status;
 * it is kept as the thread's sticky device error (ttt_device_ops_status, ops.h), as CUDA keeps
 * its own, and the caller checks it once per step. Out of device memory in the arena takes the
 * arena's escape like host memory does (tensor.h). */
#include "ops_device.h"

#include <stdint.h>
#include <string.h>

#include "cuda_kernels.h"

/* ---- the sticky error ---- */

static _Thread_local ttt_error last_err;  /* what a failing call wrote */
static _Thread_local ttt_error first_err; /* the first failure since the last read */

ttt_error *ttt_device_ops_err(void) { return &last_err; }

void ttt_device_ops_note(ttt_status s) {
    if (s == TTT_OK || first_err.status != TTT_OK) return;
    first_err = last_err;
    first_err.status = s;
}

ttt_status ttt_device_ops_status(ttt_error *err) {
    const ttt_status s = first_err.status;
    if (s != TTT_OK && err) *err = first_err;
    memset(&first_err, 0, sizeof first_err);
    return s;
}

#define E ttt_device_ops_err()
#define CK(call) ttt_device_ops_note(call)
#define ST(ctx) ((ctx)->arena->stream)

_Noreturn void ttt_dev_unsupported(const char *op, const ttt_tensor *a) {
    char d[32];
    fprintf(stderr,
            "ttt: %s has no CUDA implementation yet (its input is on %s; docs/device_ops.md "
            "lists the device ops)\n",
            op, ttt_device_name(ttt_tensor_device(a), d, sizeof d));
    TTT_ASSERT(!"op without a device implementation");
    abort();
}

/* Every input on the arena's device, and that device not the host: else a programmer error
 * naming the op, the offending input and both devices. With a host arena the offending input is
 * the one on a device; with a device arena, the first one elsewhere. */
static void same_device(ttt_ctx *ctx, const char *op, const ttt_tensor *const *in, int n) {
    const ttt_device d = ctx->arena->device;
    for (int i = 0; i < n; i++) {
        const ttt_tensor *t = in[i];
        if (!t) continue;
        const int bad = ttt_device_is_host(d) ? ttt_tensor_on_device(t)
                                              : !ttt_device_equal(ttt_tensor_device(t), d);
        if (!bad) continue;
        char da[32], dt[32];
        fprintf(stderr,
                "ttt: %s: mixed devices: input %d is on %s, the context's arena on %s (move "
                "tensors with ttt_tensor_to; ops never copy between devices)\n",
                op, i, ttt_device_name(ttt_tensor_device(t), dt, sizeof dt),
                ttt_device_name(d, da, sizeof da));
        TTT_ASSERT(!"mixed devices");
    }
    if (ttt_device_is_host(d)) { /* not reached: some input was on a device */
        fprintf(stderr, "ttt: %s: device op called with host tensors and a host arena\n", op);
        TTT_ASSERT(!"mixed devices");
    }
}
#define SAME_DEVICE(ctx, op, ...)                                                          \
    same_device((ctx), (op), (const ttt_tensor *const[]){__VA_ARGS__},                     \
                (int)(sizeof((const ttt_tensor *const[]){__VA_ARGS__}) /                   \
                      sizeof(const ttt_tensor *)))

#define DCHECK(cond, op)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "ttt: %s: shape check '%s' failed\n", (op), #cond);            \
            TTT_ASSERT(cond);                                                              \
        }                                                                                  \
    } while (0)

static ttt_tape_entry *rec(ttt_ctx *ctx, const char *name, ttt_backward_fn fn, ttt_tensor *r,
                           const ttt_tensor *const *in, int n) {
    ttt_tape_entry *e = ttt_tape_record(ctx, fn, r, in, n);
    if (e) e->name = name;
    return e;
}
#define REC(ctx, name, fn, r, ...)                                                         \
    rec((ctx), (name), (fn), (r), (const ttt_tensor *const[]){__VA_ARGS__},                \
        (int)(sizeof((const ttt_tensor *const[]){__VA_ARGS__}) / sizeof(const ttt_tensor *)))

/* Device scratch in the arena (released by the caller to a mark taken after its ttt_grad
 * calls, autograd.h). */
static void *dscratch(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ctx->arena, bytes ? bytes : 1);
    TTT_ASSERT(p != NULL);
    return p;
}

static size_t rows_of(const ttt_tensor *t) {
    size_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= (size_t)t->shape[i];
    return r;
}
static size_t mats_of(const ttt_tensor *t) {
    size_t b = 1;
    for (int i = 0; i + 2 < t->ndim; i++) b *= (size_t)t->shape[i];
    return b;
}

/* g (+)= s·v over n elements (s = 1: a copy or an addition). */
static void put_scaled(ttt_ctx *ctx, float *g, int add, const float *v, float s, size_t n) {
    CK(ttt_cuda_map(TTT_MAP_SCALE, g, add, v, NULL, 0, NULL, 1, n, s, 0.0f, ST(ctx), E));
}

/* ---- copy ---- */

ttt_tensor *ttt_dev_copy(ttt_ctx *ctx, const ttt_tensor *t) {
    SAME_DEVICE(ctx, "copy", t);
    ttt_tensor *r = ttt_tensor_new(ctx, t->ndim, t->shape);
    CK(ttt_cuda_copy2d(r->data, r->n, 0, t->data, r->n, 1, r->n, ST(ctx), E));
    REC(ctx, "copy", ttt_backward_identity, r, t);
    return r;
}

/* ---- matrix products ---- */

typedef struct mat_view {
    int batch, rows, cols;
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

/* ---- the products' operands under mixed precision (ttt_ctx.mixed, docs/gpu.md "bfloat16
 * training") ---- */

/* An operand of a product: fp32 data, or under mixed precision its bfloat16 copy. */
typedef struct operand {
    const float *f;
    const uint16_t *h;
} operand;

/* Operand x of n elements for a product: itself in fp32; under mixed precision its bf16 twin
 * when it lies inside the master weights, else x rounded into arena scratch (the caller
 * releases it to a mark taken before). */
static operand operand_of(ttt_ctx *ctx, const float *x, size_t n) {
    const ttt_mixed *mx = ctx->mixed;
    if (!mx) return (operand){.f = x};
    const uintptr_t at = (uintptr_t)x, lo = (uintptr_t)mx->master;
    if (at >= lo && at - lo + n * sizeof(float) <= mx->n * sizeof(float))
        return (operand){.h = mx->twin + (x - mx->master)};
    uint16_t *h = dscratch(ctx, n * sizeof(uint16_t));
    CK(ttt_cuda_to_bf16(h, x, n, ST(ctx), E));
    return (operand){.h = h};
}

/* C = alpha·op(A)·op(B) + beta·C (ttt_cuda_sgemm's arguments) on fp32 or bf16 operands. */
static void product(ttt_ctx *ctx, float *c, float alpha, operand a, long long ao, int ta, int lda,
                    long long sa, operand b, long long bo, int tb, int ldb, long long sb,
                    float beta, long long sc, int m, int n, int k, int nb) {
    if (a.h)
        CK(ttt_cuda_gemm_bf16(c, alpha, a.h + ao, ta, lda, sa, b.h + bo, tb, ldb, sb, beta, sc, m,
                              n, k, nb, ST(ctx), E));
    else
        CK(ttt_cuda_sgemm(c, alpha, a.f + ao, ta, lda, sa, b.f + bo, tb, ldb, sb, beta, sc, m, n,
                          k, nb, ST(ctx), E));
}

/* One product per batch entry, or one strided-batched call; a shared operand's gradient
 * accumulates over the batch (beta = 1 after the first), so it is a loop. */
static void gemm_batched(ttt_ctx *ctx, float *c, long long sc, int c_shared, float alpha,
                         operand a, int ta, int lda, long long sa, operand b, int tb, int ldb,
                         long long sb, float beta0, int m, int n, int k, int nb) {
    if (!c_shared || nb == 1) {
        product(ctx, c, alpha, a, 0, ta, lda, sa, b, 0, tb, ldb, sb, beta0, sc, m, n, k, nb);
        return;
    }
    for (int i = 0; i < nb; i++)
        product(ctx, c, alpha, a, i * sa, ta, lda, 0, b, i * sb, tb, ldb, 0,
                i > 0 ? 1.0f : beta0, 0, m, n, k, 1);
}

/* ops.c matmul_grads on the device: dA = alpha·dC·op(B)ᵀ, dB = alpha·op(A)ᵀ·dC, a transposed
 * operand receiving the transpose as a product with swapped factors. Called after the
 * backward's ttt_grad calls: the bf16 operands' scratch is released before it returns. */
static void matmul_grads(ttt_ctx *ctx, float *ga, int add_a, float *gb, int add_b, float alpha,
                         const ttt_tensor *a, int ta, const ttt_tensor *b, int tb,
                         const float *dc) {
    mat_view va = mat_view_of(a), vb = mat_view_of(b);
    int m = ta ? va.cols : va.rows, k = ta ? va.rows : va.cols, n = tb ? vb.rows : vb.cols;
    int batch = va.batch ? va.batch : vb.batch, nb = batch ? batch : 1;
    long long sa = va.batch ? (long long)va.rows * va.cols : 0;
    long long sb = vb.batch ? (long long)vb.rows * vb.cols : 0;
    long long sc = (long long)m * n;
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const operand od = operand_of(ctx, dc, (size_t)sc * nb);
    const operand oa = gb ? operand_of(ctx, a->data, a->n) : (operand){0};
    const operand ob = ga ? operand_of(ctx, b->data, b->n) : (operand){0};
    if (ga) {
        if (!ta)
            gemm_batched(ctx, ga, sa, !sa, alpha, od, 0, n, sc, ob, !tb, vb.cols, sb,
                         add_a ? 1.0f : 0.0f, m, k, n, nb);
        else
            gemm_batched(ctx, ga, sa, !sa, alpha, ob, tb, vb.cols, sb, od, 1, n, sc,
                         add_a ? 1.0f : 0.0f, k, m, n, nb);
    }
    if (gb) {
        if (!tb)
            gemm_batched(ctx, gb, sb, !sb, alpha, oa, !ta, va.cols, sa, od, 0, n, sc,
                         add_b ? 1.0f : 0.0f, k, n, m, nb);
        else
            gemm_batched(ctx, gb, sb, !sb, alpha, od, 1, n, sc, oa, ta, va.cols, sa,
                         add_b ? 1.0f : 0.0f, n, k, m, nb);
    }
    ttt_arena_release(ctx->arena, mark); /* stream-ordered: after the products above */
}

static void matmul_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dc) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    int add_a, add_b;
    float *ga = ttt_grad_acc(ctx, a, &add_a);
    if (b == a) {
        matmul_grads(ctx, ga, add_a, NULL, 1, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
        matmul_grads(ctx, NULL, 1, ga, 1, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
        return;
    }
    float *gb = ttt_grad_acc(ctx, b, &add_b);
    matmul_grads(ctx, ga, add_a, gb, add_b, 1.0f, a, e->iarg[0], b, e->iarg[1], dc);
}

ttt_tensor *ttt_dev_matmul(ttt_ctx *ctx, const ttt_tensor *a, int ta, const ttt_tensor *b,
                           int tb) {
    SAME_DEVICE(ctx, "matmul", a, b);
    DCHECK(a->ndim <= 3 && b->ndim <= 3, "matmul");
    mat_view va = mat_view_of(a), vb = mat_view_of(b);
    int m = ta ? va.cols : va.rows, ka = ta ? va.rows : va.cols;
    int kb = tb ? vb.cols : vb.rows, n = tb ? vb.rows : vb.cols;
    DCHECK(ka == kb, "matmul (inner dimensions)");
    DCHECK(va.batch == 0 || vb.batch == 0 || va.batch == vb.batch, "matmul (batch)");
    int batch = va.batch ? va.batch : vb.batch;
    ttt_tensor *c;
    if (batch)
        c = ttt_tensor_3d(ctx, batch, m, n);
    else if (a->ndim == 1 && !ta && b->ndim == 2)
        c = ttt_tensor_1d(ctx, n);
    else
        c = ttt_tensor_2d(ctx, m, n);
    long long sa = va.batch ? (long long)va.rows * va.cols : 0;
    long long sb = vb.batch ? (long long)vb.rows * vb.cols : 0;
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    product(ctx, c->data, 1.0f, operand_of(ctx, a->data, a->n), 0, ta, va.cols, sa,
            operand_of(ctx, b->data, b->n), 0, tb, vb.cols, sb, 0.0f, (long long)m * n, m, n, ka,
            batch ? batch : 1);
    ttt_arena_release(ctx->arena, mark); /* the bf16 operands, if any: before the record */
    ttt_tape_entry *e = REC(ctx, "matmul", matmul_backward, c, a, b);
    if (e) {
        e->iarg[0] = ta;
        e->iarg[1] = tb;
    }
    return c;
}

static void gemm_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1], *c = e->in[2];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    matmul_grads(ctx, ga, 1, gb, 1, e->farg[0], a, e->iarg[0], b, e->iarg[1], dr);
    float *gc = ttt_grad(ctx, c);
    if (gc) put_scaled(ctx, gc, 1, dr, e->farg[1], c->n);
}

ttt_tensor *ttt_dev_gemm(ttt_ctx *ctx, float alpha, const ttt_tensor *a, int ta,
                         const ttt_tensor *b, int tb, float beta, const ttt_tensor *c) {
    SAME_DEVICE(ctx, "gemm", a, b, c);
    DCHECK(a->ndim == 2 && b->ndim == 2, "gemm");
    int m = ta ? a->shape[1] : a->shape[0], ka = ta ? a->shape[0] : a->shape[1];
    int kb = tb ? b->shape[1] : b->shape[0], n = tb ? b->shape[0] : b->shape[1];
    DCHECK(ka == kb, "gemm (inner dimensions)");
    ttt_tensor *r = ttt_tensor_2d(ctx, m, n);
    if (c) {
        DCHECK(c->ndim == 2 && c->shape[0] == m && c->shape[1] == n, "gemm (c)");
        CK(ttt_cuda_copy2d(r->data, r->n, 0, c->data, r->n, 1, r->n, ST(ctx), E));
    } else {
        beta = 0.0f;
    }
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    product(ctx, r->data, alpha, operand_of(ctx, a->data, a->n), 0, ta, a->shape[1], 0,
            operand_of(ctx, b->data, b->n), 0, tb, b->shape[1], 0, beta, 0, m, n, ka, 1);
    ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *e = REC(ctx, "gemm", gemm_backward, r, a, b, c);
    if (e) {
        e->iarg[0] = ta;
        e->iarg[1] = tb;
        e->farg[0] = alpha;
        e->farg[1] = beta;
    }
    return r;
}

static void outer_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *x = e->in[0], *y = e->in[1];
    int m = (int)x->n, n = (int)y->n;
    float *gx = ttt_grad(ctx, x), *gy = ttt_grad(ctx, y);
    if (gx) CK(ttt_cuda_sgemm(gx, 1.0f, dr, 0, n, 0, y->data, 1, n, 0, 1.0f, 0, m, 1, n, 1,
                              ST(ctx), E));
    if (gy) CK(ttt_cuda_sgemm(gy, 1.0f, x->data, 0, m, 0, dr, 0, n, 0, 1.0f, 0, 1, n, m, 1,
                              ST(ctx), E));
}

ttt_tensor *ttt_dev_outer(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *y) {
    SAME_DEVICE(ctx, "outer", x, y);
    int m = (int)x->n, n = (int)y->n;
    ttt_tensor *r = ttt_tensor_2d(ctx, m, n);
    CK(ttt_cuda_sgemm(r->data, 1.0f, x->data, 0, 1, 0, y->data, 0, n, 0, 0.0f, 0, m, n, 1, 1,
                      ST(ctx), E));
    REC(ctx, "outer", outer_backward, r, x, y);
    return r;
}

/* ---- element-wise, binary ---- */

static int is_row_vector_for(const ttt_tensor *b, const ttt_tensor *a) {
    if (b->shape[b->ndim - 1] != TTT_COLS(a)) return 0;
    for (int i = 0; i + 1 < b->ndim; i++)
        if (b->shape[i] != 1) return 0;
    return 1;
}

static int bmode_of(const ttt_tensor *a, const ttt_tensor *b) {
    return ttt_tensor_same_shape(a, b) ? TTT_B_SAME : b->n == 1 ? TTT_B_SCALAR : TTT_B_ROW;
}

/* g (+)= Σ over the broadcast of v (a's shape): as is (same), all (scalar), rows (row). */
static void sum_broadcast(ttt_ctx *ctx, float *g, int add, const float *v, int bmode,
                          const ttt_tensor *a) {
    if (bmode == TTT_B_SAME)
        put_scaled(ctx, g, add, v, 1.0f, a->n);
    else if (bmode == TTT_B_SCALAR)
        CK(ttt_cuda_reduce(TTT_RED_COLS, g, add, v, NULL, 1, a->n, 1.0, ST(ctx), E));
    else
        CK(ttt_cuda_reduce(TTT_RED_ROWS, g, add, v, NULL, rows_of(a), (size_t)TTT_COLS(a), 1.0,
                           ST(ctx), E));
}

/* ops.c binary_backward: add: da = dr, db = dr; sub: db = −dr; mul: da = dr·b, db = dr·a;
 * div: da = dr/b, db = −dr·a/b²; db summed over the broadcast. */
static void binary_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    const int op = e->iarg[0], bm = bmode_of(a, b);
    const size_t cols = (size_t)TTT_COLS(a), n = a->n;
    int add_a, add_b;
    float *ga = ttt_grad_acc(ctx, a, &add_a);
    if (ga) {
        if (op == TTT_MAP_ADD || op == TTT_MAP_SUB)
            put_scaled(ctx, ga, add_a, dr, 1.0f, n);
        else
            CK(ttt_cuda_map(op, ga, add_a, dr, b->data, bm, NULL, cols, n, 0, 0, ST(ctx), E));
    }
    float *gb = ttt_grad_acc(ctx, b, &add_b);
    if (!gb) return;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const float *v = dr;
    float sg = 1.0f;
    if (op == TTT_MAP_SUB) sg = -1.0f;
    if (op == TTT_MAP_MUL || op == TTT_MAP_DIV) {
        float *t = dscratch(ctx, n * sizeof(float));
        if (op == TTT_MAP_MUL)
            CK(ttt_cuda_map(TTT_MAP_MUL, t, 0, dr, a->data, TTT_B_SAME, NULL, cols, n, 0, 0,
                            ST(ctx), E));
        else
            CK(ttt_cuda_map(TTT_MAP_D_DIV_B, t, 0, dr, b->data, bm, a->data, cols, n, 0, 0,
                            ST(ctx), E));
        v = t;
    }
    if (sg != 1.0f && bm == TTT_B_SAME) {
        put_scaled(ctx, gb, add_b, v, sg, n);
    } else if (sg != 1.0f) {
        float *t = dscratch(ctx, n * sizeof(float));
        put_scaled(ctx, t, 0, v, sg, n);
        sum_broadcast(ctx, gb, add_b, t, bm, a);
    } else {
        sum_broadcast(ctx, gb, add_b, v, bm, a);
    }
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_binary(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, int op,
                           const char *name) {
    SAME_DEVICE(ctx, name, a, b);
    const int bm = bmode_of(a, b);
    if (bm == TTT_B_ROW) DCHECK(is_row_vector_for(b, a), name);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(op, r->data, 0, a->data, b->data, bm, NULL, (size_t)TTT_COLS(a), a->n, 0, 0,
                    ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, binary_backward, r, a, b);
    if (e) e->iarg[0] = op;
    return r;
}

static void axpby_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    for (int k = 0; k < 2; k++) {
        float *g = ttt_grad(ctx, e->in[k]);
        if (g) put_scaled(ctx, g, 1, dr, e->farg[k], e->out->n);
    }
}

ttt_tensor *ttt_dev_axpby(ttt_ctx *ctx, float alpha, const ttt_tensor *a, float beta,
                          const ttt_tensor *b) {
    SAME_DEVICE(ctx, "axpby", a, b);
    DCHECK(ttt_tensor_same_shape(a, b), "axpby");
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(TTT_MAP_AXPBY, r->data, 0, a->data, b->data, TTT_B_SAME, NULL, 1, a->n, alpha,
                    beta, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "axpby", axpby_backward, r, a, b);
    if (e) {
        e->farg[0] = alpha;
        e->farg[1] = beta;
    }
    return r;
}

static void scale_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    int add;
    float *g = ttt_grad_acc(ctx, e->in[0], &add);
    if (g) put_scaled(ctx, g, add, dr, e->farg[0], e->out->n);
}

ttt_tensor *ttt_dev_scale(ttt_ctx *ctx, const ttt_tensor *a, float s, int add_scalar) {
    SAME_DEVICE(ctx, add_scalar ? "add_scalar" : "scale", a);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(add_scalar ? TTT_MAP_ADD_SCALAR : TTT_MAP_SCALE, r->data, 0, a->data, NULL, 0,
                    NULL, 1, a->n, s, 0.0f, ST(ctx), E));
    ttt_tape_entry *e =
        REC(ctx, add_scalar ? "add_scalar" : "scale", scale_backward, r, a);
    if (e) e->farg[0] = add_scalar ? 1.0f : s;
    return r;
}

/* iarg[0]: the broadcast of v (PER_ROW for scale_rows, ROW for scale_cols). */
static void scale_rc_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *v = e->in[1];
    const int bm = e->iarg[0];
    const size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    int add_a;
    float *ga = ttt_grad_acc(ctx, a, &add_a), *gv = ttt_grad(ctx, v);
    if (ga)
        CK(ttt_cuda_map(TTT_MAP_MUL, ga, add_a, dr, v->data, bm, NULL, cols, a->n, 0, 0, ST(ctx),
                        E));
    if (gv)
        CK(ttt_cuda_reduce(bm == TTT_B_PER_ROW ? TTT_RED_COLS : TTT_RED_ROWS, gv, 1, dr, a->data,
                           rows, cols, 1.0, ST(ctx), E));
}

static ttt_tensor *scale_rc(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v, int bm,
                            const char *name) {
    SAME_DEVICE(ctx, name, a, v);
    DCHECK(v->n == (bm == TTT_B_PER_ROW ? rows_of(a) : (size_t)TTT_COLS(a)), name);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(TTT_MAP_MUL, r->data, 0, a->data, v->data, bm, NULL, (size_t)TTT_COLS(a),
                    a->n, 0, 0, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, scale_rc_backward, r, a, v);
    if (e) e->iarg[0] = bm;
    return r;
}

ttt_tensor *ttt_dev_scale_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    return scale_rc(ctx, a, v, TTT_B_PER_ROW, "scale_rows");
}
ttt_tensor *ttt_dev_scale_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v) {
    return scale_rc(ctx, a, v, TTT_B_ROW, "scale_cols");
}

/* ---- element-wise, unary ---- */

/* iarg[0] = the backward's map op, farg[2..3] its parameters. */
static void unary_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    int add;
    float *g = ttt_grad_acc(ctx, a, &add);
    if (g)
        CK(ttt_cuda_map(e->iarg[0], g, add, dr, NULL, 0, a->data, 1, a->n, e->farg[2], e->farg[3],
                        ST(ctx), E));
}

ttt_tensor *ttt_dev_unary(ttt_ctx *ctx, const ttt_tensor *a, int fop, float p0, float p1, int bop,
                          float bp0, float bp1, const char *name) {
    SAME_DEVICE(ctx, name, a);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(fop, r->data, 0, a->data, NULL, 0, NULL, 1, a->n, p0, p1, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, unary_backward, r, a);
    if (e) {
        e->iarg[0] = bop;
        e->farg[0] = p0;
        e->farg[1] = p1;
        e->farg[2] = bp0;
        e->farg[3] = bp1;
    }
    return r;
}

static void extremum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    const float is_max = (float)e->iarg[0];
    if (ga)
        CK(ttt_cuda_map(TTT_MAP_D_EXT_A, ga, 1, dr, a->data, TTT_B_SAME, b->data, 1, a->n, is_max,
                        0, ST(ctx), E));
    if (gb)
        CK(ttt_cuda_map(TTT_MAP_D_EXT_B, gb, 1, dr, a->data, TTT_B_SAME, b->data, 1, a->n, is_max,
                        0, ST(ctx), E));
}

ttt_tensor *ttt_dev_extremum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, int is_max) {
    const char *name = is_max ? "maximum" : "minimum";
    SAME_DEVICE(ctx, name, a, b);
    DCHECK(ttt_tensor_same_shape(a, b), name);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_map(is_max ? TTT_MAP_MAX : TTT_MAP_MIN, r->data, 0, a->data, b->data, TTT_B_SAME,
                    NULL, 1, a->n, 0, 0, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, extremum_backward, r, a, b);
    if (e) e->iarg[0] = is_max;
    return r;
}

/* ---- reductions ---- */

/* s = scale·Σ a: da = scale·ds everywhere (farg[0] = scale). */
static void sum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *ds) {
    const ttt_tensor *a = e->in[0];
    int add;
    float *g = ttt_grad_acc(ctx, a, &add);
    if (g)
        CK(ttt_cuda_map(TTT_MAP_BCAST, g, add, NULL, ds, TTT_B_SCALAR, NULL, 1, a->n, e->farg[0],
                        0, ST(ctx), E));
}

ttt_tensor *ttt_dev_sum(ttt_ctx *ctx, const ttt_tensor *a, double scale, const char *name) {
    SAME_DEVICE(ctx, name, a);
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    CK(ttt_cuda_reduce(TTT_RED_COLS, r->data, 0, a->data, NULL, 1, a->n, scale, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, sum_backward, r, a);
    if (e) e->farg[0] = (float)scale;
    return r;
}

static void dot_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *ds) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b);
    if (ga)
        CK(ttt_cuda_map(TTT_MAP_MUL, ga, 1, b->data, ds, TTT_B_SCALAR, NULL, 1, a->n, 0, 0, ST(ctx),
                        E));
    if (gb)
        CK(ttt_cuda_map(TTT_MAP_MUL, gb, 1, a->data, ds, TTT_B_SCALAR, NULL, 1, b->n, 0, 0, ST(ctx),
                        E));
}

ttt_tensor *ttt_dev_dot(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
    SAME_DEVICE(ctx, "dot", a, b);
    DCHECK(a->n == b->n, "dot (element counts)");
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    CK(ttt_cuda_reduce(TTT_RED_COLS, r->data, 0, a->data, b->data, 1, a->n, 1.0, ST(ctx), E));
    REC(ctx, "dot", dot_backward, r, a, b);
    return r;
}

/* r_i = ‖a_i‖ (rows; one row for norm_fro): da_i = (dr_i / r_i)·a_i, 0 for a zero row. */
static void norms_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    if (!g) return;
    const size_t rows = e->out->n, cols = rows ? a->n / rows : 0;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *q = dscratch(ctx, rows * sizeof(float));
    CK(ttt_cuda_map(TTT_MAP_SAFE_DIV, q, 0, dr, e->out->data, TTT_B_SAME, NULL, 1, rows, 0, 0,
                    ST(ctx), E));
    CK(ttt_cuda_map(TTT_MAP_MUL, g, 1, a->data, q, TTT_B_PER_ROW, NULL, cols, a->n, 0, 0, ST(ctx),
                    E));
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_norm_fro(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "norm_fro", a);
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    CK(ttt_cuda_reduce(TTT_RED_COLS_SQRT, r->data, 0, a->data, a->data, 1, a->n, 1.0, ST(ctx), E));
    REC(ctx, "norm_fro", norms_backward, r, a);
    return r;
}

ttt_tensor *ttt_dev_row_norms(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "row_norms", a);
    const size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    CK(ttt_cuda_reduce(TTT_RED_COLS_SQRT, r->data, 0, a->data, a->data, rows, cols, 1.0, ST(ctx),
                       E));
    REC(ctx, "row_norms", norms_backward, r, a);
    return r;
}

/* iarg[0]: the broadcast that undoes the reduction (ROW for sum_rows, PER_ROW for sum_cols). */
static void sum_rc_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    if (g)
        CK(ttt_cuda_map(TTT_MAP_BCAST, g, 1, NULL, dr, e->iarg[0], NULL, (size_t)TTT_COLS(a), a->n,
                        1.0f, 0, ST(ctx), E));
}

ttt_tensor *ttt_dev_sum_rows(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "sum_rows", a);
    const size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)cols);
    CK(ttt_cuda_reduce(TTT_RED_ROWS, r->data, 0, a->data, NULL, rows, cols, 1.0, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "sum_rows", sum_rc_backward, r, a);
    if (e) e->iarg[0] = TTT_B_ROW;
    return r;
}

ttt_tensor *ttt_dev_sum_cols(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "sum_cols", a);
    const size_t rows = rows_of(a), cols = (size_t)TTT_COLS(a);
    ttt_tensor *r = ttt_tensor_1d(ctx, (int)rows);
    CK(ttt_cuda_reduce(TTT_RED_COLS, r->data, 0, a->data, NULL, rows, cols, 1.0, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "sum_cols", sum_rc_backward, r, a);
    if (e) e->iarg[0] = TTT_B_PER_ROW;
    return r;
}

static void cumsum_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    size_t T = (size_t)a->shape[0], d = a->ndim == 2 ? (size_t)a->shape[1] : 1;
    float *g = ttt_grad(ctx, a);
    if (g) CK(ttt_cuda_cumsum(g, 1, dr, T, d, 1, ST(ctx), E));
}

ttt_tensor *ttt_dev_cumsum(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "cumsum", a);
    DCHECK(a->ndim == 1 || a->ndim == 2, "cumsum (1-D or 2-D)");
    size_t T = (size_t)a->shape[0], d = a->ndim == 2 ? (size_t)a->shape[1] : 1;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_cumsum(r->data, 0, a->data, T, d, 0, ST(ctx), E));
    REC(ctx, "cumsum", cumsum_backward, r, a);
    return r;
}

/* ---- norms and softmax ---- */

/* iarg[0] = kind, farg[0] = eps; in = x, gamma, beta. dγ = Σ_rows dy ⊙ x̂, dβ = Σ_rows dy. */
static void rownorm_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const int kind = e->iarg[0];
    const ttt_tensor *x = e->in[0];
    const ttt_tensor *gamma = e->n_in > 1 ? e->in[1] : NULL, *beta = e->n_in > 2 ? e->in[2] : NULL;
    const size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    int add_x;
    float *gx = ttt_grad_acc(ctx, x, &add_x);
    float *gg = ttt_grad(ctx, gamma), *gb = ttt_grad(ctx, beta);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *dyxh = gg ? dscratch(ctx, x->n * sizeof(float)) : NULL;
    const float *xin = kind == TTT_NORM_SOFTMAX ? e->out->data : x->data;
    if (gx || dyxh)
        CK(ttt_cuda_rownorm_backward(kind, gx, add_x, dyxh, dy, xin, gamma ? gamma->data : NULL,
                                     rows, n, e->farg[0], ST(ctx), E));
    if (gg) CK(ttt_cuda_reduce(TTT_RED_ROWS, gg, 1, dyxh, NULL, rows, n, 1.0, ST(ctx), E));
    if (gb) CK(ttt_cuda_reduce(TTT_RED_ROWS, gb, 1, dy, NULL, rows, n, 1.0, ST(ctx), E));
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_rownorm(ttt_ctx *ctx, int kind, const ttt_tensor *x, const ttt_tensor *gamma,
                            const ttt_tensor *beta, float eps, const char *name) {
    SAME_DEVICE(ctx, name, x, gamma, beta);
    const size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    if (gamma) DCHECK(gamma->n == n, name);
    if (beta) DCHECK(beta->n == n, name);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    CK(ttt_cuda_rownorm(kind, r->data, x->data, gamma ? gamma->data : NULL,
                        beta ? beta->data : NULL, rows, n, eps, ST(ctx), E));
    ttt_tape_entry *e;
    if (kind == TTT_NORM_LAYER)
        e = REC(ctx, name, rownorm_backward, r, x, gamma, beta);
    else if (kind == TTT_NORM_RMS)
        e = REC(ctx, name, rownorm_backward, r, x, gamma);
    else
        e = REC(ctx, name, rownorm_backward, r, x);
    if (e) {
        e->iarg[0] = kind;
        e->farg[0] = eps;
    }
    return r;
}

/* ops.c layernorm_backward as an op: dx of layernorm given dy, computed by the backward kernel.
 * Its own backward (second derivatives) has no device implementation yet: recording it stops
 * like an op without one. */
ttt_tensor *ttt_dev_layernorm_backward(ttt_ctx *ctx, const ttt_tensor *dy, const ttt_tensor *x,
                                       const ttt_tensor *gamma, float eps) {
    SAME_DEVICE(ctx, "layernorm_backward", dy, x, gamma);
    const size_t rows = rows_of(x), n = (size_t)TTT_COLS(x);
    DCHECK(ttt_tensor_same_shape(dy, x), "layernorm_backward (dy and x)");
    if (gamma) DCHECK(gamma->n == n, "layernorm_backward (gamma)");
    if (ttt_recording(ctx) &&
        (dy->requires_grad || x->requires_grad || (gamma && gamma->requires_grad)))
        ttt_dev_unsupported("layernorm_backward (recorded, for its backward)", x);
    ttt_tensor *r = ttt_tensor_new(ctx, x->ndim, x->shape);
    CK(ttt_cuda_rownorm_backward(TTT_NORM_LAYER, r->data, 0, NULL, dy->data, x->data,
                                 gamma ? gamma->data : NULL, rows, n, eps, ST(ctx), E));
    return r;
}

/* ---- triangular solves ---- */

/* X = L⁻¹B: dB = L⁻ᵀdX (= Y), dL = −tril(Y·Xᵀ) (strictly lower when unit). */
static void solve_lower_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dX) {
    const ttt_tensor *L = e->in[0], *B = e->in[1], *X = e->out;
    const int unit = e->iarg[0];
    const int n = L->shape[0], m = B->ndim == 2 ? B->shape[1] : 1;
    float *gL = ttt_grad(ctx, L), *gB = ttt_grad(ctx, B);
    if (n == 0 || m == 0) return;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *Y = dscratch(ctx, (size_t)n * m * sizeof(float));
    CK(ttt_cuda_copy2d(Y, (size_t)n * m, 0, dX, (size_t)n * m, 1, (size_t)n * m, ST(ctx), E));
    CK(ttt_cuda_strsm_lower(Y, L->data, n, m, 1, unit, ST(ctx), E));
    if (gB) put_scaled(ctx, gB, 1, Y, 1.0f, (size_t)n * m);
    if (gL) {
        float *P = dscratch(ctx, (size_t)n * n * sizeof(float)); /* Y·Xᵀ, then its lower part */
        CK(ttt_cuda_sgemm(P, 1.0f, Y, 0, m, 0, X->data, 1, m, 0, 0.0f, 0, n, n, m, 1, ST(ctx), E));
        CK(ttt_cuda_mask(TTT_MASK_TRIL, P, 0, P, 1, n, n, unit ? -1 : 0, ST(ctx), E));
        put_scaled(ctx, gL, 1, P, -1.0f, (size_t)n * n);
    }
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_solve_lower(ttt_ctx *ctx, const ttt_tensor *L, const ttt_tensor *B, int unit) {
    SAME_DEVICE(ctx, "solve_lower", L, B);
    DCHECK(L->ndim == 2 && L->shape[0] == L->shape[1], "solve_lower (L square)");
    DCHECK((B->ndim == 1 || B->ndim == 2) && B->shape[0] == L->shape[0],
           "solve_lower (rows of B)");
    const int n = L->shape[0], m = B->ndim == 2 ? B->shape[1] : 1;
    ttt_tensor *X = ttt_tensor_new(ctx, B->ndim, B->shape);
    CK(ttt_cuda_copy2d(X->data, B->n, 0, B->data, B->n, 1, B->n, ST(ctx), E));
    CK(ttt_cuda_strsm_lower(X->data, L->data, n, m, 0, unit, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "solve_lower", solve_lower_backward, X, L, B);
    if (e) e->iarg[0] = unit;
    return X;
}

/* ---- masks ---- */

/* Kept entries pass their gradient (tril with k; causal_fill keeps j ≤ i: tril with 0). */
static void mask_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    if (g)
        CK(ttt_cuda_mask(TTT_MASK_TRIL, g, 1, dr, mats_of(a), a->shape[a->ndim - 2],
                         a->shape[a->ndim - 1], e->iarg[0], ST(ctx), E));
}

ttt_tensor *ttt_dev_mask(ttt_ctx *ctx, const ttt_tensor *a, int kind, int k, const char *name) {
    SAME_DEVICE(ctx, name, a);
    DCHECK(a->ndim >= 2, name);
    if (kind == TTT_MASK_CAUSAL_FILL) DCHECK(a->shape[a->ndim - 2] == a->shape[a->ndim - 1], name);
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, a->shape);
    CK(ttt_cuda_mask(kind, r->data, 0, a->data, mats_of(a), a->shape[a->ndim - 2],
                     a->shape[a->ndim - 1], k, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, mask_backward, r, a);
    if (e) e->iarg[0] = kind == TTT_MASK_TRIL ? k : 0;
    return r;
}

/* dg_i += Σ_j dD_ij·D_ij, dg_j −= Σ_i dD_ij·D_ij (D is 0 outside the mask). */
static void decay_mask_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dD) {
    const ttt_tensor *g = e->in[0];
    const size_t T = (size_t)g->shape[0];
    float *gg = ttt_grad(ctx, g);
    if (!gg) return;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *p = dscratch(ctx, T * T * sizeof(float));
    CK(ttt_cuda_map(TTT_MAP_MUL, p, 0, dD, e->out->data, TTT_B_SAME, NULL, 1, T * T, 0, 0, ST(ctx),
                    E));
    CK(ttt_cuda_reduce(TTT_RED_COLS, gg, 1, p, NULL, T, T, 1.0, ST(ctx), E));
    CK(ttt_cuda_reduce(TTT_RED_ROWS, gg, 1, p, NULL, T, T, -1.0, ST(ctx), E));
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_decay_mask(ttt_ctx *ctx, const ttt_tensor *g, int strict) {
    SAME_DEVICE(ctx, "decay_mask", g);
    DCHECK(g->ndim == 1, "decay_mask (g must be 1-D)");
    const int T = g->shape[0];
    ttt_tensor *r = ttt_tensor_2d(ctx, T, T);
    CK(ttt_cuda_decay_mask(r->data, g->data, T, strict, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "decay_mask", decay_mask_backward, r, g);
    if (e) e->iarg[0] = strict;
    return r;
}

/* ---- shape ---- */

static void transpose_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    const int m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    if (g) CK(ttt_cuda_transpose(g, 1, dr, mats_of(a), n, m, ST(ctx), E));
}

ttt_tensor *ttt_dev_transpose(ttt_ctx *ctx, const ttt_tensor *a) {
    SAME_DEVICE(ctx, "transpose", a);
    DCHECK(a->ndim == 2 || a->ndim == 3, "transpose (2-D or 3-D)");
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    const int m = shp[a->ndim - 2], n = shp[a->ndim - 1];
    shp[a->ndim - 2] = n;
    shp[a->ndim - 1] = m;
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    CK(ttt_cuda_transpose(r->data, 0, a->data, mats_of(a), m, n, ST(ctx), E));
    REC(ctx, "transpose", transpose_backward, r, a);
    return r;
}

static size_t row_stride(const ttt_tensor *t) {
    return t->shape[0] ? t->n / (size_t)t->shape[0] : 0;
}

static void slice_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    float *g = ttt_grad(ctx, a);
    if (g)
        CK(ttt_cuda_copy2d(g + (size_t)e->iarg[0] * row_stride(a), e->out->n, 1, dr, e->out->n, 1,
                           e->out->n, ST(ctx), E));
}

ttt_tensor *ttt_dev_slice_rows(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1) {
    SAME_DEVICE(ctx, "slice_rows", a);
    DCHECK(0 <= r0 && r0 <= r1 && r1 <= a->shape[0], "slice_rows (rows out of range)");
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = r1 - r0;
    const size_t st = row_stride(a);
    ttt_tensor *r;
    if (ttt_recording(ctx) && a->requires_grad) { /* a view, as on the host (ops.c) */
        r = ttt_arena_alloc(ttt_arena_host(ctx->arena), sizeof *r);
        TTT_ASSERT(r != NULL);
        *r = ttt_tensor_view_on(ttt_tensor_device(a), a->data + (size_t)r0 * st, a->ndim, shp);
    } else {
        r = ttt_tensor_new(ctx, a->ndim, shp);
        CK(ttt_cuda_copy2d(r->data, r->n, 0, a->data + (size_t)r0 * st, r->n, 1, r->n, ST(ctx),
                           E));
    }
    ttt_tape_entry *e = REC(ctx, "slice_rows", slice_rows_backward, r, a);
    if (e) e->iarg[0] = r0;
    return r;
}

static void concat_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    size_t off = 0;
    for (int p = 0; p < e->n_in; p++) {
        const ttt_tensor *t = e->in[p];
        int add;
        float *g = ttt_grad_acc(ctx, t, &add);
        if (g) put_scaled(ctx, g, add, dr + off, 1.0f, t->n);
        off += t->n;
    }
}

ttt_tensor *ttt_dev_concat_rows_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n) {
    TTT_ASSERT(n >= 1);
    same_device(ctx, "concat_rows", parts, n);
    const ttt_tensor *a = parts[0];
    int shp[TTT_MAX_DIMS];
    memcpy(shp, a->shape, sizeof shp);
    shp[0] = 0;
    for (int p = 0; p < n; p++) {
        const ttt_tensor *t = parts[p];
        int ok = t->ndim == a->ndim;
        for (int i = 1; ok && i < a->ndim; i++) ok = t->shape[i] == a->shape[i];
        DCHECK(ok, "concat_rows (all dims but the first must match)");
        shp[0] += t->shape[0];
    }
    ttt_tensor *r = ttt_tensor_new(ctx, a->ndim, shp);
    size_t off = 0;
    for (int p = 0; p < n; p++) {
        CK(ttt_cuda_copy2d(r->data + off, parts[p]->n, 0, parts[p]->data, parts[p]->n, 1,
                           parts[p]->n, ST(ctx), E));
        off += parts[p]->n;
    }
    if (ctx->grad) rec(ctx, n == 2 ? "concat_rows" : "concat_rows_n", concat_rows_backward, r,
                       parts, n);
    return r;
}

/* iarg = r0, c0: the block's gradient lands in the same place of a. */
static void slice_block_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *a = e->in[0];
    const size_t cols = (size_t)TTT_COLS(a), w = (size_t)TTT_COLS(e->out),
                 h = rows_of(e->out);
    float *g = ttt_grad(ctx, a);
    if (g)
        CK(ttt_cuda_copy2d(g + (size_t)e->iarg[0] * cols + (size_t)e->iarg[1], cols, 1, dr, w, h,
                           w, ST(ctx), E));
}

ttt_tensor *ttt_dev_slice_block(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1, int c0, int c1,
                                int as_cols) {
    const char *name = as_cols ? "slice_cols" : "slice_block";
    SAME_DEVICE(ctx, name, a);
    const size_t rows = rows_of(a);
    const int nc = TTT_COLS(a);
    DCHECK(0 <= r0 && r0 <= r1 && (size_t)r1 <= rows && 0 <= c0 && c0 <= c1 && c1 <= nc, name);
    const size_t h = (size_t)(r1 - r0), w = (size_t)(c1 - c0);
    ttt_tensor *r;
    if (as_cols) {
        int shp[TTT_MAX_DIMS];
        memcpy(shp, a->shape, sizeof shp);
        shp[a->ndim - 1] = (int)w;
        r = ttt_tensor_new(ctx, a->ndim, shp);
    } else {
        r = ttt_tensor_2d(ctx, (int)h, (int)w);
    }
    CK(ttt_cuda_copy2d(r->data, w, 0, a->data + (size_t)r0 * (size_t)nc + (size_t)c0, (size_t)nc,
                       h, w, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, name, slice_block_backward, r, a);
    if (e) {
        e->iarg[0] = r0;
        e->iarg[1] = c0;
    }
    return r;
}

/* iarg = nr, nc: each part gets its block of dr, every element of it. */
static void concat_grid_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const int nr = e->iarg[0], nc = e->iarg[1];
    const size_t cols = (size_t)TTT_COLS(e->out);
    size_t r0 = 0;
    for (int i = 0; i < nr; i++) {
        size_t c0 = 0;
        const size_t h = rows_of(e->in[(size_t)i * nc]);
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = e->in[(size_t)i * nc + j];
            const size_t w = (size_t)TTT_COLS(t);
            int add;
            float *g = ttt_grad_acc(ctx, t, &add);
            if (g) CK(ttt_cuda_copy2d(g, w, add, dr + r0 * cols + c0, cols, h, w, ST(ctx), E));
            c0 += w;
        }
        r0 += h;
    }
}

ttt_tensor *ttt_dev_concat_grid(ttt_ctx *ctx, const ttt_tensor *const *parts, int nr, int nc,
                                int as_cols) {
    const char *name = as_cols ? "concat_cols" : "concat_grid";
    TTT_ASSERT(nr >= 1 && nc >= 1);
    same_device(ctx, name, parts, nr * nc);
    size_t rows = 0, cols = 0;
    for (int i = 0; i < nr; i++) rows += rows_of(parts[(size_t)i * nc]);
    for (int j = 0; j < nc; j++) cols += (size_t)TTT_COLS(parts[j]);
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = parts[(size_t)i * nc + j];
            DCHECK(rows_of(t) == rows_of(parts[(size_t)i * nc]) &&
                       TTT_COLS(t) == TTT_COLS(parts[j]) && (as_cols || t->ndim == 2),
                   name);
            if (as_cols) {
                int ok = t->ndim == parts[0]->ndim;
                for (int d = 0; ok && d + 1 < t->ndim; d++) ok = t->shape[d] == parts[0]->shape[d];
                DCHECK(ok, "concat_cols (all dims but the last must match)");
            }
        }
    ttt_tensor *r;
    if (as_cols) {
        int shp[TTT_MAX_DIMS];
        memcpy(shp, parts[0]->shape, sizeof shp);
        shp[parts[0]->ndim - 1] = (int)cols;
        r = ttt_tensor_new(ctx, parts[0]->ndim, shp);
    } else {
        r = ttt_tensor_2d(ctx, (int)rows, (int)cols);
    }
    size_t r0 = 0;
    for (int i = 0; i < nr; i++) {
        size_t c0 = 0;
        const size_t h = rows_of(parts[(size_t)i * nc]);
        for (int j = 0; j < nc; j++) {
            const ttt_tensor *t = parts[(size_t)i * nc + j];
            const size_t w = (size_t)TTT_COLS(t);
            CK(ttt_cuda_copy2d(r->data + r0 * cols + c0, cols, 0, t->data, w, h, w, ST(ctx), E));
            c0 += w;
        }
        r0 += h;
    }
    if (ctx->grad) {
        ttt_tape_entry *e = rec(ctx, as_cols ? "concat_cols_n" : "concat_grid",
                                concat_grid_backward, r, parts, nr * nc);
        if (e) {
            e->iarg[0] = nr;
            e->iarg[1] = nc;
        }
    }
    return r;
}

/* ---- sequence-model ops ---- */

/* aux: a device copy of ids; iarg[0] = n. */
static void embedding_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dr) {
    const ttt_tensor *table = e->in[0];
    float *g = ttt_grad(ctx, table);
    if (g)
        CK(ttt_cuda_scatter_add_rows(g, dr, e->aux, e->iarg[0], table->shape[1], table->shape[0],
                                     ST(ctx), E));
}

ttt_tensor *ttt_dev_embedding(ttt_ctx *ctx, const ttt_tensor *table, const int *ids, int n) {
    SAME_DEVICE(ctx, "embedding", table);
    DCHECK(table->ndim == 2, "embedding (table must be (V, d))");
    TTT_ASSERT(n >= 0);
    const int V = table->shape[0], d = table->shape[1];
    ttt_tensor *r = ttt_tensor_2d(ctx, n, d);
    CK(ttt_cuda_gather_rows(r->data, table->data, ids, n, d, V, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "embedding", embedding_backward, r, table);
    if (e) {
        int *saved = dscratch(ctx, (size_t)(n ? n : 1) * sizeof(int));
        if (n)
            CK(ttt_device_copy(saved, ctx->arena->device, ids, ctx->arena->device,
                               (size_t)n * sizeof(int), ST(ctx), E));
        e->aux = saved;
        e->iarg[0] = n;
    }
    return r;
}

/* Device memory kept for the cross-entropy's backward. */
typedef struct ce_saved {
    int *targets;             /* (N) device copy */
    float *lse;               /* (N) device */
    ttt_cuda_ce_stats *stats; /* device */
} ce_saved;

static void cross_entropy_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dl) {
    const ttt_tensor *z = e->in[0];
    const ce_saved *s = e->aux;
    int add;
    /* over z's values when the op consumed z (ttt_cross_entropy_consume): the kernel's thread
     * reads each element before it writes it */
    float *g = e->iarg[0] ? ttt_grad_acc_over_values(ctx, z, &add) : ttt_grad_acc(ctx, z, &add);
    if (g)
        CK(ttt_cuda_cross_entropy_backward(g, add, z->data, s->targets, s->lse, s->stats, dl,
                                           (int)rows_of(z), TTT_COLS(z), ST(ctx), E));
}

ttt_tensor *ttt_dev_cross_entropy(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets,
                                  int N, ttt_ce_stats *stats, int consume) {
    SAME_DEVICE(ctx, "cross_entropy", logits);
    DCHECK(logits->ndim >= 1 && rows_of(logits) == (size_t)N,
           "cross_entropy (logits must have N rows)");
    const int V = TTT_COLS(logits);
    ttt_tensor *r = ttt_tensor_1d(ctx, 1);
    const int keep = ttt_recording(ctx) && logits->requires_grad;
    const size_t nn = (size_t)(N ? N : 1);
    /* what the backward keeps first, then the scratch released below */
    float *lse = dscratch(ctx, nn * sizeof(float));
    ttt_cuda_ce_stats *st = dscratch(ctx, sizeof *st);
    int *tcopy = NULL;
    if (keep) {
        tcopy = dscratch(ctx, nn * sizeof(int));
        if (N)
            CK(ttt_device_copy(tcopy, ctx->arena->device, targets, ctx->arena->device,
                               (size_t)N * sizeof(int), ST(ctx), E));
    }
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *row_loss = dscratch(ctx, nn * sizeof(double));
    int *row_flag = dscratch(ctx, nn * sizeof(int));
    CK(ttt_cuda_cross_entropy(r->data, lse, st, row_loss, row_flag, logits->data, targets, N, V,
                              ST(ctx), E));
    ttt_arena_release(ctx->arena, mark);
    if (stats) { /* the caller wants numbers on the host: the one wait of the device ops */
        ttt_cuda_ce_stats h = {0.0, 0, 0};
        ttt_status s = ttt_device_copy(&h, ttt_device_host(), st, ctx->arena->device, sizeof h,
                                       ST(ctx), E);
        if (s == TTT_OK) s = ttt_device_sync(ctx->arena->device, ST(ctx), E);
        CK(s);
        stats->count = h.count;
        stats->correct = h.correct;
        stats->loss_sum = h.loss_sum;
    }
    if (keep) {
        ce_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        sv->targets = tcopy;
        sv->lse = lse;
        sv->stats = st;
        ttt_tape_entry *e = REC(ctx, "cross_entropy", cross_entropy_backward, r, logits);
        if (e) {
            e->aux = sv;
            e->iarg[0] = consume;
        }
    }
    return r;
}

static void conv_dims(const ttt_tensor *x, int *B, int *T, int *C) {
    *B = x->ndim == 3 ? x->shape[0] : 1;
    *T = x->shape[x->ndim - 2];
    *C = x->shape[x->ndim - 1];
}

/* iarg[0] = silu: dz = dy·silu'(z) with z recomputed (the forward did not keep it). */
static void conv1d_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *w = e->in[1], *bias = e->n_in > 2 ? e->in[2] : NULL;
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    const int K = w->shape[0];
    int add_x, add_w;
    float *gx = ttt_grad_acc(ctx, x, &add_x), *gw = ttt_grad_acc(ctx, w, &add_w);
    float *gb = ttt_grad(ctx, bias);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const float *dz = dy;
    if (e->iarg[0]) {
        float *z = dscratch(ctx, x->n * sizeof(float));
        CK(ttt_cuda_conv1d(z, x->data, w->data, NULL, B, T, C, K, 0, ST(ctx), E));
        CK(ttt_cuda_map(TTT_MAP_D_SILU, z, 0, dy, NULL, 0, z, 1, x->n, 0, 0, ST(ctx), E));
        dz = z;
    }
    CK(ttt_cuda_conv1d_backward(gx, add_x, gw, add_w, dz, x->data, w->data, B, T, C, K, ST(ctx),
                                E));
    if (gb)
        CK(ttt_cuda_reduce(TTT_RED_ROWS, gb, 1, dz, NULL, (size_t)B * T, (size_t)C, 1.0, ST(ctx),
                           E));
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_conv1d(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w,
                           const ttt_tensor *bias, int silu) {
    const char *name = silu ? "conv1d_causal_silu" : "conv1d_causal";
    SAME_DEVICE(ctx, name, x, w, bias);
    DCHECK((x->ndim == 2 || x->ndim == 3) && w->ndim == 2 && w->shape[1] == TTT_COLS(x), name);
    if (bias) DCHECK(bias->n == (size_t)TTT_COLS(x), name);
    int B, T, C;
    conv_dims(x, &B, &T, &C);
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    CK(ttt_cuda_conv1d(y->data, x->data, w->data, bias ? bias->data : NULL, B, T, C, w->shape[0],
                       silu, ST(ctx), E));
    ttt_tape_entry *e = silu ? REC(ctx, name, conv1d_backward, y, x, w)
                             : REC(ctx, name, conv1d_backward, y, x, w, bias);
    if (e) e->iarg[0] = silu;
    return y;
}

static void rope_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    float *gx = ttt_grad(ctx, x);
    if (!gx) return;
    const int d = TTT_COLS(x), T = (int)(x->n / (size_t)(d ? d : 1));
    CK(ttt_cuda_rope(gx, 1, dy, T, d, e->iarg[0], e->farg[0], 1, ST(ctx), E));
}

ttt_tensor *ttt_dev_rope(ttt_ctx *ctx, const ttt_tensor *x, int pos0, float base) {
    SAME_DEVICE(ctx, "rope", x);
    const int d = TTT_COLS(x), T = d ? (int)(x->n / (size_t)d) : 0;
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    CK(ttt_cuda_rope(y->data, 0, x->data, T, d, pos0, base, 0, ST(ctx), E));
    ttt_tape_entry *e = REC(ctx, "rope", rope_backward, y, x);
    if (e) {
        e->iarg[0] = pos0;
        e->farg[0] = base;
    }
    return y;
}

/* ---- fused causal attention (docs/device_ops.md "Fused causal attention") ---- */

static void attn_dims_dev(const ttt_tensor *q, const ttt_tensor *v, int *B, int *T, int *dk,
                          int *dv) {
    *B = q->ndim == 3 ? q->shape[0] : 1;
    *T = q->shape[q->ndim - 2];
    *dk = TTT_COLS(q);
    *dv = TTT_COLS(v);
}

/* aux: the forward's row log-sum-exp (B·T floats, device). The kernels write each gradient
 * whole (first writer assigns); when q, k and v are not three tensors, their gradients are
 * formed apart and then added in the order the buffers were taken. */
static void attention_causal_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dO) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2];
    int B, T, dk, dv;
    attn_dims_dev(q, v, &B, &T, &dk, &dv);
    int add_q, add_k, add_v;
    float *gq = ttt_grad_acc(ctx, q, &add_q), *gk = ttt_grad_acc(ctx, k, &add_k),
          *gv = ttt_grad_acc(ctx, v, &add_v);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const int alias = q == k || q == v || k == v;
    float *tq = gq, *tk = gk, *tv = gv;
    if (alias) {
        if (gq) tq = dscratch(ctx, q->n * sizeof(float));
        if (gk) tk = dscratch(ctx, k->n * sizeof(float));
        if (gv) tv = dscratch(ctx, v->n * sizeof(float));
    }
    double *delta = dscratch(ctx, (size_t)B * (size_t)T * sizeof(double));
    CK(ttt_cuda_attention_causal_backward(tq, alias ? 0 : add_q, tk, alias ? 0 : add_k, tv,
                                          alias ? 0 : add_v, delta, dO, q->data, k->data,
                                          v->data, e->aux, B, T, dk, dv, e->farg[0], ST(ctx),
                                          E));
    if (alias) {
        if (gq) put_scaled(ctx, gq, add_q, tq, 1.0f, q->n);
        if (gk) put_scaled(ctx, gk, add_k, tk, 1.0f, k->n);
        if (gv) put_scaled(ctx, gv, add_v, tv, 1.0f, v->n);
    }
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_attention_causal(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                                     const ttt_tensor *v, float scale) {
    SAME_DEVICE(ctx, "attention_causal", q, k, v);
    DCHECK(q->ndim == 2 || q->ndim == 3, "attention_causal (q must be (T, D) or (B, T, D))");
    DCHECK(ttt_tensor_same_shape(q, k), "attention_causal (k must have q's shape)");
    DCHECK(v->ndim == q->ndim && v->shape[0] == q->shape[0] &&
               (q->ndim == 2 || v->shape[1] == q->shape[1]),
           "attention_causal (v must be (T, Dv) or (B, T, Dv) like q)");
    int B, T, dk, dv;
    attn_dims_dev(q, v, &B, &T, &dk, &dv);
    if (dk > TTT_CUDA_ATTENTION_MAX_D || dv > TTT_CUDA_ATTENTION_MAX_D) {
        /* wider heads than the kernels' tiles hold: the same function from the unfused ops
         * (the T × T scores are then stored) */
        ttt_tensor *s = ttt_scale(ctx, ttt_matmul(ctx, q, 0, k, 1), scale);
        return ttt_matmul(ctx, ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s)), 0, v, 0);
    }
    int shp[TTT_MAX_DIMS];
    memcpy(shp, v->shape, sizeof shp);
    ttt_tensor *r = ttt_tensor_new(ctx, v->ndim, shp);
    const int keep = ttt_recording(ctx) &&
                     (q->requires_grad || k->requires_grad || v->requires_grad);
    const size_t rows = (size_t)B * (size_t)T;
    /* the backward keeps the log-sum-exp; without a tape it is scratch */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *lse = dscratch(ctx, (rows ? rows : 1) * sizeof(float));
    CK(ttt_cuda_attention_causal(r->data, lse, q->data, k->data, v->data, B, T, dk, dv, scale,
                                 ST(ctx), E));
    if (!keep) {
        ttt_arena_release(ctx->arena, mark);
        return r;
    }
    ttt_tape_entry *e = REC(ctx, "attention_causal", attention_causal_backward, r, q, k, v);
    if (e) {
        e->farg[0] = scale;
        e->aux = lse;
    }
    return r;
}

/* ---- recurrences (docs/device_ops.md "Recurrences"): the device halves of the recorded ops of
 * layers/diagonal/diagonal.h (the LRU, Mamba's selective scan) and layers/forms/delta_rule/
 * dplr.h (the DPLR delta rule), each the same tape entry as its host twin's, its kernels in
 * src/core/cuda/ops_recur.cu ---- */

/* Inputs given twice would have one gradient written by two lanes at once: the mixers never do
 * it, and the ops refuse it like a shape mismatch. */
static int distinct(const ttt_tensor *const *in, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (in[i] && in[i] == in[j]) return 0;
    return 1;
}
#define DISTINCT(...)                                                                      \
    distinct((const ttt_tensor *const[]){__VA_ARGS__},                                     \
             (int)(sizeof((const ttt_tensor *const[]){__VA_ARGS__}) / sizeof(const ttt_tensor *)))

/* in: ν, θ, U, h0; out H (T, 2n). */
static void lru_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dH) {
    const ttt_tensor *nu = e->in[0], *theta = e->in[1], *U = e->in[2], *h0 = e->in[3];
    int an, at, au, ah;
    float *gnu = ttt_grad_acc(ctx, nu, &an), *gth = ttt_grad_acc(ctx, theta, &at);
    float *gU = ttt_grad_acc(ctx, U, &au), *gh0 = ttt_grad_acc(ctx, h0, &ah);
    CK(ttt_cuda_lru_backward(gnu, an, gth, at, gU, au, gh0, ah, dH, e->out->data, U->data,
                             h0 ? h0->data : NULL, nu->data, theta->data, TTT_ROWS(U),
                             TTT_COLS(U) / 2, ST(ctx), E));
}

ttt_tensor *ttt_dev_lru(ttt_ctx *ctx, const ttt_tensor *nu, const ttt_tensor *theta,
                        const ttt_tensor *U, const ttt_tensor *h0) {
    SAME_DEVICE(ctx, "lru", nu, theta, U, h0);
    const int T = TTT_ROWS(U), n = TTT_COLS(U) / 2;
    DCHECK(U->ndim == 2 && TTT_COLS(U) == 2 * n && (int)nu->n == n && (int)theta->n == n &&
               (!h0 || (int)h0->n == 2 * n),
           "lru");
    DCHECK(DISTINCT(nu, theta, U, h0), "lru (inputs must be distinct tensors)");
    ttt_tensor *H = ttt_tensor_2d(ctx, T, 2 * n);
    CK(ttt_cuda_lru(H->data, h0 ? h0->data : NULL, nu->data, theta->data, U->data, T, n, ST(ctx),
                    E));
    REC(ctx, "lru", lru_backward, H, nu, theta, U, h0);
    return H;
}

/* in: x, Δ, A_log, B, C, D, h0; out y (T, d). The states are recomputed (the forward keeps
 * none), as on the host. */
static void selective_scan_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *delta = e->in[1], *A_log = e->in[2], *Bt = e->in[3];
    const ttt_tensor *Ct = e->in[4], *Dt = e->in[5], *h0 = e->in[6];
    const int T = TTT_ROWS(x), d = TTT_COLS(x), N = TTT_COLS(Bt);
    int ax, adl, aal, ab, ac, ad, ah;
    float *gx = ttt_grad_acc(ctx, x, &ax), *gdel = ttt_grad_acc(ctx, delta, &adl);
    float *gAl = ttt_grad_acc(ctx, A_log, &aal), *gB = ttt_grad_acc(ctx, Bt, &ab);
    float *gC = ttt_grad_acc(ctx, Ct, &ac), *gD = ttt_grad_acc(ctx, Dt, &ad);
    float *gh0 = ttt_grad_acc(ctx, h0, &ah);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const size_t tdn = (size_t)T * d * N;
    float *Hs = dscratch(ctx, tdn * sizeof(float)), *Dl = dscratch(ctx, tdn * sizeof(float));
    CK(ttt_cuda_selective_scan_backward(gx, ax, gdel, adl, gAl, aal, gB, ab, gC, ac, gh0, ah, Hs,
                                        Dl, dy, h0 ? h0->data : NULL, x->data, delta->data,
                                        A_log->data, Bt->data, Ct->data, Dt ? Dt->data : NULL, T,
                                        d, N, ST(ctx), E));
    if (gD) /* ∂D_i = Σ_t dy_t[i] x_t[i] */
        CK(ttt_cuda_reduce(TTT_RED_ROWS, gD, ad, dy, x->data, (size_t)T, (size_t)d, 1.0, ST(ctx),
                           E));
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_selective_scan(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *delta,
                                   const ttt_tensor *A_log, const ttt_tensor *B,
                                   const ttt_tensor *C, const ttt_tensor *D,
                                   const ttt_tensor *h0) {
    SAME_DEVICE(ctx, "selective_scan", x, delta, A_log, B, C, D, h0);
    const int T = TTT_ROWS(x), d = TTT_COLS(x), N = TTT_COLS(B);
    DCHECK(x->ndim == 2 && ttt_tensor_same_shape(x, delta) && TTT_ROWS(A_log) == d &&
               TTT_COLS(A_log) == N && A_log->n == (size_t)d * N && TTT_ROWS(B) == T &&
               ttt_tensor_same_shape(B, C) && (!D || (int)D->n == d) &&
               (!h0 || h0->n == (size_t)d * N),
           "selective_scan");
    DCHECK(DISTINCT(x, delta, A_log, B, C, D, h0),
           "selective_scan (inputs must be distinct tensors)");
    ttt_tensor *y = ttt_tensor_2d(ctx, T, d);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *Hs = dscratch(ctx, (size_t)T * d * N * sizeof(float));
    CK(ttt_cuda_selective_scan(y->data, Hs, h0 ? h0->data : NULL, x->data, delta->data,
                               A_log->data, B->data, C->data, D ? D->data : NULL, T, d, N,
                               ST(ctx), E));
    ttt_arena_release(ctx->arena, mark); /* stream-ordered: after the kernels above */
    REC(ctx, "selective_scan", selective_scan_backward, y, x, delta, A_log, B, C, D, h0);
    return y;
}

/* What the DPLR backward keeps: the state at each chunk's start (device memory). */
typedef struct dplr_dev_saved {
    float *S; /* (nch, d_k, d_v) */
    int T, d_k, d_v, C;
} dplr_dev_saved;

/* in: q, k, v, a, b, log_w, S0; out P (T + d_k, d_v) = [O; S_T]. */
static void dplr_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dP) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *a = e->in[3], *b = e->in[4];
    const ttt_tensor *lw = e->in[5], *S0 = e->in[6];
    int aq, ak, av, aa, ab, al, as;
    float *gq = ttt_grad_acc(ctx, q, &aq), *gk = ttt_grad_acc(ctx, k, &ak);
    float *gv = ttt_grad_acc(ctx, v, &av), *ga = ttt_grad_acc(ctx, a, &aa);
    float *gb = ttt_grad_acc(ctx, b, &ab), *glw = ttt_grad_acc(ctx, lw, &al);
    float *gS0 = ttt_grad_acc(ctx, S0, &as);
    const dplr_dev_saved *sv = e->aux;
    const int T = sv->T, dk = sv->d_k, dv = sv->d_v, C = sv->C;
    const size_t dkv = (size_t)dk * dv;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *dS = dscratch(ctx, dkv * sizeof(float));
    float *St = dscratch(ctx, (size_t)(C + 1) * dkv * sizeof(float));
    float *U = dscratch(ctx, (size_t)C * dv * sizeof(float));
    float *W = dscratch(ctx, (size_t)T * dk * sizeof(float));
    const float *lwd = lw ? lw->data : NULL;
    CK(ttt_cuda_copy2d(dS, dkv, 0, dP + (size_t)T * dv, dkv, 1, dkv, ST(ctx), E));
    CK(ttt_cuda_dplr_gates(W, lwd, T, dk, C, ST(ctx), E));
    CK(ttt_cuda_dplr_backward(gq, aq, gk, ak, gv, av, ga, aa, gb, ab, glw, al, dS, St, U, dP,
                              q->data, k->data, v->data, a->data, b->data, lwd, W, sv->S, T, dk,
                              dv, C, ST(ctx), E));
    if (gS0) put_scaled(ctx, gS0, as, dS, 1.0f, dkv);
    ttt_arena_release(ctx->arena, mark);
}

ttt_tensor *ttt_dev_dplr_recurrent(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                   const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                   const ttt_tensor *b, const ttt_tensor *log_w,
                                   const ttt_tensor *S0, int chunk) {
    SAME_DEVICE(ctx, "dplr_recurrent", q, k, v, a, b, log_w, S0);
    const int T = TTT_ROWS(k), dk = TTT_COLS(k), dv = TTT_COLS(v);
    DCHECK(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == dk && chunk >= 1 &&
               TTT_ROWS(a) == T && TTT_COLS(a) == dk && TTT_ROWS(b) == T &&
               TTT_COLS(b) == dk && (!log_w || (TTT_ROWS(log_w) == T && TTT_COLS(log_w) == dk)) &&
               S0->n == (size_t)dk * dv && q->n == (size_t)T * dk && k->n == (size_t)T * dk &&
               v->n == (size_t)T * dv && a->n == (size_t)T * dk && b->n == (size_t)T * dk,
           "dplr_recurrent");
    DCHECK(DISTINCT(q, k, v, a, b, log_w, S0), "dplr_recurrent (inputs must be distinct tensors)");
    const size_t dkv = (size_t)dk * dv;
    const int C = T > 0 ? (chunk < T ? chunk : T) : 1, nch = (T + C - 1) / C;
    const int recording = ttt_recording(ctx) &&
                    (q->requires_grad || k->requires_grad || v->requires_grad ||
                     a->requires_grad || b->requires_grad || (log_w && log_w->requires_grad) ||
                     S0->requires_grad);
    /* P = [O; S]: the output rows, then the state's, so that both are row slices of one tensor
     * that one tape entry writes */
    ttt_tensor *P = ttt_tensor_2d(ctx, T + dk, dv);
    float *saved = recording && nch ? dscratch(ctx, (size_t)nch * dkv * sizeof(float)) : NULL;
    CK(ttt_cuda_copy2d(P->data + (size_t)T * dv, dkv, 0, S0->data, dkv, 1, dkv, ST(ctx), E));
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *W = dscratch(ctx, (size_t)T * dk * sizeof(float));
    CK(ttt_cuda_dplr_gates(W, log_w ? log_w->data : NULL, T, dk, C, ST(ctx), E));
    CK(ttt_cuda_dplr(P->data, P->data + (size_t)T * dv, saved, q->data, k->data, v->data, a->data,
                     b->data, W, T, dk, dv, C, ST(ctx), E));
    ttt_arena_release(ctx->arena, mark);
    if (recording) {
        ttt_tape_entry *e = REC(ctx, "dplr_recurrent", dplr_backward, P, q, k, v, a, b, log_w, S0);
        if (e) {
            dplr_dev_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
            *sv = (dplr_dev_saved){.S = saved, .T = T, .d_k = dk, .d_v = dv, .C = C};
            e->aux = sv;
        }
    }
    *S_out = ttt_slice_rows(ctx, P, T, T + dk);
    return ttt_slice_rows(ctx, P, 0, T);
}
