/* Log-linear attention (docs/math.md §4.8; layers/forms/loglinear/recurrent.c): Λ levels of
 * state merged by the Fenwick schedule, each stepped by the rule and read with its own query,
 * through ttt_layer_forward (presets loglinear_mamba2 and loglinear_gdn), against float64
 * written here:
 *   * the float64 recurrence (merge, step, read) equals the bucket definition of the paper,
 *     o_t = Σ_{j ≤ t} q_t^{ℓ(t, j)} (Π_{j < s ≤ t} A_s) β_j k_jᵀ v_j with
 *     ℓ(t, j) = min(bitlen(t xor j), Λ − 1), to 1e-12 (no float32 involved);
 *   * the form against the float64 recurrence with hard resets, β ∈ [0, 2], a nonzero initial
 *     state and d_v ≠ d_k, at Λ = 5 (the top level holds the old buckets) and Λ = 10 (exact for
 *     these 500 tokens); each must reject two perturbed definitions: a wrong level assignment
 *     (merging into level ctz(p) instead of ctz(p) + 1) and the rule's transition applied to
 *     level 0 only;
 *   * equal queries on every level give the ordinary rule (mamba2, gated_deltanet) within twice
 *     the bound (the levels sum to its state); control: one level's query moved by 1 % at one
 *     token;
 *   * a sequence split in two calls with the carried state meets the same bound against the
 *     float64 recurrence of the whole (st->pos places the tokens in the tree; the bits differ
 *     from one call's only by where the gates' dithering and the pending decays restart);
 *   * the gradients under a tape (the hand-written backward) against central differences of the
 *     float64 recurrence for q, k, v, η, log α and the initial state; control: the differences
 *     of a problem whose third key is 10 % larger.
 *   * the chunked forms (log-linear Mamba-2 and Gated DeltaNet) against the same float64
 *     recurrence; the chunked backward of log-linear Gated DeltaNet against central
 *     differences (in one call and split), and both backward forms against a float64 backward
 *     of the recurrence on hard inputs (T = 2048, 512 at β = 2; weak, strong and no gates,
 *     resets), relative RMS within GRAD_BOUND (derived beside it).
 * tests/test_hard_inputs.c runs the forms on the hard inputs with every other form.
 *
 * Bounds. Forward: relative RMS error ≤ 2e-6 over outputs and final state, the bound of
 * tests/test_hard_inputs.c: each output is a sum over Λ levels of float32 reads of states whose
 * steps do not expand (unit keys, β ≤ 2, α ≤ 1), a few roundings (ε = 2^-24) each; measured
 * ≤ 3e-7 (printed). Gradients: |got − fd| ≤ rtol·max|fd| per input, rtol = 6ε·√(2·n·T) with
 * n = Λ·(4·max(d_k, d_v) + 10) + T roundings per state entry per token, forward and backward
 * (the walk of tests/test_deltaproduct.c with Λ states per token); the float64 differences' own
 * error (h = 1e-6) is ~1e-10 of max|fd|, negligible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

#define BOUND 2e-6
#define NLMAX 10

typedef struct prob {
    int T, nl, dk, dv, delta;
    float *q, *k, *v, *eta, *la, *S0; /* (T, nl dk), (T, dk), (T, dv), (T), (T), (nl dk, dv) */
} prob;

enum { V_NONE, V_WRONG_LEVEL, V_LEVEL0_ONLY };
enum { N_IN = 6 };

static size_t in_len(const prob *p, int i) {
    const size_t n[N_IN] = {(size_t)p->T * p->nl * p->dk, (size_t)p->T * p->dk,
                            (size_t)p->T * p->dv, (size_t)p->T, (size_t)p->T,
                            (size_t)p->nl * p->dk * p->dv};
    return n[i];
}
static float *in_buf(const prob *p, int i) {
    float *b[N_IN] = {p->q, p->k, p->v, p->eta, p->la, p->S0};
    return b[i];
}

static int target(int t, int nl, int variant) {
    if (t <= 0 || nl <= 1) return 0;
    int tz = 0;
    while (!((t >> tz) & 1)) tz++;
    const int m = variant == V_WRONG_LEVEL ? tz : tz + 1;
    return m < nl - 1 ? m : nl - 1;
}

/* The float64 recurrence: o (T, dv), S (nl dk dv). */
static void reference64(double *o, double *S, const prob *p, double *const x[N_IN], int variant) {
    const int dk = p->dk, dv = p->dv, nl = p->nl, kv = dk * dv;
    const double *Q = x[0], *K = x[1], *V = x[2], *B = x[3], *LA = x[4];
    for (int n = 0; n < nl * kv; n++) S[n] = x[5][n];
    double e[64];
    for (int t = 0; t < p->T; t++) {
        const int m = target(t, nl, variant);
        for (int l = 0; l < m; l++)
            for (int n = 0; n < kv; n++) S[m * kv + n] += S[l * kv + n], S[l * kv + n] = 0;
        const double a = exp(LA[t]);
        const double *k = K + (size_t)t * dk, *v = V + (size_t)t * dv;
        for (int l = 0; l < nl; l++) {
            double *Sl = S + l * kv;
            for (int n = 0; n < kv; n++) Sl[n] *= a;
            const int corr = p->delta && (l == 0 || variant != V_LEVEL0_ONLY);
            if (l && !corr) continue;
            for (int c = 0; c < dv; c++) {
                double s = l ? 0.0 : v[c];
                if (corr)
                    for (int i = 0; i < dk; i++) s -= k[i] * Sl[i * dv + c];
                e[c] = s;
            }
            for (int i = 0; i < dk; i++)
                for (int c = 0; c < dv; c++) Sl[i * dv + c] += B[t] * k[i] * e[c];
        }
        for (int c = 0; c < dv; c++) {
            double s = 0;
            for (int r = 0; r < nl * dk; r++) s += Q[((size_t)t * nl) * dk + r] * S[r * dv + c];
            o[(size_t)t * dv + c] = s;
        }
    }
}

static void to64(ttt_ctx *ctx, const prob *p, double *x[N_IN]) {
    for (int i = 0; i < N_IN; i++) {
        x[i] = tu_zalloc(ctx, in_len(p, i) * sizeof(double));
        for (size_t n = 0; n < in_len(p, i); n++) x[i][n] = in_buf(p, i)[n];
    }
}

static void reference(double *o, double *S, const prob *p, int variant) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx ctx = {.arena = &a};
    double *x[N_IN];
    to64(&ctx, p, x);
    reference64(o, S, p, x, variant);
    ttt_arena_free(&a);
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

/* Unit keys, β ∈ [0, 2], log α ∈ [−2, −1e-4] with hard resets on 3 % of the tokens, level
 * weights λ ∈ [0.25, 2] on one query per token. */
static prob make(tu_fixture *f, int T, int nl, int dk, int dv, int delta, int resets) {
    prob p = {.T = T, .nl = nl, .dk = dk, .dv = dv, .delta = delta};
    p.q = tu_randn_buf(f, (size_t)T * nl * dk, 1.0f);
    p.k = tu_randn_buf(f, (size_t)T * dk, 1.0f);
    p.v = tu_randn_buf(f, (size_t)T * dv, 1.0f);
    p.S0 = tu_randn_buf(f, (size_t)nl * dk * dv, 0.25f);
    for (int r = 0; r < T; r++) {
        double s = 0;
        for (int i = 0; i < dk; i++) s += (double)p.k[r * dk + i] * p.k[r * dk + i];
        for (int i = 0; i < dk; i++) p.k[r * dk + i] = (float)(p.k[r * dk + i] / sqrt(s));
    }
    float lam[NLMAX];
    for (int t = 0; t < T; t++) {
        ttt_rng_fill_uniform(&f->rng, lam, (size_t)nl, 0.25f, 2.0f);
        for (int l = nl - 1; l >= 0; l--)
            for (int i = 0; i < dk; i++)
                p.q[((size_t)t * nl + l) * dk + i] = lam[l] * p.q[(size_t)t * nl * dk + i];
    }
    p.eta = tu_zalloc(&f->ctx, (size_t)T * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, p.eta, (size_t)T, 0.0f, 2.0f);
    p.la = tu_zalloc(&f->ctx, (size_t)T * sizeof(float));
    float *u = tu_zalloc(&f->ctx, (size_t)T * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, u, (size_t)T, 0.0f, 1.0f);
    for (int t = 0; t < T; t++)
        p.la[t] = resets && u[t] < 0.03f ? (t % 2 ? -INFINITY : -1e30f)
                                         : (float)(-2.0 * pow(u[t], 4.0) - 1e-4);
    return p;
}

static void layer_form(ttt_layer *L, const char *preset, int nl, int dk, int dv,
                       const char *form, int chunk) {
    char text[256];
    snprintf(text, sizeof text, "layer: {preset: %s, levels: %d, form: %s, chunk: %d}\n", preset,
             nl, form, chunk);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), dk, dv, L, &err) ==
                      TTT_OK,
                  "%s: %s", text, err.msg);
    ttt_cfg_free(root);
}

static void layer_of(ttt_layer *L, const char *preset, int nl, int dk, int dv) {
    layer_form(L, preset, nl, dk, dv, "recurrent", 16);
}

/* The layer on tokens [t0, t1) of p without a tape, from state S (in/out) at position t0. */
static void run_part(const ttt_layer *L, const prob *p, int t0, int t1, float *o, float *S) {
    tu_fixture f;
    tu_fx_init(&f, 1);
    const int n = t1 - t0, nl = L->levels > 1 ? L->levels : 1;
    ttt_tensor q = ttt_tensor_view2(p->q + (size_t)t0 * p->nl * p->dk, n, nl * p->dk);
    ttt_tensor k = ttt_tensor_view2(p->k + (size_t)t0 * p->dk, n, p->dk);
    ttt_tensor v = ttt_tensor_view2(p->v + (size_t)t0 * p->dv, n, p->dv);
    ttt_tensor eta = ttt_tensor_view(p->eta + t0, 1, (int[]){n});
    ttt_tensor la = ttt_tensor_view(p->la + t0, 1, (int[]){n});
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, L, &st, &f.rng);
    memcpy(st.W[0]->data, S, st.W[0]->n * sizeof(float));
    st.pos = t0;
    ttt_tensor ot = ttt_tensor_view2(o + (size_t)t0 * p->dv, n, p->dv);
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward(&f.ctx, L, &ot, &st, &q, &k, &v, &eta, &la, &err) == TTT_OK,
                  "%s", err.msg);
    memcpy(S, st.W[0]->data, st.W[0]->n * sizeof(float));
    tu_fx_free(&f);
}

static void run_layer(const ttt_layer *L, const prob *p, float *o, float *S) {
    memcpy(S, p->S0, in_len(p, 5) * sizeof(float));
    run_part(L, p, 0, p->T, o, S);
}

static const char *const presets[] = {"loglinear_mamba2", "loglinear_gdn"};

START_TEST(recurrence_is_the_bucket_definition) {
    enum { T = 70, DK = 3, DV = 2 };
    const int delta = _i % 2, nl = _i < 2 ? 4 : 8; /* 4 levels: the top level clamps */
    tu_fixture f;
    tu_fx_init(&f, 10 + (uint64_t)_i);
    prob p = make(&f, T, nl, DK, DV, delta, 0);
    memset(p.S0, 0, in_len(&p, 5) * sizeof(float));
    double o[T * DV], S[NLMAX * DK * DV], o2[T * DV] = {0};
    reference(o, S, &p, V_NONE);
    /* each token's write carried by the transitions, read at its level */
    static double C[T][DK * DV];
    for (int t = 0; t < T; t++) {
        const double a = exp((double)p.la[t]), b = p.eta[t];
        const float *k = p.k + t * DK;
        for (int j = 0; j < t; j++) { /* C_j ← a (I − δ b k kᵀ) C_j */
            double kc[DV] = {0};
            for (int c = 0; c < DV; c++)
                for (int i = 0; i < DK; i++) kc[c] += k[i] * C[j][i * DV + c];
            for (int i = 0; i < DK; i++)
                for (int c = 0; c < DV; c++)
                    C[j][i * DV + c] = a * (C[j][i * DV + c] - delta * b * k[i] * kc[c]);
        }
        for (int i = 0; i < DK; i++)
            for (int c = 0; c < DV; c++) C[t][i * DV + c] = b * k[i] * p.v[t * DV + c];
        for (int j = 0; j <= t; j++) {
            int lev = 0;
            for (int x = t ^ j; x; x >>= 1) lev++;
            if (lev > nl - 1) lev = nl - 1;
            const float *q = p.q + ((size_t)t * nl + lev) * DK;
            for (int c = 0; c < DV; c++)
                for (int i = 0; i < DK; i++) o2[t * DV + c] += q[i] * C[j][i * DV + c];
        }
    }
    double num = 0, den = 0;
    for (int n = 0; n < T * DV; n++) num = fmax(num, fabs(o[n] - o2[n])), den = fmax(den, fabs(o2[n]));
    ck_assert_msg(num <= 1e-12 * den, "%s Λ %d: %.3g", presets[delta], nl, num / den);
    tu_fx_free(&f);
}
END_TEST

START_TEST(form_matches_float64_with_resets) {
    enum { T = 500, DK = 16, DV = 24 };
    const int delta = _i % 2, nl = _i < 2 ? 5 : 10;
    tu_fixture f;
    tu_fx_init(&f, 20 + (uint64_t)_i);
    const prob p = make(&f, T, nl, DK, DV, delta, 1);
    const int ns = nl * DK * DV;
    float *o = tu_zalloc(&f.ctx, sizeof(float) * T * DV), *S = tu_zalloc(&f.ctx, sizeof(float) * ns);
    double *o_ref = tu_zalloc(&f.ctx, sizeof(double) * T * DV);
    double *S_ref = tu_zalloc(&f.ctx, sizeof(double) * ns);
    ttt_layer L;
    layer_of(&L, presets[delta], nl, DK, DV);
    run_layer(&L, &p, o, S);
    reference(o_ref, S_ref, &p, V_NONE);
    const double eo = rel_rms(o, o_ref, T * DV), es = rel_rms(S, S_ref, ns);
    printf("%-16s levels %2d: o %.2e  S %.2e (bound %.0e)\n", presets[delta], nl, eo, es, BOUND);
    ck_assert_msg(tu_ratio(eo, BOUND) && tu_ratio(es, BOUND), "%s: o %.3g, S %.3g",
                  presets[delta], eo, es);
    for (int variant = V_WRONG_LEVEL; variant <= (delta ? V_LEVEL0_ONLY : V_WRONG_LEVEL);
         variant++) {
        reference(o_ref, S_ref, &p, variant);
        const double w = rel_rms(o, o_ref, T * DV);
        ck_assert_msg(w > 100 * BOUND, "%s: control %d unseen (%.3g)", presets[delta], variant, w);
    }
    /* the same tokens in two calls, the state carried: one call's bits */
    float *o2 = tu_zalloc(&f.ctx, sizeof(float) * T * DV), *S2 = tu_zalloc(&f.ctx, sizeof(float) * ns);
    memcpy(S2, p.S0, sizeof(float) * ns);
    run_part(&L, &p, 0, 173, o2, S2);
    run_part(&L, &p, 173, T, o2, S2);
    reference(o_ref, S_ref, &p, V_NONE);
    const double e2o = rel_rms(o2, o_ref, T * DV), e2s = rel_rms(S2, S_ref, ns);
    ck_assert_msg(tu_ratio(e2o, BOUND) && tu_ratio(e2s, BOUND), "%s split: o %.3g, S %.3g",
                  presets[delta], e2o, e2s);
    tu_fx_free(&f);
}
END_TEST

/* The chunked forms (layers/forms/loglinear/chunkwise.c for log-linear Mamba-2,
 * chunkwise_delta.c for log-linear Gated DeltaNet): chunks of 16 and 64 tokens at 5 levels (the
 * top level inside a chunk of 64: every chunk after the first runs token by token) and 10; the
 * call split at token 173, so that the second call starts inside a chunk (its first tokens token
 * by token). Same bound and controls as the recurrent form. */
START_TEST(chunkwise_matches_float64_with_resets) {
    enum { T = 500, DK = 16, DV = 24 };
    const int delta = _i / 4, nl = _i % 4 < 2 ? 5 : 10, C = _i % 2 ? 64 : 16;
    tu_fixture f;
    tu_fx_init(&f, 60 + (uint64_t)(_i % 4) + 10 * (uint64_t)delta);
    const prob p = make(&f, T, nl, DK, DV, delta, 1);
    const int ns = nl * DK * DV;
    float *o = tu_zalloc(&f.ctx, sizeof(float) * T * DV), *S = tu_zalloc(&f.ctx, sizeof(float) * ns);
    double *o_ref = tu_zalloc(&f.ctx, sizeof(double) * T * DV);
    double *S_ref = tu_zalloc(&f.ctx, sizeof(double) * ns);
    ttt_layer L;
    layer_form(&L, presets[delta], nl, DK, DV, "chunkwise", C);
    reference(o_ref, S_ref, &p, V_NONE);
    for (int split = 0; split < 2; split++) {
        memcpy(S, p.S0, sizeof(float) * ns);
        run_part(&L, &p, 0, split ? 173 : T, o, S);
        if (split) run_part(&L, &p, 173, T, o, S);
        const double eo = rel_rms(o, o_ref, T * DV), es = rel_rms(S, S_ref, ns);
        printf("%-16s chunkwise C %2d levels %2d%s: o %.2e  S %.2e (bound %.0e)\n",
               presets[delta], C, nl, split ? " (split)" : "", eo, es, BOUND);
        ck_assert_msg(tu_ratio(eo, BOUND) && tu_ratio(es, BOUND), "%s C %d: o %.3g, S %.3g",
                      presets[delta], C, eo, es);
    }
    double *o_bad = tu_zalloc(&f.ctx, sizeof(double) * T * DV);
    double *S_bad = tu_zalloc(&f.ctx, sizeof(double) * ns);
    for (int variant = V_WRONG_LEVEL; variant <= (delta ? V_LEVEL0_ONLY : V_WRONG_LEVEL);
         variant++) {
        reference(o_bad, S_bad, &p, variant);
        const double w = fmax(rel_rms(o, o_bad, T * DV), rel_rms(S, S_bad, ns));
        ck_assert_msg(w > 100 * BOUND, "%s C %d: control %d unseen (%.3g)", presets[delta], C,
                      variant, w);
    }
    tu_fx_free(&f);
}
END_TEST

/* Equal queries on every level: the levels sum to the ordinary rule's state. */
START_TEST(equal_levels_are_the_ordinary_rule) {
    enum { T = 300, DK = 16, DV = 24, NL = 6 };
    static const char *const plain[] = {"mamba2", "gated_deltanet"};
    const int delta = _i;
    tu_fixture f;
    tu_fx_init(&f, 31);
    prob p = make(&f, T, NL, DK, DV, delta, 1);
    prob g = p;
    g.nl = 1;
    g.q = tu_zalloc(&f.ctx, sizeof(float) * T * DK);
    for (int t = 0; t < T; t++) /* one query per token, the same on every level */
        memcpy(g.q + (size_t)t * DK, tu_randn_buf(&f, DK, 1.0f), sizeof(float) * DK);
    for (int t = 0; t < T; t++)
        for (int l = 0; l < NL; l++)
            memcpy(p.q + ((size_t)t * NL + l) * DK, g.q + (size_t)t * DK, sizeof(float) * DK);
    memset(p.S0, 0, sizeof(float) * NL * DK * DV);
    g.S0 = tu_zalloc(&f.ctx, sizeof(float) * DK * DV);
    float *o = tu_zalloc(&f.ctx, sizeof(float) * T * DV), S[NL * DK * DV];
    float *og = tu_zalloc(&f.ctx, sizeof(float) * T * DV), Sg[DK * DV];
    ttt_layer L, G;
    layer_of(&L, presets[delta], NL, DK, DV);
    layer_of(&G, plain[delta], 1, DK, DV);
    run_layer(&L, &p, o, S);
    run_layer(&G, &g, og, Sg);
    double *od = tu_zalloc(&f.ctx, sizeof(double) * T * DV);
    for (int n = 0; n < T * DV; n++) od[n] = og[n];
    const double eo = rel_rms(o, od, T * DV);
    ck_assert_msg(tu_ratio(eo, 2 * BOUND), "%s: %.3g from %s", presets[delta], eo, plain[delta]);
    for (int i = 0; i < DK; i++) p.q[((size_t)(T / 2) * NL + 2) * DK + i] *= 1.01f;
    run_layer(&L, &p, o, S);
    ck_assert_msg(rel_rms(o, od, T * DV) > 10 * BOUND, "%s: control %.3g", presets[delta],
                  rel_rms(o, od, T * DV));
    tu_fx_free(&f);
}
END_TEST

/* ---- gradients ---- */

enum { GT = 13, GNL = 3, GDK = 4, GDV = 3 };

static double loss64(const prob *p, double *const x[N_IN], const double *Ro, const double *RS) {
    double o[GT * GDV], S[GNL * GDK * GDV], l = 0;
    reference64(o, S, p, x, V_NONE);
    for (int n = 0; n < GT * GDV; n++) l += Ro[n] * o[n];
    for (int n = 0; n < GNL * GDK * GDV; n++) l += RS[n] * S[n];
    return l;
}

static void fd_grads(ttt_ctx *ctx, const prob *p, const double *Ro, const double *RS,
                     double *g[N_IN]) {
    double *x[N_IN];
    to64(ctx, p, x);
    for (int i = 0; i < N_IN; i++)
        for (size_t n = 0; n < in_len(p, i); n++) {
            const double x0 = x[i][n], h = 1e-6 * fmax(1.0, fabs(x0));
            x[i][n] = x0 + h;
            const double lp = loss64(p, x, Ro, RS);
            x[i][n] = x0 - h;
            const double lm = loss64(p, x, Ro, RS);
            x[i][n] = x0;
            g[i][n] = (lp - lm) / (2 * h);
        }
}

static void tape_grads(const ttt_layer *L, const prob *p, const double *Ro, const double *RS,
                       float *g[N_IN]) {
    tu_tape_fixture f;
    tu_tape_fx_init(&f);
    ttt_ctx *ctx = &f.ctx;
    const int T = p->T;
    ttt_tensor in[N_IN] = {ttt_tensor_view2(p->q, T, p->nl * p->dk),
                           ttt_tensor_view2(p->k, T, p->dk), ttt_tensor_view2(p->v, T, p->dv),
                           ttt_tensor_view(p->eta, 1, (int[]){T}),
                           ttt_tensor_view(p->la, 1, (int[]){T}),
                           ttt_tensor_view2(p->S0, p->nl * p->dk, p->dv)};
    for (int i = 0; i < N_IN; i++) {
        memset(g[i], 0, in_len(p, i) * sizeof(float));
        ttt_tensor_set_param(&in[i], g[i]);
    }
    ttt_layer_state st;
    ttt_rng rng;
    ttt_rng_seed(&rng, 1);
    ttt_layer_state_init(ctx, L, &st, &rng);
    st.W[0] = &in[5];
    ttt_tensor *o = ttt_tensor_2d(ctx, T, p->dv);
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward(ctx, L, o, &st, &in[0], &in[1], &in[2], &in[3], &in[4],
                                    &err) == TTT_OK,
                  "%s", err.msg);
    float Rof[GT * GDV], RSf[GNL * GDK * GDV];
    for (int n = 0; n < T * p->dv; n++) Rof[n] = (float)Ro[n];
    for (int n = 0; n < GNL * GDK * GDV; n++) RSf[n] = (float)RS[n];
    ttt_tensor Rov = ttt_tensor_view2(Rof, T, p->dv);
    ttt_tensor RSv = ttt_tensor_view2(RSf, p->nl * p->dk, p->dv);
    ttt_tensor *loss = ttt_add(ctx, ttt_dot(ctx, o, ttt_tensor_copy(ctx, &Rov)),
                               ttt_dot(ctx, st.W[0], ttt_tensor_copy(ctx, &RSv)));
    ttt_backward(ctx, loss);
    tu_tape_fx_free(&f);
}

static double grad_err(const prob *p, float *got[N_IN], double *want[N_IN], int *worst) {
    double e = 0;
    for (int i = 0; i < N_IN; i++) {
        double num = 0, den = 0;
        for (size_t n = 0; n < in_len(p, i); n++) {
            if (!isfinite(want[i][n])) continue;
            num = fmax(num, fabs((double)got[i][n] - want[i][n]));
            den = fmax(den, fabs(want[i][n]));
        }
        const double r = den > 0 ? num / den : num;
        if (r > e) e = r, *worst = i;
    }
    return e;
}

START_TEST(gradients_match_float64_differences) {
    const int delta = _i;
    tu_fixture f;
    tu_fx_init(&f, 40 + (uint64_t)_i);
    prob p = make(&f, GT, GNL, GDK, GDV, delta, 0);
    p.la[GT / 2] = -INFINITY; /* a hard reset: no gradient reaches its gate or through it */
    double Ro[GT * GDV], RS[GNL * GDK * GDV];
    {
        float r[GT * GDV + GNL * GDK * GDV];
        ttt_rng_fill_normal(&f.rng, r, GT * GDV + GNL * GDK * GDV, 0.0f, 1.0f);
        for (int n = 0; n < GT * GDV; n++) Ro[n] = r[n];
        for (int n = 0; n < GNL * GDK * GDV; n++) RS[n] = r[GT * GDV + n];
    }
    double *fd[N_IN];
    float *got[N_IN];
    for (int i = 0; i < N_IN; i++) {
        fd[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(double));
        got[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(float));
    }
    ttt_layer L;
    layer_of(&L, presets[delta], GNL, GDK, GDV);
    L.chunk = 4; /* the backward recomputes from states saved every 4 tokens */
    tape_grads(&L, &p, Ro, RS, got);
    fd_grads(&f.ctx, &p, Ro, RS, fd);
    fd[4][GT / 2] = 0.0; /* d/d log α at α = 0 is 0; −inf ± h has no differences */
    const double n = GNL * (4.0 * GDK + 10) + GT;
    const double rtol = 6 * 0x1p-24 * sqrt(2 * n * GT);
    int worst = 0;
    const double e = grad_err(&p, got, fd, &worst);
    static const char *const names[N_IN] = {"q", "k", "v", "eta", "log_alpha", "S0"};
    printf("%-16s gradients: %.2e of max|fd| (%s; bound %.2e)\n", presets[delta], e,
           names[worst], rtol);
    ck_assert_msg(tu_ratio(e, rtol), "%s: %s off by %.3g (bound %.3g)", presets[delta],
                  names[worst], e, rtol);
    for (int i = 0; i < GDK; i++) p.k[2 * GDK + i] *= 1.1f;
    fd_grads(&f.ctx, &p, Ro, RS, fd);
    fd[4][GT / 2] = 0.0;
    const double w = grad_err(&p, got, fd, &worst);
    ck_assert_msg(w > 10 * rtol, "%s: a 10 %% larger key went unseen (%.3g)", presets[delta], w);
    tu_fx_free(&f);
}
END_TEST

/* The chunked backward of log-linear Gated DeltaNet (chunkwise_delta.c, form: chunkwise under a
 * tape): T = 42 tokens in chunks of 4 (the last one partial) at Λ = 5 levels (beyond
 * 2^{Λ−1} = 16 tokens, so the top level holds the older buckets), a hard reset, a zero initial state that wants no gradient (the
 * op's condition at position 0), in one call and split at token 16 (the second call starts at an
 * aligned position from the first call's state, a graph node: its gradient runs back through the
 * merge at 16 into the first call). Each call must have run the chunked op (its tape entry is
 * looked for). Gradients of q, k, v, η and log α against central differences of the float64
 * recurrence, with the bound of the recurrent form's test (above; n = Λ·(4d + 10) + T);
 * control: a 10 % larger key. */
enum { CT = 42, CNL = 5, CDK = 4, CDV = 3, CC = 4 }; /* 42: a partial last chunk */

static double loss64c(const prob *p, double *const x[N_IN], const double *Ro, const double *RS) {
    double o[CT * CDV], S[CNL * CDK * CDV], l = 0;
    reference64(o, S, p, x, V_NONE);
    for (int n = 0; n < CT * CDV; n++) l += Ro[n] * o[n];
    for (int n = 0; n < CNL * CDK * CDV; n++) l += RS[n] * S[n];
    return l;
}

static int tape_has(const ttt_tape *tape, const char *name) {
    int n = 0;
    for (const ttt_tape_entry *e = tape->last; e; e = e->prev)
        n += e->name && strcmp(e->name, name) == 0;
    return n;
}

START_TEST(chunkwise_gradients_match_float64_differences) {
    const int split = _i;
    tu_fixture f;
    tu_fx_init(&f, 70 + (uint64_t)_i);
    prob p = make(&f, CT, CNL, CDK, CDV, 1, 0);
    memset(p.S0, 0, in_len(&p, 5) * sizeof(float));
    p.la[CT / 2 + 1] = -INFINITY;
    double Ro[CT * CDV], RS[CNL * CDK * CDV];
    {
        float r[CT * CDV + CNL * CDK * CDV];
        ttt_rng_fill_normal(&f.rng, r, CT * CDV + CNL * CDK * CDV, 0.0f, 1.0f);
        for (int n = 0; n < CT * CDV; n++) Ro[n] = r[n];
        for (int n = 0; n < CNL * CDK * CDV; n++) RS[n] = r[CT * CDV + n];
    }
    ttt_layer L;
    layer_form(&L, "loglinear_gdn", CNL, CDK, CDV, "chunkwise", CC);
    /* the op's gradients through the tape */
    float *got[N_IN];
    for (int i = 0; i < N_IN; i++) got[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(float));
    {
        tu_tape_fixture tf;
        tu_tape_fx_init(&tf);
        ttt_ctx *ctx = &tf.ctx;
        ttt_tensor in[5] = {ttt_tensor_view2(p.q, CT, CNL * CDK), ttt_tensor_view2(p.k, CT, CDK),
                            ttt_tensor_view2(p.v, CT, CDV), ttt_tensor_view(p.eta, 1, (int[]){CT}),
                            ttt_tensor_view(p.la, 1, (int[]){CT})};
        for (int i = 0; i < 5; i++) ttt_tensor_set_param(&in[i], got[i]);
        ttt_layer_state st;
        ttt_rng rng;
        ttt_rng_seed(&rng, 1);
        ttt_layer_state_init(ctx, &L, &st, &rng);
        memset(st.W[0]->data, 0, st.W[0]->n * sizeof(float));
        const int cut[3] = {0, split ? 16 : CT, CT};
        ttt_tensor *parts[2] = {NULL, NULL};
        for (int s = 0; s < 1 + split; s++) {
            const int t0 = cut[s], n = cut[s + 1] - t0;
            ttt_tensor *q = ttt_slice_rows(ctx, &in[0], t0, t0 + n);
            ttt_tensor *k = ttt_slice_rows(ctx, &in[1], t0, t0 + n);
            ttt_tensor *v = ttt_slice_rows(ctx, &in[2], t0, t0 + n);
            ttt_tensor *eta = ttt_reshape(ctx, ttt_slice_rows(ctx, ttt_reshape(ctx, &in[3], 2,
                                                                             (int[]){CT, 1}),
                                                              t0, t0 + n),
                                          1, (int[]){n});
            ttt_tensor *la = ttt_reshape(ctx, ttt_slice_rows(ctx, ttt_reshape(ctx, &in[4], 2,
                                                                            (int[]){CT, 1}),
                                                             t0, t0 + n),
                                         1, (int[]){n});
            parts[s] = ttt_tensor_2d(ctx, n, CDV);
            st.pos = t0;
            ttt_error err = {0};
            ck_assert_msg(ttt_layer_forward(ctx, &L, parts[s], &st, q, k, v, eta, la, &err) ==
                              TTT_OK,
                          "%s", err.msg);
        }
        ck_assert_int_eq(tape_has(ctx->tape, "loglinear_delta_chunkwise"), 1 + split);
        float Rof[CT * CDV], RSf[CNL * CDK * CDV];
        for (int n = 0; n < CT * CDV; n++) Rof[n] = (float)Ro[n];
        for (int n = 0; n < CNL * CDK * CDV; n++) RSf[n] = (float)RS[n];
        ttt_tensor RSv = ttt_tensor_view2(RSf, CNL * CDK, CDV);
        ttt_tensor *loss = ttt_dot(ctx, st.W[0], ttt_tensor_copy(ctx, &RSv));
        for (int s = 0; s < 1 + split; s++) {
            ttt_tensor Rov = ttt_tensor_view2(Rof + (size_t)cut[s] * CDV, cut[s + 1] - cut[s], CDV);
            loss = ttt_add(ctx, loss, ttt_dot(ctx, parts[s], ttt_tensor_copy(ctx, &Rov)));
        }
        ttt_backward(ctx, loss);
        tu_tape_fx_free(&tf);
    }
    /* central differences of the float64 recurrence */
    double *fd[N_IN], *x[N_IN];
    to64(&f.ctx, &p, x);
    for (int i = 0; i < N_IN; i++) fd[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(double));
    for (int pass = 0; pass < 2; pass++) {
        if (pass) /* the control */
            for (int i = 0; i < CDK; i++) x[1][2 * CDK + i] *= 1.1;
        for (int i = 0; i < 5; i++)
            for (size_t n = 0; n < in_len(&p, i); n++) {
                const double x0 = x[i][n], h = 1e-6 * fmax(1.0, fabs(x0));
                if (!isfinite(x0)) { /* the reset: d/d log α at α = 0 is 0 */
                    fd[i][n] = 0.0;
                    continue;
                }
                x[i][n] = x0 + h;
                const double lp = loss64c(&p, x, Ro, RS);
                x[i][n] = x0 - h;
                const double lm = loss64c(&p, x, Ro, RS);
                x[i][n] = x0;
                fd[i][n] = (lp - lm) / (2 * h);
            }
        double e = 0;
        int worst = 0;
        for (int i = 0; i < 5; i++) {
            double num = 0, den = 0;
            for (size_t n = 0; n < in_len(&p, i); n++) {
                num = fmax(num, fabs((double)got[i][n] - fd[i][n]));
                den = fmax(den, fabs(fd[i][n]));
            }
            const double r = den > 0 ? num / den : num;
            if (r > e) e = r, worst = i;
        }
        const double nr = CNL * (4.0 * CDK + 10) + CT;
        const double rtol = 6 * 0x1p-24 * sqrt(2 * nr * CT);
        static const char *const names[5] = {"q", "k", "v", "eta", "log_alpha"};
        if (!pass) {
            printf("loglinear_gdn    chunkwise gradients%s: %.2e of max|fd| (%s; bound %.2e)\n",
                   split ? " (split)" : "", e, names[worst], rtol);
            ck_assert_msg(tu_ratio(e, rtol), "chunkwise%s: %s off by %.3g (bound %.3g)",
                          split ? " (split)" : "", names[worst], e, rtol);
        } else
            ck_assert_msg(e > 10 * rtol, "a 10 %% larger key went unseen (%.3g)", e);
    }
    tu_fx_free(&f);
}
END_TEST

/* ---- the backward forms against a float64 backward on hard inputs ---- */

/* The float64 backward of the recurrence (reference64, variant V_NONE; every state kept): the
 * gradients of L = Σ dO ⊙ o + Σ dS ⊙ S_T for q, k, v, η (= β) and log α into g[0 … 4]. */
static void backward64(double *g[5], const prob *p, double *const x[N_IN], const float *dO,
                       const float *dST) {
    const int T = p->T, dk = p->dk, dv = p->dv, nl = p->nl, kv = dk * dv;
    const size_t all = (size_t)nl * kv;
    double *Sm = malloc(sizeof(double) * (size_t)T * all); /* after the merge, before the step */
    double *Sp = malloc(sizeof(double) * (size_t)T * all); /* after the step */
    double *S = malloc(sizeof(double) * all), *dS = malloc(sizeof(double) * all);
    double e[64], de[64];
    ck_assert(Sm && Sp && S && dS && dv <= 64);
    const double *Q = x[0], *K = x[1], *V = x[2], *B = x[3], *LA = x[4];
    for (size_t n = 0; n < all; n++) S[n] = x[5][n];
    for (int t = 0; t < T; t++) {
        const int m = target(t, nl, V_NONE);
        for (int l = 0; l < m; l++)
            for (int n = 0; n < kv; n++) S[m * kv + n] += S[l * kv + n], S[l * kv + n] = 0;
        memcpy(Sm + (size_t)t * all, S, all * sizeof(double));
        const double a = exp(LA[t]);
        const double *k = K + (size_t)t * dk, *v = V + (size_t)t * dv;
        for (int l = 0; l < nl; l++) {
            double *Sl = S + l * kv;
            for (int n = 0; n < kv; n++) Sl[n] *= a;
            for (int c = 0; c < dv; c++) {
                double s = l ? 0.0 : v[c];
                for (int i = 0; i < dk; i++) s -= k[i] * Sl[i * dv + c];
                e[c] = s;
            }
            for (int i = 0; i < dk; i++)
                for (int c = 0; c < dv; c++) Sl[i * dv + c] += B[t] * k[i] * e[c];
        }
        memcpy(Sp + (size_t)t * all, S, all * sizeof(double));
    }
    for (int i = 0; i < 5; i++) memset(g[i], 0, in_len(p, i) * sizeof(double));
    for (size_t n = 0; n < all; n++) dS[n] = dST[n];
    for (int t = T - 1; t >= 0; t--) {
        const double *St = Sp + (size_t)t * all, *Sb = Sm + (size_t)t * all;
        const double a = exp(LA[t]);
        const double *k = K + (size_t)t * dk, *v = V + (size_t)t * dv;
        const float *dOt = dO + (size_t)t * dv;
        for (int r = 0; r < nl * dk; r++) {
            double s = 0;
            for (int c = 0; c < dv; c++) {
                s += dOt[c] * St[r * dv + c];
                dS[r * dv + c] += Q[(size_t)t * nl * dk + r] * dOt[c];
            }
            g[0][(size_t)t * nl * dk + r] = s;
        }
        for (int l = 0; l < nl; l++) {
            double *dSl = dS + l * kv;
            const double *Sl = Sb + l * kv; /* before the decay */
            for (int c = 0; c < dv; c++) {
                double s = l ? 0.0 : v[c];
                for (int i = 0; i < dk; i++) s -= k[i] * a * Sl[i * dv + c];
                e[c] = s;
                de[c] = 0;
                for (int i = 0; i < dk; i++) de[c] += B[t] * k[i] * dSl[i * dv + c];
            }
            for (int i = 0; i < dk; i++) {
                double sb = 0, sk = 0;
                for (int c = 0; c < dv; c++) {
                    sb += k[i] * dSl[i * dv + c] * e[c];
                    sk += B[t] * dSl[i * dv + c] * e[c] - de[c] * a * Sl[i * dv + c];
                }
                g[3][t] += sb;
                g[1][(size_t)t * dk + i] += sk;
            }
            if (!l)
                for (int c = 0; c < dv; c++) g[2][(size_t)t * dv + c] += de[c];
            double sa = 0;
            for (int i = 0; i < dk; i++)
                for (int c = 0; c < dv; c++) {
                    const double d = dSl[i * dv + c] - k[i] * de[c]; /* ∂L/∂(a S) */
                    sa += a * Sl[i * dv + c] * d;
                    dSl[i * dv + c] = a * d;
                }
            g[4][t] += sa;
        }
        const int m = target(t, nl, V_NONE);
        for (int l = 0; l < m; l++) memcpy(dS + l * kv, dS + m * kv, kv * sizeof(double));
    }
    free(Sm), free(Sp), free(S), free(dS);
}

/* The gradients of q, k, v, η, log α (got[0 … 4], zeroed first) of the layer L under a tape on
 * tokens [0, T) of p from a zero initial state that wants no gradient, in calls cut at the
 * positions cut[1 … n_calls − 1]; L = Σ dO ⊙ o + Σ dS ⊙ S_T. Returns the number of tape entries
 * named `name`. */
static int tape_grads_calls(const ttt_layer *L, const prob *p, const float *dO, const float *dST,
                            const int *cut, int n_calls, float *got[5], const char *name) {
    const int T = p->T, nl = p->nl, dk = p->dk, dv = p->dv;
    tu_tape_fixture tf;
    tu_tape_fx_init(&tf);
    ttt_ctx *ctx = &tf.ctx;
    ttt_tensor in[5] = {ttt_tensor_view2(p->q, T, nl * dk), ttt_tensor_view2(p->k, T, dk),
                        ttt_tensor_view2(p->v, T, dv), ttt_tensor_view2(p->eta, T, 1),
                        ttt_tensor_view2(p->la, T, 1)};
    for (int i = 0; i < 5; i++) {
        memset(got[i], 0, in_len(p, i) * sizeof(float));
        ttt_tensor_set_param(&in[i], got[i]);
    }
    ttt_layer_state st;
    ttt_rng rng;
    ttt_rng_seed(&rng, 1);
    ttt_layer_state_init(ctx, L, &st, &rng);
    memset(st.W[0]->data, 0, st.W[0]->n * sizeof(float));
    ttt_tensor dSv = ttt_tensor_view2((float *)dST, nl * dk, dv);
    ttt_tensor *loss = NULL;
    for (int s = 0; s < n_calls; s++) {
        const int t0 = cut[s], n = cut[s + 1] - t0;
        ttt_tensor *o = ttt_tensor_2d(ctx, n, dv);
        st.pos = t0;
        ttt_error err = {0};
        ck_assert_msg(ttt_layer_forward(ctx, L, o, &st, ttt_slice_rows(ctx, &in[0], t0, t0 + n),
                                        ttt_slice_rows(ctx, &in[1], t0, t0 + n),
                                        ttt_slice_rows(ctx, &in[2], t0, t0 + n),
                                        ttt_reshape(ctx, ttt_slice_rows(ctx, &in[3], t0, t0 + n),
                                                    1, (int[]){n}),
                                        ttt_reshape(ctx, ttt_slice_rows(ctx, &in[4], t0, t0 + n),
                                                    1, (int[]){n}),
                                        &err) == TTT_OK,
                      "%s", err.msg);
        ttt_tensor dOv = ttt_tensor_view2((float *)dO + (size_t)t0 * dv, n, dv);
        ttt_tensor *part = ttt_dot(ctx, o, ttt_tensor_copy(ctx, &dOv));
        loss = loss ? ttt_add(ctx, loss, part) : part;
    }
    loss = ttt_add(ctx, loss, ttt_dot(ctx, st.W[0], ttt_tensor_copy(ctx, &dSv)));
    const int found = tape_has(ctx->tape, name);
    ttt_backward(ctx, loss);
    tu_tape_fx_free(&tf);
    return found;
}

/* Relative RMS error of each of the five gradients against float64; the largest. */
static double grad_rel_rms(const prob *p, float *got[5], double *want[5], int *worst) {
    double e = 0;
    *worst = 0;
    for (int i = 0; i < 5; i++) {
        const double r = rel_rms(got[i], want[i], in_len(p, i));
        if (r > e) e = r, *worst = i;
    }
    return e;
}

typedef struct ll_hard {
    const char *name;
    double la_lo, la_hi; /* log α log-uniform between (equal: constant; 0: no gate); NAN: make's */
    double b_lo, b_hi;   /* β = η uniform */
    int T;
} ll_hard;

static const ll_hard ll_hard_cases[] = {
    {"beta in [0, 2], log a in [-2, -1e-4], resets", NAN, NAN, 0, 2, 2048},
    {"beta in [0, 2], no gate", 0, 0, 0, 2, 2048},
    {"beta in [0, 2], log a = -1e-6", -1e-6, -1e-6, 0, 2, 2048},
    {"beta in [0, 2], log a in [-10, -1e-6]", -10, -1e-6, 0, 2, 2048},
    {"beta = 2, log a = -1e-5 (reflection)", -1e-5, -1e-5, 2, 2, 512},
};

/* The gradients' bound, relative RMS per input: each gradient sums products of a forward state
 * (within the forward's 2e-6 of float64) and an adjoint that runs the transposed recurrence
 * through the same transitions (within 2e-6 as well), rounded in float32 over sums of at most
 * Λ·d_k = 160 terms in the read-out's dq (√160·ε ≈ 8e-7): 2e-6 + 2e-6 + 8e-7 < 5e-6. */
#define GRAD_BOUND 5e-6

/* Log-linear Gated DeltaNet's backward forms (the recurrent op, and the chunked op at C = 16
 * and 64) on hard inputs (unit keys, Λ = 10 levels: at T = 2048 the top level holds the older
 * buckets; a zero initial state) against the float64 backward above, itself held to central
 * differences by the tests above through the same recurrence; control: one token's β moved by
 * 0.1 at 3T/4 + 1 must move the float64 gradients farther than 10× the bound. */
START_TEST(backward_forms_match_float64_on_hard_inputs) {
    enum { NL = 10, DK = 16, DV = 12 };
    const ll_hard *hc = &ll_hard_cases[_i];
    const int T = hc->T;
    tu_fixture f;
    tu_fx_init(&f, 80 + (uint64_t)_i);
    prob p = make(&f, T, NL, DK, DV, 1, isnan(hc->la_lo));
    memset(p.S0, 0, in_len(&p, 5) * sizeof(float));
    float u;
    for (int t = 0; t < T; t++) {
        ttt_rng_fill_uniform(&f.rng, &u, 1, 0.0f, 1.0f);
        p.eta[t] = (float)(hc->b_lo + (hc->b_hi - hc->b_lo) * u);
        if (isnan(hc->la_lo)) continue;
        ttt_rng_fill_uniform(&f.rng, &u, 1, 0.0f, 1.0f);
        const double x = log(fabs(hc->la_lo)), y = hc->la_hi ? log(fabs(hc->la_hi)) : x;
        p.la[t] = hc->la_lo == 0 ? 0.0f : (float)-exp(x + (y - x) * u);
    }
    float *dO = tu_randn_buf(&f, (size_t)T * DV, 1.0f);
    float *dST = tu_randn_buf(&f, (size_t)NL * DK * DV, 1.0f);
    double *x[N_IN], *g64[5], *gpb[5];
    float *got[5];
    to64(&f.ctx, &p, x);
    for (int i = 0; i < 5; i++) {
        g64[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(double));
        gpb[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(double));
        got[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(float));
    }
    backward64(g64, &p, x, dO, dST);
    const int tb = 3 * T / 4 + 1;
    x[3][tb] += x[3][tb] > 1 ? -0.1 : 0.1;
    backward64(gpb, &p, x, dO, dST);
    static const char *const forms[] = {"recurrent", "chunkwise", "chunkwise"};
    static const char *const entries[] = {"loglinear_recurrent_fused", "loglinear_delta_chunkwise",
                                          "loglinear_delta_chunkwise"};
    static const int chunks[] = {16, 16, 64};
    static const char *const names[5] = {"q", "k", "v", "eta", "log_alpha"};
    const int cut[2] = {0, T};
    for (int fi = 0; fi < 3; fi++) {
        ttt_layer L;
        layer_form(&L, "loglinear_gdn", NL, DK, DV, forms[fi], chunks[fi]);
        ck_assert_int_eq(tape_grads_calls(&L, &p, dO, dST, cut, 1, got, entries[fi]), 1);
        int worst = 0;
        const double e = grad_rel_rms(&p, got, g64, &worst);
        int wc = 0;
        const double ctl = grad_rel_rms(&p, got, gpb, &wc);
        printf("loglinear_gdn backward %-9s C %2d  T %4d  %-44s %.2e (%s)  control %.2e\n",
               forms[fi], chunks[fi], T, hc->name, e, names[worst], ctl);
        TU_ASSERT_LE(e, GRAD_BOUND, "%s C %d, %s: d%s %.3g (bound %.0e)", forms[fi], chunks[fi],
                     hc->name, names[worst], e, GRAD_BOUND);
        ck_assert_msg(ctl > 10 * GRAD_BOUND, "%s C %d, %s: a moved beta went unseen (%.3g)",
                      forms[fi], chunks[fi], hc->name, ctl);
    }
    tu_fx_free(&f);
}
END_TEST

/* Tuples without a log-linear form are refused at the option, naming it. */
START_TEST(levels_are_refused_where_undefined) {
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string("layer: {preset: titans, levels: 4}\n", "<t>", &root, &err) ==
              TTT_OK);
    ttt_layer L;
    ck_assert(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L, &err) !=
              TTT_OK);
    ck_assert_msg(strstr(err.msg, "layer.levels") != NULL, "%s", err.msg);
    ttt_cfg_free(root);
}
END_TEST

static Suite *ll_suite(void) {
    Suite *s = suite_create("loglinear");
    TCase *tc = tcase_create("loglinear");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, recurrence_is_the_bucket_definition, 0, 4);
    tcase_add_loop_test(tc, form_matches_float64_with_resets, 0, 4);
    tcase_add_loop_test(tc, chunkwise_matches_float64_with_resets, 0, 8);
    tcase_add_loop_test(tc, equal_levels_are_the_ordinary_rule, 0, 2);
    tcase_add_loop_test(tc, gradients_match_float64_differences, 0, 2);
    tcase_add_loop_test(tc, chunkwise_gradients_match_float64_differences, 0, 2);
    tcase_add_loop_test(tc, backward_forms_match_float64_on_hard_inputs, 0,
                        (int)(sizeof ll_hard_cases / sizeof ll_hard_cases[0]));
    tcase_add_test(tc, levels_are_refused_where_undefined);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(ll_suite()); }
