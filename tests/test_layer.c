/* The generic TTT driver against the closed recurrent forms and against float64 evaluations of
 * the recurrences written here independently (docs/math.md §1, §3, §4, §6 items 1–4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

/* A float32 form against the float64 recurrence, relative to the largest entry (docs/hardening.md
 * "Portable tolerances"): a token rounds each state entry through at most 4d + T + 10 operations
 * of at most ε = 2^-24 of its scale (the widest step, TTT-Linear's: the d-term product, the layer
 * norm's two d-term sums and its backward's two, the block's masked sums of ≤ T terms, some ten
 * element-wise), independent from token to token; unit-scale keys with β‖k‖² ≤ 2 and gates ≤ 1
 * keep the step non-expansive, so they add up over T tokens as a random walk of deviation
 * ε·√((4d + T + 10)·T). RTOL takes the suite's largest case, T = 45 and d = 8 (the bound grows
 * with both), and c = 6: the largest of the ≤ 45·8 entries lies within √(2 ln 360) ≈ 3.4
 * deviations. 2.2e-5; a dropped term or an off-by-one token changes outputs at O(1) relative
 * scale, a single token written 0.1 % too weakly by more than RTOL (perturbed_form_is_detected).
 * Two float32 forms compared with each other differ by at most the sum of their bounds, 2·RTOL. */
#define RTOL (6 * 0x1p-24 * sqrt((4.0 * 8 + 45 + 10) * 45))
#define ATOL 1e-6

/* float64 references, written from docs/math.md §4 independently of the library.
 * kind 0: S = Diag(α) S + β kᵀv                (linear attention family)
 * kind 1: S = α S; S += β kᵀ(v − k S)          (delta rule, coupled decay)
 * kind 2: S = α S − β kᵀ(k S_old − v)          (delta rule, decoupled decay)
 * read: o_t = q_t S_t (after), or q_t S_{t−1} when read_before. */
static void ref_run(double *o, double *S, const ttt_tensor *q, const ttt_tensor *k,
                    const ttt_tensor *v, const float *beta, const float *log_alpha, int avec,
                    int kind, int read_before, int T, int dk, int dv) {
    double *Sold = malloc(sizeof(double) * dk * dv), *e = malloc(sizeof(double) * dv);
    for (int t = 0; t < T; t++) {
        const float *qt = q->data + t * dk, *kt = k->data + t * dk, *vt = v->data + t * dv;
        double b = beta ? beta[t] : 1.0;
        if (read_before)
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += qt[i] * S[i * dv + j];
                o[t * dv + j] = s;
            }
        memcpy(Sold, S, sizeof(double) * dk * dv);
        for (int i = 0; i < dk; i++) {
            double a = !log_alpha ? 1.0 : exp(avec ? log_alpha[t * dk + i] : log_alpha[t]);
            for (int j = 0; j < dv; j++) S[i * dv + j] *= a;
        }
        if (kind == 0) {
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) S[i * dv + j] += b * kt[i] * vt[j];
        } else {
            const double *P = kind == 1 ? S : Sold; /* where the error is measured */
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += kt[i] * P[i * dv + j];
                e[j] = vt[j] - s;
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) S[i * dv + j] += b * kt[i] * e[j];
        }
        if (!read_before)
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += qt[i] * S[i * dv + j];
                o[t * dv + j] = s;
            }
    }
    free(Sold);
    free(e);
}

/* Run a layer from a zero state; returns output, final state in *S_out. */
static ttt_tensor *run_layer(tu_fixture *f, const ttt_layer *L, const ttt_tensor *q,
                             const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *la, ttt_tensor **S_out) {
    ttt_layer_state st;
    ttt_layer_state_init(&f->ctx, L, &st, &f->rng);
    ttt_tensor *o = ttt_tensor_2d(&f->ctx, TTT_ROWS(k), L->d_v);
    ttt_error err = {0};
    ttt_status s = ttt_layer_forward(&f->ctx, L, o, &st, q, k, v, eta, la, &err);
    ck_assert_msg(s == TTT_OK, "forward failed: %s", err.msg);
    if (S_out) *S_out = st.W[0];
    return o;
}

static void make_layer(ttt_layer *L, const char *loss, int b, ttt_order order, const char *form,
                       int dk, int dv) {
    ttt_error err = {0};
    ttt_status s = ttt_layer_init(L, "linear", loss, "sgd", b, order, form, dk, dv, &err);
    ck_assert_msg(s == TTT_OK, "layer init: %s", err.msg);
}

/* Compare generic and recurrent forms with the float64 recurrence for one gate setting. */
static void check_family(int kind, int gate, uint64_t seed) {
    const int T = 37, dk = 8, dv = 5; /* T prime: not a multiple of any block or chunk */
    tu_fixture f;
    tu_fx_init(&f, seed);
    const char *loss = kind == 0 ? "dot" : "squared";
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f);
    ttt_tensor *k = kind == 0 ? tu_randn(&f, T, dk, 0.5f) : tu_unit_rows(&f, T, dk);
    ttt_tensor *v = tu_randn(&f, T, dv, 1.0f);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f);
    ttt_tensor *la = NULL;
    if (gate == 1) la = tu_uniform(&f, T, -0.3f, -0.01f);
    if (gate == 2) {
        la = ttt_tensor_2d(&f.ctx, T, dk);
        ttt_rng_fill_uniform(&f.rng, la->data, la->n, -0.3f, -0.01f);
    }
    double *o_ref = calloc((size_t)T * dv, sizeof(double));
    double *S_ref = calloc((size_t)dk * dv, sizeof(double));
    ref_run(o_ref, S_ref, q, k, v, eta->data, la ? la->data : NULL, gate == 2, kind, 0, T, dk, dv);

    for (int form = 0; form < 2; form++) {
        ttt_layer L;
        make_layer(&L, loss, 1, TTT_ORDER_UPDATE_THEN_APPLY,
                   form ? "recurrent" : "generic", dk, dv);
        if (kind == 1) L.coupled = 1; /* the delta rule's closed form decays first */
        ttt_tensor *S;
        ttt_tensor *o = run_layer(&f, &L, q, k, v, eta, la, &S);
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(S->data, S_ref, S->n, ATOL, RTOL);
    }
    free(o_ref);
    free(S_ref);
    tu_fx_free(&f);
}

START_TEST(linear_attention_forms_match_recurrence) { check_family(0, 0, 1); }
END_TEST
START_TEST(scalar_decay_forms_match_recurrence) { check_family(0, 1, 2); }
END_TEST
START_TEST(vector_decay_forms_match_recurrence) { check_family(0, 2, 3); }
END_TEST
START_TEST(delta_rule_forms_match_recurrence) { check_family(1, 0, 4); }
END_TEST
START_TEST(gated_delta_rule_forms_match_recurrence) { check_family(1, 1, 5); }
END_TEST

/* Decoupled decay with the squared loss: gradient at the undecayed weights (docs/math.md §3). */
START_TEST(decoupled_decay_delta_generic_matches_recurrence) {
    const int T = 29, dk = 6, dv = 7;
    tu_fixture f;
    tu_fx_init(&f, 6);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = tu_uniform(&f, T, -0.2f, -0.01f);
    double *o_ref = calloc((size_t)T * dv, sizeof(double)), *S_ref = calloc(dk * dv, 8);
    ref_run(o_ref, S_ref, q, k, v, eta->data, la->data, 0, 2, 0, T, dk, dv);
    ttt_layer L;
    make_layer(&L, "squared", 1, TTT_ORDER_UPDATE_THEN_APPLY, "generic", dk, dv);
    L.coupled = 0;
    ttt_tensor *o = run_layer(&f, &L, q, k, v, eta, la, NULL);
    TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
    /* and it is really different from the coupled rule here (the test can tell them apart) */
    double *o_c = calloc((size_t)T * dv, sizeof(double)), *S_c = calloc(dk * dv, 8);
    ref_run(o_c, S_c, q, k, v, eta->data, la->data, 0, 1, 0, T, dk, dv);
    ck_assert(!tu_close(o->data, o_c, o->n, ATOL, RTOL, NULL, 0));
    free(o_ref), free(S_ref), free(o_c), free(S_c);
    tu_fx_free(&f);
}
END_TEST

/* Initial state in, final state out: T1 then T2 with the carried state equals one pass. */
START_TEST(split_sequence_resume_equals_one_pass) {
    const int T = 41, T1 = 17, dk = 8, dv = 8;
    for (int form = 0; form < 2; form++)
        for (int kind = 0; kind < 2; kind++) {
            tu_fixture f;
            tu_fx_init(&f, 7 + form * 2 + kind);
            ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_unit_rows(&f, T, dk);
            ttt_tensor *v = tu_randn(&f, T, dv, 1.0f), *eta = tu_uniform(&f, T, 0.1f, 1.0f);
            ttt_layer L;
            make_layer(&L, kind ? "squared" : "dot", 1, TTT_ORDER_UPDATE_THEN_APPLY,
                       form ? "recurrent" : "generic", dk, dv);
            ttt_tensor *S_full;
            ttt_tensor *o_full = run_layer(&f, &L, q, k, v, eta, NULL, &S_full);
            ttt_layer_state st;
            ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
            ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, dv);
            ttt_error err = {0};
            for (int part = 0; part < 2; part++) {
                int a = part ? T1 : 0, b = part ? T : T1;
                ttt_tensor *qs = ttt_slice_rows(&f.ctx, q, a, b), *ks = ttt_slice_rows(&f.ctx, k, a, b);
                ttt_tensor *vs = ttt_slice_rows(&f.ctx, v, a, b), *es = ttt_slice_rows(&f.ctx, eta, a, b);
                ttt_tensor *os = ttt_tensor_2d(&f.ctx, b - a, dv);
                ck_assert(ttt_layer_forward(&f.ctx, &L, os, &st, qs, ks, vs, es, NULL, &err) == TTT_OK);
                memcpy(o->data + (size_t)a * dv, os->data, os->n * sizeof(float));
            }
            /* same operations in the same order: equal to the last bit */
            ck_assert_float_eq(ttt_max_abs_diff(o, o_full), 0.0f);
            ck_assert_float_eq(ttt_max_abs_diff(st.W[0], S_full), 0.0f);
            tu_fx_free(&f);
        }
}
END_TEST

/* apply_then_update with b = 1 is linear attention that excludes the current token. */
START_TEST(apply_then_update_reads_previous_state) {
    const int T = 23, dk = 5, dv = 4;
    tu_fixture f;
    tu_fx_init(&f, 11);
    ttt_tensor *q = tu_randn(&f, T, dk, 1), *k = tu_randn(&f, T, dk, 1), *v = tu_randn(&f, T, dv, 1);
    double *o_ref = calloc((size_t)T * dv, 8), *S_ref = calloc(dk * dv, 8);
    ref_run(o_ref, S_ref, q, k, v, NULL, NULL, 0, 0, 1, T, dk, dv);
    ttt_layer L;
    make_layer(&L, "dot", 1, TTT_ORDER_APPLY_THEN_UPDATE, "generic", dk, dv);
    ttt_tensor *o = run_layer(&f, &L, q, k, v, NULL, NULL, NULL);
    TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

/* With the dot loss the gradient does not depend on the weights, so every mini-batch size
 * (including a last block shorter than b) gives the per-token result, with decay too. */
START_TEST(dot_loss_any_mini_batch_equals_recurrence) {
    const int T = 37, dk = 6, dv = 5;
    const int bs[] = {2, 5, 16, 37, 64};
    tu_fixture f;
    tu_fx_init(&f, 12);
    ttt_tensor *q = tu_randn(&f, T, dk, 1), *k = tu_randn(&f, T, dk, 1), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = tu_uniform(&f, T, -0.3f, 0.0f);
    double *o_ref = calloc((size_t)T * dv, 8), *S_ref = calloc(dk * dv, 8);
    ref_run(o_ref, S_ref, q, k, v, eta->data, la->data, 0, 0, 0, T, dk, dv);
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        ttt_layer L;
        make_layer(&L, "dot", bs[i], TTT_ORDER_UPDATE_THEN_APPLY, "generic", dk, dv);
        ttt_tensor *S;
        ttt_tensor *o = run_layer(&f, &L, q, k, v, eta, la, &S);
        TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(S->data, S_ref, S->n, ATOL, RTOL);
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

/* b = T with the squared loss is one full-batch gradient step from W_0 (docs/math.md §6.4): every
 * gradient is taken at W_0 = 0 here, so S_T = θ Σ η_s k_sᵀ v_s and token t reads the partial sum. */
START_TEST(squared_loss_full_batch_is_one_step) {
    const int T = 19, dk = 7, dv = 3;
    tu_fixture f;
    tu_fx_init(&f, 13);
    ttt_tensor *q = tu_randn(&f, T, dk, 1), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f);
    ttt_layer L;
    make_layer(&L, "squared", T, TTT_ORDER_UPDATE_THEN_APPLY, "generic", dk, dv);
    L.lr = 0.7f;
    ttt_tensor *S;
    ttt_tensor *o = run_layer(&f, &L, q, k, v, eta, NULL, &S);
    double *P = calloc(dk * dv, 8), *o_ref = calloc((size_t)T * dv, 8);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++)
                P[i * dv + j] += 0.7 * eta->data[t] * k->data[t * dk + i] * v->data[t * dv + j];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += q->data[t * dk + i] * P[i * dv + j];
            o_ref[t * dv + j] = s;
        }
    }
    TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(S->data, P, S->n, ATOL, RTOL);
    /* apply_then_update with b = T reads W_0 = 0 everywhere */
    make_layer(&L, "squared", T, TTT_ORDER_APPLY_THEN_UPDATE, "generic", dk, dv);
    o = run_layer(&f, &L, q, k, v, eta, NULL, NULL);
    ck_assert_float_eq(ttt_max_abs(o), 0.0f);
    free(P), free(o_ref);
    tu_fx_free(&f);
}
END_TEST

/* Mini-batch delta rule with b = 4 against a float64 evaluation of docs/math.md §1 written directly:
 * block gradients at W_0, causal partial updates inside the block, last block shorter. */
START_TEST(squared_loss_mini_batch_matches_definition) {
    const int T = 18, dk = 5, dv = 4, b = 4;
    tu_fixture f;
    tu_fx_init(&f, 14);
    ttt_tensor *q = tu_randn(&f, T, dk, 1), *k = tu_unit_rows(&f, T, dk), *v = tu_randn(&f, T, dv, 1);
    ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f);
    ttt_layer L;
    make_layer(&L, "squared", b, TTT_ORDER_UPDATE_THEN_APPLY, "generic", dk, dv);
    ttt_tensor *S;
    ttt_tensor *o = run_layer(&f, &L, q, k, v, eta, NULL, &S);
    double *W0 = calloc(dk * dv, 8), *W = calloc(dk * dv, 8), *o_ref = calloc((size_t)T * dv, 8);
    for (int t0 = 0; t0 < T; t0 += b) {
        memcpy(W, W0, sizeof(double) * dk * dv);
        for (int t = t0; t < t0 + b && t < T; t++) {
            for (int j = 0; j < dv; j++) {
                double z = 0;
                for (int i = 0; i < dk; i++) z += k->data[t * dk + i] * W0[i * dv + j];
                for (int i = 0; i < dk; i++)
                    W[i * dv + j] -= eta->data[t] * k->data[t * dk + i] * (z - v->data[t * dv + j]);
            }
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += q->data[t * dk + i] * W[i * dv + j];
                o_ref[t * dv + j] = s;
            }
        }
        memcpy(W0, W, sizeof(double) * dk * dv);
    }
    TU_ASSERT_CLOSE(o->data, o_ref, o->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(S->data, W0, S->n, ATOL, RTOL);
    free(W0), free(W), free(o_ref);
    tu_fx_free(&f);
}
END_TEST

/* The comparison used above must be able to fail: one perturbed element beyond tolerance. */
START_TEST(comparison_helper_detects_a_perturbation) {
    float got[6] = {1, 2, 3, 4, 5, 6};
    double want[6] = {1, 2, 3, 4, 5, 6};
    char msg[512];
    ck_assert(tu_close(got, want, 6, ATOL, RTOL, msg, sizeof msg));
    got[4] += 1e-3f;
    ck_assert(!tu_close(got, want, 6, ATOL, RTOL, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "index 4") != NULL, "%s", msg);
    got[4] = NAN;
    ck_assert(!tu_close(got, want, 6, 1e9, 1e9, msg, sizeof msg));
}
END_TEST

/* A recurrent form that drops one token's write is caught (the forms test can fail). */
START_TEST(perturbed_form_is_detected) {
    const int T = 37, dk = 8, dv = 5;
    tu_fixture f;
    tu_fx_init(&f, 15);
    ttt_tensor *q = tu_randn(&f, T, dk, 0.5f), *k = tu_randn(&f, T, dk, 0.5f), *v = tu_randn(&f, T, dv, 1);
    double *o_ref = calloc((size_t)T * dv, 8), *S_ref = calloc(dk * dv, 8);
    ref_run(o_ref, S_ref, q, k, v, NULL, NULL, 0, 0, 0, T, dk, dv);
    ttt_tensor *S = ttt_tensor_2d(&f.ctx, dk, dv), *o = ttt_tensor_2d(&f.ctx, T, dv);
    ttt_tensor_fill(S, 0);
    ttt_tensor *beta = ttt_tensor_1d(&f.ctx, T);
    ttt_tensor_fill(beta, 1.0f);
    beta->data[20] = 0.999f; /* a 0.1 % weaker write of a single token */
    ttt_linear_attention_recurrent(o->data, S->data, q->data, k->data, v->data, beta->data, NULL,
                                   0, T, dk, dv);
    ck_assert(!tu_close(o->data, o_ref, o->n, ATOL, RTOL, NULL, 0));
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

START_TEST(form_recurrent_rejected_without_closed_form) {
    ttt_layer L;
    ttt_error err = {0};
    ttt_status s = ttt_layer_init(&L, "linear", "squared", "sgd", 4, TTT_ORDER_UPDATE_THEN_APPLY,
                                  "recurrent", 4, 4, &err);
    ck_assert_int_eq(s, TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "no recurrent form") && strstr(err.msg, "mini_batch 4"),
                  "%s", err.msg);
}
END_TEST

/* Every form a preset offers, reached through ttt_layer_forward (the path experiments use), equals
 * the generic driver: this pins the wiring (β = θ·η, gates, which state tensor is which), which
 * the kernel suites, calling kernels directly, do not see. T = 45 is not a multiple of the
 * chunk (16) or of the presets' mini-batch (16). */
START_TEST(every_form_through_the_layer_matches_generic) {
    static const struct { const char *preset; const char *gates; } cases[] = {
        {"linear_attention", "none"}, {"retnet", "none"},     {"mamba2", "scalar"},
        {"gla", "vector"},            {"deltanet", "none"},   {"gated_deltanet", "scalar"},
        {"titans", "scalar"},         {"ttt_linear", "none"},
    };
    const int T = 45, d = 8;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_fixture f;
        tu_fx_init(&f, 100 + c);
        char text[256];
        snprintf(text, sizeof text, "layer: {preset: %s, chunk: 16, optimizer: {lr: 0.7}}\n",
                 cases[c].preset);
        ttt_cfg_node *root;
        ttt_error err = {0};
        ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
        ttt_layer L;
        ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L, &err) ==
                          TTT_OK,
                      "%s: %s", cases[c].preset, err.msg);
        ttt_tensor *q = tu_randn(&f, T, d, 0.5f), *k = tu_unit_rows(&f, T, d), *v = tu_randn(&f, T, d, 1);
        ttt_tensor *eta = tu_uniform(&f, T, 0.1f, 1.0f), *la = NULL;
        if (strcmp(cases[c].gates, "scalar") == 0) la = tu_uniform(&f, T, -0.2f, -0.01f);
        if (strcmp(cases[c].gates, "vector") == 0) {
            la = ttt_tensor_2d(&f.ctx, T, d);
            ttt_rng_fill_uniform(&f.rng, la->data, la->n, -0.2f, -0.01f);
        }
        ttt_tensor *o_ref = NULL, *W_ref = NULL;
        int n_forms = 0;
        /* the generic entry first (registry order): the reference */
        for (int fi = 0; fi < ttt_form_count(); fi++) {
            const char *form = ttt_form_at(fi)->form;
            if (tu_form_unavailable(&L, form) || (fi > 0 && strcmp(form, "generic") == 0))
                continue;
            L.form = form;
            ttt_rng init;
            ttt_rng_seed(&init, 7); /* the same initial weights for every form */
            ttt_layer_state st;
            ttt_layer_state_init(&f.ctx, &L, &st, &init);
            ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, d);
            ttt_status s = ttt_layer_forward(&f.ctx, &L, o, &st, q, k, v, eta, la, &err);
            ck_assert_msg(s == TTT_OK, "%s %s: %s", cases[c].preset, form, err.msg);
            if (strcmp(form, "generic") == 0) {
                o_ref = o;
                W_ref = st.W[0];
                continue;
            }
            n_forms++;
            char msg[512];
            /* two float32 evaluations: the sum of their bounds */
            ck_assert_msg(tu_close_f(o->data, o_ref->data, o->n, 2 * ATOL, 2 * RTOL, msg,
                                     sizeof msg),
                          "%s, form %s, outputs: %s", cases[c].preset, form, msg);
            ck_assert_msg(tu_close_f(st.W[0]->data, W_ref->data, W_ref->n, 2 * ATOL, 2 * RTOL,
                                     msg, sizeof msg),
                          "%s, form %s, state: %s", cases[c].preset, form, msg);
        }
        ck_assert_msg(n_forms >= 1, "%s has no closed form", cases[c].preset);
        ttt_cfg_free(root);
        tu_fx_free(&f);
    }
}
END_TEST

/* normalize: ratio through the layer (the ratio of two linear-attention passes, one with a column
 * of ones) equals the normalized-attention kernel, which keeps S and z in one pass (docs/math.md §6.9);
 * RoPE positions continue across a split; normalize: rms is RMSNorm of the plain output. */
START_TEST(normalize_and_rope_options) {
    const int T = 33, d = 8, T1 = 14;
    tu_fixture f;
    tu_fx_init(&f, 77);
    ttt_tensor *q = tu_randn(&f, T, d, 0.5f), *k = tu_randn(&f, T, d, 0.5f), *v = tu_randn(&f, T, d, 1);
    for (int form = 0; form < 2; form++) {
        char text[200];
        snprintf(text, sizeof text, "layer: {preset: linear_attention, normalize: ratio, form: %s}\n",
                 form ? "chunkwise" : "generic");
        ttt_cfg_node *root;
        ttt_error err = {0};
        ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
        ttt_layer L;
        ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L, &err) ==
                          TTT_OK, "%s", err.msg);
        ttt_tensor *o = run_layer(&f, &L, q, k, v, NULL, NULL, NULL);
        ttt_tensor *o2 = ttt_tensor_2d(&f.ctx, T, d), *S = ttt_tensor_2d(&f.ctx, d, d);
        ttt_tensor *z = ttt_tensor_1d(&f.ctx, d);
        ttt_tensor_fill(S, 0), ttt_tensor_fill(z, 0);
        ttt_normalized_la_recurrent(o2->data, S->data, z->data, q->data, k->data, v->data, T, d, d,
                                    TTT_NLA_EPS);
        TU_ASSERT_CLOSE_F(o->data, o2->data, o->n, 2 * ATOL, 2 * RTOL); /* two float32 paths */
        ttt_cfg_free(root);
    }
    /* rope: one pass = two pieces with the carried state (positions continue) */
    ttt_cfg_node *root;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string("layer: {preset: deltanet, rope: true}\n", "t.yaml", &root, &err) ==
              TTT_OK);
    ttt_layer L;
    ck_assert(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L, &err) == TTT_OK);
    ttt_tensor *ku = tu_unit_rows(&f, T, d);
    ttt_tensor *o_full = run_layer(&f, &L, q, ku, v, NULL, NULL, NULL);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
    ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, d);
    for (int part = 0; part < 2; part++) {
        int a = part ? T1 : 0, b = part ? T : T1;
        ttt_tensor *os = ttt_tensor_2d(&f.ctx, b - a, d);
        ck_assert(ttt_layer_forward(&f.ctx, &L, os, &st, ttt_slice_rows(&f.ctx, q, a, b),
                                    ttt_slice_rows(&f.ctx, ku, a, b), ttt_slice_rows(&f.ctx, v, a, b),
                                    NULL, NULL, &err) == TTT_OK);
        memcpy(o->data + (size_t)a * d, os->data, os->n * sizeof(float));
    }
    ck_assert_float_eq(ttt_max_abs_diff(o, o_full), 0.0f);
    /* and rope changes the result (it is really applied) */
    L.rope = 0;
    ttt_tensor *o_plain = run_layer(&f, &L, q, ku, v, NULL, NULL, NULL);
    ck_assert_float_gt(ttt_max_abs_diff(o_plain, o_full), 1e-3f);
    /* rms post-norm */
    L.normalize = TTT_NORMALIZE_RMS;
    ttt_tensor *o_rms = run_layer(&f, &L, q, ku, v, NULL, NULL, NULL);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)o_plain->data[t * d + j] * o_plain->data[t * d + j];
        double r = 1.0 / sqrt(ss / d + TTT_POSTNORM_EPS);
        for (int j = 0; j < d; j++)
            ck_assert_double_eq_tol(o_rms->data[t * d + j], o_plain->data[t * d + j] * r, 1e-5);
    }
    ttt_cfg_free(root);
    tu_fx_free(&f);
}
END_TEST

static Suite *layer_suite(void) {
    Suite *s = suite_create("layer");
    TCase *tc = tcase_create("forms");
    tcase_add_test(tc, linear_attention_forms_match_recurrence);
    tcase_add_test(tc, scalar_decay_forms_match_recurrence);
    tcase_add_test(tc, vector_decay_forms_match_recurrence);
    tcase_add_test(tc, delta_rule_forms_match_recurrence);
    tcase_add_test(tc, gated_delta_rule_forms_match_recurrence);
    tcase_add_test(tc, decoupled_decay_delta_generic_matches_recurrence);
    tcase_add_test(tc, split_sequence_resume_equals_one_pass);
    tcase_add_test(tc, apply_then_update_reads_previous_state);
    tcase_add_test(tc, dot_loss_any_mini_batch_equals_recurrence);
    tcase_add_test(tc, squared_loss_full_batch_is_one_step);
    tcase_add_test(tc, squared_loss_mini_batch_matches_definition);
    tcase_add_test(tc, comparison_helper_detects_a_perturbation);
    tcase_add_test(tc, perturbed_form_is_detected);
    tcase_add_test(tc, form_recurrent_rejected_without_closed_form);
    tcase_add_test(tc, every_form_through_the_layer_matches_generic);
    tcase_add_test(tc, normalize_and_rope_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(layer_suite()); }
