/* The associative-scan form (docs/math.md §5.5, layers/forms/scan.h) against the recurrence:
 * float64 recurrences written here from the definition h_t = a_t h_{t−1} + b_t (real and complex
 * diagonal) and S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t, o_t = q_t S_t (gated linear attention),
 * at long T with hard gates (retentions down to e^−30, i.e. the state forgotten within a token,
 * next to retentions 1 − 1e-4), for several block counts, with an initial state; the naive
 * sequential fold of the pairs; the same bits on one and two threads; the `scan` entry
 * through ttt_layer_forward against `form: recurrent` at T = 3000; and the scan op's backward
 * against finite differences (test_la_scan_op_gradients, its tolerance stated there).
 *
 * Tolerance: |got − want| ≤ 1e-6 + RTOL·max|want| (want in float64; docs/hardening.md "Portable
 * tolerances"). A step of the float32 recurrence rounds each state entry in the product with the
 * retention, the write (a d-term product k_iv_j for gated linear attention: one rounding; the
 * output's q·S: d) and the sum: about d + 4 roundings of at most ε = 2^-24 of the state's scale
 * with the scan's local state, carry and fix-up products counted in; with |a| ≤ 1 they are not
 * amplified and add up over T steps as a random walk of deviation ε·√((d + 4)·T). RTOL takes the
 * suite's largest case, T = 5000 and d = 8 (a bound that grows with T and d covers the smaller
 * ones), and c = 6: the largest of the ≤ 5000·12 entries compared lies within √(2 ln 60000) ≈ 4.7
 * deviations. The bound does not credit the forgetting of hard gates (measured ≤ 3.1e-6 of
 * max|want| here), so it is loose; a missing carry, a fix-up with
 * the decay of the wrong span or an off-by-one block boundary moves outputs by O(0.1…1) of
 * max|want| (test_scan_detects_wrong_carry checks one such error is caught). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "scan.h"
#include "scan_grad.h"
#include "testutil.h"
#include "internal.h"

#define RTOL (6 * 0x1p-24 * sqrt((8 + 4) * 5000.0))
#define ATOL 1e-6

static const int blocks_list[] = {1, 2, 7, 64};
#define N_BLOCKS ((int)(sizeof blocks_list / sizeof blocks_list[0]))

/* Retentions for hard gates: a third near 1, a third near 0 (e^−30 … e^−5), a third between. */
static void hard_log_gates(ttt_rng *r, float *la, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float u;
        ttt_rng_fill_uniform(r, &u, 1, 0.0f, 3.0f);
        float x;
        if (u < 1.0f) ttt_rng_fill_uniform(r, &x, 1, -1e-3f, -1e-4f);
        else if (u < 2.0f) ttt_rng_fill_uniform(r, &x, 1, -30.0f, -5.0f);
        else ttt_rng_fill_uniform(r, &x, 1, -2.0f, -0.01f);
        la[i] = x;
    }
}

static int close_d(const float *got, const double *want, size_t n, char *msg, size_t len) {
    return tu_close(got, want, n, ATOL, RTOL, msg, len);
}

/* ---- real diagonal ---- */

START_TEST(test_scan_diag_equals_recurrence) {
    tu_fixture f;
    tu_fx_init(&f, 11);
    const int T = 5000, n = 6;
    for (int constant = 0; constant < 2; constant++) {
        const int lda = constant ? 0 : n;
        float *la = tu_randn_buf(&f, (size_t)T * n, 1.0f), *a = tu_randn_buf(&f, (size_t)T * n, 1.0f);
        hard_log_gates(&f.rng, la, constant ? (size_t)n : (size_t)T * n);
        for (size_t i = 0; i < (size_t)T * n; i++) a[i] = expf(la[i]);
        float *b = tu_randn_buf(&f, (size_t)T * n, 1.0f), *h0 = tu_randn_buf(&f, n, 1.0f);
        double *want = malloc(sizeof(double) * (size_t)T * n), fin[16];
        for (int i = 0; i < n; i++) { /* the definition, float64 */
            double h = h0[i];
            for (int t = 0; t < T; t++) {
                h = (double)a[(size_t)t * lda + i] * h + b[(size_t)t * n + i];
                want[(size_t)t * n + i] = h;
            }
            fin[i] = h;
        }
        float *h = malloc(sizeof(float) * (size_t)T * n), s[16];
        char msg[512];
        for (int bi = 0; bi <= N_BLOCKS; bi++) {
            memcpy(s, h0, sizeof(float) * n);
            if (bi == N_BLOCKS)
                ttt_scan_diag_sequential(h, s, a, b, lda, T, n);
            else
                ttt_scan_diag(&f.ctx, h, s, a, b, lda, T, n, blocks_list[bi]);
            ck_assert_msg(close_d(h, want, (size_t)T * n, msg, sizeof msg), "blocks %d%s: %s",
                          bi < N_BLOCKS ? blocks_list[bi] : 0, constant ? " constant" : "", msg);
            ck_assert_msg(close_d(s, fin, n, msg, sizeof msg), "final state: %s", msg);
        }
        free(want);
        free(h);
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- complex diagonal ---- */

START_TEST(test_scan_cdiag_equals_recurrence) {
    tu_fixture f;
    tu_fx_init(&f, 12);
    const int T = 4000, n = 5, w = 2 * n;
    for (int constant = 0; constant < 2; constant++) {
        const int lda = constant ? 0 : w;
        const size_t nl = constant ? (size_t)n : (size_t)T * n;
        float *lam = malloc(sizeof(float) * 2 * nl), *lr = malloc(sizeof(float) * nl);
        float *ph = malloc(sizeof(float) * nl);
        hard_log_gates(&f.rng, lr, nl);
        ttt_rng_fill_uniform(&f.rng, ph, nl, -3.14159f, 3.14159f);
        for (size_t i = 0; i < nl; i++) { /* λ = |λ| e^{iφ} */
            lam[2 * i] = expf(lr[i]) * cosf(ph[i]);
            lam[2 * i + 1] = expf(lr[i]) * sinf(ph[i]);
        }
        float *b = tu_randn_buf(&f, (size_t)T * w, 1.0f), *h0 = tu_randn_buf(&f, w, 1.0f);
        double *want = malloc(sizeof(double) * (size_t)T * w), fin[32];
        for (int i = 0; i < n; i++) {
            double hr = h0[2 * i], hi = h0[2 * i + 1];
            for (int t = 0; t < T; t++) {
                const double ar = lam[(size_t)t * lda + 2 * i], ai = lam[(size_t)t * lda + 2 * i + 1];
                const double r = ar * hr - ai * hi + b[(size_t)t * w + 2 * i];
                const double s = ar * hi + ai * hr + b[(size_t)t * w + 2 * i + 1];
                hr = r, hi = s;
                want[(size_t)t * w + 2 * i] = hr;
                want[(size_t)t * w + 2 * i + 1] = hi;
            }
            fin[2 * i] = hr, fin[2 * i + 1] = hi;
        }
        float *h = malloc(sizeof(float) * (size_t)T * w), s[32];
        char msg[512];
        for (int bi = 0; bi <= N_BLOCKS; bi++) {
            memcpy(s, h0, sizeof(float) * w);
            if (bi == N_BLOCKS)
                ttt_scan_cdiag_sequential(h, s, lam, b, lda, T, n);
            else
                ttt_scan_cdiag(&f.ctx, h, s, lam, b, lda, T, n, blocks_list[bi]);
            ck_assert_msg(close_d(h, want, (size_t)T * w, msg, sizeof msg), "blocks %d%s: %s",
                          bi < N_BLOCKS ? blocks_list[bi] : 0, constant ? " constant" : "", msg);
            ck_assert_msg(close_d(s, fin, w, msg, sizeof msg), "final state: %s", msg);
        }
        free(want), free(h), free(lam), free(lr), free(ph);
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- gated linear attention ---- */

typedef struct la_problem {
    int T, dk, dv, gk;
    float *q, *k, *v, *beta, *la, *S0;
    double *o, *S; /* the float64 recurrence */
} la_problem;

static la_problem la_make(tu_fixture *f, int T, int dk, int dv, int gate /* 0, 1, dk */) {
    la_problem p = {.T = T, .dk = dk, .dv = dv, .gk = gate};
    p.q = tu_randn_buf(f, (size_t)T * dk, 0.5f);
    p.k = tu_randn_buf(f, (size_t)T * dk, 0.5f);
    p.v = tu_randn_buf(f, (size_t)T * dv, 1.0f);
    p.beta = tu_randn_buf(f, T, 1.0f);
    ttt_rng_fill_uniform(&f->rng, p.beta, T, 0.1f, 1.0f);
    p.S0 = tu_randn_buf(f, (size_t)dk * dv, 1.0f);
    if (gate) {
        p.la = tu_randn_buf(f, (size_t)T * gate, 1.0f);
        hard_log_gates(&f->rng, p.la, (size_t)T * gate);
    }
    p.o = calloc((size_t)T * dv, sizeof(double));
    p.S = malloc(sizeof(double) * dk * dv);
    for (int i = 0; i < dk * dv; i++) p.S[i] = p.S0[i];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < dk; i++) {
            const double a = gate ? exp(p.la[(size_t)t * gate + (gate > 1 ? i : 0)]) : 1.0;
            for (int j = 0; j < dv; j++) {
                double *s = &p.S[i * dv + j];
                *s = a * *s + (double)p.beta[t] * p.k[(size_t)t * dk + i] * p.v[(size_t)t * dv + j];
                p.o[(size_t)t * dv + j] += (double)p.q[(size_t)t * dk + i] * *s;
            }
        }
    return p;
}

static void la_free(la_problem *p) { free(p->o), free(p->S); }

START_TEST(test_la_scan_equals_recurrence) {
    tu_fixture f;
    tu_fx_init(&f, 13);
    const int T = 3000, dk = 8, dv = 6;
    const int gates[] = {0, 1, dk};
    float *o = malloc(sizeof(float) * T * dv), S[dk * dv];
    char msg[512];
    for (int g = 0; g < 3; g++) {
        la_problem p = la_make(&f, T, dk, dv, gates[g]);
        for (int bi = 0; bi <= N_BLOCKS; bi++) {
            memcpy(S, p.S0, sizeof S);
            if (bi == N_BLOCKS)
                ttt_linear_attention_scan_sequential(o, S, p.q, p.k, p.v, p.beta, p.la,
                                                     gates[g] > 1, T, dk, dv);
            else
                ttt_linear_attention_scan(&f.ctx, o, S, p.q, p.k, p.v, p.beta, p.la,
                                          gates[g] > 1, T, dk, dv, blocks_list[bi]);
            ck_assert_msg(close_d(o, p.o, (size_t)T * dv, msg, sizeof msg), "gate %d blocks %d: %s",
                          gates[g], bi < N_BLOCKS ? blocks_list[bi] : 0, msg);
            ck_assert_msg(close_d(S, p.S, dk * dv, msg, sizeof msg), "gate %d: state: %s",
                          gates[g], msg);
        }
        la_free(&p);
    }
    free(o);
    tu_fx_free(&f);
}
END_TEST

/* A scan whose carries ignore the block decay (Ā = 1) is wrong: the comparison must see it. */
START_TEST(test_scan_detects_wrong_carry) {
    tu_fixture f;
    tu_fx_init(&f, 14);
    const int T = 400, n = 3;
    float *a = tu_randn_buf(&f, (size_t)T * n, 1.0f), *b = tu_randn_buf(&f, (size_t)T * n, 1.0f);
    for (int i = 0; i < T * n; i++) a[i] = 0.9f;
    float *ones = tu_randn_buf(&f, (size_t)T * n, 1.0f);
    for (int i = 0; i < T * n; i++) ones[i] = 1.0f;
    double *want = malloc(sizeof(double) * T * n);
    for (int i = 0; i < n; i++) {
        double h = 0;
        for (int t = 0; t < T; t++) want[t * n + i] = h = 0.9 * h + b[t * n + i];
    }
    /* block 2's true start carries 0.9^200 of block 1's contributions; with blocks of 200 a
     * fix-up by the wrong decay (1 instead of 0.9^s) shifts block 2 by O(1) */
    float *h = malloc(sizeof(float) * T * n), s[3] = {0};
    ttt_scan_diag(&f.ctx, h, s, a, b, n, T, n, 2);
    char msg[512];
    ck_assert(close_d(h, want, (size_t)T * n, msg, sizeof msg));
    /* the same pairs, the second block fixed up with decay 1 */
    float s2[3] = {0};
    ttt_scan_diag(&f.ctx, h, s2, a, b, n, 200, n, 1);
    float carry[3];
    memcpy(carry, h + 199 * n, sizeof carry);
    float zero[3] = {0};
    ttt_scan_diag(&f.ctx, h + 200 * n, zero, a + 200 * n, b + 200 * n, n, 200, n, 1);
    for (int t = 200; t < T; t++)
        for (int i = 0; i < n; i++) h[t * n + i] += carry[i]; /* Ā = 1: wrong */
    ck_assert(!close_d(h, want, (size_t)T * n, msg, sizeof msg));
    free(want), free(h);
    tu_fx_free(&f);
}
END_TEST

/* Blocks never depend on the thread count: one and two threads give the same bits. */
START_TEST(test_scan_same_bits_any_threads) {
#ifdef _OPENMP
    tu_fixture f;
    tu_fx_init(&f, 15);
    const int T = 2000, dk = 8, dv = 8;
    la_problem p = la_make(&f, T, dk, dv, dk);
    float *o1 = malloc(sizeof(float) * T * dv), *o2 = malloc(sizeof(float) * T * dv);
    float S1[dk * dv], S2[dk * dv];
    memcpy(S1, p.S0, sizeof S1);
    memcpy(S2, p.S0, sizeof S2);
    const int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    ttt_linear_attention_scan(&f.ctx, o1, S1, p.q, p.k, p.v, p.beta, p.la, 1, T, dk, dv, 16);
    omp_set_num_threads(2);
    ttt_linear_attention_scan(&f.ctx, o2, S2, p.q, p.k, p.v, p.beta, p.la, 1, T, dk, dv, 16);
    omp_set_num_threads(prev);
    ck_assert(memcmp(o1, o2, sizeof(float) * T * dv) == 0);
    ck_assert(memcmp(S1, S2, sizeof S1) == 0);
    free(o1), free(o2);
    la_free(&p);
    tu_fx_free(&f);
#endif
}
END_TEST

/* The registry entry through the layer: form scan = form recurrent, with hard vector gates. */
START_TEST(test_scan_entry_through_layer) {
    tu_fixture f;
    tu_fx_init(&f, 16);
    const int T = 3000, d = 8;
    ttt_tensor *q = ttt_tensor_2d(&f.ctx, T, d), *k = ttt_tensor_2d(&f.ctx, T, d);
    ttt_tensor *v = ttt_tensor_2d(&f.ctx, T, d), *la = ttt_tensor_2d(&f.ctx, T, d);
    ttt_rng_fill_normal(&f.rng, q->data, q->n, 0, 0.5f);
    ttt_rng_fill_normal(&f.rng, k->data, k->n, 0, 0.5f);
    ttt_rng_fill_normal(&f.rng, v->data, v->n, 0, 1.0f);
    hard_log_gates(&f.rng, la->data, la->n);
    ttt_tensor *o[2];
    ttt_layer_state st[2];
    const char *forms[2] = {"recurrent", "scan"};
    for (int i = 0; i < 2; i++) {
        char text[160];
        snprintf(text, sizeof text, "layer: {preset: gla, form: %s, chunk: 64}\n", forms[i]);
        ttt_cfg_node *root = NULL;
        ttt_error err = {0};
        ck_assert_msg(ttt_cfg_load_string(text, "<t>", &root, &err) == TTT_OK, "%s", err.msg);
        ttt_layer L;
        ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L,
                                      &err) == TTT_OK, "%s", err.msg);
        ttt_cfg_free(root);
        ttt_rng r;
        ttt_rng_seed(&r, 3);
        ttt_layer_state_init(&f.ctx, &L, &st[i], &r);
        o[i] = ttt_tensor_2d(&f.ctx, T, d);
        ck_assert_msg(ttt_layer_forward(&f.ctx, &L, o[i], &st[i], q, k, v, NULL, la, &err) ==
                          TTT_OK, "%s", err.msg);
    }
    /* two float32 paths: each is within RTOL of the float64 recurrence (above), so they differ
     * by at most the sum of the two bounds */
    TU_ASSERT_CLOSE_F(o[1]->data, o[0]->data, o[0]->n, 2 * ATOL, 2 * RTOL);
    TU_ASSERT_CLOSE_F(st[1].W[0]->data, st[0].W[0]->data, st[0].W[0]->n, 2 * ATOL, 2 * RTOL);
    tu_fx_free(&f);
}
END_TEST

/* The scan op's hand-written backward (layers/forms/linear_attention/scan_grad.c) against central
 * differences of the float64 recurrence, at T = 150 with hard gates (retentions down to e^−30)
 * and 1, 4 and 64 blocks: every input (q, k, v, β, log α, S_0) of L = Σ R ⊙ [O; S_T]. Tolerance:
 * FD_RTOL 1e-4 of max|fd| (the float64 difference is exact to ~1e-9; the float32 backward
 * accumulates ~T·eps ≈ 1e-5 over 150 tokens; measured ~3e-7). */
#define FD_RTOL 1e-4

static double la_loss(const double *q, const double *k, const double *v, const double *beta,
                      const double *la, int gk, const double *S0, const float *R, int T, int dk,
                      int dv) {
    double S[64], L = 0;
    for (int i = 0; i < dk * dv; i++) S[i] = S0[i];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++) {
            const double a = gk ? exp(la[t * gk + (gk > 1 ? i : 0)]) : 1.0;
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = a * S[i * dv + j] + beta[t] * k[t * dk + i] * v[t * dv + j];
        }
        for (int j = 0; j < dv; j++) {
            double o = 0;
            for (int i = 0; i < dk; i++) o += q[t * dk + i] * S[i * dv + j];
            L += R[t * dv + j] * o;
        }
    }
    for (int i = 0; i < dk * dv; i++) L += R[T * dv + i] * S[i];
    return L;
}

START_TEST(test_la_scan_op_gradients) {
    const int T = 150, dk = 4, dv = 3;
    const int gates[] = {0, 1, dk};
    for (int g = 0; g < 3; g++)
        for (int bi = 0; bi < 3; bi++) {
            const int blocks = bi == 0 ? 1 : bi == 1 ? 4 : 64;
            tu_tape_fixture fx;
            tu_tape_fx_init(&fx);
            ttt_ctx *c = &fx.ctx;
            ttt_rng rng;
            ttt_rng_seed(&rng, 70 + (uint64_t)g);
            const int gk = gates[g];
            ttt_tensor *P[6] = {ttt_tensor_2d(c, T, dk), ttt_tensor_2d(c, T, dk),
                                ttt_tensor_2d(c, T, dv), ttt_tensor_1d(c, T),
                                gk > 1 ? ttt_tensor_2d(c, T, gk) : gk ? ttt_tensor_1d(c, T) : NULL,
                                ttt_tensor_2d(c, dk, dv)};
            ttt_rng_fill_normal(&rng, P[0]->data, P[0]->n, 0, 0.5f);
            ttt_rng_fill_normal(&rng, P[1]->data, P[1]->n, 0, 0.5f);
            ttt_rng_fill_normal(&rng, P[2]->data, P[2]->n, 0, 1);
            ttt_rng_fill_uniform(&rng, P[3]->data, P[3]->n, 0.1f, 1.0f);
            if (P[4]) hard_log_gates(&rng, P[4]->data, P[4]->n);
            ttt_rng_fill_normal(&rng, P[5]->data, P[5]->n, 0, 1);
            float *G[6];
            for (int i = 0; i < 6; i++)
                if (P[i]) {
                    G[i] = tu_zalloc(c, P[i]->n * sizeof(float));
                    ttt_tensor_set_param(P[i], G[i]);
                }
            ttt_tensor *Y = ttt_la_scan_op(c, P[0], P[1], P[2], P[3], P[4], gk > 1, P[5], blocks);
            ttt_tensor *R = ttt_tensor_2d(c, T + dk, dv);
            ttt_rng_fill_normal(&rng, R->data, R->n, 0, 1);
            ttt_backward(c, ttt_sum(c, ttt_mul(c, Y, R)));
            double *D[6] = {0};
            for (int i = 0; i < 6; i++)
                if (P[i]) {
                    D[i] = malloc(sizeof(double) * P[i]->n);
                    for (size_t j = 0; j < P[i]->n; j++) D[i][j] = P[i]->data[j];
                }
            for (int i = 0; i < 6; i++) {
                if (!P[i]) continue;
                double *fd = malloc(sizeof(double) * P[i]->n);
                for (size_t j = 0; j < P[i]->n; j++) {
                    const double x = D[i][j], h = 1e-6 * fmax(1.0, fabs(x));
                    D[i][j] = x + h;
                    const double lp = la_loss(D[0], D[1], D[2], D[3], D[4], gk, D[5], R->data, T,
                                              dk, dv);
                    D[i][j] = x - h;
                    const double lm = la_loss(D[0], D[1], D[2], D[3], D[4], gk, D[5], R->data, T,
                                              dk, dv);
                    D[i][j] = x;
                    fd[j] = (lp - lm) / (2 * h);
                }
                char msg[512];
                ck_assert_msg(tu_close(G[i], fd, P[i]->n, ATOL, FD_RTOL, msg, sizeof msg),
                              "gate %d, blocks %d, input %d: %s", gk, blocks, i, msg);
                free(fd);
            }
            for (int i = 0; i < 6; i++) free(D[i]);
            tu_tape_fx_free(&fx);
        }
}
END_TEST

static Suite *scan_suite(void) {
    Suite *s = suite_create("scan");
    TCase *tc = tcase_create("scan");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_scan_diag_equals_recurrence);
    tcase_add_test(tc, test_scan_cdiag_equals_recurrence);
    tcase_add_test(tc, test_la_scan_equals_recurrence);
    tcase_add_test(tc, test_scan_detects_wrong_carry);
    tcase_add_test(tc, test_scan_same_bits_any_threads);
    tcase_add_test(tc, test_scan_entry_through_layer);
    tcase_add_test(tc, test_la_scan_op_gradients);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(scan_suite()); }
