/* TTT-Linear: mini-batch dual form = primal form (docs/math.md §5.4, §6 item 4), both in float32,
 * against float64 evaluations of the rule written here independently: a block primal that
 * materializes every W_i, and (for b = 1) the plain per-token online-SGD recurrence. The LN
 * reconstruction gradient of the references is an explicit Jacobian product, itself checked
 * against finite differences of the loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "ttt_dual.h"

/* Tolerances (max-abs error ≤ ATOL + RTOL_TD(T, d)·max|reference|), float32 against float64
 * (docs/hardening.md "Portable tolerances"). Outputs are q + LN(z̄) with LN(z̄) of unit scale and
 * |q| up to ~4.5, weights are O(1). A token rounds each state entry through z = kW + b (d + 1
 * terms), the layer norm (its mean and variance, d terms each, and 3 more), the loss gradient (2),
 * the norm's backward (two d-term sums and 4 more) and the block's masked products (at most
 * min(b, T) ≤ T terms): 4d + T + 10 roundings of at most ε = 2^-24 of the entry's scale,
 * independent from token to token. The problem's scales (lr·‖k‖² ≤ 1, z of unit scale, so the
 * norm's curvature is ≤ 2) keep the inner step non-expansive, and the errors add up over the T
 * tokens as a random walk of deviation ε·√((4d + T + 10)·T). c = 6: the largest of the ≤ 100·32
 * entries compared lies within √(2 ln 3200) ≈ 4 deviations. The bound does not credit the inner
 * loop's contraction (measured ≤ 2.7e-7 of max|reference|, against 5.5e-5 at T = 100, d = 32),
 * so it is loose: one token's learning rate 0.1 % off moves o and W by 1e-5 of their scale,
 * under it; 1 % off (1e-4) is rejected (perturbed_dual_is_detected). */
#define RTOL_TD(T, d) (6 * 0x1p-24 * sqrt((4.0 * (d) + (T) + 10) * (double)(T)))
#define ATOL 1e-7
#define EPS ((double)TTT_LINEAR_DUAL_LN_EPS)

static float *uniform(tu_fixture *f, size_t n, float lo, float hi) {
    float *x = ttt_arena_alloc(&f->arena, n * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, x, n, lo, hi);
    return x;
}

/* ---- float64 references ---- */

/* LN(z) with γ = 1, β = 0 into y; returns 1/σ. */
static double ref_ln(double *y, const double *z, int d) {
    double mu = 0, var = 0;
    for (int j = 0; j < d; j++) mu += z[j];
    mu /= d;
    for (int j = 0; j < d; j++) var += (z[j] - mu) * (z[j] - mu);
    double r = 1.0 / sqrt(var / d + EPS);
    for (int j = 0; j < d; j++) y[j] = (z[j] - mu) * r;
    return r;
}

/* ℓ(z) = ½‖LN(z) − (v − k)‖² */
static double ref_loss(const double *z, const float *k, const float *v, int d) {
    double y[256], s = 0;
    ref_ln(y, z, d);
    for (int j = 0; j < d; j++) {
        double e = y[j] - ((double)v[j] - k[j]);
        s += 0.5 * e * e;
    }
    return s;
}

/* g = ∂ℓ/∂z = Jᵀ (LN(z) − (v − k)) with the explicit LN Jacobian
 * J_ab = ∂x̂_a/∂z_b = (1/σ)(δ_ab − 1/d − x̂_a x̂_b/d). */
static void ref_grad(double *g, const double *z, const float *k, const float *v, int d) {
    double y[256], e[256];
    double r = ref_ln(y, z, d);
    for (int a = 0; a < d; a++) e[a] = y[a] - ((double)v[a] - k[a]);
    for (int b = 0; b < d; b++) {
        double s = 0;
        for (int a = 0; a < d; a++) s += r * ((a == b) - 1.0 / d - y[a] * y[b] / d) * e[a];
        g[b] = s;
    }
}

/* z = x W + b */
static void ref_affine(double *z, const float *x, const double *W, const double *b, int d) {
    for (int j = 0; j < d; j++) {
        double s = b[j];
        for (int i = 0; i < d; i++) s += (double)x[i] * W[i * d + j];
        z[j] = s;
    }
}

/* o = x + LN(x W + b) */
static void ref_read(double *o, const float *x, const double *W, const double *b, int d) {
    double z[256], y[256];
    ref_affine(z, x, W, b, d);
    ref_ln(y, z, d);
    for (int j = 0; j < d; j++) o[j] = x[j] + y[j];
}

/* Block primal (docs/math.md §1, §5.4): gradients of the block at (W_0, b_0); token i reads
 * W_i = W_0 − Σ_{j ≤ i} τ_i lr_j k_jᵀ g_j (and b_i), each sum formed from scratch; the block
 * ends with W_{n−1}. W (d, d), bias (d) in/out. */
static void ref_block(double *o, double *W, double *bias, const float *q, const float *k,
                      const float *v, const float *lr, int T, int d, int bsz) {
    double *g = malloc(sizeof(double) * bsz * d), *Wi = malloc(sizeof(double) * d * d);
    double bi[256], z[256];
    for (int t0 = 0; t0 < T; t0 += bsz) {
        int n = t0 + bsz <= T ? bsz : T - t0;
        for (int j = 0; j < n; j++) {
            ref_affine(z, k + (size_t)(t0 + j) * d, W, bias, d);
            ref_grad(g + (size_t)j * d, z, k + (size_t)(t0 + j) * d, v + (size_t)(t0 + j) * d, d);
        }
        for (int i = 0; i < n; i++) {
            double tau = 1.0 / (i + 1);
            memcpy(Wi, W, sizeof(double) * d * d);
            memcpy(bi, bias, sizeof(double) * d);
            for (int j = 0; j <= i; j++) {
                double e = tau * (lr ? lr[t0 + j] : 1.0);
                const float *kj = k + (size_t)(t0 + j) * d;
                for (int a = 0; a < d; a++) {
                    for (int c = 0; c < d; c++) Wi[a * d + c] -= e * kj[a] * g[j * d + c];
                }
                for (int c = 0; c < d; c++) bi[c] -= e * g[j * d + c];
            }
            ref_read(o + (size_t)(t0 + i) * d, q + (size_t)(t0 + i) * d, Wi, bi, d);
        }
        memcpy(W, Wi, sizeof(double) * d * d);
        memcpy(bias, bi, sizeof(double) * d);
    }
    free(g), free(Wi);
}

/* Per-token online SGD (docs/math.md §1, b = 1): W ← W − lr_t ∇_W ℓ_t(W), b likewise,
 * o_t = f(W_t; q_t). */
static void ref_per_token(double *o, double *W, double *bias, const float *q, const float *k,
                          const float *v, const float *lr, int T, int d) {
    double z[256], g[256];
    for (int t = 0; t < T; t++) {
        const float *kt = k + (size_t)t * d;
        ref_affine(z, kt, W, bias, d);
        ref_grad(g, z, kt, v + (size_t)t * d, d);
        double l = lr ? lr[t] : 1.0;
        for (int a = 0; a < d; a++)
            for (int c = 0; c < d; c++) W[a * d + c] -= l * kt[a] * g[c];
        for (int c = 0; c < d; c++) bias[c] -= l * g[c];
        ref_read(o + (size_t)t * d, q + (size_t)t * d, W, bias, d);
    }
}

/* ---- problem instances ---- */

typedef struct problem {
    int T, d;
    float *q, *k, *v, *lr, *W0, *b0;
} problem;

/* Scales keep the inner loop in its working regime: z = k W_0 has unit-scale entries
 * (W_0 ~ N(0, 1/d), k ~ N(0, 1)), and lr·‖k‖² ≈ lr·d ≤ 1 (TTT-Linear's η = base_lr/d). */
static void problem_make(tu_fixture *f, problem *p, int T, int d) {
    p->T = T, p->d = d;
    p->q = tu_randn_buf(f, (size_t)T * d, 1.0f);
    p->k = tu_randn_buf(f, (size_t)T * d, 1.0f);
    p->v = tu_randn_buf(f, (size_t)T * d, 1.0f);
    p->lr = uniform(f, T, 0.1f / d, 1.0f / d);
    p->W0 = tu_randn_buf(f, (size_t)d * d, 1.0f / sqrtf((float)d));
    p->b0 = tu_randn_buf(f, d, 0.1f);
}

static void ref_state(double **W, double **b, const problem *p) {
    *W = malloc(sizeof(double) * p->d * p->d);
    *b = malloc(sizeof(double) * p->d);
    for (int i = 0; i < p->d * p->d; i++) (*W)[i] = p->W0[i];
    for (int i = 0; i < p->d; i++) (*b)[i] = p->b0[i];
}

static void check_close_at(const char *what, const float *got, const double *want, size_t n,
                           double rtol) {
    char msg[512];
    int ok = tu_close(got, want, n, ATOL, rtol, msg, sizeof msg);
    printf("measured %-36s %s\n", what, msg);
    fflush(stdout);
    ck_assert_msg(ok, "%s: %s", what, msg);
}

/* Every call site has its sequence length T and head size d in scope. */
#define check_close(what, got, want, n) check_close_at((what), (got), (want), (n), RTOL_TD(T, d))

typedef void (*ttt_form_fn)(ttt_ctx *, float *, float *, float *, const float *, const float *,
                            const float *, const float *, int, int, int);

/* Run a form over [a, b) from the state (W, bias); checks the arena is left as found. */
static void run_form(tu_fixture *f, ttt_form_fn fn, const problem *p, float *o, float *W,
                     float *bias, int a, int b, int bsz) {
    const int d = p->d;
    size_t fp0 = ttt_arena_footprint(&f->arena);
    fn(&f->ctx, o + (size_t)a * d, W, bias, p->q + (size_t)a * d, p->k + (size_t)a * d,
       p->v + (size_t)a * d, p->lr + a, b - a, d, bsz);
    ck_assert_uint_eq(ttt_arena_footprint(&f->arena), fp0);
}

/* ---- tests ---- */

/* The references' gradient is right: central differences of the loss (float64, h = 1e-5,
 * truncation error O(h²) ≈ 1e-10 relative). */
START_TEST(reference_gradient_matches_finite_differences) {
    const int d = 16;
    tu_fixture f;
    tu_fx_init(&f, 200);
    float *k = tu_randn_buf(&f, d, 1.0f), *v = tu_randn_buf(&f, d, 1.0f), *zf = tu_randn_buf(&f, d, 1.0f);
    double z[16], g[16], zp[16];
    for (int j = 0; j < d; j++) z[j] = zf[j];
    ref_grad(g, z, k, v, d);
    double maxerr = 0, maxg = 0;
    for (int j = 0; j < d; j++) {
        const double h = 1e-5;
        memcpy(zp, z, sizeof z);
        zp[j] = z[j] + h;
        double lp = ref_loss(zp, k, v, d);
        zp[j] = z[j] - h;
        double lm = ref_loss(zp, k, v, d);
        double fd = (lp - lm) / (2 * h);
        maxerr = fmax(maxerr, fabs(fd - g[j]));
        maxg = fmax(maxg, fabs(g[j]));
    }
    printf("measured %-36s max-abs %.3e (max |g| %.3e)\n", "reference grad vs finite diff", maxerr,
           maxg);
    fflush(stdout);
    ck_assert_msg(maxerr < 1e-8 * (1 + maxg), "finite differences: %.3e", maxerr);
    tu_fx_free(&f);
}
END_TEST

/* dual = primal = float64 block primal, for several b (1, b not dividing T, b = T, b > T). */
START_TEST(dual_and_primal_match_float64) {
    const int T = 100, d = 32;
    const int bs[] = {1, 3, 8, 16, 37, 100, 128};
    tu_fixture f;
    tu_fx_init(&f, 201);
    problem p;
    problem_make(&f, &p, T, d);
    float *o = malloc(sizeof(float) * T * d), *W = malloc(sizeof(float) * d * d);
    float *b = malloc(sizeof(float) * d);
    double *o_ref = malloc(sizeof(double) * T * d);
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) {
        double *W_ref, *b_ref;
        ref_state(&W_ref, &b_ref, &p);
        ref_block(o_ref, W_ref, b_ref, p.q, p.k, p.v, p.lr, T, d, bs[i]);
        for (int form = 0; form < 2; form++) {
            memcpy(W, p.W0, sizeof(float) * d * d);
            memcpy(b, p.b0, sizeof(float) * d);
            memset(o, 0xff, sizeof(float) * T * d); /* NaN: every output must be written */
            run_form(&f, form ? ttt_ttt_linear_primal : ttt_ttt_linear_dual, &p, o, W, b, 0, T,
                     bs[i]);
            char what[64];
            const char *nm = form ? "primal" : "dual";
            snprintf(what, sizeof what, "%s b=%d: o", nm, bs[i]);
            check_close(what, o, o_ref, (size_t)T * d);
            snprintf(what, sizeof what, "%s b=%d: W", nm, bs[i]);
            check_close(what, W, W_ref, (size_t)d * d);
            snprintf(what, sizeof what, "%s b=%d: bias", nm, bs[i]);
            check_close(what, b, b_ref, d);
        }
        free(W_ref), free(b_ref);
    }
    free(o), free(W), free(b), free(o_ref);
    tu_fx_free(&f);
}
END_TEST

/* b = 1 is the per-token rule (τ_0 = 1): dual form vs the plain online-SGD recurrence. */
START_TEST(dual_b1_is_per_token_rule) {
    const int T = 100, d = 32;
    tu_fixture f;
    tu_fx_init(&f, 202);
    problem p;
    problem_make(&f, &p, T, d);
    double *W_ref, *b_ref, *o_ref = malloc(sizeof(double) * T * d);
    ref_state(&W_ref, &b_ref, &p);
    ref_per_token(o_ref, W_ref, b_ref, p.q, p.k, p.v, p.lr, T, d);
    float *o = malloc(sizeof(float) * T * d), *W = malloc(sizeof(float) * d * d);
    float *b = malloc(sizeof(float) * d);
    memcpy(W, p.W0, sizeof(float) * d * d);
    memcpy(b, p.b0, sizeof(float) * d);
    run_form(&f, ttt_ttt_linear_dual, &p, o, W, b, 0, T, 1);
    check_close("dual b=1 vs per-token: o", o, o_ref, (size_t)T * d);
    check_close("dual b=1 vs per-token: W", W, W_ref, (size_t)d * d);
    check_close("dual b=1 vs per-token: bias", b, b_ref, d);
    /* and b = 16 is a different rule (the comparison can tell them apart) */
    memcpy(W, p.W0, sizeof(float) * d * d);
    memcpy(b, p.b0, sizeof(float) * d);
    run_form(&f, ttt_ttt_linear_dual, &p, o, W, b, 0, T, 16);
    ck_assert(!tu_close(o, o_ref, (size_t)T * d, ATOL, RTOL_TD(T, d), NULL, 0));
    free(o), free(W), free(b), free(o_ref), free(W_ref), free(b_ref);
    tu_fx_free(&f);
}
END_TEST

/* State carried across calls: a split at a block boundary is one pass, to the last bit (the same
 * operations in the same order); a split inside a block starts a new block at the split, which
 * is what the float64 reference run in the same two pieces computes. */
START_TEST(dual_state_carried_across_calls) {
    const int T = 100, d = 16, bsz = 16;
    tu_fixture f;
    tu_fx_init(&f, 203);
    problem p;
    problem_make(&f, &p, T, d);
    float *o1 = malloc(sizeof(float) * T * d), *W1 = malloc(sizeof(float) * d * d);
    float *o2 = malloc(sizeof(float) * T * d), *W2 = malloc(sizeof(float) * d * d);
    float b1[16], b2[16];
    for (int form = 0; form < 2; form++) {
        ttt_form_fn fn = form ? ttt_ttt_linear_primal : ttt_ttt_linear_dual;
        memcpy(W1, p.W0, sizeof(float) * d * d), memcpy(b1, p.b0, sizeof b1);
        run_form(&f, fn, &p, o1, W1, b1, 0, T, bsz);
        memcpy(W2, p.W0, sizeof(float) * d * d), memcpy(b2, p.b0, sizeof b2);
        run_form(&f, fn, &p, o2, W2, b2, 0, 48, bsz);
        run_form(&f, fn, &p, o2, W2, b2, 48, T, bsz);
        ck_assert_int_eq(memcmp(o1, o2, sizeof(float) * T * d), 0);
        ck_assert_int_eq(memcmp(W1, W2, sizeof(float) * d * d), 0);
        ck_assert_int_eq(memcmp(b1, b2, sizeof b1), 0);

        const int T1 = 41; /* inside the third block */
        double *W_ref, *b_ref, *o_ref = malloc(sizeof(double) * T * d);
        ref_state(&W_ref, &b_ref, &p);
        ref_block(o_ref, W_ref, b_ref, p.q, p.k, p.v, p.lr, T1, d, bsz);
        ref_block(o_ref + (size_t)T1 * d, W_ref, b_ref, p.q + (size_t)T1 * d,
                  p.k + (size_t)T1 * d, p.v + (size_t)T1 * d, p.lr + T1, T - T1, d, bsz);
        memcpy(W2, p.W0, sizeof(float) * d * d), memcpy(b2, p.b0, sizeof b2);
        run_form(&f, fn, &p, o2, W2, b2, 0, T1, bsz);
        run_form(&f, fn, &p, o2, W2, b2, T1, T, bsz);
        check_close(form ? "primal split 41+59: o" : "dual split 41+59: o", o2, o_ref,
                    (size_t)T * d);
        check_close(form ? "primal split 41+59: W" : "dual split 41+59: W", W2, W_ref,
                    (size_t)d * d);
        free(W_ref), free(b_ref), free(o_ref);
    }
    free(o1), free(W1), free(o2), free(W2);
    tu_fx_free(&f);
}
END_TEST

/* The tolerance can fail: the dual form with one token's learning rate 1 % off is rejected. */
START_TEST(perturbed_dual_is_detected) {
    const int T = 100, d = 32, bsz = 16;
    tu_fixture f;
    tu_fx_init(&f, 204);
    problem p;
    problem_make(&f, &p, T, d);
    double *W_ref, *b_ref, *o_ref = malloc(sizeof(double) * T * d);
    ref_state(&W_ref, &b_ref, &p);
    ref_block(o_ref, W_ref, b_ref, p.q, p.k, p.v, p.lr, T, d, bsz);
    p.lr[70] *= 0.99f;
    float *o = malloc(sizeof(float) * T * d), *W = malloc(sizeof(float) * d * d);
    float *b = malloc(sizeof(float) * d);
    memcpy(W, p.W0, sizeof(float) * d * d);
    memcpy(b, p.b0, sizeof(float) * d);
    run_form(&f, ttt_ttt_linear_dual, &p, o, W, b, 0, T, bsz);
    char msg[512];
    ck_assert(!tu_close(o, o_ref, (size_t)T * d, ATOL, RTOL_TD(T, d), msg, sizeof msg));
    printf("measured %-36s %s\n", "perturbed lr[70] (must fail): o", msg);
    ck_assert(!tu_close(W, W_ref, (size_t)d * d, ATOL, RTOL_TD(T, d), msg, sizeof msg));
    printf("measured %-36s %s\n", "perturbed lr[70] (must fail): W", msg);
    fflush(stdout);
    free(o), free(W), free(b), free(o_ref), free(W_ref), free(b_ref);
    tu_fx_free(&f);
}
END_TEST

/* The generic TTT driver with (model ttt_linear, loss squared, sgd θ = 1, b, position_scale
 * inverse, η = lr) from the same state: equal to the float64 block primal and to the dual form.
 * (The squared loss on z = k + LN(kW + b) is TTT's reconstruction loss ½‖LN(kW + b) − (v − k)‖².) */
START_TEST(dual_matches_generic_driver) {
    const int T = 50, d = 16;
    const int bs[] = {1, 7, 16, 64};
    ck_assert_ptr_nonnull(ttt_model_find("ttt_linear"));
    tu_fixture f;
    tu_fx_init(&f, 205);
    problem p;
    problem_make(&f, &p, T, d);
    ttt_tensor *q = ttt_tensor_2d(&f.ctx, T, d), *k = ttt_tensor_2d(&f.ctx, T, d);
    ttt_tensor *v = ttt_tensor_2d(&f.ctx, T, d), *eta = ttt_tensor_1d(&f.ctx, T);
    memcpy(q->data, p.q, sizeof(float) * T * d), memcpy(k->data, p.k, sizeof(float) * T * d);
    memcpy(v->data, p.v, sizeof(float) * T * d), memcpy(eta->data, p.lr, sizeof(float) * T);
    float *o = malloc(sizeof(float) * T * d), *W = malloc(sizeof(float) * d * d);
    float *b = malloc(sizeof(float) * d);
    double *o_ref = malloc(sizeof(double) * T * d);
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) {
        ttt_layer L;
        ttt_error err = {0};
        ck_assert_msg(ttt_layer_init(&L, "ttt_linear", "squared", "sgd", bs[i],
                                     TTT_ORDER_UPDATE_THEN_APPLY, "generic", d, d,
                                     &err) == TTT_OK,
                      "%s", err.msg);
        L.pos_inverse = 1; /* τ_i = 1/(i+1) */
        ttt_layer_state st;
        ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
        ck_assert_int_eq(st.n_w, 2);
        ck_assert_uint_eq(st.W[0]->n, (size_t)d * d);
        ck_assert_uint_eq(st.W[1]->n, (size_t)d);
        memcpy(st.W[0]->data, p.W0, sizeof(float) * d * d);
        memcpy(st.W[1]->data, p.b0, sizeof(float) * d);
        ttt_tensor *og = ttt_tensor_2d(&f.ctx, T, d);
        ck_assert_msg(ttt_layer_forward(&f.ctx, &L, og, &st, q, k, v, eta, NULL, &err) == TTT_OK,
                      "%s", err.msg);

        double *W_ref, *b_ref;
        ref_state(&W_ref, &b_ref, &p);
        ref_block(o_ref, W_ref, b_ref, p.q, p.k, p.v, p.lr, T, d, bs[i]);
        char what[64];
        snprintf(what, sizeof what, "generic ttt_linear b=%d: o", bs[i]);
        check_close(what, og->data, o_ref, (size_t)T * d);
        snprintf(what, sizeof what, "generic ttt_linear b=%d: W", bs[i]);
        check_close(what, st.W[0]->data, W_ref, (size_t)d * d);
        snprintf(what, sizeof what, "generic ttt_linear b=%d: bias", bs[i]);
        check_close(what, st.W[1]->data, b_ref, d);

        memcpy(W, p.W0, sizeof(float) * d * d);
        memcpy(b, p.b0, sizeof(float) * d);
        run_form(&f, ttt_ttt_linear_dual, &p, o, W, b, 0, T, bs[i]);
        /* the dual form against the same float64 solution (never against the driver's float32
         * result: each float32 path is bounded by the reference on its own) */
        snprintf(what, sizeof what, "dual ttt_linear b=%d: o", bs[i]);
        check_close(what, o, o_ref, (size_t)T * d);
        snprintf(what, sizeof what, "dual ttt_linear b=%d: W", bs[i]);
        check_close(what, W, W_ref, (size_t)d * d);
        snprintf(what, sizeof what, "dual ttt_linear b=%d: bias", bs[i]);
        check_close(what, b, b_ref, d);
        free(W_ref), free(b_ref);
    }
    free(o), free(W), free(b), free(o_ref);
    tu_fx_free(&f);
}
END_TEST

static Suite *dual_suite(void) {
    Suite *s = suite_create("dual");
    TCase *tc = tcase_create("ttt_linear");
    tcase_add_test(tc, reference_gradient_matches_finite_differences);
    tcase_add_test(tc, dual_and_primal_match_float64);
    tcase_add_test(tc, dual_b1_is_per_token_rule);
    tcase_add_test(tc, dual_state_carried_across_calls);
    tcase_add_test(tc, perturbed_dual_is_detected);
    tcase_add_test(tc, dual_matches_generic_driver);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(dual_suite()); }
