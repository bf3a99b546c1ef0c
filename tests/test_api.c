/* The public C API (include/ttt/ttt.h), seen from a program: this suite includes the public
 * header only and links libttt.so.
 *
 * - descriptors: a bad field gives an error naming it; unset fields take the preset's values,
 *   set ones override them;
 * - forward: the batched (B, T, H, D) call equals the Gated DeltaNet recurrence (the preset's
 *   definition, docs/math.md §4) computed here in double per (b, h) sequence from a given
 *   initial state, output and final state;
 * - backward: the gradients with respect to q, k, v, η, log α and the initial state equal
 *   central finite differences of the forward;
 * - registries list what the library has; an experiment from a string writes its run folder. */
#define _XOPEN_SOURCE 700
#include <check.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ttt/ttt.h>

/* ---- descriptors ---- */

/* Build desc with d_k = d_v = 4 and expect failure with `status` and a message starting with
 * `want_prefix` and containing `want_part`. */
static void expect_error(const ttt_layer_descriptor *desc, int d_k, int d_v, ttt_status status,
                         const char *want_prefix, const char *want_part) {
    ttt_error err;
    ttt_layer_handle *h = (ttt_layer_handle *)1;
    ttt_status s = ttt_layer_new(&h, desc, d_k, d_v, &err);
    ck_assert_msg(s == status, "status %d, expected %d (%s)", (int)s, (int)status,
                  ttt_errmsg(&err));
    ck_assert_ptr_null(h);
    ck_assert_msg(strncmp(ttt_errmsg(&err), want_prefix, strlen(want_prefix)) == 0,
                  "message '%s' does not start with '%s'", ttt_errmsg(&err), want_prefix);
    ck_assert_msg(strstr(ttt_errmsg(&err), want_part), "message '%s' lacks '%s'",
                  ttt_errmsg(&err), want_part);
}

START_TEST(bad_fields_are_named) {
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    s.optimizer = "momentum";
    const ttt_option_value mu_big[] = {{"momentum", 1.5, NULL}};
    s.options = mu_big;
    s.n_options = 1;
    expect_error(&s, 4, 4, TTT_ERR_RANGE, "layer.optimizer.momentum: expected a number in [0, 1]",
                 "got 1.5");
    /* μ = 1 passes the table's inclusive range; the optimizer's own check refuses it, and its
     * message names the field, not a location */
    const ttt_option_value mu_one[] = {{"momentum", 1.0, NULL}};
    s.options = mu_one;
    expect_error(&s, 4, 4, TTT_ERR_RANGE, "layer.optimizer.momentum: 1 is out of range", "[0, 1)");
    const ttt_option_value misspelt[] = {{"momentun", 0.5, NULL}};
    s.options = misspelt;
    expect_error(&s, 4, 4, TTT_ERR_NAME, "layer.optimizer (momentum): unknown option 'momentun'",
                 "did you mean 'momentum'?");
    const ttt_option_value text_for_bool[] = {{"nesterov", 0, "yes"}};
    s.options = text_for_bool;
    expect_error(&s, 4, 4, TTT_ERR_CONFIG, "layer.optimizer.nesterov: expected 0 or 1",
                 "'yes'");
    const ttt_option_value lr_as_option[] = {{"lr", 0.5, NULL}};
    s.options = lr_as_option;
    expect_error(&s, 4, 4, TTT_ERR_CONFIG, "layer.optimizer.lr:", "field `lr`");

    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "gated_deltant";
    expect_error(&s, 4, 4, TTT_ERR_NAME, "layer.preset: unknown preset 'gated_deltant'",
                 "did you mean 'gated_deltanet'?");
    ttt_layer_descriptor_init(&s, sizeof s);
    s.model = "lineer";
    expect_error(&s, 4, 4, TTT_ERR_NAME, "layer.model: unknown model 'lineer'", "'linear'");
    ttt_layer_descriptor_init(&s, sizeof s);
    s.mini_batch = 0;
    expect_error(&s, 4, 4, TTT_ERR_RANGE, "layer.mini_batch: expected an integer in [1, ",
                 "got 0");
    ttt_layer_descriptor_init(&s, sizeof s);
    s.decay = 1.5;
    expect_error(&s, 4, 4, TTT_ERR_RANGE, "layer.optimizer.decay: expected a number in ",
                 "got 1.5");
    ttt_layer_descriptor_init(&s, sizeof s);
    s.order = "apply_then_updat";
    expect_error(&s, 4, 4, TTT_ERR_CONFIG, "layer.order: expected one of ",
                 "did you mean 'apply_then_update'?");
    /* cross-field checks of the build */
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "deltanet";
    s.form = "dual";
    expect_error(&s, 4, 4, TTT_ERR_CONFIG, "layer.form: no dual form for (model linear",
                 "expected form: generic");
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "ttt_linear";
    expect_error(&s, 4, 3, TTT_ERR_CONFIG, "layer.model: ttt_linear adds its input",
                 "d_k = 4, d_v = 3");
    ttt_layer_descriptor_init(&s, sizeof s);
    expect_error(&s, 0, 4, TTT_ERR_ARG, "ttt_layer_new: d_k = 0", "expected >= 1");
}
END_TEST

START_TEST(presets_and_overrides) {
    ttt_error err;
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "gated_deltanet";
    ttt_layer_handle *h = NULL;
    ck_assert_msg(ttt_layer_new(&h, &s, 4, 4, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    /* unset fields: the preset's tuple (docs/math.md §4) */
    const char *t = ttt_layer_tuple(h);
    ck_assert_msg(strstr(t, "gated_deltanet = (model linear, loss squared, optimizer sgd, lr 1, "
                            "decay 0.99, decay_placement coupled, mini_batch 1,"),
                  "%s", t);
    ttt_layer_free(h);
    /* set fields override it; an option of another optimizer replaces the preset's options */
    s.decay = 0.5;
    s.chunk = 8;
    s.form = "chunkwise";
    ck_assert_msg(ttt_layer_new(&h, &s, 4, 4, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    t = ttt_layer_tuple(h);
    ck_assert_msg(strstr(t, "decay 0.5, decay_placement coupled") &&
                      strstr(t, "form chunkwise, chunk 8"),
                  "%s", t);
    ttt_layer_free(h);
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "titans";
    s.optimizer = "sgd"; /* titans' momentum options (lr 0.1, decay 0.99) do not apply to sgd */
    ck_assert_msg(ttt_layer_new(&h, &s, 4, 4, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    t = ttt_layer_tuple(h);
    ck_assert_msg(strstr(t, "optimizer sgd, lr 1, decay 1,") && strstr(t, "steps per_token"),
                  "%s", t);
    ck_assert(!strstr(t, "feature_map")); /* not a ratio layer: no feature fields listed */
    ttt_layer_free(h);
    /* typed options reach the optimizer: μ = 0.5 and Nesterov on */
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "titans";
    const ttt_option_value o[] = {{"momentum", 0.5, NULL}, {"nesterov", 1, NULL}};
    s.options = o;
    s.n_options = 2;
    /* Nesterov has no chunked closed form: asked for by name, it is refused */
    s.form = "chunkwise";
    ck_assert_int_eq(ttt_layer_new(&h, &s, 4, 4, &err), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(ttt_errmsg(&err), "no chunkwise form"), "%s", ttt_errmsg(&err));
    /* and auto (chosen per call) falls back to the generic driver */
    s.form = NULL;
    ck_assert_msg(ttt_layer_new(&h, &s, 4, 4, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ck_assert_msg(strstr(ttt_layer_tuple(h), "form auto"), "%s", ttt_layer_tuple(h));
    ck_assert_int_eq(ttt_layer_state_tensors(h), 2); /* W and its momentum M */
    const char *name;
    int shape[4];
    ck_assert_int_eq(ttt_layer_state_shape(&name, shape, h, 1), 2);
    ck_assert_int_eq(shape[0], 4);
    ck_assert_int_eq(shape[1], 4);
    ck_assert_int_eq(ttt_layer_state_shape(&name, shape, h, 2), -1);
    ttt_layer_free(h);
    /* the feature fields: a ratio layer lists them in its tuple, set ones over the preset's
     * (rfa: feature_map rfa, features 64, seed 0, no gate); other layers do not list them
     * (checked on titans above) */
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "rfa";
    s.features = 16;
    s.feature_seed = 7;
    s.feature_gate = 1;
    ck_assert_msg(ttt_layer_new(&h, &s, 4, 4, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ck_assert_msg(strstr(ttt_layer_tuple(h), "normalize ratio, feature_map rfa, features 16, "
                                             "feature_seed 7, feature_gate true)"),
                  "%s", ttt_layer_tuple(h));
    ttt_layer_free(h);
    /* a feature map without normalize: ratio is refused, naming the field */
    ttt_layer_descriptor_init(&s, sizeof s);
    s.feature_map = "favor";
    expect_error(&s, 4, 4, TTT_ERR_CONFIG, "layer.feature_map: favor is a feature map",
                 "needs normalize: ratio");
}
END_TEST

/* ---- forward against the recurrence ---- */

static uint64_t rs = 12345;
static float urand(float lo, float hi) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rs >> 40) * (1.0 / 16777216.0));
}
static float *rbuf(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = urand(lo, hi);
    return x;
}

START_TEST(forward_is_the_recurrence) {
    enum { B = 2, T = 13, H = 3, DK = 4, DV = 3 };
    const double scale = 0.7;
    ttt_error err;
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "gated_deltanet";
    s.scale = scale;
    s.form = "chunkwise"; /* chunks of 4 over 13 tokens: a partial last chunk */
    s.chunk = 4;
    ttt_layer_handle *h = NULL;
    ck_assert_msg(ttt_layer_new(&h, &s, DK, DV, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ck_assert_int_eq(ttt_layer_state_tensors(h), 1);
    float *q = rbuf((size_t)B * T * H * DK, -1, 1), *k = rbuf((size_t)B * T * H * DK, -1, 1);
    float *v = rbuf((size_t)B * T * H * DV, -1, 1), *eta = rbuf((size_t)B * T * H, 0.1f, 0.9f);
    float *la = rbuf((size_t)B * T * H, -0.3f, 0.0f), *s0 = rbuf((size_t)B * H * DK * DV, -1, 1);
    for (size_t r = 0; r < (size_t)B * T * H; r++) { /* unit keys: a contraction */
        double n = 0;
        for (int j = 0; j < DK; j++) n += (double)k[r * DK + j] * k[r * DK + j];
        for (int j = 0; j < DK; j++) k[r * DK + j] /= (float)sqrt(n);
    }
    float *o = calloc((size_t)B * T * H * DV, sizeof(float));
    float *s1 = calloc((size_t)B * H * DK * DV, sizeof(float));
    const float *sin[1] = {s0};
    float *sout[1] = {s1};
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v, .eta = eta,
                       .log_alpha = la, .state_in = sin, .state_out = sout};
    ck_assert_msg(ttt_layer_forward_run(h, &io, 0, &err) == TTT_OK, "%s", ttt_errmsg(&err));

    /* S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t, o_t = (scale q_t) S_t, β_t = lr η_t
     * with lr = 1, per (b, h), in double. Float32 rounding over 13 tokens of O(1) values is
     * ~1e-6; 1e-5 leaves a margin, and a wrong layout, gate or order is off by O(0.1). */
    double maxerr = 0;
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++) {
            double S[DK][DV];
            for (int i = 0; i < DK; i++)
                for (int j = 0; j < DV; j++)
                    S[i][j] = s0[(((size_t)b * H + hh) * DK + i) * DV + j];
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * H + hh;
                const float *kt = k + row * DK, *qt = q + row * DK, *vt = v + row * DV;
                const double a = exp(la[row]), beta = eta[row];
                for (int j = 0; j < DV; j++) {
                    double pred = 0;
                    for (int i = 0; i < DK; i++) pred += kt[i] * a * S[i][j];
                    for (int i = 0; i < DK; i++)
                        S[i][j] = a * S[i][j] - beta * kt[i] * (pred - vt[j]);
                }
                for (int j = 0; j < DV; j++) {
                    double y = 0;
                    for (int i = 0; i < DK; i++) y += scale * qt[i] * S[i][j];
                    maxerr = fmax(maxerr, fabs(y - o[row * DV + j]));
                }
            }
            for (int i = 0; i < DK; i++)
                for (int j = 0; j < DV; j++)
                    maxerr = fmax(maxerr,
                                  fabs(S[i][j] - s1[(((size_t)b * H + hh) * DK + i) * DV + j]));
        }
    ck_assert_msg(maxerr < 1e-5, "max |api - recurrence| = %g", maxerr);
    free(q), free(k), free(v), free(eta), free(la), free(s0), free(o), free(s1);
    ttt_layer_free(h);
}
END_TEST

/* GLA: S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t with one gate per key dimension, read from the
 * (B, T, H, d_k) gate layout; from the initial state of zeros (state_in NULL). */
START_TEST(vector_gates_are_per_key_dimension) {
    enum { B = 2, T = 7, H = 2, DK = 3, DV = 2 };
    ttt_error err;
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = "gla";
    ttt_layer_handle *h = NULL;
    ck_assert_msg(ttt_layer_new(&h, &s, DK, DV, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    float *q = rbuf((size_t)B * T * H * DK, -1, 1), *k = rbuf((size_t)B * T * H * DK, -1, 1);
    float *v = rbuf((size_t)B * T * H * DV, -1, 1), *eta = rbuf((size_t)B * T * H, 0.1f, 0.9f);
    float *la = rbuf((size_t)B * T * H * DK, -1.0f, 0.0f);
    float *o = calloc((size_t)B * T * H * DV, sizeof(float));
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v, .eta = eta,
                       .log_alpha = la, .alpha_vec = 1};
    ck_assert_msg(ttt_layer_forward_run(h, &io, 0, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    /* float32 rounding over 7 tokens ~1e-6; a gate of the wrong dimension or token is O(0.1) */
    double maxerr = 0;
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++) {
            double S[DK][DV] = {{0}};
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * H + hh;
                for (int i = 0; i < DK; i++)
                    for (int j = 0; j < DV; j++)
                        S[i][j] = exp(la[row * DK + i]) * S[i][j] +
                                  eta[row] * k[row * DK + i] * v[row * DV + j];
                for (int j = 0; j < DV; j++) {
                    double y = 0;
                    for (int i = 0; i < DK; i++) y += q[row * DK + i] * S[i][j];
                    maxerr = fmax(maxerr, fabs(y - o[row * DV + j]));
                }
            }
        }
    ck_assert_msg(maxerr < 1e-5, "max |api - recurrence| = %g", maxerr);
    free(q), free(k), free(v), free(eta), free(la), free(o);
    ttt_layer_free(h);
}
END_TEST

/* ---- backward against finite differences ---- */

enum { GB = 1, GT = 5, GH = 2, GD = 3, MAXS = 2 };

typedef struct grad_problem {
    ttt_layer_handle *h;
    int alpha_vec;
    int n_state;
    size_t n_state_el[MAXS];
    float *x[5]; /* q, k, v, eta, log_alpha */
    size_t n[5];
    float *state[MAXS];
    float *d_o, *d_s[MAXS];
} grad_problem;

/* L = Σ d_o ⊙ o + Σ_i d_s[i] ⊙ final_state_i through the forward, in double. */
static double loss(const grad_problem *p) {
    float o[GB * GT * GH * GD], fin[MAXS][GB * GH * GD * GD];
    float *outs[MAXS] = {fin[0], fin[1]};
    ttt_batch_io io = {.size = sizeof io,
                       .B = GB, .T = GT, .H = GH, .o = o, .q = p->x[0], .k = p->x[1],
                       .v = p->x[2], .eta = p->x[3], .log_alpha = p->x[4],
                       .alpha_vec = p->alpha_vec,
                       .state_in = (const float *const *)p->state, .state_out = outs};
    ttt_error err;
    ck_assert_msg(ttt_layer_forward_run(p->h, &io, 1, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    double l = 0;
    for (size_t i = 0; i < GB * GT * GH * GD; i++) l += (double)p->d_o[i] * o[i];
    for (int s = 0; s < p->n_state; s++)
        for (size_t i = 0; i < p->n_state_el[s]; i++) l += (double)p->d_s[s][i] * fin[s][i];
    return l;
}

/* Central difference of L in x[i], Richardson-extrapolated: D* = (4 D(h/2) − D(h)) / 3 cancels
 * the h² term, leaving float32 rounding of about 1e-7 |L| / h. */
static double fd(const grad_problem *p, float *x) {
    const float x0 = *x, hs[2] = {4e-3f, 2e-3f};
    double d[2];
    for (int j = 0; j < 2; j++) {
        *x = x0 + hs[j];
        const double lp = loss(p);
        *x = x0 - hs[j];
        const double lm = loss(p);
        d[j] = (lp - lm) / (double)((x0 + hs[j]) - (x0 - hs[j]));
    }
    *x = x0;
    return (4 * d[1] - d[0]) / 3;
}

static void check_gradients(const char *preset, int mini_batch, int alpha_vec) {
    grad_problem p = {.alpha_vec = alpha_vec};
    ttt_error err;
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    s.preset = preset;
    s.mini_batch = mini_batch;
    ck_assert_msg(ttt_layer_new(&p.h, &s, GD, GD, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    p.n_state = ttt_layer_state_tensors(p.h);
    ck_assert_int_le(p.n_state, MAXS);
    const size_t nqk = GB * GT * GH * GD, ntok = GB * GT * GH;
    const size_t n[5] = {nqk, nqk, nqk, ntok, alpha_vec ? nqk : ntok};
    const float lo[5] = {-1, -0.6f, -1, 0.2f, -0.3f}, hi[5] = {1, 0.6f, 1, 0.8f, -0.05f};
    for (int i = 0; i < 5; i++) p.x[i] = rbuf(p.n[i] = n[i], lo[i], hi[i]);
    for (int i = 0; i < p.n_state; i++) {
        int shape[4];
        const int nd = ttt_layer_state_shape(NULL, shape, p.h, i);
        p.n_state_el[i] = GB * GH;
        for (int j = 0; j < nd; j++) p.n_state_el[i] *= (size_t)shape[j];
        p.state[i] = rbuf(p.n_state_el[i], -0.5f, 0.5f);
        p.d_s[i] = rbuf(p.n_state_el[i], -1, 1);
    }
    p.d_o = rbuf(nqk, -1, 1);

    float *g[5], *gs[MAXS], o[GB * GT * GH * GD];
    for (int i = 0; i < 5; i++) g[i] = calloc(p.n[i], sizeof(float));
    for (int i = 0; i < p.n_state; i++) gs[i] = calloc(p.n_state_el[i], sizeof(float));
    ttt_batch_io io = {.size = sizeof io,
                       .B = GB, .T = GT, .H = GH, .o = o, .q = p.x[0], .k = p.x[1], .v = p.x[2],
                       .eta = p.x[3], .log_alpha = p.x[4], .alpha_vec = alpha_vec,
                       .state_in = (const float *const *)p.state};
    ttt_batch_grad gr = {.size = sizeof gr,
                         .d_o = p.d_o, .d_state_out = (const float *const *)p.d_s,
                         .d_q = g[0], .d_k = g[1], .d_v = g[2], .d_eta = g[3],
                         .d_log_alpha = g[4], .d_state_in = gs};
    ck_assert_msg(ttt_layer_backward_run(p.h, &io, &gr, &err) == TTT_OK, "%s", ttt_errmsg(&err));

    /* Tolerance: 2e-3 max|grad| + 1e-4 (the Richardson remainder and float32 rounding, as in
     * tests/test_layer_grad.c); a wrong or missing gradient term is O(max|grad|). */
    const char *what[5] = {"q", "k", "v", "eta", "log_alpha"};
    for (int i = 0; i < 5 + p.n_state; i++) {
        float *x = i < 5 ? p.x[i] : p.state[i - 5];
        const float *an = i < 5 ? g[i] : gs[i - 5];
        const size_t m = i < 5 ? p.n[i] : p.n_state_el[i - 5];
        double gmax = 0;
        for (size_t j = 0; j < m; j++) gmax = fmax(gmax, fabs(an[j]));
        ck_assert_msg(gmax > 1e-3, "%s: gradient of %s%s is zero", preset,
                      i < 5 ? what[i] : "state", i < 5 ? "" : "_in");
        for (size_t j = 0; j < m; j++) {
            const double num = fd(&p, &x[j]);
            ck_assert_msg(fabs(num - an[j]) <= 2e-3 * gmax + 1e-4,
                          "%s: d%s[%zu] = %g from the tape, %g by finite differences", preset,
                          i < 5 ? what[i] : (i == 5 ? "state0" : "state1"), j, (double)an[j],
                          num);
        }
    }
    for (int i = 0; i < 5; i++) free(p.x[i]), free(g[i]);
    for (int i = 0; i < p.n_state; i++) free(p.state[i]), free(p.d_s[i]), free(gs[i]);
    free(p.d_o);
    ttt_layer_free(p.h);
}

START_TEST(backward_matches_finite_differences) {
    check_gradients("gated_deltanet", TTT_DESC_UNSET_INT, 0); /* a closed form on the tape */
    check_gradients("titans", 2, 0); /* optimizer state (momentum) in the state */
    check_gradients("gla", TTT_DESC_UNSET_INT, 1); /* gates per key dimension */
}
END_TEST

START_TEST(backward_rejects_missing_inputs) {
    ttt_error err;
    ttt_layer_descriptor s;
    ttt_layer_descriptor_init(&s, sizeof s);
    ttt_layer_handle *h = NULL;
    ck_assert(ttt_layer_new(&h, &s, 2, 2, &err) == TTT_OK);
    float x[4] = {0}, o[4], de[2];
    ttt_batch_io io = {.size = sizeof io, .B = 1, .T = 2, .H = 1, .o = o, .q = x, .k = x, .v = x};
    ttt_batch_grad g = {.size = sizeof g, .d_o = x, .d_eta = de};
    ck_assert_int_eq(ttt_layer_backward_run(h, &io, &g, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(ttt_errmsg(&err), "need io->eta"), "%s", ttt_errmsg(&err));
    io.q = NULL;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_ARG);
    ttt_layer_free(h);
}
END_TEST

/* ---- structs that grow (docs/api.md "Versions and the ABI") ---- */

/* The output of a forward of the layer `desc` on fixed inputs (B = 1, T = 6, H = 1, d = 8). */
static void forward_of(float o[48], const ttt_layer_descriptor *desc) {
    ttt_error err;
    ttt_layer_handle *h = NULL;
    ck_assert_msg(ttt_layer_new(&h, desc, 8, 8, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    float q[48], k[48], v[48];
    for (int i = 0; i < 48; i++) {
        q[i] = (float)sin(0.7 * i + 0.1);
        k[i] = (float)cos(1.3 * i + 0.2);
        v[i] = (float)sin(0.31 * i * i + 0.3);
    }
    ttt_batch_io io;
    ttt_batch_io_init(&io, sizeof io);
    io.B = 1, io.T = 6, io.H = 1, io.o = o, io.q = q, io.k = k, io.v = v;
    ck_assert_msg(ttt_layer_forward_run(h, &io, 1, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ttt_layer_free(h);
}

START_TEST(growable_structs_read_only_their_size) {
    /* A program compiled before the feature_* fields were appended: its descriptor ends at
     * `normalize`. The bytes beyond are not its own (here 0xAB, which as feature_seed would be
     * refused and as feature_map would be read through): init writes none of them and
     * ttt_layer_new reads none of them, so the layer is that of a full descriptor with the
     * feature fields unset. Performer (random features: feature_map favor_orth, seed 0) is a
     * preset whose output depends on them. */
    const size_t old_size = offsetof(ttt_layer_descriptor, feature_map);
    ttt_layer_descriptor old;
    memset(&old, 0xAB, sizeof old);
    ttt_layer_descriptor_init(&old, old_size);
    ck_assert_uint_eq(old.size, old_size);
    const unsigned char *tail = (const unsigned char *)&old + old_size;
    for (size_t i = 0; i < sizeof old - old_size; i++)
        ck_assert_msg(tail[i] == 0xAB, "init wrote byte %zu beyond size", old_size + i);
    old.preset = "performer";
    ttt_layer_descriptor full;
    ttt_layer_descriptor_init(&full, sizeof full);
    ck_assert_uint_eq(full.size, sizeof full);
    full.preset = "performer";
    float o_old[48], o_full[48], o_seed[48];
    forward_of(o_old, &old);
    forward_of(o_full, &full);
    ck_assert_msg(memcmp(o_old, o_full, sizeof o_old) == 0, "a smaller descriptor built another "
                  "layer");
    /* control: an appended field that is set does change the layer, so the equality above could
     * have failed had the library read the old caller's tail */
    full.feature_seed = 1;
    forward_of(o_seed, &full);
    ck_assert_msg(memcmp(o_seed, o_full, sizeof o_seed) != 0, "feature_seed changed nothing");

    /* sizes the library refuses: below the first layout (0: never set), above its own */
    ttt_error err;
    ttt_layer_handle *h = (ttt_layer_handle *)1;
    const size_t bad_desc[] = {0, old_size - 1, sizeof full + 8};
    for (int i = 0; i < 3; i++) {
        old.size = bad_desc[i];
        ck_assert_int_eq(ttt_layer_new(&h, &old, 8, 8, &err), TTT_ERR_ARG);
        ck_assert_ptr_null(h);
        ck_assert_msg(strncmp(ttt_errmsg(&err), "ttt_layer_descriptor: size = ", 29) == 0, "%s",
                      ttt_errmsg(&err));
    }

    /* ttt_batch_io and ttt_batch_grad: the first layouts end at n_seqs and d_state_in */
    full.feature_seed = TTT_DESC_UNSET_INT;
    ck_assert(ttt_layer_new(&h, &full, 8, 8, &err) == TTT_OK);
    float x[48] = {0}, o[48], dq[48];
    const size_t io_end = offsetof(ttt_batch_io, n_seqs) + sizeof(int);
    const size_t g_end = offsetof(ttt_batch_grad, d_state_in) + sizeof(float *const *);
    ttt_batch_io io;
    memset(&io, 0xAB, sizeof io);
    ttt_batch_io_init(&io, io_end);
    for (size_t i = io_end; i < sizeof io; i++)
        ck_assert_msg(((const unsigned char *)&io)[i] == 0xAB, "init wrote byte %zu", i);
    ck_assert(io.B == 0 && io.o == NULL && io.cu_seqlens == NULL && io.n_seqs == 0);
    io.B = 1, io.T = 6, io.H = 1, io.o = o, io.q = x, io.k = x, io.v = x;
    ttt_batch_grad g;
    ttt_batch_grad_init(&g, sizeof g);
    ck_assert(g.size == sizeof g && g.d_o == NULL && g.d_state_in == NULL);
    g.d_o = x, g.d_q = dq;
    ck_assert_msg(ttt_layer_forward_run(h, &io, 1, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    g.size = g_end;
    ck_assert_msg(ttt_layer_backward_run(h, &io, &g, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ck_assert_str_ne(ttt_layer_form_for(h, &io), "none");
    const size_t bad_io[] = {0, io_end - 1, sizeof io + 8};
    for (int i = 0; i < 3; i++) {
        io.size = bad_io[i];
        ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_ERR_ARG);
        ck_assert_msg(strncmp(ttt_errmsg(&err), "ttt_batch_io: size = ", 21) == 0, "%s",
                      ttt_errmsg(&err));
        ck_assert_int_eq(ttt_layer_backward_run(h, &io, &g, &err), TTT_ERR_ARG);
        ck_assert_str_eq(ttt_layer_form_for(h, &io), "none");
    }
    io.size = sizeof io;
    const size_t bad_g[] = {0, g_end - 1, sizeof g + 8};
    for (int i = 0; i < 3; i++) {
        g.size = bad_g[i];
        ck_assert_int_eq(ttt_layer_backward_run(h, &io, &g, &err), TTT_ERR_ARG);
        ck_assert_msg(strncmp(ttt_errmsg(&err), "ttt_batch_grad: size = ", 23) == 0, "%s",
                      ttt_errmsg(&err));
    }
    ttt_batch_io_init(NULL, sizeof io); /* does nothing (ttt.h) */
    ttt_batch_grad_init(NULL, sizeof g);
    ttt_layer_free(h);
}
END_TEST

/* The DPLR chunkwise form's workspace grows as chunk² (chunk clamped to T): a chunk size no
 * allocation can hold is refused with TTT_ERR_NOMEM before any buffer is read (the buffers here
 * hold one token; T = 2^30 only sizes the chunk), where the size_t count once wrapped; the same
 * call with chunk 1 on one token runs. */
START_TEST(dplr_chunk_too_large_is_refused) {
    float x[1] = {0.5f}, o[1];
    ttt_dplr_io io = {.B = 1, .T = 1 << 30, .H = 1, .d_k = 1, .d_v = 1, .o = o, .q = x, .k = x,
                      .a = x, .b = x, .v = x, .chunk = INT_MAX};
    ttt_error err;
    ck_assert_int_eq(ttt_dplr_forward(&io, &err), TTT_ERR_NOMEM);
    ck_assert_msg(strstr(ttt_errmsg(&err), "ttt_dplr_forward: dplr chunkwise: chunks of 1073741824 "
                                           "tokens need"), "%s", ttt_errmsg(&err));
    io.T = 1;
    io.chunk = 1;
    ck_assert_msg(ttt_dplr_forward(&io, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ck_assert(o[0] == 0.125f); /* S_1 = (1 + b a) S_0 + k v = 0.25 from S_0 = 0; o = q S_1 */
}
END_TEST

/* ---- registries, version ---- */

static int listed(ttt_registry r, const char *want) {
    for (int i = 0; i < ttt_registry_count(r); i++) {
        const char *name = NULL, *help = NULL;
        ck_assert(ttt_registry_entry(&name, &help, r, i, NULL) == TTT_OK);
        ck_assert(name && help && help[0]);
        if (strcmp(name, want) == 0) return 1;
    }
    return 0;
}

START_TEST(registries_list_the_library) {
    ck_assert(listed(TTT_REGISTRY_OPTIMIZERS, "momentum"));
    ck_assert(listed(TTT_REGISTRY_MODELS, "swiglu"));
    ck_assert(listed(TTT_REGISTRY_LOSSES, "squared"));
    ck_assert(listed(TTT_REGISTRY_PRESETS, "gated_deltanet"));
    ck_assert(listed(TTT_REGISTRY_FORMS, "chunkwise"));
    ck_assert(listed(TTT_REGISTRY_TASKS, "memory"));
    ck_assert(!listed(TTT_REGISTRY_PRESETS, "sgd"));
    ttt_error err;
    const char *name;
    ck_assert_int_eq(ttt_registry_entry(&name, NULL, TTT_REGISTRY_MODELS, -1, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_registry_count(TTT_REGISTRY_COUNT), -1);
    ck_assert_int_eq(ttt_registry_entry(&name, NULL, TTT_REGISTRY_COUNT, 0, &err), TTT_ERR_ARG);
    ck_assert(strchr(ttt_version(), '.'));
    ck_assert_str_eq(ttt_errmsg(NULL), "");
}
END_TEST

/* ---- experiments ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

START_TEST(experiment_from_a_string) {
    char dir[] = "/tmp/ttt-api-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char out[256];
    snprintf(out, sizeof out, "%s/run", dir);
    const char *yaml = "name: api\nseed: 0\ntask:\n  kind: memory\n  pairs: [4]\n  key_dim: 8\n"
                       "  value_dim: 8\n  trials: 1\nlayer:\n  preset: deltanet\n";
    const char *sets[] = {"layer.chunk=8"};
    ttt_error err;
    ck_assert_msg(ttt_experiment_run_string(yaml, "api.yaml", sets, 1, out, &err) == TTT_OK, "%s",
                  ttt_errmsg(&err));
    char path[512];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", out);
    const char *text = read_text(path);
    ck_assert_msg(text && strstr(text, "preset: deltanet") && strstr(text, "chunk: 8"), "%s",
                  text ? text : "(no config.resolved.yaml)");
    snprintf(path, sizeof path, "%s/summary.csv", out);
    ck_assert_ptr_nonnull(read_text(path));
    /* a located error from the text, nothing written */
    char out2[256];
    snprintf(out2, sizeof out2, "%s/bad", dir);
    ck_assert_int_eq(ttt_experiment_run_string("task:\n  kind: memory\n  pairz: 3\n", "bad.yaml",
                                               NULL, 0, out2, &err),
                     TTT_ERR_CONFIG);
    ck_assert_msg(strncmp(ttt_errmsg(&err), "bad.yaml:3:3: ", 14) == 0, "%s", ttt_errmsg(&err));
    ck_assert_int_ne(access(out2, F_OK), 0);
    ck_assert_int_eq(ttt_experiment_run_file("/nonexistent/x.yaml", NULL, 0, out2, &err),
                     TTT_ERR_IO);
    /* the layer's own checks, reached from YAML, are located at the value that fails them */
    const char *task = "task:\n  kind: memory\n  pairs: [4]\n  key_dim: 8\n  value_dim: 8\n";
    const struct { const char *layer, *want; } located[] = {
        /* the task takes lines 1-5 and `layer:` line 6; "  form: " ends at column 8 */
        {"layer:\n  preset: deltanet\n  form: dual\n", "bad.yaml:8:9: layer.form: no dual form"},
        /* 1.0 at column 25 of "  optimizer: {momentum: 1.0}" */
        {"layer:\n  preset: titans\n  optimizer: {momentum: 1.0}\n",
         "bad.yaml:8:25: layer.optimizer.momentum: 1 is out of range"},
        {"layer:\n  preset: linear_attention\n  loss: squared\n  normalize: ratio\n",
         "bad.yaml:9:14: layer.normalize: ratio is normalized linear attention"},
    };
    for (size_t i = 0; i < sizeof located / sizeof located[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", task, located[i].layer);
        ck_assert_int_ne(ttt_experiment_run_string(text, "bad.yaml", NULL, 0, out2, &err), TTT_OK);
        ck_assert_msg(strncmp(ttt_errmsg(&err), located[i].want, strlen(located[i].want)) == 0,
                      "'%s', expected '%s…'", ttt_errmsg(&err), located[i].want);
    }
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* ---- the form a call runs ---- */

/* Forward of `preset` (form `form`, NULL = auto) on fixed inputs of (1, T, 2, 8) into o. */
static void run_form(float *o, const char *preset, const char *form, int T, const float *la,
                     int alpha_vec) {
    enum { H = 2, D = 8 };
    static float q[1 * 40 * H * D], k[1 * 40 * H * D], v[1 * 40 * H * D];
    unsigned x = 12345;
    for (int i = 0; i < T * H * D; i++) {
        x = x * 1103515245u + 12345u;
        q[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
        k[i] = (float)((x >> 4) & 0xffff) / 65536.0f - 0.5f;
        v[i] = (float)((x >> 12) & 0xffff) / 65536.0f - 0.5f;
    }
    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = preset;
    desc.form = form;
    desc.chunk = 8;
    ttt_error err;
    ttt_layer_handle *h;
    ck_assert_msg(ttt_layer_new(&h, &desc, D, D, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ttt_batch_io io = {.size = sizeof io,
                       .B = 1, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v, .log_alpha = la,
                       .alpha_vec = alpha_vec};
    ck_assert_msg(ttt_layer_forward_run(h, &io, 1, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    ttt_layer_free(h);
}

/* The form `auto` resolves to for a call on io, for preset. */
static const char *form_for(const char *preset, const ttt_batch_io *io) {
    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = preset;
    desc.chunk = 8;
    ttt_error err;
    ttt_layer_handle *h;
    ck_assert_msg(ttt_layer_new(&h, &desc, 8, 8, &err) == TTT_OK, "%s", ttt_errmsg(&err));
    static char name[32];
    snprintf(name, sizeof name, "%s", ttt_layer_form_for(h, io));
    ttt_layer_free(h);
    return name;
}

/* ttt_layer_form_for names the form auto runs: the output of an auto call is bit for bit the
 * output of the named form, and differs from another form's (the forms round differently), so
 * a wrong name is seen. The names follow docs/forms.md "How `auto` chooses": at d = 8 and
 * T = 40 the measured rates put the recurrent kernels of linear attention and the delta rule
 * ahead of their chunkwise forms (which would do 3× their FLOPs at C = 16). */
START_TEST(form_for_names_the_form_that_runs) {
    enum { T = 40, N = 1 * T * 2 * 8 };
    static float la_tok[T * 2], la_key[T * 2 * 8], o_auto[N], o_named[N], o_other[N];
    for (int i = 0; i < T * 2; i++) la_tok[i] = -0.05f - 0.001f * (float)i;
    for (int i = 0; i < T * 2 * 8; i++) la_key[i] = -0.05f - 0.0003f * (float)i;
    static const struct {
        const char *preset;
        int gate; /* 0 none, 1 per token, 2 per key */
        const char *want, *other;
    } cases[] = {
        {"linear_attention", 0, "recurrent", "chunkwise"},
        {"gla", 2, "recurrent", "generic"},
        {"deltanet", 0, "recurrent", "chunkwise"},
        {"gated_deltanet", 1, "recurrent", "chunkwise"},
        /* a gate per key (KDA): KDA's chunkwise form by its auto_rank (it has no rates; the
         * delta rule's chunkwise form takes a scalar gate only) */
        {"gated_deltanet", 2, "chunkwise", "recurrent"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const float *la = cases[c].gate == 1 ? la_tok : cases[c].gate == 2 ? la_key : NULL;
        const ttt_batch_io io = {.size = sizeof io, .B = 1, .T = T, .H = 2, .log_alpha = la,
                                 .alpha_vec = cases[c].gate == 2};
        const char *got = form_for(cases[c].preset, &io);
        ck_assert_msg(strcmp(got, cases[c].want) == 0, "%s (gate %d): form_for says %s, "
                      "expected %s", cases[c].preset, cases[c].gate, got, cases[c].want);
        run_form(o_auto, cases[c].preset, NULL, T, la, cases[c].gate == 2);
        run_form(o_named, cases[c].preset, got, T, la, cases[c].gate == 2);
        ck_assert_msg(memcmp(o_auto, o_named, sizeof o_auto) == 0,
                      "%s: auto's output is not %s's", cases[c].preset, got);
        if (cases[c].other) {
            run_form(o_other, cases[c].preset, cases[c].other, T, la, cases[c].gate == 2);
            ck_assert_msg(memcmp(o_auto, o_other, sizeof o_auto) != 0,
                          "%s: %s and %s agree bit for bit; the comparison cannot tell them "
                          "apart", cases[c].preset, got, cases[c].other);
        }
    }
    /* TTT-Linear runs its dual form; a per-key gate has no form for it; no handle: "none" */
    const ttt_batch_io io = {.size = sizeof io, .B = 1, .T = T, .H = 2};
    ck_assert_str_eq(form_for("ttt_linear", &io), "dual");
    const ttt_batch_io io_key = {.size = sizeof io_key,
                                 .B = 1, .T = T, .H = 2, .log_alpha = la_key, .alpha_vec = 1};
    ck_assert_str_eq(form_for("ttt_linear", &io_key), "none");
    ck_assert_str_eq(ttt_layer_form_for(NULL, &io), "none");
}
END_TEST


/* ---- misuse: every public function over NULL, zero, negative and overflowing arguments ----
 *
 * Each fallible function returns a status (never crashes, never aborts: the suite runs each test
 * in a child process, so a crash fails it) and writes a message when err is given; each is also
 * called with err = NULL. The functions that cannot report answer as ttt.h documents: zeros,
 * −1, "" or "none". A valid call beside each refused one shows that the refusal is the bad
 * argument's. */

/* Expect `s` to be `want` with a message containing `part`; the same call with err = NULL is
 * made by the caller. */
#define EXPECT_STATUS(call, want, part)                                                       \
    do {                                                                                      \
        ttt_error e_;                                                                         \
        memset(&e_, 0, sizeof e_);                                                            \
        ttt_error *err = &e_;                                                                 \
        ttt_status s_ = (call);                                                               \
        ck_assert_msg(s_ == (want), "%s: status %d, expected %d (%s)", #call, (int)s_,        \
                      (int)(want), ttt_errmsg(&e_));                                          \
        ck_assert_msg(strstr(ttt_errmsg(&e_), (part)), "%s: message '%s' lacks '%s'", #call,  \
                      ttt_errmsg(&e_), (part));                                               \
        err = NULL;                                                                           \
        s_ = (call);                                                                          \
        ck_assert_msg(s_ == (want), "%s with err = NULL: status %d", #call, (int)s_);         \
    } while (0)

START_TEST(misuse_is_refused_with_a_status) {
    /* status, version, registries */
    ck_assert_str_eq(ttt_errmsg(NULL), "");
    ck_assert_ptr_nonnull(ttt_version());
    ck_assert_int_eq(ttt_registry_count((ttt_registry)-1), -1);
    ck_assert_int_eq(ttt_registry_count(TTT_REGISTRY_COUNT), -1);
    ck_assert_int_eq(ttt_registry_count((ttt_registry)INT_MAX), -1);
    const int n_presets = ttt_registry_count(TTT_REGISTRY_PRESETS);
    const char *name = "x";
    EXPECT_STATUS(ttt_registry_entry(NULL, NULL, (ttt_registry)-1, 0, err), TTT_ERR_ARG,
                  "no such registry");
    EXPECT_STATUS(ttt_registry_entry(NULL, NULL, TTT_REGISTRY_PRESETS, -1, err), TTT_ERR_ARG,
                  "expected 0 <= i <");
    EXPECT_STATUS(ttt_registry_entry(&name, NULL, TTT_REGISTRY_PRESETS, n_presets, err),
                  TTT_ERR_ARG, "expected 0 <= i <");
    EXPECT_STATUS(ttt_registry_entry(&name, NULL, TTT_REGISTRY_PRESETS, INT_MIN, err),
                  TTT_ERR_ARG, "expected 0 <= i <");
    EXPECT_STATUS(ttt_registry_entry(NULL, NULL, TTT_REGISTRY_PRESETS, 0, err), TTT_OK, "");

    /* descriptors and handles */
    ttt_layer_descriptor_init(NULL, sizeof(ttt_layer_descriptor));
    ttt_layer_descriptor d;
    ttt_layer_descriptor_init(&d, sizeof d);
    d.preset = "gated_deltanet";
    ttt_layer_handle *h = (ttt_layer_handle *)1;
    EXPECT_STATUS(ttt_layer_new(NULL, &d, 2, 2, err), TTT_ERR_ARG, "out is NULL");
    EXPECT_STATUS(ttt_layer_new(&h, NULL, 2, 2, err), TTT_ERR_ARG, "desc is NULL");
    ck_assert_ptr_null(h);
    /* widths from 1 to 65536: beyond, a model's derived widths (an MLP's 4 d) would leave an
     * int */
    static const int bad_dims[][2] = {{0, 2},     {2, 0},       {-1, 2},         {2, INT_MIN},
                                      {65537, 2}, {2, INT_MAX}, {INT_MAX, INT_MAX}};
    for (int i = 0; i < 7; i++)
        EXPECT_STATUS(ttt_layer_new(&h, &d, bad_dims[i][0], bad_dims[i][1], err), TTT_ERR_ARG,
                      "expected >= 1 and <= 65536");
    /* the widest layer of every preset is built or refused with a message, never by a crash or
     * an overflow (an MLP's hidden width 4·65536 is an int), and its state shapes are positive */
    for (int i = 0; i < n_presets; i++) {
        ttt_layer_descriptor w;
        ttt_layer_descriptor_init(&w, sizeof w);
        ck_assert(ttt_registry_entry(&w.preset, NULL, TTT_REGISTRY_PRESETS, i, NULL) == TTT_OK);
        ttt_error e;
        ttt_layer_handle *hw = NULL;
        ttt_status st = ttt_layer_new(&hw, &w, 65536, 65536, &e);
        if (st != TTT_OK) {
            ck_assert_ptr_null(hw);
            ck_assert_msg(ttt_errmsg(&e)[0], "%s: no message", w.preset);
            continue;
        }
        for (int j = 0; j < ttt_layer_state_tensors(hw); j++) {
            int sh[4];
            const int nd = ttt_layer_state_shape(NULL, sh, hw, j);
            for (int k = 0; k < nd; k++)
                ck_assert_msg(sh[k] >= 1, "%s: state %d dim %d = %d", w.preset, j, k, sh[k]);
        }
        ttt_layer_free(hw);
    }
    d.n_options = -1;
    EXPECT_STATUS(ttt_layer_new(&h, &d, 2, 2, err), TTT_ERR_ARG, "options given without");
    d.n_options = 1; /* options NULL */
    EXPECT_STATUS(ttt_layer_new(&h, &d, 2, 2, err), TTT_ERR_ARG, "options given without");
    ttt_layer_descriptor m;
    ttt_layer_descriptor_init(&m, sizeof m);
    m.optimizer = "momentum";
    const ttt_option_value twice[] = {{"momentum", 0.5, NULL}, {"momentum", 0.9, NULL}};
    m.options = twice;
    m.n_options = 2;
    EXPECT_STATUS(ttt_layer_new(&h, &m, 2, 2, err), TTT_ERR_CONFIG,
                  "layer.optimizer.momentum: given twice (options 0 and 1)");
    const ttt_option_value no_key[] = {{NULL, 0.5, NULL}};
    m.options = no_key;
    m.n_options = 1;
    EXPECT_STATUS(ttt_layer_new(&h, &m, 2, 2, err), TTT_ERR_ARG, "option 0 has no key");
    m.options = twice; /* the first option alone is fine (each call below builds a handle) */
    ck_assert_int_eq(ttt_layer_new(&h, &m, 2, 2, NULL), TTT_OK);
    ttt_layer_free(h);
    d.n_options = 0;
    ck_assert_int_eq(ttt_layer_new(&h, &d, 2, 2, NULL), TTT_OK);
    ttt_layer_free(NULL);
    ck_assert_str_eq(ttt_layer_tuple(NULL), "");
    int dk = 7, dv = 7;
    ttt_layer_dims(&dk, &dv, NULL);
    ck_assert(dk == 0 && dv == 0);
    ttt_layer_dims(NULL, NULL, NULL);
    ttt_layer_dims(NULL, NULL, h);
    ttt_layer_dims(&dk, &dv, h);
    ck_assert(dk == 2 && dv == 2);
    ck_assert_int_eq(ttt_layer_state_tensors(NULL), -1);
    ck_assert_int_eq(ttt_layer_state_tensors(h), 1);
    int shape[4];
    ck_assert_int_eq(ttt_layer_state_shape(&name, shape, NULL, 0), -1);
    ck_assert_ptr_null(name);
    ck_assert_int_eq(ttt_layer_state_shape(&name, NULL, h, 0), -1);
    ck_assert_int_eq(ttt_layer_state_shape(NULL, NULL, NULL, 0), -1);
    ck_assert_int_eq(ttt_layer_state_shape(NULL, shape, h, -1), -1);
    ck_assert_int_eq(ttt_layer_state_shape(NULL, shape, h, 1), -1);
    ck_assert_int_eq(ttt_layer_state_shape(NULL, shape, h, INT_MAX), -1);
    ck_assert_int_eq(ttt_layer_state_shape(NULL, shape, h, INT_MIN), -1);
    ck_assert_int_eq(ttt_layer_state_shape(&name, shape, h, 0), 2);
    ck_assert_str_eq(name, "W");

    /* forward and backward: one valid call of (B, T, H) = (1, 2, 1), then one field at a time */
    float q[4] = {0.5f, 0, 0, 0.5f}, o[4], beta[2] = {0.5f, 0.5f}, la[4] = {-0.1f, -0.1f};
    float dq[4], S_out[4], *const state_out[1] = {S_out};
    ttt_batch_io ok = {.size = sizeof ok,
                       .B = 1, .T = 2, .H = 1, .o = o, .q = q, .k = q, .v = q, .eta = beta,
                       .log_alpha = la, .state_out = state_out};
    ttt_batch_grad g = {.size = sizeof g, .d_o = q, .d_q = dq};
    EXPECT_STATUS(ttt_layer_forward_run(h, &ok, 0, err), TTT_OK, "");
    EXPECT_STATUS(ttt_layer_forward_run(h, &ok, 1, err), TTT_OK, "");
    EXPECT_STATUS(ttt_layer_backward_run(h, &ok, &g, err), TTT_OK, "");
    EXPECT_STATUS(ttt_layer_forward_run(NULL, &ok, 0, err), TTT_ERR_ARG, "handle or io is NULL");
    EXPECT_STATUS(ttt_layer_forward_run(h, NULL, 0, err), TTT_ERR_ARG, "handle or io is NULL");
    EXPECT_STATUS(ttt_layer_backward_run(NULL, &ok, &g, err), TTT_ERR_ARG, "handle or io");
    EXPECT_STATUS(ttt_layer_backward_run(h, NULL, &g, err), TTT_ERR_ARG, "handle or io");
    EXPECT_STATUS(ttt_layer_backward_run(h, &ok, NULL, err), TTT_ERR_ARG, "d_o is required");
    /* a kept forward is for CUDA calls: on the host the size is 0 and a buffer is refused, in
     * both directions, and nothing is written */
    {
        ck_assert_uint_eq(ttt_layer_kept_bytes(h, &ok), 0);
        static char kept[256];
        ttt_batch_io io = ok;
        io.kept = kept, io.kept_bytes = sizeof kept;
        o[0] = 12345.0f;
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_ARG,
                      "io->kept is set on a host call");
        ck_assert(o[0] == 12345.0f);
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_ARG,
                      "io->kept is set on a host call");
        ck_assert_uint_eq(ttt_layer_kept_bytes(NULL, &ok), 0);
        ck_assert_uint_eq(ttt_layer_kept_bytes(h, NULL), 0);
    }
    static const int threads[] = {-1, -5, INT_MIN};
    for (int i = 0; i < 3; i++)
        EXPECT_STATUS(ttt_layer_forward_run(h, &ok, threads[i], err), TTT_ERR_ARG,
                      "expected >= 1, or 0 for the default");
    /* sizes: zero, negative, and B = H = INT_MAX (B·T·H·d bytes overflow a size_t) */
    static const int sizes[][3] = {{0, 2, 1},  {1, 2, 0},        {-1, 2, 1},      {1, -1, 1},
                                   {1, 2, -1}, {INT_MIN, 2, 1},  {1, INT_MIN, 1}, {0, 0, 0}};
    for (int i = 0; i < 8; i++) {
        ttt_batch_io io = ok;
        io.B = sizes[i][0], io.T = sizes[i][1], io.H = sizes[i][2];
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_SHAPE,
                      "expected B >= 1, T >= 0, H >= 1");
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_SHAPE,
                      "expected B >= 1, T >= 0, H >= 1");
    }
    static const int huge[][3] = {{INT_MAX, 4, INT_MAX}, {INT_MAX, INT_MAX, INT_MAX},
                                  {INT_MAX, 0, INT_MAX}};
    for (int i = 0; i < 3; i++) {
        ttt_batch_io io = ok;
        io.B = huge[i][0], io.T = huge[i][1], io.H = huge[i][2];
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_SHAPE, "which no buffer can");
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_SHAPE,
                      "which no buffer can");
        ck_assert_str_ne(ttt_layer_form_for(h, &io), ""); /* reads no buffer */
    }
    /* gates: alpha_vec is 0 or 1, and 1 needs log_alpha, in both directions */
    static const int alpha_vec[] = {7, -1, 2, INT_MIN};
    for (int i = 0; i < 4; i++) {
        ttt_batch_io io = ok;
        io.alpha_vec = alpha_vec[i];
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_ARG, "expected 0 or 1");
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_ARG, "expected 0 or 1");
    }
    {
        ttt_batch_io io = ok;
        io.alpha_vec = 1;
        io.log_alpha = NULL;
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_ARG, "without log_alpha");
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_ARG, "without log_alpha");
    }
    /* each required buffer missing */
    for (int i = 0; i < 4; i++) {
        ttt_batch_io io = ok;
        if (i == 0) io.o = NULL;
        if (i == 1) io.q = NULL;
        if (i == 2) io.k = NULL;
        if (i == 3) io.v = NULL;
        EXPECT_STATUS(ttt_layer_forward_run(h, &io, 0, err), TTT_ERR_ARG, "are required");
        EXPECT_STATUS(ttt_layer_backward_run(h, &io, &g, err), TTT_ERR_ARG, "are required");
    }
    {
        ttt_batch_grad g2 = g;
        g2.d_o = NULL;
        EXPECT_STATUS(ttt_layer_backward_run(h, &ok, &g2, err), TTT_ERR_ARG, "d_o is required");
    }
    ck_assert_str_eq(ttt_layer_form_for(NULL, NULL), "none");
    ck_assert_str_eq(ttt_layer_form_for(h, NULL), "none");
    ttt_layer_free(h);

    /* experiments: the overrides are an array of n_sets strings */
    const char *yaml = "task: {kind: memory, pairs: [4], key_dim: 4, value_dim: 4, trials: 1}\n"
                       "layer: {preset: deltanet}\n";
    const char *const one_null[] = {NULL};
    const char *const good_then_null[] = {"seed=3", NULL};
    EXPECT_STATUS(ttt_experiment_run_file(NULL, NULL, 0, NULL, err), TTT_ERR_ARG,
                  "path is NULL");
    EXPECT_STATUS(ttt_experiment_run_string(NULL, NULL, NULL, 0, NULL, err), TTT_ERR_ARG,
                  "text is NULL");
    EXPECT_STATUS(ttt_experiment_run_file("x.yaml", one_null, 1, NULL, err), TTT_ERR_ARG,
                  "sets[0] is NULL");
    EXPECT_STATUS(ttt_experiment_run_file("x.yaml", good_then_null, 2, NULL, err), TTT_ERR_ARG,
                  "sets[1] is NULL");
    EXPECT_STATUS(ttt_experiment_run_file("x.yaml", NULL, 2, NULL, err), TTT_ERR_ARG,
                  "n_sets = 2 but sets is NULL");
    EXPECT_STATUS(ttt_experiment_run_string(yaml, "e.yaml", NULL, 2, NULL, err), TTT_ERR_ARG,
                  "n_sets = 2 but sets is NULL");
    EXPECT_STATUS(ttt_experiment_run_string(yaml, NULL, one_null, 1, NULL, err), TTT_ERR_ARG,
                  "sets[0] is NULL");
    static const int n_sets[] = {-1, INT_MIN};
    for (int i = 0; i < 2; i++) {
        EXPECT_STATUS(ttt_experiment_run_file("x.yaml", good_then_null, n_sets[i], NULL, err),
                      TTT_ERR_ARG, "expected >= 0");
        EXPECT_STATUS(ttt_experiment_run_string(yaml, NULL, NULL, n_sets[i], NULL, err),
                      TTT_ERR_ARG, "expected >= 0");
    }
    /* a missing file is an I/O error, not a crash */
    EXPECT_STATUS(ttt_experiment_run_file("/nonexistent/x.yaml", NULL, 0, NULL, err), TTT_ERR_IO,
                  "/nonexistent/x.yaml");
}
END_TEST

int main(void) {
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, bad_fields_are_named);
    tcase_add_test(tc, presets_and_overrides);
    tcase_add_test(tc, forward_is_the_recurrence);
    tcase_add_test(tc, vector_gates_are_per_key_dimension);
    tcase_add_test(tc, backward_matches_finite_differences);
    tcase_add_test(tc, backward_rejects_missing_inputs);
    tcase_add_test(tc, growable_structs_read_only_their_size);
    tcase_add_test(tc, dplr_chunk_too_large_is_refused);
    tcase_add_test(tc, registries_list_the_library);
    tcase_add_test(tc, experiment_from_a_string);
    tcase_add_test(tc, form_for_names_the_form_that_runs);
    tcase_add_test(tc, misuse_is_refused_with_a_status);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
