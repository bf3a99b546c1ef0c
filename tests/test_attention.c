/* RoPE, normalized linear attention, post-norm and softmax attention (docs/math.md §4 "Normalized
 * linear attention", "Quadratic baselines", "RoPE"; §6 item 9) against float64 evaluations
 * written here independently. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "normalized.h"
#include "rope.h"
#include "softmax_attention.h"
#include "testutil.h"
#include "internal.h"

/* Tolerances (relative to the largest reference entry; docs/hardening.md "Portable tolerances").
 * A float32 evaluation rounds each entry of a state (or of a softmax row's running sums) through
 * a d-term product, the write and the gate or the normalizer's division: about d + 3 roundings of
 * at most ε = 2^-24 of its scale per token, independent, over T tokens with nothing amplified
 * (no decay > 1, positive features and weights): a random walk of deviation ε·√((d + 3)·T).
 * RTOL takes the suite's largest case, T = 300 and d = 16 (the bound grows with both), and c = 6:
 * the largest of the ≤ 300·16 entries lies within √(2 ln 4800) ≈ 4.1 deviations. 2.7e-5 (measured
 * ≤ ~1e-6 here); a 0.1 % change of one input is still caught (perturbation checks below). Two
 * float32 evaluations compared with each other get the sum of their bounds, 2·RTOL.
 * RoPE on its own is one rotation per pair in float64 rounded once to float32: 1e-6. */
#define RTOL (6 * 0x1p-24 * sqrt((16 + 3) * 300.0))
#define ATOL 1e-6
#define RTOL_ROPE 1e-6

static float *uniform(tu_fixture *f, size_t n, float lo, float hi) {
    float *x = ttt_arena_alloc(f->ctx.arena, n * sizeof(float));
    ck_assert(x != NULL);
    ttt_rng_fill_uniform(&f->rng, x, n, lo, hi);
    return x;
}
static float *fcopy(tu_fixture *f, const float *x, size_t n) {
    float *y = ttt_arena_alloc(f->ctx.arena, n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}
static double *dzeros(size_t n) { return calloc(n, sizeof(double)); }

/* ------------------------------------------------------------------------------------------ */
/* RoPE                                                                                        */

/* float64 rotation of one row by position p (interleaved pairs, ω_i = base^{−2i/d}). */
static void ref_rope_row(double *y, const double *x, int d, double p, double base) {
    for (int i = 0; i + 1 < d; i += 2) {
        double a = p * pow(base, -(double)i / d); /* i = 2·(pair index) */
        y[i] = x[i] * cos(a) - x[i + 1] * sin(a);
        y[i + 1] = x[i] * sin(a) + x[i + 1] * cos(a);
    }
    if (d % 2) y[d - 1] = x[d - 1];
}

static double dotf(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* The convention pinned on a hand example: d = 4, base 100, position 1. Pair (0, 1) turns by
 * 1 rad, pair (2, 3) by 100^{−2/4} = 0.1 rad. */
START_TEST(rope_convention_by_hand) {
    float x[4] = {1, 0, 0, 1}, y[4];
    ttt_rope_apply(y, x, 1, 4, 1, 100.0f);
    const double want[4] = {cos(1.0), sin(1.0), -sin(0.1), cos(0.1)};
    TU_ASSERT_CLOSE(y, want, 4, 0, RTOL_ROPE);
}
END_TEST

/* Against the float64 rotation, even and odd d; norms preserved; in place = out of place. */
START_TEST(rope_matches_reference_and_preserves_norms) {
    tu_fixture f;
    tu_fx_init(&f, 200);
    const int T = 300, ds[] = {16, 7};
    for (int di = 0; di < 2; di++) {
        const int d = ds[di], pos0 = 1234;
        float *x = tu_randn_buf(&f, (size_t)T * d, 1.0f), *y = tu_randn_buf(&f, (size_t)T * d, 1.0f);
        ttt_rope_apply(y, x, T, d, pos0, TTT_ROPE_BASE);
        double *want = dzeros((size_t)T * d), *xd = dzeros(d);
        double *nx = dzeros(T), *ny = dzeros(T);
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < d; i++) xd[i] = x[(size_t)t * d + i];
            ref_rope_row(want + (size_t)t * d, xd, d, pos0 + t, 10000.0);
            nx[t] = sqrt(dotf(x + (size_t)t * d, x + (size_t)t * d, d));
            ny[t] = sqrt(dotf(y + (size_t)t * d, y + (size_t)t * d, d));
        }
        TU_ASSERT_CLOSE(y, want, (size_t)T * d, 0, RTOL_ROPE);
        float *nyf = uniform(&f, T, 0, 0);
        for (int t = 0; t < T; t++) nyf[t] = (float)ny[t];
        /* |x R| = |x|: float32 rounding of each rotated entry only */
        TU_ASSERT_CLOSE(nyf, nx, T, 0, RTOL_ROPE);
        float *z = fcopy(&f, x, (size_t)T * d);
        ttt_rope_apply(z, z, T, d, pos0, TTT_ROPE_BASE);
        ck_assert(memcmp(z, y, sizeof(float) * T * d) == 0);
        free(want), free(xd), free(nx), free(ny);
    }
    tu_fx_free(&f);
}
END_TEST

/* (q_t R_t)·(k_s R_s) depends only on t − s: equal for shifted positions and equal to
 * (q R_{t−s})·k (docs/math.md §4 "RoPE"); and it does change with t − s (the check can fail). */
START_TEST(rope_relative_position) {
    tu_fixture f;
    tu_fx_init(&f, 201);
    const int d = 32, n = 200;
    for (int r = 0; r < n; r++) {
        float *q = tu_randn_buf(&f, d, 1.0f), *k = tu_randn_buf(&f, d, 1.0f);
        int t = (int)ttt_rng_below(&f.rng, 2000), s = (int)ttt_rng_below(&f.rng, 2000);
        int shift = (int)ttt_rng_below(&f.rng, 8000);
        float qa[32], ka[32], qb[32], kb[32], qc[32], qd[32];
        ttt_rope_apply(qa, q, 1, d, t, TTT_ROPE_BASE);
        ttt_rope_apply(ka, k, 1, d, s, TTT_ROPE_BASE);
        ttt_rope_apply(qb, q, 1, d, t + shift, TTT_ROPE_BASE);
        ttt_rope_apply(kb, k, 1, d, s + shift, TTT_ROPE_BASE);
        ttt_rope_apply(qc, q, 1, d, t - s, TTT_ROPE_BASE);
        ttt_rope_apply(qd, q, 1, d, t - s + 1, TTT_ROPE_BASE);
        /* dot products of rotated float32 vectors: error ~1e-7 |q||k|; 1e-6 |q||k| allowed */
        const double scale = sqrt(dotf(q, q, d) * dotf(k, k, d));
        const double a = dotf(qa, ka, d), b = dotf(qb, kb, d), c = dotf(qc, k, d);
        TU_ASSERT_LE(fabs(a - b), 1e-6 * scale, "shift %d: %.9g vs %.9g", shift, a, b);
        TU_ASSERT_LE(fabs(a - c), 1e-6 * scale, "R_{t-s}: %.9g vs %.9g", a, c);
        ck_assert_msg(fabs(a - dotf(qd, k, d)) > 1e-6 * scale, "t-s+1 indistinguishable");
    }
    tu_fx_free(&f);
}
END_TEST

/* A sequence rotated in two pieces (pos0 = T1 for the second) equals one pass, to the bit. */
START_TEST(rope_split_sequence_continues) {
    tu_fixture f;
    tu_fx_init(&f, 202);
    const int T = 100, T1 = 37, d = 12;
    float *x = tu_randn_buf(&f, (size_t)T * d, 1.0f);
    float *y = tu_randn_buf(&f, (size_t)T * d, 1.0f), *z = tu_randn_buf(&f, (size_t)T * d, 1.0f);
    ttt_rope_apply(y, x, T, d, 5, TTT_ROPE_BASE);
    ttt_rope_apply(z, x, T1, d, 5, TTT_ROPE_BASE);
    ttt_rope_apply(z + (size_t)T1 * d, x + (size_t)T1 * d, T - T1, d, 5 + T1, TTT_ROPE_BASE);
    ck_assert(memcmp(y, z, sizeof(float) * T * d) == 0);
    tu_fx_free(&f);
}
END_TEST

/* The backward rotation ttt_rope_inverse_add at widths beyond 1024 (the trained models' RoPE
 * backward once kept a row buffer of 1024 floats, asserted): it adds dy R_{-p} into its output,
 * against the float64 rotation of dy by -p; it gives the bits of ttt_rope_apply at -p added
 * row by row (the former path), and turned at p + 1 instead it is caught. One rotation in float64
 * rounded to float32, then one float32 addition to 0: RTOL_ROPE as above. */
START_TEST(rope_inverse_add_any_width) {
    tu_fixture f;
    tu_fx_init(&f, 203);
    static const int widths[] = {5, 2050};
    for (int w = 0; w < 2; w++) {
        const int T = 3, d = widths[w], pos0 = 7;
        const size_t n = (size_t)T * d;
        float *dy = tu_randn_buf(&f, n, 1.0f);
        float *g = calloc(n, sizeof(float)), *old = calloc(n, sizeof(float)),
              *tmp = malloc(sizeof(float) * (size_t)d), *off = calloc(n, sizeof(float));
        double *xd = malloc(sizeof(double) * (size_t)d), *want = malloc(sizeof(double) * n);
        ck_assert(g && old && tmp && off && xd && want);
        ttt_rope_inverse_add(g, dy, T, d, pos0, TTT_ROPE_BASE);
        ttt_rope_inverse_add(off, dy, T, d, pos0 + 1, TTT_ROPE_BASE);
        double err = 0, err_off = 0, scale = 0;
        for (int t = 0; t < T; t++) {
            ttt_rope_apply(tmp, dy + (size_t)t * d, 1, d, -(pos0 + t), TTT_ROPE_BASE);
            for (int j = 0; j < d; j++) old[(size_t)t * d + j] += tmp[j];
            for (int j = 0; j < d; j++) xd[j] = dy[(size_t)t * d + j];
            ref_rope_row(want + (size_t)t * d, xd, d, -(double)(pos0 + t), 10000.0);
        }
        for (size_t i = 0; i < n; i++) {
            scale = fmax(scale, fabs(want[i]));
            err = fmax(err, fabs(g[i] - want[i]));
            err_off = fmax(err_off, fabs(off[i] - want[i]));
        }
        ck_assert_msg(err <= RTOL_ROPE * scale, "d = %d: error %g of %g", d, err, scale);
        ck_assert_msg(err_off > RTOL_ROPE * scale, "d = %d: position + 1 not caught", d);
        ck_assert_msg(memcmp(g, old, sizeof(float) * n) == 0, "d = %d: not the bits of "
                      "ttt_rope_apply at -p", d);
        free(g), free(old), free(tmp), free(off), free(xd), free(want);
    }
    tu_fx_free(&f);
}
END_TEST

/* Linear attention on rotated q, k: parallel = chunkwise = recurrent = the float64 form written
 * with relative rotations, o_t = Σ_{s≤t} γ^{t−s} (q_t R_{t−s} k_sᵀ) v_s ("complex decay"). */
START_TEST(rope_linear_attention_forms) {
    tu_fixture f;
    tu_fx_init(&f, 203);
    const int T = 90, dk = 16, dv = 8;
    const double lg = -0.05; /* log γ */
    float *q = tu_randn_buf(&f, (size_t)T * dk, 0.5f), *k = tu_randn_buf(&f, (size_t)T * dk, 0.5f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *la = uniform(&f, T, (float)lg, (float)lg);
    float *qr = uniform(&f, (size_t)T * dk, 0, 0), *kr = uniform(&f, (size_t)T * dk, 0, 0);
    ttt_rope_apply(qr, q, T, dk, 0, TTT_ROPE_BASE);
    ttt_rope_apply(kr, k, T, dk, 0, TTT_ROPE_BASE);
    double *o_ref = dzeros((size_t)T * dv), *qd = dzeros(dk), *qrel = dzeros(dk);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++) qd[i] = q[(size_t)t * dk + i];
        for (int s = 0; s <= t; s++) {
            ref_rope_row(qrel, qd, dk, t - s, 10000.0);
            double sc = 0;
            for (int i = 0; i < dk; i++) sc += qrel[i] * k[(size_t)s * dk + i];
            sc *= exp(lg * (t - s));
            for (int j = 0; j < dv; j++) o_ref[(size_t)t * dv + j] += sc * v[(size_t)s * dv + j];
        }
    }
    for (int form = 0; form < 3; form++) {
        float *o = uniform(&f, (size_t)T * dv, 7, 7), *S = uniform(&f, (size_t)dk * dv, 0, 0);
        if (form == 0)
            ttt_linear_attention_recurrent(o, S, qr, kr, v, NULL, la, 0, T, dk, dv);
        else if (form == 1)
            ttt_linear_attention_parallel(&f.ctx, o, S, qr, kr, v, NULL, la, 0, T, dk, dv);
        else
            ttt_linear_attention_chunkwise(&f.ctx, o, S, qr, kr, v, NULL, la, 0, T, dk, dv, 16);
        TU_ASSERT_CLOSE(o, o_ref, (size_t)T * dv, ATOL, RTOL);
    }
    /* without the rotation the outputs differ: the test sees RoPE */
    float *o = uniform(&f, (size_t)T * dv, 7, 7), *S = uniform(&f, (size_t)dk * dv, 0, 0);
    ttt_linear_attention_parallel(&f.ctx, o, S, q, k, v, NULL, la, 0, T, dk, dv);
    ck_assert(!tu_close(o, o_ref, (size_t)T * dv, ATOL, RTOL, NULL, 0));
    free(o_ref), free(qd), free(qrel);
    tu_fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Normalized linear attention and post-norm                                                   */

static double phi(double x) { return x > 0 ? x + 1 : exp(x); } /* elu + 1 */

/* float64 definition: S += φ(k)ᵀv, z += φ(k), o = φ(q)S / (φ(q)·z + eps). */
static void ref_nla(double *o, double *S, double *z, const float *q, const float *k,
                    const float *v, int T, int dk, int dv, double eps) {
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++) {
            double pk = phi(k[(size_t)t * dk + i]);
            z[i] += pk;
            for (int j = 0; j < dv; j++) S[i * dv + j] += pk * v[(size_t)t * dv + j];
        }
        double den = eps;
        for (int i = 0; i < dk; i++) den += phi(q[(size_t)t * dk + i]) * z[i];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += phi(q[(size_t)t * dk + i]) * S[i * dv + j];
            o[(size_t)t * dv + j] = s / den;
        }
    }
}

typedef struct nla_problem {
    int T, dk, dv;
    float *q, *k, *v, *S0, *z0;
} nla_problem;

static nla_problem make_nla(tu_fixture *f, int T, int dk, int dv) {
    nla_problem p = {.T = T, .dk = dk, .dv = dv};
    p.q = tu_randn_buf(f, (size_t)T * dk, 1.0f);
    p.k = tu_randn_buf(f, (size_t)T * dk, 1.0f);
    p.v = tu_randn_buf(f, (size_t)T * dv, 1.0f);
    /* an initial memory as left by 10 earlier tokens: S0 = Σ φ(k)ᵀv, z0 = Σ φ(k) */
    p.S0 = uniform(f, (size_t)dk * dv, 0, 0);
    p.z0 = uniform(f, dk, 0, 0);
    float *k0 = tu_randn_buf(f, (size_t)10 * dk, 1.0f), *v0 = tu_randn_buf(f, (size_t)10 * dv, 1.0f);
    for (int t = 0; t < 10; t++)
        for (int i = 0; i < dk; i++) {
            float pk = (float)phi(k0[t * dk + i]);
            p.z0[i] += pk;
            for (int j = 0; j < dv; j++) p.S0[i * dv + j] += pk * v0[t * dv + j];
        }
    return p;
}

static void nla_ref(const nla_problem *p, double **o, double **S, double **z) {
    *o = dzeros((size_t)p->T * p->dv);
    *S = dzeros((size_t)p->dk * p->dv);
    *z = dzeros(p->dk);
    for (int i = 0; i < p->dk * p->dv; i++) (*S)[i] = p->S0[i];
    for (int i = 0; i < p->dk; i++) (*z)[i] = p->z0[i];
    ref_nla(*o, *S, *z, p->q, p->k, p->v, p->T, p->dk, p->dv, TTT_NLA_EPS);
}

/* recurrent and chunkwise (C ∈ {1, 7, 16, 64, 128}, T = 100) against the float64 definition,
 * from an initial (S, z), final (S, z) out. */
START_TEST(normalized_forms_match_reference) {
    tu_fixture f;
    tu_fx_init(&f, 210);
    nla_problem p = make_nla(&f, 100, 16, 12);
    double *o_ref, *S_ref, *z_ref;
    nla_ref(&p, &o_ref, &S_ref, &z_ref);
    const int cs[] = {0, 1, 7, 16, 64, 128}; /* 0: recurrent */
    for (int i = 0; i < 6; i++) {
        float *o = uniform(&f, (size_t)p.T * p.dv, 7, 7);
        float *S = fcopy(&f, p.S0, (size_t)p.dk * p.dv), *z = fcopy(&f, p.z0, p.dk);
        if (cs[i] == 0)
            ttt_normalized_la_recurrent(o, S, z, p.q, p.k, p.v, p.T, p.dk, p.dv, TTT_NLA_EPS);
        else
            ttt_normalized_la_chunkwise(&f.ctx, o, S, z, p.q, p.k, p.v, p.T, p.dk, p.dv, cs[i],
                                        TTT_NLA_EPS);
        TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(z, z_ref, p.dk, ATOL, RTOL);
    }
    free(o_ref), free(S_ref), free(z_ref);
    tu_fx_free(&f);
}
END_TEST

/* docs/math.md §6.9: the normalized output is the ratio of two linear-attention states on
 * (φ(q), φ(k)): numerator with values v, denominator with values 1, both through the recurrent
 * linear-attention kernel. Also: a 0.1 % change of one value is caught. */
START_TEST(normalized_is_ratio_of_two_states) {
    tu_fixture f;
    tu_fx_init(&f, 211);
    nla_problem p = make_nla(&f, 100, 16, 12);
    const int T = p.T, dk = p.dk, dv = p.dv;
    float *pq = uniform(&f, (size_t)T * dk, 0, 0), *pk = uniform(&f, (size_t)T * dk, 0, 0);
    for (int i = 0; i < T * dk; i++) {
        pq[i] = (float)phi(p.q[i]);
        pk[i] = (float)phi(p.k[i]);
    }
    float *ones = uniform(&f, T, 1, 1);
    float *num = uniform(&f, (size_t)T * dv, 0, 0), *den = uniform(&f, T, 0, 0);
    float *Sn = fcopy(&f, p.S0, (size_t)dk * dv), *Sd = fcopy(&f, p.z0, dk);
    ttt_linear_attention_recurrent(num, Sn, pq, pk, p.v, NULL, NULL, 0, T, dk, dv);
    ttt_linear_attention_recurrent(den, Sd, pq, pk, ones, NULL, NULL, 0, T, dk, 1);
    float *ratio = uniform(&f, (size_t)T * dv, 0, 0);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < dv; j++) ratio[t * dv + j] = num[t * dv + j] / (den[t] + TTT_NLA_EPS);
    float *o = uniform(&f, (size_t)T * dv, 7, 7);
    float *S = fcopy(&f, p.S0, (size_t)dk * dv), *z = fcopy(&f, p.z0, dk);
    ttt_normalized_la_recurrent(o, S, z, p.q, p.k, p.v, T, dk, dv, TTT_NLA_EPS);
    /* two float32 evaluations: the sum of their bounds */
    TU_ASSERT_CLOSE_F(o, ratio, (size_t)T * dv, 2 * ATOL, 2 * RTOL);
    TU_ASSERT_CLOSE_F(S, Sn, (size_t)dk * dv, 2 * ATOL, 2 * RTOL);
    TU_ASSERT_CLOSE_F(z, Sd, dk, 2 * ATOL, 2 * RTOL);
    /* the ratio equals the float64 definition too */
    double *o_ref, *S_ref, *z_ref;
    nla_ref(&p, &o_ref, &S_ref, &z_ref);
    TU_ASSERT_CLOSE(ratio, o_ref, (size_t)T * dv, ATOL, RTOL);
    p.v[40 * dv + 3] *= 1.001f;
    float *S2 = fcopy(&f, p.S0, (size_t)dk * dv), *z2 = fcopy(&f, p.z0, dk);
    ttt_normalized_la_recurrent(o, S2, z2, p.q, p.k, p.v, T, dk, dv, TTT_NLA_EPS);
    ck_assert(!tu_close(o, o_ref, (size_t)T * dv, ATOL, RTOL, NULL, 0));
    free(o_ref), free(S_ref), free(z_ref);
    tu_fx_free(&f);
}
END_TEST

/* Split-sequence resume: T1 tokens, then the rest with the carried (S, z), equals one pass. */
START_TEST(normalized_split_sequence_resume) {
    tu_fixture f;
    tu_fx_init(&f, 212);
    nla_problem p = make_nla(&f, 100, 8, 5);
    double *o_ref, *S_ref, *z_ref;
    nla_ref(&p, &o_ref, &S_ref, &z_ref);
    const int T1 = 37, cs[] = {0, 16};
    for (int i = 0; i < 2; i++) {
        float *o = uniform(&f, (size_t)p.T * p.dv, 7, 7);
        float *S = fcopy(&f, p.S0, (size_t)p.dk * p.dv), *z = fcopy(&f, p.z0, p.dk);
        for (int part = 0; part < 2; part++) {
            int a = part ? T1 : 0, n = part ? p.T - T1 : T1;
            const float *q = p.q + (size_t)a * p.dk, *k = p.k + (size_t)a * p.dk;
            const float *v = p.v + (size_t)a * p.dv;
            if (cs[i] == 0)
                ttt_normalized_la_recurrent(o + (size_t)a * p.dv, S, z, q, k, v, n, p.dk, p.dv,
                                            TTT_NLA_EPS);
            else
                ttt_normalized_la_chunkwise(&f.ctx, o + (size_t)a * p.dv, S, z, q, k, v, n, p.dk,
                                            p.dv, cs[i], TTT_NLA_EPS);
        }
        TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(z, z_ref, p.dk, ATOL, RTOL);
    }
    free(o_ref), free(S_ref), free(z_ref);
    tu_fx_free(&f);
}
END_TEST

/* Post-norm (TransNormer): RMSNorm of the linear-attention output, against float64; in place
 * equals out of place; applied to the chunkwise output it equals RMSNorm of the float64
 * recurrence's output. */
START_TEST(postnorm_matches_reference) {
    tu_fixture f;
    tu_fx_init(&f, 213);
    const int T = 100, dk = 16, dv = 12;
    float *q = tu_randn_buf(&f, (size_t)T * dk, 0.5f), *k = tu_randn_buf(&f, (size_t)T * dk, 0.5f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *la = uniform(&f, T, -0.2f, -0.01f);
    double *o_la = dzeros((size_t)T * dv), *S = dzeros((size_t)dk * dv);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = exp(la[t]) * S[i * dv + j] + (double)k[t * dk + i] * v[t * dv + j];
        for (int j = 0; j < dv; j++)
            for (int i = 0; i < dk; i++) o_la[t * dv + j] += q[t * dk + i] * S[i * dv + j];
    }
    double *want = dzeros((size_t)T * dv);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int j = 0; j < dv; j++) ss += o_la[t * dv + j] * o_la[t * dv + j];
        double r = 1.0 / sqrt(ss / dv + TTT_POSTNORM_EPS);
        for (int j = 0; j < dv; j++) want[t * dv + j] = o_la[t * dv + j] * r;
    }
    float *o = uniform(&f, (size_t)T * dv, 7, 7), *Sf = uniform(&f, (size_t)dk * dv, 0, 0);
    ttt_linear_attention_chunkwise(&f.ctx, o, Sf, q, k, v, NULL, la, 0, T, dk, dv, 16);
    float *y = uniform(&f, (size_t)T * dv, 7, 7);
    ttt_rms_postnorm(y, o, T, dv, TTT_POSTNORM_EPS);
    TU_ASSERT_CLOSE(y, want, (size_t)T * dv, ATOL, RTOL);
    ttt_rms_postnorm(o, o, T, dv, TTT_POSTNORM_EPS);
    ck_assert(memcmp(o, y, sizeof(float) * T * dv) == 0);
    /* the check sees the normalization: the unnormalized output is not accepted */
    ttt_linear_attention_chunkwise(&f.ctx, o, Sf, q, k, v, NULL, la, 0, T, dk, dv, 16);
    ck_assert(!tu_close(o, want, (size_t)T * dv, ATOL, RTOL, NULL, 0));
    free(o_la), free(S), free(want);
    tu_fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Softmax attention and FoX                                                                   */

/* float64 naive causal softmax over masked scores: s_ij = scale q_i·k_j + Σ_{r=j+1}^{i} log α_r
 * (summed directly per pair, not via prefix sums), max subtracted. Rows [r0, r1) only. */
static void ref_softmax(double *o, const float *q, const float *k, const float *v,
                        const float *la, double scale, int T, int dk, int dv, int r0, int r1) {
    double *s = dzeros(T);
    for (int i = r0; i < r1; i++) {
        double mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
            double d = 0;
            for (int c = 0; c < dk; c++) d += (double)q[(size_t)i * dk + c] * k[(size_t)j * dk + c];
            s[j] = scale * d;
            if (la)
                for (int r = j + 1; r <= i; r++) s[j] += la[r];
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (int j = 0; j <= i; j++) sum += s[j] = exp(s[j] - mx);
        for (int c = 0; c < dv; c++) {
            double a = 0;
            for (int j = 0; j <= i; j++) a += s[j] * v[(size_t)j * dv + c];
            o[(size_t)(i - r0) * dv + c] = a / sum;
        }
    }
    free(s);
}

/* Plain causal attention and FoX with random gates vs the naive float64 form; T = 150 spans
 * three query tiles (the last partial). Also strong gates (log α ∈ [−3, −1]): nearly diagonal. */
START_TEST(softmax_matches_naive) {
    tu_fixture f;
    tu_fx_init(&f, 220);
    const int T = 150, dk = 16, dv = 8;
    const float scale = 0.25f;
    float *q = tu_randn_buf(&f, (size_t)T * dk, 1.0f), *k = tu_randn_buf(&f, (size_t)T * dk, 1.0f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f);
    float *gates[3] = {NULL, uniform(&f, T, -0.5f, 0.0f), uniform(&f, T, -3.0f, -1.0f)};
    for (int g = 0; g < 3; g++) {
        double *want = dzeros((size_t)T * dv);
        ref_softmax(want, q, k, v, gates[g], scale, T, dk, dv, 0, T);
        float *o = uniform(&f, (size_t)T * dv, 7, 7);
        ttt_softmax_attention(&f.ctx, o, q, k, v, gates[g], scale, T, dk, dv);
        TU_ASSERT_CLOSE(o, want, (size_t)T * dv, ATOL, RTOL);
        /* small perturbations are caught: 1e-3 added to one value entry (query 0 reads only
         * key 0), and the last query scaled by 1.001 (its logits move by ~1e-3) */
        float *v2 = fcopy(&f, v, (size_t)T * dv), *q2 = fcopy(&f, q, (size_t)T * dk);
        v2[2] += 1e-3f;
        ttt_softmax_attention(&f.ctx, o, q, k, v2, gates[g], scale, T, dk, dv);
        ck_assert(!tu_close(o, want, (size_t)T * dv, ATOL, RTOL, NULL, 0));
        for (int c = 0; c < dk; c++) q2[(size_t)(T - 1) * dk + c] *= 1.001f;
        ttt_softmax_attention(&f.ctx, o, q2, k, v, gates[g], scale, T, dk, dv);
        ck_assert(!tu_close(o, want, (size_t)T * dv, ATOL, RTOL, NULL, 0));
        free(want);
    }
    tu_fx_free(&f);
}
END_TEST

/* FoX with every α = 1 (log α = 0) is plain causal softmax attention. */
START_TEST(fox_unit_gates_equal_causal) {
    tu_fixture f;
    tu_fx_init(&f, 221);
    const int T = 130, dk = 8, dv = 6;
    float *q = tu_randn_buf(&f, (size_t)T * dk, 1.0f), *k = tu_randn_buf(&f, (size_t)T * dk, 1.0f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *zero = uniform(&f, T, 0, 0);
    float *o1 = uniform(&f, (size_t)T * dv, 7, 7), *o2 = uniform(&f, (size_t)T * dv, 7, 7);
    ttt_softmax_attention(&f.ctx, o1, q, k, v, NULL, 0.3f, T, dk, dv);
    ttt_softmax_attention(&f.ctx, o2, q, k, v, zero, 0.3f, T, dk, dv);
    /* two float32 evaluations: the sum of their bounds */
    TU_ASSERT_CLOSE_F(o2, o1, (size_t)T * dv, 2 * ATOL, 2 * RTOL);
    /* and a non-trivial gate does change the output */
    ttt_rng_fill_uniform(&f.rng, zero, T, -0.1f, 0.0f);
    ttt_softmax_attention(&f.ctx, o2, q, k, v, zero, 0.3f, T, dk, dv);
    ck_assert(!tu_close_f(o2, o1, (size_t)T * dv, 2 * ATOL, 2 * RTOL, NULL, 0));
    tu_fx_free(&f);
}
END_TEST

/* One constant gate γ is ALiBi: the bias (i − j)·log γ, a linear penalty in the distance (docs/math.md
 * §4.2). The reference below writes that bias directly in float64, not as prefix sums of gates. */
START_TEST(fox_constant_gate_is_alibi) {
    tu_fixture f;
    tu_fx_init(&f, 222);
    const int T = 97, dk = 8, dv = 5;
    const double slope = -0.0625; /* log γ; ALiBi's slope for head 4 of 8 is 2^-4 */
    const float scale = 0.35f;
    float *q = tu_randn_buf(&f, (size_t)T * dk, 1.0f), *k = tu_randn_buf(&f, (size_t)T * dk, 1.0f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *g = uniform(&f, T, (float)slope, (float)slope);
    double *want = dzeros((size_t)T * dv), *p = dzeros((size_t)T);
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, z = 0;
        for (int j = 0; j <= i; j++) {
            double sc = 0;
            for (int c = 0; c < dk; c++) sc += (double)q[(size_t)i * dk + c] * k[(size_t)j * dk + c];
            p[j] = sc * scale + slope * (i - j);
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= i; j++) z += (p[j] = exp(p[j] - mx));
        for (int j = 0; j <= i; j++)
            for (int c = 0; c < dv; c++) want[(size_t)i * dv + c] += p[j] / z * v[(size_t)j * dv + c];
    }
    float *o = uniform(&f, (size_t)T * dv, 7, 7);
    ttt_softmax_attention(&f.ctx, o, q, k, v, g, scale, T, dk, dv);
    TU_ASSERT_CLOSE(o, want, (size_t)T * dv, ATOL, RTOL);
    /* a slope off by 1 % is caught */
    ttt_rng_fill_uniform(&f.rng, g, T, (float)(slope * 1.01), (float)(slope * 1.01));
    ttt_softmax_attention(&f.ctx, o, q, k, v, g, scale, T, dk, dv);
    ck_assert(!tu_close(o, want, (size_t)T * dv, ATOL, RTOL, NULL, 0));
    free(p);
    free(want);
    tu_fx_free(&f);
}
END_TEST

/* Scores of magnitude ~8e3 (exp would overflow, or underflow to 0/0, without the max
 * subtraction): every query has a component ±512 against a key component 64 shared by all keys,
 * a per-row offset of ±8192 on top of the O(1…10) spread that decides the softmax. Integer q, k
 * and the power-of-two scale 1/4 make every score exact in float32, and gates of exactly −0.5
 * make log Γ exact, so the float32 result must match the float64 one to the rounding of the
 * softmax itself. */
START_TEST(softmax_large_scores) {
    tu_fixture f;
    tu_fx_init(&f, 222);
    const int T = 100, dk = 16, dv = 4;
    float *q = uniform(&f, (size_t)T * dk, 0, 0), *k = uniform(&f, (size_t)T * dk, 0, 0);
    for (int i = 0; i < T * dk; i++) {
        const int c = i % dk;
        q[i] = c ? (float)((int)ttt_rng_below(&f.rng, 17) - 8)
                 : (ttt_rng_below(&f.rng, 2) ? 512.0f : -512.0f);
        k[i] = c ? (float)((int)ttt_rng_below(&f.rng, 3) - 1) : 64.0f;
    }
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *la = uniform(&f, T, -0.5f, -0.5f);
    for (int g = 0; g < 2; g++) {
        const float *gate = g ? la : NULL;
        double *want = dzeros((size_t)T * dv);
        ref_softmax(want, q, k, v, gate, 0.25, T, dk, dv, 0, T);
        float *o = uniform(&f, (size_t)T * dv, 7, 7);
        ttt_softmax_attention(&f.ctx, o, q, k, v, gate, 0.25f, T, dk, dv);
        ck_assert_int_eq(ttt_find_nonfinite(o, (size_t)T * dv), -1);
        TU_ASSERT_CLOSE(o, want, (size_t)T * dv, ATOL, RTOL);
        free(want);
    }
    tu_fx_free(&f);
}
END_TEST

/* T = 4096 under an arena limit of 8 MB: a T × T score matrix (64 MB) cannot be allocated, the
 * (64, T) tile can. Sampled rows (first, tile edges, last) against the naive float64 form. */
START_TEST(softmax_long_sequence_tiled) {
    tu_fixture f;
    tu_fx_init(&f, 223);
    const int T = 4096, dk = 16, dv = 8;
    float *q = tu_randn_buf(&f, (size_t)T * dk, 1.0f), *k = tu_randn_buf(&f, (size_t)T * dk, 1.0f);
    float *v = tu_randn_buf(&f, (size_t)T * dv, 1.0f), *la = uniform(&f, T, -0.01f, 0.0f);
    float *o = uniform(&f, (size_t)T * dv, 7, 7);
    f.arena.limit = ttt_arena_footprint(&f.arena) + ((size_t)8 << 20);
    const int rows[][2] = {{0, 3}, {62, 66}, {2040, 2050}, {4090, 4096}};
    for (int g = 0; g < 2; g++) {
        const float *gate = g ? la : NULL;
        ttt_softmax_attention(&f.ctx, o, q, k, v, gate, 0.25f, T, dk, dv);
        ck_assert_int_eq(ttt_find_nonfinite(o, (size_t)T * dv), -1);
        for (int r = 0; r < 4; r++) {
            int r0 = rows[r][0], r1 = rows[r][1];
            double *want = dzeros((size_t)(r1 - r0) * dv);
            ref_softmax(want, q, k, v, gate, 0.25, T, dk, dv, r0, r1);
            TU_ASSERT_CLOSE(o + (size_t)r0 * dv, want, (size_t)(r1 - r0) * dv, ATOL, RTOL);
            free(want);
        }
    }
    tu_fx_free(&f);
}
END_TEST

static Suite *attention_suite(void) {
    Suite *s = suite_create("attention");
    TCase *tr = tcase_create("rope");
    tcase_add_test(tr, rope_convention_by_hand);
    tcase_add_test(tr, rope_matches_reference_and_preserves_norms);
    tcase_add_test(tr, rope_relative_position);
    tcase_add_test(tr, rope_split_sequence_continues);
    tcase_add_test(tr, rope_inverse_add_any_width);
    tcase_add_test(tr, rope_linear_attention_forms);
    suite_add_tcase(s, tr);
    TCase *tn = tcase_create("normalized");
    tcase_add_test(tn, normalized_forms_match_reference);
    tcase_add_test(tn, normalized_is_ratio_of_two_states);
    tcase_add_test(tn, normalized_split_sequence_resume);
    tcase_add_test(tn, postnorm_matches_reference);
    suite_add_tcase(s, tn);
    TCase *ts = tcase_create("softmax");
    tcase_add_test(ts, softmax_matches_naive);
    tcase_add_test(ts, fox_unit_gates_equal_causal);
    tcase_add_test(ts, fox_constant_gate_is_alibi);
    tcase_add_test(ts, softmax_large_scores);
    tcase_add_test(ts, softmax_long_sequence_tiled);
    suite_add_tcase(s, ts);
    return s;
}

int main(void) { return tu_run(attention_suite()); }
