/* Tests of the op layer (src/core/ops.c): every op against a naive loop written here, in double
 * precision where practical (ops.h: "every fast kernel keeps a naive twin in tests/test_ops.c").
 *
 * Inputs are float32 draws from the project RNG with fixed seeds. References are computed in double
 * from those same float inputs, so the only error measured is the op's own float32 arithmetic.
 * Unless a test says otherwise, tolerances follow docs/math.md §6: float32 forms of the same math agree
 * to ~1e-5 relative (float32 has ~6e-8 unit roundoff; short dot products and libm float functions
 * stay two orders of magnitude below 1e-5). */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "ops.h"
#include "rng.h"
#include "tensor.h"
#include "testutil.h"

/* --------------------------------------------------------------------------------------------- */
/* fixture and helpers                                                                            */

static ttt_arena g_arena;
static ttt_ctx g_ctx;
static ttt_ctx *ctx = &g_ctx;

static void setup(void) {
    ttt_arena_init(&g_arena, 0);
    g_ctx.arena = &g_arena;
    g_ctx.grad = 0;
}

static void teardown(void) { ttt_arena_free(&g_arena); }

/* A tensor of N(0, std²) draws. */
static ttt_tensor *randn(ttt_rng *r, int ndim, const int *shape, float std) {
    ttt_tensor *t = ttt_tensor_new(ctx, ndim, shape);
    ttt_rng_fill_normal(r, t->data, t->n, 0.0f, std);
    return t;
}
static ttt_tensor *randn2(ttt_rng *r, int m, int n) { return randn(r, 2, (int[]){m, n}, 1.0f); }
static ttt_tensor *randn1(ttt_rng *r, int n) { return randn(r, 1, (int[]){n}, 1.0f); }

/* Reference buffers live in the arena too (freed by the fixture). */
static double *dalloc(size_t n) {
    double *p = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(double));
    ck_assert_ptr_nonnull(p);
    memset(p, 0, (n ? n : 1) * sizeof(double));
    return p;
}

/* A private copy of an input, to prove that an op left it untouched. */
static float *snapshot(const ttt_tensor *t) {
    float *p = ttt_arena_alloc(ctx->arena, (t->n ? t->n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(p);
    memcpy(p, t->data, t->n * sizeof(float));
    return p;
}
static void assert_unchanged(const ttt_tensor *t, const float *snap) {
    ck_assert_msg(memcmp(t->data, snap, t->n * sizeof(float)) == 0, "op modified its input");
}

static void assert_shape2(const ttt_tensor *t, int m, int n) {
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], m);
    ck_assert_int_eq(t->shape[1], n);
}
static void assert_shape1(const ttt_tensor *t, int n) {
    ck_assert_int_eq(t->ndim, 1);
    ck_assert_int_eq(t->shape[0], n);
}

/* Element-by-element check |got − want| ≤ atol + rtol·|want| (tu_close scales rtol by the largest
 * reference value instead; activations need relative accuracy in their tiny tails too). */
static void assert_close_each(const float *got, const double *want, size_t n, double atol,
                              double rtol, const char *what) {
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        int ok = isfinite(g) && isfinite(w) && fabs(g - w) <= atol + rtol * fabs(w);
        ck_assert_msg(ok, "%s: element %zu: got %.9g want %.9g (|diff| %.3e > %.3e)", what, i, g,
                      w, fabs(g - w), atol + rtol * fabs(w));
    }
}

/* --------------------------------------------------------------------------------------------- */
/* matrix products                                                                                */

/* Element (i, p) of op(a) where a is stored row-major with `ld` columns. */
static double elem_op(const float *a, int trans, int ld, int i, int p) {
    return trans ? a[(size_t)p * ld + i] : a[(size_t)i * ld + p];
}

/* c (m,n) = op(a) (m,k) · op(b) (k,n), in double. lda/ldb: stored row lengths. */
static void naive_matmul(double *c, const float *a, int ta, int lda, const float *b, int tb,
                         int ldb, int m, int n, int k) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) s += elem_op(a, ta, lda, i, p) * elem_op(b, tb, ldb, p, j);
            c[(size_t)i * n + j] = s;
        }
}

/* sgemm accumulates k float products: error ≲ k·u·Σ|a||b| ≈ 1e-6 for k ≤ 17 and N(0,1) entries. */
#define MM_ATOL 1e-5
#define MM_RTOL 1e-5

START_TEST(test_matmul_2d_all_transposes) {
    ttt_rng r;
    ttt_rng_seed(&r, 101);
    /* Non-square in every dimension so that a swapped m/n/k or leading dimension cannot pass. */
    const int sizes[][3] = {{7, 3, 5}, {33, 9, 17}, {1, 4, 6}, {5, 1, 2}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                ttt_tensor *a = ta ? randn2(&r, k, m) : randn2(&r, m, k);
                ttt_tensor *b = tb ? randn2(&r, n, k) : randn2(&r, k, n);
                float *sa = snapshot(a), *sb = snapshot(b);
                ttt_tensor *c = ttt_matmul(ctx, a, ta, b, tb);
                assert_shape2(c, m, n);
                double *want = dalloc((size_t)m * n);
                naive_matmul(want, a->data, ta, a->shape[1], b->data, tb, b->shape[1], m, n, k);
                TU_ASSERT_CLOSE(c->data, want, c->n, MM_ATOL, MM_RTOL);
                assert_unchanged(a, sa);
                assert_unchanged(b, sb);
            }
    }
}
END_TEST

START_TEST(test_matmul_batched) {
    ttt_rng r;
    ttt_rng_seed(&r, 102);
    const int B = 4, m = 7, n = 3, k = 5;
    /* mode 0: both 3-D; 1: b shared (2-D); 2: a shared (2-D). */
    for (int mode = 0; mode < 3; mode++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                ttt_tensor *a =
                    mode == 2 ? randn2(&r, ar, ac) : randn(&r, 3, (int[]){B, ar, ac}, 1.0f);
                ttt_tensor *b =
                    mode == 1 ? randn2(&r, br, bc) : randn(&r, 3, (int[]){B, br, bc}, 1.0f);
                ttt_tensor *c = ttt_matmul(ctx, a, ta, b, tb);
                ck_assert_int_eq(c->ndim, 3);
                ck_assert_int_eq(c->shape[0], B);
                ck_assert_int_eq(c->shape[1], m);
                ck_assert_int_eq(c->shape[2], n);
                double *want = dalloc((size_t)B * m * n);
                for (int bi = 0; bi < B; bi++) {
                    const float *ab = a->data + (mode == 2 ? 0 : (size_t)bi * ar * ac);
                    const float *bb = b->data + (mode == 1 ? 0 : (size_t)bi * br * bc);
                    naive_matmul(want + (size_t)bi * m * n, ab, ta, ac, bb, tb, bc, m, n, k);
                }
                TU_ASSERT_CLOSE(c->data, want, c->n, MM_ATOL, MM_RTOL);
            }
}
END_TEST

START_TEST(test_matmul_vector_and_empty) {
    ttt_rng r;
    ttt_rng_seed(&r, 103);
    /* q_t S: a 1-D row vector times a matrix stays 1-D (docs/math.md §0). */
    ttt_tensor *q = randn1(&r, 5), *S = randn2(&r, 5, 3);
    ttt_tensor *o = ttt_matmul(ctx, q, 0, S, 0);
    assert_shape1(o, 3);
    double want[3];
    naive_matmul(want, q->data, 0, 5, S->data, 0, 3, 1, 3, 5);
    TU_ASSERT_CLOSE(o->data, want, 3, MM_ATOL, MM_RTOL);

    /* k = 0: an empty sum is zero, not uninitialized memory. */
    ttt_tensor *a = ttt_tensor_2d(ctx, 3, 0), *b = ttt_tensor_2d(ctx, 0, 4);
    ttt_tensor *c = ttt_matmul(ctx, a, 0, b, 0);
    assert_shape2(c, 3, 4);
    for (size_t i = 0; i < c->n; i++) ck_assert(c->data[i] == 0.0f);
}
END_TEST

START_TEST(test_gemm) {
    ttt_rng r;
    ttt_rng_seed(&r, 104);
    const int m = 7, n = 3, k = 5;
    const float alpha = 0.75f, beta = -1.25f;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int with_c = 0; with_c < 2; with_c++) {
                ttt_tensor *a = ta ? randn2(&r, k, m) : randn2(&r, m, k);
                ttt_tensor *b = tb ? randn2(&r, n, k) : randn2(&r, k, n);
                ttt_tensor *c = with_c ? randn2(&r, m, n) : NULL;
                float *sc = c ? snapshot(c) : NULL;
                ttt_tensor *got = ttt_gemm(ctx, alpha, a, ta, b, tb, beta, c);
                assert_shape2(got, m, n);
                double *want = dalloc((size_t)m * n);
                naive_matmul(want, a->data, ta, a->shape[1], b->data, tb, b->shape[1], m, n, k);
                for (int i = 0; i < m * n; i++)
                    want[i] = alpha * want[i] + (c ? beta * (double)c->data[i] : 0.0);
                TU_ASSERT_CLOSE(got->data, want, got->n, MM_ATOL, MM_RTOL);
                if (c) {
                    assert_unchanged(c, sc);
                    ck_assert_ptr_ne(got->data, c->data);
                }
            }
}
END_TEST

START_TEST(test_outer) {
    ttt_rng r;
    ttt_rng_seed(&r, 105);
    ttt_tensor *x = randn1(&r, 6), *y = randn1(&r, 4);
    ttt_tensor *o = ttt_outer(ctx, x, y);
    assert_shape2(o, 6, 4);
    double want[24];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = (double)x->data[i] * y->data[j];
    /* One float product per element: correctly rounded, so 1 ulp. */
    TU_ASSERT_CLOSE(o->data, want, 24, 0.0, 2e-7);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* elementwise, binary                                                                            */

static double ref_binop(int op, double a, double b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    default: return a / b;
    }
}

static ttt_tensor *call_binop(int op, const ttt_tensor *a, const ttt_tensor *b) {
    switch (op) {
    case 0: return ttt_add(ctx, a, b);
    case 1: return ttt_sub(ctx, a, b);
    case 2: return ttt_mul(ctx, a, b);
    default: return ttt_div(ctx, a, b);
    }
}

/* Divisors of magnitude in [0.5, 2] with random sign, so division is well conditioned. */
static void away_from_zero(ttt_rng *r, ttt_tensor *t) {
    for (size_t i = 0; i < t->n; i++) {
        float u = (float)(0.5 + 1.5 * ttt_rng_uniform(r));
        t->data[i] = ttt_rng_uniform(r) < 0.5 ? -u : u;
    }
}

START_TEST(test_binary_broadcast) {
    ttt_rng r;
    ttt_rng_seed(&r, 201);
    static const char *names[] = {"add", "sub", "mul", "div"};
    /* a shapes: a matrix and a 3-D (batch, rows, cols) tensor; b: same shape, one element,
     * 1-D row vector, (1, n) row vector. */
    const int ashapes[2][3] = {{6, 5, 0}, {2, 3, 5}};
    for (int op = 0; op < 4; op++)
        for (int as = 0; as < 2; as++)
            for (int mode = 0; mode < 4; mode++) {
                int andim = as == 0 ? 2 : 3;
                ttt_tensor *a = randn(&r, andim, ashapes[as], 1.0f);
                int cols = TTT_COLS(a);
                ttt_tensor *b;
                if (mode == 0) b = ttt_tensor_new(ctx, andim, ashapes[as]);
                else if (mode == 1) b = ttt_tensor_1d(ctx, 1);
                else if (mode == 2) b = ttt_tensor_1d(ctx, cols);
                else b = ttt_tensor_2d(ctx, 1, cols);
                away_from_zero(&r, b);
                float *sa = snapshot(a), *sb = snapshot(b);
                ttt_tensor *c = call_binop(op, a, b);
                ck_assert(ttt_tensor_same_shape(c, a));
                double *want = dalloc(a->n);
                for (size_t i = 0; i < a->n; i++) {
                    size_t bi = mode == 0 ? i : mode == 1 ? 0 : i % (size_t)cols;
                    want[i] = ref_binop(op, a->data[i], b->data[bi]);
                }
                /* One correctly rounded float operation per element: 1 ulp per element. */
                char what[64];
                snprintf(what, sizeof what, "%s (a %d-D, b mode %d)", names[op], andim, mode);
                assert_close_each(c->data, want, a->n, 1e-30, 1.2e-7, what);
                assert_unchanged(a, sa);
                assert_unchanged(b, sb);
            }
}
END_TEST

START_TEST(test_axpby_scale) {
    ttt_rng r;
    ttt_rng_seed(&r, 202);
    ttt_tensor *a = randn2(&r, 5, 7), *b = randn2(&r, 5, 7);
    const float al = 0.3f, be = -2.5f, s = 1.75f;
    double *w1 = dalloc(35), *w2 = dalloc(35), *w3 = dalloc(35);
    for (int i = 0; i < 35; i++) {
        w1[i] = al * (double)a->data[i] + be * (double)b->data[i];
        w2[i] = s * (double)a->data[i];
        w3[i] = (double)a->data[i] + s;
    }
    /* axpby rounds three times (two products, one sum): absolute, relative to the terms. */
    TU_ASSERT_CLOSE(ttt_axpby(ctx, al, a, be, b)->data, w1, 35, 1e-6, 1e-6);
    TU_ASSERT_CLOSE(ttt_scale(ctx, a, s)->data, w2, 35, 0.0, 2e-7);
    TU_ASSERT_CLOSE(ttt_add_scalar(ctx, a, s)->data, w3, 35, 1e-6, 0.0);
}
END_TEST

START_TEST(test_scale_rows_cols) {
    ttt_rng r;
    ttt_rng_seed(&r, 203);
    ttt_tensor *a = randn2(&r, 6, 4), *vr = randn1(&r, 6), *vc = randn1(&r, 4);
    ttt_tensor *x = ttt_scale_rows(ctx, a, vr), *y = ttt_scale_cols(ctx, a, vc);
    assert_shape2(x, 6, 4);
    assert_shape2(y, 6, 4);
    double wx[24], wy[24];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) {
            wx[i * 4 + j] = (double)vr->data[i] * a->data[i * 4 + j];
            wy[i * 4 + j] = (double)vc->data[j] * a->data[i * 4 + j];
        }
    assert_close_each(x->data, wx, 24, 1e-30, 1.2e-7, "scale_rows");
    assert_close_each(y->data, wy, 24, 1e-30, 1.2e-7, "scale_cols");
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* elementwise, unary                                                                             */

START_TEST(test_unary_basic) {
    ttt_rng r;
    ttt_rng_seed(&r, 301);
    ttt_tensor *a = randn2(&r, 9, 11);
    ttt_tensor *p = ttt_tensor_2d(ctx, 9, 11); /* positive inputs for log and sqrt */
    ttt_rng_fill_uniform(&r, p->data, p->n, 1e-3f, 50.0f);
    size_t n = a->n;
    double *wneg = dalloc(n), *wexp = dalloc(n), *wsq = dalloc(n), *wlog = dalloc(n),
           *wsqrt = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double x = a->data[i], y = p->data[i];
        wneg[i] = -x;
        wexp[i] = exp(x);
        wsq[i] = x * x;
        wlog[i] = log(y);
        wsqrt[i] = sqrt(y);
    }
    float *sa = snapshot(a);
    ttt_tensor *neg = ttt_neg(ctx, a);
    ck_assert(ttt_tensor_same_shape(neg, a));
    assert_close_each(neg->data, wneg, n, 0.0, 0.0, "neg");
    /* libm float functions are accurate to a few ulp; 1e-6 relative leaves a wide margin. */
    assert_close_each(ttt_exp(ctx, a)->data, wexp, n, 0.0, 1e-6, "exp");
    assert_close_each(ttt_square(ctx, a)->data, wsq, n, 0.0, 1.2e-7, "square");
    assert_close_each(ttt_log(ctx, p)->data, wlog, n, 1e-7, 1e-6, "log");
    assert_close_each(ttt_sqrt(ctx, p)->data, wsqrt, n, 0.0, 1e-6, "sqrt");
    assert_unchanged(a, sa);

    /* log of non-positive input behaves as libm: -inf at 0, NaN below. */
    ttt_tensor *z = ttt_tensor_1d(ctx, 2);
    z->data[0] = 0.0f;
    z->data[1] = -1.0f;
    ttt_tensor *lz = ttt_log(ctx, z);
    ck_assert(isinf(lz->data[0]) && lz->data[0] < 0);
    ck_assert(isnan(lz->data[1]));
}
END_TEST

/* Double-precision definitions of the activations, written from their mathematical definitions
 * (not from the implementation's stable rearrangements). */
static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x * sigmoid_d(x); }
/* 0.5x(1 + tanh(u)) written with 1 + tanh(u) = 2/(1 + e^(−2u)): even double cancels to 0 in the
 * tanh form below x ≈ −6, and the tail is part of what the test checks. */
static double gelu_d(double x) {
    double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}
static double softplus_d(double x) { return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double elu1_d(double x) { return x > 0 ? x + 1.0 : exp(x); }
static double relu_d(double x) { return x > 0 ? x : 0.0; }

/* Test points: a grid over [-12, 12] (covers every activation's bend and its saturated tails)
 * plus random normals. */
static ttt_tensor *activation_inputs(ttt_rng *r) {
    const int grid = 241, rnd = 64;
    ttt_tensor *t = ttt_tensor_1d(ctx, grid + rnd);
    for (int i = 0; i < grid; i++) t->data[i] = -12.0f + 0.1f * (float)i;
    ttt_rng_fill_normal(r, t->data + grid, rnd, 0.0f, 2.0f);
    return t;
}

START_TEST(test_activations) {
    ttt_rng r;
    ttt_rng_seed(&r, 302);
    ttt_tensor *a = activation_inputs(&r);
    size_t n = a->n;
    double *ws = dalloc(n), *wsi = dalloc(n), *wg = dalloc(n), *wsp = dalloc(n), *we = dalloc(n),
           *wr = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double x = a->data[i];
        ws[i] = sigmoid_d(x);
        wsi[i] = silu_d(x);
        wg[i] = gelu_d(x);
        wsp[i] = softplus_d(x);
        we[i] = elu1_d(x);
        wr[i] = relu_d(x);
    }
    /* Each is a handful of float operations around expf/log1pf: a few ulp relative, also in the
     * tiny tails (so 1 + tanh(u) ≈ 0, which cancels, would fail). gelu's argument 2u reaches
     * ~100 on the grid, and its float rounding (~1e-5 absolute) becomes a relative error of the
     * tail value exp(−2u): hence 1e-4 relative there. The absolute floor 1e-20 only admits
     * values that underflow to float denormals or zero. */
    assert_close_each(ttt_sigmoid(ctx, a)->data, ws, n, 1e-30, 1e-6, "sigmoid");
    assert_close_each(ttt_silu(ctx, a)->data, wsi, n, 1e-30, 1e-6, "silu");
    assert_close_each(ttt_gelu(ctx, a)->data, wg, n, 1e-20, 1e-4, "gelu");
    assert_close_each(ttt_softplus(ctx, a)->data, wsp, n, 1e-30, 1e-6, "softplus");
    assert_close_each(ttt_elu1(ctx, a)->data, we, n, 1e-30, 1e-6, "elu1");
    assert_close_each(ttt_relu(ctx, a)->data, wr, n, 0.0, 0.0, "relu");
}
END_TEST

/* Extreme inputs: no overflow, no NaN, the right limits. */
START_TEST(test_activations_extreme) {
    const float xs[] = {-1e30f, -1e4f, -1000.0f, -100.0f, 100.0f, 1000.0f, 1e4f, 1e30f};
    const size_t n = sizeof xs / sizeof xs[0];
    ttt_tensor *a = ttt_tensor_1d(ctx, (int)n);
    memcpy(a->data, xs, sizeof xs);
    ttt_tensor *sg = ttt_sigmoid(ctx, a), *si = ttt_silu(ctx, a), *ge = ttt_gelu(ctx, a),
               *sp = ttt_softplus(ctx, a), *el = ttt_elu1(ctx, a), *sgd = ttt_silu_grad(ctx, a),
               *ggd = ttt_gelu_grad(ctx, a);
    for (size_t i = 0; i < n; i++) {
        double x = xs[i];
        const ttt_tensor *all[] = {sg, si, ge, sp, el, sgd, ggd};
        for (size_t k = 0; k < 7; k++)
            ck_assert_msg(isfinite(all[k]->data[i]), "activation %zu not finite at x = %g", k, x);
        if (x < 0) {
            ck_assert(sg->data[i] == 0.0f || (x == -100.0 && sg->data[i] < 1e-40f));
            ck_assert(fabsf(si->data[i]) < 1e-30f);
            ck_assert(fabsf(ge->data[i]) < 1e-30f);
            ck_assert(sp->data[i] >= 0.0f && sp->data[i] < 1e-40f);
            ck_assert(el->data[i] >= 0.0f && el->data[i] < 1e-40f);
            ck_assert(fabsf(sgd->data[i]) < 1e-30f);
            ck_assert(fabsf(ggd->data[i]) < 1e-30f);
        } else {
            ck_assert(sg->data[i] == 1.0f);
            ck_assert(si->data[i] == (float)x);
            ck_assert(ge->data[i] == (float)x);
            ck_assert(sp->data[i] == (float)x);
            ck_assert(el->data[i] == (float)x + 1.0f);
            ck_assert(sgd->data[i] == 1.0f);
            ck_assert(ggd->data[i] == 1.0f);
        }
    }
    /* softplus(−100) = e^−100 ≈ 3.7e-44 is a float denormal; it must not be lost to log(1 + ~0).
     */
    ck_assert(sp->data[3] > 0.0f);
}
END_TEST

/* Central difference of a double function: truncation h²·f'''/6 ≈ 1e-10, rounding 1e-16/h. */
static double fd(double (*f)(double), double x) {
    const double h = 1e-5;
    return (f(x + h) - f(x - h)) / (2 * h);
}

START_TEST(test_activation_grads_fd) {
    ttt_rng r;
    ttt_rng_seed(&r, 303);
    ttt_tensor *a = activation_inputs(&r);
    size_t n = a->n;
    double *wsi = dalloc(n), *wg = dalloc(n), *wsi_formula = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double x = a->data[i], s = sigmoid_d(x);
        wsi[i] = fd(silu_d, x);
        wg[i] = fd(gelu_d, x);
        wsi_formula[i] = s * (1.0 + x * (1.0 - s)); /* docs/math.md §2 */
    }
    ttt_tensor *gs = ttt_silu_grad(ctx, a), *gg = ttt_gelu_grad(ctx, a);
    /* The float gradient sums O(1) terms (x·u' reaches ~40 on the grid): absolute 2e-6 plus a
     * few ulp relative; the finite difference itself is accurate to ~1e-10. */
    assert_close_each(gs->data, wsi, n, 2e-6, 1e-5, "silu_grad vs finite differences");
    assert_close_each(gs->data, wsi_formula, n, 2e-6, 1e-5, "silu_grad vs formula");
    assert_close_each(gg->data, wg, n, 2e-6, 1e-5, "gelu_grad vs finite differences");
}
END_TEST

/* The gradient conventions of the ops for optimizer rules at their kinks and ties, where a
 * finite difference says nothing (ops.h; PyTorch's choices): sign' = 0, abs'(0) = 0, clamp
 * passes the gradient on its boundaries, maximum/minimum split it evenly on a tie, and
 * pow_scalar with p = 0 has gradient 0. */
START_TEST(test_optimizer_op_conventions) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx c = {.arena = &a, .grad = 1, .tape = &tape};
    const float xs[5] = {-1.0f, 0.0f, 0.5f, 2.0f, -0.5f};
    const float ys[5] = {-1.0f, 1.0f, 0.5f, 1.0f, 0.25f};
    ttt_tensor *x = ttt_tensor_1d(&c, 5), *y = ttt_tensor_1d(&c, 5);
    memcpy(x->data, xs, sizeof xs);
    memcpy(y->data, ys, sizeof ys);
    x->requires_grad = y->requires_grad = 1;
    /* L = Σ sign(x) + abs(x) + clamp(x, −0.5, 0.5) + maximum(x, y) + 2·minimum(x, y) + x⁰ */
    ttt_tensor *L = ttt_add(&c, ttt_sum(&c, ttt_sign(&c, x)), ttt_sum(&c, ttt_abs(&c, x)));
    L = ttt_add(&c, L, ttt_sum(&c, ttt_clamp(&c, x, -0.5f, 0.5f)));
    L = ttt_add(&c, L, ttt_sum(&c, ttt_maximum(&c, x, y)));
    L = ttt_add(&c, L, ttt_scale(&c, ttt_sum(&c, ttt_minimum(&c, x, y)), 2.0f));
    L = ttt_add(&c, L, ttt_sum(&c, ttt_pow_scalar(&c, x, 0.0f)));
    ttt_backward(&c, L);
    /* by hand, element by element:
     *   sign' 0;  abs' = sign(x): −1, 0, 1, 1, −1;  clamp' (bounds ±0.5): 0, 1, 1, 0, 1;
     *   max/min with y: tie (½ + 2·½ to x), x < y (0 + 2), tie (½ + 1), x > y (1 + 0), x < y (0 + 2) */
    const float gx[5] = {-1 + 0 + 1.5f, 0 + 1 + 2, 1 + 1 + 1.5f, 1 + 0 + 1, -1 + 1 + 2};
    const float gy[5] = {1.5f, 1, 1.5f, 2, 1};
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(x->grad[i] == gx[i], "dx[%d] = %g, expected %g", i, x->grad[i], gx[i]);
        ck_assert_msg(y->grad[i] == gy[i], "dy[%d] = %g, expected %g", i, y->grad[i], gy[i]);
    }
    ttt_tape_free(&tape);
    ttt_arena_free(&a);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* reductions                                                                                     */

START_TEST(test_reductions_full) {
    ttt_rng r;
    ttt_rng_seed(&r, 401);
    const int shape[3] = {10, 20, 50};
    ttt_tensor *a = randn(&r, 3, shape, 1.0f), *b = randn(&r, 3, shape, 1.0f);
    /* A mean of 1 makes the partial sums grow to 1e4, where a float accumulator loses ~1e-3. */
    for (size_t i = 0; i < a->n; i++) a->data[i] += 1.0f;
    double s = 0, sabs = 0, d = 0, dabs = 0, f = 0;
    for (size_t i = 0; i < a->n; i++) {
        double x = a->data[i], y = b->data[i];
        s += x;
        sabs += fabs(x);
        d += x * y;
        dabs += fabs(x * y);
        f += x * x;
    }
    ttt_tensor *ts = ttt_sum(ctx, a), *td = ttt_dot(ctx, a, b), *tf = ttt_norm_fro(ctx, a);
    assert_shape1(ts, 1);
    assert_shape1(td, 1);
    assert_shape1(tf, 1);
    /* Double accumulation: only the final rounding to float remains, at most ε = 2^-24 of the
     * value (round to nearest), and |Σx| ≤ Σ|x|; 2ε keeps a 2× margin on a bound that is exact.
     * A float accumulator over 1e4 terms would drift to ~1e-5·Σ|x|, which 2ε = 1.2e-7 rejects. */
    const double eps2 = 2 * 0x1p-24;
    double want_f = sqrt(f);
    TU_ASSERT_CLOSE(ts->data, &s, 1, eps2 * sabs, 0.0);
    TU_ASSERT_CLOSE(td->data, &d, 1, eps2 * dabs, 0.0);
    TU_ASSERT_CLOSE(tf->data, &want_f, 1, 0.0, eps2);
}
END_TEST

START_TEST(test_reductions_rows_cols) {
    ttt_rng r;
    ttt_rng_seed(&r, 402);
    const int m = 13, n = 7;
    ttt_tensor *a = randn2(&r, m, n);
    double wr[7] = {0}, wc[13] = {0}, wn[13] = {0}, ar[7] = {0}, ac[13] = {0};
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double x = a->data[i * n + j];
            wr[j] += x;
            ar[j] += fabs(x);
            wc[i] += x;
            ac[i] += fabs(x);
            wn[i] += x * x;
        }
    for (int i = 0; i < m; i++) wn[i] = sqrt(wn[i]);
    ttt_tensor *sr = ttt_sum_rows(ctx, a), *sc = ttt_sum_cols(ctx, a), *rn = ttt_row_norms(ctx, a);
    assert_shape1(sr, n);
    assert_shape1(sc, m);
    assert_shape1(rn, m);
    /* Sums can cancel to near zero: tolerance relative to Σ|x| of each output. */
    for (int j = 0; j < n; j++) TU_ASSERT_CLOSE(&sr->data[j], &wr[j], 1, 1e-7 * ar[j], 0.0);
    for (int i = 0; i < m; i++) TU_ASSERT_CLOSE(&sc->data[i], &wc[i], 1, 1e-7 * ac[i], 0.0);
    assert_close_each(rn->data, wn, (size_t)m, 0.0, 1e-7, "row_norms");
}
END_TEST

START_TEST(test_cumsum) {
    ttt_rng r;
    ttt_rng_seed(&r, 403);
    /* 1-D: cumulative log gates (docs/math.md §5.1), long enough for float accumulation to show. */
    const int T = 5000, d = 3;
    ttt_tensor *g = ttt_tensor_1d(ctx, T);
    ttt_rng_fill_uniform(&r, g->data, (size_t)T, -0.1f, 0.0f);
    ttt_tensor *G = ttt_cumsum(ctx, g);
    assert_shape1(G, T);
    double *w = dalloc((size_t)T), acc = 0;
    for (int t = 0; t < T; t++) w[t] = acc += g->data[t];
    /* Only the final rounding to float: half an ulp (2^-24 relative) of each prefix, with 2x room;
     * a float running sum would be off by many ulp after 5000 terms. */
    assert_close_each(G->data, w, (size_t)T, 0.0, 1.2e-7, "cumsum 1-D");

    ttt_tensor *x = randn2(&r, 40, d);
    ttt_tensor *X = ttt_cumsum(ctx, x);
    assert_shape2(X, 40, d);
    double *w2 = dalloc(40 * (size_t)d), run[3] = {0, 0, 0};
    for (int t = 0; t < 40; t++)
        for (int j = 0; j < d; j++) w2[t * d + j] = run[j] += x->data[t * d + j];
    /* Prefix sums of N(0,1) can pass near zero: absolute 1e-6 covers the final rounding. */
    assert_close_each(X->data, w2, 40 * (size_t)d, 1e-6, 1.2e-7, "cumsum 2-D");
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* norms                                                                                          */

/* Double layernorm of one row (biased variance, eps inside the sqrt); gamma/beta may be NULL. */
static void ln_row_d(double *y, const double *x, int n, const double *gamma, const double *beta,
                     double eps) {
    double mu = 0, var = 0;
    for (int j = 0; j < n; j++) mu += x[j];
    mu /= n;
    for (int j = 0; j < n; j++) var += (x[j] - mu) * (x[j] - mu);
    var /= n;
    for (int j = 0; j < n; j++)
        y[j] = (x[j] - mu) / sqrt(var + eps) * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0);
}

START_TEST(test_layernorm) {
    ttt_rng r;
    ttt_rng_seed(&r, 501);
    const int m = 6, n = 16;
    const float eps = 1e-5f;
    ttt_tensor *x = randn(&r, 2, (int[]){m, n}, 3.0f), *g = randn1(&r, n), *b = randn1(&r, n);
    for (size_t i = 0; i < x->n; i++) x->data[i] += 5.0f; /* a nonzero mean to remove */
    double gd[16], bd[16], xd[16], yd[16];
    for (int j = 0; j < n; j++) {
        gd[j] = g->data[j];
        bd[j] = b->data[j];
    }
    for (int variant = 0; variant < 3; variant++) {
        const ttt_tensor *gg = variant >= 1 ? g : NULL, *bb = variant == 2 ? b : NULL;
        ttt_tensor *y = ttt_layernorm(ctx, x, gg, bb, eps);
        assert_shape2(y, m, n);
        double *want = dalloc((size_t)m * n);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) xd[j] = x->data[i * n + j];
            ln_row_d(yd, xd, n, gg ? gd : NULL, bb ? bd : NULL, eps);
            memcpy(want + i * n, yd, sizeof yd);
        }
        TU_ASSERT_CLOSE(y->data, want, y->n, 1e-6, 1e-5);
    }
    /* eps inside the sqrt: a constant row maps to 0 (not NaN), and a row ±1 to ±1/sqrt(1+eps). */
    ttt_tensor *c = ttt_tensor_2d(ctx, 2, 2);
    c->data[0] = c->data[1] = 3.0f;
    c->data[2] = -1.0f;
    c->data[3] = 1.0f;
    ttt_tensor *yc = ttt_layernorm(ctx, c, NULL, NULL, 0.25f);
    double wc[4] = {0, 0, -1 / sqrt(1.25), 1 / sqrt(1.25)};
    TU_ASSERT_CLOSE(yc->data, wc, 4, 1e-7, 1e-6);
}
END_TEST

/* Σ dy·LN(x) for one row, in double: the scalar whose gradient layernorm_backward returns. */
static double ln_objective(const double *x, const double *dy, const double *gamma, int n,
                           double eps) {
    double y[64], s = 0;
    ln_row_d(y, x, n, gamma, NULL, eps);
    for (int j = 0; j < n; j++) s += dy[j] * y[j];
    return s;
}

START_TEST(test_layernorm_backward_fd) {
    ttt_rng r;
    ttt_rng_seed(&r, 502);
    const int m = 5, n = 12;
    const float eps = 1e-3f; /* large enough that eps visibly matters in the derivative */
    ttt_tensor *x = randn2(&r, m, n), *dy = randn2(&r, m, n), *g = randn1(&r, n);
    double gd[12];
    for (int j = 0; j < n; j++) gd[j] = g->data[j];
    for (int with_gamma = 0; with_gamma < 2; with_gamma++) {
        ttt_tensor *dx = ttt_layernorm_backward(ctx, dy, x, with_gamma ? g : NULL, eps);
        assert_shape2(dx, m, n);
        double *want = dalloc((size_t)m * n);
        for (int i = 0; i < m; i++) {
            double xr[12], dyr[12];
            for (int j = 0; j < n; j++) {
                xr[j] = x->data[i * n + j];
                dyr[j] = dy->data[i * n + j];
            }
            for (int j = 0; j < n; j++) {
                /* Central differences in double: error O(h²) ≈ 1e-10 relative. */
                const double h = 1e-5, x0 = xr[j];
                xr[j] = x0 + h;
                double fp = ln_objective(xr, dyr, with_gamma ? gd : NULL, n, eps);
                xr[j] = x0 - h;
                double fm = ln_objective(xr, dyr, with_gamma ? gd : NULL, n, eps);
                xr[j] = x0;
                want[i * n + j] = (fp - fm) / (2 * h);
            }
        }
        /* dx = r(ĝ − mean ĝ − x̂·mean(ĝx̂)) subtracts O(1) terms in float: ~1e-6 absolute. */
        TU_ASSERT_CLOSE(dx->data, want, dx->n, 1e-5, 1e-5);
    }
}
END_TEST

START_TEST(test_rmsnorm_l2norm) {
    ttt_rng r;
    ttt_rng_seed(&r, 503);
    const int m = 7, n = 10;
    const float eps = 1e-2f; /* visible against mean(x²) ≈ 1, so a misplaced eps fails */
    ttt_tensor *x = randn2(&r, m, n), *g = randn1(&r, n);
    double *wr = dalloc((size_t)m * n), *wrg = dalloc((size_t)m * n), *wl = dalloc((size_t)m * n);
    for (int i = 0; i < m; i++) {
        double ss = 0;
        for (int j = 0; j < n; j++) ss += (double)x->data[i * n + j] * x->data[i * n + j];
        for (int j = 0; j < n; j++) {
            double v = x->data[i * n + j];
            wr[i * n + j] = v / sqrt(ss / n + eps);
            wrg[i * n + j] = wr[i * n + j] * g->data[j];
            wl[i * n + j] = v / sqrt(ss + eps);
        }
    }
    TU_ASSERT_CLOSE(ttt_rmsnorm(ctx, x, NULL, eps)->data, wr, (size_t)m * n, 1e-7, 1e-6);
    TU_ASSERT_CLOSE(ttt_rmsnorm(ctx, x, g, eps)->data, wrg, (size_t)m * n, 1e-7, 1e-6);
    TU_ASSERT_CLOSE(ttt_l2norm_rows(ctx, x, eps)->data, wl, (size_t)m * n, 1e-7, 1e-6);
}
END_TEST

START_TEST(test_softmax) {
    ttt_rng r;
    ttt_rng_seed(&r, 504);
    const int m = 6, n = 9;
    ttt_tensor *a = randn(&r, 2, (int[]){m, n}, 3.0f);
    /* Row 1: some masked entries; row 2: fully masked; row 3: huge logits (exp would overflow
     * without the max subtraction); row 4: one finite entry among masked ones. */
    a->data[1 * n + 0] = a->data[1 * n + 4] = a->data[1 * n + 8] = -INFINITY;
    for (int j = 0; j < n; j++) a->data[2 * n + j] = -INFINITY;
    for (int j = 0; j < n; j++) a->data[3 * n + j] = 1000.0f + (float)j;
    for (int j = 0; j < n; j++) a->data[4 * n + j] = j == 5 ? -3.0f : -INFINITY;
    ttt_tensor *s = ttt_softmax_rows(ctx, a);
    assert_shape2(s, m, n);
    double *want = dalloc((size_t)m * n);
    for (int i = 0; i < m; i++) {
        const float *x = a->data + i * n;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) mx = fmax(mx, x[j]);
        if (isinf(mx)) continue; /* fully masked: zeros */
        for (int j = 0; j < n; j++) sum += exp((double)x[j] - mx);
        for (int j = 0; j < n; j++) want[i * n + j] = exp((double)x[j] - mx) / sum;
    }
    TU_ASSERT_CLOSE(s->data, want, s->n, 1e-7, 1e-6);
    ck_assert(s->data[1 * n + 0] == 0.0f && s->data[1 * n + 4] == 0.0f);
    for (int j = 0; j < n; j++) ck_assert(s->data[2 * n + j] == 0.0f);
    ck_assert(s->data[4 * n + 5] == 1.0f);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* masks                                                                                          */

START_TEST(test_tril) {
    ttt_rng r;
    ttt_rng_seed(&r, 601);
    const int ks[] = {0, -1, 1, -10, 10};
    const int shapes[][2] = {{6, 6}, {4, 7}, {7, 4}};
    for (size_t si = 0; si < 3; si++)
        for (size_t ki = 0; ki < 5; ki++) {
            int m = shapes[si][0], n = shapes[si][1], k = ks[ki];
            ttt_tensor *a = randn2(&r, m, n);
            ttt_tensor *t = ttt_tril(ctx, a, k);
            assert_shape2(t, m, n);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    float want = j <= i + k ? a->data[i * n + j] : 0.0f;
                    ck_assert_msg(t->data[i * n + j] == want, "tril k=%d (%d,%d) at [%d][%d]", k,
                                  m, n, i, j);
                }
        }
    /* Batched: each (m, m) matrix of a 3-D tensor masked independently. */
    ttt_tensor *b = randn(&r, 3, (int[]){3, 4, 4}, 1.0f);
    ttt_tensor *tb = ttt_tril(ctx, b, -1);
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                size_t o = (size_t)q * 16 + i * 4 + j;
                ck_assert(tb->data[o] == (j < i ? b->data[o] : 0.0f));
            }
}
END_TEST

START_TEST(test_causal_fill) {
    ttt_rng r;
    ttt_rng_seed(&r, 602);
    const int m = 5;
    ttt_tensor *a = randn2(&r, m, m);
    float *sa = snapshot(a);
    ttt_tensor *c = ttt_causal_fill(ctx, a);
    assert_shape2(c, m, m);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            float v = c->data[i * m + j];
            if (j <= i) ck_assert(v == a->data[i * m + j]);
            else ck_assert(isinf(v) && v < 0);
        }
    assert_unchanged(a, sa);
    /* Composed with softmax: a causal attention row i spreads over j ≤ i only. */
    ttt_tensor *p = ttt_softmax_rows(ctx, c);
    for (int i = 0; i < m; i++) {
        double s = 0;
        for (int j = 0; j < m; j++) s += p->data[i * m + j];
        ck_assert(fabs(s - 1.0) < 1e-6);
        for (int j = i + 1; j < m; j++) ck_assert(p->data[i * m + j] == 0.0f);
    }
}
END_TEST

START_TEST(test_decay_mask) {
    ttt_rng r;
    ttt_rng_seed(&r, 603);
    const int T = 40;
    /* Three gate regimes for G = cumsum(log α): mild decay; steep decay, so that exp(G_i) alone
     * underflows and exp(G_j − G_i) above the diagonal would overflow to inf (a product-based or
     * mask-after-exp implementation yields 0·inf = NaN there); and an offset start far below 0. */
    for (int regime = 0; regime < 3; regime++) {
        ttt_tensor *la = ttt_tensor_1d(ctx, T);
        if (regime == 0) ttt_rng_fill_uniform(&r, la->data, (size_t)T, -0.5f, 0.0f);
        else ttt_rng_fill_uniform(&r, la->data, (size_t)T, -60.0f, -0.01f);
        if (regime == 2) la->data[0] -= 1000.0f;
        ttt_tensor *g = ttt_cumsum(ctx, la);
        for (int strict = 0; strict < 2; strict++) {
            ttt_tensor *D = ttt_decay_mask(ctx, g, strict);
            assert_shape2(D, T, T);
            ck_assert_int_eq(ttt_find_nonfinite(D->data, D->n), -1);
            double *want = dalloc((size_t)T * T);
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    if (strict ? j < i : j <= i)
                        want[i * T + j] = exp((double)g->data[i] - (double)g->data[j]);
            /* One expf of an exactly formed float difference: ~1 ulp relative; the values are
             * in (0, 1], so 1e-6 relative to the max 1 is generous yet catches wrong signs. */
            TU_ASSERT_CLOSE(D->data, want, D->n, 0.0, 1e-6);
            for (int i = 0; i < T; i++) {
                /* Diagonal is exactly exp(0) = 1 unless strict; entries outside are exactly 0. */
                ck_assert(D->data[i * T + i] == (strict ? 0.0f : 1.0f));
                for (int j = i + 1; j < T; j++) ck_assert(D->data[i * T + j] == 0.0f);
            }
            if (regime == 2) /* the neighbour entry survives although exp(G) underflowed */
                ck_assert(D->data[1 * T + 0] > 0.0f && expf(g->data[1]) == 0.0f);
        }
    }
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* triangular solve                                                                               */

START_TEST(test_solve_lower) {
    ttt_rng r;
    ttt_rng_seed(&r, 701);
    const int n = 9, m = 4;
    for (int unit = 0; unit < 2; unit++) {
        ttt_tensor *L = ttt_tensor_2d(ctx, n, n), *B = randn2(&r, n, m);
        /* Well conditioned: diagonal 2 + |N(0,1)|, off-diagonal 0.3·N(0,1). With unit = 1 the
         * diagonal holds NaN, which must not be read; the upper triangle holds NaN in both. */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float v;
                if (j < i) v = 0.3f * (float)ttt_rng_normal(&r);
                else if (j == i) v = unit ? NAN : 2.0f + fabsf((float)ttt_rng_normal(&r));
                else v = NAN;
                L->data[i * n + j] = v;
            }
        float *sB = snapshot(B);
        ttt_tensor *X = ttt_solve_lower(ctx, L, B, unit);
        assert_shape2(X, n, m);
        assert_unchanged(B, sB);
        /* Naive forward substitution in double. */
        double *want = dalloc((size_t)n * m);
        for (int c = 0; c < m; c++)
            for (int i = 0; i < n; i++) {
                double s = B->data[i * m + c];
                for (int j = 0; j < i; j++) s -= (double)L->data[i * n + j] * want[j * m + c];
                want[i * m + c] = unit ? s : s / L->data[i * n + i];
            }
        /* Well-conditioned triangular solve: backward stable, ~n·u relative. */
        TU_ASSERT_CLOSE(X->data, want, X->n, 1e-6, 1e-5);
        /* And the defining property, L·X = B (with the implied diagonal). */
        double *lx = dalloc((size_t)n * m);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < m; c++) {
                double xd = X->data[i * m + c];
                double s = unit ? xd : (double)L->data[i * n + i] * xd;
                for (int j = 0; j < i; j++) s += (double)L->data[i * n + j] * X->data[j * m + c];
                lx[i * m + c] = s;
            }
        TU_ASSERT_CLOSE(B->data, lx, B->n, 1e-5, 1e-5);
    }
    /* A 1-D right-hand side is one column. */
    ttt_tensor *L = ttt_tensor_2d(ctx, 3, 3), *b = ttt_tensor_1d(ctx, 3);
    const float Lv[9] = {2, 0, 0, 1, 4, 0, -1, 2, 0.5f}, bv[3] = {2, 9, 1};
    memcpy(L->data, Lv, sizeof Lv);
    memcpy(b->data, bv, sizeof bv);
    ttt_tensor *x = ttt_solve_lower(ctx, L, b, 0);
    assert_shape1(x, 3);
    double wx[3] = {1, 2, 2 * (1 + 1 - 4)}; /* x0 = 1; x1 = (9 − 1)/4 = 2; x2 = (1 + 1 − 4)/0.5 */
    TU_ASSERT_CLOSE(x->data, wx, 3, 1e-6, 1e-6);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* shape                                                                                          */

START_TEST(test_transpose) {
    ttt_rng r;
    ttt_rng_seed(&r, 801);
    /* Not multiples of any tile size, both orientations. */
    const int shapes[][2] = {{37, 45}, {45, 37}, {1, 5}, {70, 3}};
    for (size_t s = 0; s < 4; s++) {
        int m = shapes[s][0], n = shapes[s][1];
        ttt_tensor *a = randn2(&r, m, n);
        ttt_tensor *t = ttt_transpose(ctx, a);
        assert_shape2(t, n, m);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) ck_assert(t->data[j * m + i] == a->data[i * n + j]);
    }
    ttt_tensor *b = randn(&r, 3, (int[]){3, 5, 2}, 1.0f);
    ttt_tensor *tb = ttt_transpose(ctx, b);
    ck_assert_int_eq(tb->ndim, 3);
    ck_assert_int_eq(tb->shape[0], 3);
    ck_assert_int_eq(tb->shape[1], 2);
    ck_assert_int_eq(tb->shape[2], 5);
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 2; j++)
                ck_assert(tb->data[q * 10 + j * 5 + i] == b->data[q * 10 + i * 2 + j]);
}
END_TEST

START_TEST(test_slice_concat) {
    ttt_rng r;
    ttt_rng_seed(&r, 802);
    ttt_tensor *a = randn(&r, 3, (int[]){6, 2, 3}, 1.0f);
    ttt_tensor *s = ttt_slice_rows(ctx, a, 2, 5);
    ck_assert_int_eq(s->ndim, 3);
    ck_assert_int_eq(s->shape[0], 3);
    ck_assert_int_eq(s->shape[1], 2);
    ck_assert_int_eq(s->shape[2], 3);
    for (size_t i = 0; i < s->n; i++) ck_assert(s->data[i] == a->data[2 * 6 + i]);
    ck_assert_ptr_ne(s->data, a->data + 12); /* a copy, not a view */
    ttt_tensor *e = ttt_slice_rows(ctx, a, 4, 4);
    ck_assert_int_eq(e->shape[0], 0);

    ttt_tensor *b = randn(&r, 3, (int[]){1, 2, 3}, 1.0f);
    ttt_tensor *c = ttt_concat_rows(ctx, a, b);
    ck_assert_int_eq(c->shape[0], 7);
    for (size_t i = 0; i < a->n; i++) ck_assert(c->data[i] == a->data[i]);
    for (size_t i = 0; i < b->n; i++) ck_assert(c->data[a->n + i] == b->data[i]);
    /* 1-D: slicing then concatenating the pieces gives the original back. */
    ttt_tensor *v = randn1(&r, 10);
    ttt_tensor *w =
        ttt_concat_rows(ctx, ttt_slice_rows(ctx, v, 0, 3), ttt_slice_rows(ctx, v, 3, 10));
    assert_shape1(w, 10);
    ck_assert(memcmp(w->data, v->data, 10 * sizeof(float)) == 0);
}
END_TEST

START_TEST(test_reshape_shares_storage) {
    ttt_rng r;
    ttt_rng_seed(&r, 803);
    ttt_tensor *a = randn2(&r, 4, 6);
    ttt_tensor *v = ttt_reshape(ctx, a, 3, (int[]){2, 3, 4});
    ck_assert_int_eq(v->ndim, 3);
    ck_assert_int_eq(v->shape[0], 2);
    ck_assert_int_eq(v->shape[1], 3);
    ck_assert_int_eq(v->shape[2], 4);
    ck_assert_uint_eq(v->n, 24);
    ck_assert_ptr_eq(v->data, a->data);
    ck_assert_ptr_ne(v, a);
    v->data[13] = 42.0f; /* writing through the view shows in the original */
    ck_assert(a->data[2 * 6 + 1] == 42.0f);
    ck_assert_int_eq(a->ndim, 2); /* the original header is untouched */
    ck_assert_int_eq(a->shape[1], 6);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* comparison utilities                                                                           */

START_TEST(test_comparisons) {
    ttt_rng r;
    ttt_rng_seed(&r, 901);
    const int n = 50;
    ttt_tensor *a = ttt_tensor_1d(ctx, n);
    /* Multiples of 1/8 in [-4, 4]: every difference below is exact in float. */
    for (int i = 0; i < n; i++) a->data[i] = (float)((int)ttt_rng_below(&r, 65) - 32) / 8.0f;
    a->data[7] = -4.5f; /* the largest magnitude, at a known index */
    ttt_tensor *b = ttt_tensor_copy(ctx, a);
    ck_assert(ttt_max_abs(a) == 4.5f);
    ck_assert(ttt_max_abs_diff(a, b) == 0.0f);
    ck_assert(ttt_rel_rms_diff(a, b) == 0.0);

    b->data[17] += 0.25f;
    b->data[30] -= 0.125f;
    ck_assert(ttt_max_abs_diff(a, b) == 0.25f);
    ck_assert(ttt_max_abs_diff(b, a) == 0.25f);
    double den = 0;
    for (int i = 0; i < n; i++) den += (double)b->data[i] * b->data[i];
    double want = sqrt(0.25 * 0.25 + 0.125 * 0.125) / sqrt(den);
    ck_assert(fabs(ttt_rel_rms_diff(a, b) - want) <= 1e-12 * want);

    /* Both zero: 0. */
    ttt_tensor *z1 = ttt_tensor_zeros_like(ctx, a), *z2 = ttt_tensor_zeros_like(ctx, a);
    ck_assert(ttt_rel_rms_diff(z1, z2) == 0.0);

    /* NaN is never hidden behind a plausible maximum. */
    b->data[40] = NAN;
    ck_assert(isnan(ttt_max_abs(b)));
    ck_assert(isnan(ttt_max_abs_diff(a, b)));

    ck_assert_int_eq(ttt_find_nonfinite(a->data, a->n), -1);
    b->data[12] = INFINITY;
    ck_assert_int_eq(ttt_find_nonfinite(b->data, b->n), 12);
    ck_assert_int_eq(ttt_find_nonfinite(b->data + 13, b->n - 13), 40 - 13);
    ck_assert_int_eq(ttt_find_nonfinite(b->data, 0), -1);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* fused causal attention                                                                         */

/* ttt_attention_causal is checked against the unfused composition written here in float64 (the
 * definition, docs/math.md §4: S = scale·Q Kᵀ, the causal mask, each row's softmax after its
 * max, O = P V), against the unfused float32 ops (matmul, scale, causal_fill, softmax_rows,
 * matmul), and its gradients against float64 finite differences of that definition. Every
 * bound is a rounding analysis of the computation it bounds, in the scales the reference
 * gives per output (docs/hardening.md "Portable tolerances"):
 *   V_ie = Σ_j p_ij|v_je|                      (the size of the terms of o_ie = Σ_j p_ij v_je)
 *   A_ie = Σ_j p_ij|v_je − o_ie|·κ_ij,  κ_ij = scale·Σ_c |q_ic k_jc|
 *                                              (an error δs_ij ≤ γ·κ_ij in the scores moves o_ie by
 *                                               Σ_j p_ij (v_je − o_ie) δs_ij: the softmax's shift)
 *   smax_i = max_j |s_ij|. */

#define ATT_EPS 0x1p-24 /* float32 unit roundoff */
#define ATT_EPS64 0x1p-50 /* 8 double roundings per term: both float64 evaluations' sums */

typedef struct attn_case {
    int B, T, dk, dv;
    float scale;
    int batched; /* (B, T, D) tensors; else (T, D) with B = 1 */
} attn_case;

/* The definition in float64 on float64 inputs; A, V, smax may be NULL. */
static void attn_ref64(const attn_case *c, const double *q, const double *k, const double *v,
                       double *o, double *A, double *V, double *smax) {
    const int T = c->T, dk = c->dk, dv = c->dv;
    double *s = malloc((size_t)(T ? T : 1) * sizeof(double));
    double *kap = malloc((size_t)(T ? T : 1) * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < T; i++) {
            const double *qi = q + ((size_t)b * T + i) * dk;
            double m = -INFINITY, sm = 0.0, l = 0.0;
            for (int j = 0; j <= i; j++) {
                const double *kj = k + ((size_t)b * T + j) * dk;
                double d = 0.0, a = 0.0;
                for (int e = 0; e < dk; e++) {
                    d += qi[e] * kj[e];
                    a += fabs(qi[e] * kj[e]);
                }
                s[j] = c->scale * d;
                kap[j] = c->scale * a;
                m = fmax(m, s[j]);
                sm = fmax(sm, fabs(s[j]));
            }
            for (int j = 0; j <= i; j++) l += exp(s[j] - m);
            const size_t row = (size_t)b * T + i;
            for (int e = 0; e < dv; e++) {
                double acc = 0.0;
                for (int j = 0; j <= i; j++)
                    acc += exp(s[j] - m) / l * v[((size_t)b * T + j) * dv + e];
                o[row * dv + e] = acc;
                if (!A) continue;
                double a = 0.0, vv = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double p = exp(s[j] - m) / l, x = v[((size_t)b * T + j) * dv + e];
                    a += p * fabs(x - acc) * kap[j];
                    vv += p * fabs(x);
                }
                A[row * dv + e] = a;
                V[row * dv + e] = vv;
            }
            if (smax) smax[row] = sm;
        }
    free(s);
    free(kap);
}

static double *att_widen(const float *x, size_t n) {
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static ttt_tensor *att_input(ttt_rng *r, const attn_case *c, int d) {
    return c->batched ? randn(r, 3, (int[]){c->B, c->T, d}, 1.0f)
                      : randn(r, 2, (int[]){c->T, d}, 1.0f);
}

/* max over outputs of |got − o| / tol, with tol = ε|o| + ATT_EPS64·((dk + 2)·A + (T + 5)·V)
 * (fused: each output a double sum rounded once, c = 1 for the rounding, exact) or
 * tol = 2ε·((dk + 2)·A + (i + 6 + 2·smax_i)·V) (unfused float32: the product's γ_dk and the
 * scaling's rounding in the scores, the shifted argument |s − m| ≤ 2·smax, expf within 2 ulp,
 * the rounded 1/Σ and the multiply in each p, the product's γ_{i+1} over the row's keys; c = 2
 * for the second-order terms). */
static double attn_worst(const attn_case *c, const float *got, const double *o, const double *A,
                         const double *V, const double *smax, int unfused) {
    double worst = 0.0;
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < c->T; i++)
            for (int e = 0; e < c->dv; e++) {
                const size_t x = ((size_t)b * c->T + i) * c->dv + e;
                const double tol =
                    unfused ? 2.0 * ATT_EPS *
                                  ((c->dk + 2) * A[x] +
                                   (i + 6 + 2.0 * smax[(size_t)b * c->T + i]) * V[x])
                            : ATT_EPS * fabs(o[x]) +
                                  ATT_EPS64 * ((c->dk + 2) * A[x] + (c->T + 5) * V[x]);
                const double r = fabs(got[x] - o[x]) / tol;
                if (!(r <= worst)) worst = r;
            }
    return worst;
}

START_TEST(test_attention_causal_forward) {
    static const attn_case cases[] = {
        {1, 1, 3, 3, 0.7f, 0},  {1, 9, 5, 3, 0.7f, 0}, {3, 12, 4, 6, 0.7f, 1},
        {2, 10, 6, 6, 2.5f, 1}, /* peaked rows: scores up to ~15 */
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const attn_case *c = &cases[t];
        ttt_rng r;
        ttt_rng_seed(&r, 900 + t);
        ttt_tensor *q = att_input(&r, c, c->dk), *k = att_input(&r, c, c->dk);
        ttt_tensor *v = att_input(&r, c, c->dv);
        const float *sq = snapshot(q), *sk = snapshot(k), *sv = snapshot(v);
        ttt_tensor *o = ttt_attention_causal(ctx, q, k, v, c->scale);
        ck_assert_int_eq(o->ndim, v->ndim);
        for (int d = 0; d < v->ndim; d++) ck_assert_int_eq(o->shape[d], v->shape[d]);
        assert_unchanged(q, sq);
        assert_unchanged(k, sk);
        assert_unchanged(v, sv);
        const size_t no = v->n, rows = (size_t)c->B * c->T;
        double *want = dalloc(no), *A = dalloc(no), *V = dalloc(no), *smax = dalloc(rows);
        double *q64 = att_widen(q->data, q->n), *k64 = att_widen(k->data, k->n);
        double *v64 = att_widen(v->data, v->n);
        attn_ref64(c, q64, k64, v64, want, A, V, smax);
        const double fused = attn_worst(c, o->data, want, A, V, smax, 0);
        TU_ASSERT_LE(fused, 1.0, "case %zu: fused op against float64: err/tol %.3g", t, fused);
        /* the unfused float32 ops */
        ttt_tensor *s = ttt_scale(ctx, ttt_matmul(ctx, q, 0, k, 1), c->scale);
        ttt_tensor *u = ttt_matmul(ctx, ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s)), 0, v, 0);
        const double unf = attn_worst(c, u->data, want, A, V, smax, 1);
        TU_ASSERT_LE(unf, 1.0, "case %zu: unfused ops against float64: err/tol %.3g", t, unf);
        /* controls: v_00 (every row's first key, row 0's only one) scaled by 1 + 1e-5 for the
         * fused op's one-rounding bound, by 1 + 1e-3 for the unfused bound */
        const float keep = v->data[0];
        v->data[0] = keep * (1.0f + 1e-5f);
        ttt_tensor *oc = ttt_attention_causal(ctx, q, k, v, c->scale);
        ck_assert_msg(attn_worst(c, oc->data, want, A, V, smax, 0) > 1.0,
                      "case %zu: fused control not rejected", t);
        v->data[0] = keep * (1.0f + 1e-3f);
        ttt_tensor *sc = ttt_scale(ctx, ttt_matmul(ctx, q, 0, k, 1), c->scale);
        ttt_tensor *uc =
            ttt_matmul(ctx, ttt_softmax_rows(ctx, ttt_causal_fill(ctx, sc)), 0, v, 0);
        ck_assert_msg(attn_worst(c, uc->data, want, A, V, smax, 1) > 1.0,
                      "case %zu: unfused control not rejected", t);
        v->data[0] = keep;
    }
}
END_TEST

/* L = Σ w ⊙ O in float64 for the gradient checks; q and k may be one buffer. */
static double attn_loss64(const attn_case *c, const double *q, const double *k, const double *v,
                          const float *w, double *o) {
    attn_ref64(c, q, k, v, o, NULL, NULL, NULL);
    double L = 0.0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->dv; i++) L += (double)w[i] * o[i];
    return L;
}

/* Gradients of L = Σ w ⊙ attention_causal(q, k, v) (ttt_backward_from) against float64 central
 * differences of the float64 definition, Richardson-extrapolated: R(h) = (4·fd(h/2) − fd(h))/3
 * has an O(h⁴) error, so R(h/2) is within |R(h) − R(h/2)|/15 of the derivative (taken twice,
 * 2·|R(h) − R(h/2)|), plus L's own float64 rounding (ATT_EPS64 per term) amplified by the
 * differences' 1/step (8/h for the three steps). The op forms each gradient element in double
 * and rounds it once: 2ε of its parts' magnitudes (c = 2: when q and k are one tensor the two
 * contributions are rounded and then added). Control: the seed's last element × (1 + 1e-5). */
START_TEST(test_attention_causal_grad_fd) {
    static const attn_case cases[] = {
        {1, 7, 4, 3, 0.8f, 0}, {2, 6, 3, 5, 0.8f, 1}, {1, 6, 4, 4, 0.9f, 0} /* q = k */,
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const attn_case *c = &cases[t];
        const int alias = t == 2;
        ttt_rng r;
        ttt_rng_seed(&r, 950 + t);
        ttt_tape tape;
        ttt_tape_init(&tape);
        ctx->tape = &tape;
        ctx->grad = 1;
        ttt_tensor *q = att_input(&r, c, c->dk), *k = att_input(&r, c, c->dk);
        ttt_tensor *v = att_input(&r, c, c->dv);
        if (alias) memcpy(k->data, q->data, q->n * sizeof(float));
        q->requires_grad = k->requires_grad = v->requires_grad = 1;
        const size_t no = v->n;
        float *w = ttt_arena_alloc(ctx->arena, no * sizeof(float));
        ttt_rng_fill_normal(&r, w, no, 0.0f, 1.0f);
        /* the op's gradients; with alias also the separate parts for the rounding scale */
        ttt_tensor *o = ttt_attention_causal(ctx, q, alias ? q : k, v, c->scale);
        ttt_backward_from(ctx, o, w);
        const float *gq = snapshot(&(ttt_tensor){.data = q->grad, .n = q->n});
        const float *gv = snapshot(&(ttt_tensor){.data = v->grad, .n = v->n});
        const float *gk = alias ? NULL : snapshot(&(ttt_tensor){.data = k->grad, .n = k->n});
        float *mag = ttt_arena_alloc(ctx->arena, (q->n + k->n + v->n) * sizeof(float));
        {
            ttt_tensor *o2 = ttt_attention_causal(ctx, q, k, v, c->scale);
            ttt_backward_from(ctx, o2, w);
            for (size_t i = 0; i < q->n; i++)
                mag[i] = alias ? fabsf(q->grad[i]) + fabsf(k->grad[i]) : fabsf(q->grad[i]);
            for (size_t i = 0; i < k->n; i++) mag[q->n + i] = fabsf(k->grad[i]);
            for (size_t i = 0; i < v->n; i++) mag[q->n + k->n + i] = fabsf(v->grad[i]);
        }
        /* a control gradient: the seed's last element × (1 + 1e-5) */
        w[no - 1] *= 1.0f + 1e-5f;
        ttt_tensor *o3 = ttt_attention_causal(ctx, q, alias ? q : k, v, c->scale);
        ttt_backward_from(ctx, o3, w);
        const float *cq = snapshot(&(ttt_tensor){.data = q->grad, .n = q->n});
        const float *cv = snapshot(&(ttt_tensor){.data = v->grad, .n = v->n});
        const float *ck = alias ? NULL : snapshot(&(ttt_tensor){.data = k->grad, .n = k->n});
        w[no - 1] /= 1.0f + 1e-5f;
        ctx->grad = 0;
        ctx->tape = NULL;
        ttt_tape_free(&tape);

        double *q64 = att_widen(q->data, q->n), *k64 = alias ? q64 : att_widen(k->data, k->n);
        double *v64 = att_widen(v->data, v->n), *ob = dalloc(no);
        double *A = dalloc(no), *V = dalloc(no);
        attn_ref64(c, q64, k64, v64, ob, A, V, NULL);
        double Lerr = 0.0;
        for (size_t i = 0; i < no; i++)
            Lerr += fabs(w[i]) * ATT_EPS64 * ((c->dk + 2) * A[i] + (c->T + 5) * V[i]);
        double worst = 0.0, worst_ctl = 0.0;
        const int n_in = alias ? 2 : 3;
        for (int in = 0; in < n_in; in++) {
            double *x = in == 0 ? q64 : in == 1 && !alias ? k64 : v64;
            const int isv = x == v64;
            const size_t n = isv ? v->n : q->n, moff = isv ? q->n + k->n : in == 1 ? q->n : 0;
            const float *g = isv ? gv : in == 0 ? gq : gk, *gc = isv ? cv : in == 0 ? cq : ck;
            for (size_t j = 0; j < n; j++) {
                const double keep = x[j], h = 1e-2 * fmax(1.0, fabs(keep));
                double fd[3];
                for (int s = 0; s < 3; s++) {
                    const double st = h / (double)(1 << s);
                    x[j] = keep + st;
                    const double lp = attn_loss64(c, q64, k64, v64, w, ob);
                    x[j] = keep - st;
                    const double lm = attn_loss64(c, q64, k64, v64, w, ob);
                    fd[s] = (lp - lm) / (2.0 * st);
                }
                x[j] = keep;
                const double R1 = (4.0 * fd[1] - fd[0]) / 3.0, R2 = (4.0 * fd[2] - fd[1]) / 3.0;
                const double tol =
                    2.0 * ATT_EPS * mag[moff + j] + 2.0 * fabs(R1 - R2) + 8.0 * Lerr / h;
                const double e = fabs(g[j] - R2) / tol, ec = fabs(gc[j] - R2) / tol;
                if (!(e <= worst)) worst = e;
                if (!(ec <= worst_ctl)) worst_ctl = ec;
            }
        }
        TU_ASSERT_LE(worst, 1.0, "case %zu: gradient against float64 differences: err/tol %.3g",
                     t, worst);
        ck_assert_msg(worst_ctl > 1.0, "case %zu: gradient control not rejected (%.3g)", t,
                      worst_ctl);
    }
}
END_TEST

START_TEST(test_shape_mismatch_attention) {
    ttt_tensor *q = ttt_tensor_3d(ctx, 2, 5, 4), *k = ttt_tensor_3d(ctx, 2, 5, 4);
    ttt_tensor *v = ttt_tensor_3d(ctx, 2, 6, 4); /* 6 tokens against 5 */
    ttt_tensor_fill(q, 1.0f);
    ttt_tensor_fill(k, 1.0f);
    ttt_tensor_fill(v, 1.0f);
    ttt_attention_causal(ctx, q, k, v, 0.5f);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* shape checks (programmer errors abort)                                                         */

START_TEST(test_shape_mismatch_add) {
    ttt_tensor *a = ttt_tensor_2d(ctx, 3, 4), *b = ttt_tensor_2d(ctx, 4, 3);
    ttt_tensor_fill(a, 1.0f);
    ttt_tensor_fill(b, 1.0f);
    ttt_add(ctx, a, b);
}
END_TEST

START_TEST(test_shape_mismatch_matmul) {
    ttt_tensor *a = ttt_tensor_2d(ctx, 7, 5), *b = ttt_tensor_2d(ctx, 3, 5);
    ttt_matmul(ctx, a, 0, b, 0); /* (7,5)·(3,5) without transposing b */
}
END_TEST

START_TEST(test_shape_mismatch_batch) {
    ttt_tensor *a = ttt_tensor_3d(ctx, 2, 3, 4), *b = ttt_tensor_3d(ctx, 3, 4, 5);
    ttt_matmul(ctx, a, 0, b, 0);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */

static Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_matmul_2d_all_transposes);
    tcase_add_test(tc, test_matmul_batched);
    tcase_add_test(tc, test_matmul_vector_and_empty);
    tcase_add_test(tc, test_gemm);
    tcase_add_test(tc, test_outer);
    tcase_add_test(tc, test_binary_broadcast);
    tcase_add_test(tc, test_axpby_scale);
    tcase_add_test(tc, test_scale_rows_cols);
    tcase_add_test(tc, test_unary_basic);
    tcase_add_test(tc, test_activations);
    tcase_add_test(tc, test_activations_extreme);
    tcase_add_test(tc, test_activation_grads_fd);
    tcase_add_test(tc, test_optimizer_op_conventions);
    tcase_add_test(tc, test_reductions_full);
    tcase_add_test(tc, test_reductions_rows_cols);
    tcase_add_test(tc, test_cumsum);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_layernorm_backward_fd);
    tcase_add_test(tc, test_rmsnorm_l2norm);
    tcase_add_test(tc, test_softmax);
    tcase_add_test(tc, test_tril);
    tcase_add_test(tc, test_causal_fill);
    tcase_add_test(tc, test_decay_mask);
    tcase_add_test(tc, test_solve_lower);
    tcase_add_test(tc, test_transpose);
    tcase_add_test(tc, test_slice_concat);
    tcase_add_test(tc, test_reshape_shares_storage);
    tcase_add_test(tc, test_comparisons);
    tcase_add_test(tc, test_attention_causal_forward);
    tcase_add_test(tc, test_attention_causal_grad_fd);
    tcase_add_test_raise_signal(tc, test_shape_mismatch_add, SIGABRT);
    tcase_add_test_raise_signal(tc, test_shape_mismatch_matmul, SIGABRT);
    tcase_add_test_raise_signal(tc, test_shape_mismatch_batch, SIGABRT);
    tcase_add_test_raise_signal(tc, test_shape_mismatch_attention, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(ops_suite()); }
