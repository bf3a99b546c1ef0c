/* Gated DeltaProduct (docs/math.md §4.7; layers/forms/delta_rule/product.c): n_h delta steps per
 * token on n_h key/value pairs, the gate once per token,
 *     S_t = α_t S_{t−1};  S ← S + β_{t,j} k_{t,j}ᵀ (v_{t,j} − k_{t,j} S), j = 0 … n_h − 1;  o_t = q_t S_t,
 * through ttt_layer_forward (the preset deltaproduct with steps_per_token n_h), against a float64
 * recurrence written here:
 *   * both forms (recurrent, chunkwise) at n_h = 2 and 3, with hard resets (log α = −inf and
 *     −1e30), β ∈ [0, 2], a nonzero initial state and d_v = 40; each with two inputs it must
 *     reject: the gate applied after the token's steps instead of before, and the order of the
 *     pairs reversed (the Householder factors do not commute);
 *   * n_h = 1 is Gated DeltaNet bit for bit (every form); n_h = 2 with β = 0 on every second
 *     pair is Gated DeltaNet on the first pairs (control: one second pair written with β = 1e-2);
 *   * the gradients under a tape (recurrent: the hand-written backward; chunkwise: the delta
 *     rule's fused and composed backward on the interleaved sub-steps) against central finite
 *     differences of the float64 recurrence, for q, k, v, η, log α and the initial state
 *     (control: the same gradients against the differences of a problem whose third key is 1 %
 *     larger).
 *   * the batched runner on (B, n_h·T, H, d) arrays gives each sequence's own call bit for bit
 *     (control: a changed key moves its sequence only, from its token on).
 * tests/test_hard_inputs.c runs both forms on the hard inputs with every other form.
 *
 * Bounds.
 *   Forward: relative RMS error over the outputs and over the final state ≤ 2e-6, the bound of
 *   tests/test_hard_inputs.c: each output is a few float32 roundings (ε = 2^-24 ≈ 6e-8) per
 *   sub-step's sums over d_k = 16 terms, carried by non-expanding steps (unit keys, β ≤ 2,
 *   α ≤ 1), so the error does not grow with T; measured ≤ 3e-7 (printed). The controls move
 *   the result by O(1e-2 … 1), ≥ 100× the bound (asserted).
 *   Gradients: |got − fd| ≤ rtol·max|fd| per input, rtol = 6ε·√(2·n·T_s) (the walk of
 *   tests/test_form_grads.c for one float32 path against the exact result: n = 4·max(d_k, d_v) +
 *   T_s + 10 roundings per state entry per sub-step, forward and backward, over T_s = n_h·T
 *   sub-steps, c = 6), plus the float64 differences' own error (h = 1e-6: truncation ~1e-12,
 *   cancellation ~1e-10 of max|fd|, negligible). At T = 11, d = 4: 1.6e-5 (n_h = 2), 2.2e-5
 *   (n_h = 3); measured ≤ 8.4e-7 (printed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

#define BOUND 2e-6
#define MAXNH 3

/* ---- the float64 definition ---- */

typedef struct prob {
    int T, nh, dk, dv;
    float *q, *k, *v, *eta, *la, *S0; /* (T, dk), (nh T, dk), (nh T, dv), (nh T), (T), (dk, dv) */
} prob;

enum { SWAP_NONE, GATE_AFTER, SWAP_PAIRS };
enum { N_IN = 6 }; /* q, k, v, η, log α, S0 */

static size_t in_len(const prob *p, int i) {
    const size_t n[N_IN] = {(size_t)p->T * p->dk, (size_t)p->nh * p->T * p->dk,
                            (size_t)p->nh * p->T * p->dv, (size_t)p->nh * p->T, (size_t)p->T,
                            (size_t)p->dk * p->dv};
    return n[i];
}
static float *in_buf(const prob *p, int i) {
    float *b[N_IN] = {p->q, p->k, p->v, p->eta, p->la, p->S0};
    return b[i];
}

/* o (T, dv), S (dk, dv) from the float64 inputs x (in_buf's order); `variant` the perturbed
 * definitions the tests must reject. */
static void reference64(double *o, double *S, const prob *p, double *const x[N_IN],
                        int variant) {
    const int dk = p->dk, dv = p->dv, nh = p->nh;
    const double *Q = x[0], *K = x[1], *V = x[2], *B = x[3], *LA = x[4];
    for (int n = 0; n < dk * dv; n++) S[n] = x[5][n];
    double e[64];
    for (int t = 0; t < p->T; t++) {
        const double a = exp(LA[t]);
        if (variant != GATE_AFTER)
            for (int n = 0; n < dk * dv; n++) S[n] *= a;
        for (int jj = 0; jj < nh; jj++) {
            const int j = variant == SWAP_PAIRS ? nh - 1 - jj : jj;
            const size_t r = (size_t)t * nh + j;
            const double *k = K + r * dk, *v = V + r * dv;
            for (int c = 0; c < dv; c++) {
                double s = v[c];
                for (int i = 0; i < dk; i++) s -= k[i] * S[i * dv + c];
                e[c] = s;
            }
            for (int i = 0; i < dk; i++)
                for (int c = 0; c < dv; c++) S[i * dv + c] += B[r] * k[i] * e[c];
        }
        if (variant == GATE_AFTER)
            for (int n = 0; n < dk * dv; n++) S[n] *= a;
        for (int c = 0; c < dv; c++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += Q[(size_t)t * dk + i] * S[i * dv + c];
            o[(size_t)t * dv + c] = s;
        }
    }
}

/* The float inputs of p in double (arena allocations of ctx). */
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

static void unit_rows(float *x, int rows, int d) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)x[r * d + i] * x[r * d + i];
        for (int i = 0; i < d; i++) x[r * d + i] = (float)(x[r * d + i] / sqrt(s));
    }
}

/* Unit keys, β ∈ [0, 2], log α ∈ [−2, −1e-4] with hard resets on 3 % of the tokens. */
static prob make(tu_fixture *f, int T, int nh, int dk, int dv, int resets) {
    prob p = {.T = T, .nh = nh, .dk = dk, .dv = dv};
    p.q = tu_randn_buf(f, (size_t)T * dk, 1.0f);
    p.k = tu_randn_buf(f, (size_t)nh * T * dk, 1.0f);
    p.v = tu_randn_buf(f, (size_t)nh * T * dv, 1.0f);
    p.S0 = tu_randn_buf(f, (size_t)dk * dv, 0.25f);
    unit_rows(p.k, nh * T, dk);
    p.eta = tu_zalloc(&f->ctx, (size_t)nh * T * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, p.eta, (size_t)nh * T, 0.0f, 2.0f);
    p.la = tu_zalloc(&f->ctx, (size_t)T * sizeof(float));
    float *u = tu_zalloc(&f->ctx, (size_t)T * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, u, (size_t)T, 0.0f, 1.0f);
    for (int t = 0; t < T; t++)
        p.la[t] = resets && u[t] < 0.03f ? (t % 2 ? -INFINITY : -1e30f)
                                         : (float)(-2.0 * pow(u[t], 4.0) - 1e-4);
    return p;
}

static void layer_of(ttt_layer *L, const char *form, int nh, int dk, int dv,
                     const char *preset) {
    char text[256];
    snprintf(text, sizeof text, "layer: {preset: %s, form: %s, steps_per_token: %d}\n", preset,
             form, nh);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), dk, dv, L, &err) ==
                      TTT_OK,
                  "%s: %s", text, err.msg);
    ttt_cfg_free(root);
}

/* The layer on p without a tape: o (T, dv) and the final state S. */
static void run_layer(const ttt_layer *L, const prob *p, float *o, float *S) {
    tu_fixture f;
    tu_fx_init(&f, 1);
    const int T = p->T, nh = p->nh;
    ttt_tensor q = ttt_tensor_view2(p->q, T, p->dk), k = ttt_tensor_view2(p->k, nh * T, p->dk);
    ttt_tensor v = ttt_tensor_view2(p->v, nh * T, p->dv);
    ttt_tensor eta = ttt_tensor_view(p->eta, 1, (int[]){nh * T});
    ttt_tensor la = ttt_tensor_view(p->la, 1, (int[]){T});
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, L, &st, &f.rng);
    memcpy(st.W[0]->data, p->S0, sizeof(float) * p->dk * p->dv);
    ttt_tensor ot = ttt_tensor_view2(o, T, p->dv);
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward(&f.ctx, L, &ot, &st, &q, &k, &v, &eta, &la, &err) == TTT_OK,
                  "%s", err.msg);
    memcpy(S, st.W[0]->data, sizeof(float) * p->dk * p->dv);
    tu_fx_free(&f);
}

static const char *const forms[] = {"recurrent", "chunkwise"};

START_TEST(forms_match_float64_with_resets) {
    enum { T = 500, DK = 16, DV = 40 };
    const int nh = 2 + _i / 2; /* loop: (n_h 2, 3) × (recurrent, chunkwise) */
    const char *form = forms[_i % 2];
    tu_fixture f;
    tu_fx_init(&f, 20 + (uint64_t)_i);
    const prob p = make(&f, T, nh, DK, DV, 1);
    float *o = tu_zalloc(&f.ctx, sizeof(float) * T * DV), S[DK * DV];
    double *o_ref = tu_zalloc(&f.ctx, sizeof(double) * T * DV), S_ref[DK * DV];
    ttt_layer L;
    layer_of(&L, form, nh, DK, DV, "deltaproduct");
    run_layer(&L, &p, o, S);
    reference(o_ref, S_ref, &p, SWAP_NONE);
    const double eo = rel_rms(o, o_ref, T * DV), es = rel_rms(S, S_ref, DK * DV);
    printf("deltaproduct %-9s n_h %d: o %.2e  S %.2e (bound %.0e)\n", form, nh, eo, es, BOUND);
    ck_assert_msg(tu_ratio(eo, BOUND) && tu_ratio(es, BOUND), "%s n_h %d: o %.3g, S %.3g", form,
                  nh, eo, es);
    for (int variant = GATE_AFTER; variant <= SWAP_PAIRS; variant++) {
        reference(o_ref, S_ref, &p, variant);
        const double w = rel_rms(o, o_ref, T * DV);
        ck_assert_msg(w > 100 * BOUND, "%s n_h %d: control %d unseen (%.3g)", form, nh, variant,
                      w);
    }
    tu_fx_free(&f);
}
END_TEST

START_TEST(one_step_per_token_is_gated_deltanet) {
    enum { T = 300, DK = 16, DV = 40 };
    static const char *const all[] = {"auto", "recurrent", "chunkwise", "parallel", "generic"};
    tu_fixture f;
    tu_fx_init(&f, 31);
    const prob p = make(&f, T, 1, DK, DV, 1);
    float *o1 = tu_zalloc(&f.ctx, sizeof(float) * T * DV), S1[DK * DV];
    float *o2 = tu_zalloc(&f.ctx, sizeof(float) * T * DV), S2[DK * DV];
    for (int i = 0; i < 5; i++) {
        ttt_layer A, B;
        layer_of(&A, all[i], 1, DK, DV, "deltaproduct");
        layer_of(&B, all[i], 1, DK, DV, "gated_deltanet");
        run_layer(&A, &p, o1, S1);
        run_layer(&B, &p, o2, S2);
        ck_assert_msg(memcmp(o1, o2, sizeof(float) * T * DV) == 0 && memcmp(S1, S2, sizeof S1) == 0,
                      "form %s: steps_per_token 1 is not gated_deltanet's bits", all[i]);
    }
    tu_fx_free(&f);
}
END_TEST

START_TEST(a_second_pair_with_zero_beta_is_gated_deltanet) {
    enum { T = 300, DK = 16, DV = 40 };
    const char *form = forms[_i];
    tu_fixture f;
    tu_fx_init(&f, 32);
    prob p = make(&f, T, 2, DK, DV, 1);
    for (int t = 0; t < T; t++) p.eta[2 * t + 1] = 0.0f;
    /* the first pairs alone, one step per token */
    prob g = p;
    g.nh = 1;
    g.k = tu_zalloc(&f.ctx, sizeof(float) * T * DK);
    g.v = tu_zalloc(&f.ctx, sizeof(float) * T * DV);
    g.eta = tu_zalloc(&f.ctx, sizeof(float) * T);
    for (int t = 0; t < T; t++) {
        memcpy(g.k + t * DK, p.k + 2 * t * DK, sizeof(float) * DK);
        memcpy(g.v + t * DV, p.v + 2 * t * DV, sizeof(float) * DV);
        g.eta[t] = p.eta[2 * t];
    }
    float *o = tu_zalloc(&f.ctx, sizeof(float) * T * DV), S[DK * DV];
    float *og = tu_zalloc(&f.ctx, sizeof(float) * T * DV), Sg[DK * DV];
    ttt_layer L, G;
    layer_of(&L, form, 2, DK, DV, "deltaproduct");
    layer_of(&G, form, 1, DK, DV, "gated_deltanet");
    run_layer(&L, &p, o, S);
    run_layer(&G, &g, og, Sg);
    /* two float32 paths, each within BOUND of the same float64 recurrence */
    double *od = tu_zalloc(&f.ctx, sizeof(double) * T * DV), Sd[DK * DV];
    for (int n = 0; n < T * DV; n++) od[n] = og[n];
    for (int n = 0; n < DK * DV; n++) Sd[n] = Sg[n];
    const double eo = rel_rms(o, od, T * DV), es = rel_rms(S, Sd, DK * DV);
    ck_assert_msg(tu_ratio(eo, 2 * BOUND) && tu_ratio(es, 2 * BOUND), "%s: o %.3g, S %.3g", form,
                  eo, es);
    p.eta[2 * (T / 2) + 1] = 1e-2f; /* one second pair written: no longer the one-step rule */
    run_layer(&L, &p, o, S);
    ck_assert_msg(rel_rms(o, od, T * DV) > 100 * BOUND, "%s: %.3g", form,
                  rel_rms(o, od, T * DV));
    tu_fx_free(&f);
}
END_TEST

/* ---- gradients ---- */

enum { GT = 11, GDK = 4, GDV = 3 };

static double loss64(const prob *p, double *const x[N_IN], const double *Ro, const double *RS) {
    double o[GT * GDV], S[GDK * GDV], l = 0;
    reference64(o, S, p, x, SWAP_NONE);
    for (int n = 0; n < GT * GDV; n++) l += Ro[n] * o[n];
    for (int n = 0; n < GDK * GDV; n++) l += RS[n] * S[n];
    return l;
}

/* Central differences of the float64 loss in every input element, h = 1e-6·max(1, |x|), taken
 * in double. */
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

/* The layer under a tape: gradients of L = Σ Ro ⊙ o + Σ RS ⊙ S_T into g. */
static void tape_grads(const ttt_layer *L, const prob *p, const double *Ro, const double *RS,
                       int fused, float *g[N_IN]) {
    tu_tape_fixture f;
    tu_tape_fx_init(&f);
    ttt_ctx *ctx = &f.ctx;
    const int T = p->T, nh = p->nh;
    ttt_tensor in[N_IN] = {ttt_tensor_view2(p->q, T, p->dk), ttt_tensor_view2(p->k, nh * T, p->dk),
                           ttt_tensor_view2(p->v, nh * T, p->dv),
                           ttt_tensor_view(p->eta, 1, (int[]){nh * T}),
                           ttt_tensor_view(p->la, 1, (int[]){T}),
                           ttt_tensor_view2(p->S0, p->dk, p->dv)};
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
    ttt_status s;
    if (fused) {
        s = ttt_layer_forward(ctx, L, o, &st, &in[0], &in[1], &in[2], &in[3], &in[4], &err);
    } else { /* the composed path: the entry's forward_diff with fused = 0 */
        const ttt_form_inputs fi = {.T = T, .eta = 1, .gate = TTT_FORM_GATE_TOKEN, .tape = 1};
        const ttt_form_entry *e = ttt_form_choose(L, &fi, &err);
        ck_assert_ptr_nonnull(e);
        const ttt_form_args a = {.q = &in[0], .k = &in[1], .v = &in[2], .eta = &in[3],
                                 .beta = ttt_scale(ctx, &in[3], L->lr), .log_alpha = &in[4],
                                 .fused = 0};
        s = e->forward_diff(ctx, L, o, &st, &a, &err);
    }
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    float Rof[GT * GDV], RSf[GDK * GDV];
    for (int n = 0; n < T * p->dv; n++) Rof[n] = (float)Ro[n];
    for (int n = 0; n < p->dk * p->dv; n++) RSf[n] = (float)RS[n];
    ttt_tensor Rov = ttt_tensor_view2(Rof, T, p->dv), RSv = ttt_tensor_view2(RSf, p->dk, p->dv);
    ttt_tensor *loss = ttt_add(ctx, ttt_dot(ctx, o, ttt_tensor_copy(ctx, &Rov)),
                               ttt_dot(ctx, st.W[0], ttt_tensor_copy(ctx, &RSv)));
    ttt_backward(ctx, loss);
    tu_tape_fx_free(&f);
}

/* max over inputs of max|got − want| / max|want|, and the worst input's name */
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
    /* loop: (n_h 2, 3) × (recurrent fused, chunkwise fused, chunkwise composed) */
    const int nh = 2 + _i / 3, path = _i % 3;
    const char *form = path == 0 ? "recurrent" : "chunkwise";
    tu_fixture f;
    tu_fx_init(&f, 40 + (uint64_t)_i);
    prob p = make(&f, GT, nh, GDK, GDV, 0);
    p.la[GT / 2] = -INFINITY; /* a hard reset: no gradient reaches its gate or through it */
    double Ro[GT * GDV], RS[GDK * GDV];
    {
        float r[GT * GDV + GDK * GDV];
        ttt_rng_fill_normal(&f.rng, r, GT * GDV + GDK * GDV, 0.0f, 1.0f);
        for (int n = 0; n < GT * GDV; n++) Ro[n] = r[n];
        for (int n = 0; n < GDK * GDV; n++) RS[n] = r[GT * GDV + n];
    }
    double *fd[N_IN];
    float *got[N_IN];
    for (int i = 0; i < N_IN; i++) {
        fd[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(double));
        got[i] = tu_zalloc(&f.ctx, in_len(&p, i) * sizeof(float));
    }
    ttt_layer L;
    layer_of(&L, form, nh, GDK, GDV, "deltaproduct");
    L.chunk = 4; /* chunks of 4 tokens (recurrent: saved states) or sub-steps (chunkwise) */
    tape_grads(&L, &p, Ro, RS, path != 2, got);
    /* the reset's gate: d/d log α at α = 0 is 0 on both sides; the differences of −inf ± h are
     * not defined, so that one entry is compared with 0 */
    fd_grads(&f.ctx, &p, Ro, RS, fd);
    fd[4][GT / 2] = 0.0;
    const double Ts = (double)nh * GT, n = 4.0 * GDK + Ts + 10;
    const double rtol = 6 * 0x1p-24 * sqrt(2 * n * Ts);
    int worst = 0;
    const double e = grad_err(&p, got, fd, &worst);
    static const char *const names[N_IN] = {"q", "k", "v", "eta", "log_alpha", "S0"};
    printf("deltaproduct gradients %-9s %s n_h %d: %.2e of max|fd| (%s; bound %.2e)\n", form,
           path == 2 ? "composed" : "fused   ", nh, e, names[worst], rtol);
    ck_assert_msg(tu_ratio(e, rtol), "%s path %d n_h %d: %s off by %.3g (bound %.3g)", form, path,
                  nh, names[worst], e, rtol);
    /* control: the differences of a problem whose third key is 1 % larger */
    for (int i = 0; i < GDK; i++) p.k[2 * GDK + i] *= 1.01f;
    fd_grads(&f.ctx, &p, Ro, RS, fd);
    fd[4][GT / 2] = 0.0;
    const double w = grad_err(&p, got, fd, &worst);
    ck_assert_msg(w > 10 * rtol, "%s path %d: a 1 %% larger key went unseen (%.3g)", form, path,
                  w);
    tu_fx_free(&f);
}
END_TEST

/* The batched runner (ttt_layer_forward_batch, layers/batch.c) on (B, n_h·T, H, d) arrays gives
 * each sequence's ttt_layer_forward bits; a key changed in one sequence moves that sequence
 * only. */
START_TEST(batched_calls_equal_one_call_per_sequence) {
    enum { B = 2, H = 3, T = 37, NH = 2, DK = 8, DV = 5 };
    tu_fixture f;
    tu_fx_init(&f, 50);
    ttt_layer L;
    layer_of(&L, "auto", NH, DK, DV, "deltaproduct");
    prob seq[B * H];
    static float q[B * T * H * DK], k[B * NH * T * H * DK], v[B * NH * T * H * DV],
        eta[B * NH * T * H], la[B * T * H], S0[B * H * DK * DV], o[B * T * H * DV],
        S1[B * H * DK * DV];
    for (int s = 0; s < B * H; s++) {
        const int b = s / H, h = s % H;
        seq[s] = make(&f, T, NH, DK, DV, 1);
        for (int t = 0; t < T; t++) {
            memcpy(q + ((size_t)(b * T + t) * H + h) * DK, seq[s].q + t * DK, DK * sizeof(float));
            la[(b * T + t) * H + h] = seq[s].la[t];
        }
        for (int r = 0; r < NH * T; r++) {
            memcpy(k + ((size_t)(b * NH * T + r) * H + h) * DK, seq[s].k + r * DK,
                   DK * sizeof(float));
            memcpy(v + ((size_t)(b * NH * T + r) * H + h) * DV, seq[s].v + r * DV,
                   DV * sizeof(float));
            eta[(b * NH * T + r) * H + h] = seq[s].eta[r];
        }
        memcpy(S0 + (size_t)s * DK * DV, seq[s].S0, DK * DV * sizeof(float));
    }
    const float *sin[1] = {S0};
    float *sout[1] = {S1};
    const ttt_layer_io io = {.B = B, .T = T, .H = H, .o = o, .q = q, .k = k, .v = v, .eta = eta,
                             .log_alpha = la, .state_in = sin, .state_out = sout};
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward_batch(&L, &io, 1, &err) == TTT_OK, "%s", err.msg);
    float o1[T * DV], s1[DK * DV];
    for (int s = 0; s < B * H; s++) {
        const int b = s / H, h = s % H;
        run_layer(&L, &seq[s], o1, s1);
        for (int t = 0; t < T; t++)
            ck_assert_msg(!memcmp(o + ((size_t)(b * T + t) * H + h) * DV, o1 + t * DV,
                                  DV * sizeof(float)),
                          "sequence %d, token %d", s, t);
        ck_assert(!memcmp(S1 + (size_t)s * DK * DV, s1, sizeof s1));
    }
    /* the second pair of token 20 of sequence (1, 2) changed: only that sequence moves */
    static float o2[B * T * H * DV];
    k[((size_t)(1 * NH * T + 2 * 20 + 1) * H + 2) * DK] += 0.5f;
    const ttt_layer_io io2 = {.B = B, .T = T, .H = H, .o = o2, .q = q, .k = k, .v = v,
                              .eta = eta, .log_alpha = la, .state_in = sin};
    ck_assert_msg(ttt_layer_forward_batch(&L, &io2, 1, &err) == TTT_OK, "%s", err.msg);
    for (int s = 0; s < B * H; s++)
        for (int t = 0; t < T; t++) {
            const size_t at = ((size_t)((s / H) * T + t) * H + s % H) * DV;
            const int same = !memcmp(o + at, o2 + at, DV * sizeof(float));
            ck_assert_msg(same == (s != 5 || t < 20), "sequence %d, token %d", s, t);
        }
    tu_fx_free(&f);
}
END_TEST

START_TEST(wrong_shapes_and_tuples_are_refused) {
    tu_fixture f;
    tu_fx_init(&f, 5);
    ttt_layer L;
    layer_of(&L, "auto", 2, 4, 3, "deltaproduct");
    ttt_tensor *q = tu_randn(&f, 5, 4, 1.0f), *k = tu_randn(&f, 5, 4, 1.0f);
    ttt_tensor *v = tu_randn(&f, 5, 3, 1.0f), *o = ttt_tensor_2d(&f.ctx, 5, 3);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
    ttt_error err = {0};
    /* k with one row per token where two are expected */
    ck_assert_int_eq(ttt_layer_forward(&f.ctx, &L, o, &st, q, k, v, NULL, NULL, &err),
                     TTT_ERR_SHAPE);
    ck_assert_msg(strstr(err.msg, "steps_per_token = 2"), "%s", err.msg);
    /* steps per token for a tuple that is not the delta rule */
    ttt_cfg_node *root = NULL;
    ck_assert(ttt_cfg_load_string("layer: {preset: gla, steps_per_token: 2}\n", "s.yaml", &root,
                                  &err) == TTT_OK);
    ck_assert_int_eq(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 4, 3, &L, &err),
                     TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "s.yaml:1:") && strstr(err.msg, "layer.steps_per_token"), "%s",
                  err.msg);
    ttt_cfg_free(root);
    /* the delta rule's own forms take one step per token */
    ck_assert(ttt_cfg_load_string("layer: {preset: deltaproduct, form: parallel}\n", "g.yaml",
                                  &root, &err) == TTT_OK);
    ck_assert_int_eq(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 4, 3, &L, &err),
                     TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "one delta step per token"), "%s", err.msg);
    ttt_cfg_free(root);
    tu_fx_free(&f);
}
END_TEST

static Suite *dp_suite(void) {
    Suite *s = suite_create("deltaproduct");
    TCase *tc = tcase_create("deltaproduct");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, forms_match_float64_with_resets, 0, 4);
    tcase_add_test(tc, one_step_per_token_is_gated_deltanet);
    tcase_add_loop_test(tc, a_second_pair_with_zero_beta_is_gated_deltanet, 0, 2);
    tcase_add_loop_test(tc, gradients_match_float64_differences, 0, 6);
    tcase_add_test(tc, batched_calls_equal_one_call_per_sequence);
    tcase_add_test(tc, wrong_shapes_and_tuples_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(dp_suite()); }
