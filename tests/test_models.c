/* Fast-weight models and inner losses (docs/math.md §2) and the generic driver running them in
 * mini-batches (docs/math.md §1, §5.4, §6 items 4 and 10).
 *
 * The reference for everything here is an independent float64 re-implementation of each model's
 * forward pass, written below from the formulas of docs/math.md §2 (it shares no code with layers/).
 * Its gradients come from differentiating that forward numerically, never from an analytic
 * formula of the library:
 *   - central finite differences in real double arithmetic (the check docs/math.md §6.10 asks for);
 *   - the complex step, ∂J/∂p_j = Im J(p + i·h·e_j) / h with h = 1e-20: the forward is written in
 *     double complex, and every function in it (products, layer norm with csqrt, tanh, exp) is
 *     analytic, so this derivative has no truncation and no cancellation error — it is exact to
 *     double rounding. It serves as the gradient oracle of the mini-batch reference; the test
 *     `complex_step_matches_central_differences` ties it to plain finite differences.
 * Every comparison of a float32 library result against these references states its tolerance;
 * the `*_detects_*` tests show that the comparisons fail on the wrong semantics. */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

typedef double complex cplx;

/* ------------------------------------------------------------------------------------------ */
/* The float64 reference models (docs/math.md §2), written independently of layers/. */

enum { M_LINEAR, M_TTT_LINEAR, M_MLP, M_SWIGLU, N_REF_MODELS };
enum { L_DOT, L_SQUARED, L_RECON, N_REF_LOSSES };

static const char *const ref_model_names[N_REF_MODELS] = {"linear", "ttt_linear", "ttt_mlp",
                                                          "swiglu"};
static const char *const ref_loss_names[N_REF_LOSSES] = {"dot", "squared", "recon"};

#define LN_EPS 1e-6 /* the inner layer norm's eps, documented in layers/models/ttt_linear_model.c, mlp.c */
#define MAXH 96     /* largest hidden width used here (4·d for d ≤ 24) */
#define CS_H 1e-20  /* complex step */

/* Parameter layout: the model's weights flattened in order into one vector p. */
typedef struct ref_spec {
    int model, dk, dv, nw;
    int ndim[4], rows[4], cols[4]; /* 1-D weights: rows = length, cols = 1 */
    size_t off[5];                 /* off[nw] = P, the parameter count */
} ref_spec;

static ref_spec ref_layout(int model, int dk, int dv) {
    ref_spec r = {.model = model, .dk = dk, .dv = dv};
    /* shapes as docs/math.md §2 (and the task) define them */
    switch (model) {
    case M_LINEAR: /* S (d_k, d_v) */
        r.nw = 1;
        r.ndim[0] = 2, r.rows[0] = dk, r.cols[0] = dv;
        break;
    case M_TTT_LINEAR: /* W (d, d), b (d) */
        r.nw = 2;
        r.ndim[0] = 2, r.rows[0] = dk, r.cols[0] = dk;
        r.ndim[1] = 1, r.rows[1] = dk, r.cols[1] = 1;
        break;
    case M_MLP: /* W1 (d, 4d), b1 (4d), W2 (4d, d), b2 (d) */
        r.nw = 4;
        r.ndim[0] = 2, r.rows[0] = dk, r.cols[0] = 4 * dk;
        r.ndim[1] = 1, r.rows[1] = 4 * dk, r.cols[1] = 1;
        r.ndim[2] = 2, r.rows[2] = 4 * dk, r.cols[2] = dk;
        r.ndim[3] = 1, r.rows[3] = dk, r.cols[3] = 1;
        break;
    case M_SWIGLU: /* W0 (d_k, d_h), W1 (d_h, d_v), W2 (d_k, d_h), d_h = d_k */
        r.nw = 3;
        r.ndim[0] = 2, r.rows[0] = dk, r.cols[0] = dk;
        r.ndim[1] = 2, r.rows[1] = dk, r.cols[1] = dv;
        r.ndim[2] = 2, r.rows[2] = dk, r.cols[2] = dk;
        break;
    }
    r.off[0] = 0;
    for (int i = 0; i < r.nw; i++) r.off[i + 1] = r.off[i] + (size_t)r.rows[i] * r.cols[i];
    return r;
}
#define NPARAM(r) ((r)->off[(r)->nw])

/* y = x A for a row x (n) and a row-major A (n, m). */
static void c_rowmat(cplx *y, const cplx *x, const cplx *A, int n, int m) {
    for (int j = 0; j < m; j++) y[j] = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) y[j] += x[i] * A[(size_t)i * m + j];
}

/* LN without affine: (h − mean)/sqrt(biased var + eps). */
static void c_layernorm(cplx *y, const cplx *h, int n) {
    cplx mu = 0, var = 0;
    for (int j = 0; j < n; j++) mu += h[j];
    mu /= n;
    for (int j = 0; j < n; j++) var += (h[j] - mu) * (h[j] - mu);
    var /= n;
    cplx r = 1.0 / csqrt(var + LN_EPS);
    for (int j = 0; j < n; j++) y[j] = (h[j] - mu) * r;
}

static cplx c_gelu(cplx x) { /* tanh approximation */
    const double c = 0.79788456080286535588; /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + ctanh(c * (x + 0.044715 * x * x * x)));
}
static cplx c_silu(cplx x) { return x / (1.0 + cexp(-x)); }

/* z = f(p; x) for one row x (d_k) → z (d_v). */
static void ref_apply(const ref_spec *r, const cplx *p, const double *xr, cplx *z) {
    const int dk = r->dk, dv = r->dv;
    cplx x[MAXH] = {0}, h[MAXH] = {0}, u[MAXH] = {0}, a[MAXH] = {0}, y[MAXH] = {0};
    for (int i = 0; i < dk; i++) x[i] = xr[i];
    switch (r->model) {
    case M_LINEAR:
        c_rowmat(z, x, p, dk, dv);
        break;
    case M_TTT_LINEAR:
        c_rowmat(h, x, p + r->off[0], dk, dk);
        for (int j = 0; j < dk; j++) h[j] += p[r->off[1] + j];
        c_layernorm(y, h, dk);
        for (int j = 0; j < dk; j++) z[j] = x[j] + y[j];
        break;
    case M_MLP:
        c_rowmat(h, x, p + r->off[0], dk, 4 * dk);
        for (int j = 0; j < 4 * dk; j++) a[j] = c_gelu(h[j] + p[r->off[1] + j]);
        c_rowmat(u, a, p + r->off[2], 4 * dk, dk);
        for (int j = 0; j < dk; j++) u[j] += p[r->off[3] + j];
        c_layernorm(y, u, dk);
        for (int j = 0; j < dk; j++) z[j] = x[j] + y[j];
        break;
    case M_SWIGLU:
        c_rowmat(h, x, p + r->off[0], dk, dk);
        c_rowmat(u, x, p + r->off[2], dk, dk);
        for (int j = 0; j < dk; j++) a[j] = c_silu(h[j]) * u[j];
        c_rowmat(z, a, p + r->off[1], dk, dv);
        break;
    }
}

/* ℓ(z, v): written with products only (no conjugates, no |·|) so it stays analytic. */
static cplx ref_loss(int loss, const cplx *z, const double *v, int dv) {
    cplx s = 0;
    for (int j = 0; j < dv; j++)
        s += loss == L_DOT ? -z[j] * v[j] : 0.5 * (z[j] - v[j]) * (z[j] - v[j]);
    return s;
}

/* J(p) = Σ_s η_s ℓ(f(p; k_s), v_s) over n rows (eta NULL = 1). */
static cplx ref_objective(const ref_spec *r, int loss, const cplx *p, const double *k,
                          const double *v, const double *eta, int n) {
    cplx z[MAXH], J = 0;
    for (int s = 0; s < n; s++) {
        ref_apply(r, p, k + (size_t)s * r->dk, z);
        J += (eta ? eta[s] : 1.0) * ref_loss(loss, z, v + (size_t)s * r->dv, r->dv);
    }
    return J;
}

/* ∇J by the complex step (exact to double rounding). */
static void ref_grad_cs(double *g, const ref_spec *r, int loss, const double *p, const double *k,
                        const double *v, const double *eta, int n) {
    const size_t P = NPARAM(r);
    cplx *pc = malloc(P * sizeof *pc);
    for (size_t j = 0; j < P; j++) pc[j] = p[j];
    for (size_t j = 0; j < P; j++) {
        pc[j] = p[j] + CS_H * I;
        g[j] = cimag(ref_objective(r, loss, pc, k, v, eta, n)) / CS_H;
        pc[j] = p[j];
    }
    free(pc);
}

/* ∇J by central differences in real double arithmetic, step h. */
static void ref_grad_fd(double *g, const ref_spec *r, int loss, const double *p, const double *k,
                        const double *v, const double *eta, int n, double h) {
    const size_t P = NPARAM(r);
    cplx *pc = malloc(P * sizeof *pc);
    for (size_t j = 0; j < P; j++) pc[j] = p[j];
    for (size_t j = 0; j < P; j++) {
        pc[j] = p[j] + h;
        double jp = creal(ref_objective(r, loss, pc, k, v, eta, n));
        pc[j] = p[j] - h;
        double jm = creal(ref_objective(r, loss, pc, k, v, eta, n));
        g[j] = (jp - jm) / (2 * h);
        pc[j] = p[j];
    }
    free(pc);
}

/* Real forward of rows x (n, d_k) → z (n, d_v). */
static void ref_apply_rows(double *z, const ref_spec *r, const double *p, const double *x, int n) {
    const size_t P = NPARAM(r);
    cplx *pc = malloc(P * sizeof *pc), zc[MAXH];
    for (size_t j = 0; j < P; j++) pc[j] = p[j];
    for (int s = 0; s < n; s++) {
        ref_apply(r, pc, x + (size_t)s * r->dk, zc);
        for (int j = 0; j < r->dv; j++) z[(size_t)s * r->dv + j] = creal(zc[j]);
    }
    free(pc);
}

/* ------------------------------------------------------------------------------------------ */
/* Fixture and float32 ↔ float64 plumbing */

static double *to_double(const ttt_tensor *t) {
    double *d = malloc(t->n * sizeof *d);
    for (size_t i = 0; i < t->n; i++) d[i] = t->data[i];
    return d;
}

static const ttt_model *lib_model(int m) {
    const ttt_model *M = ttt_model_find(ref_model_names[m]);
    ck_assert_msg(M != NULL, "model %s is not registered", ref_model_names[m]);
    return M;
}
static const ttt_loss *lib_loss(int l) {
    const ttt_loss *Ls = ttt_loss_find(ref_loss_names[l]);
    ck_assert_msg(Ls != NULL, "loss %s is not registered", ref_loss_names[l]);
    return Ls;
}

/* Weight tensors of the model's shapes filled from p (float32 rounding of p). */
static void weights_from(tu_fixture *f, ttt_tensor **W, const ttt_model *M, int dk, int dv,
                         const double *p) {
    size_t o = 0;
    for (int w = 0; w < M->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        int nd = M->shape(w, dk, dv, shape);
        W[w] = ttt_tensor_new(&f->ctx, nd, shape);
        for (size_t i = 0; i < W[w]->n; i++) W[w]->data[i] = (float)p[o + i];
        o += W[w]->n;
    }
}
/* Flatten weight tensors into doubles (exact). */
static void flatten(double *p, ttt_tensor *const *W, int nw) {
    size_t o = 0;
    for (int w = 0; w < nw; w++)
        for (size_t i = 0; i < W[w]->n; i++) p[o++] = W[w]->data[i];
}
static void flatten_f(float *p, ttt_tensor *const *W, int nw) {
    size_t o = 0;
    for (int w = 0; w < nw; w++) {
        memcpy(p + o, W[w]->data, W[w]->n * sizeof(float));
        o += W[w]->n;
    }
}

/* Random parameters away from the degenerate initial scale, rounded to float32 so that the
 * library and the reference see the same numbers. */
static double *random_params(tu_fixture *f, const ref_spec *r, double std) {
    const size_t P = NPARAM(r);
    double *p = malloc(P * sizeof *p);
    for (size_t j = 0; j < P; j++) p[j] = (float)(std * ttt_rng_normal(&f->rng));
    return p;
}

/* dims per model: non-square for the models that allow it */
static void model_dims(int m, int *dk, int *dv) {
    switch (m) {
    case M_LINEAR: *dk = 5, *dv = 3; break;
    case M_TTT_LINEAR: *dk = *dv = 6; break;
    case M_MLP: *dk = *dv = 5; break;
    default: *dk = 6, *dv = 4; break;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Registry and interface */

START_TEST(models_and_losses_are_registered_with_their_shapes) {
    for (int m = 0; m < N_REF_MODELS; m++) {
        const ttt_model *M = lib_model(m);
        ck_assert_ptr_nonnull(M->help);
        int dk, dv;
        model_dims(m, &dk, &dv);
        ref_spec r = ref_layout(m, dk, dv);
        ck_assert_int_eq(M->n_weights, r.nw);
        ck_assert_int_eq(M->square, m == M_TTT_LINEAR || m == M_MLP);
        for (int w = 0; w < r.nw; w++) {
            int shape[TTT_MAX_DIMS];
            int nd = M->shape(w, dk, dv, shape);
            ck_assert_int_eq(nd, r.ndim[w]);
            ck_assert_int_eq(shape[0], r.rows[w]);
            if (nd == 2) ck_assert_int_eq(shape[1], r.cols[w]);
        }
    }
    for (int l = 0; l < N_REF_LOSSES; l++) {
        const ttt_loss *Ls = lib_loss(l);
        ck_assert_ptr_nonnull(Ls->help);
        ck_assert_int_eq(Ls->z_free, l == L_DOT);
    }
    ck_assert_ptr_nonnull(strstr(ttt_loss_find("recon")->help, "reconstruction"));
    /* residual models refuse d_k != d_v; swiglu takes any */
    ttt_layer L;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_layer_init(&L, "ttt_linear", "recon", "sgd", 4,
                                    TTT_ORDER_UPDATE_THEN_APPLY, "generic", 6, 4, &err),
                     TTT_ERR_CONFIG);
    ck_assert_int_eq(ttt_layer_init(&L, "ttt_mlp", "recon", "sgd", 4,
                                    TTT_ORDER_UPDATE_THEN_APPLY, "generic", 4, 6, &err),
                     TTT_ERR_CONFIG);
    ck_assert_int_eq(ttt_layer_init(&L, "swiglu", "dot", "sgd", 4, TTT_ORDER_UPDATE_THEN_APPLY,
                                    "generic", 6, 4, &err),
                     TTT_OK);
}
END_TEST

/* recon is the squared loss in value and gradient (the residual's −k lives inside z). */
START_TEST(recon_loss_is_the_squared_loss_of_the_residual_view) {
    tu_fixture f;
    tu_fx_init(&f, 40);
    ttt_tensor *z = tu_randn(&f, 3, 5, 1.0f), *v = tu_randn(&f, 3, 5, 1.0f);
    const ttt_loss *R = lib_loss(L_RECON), *S = lib_loss(L_SQUARED);
    ck_assert_double_eq(R->value(z, v), S->value(z, v));
    ck_assert_float_eq(ttt_max_abs_diff(R->grad(&f.ctx, z, v), S->grad(&f.ctx, z, v)), 0.0f);
    /* value: ½ Σ (z − v)², accumulated here independently */
    double want = 0;
    for (size_t i = 0; i < z->n; i++)
        want += 0.5 * ((double)z->data[i] - v->data[i]) * ((double)z->data[i] - v->data[i]);
    ck_assert_double_eq_tol(R->value(z, v), want, 1e-12 * want);
    tu_fx_free(&f);
}
END_TEST

/* init: the documented distributions, reproducible from the seed, and usable without one. */
START_TEST(init_is_seeded_and_has_the_documented_scale) {
    const int d = 64;
    /* expected std per weight (0 = all zeros) from the models' documentation */
    const double want_std[N_REF_MODELS][4] = {
        {0},                                         /* linear: S_0 = 0 */
        {0.02, 0},                                   /* ttt_linear: W, b */
        {0.02, 0, 0.02, 0},                          /* ttt_mlp: W1, b1, W2, b2 */
        {1 / sqrt(d), 1 / sqrt(d), 1 / sqrt(d)},     /* swiglu: W0, W1, W2 ~ N(0, 1/d) */
    };
    for (int m = 0; m < N_REF_MODELS; m++) {
        tu_fixture f;
        tu_fx_init(&f, 41);
        const ttt_model *M = lib_model(m);
        ttt_tensor *W[3][TTT_MAX_WEIGHTS];
        for (int rep = 0; rep < 3; rep++) {
            ttt_tensor *Wr[TTT_MAX_WEIGHTS];
            for (int w = 0; w < M->n_weights; w++) {
                int shape[TTT_MAX_DIMS];
                int nd = M->shape(w, d, d, shape);
                Wr[w] = ttt_tensor_new(&f.ctx, nd, shape);
                ttt_tensor_fill(Wr[w], 123.0f); /* init must overwrite everything */
            }
            ttt_rng r;
            ttt_rng_seed(&r, 7);
            M->init(Wr, d, d, rep < 2 ? &r : NULL); /* rep 2: no stream given */
            for (int w = 0; w < M->n_weights; w++) W[rep][w] = Wr[w];
        }
        for (int w = 0; w < M->n_weights; w++) {
            ck_assert_float_eq(ttt_max_abs_diff(W[0][w], W[1][w]), 0.0f); /* same seed, same W */
            ck_assert_float_lt(ttt_max_abs(W[2][w]), 10.0f); /* rng NULL: still written */
            double s2 = 0;
            const float *x = W[0][w]->data;
            for (size_t i = 0; i < W[0][w]->n; i++) s2 += (double)x[i] * x[i];
            double std = sqrt(s2 / W[0][w]->n);
            if (want_std[m][w] == 0)
                ck_assert_msg(std == 0, "%s weight %d should start at 0", M->name, w);
            else /* ≥ 4096 draws: the sample std is within 5 % with overwhelming probability */
                ck_assert_msg(fabs(std / want_std[m][w] - 1) < 0.05,
                              "%s weight %d: std %g, want %g", M->name, w, std, want_std[m][w]);
        }
        tu_fx_free(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Forward and inner gradients (docs/math.md §2, §6.10) */

/* The float64 forward written above equals model.apply (float32). Inputs and weights are the
 * same float32 numbers; the only difference is float32 rounding inside apply (sgemm over ≤ 4d
 * terms, LN in double inside the op): 1e-5 relative to the largest output is ~100 ulps. */
START_TEST(reference_forward_equals_apply) {
    for (int m = 0; m < N_REF_MODELS; m++) {
        tu_fixture f;
        tu_fx_init(&f, 50 + m);
        int dk, dv;
        model_dims(m, &dk, &dv);
        const ttt_model *M = lib_model(m);
        ref_spec r = ref_layout(m, dk, dv);
        const int n = 7;
        double *p = random_params(&f, &r, 0.4);
        ttt_tensor *W[TTT_MAX_WEIGHTS];
        weights_from(&f, W, M, dk, dv, p);
        ttt_tensor *x = tu_randn(&f, n, dk, 1.0f);
        double *xd = to_double(x), *z_ref = malloc(sizeof(double) * n * dv);
        ref_apply_rows(z_ref, &r, p, xd, n);
        ttt_tensor *z = M->apply(&f.ctx, (const ttt_tensor *const *)W, x);
        ck_assert_int_eq(TTT_ROWS(z), n);
        ck_assert_int_eq(TTT_COLS(z), dv);
        TU_ASSERT_CLOSE(z->data, z_ref, z->n, 1e-6, 1e-5);
        /* the model's initial weights too */
        ttt_rng ri;
        ttt_rng_seed(&ri, 3);
        M->init(W, dk, dv, &ri);
        flatten(p, W, M->n_weights);
        ref_apply_rows(z_ref, &r, p, xd, n);
        z = M->apply(&f.ctx, (const ttt_tensor *const *)W, x);
        TU_ASSERT_CLOSE(z->data, z_ref, z->n, 1e-6, 1e-5);
        free(p), free(xd), free(z_ref);
        tu_fx_free(&f);
    }
}
END_TEST

#define FD_H 1e-6
#define GRAD_RTOL 5e-6
#define GRAD_ATOL 1e-6

/* G = model.grad(W, k, loss.grad(model.apply(W, k), v), η) for n rows, flattened. */
static float *lib_grad(tu_fixture *f, const ttt_model *M, const ttt_loss *Ls, ttt_tensor **W,
                       const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *eta,
                       size_t P) {
    ttt_tensor *z = M->apply(&f->ctx, (const ttt_tensor *const *)W, k);
    ttt_tensor *dz = Ls->grad(&f->ctx, z, v);
    ttt_tensor *G[TTT_MAX_WEIGHTS] = {0};
    M->grad(&f->ctx, G, (const ttt_tensor *const *)W, k, dz, eta);
    float *g = malloc(P * sizeof *g);
    size_t o = 0;
    for (int w = 0; w < M->n_weights; w++) {
        ck_assert_ptr_nonnull(G[w]);
        ck_assert_msg(ttt_tensor_same_shape(G[w], W[w]), "%s: gradient %d has the wrong shape",
                      M->name, w);
        memcpy(g + o, G[w]->data, G[w]->n * sizeof(float));
        o += G[w]->n;
    }
    ck_assert_uint_eq(o, P);
    return g;
}

/* Every (model, loss) inner gradient against central finite differences of the float64 forward
 * (every weight entry: the largest model here has 260 parameters), several rows with per-token
 * η so that the diag(η) weighting and the sum over rows are checked too; at random weights of
 * scale 0.4 and at the model's own initial weights (where the residual models' LN sees a small
 * input and amplifies by 1/σ ≈ 20).
 *
 * Tolerance: the analytic gradient is float32: measured max error ≤ 3.4e-7 of the largest
 * gradient entry (ttt_mlp at its init, where LN divides by σ ≈ 2e-3 and gradients reach 1e3).
 * Central differences with h = 1e-6 carry truncation h²/6·J''' and rounding ~1e-16·|J|/h:
 * measured ≤ 6e-8 relative against the exact complex-step gradient (≤ 2e-9 away from the
 * small-init LN; h = 1e-5 gave 6e-6 there, too close to the float32 error to separate them).
 * 5e-6 relative to the largest entry (plus 1e-6 absolute) leaves a ×15 margin; a sign error, a
 * missing η or a dropped term is O(1) relative. */
START_TEST(inner_gradients_match_finite_differences) {
    for (int m = 0; m < N_REF_MODELS; m++)
        for (int l = 0; l < N_REF_LOSSES; l++) {
            tu_fixture f;
            tu_fx_init(&f, 100 + 10 * m + l);
            int dk, dv;
            model_dims(m, &dk, &dv);
            const ttt_model *M = lib_model(m);
            const ttt_loss *Ls = lib_loss(l);
            ref_spec r = ref_layout(m, dk, dv);
            const size_t P = NPARAM(&r);
            const int n = 4;
            double *p = random_params(&f, &r, 0.4);
            ttt_tensor *W[TTT_MAX_WEIGHTS];
            weights_from(&f, W, M, dk, dv, p);
            ttt_tensor *k = tu_randn(&f, n, dk, 1.0f), *v = tu_randn(&f, n, dv, 1.0f);
            ttt_tensor *eta = tu_uniform(&f, n, 0.2f, 1.5f);
            double *kd = to_double(k), *vd = to_double(v), *ed = to_double(eta);
            double *g_fd = malloc(P * sizeof *g_fd);
            char msg[512];
            for (int at_init = 0; at_init < 2; at_init++) {
                if (at_init) {
                    if (m == M_LINEAR) /* S_0 = 0 is trivial: small random weights instead */
                        ttt_rng_fill_normal(&f.rng, W[0]->data, W[0]->n, 0.0f, 0.02f);
                    else
                        M->init(W, dk, dv, &f.rng);
                    flatten(p, W, M->n_weights);
                }
                ref_grad_fd(g_fd, &r, l, p, kd, vd, ed, n, FD_H);
                float *g = lib_grad(&f, M, Ls, W, k, v, eta, P);
                int ok = tu_close(g, g_fd, P, GRAD_ATOL, GRAD_RTOL, msg, sizeof msg);
                ck_assert_msg(ok, "model %s, loss %s%s: %s", M->name, Ls->name,
                              at_init ? " (initial weights)" : "", msg);
                free(g);
                /* eta = NULL means η = 1 */
                g = lib_grad(&f, M, Ls, W, k, v, NULL, P);
                ref_grad_fd(g_fd, &r, l, p, kd, vd, NULL, n, FD_H);
                ok = tu_close(g, g_fd, P, GRAD_ATOL, GRAD_RTOL, msg, sizeof msg);
                ck_assert_msg(ok, "model %s, loss %s%s, eta NULL: %s", M->name, Ls->name,
                              at_init ? " (initial weights)" : "", msg);
                free(g);
            }
            free(g_fd), free(p), free(kd), free(vd), free(ed);
            tu_fx_free(&f);
        }
}
END_TEST

/* The complex-step oracle used by the mini-batch references agrees with plain central
 * differences (both in double). The latter's truncation at h = 1e-5 is ~h²/6·|J'''|: measured
 * ≤ 4e-10 of the largest gradient entry here; 1e-8 keeps a ×25 margin. */
START_TEST(complex_step_matches_central_differences) {
    for (int m = 0; m < N_REF_MODELS; m++) {
        tu_fixture f;
        tu_fx_init(&f, 200 + m);
        int dk, dv;
        model_dims(m, &dk, &dv);
        ref_spec r = ref_layout(m, dk, dv);
        const size_t P = NPARAM(&r);
        double *p = random_params(&f, &r, 0.4);
        ttt_tensor *k = tu_randn(&f, 3, dk, 1.0f), *v = tu_randn(&f, 3, dv, 1.0f);
        double *kd = to_double(k), *vd = to_double(v);
        double *g_cs = malloc(P * sizeof *g_cs), *g_fd = malloc(P * sizeof *g_fd);
        for (int l = 0; l < N_REF_LOSSES; l++) {
            ref_grad_cs(g_cs, &r, l, p, kd, vd, NULL, 3);
            ref_grad_fd(g_fd, &r, l, p, kd, vd, NULL, 3, FD_H);
            double maxd = 0, maxg = 0;
            for (size_t j = 0; j < P; j++) {
                maxd = fmax(maxd, fabs(g_cs[j] - g_fd[j]));
                maxg = fmax(maxg, fabs(g_cs[j]));
            }
            ck_assert_msg(maxg > 0 && maxd <= 1e-8 * maxg, "%s/%s: |cs − fd| = %g, |g| = %g",
                          ref_model_names[m], ref_loss_names[l], maxd, maxg);
        }
        free(p), free(kd), free(vd), free(g_cs), free(g_fd);
        tu_fx_free(&f);
    }
}
END_TEST

/* SwiGLU with the dot loss: docs/math.md §2's closed form, evaluated here in double, equals
 * model.grad (one row; the §2 formulas are for a single pair). Same tolerance as the FD check
 * (float32 rounding of model.grad). */
START_TEST(swiglu_dot_gradient_matches_math_md_closed_form) {
    tu_fixture f;
    tu_fx_init(&f, 60);
    const int dk = 6, dv = 4, dh = 6;
    ref_spec r = ref_layout(M_SWIGLU, dk, dv);
    const size_t P = NPARAM(&r);
    const ttt_model *M = lib_model(M_SWIGLU);
    double *p = random_params(&f, &r, 0.4);
    ttt_tensor *W[TTT_MAX_WEIGHTS];
    weights_from(&f, W, M, dk, dv, p);
    ttt_tensor *k = tu_randn(&f, 1, dk, 1.0f), *v = tu_randn(&f, 1, dv, 1.0f);
    const double *W0 = p + r.off[0], *W1 = p + r.off[1], *W2 = p + r.off[2];
    double h[8], u[8], a[8], delta[8], sh[8], dsh[8];
    for (int j = 0; j < dh; j++) {
        h[j] = u[j] = delta[j] = 0;
        for (int i = 0; i < dk; i++) {
            h[j] += k->data[i] * W0[i * dh + j];
            u[j] += k->data[i] * W2[i * dh + j];
        }
        double sg = 1 / (1 + exp(-h[j]));
        sh[j] = h[j] * sg;
        dsh[j] = sg * (1 + h[j] * (1 - sg));
        a[j] = sh[j] * u[j];
        for (int c = 0; c < dv; c++) delta[j] += v->data[c] * W1[j * dv + c]; /* δ = v W1ᵀ */
    }
    double *want = malloc(P * sizeof *want);
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dh; j++) {
            want[r.off[0] + i * dh + j] = -k->data[i] * delta[j] * u[j] * dsh[j]; /* ∇W0 */
            want[r.off[2] + i * dh + j] = -k->data[i] * delta[j] * sh[j];         /* ∇W2 */
        }
    for (int j = 0; j < dh; j++)
        for (int c = 0; c < dv; c++) want[r.off[1] + j * dv + c] = -a[j] * v->data[c]; /* ∇W1 */
    float *g = lib_grad(&f, M, lib_loss(L_DOT), W, k, v, NULL, P);
    TU_ASSERT_CLOSE(g, want, P, GRAD_ATOL, GRAD_RTOL);
    free(g), free(want), free(p);
    tu_fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The generic driver in mini-batches (docs/math.md §1) against a float64 primal evaluation. */

typedef struct drive_cfg {
    int model, loss, b, order, pos_inverse;
    double theta;
    int T;
} drive_cfg;

/* docs/math.md §1 in float64: blocks of b tokens (the last may be shorter); inside a block starting
 * at W_0 every gradient is taken at W_0 (complex step), token i of the block (from 0) reads
 *     update_then_apply:  f(W_0 − θ_i Σ_{s ≤ i} η_s g_s; q_t),   apply_then_update: f(W_0; q_t)
 * with θ_i = θ/(i+1) under position_scale inverse (docs/math.md §5.4's τ_i) and θ otherwise, and the
 * block ends at the last token's weights W_0 − θ_{n−1} Σ_s η_s g_s.
 * grad_at_current != 0 instead takes each gradient at the running weights (online SGD): a wrong
 * semantics for b > 1, used to show the comparison can tell. */
static void ref_drive(double *o, double *p, const ref_spec *r, const drive_cfg *c,
                      const double *q, const double *k, const double *v, const double *eta,
                      int grad_at_current) {
    const size_t P = NPARAM(r);
    const int dk = r->dk, dv = r->dv;
    double *acc = malloc(P * sizeof *acc), *g = malloc(P * sizeof *g);
    double *Wi = malloc(P * sizeof *Wi);
    for (int t0 = 0; t0 < c->T; t0 += c->b) {
        const int n = t0 + c->b <= c->T ? c->b : c->T - t0;
        memset(acc, 0, P * sizeof *acc);
        memcpy(Wi, p, P * sizeof *Wi);
        double th = c->theta;
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            ref_grad_cs(g, r, c->loss, grad_at_current ? Wi : p, k + (size_t)t * dk,
                        v + (size_t)t * dv, eta + t, 1);
            th = c->pos_inverse ? c->theta / (i + 1) : c->theta;
            for (size_t j = 0; j < P; j++) {
                acc[j] += g[j];
                Wi[j] = p[j] - th * acc[j];
            }
            ref_apply_rows(o + (size_t)t * dv, r,
                           c->order == TTT_ORDER_UPDATE_THEN_APPLY ? Wi : p, q + (size_t)t * dk,
                           1);
        }
        for (size_t j = 0; j < P; j++) p[j] -= th * acc[j];
    }
    free(acc), free(g), free(Wi);
}

typedef struct drive_out {
    ttt_tensor *o;   /* (T, d_v) */
    float *W_final;  /* (P) flattened */
    double *W0;      /* (P) initial weights as used */
} drive_out;

/* Run the generic driver from the model's seeded initial weights (scaled by init_gain, so the
 * test can move them away from the small-init regime) and return output and final weights. */
static drive_out lib_drive(tu_fixture *f, const drive_cfg *c, int dk, int dv, const ttt_tensor *q,
                           const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *eta,
                           double init_gain) {
    ttt_layer L;
    ttt_error err = {0};
    ttt_status s = ttt_layer_init(&L, ref_model_names[c->model], ref_loss_names[c->loss], "sgd",
                                  c->b, (ttt_order)c->order, "generic", dk, dv, &err);
    ck_assert_msg(s == TTT_OK, "layer init: %s", err.msg);
    L.lr = (float)c->theta;
    L.pos_inverse = c->pos_inverse;
    ttt_layer_state st;
    ttt_rng rng;
    ttt_rng_seed(&rng, 1234);
    ttt_layer_state_init(&f->ctx, &L, &st, &rng);
    size_t P = 0;
    for (int w = 0; w < st.n_w; w++) {
        for (size_t i = 0; i < st.W[w]->n; i++) st.W[w]->data[i] *= (float)init_gain;
        P += st.W[w]->n;
    }
    drive_out out;
    out.W0 = malloc(P * sizeof *out.W0);
    flatten(out.W0, st.W, st.n_w);
    out.o = ttt_tensor_2d(&f->ctx, c->T, dv);
    s = ttt_layer_forward(&f->ctx, &L, out.o, &st, q, k, v, eta, NULL, &err);
    ck_assert_msg(s == TTT_OK, "forward: %s", err.msg);
    out.W_final = malloc(P * sizeof *out.W_final);
    flatten_f(out.W_final, st.W, st.n_w);
    return out;
}

/* Learning rates that move every model's weights by a visible but stable amount over T tokens
 * (checked below: the outputs differ from the no-update outputs by ≫ the tolerance). */
static double model_theta(int m) {
    switch (m) {
    case M_LINEAR: return 0.1;
    case M_TTT_LINEAR: return 0.05;
    case M_MLP: return 0.05;
    default: return 0.1;
    }
}

/* Tolerance of the driver-vs-reference comparisons: the driver is float32 (sgemm, float LN) over
 * ≤ 24 tokens; the reference is exact to double rounding. Measured worst error relative to the
 * largest entry: 1.2e-6 in the mini-batch test (ttt_linear from its small init, where LN
 * amplifies float32 rounding by 1/σ of its input; ~1e-7 elsewhere), 2.2e-6 for the last output of
 * the full-batch test (24 tokens summed into one step, weights ×5). 1e-5 (plus 1e-6 absolute for
 * all-zero outputs) leaves a ×4.5 margin; online SGD inside blocks, the other order, a position
 * scale or a 1 % smaller θ move outputs by ≥ 1.3e-3 relative (mini_batch_comparison_detects_*). */
#define DRV_RTOL 1e-5
#define DRV_ATOL 1e-6

/* Mini-batch and ordering for every model × loss: b = 1, b = 3 and 4 (T = 11: last blocks of 2
 * and 3 tokens), b = T; both orders; position scale none and inverse. Each from the model's
 * initial weights, and (the nonlinear models) from those weights rescaled (init_gain): ×10 for the
 * residual models, where a small W_0 makes LN nearly blind to θ (LN(x(W_0 − θG)) ≈ LN(−xG)),
 * ×0.5 for swiglu. */
static double second_gain(int m) { return m == M_SWIGLU ? 0.5 : 10.0; }

/* One configuration: the driver from the model's initial weights × gain against ref_drive. */
static void check_drive_case(tu_fixture *f, const ref_spec *r, const drive_cfg *c, double gain,
                             const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v,
                             const ttt_tensor *eta) {
    const int T = c->T, dv = r->dv;
    const size_t P = NPARAM(r);
    double *qd = to_double(q), *kd = to_double(k), *vd = to_double(v), *ed = to_double(eta);
    double *o_ref = malloc(sizeof(double) * T * dv), *o_0 = malloc(sizeof(double) * T * dv);
    double *p = malloc(P * sizeof *p);
    ttt_arena_mark mark = ttt_arena_mark_get(&f->arena);
    drive_out d = lib_drive(f, c, r->dk, dv, q, k, v, eta, gain);
    memcpy(p, d.W0, P * sizeof *p);
    ref_apply_rows(o_0, r, p, qd, T); /* outputs without any update */
    ref_drive(o_ref, p, r, c, qd, kd, vd, ed, 0);
    char what[128], msg[512];
    snprintf(what, sizeof what, "%s/%s b=%d %s pos_inverse=%d gain=%g", ref_model_names[c->model],
             ref_loss_names[c->loss], c->b,
             c->order ? "apply_then_update" : "update_then_apply", c->pos_inverse, gain);
    int ok = tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, msg, sizeof msg);
    ck_assert_msg(ok, "%s: output: %s", what, msg);
    ok = tu_close(d.W_final, p, P, DRV_ATOL, DRV_RTOL, msg, sizeof msg);
    ck_assert_msg(ok, "%s: final weights: %s", what, msg);
    /* the updates matter: outputs move by far more than the tolerance (apply_then_update with
     * b = T legitimately reads W_0 everywhere) */
    double moved = 0, maxo = 0;
    for (int i = 0; i < T * dv; i++) {
        moved = fmax(moved, fabs(o_ref[i] - o_0[i]));
        maxo = fmax(maxo, fabs(o_ref[i]));
    }
    if (!(c->order == TTT_ORDER_APPLY_THEN_UPDATE && c->b == T))
        ck_assert_msg(moved > 100 * (DRV_ATOL + DRV_RTOL * maxo),
                      "%s: updates too small to test (%g)", what, moved);
    free(d.W0), free(d.W_final);
    ttt_arena_release(&f->arena, mark);
    free(qd), free(kd), free(vd), free(ed), free(o_ref), free(o_0), free(p);
}

START_TEST(mini_batch_and_ordering_match_primal_definition) {
    const int T = 11;
    const int bs[] = {1, 3, 4, T};
    for (int m = 0; m < N_REF_MODELS; m++)
        for (int l = 0; l < N_REF_LOSSES; l++) {
            tu_fixture f;
            tu_fx_init(&f, 300 + 10 * m + l);
            int dk, dv;
            model_dims(m, &dk, &dv);
            ref_spec r = ref_layout(m, dk, dv);
            ttt_tensor *q = tu_randn(&f, T, dk, 1.0f), *k = tu_randn(&f, T, dk, 1.0f);
            ttt_tensor *v = tu_randn(&f, T, dv, 1.0f), *eta = tu_uniform(&f, T, 0.5f, 1.5f);
            for (int gi = 0; gi < (m == M_LINEAR ? 1 : 2); gi++)
                for (size_t ib = 0; ib < sizeof bs / sizeof bs[0]; ib++)
                    for (int order = 0; order < 2; order++)
                        for (int pi = 0; pi < 2; pi++) {
                            drive_cfg c = {m, l, bs[ib], order, pi, model_theta(m), T};
                            check_drive_case(&f, &r, &c, gi ? second_gain(m) : 1.0, q, k, v,
                                             eta);
                        }
            tu_fx_free(&f);
        }
}
END_TEST

/* The comparisons above can tell the semantics apart: online SGD (gradients at the running
 * weights) for b > 1, the other order, a position scale, and a 1 % smaller θ all fail them
 * (from rescaled initial weights, see second_gain). */
START_TEST(mini_batch_comparison_detects_wrong_semantics) {
    const int T = 11;
    for (int m = 1; m < N_REF_MODELS; m++) { /* the nonlinear models */
        tu_fixture f;
        tu_fx_init(&f, 400 + m);
        int dk, dv;
        model_dims(m, &dk, &dv);
        ref_spec r = ref_layout(m, dk, dv);
        const size_t P = NPARAM(&r);
        ttt_tensor *q = tu_randn(&f, T, dk, 1.0f), *k = tu_randn(&f, T, dk, 1.0f);
        ttt_tensor *v = tu_randn(&f, T, dv, 1.0f), *eta = tu_uniform(&f, T, 0.5f, 1.5f);
        double *qd = to_double(q), *kd = to_double(k), *vd = to_double(v), *ed = to_double(eta);
        double *o_ref = malloc(sizeof(double) * T * dv), *p = malloc(P * sizeof *p);
        drive_cfg c = {m, L_RECON, 4, TTT_ORDER_UPDATE_THEN_APPLY, 0, model_theta(m), T};
        if (m == M_SWIGLU) c.loss = L_SQUARED;
        drive_out d = lib_drive(&f, &c, dk, dv, q, k, v, eta, second_gain(m));
        /* correct semantics pass */
        memcpy(p, d.W0, P * sizeof *p);
        ref_drive(o_ref, p, &r, &c, qd, kd, vd, ed, 0);
        ck_assert(tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, NULL, 0));
        /* online SGD inside the block */
        memcpy(p, d.W0, P * sizeof *p);
        ref_drive(o_ref, p, &r, &c, qd, kd, vd, ed, 1);
        ck_assert(!tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, NULL, 0));
        /* the other order */
        drive_cfg c2 = c;
        c2.order = TTT_ORDER_APPLY_THEN_UPDATE;
        memcpy(p, d.W0, P * sizeof *p);
        ref_drive(o_ref, p, &r, &c2, qd, kd, vd, ed, 0);
        ck_assert(!tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, NULL, 0));
        /* position scale inverse */
        c2 = c;
        c2.pos_inverse = 1;
        memcpy(p, d.W0, P * sizeof *p);
        ref_drive(o_ref, p, &r, &c2, qd, kd, vd, ed, 0);
        ck_assert(!tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, NULL, 0));
        /* a 1 % smaller learning rate */
        c2 = c;
        c2.theta *= 0.99;
        memcpy(p, d.W0, P * sizeof *p);
        ref_drive(o_ref, p, &r, &c2, qd, kd, vd, ed, 0);
        ck_assert(!tu_close(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL, NULL, 0));
        free(d.W0), free(d.W_final), free(qd), free(kd), free(vd), free(ed), free(o_ref), free(p);
        tu_fx_free(&f);
    }
}
END_TEST

/* docs/math.md §6.4: b = T is one full-batch step. The final weights equal
 * W_0 − θ ∇_W Σ_s η_s ℓ(f(W_0; k_s), v_s), the gradient of the whole objective taken at once
 * (complex step on the summed objective, not a sum of per-token gradients); with
 * update_then_apply the last token reads those weights, with apply_then_update every token reads
 * W_0. Larger T than above (T = 24) and weights scaled up ×5 from their init (init_gain) so the
 * nonlinearities are well inside their curved range. Tolerance as DRV_RTOL. */
START_TEST(full_batch_equals_one_gradient_step) {
    const int T = 24;
    const int models[] = {M_MLP, M_SWIGLU};
    for (int im = 0; im < 2; im++)
        for (int l = 0; l < N_REF_LOSSES; l++)
            for (int order = 0; order < 2; order++) {
                const int m = models[im];
                tu_fixture f;
                tu_fx_init(&f, 500 + 10 * m + 2 * l + order);
                int dk, dv;
                model_dims(m, &dk, &dv);
                ref_spec r = ref_layout(m, dk, dv);
                const size_t P = NPARAM(&r);
                ttt_tensor *q = tu_randn(&f, T, dk, 1.0f), *k = tu_randn(&f, T, dk, 1.0f);
                ttt_tensor *v = tu_randn(&f, T, dv, 1.0f), *eta = tu_uniform(&f, T, 0.5f, 1.5f);
                double *qd = to_double(q), *kd = to_double(k), *vd = to_double(v);
                double *ed = to_double(eta);
                const double theta = 0.02;
                drive_cfg c = {m, l, T, order, 0, theta, T};
                drive_out d = lib_drive(&f, &c, dk, dv, q, k, v, eta, 5.0);
                double *g = malloc(P * sizeof *g), *W1 = malloc(P * sizeof *W1);
                ref_grad_cs(g, &r, l, d.W0, kd, vd, ed, T); /* ∇ of the summed objective */
                for (size_t j = 0; j < P; j++) W1[j] = d.W0[j] - theta * g[j];
                TU_ASSERT_CLOSE(d.W_final, W1, P, DRV_ATOL, DRV_RTOL);
                double *o_ref = malloc(sizeof(double) * T * dv);
                ref_apply_rows(o_ref, &r, order == TTT_ORDER_UPDATE_THEN_APPLY ? W1 : d.W0, qd, T);
                if (order == TTT_ORDER_UPDATE_THEN_APPLY) /* the last token reads W_1 */
                    TU_ASSERT_CLOSE(d.o->data + (size_t)(T - 1) * dv, o_ref + (size_t)(T - 1) * dv,
                                    (size_t)dv, DRV_ATOL, DRV_RTOL);
                else /* every token reads W_0 */
                    TU_ASSERT_CLOSE(d.o->data, o_ref, (size_t)T * dv, DRV_ATOL, DRV_RTOL);
                /* the step is not negligible: W moved by ≫ the tolerance */
                double moved = 0, maxw = 0;
                for (size_t j = 0; j < P; j++) {
                    moved = fmax(moved, fabs(W1[j] - d.W0[j]));
                    maxw = fmax(maxw, fabs(W1[j]));
                }
                ck_assert_msg(moved > 100 * (DRV_ATOL + DRV_RTOL * maxw), "step too small: %g",
                              moved);
                free(g), free(W1), free(o_ref), free(d.W0), free(d.W_final);
                free(qd), free(kd), free(vd), free(ed);
                tu_fx_free(&f);
            }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* docs/math.md §6.4: TTT-Linear without LN and with b = 1 equals DeltaNet.
 *
 * Without LN, f(W, b; x) = x + x W + b and ½‖f − v‖² = ½‖[x, 1]·[W; b] − (v − x)‖²: the delta
 * rule on augmented keys k' = [k, 1] with values v − k, read out as q + [q, 1]·S. The float64
 * recurrence of TTT-Linear-without-LN (online SGD, written here directly) is compared with
 *   - the generic driver (model linear, loss squared, sgd, b = 1) on (q', k', v − k), and
 *   - the closed delta-rule kernel ttt_delta_rule_recurrent on the same inputs,
 * each plus q. Keys are scaled so ‖k'‖² ≈ 1 (the step is a contraction); tolerance as
 * tests/test_layer.c (2e-5 relative: float32 forms of the same recurrence). */
START_TEST(ttt_linear_without_ln_b1_equals_deltanet) {
    const int T = 29, d = 6, da = d + 1;
    const double theta = 0.8;
    tu_fixture f;
    tu_fx_init(&f, 600);
    ttt_tensor *q = tu_randn(&f, T, d, 0.4f), *k = tu_randn(&f, T, d, 0.35f), *v = tu_randn(&f, T, d, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.3f, 1.0f);
    /* float64 TTT-Linear without LN: W (d, d), b (d), start at 0 */
    double *W = calloc((size_t)d * d, sizeof *W), *bb = calloc(d, sizeof *bb);
    double *o_ref = malloc(sizeof(double) * T * d), e[16];
    for (int t = 0; t < T; t++) {
        const float *kt = k->data + t * d, *qt = q->data + t * d, *vt = v->data + t * d;
        double lr = theta * eta->data[t];
        for (int j = 0; j < d; j++) { /* e = f(W; k) − v */
            double z = kt[j] + bb[j];
            for (int i = 0; i < d; i++) z += kt[i] * W[i * d + j];
            e[j] = z - vt[j];
        }
        for (int j = 0; j < d; j++) {
            for (int i = 0; i < d; i++) W[i * d + j] -= lr * kt[i] * e[j];
            bb[j] -= lr * e[j];
        }
        for (int j = 0; j < d; j++) { /* o = f(W_t; q) */
            double z = qt[j] + bb[j];
            for (int i = 0; i < d; i++) z += qt[i] * W[i * d + j];
            o_ref[t * d + j] = z;
        }
    }
    /* augmented inputs */
    ttt_tensor *qa = ttt_tensor_2d(&f.ctx, T, da), *ka = ttt_tensor_2d(&f.ctx, T, da);
    ttt_tensor *vr = ttt_sub(&f.ctx, v, k), *beta = ttt_tensor_1d(&f.ctx, T);
    for (int t = 0; t < T; t++) {
        memcpy(qa->data + t * da, q->data + t * d, d * sizeof(float));
        memcpy(ka->data + t * da, k->data + t * d, d * sizeof(float));
        qa->data[t * da + d] = ka->data[t * da + d] = 1.0f;
        beta->data[t] = (float)theta * eta->data[t];
    }
    ttt_layer L;
    ttt_error err = {0};
    ck_assert(ttt_layer_init(&L, "linear", "squared", "sgd", 1, TTT_ORDER_UPDATE_THEN_APPLY,
                             "generic", da, d, &err) == TTT_OK);
    L.lr = (float)theta;
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
    ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, d);
    ck_assert(ttt_layer_forward(&f.ctx, &L, o, &st, qa, ka, vr, eta, NULL, &err) == TTT_OK);
    ttt_tensor *o_gen = ttt_add(&f.ctx, o, q);
    TU_ASSERT_CLOSE(o_gen->data, o_ref, o_gen->n, 1e-6, 2e-5);
    /* the state is [W; b] */
    double *Sref = malloc(sizeof(double) * da * d);
    memcpy(Sref, W, sizeof(double) * d * d);
    memcpy(Sref + d * d, bb, sizeof(double) * d);
    TU_ASSERT_CLOSE(st.W[0]->data, Sref, st.W[0]->n, 1e-6, 2e-5);

    ttt_tensor *S = ttt_tensor_2d(&f.ctx, da, d), *o_dr = ttt_tensor_2d(&f.ctx, T, d);
    ttt_tensor_fill(S, 0.0f);
    ttt_delta_rule_recurrent(o_dr->data, S->data, qa->data, ka->data, vr->data, beta->data, NULL,
                             T, da, d);
    ttt_tensor *o_dn = ttt_add(&f.ctx, o_dr, q);
    TU_ASSERT_CLOSE(o_dn->data, o_ref, o_dn->n, 1e-6, 2e-5);
    TU_ASSERT_CLOSE(S->data, Sref, S->n, 1e-6, 2e-5);
    free(W), free(bb), free(o_ref), free(Sref);
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §5.4: ttt_linear + recon with position_scale inverse and mini-batch b equals the
 * primal formula with E_ij = τ_i lr_j, τ_i = 1/(i+1), lr_j = θ η_j, written here in float64 from
 * §5.4 with a hand-derived LN-reconstruction backward (not the complex step):
 *     Z = K W_0 + b_0,  g_j = LN'(Z_j)ᵀ (LN(Z_j) − (v_j − k_j)),
 *     W_i = W_0 − Σ_{j ≤ i} E_ij k_jᵀ g_j,  b_i = b_0 − Σ_{j ≤ i} E_ij g_j,
 *     o_i = q_i + LN(q_i W_i + b_i),
 * and the block ends at (W_{n−1}, b_{n−1}). The docs/math.md §5.4 dual form
 *     Z̄ = Q W_0 − (E ⊙ tril(Q Kᵀ)) G + b_0 − E G,  o = Q + LN(Z̄)
 * is evaluated as well and must equal the primal in double (1e-10: both are exact formulas).
 * T = 13, b = 4: blocks of 4, 4, 4, 1. Tolerance DRV_RTOL (float32 driver, LN amplification). */
static void ln_fwd_d(double *y, double *rstd, const double *h, int n) {
    double mu = 0, var = 0;
    for (int j = 0; j < n; j++) mu += h[j];
    mu /= n;
    for (int j = 0; j < n; j++) var += (h[j] - mu) * (h[j] - mu);
    var /= n;
    *rstd = 1 / sqrt(var + LN_EPS);
    for (int j = 0; j < n; j++) y[j] = (h[j] - mu) * *rstd;
}

START_TEST(ttt_linear_inverse_position_scale_matches_primal_and_dual_5_4) {
    const int T = 13, d = 6, b = 4;
    const double theta = 0.1;
    tu_fixture f;
    tu_fx_init(&f, 700);
    ttt_tensor *q = tu_randn(&f, T, d, 1.0f), *k = tu_randn(&f, T, d, 1.0f), *v = tu_randn(&f, T, d, 1.0f);
    ttt_tensor *eta = tu_uniform(&f, T, 0.5f, 1.5f);
    drive_cfg c = {M_TTT_LINEAR, L_RECON, b, TTT_ORDER_UPDATE_THEN_APPLY, 1, theta, T};
    drive_out dr = lib_drive(&f, &c, d, d, q, k, v, eta, 1.0);

    double W0[36], b0[6], Wi[36], bi[6], G[4][6], Z[6], y[6], rs, Zb[4][6];
    double *o_ref = malloc(sizeof(double) * T * d), *o_dual = malloc(sizeof(double) * T * d);
    memcpy(W0, dr.W0, sizeof W0);
    memcpy(b0, dr.W0 + d * d, sizeof b0);
    for (int t0 = 0; t0 < T; t0 += b) {
        const int n = t0 + b <= T ? b : T - t0;
        double E[4][4] = {{0}};
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) E[i][j] = (1.0 / (i + 1)) * theta * eta->data[t0 + j];
        /* G: gradient rows of the reconstruction loss at Z = K W_0 + b_0 */
        for (int j = 0; j < n; j++) {
            const float *kj = k->data + (t0 + j) * d, *vj = v->data + (t0 + j) * d;
            for (int c2 = 0; c2 < d; c2++) {
                Z[c2] = b0[c2];
                for (int a = 0; a < d; a++) Z[c2] += kj[a] * W0[a * d + c2];
            }
            ln_fwd_d(y, &rs, Z, d);
            double dy[6], mdy = 0, mdyy = 0;
            for (int c2 = 0; c2 < d; c2++) {
                dy[c2] = y[c2] - (vj[c2] - kj[c2]);
                mdy += dy[c2] / d;
                mdyy += dy[c2] * y[c2] / d;
            }
            for (int c2 = 0; c2 < d; c2++) G[j][c2] = rs * (dy[c2] - mdy - y[c2] * mdyy);
        }
        /* primal: materialize W_i, b_i per token */
        for (int i = 0; i < n; i++) {
            memcpy(Wi, W0, sizeof Wi);
            memcpy(bi, b0, sizeof bi);
            for (int j = 0; j <= i; j++) {
                const float *kj = k->data + (t0 + j) * d;
                for (int a = 0; a < d; a++)
                    for (int c2 = 0; c2 < d; c2++) Wi[a * d + c2] -= E[i][j] * kj[a] * G[j][c2];
                for (int c2 = 0; c2 < d; c2++) bi[c2] -= E[i][j] * G[j][c2];
            }
            const float *qi = q->data + (t0 + i) * d;
            for (int c2 = 0; c2 < d; c2++) {
                Z[c2] = bi[c2];
                for (int a = 0; a < d; a++) Z[c2] += qi[a] * Wi[a * d + c2];
            }
            ln_fwd_d(y, &rs, Z, d);
            for (int c2 = 0; c2 < d; c2++) o_ref[(t0 + i) * d + c2] = qi[c2] + y[c2];
        }
        /* dual: Z̄ = Q W_0 − (E ⊙ tril(Q Kᵀ)) G + b_0 − E G */
        for (int i = 0; i < n; i++) {
            const float *qi = q->data + (t0 + i) * d;
            for (int c2 = 0; c2 < d; c2++) {
                double s = b0[c2];
                for (int a = 0; a < d; a++) s += qi[a] * W0[a * d + c2];
                for (int j = 0; j <= i; j++) {
                    const float *kj = k->data + (t0 + j) * d;
                    double qk = 0;
                    for (int a = 0; a < d; a++) qk += (double)qi[a] * kj[a];
                    s -= E[i][j] * qk * G[j][c2] + E[i][j] * G[j][c2];
                }
                Zb[i][c2] = s;
            }
            ln_fwd_d(y, &rs, Zb[i], d);
            for (int c2 = 0; c2 < d; c2++) o_dual[(t0 + i) * d + c2] = qi[c2] + y[c2];
        }
        /* block end: W_b = W_0 − (E_{n−1,·}ᵀ ⊙ K)ᵀ G, b_b = b_0 − E_{n−1,·} G */
        for (int j = 0; j < n; j++) {
            const float *kj = k->data + (t0 + j) * d;
            for (int a = 0; a < d; a++)
                for (int c2 = 0; c2 < d; c2++) W0[a * d + c2] -= E[n - 1][j] * kj[a] * G[j][c2];
            for (int c2 = 0; c2 < d; c2++) b0[c2] -= E[n - 1][j] * G[j][c2];
        }
    }
    for (int i = 0; i < T * d; i++)
        ck_assert_msg(fabs(o_dual[i] - o_ref[i]) <= 1e-10 * (1 + fabs(o_ref[i])),
                      "dual %.17g vs primal %.17g at %d", o_dual[i], o_ref[i], i);
    TU_ASSERT_CLOSE(dr.o->data, o_ref, (size_t)T * d, DRV_ATOL, DRV_RTOL);
    double Wend[42];
    memcpy(Wend, W0, sizeof W0);
    memcpy(Wend + 36, b0, sizeof b0);
    TU_ASSERT_CLOSE(dr.W_final, Wend, 42, DRV_ATOL, DRV_RTOL);
    free(o_ref), free(o_dual), free(dr.W0), free(dr.W_final);
    tu_fx_free(&f);
}
END_TEST

static Suite *models_suite(void) {
    Suite *s = suite_create("models");
    TCase *tc = tcase_create("models");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, models_and_losses_are_registered_with_their_shapes);
    tcase_add_test(tc, recon_loss_is_the_squared_loss_of_the_residual_view);
    tcase_add_test(tc, init_is_seeded_and_has_the_documented_scale);
    tcase_add_test(tc, reference_forward_equals_apply);
    tcase_add_test(tc, inner_gradients_match_finite_differences);
    tcase_add_test(tc, complex_step_matches_central_differences);
    tcase_add_test(tc, swiglu_dot_gradient_matches_math_md_closed_form);
    tcase_add_test(tc, mini_batch_and_ordering_match_primal_definition);
    tcase_add_test(tc, mini_batch_comparison_detects_wrong_semantics);
    tcase_add_test(tc, full_batch_equals_one_gradient_step);
    tcase_add_test(tc, ttt_linear_without_ln_b1_equals_deltanet);
    tcase_add_test(tc, ttt_linear_inverse_position_scale_matches_primal_and_dual_5_4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(models_suite()); }
