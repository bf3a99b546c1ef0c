/* Data of the trained tasks (docs/math.md §7): mqar invariants and gap law, the epoch sampler,
 * regression layouts and the least-squares baseline against closed-form expectations, lm windows
 * and splits, scoring. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "testutil.h"

/* ------------------------------------------------------------------------------------------ */
/* mqar */

/* Checks one example against the definition in data.h, written from the task description
 * (Zoology's multiquery_ar), not from the generator: returns NULL or what is wrong. */
static const char *mqar_violation(const ttt_mqar_config *c, const int *tok, const int *lab) {
    int V = c->vocab, L = c->seq_len, N = c->n_pairs, C = 2 * N;
    int half = V / 2;
    for (int j = 0; j < N; j++) {
        int k = tok[2 * j], v = tok[2 * j + 1];
        if (k < 1 || k >= half) return "key out of [1, V/2)";
        if (v < half || v >= V) return "value out of [V/2, V)";
        if (lab[2 * j] != TTT_LABEL_IGNORE || lab[2 * j + 1] != TTT_LABEL_IGNORE)
            return "label inside the context";
        for (int i = 0; i < j; i++) {
            if (tok[2 * i] == k) return "repeated key";
            if (tok[2 * i + 1] == v) return "repeated value";
        }
    }
    int labelled = 0, queried[512] = {0};
    for (int t = C; t < L; t++) {
        if (lab[t] == TTT_LABEL_IGNORE) {
            if (!c->random_filler && tok[t] != 0) return "filler is not 0";
            if (tok[t] < 0 || tok[t] >= V) return "filler out of [0, V)";
            continue;
        }
        labelled++;
        if ((t - C) % 2 != 0) return "query at an odd offset from the context";
        if (t - C >= 2 * ((L - C) / 2)) return "query past the last slot";
        int j = -1;
        for (int i = 0; i < N; i++)
            if (tok[2 * i] == tok[t]) j = i;
        if (j < 0) return "labelled position does not hold a context key";
        if (lab[t] != tok[2 * j + 1]) return "label is not the key's value";
        if (queried[j]++) return "key queried twice";
        if (t + 1 < L && lab[t + 1] != TTT_LABEL_IGNORE) return "two labels in a row";
    }
    if (labelled != N) return "not exactly N labelled positions";
    return NULL;
}

static void check_many(const ttt_mqar_config *c, int n, uint64_t seed) {
    ttt_mqar g;
    ttt_error e;
    ck_assert_int_eq(ttt_mqar_init(&g, c, &e), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    int *tok = malloc((size_t)c->seq_len * sizeof *tok),
        *lab = malloc((size_t)c->seq_len * sizeof *lab);
    for (int i = 0; i < n; i++) {
        ttt_mqar_example(&g, &r, tok, lab);
        const char *bad = mqar_violation(c, tok, lab);
        ck_assert_msg(bad == NULL, "V=%d L=%d N=%d filler=%d example %d: %s", c->vocab, c->seq_len,
                      c->n_pairs, c->random_filler, i, bad);
    }
    free(tok);
    free(lab);
    ttt_mqar_free(&g);
}

START_TEST(mqar_invariants) {
    ttt_mqar_config c;
    ttt_mqar_config_default(&c);
    check_many(&c, 3000, 1);
    c.random_filler = 1;
    check_many(&c, 3000, 2);
    /* odd sizes and the tightest fits: V odd, every key used (N = V/2 − 1), L = 4N + 1 */
    c = (ttt_mqar_config){
        .vocab = 17, .seq_len = 29, .n_pairs = 7, .random_filler = 0, .power_a = 0.01};
    check_many(&c, 2000, 3);
    c.random_filler = 1;
    check_many(&c, 2000, 4);
    c = (ttt_mqar_config){
        .vocab = 4, .seq_len = 4, .n_pairs = 1, .random_filler = 0, .power_a = 1.0};
    check_many(&c, 100, 5);
    /* a deliberately wrong example is caught by the checker (the checker can fail) */
    ttt_mqar_config_default(&c);
    ttt_mqar g;
    ttt_error e;
    ck_assert_int_eq(ttt_mqar_init(&g, &c, &e), TTT_OK);
    int tok[128], lab[128];
    ttt_rng r;
    ttt_rng_seed(&r, 6);
    ttt_mqar_example(&g, &r, tok, lab);
    ck_assert_ptr_null(mqar_violation(&c, tok, lab));
    for (int t = 16; t < 128; t++)
        if (lab[t] >= 0) {
            lab[t] = lab[t] == 200 ? 201 : 200;
            break;
        }
    ck_assert_ptr_nonnull(mqar_violation(&c, tok, lab));
    ttt_mqar_free(&g);
}
END_TEST

/* The layout of Zoology's docstring example (vocab 12, 2 pairs, length 16, filler 0):
 *     inputs  k v k v 0 0 k 0 0 0 0 0 k 0 0 0       labels −100 … v at each query key …
 * i.e. context in 0…3, queries at even positions ≥ 4, the label at the query's own position. */
START_TEST(mqar_zoology_layout) {
    ttt_mqar_config c = {
        .vocab = 12, .seq_len = 16, .n_pairs = 2, .random_filler = 0, .power_a = 0.01};
    ttt_mqar g;
    ttt_error e;
    ck_assert_int_eq(ttt_mqar_init(&g, &c, &e), TTT_OK);
    ck_assert_int_eq(g.n_slots, 6);
    ttt_rng r;
    ttt_rng_seed(&r, 7);
    int tok[16], lab[16];
    for (int it = 0; it < 200; it++) {
        ttt_mqar_example(&g, &r, tok, lab);
        ck_assert_ptr_null(mqar_violation(&c, tok, lab));
        for (int t = 0; t < 16; t++) {
            int is_query = t >= 4 && t % 2 == 0 && tok[t] != 0;
            ck_assert_int_eq(lab[t] != TTT_LABEL_IGNORE, is_query);
            if (t >= 4 && !is_query) ck_assert_int_eq(tok[t], 0);
        }
    }
    ttt_mqar_free(&g);
}
END_TEST

/* Wilson–Hilferty approximation of the upper quantile of χ² with k degrees of freedom at the
 * standard-normal point z (accurate to a few percent for k ≥ 10 in the tail used here). */
static double chi2_quantile(int k, double z) {
    double a = 2.0 / (9.0 * k);
    double q = 1.0 - a + z * sqrt(a);
    return k * q * q * q;
}

/* The gap slots follow p_g ∝ g^−0.99 (docs/math.md §7). The first key's slot is the first weighted
 * draw, so its law is exactly p; the second key's slot is the second draw without replacement:
 * P(g2 = j) = Σ_{i≠j} p_i · p_j / (1 − p_i). Both are tested with Pearson's χ² over all S slots
 * (every expected count ≥ 60 here). The threshold is the χ² quantile at z = 4.75 (upper tail
 * ≈ 1e-6): a correct generator fails with probability ~1e-6 for a random seed (the seed is
 * fixed, so the outcome is deterministic), while a wrong law is far above it — uniform slots
 * give χ² in the thousands, a slot index off by one puts zero counts where p is largest. */
START_TEST(mqar_gap_law) {
    ttt_mqar_config c;
    ttt_mqar_config_default(&c); /* V 256, L 128, N 8: S = 56 slots */
    ttt_mqar g;
    ttt_error e;
    ck_assert_int_eq(ttt_mqar_init(&g, &c, &e), TTT_OK);
    const int S = 56, n = 30000, C = 16;
    ck_assert_int_eq(g.n_slots, S);
    double p[56], z = 0;
    for (int i = 0; i < S; i++) z += p[i] = pow(i + 1.0, -0.99);
    for (int i = 0; i < S; i++) p[i] /= z;
    double p2[56];
    for (int j = 0; j < S; j++) {
        p2[j] = 0;
        for (int i = 0; i < S; i++)
            if (i != j) p2[j] += p[i] * p[j] / (1 - p[i]);
    }
    long c1[56] = {0}, c2[56] = {0}, first5 = 0;
    ttt_rng r;
    ttt_rng_seed(&r, 8);
    int tok[128], lab[128];
    for (int it = 0; it < n; it++) {
        ttt_mqar_example(&g, &r, tok, lab);
        for (int t = C; t < 128; t++) {
            if (lab[t] == TTT_LABEL_IGNORE) continue;
            int slot = (t - C) / 2; /* g − 1 */
            if (tok[t] == tok[0]) c1[slot]++;
            if (tok[t] == tok[2]) c2[slot]++;
        }
    }
    double x1 = 0, x2 = 0;
    for (int i = 0; i < S; i++) {
        double e1 = n * p[i], e2 = n * p2[i];
        ck_assert_double_ge(e2, 60);
        x1 += (c1[i] - e1) * (c1[i] - e1) / e1;
        x2 += (c2[i] - e2) * (c2[i] - e2) / e2;
        if (i < 5) first5 += c1[i];
    }
    double thr = chi2_quantile(S - 1, 4.75);
    ck_assert_msg(x1 < thr, "first draw: chi2 %.1f >= %.1f", x1, thr);
    ck_assert_msg(x2 < thr, "second draw: chi2 %.1f >= %.1f", x2, thr);
    /* skewed to small gaps: P(g ≤ 5) = H_5^(0.99)/H_56^(0.99) ≈ 0.50, against 5/56 ≈ 0.09 for
     * uniform slots; 10 binomial standard deviations (≈ 0.003 each) separate the bound */
    double P5 = p[0] + p[1] + p[2] + p[3] + p[4];
    ck_assert_double_gt(P5, 0.45);
    ck_assert_double_le(fabs((double)first5 / n - P5), 0.015);
    ttt_mqar_free(&g);

    /* power_a = 1: uniform slots (weights g^0) */
    c.power_a = 1.0;
    ck_assert_int_eq(ttt_mqar_init(&g, &c, &e), TTT_OK);
    long cu[56] = {0};
    for (int it = 0; it < n; it++) {
        ttt_mqar_example(&g, &r, tok, lab);
        for (int t = C; t < 128; t++)
            if (lab[t] != TTT_LABEL_IGNORE && tok[t] == tok[0]) cu[(t - C) / 2]++;
    }
    double xu = 0, eu = (double)n / S;
    for (int i = 0; i < S; i++) xu += (cu[i] - eu) * (cu[i] - eu) / eu;
    ck_assert_msg(xu < thr, "uniform: chi2 %.1f >= %.1f", xu, thr);
    ttt_mqar_free(&g);
}
END_TEST

START_TEST(mqar_determinism_and_split) {
    ttt_mqar_config c;
    ttt_mqar_config_default(&c);
    c.random_filler = 1;
    ttt_rng root;
    ttt_rng_seed(&root, 9);
    ttt_rng root_copy = root;
    ttt_token_set tr, te, tr2, te2;
    ttt_error e;
    ck_assert_int_eq(ttt_mqar_make_split(&tr, &te, &c, 500, 200, &root, &e), TTT_OK);
    ck_assert(memcmp(&root, &root_copy, sizeof root) == 0); /* root not advanced */
    ck_assert_int_eq(ttt_mqar_make_split(&tr2, &te2, &c, 500, 200, &root, &e), TTT_OK);
    size_t L = 128;
    ck_assert(memcmp(tr.tokens, tr2.tokens, 500 * L * sizeof(int)) == 0);
    ck_assert(memcmp(tr.labels, tr2.labels, 500 * L * sizeof(int)) == 0);
    ck_assert(memcmp(te.tokens, te2.tokens, 200 * L * sizeof(int)) == 0);
    /* distinct streams: no test example appears in the training set */
    int leaks = 0;
    for (int i = 0; i < 200; i++)
        for (int j = 0; j < 500; j++)
            leaks += memcmp(te.tokens + i * L, tr.tokens + j * L, L * sizeof(int)) == 0;
    ck_assert_int_eq(leaks, 0);
    /* another seed, other data */
    ttt_rng other;
    ttt_rng_seed(&other, 10);
    ttt_token_set tr3, te3;
    ck_assert_int_eq(ttt_mqar_make_split(&tr3, &te3, &c, 500, 200, &other, &e), TTT_OK);
    ck_assert(memcmp(tr.tokens, tr3.tokens, 500 * L * sizeof(int)) != 0);
    /* a batch gathered from the set holds the same rows; fill is the same stream as examples */
    ttt_batch b;
    ck_assert_int_eq(ttt_batch_init(&b, 3, 128, &e), TTT_OK);
    int idx[3] = {4, 0, 499};
    ttt_token_set_gather(&b, &tr, idx);
    for (int r = 0; r < 3; r++)
        ck_assert(memcmp(b.tokens + r * L, tr.tokens + (size_t)idx[r] * L, L * sizeof(int)) == 0);
    ck_assert_int_eq(ttt_batch_count_labels(&b), 3 * 8);
    ttt_mqar g;
    ck_assert_int_eq(ttt_mqar_init(&g, &c, &e), TTT_OK);
    ttt_rng s1 = ttt_rng_fork(&root, ttt_hash_str("mqar/train"));
    ttt_mqar_fill(&g, &s1, &b);
    ck_assert(memcmp(b.tokens, tr.tokens, 3 * L * sizeof(int)) == 0);
    ttt_mqar_free(&g);
    ttt_batch_free(&b);
    ttt_token_set_free(&tr);
    ttt_token_set_free(&te);
    ttt_token_set_free(&tr2);
    ttt_token_set_free(&te2);
    ttt_token_set_free(&tr3);
    ttt_token_set_free(&te3);
}
END_TEST

START_TEST(mqar_config_errors) {
    ttt_error e;
    ttt_mqar_config c;
    ttt_mqar_config_default(&c);
    c.seq_len = 31; /* < 4N = 32 */
    ck_assert_int_eq(ttt_mqar_config_check(&c, &e), TTT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "seq_len"));
    ttt_mqar_config_default(&c);
    c.vocab = 16;
    c.n_pairs = 8; /* keys [1, 8) hold only 7 */
    ck_assert_int_eq(ttt_mqar_config_check(&c, &e), TTT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "keys"));
    ttt_mqar_config_default(&c);
    c.power_a = 0;
    ck_assert_int_eq(ttt_mqar_config_check(&c, &e), TTT_ERR_RANGE);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Sampler and scoring */

START_TEST(sampler_epochs_and_resume) {
    ttt_rng base;
    ttt_rng_seed(&base, 11);
    ttt_sampler s, t;
    ttt_error e;
    ck_assert_int_eq(ttt_sampler_init(&s, 7, &base, &e), TTT_OK);
    int idx[21], seen[3][7] = {{0}};
    ttt_sampler_next(&s, idx, 21);
    for (int i = 0; i < 21; i++) seen[i / 7][idx[i]]++;
    for (int ep = 0; ep < 3; ep++)
        for (int k = 0; k < 7; k++)
            ck_assert_int_eq(seen[ep][k], 1);              /* each index once per epoch */
    ck_assert(memcmp(idx, idx + 7, 7 * sizeof(int)) != 0); /* reshuffled */
    /* resume in the middle of an epoch */
    int a[3];
    ttt_sampler_next(&s, a, 3);
    uint64_t w[TTT_SAMPLER_WORDS];
    ttt_sampler_get_state(&s, w);
    int want[10], got[10];
    ttt_sampler_next(&s, want, 10);
    ttt_rng other;
    ttt_rng_seed(&other, 999);
    ck_assert_int_eq(ttt_sampler_init(&t, 7, &other, &e), TTT_OK);
    ck_assert_int_eq(ttt_sampler_set_state(&t, w, &e), TTT_OK);
    ttt_sampler_next(&t, got, 10);
    w[5] = 8; /* a position past an epoch of 7 */
    ck_assert_int_eq(ttt_sampler_set_state(&t, w, &e), TTT_ERR_RANGE);
    ck_assert(memcmp(want, got, sizeof want) == 0);
    ttt_sampler_free(&t);
    ttt_sampler_free(&s);
}
END_TEST

START_TEST(scoring_and_bits_per_byte) {
    ttt_batch b;
    ttt_error e;
    ck_assert_int_eq(ttt_batch_init(&b, 1, 3, &e), TTT_OK);
    b.labels[0] = 2;
    b.labels[1] = TTT_LABEL_IGNORE;
    b.labels[2] = 0;
    float z[12] = {1, 2, 3,  0.5f, /* argmax 2 = label */
                   9, 9, 9,  9,    /* ignored */
                   5, 5, -1, 0};   /* tie 0/1 → 0 = label */
    double nats = 0;
    long correct = 0, labelled = 0;
    ttt_batch_score(&b, z, 4, &nats, &correct, &labelled);
    double want = (log(exp(1.0) + exp(2.0) + exp(3.0) + exp(0.5)) - 3.0) +
                  (log(2 * exp(5.0) + exp(-1.0) + exp(0.0)) - 5.0);
    ck_assert_double_eq_tol(nats, want, 1e-12);
    ck_assert_int_eq(correct, 2);
    ck_assert_int_eq(labelled, 2);
    /* a uniform prediction over bytes costs exactly 8 bits per byte */
    ck_assert_double_eq_tol(ttt_bits_per_byte(log(256.0)), 8.0, 1e-12);
    ttt_batch_free(&b);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* regression */

START_TEST(regression_layouts) {
    ttt_regression_config c;
    ttt_regression_config_default(&c);
    c.dim = 5;
    c.n_points = 7;
    ttt_regression_batch b;
    ttt_error e;
    ck_assert_int_eq(ttt_regression_batch_init(&b, &c, 3, &e), TTT_OK);
    ck_assert_int_eq(b.T, 14);
    ttt_rng r;
    ttt_rng_seed(&r, 12);
    ttt_regression_fill(&b, &c, &r);
    int D = 6;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 7; i++) {
            const float *x = b.x + ((size_t)s * 7 + i) * 5;
            double y = 0;
            for (int j = 0; j < 5; j++) y += (double)b.w[s * 5 + j] * x[j];
            /* y is the float rounding of the double dot product */
            ck_assert_float_eq(b.y[s * 7 + i], (float)y);
            const float *tx = b.inputs + ((size_t)s * 14 + 2 * i) * D;     /* [x_i, 0] */
            const float *ty = b.inputs + ((size_t)s * 14 + 2 * i + 1) * D; /* [0, y_i] */
            ck_assert(memcmp(tx, x, 5 * sizeof(float)) == 0);
            ck_assert_float_eq(tx[5], 0.0f);
            for (int j = 0; j < 5; j++) ck_assert_float_eq(ty[j], 0.0f);
            ck_assert_float_eq(ty[5], b.y[s * 7 + i]);
            ck_assert_float_eq(b.targets[s * 14 + 2 * i], b.y[s * 7 + i]);
            ck_assert_float_eq(b.mask[s * 14 + 2 * i], 1.0f);
            ck_assert_float_eq(b.mask[s * 14 + 2 * i + 1], 0.0f);
            ck_assert_int_eq(b.n_context[2 * i], i);
            ck_assert_int_eq(b.point[2 * i], i);
            ck_assert_int_eq(b.n_context[2 * i + 1], -1);
        }
    /* moments: x and w are standard normal (210 + 15 draws; loose 5σ bounds) */
    double sx = 0, sxx = 0;
    for (int k = 0; k < 3 * 7 * 5; k++) {
        sx += b.x[k];
        sxx += (double)b.x[k] * b.x[k];
    }
    ck_assert_double_le(fabs(sx / 105), 5 / sqrt(105.0));
    ck_assert_double_le(fabs(sxx / 105 - 1), 5 * sqrt(2 / 105.0));
    ttt_regression_batch_free(&b);

    /* paired: the last n_query points are queries with y hidden */
    c.layout = TTT_REG_PAIRED;
    c.n_query = 2;
    ck_assert_int_eq(ttt_regression_batch_init(&b, &c, 2, &e), TTT_OK);
    ck_assert_int_eq(b.T, 7);
    ttt_rng_seed(&r, 12);
    ttt_regression_fill(&b, &c, &r);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 7; i++) {
            const float *tk = b.inputs + ((size_t)s * 7 + i) * D;
            ck_assert(memcmp(tk, b.x + ((size_t)s * 7 + i) * 5, 5 * sizeof(float)) == 0);
            int q = i >= 5;
            ck_assert_float_eq(tk[5], q ? 0.0f : b.y[s * 7 + i]);
            ck_assert_float_eq(b.mask[s * 7 + i], q ? 1.0f : 0.0f);
            ck_assert_float_eq(b.targets[s * 7 + i], q ? b.y[s * 7 + i] : 0.0f);
            ck_assert_int_eq(b.n_context[i], q ? 5 : -1);
        }
    ttt_regression_batch_free(&b);
    c.n_query = 8;
    ck_assert_int_eq(ttt_regression_config_check(&c, &e), TTT_ERR_RANGE);
}
END_TEST

/* The least-squares baseline against its closed forms. With k pairs in the k×d matrix X (full
 * rank almost surely), P the projection on its row space, the error at the next point is
 * x·(ŵ − w) − σε_q.
 *   k < d: the minimum-norm fit is ŵ = X⁺(Xw + σε) = Pw + σX⁺ε, so the expected squared error is
 *     E‖(I − P)w‖² + σ² E tr((XXᵀ)⁻¹) + σ² = (d − k) + σ²(1 + k/(d − k − 1)) (for k ≤ d − 2; the
 *     mean of an inverse Wishart); noiseless this is d − k, the fraction (1 − k/d) of E[y²] = d.
 *   k ≥ d + 2: ŵ − w = σ(XᵀX)⁻¹Xᵀε, expected error σ²(1 + d/(k − d − 1)); noiseless 0.
 * Monte-Carlo means are compared within 5 standard errors estimated from the same samples. */
START_TEST(regression_least_squares_baseline) {
    ttt_regression_config c;
    ttt_regression_config_default(&c);
    c.dim = 6;
    c.n_points = 20;
    const int n_seq = 4000, d = 6, n = 20;
    ttt_regression_batch b;
    ttt_error e;
    ck_assert_int_eq(ttt_regression_batch_init(&b, &c, n_seq, &e), TTT_OK);
    double *sq = malloc((size_t)n_seq * b.T * sizeof(double));
    for (int noisy = 0; noisy < 2; noisy++) {
        c.noise_std = noisy ? 0.5 : 0.0;
        ttt_rng r;
        ttt_rng_seed(&r, 13 + noisy);
        ttt_regression_fill(&b, &c, &r);
        ck_assert_int_eq(ttt_regression_ls_errors(sq, &b, &e), TTT_OK);
        for (int k = 0; k < n; k++) {
            double s = 0, s2 = 0;
            for (int q = 0; q < n_seq; q++) {
                double v = sq[(size_t)q * b.T + 2 * k];
                s += v;
                s2 += v * v;
            }
            double mean = s / n_seq, se = sqrt((s2 / n_seq - mean * mean) / n_seq);
            double s2n = c.noise_std * c.noise_std;
            double want = -1;
            if (k <= d - 2 || (!noisy && k < d))
                want = (d - k) + (noisy ? s2n * (1.0 + (double)k / (d - k - 1)) : 0.0);
            else if (k >= d + 2)
                want = s2n * (1.0 + (double)d / (k - d - 1));
            if (!noisy && k >= d + 2) {
                /* the float rounding of y (|y| ~ 2.5, error ~1e-7) is the only "noise":
                 * squared errors ~1e-14 */
                ck_assert_msg(mean < 1e-9, "k=%d: noiseless error %.3g with k >= d + 2", k, mean);
            } else if (want >= 0) {
                ck_assert_msg(fabs(mean - want) <= 5 * se,
                              "noise %g k=%d: mean %.4f, want %.4f (se %.4f)", c.noise_std, k, mean,
                              want, se);
            }
            /* k = d − 1 … d + 1 with noise, and k = d, d + 1 without, have an infinite expected
             * error (E[1/σ_min²] diverges for nearly square Gaussian matrices; without noise the
             * float rounding of y plays the noise): not compared. */
        }
    }
    /* the curve helper is the same computation, averaged */
    c.noise_std = 0;
    double curve[20];
    ttt_rng r1, r2;
    ttt_rng_seed(&r1, 15);
    ttt_rng_seed(&r2, 15);
    ck_assert_int_eq(ttt_regression_ls_curve(curve, &c, 300, &r1, &e), TTT_OK);
    ttt_regression_batch b2;
    ck_assert_int_eq(ttt_regression_batch_init(&b2, &c, 256, &e), TTT_OK);
    double want[20] = {0};
    for (int done = 0; done < 300; done += 256) {
        b2.B = 300 - done < 256 ? 300 - done : 256;
        ttt_regression_fill(&b2, &c, &r2);
        ck_assert_int_eq(ttt_regression_ls_errors(sq, &b2, &e), TTT_OK);
        for (int q = 0; q < b2.B; q++)
            for (int k = 0; k < n; k++) want[k] += sq[(size_t)q * b2.T + 2 * k];
    }
    for (int k = 0; k < n; k++)
        ck_assert_double_eq_tol(curve[k], want[k] / 300, 1e-12 * (1 + want[k]));
    ttt_regression_batch_free(&b2);
    free(sq);
    ttt_regression_batch_free(&b);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* lm */

static char *write_bytes(const char *dir, const char *name, const unsigned char *b, size_t n) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    return p;
}

START_TEST(lm_windows_and_split) {
    char *dir = tu_mkdtemp();
    const size_t N = 10000;
    unsigned char *bytes = malloc(N);
    ttt_rng r;
    ttt_rng_seed(&r, 16);
    for (size_t i = 0; i < N; i++) bytes[i] = (unsigned char)ttt_rng_below(&r, 256);
    char *path = write_bytes(dir, "text.txt", bytes, N);
    ttt_text t;
    ttt_error e;
    ck_assert_int_eq(ttt_text_load(&t, path, 0.1, 32, &e), TTT_OK);
    ck_assert_uint_eq(t.size, N);
    ck_assert_uint_eq(t.n_train, 9000);
    ck_assert_uint_eq(ttt_text_split_size(&t, TTT_SPLIT_VAL), 1000);
    ck_assert_uint_eq(ttt_text_split_start(&t, TTT_SPLIT_VAL), 9000);

    ttt_batch b;
    ck_assert_int_eq(ttt_batch_init(&b, 64, 32, &e), TTT_OK);
    for (int split = 0; split < 2; split++) {
        size_t lo = split ? 9000 : 0, hi = split ? N : 9000;
        for (int it = 0; it < 50; it++) {
            ttt_text_sample(&t, (ttt_split)split, &r, &b);
            for (int row = 0; row < 64; row++) {
                const int *tok = b.tokens + row * 32, *lab = b.labels + row * 32;
                for (int i = 0; i < 31; i++) ck_assert_int_eq(lab[i], tok[i + 1]);
                /* locate the window in the file: it must lie inside the split */
                int found = 0;
                for (size_t s = 0; s + 33 <= N && !found; s++) {
                    int ok = 1;
                    for (int i = 0; i < 32 && ok; i++) ok = bytes[s + i] == tok[i];
                    ok = ok && bytes[s + 32] == lab[31];
                    if (ok) {
                        found = 1;
                        ck_assert_msg(s >= lo && s + 33 <= hi, "window at %zu outside [%zu, %zu)",
                                      s, lo, hi);
                    }
                }
                ck_assert(found);
            }
        }
    }
    /* evaluation windows cover the split once */
    size_t nw = ttt_text_n_windows(&t, TTT_SPLIT_VAL, 32);
    ck_assert_uint_eq(nw, (1000 - 1) / 32); /* 31 */
    size_t covered = 0;
    for (size_t first = 0; first < nw; first += 64) {
        int got = ttt_text_windows(&t, TTT_SPLIT_VAL, first, &b);
        ck_assert_int_eq(got, (int)(nw - first < 64 ? nw - first : 64));
        for (int row = 0; row < 64; row++)
            for (int i = 0; i < 32; i++) {
                if (row < got) {
                    size_t at = 9000 + (first + row) * 32 + i;
                    ck_assert_int_eq(b.tokens[row * 32 + i], bytes[at]);
                    ck_assert_int_eq(b.labels[row * 32 + i], bytes[at + 1]);
                    covered++;
                } else {
                    ck_assert_int_eq(b.labels[row * 32 + i], TTT_LABEL_IGNORE);
                }
            }
    }
    ck_assert_uint_eq(covered, nw * 32);
    /* determinism */
    ttt_batch b2;
    ck_assert_int_eq(ttt_batch_init(&b2, 64, 32, &e), TTT_OK);
    ttt_rng r1, r2;
    ttt_rng_seed(&r1, 17);
    ttt_rng_seed(&r2, 17);
    ttt_text_sample(&t, TTT_SPLIT_TRAIN, &r1, &b);
    ttt_text_sample(&t, TTT_SPLIT_TRAIN, &r2, &b2);
    ck_assert(memcmp(b.tokens, b2.tokens, 64 * 32 * sizeof(int)) == 0);
    ttt_batch_free(&b2);
    ttt_batch_free(&b);
    ttt_text_free(&t);

    /* no validation split */
    ck_assert_int_eq(ttt_text_load(&t, path, 0.0, 32, &e), TTT_OK);
    ck_assert_uint_eq(t.n_train, N);
    ttt_text_free(&t);
    free(path);
    free(bytes);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(lm_errors_name_the_file) {
    char *dir = tu_mkdtemp();
    ttt_text t;
    ttt_error e;
    char missing[512];
    snprintf(missing, sizeof missing, "%s/none.txt", dir);
    ck_assert_int_eq(ttt_text_load(&t, missing, 0.1, 16, &e), TTT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, missing));
    char *empty = write_bytes(dir, "empty.txt", NULL, 0);
    ck_assert_int_eq(ttt_text_load(&t, empty, 0.1, 16, &e), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, empty) && strstr(e.msg, "empty"), "%s", e.msg);
    unsigned char txt[100];
    memset(txt, 'a', sizeof txt);
    char *small = write_bytes(dir, "small.txt", txt, 100);
    /* 100 bytes, val 10 %: train 90 ≥ 17 but validation 10 < 17 */
    ck_assert_int_eq(ttt_text_load(&t, small, 0.1, 16, &e), TTT_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, small) && strstr(e.msg, "validation") && strstr(e.msg, "100 bytes"),
                  "%s", e.msg);
    ck_assert_int_eq(ttt_text_load(&t, small, 0.0, 100, &e), TTT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "training"));
    ck_assert_int_eq(ttt_text_load(&t, small, 0.0, 99, &e), TTT_OK); /* exactly L + 1 bytes */
    ttt_text_free(&t);
    ck_assert_int_eq(ttt_text_load(&t, small, 1.0, 16, &e), TTT_ERR_RANGE);
    ck_assert_int_eq(ttt_text_load(&t, dir, 0.1, 16, &e), TTT_ERR_IO); /* a folder */
    free(empty);
    free(small);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *data_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_add_test(tc, mqar_invariants);
    tcase_add_test(tc, mqar_zoology_layout);
    tcase_add_test(tc, mqar_gap_law);
    tcase_add_test(tc, mqar_determinism_and_split);
    tcase_add_test(tc, mqar_config_errors);
    tcase_add_test(tc, sampler_epochs_and_resume);
    tcase_add_test(tc, scoring_and_bits_per_byte);
    tcase_add_test(tc, regression_layouts);
    tcase_add_test(tc, regression_least_squares_baseline);
    tcase_add_test(tc, lm_windows_and_split);
    tcase_add_test(tc, lm_errors_name_the_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(data_suite()); }
