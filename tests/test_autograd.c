/* Tests of reverse-mode autodiff (src/core/autograd.c) and of every op's backward (src/core/ops.c).
 *
 * The finite-difference check. For each op with a backward, random float32 inputs x (drawn away
 * from kinks) and a random projection r give the scalar L(x) = Σ r ⊙ op(x). The tape computes
 * ∇L with ttt_backward_from(out, r) in float32. The reference is a central difference of L, where
 * op is re-implemented HERE in double precision (a "ref" forward per op, written from the
 * definition in ops.h, not from the float code or its backward): with step h = 1e-5·max(1, |x|)
 * its error is ~h²·|L'''| + 1e-16·|L|/h ≈ 1e-10, far below what is being measured. The same ref
 * also checks the float forward (1e-5 relative), so a ref that disagreed with the op would fail.
 *
 * Tolerances (gradients): |tape − fd| ≤ 1e-7 + 1e-5·max|fd|. The
 * tape gradient is float32 arithmetic: each element sums at most a few dozen products (unit
 * roundoff 6e-8, libm float functions within ~2 ulp), so its error is ≲ 30·6e-8·Σ|terms| ≈ 2e-6
 * relative for O(1) terms (measured when this was written: at most 2.2e-7 over all cases); 1e-5
 * leaves room for the cancellation inside norm backwards and for builds without FMA. A wrong
 * formula (a missing term, a transposed operand, a lost broadcast sum) is off by O(1), five
 * orders of magnitude above this; test_fd_detects_wrong_gradient checks that the harness does
 * fail on a gradient off by a relative 1e-3. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "ops.h"
#include "rng.h"
#include "tensor.h"
#include "testutil.h"

/* Cases are tables whose trailing fields default to zero on purpose (no iarg, default domain). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define PI_D 3.14159265358979323846

/* --------------------------------------------------------------------------------------------- */
/* fixture                                                                                        */

static ttt_arena g_arena;
static ttt_tape g_tape;
static ttt_ctx g_ctx;
static ttt_ctx *ctx = &g_ctx;

static void setup(void) {
    ttt_arena_init(&g_arena, 0);
    ttt_tape_init(&g_tape);
    g_ctx = (ttt_ctx){.arena = &g_arena, .grad = 1, .tape = &g_tape};
}

static void teardown(void) {
    ttt_tape_free(&g_tape);
    ttt_arena_free(&g_arena);
}

static double *dalloc(size_t n) {
    double *p = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(double));
    ck_assert_ptr_nonnull(p);
    memset(p, 0, (n ? n : 1) * sizeof(double));
    return p;
}

/* --------------------------------------------------------------------------------------------- */
/* the finite-difference harness                                                                  */

#define MAXIN 4

/* How an input is drawn. */
typedef enum dom {
    DOM_NORMAL = 0, /* N(0, 1), requires grad */
    DOM_POS,        /* U[0.5, 2] (log, sqrt, divisors, diagonals), requires grad */
    DOM_AWAY,       /* ±U[0.2, 2]: kinks at 0 stay > 1e4 steps away, requires grad */
    DOM_WIDE,       /* N(0, 2²): reaches the tails of the activations, requires grad */
    DOM_CONST,      /* N(0, 1), a constant (requires_grad = 0): its grad must stay NULL */
    DOM_ABSENT,     /* NULL (an optional input left out) */
} dom;

typedef struct fd_case fd_case;
/* The float op under test, on the tape. */
typedef ttt_tensor *(*op_fn)(ttt_ctx *ctx, ttt_tensor *const *in, const fd_case *c);
/* The same op in double: writes every element of the result (same layout). in[i] is NULL for an
 * absent input. */
typedef void (*ref_fn)(double *out, const double *const *in, const fd_case *c);

struct fd_case {
    const char *name;
    op_fn op;
    ref_fn ref;
    int n_in;
    int ndim[MAXIN];
    int shape[MAXIN][TTT_MAX_DIMS];
    dom dom[MAXIN];
    int iarg[4];
    float farg[4];
    const int *ids; /* ids / targets for embedding and cross-entropy */
    int n_ids;
};

static size_t in_numel(const fd_case *c, int i) {
    size_t n = 1;
    for (int d = 0; d < c->ndim[i]; d++) n *= (size_t)c->shape[i][d];
    return n;
}
static int in_cols(const fd_case *c, int i) { return c->shape[i][c->ndim[i] - 1]; }
static size_t in_rows(const fd_case *c, int i) { return in_numel(c, i) / (size_t)in_cols(c, i); }

/* L = Σ r ⊙ ref(x) in double. */
static double ref_loss(const fd_case *c, const double *const *x, const float *r, double *out,
                       size_t n_out) {
    c->ref(out, x, c);
    double L = 0.0;
    for (size_t k = 0; k < n_out; k++) L += (double)r[k] * out[k];
    return L;
}

/* Central differences of L w.r.t. every element of input i (n elements), in double; x64 is
 * perturbed in place and restored. */
static void fd_gradient(double *fd, const fd_case *c, double **x64, int i, size_t n, const float *r,
                        size_t n_out) {
    double *scratch = dalloc(n_out);
    for (size_t k = 0; k < n; k++) {
        const double x0 = x64[i][k], h = 1e-5 * fmax(1.0, fabs(x0));
        x64[i][k] = x0 + h;
        double lp = ref_loss(c, (const double *const *)x64, r, scratch, n_out);
        x64[i][k] = x0 - h;
        double lm = ref_loss(c, (const double *const *)x64, r, scratch, n_out);
        x64[i][k] = x0;
        fd[k] = (lp - lm) / (2.0 * h);
    }
}

static void fill_input(ttt_rng *rng, float *x, size_t n, dom d) {
    for (size_t i = 0; i < n; i++) {
        double u = ttt_rng_uniform(rng);
        switch (d) {
        case DOM_POS: x[i] = (float)(0.5 + 1.5 * u); break;
        case DOM_AWAY:
            x[i] = (float)((ttt_rng_uniform(rng) < 0.5 ? -1 : 1) * (0.2 + 1.8 * u));
            break;
        case DOM_WIDE: x[i] = (float)(2.0 * ttt_rng_normal(rng)); break;
        default: x[i] = (float)ttt_rng_normal(rng); break;
        }
    }
}

/* Run one case: forward against the double ref, then the tape gradient of every input that
 * requires grad against central differences of the double ref.
 * as_params = 0: the inputs are plain leaves (requires_grad set, grad created by backward).
 * as_params = 1: they are parameters whose persistent buffers already hold random values G0, so
 * the check is on grad − G0: every backward must ADD into the gradient, never overwrite it. */
/* How run_fd hands the inputs to the tape. */
enum {
    AS_LEAVES = 0,    /* leaves with no gradient buffer: the first writer of each assigns */
    AS_PARAMS = 1,    /* parameters whose buffers already hold a gradient: every op adds */
    AS_OVERWRITE = 2, /* parameters whose buffers hold a stale gradient of an earlier step,
                       * marked ttt_tensor_grad_overwrite: the first writer must assign, the
                       * others add (autograd.h "First writer assigns") */
};

static void run_fd(const fd_case *c, uint64_t seed, int as_params) {
    ttt_rng rng;
    ttt_rng_seed(&rng, ttt_hash_str(c->name) ^ seed);
    ttt_tape_reset(ctx->tape);
    ttt_tensor *in[MAXIN] = {0};
    float *g0[MAXIN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        if (c->dom[i] == DOM_ABSENT) continue;
        in[i] = ttt_tensor_new(ctx, c->ndim[i], c->shape[i]);
        fill_input(&rng, in[i]->data, in[i]->n, c->dom[i]);
        if (c->dom[i] == DOM_CONST) continue;
        if (as_params) {
            size_t n = in[i]->n;
            float *buf = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(float));
            g0[i] = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(float));
            ttt_rng_fill_normal(&rng, g0[i], n, 0.0f, 1.0f);
            memcpy(buf, g0[i], n * sizeof(float));
            ttt_tensor_set_param(in[i], buf);
            if (as_params == AS_OVERWRITE) ttt_tensor_grad_overwrite(in[i]);
        } else {
            in[i]->requires_grad = 1;
        }
    }
    ttt_tensor *out = c->op(ctx, in, c);
    ck_assert_msg(out->requires_grad, "%s: output does not require grad", c->name);
    ck_assert_msg(ctx->tape->n_entries >= 1, "%s: nothing recorded", c->name);
    const size_t n_out = out->n;
    float *r = ttt_arena_alloc(ctx->arena, (n_out ? n_out : 1) * sizeof(float));
    ttt_rng_fill_normal(&rng, r, n_out, 0.0f, 1.0f);
    ttt_backward_from(ctx, out, r);
    for (int i = 0; i < c->n_in; i++)
        if (in[i] && as_params == AS_OVERWRITE) ttt_tensor_grad_settle(in[i]);

    /* inputs in double (the same float values), perturbed one element at a time below */
    double *x64[MAXIN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        if (!in[i]) continue;
        x64[i] = dalloc(in[i]->n);
        for (size_t k = 0; k < in[i]->n; k++) x64[i][k] = in[i]->data[k];
    }
    double *ref = dalloc(n_out);
    ref_loss(c, (const double *const *)x64, r, ref, n_out);
    {
        char msg[600];
        int ok = tu_close(out->data, ref, n_out, 1e-6, 1e-5, msg, sizeof msg);
        ck_assert_msg(ok, "%s: forward vs double reference: %s", c->name, msg);
    }
    const double rtol = 1e-5; /* see the top of the file */
    for (int i = 0; i < c->n_in; i++) {
        if (!in[i]) continue;
        if (c->dom[i] == DOM_CONST) {
            ck_assert_msg(in[i]->grad == NULL, "%s: constant input %d got a gradient", c->name, i);
            continue;
        }
        ck_assert_msg(in[i]->grad != NULL, "%s: input %d has no gradient", c->name, i);
        double *fd = dalloc(in[i]->n);
        fd_gradient(fd, c, x64, i, in[i]->n, r, n_out);
        /* grad − G0 (rounding of the sum: half an ulp of |G0 + g| ≈ 1e-7, inside atol) */
        float *got = in[i]->grad;
        if (as_params == AS_PARAMS) {
            got = ttt_arena_alloc(ctx->arena, (in[i]->n ? in[i]->n : 1) * sizeof(float));
            for (size_t k = 0; k < in[i]->n; k++) got[k] = in[i]->grad[k] - g0[i][k];
        }
        char msg[600];
        int ok = tu_close(got, fd, in[i]->n, as_params == AS_PARAMS ? 3e-7 : 1e-7, rtol, msg,
                          sizeof msg);
        ck_assert_msg(ok, "%s%s: gradient of input %d vs finite differences: %s", c->name,
                      as_params == AS_PARAMS      ? " (accumulating)"
                      : as_params == AS_OVERWRITE ? " (overwriting a stale gradient)"
                                                  : "",
                      i, msg);
    }
}

/* --------------------------------------------------------------------------------------------- */
/* double-precision reference forwards and the op wrappers                                        */

/* matmul / gemm: the matrix view of input i (ops.h: 1-D = (1, n) row, 3-D = batch of matrices). */
static void mview(const fd_case *c, int i, int *batch, int *rows, int *cols) {
    *batch = 0;
    *rows = 1;
    *cols = c->shape[i][0];
    if (c->ndim[i] == 2) {
        *rows = c->shape[i][0];
        *cols = c->shape[i][1];
    } else if (c->ndim[i] == 3) {
        *batch = c->shape[i][0];
        *rows = c->shape[i][1];
        *cols = c->shape[i][2];
    }
}

/* out = alpha·op(A)·op(B) (+ beta·C when input 2 is present); alpha = farg[0] or 1 */
static void ref_matmul(double *out, const double *const *in, const fd_case *c) {
    int ba, ra, ca, bb, rb, cb;
    mview(c, 0, &ba, &ra, &ca);
    mview(c, 1, &bb, &rb, &cb);
    const int ta = c->iarg[0], tb = c->iarg[1];
    const int m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
    const int nb = ba ? ba : bb ? bb : 1;
    const double alpha = c->farg[0] != 0.0f ? c->farg[0] : 1.0;
    for (int b = 0; b < nb; b++) {
        const double *A = in[0] + (ba ? (size_t)b * ra * ca : 0);
        const double *B = in[1] + (bb ? (size_t)b * rb * cb : 0);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int p = 0; p < k; p++) {
                    double av = ta ? A[(size_t)p * ca + i] : A[(size_t)i * ca + p];
                    double bv = tb ? B[(size_t)j * cb + p] : B[(size_t)p * cb + j];
                    s += av * bv;
                }
                size_t o = ((size_t)b * m + i) * n + j;
                out[o] = alpha * s + (c->n_in > 2 && in[2] ? (double)c->farg[1] * in[2][o] : 0.0);
            }
    }
}
static ttt_tensor *op_matmul(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_matmul(x, in[0], c->iarg[0], in[1], c->iarg[1]);
}
static ttt_tensor *op_gemm(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_gemm(x, c->farg[0], in[0], c->iarg[0], in[1], c->iarg[1], c->farg[1], in[2]);
}

static void ref_outer(double *out, const double *const *in, const fd_case *c) {
    size_t m = in_numel(c, 0), n = in_numel(c, 1);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) out[i * n + j] = in[0][i] * in[1][j];
}
static ttt_tensor *op_outer(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_outer(x, in[0], in[1]);
}

/* binary ops, iarg[0]: 0 add, 1 sub, 2 mul, 3 div; b same size, one element, or one row */
static void ref_binary(double *out, const double *const *in, const fd_case *c) {
    size_t na = in_numel(c, 0), nb = in_numel(c, 1), cols = (size_t)in_cols(c, 0);
    for (size_t i = 0; i < na; i++) {
        double a = in[0][i], b = nb == na ? in[1][i] : nb == 1 ? in[1][0] : in[1][i % cols];
        switch (c->iarg[0]) {
        case 0: out[i] = a + b; break;
        case 1: out[i] = a - b; break;
        case 2: out[i] = a * b; break;
        default: out[i] = a / b; break;
        }
    }
}
static ttt_tensor *op_binary(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    switch (c->iarg[0]) {
    case 0: return ttt_add(x, in[0], in[1]);
    case 1: return ttt_sub(x, in[0], in[1]);
    case 2: return ttt_mul(x, in[0], in[1]);
    default: return ttt_div(x, in[0], in[1]);
    }
}

/* x·x through ttt_mul(x, x): both operand gradients land in the same buffer */
static void ref_mul_self(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++) out[i] = in[0][i] * in[0][i];
}
static ttt_tensor *op_mul_self(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_mul(x, in[0], in[0]);
}

static void ref_axpby(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++)
        out[i] = (double)c->farg[0] * in[0][i] + (double)c->farg[1] * in[1][i];
}
static ttt_tensor *op_axpby(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_axpby(x, c->farg[0], in[0], c->farg[1], in[1]);
}

/* iarg[0]: 0 scale by farg[0], 1 add farg[0] */
static void ref_scalar(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++)
        out[i] = c->iarg[0] ? in[0][i] + c->farg[0] : in[0][i] * c->farg[0];
}
static ttt_tensor *op_scalar(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return c->iarg[0] ? ttt_add_scalar(x, in[0], c->farg[0]) : ttt_scale(x, in[0], c->farg[0]);
}

/* iarg[0]: 0 scale_rows (v per row), 1 scale_cols (v per column) */
static void ref_scale_rc(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), cols = (size_t)in_cols(c, 0);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            out[i * cols + j] = in[0][i * cols + j] * (c->iarg[0] ? in[1][j] : in[1][i]);
}
static ttt_tensor *op_scale_rc(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return c->iarg[0] ? ttt_scale_cols(x, in[0], in[1]) : ttt_scale_rows(x, in[0], in[1]);
}

/* unary ops, iarg[0] selects; the double forms are the textbook definitions (gelu in its tanh
 * form, which the float code does not use) */
enum { U_NEG, U_EXP, U_LOG, U_SQRT, U_SQUARE, U_SIGMOID, U_SILU, U_GELU, U_SOFTPLUS, U_ELU1,
       U_RELU, U_SILU_GRAD, U_GELU_GRAD, U_SIGN, U_ABS };
static double sig_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double unary_d(int u, double x) {
    const double k = sqrt(2.0 / PI_D), a = 0.044715;
    switch (u) {
    case U_NEG: return -x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_SQUARE: return x * x;
    case U_SIGMOID: return sig_d(x);
    case U_SILU: return x * sig_d(x);
    case U_GELU: return 0.5 * x * (1.0 + tanh(k * (x + a * x * x * x)));
    case U_SOFTPLUS: return log1p(exp(x));
    case U_ELU1: return x > 0 ? x + 1.0 : exp(x);
    case U_RELU: return x > 0 ? x : 0.0;
    case U_SILU_GRAD: return sig_d(x) * (1.0 + x * (1.0 - sig_d(x)));
    case U_SIGN: return (x > 0) - (x < 0);
    case U_ABS: return fabs(x);
    default: { /* d/dx of 0.5x(1 + tanh u) */
        double u = k * (x + a * x * x * x), t = tanh(u);
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * a * x * x);
    }
    }
}
static void ref_unary(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++) out[i] = unary_d(c->iarg[0], in[0][i]);
}
static ttt_tensor *op_unary(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    ttt_tensor *(*const f[])(ttt_ctx *, const ttt_tensor *) = {
        ttt_neg,  ttt_exp,      ttt_log,  ttt_sqrt, ttt_square, ttt_sigmoid,   ttt_silu,
        ttt_gelu, ttt_softplus, ttt_elu1, ttt_relu, ttt_silu_grad, ttt_gelu_grad,
        ttt_sign, ttt_abs};
    return f[c->iarg[0]](x, in[0]);
}

/* the ops for optimizer rules with parameters: iarg[0] 0 clamp(farg lo, hi), 1 maximum,
 * 2 minimum, 3 pow_scalar(farg[0]) */
static void ref_optop(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++) {
        const double x = in[0][i];
        switch (c->iarg[0]) {
        case 0: out[i] = fmin(fmax(x, c->farg[0]), c->farg[1]); break;
        case 1: out[i] = fmax(x, in[1][i]); break;
        case 2: out[i] = fmin(x, in[1][i]); break;
        default: out[i] = pow(x, c->farg[0]); break;
        }
    }
}
static ttt_tensor *op_optop(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    switch (c->iarg[0]) {
    case 0: return ttt_clamp(x, in[0], c->farg[0], c->farg[1]);
    case 1: return ttt_maximum(x, in[0], in[1]);
    case 2: return ttt_minimum(x, in[0], in[1]);
    default: return ttt_pow_scalar(x, in[0], c->farg[0]);
    }
}

/* reductions, iarg[0] selects */
enum { R_SUM, R_MEAN, R_DOT, R_NORM, R_SUM_ROWS, R_SUM_COLS, R_ROW_NORMS, R_CUMSUM };
static void ref_reduce(double *out, const double *const *in, const fd_case *c) {
    size_t n = in_numel(c, 0), rows = in_rows(c, 0), cols = (size_t)in_cols(c, 0);
    const double *a = in[0];
    double s = 0.0;
    switch (c->iarg[0]) {
    case R_SUM:
    case R_MEAN:
        for (size_t i = 0; i < n; i++) s += a[i];
        out[0] = c->iarg[0] == R_MEAN ? s / (double)n : s;
        break;
    case R_DOT:
        for (size_t i = 0; i < n; i++) s += a[i] * in[1][i];
        out[0] = s;
        break;
    case R_NORM:
        for (size_t i = 0; i < n; i++) s += a[i] * a[i];
        out[0] = sqrt(s);
        break;
    case R_SUM_ROWS:
        for (size_t j = 0; j < cols; j++) {
            out[j] = 0.0;
            for (size_t i = 0; i < rows; i++) out[j] += a[i * cols + j];
        }
        break;
    case R_SUM_COLS:
    case R_ROW_NORMS:
        for (size_t i = 0; i < rows; i++) {
            double t = 0.0;
            for (size_t j = 0; j < cols; j++)
                t += c->iarg[0] == R_SUM_COLS ? a[i * cols + j] : a[i * cols + j] * a[i * cols + j];
            out[i] = c->iarg[0] == R_SUM_COLS ? t : sqrt(t);
        }
        break;
    default: { /* cumsum along dim 0 */
        size_t T = (size_t)c->shape[0][0], d = n / T;
        for (size_t j = 0; j < d; j++) {
            double acc = 0.0;
            for (size_t t = 0; t < T; t++) out[t * d + j] = acc += a[t * d + j];
        }
    }
    }
}
static ttt_tensor *op_reduce(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    switch (c->iarg[0]) {
    case R_SUM: return ttt_sum(x, in[0]);
    case R_MEAN: return ttt_mean(x, in[0]);
    case R_DOT: return ttt_dot(x, in[0], in[1]);
    case R_NORM: return ttt_norm_fro(x, in[0]);
    case R_SUM_ROWS: return ttt_sum_rows(x, in[0]);
    case R_SUM_COLS: return ttt_sum_cols(x, in[0]);
    case R_ROW_NORMS: return ttt_row_norms(x, in[0]);
    default: return ttt_cumsum(x, in[0]);
    }
}

/* layer norm of one row in double: y = (x − μ)/sqrt(var + eps) (biased variance) */
static void ln_row(double *y, const double *x, size_t n, double eps) {
    double mu = 0.0, v = 0.0;
    for (size_t j = 0; j < n; j++) mu += x[j];
    mu /= (double)n;
    for (size_t j = 0; j < n; j++) v += (x[j] - mu) * (x[j] - mu);
    v /= (double)n;
    for (size_t j = 0; j < n; j++) y[j] = (x[j] - mu) / sqrt(v + eps);
}

/* in: x, gamma (or NULL), beta (or NULL); eps = farg[0] */
static void ref_layernorm(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), n = (size_t)in_cols(c, 0);
    for (size_t i = 0; i < rows; i++) {
        double *y = out + i * n;
        ln_row(y, in[0] + i * n, n, c->farg[0]);
        for (size_t j = 0; j < n; j++)
            y[j] = y[j] * (in[1] ? in[1][j] : 1.0) + (in[2] ? in[2][j] : 0.0);
    }
}
static ttt_tensor *op_layernorm(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_layernorm(x, in[0], in[1], in[2], c->farg[0]);
}

/* in: dy, x, gamma (or NULL): the gradient of Σ dy ⊙ LN(x)·γ w.r.t. x, in double by the textbook
 * formula dx = (ĝ − mean ĝ − x̂·mean(ĝ x̂))/σ with ĝ = dy ⊙ γ. Finite differences of THIS give the
 * second derivatives, independently of the P-matrix algebra in the op's backward. */
static void ref_layernorm_backward(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 1), n = (size_t)in_cols(c, 1);
    double eps = c->farg[0];
    for (size_t i = 0; i < rows; i++) {
        const double *x = in[1] + i * n, *dy = in[0] + i * n;
        double mu = 0.0, v = 0.0;
        for (size_t j = 0; j < n; j++) mu += x[j];
        mu /= (double)n;
        for (size_t j = 0; j < n; j++) v += (x[j] - mu) * (x[j] - mu);
        v /= (double)n;
        double sd = sqrt(v + eps), mg = 0.0, mgx = 0.0;
        for (size_t j = 0; j < n; j++) {
            double g = dy[j] * (in[2] ? in[2][j] : 1.0);
            mg += g / (double)n;
            mgx += g * (x[j] - mu) / sd / (double)n;
        }
        for (size_t j = 0; j < n; j++) {
            double g = dy[j] * (in[2] ? in[2][j] : 1.0);
            out[i * n + j] = (g - mg - (x[j] - mu) / sd * mgx) / sd;
        }
    }
}
static ttt_tensor *op_layernorm_backward(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_layernorm_backward(x, in[0], in[1], in[2], c->farg[0]);
}

/* in: x, gamma (or NULL); iarg[0]: 0 rmsnorm, 1 l2norm_rows */
static void ref_rms_l2(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), n = (size_t)in_cols(c, 0);
    for (size_t i = 0; i < rows; i++) {
        const double *x = in[0] + i * n;
        double ss = 0.0;
        for (size_t j = 0; j < n; j++) ss += x[j] * x[j];
        double den = c->iarg[0] ? sqrt(ss + c->farg[0]) : sqrt(ss / (double)n + c->farg[0]);
        for (size_t j = 0; j < n; j++)
            out[i * n + j] = x[j] / den * (!c->iarg[0] && in[1] ? in[1][j] : 1.0);
    }
}
static ttt_tensor *op_rms_l2(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return c->iarg[0] ? ttt_l2norm_rows(x, in[0], c->farg[0])
                      : ttt_rmsnorm(x, in[0], in[1], c->farg[0]);
}

/* iarg[0] = 1: causal (entries j > i of each square matrix excluded, probability 0) */
static void ref_softmax(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), n = (size_t)in_cols(c, 0);
    for (size_t i = 0; i < rows; i++) {
        size_t end = c->iarg[0] ? i % n + 1 : n;
        double s = 0.0;
        for (size_t j = 0; j < end; j++) s += exp(in[0][i * n + j]);
        for (size_t j = 0; j < n; j++) out[i * n + j] = j < end ? exp(in[0][i * n + j]) / s : 0.0;
    }
}
static ttt_tensor *op_softmax(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_softmax_rows(x, c->iarg[0] ? ttt_causal_fill(x, in[0]) : in[0]);
}

/* tril with k = iarg[0] on the last two dims */
static void ref_tril(double *out, const double *const *in, const fd_case *c) {
    int nd = c->ndim[0], m = c->shape[0][nd - 2], n = c->shape[0][nd - 1];
    size_t nb = in_numel(c, 0) / ((size_t)m * n);
    for (size_t b = 0; b < nb; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                size_t o = (b * m + i) * n + j;
                out[o] = j <= i + c->iarg[0] ? in[0][o] : 0.0;
            }
}
static ttt_tensor *op_tril(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_tril(x, in[0], c->iarg[0]);
}

/* D_ij = exp(g_i − g_j) on j ≤ i (j < i when strict = iarg[0]) */
static void ref_decay(double *out, const double *const *in, const fd_case *c) {
    int T = c->shape[0][0];
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            out[i * T + j] = (c->iarg[0] ? j < i : j <= i) ? exp(in[0][i] - in[0][j]) : 0.0;
}
static ttt_tensor *op_decay(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_decay_mask(x, in[0], c->iarg[0]);
}

/* L·X = B by forward substitution, reading only the lower triangle (and the diagonal unless
 * unit = iarg[0]); B is (n, m) or (n) */
static void ref_solve(double *out, const double *const *in, const fd_case *c) {
    int n = c->shape[0][0], m = c->ndim[1] == 2 ? c->shape[1][1] : 1;
    const double *L = in[0], *B = in[1];
    for (int j = 0; j < m; j++)
        for (int i = 0; i < n; i++) {
            double s = B[i * m + j];
            for (int p = 0; p < i; p++) s -= L[i * n + p] * out[p * m + j];
            out[i * m + j] = c->iarg[0] ? s : s / L[i * n + i];
        }
}
static ttt_tensor *op_solve(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_solve_lower(x, in[0], in[1], c->iarg[0]);
}

static void ref_transpose(double *out, const double *const *in, const fd_case *c) {
    int nd = c->ndim[0], m = c->shape[0][nd - 2], n = c->shape[0][nd - 1];
    size_t nb = in_numel(c, 0) / ((size_t)m * n);
    for (size_t b = 0; b < nb; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) out[(b * n + j) * m + i] = in[0][(b * m + i) * n + j];
}
static ttt_tensor *op_transpose(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_transpose(x, in[0]);
}

/* rows [iarg[0], iarg[1]) along dim 0 */
static void ref_slice_rows(double *out, const double *const *in, const fd_case *c) {
    size_t st = in_numel(c, 0) / (size_t)c->shape[0][0];
    for (size_t k = 0; k < (size_t)(c->iarg[1] - c->iarg[0]) * st; k++)
        out[k] = in[0][(size_t)c->iarg[0] * st + k];
}
static ttt_tensor *op_slice_rows(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_slice_rows(x, in[0], c->iarg[0], c->iarg[1]);
}

static void ref_concat_rows(double *out, const double *const *in, const fd_case *c) {
    size_t na = in_numel(c, 0), nb = in_numel(c, 1);
    for (size_t k = 0; k < na; k++) out[k] = in[0][k];
    for (size_t k = 0; k < nb; k++) out[na + k] = in[1][k];
}
static ttt_tensor *op_concat_rows(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_concat_rows(x, in[0], in[1]);
}

/* identity on the element order: reshape (to iarg[0] × iarg[1]) and copy */
static void ref_identity(double *out, const double *const *in, const fd_case *c) {
    for (size_t k = 0; k < in_numel(c, 0); k++) out[k] = in[0][k];
}
static ttt_tensor *op_reshape(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_reshape(x, in[0], 2, (int[]){c->iarg[0], c->iarg[1]});
}
static ttt_tensor *op_copy(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_tensor_copy(x, in[0]);
}

/* columns [iarg[0], iarg[1]) of the last dim */
static void ref_slice_cols(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), cols = (size_t)in_cols(c, 0);
    size_t w = (size_t)(c->iarg[1] - c->iarg[0]);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < w; j++) out[i * w + j] = in[0][i * cols + (size_t)c->iarg[0] + j];
}
static ttt_tensor *op_slice_cols(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_slice_cols(x, in[0], c->iarg[0], c->iarg[1]);
}

/* rows [iarg[0], iarg[1]) and columns [iarg[2], iarg[3]) of input 0 read as a matrix */
static void ref_slice_block(double *out, const double *const *in, const fd_case *c) {
    size_t cols = (size_t)in_cols(c, 0), w = (size_t)(c->iarg[3] - c->iarg[2]);
    for (int i = c->iarg[0]; i < c->iarg[1]; i++)
        for (size_t j = 0; j < w; j++)
            out[(size_t)(i - c->iarg[0]) * w + j] = in[0][(size_t)i * cols + (size_t)c->iarg[2] + j];
}
static ttt_tensor *op_slice_block(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_slice_block(x, in[0], c->iarg[0], c->iarg[1], c->iarg[2], c->iarg[3]);
}

/* a 2 × 2 grid of the four inputs: [in0 in1; in2 in3] */
static void ref_concat_grid(double *out, const double *const *in, const fd_case *c) {
    const int cols = in_cols(c, 0) + in_cols(c, 1);
    for (int p = 0; p < 4; p++) {
        const int r0 = p < 2 ? 0 : (int)in_rows(c, 0), c0 = p % 2 ? in_cols(c, 0) : 0;
        for (size_t i = 0; i < in_rows(c, p); i++)
            for (int j = 0; j < in_cols(c, p); j++)
                out[((size_t)r0 + i) * (size_t)cols + (size_t)(c0 + j)] =
                    in[p][i * (size_t)in_cols(c, p) + (size_t)j];
    }
}
static ttt_tensor *op_concat_grid(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    (void)c;
    return ttt_concat_grid(x, (const ttt_tensor *const *)in, 2, 2);
}

/* all n_in inputs joined along the last dim */
static void ref_concat_cols(double *out, const double *const *in, const fd_case *c) {
    size_t rows = in_rows(c, 0), total = 0, c0 = 0;
    for (int p = 0; p < c->n_in; p++) total += (size_t)in_cols(c, p);
    for (int p = 0; p < c->n_in; p++) {
        size_t w = (size_t)in_cols(c, p);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < w; j++) out[i * total + c0 + j] = in[p][i * w + j];
        c0 += w;
    }
}
static ttt_tensor *op_concat_cols(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    if (c->n_in == 2) return ttt_concat_cols(x, in[0], in[1]);
    return ttt_concat_cols_n(x, (const ttt_tensor *const *)in, c->n_in);
}

static void ref_embedding(double *out, const double *const *in, const fd_case *c) {
    int d = c->shape[0][1];
    for (int i = 0; i < c->n_ids; i++)
        for (int j = 0; j < d; j++) out[i * d + j] = in[0][c->ids[i] * d + j];
}
static ttt_tensor *op_embedding(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_embedding(x, in[0], c->ids, c->n_ids);
}

/* mean over targets ≥ 0 of log Σ_j exp(z_ij) − z_{i,t_i}, plainly (inputs are O(1)) */
static void ref_cross_entropy(double *out, const double *const *in, const fd_case *c) {
    int V = in_cols(c, 0), count = 0;
    double total = 0.0;
    for (int i = 0; i < c->n_ids; i++) {
        if (c->ids[i] < 0) continue;
        double s = 0.0;
        for (int j = 0; j < V; j++) s += exp(in[0][i * V + j]);
        total += log(s) - in[0][i * V + c->ids[i]];
        count++;
    }
    out[0] = count ? total / count : 0.0;
}
static ttt_tensor *op_cross_entropy(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    ttt_ce_stats st;
    ttt_tensor *r = ttt_cross_entropy(x, in[0], c->ids, c->n_ids, &st);
    int count = 0;
    for (int i = 0; i < c->n_ids; i++) count += c->ids[i] >= 0;
    ck_assert_int_eq(st.count, count);
    return r;
}

/* in: x (T, C) or (B, T, C), w (K, C), bias (C) or NULL;
 * y_{t,c} = b_c + Σ_{j<K, j≤t} w_{j,c} x_{t−j,c} per sequence */
static void ref_conv(double *out, const double *const *in, const fd_case *c) {
    int nd = c->ndim[0], T = c->shape[0][nd - 2], C = c->shape[0][nd - 1];
    int B = nd == 3 ? c->shape[0][0] : 1, K = c->shape[1][0];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++) {
                double s = in[2] ? in[2][ch] : 0.0;
                for (int j = 0; j < K; j++)
                    if (t - j >= 0)
                        s += in[1][j * C + ch] * in[0][((size_t)b * T + t - j) * C + ch];
                out[((size_t)b * T + t) * C + ch] = s;
            }
}
static ttt_tensor *op_conv(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    return ttt_conv1d_causal(x, in[0], in[1], in[2]);
}
/* silu of the convolution without bias, the fused op of the sequence model's q, k, v */
static void ref_conv_silu(double *out, const double *const *in, const fd_case *c) {
    const double *in3[3] = {in[0], in[1], NULL};
    ref_conv(out, in3, c);
    for (size_t i = 0; i < in_numel(c, 0); i++) out[i] = out[i] * sig_d(out[i]);
}
static ttt_tensor *op_conv_silu(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    (void)c;
    return ttt_conv1d_causal_silu(x, in[0], in[1]);
}

/* --------------------------------------------------------------------------------------------- */
/* the cases                                                                                      */

/* Each case: name, op, ref, number of inputs, their ndims, their shapes, then options. */
static const int k_ids[] = {4, 0, 2, 4, 1, 4};       /* repeated ids: the scatter must add */
static const int k_targets[] = {1, -1, 4, 0, -1, 2}; /* −1: ignored rows */
static const int k_ignored[] = {-1, -1, -1};         /* nothing counted: loss 0, gradient 0 */

/* One input x (m, n) read by several ops, W (n, n): the gradient of x sums every path, whichever
 * op writes it first (autograd.h "First writer assigns"). iarg[0] = 0: the two reshapes back to
 * x's shape are recorded last, so their backward runs first and x takes their gradient buffer as
 * its own; the other paths then add into it. out = silu(x) ⊙ x + x W + x.
 * iarg[0] = 1: the reshapes come first, silu's backward assigns x's gradient and the reshapes
 * add last. out = x W + x ⊙ silu(x). A first writer that added to garbage, or an op that
 * assigned over another's contribution, is off by O(1). */
static void ref_fanout(double *out, const double *const *in, const fd_case *c) {
    const int m = c->shape[0][0], n = c->shape[0][1];
    const double *x = in[0], *W = in[1];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double xw = 0.0, v = x[i * n + j];
            for (int k = 0; k < n; k++) xw += x[i * n + k] * W[k * n + j];
            out[i * n + j] = v * v * sig_d(v) + xw + (c->iarg[0] == 0 ? v : 0.0);
        }
}
static ttt_tensor *op_fanout(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    const int m = c->shape[0][0], n = c->shape[0][1];
    if (c->iarg[0] == 0) {
        ttt_tensor *a = ttt_add(x, ttt_mul(x, ttt_silu(x, in[0]), in[0]),
                                ttt_matmul(x, in[0], 0, in[1], 0));
        ttt_tensor *r = ttt_reshape(x, ttt_reshape(x, in[0], 2, (int[]){n, m}), 2, (int[]){m, n});
        return ttt_add(x, a, r);
    }
    ttt_tensor *r = ttt_reshape(x, ttt_reshape(x, in[0], 2, (int[]){n, m}), 2, (int[]){m, n});
    return ttt_add(x, ttt_matmul(x, in[0], 0, in[1], 0), ttt_mul(x, r, ttt_silu(x, in[0])));
}

static const fd_case k_cases[] = {
    /* one input read by several ops, in both orders of the first gradient writer */
    {"fan-out, reshape first", op_fanout, ref_fanout, 2, {2, 2}, {{3, 4}, {4, 4}}, .iarg = {0}},
    {"fan-out, reshape last", op_fanout, ref_fanout, 2, {2, 2}, {{3, 4}, {4, 4}}, .iarg = {1}},
    /* the mixer's per-head block slices (out of (B, T, 3·H·D), here 3-D) and their grid */
    {"slice_block", op_slice_block, ref_slice_block, 1, {3}, {{2, 3, 6}}, .iarg = {2, 5, 1, 4}},
    {"concat_grid", op_concat_grid, ref_concat_grid, 4, {2, 2, 2, 2},
     {{2, 3}, {2, 1}, {3, 3}, {3, 1}}},
    /* matmul: all transposes (non-square everywhere), batched, shared operands, vectors */
    {"matmul NN", op_matmul, ref_matmul, 2, {2, 2}, {{3, 4}, {4, 5}}, .iarg = {0, 0}},
    {"matmul TN", op_matmul, ref_matmul, 2, {2, 2}, {{4, 3}, {4, 5}}, .iarg = {1, 0}},
    {"matmul NT", op_matmul, ref_matmul, 2, {2, 2}, {{3, 4}, {5, 4}}, .iarg = {0, 1}},
    {"matmul TT", op_matmul, ref_matmul, 2, {2, 2}, {{4, 3}, {5, 4}}, .iarg = {1, 1}},
    {"matmul batched NT", op_matmul, ref_matmul, 2, {3, 3}, {{2, 3, 4}, {2, 5, 4}}, .iarg = {0, 1}},
    {"matmul batched TN", op_matmul, ref_matmul, 2, {3, 3}, {{2, 4, 3}, {2, 4, 5}}, .iarg = {1, 0}},
    {"matmul batched x shared", op_matmul, ref_matmul, 2, {3, 2}, {{2, 3, 4}, {4, 5}}},
    {"matmul shared x batched TT", op_matmul, ref_matmul, 2, {2, 3}, {{4, 3}, {2, 5, 4}},
     .iarg = {1, 1}},
    {"matmul vector", op_matmul, ref_matmul, 2, {1, 2}, {{4}, {4, 5}}},
    {"matmul vector^T row", op_matmul, ref_matmul, 2, {1, 2}, {{3}, {1, 5}}, .iarg = {1, 0}},
    {"matmul const b", op_matmul, ref_matmul, 2, {2, 2}, {{3, 4}, {4, 5}},
     .dom = {DOM_NORMAL, DOM_CONST}},
    {"gemm with c", op_gemm, ref_matmul, 3, {2, 2, 2}, {{3, 4}, {5, 4}, {3, 5}}, .iarg = {0, 1},
     .farg = {0.7f, -1.3f}},
    {"gemm TN with c", op_gemm, ref_matmul, 3, {2, 2, 2}, {{4, 3}, {4, 5}, {3, 5}},
     .iarg = {1, 0}, .farg = {-0.6f, 0.4f}},
    {"gemm no c", op_gemm, ref_matmul, 3, {2, 2, 2}, {{3, 4}, {4, 5}, {3, 5}}, .farg = {1.5f, 2.0f},
     .dom = {DOM_NORMAL, DOM_NORMAL, DOM_ABSENT}},
    {"outer", op_outer, ref_outer, 2, {1, 2}, {{4}, {1, 5}}},
    /* elementwise binary with every broadcast */
    {"add", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {3, 4}}, .iarg = {0}},
    {"sub", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {3, 4}}, .iarg = {1}},
    {"mul", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {3, 4}}, .iarg = {2}},
    {"div", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {3, 4}}, .iarg = {3},
     .dom = {DOM_NORMAL, DOM_POS}},
    {"add scalar b", op_binary, ref_binary, 2, {2, 1}, {{3, 4}, {1}}, .iarg = {0}},
    {"sub scalar b", op_binary, ref_binary, 2, {2, 1}, {{3, 4}, {1}}, .iarg = {1}},
    {"mul scalar b", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {1, 1}}, .iarg = {2}},
    {"div scalar b", op_binary, ref_binary, 2, {2, 1}, {{3, 4}, {1}}, .iarg = {3},
     .dom = {DOM_NORMAL, DOM_POS}},
    {"add row b", op_binary, ref_binary, 2, {2, 1}, {{3, 4}, {4}}, .iarg = {0}},
    {"sub row b", op_binary, ref_binary, 2, {2, 2}, {{3, 4}, {1, 4}}, .iarg = {1}},
    {"mul row b 3-D", op_binary, ref_binary, 2, {3, 1}, {{2, 3, 4}, {4}}, .iarg = {2}},
    {"div row b", op_binary, ref_binary, 2, {2, 1}, {{3, 4}, {4}}, .iarg = {3},
     .dom = {DOM_NORMAL, DOM_POS}},
    {"mul x*x", op_mul_self, ref_mul_self, 1, {2}, {{3, 4}}},
    {"axpby", op_axpby, ref_axpby, 2, {2, 2}, {{3, 4}, {3, 4}}, .farg = {0.3f, -1.7f}},
    {"scale", op_scalar, ref_scalar, 1, {2}, {{3, 4}}, .iarg = {0}, .farg = {2.5f}},
    {"add_scalar", op_scalar, ref_scalar, 1, {2}, {{3, 4}}, .iarg = {1}, .farg = {0.7f}},
    {"scale_rows", op_scale_rc, ref_scale_rc, 2, {2, 1}, {{3, 4}, {3}}, .iarg = {0}},
    {"scale_rows 3-D", op_scale_rc, ref_scale_rc, 2, {3, 1}, {{2, 3, 4}, {6}}, .iarg = {0}},
    {"scale_cols", op_scale_rc, ref_scale_rc, 2, {2, 1}, {{3, 4}, {4}}, .iarg = {1}},
    /* unary */
    {"neg", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_NEG}},
    {"exp", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_EXP}},
    {"log", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_LOG}, .dom = {DOM_POS}},
    {"sqrt", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SQRT}, .dom = {DOM_POS}},
    {"square", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SQUARE}},
    {"sigmoid", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SIGMOID}, .dom = {DOM_WIDE}},
    {"silu", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SILU}, .dom = {DOM_WIDE}},
    {"gelu", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_GELU}, .dom = {DOM_WIDE}},
    {"softplus", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SOFTPLUS}, .dom = {DOM_WIDE}},
    {"elu1", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_ELU1}, .dom = {DOM_AWAY}},
    {"relu", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_RELU}, .dom = {DOM_AWAY}},
    {"silu_grad", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SILU_GRAD},
     .dom = {DOM_WIDE}},
    {"gelu_grad", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_GELU_GRAD},
     .dom = {DOM_WIDE}},
    /* ops for optimizer rules (kinks kept away from the finite-difference steps) */
    {"sign", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SIGN}, .dom = {DOM_AWAY}},
    {"abs", op_unary, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_ABS}, .dom = {DOM_AWAY}},
    {"clamp", op_optop, ref_optop, 1, {2}, {{4, 5}}, .iarg = {0}, .farg = {-0.6f, 0.9f}},
    {"maximum", op_optop, ref_optop, 2, {2, 2}, {{3, 5}, {3, 5}}, .iarg = {1}},
    {"minimum", op_optop, ref_optop, 2, {2, 2}, {{3, 5}, {3, 5}}, .iarg = {2}},
    {"pow_scalar 2.5", op_optop, ref_optop, 1, {2}, {{3, 5}}, .iarg = {3}, .farg = {2.5f},
     .dom = {DOM_POS}},
    {"pow_scalar -1.5", op_optop, ref_optop, 1, {2}, {{3, 5}}, .iarg = {3}, .farg = {-1.5f},
     .dom = {DOM_POS}},
    /* reductions */
    {"sum", op_reduce, ref_reduce, 1, {2}, {{3, 4}}, .iarg = {R_SUM}},
    {"mean", op_reduce, ref_reduce, 1, {3}, {{2, 3, 4}}, .iarg = {R_MEAN}},
    {"dot", op_reduce, ref_reduce, 2, {2, 1}, {{3, 4}, {12}}, .iarg = {R_DOT}},
    {"norm_fro", op_reduce, ref_reduce, 1, {2}, {{3, 4}}, .iarg = {R_NORM}},
    {"sum_rows", op_reduce, ref_reduce, 1, {2}, {{3, 4}}, .iarg = {R_SUM_ROWS}},
    {"sum_cols", op_reduce, ref_reduce, 1, {2}, {{3, 4}}, .iarg = {R_SUM_COLS}},
    {"row_norms", op_reduce, ref_reduce, 1, {2}, {{3, 4}}, .iarg = {R_ROW_NORMS}},
    {"cumsum 1-D", op_reduce, ref_reduce, 1, {1}, {{6}}, .iarg = {R_CUMSUM}},
    {"cumsum 2-D", op_reduce, ref_reduce, 1, {2}, {{5, 3}}, .iarg = {R_CUMSUM}},
    /* norms */
    {"layernorm gamma beta", op_layernorm, ref_layernorm, 3, {2, 1, 1}, {{4, 6}, {6}, {6}},
     .farg = {1e-5f}},
    {"layernorm plain", op_layernorm, ref_layernorm, 3, {2, 1, 1}, {{4, 6}, {6}, {6}},
     .farg = {1e-5f}, .dom = {DOM_NORMAL, DOM_ABSENT, DOM_ABSENT}},
    {"layernorm 3-D gamma", op_layernorm, ref_layernorm, 3, {3, 1, 1}, {{2, 3, 5}, {5}, {5}},
     .farg = {1e-5f}, .dom = {DOM_NORMAL, DOM_NORMAL, DOM_ABSENT}},
    {"layernorm_backward gamma", op_layernorm_backward, ref_layernorm_backward, 3, {2, 2, 1},
     {{4, 6}, {4, 6}, {6}}, .farg = {1e-5f}},
    {"layernorm_backward plain", op_layernorm_backward, ref_layernorm_backward, 3, {2, 2, 1},
     {{4, 6}, {4, 6}, {6}}, .farg = {1e-5f}, .dom = {DOM_NORMAL, DOM_NORMAL, DOM_ABSENT}},
    {"rmsnorm gamma", op_rms_l2, ref_rms_l2, 2, {2, 1}, {{4, 6}, {6}}, .iarg = {0},
     .farg = {1e-6f}},
    {"rmsnorm plain", op_rms_l2, ref_rms_l2, 2, {2, 1}, {{4, 6}, {6}}, .iarg = {0},
     .farg = {1e-6f}, .dom = {DOM_NORMAL, DOM_ABSENT}},
    {"l2norm_rows", op_rms_l2, ref_rms_l2, 2, {2, 1}, {{4, 6}, {6}}, .iarg = {1}, .farg = {1e-6f},
     .dom = {DOM_NORMAL, DOM_ABSENT}},
    {"softmax_rows", op_softmax, ref_softmax, 1, {2}, {{4, 6}}, .iarg = {0}, .dom = {DOM_WIDE}},
    {"softmax_rows(causal_fill)", op_softmax, ref_softmax, 1, {3}, {{2, 4, 4}}, .iarg = {1},
     .dom = {DOM_WIDE}},
    /* masks, solve */
    {"tril 0", op_tril, ref_tril, 1, {2}, {{4, 5}}, .iarg = {0}},
    {"tril -1", op_tril, ref_tril, 1, {3}, {{2, 3, 3}}, .iarg = {-1}},
    {"tril +1", op_tril, ref_tril, 1, {2}, {{4, 5}}, .iarg = {1}},
    {"decay_mask", op_decay, ref_decay, 1, {1}, {{5}}, .iarg = {0}},
    {"decay_mask strict", op_decay, ref_decay, 1, {1}, {{5}}, .iarg = {1}},
    /* solve_lower: k_solve_cases below (its inputs need conditioning) */
    /* shape */
    {"transpose", op_transpose, ref_transpose, 1, {2}, {{3, 4}}},
    {"transpose 3-D", op_transpose, ref_transpose, 1, {3}, {{2, 3, 4}}},
    {"slice_rows", op_slice_rows, ref_slice_rows, 1, {2}, {{5, 3}}, .iarg = {1, 4}},
    {"slice_rows 3-D", op_slice_rows, ref_slice_rows, 1, {3}, {{4, 2, 3}}, .iarg = {1, 3}},
    {"concat_rows", op_concat_rows, ref_concat_rows, 2, {2, 2}, {{2, 3}, {3, 3}}},
    {"concat_rows const a", op_concat_rows, ref_concat_rows, 2, {2, 2}, {{2, 3}, {3, 3}},
     .dom = {DOM_CONST, DOM_NORMAL}},
    {"reshape", op_reshape, ref_identity, 1, {2}, {{3, 4}}, .iarg = {2, 6}},
    {"copy", op_copy, ref_identity, 1, {3}, {{2, 3, 2}}},
    {"slice_cols", op_slice_cols, ref_slice_cols, 1, {2}, {{3, 6}}, .iarg = {2, 5}},
    {"slice_cols 3-D", op_slice_cols, ref_slice_cols, 1, {3}, {{2, 3, 6}}, .iarg = {0, 4}},
    {"concat_cols", op_concat_cols, ref_concat_cols, 2, {2, 2}, {{3, 2}, {3, 4}}},
    {"concat_cols_n", op_concat_cols, ref_concat_cols, 3, {2, 2, 2}, {{2, 1}, {2, 3}, {2, 2}},
     .dom = {DOM_NORMAL, DOM_CONST, DOM_NORMAL}},
    /* sequence-model ops */
    {"embedding", op_embedding, ref_embedding, 1, {2}, {{5, 3}}, .ids = k_ids, .n_ids = 6},
    {"cross_entropy", op_cross_entropy, ref_cross_entropy, 1, {2}, {{6, 5}}, .ids = k_targets,
     .n_ids = 6, .dom = {DOM_WIDE}},
    {"conv1d_causal", op_conv, ref_conv, 3, {2, 2, 1}, {{7, 3}, {3, 3}, {3}}},
    {"conv1d_causal no bias", op_conv, ref_conv, 3, {2, 2, 1}, {{7, 3}, {3, 3}, {3}},
     .dom = {DOM_NORMAL, DOM_NORMAL, DOM_ABSENT}},
    {"conv1d_causal batched K>T", op_conv, ref_conv, 3, {3, 2, 1}, {{2, 3, 2}, {4, 2}, {2}}},
    {"conv1d_causal_silu", op_conv_silu, ref_conv_silu, 2, {2, 2}, {{7, 3}, {3, 3}},
     .dom = {DOM_WIDE, DOM_NORMAL}},
    {"conv1d_causal_silu batched K>T", op_conv_silu, ref_conv_silu, 2, {3, 2},
     {{2, 3, 2}, {4, 2}}},
};

START_TEST(test_fd_ops) {
    const fd_case *c = &k_cases[_i];
    run_fd(c, 1, AS_LEAVES);
    run_fd(c, 2, AS_PARAMS); /* a second draw, inputs as parameters with gradients already */
    run_fd(c, 3, AS_OVERWRITE); /* a third, the parameters' old gradients stale */
}
END_TEST

/* solve_lower: L = D + 0.3·N with D = diag U[0.5, 2] keeps L well-conditioned, so the float32
 * solve (and its gradient, a solve with Lᵀ) stays at ~1e-6 relative. The upper triangle holds
 * random values the solve must not read: their tape gradient must be exactly what finite
 * differences give, 0. */
static ttt_tensor *op_solve_wc(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    ttt_tensor *L = in[0];
    int n = L->shape[0];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) L->data[i * n + j] *= 0.3f;
    for (int i = 0; i < n; i++) L->data[i * n + i] = 0.5f + fabsf(L->data[i * n + i]);
    return op_solve(x, in, c);
}

/* The conditioning fix-up above runs inside the op wrapper, i.e. before run_fd copies the inputs
 * to double: the reference sees the same L. */
static const fd_case k_solve_cases[] = {
    {"solve_lower", op_solve_wc, ref_solve, 2, {2, 2}, {{5, 5}, {5, 3}}, .iarg = {0}},
    {"solve_lower unit", op_solve_wc, ref_solve, 2, {2, 2}, {{5, 5}, {5, 3}}, .iarg = {1}},
    {"solve_lower vector b", op_solve_wc, ref_solve, 2, {2, 1}, {{4, 4}, {4}}, .iarg = {0}},
};

START_TEST(test_fd_solve_lower) {
    run_fd(&k_solve_cases[_i], 1, AS_LEAVES);
    run_fd(&k_solve_cases[_i], 2, AS_PARAMS);
    run_fd(&k_solve_cases[_i], 3, AS_OVERWRITE);
}
END_TEST

/* The harness can fail: the same finite-difference comparison, at the same tolerance, rejects a
 * backward whose gradient is off by a relative 1e-3 (100× the tolerance, and far below the O(1)
 * error of a wrong formula). */
static void bad_square_backward(ttt_ctx *x, const ttt_tape_entry *e, const float *dy) {
    float *g = ttt_grad(x, e->in[0]);
    for (size_t i = 0; i < e->out->n; i++) g[i] += dy[i] * 2.0f * e->in[0]->data[i] * 1.001f;
}

START_TEST(test_fd_detects_wrong_gradient) {
    const fd_case c = {"bad square", NULL, ref_unary, 1, {2}, {{3, 5}}, .iarg = {U_SQUARE}};
    ttt_tensor *x = ttt_tensor_2d(ctx, 3, 5);
    ttt_rng rng;
    ttt_rng_seed(&rng, 5);
    fill_input(&rng, x->data, x->n, DOM_NORMAL);
    x->requires_grad = 1;
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    for (size_t i = 0; i < y->n; i++) y->data[i] = x->data[i] * x->data[i];
    ttt_tape_record(ctx, bad_square_backward, y, (const ttt_tensor *const[]){x}, 1);
    float *r = ttt_arena_alloc(ctx->arena, y->n * sizeof(float));
    ttt_rng_fill_normal(&rng, r, y->n, 0.0f, 1.0f);
    ttt_backward_from(ctx, y, r);
    double *x64 = dalloc(x->n), *fd = dalloc(x->n);
    for (size_t i = 0; i < x->n; i++) x64[i] = x->data[i];
    fd_gradient(fd, &c, (double *[]){x64}, 0, x->n, r, y->n);
    char msg[600];
    ck_assert_msg(!tu_close(x->grad, fd, x->n, 1e-7, 1e-5, msg, sizeof msg),
                  "a 1e-3 relative gradient error passed the default tolerance: %s", msg);
    /* and the correct gradient passes */
    for (size_t i = 0; i < x->n; i++) x->grad[i] /= 1.001f;
    ck_assert_msg(tu_close(x->grad, fd, x->n, 1e-7, 1e-5, msg, sizeof msg), "%s", msg);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* tape semantics                                                                                 */

/* A parameter allocated outside the per-step arena, with its persistent gradient buffer. */
typedef struct param {
    ttt_tensor t;
    float *grad;
} param;

static void param_init(param *p, ttt_rng *rng, int rows, int cols, float std) {
    float *data = malloc((size_t)rows * cols * sizeof(float));
    p->grad = calloc((size_t)rows * cols, sizeof(float));
    ck_assert(data && p->grad);
    p->t = ttt_tensor_view2(data, rows, cols);
    ttt_rng_fill_normal(rng, data, p->t.n, 0.0f, std);
    ttt_tensor_set_param(&p->t, p->grad);
}
static void param_free(param *p) {
    free(p->t.data);
    free(p->grad);
}

/* Gradient of L = Σ (xW)² w.r.t. W, in double: 2 xᵀ(xW). x (m, k), W (k, n). */
static void sq_loss_grad(double *g, const ttt_tensor *x, const ttt_tensor *W) {
    int m = x->shape[0], k = x->shape[1], n = W->shape[1];
    for (int p = 0; p < k; p++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int i = 0; i < m; i++) {
                double y = 0.0;
                for (int q = 0; q < k; q++) y += (double)x->data[i * k + q] * W->data[q * n + j];
                s += 2.0 * x->data[i * k + p] * y;
            }
            g[p * n + j] = s;
        }
}

/* Parameters keep accumulating across backward calls (and across steps whose arena and tape are
 * reset in between) until the caller zeroes them; their buffer is never replaced. */
START_TEST(test_param_grad_accumulates) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 11);
    param W;
    param_init(&W, &rng, 4, 3, 0.5f);
    ttt_tensor *xs[2];
    double *want[2], *sum = malloc(12 * sizeof(double));
    float *x_keep[2];
    for (int s = 0; s < 2; s++) {
        x_keep[s] = malloc(5 * 4 * sizeof(float));
        ttt_rng_fill_normal(&rng, x_keep[s], 20, 0.0f, 1.0f);
    }
    for (int s = 0; s < 2; s++) { /* two steps, each with its own arena contents and tape */
        ttt_arena_reset(ctx->arena);
        ttt_tape_reset(ctx->tape);
        xs[s] = ttt_tensor_2d(ctx, 5, 4); /* a constant input */
        memcpy(xs[s]->data, x_keep[s], 20 * sizeof(float));
        ttt_tensor *L = ttt_sum(ctx, ttt_square(ctx, ttt_matmul(ctx, xs[s], 0, &W.t, 0)));
        ttt_backward(ctx, L);
        ck_assert_ptr_eq(W.t.grad, W.grad);
    }
    ttt_arena_reset(ctx->arena);
    for (int s = 0; s < 2; s++) {
        want[s] = dalloc(12);
        ttt_tensor x = ttt_tensor_view2(x_keep[s], 5, 4);
        sq_loss_grad(want[s], &x, &W.t);
    }
    for (int k = 0; k < 12; k++) sum[k] = want[0][k] + want[1][k];
    /* 5-term float sums of O(1) products: 1e-5 relative is ~30 ulps of margin */
    TU_ASSERT_CLOSE(W.grad, sum, 12, 1e-6, 1e-5);

    /* zero, then one step: only that step's gradient */
    ttt_tensor_zero_grad(&W.t);
    ttt_tape_reset(ctx->tape);
    ttt_tensor x1 = ttt_tensor_view2(x_keep[1], 5, 4);
    ttt_backward(ctx, ttt_sum(ctx, ttt_square(ctx, ttt_matmul(ctx, &x1, 0, &W.t, 0))));
    TU_ASSERT_CLOSE(W.grad, want[1], 12, 1e-6, 1e-5);

    /* Two backward calls on the SAME tape: the parameter gets twice the gradient, while an
     * intermediate's gradient is recomputed from zero (not doubled). */
    ttt_tensor_zero_grad(&W.t);
    ttt_tape_reset(ctx->tape);
    ttt_tensor *y = ttt_matmul(ctx, &x1, 0, &W.t, 0);
    ttt_tensor *L = ttt_sum(ctx, ttt_square(ctx, y));
    ttt_backward(ctx, L);
    float y_grad0 = y->grad[0];
    ttt_backward(ctx, L);
    ck_assert_float_eq(y->grad[0], y_grad0);
    ck_assert_float_eq_tol(y_grad0, 2.0f * y->data[0], 1e-6f);
    for (int k = 0; k < 12; k++) sum[k] = 2.0 * want[1][k];
    TU_ASSERT_CLOSE(W.grad, sum, 12, 1e-6, 1e-5);

    for (int s = 0; s < 2; s++) free(x_keep[s]);
    free(sum);
    param_free(&W);
}
END_TEST

/* A trainer's step with ttt_tensor_grad_overwrite instead of zeroing: the buffers hold the
 * previous step's gradient (here garbage first, then step 1's), the first op to write W assigns,
 * and ttt_tensor_grad_settle zeroes U, which no op of the step reads. Each step must give exactly
 * its own gradient: W neither doubled (step 1 + step 2) nor stale, U zero, not garbage. */
START_TEST(test_grad_overwrite_steps) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 17);
    param W, U;
    param_init(&W, &rng, 4, 3, 0.5f);
    param_init(&U, &rng, 2, 2, 0.5f);
    ttt_rng_fill_normal(&rng, W.grad, W.t.n, 0.0f, 10.0f); /* a stale gradient */
    ttt_rng_fill_normal(&rng, U.grad, U.t.n, 0.0f, 10.0f);
    float x_keep[2][20];
    for (int st = 0; st < 2; st++) ttt_rng_fill_normal(&rng, x_keep[st], 20, 0.0f, 1.0f);
    for (int st = 0; st < 2; st++) {
        ttt_arena_reset(ctx->arena);
        ttt_tape_reset(ctx->tape);
        ttt_tensor_grad_overwrite(&W.t);
        ttt_tensor_grad_overwrite(&U.t);
        ttt_tensor x = ttt_tensor_view2(x_keep[st], 5, 4);
        ttt_backward(ctx, ttt_sum(ctx, ttt_square(ctx, ttt_matmul(ctx, &x, 0, &W.t, 0))));
        ttt_tensor_grad_settle(&W.t);
        ttt_tensor_grad_settle(&U.t);
        double *want = dalloc(12);
        sq_loss_grad(want, &x, &W.t);
        /* 5-term float sums of O(1) products, as in test_param_grad_accumulates */
        TU_ASSERT_CLOSE(W.grad, want, 12, 1e-6, 1e-5);
        for (size_t k = 0; k < U.t.n; k++) ck_assert_float_eq(U.grad[k], 0.0f);
    }
    param_free(&W);
    param_free(&U);
}
END_TEST

/* Each backward call starts from zero for non-persistent gradients: seeding y1 = exp(x) and then,
 * on the same tape, y2 = 3x must not replay y1's stale seed into x. */
START_TEST(test_backward_from_fresh) {
    ttt_tensor *x = ttt_tensor_1d(ctx, 3);
    for (int k = 0; k < 3; k++) x->data[k] = 0.1f * (float)k;
    x->requires_grad = 1;
    ttt_tensor *y1 = ttt_exp(ctx, x), *y2 = ttt_scale(ctx, x, 3.0f);
    const float ones[3] = {1.0f, 1.0f, 1.0f};
    ttt_backward_from(ctx, y1, ones);
    for (int k = 0; k < 3; k++) ck_assert_float_eq(x->grad[k], y1->data[k]);
    ttt_backward_from(ctx, y2, ones);
    ck_assert_ptr_null(y1->grad);
    for (int k = 0; k < 3; k++) ck_assert_float_eq(x->grad[k], 3.0f);
}
END_TEST

/* No recording: grad off, no tape, or no input that requires grad. */
START_TEST(test_no_grad_records_nothing) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 12);
    param W;
    param_init(&W, &rng, 3, 3, 1.0f);
    ttt_tensor *x = ttt_tensor_2d(ctx, 2, 3);
    ttt_rng_fill_normal(&rng, x->data, x->n, 0.0f, 1.0f);

    ctx->grad = 0; /* gradients off */
    ttt_tensor *y = ttt_gelu(ctx, ttt_matmul(ctx, x, 0, &W.t, 0));
    ttt_tensor *L = ttt_cross_entropy(ctx, y, (const int[]){0, 2}, 2, NULL);
    ck_assert_uint_eq(ctx->tape->n_entries, 0);
    ck_assert_ptr_null(ctx->tape->last);
    ck_assert_int_eq(y->requires_grad, 0);
    ck_assert_int_eq(L->requires_grad, 0);
    ttt_backward(ctx, L); /* nothing reaches a parameter: a no-op */
    for (int k = 0; k < 9; k++) ck_assert_float_eq(W.grad[k], 0.0f);

    ctx->grad = 1; /* on, but no tape */
    ttt_tape *tape = ctx->tape;
    ctx->tape = NULL;
    y = ttt_matmul(ctx, x, 0, &W.t, 0);
    ck_assert_int_eq(y->requires_grad, 0);
    ctx->tape = tape;
    ck_assert_uint_eq(ctx->tape->n_entries, 0);

    /* on, with a tape, but only constants */
    y = ttt_softmax_rows(ctx, ttt_matmul(ctx, x, 0, x, 1));
    ck_assert_uint_eq(ctx->tape->n_entries, 0);
    ck_assert_int_eq(y->requires_grad, 0);

    /* and recording does happen when a parameter is involved */
    y = ttt_matmul(ctx, x, 0, &W.t, 0);
    ck_assert_uint_eq(ctx->tape->n_entries, 1);
    ck_assert_int_eq(y->requires_grad, 1);
    ck_assert_str_eq(ctx->tape->last->name, "matmul");
    param_free(&W);
}
END_TEST

/* The tape list prints, newest first, with op names. */
START_TEST(test_tape_print) {
    ttt_tensor *x = ttt_tensor_2d(ctx, 2, 3);
    ttt_tensor_fill(x, 0.5f);
    x->requires_grad = 1;
    ttt_sum(ctx, ttt_exp(ctx, x));
    char buf[512] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    ck_assert_ptr_nonnull(f);
    ttt_tape_print(ctx->tape, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "[1] sum") && strstr(buf, "[0] exp"), "tape print: %s", buf);
}
END_TEST

/* Reshape shares storage but routes gradients through its own entry: x feeds the loss both
 * directly and through reshape → mul → reshape, and gets both contributions; a parameter seen
 * through a reshape receives the gradient in its persistent buffer. */
START_TEST(test_reshape_routing) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 13);
    ttt_tensor *x = ttt_tensor_2d(ctx, 2, 6), *cst = ttt_tensor_2d(ctx, 3, 4);
    ttt_rng_fill_normal(&rng, x->data, 12, 0.0f, 1.0f);
    ttt_rng_fill_normal(&rng, cst->data, 12, 0.0f, 1.0f);
    x->requires_grad = 1;
    float r1[12], r2[12];
    ttt_rng_fill_normal(&rng, r1, 12, 0.0f, 1.0f);
    ttt_rng_fill_normal(&rng, r2, 12, 0.0f, 1.0f);
    ttt_tensor *t1 = ttt_tensor_2d(ctx, 2, 6), *t2 = ttt_tensor_2d(ctx, 2, 6);
    memcpy(t1->data, r1, sizeof r1);
    memcpy(t2->data, r2, sizeof r2);

    ttt_tensor *y = ttt_reshape(ctx, x, 2, (int[]){3, 4});
    ck_assert_ptr_eq(y->data, x->data); /* shared storage */
    ttt_tensor *z = ttt_reshape(ctx, ttt_mul(ctx, y, cst), 2, (int[]){2, 6});
    ttt_tensor *L = ttt_add(ctx, ttt_dot(ctx, z, t1), ttt_dot(ctx, x, t2));
    ttt_backward(ctx, L);
    ck_assert_ptr_nonnull(y->grad);
    ck_assert_ptr_ne(y->grad, x->grad); /* own buffers, same element order */
    double want[12];
    for (int k = 0; k < 12; k++) want[k] = (double)r1[k] * cst->data[k] + r2[k];
    /* each element is one product plus one sum: a couple of roundings, 1e-6 relative */
    TU_ASSERT_CLOSE(x->grad, want, 12, 1e-7, 1e-6);

    /* a persistent parameter through reshape */
    param W;
    param_init(&W, &rng, 3, 4, 1.0f);
    ttt_tape_reset(ctx->tape);
    ttt_tensor *Wr = ttt_reshape(ctx, &W.t, 1, (int[]){12});
    ttt_backward(ctx, ttt_dot(ctx, Wr, ttt_reshape(ctx, t1, 1, (int[]){12})));
    for (int k = 0; k < 12; k++) ck_assert_float_eq(W.grad[k], r1[k]);
    param_free(&W);
}
END_TEST

/* ---- the custom-op example of autograd.h, registered through the public API ---- */

static void sinmul_backward(ttt_ctx *x, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *a = e->in[0], *b = e->in[1];
    const float *cosb = e->aux; /* (n) saved by the forward */
    float *ga = ttt_grad(x, a), *gb = ttt_grad(x, b);
    for (size_t i = 0; i < a->n; i++) {
        if (ga) ga[i] += dy[i] * sinf(b->data[i]);
        if (gb) gb[i] += dy[i] * a->data[i] * cosb[i];
    }
}

static ttt_tensor *sinmul(ttt_ctx *x, const ttt_tensor *a, const ttt_tensor *b) {
    ttt_tensor *y = ttt_tensor_new(x, a->ndim, a->shape);
    for (size_t i = 0; i < a->n; i++) y->data[i] = a->data[i] * sinf(b->data[i]);
    ttt_tape_entry *e =
        ttt_tape_record(x, sinmul_backward, y, (const ttt_tensor *const[]){a, b}, 2);
    if (e) {
        float *cosb = ttt_tape_alloc(x, a->n * sizeof(float));
        for (size_t i = 0; i < a->n; i++) cosb[i] = cosf(b->data[i]);
        e->aux = cosb;
        e->name = "sinmul";
    }
    return y;
}

/* the chain below in double: exp(0.5·a·sin b) */
static void ref_sinmul_chain(double *out, const double *const *in, const fd_case *c) {
    for (size_t i = 0; i < in_numel(c, 0); i++) out[i] = exp(0.5 * in[0][i] * sin(in[1][i]));
}
static ttt_tensor *op_sinmul_chain(ttt_ctx *x, ttt_tensor *const *in, const fd_case *c) {
    /* recorded ops on both sides, so the custom entry sits inside a chain */
    return ttt_exp(x, sinmul(x, ttt_scale(x, in[0], 0.5f), in[1]));
}

START_TEST(test_custom_op) {
    const fd_case c = {"custom sinmul", op_sinmul_chain, ref_sinmul_chain, 2, {2, 2},
                       {{3, 4}, {3, 4}}};
    run_fd(&c, 1, 0);
    ck_assert_uint_eq(ctx->tape->n_entries, 3);
    ck_assert_str_eq(ctx->tape->last->prev->name, "sinmul");
    ck_assert_ptr_nonnull(ctx->tape->last->prev->aux);

    /* not recording: no entry, nothing saved */
    ttt_tensor *a = ttt_tensor_2d(ctx, 1, 2), *b = ttt_tensor_2d(ctx, 1, 2);
    ttt_tensor_fill(a, 1.0f);
    ttt_tensor_fill(b, 2.0f);
    ttt_tape_reset(ctx->tape);
    ck_assert_ptr_null(ttt_tape_record(ctx, sinmul_backward, ttt_tensor_2d(ctx, 1, 2),
                                       (const ttt_tensor *const[]){a, b}, 2)); /* constants */
    a->requires_grad = 1;
    ctx->grad = 0;
    ck_assert_ptr_null(ttt_tape_record(ctx, sinmul_backward, ttt_tensor_2d(ctx, 1, 2),
                                       (const ttt_tensor *const[]){a, b}, 2)); /* grad off */
    ctx->grad = 1;
    ck_assert_uint_eq(ctx->tape->n_entries, 0);
    ttt_tensor *y = sinmul(ctx, a, b);
    ck_assert_uint_eq(ctx->tape->n_entries, 1);
    ttt_backward(ctx, ttt_sum(ctx, y));
    ck_assert_ptr_null(b->grad); /* b is a constant */
    ck_assert_float_eq_tol(a->grad[0], sinf(2.0f), 1e-7f);
}
END_TEST

/* --------------------------------------------------------------------------------------------- */
/* a chain: tiny 2-layer MLP language model with cross-entropy                                    */

enum { MLP_V = 7, MLP_D = 4, MLP_H = 6, MLP_N = 5 };
static const int k_mlp_ids[MLP_N] = {3, 0, 6, 3, 2};
static const int k_mlp_tgt[MLP_N] = {0, 6, -1, 2, 3};

/* The same model in double: E (V,D), g (D), W1 (D,H), b1 (H), W2 (H,V), b2 (V).
 * x = E[ids]; h = gelu(rmsnorm(x)·g·W1 + b1); logits = h W2 + b2; mean CE over counted rows. */
static double mlp_loss_d(double *const *p) {
    const double *E = p[0], *g = p[1], *W1 = p[2], *b1 = p[3], *W2 = p[4], *b2 = p[5];
    const double k = sqrt(2.0 / PI_D);
    double total = 0.0;
    int count = 0;
    for (int i = 0; i < MLP_N; i++) {
        const double *x = E + k_mlp_ids[i] * MLP_D;
        double ss = 0.0, xn[MLP_D], h[MLP_H], z[MLP_V];
        for (int j = 0; j < MLP_D; j++) ss += x[j] * x[j];
        for (int j = 0; j < MLP_D; j++) xn[j] = x[j] / sqrt(ss / MLP_D + 1e-6) * g[j];
        for (int j = 0; j < MLP_H; j++) {
            double a = b1[j];
            for (int q = 0; q < MLP_D; q++) a += xn[q] * W1[q * MLP_H + j];
            h[j] = 0.5 * a * (1.0 + tanh(k * (a + 0.044715 * a * a * a)));
        }
        double s = 0.0;
        for (int v = 0; v < MLP_V; v++) {
            z[v] = b2[v];
            for (int q = 0; q < MLP_H; q++) z[v] += h[q] * W2[q * MLP_V + v];
            s += exp(z[v]);
        }
        if (k_mlp_tgt[i] < 0) continue;
        total += log(s) - z[k_mlp_tgt[i]];
        count++;
    }
    return total / count;
}

START_TEST(test_mlp_chain) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 14);
    const int shapes[6][2] = {{MLP_V, MLP_D}, {1, MLP_D}, {MLP_D, MLP_H},
                              {1, MLP_H},     {MLP_H, MLP_V}, {1, MLP_V}};
    param P[6];
    for (int i = 0; i < 6; i++) param_init(&P[i], &rng, shapes[i][0], shapes[i][1], 0.8f);
    for (int j = 0; j < MLP_D; j++) P[1].t.data[j] += 1.0f; /* gain around 1 */

    ttt_tensor *x = ttt_embedding(ctx, &P[0].t, k_mlp_ids, MLP_N);
    ttt_tensor *xn = ttt_rmsnorm(ctx, x, &P[1].t, 1e-6f);
    ttt_tensor *h = ttt_gelu(ctx, ttt_add(ctx, ttt_matmul(ctx, xn, 0, &P[2].t, 0), &P[3].t));
    ttt_tensor *logits = ttt_add(ctx, ttt_matmul(ctx, h, 0, &P[4].t, 0), &P[5].t);
    ttt_ce_stats st;
    ttt_tensor *L = ttt_cross_entropy(ctx, logits, k_mlp_tgt, MLP_N, &st);
    ck_assert_int_eq(st.count, 4);
    ck_assert_uint_eq(ctx->tape->n_entries, 8);
    ttt_backward(ctx, L);

    double *p64[6];
    for (int i = 0; i < 6; i++) {
        p64[i] = dalloc(P[i].t.n);
        for (size_t k = 0; k < P[i].t.n; k++) p64[i][k] = P[i].t.data[k];
    }
    ck_assert_double_eq_tol(L->data[0], mlp_loss_d(p64), 1e-5);
    for (int i = 0; i < 6; i++) {
        double *fd = dalloc(P[i].t.n);
        for (size_t k = 0; k < P[i].t.n; k++) {
            double x0 = p64[i][k], hh = 1e-5 * fmax(1.0, fabs(x0));
            p64[i][k] = x0 + hh;
            double lp = mlp_loss_d(p64);
            p64[i][k] = x0 - hh;
            double lm = mlp_loss_d(p64);
            p64[i][k] = x0;
            fd[k] = (lp - lm) / (2.0 * hh);
        }
        /* eight chained float ops, each ≲ 1e-6 relative: 2e-5 (twice the single-op default) */
        char msg[600];
        int ok = tu_close(P[i].grad, fd, P[i].t.n, 1e-7, 2e-5, msg, sizeof msg);
        ck_assert_msg(ok, "MLP parameter %d vs finite differences: %s", i, msg);
    }
    /* E's rows that no id picks (1, 4, 5) get exactly zero */
    for (int v = 0; v < MLP_V; v++)
        if (v == 1 || v == 4 || v == 5)
            for (int j = 0; j < MLP_D; j++) ck_assert_float_eq(P[0].grad[v * MLP_D + j], 0.0f);
    for (int i = 0; i < 6; i++) param_free(&P[i]);
}
END_TEST

/* causal_fill seeded directly (the −inf entries make any finite loss through it give them zero
 * upstream gradient, so only a direct seed shows whether they pass gradient): the kept entries
 * (j ≤ i) get dout, the masked ones nothing. */
START_TEST(test_causal_fill_direct) {
    ttt_tensor *a = ttt_tensor_3d(ctx, 2, 3, 3);
    for (size_t k = 0; k < a->n; k++) a->data[k] = (float)k;
    a->requires_grad = 1;
    ttt_tensor *y = ttt_causal_fill(ctx, a);
    float dout[18];
    for (int k = 0; k < 18; k++) dout[k] = 1.0f + (float)k;
    ttt_backward_from(ctx, y, dout);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                int k = (b * 3 + i) * 3 + j;
                ck_assert_float_eq(a->grad[k], j <= i ? dout[k] : 0.0f);
            }
}
END_TEST

/* Cross-entropy is stable for huge logits (log-sum-exp after the max) and reports accuracy. */
START_TEST(test_cross_entropy_extreme) {
    ttt_tensor *z = ttt_tensor_2d(ctx, 2, 3);
    const float v[6] = {1000.0f, 0.0f, -1000.0f, -50.0f, 50.0f, 49.0f};
    memcpy(z->data, v, sizeof v);
    z->requires_grad = 1;
    ttt_ce_stats st;
    ttt_tensor *L = ttt_cross_entropy(ctx, z, (const int[]){0, 2}, 2, &st);
    /* row 0: loss e^(−1000) ≈ 0; row 1: log(1 + e + e^(−99)·…) − (49 − 50)... in double: */
    double l1 = 50.0 + log(exp(-100.0) + 1.0 + exp(-1.0)) - 49.0;
    ck_assert_double_eq_tol(L->data[0], l1 / 2.0, 1e-6);
    ck_assert_int_eq(st.count, 2);
    ck_assert_int_eq(st.correct, 1);
    ttt_backward(ctx, L);
    ck_assert(isfinite(z->grad[0]) && isfinite(z->grad[4]));
    ck_assert_float_eq_tol(z->grad[0], 0.0f, 1e-7f); /* softmax − onehot = 0 for row 0 */
}
END_TEST

START_TEST(test_cross_entropy_all_ignored) {
    fd_case c = {"cross_entropy all ignored", op_cross_entropy, ref_cross_entropy, 1, {2},
                 {{3, 4}}, .ids = k_ignored, .n_ids = 3};
    run_fd(&c, 1, 0); /* loss 0 and gradient 0, both checked against the double reference */
}
END_TEST

Suite *autograd_suite(void) {
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_create("autograd");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_fd_ops, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_loop_test(tc, test_fd_solve_lower, 0,
                        (int)(sizeof k_solve_cases / sizeof k_solve_cases[0]));
    tcase_add_test(tc, test_fd_detects_wrong_gradient);
    tcase_add_test(tc, test_param_grad_accumulates);
    tcase_add_test(tc, test_grad_overwrite_steps);
    tcase_add_test(tc, test_backward_from_fresh);
    tcase_add_test(tc, test_no_grad_records_nothing);
    tcase_add_test(tc, test_tape_print);
    tcase_add_test(tc, test_reshape_routing);
    tcase_add_test(tc, test_custom_op);
    tcase_add_test(tc, test_mlp_chain);
    tcase_add_test(tc, test_causal_fill_direct);
    tcase_add_test(tc, test_cross_entropy_extreme);
    tcase_add_test(tc, test_cross_entropy_all_ignored);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(autograd_suite()); }
