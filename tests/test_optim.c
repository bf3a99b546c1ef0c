/* The inner optimizers of docs/math.md §3 (momentum, muon, large_batch, adam, lion, sgd with l2) and the
 * Newton–Schulz orthogonalization, each against a float64 evaluation of its rule written here
 * independently of the library (docs/math.md §6 items 3, 5–8), plus their YAML options.
 *
 * The layers are built from YAML (ttt_cfg_load_string + ttt_layer_parse) so that optimizer options
 * go through the same path as an experiment file; the linear model with the squared loss on
 * L2-normalized keys is the test bed (its gradient depends on W, so gradient points matter). */
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "newton_schulz.h"
#include "ns_bound.h"
#include "testutil.h"
#include "internal.h"

/* A float32 run against the float64 recurrence, relative to the largest entry (docs/hardening.md
 * "Portable tolerances"): a token rounds each state entry through at most 4d + T + 10 operations
 * of at most ε = 2^-24 of its scale (the d-term product, a norm's sums and their backward, a
 * block's sums of ≤ T terms, some ten element-wise), independent from token to token; with
 * unit-scale keys, β‖k‖² ≤ 2 and decays ≤ 1 the step is non-expansive, so they add up over T
 * tokens as a random walk of deviation ε·√((4d + T + 10)·T). RTOL takes the suite's largest case,
 * T = 41 and d = 8 (the bound grows with both), and c = 6: the largest of the ≤ 41·8 entries lies
 * within √(2 ln 328) ≈ 3.4 deviations: 2.1e-5, far below a real discrepancy (a dropped term, a
 * gradient at the wrong point or an off-by-one token changes outputs at O(1e-2..1) relative
 * scale; each test below also shows that a nearby wrong rule is rejected). Adam's step adds its
 * own conditioning (adam_matches_reference), Newton–Schulz its gain (ns_rtol,
 * tests/ns_bound.h). Two float32 runs compared with each other get the sum of their bounds,
 * 2·RTOL. */
#define RTOL (6 * 0x1p-24 * sqrt((4.0 * 8 + 41 + 10) * 41))
#define ATOL 1e-6

/* Build a layer from the body of a `layer:` mapping in flow style, e.g.
 * "model: linear, loss: squared, optimizer: {name: momentum, momentum: 0.5}". */
static ttt_status layer_from_yaml(ttt_layer *L, const char *body, int dk, int dv,
                                  ttt_error *err) {
    char text[1024];
    snprintf(text, sizeof text, "layer: {%s}\n", body);
    ttt_cfg_node *root = NULL;
    ttt_status s = ttt_cfg_load_string(text, "opt.yaml", &root, err);
    if (s != TTT_OK) return s;
    s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), dk, dv, L, err);
    ttt_cfg_free(root);
    return s;
}
static void make_layer(ttt_layer *L, const char *body, int dk, int dv) {
    ttt_error err = {0};
    ttt_status s = layer_from_yaml(L, body, dk, dv, &err);
    ck_assert_msg(s == TTT_OK, "layer {%s}: %s", body, err.msg);
}

/* Run a layer over a sequence from a state (initialized here when st->n_w == 0). */
static ttt_tensor *forward(tu_fixture *f, const ttt_layer *L, ttt_layer_state *st,
                           const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v,
                           const ttt_tensor *eta, const ttt_tensor *la) {
    if (st->n_w == 0) ttt_layer_state_init(&f->ctx, L, st, &f->rng);
    ttt_tensor *o = ttt_tensor_2d(&f->ctx, TTT_ROWS(k), L->d_v);
    ttt_error err = {0};
    ttt_status s = ttt_layer_forward(&f->ctx, L, o, st, q, k, v, eta, la, &err);
    ck_assert_msg(s == TTT_OK, "forward failed: %s", err.msg);
    return o;
}

/* ---- small float64 helpers ---- */

static double *dzeros(size_t n) { return calloc(n, sizeof(double)); }
static double *dcopy_f(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
/* o = x W for a row x (dk) and W (dk, dv). */
static void drow_mat(double *o, const float *x, const double *W, int dk, int dv) {
    for (int j = 0; j < dv; j++) {
        double s = 0;
        for (int i = 0; i < dk; i++) s += x[i] * W[i * dv + j];
        o[j] = s;
    }
}
/* G += w · kᵀ(k W − v): the squared-loss gradient of one pair at W, weighted. */
static void dadd_sq_grad(double *G, const double *W, const float *kt, const float *vt, double w,
                         int dk, int dv) {
    double e[64];
    ck_assert(dv <= 64);
    drow_mat(e, kt, W, dk, dv);
    for (int j = 0; j < dv; j++) e[j] -= vt[j];
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) G[i * dv + j] += w * kt[i] * e[j];
}
/* C (m, n) = A (m, p) · B (p, n) */
static void dmatmul(double *C, const double *A, const double *B, int m, int p, int n) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int r = 0; r < p; r++) s += A[i * p + r] * B[r * n + j];
            C[i * n + j] = s;
        }
}

/* Newton–Schulz in float64, written from docs/math.md §3: X = A/(‖A‖_F + 1e-7), transposed to
 * rows ≤ cols, `steps` times P = X Xᵀ, X ← aX + (bP + cP²)X. Coefficients passed per step. */
static void dns(double *out, const double *A, int r, int c, const double (*abc)[3], int steps) {
    const int tr = r > c, m = tr ? c : r, n = tr ? r : c;
    double *X = malloc(sizeof(double) * m * n), *P = malloc(sizeof(double) * m * m);
    double *P2 = malloc(sizeof(double) * m * m), *BX = malloc(sizeof(double) * m * n);
    double nrm = 0;
    for (int i = 0; i < r * c; i++) nrm += A[i] * A[i];
    nrm = sqrt(nrm) + 1e-7;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) X[tr ? j * n + i : i * n + j] = A[i * c + j] / nrm;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int r2 = 0; r2 < n; r2++) acc += X[i * n + r2] * X[j * n + r2];
                P[i * m + j] = acc;
            }
        dmatmul(P2, P, P, m, m, m);
        for (int i = 0; i < m * m; i++) P2[i] = abc[s][1] * P[i] + abc[s][2] * P2[i];
        dmatmul(BX, P2, X, m, m, n);
        for (int i = 0; i < m * n; i++) X[i] = abc[s][0] * X[i] + BX[i];
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) out[i * c + j] = X[tr ? j * n + i : i * n + j];
    free(X), free(P), free(P2), free(BX);
}

static const double MUON_ABC[3] = {3.4445, -4.7750, 2.0315};
static const double LACT_ABC[5][3] = {{4.0848, -6.8946, 2.9270}, {3.9505, -6.3029, 2.6377},
                                      {3.7418, -5.5913, 2.3037}, {2.8769, -3.1427, 1.2046},
                                      {2.8366, -3.0525, 1.2012}};
/* Per-step coefficient table for the reference (lact: the last tuple repeated). */
static void coeff_table(double (*abc)[3], int steps, const char *set) {
    for (int s = 0; s < steps; s++) {
        const double *c = strcmp(set, "lact") == 0    ? LACT_ABC[s < 4 ? s : 4]
                          : strcmp(set, "cubic") == 0 ? (const double[3]){1.5, -0.5, 0.0}
                                                      : MUON_ABC;
        memcpy(abc[s], c, sizeof(double) * 3);
    }
}
/* The scalar iteration x ← a x + b x³ + c x⁵ (what NS does to each singular value). */
static double scalar_ns(double x, const double (*abc)[3], int steps) {
    for (int s = 0; s < steps; s++)
        x = abc[s][0] * x + abc[s][1] * x * x * x + abc[s][2] * pow(x, 5);
    return x;
}

/* SVD of a float64 (m, n) matrix: U (m, p), s (p), Vt (p, n), p = min(m, n). */
static void dsvd(double *U, double *s, double *Vt, const double *A, int m, int n) {
    const int p = m < n ? m : n;
    double *a = malloc(sizeof(double) * m * n), *superb = malloc(sizeof(double) * (p + 1));
    memcpy(a, A, sizeof(double) * m * n);
    lapack_int info =
        LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'S', 'S', m, n, a, n, s, U, p, Vt, n, superb);
    ck_assert_int_eq(info, 0);
    free(a), free(superb);
}

/* ============================================================================================ */
/* momentum (Titans)                                                                             */

/* Float64 Titans recurrence with gradients at the start of chunks of C tokens (C = 1: the plain
 * per-token recurrence of docs/math.md §3), decoupled decay:
 *     g_t = η_t k_tᵀ(k_t W_c − v_t)   (W_c: weights at the chunk start)
 *     M ← μM − θ g_t;   W ← α_t W + M   (nesterov: W ← α_t W + μM − θ g_t);   o_t = q_t W. */
static void ref_momentum(double *o, double *W, double *M, const ttt_tensor *q, const ttt_tensor *k,
                         const ttt_tensor *v, const float *eta, const float *la, double theta,
                         double mu, int nesterov, int chunk, int T, int dk, int dv) {
    const size_t n = (size_t)dk * dv;
    double *Wc = dzeros(n), *g = dzeros(n);
    for (int t = 0; t < T; t++) {
        if (t % chunk == 0) memcpy(Wc, W, n * sizeof(double));
        memset(g, 0, n * sizeof(double));
        dadd_sq_grad(g, Wc, k->data + t * dk, v->data + t * dv, eta ? eta[t] : 1.0, dk, dv);
        double a = la ? exp((double)la[t]) : 1.0;
        for (size_t i = 0; i < n; i++) {
            M[i] = mu * M[i] - theta * g[i];
            W[i] = a * W[i] + (nesterov ? mu * M[i] - theta * g[i] : M[i]);
        }
        drow_mat(o + (size_t)t * dv, q->data + t * dk, W, dk, dv);
    }
    free(Wc), free(g);
}

/* docs/math.md §6.5: momentum with μ = 0 is decoupled-decay SGD, to the last bit (same float operations:
 * M = 0·M − θG = −θG exactly, then αW + M). */
START_TEST(momentum_mu0_equals_decoupled_sgd) {
    const int T = 37, dk = 6, dv = 5;
    tu_fixture f;
    tu_fx_init(&f, 101);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = tu_uniform(&f, T, -0.3f, -0.01f);
    ttt_layer Ls;
    make_layer(&Ls, "model: linear, loss: squared, optimizer: {name: sgd, lr: 0.7}, form: generic",
               dk, dv);
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        ttt_layer Lm;
        char body[256];
        snprintf(body, sizeof body,
                 "model: linear, loss: squared, optimizer: {name: momentum, lr: 0.7, momentum: 0, "
                 "nesterov: %s}, form: generic",
                 nesterov ? "true" : "false");
        make_layer(&Lm, body, dk, dv);
        for (int gated = 0; gated < 2; gated++) {
            ttt_layer_state ss = {0}, sm = {0};
            ttt_tensor *os = forward(&f, &Ls, &ss, q, k, v, eta, gated ? la : NULL);
            ttt_tensor *om = forward(&f, &Lm, &sm, q, k, v, eta, gated ? la : NULL);
            ck_assert_float_eq(ttt_max_abs_diff(om, os), 0.0f);
            ck_assert_float_eq(ttt_max_abs_diff(sm.W[0], ss.W[0]), 0.0f);
        }
    }
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §3: momentum with b = 1 is the Titans recurrence (float64 reference), with per-token decay,
 * per-token η, and with the Nesterov look-ahead. A heavy-ball run compared against the Nesterov
 * reference (and the reverse) must fail: the test tells the two rules apart. */
START_TEST(momentum_b1_matches_titans_recurrence) {
    const int T = 41, dk = 7, dv = 5;
    const double theta = 0.6, mu = 0.8;
    tu_fixture f;
    tu_fx_init(&f, 102);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = tu_uniform(&f, T, -0.2f, -0.01f);
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        ttt_layer L;
        char body[256];
        snprintf(body, sizeof body,
                 "model: linear, loss: squared, optimizer: {name: momentum, lr: 0.6, momentum: "
                 "0.8, nesterov: %s}",
                 nesterov ? "true" : "false");
        make_layer(&L, body, dk, dv);
        ck_assert_str_eq(tu_form_used(&L), "generic"); /* no closed form: auto gives the driver */
        ttt_layer_state st = {0};
        ttt_tensor *o = forward(&f, &L, &st, q, k, v, eta, la);
        double *o_ref = dzeros((size_t)T * dv), *W = dzeros(dk * dv), *M = dzeros(dk * dv);
        ref_momentum(o_ref, W, M, q, k, v, eta->data, la->data, theta, mu, nesterov, 1, T, dk, dv);
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(st.W[0]->data, W, st.W[0]->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(st.opt[0][0]->data, M, st.opt[0][0]->n, ATOL, RTOL);
        /* the other variant's reference is rejected */
        double *o_x = dzeros((size_t)T * dv), *Wx = dzeros(dk * dv), *Mx = dzeros(dk * dv);
        ref_momentum(o_x, Wx, Mx, q, k, v, eta->data, la->data, theta, mu, !nesterov, 1, T, dk, dv);
        ck_assert(!tu_close(o->data, o_x, o->n, ATOL, RTOL, NULL, 0));
        free(o_ref), free(W), free(M), free(o_x), free(Wx), free(Mx);
    }
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §6.5: momentum recurrence = its chunked form. With mini_batch C and steps: per_token the
 * driver takes every gradient at the chunk start and steps the optimizer every token; the kernel
 * ttt_momentum_chunked computes the same chunk by chunk with matmuls (gradients of the whole chunk
 * in one product, momentum and weights by decayed cumulative sums). Both are compared against the
 * float64 recurrence for several C (T = 37 prime: never a multiple), with per-token decay and η.
 * The per_block driver (one step with the summed gradient) is a different rule for μ > 0 and
 * C > 1 and must be rejected by the same comparison. */
START_TEST(momentum_chunked_equals_recurrence) {
    const int T = 37, dk = 8, dv = 6;
    const int chunks[] = {1, 2, 5, 16, 37, 64};
    const float theta = 0.5f, mu = 0.7f;
    tu_fixture f;
    tu_fx_init(&f, 103);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = tu_uniform(&f, T, -0.3f, -0.01f);
    /* a non-zero initial state and momentum, so that the chunk-start terms are exercised */
    ttt_tensor *S_init = tu_randn(&f, dk, dv, 0.3f), *M_init = tu_randn(&f, dk, dv, 0.1f);
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        const int C = chunks[ci];
        double *o_ref = dzeros((size_t)T * dv);
        double *W = dcopy_f(S_init->data, S_init->n), *M = dcopy_f(M_init->data, M_init->n);
        ref_momentum(o_ref, W, M, q, k, v, eta->data, la->data, theta, mu, 0, C, T, dk, dv);

        /* kernel */
        ttt_tensor *S = ttt_tensor_copy(&f.ctx, S_init), *Mk = ttt_tensor_copy(&f.ctx, M_init);
        ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, dv);
        size_t before = ttt_arena_footprint(&f.arena);
        ttt_momentum_chunked(&f.ctx, o->data, S->data, Mk->data, q->data, k->data, v->data,
                             eta->data, la->data, theta, mu, T, dk, dv, C);
        ck_assert_uint_eq(ttt_arena_footprint(&f.arena), before); /* scratch released */
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(S->data, W, S->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(Mk->data, M, Mk->n, ATOL, RTOL);

        /* generic driver, steps: per_token */
        for (int per_token = 1; per_token >= 0; per_token--) {
            ttt_layer L;
            char body[256];
            snprintf(body, sizeof body,
                     "model: linear, loss: squared, optimizer: {name: momentum, lr: 0.5, momentum: "
                     "0.7}, mini_batch: %d, steps: %s",
                     C, per_token ? "per_token" : "per_block");
            make_layer(&L, body, dk, dv);
            ttt_layer_state st = {0};
            ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
            memcpy(st.W[0]->data, S_init->data, S_init->n * sizeof(float));
            memcpy(st.opt[0][0]->data, M_init->data, M_init->n * sizeof(float));
            ttt_tensor *og = forward(&f, &L, &st, q, k, v, eta, la);
            if (per_token || C == 1) { /* with C = 1 the two step modes are the same rule */
                TU_ASSERT_CLOSE(og->data, o_ref, og->n, ATOL, RTOL);
                TU_ASSERT_CLOSE(st.W[0]->data, W, st.W[0]->n, ATOL, RTOL);
            } else {
                ck_assert(!tu_close(og->data, o_ref, og->n, ATOL, RTOL, NULL, 0));
            }
        }
        free(o_ref), free(W), free(M);
    }
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* Newton–Schulz                                                                                 */

/* docs/math.md §6.6: cubic coefficients converge to the polar factor U Vᵀ of A = U Σ Vᵀ (LAPACKE dgesvd on the
 * same matrix in float64). Tall, wide and square matrices. From x = σ_min/‖A‖_F the cubic first
 * grows x by ~1.5× per step, then converges quadratically, so log(0.5/x)/log(1.5) + 8 steps are
 * plenty; the test asserts that x is not so small that 40 steps would not suffice (the float64
 * iteration's own distance from the polar factor is then below 1e-15). Tolerance ns_rtol: at the
 * fixed point σ = 1 the cubic's slope is 0, but a rounding off the iterate's row space is carried
 * with gain 1, so the 40 steps' roundings add as a walk (√41 of one step's), after the early
 * steps' gain of up to 1.5 each on the smallest singular value: 3e-5 to 3e-4 of the largest entry
 * here (was a fixed 2e-5 absolute); a half-converged iterate (3 steps, the control) is off by
 * > 1e-2. */
START_TEST(ns_cubic_converges_to_polar_factor) {
    const int shapes[][2] = {{9, 5}, {5, 9}, {6, 6}, {16, 12}};
    const int steps = 40;
    tu_fixture f;
    tu_fx_init(&f, 104);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int m = shapes[si][0], n = shapes[si][1], p = m < n ? m : n;
        ttt_tensor *A = tu_randn(&f, m, n, 1.0f);
        double *Ad = dcopy_f(A->data, A->n), *U = dzeros(m * p), *s = dzeros(p);
        double *Vt = dzeros(p * n), *polar = dzeros(m * n);
        dsvd(U, s, Vt, Ad, m, n);
        double fro = 0;
        for (int i = 0; i < p; i++) fro += s[i] * s[i];
        const double x_min = s[p - 1] / sqrt(fro);
        ck_assert_msg(log(0.5 / x_min) / log(1.5) + 8 < steps, "ill-conditioned draw: %g", x_min);
        dmatmul(polar, U, Vt, m, p, n);
        double cubic[40][3];
        coeff_table(cubic, steps, "cubic");
        const double rtol = ns_rtol(Ad, m, n, (const double(*)[3])cubic, steps, 0);
        ttt_tensor *X = ttt_newton_schulz(&f.ctx, A, TTT_NS_CUBIC, steps);
        ck_assert(X->ndim == 2 && X->shape[0] == m && X->shape[1] == n);
        TU_ASSERT_CLOSE(X->data, polar, X->n, 0.0, rtol);
        /* too few steps is detectably short of the polar factor */
        ttt_tensor *X3 = ttt_newton_schulz(&f.ctx, A, TTT_NS_CUBIC, 3);
        tu_ratio_quiet = 1;
        ck_assert(!tu_close(X3->data, polar, X3->n, 0.0, rtol, NULL, 0));
        tu_ratio_quiet = 0;
        free(Ad), free(U), free(s), free(Vt), free(polar);
    }
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §3 / §6.6: on a rank-1 A = x yᵀ the muon quintic gives exactly p(σ_0) x̂ŷᵀ, with p the scalar
 * iteration x ← a x + b x³ + c x⁵ and σ_0 = ‖A‖_F/(‖A‖_F + 1e-7) (≈ 1: docs/math.md's "started at 1").
 * docs/math.md quotes p(1) ≈ 0.69644 for Muon's 5 steps: cross-checked here. Also LaCT's set with 7
 * steps (its last tuple repeated), both orientations, and a 1-D weight (a row:
 * NS(g) = p(σ_0) g/‖g‖).
 * Tolerance, absolute on entries ≤ 1: 8·ε·Π_k a_k (ε = 2^-24). In float32 the normalized X is
 * rank 1 only up to rounding: each entry is rounded once, so its spurious singular values are up
 * to ~√(mn)·ε (≤ 5.3ε here), and NS amplifies small singular values by a_k at step k
 * (Π a_k = 3.4445^5 ≈ 490 for muon, ≈ 3965 for lact's 7 steps): c = 8 covers √(mn) with a
 * 1.5× allowance for the rounding of the iteration itself. That is 2.3e-4 for muon (1.9e-3 for
 * lact, whose entries are ~0.3: still 150× below them); measured
 * 5.2e-5 with OpenBLAS's Cooperlake kernels (8e-6 on others), so ≥ 4.5×. The p(σ_0) ≠ 1 scale
 * being checked moves entries by ~1e-1. */
START_TEST(ns_quintic_rank1_closed_form) {
    double muon[5][3], lact[7][3];
    coeff_table(muon, 5, "muon");
    coeff_table(lact, 7, "lact"); /* 7 steps: the last tuple is repeated for steps 6 and 7 */
    const double p1 = scalar_ns(1.0, muon, 5);
    ck_assert_msg(fabs(p1 - 0.69644) < 5e-6, "p(1) = %.8f, docs/math.md says 0.69644", p1);
    tu_fixture f;
    tu_fx_init(&f, 105);
    const int dims[][2] = {{7, 4}, {4, 7}, {1, 9}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int set = 0; set < 2; set++) {
            const int m = dims[di][0], n = dims[di][1];
            ttt_tensor *x = tu_randn(&f, 1, m, 1.0f), *y = tu_randn(&f, 1, n, 1.0f);
            ttt_tensor *A = m == 1 ? ttt_tensor_1d(&f.ctx, n) : ttt_tensor_2d(&f.ctx, m, n);
            double nx = 0, ny = 0;
            for (int i = 0; i < m; i++) nx += (double)x->data[i] * x->data[i];
            for (int j = 0; j < n; j++) ny += (double)y->data[j] * y->data[j];
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) A->data[i * n + j] = x->data[i] * y->data[j];
            double fro = 0;
            for (size_t i = 0; i < A->n; i++) fro += (double)A->data[i] * A->data[i];
            fro = sqrt(fro);
            const double pv = scalar_ns(fro / (fro + 1e-7), set ? lact : muon, set ? 7 : 5);
            double *want = dzeros(A->n);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++)
                    want[i * n + j] = pv * x->data[i] * y->data[j] / sqrt(nx * ny);
            ttt_tensor *X =
                ttt_newton_schulz(&f.ctx, A, set ? TTT_NS_LACT : TTT_NS_MUON, set ? 7 : 5);
            double gain = 1; /* Π_k a_k */
            for (int k = 0; k < (set ? 7 : 5); k++) gain *= fabs((set ? lact : muon)[k][0]);
            const double tol = 8 * 0x1p-24 * gain;
            TU_ASSERT_CLOSE(X->data, want, X->n, tol, 0.0);
            if (!set) { /* and it is not the polar factor x̂ŷᵀ itself */
                for (size_t i = 0; i < A->n; i++) want[i] /= pv;
                ck_assert(!tu_close(X->data, want, X->n, tol, 0.0, NULL, 0));
            }
            free(want);
        }
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §6.6: the muon quintic on random full-rank matrices. In exact arithmetic NS(A) = U p(Σ/‖A‖_F) Vᵀ,
 * so (a) the whole matrix is compared with that float64 spectral evaluation, and (b) its singular
 * values (LAPACKE on the float32 result) lie in the band of p over [x_lo, 1], which this test
 * computes by scanning p in double; x_lo = 0.002 covers every matrix here (asserted). The band is
 * about [0.682, 1.202] — docs/math.md's "roughly [0.7, 1.2]" is slightly optimistic at the low end.
 * Tolerance: ns_rtol from the matrix's own singular values (float32 rounding in 5 steps,
 * amplified by up to a^5 ≈ 490 only for singular values near 0), relative to the largest entry;
 * the singular values of the float32 result may leave the band by ‖X − X̂‖₂ ≤ ‖X − X̂‖_F ≤
 * √(m·n)·that (Weyl; LAPACK's float64 SVD and the scan's grid, which misses an extremum only to
 * second order, add below 1e-9). Control: the comparison rejects the result of 4 steps. */
START_TEST(ns_quintic_singular_value_band) {
    double muon[5][3];
    coeff_table(muon, 5, "muon");
    const double x_lo = 0.002;
    double lo = 1e9, hi = -1e9;
    for (int i = 0; i <= 200000; i++) {
        double x = x_lo * pow(1.0 / x_lo, i / 200000.0), y = scalar_ns(x, muon, 5);
        lo = y < lo ? y : lo, hi = y > hi ? y : hi;
    }
    ck_assert_msg(lo > 0.68 && lo < 0.7 && hi > 1.2 && hi < 1.21, "band [%g, %g]", lo, hi);
    const int shapes[][2] = {{16, 32}, {32, 16}, {24, 40}, {20, 24}};
    tu_fixture f;
    tu_fx_init(&f, 106);
    double seen_lo = 1e9, seen_hi = -1e9;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int m = shapes[si][0], n = shapes[si][1], p = m < n ? m : n;
        ttt_tensor *A = tu_randn(&f, m, n, 1.0f);
        double *Ad = dcopy_f(A->data, A->n), *U = dzeros(m * p), *s = dzeros(p);
        double *Vt = dzeros(p * n), *want = dzeros(m * n), *US = dzeros(m * p);
        dsvd(U, s, Vt, Ad, m, n);
        double fro = 0;
        for (int i = 0; i < p; i++) fro += s[i] * s[i];
        fro = sqrt(fro);
        ck_assert_msg(s[p - 1] / (fro + 1e-7) >= x_lo, "draw below x_lo: %g", s[p - 1] / fro);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < p; j++)
                US[i * p + j] = U[i * p + j] * scalar_ns(s[j] / (fro + 1e-7), muon, 5);
        dmatmul(want, US, Vt, m, p, n);
        const double rtol = ns_rtol(Ad, m, n, (const double(*)[3])muon, 5, 0);
        ttt_tensor *X = ttt_newton_schulz(&f.ctx, A, TTT_NS_MUON, 5);
        TU_ASSERT_CLOSE(X->data, want, X->n, 0.0, rtol);
        ttt_tensor *X4 = ttt_newton_schulz(&f.ctx, A, TTT_NS_MUON, 4); /* the control */
        tu_ratio_quiet = 1;
        ck_assert(!tu_close(X4->data, want, X4->n, 0.0, rtol, NULL, 0));
        tu_ratio_quiet = 0;
        double wmax = 0.0;
        for (int i = 0; i < m * n; i++) wmax = fmax(wmax, fabs(want[i]));
        const double band_tol = sqrt((double)m * n) * rtol * wmax;
        double *Xd = dcopy_f(X->data, X->n), *sx = dzeros(p);
        dsvd(U, sx, Vt, Xd, m, n);
        for (int i = 0; i < p; i++) {
            TU_ASSERT_LE(fmax(0.0, fmax(lo - sx[i], sx[i] - hi)), band_tol,
                         "%dx%d: sigma %g outside [%g, %g]", m, n, sx[i], lo, hi);
            seen_lo = sx[i] < seen_lo ? sx[i] : seen_lo;
            seen_hi = sx[i] > seen_hi ? sx[i] : seen_hi;
        }
        free(Ad), free(U), free(s), free(Vt), free(want), free(US), free(Xd), free(sx);
    }
    printf("ns_quintic_singular_value_band: band of p on [%g, 1] = [%.5f, %.5f]; "
           "measured singular values in [%.5f, %.5f]\n",
           x_lo, lo, hi, seen_lo, seen_hi);
    tu_fx_free(&f);
}
END_TEST

/* ---- the fused Newton–Schulz op (one tape entry, hand-written backward) ---- */

/* Shapes (rows, cols; rows 0 = a 1-D weight of cols elements) and coefficient sets of the fused
 * op's checks: square, tall, wide and a vector; each set with a step count that exercises it
 * (lact: 7 steps, its last tuple repeated). */
static const int NS_SHAPES[][2] = {{6, 6}, {9, 5}, {5, 9}, {0, 7}};
static const struct { ttt_ns_set set; const char *name; int steps; } NS_SETS[] = {
    {TTT_NS_MUON, "muon", 5}, {TTT_NS_LACT, "lact", 7}, {TTT_NS_CUBIC, "cubic", 8}};

/* A well-conditioned (r, c) matrix U diag(σ) Vᵀ, U and V with orthonormal columns (Gram–Schmidt
 * of Gaussians), σ evenly spaced in [0.5, 1] times `scale`, rounded to float32. NS amplifies
 * directions with small singular values σ/‖A‖_F by up to a^steps ≈ 490, rounding included;
 * here σ_min/‖A‖_F ≥ 0.5/sqrt(p) ≥ 0.2, where the quintics' per-step slope is at most 3.3
 * (their a = 3.4…4.1 is reached only at 0) and |slope| ≲ 1 once σ nears the fixed point, so
 * float32 rounding is amplified only a few times and the float32 gradients are accurate to a few
 * 1e-6 of their max (measured below). */
static ttt_tensor *ns_input(tu_fixture *f, int r, int c, float scale) {
    const int rows = r ? r : 1, p = rows < c ? rows : c;
    double *U = dzeros((size_t)rows * p), *V = dzeros((size_t)c * p);
    double *mats[2] = {U, V};
    const int dims[2] = {rows, c};
    for (int w = 0; w < 2; w++) { /* columns of mats[w] (dims[w], p), orthonormalized */
        double *M = mats[w];
        const int d = dims[w];
        for (int j = 0; j < p; j++) {
            const float *g = tu_randn_buf(f, (size_t)d, 1.0f);
            for (int i = 0; i < d; i++) M[i * p + j] = g[i];
            for (int pass = 0; pass < 2; pass++) /* twice: re-orthogonalization */
                for (int q = 0; q < j; q++) {
                    double dot = 0;
                    for (int i = 0; i < d; i++) dot += M[i * p + j] * M[i * p + q];
                    for (int i = 0; i < d; i++) M[i * p + j] -= dot * M[i * p + q];
                }
            double nrm = 0;
            for (int i = 0; i < d; i++) nrm += M[i * p + j] * M[i * p + j];
            for (int i = 0; i < d; i++) M[i * p + j] /= sqrt(nrm);
        }
    }
    ttt_tensor *A = r ? ttt_tensor_2d(&f->ctx, r, c) : ttt_tensor_1d(&f->ctx, c);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < c; j++) {
            double acc = 0;
            for (int q = 0; q < p; q++)
                acc += U[i * p + q] * (p > 1 ? 0.5 + 0.5 * q / (p - 1) : 1.0) * V[j * p + q];
            A->data[i * c + j] = (float)(scale * acc);
        }
    free(U), free(V);
    return A;
}

/* A fresh leaf with A's values that requires grad (so that each path gets its own gradient). */
static ttt_tensor *ns_leaf(tu_fixture *f, const ttt_tensor *A) {
    ttt_tensor *t = ttt_tensor_new(&f->ctx, A->ndim, A->shape);
    memcpy(t->data, A->data, A->n * sizeof(float));
    t->requires_grad = 1;
    return t;
}

/* The fused forward runs the composed form's own ops in the same order (newton_schulz.c,
 * ns_iterate), so the results are the same floats, compared bit for bit: with and without a
 * tape, each against the composed form. Under the tape the fused op is one entry and the
 * composed form many. */
START_TEST(ns_fused_forward_equals_composed) {
    tu_fixture f;
    tu_fx_init(&f, 113);
    ttt_tape tape;
    ttt_tape_init(&tape);
    for (size_t si = 0; si < sizeof NS_SHAPES / sizeof NS_SHAPES[0]; si++)
        for (size_t ki = 0; ki < sizeof NS_SETS / sizeof NS_SETS[0]; ki++) {
            const int r = NS_SHAPES[si][0], c = NS_SHAPES[si][1];
            const ttt_ns_set set = NS_SETS[ki].set;
            const int steps = NS_SETS[ki].steps;
            ttt_tensor *A = ns_input(&f, r, c, 2.0f);
            f.ctx.grad = 0, f.ctx.tape = NULL;
            ttt_tensor *plain = ttt_newton_schulz(&f.ctx, A, set, steps);
            ttt_tensor *plain_c = ttt_newton_schulz_composed(&f.ctx, A, set, steps);
            f.ctx.grad = 1, f.ctx.tape = &tape;
            ttt_tensor *A1 = ns_leaf(&f, A), *A2 = ns_leaf(&f, A);
            const size_t n0 = tape.n_entries;
            ttt_tensor *fused = ttt_newton_schulz(&f.ctx, A1, set, steps);
            const size_t n1 = tape.n_entries;
            ttt_tensor *comp = ttt_newton_schulz_composed(&f.ctx, A2, set, steps);
            const size_t n2 = tape.n_entries;
            ck_assert_msg(n1 - n0 == 1, "fused op recorded %zu entries", n1 - n0);
            ck_assert_msg(n2 - n1 >= (size_t)(3 * steps), "composed recorded %zu", n2 - n1);
            ck_assert(fused->ndim == A->ndim && fused->n == A->n && comp->n == A->n);
            const size_t bytes = A->n * sizeof(float);
            ck_assert_msg(memcmp(fused->data, comp->data, bytes) == 0, "%dx%d %s: taped",
                          r, c, NS_SETS[ki].name);
            ck_assert_msg(memcmp(plain->data, comp->data, bytes) == 0 &&
                              memcmp(plain_c->data, comp->data, bytes) == 0,
                          "%dx%d %s: untaped", r, c, NS_SETS[ki].name);
            ttt_tape_reset(&tape);
        }
    ttt_tape_free(&tape);
    tu_fx_free(&f);
}
END_TEST

/* The fused backward (R + Rᵀ, the P-products, the radial normalization term) against:
 * (a) the composed form's gradient through the tape (its ops' own backwards);
 * (b) float64 central differences of dns (the float64 NS above, written from docs/math.md §3) with
 *     h = 1e-6·max(1, |x|);
 * for L = Σ R ⊙ NS(A), R random, on well-conditioned inputs (ns_input), every shape and set.
 * Tolerance, relative to max|∇| (docs/hardening.md "Portable tolerances"): the float32 gradient
 * within ns_rtol's backward bound (the forward's roundings and the adjoint's, transposed, with
 * the same per-step gains; 1.4e-4 to 1e-3 here), plus the differences' own error: their
 * truncation estimated by halving the step (4/3·|D(h) − D(h/2)|) and the rounding of the two
 * float64 losses, ns_rtol's forward bound at ε₆₄ = 2^-53 times Σ|R|·max|NS(A)|, over 2h.
 * Fused against composed: two float32 paths, the sum of their bounds.
 * (c) a deliberately wrong gradient fails: the fused one with one backward term wrong, emulated
 *     by adding the change that term makes to the float64 adjoint (ns_adjoint, which itself
 *     equals the differences to 1e-7), and the fused one off by 1e-2 of max|∇| in one
 *     element. */
/* Σ R ⊙ dns(A) in float64. */
static double ns_objective(const double *A, const double *R, int r, int c,
                           const double (*abc)[3], int steps) {
    const int rows = r ? r : 1;
    double *X = dzeros((size_t)rows * c), acc = 0;
    dns(X, A, rows, c, abc, steps);
    for (int i = 0; i < rows * c; i++) acc += R[i] * X[i];
    free(X);
    return acc;
}

/* The gradient each wrong backward variant would give, in float64, from the float64 adjoint of
 * the iteration with that one term changed: WRONG_NO_RT uses 2R for R + Rᵀ (R is not
 * symmetric), WRONG_NO_CROSS drops c(QP + PQ) from R, WRONG_NO_RADIAL drops the normalization's
 * radial term (treating ‖A‖_F as a constant). WRONG_NONE is the correct adjoint. */
enum { WRONG_NONE, WRONG_NO_RT, WRONG_NO_CROSS, WRONG_NO_RADIAL, WRONG_COUNT };
static void ns_adjoint(double *gA, const double *A, const double *R, int r, int c,
                       const double (*abc)[3], int steps, int wrong) {
    const int rows = r ? r : 1, tr = rows > c, m = tr ? c : rows, n = tr ? rows : c;
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    double *Xs = dzeros((steps + 1) * mn), *G = dzeros(mn), *Gn = dzeros(mn);
    double *P = dzeros(mm), *B = dzeros(mm), *Q = dzeros(mm), *Rm = dzeros(mm);
    double *T1 = dzeros(mm > mn ? mm : mn);
    double nrm = 0;
    for (int i = 0; i < rows * c; i++) nrm += A[i] * A[i];
    nrm = sqrt(nrm);
    const double den = nrm + 1e-7;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < c; j++) {
            Xs[tr ? j * n + i : i * n + j] = A[i * c + j] / den;
            G[tr ? j * n + i : i * n + j] = R[i * c + j];
        }
    for (int k = 0; k < steps; k++) { /* forward, saving X_k */
        const double *X = Xs + k * mn;
        double *Xn = Xs + (k + 1) * mn;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int q = 0; q < n; q++) acc += X[i * n + q] * X[j * n + q];
                P[i * m + j] = acc;
            }
        dmatmul(B, P, P, m, m, m);
        for (size_t i = 0; i < mm; i++) B[i] = abc[k][1] * P[i] + abc[k][2] * B[i];
        dmatmul(Xn, B, X, m, m, n);
        for (size_t i = 0; i < mn; i++) Xn[i] += abc[k][0] * X[i];
    }
    for (int k = steps - 1; k >= 0; k--) {
        const double *X = Xs + k * mn;
        const double a = abc[k][0], b = abc[k][1], cc = abc[k][2];
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double p = 0, q = 0;
                for (int l = 0; l < n; l++) {
                    p += X[i * n + l] * X[j * n + l];
                    q += G[i * n + l] * X[j * n + l];
                }
                P[i * m + j] = p, Q[i * m + j] = q;
            }
        dmatmul(B, P, P, m, m, m);
        for (size_t i = 0; i < mm; i++) B[i] = b * P[i] + cc * B[i];
        for (size_t i = 0; i < mm; i++) Rm[i] = b * Q[i];
        if (wrong != WRONG_NO_CROSS) {
            dmatmul(T1, Q, P, m, m, m);
            for (size_t i = 0; i < mm; i++) Rm[i] += cc * T1[i];
            dmatmul(T1, P, Q, m, m, m);
            for (size_t i = 0; i < mm; i++) Rm[i] += cc * T1[i];
        }
        double *S = dzeros(mm);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                S[i * m + j] = wrong == WRONG_NO_RT ? 2 * Rm[i * m + j]
                                                    : Rm[i * m + j] + Rm[j * m + i];
        dmatmul(Gn, B, G, m, m, n);
        dmatmul(T1, S, X, m, m, n);
        for (size_t i = 0; i < mn; i++) Gn[i] += a * G[i] + T1[i];
        memcpy(G, Gn, mn * sizeof(double));
        free(S);
    }
    double dot = 0;
    for (size_t i = 0; i < mn; i++) dot += G[i] * Xs[i];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < c; j++) {
            const double g = G[tr ? j * n + i : i * n + j];
            const double radial = wrong == WRONG_NO_RADIAL ? 0 : dot / (den * nrm);
            gA[i * c + j] = g / den - radial * A[i * c + j];
        }
    free(Xs), free(G), free(Gn), free(P), free(B), free(Q), free(Rm), free(T1);
}

START_TEST(ns_fused_gradient_matches_composed_and_fd) {
    tu_fixture f;
    tu_fx_init(&f, 114);
    ttt_tape tape;
    ttt_tape_init(&tape);
    f.ctx.tape = &tape;
    double worst_fd = 0, worst_comp = 0, best_wrong[WRONG_COUNT];
    int caught[WRONG_COUNT] = {0}, cases = 0;
    for (int w = 0; w < WRONG_COUNT; w++) best_wrong[w] = 1e300;
    for (size_t si = 0; si < sizeof NS_SHAPES / sizeof NS_SHAPES[0]; si++)
        for (size_t ki = 0; ki < sizeof NS_SETS / sizeof NS_SETS[0]; ki++) {
            const int r = NS_SHAPES[si][0], c = NS_SHAPES[si][1], rows = r ? r : 1;
            const size_t n = (size_t)rows * c;
            const int steps = NS_SETS[ki].steps;
            double abc[8][3];
            coeff_table(abc, steps, NS_SETS[ki].name);
            ttt_tensor *A = ns_input(&f, r, c, 2.0f);
            ttt_tensor *R = tu_randn(&f, rows, c, 1.0f);
            float *g[2]; /* fused, composed */
            for (int path = 0; path < 2; path++) {
                f.ctx.grad = 1;
                ttt_tensor *Al = ns_leaf(&f, A);
                const ttt_ns_set set = NS_SETS[ki].set;
                ttt_tensor *X = path ? ttt_newton_schulz_composed(&f.ctx, Al, set, steps)
                                     : ttt_newton_schulz(&f.ctx, Al, set, steps);
                ttt_backward_from(&f.ctx, X, R->data);
                ck_assert_ptr_nonnull(Al->grad);
                g[path] = Al->grad;
                ttt_tape_reset(&tape);
                f.ctx.grad = 0;
            }
            double *Ad = dcopy_f(A->data, n), *Rd = dcopy_f(R->data, n), *fd = dzeros(n);
            const double rtol_g = ns_rtol(Ad, r, c, (const double(*)[3])abc, steps, 1);
            double *Xd = dzeros(n), xmax = 0.0, rsum = 0.0, fd_err = 0.0;
            dns(Xd, Ad, rows, c, (const double(*)[3])abc, steps);
            for (size_t i = 0; i < n; i++) xmax = fmax(xmax, fabs(Xd[i])), rsum += fabs(Rd[i]);
            /* a float64 loss's rounding: the forward bound at ε₆₄ */
            const double l_round = ns_rtol(Ad, r, c, (const double(*)[3])abc, steps, 0) * 0x1p-29 *
                                   xmax * rsum;
            for (size_t i = 0; i < n; i++) {
                const double x = Ad[i], h = 1e-6 * fmax(1.0, fabs(x));
                double D[2];
                for (int half = 0; half < 2; half++) {
                    const double hk = half ? h / 2 : h;
                    Ad[i] = x + hk;
                    const double lp = ns_objective(Ad, Rd, r, c, (const double(*)[3])abc, steps);
                    Ad[i] = x - hk;
                    const double lm = ns_objective(Ad, Rd, r, c, (const double(*)[3])abc, steps);
                    D[half] = (lp - lm) / (2 * hk);
                }
                Ad[i] = x;
                fd[i] = D[0];
                fd_err = fmax(fd_err, 4.0 / 3.0 * fabs(D[0] - D[1]) + 2 * l_round / (2 * h));
            }
            double scale = 0, e_fd = 0, e_comp = 0;
            for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(fd[i]));
            const double tol_fd = rtol_g + fd_err / scale, tol_comp = 2 * rtol_g;
            for (size_t i = 0; i < n; i++) {
                e_fd = fmax(e_fd, fabs(g[0][i] - fd[i]) / scale);
                e_comp = fmax(e_comp, fabs((double)g[0][i] - g[1][i]) / scale);
            }
            TU_ASSERT_LE(e_fd, tol_fd, "%dx%d %s: fused vs fd %.3g of max", r, c,
                         NS_SETS[ki].name, e_fd);
            TU_ASSERT_LE(e_comp, tol_comp, "%dx%d %s: fused vs composed %.3g of max", r, c,
                         NS_SETS[ki].name, e_comp);
            worst_fd = fmax(worst_fd, e_fd), worst_comp = fmax(worst_comp, e_comp);
            /* (c) wrong backward terms: fused + (wrong adjoint − right adjoint) must fail the
             * same comparison; the right adjoint itself must pass it far below the tolerance */
            double *right = dzeros(n), *wrong = dzeros(n);
            ns_adjoint(right, Ad, Rd, r, c, (const double(*)[3])abc, steps, WRONG_NONE);
            double e_adj = 0;
            for (size_t i = 0; i < n; i++) e_adj = fmax(e_adj, fabs(right[i] - fd[i]) / scale);
            ck_assert_msg(e_adj < 1e-7, "float64 adjoint vs fd %.3g", e_adj);
            for (int w = 1; w < WRONG_COUNT; w++) {
                ns_adjoint(wrong, Ad, Rd, r, c, (const double(*)[3])abc, steps, w);
                double e_w = 0;
                for (size_t i = 0; i < n; i++)
                    e_w = fmax(e_w, fabs(g[0][i] + (wrong[i] - right[i]) - fd[i]) / scale);
                /* a term can be immaterial for a case: c(QP + PQ) is zero for the cubic set
                 * (c = 0), and the radial term ⟨G_0, X_0⟩ is near zero where NS has converged
                 * (the output no longer depends on the input's scale). Where the term moves
                 * the gradient by more than 4 tolerances (so that the variant is off by more
                 * than 3 whatever the float32 error) the variant must fail; each variant must
                 * be material (and so fail) in most cases. */
                double term = 0;
                for (size_t i = 0; i < n; i++) term = fmax(term, fabs(wrong[i] - right[i]) / scale);
                if (term > 4 * tol_fd) {
                    ck_assert_msg(e_w > tol_fd, "%dx%d %s: wrong variant %d passes (%.3g)", r,
                                  c, NS_SETS[ki].name, w, e_w);
                    caught[w]++;
                    best_wrong[w] = fmin(best_wrong[w], e_w);
                }
            }
            /* and one element off by 1e-2 relative */
            g[0][n / 2] += (float)(1e-2 * scale);
            double e_bad = 0;
            for (size_t i = 0; i < n; i++) e_bad = fmax(e_bad, fabs(g[0][i] - fd[i]) / scale);
            ck_assert_msg(e_bad > tol_fd, "%dx%d %s: an element off by 1e-2 passes (%.3g)", r, c,
                          NS_SETS[ki].name, tol_fd);
            free(Ad), free(Rd), free(fd), free(right), free(wrong), free(Xd);
            cases++;
        }
    for (int w = 1; w < WRONG_COUNT; w++)
        ck_assert_msg(2 * caught[w] > cases, "wrong variant %d material in %d of %d cases", w,
                      caught[w], cases);
    printf("ns_fused_gradient: worst |fused - fd| %.3g, |fused - composed| %.3g of max|grad|; "
           "wrong variants caught in %d, %d, %d of %d cases, smallest error %.3g %.3g %.3g\n",
           worst_fd, worst_comp, caught[1], caught[2], caught[3], cases, best_wrong[1],
           best_wrong[2], best_wrong[3]);
    ttt_tape_free(&tape);
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* muon                                                                                          */

/* One muon step against the float64 rule, for a tall weight (so s ≠ 1), with momentum, Nesterov
 * and weight decay, every scale choice, and a 1-D weight (normalized-gradient step, s = 1).
 * Tolerance, absolute (docs/hardening.md "Portable tolerances"): the buffer M = μM₀ + G rounds
 * twice and takes μ as float32 (0.4ε of μM₀): 3ε·max(|μM₀| + |G|); the weights get θ·s times
 * one NS evaluation's bound (ns_rtol of the momentum input, times max|NS|) plus the step's few
 * roundings and float32 constants (θ, λ, α: under ε each) on its terms: 6ε·max(|(1−λ)αW| +
 * θs|U|). Control: the tall weight's step with the other scale rule (s = 1 for "muon", whose
 * s = √(12/7)) is rejected. */
START_TEST(muon_step_matches_rule) {
    const int m = 12, n = 7;
    const double theta = 0.3, mu = 0.9, lambda = 0.1, alpha = 0.95;
    tu_fixture f;
    tu_fx_init(&f, 107);
    const char *scales[] = {"muon", "fan", "none"};
    for (int sc = 0; sc < 3; sc++)
        for (int nesterov = 0; nesterov < 2; nesterov++)
            for (int vec = 0; vec < 2; vec++) {
                ttt_layer L;
                char body[320];
                snprintf(body, sizeof body,
                         "optimizer: {name: muon, lr: 0.3, momentum: 0.9, nesterov: %s, scale: %s, "
                         "weight_decay: 0.1}",
                         nesterov ? "true" : "false", scales[sc]);
                make_layer(&L, body, 4, 4);
                ck_assert_int_eq(L.optim->n_state(L.optim_cfg), 1);
                const int r = vec ? 1 : m;
                ttt_tensor *W = vec ? ttt_tensor_1d(&f.ctx, n) : ttt_tensor_2d(&f.ctx, m, n);
                ttt_tensor *M0 = ttt_tensor_zeros_like(&f.ctx, W),
                           *G = ttt_tensor_zeros_like(&f.ctx, W);
                ttt_rng_fill_normal(&f.rng, W->data, W->n, 0, 1);
                ttt_rng_fill_normal(&f.rng, M0->data, M0->n, 0, 1);
                ttt_rng_fill_normal(&f.rng, G->data, G->n, 0, 1);
                ttt_tensor *decay = ttt_tensor_1d(&f.ctx, 1);
                ttt_tensor_fill(decay, 0.95f);
                ttt_optim_block blk = {.t0 = 0, .n = 1, .theta = 0.3f, .decay = decay};
                ttt_tensor *Wo = NULL, *So[TTT_MAX_OPT_STATE] = {0};
                const ttt_tensor *S0[1] = {M0};
                L.optim->step(&f.ctx, L.optim_cfg, &Wo, So, W, S0, G, &blk);
                /* float64 rule */
                double *Md = dzeros(W->n), *A = dzeros(W->n), *U = dzeros(W->n),
                       *want = dzeros(W->n);
                for (size_t i = 0; i < W->n; i++) {
                    Md[i] = mu * M0->data[i] + G->data[i];
                    A[i] = nesterov ? G->data[i] + mu * Md[i] : Md[i];
                }
                double abc[5][3];
                coeff_table(abc, 5, "muon");
                dns(U, A, r, n, abc, 5);
                double s = 1.0;
                if (!vec && sc == 0) s = sqrt(fmax(1.0, (double)m / n));
                if (!vec && sc == 1) s = sqrt(fmax(1.0, (double)n / m));
                const double eps = 0x1p-24;
                double umax = 0.0, wterms = 0.0, mterms = 0.0;
                for (size_t i = 0; i < W->n; i++) {
                    want[i] = (1 - lambda) * (double)(float)alpha * W->data[i] - theta * s * U[i];
                    umax = fmax(umax, fabs(U[i]));
                    wterms = fmax(wterms, fabs((1 - lambda) * alpha * W->data[i]) +
                                              theta * s * fabs(U[i]));
                    mterms = fmax(mterms, fabs(mu * M0->data[i]) + fabs(G->data[i]));
                }
                const double w_tol =
                    theta * s * ns_rtol(A, r, n, (const double(*)[3])abc, 5, 0) * umax +
                    6 * eps * wterms;
                TU_ASSERT_CLOSE(Wo->data, want, Wo->n, w_tol, 0.0);
                TU_ASSERT_CLOSE(So[0]->data, Md, So[0]->n, 3 * eps * mterms, 0.0);
                if (!vec && sc == 0) { /* the control: the step with s = 1 */
                    for (size_t i = 0; i < W->n; i++) want[i] += theta * (s - 1) * U[i];
                    tu_ratio_quiet = 1;
                    ck_assert(!tu_close(Wo->data, want, Wo->n, w_tol, 0.0, NULL, 0));
                    tu_ratio_quiet = 0;
                }
                free(Md), free(A), free(U), free(want);
            }
    /* without momentum there is no state, and the update is NS(G) itself */
    ttt_layer L;
    make_layer(
        &L, "optimizer: {name: muon, momentum: 0.0, coefficients: cubic, steps: 30, scale: none}",
        4, 4);
    ck_assert_int_eq(L.optim->n_state(L.optim_cfg), 0);
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* large_batch (LaCT)                                                                            */

/* Float64 large_batch on the linear model with the squared loss, apply_then_update, blocks of b:
 * every token reads the block-start weights; per block G = Σ_s (Π_{r>s} α_r) η_s ∇ℓ_s(W_0)
 * (the decayed block sum the driver hands over, optim.h), M ← μM + G, U = NS(M) or M,
 * W ← A W_0 − θU (A = Π α over the block), then each channel is rescaled to its initial norm
 * (columns or rows; channels with zero initial norm are left alone). */
static void ref_large_batch(double *o, double *W, const ttt_tensor *q, const ttt_tensor *k,
                            const ttt_tensor *v, const float *eta, double alpha, double theta,
                            double mu, int muon_steps, int b, int renorm, int rows_axis, int T,
                            int dk, int dv) {
    const size_t n = (size_t)dk * dv;
    const int nch = rows_axis ? dk : dv;
    double *N0 = dzeros(nch), *G = dzeros(n), *M = dzeros(n), *U = dzeros(n), *Nn = dzeros(nch);
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) N0[rows_axis ? i : j] += W[i * dv + j] * W[i * dv + j];
    for (int c = 0; c < nch; c++) N0[c] = sqrt(N0[c]);
    double abc[100][3];
    coeff_table(abc, muon_steps > 0 ? muon_steps : 1, "muon");
    for (int t0 = 0; t0 < T; t0 += b) {
        const int nb = t0 + b <= T ? b : T - t0;
        memset(G, 0, n * sizeof(double));
        for (int t = t0; t < t0 + nb; t++) {
            drow_mat(o + (size_t)t * dv, q->data + t * dk, W, dk, dv);
            const double w = pow(alpha, t0 + nb - 1 - t) * (eta ? eta[t] : 1.0);
            dadd_sq_grad(G, W, k->data + t * dk, v->data + t * dv, w, dk, dv);
        }
        for (size_t i = 0; i < n; i++) M[i] = mu * M[i] + G[i];
        if (muon_steps > 0) dns(U, M, dk, dv, abc, muon_steps);
        else memcpy(U, M, n * sizeof(double));
        const double A = pow(alpha, nb);
        for (size_t i = 0; i < n; i++) W[i] = A * W[i] - theta * U[i];
        if (!renorm) continue;
        memset(Nn, 0, nch * sizeof(double));
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) Nn[rows_axis ? i : j] += W[i * dv + j] * W[i * dv + j];
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                int c = rows_axis ? i : j;
                if (N0[c] > 0) W[i * dv + j] *= N0[c] / (sqrt(Nn[c]) + 1e-5);
            }
    }
    free(N0), free(G), free(M), free(U), free(Nn);
}

/* docs/math.md §6.7: large_batch with b = T, apply_then_update, one block = one full-batch step followed by
 * the renormalization (both axes), from a random non-zero initial state set after
 * ttt_layer_state_init (init_state re-run to take the initial norms). Skipping the
 * renormalization is rejected. Then several blocks with momentum, with and without Newton–Schulz
 * (float64 NS in the reference). Tolerance RTOL for the runs without Newton–Schulz. With it, a
 * whole run has no useful float32 bound: NS carries a change of its input M to its output with
 * a gain of up to a^steps/‖M‖ (ns_rtol_gain), and the next block's M is made from that output,
 * so a worst-case bound compounds over the blocks to more than the weights themselves. Those
 * cases are compared a block at a time instead, each from the float32 run's own state (W, M and
 * the target norms, read from the layer's state): the block's outputs, q·W₀ from that state,
 * within RTOL, and its weights within RTOL plus θ·ns_rtol(M)·max|NS(M)| times the
 * renormalization's largest factor (one NS evaluation's bound). Control: the block's weights
 * are rejected against the float64 step without Newton–Schulz. */
/* One large_batch block of the float64 rule from (W, M, N): the outputs of tokens t0 … t0+nb−1
 * into o (nb, dv), W and M updated; returns the bound on W's entries for one float32 NS
 * evaluation (0 without NS); muon_steps < 0: the control, the step without NS. */
static double ref_lb_block(double *o, double *W, double *M, const double *N0, const ttt_tensor *q,
                           const ttt_tensor *k, const ttt_tensor *v, const float *eta,
                           double alpha, double theta, double mu, int muon_steps, int renorm,
                           int rows_axis, int t0, int nb, int dk, int dv) {
    const size_t n = (size_t)dk * dv;
    const int nch = rows_axis ? dk : dv;
    double *G = dzeros(n), *U = dzeros(n), *Nn = dzeros(nch), abc[100][3], bound = 0.0;
    for (int t = t0; t < t0 + nb; t++) {
        drow_mat(o + (size_t)(t - t0) * dv, q->data + t * dk, W, dk, dv);
        const double w = pow(alpha, t0 + nb - 1 - t) * (eta ? eta[t] : 1.0);
        dadd_sq_grad(G, W, k->data + t * dk, v->data + t * dv, w, dk, dv);
    }
    for (size_t i = 0; i < n; i++) M[i] = mu * M[i] + G[i];
    if (muon_steps > 0) {
        coeff_table(abc, muon_steps, "muon");
        dns(U, M, dk, dv, (const double(*)[3])abc, muon_steps);
        double umax = 0.0;
        for (size_t i = 0; i < n; i++) umax = fmax(umax, fabs(U[i]));
        bound = theta * ns_rtol(M, dk, dv, (const double(*)[3])abc, muon_steps, 0) * umax;
    } else {
        memcpy(U, M, n * sizeof(double));
    }
    const double A = pow(alpha, nb);
    for (size_t i = 0; i < n; i++) W[i] = A * W[i] - theta * U[i];
    if (renorm) {
        double rmax = 1.0;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) Nn[rows_axis ? i : j] += W[i * dv + j] * W[i * dv + j];
        for (int c = 0; c < nch; c++)
            if (N0[c] > 0) rmax = fmax(rmax, N0[c] / (sqrt(Nn[c]) + 1e-5));
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                int c = rows_axis ? i : j;
                if (N0[c] > 0) W[i * dv + j] *= N0[c] / (sqrt(Nn[c]) + 1e-5);
            }
        bound *= rmax;
    }
    free(G), free(U), free(Nn);
    return bound;
}

START_TEST(large_batch_full_block_is_step_then_renorm) {
    const int T = 37, dk = 6, dv = 5;
    tu_fixture f;
    tu_fx_init(&f, 108);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *W_init = tu_randn(&f, dk, dv, 0.5f);
    /* cases: b, momentum, NS steps (0 = no muon), renormalize, rows axis, decay */
    const struct { int b; double mu; int ns; int renorm, rows; double alpha; } cases[] = {
        {T, 0.0, 0, 1, 0, 1.0},  {T, 0.0, 0, 1, 1, 1.0},  {T, 0.0, 0, 1, 0, 0.98},
        {T, 0.0, 0, 0, 0, 1.0},  {10, 0.6, 0, 1, 0, 1.0}, {10, 0.6, 5, 1, 0, 1.0},
        {8, 0.0, 5, 1, 1, 0.99},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char body[400];
        snprintf(body, sizeof body,
                 "model: linear, loss: squared, mini_batch: %d, order: apply_then_update, "
                 "optimizer: {name: large_batch, lr: 0.4, decay: %g, momentum: %g, muon: %s, "
                 "steps: %d, renormalize: %s, renormalize_axis: %s}",
                 cases[ci].b, cases[ci].alpha, cases[ci].mu, cases[ci].ns ? "true" : "false",
                 cases[ci].ns ? cases[ci].ns : 5, cases[ci].renorm ? "true" : "false",
                 cases[ci].rows ? "rows" : "columns");
        ttt_layer L;
        make_layer(&L, body, dk, dv);
        ttt_layer_state st = {0};
        ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
        memcpy(st.W[0]->data, W_init->data, W_init->n * sizeof(float));
        if (L.optim->init_state) L.optim->init_state(L.optim_cfg, st.opt[0], st.W[0]);
        if (cases[ci].ns) { /* a block at a time from the float32 state (above) */
            const int b = cases[ci].b, has_m = cases[ci].mu > 0, nch = cases[ci].rows ? dk : dv;
            const size_t n = (size_t)dk * dv;
            for (int t0 = 0; t0 < T; t0 += b) {
                const int nb = t0 + b <= T ? b : T - t0;
                double *W = dcopy_f(st.W[0]->data, n), *Wx = dcopy_f(st.W[0]->data, n);
                double *M = has_m ? dcopy_f(st.opt[0][0]->data, n) : dzeros(n);
                double *Mx = has_m ? dcopy_f(st.opt[0][0]->data, n) : dzeros(n);
                ck_assert(cases[ci].renorm); /* N0: the target norms, the state's last tensor */
                double *N0 = dcopy_f(st.opt[0][has_m]->data, nch);
                double *o_ref = dzeros((size_t)nb * dv), *o_x = dzeros((size_t)nb * dv);
                ttt_tensor qb = ttt_tensor_view(q->data + t0 * dk, 2, (int[]){nb, dk});
                ttt_tensor kb = ttt_tensor_view(k->data + t0 * dk, 2, (int[]){nb, dk});
                ttt_tensor vb = ttt_tensor_view(v->data + t0 * dv, 2, (int[]){nb, dv});
                ttt_tensor eb = ttt_tensor_view(eta->data + t0, 1, (int[]){nb});
                ttt_tensor *o = forward(&f, &L, &st, &qb, &kb, &vb, &eb, NULL);
                const double alpha = (double)(float)cases[ci].alpha;
                const double ns_bound =
                    ref_lb_block(o_ref, W, M, N0, q, k, v, eta->data, alpha, 0.4, cases[ci].mu,
                                 cases[ci].ns, 1, cases[ci].rows, t0, nb, dk, dv);
                TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
                TU_ASSERT_CLOSE(st.W[0]->data, W, n, ATOL + ns_bound, RTOL);
                ref_lb_block(o_x, Wx, Mx, N0, q, k, v, eta->data, alpha, 0.4, cases[ci].mu, -1, 1,
                             cases[ci].rows, t0, nb, dk, dv);
                tu_ratio_quiet = 1;
                ck_assert_msg(!tu_close(st.W[0]->data, Wx, n, ATOL + ns_bound, RTOL, NULL, 0),
                              "case %zu block %d: passes as the step without Newton-Schulz", ci,
                              t0 / b);
                tu_ratio_quiet = 0;
                free(W), free(Wx), free(M), free(Mx), free(N0), free(o_ref), free(o_x);
            }
            continue;
        }
        ttt_tensor *o = forward(&f, &L, &st, q, k, v, eta, NULL);
        double *o_ref = dzeros((size_t)T * dv), *W = dcopy_f(W_init->data, W_init->n);
        ref_large_batch(o_ref, W, q, k, v, eta->data, (double)(float)cases[ci].alpha, 0.4,
                        cases[ci].mu, cases[ci].ns, cases[ci].b, cases[ci].renorm, cases[ci].rows,
                        T, dk, dv);
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(st.W[0]->data, W, st.W[0]->n, ATOL, RTOL);
        if (ci == 0) {
            /* without the renormalization the final weights differ detectably */
            double *o2 = dzeros((size_t)T * dv), *W2 = dcopy_f(W_init->data, W_init->n);
            ref_large_batch(o2, W2, q, k, v, eta->data, 1.0, 0.4, 0.0, 0, T, 0, 0, T, dk, dv);
            ck_assert(!tu_close(st.W[0]->data, W2, st.W[0]->n, ATOL, RTOL, NULL, 0));
            /* and the other axis is a different rule */
            double *o3 = dzeros((size_t)T * dv), *W3 = dcopy_f(W_init->data, W_init->n);
            ref_large_batch(o3, W3, q, k, v, eta->data, 1.0, 0.4, 0.0, 0, T, 1, 1, T, dk, dv);
            ck_assert(!tu_close(st.W[0]->data, W3, st.W[0]->n, ATOL, RTOL, NULL, 0));
            free(o2), free(W2), free(o3), free(W3);
        }
        free(o_ref), free(W);
    }
    /* A zero-initialized linear model: renormalization leaves its all-zero channels alone, so the
     * default large_batch equals plain SGD with apply_then_update (not the zero matrix). */
    ttt_layer Lz, Ls;
    make_layer(&Lz, "model: linear, loss: squared, mini_batch: 8, order: apply_then_update, "
                    "optimizer: {name: large_batch, lr: 0.4}", dk, dv);
    make_layer(&Ls, "model: linear, loss: squared, mini_batch: 8, order: apply_then_update, "
                    "optimizer: {name: sgd, lr: 0.4}, form: generic", dk, dv);
    ttt_layer_state sz = {0}, ss = {0};
    ttt_tensor *oz = forward(&f, &Lz, &sz, q, k, v, eta, NULL);
    ttt_tensor *os = forward(&f, &Ls, &ss, q, k, v, eta, NULL);
    ck_assert(ttt_max_abs(sz.W[0]) > 0.1f);
    ck_assert_float_eq(ttt_max_abs_diff(oz, os), 0.0f);
    ck_assert_float_eq(ttt_max_abs_diff(sz.W[0], ss.W[0]), 0.0f);
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* sgd: l2 and decay placements                                                                  */

/* Float64 delta rule with decay: S = αS − β kᵀ(k S_g − v), S_g = αS (coupled) or S (decoupled). */
static void ref_delta(double *o, double *S, const ttt_tensor *q, const ttt_tensor *k,
                      const ttt_tensor *v, double alpha, double beta, double vscale, int coupled,
                      int T, int dk, int dv) {
    const size_t n = (size_t)dk * dv;
    double *Sg = dzeros(n), *g = dzeros(n);
    float *vt = malloc(sizeof(float) * dv);
    for (int t = 0; t < T; t++) {
        for (size_t i = 0; i < n; i++) Sg[i] = coupled ? alpha * S[i] : S[i];
        for (int j = 0; j < dv; j++) vt[j] = v->data[t * dv + j]; /* targets scaled below */
        memset(g, 0, n * sizeof(double));
        /* kᵀ(k S_g − v·vscale) with vscale applied in double */
        double e[64];
        drow_mat(e, k->data + t * dk, Sg, dk, dv);
        for (int j = 0; j < dv; j++) e[j] -= vscale * vt[j];
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) g[i * dv + j] = k->data[t * dk + i] * e[j];
        for (size_t i = 0; i < n; i++) S[i] = alpha * S[i] - beta * g[i];
        drow_mat(o + (size_t)t * dv, q->data + t * dk, S, dk, dv);
    }
    free(Sg), free(g), free(vt);
}

/* docs/math.md §6.8: the L2-regularized loss ℓ + (1−γ)/(2θ)‖W‖² under plain SGD is decoupled decay γ. */
START_TEST(sgd_l2_equals_decoupled_decay) {
    const int T = 31, dk = 6, dv = 4;
    const double theta = 0.5, gamma = 0.9;
    tu_fixture f;
    tu_fx_init(&f, 109);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_layer Ll, Ld;
    make_layer(&Ll, "model: linear, loss: squared, optimizer: {name: sgd, lr: 0.5, l2: 0.2}", dk,
               dv);
    make_layer(&Ld, "model: linear, loss: squared, optimizer: {name: sgd, lr: 0.5, decay: 0.9}, "
                    "form: generic", dk, dv);
    /* l2 has no closed form: auto must not pick one */
    ck_assert_str_eq(tu_form_used(&Ll), "generic");
    ttt_layer_state sl = {0}, sd = {0};
    ttt_tensor *ol = forward(&f, &Ll, &sl, q, k, v, NULL, NULL);
    ttt_tensor *od = forward(&f, &Ld, &sd, q, k, v, NULL, NULL);
    double *o_ref = dzeros((size_t)T * dv), *S = dzeros(dk * dv);
    ref_delta(o_ref, S, q, k, v, gamma, theta, 1.0, 0, T, dk, dv);
    TU_ASSERT_CLOSE(ol->data, o_ref, ol->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(od->data, o_ref, od->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(sl.W[0]->data, S, sl.W[0]->n, ATOL, RTOL);
    /* and l2 does something: without it the outputs are those of γ = 1 */
    double *o1 = dzeros((size_t)T * dv), *S1 = dzeros(dk * dv);
    ref_delta(o1, S1, q, k, v, 1.0, theta, 1.0, 0, T, dk, dv);
    ck_assert(!tu_close(ol->data, o1, ol->n, ATOL, RTOL, NULL, 0));
    free(o_ref), free(S), free(o1), free(S1);
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §3 / §6.3: for the squared loss, coupled (α, θ = β, target v) equals decoupled (γ = α,
 * θ = αβ, target v/α): both give αS + αβ kᵀ(v/α − kS). Both runs use the generic driver; the
 * coupled/decoupled pair with the same (α, β, v) is a different rule and must be rejected. */
START_TEST(coupled_equals_rescaled_decoupled) {
    const int T = 33, dk = 5, dv = 4;
    const double alpha = 0.9, beta = 0.8;
    tu_fixture f;
    tu_fx_init(&f, 110);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *v_over = ttt_scale(&f.ctx, v, (float)(1.0 / alpha));
    ttt_layer Lc, Ld;
    make_layer(&Lc, "model: linear, loss: squared, form: generic, optimizer: {name: sgd, lr: 0.8, "
                    "decay: 0.9, decay_placement: coupled}", dk, dv);
    make_layer(&Ld, "model: linear, loss: squared, form: generic, optimizer: {name: sgd, lr: 0.72, "
                    "decay: 0.9, decay_placement: decoupled}", dk, dv);
    ttt_layer_state sc = {0}, sd = {0};
    ttt_tensor *oc = forward(&f, &Lc, &sc, q, k, v, NULL, NULL);
    ttt_tensor *od = forward(&f, &Ld, &sd, q, k, v_over, NULL, NULL);
    double *o_ref = dzeros((size_t)T * dv), *S = dzeros(dk * dv);
    ref_delta(o_ref, S, q, k, v, (double)(float)alpha, beta, 1.0, 1, T, dk, dv);
    TU_ASSERT_CLOSE(oc->data, o_ref, oc->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(od->data, o_ref, od->n, ATOL, RTOL);
    /* the two float32 runs against each other: the sum of their bounds */
    TU_ASSERT_CLOSE_F(od->data, oc->data, od->n, 2 * ATOL, 2 * RTOL);
    TU_ASSERT_CLOSE_F(sd.W[0]->data, sc.W[0]->data, sd.W[0]->n, 2 * ATOL, 2 * RTOL);
    /* decoupled with the unscaled (α, β, v) is another rule */
    double *o_x = dzeros((size_t)T * dv), *S_x = dzeros(dk * dv);
    ref_delta(o_x, S_x, q, k, v, alpha, beta, 1.0, 0, T, dk, dv);
    ck_assert(!tu_close(oc->data, o_x, oc->n, ATOL, RTOL, NULL, 0));
    free(o_ref), free(S), free(o_x), free(S_x);
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* adam                                                                                          */

/* Float64 Adam with the driver's block semantics (docs/math.md §1): within a block every token reads
 * step(W_0, state_0, G_i) with the prefix gradient G_i = Σ_{s≤i} η_s g_s(W_0) and the prefix decay
 * A_i; the block ends with the last token's step (so the count advances once per block). */
static void ref_adam(double *o, double *W, const ttt_tensor *q, const ttt_tensor *k,
                     const ttt_tensor *v, const float *eta, double alpha, double theta, double b1,
                     double b2, double eps, int bias_correct, int b, int T, int dk, int dv,
                     double *step_scale) {
    const size_t n = (size_t)dk * dv;
    double *m = dzeros(n), *vv = dzeros(n), *G = dzeros(n), *W0 = dzeros(n), *Wi = dzeros(n);
    double *mi = dzeros(n), *vi = dzeros(n);
    /* the step's conditioning (adam_matches_reference): m's Σ|terms| as its own moving average of
     * |G|, and per entry the sum over steps of the squared scale of a step's rounding */
    double *ma = dzeros(n), *mai = dzeros(n), *s2 = dzeros(n);
    int count = 0;
    for (int t0 = 0; t0 < T; t0 += b) {
        const int nb = t0 + b <= T ? b : T - t0;
        memcpy(W0, W, n * sizeof(double));
        memset(G, 0, n * sizeof(double));
        for (int i = 0; i < nb; i++) {
            const int t = t0 + i;
            for (size_t j = 0; j < n; j++) G[j] *= i > 0 ? alpha : 1.0;
            dadd_sq_grad(G, W0, k->data + t * dk, v->data + t * dv, eta ? eta[t] : 1.0, dk, dv);
            const int c = count + 1;
            const double A = pow(alpha, i + 1);
            for (size_t j = 0; j < n; j++) {
                mi[j] = b1 * m[j] + (1 - b1) * G[j];
                mai[j] = b1 * ma[j] + (1 - b1) * fabs(G[j]);
                vi[j] = b2 * vv[j] + (1 - b2) * G[j] * G[j];
                double mh = mi[j], vh = vi[j], mah = mai[j];
                if (bias_correct)
                    mh /= 1 - pow(b1, c), mah /= 1 - pow(b1, c), vh /= 1 - pow(b2, c);
                Wi[j] = A * W0[j] - theta * mh / (sqrt(vh) + eps);
                const double sc = theta * (mah + 0.5 * fabs(mh)) / (sqrt(vh) + eps);
                s2[j] += sc * sc;
            }
            drow_mat(o + (size_t)t * dv, q->data + t * dk, Wi, dk, dv);
        }
        memcpy(W, Wi, n * sizeof(double));
        memcpy(m, mi, n * sizeof(double));
        memcpy(vv, vi, n * sizeof(double));
        memcpy(ma, mai, n * sizeof(double));
        count++;
    }
    *step_scale = 0;
    for (size_t j = 0; j < n; j++) *step_scale = fmax(*step_scale, sqrt(s2[j]));
    free(m), free(vv), free(G), free(W0), free(Wi), free(mi), free(vi), free(ma), free(mai),
        free(s2);
}

/* Adam against its float64 rule: b = 1 with decay, and b = 5 (prefix-gradient block steps, last
 * block shorter). Tolerance: the suite's walk RTOL·max|want| for the recurrence, plus the step's
 * own conditioning, from the float64 run: a step θ·m̂/(√v̂ + ε) rounds m̂ — a sum of gradients of
 * either sign, so its error is ε·Σ|terms|, with Σ|terms| the same moving average of |G| — and v̂
 * (terms ≥ 0: ε·v̂, halved by the square root) through n_a = d_k + 10 operations (G's d_k-term
 * product, some ten element-wise), so each step moves an entry of W by at most
 * n_a·ε·θ·(m̂_abs + ½|m̂|)/(√v̂ + ε); independent from step to step, a walk of deviation
 * ε·√n_a·√(Σ_steps of those scales²) (every token's step counted, also within a block), c = 6.
 * The outputs carry it times max_t Σ_i |q_ti|. Dropping the bias correction is rejected. */
START_TEST(adam_matches_reference) {
    const int T = 29, dk = 5, dv = 4;
    tu_fixture f;
    tu_fx_init(&f, 111);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f);
    const double b1 = (double)0.8f, b2 = (double)0.95f, eps = (double)1e-6f;
    const struct { int b; double alpha; } cases[] = {{1, 0.97}, {5, 1.0}};
    for (int ci = 0; ci < 2; ci++) {
        char body[300];
        snprintf(body, sizeof body,
                 "model: linear, loss: squared, mini_batch: %d, optimizer: {name: adam, lr: 0.05, "
                 "decay: %g, beta1: 0.8, beta2: 0.95, eps: 1e-6}",
                 cases[ci].b, cases[ci].alpha);
        ttt_layer L;
        make_layer(&L, body, dk, dv);
        ttt_layer_state st = {0};
        ttt_tensor *o = forward(&f, &L, &st, q, k, v, eta, NULL);
        double *o_ref = dzeros((size_t)T * dv), *W = dzeros(dk * dv), scale;
        ref_adam(o_ref, W, q, k, v, eta->data, (double)(float)cases[ci].alpha, (double)0.05f, b1,
                 b2, eps, 1, cases[ci].b, T, dk, dv, &scale);
        double qsum = 0;
        for (int t = 0; t < T; t++) {
            double s1 = 0;
            for (int i = 0; i < dk; i++) s1 += fabs((double)q->data[t * dk + i]);
            qsum = fmax(qsum, s1);
        }
        const double step_tol = 6 * 0x1p-24 * sqrt(dk + 10.0) * scale;
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, step_tol * qsum, RTOL);
        TU_ASSERT_CLOSE(st.W[0]->data, W, st.W[0]->n, step_tol, RTOL);
        const int blocks = (T + cases[ci].b - 1) / cases[ci].b;
        ck_assert_float_eq(st.opt[0][2]->data[0], (float)blocks); /* the step count */
        ck_assert_float_eq(st.opt[0][2]->data[st.opt[0][2]->n - 1], (float)blocks);
        if (ci == 0) { /* without the bias correction the outputs differ */
            double *o_x = dzeros((size_t)T * dv), *W_x = dzeros(dk * dv);
            double scale_x;
            ref_adam(o_x, W_x, q, k, v, eta->data, (double)0.97f, (double)0.05f, b1, b2, eps, 0, 1,
                     T, dk, dv, &scale_x);
            ck_assert(!tu_close(o->data, o_x, o->n, step_tol * qsum, RTOL, NULL, 0));
            free(o_x), free(W_x);
        }
        free(o_ref), free(W);
    }
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* lion                                                                                          */

/* Float64 Lion with the driver's block semantics (as ref_adam): every token of a block reads
 * step(W_0, M_0, G_i) with the prefix gradient; the block ends with the last token's step.
 * Returns the smallest |c| seen, so the test can tell a sign decided by rounding from a wrong
 * rule. */
static double ref_lion(double *o, double *W, const ttt_tensor *q, const ttt_tensor *k,
                       const ttt_tensor *v, const float *eta, double alpha, double theta,
                       double b1, double b2, double lambda, int b, int T, int dk, int dv) {
    const size_t n = (size_t)dk * dv;
    double *M = dzeros(n), *G = dzeros(n), *W0 = dzeros(n), *Wi = dzeros(n), *Mi = dzeros(n);
    double cmin = INFINITY;
    for (int t0 = 0; t0 < T; t0 += b) {
        const int nb = t0 + b <= T ? b : T - t0;
        memcpy(W0, W, n * sizeof(double));
        memset(G, 0, n * sizeof(double));
        for (int i = 0; i < nb; i++) {
            const int t = t0 + i;
            for (size_t j = 0; j < n; j++) G[j] *= i > 0 ? alpha : 1.0;
            dadd_sq_grad(G, W0, k->data + t * dk, v->data + t * dv, eta ? eta[t] : 1.0, dk, dv);
            const double A = pow(alpha, i + 1);
            for (size_t j = 0; j < n; j++) {
                const double c = b1 * M[j] + (1 - b1) * G[j];
                cmin = fmin(cmin, fabs(c));
                Wi[j] = (1 - lambda) * A * W0[j] - theta * ((c > 0) - (c < 0));
                Mi[j] = b2 * M[j] + (1 - b2) * G[j];
            }
            drow_mat(o + (size_t)t * dv, q->data + t * dk, Wi, dk, dv);
        }
        memcpy(W, Wi, n * sizeof(double));
        memcpy(M, Mi, n * sizeof(double));
    }
    free(M), free(G), free(W0), free(Wi), free(Mi);
    return cmin;
}

/* Lion against its float64 rule: b = 1 with decay and weight decay, b = 4 (prefix-gradient block
 * steps). Every coordinate moves by ±θ, so the comparison is exact in structure: with no |c|
 * within float32 rounding of 0 (checked: the smallest |c| is reported), a wrong sign, a missing
 * interpolation or a momentum update in the wrong order changes whole coordinates by 2θ. */
START_TEST(lion_matches_reference) {
    const int T = 23, dk = 5, dv = 4;
    tu_fixture f;
    tu_fx_init(&f, 121);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f);
    const struct { int b; double alpha, lambda; } cases[] = {{1, 0.97, 0.01}, {4, 1.0, 0.0}};
    for (int ci = 0; ci < 2; ci++) {
        char body[300];
        snprintf(body, sizeof body,
                 "model: linear, loss: squared, mini_batch: %d, optimizer: {name: lion, lr: 0.05, "
                 "decay: %g, beta1: 0.8, beta2: 0.9, weight_decay: %g}",
                 cases[ci].b, cases[ci].alpha, cases[ci].lambda);
        ttt_layer L;
        make_layer(&L, body, dk, dv);
        ttt_layer_state st = {0};
        ttt_tensor *o = forward(&f, &L, &st, q, k, v, eta, NULL);
        double *o_ref = dzeros((size_t)T * dv), *W = dzeros(dk * dv);
        const double cmin = ref_lion(o_ref, W, q, k, v, eta->data, (double)(float)cases[ci].alpha,
                                     (double)0.05f, (double)0.8f, (double)0.9f,
                                     (double)(float)cases[ci].lambda, cases[ci].b, T, dk, dv);
        ck_assert_msg(cmin > 1e-5, "|c| = %g: a sign decided by rounding", cmin);
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(st.W[0]->data, W, st.W[0]->n, ATOL, RTOL);
        free(o_ref), free(W);
    }
    tu_fx_free(&f);
}
END_TEST

/* ============================================================================================ */
/* YAML                                                                                          */

/* Every optimizer is selectable from YAML with its defaults filled in, options reach the rule,
 * and every option has a help line for `ttt list`. */
START_TEST(optimizers_selectable_from_yaml) {
    /* the optimizers the docs describe are registered … */
    const char *shipped[] = {"sgd", "momentum", "muon", "large_batch", "adam"};
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++)
        ck_assert_msg(ttt_optim_find(shipped[i]) != NULL, "%s not registered", shipped[i]);
    /* … and every registered one, those added later included, is selectable by name alone */
    const char *const *names = ttt_optim_names();
    for (int i = 0; i < ttt_optim_count(); i++) {
        const ttt_optim *o = ttt_optim_at(i);
        ck_assert_str_eq(o->name, names[i]);
        ck_assert(o->cfg_size <= TTT_OPTIM_CFG_MAX);
        for (const ttt_option *opt = o->options; opt->name; opt++)
            ck_assert_msg(opt->help && strlen(opt->help) > 10, "%s.%s has no help", names[i],
                          opt->name);
        ttt_layer L;
        char body[128];
        snprintf(body, sizeof body, "optimizer: %s", names[i]); /* a name alone is accepted */
        make_layer(&L, body, 4, 4);
        ck_assert_str_eq(L.optim->name, names[i]);
    }
    /* options are read, defaults are filled into the resolved tree */
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(
        ttt_cfg_load_string("layer:\n  optimizer: {name: muon, coefficients: cubic, steps: 8}\n",
                            "opt.yaml", &root, &err) == TTT_OK);
    ttt_layer L;
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 4, 4, &L, &err) ==
                      TTT_OK,
                  "%s", err.msg);
    ck_assert_str_eq(L.optim->name, "muon");
    ck_assert_str_eq(ttt_cfg_get_path(root, "layer.optimizer.coefficients")->scalar, "cubic");
    ck_assert_str_eq(ttt_cfg_get_path(root, "layer.optimizer.steps")->scalar, "8");
    ck_assert(ttt_cfg_get_path(root, "layer.optimizer.momentum") != NULL); /* default inserted */
    ck_assert(ttt_cfg_get_path(root, "layer.optimizer.scale") != NULL);
    ttt_cfg_free(root);
    /* the parsed options change the rule: cubic with 30 steps, against the float64 iteration
     * (ns_rtol); the default quintic's 5 steps are rejected */
    make_layer(&L, "optimizer: {name: muon, momentum: 0, coefficients: cubic, steps: 30, "
                   "scale: none, lr: 1}", 4, 6);
    tu_fixture f;
    tu_fx_init(&f, 112);
    ttt_tensor *W = ttt_tensor_2d(&f.ctx, 4, 6), *G = tu_randn(&f, 4, 6, 1.0f);
    ttt_tensor_fill(W, 0.0f);
    ttt_optim_block blk = {.t0 = 0, .n = 1, .theta = 1.0f, .decay = NULL};
    ttt_tensor *Wo = NULL, *So[TTT_MAX_OPT_STATE] = {0};
    L.optim->step(&f.ctx, L.optim_cfg, &Wo, So, W, NULL, G, &blk);
    double *Gd = dcopy_f(G->data, G->n), *want = dzeros(24), cubic[30][3], muon[5][3];
    coeff_table(cubic, 30, "cubic");
    coeff_table(muon, 5, "muon");
    dns(want, Gd, 4, 6, (const double(*)[3])cubic, 30);
    for (int i = 0; i < 24; i++) want[i] = -want[i]; /* W ← 0 − θ·NS(G) */
    const double rtol = ns_rtol(Gd, 4, 6, (const double(*)[3])cubic, 30, 0);
    TU_ASSERT_CLOSE(Wo->data, want, Wo->n, 0.0, rtol);
    dns(want, Gd, 4, 6, (const double(*)[3])muon, 5);
    for (int i = 0; i < 24; i++) want[i] = -want[i];
    tu_ratio_quiet = 1;
    ck_assert(!tu_close(Wo->data, want, Wo->n, 0.0, rtol, NULL, 0));
    tu_ratio_quiet = 0;
    free(Gd), free(want);
    tu_fx_free(&f);
}
END_TEST

/* Bad option values are errors naming file:line:col and what was expected. */
START_TEST(bad_optimizer_options_are_located_errors) {
    const struct { const char *opt; const char *want1, *want2; } cases[] = {
        {"{name: muon, coefficients: quintic}", "coefficients", "muon, lact, cubic"},
        {"{name: muon, steps: 0}", "steps", "out of range"},
        {"{name: muon, scale: huge}", "scale", "muon, fan, none"},
        {"{name: momentum, momentum: 1.0}", "momentum", "[0, 1)"},
        {"{name: momentum, momentum: 1.5}", "momentum", "out of range"},
        {"{name: momentum, nesterov: maybe}", "nesterov", ""},
        {"{name: large_batch, momentum: 1}", "momentum", "[0, 1)"},
        {"{name: large_batch, renormalize_axis: diagonal}", "renormalize_axis", "columns, rows"},
        {"{name: adam, beta2: 1.0}", "beta2", "[0, 1)"},
        {"{name: adam, eps: -1}", "eps", "out of range"},
        {"{name: sgd, l2: -0.5}", "l2", "out of range"},
        {"{name: adam, beta3: 0.5}", "beta3", "beta1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "layer:\n  model: linear\n  optimizer: %s\n", cases[i].opt);
        ttt_cfg_node *root = NULL;
        ttt_error err = {0};
        ck_assert(ttt_cfg_load_string(text, "opt.yaml", &root, &err) == TTT_OK);
        ttt_layer L;
        ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 4, 4, &L, &err);
        ttt_cfg_free(root);
        ck_assert_msg(s != TTT_OK, "%s accepted", cases[i].opt);
        ck_assert_msg(strstr(err.msg, "opt.yaml:3:") && strstr(err.msg, cases[i].want1) &&
                          strstr(err.msg, cases[i].want2),
                      "%s -> '%s'", cases[i].opt, err.msg);
    }
}
END_TEST

static Suite *optim_suite(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, momentum_mu0_equals_decoupled_sgd);
    tcase_add_test(tc, momentum_b1_matches_titans_recurrence);
    tcase_add_test(tc, momentum_chunked_equals_recurrence);
    tcase_add_test(tc, ns_cubic_converges_to_polar_factor);
    tcase_add_test(tc, ns_quintic_rank1_closed_form);
    tcase_add_test(tc, ns_quintic_singular_value_band);
    tcase_add_test(tc, ns_fused_forward_equals_composed);
    tcase_add_test(tc, ns_fused_gradient_matches_composed_and_fd);
    tcase_add_test(tc, muon_step_matches_rule);
    tcase_add_test(tc, large_batch_full_block_is_step_then_renorm);
    tcase_add_test(tc, sgd_l2_equals_decoupled_decay);
    tcase_add_test(tc, coupled_equals_rescaled_decoupled);
    tcase_add_test(tc, adam_matches_reference);
    tcase_add_test(tc, lion_matches_reference);
    tcase_add_test(tc, optimizers_selectable_from_yaml);
    tcase_add_test(tc, bad_optimizer_options_are_located_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(optim_suite()); }
