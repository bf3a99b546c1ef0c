/* RWKV-7's generalized delta rule (DPLR, docs/math.md "RWKV-7"; layers/forms/delta_rule/dplr.c):
 *     u_t = a_t S_{t−1},   S_t = Diag(w_t) S_{t−1} + b_tᵀ u_t + k_tᵀ v_t,   o_t = q_t S_t,
 * with RWKV-7's a_t = −κ̂_t, b_t = κ̂_t ⊙ α_t.
 *
 * (i) The recurrent kernel and the chunkwise form (chunks of 16, 48, 64) against a float64
 *     recurrence written here, on hard inputs in the manner of tests/test_hard_inputs.c: decays
 *     from log w = −1e-6 (where a float32 retention rounds the same way every step) to −10 per
 *     key, RWKV-7's own range (log w ∈ [−e^−½, 0)), hard resets (log w = −inf, −1e30, −1e4,
 *     −200 on whole tokens and on half the keys), the in-context rate α ∈ [0, 1] and up to 2 (at
 *     w = 1 the transition I − α κ̂ᵀκ̂ is then a reflection, which keeps every rounding error),
 *     write keys of norm 1e-2 … 100, a nonzero initial state, T = 16384 (512 at the
 *     reflection), d_k = 16 ≠ d_v = 12.
 *     Measure: relative RMS error over all outputs and over the final state. Bound 2e-6, the
 *     bound of tests/test_hard_inputs.c: a few float32 roundings (6e-8 each) per output with
 *     room for the sums over d_k. With w ≤ 1, α ∈ [0, 2] and unit κ̂ the transition's
 *     eigenvalues lie in [−1, 1] (docs/math.md "RWKV-7", stability), and the errors measured
 *     here do not grow with T except at the reflection, where they grow as √T: T = 512 keeps
 *     the recurrence at half the bound (1e-6). The chunkwise form solves and sums in float64
 *     and stays below 2.6e-7 on every case. Each case has a perturbed control: one token's rate
 *     α moved by 0.1 and one token's decay (the key that decays least) by 0.1 must move the
 *     float64 result by more than 10× the bound away from each form's.
 * (ii) Row strides give the same bits as contiguous rows (a head of a (T, H, D) array), for
 *     both forms.
 * (iii) The tape ops' gradients (the recurrent and the chunkwise op; every input: q, k, v, a, b, log w, S_0; chunks of 16 over 40
 *     tokens, a partial last chunk, one reset key) against central differences of the float64
 *     recurrence. Tolerance |got − fd| ≤ 1e-6 + 1e-4·max|fd| per input: float32 forward and
 *     backward over T = 40 tokens of d ≤ 7 lose ~ε·√(T·d) ≈ 1e-6 relative; the float64 central
 *     difference with h = 1e-6 is exact to ~1e-9. A gradient computed on an input whose one α
 *     moved by 0.01 must fail it. A reset's log w gets exactly 0.
 * (iv) The backward forms (the recurrence's, and the chunkwise form's at C = 16, 48, 64) on the
 *     hard inputs of (i) against a float64 backward written here, itself held to central
 *     differences of the float64 loss (1e-9 + 1e-7·max|fd|): relative RMS error of each
 *     gradient (q, k, v, a, b, log w, S_0) within GRAD_BOUND (derived beside it); the gradients
 *     at an input whose one rate moved by 0.1 must differ by more than 10× the bound.
 * python/tests/test_rwkv7.py compares the same kernel through the C API with the float64
 * reference of python/ttt/reference.py and torch's gradients; tests/bench/compare_fla_naive.py
 * with FLA's naive DPLR recurrence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "dplr.h"
#include "dplr_ref.h"
#include "testutil.h"

#define DK 16
#define DV 12
#define T_LONG 16384
#define T_REFLECT 512
#define BOUND 2e-6
/* The gradients' bound: each gradient is a sum of products of a forward quantity (a state or a
 * u_t, within BOUND of float64) and an adjoint (the carried dS, which runs the transposed
 * recurrence through the same transitions and so stays within BOUND as well), summed in float32
 * over at most d_v = 12 terms (d_v·ε ≈ 7e-7): 2e-6 + 2e-6 + 7e-7 < 5e-6. */
#define GRAD_BOUND 5e-6

typedef struct hard {
    const char *name;
    double lw_lo, lw_hi;   /* log w: constant when equal, else log-uniform magnitude between */
    double al_lo, al_hi;   /* α uniform in [lo, hi] */
    double kn_lo, kn_hi;   /* write-key norms, log-uniform */
    int resets;
    int T;
} hard;

static const hard cases[] = {
    {"rwkv7's decays, log w in [-0.61, -1e-3], a in [0, 1]", -0.6065, -1e-3, 0, 1, 1, 1, 0,
     T_LONG},
    {"log w = -1e-6, a in [0, 1]", -1e-6, -1e-6, 0, 1, 1e-2, 100, 0, T_LONG},
    {"log w = -1e-5, a in [0, 1]", -1e-5, -1e-5, 0, 1, 1, 1, 0, T_LONG},
    {"log w in [-10, -1e-6], a in [0, 1]", -10, -1e-6, 0, 1, 1e-2, 100, 0, T_LONG},
    {"log w in [-10, -1e-6], a in [0, 2]", -10, -1e-6, 0, 2, 1, 1, 0, T_LONG},
    {"resets, log w in [-1, -1e-3], a in [0, 1]", -1, -1e-3, 0, 1, 1e-2, 100, 1, T_LONG},
    {"w = 1, a = 2 (reflection)", 0, 0, 2, 2, 1, 1, 0, T_REFLECT},
    {"log w = -1e-5, a = 2", -1e-5, -1e-5, 2, 2, 1, 1, 0, T_REFLECT},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct problem {
    int T;
    float *q, *k, *v, *a, *b, *lw, *S0; /* lw NULL: w = 1 */
} problem;

static double urand(ttt_rng *r, double lo, double hi) {
    float u;
    ttt_rng_fill_uniform(r, &u, 1, 0.0f, 1.0f);
    return lo + (hi - lo) * u;
}
static double log_uniform(ttt_rng *r, double lo, double hi) {
    if (lo == hi) return lo;
    const double x = log(fabs(lo)), y = log(fabs(hi));
    return copysign(exp(x + (y - x) * urand(r, 0, 1)), lo);
}

static const float reset_values[] = {-INFINITY, -1e30f, -1e4f, -200.0f};

static problem make(const hard *c, uint64_t seed) {
    const int T = c->T;
    problem p = {.T = T};
    p.q = malloc(sizeof(float) * T * DK);
    p.k = malloc(sizeof(float) * T * DK);
    p.v = malloc(sizeof(float) * T * DV);
    p.a = malloc(sizeof(float) * T * DK);
    p.b = malloc(sizeof(float) * T * DK);
    p.S0 = malloc(sizeof(float) * DK * DV);
    p.lw = c->lw_lo == 0 && c->lw_hi == 0 ? NULL : malloc(sizeof(float) * T * DK);
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    ttt_rng_fill_normal(&r, p.q, (size_t)T * DK, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, p.k, (size_t)T * DK, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, p.v, (size_t)T * DV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, p.S0, DK * DV, 0.0f, 0.25f);
    float kap[DK];
    for (int t = 0; t < T; t++) {
        /* the write key at a log-uniform norm; the removal key κ̂ a unit vector */
        double s = 0, s2 = 0;
        for (int i = 0; i < DK; i++) s += (double)p.k[t * DK + i] * p.k[t * DK + i];
        const double kn = log_uniform(&r, c->kn_lo, c->kn_hi);
        for (int i = 0; i < DK; i++) p.k[t * DK + i] = (float)(p.k[t * DK + i] * kn / sqrt(s));
        ttt_rng_fill_normal(&r, kap, DK, 0.0f, 1.0f);
        for (int i = 0; i < DK; i++) s2 += (double)kap[i] * kap[i];
        for (int i = 0; i < DK; i++) {
            const float kh = (float)(kap[i] / sqrt(s2));
            p.a[t * DK + i] = -kh;
            p.b[t * DK + i] = kh * (float)urand(&r, c->al_lo, c->al_hi);
            if (p.lw) p.lw[t * DK + i] = (float)log_uniform(&r, c->lw_lo, c->lw_hi);
        }
    }
    if (c->resets && p.lw) /* first and last token, a run of 64, every 997th; half the keys
                            * on every other reset */
        for (int t = 0, n = 0; t < T; t++) {
            if (!(t == 0 || t == T - 1 || (t >= 1000 && t < 1064) || t % 997 == 0)) continue;
            for (int i = 0; i < (n % 2 ? DK / 2 : DK); i++) p.lw[t * DK + i] = reset_values[n % 4];
            n++;
        }
    return p;
}

static void drop(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->a), free(p->b), free(p->lw), free(p->S0);
}

/* The float64 recurrence of docs/math.md "RWKV-7", with d_k, d_v given. */
static void reference_dims(double *o, double *S, const problem *p, int dk, int dv) {
    double *u = malloc(sizeof(double) * dv);
    for (int n = 0; n < dk * dv; n++) S[n] = p->S0[n];
    for (int t = 0; t < p->T; t++) {
        const float *q = p->q + t * dk, *k = p->k + t * dk, *v = p->v + t * dv;
        const float *a = p->a + t * dk, *b = p->b + t * dk;
        for (int j = 0; j < dv; j++) {
            u[j] = 0;
            for (int i = 0; i < dk; i++) u[j] += (double)a[i] * S[i * dv + j];
        }
        for (int i = 0; i < dk; i++) {
            const double w = p->lw ? exp((double)p->lw[t * dk + i]) : 1.0;
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = w * S[i * dv + j] + (double)b[i] * u[j] + (double)k[i] * v[j];
        }
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += (double)q[i] * S[i * dv + j];
            o[t * dv + j] = s;
        }
    }
    free(u);
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

static void run(float *o, float *S, const problem *p) {
    memcpy(S, p->S0, sizeof(float) * DK * DV);
    ttt_dplr_recurrent_ld(o, S, p->q, p->k, p->v, p->a, p->b, p->lw, p->T, DK, DV, &contiguous);
}
static void run_chunk(float *o, float *S, const problem *p, int C) {
    memcpy(S, p->S0, sizeof(float) * DK * DV);
    ck_assert(ttt_dplr_chunkwise_ld(o, S, p->q, p->k, p->v, p->a, p->b, p->lw, p->T, DK, DV, C,
                                    &contiguous, NULL) == TTT_OK);
}

/* The forms: the recurrence, and the chunkwise form at chunks of 16, 48 (which divides neither
 * T: a partial last chunk) and 64. */
static const int form_chunks[] = {0, 16, 48, 64};
#define N_FORMS ((int)(sizeof form_chunks / sizeof form_chunks[0]))

static void run_form(float *o, float *S, const problem *p, int C) {
    memcpy(S, p->S0, sizeof(float) * DK * DV);
    if (C == 0)
        ttt_dplr_recurrent_ld(o, S, p->q, p->k, p->v, p->a, p->b, p->lw, p->T, DK, DV,
                              &contiguous);
    else
        ck_assert(ttt_dplr_chunkwise_ld(o, S, p->q, p->k, p->v, p->a, p->b, p->lw, p->T, DK, DV,
                                        C, &contiguous, NULL) == TTT_OK);
}

START_TEST(dplr_forms_match_float64_on_hard_inputs) {
    const hard *c = &cases[_i];
    problem p = make(c, 100 + (uint64_t)_i);
    const int T = p.T;
    const size_t nT = (size_t)T * DV;
    float *o = malloc(sizeof(float) * nT), S[DK * DV];
    double *o_ref = malloc(sizeof(double) * nT), S_ref[DK * DV];
    double *o_pb = malloc(sizeof(double) * nT), S_pb[DK * DV];
    double *o_pw = malloc(sizeof(double) * nT), S_pw[DK * DV];
    reference_dims(o_ref, S_ref, &p, DK, DV);
    /* the controls' references: one token's rate α moved by 0.1 (b_t += 0.1 κ̂_t = −0.1 a_t),
     * and one token's decay (on the key that decays least there) moved by 0.1, in the last
     * quarter so that decay cannot hide them */
    const int t = 3 * T / 4 + 1;
    int i = 0;
    if (p.lw)
        for (int j = 1; j < DK; j++)
            if (p.lw[t * DK + j] > p.lw[t * DK + i]) i = j;
    float keep_b[DK];
    memcpy(keep_b, p.b + t * DK, sizeof keep_b);
    for (int j = 0; j < DK; j++) p.b[t * DK + j] -= 0.1f * p.a[t * DK + j];
    reference_dims(o_pb, S_pb, &p, DK, DV);
    memcpy(p.b + t * DK, keep_b, sizeof keep_b);
    if (p.lw) {
        float *g = &p.lw[t * DK + i];
        const float keep = *g;
        *g = isfinite(*g) && *g > -100 ? *g - 0.1f : -0.5f;
        reference_dims(o_pw, S_pw, &p, DK, DV);
        *g = keep;
    }
    for (int f = 0; f < N_FORMS; f++) {
        run_form(o, S, &p, form_chunks[f]);
        const double eo = rel_rms(o, o_ref, nT), es = rel_rms(S, S_ref, DK * DV);
        const double pb = fmax(rel_rms(o, o_pb, nT), rel_rms(S, S_pb, DK * DV));
        /* (without decays, w = 1, there is no decay to move: that control is skipped) */
        const double pw = p.lw ? fmax(rel_rms(o, o_pw, nT), rel_rms(S, S_pw, DK * DV)) : NAN;
        printf("dplr %s C=%d, \"%s\" T=%d: o %.3g, S %.3g; controls: rate moved %.3g, decay "
               "moved %.3g\n",
               form_chunks[f] ? "chunkwise" : "recurrent", form_chunks[f], c->name, T, eo, es, pb,
               pw);
        ck_assert_msg(eo <= BOUND && es <= BOUND, "%s, C = %d: o %.3g, S %.3g (bound %.0e)",
                      c->name, form_chunks[f], eo, es, BOUND);
        ck_assert_msg(pb > 10 * BOUND, "%s, C = %d: a moved rate went unseen: %.3g", c->name,
                      form_chunks[f], pb);
        ck_assert_msg(!p.lw || pw > 10 * BOUND, "%s, C = %d: a moved decay went unseen: %.3g",
                      c->name, form_chunks[f], pw);
    }
    free(o), free(o_ref), free(o_pb), free(o_pw);
    drop(&p);
}
END_TEST

START_TEST(dplr_kernel_with_row_strides_gives_the_same_bits) {
    enum { H = 3, HEAD = 2, TS = 700 };
    const hard c = {"strides", -10, -1e-6, 0, 1, 1, 1, 1, TS};
    problem p = make(&c, 7);
    static float o[TS * DV], S[DK * DV], S2[DK * DV];
    static float qs[TS * H * DK], ks[TS * H * DK], as[TS * H * DK], bs[TS * H * DK],
        ls[TS * H * DK], vs[TS * H * DV], os[TS * H * DV];
    run(o, S, &p);
    for (int t = 0; t < TS; t++) {
        const size_t rk = (size_t)(t * H + HEAD) * DK;
        memcpy(qs + rk, p.q + t * DK, DK * sizeof(float));
        memcpy(ks + rk, p.k + t * DK, DK * sizeof(float));
        memcpy(as + rk, p.a + t * DK, DK * sizeof(float));
        memcpy(bs + rk, p.b + t * DK, DK * sizeof(float));
        memcpy(ls + rk, p.lw + t * DK, DK * sizeof(float));
        memcpy(vs + (size_t)(t * H + HEAD) * DV, p.v + t * DV, DV * sizeof(float));
    }
    const ttt_form_ld ld = {.o = H * DV, .q = H * DK, .k = H * DK, .v = H * DV, .beta = 1,
                            .la = H * DK};
    memcpy(S2, p.S0, sizeof S2);
    ttt_dplr_recurrent_ld(os + HEAD * DV, S2, qs + HEAD * DK, ks + HEAD * DK, vs + HEAD * DV,
                          as + HEAD * DK, bs + HEAD * DK, ls + HEAD * DK, TS, DK, DV, &ld);
    for (int t = 0; t < TS; t++)
        ck_assert_msg(memcmp(os + (t * H + HEAD) * DV, o + t * DV, DV * sizeof(float)) == 0,
                      "strided row %d differs", t);
    ck_assert(memcmp(S2, S, sizeof S) == 0);
    /* the chunkwise form with the same strides: the bits of its contiguous call */
    static float oc[TS * DV], Sc[DK * DV];
    run_chunk(oc, Sc, &p, 48);
    memcpy(S2, p.S0, sizeof S2);
    ck_assert(ttt_dplr_chunkwise_ld(os + HEAD * DV, S2, qs + HEAD * DK, ks + HEAD * DK,
                                    vs + HEAD * DV, as + HEAD * DK, bs + HEAD * DK, ls + HEAD * DK,
                                    TS, DK, DV, 48, &ld, NULL) == TTT_OK);
    for (int t = 0; t < TS; t++)
        ck_assert_msg(memcmp(os + (t * H + HEAD) * DV, oc + t * DV, DV * sizeof(float)) == 0,
                      "chunkwise strided row %d differs", t);
    ck_assert(memcmp(S2, Sc, sizeof Sc) == 0);
    /* the bit comparison sees one changed rate */
    bs[(TS / 2 * H + HEAD) * DK + 3] += 0.01f;
    memcpy(S2, p.S0, sizeof S2);
    ttt_dplr_recurrent_ld(os + HEAD * DV, S2, qs + HEAD * DK, ks + HEAD * DK, vs + HEAD * DV,
                          as + HEAD * DK, bs + HEAD * DK, ls + HEAD * DK, TS, DK, DV, &ld);
    ck_assert(memcmp(S2, S, sizeof S) != 0 ||
              memcmp(os + (TS / 2 * H + HEAD) * DV, o + TS / 2 * DV, DV * sizeof(float)) != 0);
    drop(&p);
}
END_TEST

/* ---- gradients of the tape op against float64 central differences ---- */

enum { GT = 40, GK = 5, GV = 7, GC = 16, N_IN = 7 };

/* L = Σ R_o ⊙ o + Σ R_S ⊙ S_T of the float64 recurrence at the inputs D (q, k, v, a, b, lw, S0). */
static double loss64(double *const *D, const double *Ro, const double *RS) {
    static double S[GK * GV], u[GV];
    double L = 0;
    for (int n = 0; n < GK * GV; n++) S[n] = D[6][n];
    for (int t = 0; t < GT; t++) {
        const double *q = D[0] + t * GK, *k = D[1] + t * GK, *v = D[2] + t * GV;
        const double *a = D[3] + t * GK, *b = D[4] + t * GK, *lw = D[5] + t * GK;
        for (int j = 0; j < GV; j++) {
            u[j] = 0;
            for (int i = 0; i < GK; i++) u[j] += a[i] * S[i * GV + j];
        }
        for (int i = 0; i < GK; i++)
            for (int j = 0; j < GV; j++)
                S[i * GV + j] = exp(lw[i]) * S[i * GV + j] + b[i] * u[j] + k[i] * v[j];
        for (int j = 0; j < GV; j++) {
            double s = 0;
            for (int i = 0; i < GK; i++) s += q[i] * S[i * GV + j];
            L += Ro[t * GV + j] * s;
        }
    }
    for (int n = 0; n < GK * GV; n++) L += RS[n] * S[n];
    return L;
}

/* The op's gradients (through the tape) for inputs X, into G; shapes of the seven inputs. */
static const int rows[N_IN] = {GT, GT, GT, GT, GT, GT, GK};
static const int cols[N_IN] = {GK, GK, GV, GK, GK, GK, GV};

static void op_grads_with(float **G, float *const *X, const float *Ro, const float *RS,
                          int chunkwise) {
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx;
    ttt_tensor *P[N_IN];
    for (int i = 0; i < N_IN; i++) {
        P[i] = ttt_tensor_2d(c, rows[i], cols[i]);
        memcpy(P[i]->data, X[i], P[i]->n * sizeof(float));
        memset(G[i], 0, P[i]->n * sizeof(float));
        ttt_tensor_set_param(P[i], G[i]);
    }
    ttt_tensor *S = NULL;
    ttt_tensor *O = chunkwise
                        ? ttt_dplr_chunkwise_op(c, &S, P[0], P[1], P[2], P[3], P[4], P[5], P[6], GC)
                        : ttt_dplr_recurrent_op(c, &S, P[0], P[1], P[2], P[3], P[4], P[5], P[6], GC);
    ttt_tensor *ro = ttt_tensor_2d(c, GT, GV), *rs = ttt_tensor_2d(c, GK, GV);
    memcpy(ro->data, Ro, ro->n * sizeof(float));
    memcpy(rs->data, RS, rs->n * sizeof(float));
    ttt_backward(c, ttt_add(c, ttt_sum(c, ttt_mul(c, O, ro)), ttt_sum(c, ttt_mul(c, S, rs))));
    tu_tape_fx_free(&fx);
}

START_TEST(dplr_op_gradients_match_float64_differences) {
    ttt_rng r;
    ttt_rng_seed(&r, 31);
    float *X[N_IN], *G[N_IN], Ro[GT * GV], RS[GK * GV];
    double *D[N_IN], dRo[GT * GV], dRS[GK * GV];
    for (int i = 0; i < N_IN; i++) {
        const size_t n = (size_t)rows[i] * cols[i];
        X[i] = malloc(n * sizeof(float));
        G[i] = malloc(n * sizeof(float));
        D[i] = malloc(n * sizeof(double));
        ttt_rng_fill_normal(&r, X[i], n, 0.0f, i == 6 ? 0.3f : 1.0f);
    }
    for (int t = 0; t < GT; t++) { /* RWKV-7's a = −κ̂, b = κ̂ ⊙ α, log w ∈ [−0.6, 0) */
        double s = 0;
        for (int i = 0; i < GK; i++) s += (double)X[3][t * GK + i] * X[3][t * GK + i];
        for (int i = 0; i < GK; i++) {
            const float kh = (float)(X[3][t * GK + i] / sqrt(s));
            X[3][t * GK + i] = -kh;
            X[4][t * GK + i] = kh * (float)urand(&r, 0, 1);
            X[5][t * GK + i] = (float)-urand(&r, 0.01, 0.6);
        }
    }
    X[5][(GT / 2) * GK + 1] = -INFINITY; /* one reset key */
    ttt_rng_fill_normal(&r, Ro, GT * GV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, RS, GK * GV, 0.0f, 1.0f);
    for (int n = 0; n < GT * GV; n++) dRo[n] = Ro[n];
    for (int n = 0; n < GK * GV; n++) dRS[n] = RS[n];
    op_grads_with(G, X, Ro, RS, _i);
    ck_assert_msg(G[5][(GT / 2) * GK + 1] == 0.0f, "a reset's log w has gradient %g",
                  G[5][(GT / 2) * GK + 1]);
    for (int i = 0; i < N_IN; i++)
        for (int n = 0; n < rows[i] * cols[i]; n++) D[i][n] = X[i][n];
    static const char *const names[N_IN] = {"q", "k", "v", "a", "b", "log w", "S0"};
    double *fd[N_IN];
    for (int i = 0; i < N_IN; i++) {
        const int n = rows[i] * cols[i];
        fd[i] = malloc(sizeof(double) * n);
        for (int j = 0; j < n; j++) {
            const double x = D[i][j];
            if (!isfinite(x)) { /* the reset: its gradient is 0 (checked above) */
                fd[i][j] = 0;
                continue;
            }
            const double h = 1e-6 * fmax(1.0, fabs(x));
            D[i][j] = x + h;
            const double lp = loss64(D, dRo, dRS);
            D[i][j] = x - h;
            const double lm = loss64(D, dRo, dRS);
            D[i][j] = x;
            fd[i][j] = (lp - lm) / (2 * h);
        }
        char msg[512];
        ck_assert_msg(tu_close(G[i], fd[i], (size_t)n, 1e-6, 1e-4, msg, sizeof msg),
                      "%s op, d%s: %s", _i ? "chunkwise" : "recurrent", names[i], msg);
    }
    /* control: the gradients at an input whose one rate moved by 0.01 must not pass */
    X[4][(GT / 4) * GK + 2] += 0.01f;
    op_grads_with(G, X, Ro, RS, _i);
    int passed = 1;
    for (int i = 0; i < N_IN; i++) {
        char msg[512];
        passed &= tu_close(G[i], fd[i], (size_t)rows[i] * cols[i], 1e-6, 1e-4, msg, sizeof msg);
    }
    ck_assert_msg(!passed, "gradients at a moved rate passed the comparison");
    for (int i = 0; i < N_IN; i++) free(X[i]), free(G[i]), free(D[i]), free(fd[i]);
}
END_TEST

/* ---- the backward forms against the float64 backward on the hard inputs ---- */

/* The float64 backward of dplr_ref.h for a problem of d_k, d_v. */
static void backward64(double *const *g, const problem *p, const float *dO, const float *dST,
                       int dk, int dv) {
    const dplr_seq sq = {.T = p->T, .dk = dk, .dv = dv, .q = p->q, .k = p->k, .v = p->v,
                         .a = p->a, .b = p->b, .lw = p->lw, .S0 = p->S0};
    ck_assert(dplr_backward64(g, &sq, dO, dST));
}

/* The float64 backward is itself held to central differences of the float64 loss (the inputs
 * of the op test, T = 40, d_k = 5, d_v = 7, one reset key): |g − fd| ≤ 1e-9 + 1e-7·max|fd|,
 * the central difference's own error with h = 1e-6 (~h² · third derivative plus ε/h ≈ 1e-10
 * relative) with room; a gradient at one rate moved by 0.01 must fail it. */
START_TEST(dplr_float64_backward_matches_differences) {
    ttt_rng r;
    ttt_rng_seed(&r, 32);
    float *X[N_IN], Ro[GT * GV], RS[GK * GV];
    double *D[N_IN], *g64[N_IN], dRo[GT * GV], dRS[GK * GV];
    for (int i = 0; i < N_IN; i++) {
        const size_t n = (size_t)rows[i] * cols[i];
        X[i] = malloc(n * sizeof(float));
        D[i] = malloc(n * sizeof(double));
        g64[i] = malloc(n * sizeof(double));
        ttt_rng_fill_normal(&r, X[i], n, 0.0f, i == 6 ? 0.3f : 1.0f);
    }
    for (int t = 0; t < GT; t++)
        for (int i = 0; i < GK; i++) {
            X[4][t * GK + i] *= 0.5f;
            X[5][t * GK + i] = (float)-urand(&r, 0.01, 0.6);
        }
    X[5][(GT / 2) * GK + 1] = -INFINITY;
    ttt_rng_fill_normal(&r, Ro, GT * GV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, RS, GK * GV, 0.0f, 1.0f);
    for (int n = 0; n < GT * GV; n++) dRo[n] = Ro[n];
    for (int n = 0; n < GK * GV; n++) dRS[n] = RS[n];
    for (int i = 0; i < N_IN; i++)
        for (int n = 0; n < rows[i] * cols[i]; n++) D[i][n] = X[i][n];
    problem p = {.T = GT, .q = X[0], .k = X[1], .v = X[2], .a = X[3], .b = X[4], .lw = X[5],
                 .S0 = X[6]};
    backward64(g64, &p, Ro, RS, GK, GV);
    static const char *const names[N_IN] = {"q", "k", "v", "a", "b", "log w", "S0"};
    for (int pass = 0; pass < 2; pass++) {
        int worst = 0;
        double worst_ratio = 0;
        if (pass == 1) { /* the control */
            X[4][(GT / 4) * GK + 2] += 0.01f;
            backward64(g64, &p, Ro, RS, GK, GV);
            X[4][(GT / 4) * GK + 2] -= 0.01f;
        }
        for (int i = 0; i < N_IN; i++) {
            const int n = rows[i] * cols[i];
            double fmaxv = 0, emax = 0;
            for (int j = 0; j < n; j++) {
                const double x = D[i][j];
                double fd = 0;
                if (isfinite(x)) {
                    const double h = 1e-6 * fmax(1.0, fabs(x));
                    D[i][j] = x + h;
                    const double lp = loss64(D, dRo, dRS);
                    D[i][j] = x - h;
                    const double lm = loss64(D, dRo, dRS);
                    D[i][j] = x;
                    fd = (lp - lm) / (2 * h);
                }
                fmaxv = fmax(fmaxv, fabs(fd));
                emax = fmax(emax, fabs(g64[i][j] - fd));
            }
            const double ratio = emax / (1e-9 + 1e-7 * fmaxv);
            if (pass == 0)
                printf("float64 backward, d%s: max |g - fd| %.3g (max |fd| %.3g)\n", names[i],
                       emax, fmaxv);
            if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
        }
        if (pass == 0)
            TU_ASSERT_LE(worst_ratio, 1.0, "float64 backward, d%s: %.3g of the tolerance",
                         names[worst], worst_ratio);
        else
            ck_assert_msg(worst_ratio > 1.0, "the float64 backward at a moved rate passed");
    }
    for (int i = 0; i < N_IN; i++) free(X[i]), free(D[i]), free(g64[i]);
}
END_TEST

/* The gradients of one backward form (C = 0: the recurrence's) into g (dplr_ref.h). */
static void backward_form(float *const *g, const problem *p, const float *dO, const float *dST,
                          int C) {
    const dplr_seq sq = {.T = p->T, .dk = DK, .dv = DV, .q = p->q, .k = p->k, .v = p->v,
                         .a = p->a, .b = p->b, .lw = p->lw, .S0 = p->S0};
    ck_assert(dplr_backward_form(g, &sq, dO, dST, C));
}

START_TEST(dplr_backward_forms_match_float64_on_hard_inputs) {
    const hard *c = &cases[_i];
    problem p = make(c, 100 + (uint64_t)_i);
    const int T = p.T;
    const size_t len[N_IN] = {(size_t)T * DK, (size_t)T * DK, (size_t)T * DV, (size_t)T * DK,
                              (size_t)T * DK, (size_t)T * DK, DK * DV};
    static const char *const names[N_IN] = {"q", "k", "v", "a", "b", "log w", "S0"};
    float *dO = malloc(sizeof(float) * (size_t)T * DV), dST[DK * DV];
    ttt_rng r;
    ttt_rng_seed(&r, 900 + (uint64_t)_i);
    ttt_rng_fill_normal(&r, dO, (size_t)T * DV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, dST, DK * DV, 0.0f, 1.0f);
    double *g64[N_IN], *gp[N_IN];
    float *g[N_IN];
    for (int i = 0; i < N_IN; i++) {
        g64[i] = malloc(sizeof(double) * len[i]);
        gp[i] = malloc(sizeof(double) * len[i]);
        g[i] = malloc(sizeof(float) * len[i]);
    }
    backward64(g64, &p, dO, dST, DK, DV);
    /* the control: one token's rate moved by 0.1, as in the forward's test */
    const int t = 3 * T / 4 + 1;
    float keep_b[DK];
    memcpy(keep_b, p.b + t * DK, sizeof keep_b);
    for (int j = 0; j < DK; j++) p.b[t * DK + j] -= 0.1f * p.a[t * DK + j];
    backward64(gp, &p, dO, dST, DK, DV);
    memcpy(p.b + t * DK, keep_b, sizeof keep_b);
    for (int f = 0; f < N_FORMS; f++) {
        for (int i = 0; i < N_IN; i++) memset(g[i], 0, sizeof(float) * len[i]);
        backward_form(g, &p, dO, dST, form_chunks[f]);
        double worst = 0, control = INFINITY;
        printf("dplr backward %s C=%d, \"%s\" T=%d:", form_chunks[f] ? "chunkwise" : "recurrent",
               form_chunks[f], c->name, T);
        for (int i = 0; i < N_IN; i++) {
            if (i == 5 && !p.lw) continue;
            const double e = rel_rms(g[i], g64[i], len[i]);
            printf(" d%s %.2g", names[i], e);
            worst = fmax(worst, e);
        }
        /* the control must be seen in the gradients of the inputs taken together */
        double num = 0, den = 0;
        for (int i = 0; i < N_IN; i++) {
            if (i == 5 && !p.lw) continue;
            for (size_t n = 0; n < len[i]; n++) {
                const double d = g[i][n] - gp[i][n];
                num += d * d;
                den += gp[i][n] * gp[i][n];
            }
        }
        control = sqrt(num / den);
        printf("; control %.3g\n", control);
        TU_ASSERT_LE(worst, GRAD_BOUND, "%s, C = %d: gradient error %.3g (bound %.0e)", c->name,
                     form_chunks[f], worst, GRAD_BOUND);
        ck_assert_msg(control > 10 * GRAD_BOUND, "%s, C = %d: a moved rate went unseen: %.3g",
                      c->name, form_chunks[f], control);
    }
    for (int i = 0; i < N_IN; i++) free(g64[i]), free(gp[i]), free(g[i]);
    free(dO);
    drop(&p);
}
END_TEST

static Suite *rwkv7_suite(void) {
    Suite *s = suite_create("rwkv7");
    TCase *tc = tcase_create("rwkv7");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, dplr_forms_match_float64_on_hard_inputs, 0, N_CASES);
    tcase_add_test(tc, dplr_kernel_with_row_strides_gives_the_same_bits);
    tcase_add_loop_test(tc, dplr_op_gradients_match_float64_differences, 0, 2);
    tcase_add_test(tc, dplr_float64_backward_matches_differences);
    tcase_add_loop_test(tc, dplr_backward_forms_match_float64_on_hard_inputs, 0, N_CASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(rwkv7_suite()); }
