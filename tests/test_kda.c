/* KDA's recurrent kernel (docs/math.md §4.5; layers/forms/delta_rule/recurrent.c,
 * ttt_delta_rule_recurrent_key_ld): the delta rule with a gate per key dimension,
 *     S_t = (I − β_t k_tᵀ k_t) Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t,
 * against a float64 recurrence written here, with hard resets of key rows (log α = −inf), a
 * nonzero initial state, d_v = 40 (one 32-column vector block and an 8-column scalar tail of
 * the sweep); row strides give the same bits as contiguous rows; a scalar gate repeated over the
 * keys is the gated delta rule. Each comparison also has a perturbed input it must reject.
 * (tests/test_hard_inputs.c runs the kernel on the hard inputs through the registry;
 * tests/test_contract_forms.c holds it to the generic driver; python/tests/test_kda.py compares
 * the layer and its gradients with the float64 reference.)
 *
 * Bound: relative RMS error 2e-6 over the outputs and over the final state, the bound of
 * tests/test_hard_inputs.c: a few float32 roundings (6e-8 each) per output with room for the
 * sums over d_k; the step contracts (β ∈ [0, 1], unit keys), so errors do not grow with T. A
 * reset moved to another key, or a gate changed by 0.1, moves the result by ≥ 1e-4 (checked
 * below: ≥ 100× the bound). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "testutil.h"

#define DK 16
#define DV 40
#define T 500
#define BOUND 2e-6

typedef struct inputs {
    float q[T * DK], k[T * DK], v[T * DV], beta[T], la[T * DK], S0[DK * DV];
} inputs;

static void make(inputs *x, uint64_t seed) {
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    ttt_rng_fill_normal(&r, x->q, T * DK, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x->k, T * DK, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x->v, T * DV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x->S0, DK * DV, 0.0f, 0.25f);
    ttt_rng_fill_uniform(&r, x->beta, T, 0.0f, 1.0f);
    for (int t = 0; t < T; t++) { /* unit keys */
        double s = 0;
        for (int i = 0; i < DK; i++) s += (double)x->k[t * DK + i] * x->k[t * DK + i];
        for (int i = 0; i < DK; i++) x->k[t * DK + i] = (float)(x->k[t * DK + i] / sqrt(s));
    }
    float u[T * DK];
    ttt_rng_fill_uniform(&r, u, T * DK, 0.0f, 1.0f);
    for (int i = 0; i < T * DK; i++) /* log α ∈ [−2, −1e-4], and 5 % hard resets */
        x->la[i] = u[i] < 0.05f ? -INFINITY : (float)(-2.0 * pow(u[i], 4.0) - 1e-4);
}

/* The float64 recurrence of docs/math.md §4.5, decay first, then the step at the decayed S. */
static void reference(double *o, double *S, const inputs *x) {
    for (int n = 0; n < DK * DV; n++) S[n] = x->S0[n];
    for (int t = 0; t < T; t++) {
        const float *q = x->q + t * DK, *k = x->k + t * DK, *v = x->v + t * DV;
        for (int i = 0; i < DK; i++) {
            const double a = exp((double)x->la[t * DK + i]);
            for (int j = 0; j < DV; j++) S[i * DV + j] *= a;
        }
        for (int j = 0; j < DV; j++) {
            double e = v[j];
            for (int i = 0; i < DK; i++) e -= (double)k[i] * S[i * DV + j];
            for (int i = 0; i < DK; i++) S[i * DV + j] += (double)x->beta[t] * k[i] * e;
        }
        for (int j = 0; j < DV; j++) {
            double s = 0;
            for (int i = 0; i < DK; i++) s += (double)q[i] * S[i * DV + j];
            o[t * DV + j] = s;
        }
    }
}

static double rel_rms(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    return isfinite(num) ? sqrt(num / den) : INFINITY;
}

static const ttt_form_ld contiguous = {.o = DV, .q = DK, .k = DK, .v = DV, .beta = 1, .la = DK};

static void run(float *o, float *S, const inputs *x) {
    memcpy(S, x->S0, sizeof x->S0);
    ttt_delta_rule_recurrent_key_ld(o, S, x->q, x->k, x->v, x->beta, x->la, T, DK, DV,
                                    &contiguous);
}

START_TEST(kda_kernel_matches_float64_with_hard_resets) {
    static inputs x;
    static float o[T * DV], S[DK * DV];
    static double o_ref[T * DV], S_ref[DK * DV];
    make(&x, 11);
    run(o, S, &x);
    reference(o_ref, S_ref, &x);
    const double eo = rel_rms(o, o_ref, T * DV), es = rel_rms(S, S_ref, DK * DV);
    ck_assert_msg(eo <= BOUND && es <= BOUND, "o %.3g, S %.3g (bound %.0e)", eo, es, BOUND);
    /* a reset moved to the next key of its token: the comparison must see it */
    int moved = 0;
    for (int n = T * DK / 2; n < T * DK - 1 && !moved; n++)
        if (isinf(x.la[n]) && n % DK != DK - 1 && !isinf(x.la[n + 1])) {
            const float keep = x.la[n + 1];
            x.la[n + 1] = x.la[n];
            x.la[n] = keep;
            moved = 1;
        }
    ck_assert(moved);
    reference(o_ref, S_ref, &x);
    ck_assert_msg(rel_rms(o, o_ref, T * DV) > 100 * BOUND, "a moved reset went unseen: %.3g",
                  rel_rms(o, o_ref, T * DV));
}
END_TEST

START_TEST(kda_kernel_with_row_strides_gives_the_same_bits) {
    enum { H = 3, HEAD = 1 }; /* head 1 of a (T, H, D) array */
    static inputs x;
    static float o[T * DV], S[DK * DV], S2[DK * DV];
    static float qs[T * H * DK], ks[T * H * DK], vs[T * H * DV], os[T * H * DV], bs[T * H],
        ls[T * H * DK];
    make(&x, 12);
    run(o, S, &x);
    for (int t = 0; t < T; t++) {
        memcpy(qs + (t * H + HEAD) * DK, x.q + t * DK, DK * sizeof(float));
        memcpy(ks + (t * H + HEAD) * DK, x.k + t * DK, DK * sizeof(float));
        memcpy(ls + (t * H + HEAD) * DK, x.la + t * DK, DK * sizeof(float));
        memcpy(vs + (t * H + HEAD) * DV, x.v + t * DV, DV * sizeof(float));
        bs[t * H + HEAD] = x.beta[t];
    }
    const ttt_form_ld ld = {.o = H * DV, .q = H * DK, .k = H * DK, .v = H * DV, .beta = H,
                            .la = H * DK};
    memcpy(S2, x.S0, sizeof S2);
    ttt_delta_rule_recurrent_key_ld(os + HEAD * DV, S2, qs + HEAD * DK, ks + HEAD * DK,
                                    vs + HEAD * DV, bs + HEAD, ls + HEAD * DK, T, DK, DV, &ld);
    for (int t = 0; t < T; t++)
        ck_assert_msg(memcmp(os + (t * H + HEAD) * DV, o + t * DV, DV * sizeof(float)) == 0,
                      "strided row %d differs", t);
    ck_assert(memcmp(S2, S, sizeof S) == 0);
    /* the bit comparison sees one changed gate */
    float *g = &ls[(T / 2 * H + HEAD) * DK + 3];
    *g = isinf(*g) ? -0.5f : *g - 0.1f;
    memcpy(S2, x.S0, sizeof S2);
    ttt_delta_rule_recurrent_key_ld(os + HEAD * DV, S2, qs + HEAD * DK, ks + HEAD * DK,
                                    vs + HEAD * DV, bs + HEAD, ls + HEAD * DK, T, DK, DV, &ld);
    ck_assert(memcmp(S2, S, sizeof S) != 0 ||
              memcmp(os + (T / 2 * H + HEAD) * DV, o + T / 2 * DV, DV * sizeof(float)) != 0);
}
END_TEST

START_TEST(a_gate_repeated_over_the_keys_is_the_gated_delta_rule) {
    static inputs x;
    static float o[T * DV], S[DK * DV], o_s[T * DV], S_s[DK * DV], la_s[T];
    make(&x, 13);
    for (int t = 0; t < T; t++) { /* one finite gate per token, the same on every key */
        la_s[t] = isinf(x.la[t * DK]) ? -0.5f : x.la[t * DK];
        for (int i = 0; i < DK; i++) x.la[t * DK + i] = la_s[t];
    }
    run(o, S, &x);
    memcpy(S_s, x.S0, sizeof S_s);
    ttt_delta_rule_recurrent(o_s, S_s, x.q, x.k, x.v, x.beta, la_s, T, DK, DV);
    static double o_d[T * DV], S_d[DK * DV];
    for (int n = 0; n < T * DV; n++) o_d[n] = o_s[n];
    for (int n = 0; n < DK * DV; n++) S_d[n] = S_s[n];
    const double eo = rel_rms(o, o_d, T * DV), es = rel_rms(S, S_d, DK * DV);
    ck_assert_msg(eo <= BOUND && es <= BOUND, "o %.3g, S %.3g", eo, es);
    /* one key's gate of one token changed by 0.1: no longer the scalar-gated rule */
    x.la[(T / 2) * DK + 5] -= 0.1f;
    run(o, S, &x);
    ck_assert_msg(rel_rms(o, o_d, T * DV) > 100 * BOUND, "%.3g", rel_rms(o, o_d, T * DV));
}
END_TEST

static Suite *kda_suite(void) {
    Suite *s = suite_create("kda");
    TCase *tc = tcase_create("kda");
    tcase_add_test(tc, kda_kernel_matches_float64_with_hard_resets);
    tcase_add_test(tc, kda_kernel_with_row_strides_gives_the_same_bits);
    tcase_add_test(tc, a_gate_repeated_over_the_keys_is_the_gated_delta_rule);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(kda_suite()); }
