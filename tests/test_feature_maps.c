/* Feature maps of normalized linear attention (layers/forms/linear_attention/feature_maps.h,
 * docs/math.md "Random features").
 *
 * What ties what:
 *   (i)   every registered map's forward = its formula, evaluated here in float64 from the same
 *         random matrix ω (a map without a formula here fails: a new map needs one);
 *   (ii)  the random maps estimate their kernels without bias: the mean of φ(q)·φ(k) over many
 *         seeds is exp(qᵀk/√d) (favor, favor_orth) or exp(q̂ᵀk̂ − 1) (rfa); orthogonal blocks are
 *         orthogonal with χ_d row norms; the query stabilizer is one factor per row;
 *   (iii) every map's backward = central differences of the float64 formula;
 *   (iv)  the layer with every map, through every form that takes normalize: ratio (recurrent,
 *         chunkwise, parallel, generic), with and without gates, rates η and RFA's gate = the
 *         float64 normalized recurrence written here on the float64 features; a sequence split in
 *         two with the carried state = one pass; the batched runner = the layer per sequence;
 *   (v)   the layer's tape gradients (w.r.t. q, k, v, log α) = central differences of (iv)'s
 *         float64 definition;
 *   (vi)  refusals: a random map without normalize: ratio, an unknown map, a gate per key
 *         dimension, RFA's gate without a gate.
 *
 * Tolerances (|got − want| ≤ atol + rtol·max|want|; "measured" = the largest max-abs error /
 * max|want| over every case here when this was written):
 *   MAP_RTOL 2e-6 for (i): the maps compute in double and round once to float32 (ulp 6e-8);
 *     measured 4e-8.
 *   (ii): 5 standard errors of the mean over the seeds, the standard error measured from the
 *     seeds' own spread (a wrong scale, e.g. exp(qᵀk) instead of exp(qᵀk/√d), is off by tens of
 *     standard errors at these sizes).
 *   GRAD_RTOL 1e-6 for (iii): the backward is computed in double and rounded to float32; the
 *     float64 central difference with h = 1e-6 is exact to ~1e-9 relative; measured 6e-8.
 *   LAYER_RTOL 2e-5 for (iv), as tests/test_la_forms.c: float32 sums in a different order;
 *     measured 3.3e-7. The inputs keep rfa's signed denominators far from zero: with random
 *     query directions some of them fall to ~1e-2 of their terms and the ratio amplifies float32
 *     rounding to ~1.6e-5 (measured), which is rfa's conditioning, not a difference of the forms.
 *   LGRAD_RTOL 2e-5 for (v), as tests/test_form_grads.c: float32 tape gradients through the
 *     feature op, the forms and the ratio against the float64 definition; measured 1.7e-6.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_maps.h"
#include "testutil.h"
#include "internal.h"

#define MAP_RTOL 2e-6
#define MAP_ATOL 1e-7
#define GRAD_RTOL 1e-6
#define GRAD_ATOL 1e-7
#define LAYER_RTOL 2e-5
#define LAYER_ATOL 1e-6
#define LGRAD_RTOL 2e-5
#define LGRAD_ATOL 1e-6

/* ---- (i) the formulas in float64 ---- */

/* y (width) = φ(x) for one row x (d), from ω (m, d); returns 0 when the test has no formula for
 * the map. */
static int ref_map(double *y, const char *name, const double *x, const float *omega, int d, int m,
                   ttt_feature_role role) {
    if (strcmp(name, "elu1") == 0) {
        for (int i = 0; i < d; i++) y[i] = x[i] > 0 ? x[i] + 1 : exp(x[i]);
        return 1;
    }
    if (strcmp(name, "favor") == 0 || strcmp(name, "favor_orth") == 0) {
        /* exp(ω_jᵀx/d^{1/4} − ‖x‖²/(2√d)) / √m, a query's row divided by its largest term */
        double nn = 0, best = -INFINITY;
        for (int i = 0; i < d; i++) nn += x[i] * x[i];
        for (int j = 0; j < m; j++) {
            double u = 0;
            for (int i = 0; i < d; i++) u += (double)omega[(size_t)j * d + i] * x[i];
            y[j] = u / pow(d, 0.25) - nn / (2 * sqrt((double)d));
            if (y[j] > best) best = y[j];
        }
        for (int j = 0; j < m; j++)
            y[j] = exp(y[j] - (role == TTT_FEATURE_QUERY ? best : 0.0)) / sqrt((double)m);
        return 1;
    }
    if (strcmp(name, "rfa") == 0) {
        double nn = 0;
        for (int i = 0; i < d; i++) nn += x[i] * x[i];
        for (int j = 0; j < m; j++) {
            double u = 0;
            for (int i = 0; i < d; i++) u += (double)omega[(size_t)j * d + i] * x[i];
            u /= sqrt(nn);
            y[j] = sin(u) / sqrt((double)m);
            y[m + j] = cos(u) / sqrt((double)m);
        }
        return 1;
    }
    return 0;
}

static double *dalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}

START_TEST(maps_match_their_formulas) {
    tu_fixture f;
    tu_fx_init(&f, 11);
    const int T = 6, d = 8, m = 20;
    for (int i = 0; i < ttt_feature_map_count(); i++) {
        const ttt_feature_map *fm = ttt_feature_map_at(i);
        const float *omega = ttt_feature_omega(&f.ctx, fm, d, m, 5);
        ck_assert_msg((omega == NULL) == (fm->rows(m) == 0), "%s", fm->name);
        const ttt_tensor *x = tu_randn(&f, T, d, 0.8f);
        const int w = fm->width(d, m);
        double *want = dalloc((size_t)T * w), xd[64];
        for (int r = 0; r < 2; r++) {
            const ttt_feature_role role = r ? TTT_FEATURE_QUERY : TTT_FEATURE_KEY;
            ttt_tensor *y = ttt_feature_apply(&f.ctx, fm, omega, m, role, x);
            ck_assert_int_eq(TTT_COLS(y), w);
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < d; c++) xd[c] = x->data[(size_t)t * d + c];
                ck_assert_msg(ref_map(want + (size_t)t * w, fm->name, xd, omega, d, m, role),
                              "feature map %s has no formula in this test", fm->name);
            }
            TU_ASSERT_CLOSE(y->data, want, (size_t)T * w, MAP_ATOL, MAP_RTOL);
        }
        free(want);
    }
    tu_fx_free(&f);
}
END_TEST

/* The same (map, d, m, seed) gives the same matrix; another seed another one. */
START_TEST(random_matrix_is_fixed_by_its_seed) {
    tu_fixture f;
    tu_fx_init(&f, 1);
    for (int i = 0; i < ttt_feature_map_count(); i++) {
        const ttt_feature_map *fm = ttt_feature_map_at(i);
        if (fm->rows(16) == 0) continue;
        const float *a = ttt_feature_omega(&f.ctx, fm, 8, 16, 3),
                    *b = ttt_feature_omega(&f.ctx, fm, 8, 16, 3),
                    *c = ttt_feature_omega(&f.ctx, fm, 8, 16, 4);
        ck_assert(memcmp(a, b, sizeof(float) * 16 * 8) == 0);
        ck_assert(memcmp(a, c, sizeof(float) * 16 * 8) != 0);
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- (ii) the kernels they estimate ---- */

START_TEST(random_features_estimate_their_kernels) {
    tu_fixture f;
    tu_fx_init(&f, 21);
    const int d = 8, m = 128, seeds = 200, pairs = 4;
    for (int i = 0; i < ttt_feature_map_count(); i++) {
        const ttt_feature_map *fm = ttt_feature_map_at(i);
        if (fm->rows(m) == 0) continue;
        const int rfa = strcmp(fm->name, "rfa") == 0; /* only the target differs */
        const int w = fm->width(d, m);
        for (int p = 0; p < pairs; p++) {
            ttt_tensor *qk = tu_randn(&f, 2, d, 0.45f); /* ‖x‖ ≈ 1.3: kernel values O(1) */
            double x[2][64], dot = 0, nq = 0, nk = 0;
            for (int c = 0; c < d; c++) {
                x[0][c] = qk->data[c];
                x[1][c] = qk->data[d + c];
                dot += x[0][c] * x[1][c];
                nq += x[0][c] * x[0][c];
                nk += x[1][c] * x[1][c];
            }
            const double want =
                rfa ? exp(dot / sqrt(nq * nk) - 1.0) : exp(dot / sqrt((double)d));
            double sum = 0, sum2 = 0;
            for (int s = 0; s < seeds; s++) {
                ttt_arena_mark mk = ttt_arena_mark_get(f.ctx.arena);
                const float *omega = ttt_feature_omega(&f.ctx, fm, d, m, 1000 + (uint64_t)s);
                float *y = ttt_arena_alloc(f.ctx.arena, sizeof(float) * 2 * (size_t)w);
                fm->forward(y, qk->data, omega, 2, d, m, TTT_FEATURE_KEY);
                double e = 0;
                for (int j = 0; j < w; j++) e += (double)y[j] * y[w + j];
                sum += e;
                sum2 += e * e;
                ttt_arena_release(f.ctx.arena, mk);
            }
            const double mean = sum / seeds, var = sum2 / seeds - mean * mean;
            const double se = sqrt(var / seeds);
            ck_assert_msg(fabs(mean - want) <= 5 * se + 1e-4,
                          "%s, pair %d: mean estimate %.5f, kernel %.5f, standard error %.2g",
                          fm->name, p, mean, want, se);
        }
    }
    tu_fx_free(&f);
}
END_TEST

/* favor_orth: rows of a block of d are orthogonal; the lengths are χ_d (E‖ω‖² = d), not 1. */
START_TEST(orthogonal_blocks_have_chi_norms) {
    tu_fixture f;
    tu_fx_init(&f, 2);
    const ttt_feature_map *fm = ttt_feature_map_find("favor_orth");
    ck_assert_ptr_nonnull(fm);
    const int d = 8, m = 1028; /* 128 full blocks and a partial one of 4 rows */
    const float *w = ttt_feature_omega(&f.ctx, fm, d, m, 9);
    double sq = 0, sq2 = 0;
    double *len = dalloc((size_t)m);
    for (int j = 0; j < m; j++) {
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)w[(size_t)j * d + i] * w[(size_t)j * d + i];
        len[j] = sqrt(s);
        sq += s;
        sq2 += s * s;
    }
    for (int b0 = 0; b0 < m; b0 += d)
        for (int a = b0; a < b0 + d && a < m; a++)
            for (int b = a + 1; b < b0 + d && b < m; b++) {
                double s = 0;
                for (int i = 0; i < d; i++) s += (double)w[(size_t)a * d + i] * w[(size_t)b * d + i];
                ck_assert_msg(fabs(s) <= 1e-5 * len[a] * len[b], "rows %d, %d: dot %g", a, b, s);
            }
    /* E‖ω‖² = d, Var ‖ω‖² = 2d for χ²_d: the mean over m rows within 5 standard errors */
    const double mean = sq / m;
    ck_assert_msg(fabs(mean - d) <= 5 * sqrt(2.0 * d / m), "mean squared norm %.3f", mean);
    ck_assert_msg(sq2 / m - mean * mean > 0.5 * d, "norms do not vary (variance %.3f)",
                  sq2 / m - mean * mean);
    free(len);
    tu_fx_free(&f);
}
END_TEST

/* A query's features are its key features times one factor per row, and the largest is 1/√m. */
START_TEST(query_stabilizer_is_one_factor_per_row) {
    tu_fixture f;
    tu_fx_init(&f, 3);
    const int T = 5, d = 8, m = 32;
    for (int i = 0; i < ttt_feature_map_count(); i++) {
        const ttt_feature_map *fm = ttt_feature_map_at(i);
        const float *omega = ttt_feature_omega(&f.ctx, fm, d, m, 2);
        const ttt_tensor *x = tu_randn(&f, T, d, 2.0f);
        ttt_tensor *yk = ttt_feature_apply(&f.ctx, fm, omega, m, TTT_FEATURE_KEY, x);
        ttt_tensor *yq = ttt_feature_apply(&f.ctx, fm, omega, m, TTT_FEATURE_QUERY, x);
        const int w = TTT_COLS(yk);
        for (int t = 0; t < T; t++) {
            const float *a = yk->data + (size_t)t * w, *b = yq->data + (size_t)t * w;
            const double c = (double)b[0] / a[0];
            double mx = 0;
            for (int j = 0; j < w; j++) {
                ck_assert_msg(fabs((double)b[j] - c * a[j]) <= 1e-6 * fabs(c * a[j]) + 1e-30,
                              "%s row %d feature %d", fm->name, t, j);
                mx = fmax(mx, b[j]);
            }
            if (c != 1.0) /* stabilized: the largest query feature is 1/√m */
                ck_assert_msg(fabs(mx - 1.0 / sqrt((double)m)) <= 1e-6, "%s: max %g", fm->name,
                              mx);
        }
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- (iii) backward = central differences of the formula ---- */

START_TEST(map_backward_matches_finite_differences) {
    tu_fixture f;
    tu_fx_init(&f, 4);
    const int T = 3, d = 5, m = 7;
    for (int i = 0; i < ttt_feature_map_count(); i++) {
        const ttt_feature_map *fm = ttt_feature_map_at(i);
        const float *omega = ttt_feature_omega(&f.ctx, fm, d, m, 8);
        const int w = fm->width(d, m);
        const ttt_tensor *x = tu_randn(&f, T, d, 0.7f);
        const float *gy = tu_randn_buf(&f, (size_t)T * w, 1.0f);
        for (int r = 0; r < 2; r++) {
            const ttt_feature_role role = r ? TTT_FEATURE_QUERY : TTT_FEATURE_KEY;
            float *y = tu_zalloc(&f.ctx, sizeof(float) * (size_t)T * w);
            float *gx = tu_zalloc(&f.ctx, sizeof(float) * (size_t)T * d);
            fm->forward(y, x->data, omega, T, d, m, role);
            fm->backward(gx, gy, x->data, y, omega, T, d, m, role);
            double *want = dalloc((size_t)T * d), yp[64], ym[64], xd[8];
            for (int t = 0; t < T; t++)
                for (int c = 0; c < d; c++) {
                    for (int e = 0; e < d; e++) xd[e] = x->data[(size_t)t * d + e];
                    const double h = 1e-6 * fmax(1.0, fabs(xd[c])), x0 = xd[c];
                    xd[c] = x0 + h;
                    ck_assert(ref_map(yp, fm->name, xd, omega, d, m, role));
                    xd[c] = x0 - h;
                    ref_map(ym, fm->name, xd, omega, d, m, role);
                    double g = 0;
                    for (int j = 0; j < w; j++) g += gy[(size_t)t * w + j] * (yp[j] - ym[j]) / (2 * h);
                    want[(size_t)t * d + c] = g;
                }
            TU_ASSERT_CLOSE(gx, want, (size_t)T * d, GRAD_ATOL, GRAD_RTOL);
            free(want);
        }
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- (iv) the layer = the normalized recurrence on the features ---- */

static void parse_layer(const char *yaml, int d_k, int d_v, ttt_layer *L, ttt_error *err,
                        ttt_status want) {
    ttt_cfg_node *root = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "f.yaml", &root, err) == TTT_OK, "%s", err->msg);
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d_k, d_v, L, err);
    ttt_cfg_free(root);
    ck_assert_msg(s == want, "%s: %s", yaml, err->msg);
}

/* One problem for the layer: inputs and options. */
typedef struct lproblem {
    int T, dk, dv, m;
    const ttt_feature_map *fm;
    int gate, eta, fgate; /* per-token gate; rates η; RFA's gate */
    double lr;
    const float *q, *k, *v, *et, *la; /* (T, dk), (T, dk), (T, dv), (T), (T) */
} lproblem;

/* o (T, dv) in float64: φ(q), φ(k) by ref_map, then
 *   S_t = α_t S_{t−1} + β_t φ(k_t)ᵀ v_t,  z_t = α_t z_{t−1} + β_t φ(k_t),
 *   o_t = φ(q_t) S_t / (φ(q_t)·z_t + ε),  β_t = θ η_t (1 − α_t if RFA's gate).
 * The inputs as doubles (for central differences): q, k (T, dk), v (T, dv), la (T). */
static void ref_layer(double *o, const lproblem *p, const float *omega, const double *q,
                      const double *k, const double *v, const double *la) {
    const int T = p->T, dk = p->dk, dv = p->dv, w = p->fm->width(dk, p->m);
    double *S = dalloc((size_t)w * dv), *z = dalloc((size_t)w), *pq = dalloc((size_t)w),
           *pk = dalloc((size_t)w);
    for (int t = 0; t < T; t++) {
        ref_map(pk, p->fm->name, k + (size_t)t * dk, omega, dk, p->m, TTT_FEATURE_KEY);
        ref_map(pq, p->fm->name, q + (size_t)t * dk, omega, dk, p->m, TTT_FEATURE_QUERY);
        const double a = p->gate ? exp(la[t]) : 1.0;
        double b = p->lr * (p->eta ? p->et[t] : 1.0);
        if (p->fgate) b *= 1.0 - a;
        for (int i = 0; i < w; i++) {
            z[i] = a * z[i] + b * pk[i];
            for (int j = 0; j < dv; j++)
                S[(size_t)i * dv + j] = a * S[(size_t)i * dv + j] + b * pk[i] * v[(size_t)t * dv + j];
        }
        double den = 0;
        for (int i = 0; i < w; i++) den += pq[i] * z[i];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < w; i++) s += pq[i] * S[(size_t)i * dv + j];
            o[(size_t)t * dv + j] = s / (den + TTT_NLA_EPS);
        }
    }
    free(S), free(z), free(pq), free(pk);
}

static double *to_double(const float *x, size_t n) {
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) y[i] = x ? x[i] : 0.0;
    return y;
}

static void layer_yaml(char *buf, size_t len, const lproblem *p, const char *form) {
    snprintf(buf, len,
             "layer: {preset: linear_attention, normalize: ratio, feature_map: %s, features: %d, "
             "feature_seed: 3, feature_gate: %s, form: %s, chunk: 4, optimizer: {name: sgd, lr: "
             "%g}}\n",
             p->fm->name, p->m, p->fgate ? "true" : "false", form, p->lr);
}

static lproblem make_problem(tu_fixture *f, const ttt_feature_map *fm, int gate, int eta,
                             int fgate) {
    lproblem p = {.T = 21, .dk = 6, .dv = 3, .m = 12, .fm = fm, .gate = gate || fgate,
                  .eta = eta, .fgate = fgate, .lr = 0.8};
    /* queries and keys near one direction, so that rfa's signed kernel estimates sum to
     * denominators far from zero and the ratio does not amplify rounding (the forms' agreement
     * is the question here, not rfa's conditioning) */
    ttt_tensor *q = tu_randn(f, p.T, p.dk, 0.3f), *k = tu_randn(f, p.T, p.dk, 0.3f);
    for (int t = 0; t < p.T; t++) {
        q->data[(size_t)t * p.dk] += 1.0f;
        k->data[(size_t)t * p.dk] += 1.0f;
    }
    p.q = q->data;
    p.k = k->data;
    p.v = tu_randn(f, p.T, p.dv, 1.0f)->data;
    p.et = tu_uniform(f, p.T, 0.3f, 1.0f)->data;
    p.la = tu_uniform(f, p.T, logf(0.8f), logf(0.99f))->data;
    return p;
}

static const char *const ratio_forms[] = {"recurrent", "chunkwise", "parallel", "generic"};

START_TEST(layer_forms_match_normalized_recurrence) {
    tu_fixture f;
    tu_fx_init(&f, 40 + (uint64_t)_i);
    const ttt_feature_map *fm = ttt_feature_map_at(_i);
    for (int variant = 0; variant < 4; variant++) {
        /* plain; gate + η; RFA's gate; RFA's gate + η */
        lproblem p = make_problem(&f, fm, variant == 1, variant == 1 || variant == 3, variant >= 2);
        const float *omega = ttt_feature_omega(&f.ctx, fm, p.dk, p.m, 3);
        double *want = dalloc((size_t)p.T * p.dv);
        double *qd = to_double(p.q, (size_t)p.T * p.dk), *kd = to_double(p.k, (size_t)p.T * p.dk),
               *vd = to_double(p.v, (size_t)p.T * p.dv), *ld = to_double(p.la, (size_t)p.T);
        ref_layer(want, &p, omega, qd, kd, vd, ld);
        for (int fi = 0; fi < 4; fi++) {
            char yaml[512];
            layer_yaml(yaml, sizeof yaml, &p, ratio_forms[fi]);
            ttt_layer L;
            ttt_error err = {0};
            parse_layer(yaml, p.dk, p.dv, &L, &err, TTT_OK);
            ck_assert_int_eq(L.d_phi, fm->width(p.dk, p.m));
            ttt_tensor q = ttt_tensor_view2((float *)p.q, p.T, p.dk),
                       k = ttt_tensor_view2((float *)p.k, p.T, p.dk),
                       v = ttt_tensor_view2((float *)p.v, p.T, p.dv);
            ttt_tensor et = ttt_tensor_view((float *)p.et, 1, (int[]){p.T}),
                       la = ttt_tensor_view((float *)p.la, 1, (int[]){p.T});
            /* whole sequence, then split in two with the carried state */
            for (int split = 0; split < 2; split++) {
                ttt_layer_state st;
                ttt_layer_state_init(&f.ctx, &L, &st, NULL);
                ttt_tensor *o = ttt_tensor_2d(&f.ctx, p.T, p.dv);
                const int cut = split ? 8 : p.T;
                for (int a = 0; a < p.T; a = cut > a ? cut : p.T) {
                    const int n = (a == 0 ? cut : p.T) - a;
                    ttt_tensor qs = ttt_tensor_view2(q.data + (size_t)a * p.dk, n, p.dk),
                               ks = ttt_tensor_view2(k.data + (size_t)a * p.dk, n, p.dk),
                               vs = ttt_tensor_view2(v.data + (size_t)a * p.dv, n, p.dv),
                               os = ttt_tensor_view2(o->data + (size_t)a * p.dv, n, p.dv);
                    ttt_tensor es = ttt_tensor_view(et.data + a, 1, (int[]){n}),
                               ls = ttt_tensor_view(la.data + a, 1, (int[]){n});
                    ck_assert_msg(ttt_layer_forward(&f.ctx, &L, &os, &st, &qs, &ks, &vs,
                                                    p.eta ? &es : NULL, p.gate ? &ls : NULL,
                                                    &err) == TTT_OK,
                                  "%s: %s", yaml, err.msg);
                }
                char msg[256];
                ck_assert_msg(tu_close(o->data, want, (size_t)p.T * p.dv, LAYER_ATOL,
                                       LAYER_RTOL, msg, sizeof msg),
                              "%s (variant %d, split %d): %s", yaml, variant, split, msg);
            }
        }
        free(want), free(qd), free(kd), free(vd), free(ld);
    }
    tu_fx_free(&f);
}
END_TEST

/* ttt_layer_read after a sequence = the output of one more token with that query (the value
 * of that token written first changes S and z, so compare against a zero-rate token). */
START_TEST(layer_read_is_the_next_query) {
    tu_fixture f;
    tu_fx_init(&f, 60 + (uint64_t)_i);
    const ttt_feature_map *fm = ttt_feature_map_at(_i);
    lproblem p = make_problem(&f, fm, 0, 1, 0);
    char yaml[512];
    layer_yaml(yaml, sizeof yaml, &p, "recurrent");
    ttt_layer L;
    ttt_error err = {0};
    parse_layer(yaml, p.dk, p.dv, &L, &err, TTT_OK);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, NULL);
    float *et = (float *)p.et;
    et[p.T - 1] = 0.0f; /* the last token writes nothing */
    ttt_tensor q = ttt_tensor_view2((float *)p.q, p.T - 1, p.dk),
               k = ttt_tensor_view2((float *)p.k, p.T - 1, p.dk),
               v = ttt_tensor_view2((float *)p.v, p.T - 1, p.dv);
    ttt_tensor e = ttt_tensor_view(et, 1, (int[]){p.T - 1});
    ttt_tensor *o = ttt_tensor_2d(&f.ctx, p.T - 1, p.dv);
    ck_assert(ttt_layer_forward(&f.ctx, &L, o, &st, &q, &k, &v, &e, NULL, &err) == TTT_OK);
    ttt_tensor ql = ttt_tensor_view2((float *)p.q + (size_t)(p.T - 1) * p.dk, 1, p.dk);
    ttt_tensor *r = ttt_tensor_2d(&f.ctx, 1, p.dv);
    ck_assert(ttt_layer_read(&f.ctx, &L, &st, r, &ql, &err) == TTT_OK);
    /* the float64 definition with η_T = 0 */
    double *want = dalloc((size_t)p.T * p.dv);
    const float *omega = ttt_feature_omega(&f.ctx, fm, p.dk, p.m, 3);
    double *qd = to_double(p.q, (size_t)p.T * p.dk), *kd = to_double(p.k, (size_t)p.T * p.dk),
           *vd = to_double(p.v, (size_t)p.T * p.dv);
    ref_layer(want, &p, omega, qd, kd, vd, NULL);
    TU_ASSERT_CLOSE(r->data, want + (size_t)(p.T - 1) * p.dv, (size_t)p.dv, LAYER_ATOL,
                    LAYER_RTOL);
    free(want), free(qd), free(kd), free(vd);
    tu_fx_free(&f);
}
END_TEST

/* The batched runner (B, T, H, D) with its carried state = the layer on each sequence. */
START_TEST(batch_runner_matches_layer) {
    tu_fixture f;
    tu_fx_init(&f, 70 + (uint64_t)_i);
    const ttt_feature_map *fm = ttt_feature_map_at(_i);
    const int B = 2, H = 2, T = 9, dk = 4, dv = 3;
    lproblem p = {.dk = dk, .m = 5, .fm = fm, .lr = 1.0};
    char yaml[512];
    layer_yaml(yaml, sizeof yaml, &p, "auto");
    ttt_layer L;
    ttt_error err = {0};
    parse_layer(yaml, dk, dv, &L, &err, TTT_OK);
    float *q = tu_randn_buf(&f, (size_t)B * T * H * dk, 0.6f);
    float *k = tu_randn_buf(&f, (size_t)B * T * H * dk, 0.6f);
    float *v = tu_randn_buf(&f, (size_t)B * T * H * dv, 1.0f);
    float *o = tu_zalloc(&f.ctx, sizeof(float) * (size_t)B * T * H * dv);
    const int ns = ttt_layer_state_count(&L);
    float *outs[TTT_BATCH_MAX_STATE] = {0};
    for (int i = 0; i < ns; i++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_layer_state_info(&L, i, NULL, shape);
        size_t n = 1;
        for (int j = 0; j < nd; j++) n *= (size_t)shape[j];
        ck_assert_uint_eq(n, i == ns - 1 ? (size_t)L.d_phi : (size_t)L.d_phi * dv);
        outs[i] = tu_zalloc(&f.ctx, sizeof(float) * n * B * H);
    }
    const ttt_layer_io io = {.B = B, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v,
                             .state_out = outs};
    ck_assert_msg(ttt_layer_forward_batch(&L, &io, 1, &err) == TTT_OK, "%s", err.msg);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            ttt_tensor *qs = ttt_tensor_2d(&f.ctx, T, dk), *ks = ttt_tensor_2d(&f.ctx, T, dk),
                       *vs = ttt_tensor_2d(&f.ctx, T, dv), *os = ttt_tensor_2d(&f.ctx, T, dv);
            for (int t = 0; t < T; t++) {
                const size_t r = ((size_t)b * T + t) * H + h;
                memcpy(qs->data + (size_t)t * dk, q + r * dk, sizeof(float) * dk);
                memcpy(ks->data + (size_t)t * dk, k + r * dk, sizeof(float) * dk);
                memcpy(vs->data + (size_t)t * dv, v + r * dv, sizeof(float) * dv);
            }
            ttt_layer_state st;
            ttt_layer_state_init(&f.ctx, &L, &st, NULL);
            ck_assert(ttt_layer_forward(&f.ctx, &L, os, &st, qs, ks, vs, NULL, NULL, &err) ==
                      TTT_OK);
            for (int t = 0; t < T; t++)
                ck_assert(memcmp(os->data + (size_t)t * dv,
                                 o + (((size_t)b * T + t) * H + h) * dv, sizeof(float) * dv) == 0);
            const size_t nz = (size_t)L.d_phi, nS = nz * dv, bh = (size_t)b * H + h;
            ck_assert(memcmp(st.W[0]->data, outs[0] + bh * nS, sizeof(float) * nS) == 0);
            ck_assert(memcmp(st.z->data, outs[ns - 1] + bh * nz, sizeof(float) * nz) == 0);
        }
    tu_fx_free(&f);
}
END_TEST

/* ---- (v) the layer's gradients = central differences of the float64 definition ---- */

START_TEST(layer_gradients_match_finite_differences) {
    const ttt_feature_map *fm = ttt_feature_map_at(_i);
    tu_fixture f;
    tu_fx_init(&f, 80 + (uint64_t)_i);
    lproblem p = make_problem(&f, fm, 1, 0, 1); /* RFA's gate: gradients reach log α twice */
    p.T = 11;
    const float *omega = ttt_feature_omega(&f.ctx, fm, p.dk, p.m, 3);
    const size_t nq = (size_t)p.T * p.dk, nv = (size_t)p.T * p.dv;
    const float *R = tu_randn_buf(&f, nv, 1.0f);
    for (int fi = 0; fi < 3; fi++) { /* the differentiable forms: chunkwise, parallel, generic */
        const char *form = ratio_forms[fi + 1];
        char yaml[512];
        layer_yaml(yaml, sizeof yaml, &p, form);
        ttt_layer L;
        ttt_error err = {0};
        parse_layer(yaml, p.dk, p.dv, &L, &err, TTT_OK);
        tu_tape_fixture fx;
        tu_tape_fx_init(&fx);
        ttt_ctx *c = &fx.ctx;
        ttt_tensor *in[4] = {ttt_tensor_2d(c, p.T, p.dk), ttt_tensor_2d(c, p.T, p.dk),
                             ttt_tensor_2d(c, p.T, p.dv), ttt_tensor_1d(c, p.T)};
        const float *src[4] = {p.q, p.k, p.v, p.la};
        float *g[4];
        for (int i = 0; i < 4; i++) {
            memcpy(in[i]->data, src[i], in[i]->n * sizeof(float));
            g[i] = tu_zalloc(c, in[i]->n * sizeof(float));
            ttt_tensor_set_param(in[i], g[i]);
        }
        ttt_layer_state st;
        ttt_layer_state_init(c, &L, &st, NULL);
        ttt_tensor *o = ttt_tensor_2d(c, p.T, p.dv);
        ck_assert_msg(ttt_layer_forward(c, &L, o, &st, in[0], in[1], in[2], NULL, in[3], &err) ==
                          TTT_OK,
                      "%s", err.msg);
        ttt_tensor Rv = ttt_tensor_view2((float *)R, p.T, p.dv);
        ttt_backward(c, ttt_sum(c, ttt_mul(c, o, ttt_tensor_copy(c, &Rv))));
        /* central differences of Σ R ⊙ o(float64) */
        double *x[4] = {to_double(p.q, nq), to_double(p.k, nq), to_double(p.v, nv),
                        to_double(p.la, (size_t)p.T)};
        double *op = dalloc(nv), *om = dalloc(nv);
        for (int i = 0; i < 4; i++) {
            double *want = dalloc(in[i]->n);
            for (size_t j = 0; j < in[i]->n; j++) {
                const double x0 = x[i][j], h = 1e-6 * fmax(1.0, fabs(x0));
                x[i][j] = x0 + h;
                ref_layer(op, &p, omega, x[0], x[1], x[2], x[3]);
                x[i][j] = x0 - h;
                ref_layer(om, &p, omega, x[0], x[1], x[2], x[3]);
                x[i][j] = x0;
                double s = 0;
                for (size_t e = 0; e < nv; e++) s += R[e] * (op[e] - om[e]) / (2 * h);
                want[j] = s;
            }
            char msg[256];
            ck_assert_msg(tu_close(g[i], want, in[i]->n, LGRAD_ATOL, LGRAD_RTOL, msg, sizeof msg),
                          "%s form %s, gradient of input %d: %s", fm->name, form, i, msg);
            free(want);
        }
        for (int i = 0; i < 4; i++) free(x[i]);
        free(op), free(om);
        tu_tape_fx_free(&fx);
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- (vi) refusals ---- */

START_TEST(refusals_say_what_and_where) {
    ttt_layer L;
    ttt_error err = {0};
    parse_layer("layer: {preset: linear_attention, feature_map: favor}\n", 4, 4, &L, &err,
                TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "f.yaml:1:") && strstr(err.msg, "needs normalize: ratio"),
                  "%s", err.msg);
    parse_layer("layer: {preset: performer, feature_map: favr}\n", 4, 4, &L, &err, TTT_ERR_NAME);
    ck_assert_msg(strstr(err.msg, "f.yaml:1:") && strstr(err.msg, "did you mean 'favor'"), "%s",
                  err.msg);
    parse_layer("layer: {preset: rfa, normalize: rms}\n", 4, 4, &L, &err, TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "needs normalize: ratio"), "%s", err.msg);
    parse_layer("layer: {preset: performer, feature_gate: true}\n", 4, 4, &L, &err, TTT_OK);
    tu_fixture f;
    tu_fx_init(&f, 5);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, NULL);
    ttt_tensor *q = tu_randn(&f, 3, 4, 1.0f), *o = ttt_tensor_2d(&f.ctx, 3, 4);
    ck_assert(ttt_layer_forward(&f.ctx, &L, o, &st, q, q, q, NULL, NULL, &err) ==
              TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "needs a gate per token"), "%s", err.msg);
    parse_layer("layer: {preset: performer}\n", 4, 4, &L, &err, TTT_OK);
    ttt_layer_state_init(&f.ctx, &L, &st, NULL);
    ttt_tensor *la = tu_uniform(&f, 12, -0.1f, 0.0f);
    ttt_tensor *la2 = ttt_reshape(&f.ctx, la, 2, (int[]){3, 4});
    ck_assert(ttt_layer_forward(&f.ctx, &L, o, &st, q, q, q, NULL, la2, &err) ==
              TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "per key dimension"), "%s", err.msg);
    /* the presets fill in their map and the ratio */
    ck_assert_ptr_nonnull(L.fmap);
    ck_assert_int_eq(L.normalize, TTT_NORMALIZE_RATIO);
    ck_assert_int_eq(L.d_phi, 64); /* favor_orth's width m, features' default 64 */
    tu_fx_free(&f);
}
END_TEST

static Suite *feature_maps_suite(void) {
    Suite *s = suite_create("feature_maps");
    TCase *tm = tcase_create("maps");
    tcase_add_test(tm, maps_match_their_formulas);
    tcase_add_test(tm, random_matrix_is_fixed_by_its_seed);
    tcase_add_test(tm, random_features_estimate_their_kernels);
    tcase_add_test(tm, orthogonal_blocks_have_chi_norms);
    tcase_add_test(tm, query_stabilizer_is_one_factor_per_row);
    tcase_add_test(tm, map_backward_matches_finite_differences);
    suite_add_tcase(s, tm);
    TCase *tl = tcase_create("layer");
    tcase_set_timeout(tl, 120);
    const int n = ttt_feature_map_count();
    tcase_add_loop_test(tl, layer_forms_match_normalized_recurrence, 0, n);
    tcase_add_loop_test(tl, layer_read_is_the_next_query, 0, n);
    tcase_add_loop_test(tl, batch_runner_matches_layer, 0, n);
    tcase_add_loop_test(tl, layer_gradients_match_finite_differences, 0, n);
    tcase_add_test(tl, refusals_say_what_and_where);
    suite_add_tcase(s, tl);
    return s;
}

int main(void) { return tu_run(feature_maps_suite()); }
