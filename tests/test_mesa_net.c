/* MesaNet (docs/math.md §3.11; layers/forms/mesa_net/forms.c, optim/mesa.c) against the float64
 * layer of tests/mesa_ref.h, every form at layer.chunk = 5 (the chunkwise form's chunk and the
 * backward's stretch of recomputed states).
 *
 * Inputs: keys of norm in [0.5, 2], q, v ~ N(0, 1), η ∈ [0.1, 1), log γ ∈ [−0.5, −1e-3), λ = 0.5
 * unless said; d_k = 8, d_v = 6.
 *
 * Tolerance of an exact solve (recurrent form, generic driver), per token t and derived from the
 * float32 evaluation: H_t and G_t are float32 sums whose entries carry a walk of roundings,
 * ≤ c·ε·√w_t relative to their scale, w_t = 1 + γ_t² w_{t−1} ≤ t + 1 (each step adds one
 * rounding, the gates scale the earlier ones; tests/mesa_ref.h); a relative
 * change δ of A_t = H_t + λI moves x_t = A_t⁻¹q_t by at most κ_t·δ relative (κ_t the float64
 * condition number of A_t in the 1-norm, an upper bound of the 2-norm one); the solve itself is
 * in double and the read-out rounds once. So
 *     |o_t − o*_t|_∞ ≤ c·ε·(1 + κ_t·√w_t)·‖x*_t‖₁·max|G*_t|,   ε = 2^-24, c = 3
 * (‖x‖₁ max|G| bounds every |o_tj| before cancellation; c = 3: the walk's 3σ).
 * The cg form adds CG's own error, the classical bound for k steps from 0,
 *     ‖x_k − x*‖₂ ≤ 2√κ ρ^k ‖x*‖₂,   ρ = (√κ − 1)/(√κ + 1),
 * (the A-norm bound 2ρ^k‖x*‖_A moved to the 2-norm), on o through ‖G_t‖_F.
 * Every comparison has a perturbed input it must reject: the float64 layer with one token's β
 * moved by 0.05, and for CG at k < d_k the exact solve. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "internal.h"
#include "mesa_ref.h"
#include "testutil.h"

#define DK 8
#define DV 6
#define EPS 0x1p-24
#define C_WALK 3.0

typedef struct inputs {
    int T;
    float *q, *k, *v, *eta, *la;
} inputs;

static inputs make_inputs(tu_fixture *f, int T, int gates) {
    inputs in = {.T = T};
    in.q = tu_randn_buf(f, (size_t)T * DK, 1.0f);
    in.k = tu_randn_buf(f, (size_t)T * DK, 1.0f);
    in.v = tu_randn_buf(f, (size_t)T * DV, 1.0f);
    in.eta = tu_zalloc(&f->ctx, sizeof(float) * (size_t)T);
    ttt_rng_fill_uniform(&f->rng, in.eta, T, 0.1f, 1.0f);
    for (int t = 0; t < T; t++) { /* key norms in [0.5, 2] */
        float n2 = 0, want;
        for (int i = 0; i < DK; i++) n2 += in.k[(size_t)t * DK + i] * in.k[(size_t)t * DK + i];
        ttt_rng_fill_uniform(&f->rng, &want, 1, 0.5f, 2.0f);
        for (int i = 0; i < DK; i++) in.k[(size_t)t * DK + i] *= want / sqrtf(n2);
    }
    if (gates) {
        in.la = tu_zalloc(&f->ctx, sizeof(float) * (size_t)T);
        ttt_rng_fill_uniform(&f->rng, in.la, T, -0.5f, -1e-3f);
    }
    return in;
}

static void build_opt(ttt_layer *L, const char *optimizer, const char *form) {
    char text[256];
    snprintf(text, sizeof text,
             "layer: {model: linear, loss: squared, optimizer: %s, form: %s, chunk: 5}\n",
             optimizer, form);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), DK, DV, L, &err) ==
                      TTT_OK,
                  "%s", err.msg);
    ttt_cfg_free(root);
}

static void build_start(ttt_layer *L, double lam, int cg, int jacobi, const char *form) {
    char opt[160];
    snprintf(opt, sizeof opt, "{name: mesa, lambda: %g, cg_steps: %d, cg_start: %s}", lam, cg,
             jacobi ? "jacobi" : "zero");
    build_opt(L, opt, form);
}

static void build(ttt_layer *L, double lam, int cg, const char *form) {
    build_start(L, lam, cg, 0, form);
}

static ttt_tensor *tensor_of(ttt_ctx *c, const float *x, int r, int cols) {
    ttt_tensor *t = cols ? ttt_tensor_2d(c, r, cols) : ttt_tensor_1d(c, r);
    memcpy(t->data, x, sizeof(float) * t->n);
    return t;
}

/* The layer's form (by L->form: recurrent, cg or generic) on `in` from the zero state: o
 * (T, DV), the final H, G, W copied out. */
static void run_form(const ttt_layer *L, const inputs *in, float *o, float *H, float *G,
                     float *W) {
    tu_fixture f;
    tu_fx_init(&f, 1);
    const int T = in->T;
    const ttt_form_inputs fi = {.T = T, .eta = 1,
                                .gate = in->la ? TTT_FORM_GATE_TOKEN : TTT_FORM_GATE_NONE};
    ttt_error err = {0};
    const ttt_form_entry *e = ttt_form_choose(L, &fi, &err);
    ck_assert_msg(e, "%s", err.msg);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, L, &st, &f.rng);
    ttt_tensor_fill(st.W[0], 0.0f); /* the ridge's prior (rls reads it; mesa solves afresh) */
    ttt_tensor *ot = ttt_tensor_2d(&f.ctx, T, DV);
    const ttt_form_args a = {.q = tensor_of(&f.ctx, in->q, T, DK),
                             .k = tensor_of(&f.ctx, in->k, T, DK),
                             .v = tensor_of(&f.ctx, in->v, T, DV),
                             .eta = tensor_of(&f.ctx, in->eta, T, 0),
                             .log_alpha = in->la ? tensor_of(&f.ctx, in->la, T, 0) : NULL,
                             .fused = 1};
    ck_assert_msg(e->forward(&f.ctx, L, ot, &st, &a, &err) == TTT_OK, "%s", err.msg);
    memcpy(o, ot->data, sizeof(float) * (size_t)T * DV);
    if (H) memcpy(H, st.opt[0][0]->data, sizeof(float) * DK * DK);
    if (G) memcpy(G, st.opt[0][1]->data, sizeof(float) * DK * DV);
    memcpy(W, st.W[0]->data, sizeof(float) * DK * DV);
    tu_fx_free(&f);
}

typedef struct truth {
    double *o, *x, *kappa, *G_all, *walk; /* (T, DV), (T, DK), (T), (T, DK·DV), (T) */
    double H[DK * DK], G[DK * DV], W[DK * DV];
} truth;

/* The float64 layer on `in` (β = η, θ = 1), with G_t kept per token for the bounds; eta_at and
 * eta_to move one token's η (the perturbed input), eta_at < 0 for none. */
static truth make_truth(const inputs *in, double lam, int cg, int eta_at, float eta_to) {
    const int T = in->T;
    truth r = {.o = calloc((size_t)T * DV, sizeof(double)),
               .x = calloc((size_t)T * DK, sizeof(double)),
               .kappa = calloc((size_t)T, sizeof(double)),
               .G_all = calloc((size_t)T * DK * DV, sizeof(double)),
               .walk = calloc((size_t)T, sizeof(double))};
    ck_assert(r.o && r.x && r.kappa && r.G_all && r.walk);
    float *eta = malloc(sizeof(float) * (size_t)T);
    memcpy(eta, in->eta, sizeof(float) * (size_t)T);
    if (eta_at >= 0) eta[eta_at] = eta_to;
    ck_assert(mesa_ref(in->q, in->k, in->v, eta, in->la, T, DK, DV, lam, cg, r.H, r.G, r.o, r.W,
                       r.kappa, r.x, r.G_all, r.walk));
    free(eta);
    return r;
}

static void truth_free(truth *r) {
    free(r->o), free(r->x), free(r->kappa), free(r->G_all), free(r->walk);
}

/* The largest ratio over tokens of |o_t − o*_t|_∞ to the bound of the header, for CG steps k
 * (0: an exact solve, no CG term); got (T, DV) float, want the float64 layer it is measured
 * against, ex the exact float64 layer whose κ_t, x*_t, G_t give the bound. */
static double worst_ratio(const float *got, const double *want, const truth *ex, int T, int k) {
    return mesa_ref_ratio(got, want, ex->kappa, ex->x, ex->G_all, ex->walk, T, DK, DV, k);
}

static double max_rel(const float *got, const double *want, int n) {
    double e = 0, m = 0;
    for (int i = 0; i < n; i++) e = fmax(e, fabs(got[i] - want[i])), m = fmax(m, fabs(want[i]));
    return e / m;
}

/* The exact forms (recurrent, generic driver) within the bound of the float64 layer, and not
 * within it of the layer with one β moved. */
START_TEST(exact_forms_match_float64) {
    static const char *const forms[] = {"recurrent", "generic"};
    for (int gates = 0; gates < 2; gates++) {
        tu_fixture f;
        tu_fx_init(&f, 31 + gates);
        const int T = 300;
        const inputs in = make_inputs(&f, T, gates);
        truth ex = make_truth(&in, 0.5, 0, -1, 0);
        /* the perturbed input: a β near the end, which the gates have not yet forgotten */
        truth px = make_truth(&in, 0.5, 0, T - 3, in.eta[T - 3] + 0.05f);
        double kmax = 0;
        for (int t = 0; t < T; t++) kmax = fmax(kmax, ex.kappa[t]);
        for (int fi = 0; fi < 2; fi++) {
            ttt_layer L;
            build(&L, 0.5, 0, forms[fi]);
            float *o = malloc(sizeof(float) * T * DV), H[DK * DK], G[DK * DV], W[DK * DV];
            run_form(&L, &in, o, H, G, W);
            const double r = worst_ratio(o, ex.o, &ex, T, 0);
            const double rp = worst_ratio(o, px.o, &ex, T, 0);
            printf("mesa %-9s gates %d T %d max kappa %.1f: %.3f of the bound (perturbed %.3g); "
                   "final H %.2e G %.2e W %.2e\n",
                   forms[fi], gates, T, kmax, r, rp, max_rel(H, ex.H, DK * DK),
                   max_rel(G, ex.G, DK * DV), max_rel(W, ex.W, DK * DV));
            TU_ASSERT_LE(r, 1.0, "%s: outputs beyond the bound (%.3f)", forms[fi], r);
            ck_assert_msg(rp > 1.0, "%s: the perturbed layer passes (%.3f)", forms[fi], rp);
            /* the final state: H, G sums of T roundings each, W one solve of them */
            const double sb = C_WALK * EPS * sqrt((double)T);
            TU_ASSERT_LE(max_rel(H, ex.H, DK * DK), sb, "%s: final H", forms[fi]);
            TU_ASSERT_LE(max_rel(G, ex.G, DK * DV), sb, "%s: final G", forms[fi]);
            TU_ASSERT_LE(max_rel(W, ex.W, DK * DV), sb * ex.kappa[T - 1], "%s: final W",
                         forms[fi]);
            ck_assert_msg(max_rel(G, px.G, DK * DV) > sb, "%s: final G of the perturbed layer",
                          forms[fi]);
            free(o);
        }
        truth_free(&ex), truth_free(&px);
        tu_fx_free(&f);
    }
}
END_TEST

/* The cg form: against float64 CG with the same steps within the rounding bound, and against
 * the exact layer within the rounding bound plus CG's; at k < d_k the exact layer is farther
 * than the rounding bound alone (CG has not converged), at k ≥ d_k … within it. */
START_TEST(cg_form_within_its_bound) {
    static const int steps[] = {2, 4, DK, 30};
    static const char *const forms[] = {"cg", "chunkwise"};
    tu_fixture f;
    tu_fx_init(&f, 57);
    const int T = 300;
    const inputs in = make_inputs(&f, T, 1);
    truth ex = make_truth(&in, 0.5, 0, -1, 0);
    for (int s = 0; s < 16; s++) {
        const int k = steps[s % 4], jacobi = s >= 8, kr = jacobi ? -k : k; /* mesa_ref's cg */
        const char *form = forms[(s / 4) % 2];
        truth cgt = make_truth(&in, 0.5, kr, -1, 0);
        truth pcg = make_truth(&in, 0.5, kr, T - 3, in.eta[T - 3] + 0.05f);
        ttt_layer L;
        build_start(&L, 0.5, k, jacobi, form);
        float *o = malloc(sizeof(float) * T * DV), H[DK * DK], G[DK * DV], W[DK * DV];
        run_form(&L, &in, o, H, G, W);
        const double r_cg = worst_ratio(o, cgt.o, &ex, T, 0);   /* vs float64 CG, rounding */
        const double r_p = worst_ratio(o, pcg.o, &ex, T, 0);    /* perturbed */
        /* vs exact, with CG's bound (its ‖x_0 − x*‖ is ‖x*‖ from 0; from the Jacobi guess the
         * bound is not this one, and only k ≥ d_k is checked, within rounding) */
        const double r_ex = jacobi ? 0.0 : worst_ratio(o, ex.o, &ex, T, k);
        const double r_ex0 = worst_ratio(o, ex.o, &ex, T, 0);   /* vs exact, rounding alone */
        char cgb[48] = "–";
        if (!jacobi) snprintf(cgb, sizeof cgb, "%.3g", r_ex);
        printf("mesa %-9s k %2d from %s: vs float64 CG %.3f of the rounding bound (perturbed "
               "%.3g); vs the exact layer %s of rounding + CG bound, %.3g of the rounding bound "
               "alone\n",
               form, k, jacobi ? "jacobi" : "zero", r_cg, r_p, cgb, r_ex0);
        TU_ASSERT_LE(r_cg, 1.0, "%s k %d against float64 CG", form, k);
        ck_assert_msg(r_p > 1.0, "%s k %d: the perturbed layer passes", form, k);
        TU_ASSERT_LE(r_ex, 1.0, "%s k %d against the exact layer with CG's bound", form, k);
        if (k < DK) ck_assert_msg(r_ex0 > 1.0, "%s k %d is within rounding of exact", form, k);
        else TU_ASSERT_LE(r_ex0, 1.0, "%s k %d ≥ d_k from %s: not the exact layer", form, k,
                          jacobi ? "jacobi" : "zero");
        TU_ASSERT_LE(max_rel(W, ex.W, DK * DV), C_WALK * EPS * sqrt((double)T) * ex.kappa[T - 1],
                     "%s k %d: final W is the exact solve", form, k);
        TU_ASSERT_LE(max_rel(H, ex.H, DK * DK), C_WALK * EPS * sqrt((double)T), "%s: final H",
                     form);
        free(o);
        truth_free(&cgt), truth_free(&pcg);
    }
    truth_free(&ex);
    tu_fx_free(&f);
}
END_TEST

/* Recursive least squares (optim/rls.c, docs/math.md §3.9) minimizes the same sum with its
 * regularizer forgotten along with the data: without gates the two are the same ridge solution
 * (rls by Sherman–Morrison from W_0 = 0, P_0 = I/λ; the recurrent form by a solve per token),
 * so rls is within the exact forms' bound of the float64 MesaNet; with gates its λ decays and
 * it must be rejected (the difference docs/math.md §3.11 states). */
START_TEST(rls_agrees_without_forgetting) {
    for (int gates = 0; gates < 2; gates++) {
        tu_fixture f;
        tu_fx_init(&f, 71 + gates);
        const int T = 200;
        const inputs in = make_inputs(&f, T, gates);
        truth ex = make_truth(&in, 0.5, 0, -1, 0);
        ttt_layer L;
        build_opt(&L, "{name: rls, lambda: 0.5}", "generic");
        float *o = malloc(sizeof(float) * T * DV), W[DK * DV];
        run_form(&L, &in, o, NULL, NULL, W);
        const double r = worst_ratio(o, ex.o, &ex, T, 0);
        printf("rls against the float64 MesaNet, gates %d: %.3g of the bound\n", gates, r);
        if (!gates) {
            TU_ASSERT_LE(r, 1.0, "rls without forgetting is not MesaNet's ridge (%.3f)", r);
            TU_ASSERT_LE(max_rel(W, ex.W, DK * DV),
                         C_WALK * EPS * sqrt((double)T) * ex.kappa[T - 1], "rls: final W");
        } else {
            ck_assert_msg(r > 1.0, "rls with gates passes as MesaNet (%.3f)", r);
        }
        free(o);
        truth_free(&ex);
        tu_fx_free(&f);
    }
}
END_TEST

/* A sequence in two calls, the state carried, computes the layer of one call. */
START_TEST(state_carries_across_calls) {
    static const char *const forms[] = {"recurrent", "cg", "chunkwise"};
    for (int fi = 0; fi < 3; fi++) {
        tu_fixture f;
        tu_fx_init(&f, 5);
        const int T = 64, T1 = 23;
        const inputs in = make_inputs(&f, T, 1);
        ttt_layer L;
        build(&L, 0.5, 5, forms[fi]);
        const ttt_form_inputs fin = {.T = T, .eta = 1, .gate = TTT_FORM_GATE_TOKEN};
        ttt_error err = {0};
        const ttt_form_entry *e = ttt_form_choose(&L, &fin, &err);
        ck_assert_msg(e, "%s", err.msg);
        ttt_layer_state a, b;
        ttt_layer_state_init(&f.ctx, &L, &a, &f.rng);
        ttt_layer_state_init(&f.ctx, &L, &b, &f.rng);
        ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, DV), *o2 = ttt_tensor_2d(&f.ctx, T, DV);
        const ttt_form_args whole = {
            .q = tensor_of(&f.ctx, in.q, T, DK), .k = tensor_of(&f.ctx, in.k, T, DK),
            .v = tensor_of(&f.ctx, in.v, T, DV), .eta = tensor_of(&f.ctx, in.eta, T, 0),
            .log_alpha = tensor_of(&f.ctx, in.la, T, 0)};
        ck_assert(e->forward(&f.ctx, &L, o, &a, &whole, &err) == TTT_OK);
        for (int part = 0; part < 2; part++) {
            const int t0 = part ? T1 : 0, n = part ? T - T1 : T1;
            const ttt_form_args pa = {
                .q = tensor_of(&f.ctx, in.q + (size_t)t0 * DK, n, DK),
                .k = tensor_of(&f.ctx, in.k + (size_t)t0 * DK, n, DK),
                .v = tensor_of(&f.ctx, in.v + (size_t)t0 * DV, n, DV),
                .eta = tensor_of(&f.ctx, in.eta + t0, n, 0),
                .log_alpha = tensor_of(&f.ctx, in.la + t0, n, 0)};
            ttt_tensor *op = ttt_tensor_2d(&f.ctx, n, DV);
            ck_assert(e->forward(&f.ctx, &L, op, &b, &pa, &err) == TTT_OK);
            memcpy(o2->data + (size_t)t0 * DV, op->data, sizeof(float) * (size_t)n * DV);
        }
        /* the retentions are dithered per call (kernels.h ttt_gate_dither), so the two runs
         * differ by roundings: each within the float64 layer's bound, the states within the
         * walk of the header, and the layer with a β moved rejected */
        truth ex = make_truth(&in, 0.5, fi ? 5 : 0, -1, 0);
        truth px = make_truth(&in, 0.5, fi ? 5 : 0, T - 3, in.eta[T - 3] + 0.05f);
        const double r1 = worst_ratio(o->data, ex.o, &ex, T, 0);
        const double r2 = worst_ratio(o2->data, ex.o, &ex, T, 0);
        const double rp = worst_ratio(o2->data, px.o, &ex, T, 0);
        printf("mesa %-9s one call %.3f, two calls %.3f of the bound (perturbed %.3g)\n",
               forms[fi], r1, r2, rp);
        TU_ASSERT_LE(r1, 1.0, "%s: one call", forms[fi]);
        TU_ASSERT_LE(r2, 1.0, "%s: two calls", forms[fi]);
        ck_assert_msg(rp > 1.0, "%s: the perturbed layer passes", forms[fi]);
        const double sb = C_WALK * EPS * sqrt((double)T);
        TU_ASSERT_LE(max_rel(b.opt[0][0]->data, ex.H, DK * DK), sb, "%s: carried H", forms[fi]);
        TU_ASSERT_LE(max_rel(b.opt[0][1]->data, ex.G, DK * DV), sb, "%s: carried G", forms[fi]);
        truth_free(&ex), truth_free(&px);
        tu_fx_free(&f);
    }
}
END_TEST

/* ---- gradients ---- */

#define GT 12 /* tokens of the gradient checks */

/* L = Σ R_o ⊙ O + Σ R_H ⊙ H_T + Σ R_G ⊙ G_T + Σ R_W ⊙ W_T of the float64 layer, inputs as
 * doubles through a float copy (the finite differences move the doubles; the float copy of a
 * moved double is not used: the reference reads floats, so it is re-run on double inputs
 * through mesa_ref_d below). */
typedef struct gprob {
    double q[GT * DK], k[GT * DK], v[GT * DV], eta[GT], la[GT], H0[DK * DK], G0[DK * DV];
    double Ro[GT * DV], RH[DK * DK], RG[DK * DV], RW[DK * DV];
    double lam;
} gprob;

static double loss_d(const gprob *p) {
    double H[DK * DK], G[DK * DV], A[DK * DK], Ai[DK * DK], L = 0;
    memcpy(H, p->H0, sizeof H), memcpy(G, p->G0, sizeof G);
    for (int t = 0; t < GT; t++) {
        const double a = exp(p->la[t]), b = p->eta[t];
        for (int i = 0; i < DK; i++) {
            for (int j = 0; j < DK; j++)
                H[i * DK + j] = a * H[i * DK + j] + b * p->k[t * DK + i] * p->k[t * DK + j];
            for (int j = 0; j < DV; j++)
                G[i * DV + j] = a * G[i * DV + j] + b * p->k[t * DK + i] * p->v[t * DV + j];
        }
        for (int i = 0; i < DK * DK; i++) A[i] = H[i];
        for (int i = 0; i < DK; i++) A[i * DK + i] += p->lam;
        ck_assert(mesa_ref_inverse(A, Ai, DK));
        for (int j = 0; j < DV; j++) {
            double o = 0;
            for (int i = 0; i < DK; i++) {
                double x = 0;
                for (int c = 0; c < DK; c++) x += Ai[c * DK + i] * p->q[t * DK + c];
                o += x * G[i * DV + j];
            }
            L += p->Ro[t * DV + j] * o;
        }
    }
    for (int i = 0; i < DK * DK; i++) A[i] = H[i], L += p->RH[i] * H[i];
    for (int i = 0; i < DK; i++) A[i * DK + i] += p->lam;
    ck_assert(mesa_ref_inverse(A, Ai, DK));
    for (int i = 0; i < DK; i++)
        for (int j = 0; j < DV; j++) {
            double w = 0;
            for (int c = 0; c < DK; c++) w += Ai[i * DK + c] * G[c * DV + j];
            L += p->RW[i * DV + j] * w + p->RG[i * DV + j] * G[i * DV + j];
        }
    return L;
}

/* The form's gradients (tape) and the float64 central differences, each of the seven inputs;
 * returns the largest |tape − fd| / (bound · max|fd|) over them. */
static double grad_case(const char *form, int cg, int perturb) {
    tu_fixture f;
    tu_fx_init(&f, 99);
    gprob p = {.lam = 0.5};
    const inputs in = make_inputs(&f, GT, 1);
    float *Bm = tu_randn_buf(&f, DK * DK, 0.3f);
    for (int i = 0; i < GT * DK; i++) p.q[i] = in.q[i], p.k[i] = in.k[i];
    for (int i = 0; i < GT * DV; i++) p.v[i] = in.v[i];
    for (int t = 0; t < GT; t++) p.eta[t] = in.eta[t], p.la[t] = in.la[t];
    for (int i = 0; i < DK; i++) /* H0 = B Bᵀ, positive semidefinite, rounded to float */
        for (int j = 0; j < DK; j++) {
            double s = 0;
            for (int c = 0; c < DK; c++) s += (double)Bm[i * DK + c] * Bm[j * DK + c];
            p.H0[i * DK + j] = (float)s;
        }
    float *G0 = tu_randn_buf(&f, DK * DV, 0.5f);
    float *R = tu_randn_buf(&f, GT * DV + 2 * DK * DV + DK * DK, 1.0f);
    for (int i = 0; i < DK * DV; i++) p.G0[i] = G0[i];
    for (int i = 0; i < GT * DV; i++) p.Ro[i] = R[i];
    for (int i = 0; i < DK * DK; i++) p.RH[i] = R[GT * DV + i];
    for (int i = 0; i < DK * DV; i++)
        p.RG[i] = R[GT * DV + DK * DK + i], p.RW[i] = R[GT * DV + DK * DK + DK * DV + i];
    /* the tape */
    ttt_layer L;
    build(&L, p.lam, cg, form);
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx;
    ttt_tensor *x[7];
    const int rows[7] = {GT, GT, GT, GT, GT, DK, DK}, cols[7] = {DK, DK, DV, 0, 0, DK, DV};
    const double *src[7] = {p.q, p.k, p.v, p.eta, p.la, p.H0, p.G0};
    float *grads[7];
    for (int i = 0; i < 7; i++) {
        x[i] = cols[i] ? ttt_tensor_2d(c, rows[i], cols[i]) : ttt_tensor_1d(c, rows[i]);
        for (size_t j = 0; j < x[i]->n; j++) x[i]->data[j] = (float)src[i][j];
        grads[i] = tu_zalloc(c, sizeof(float) * x[i]->n);
        ttt_tensor_set_param(x[i], grads[i]);
    }
    ttt_layer_state st;
    ttt_rng rr;
    ttt_rng_seed(&rr, 3);
    ttt_layer_state_init(c, &L, &st, &rr);
    st.opt[0][0] = x[5], st.opt[0][1] = x[6];
    const ttt_form_inputs fin = {.T = GT, .eta = 1, .gate = TTT_FORM_GATE_TOKEN, .tape = 1};
    ttt_error err = {0};
    const ttt_form_entry *e = ttt_form_choose(&L, &fin, &err);
    ck_assert_msg(e, "%s", err.msg);
    ttt_tensor *o = ttt_tensor_2d(c, GT, DV);
    const ttt_form_args a = {.q = x[0], .k = x[1], .v = x[2], .eta = x[3],
                             .beta = ttt_scale(c, x[3], L.lr), .log_alpha = x[4], .fused = 1};
    ck_assert_msg(e->forward_diff(c, &L, o, &st, &a, &err) == TTT_OK, "%s", err.msg);
    ttt_tensor *loss = NULL;
    const ttt_tensor *outs[4] = {o, st.opt[0][0], st.opt[0][1], st.W[0]};
    const double *Rs[4] = {p.Ro, p.RH, p.RG, p.RW};
    for (int i = 0; i < 4; i++) {
        ttt_tensor *Rt = ttt_tensor_zeros_like(c, outs[i]);
        for (size_t j = 0; j < Rt->n; j++) Rt->data[j] = (float)Rs[i][j];
        ttt_tensor *term = ttt_sum(c, ttt_mul(c, outs[i], Rt));
        loss = loss ? ttt_add(c, loss, term) : term;
    }
    ttt_backward(c, loss);
    /* float64 central differences, h = 1e-5 (truncation h²·|L'''| and cancellation 1e-16/h are
     * both ≤ 1e-9 here, far below the float32 tolerance) */
    double *dst[7] = {p.q, p.k, p.v, p.eta, p.la, p.H0, p.G0};
    double worst = 0, kmax = 0;
    {
        truth ex = make_truth(&in, p.lam, 0, -1, 0);
        for (int t = 0; t < GT; t++) kmax = fmax(kmax, ex.kappa[t]);
        truth_free(&ex);
    }
    /* float32 gradient vs exact: the backward repeats the forward's roundings transposed, a
     * walk of c·ε·√(n·T) with n ≈ 4·d_k (the widest sums), through solves of condition κ */
    const double bound = C_WALK * EPS * sqrt(4.0 * DK * GT) * (1 + kmax);
    for (int i = 0; i < 7; i++) {
        double mx = 0, er = 0;
        for (size_t j = 0; j < x[i]->n; j++) {
            const double keep = dst[i][j], h = 1e-5 * fmax(1.0, fabs(keep));
            dst[i][j] = keep + h;
            const double lp = loss_d(&p);
            dst[i][j] = keep - h;
            const double lm = loss_d(&p);
            dst[i][j] = keep;
            const double fd = (lp - lm) / (2 * h);
            const double g = perturb ? 1.05 * grads[i][j] : grads[i][j];
            mx = fmax(mx, fabs(fd));
            er = fmax(er, fabs(g - fd));
        }
        const double r = er / (bound * mx);
        printf("  mesa %-9s cg %2d gradient %d: max error %.3g, max |g| %.3g: %.3f of the "
               "bound%s\n",
               form, cg, i, er, mx, r, perturb ? " (scaled by 1.05)" : "");
        worst = fmax(worst, r);
    }
    tu_tape_fx_free(&fx);
    tu_fx_free(&f);
    return worst;
}

START_TEST(gradients_match_finite_differences) {
    /* the cg form at 30 ≥ d_k steps: converged, so its implicit gradient is the exact one */
    static const char *const forms[] = {"recurrent", "cg", "chunkwise", "generic"};
    for (int fi = 0; fi < 4; fi++) {
        const double r = grad_case(forms[fi], fi == 1 || fi == 2 ? 30 : 0, 0);
        TU_ASSERT_LE(r, 1.0, "%s: gradients beyond the bound (%.3f)", forms[fi], r);
        const double rp = grad_case(forms[fi], fi == 1 || fi == 2 ? 30 : 0, 1);
        ck_assert_msg(rp > 1.0, "%s: gradients scaled by 1.05 pass (%.3f)", forms[fi], rp);
    }
}
END_TEST

/* The tuple outside the forms' domain is refused with a reason; a key-dimension gate too. */
START_TEST(refusals_say_why) {
    ttt_layer L;
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string("layer: {model: linear, loss: squared, optimizer: {name: mesa}, "
                                  "form: cg}\n",
                                  "<test>", &root, &err) == TTT_OK);
    ttt_layer L2;
    const ttt_status s =
        ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), DK, DV, &L2, &err);
    ttt_cfg_free(root);
    ck_assert_int_ne(s, TTT_OK);
    ck_assert_msg(strstr(err.msg, "cg_steps"), "%s", err.msg);
    build(&L, 1.0, 3, "recurrent");
    const ttt_form_inputs fin = {.T = 4, .gate = TTT_FORM_GATE_KEY};
    ck_assert_ptr_null(ttt_form_choose(&L, &fin, &err));
    ck_assert_msg(strstr(err.msg, "scalar gate"), "%s", err.msg);
}
END_TEST

static Suite *mesa_suite(void) {
    Suite *s = suite_create("mesa_net");
    TCase *tc = tcase_create("mesa_net");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, exact_forms_match_float64);
    tcase_add_test(tc, cg_form_within_its_bound);
    tcase_add_test(tc, rls_agrees_without_forgetting);
    tcase_add_test(tc, state_carries_across_calls);
    tcase_add_test(tc, gradients_match_finite_differences);
    tcase_add_test(tc, refusals_say_why);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(mesa_suite()); }
