/* KDA's chunkwise form (docs/math.md §4.5 "Chunkwise form"; layers/forms/delta_rule/kda_chunk.c,
 * registry entry kda/chunkwise) against a float64 recurrence written here,
 *     S_t = (I − β_t k_tᵀ k_t) Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t,
 * and its gradients against the float64 backward of that recurrence (itself checked against
 * central finite differences), at chunk sizes that cover one sub-block of the pair products
 * (C ≤ 16), several (C = 17, 48, 64, 100: the off-diagonal blocks and their reference points),
 * chunks longer than the explicit inverse takes (C = 150, 200: triangular solves) and C = 1.
 * Gates: moderate (log α ∈ [−2, −1e-4]) with 5 % hard resets of single key rows
 * (−inf), strong (log α ∈ [−16, −0.5], FLA's gate range −exp(A)·softplus with A ∈ [1, 16]: a
 * chunk of 64 spans hundreds of nats, so any e^{+G} factor would overflow) with 3 % resets,
 * weak (−1e-6: a chunk is one factored block), and medium (log α ∈ [−3, −1], no resets: a
 * chunk of 48 or more spans over 60 nats, a sub-block of 16 at most 48, so the diagonal blocks
 * are factored; with resets or strong gates they are formed pair by pair); a nonzero initial
 * state; d_k = 16 ≠ d_v = 40; β ∈ [0, 2] with unit keys.
 * (tests/test_hard_inputs.c runs the entry on the hard inputs at the preset's chunk;
 * tests/test_contract_forms.c holds it to the generic driver.) Each comparison also has a
 * perturbed input it must reject.
 *
 * Bounds (docs/hardening.md "Portable tolerances"), ε = 2^-24:
 *   Forward: relative RMS 2e-6 over the outputs and over the final state, the bound of
 *   tests/test_hard_inputs.c (a few float32 roundings per output with room for the sums over
 *   d_k and the chunk; the step contracts for β‖k‖² ≤ 2, so errors do not grow with T).
 *   Gradients: per tensor max |g − g64| ≤ 6ε·√(2nT)·max |g64| (log α's: the largest entry over
 *   every tensor, as it is a reverse cumulative sum that may cancel far below the others), with
 *   n = d_k + d_v + C + 10: the float32 backward repeats the forward's roundings transposed, 2n
 *   per state entry per token (products over d_k and d_v, a chunk's sums over up to C terms,
 *   some ten elementwise operations), a random walk whose largest of ~10⁴ entries lies within
 *   6 deviations; the float64 side adds nothing at this scale.
 *   Finite differences of the float64 loss: central, h = 1e-5·max(1, |x|): truncation
 *   h²/6·|L'''| and rounding ε64·|L|/h are both ≤ 1e-9 of the scale max(|L|, max|g|); bound
 *   1e-7 of that scale. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

#define DK 16
#define DV 40
#define TL 200
#define BOUND 2e-6

typedef enum { GATES_MODERATE, GATES_STRONG, GATES_WEAK, GATES_MEDIUM } gates;
#define N_GATES 4
static const char *const gate_names[] = {"moderate + resets", "strong + resets", "weak",
                                         "medium"};

typedef struct inputs {
    int T, dk, dv;
    float *q, *k, *v, *eta, *la, *S0; /* (T, dk), (T, dk), (T, dv), (T), (T, dk), (dk, dv) */
} inputs;

static inputs make(int Tn, int dk, int dv, gates g, uint64_t seed) {
    inputs x = {.T = Tn, .dk = dk, .dv = dv};
    x.q = calloc((size_t)Tn * dk, sizeof(float));
    x.k = calloc((size_t)Tn * dk, sizeof(float));
    x.v = calloc((size_t)Tn * dv, sizeof(float));
    x.eta = calloc((size_t)Tn, sizeof(float));
    x.la = calloc((size_t)Tn * dk, sizeof(float));
    x.S0 = calloc((size_t)dk * dv, sizeof(float));
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    ttt_rng_fill_normal(&r, x.q, (size_t)Tn * dk, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x.k, (size_t)Tn * dk, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x.v, (size_t)Tn * dv, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, x.S0, (size_t)dk * dv, 0.0f, 0.25f);
    ttt_rng_fill_uniform(&r, x.eta, (size_t)Tn, 0.0f, 2.0f);
    for (int t = 0; t < Tn; t++) { /* unit keys */
        double s = 0;
        for (int i = 0; i < dk; i++) s += (double)x.k[t * dk + i] * x.k[t * dk + i];
        for (int i = 0; i < dk; i++) x.k[t * dk + i] = (float)(x.k[t * dk + i] / sqrt(s));
    }
    float *u = calloc((size_t)Tn * dk, sizeof(float)), *w = calloc((size_t)Tn * dk, sizeof(float));
    ttt_rng_fill_uniform(&r, u, (size_t)Tn * dk, 0.0f, 1.0f);
    ttt_rng_fill_uniform(&r, w, (size_t)Tn * dk, 0.0f, 1.0f);
    for (int i = 0; i < Tn * dk; i++) {
        switch (g) {
        case GATES_MODERATE:
            x.la[i] = w[i] < 0.05f ? -INFINITY : (float)(-2.0 * pow(u[i], 4.0) - 1e-4);
            break;
        case GATES_STRONG: x.la[i] = w[i] < 0.03f ? -INFINITY : -0.5f - 15.5f * u[i]; break;
        case GATES_WEAK: x.la[i] = -1e-6f; break;
        case GATES_MEDIUM: x.la[i] = -1.0f - 2.0f * u[i]; break;
        }
    }
    free(u), free(w);
    return x;
}

static void release(inputs *x) {
    free(x->q), free(x->k), free(x->v), free(x->eta), free(x->la), free(x->S0);
}

/* ---- the float64 recurrence and its backward (docs/math.md §4.5) ---- */

/* o (T, dv), S (dk, dv) final; Ss ((T + 1), dk, dv) every state when not NULL. theta: β = θη. */
static void forward64(double *o, double *S, double *Ss, const inputs *x, double theta) {
    const int dk = x->dk, dv = x->dv;
    for (int n = 0; n < dk * dv; n++) S[n] = x->S0[n];
    if (Ss) memcpy(Ss, S, sizeof(double) * (size_t)dk * dv);
    for (int t = 0; t < x->T; t++) {
        const float *q = x->q + (size_t)t * dk, *k = x->k + (size_t)t * dk;
        const float *v = x->v + (size_t)t * dv;
        const double b = theta * x->eta[t];
        for (int i = 0; i < dk; i++) {
            const double a = exp((double)x->la[(size_t)t * dk + i]);
            for (int j = 0; j < dv; j++) S[i * dv + j] *= a;
        }
        for (int j = 0; j < dv; j++) {
            double e = v[j];
            for (int i = 0; i < dk; i++) e -= (double)k[i] * S[i * dv + j];
            for (int i = 0; i < dk; i++) S[i * dv + j] += b * k[i] * e;
        }
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += (double)q[i] * S[i * dv + j];
            o[(size_t)t * dv + j] = s;
        }
        if (Ss) memcpy(Ss + (size_t)(t + 1) * dk * dv, S, sizeof(double) * (size_t)dk * dv);
    }
}

typedef struct grads64 {
    double *q, *k, *v, *eta, *la, *S0;
} grads64;

/* The gradients of L = Σ R_o ⊙ o + Σ R_S ⊙ S_T (the hand-derived backward of docs/math.md §4.5
 * in float64; η's through β = θη). */
static grads64 backward64(const inputs *x, double theta, const float *Ro, const float *RS) {
    const int dk = x->dk, dv = x->dv, Tn = x->T;
    const size_t dkv = (size_t)dk * dv;
    grads64 g = {calloc((size_t)Tn * dk, 8), calloc((size_t)Tn * dk, 8),
                 calloc((size_t)Tn * dv, 8), calloc((size_t)Tn, 8),
                 calloc((size_t)Tn * dk, 8), calloc(dkv, 8)};
    double *o = malloc(sizeof(double) * (size_t)Tn * dv), *S = malloc(sizeof(double) * dkv);
    double *Ss = malloc(sizeof(double) * (Tn + 1) * dkv);
    double *dS = malloc(sizeof(double) * dkv), *Sd = malloc(sizeof(double) * dkv);
    double *e = malloc(sizeof(double) * dv), *de = malloc(sizeof(double) * dv);
    forward64(o, S, Ss, x, theta);
    for (size_t n = 0; n < dkv; n++) dS[n] = RS[n];
    for (int t = Tn - 1; t >= 0; t--) {
        const float *q = x->q + (size_t)t * dk, *k = x->k + (size_t)t * dk;
        const float *v = x->v + (size_t)t * dv, *la = x->la + (size_t)t * dk;
        const float *dO = Ro + (size_t)t * dv;
        const double *Sp = Ss + (size_t)t * dkv, *Sn = Ss + (size_t)(t + 1) * dkv;
        const double b = theta * x->eta[t];
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) Sd[i * dv + j] = exp((double)la[i]) * Sp[i * dv + j];
        for (int j = 0; j < dv; j++) {
            e[j] = v[j];
            for (int i = 0; i < dk; i++) e[j] -= (double)k[i] * Sd[i * dv + j];
        }
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                g.q[(size_t)t * dk + i] += (double)dO[j] * Sn[i * dv + j];
                dS[i * dv + j] += (double)q[i] * dO[j];
            }
        double db = 0;
        for (int j = 0; j < dv; j++) de[j] = 0;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                db += k[i] * dS[i * dv + j] * e[j];
                g.k[(size_t)t * dk + i] += b * dS[i * dv + j] * e[j];
                de[j] += b * k[i] * dS[i * dv + j];
            }
        g.eta[t] = theta * db;
        for (int j = 0; j < dv; j++) g.v[(size_t)t * dv + j] = de[j];
        for (int i = 0; i < dk; i++) {
            const double a = exp((double)la[i]);
            double dla = 0;
            for (int j = 0; j < dv; j++) {
                const double gg = dS[i * dv + j] - k[i] * de[j];
                g.k[(size_t)t * dk + i] -= de[j] * Sd[i * dv + j];
                dla += Sd[i * dv + j] * gg;
                dS[i * dv + j] = a * gg;
            }
            g.la[(size_t)t * dk + i] = dla;
        }
    }
    for (size_t n = 0; n < dkv; n++) g.S0[n] = dS[n];
    free(o), free(S), free(Ss), free(dS), free(Sd), free(e), free(de);
    return g;
}

static void free64(grads64 *g) { free(g->q), free(g->k), free(g->v), free(g->eta), free(g->la), free(g->S0); }

static double loss64(const inputs *x, double theta, const float *Ro, const float *RS) {
    const size_t no = (size_t)x->T * x->dv, ns = (size_t)x->dk * x->dv;
    double *o = malloc(sizeof(double) * no), *S = malloc(sizeof(double) * ns), L = 0;
    forward64(o, S, NULL, x, theta);
    for (size_t n = 0; n < no; n++) L += Ro[n] * o[n];
    for (size_t n = 0; n < ns; n++) L += RS[n] * S[n];
    free(o), free(S);
    return L;
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

/* ---- the entry ---- */

static const ttt_form_entry *entry(void) {
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        if (strcmp(e->family, "kda") == 0 && strcmp(e->form, "chunkwise") == 0) return e;
    }
    ck_abort_msg("no kda/chunkwise entry in the registry");
    return NULL;
}

static ttt_layer layer(int C) {
    char text[256];
    snprintf(text, sizeof text, "layer: {preset: kda, chunk: %d, form: chunkwise}\n", C);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_layer L;
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), DK, DV, &L, &err);
    ttt_cfg_free(root);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    return L;
}

static ttt_tensor *tensor_of(ttt_ctx *c, const float *x, int r, int cols) {
    ttt_tensor *t = cols ? ttt_tensor_2d(c, r, cols) : ttt_tensor_1d(c, r);
    memcpy(t->data, x, t->n * sizeof(float));
    return t;
}

/* The entry's forward (no tape) from x: o (T, DV), S (DK, DV). */
static void run_forward(float *o, float *S, const ttt_layer *L, const inputs *x) {
    tu_fixture f;
    tu_fx_init(&f, 1);
    ttt_tensor *q = tensor_of(&f.ctx, x->q, x->T, DK), *k = tensor_of(&f.ctx, x->k, x->T, DK);
    ttt_tensor *v = tensor_of(&f.ctx, x->v, x->T, DV), *eta = tensor_of(&f.ctx, x->eta, x->T, 0);
    ttt_tensor *la = tensor_of(&f.ctx, x->la, x->T, DK), *O = ttt_tensor_2d(&f.ctx, x->T, DV);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, L, &st, &f.rng);
    memcpy(st.W[0]->data, x->S0, sizeof(float) * DK * DV);
    const ttt_form_args a = {.q = q, .k = k, .v = v, .eta = eta, .log_alpha = la, .alpha_vec = 1,
                             .fused = 1};
    ttt_error err = {0};
    ck_assert_msg(entry()->forward(&f.ctx, L, O, &st, &a, &err) == TTT_OK, "%s", err.msg);
    memcpy(o, O->data, sizeof(float) * (size_t)x->T * DV);
    memcpy(S, st.W[0]->data, sizeof(float) * DK * DV);
    tu_fx_free(&f);
}

static const int chunks[] = {1, 7, 16, 17, 48, 64, 100, 200};
#define N_CHUNKS ((int)(sizeof chunks / sizeof chunks[0]))

START_TEST(chunkwise_matches_float64_with_resets_and_strong_gates) {
    static float o[TL * DV], S[DK * DV];
    static double o_ref[TL * DV], S_ref[DK * DV];
    for (int g = 0; g < N_GATES; g++) {
        inputs x = make(TL, DK, DV, (gates)g, 21 + (uint64_t)g);
        for (int ci = 0; ci < N_CHUNKS; ci++) {
            const ttt_layer L = layer(chunks[ci]);
            forward64(o_ref, S_ref, NULL, &x, L.lr);
            run_forward(o, S, &L, &x);
            const double eo = rel_rms(o, o_ref, TL * DV), es = rel_rms(S, S_ref, DK * DV);
            printf("  kda chunkwise C %3d  %-18s  o %.2e  S %.2e\n", chunks[ci], gate_names[g], eo,
                   es);
            ck_assert_msg(tu_ratio(eo, BOUND) & tu_ratio(es, BOUND),
                          "C %d, %s: o %.3g, S %.3g (bound %.0e)",
                          chunks[ci], gate_names[g], eo, es, BOUND);
        }
        /* the perturbed input: one gate of one key moved (a reset moved to the next key, or a
         * gate set to −1e-3, so that under strong gates the row keeps what it holds), where the
         * float64 run must see it */
        const ttt_layer L = layer(64);
        run_forward(o, S, &L, &x);
        const int n = (TL / 2 + 3) * DK + 5;
        if (isinf(x.la[n])) {
            x.la[n] = x.la[n + 1];
            x.la[n + 1] = -INFINITY;
        } else {
            x.la[n] = x.la[n] < -2e-3f ? -1e-3f : x.la[n] - 0.1f;
        }
        forward64(o_ref, S_ref, NULL, &x, L.lr);
        const double eo = rel_rms(o, o_ref, TL * DV);
        ck_assert_msg(eo > 10 * BOUND, "%s: a moved gate went unseen (%.3g)", gate_names[g], eo);
        release(&x);
    }
}
END_TEST

/* ---- gradients ---- */

typedef struct grads32 {
    float *g[6]; /* q, k, v, η, log α, S0 */
} grads32;

static const char *const grad_names[6] = {"q", "k", "v", "eta", "log_alpha", "S0"};

/* The entry's forward_diff (fused) under a tape and the backward of Σ Ro ⊙ o + Σ RS ⊙ S_T. */
static grads32 run_grads(const ttt_layer *L, const inputs *x, const float *Ro, const float *RS,
                         float *o_diff) {
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx;
    const int Tn = x->T;
    ttt_tensor *p[6] = {tensor_of(c, x->q, Tn, DK), tensor_of(c, x->k, Tn, DK),
                        tensor_of(c, x->v, Tn, DV), tensor_of(c, x->eta, Tn, 0),
                        tensor_of(c, x->la, Tn, DK), NULL};
    ttt_layer_state st;
    ttt_rng rng;
    ttt_rng_seed(&rng, 1);
    ttt_layer_state_init(c, L, &st, &rng);
    memcpy(st.W[0]->data, x->S0, sizeof(float) * DK * DV);
    p[5] = st.W[0];
    grads32 out;
    for (int i = 0; i < 6; i++) {
        out.g[i] = calloc(p[i]->n, sizeof(float));
        float *buf = tu_zalloc(c, p[i]->n * sizeof(float));
        ttt_tensor_set_param(p[i], buf);
    }
    ttt_tensor *o = ttt_tensor_2d(c, Tn, DV);
    const ttt_form_args a = {.q = p[0], .k = p[1], .v = p[2], .eta = p[3],
                             .beta = ttt_scale(c, p[3], L->lr), .log_alpha = p[4],
                             .alpha_vec = 1, .fused = 1};
    ttt_error err = {0};
    ck_assert_msg(entry()->forward_diff(c, L, o, &st, &a, &err) == TTT_OK, "%s", err.msg);
    if (o_diff) memcpy(o_diff, o->data, sizeof(float) * (size_t)Tn * DV);
    ttt_tensor *R1 = tensor_of(c, Ro, Tn, DV), *R2 = tensor_of(c, RS, DK, DV);
    ttt_tensor *loss = ttt_add(c, ttt_sum(c, ttt_mul(c, o, R1)), ttt_sum(c, ttt_mul(c, st.W[0], R2)));
    ttt_backward(c, loss);
    for (int i = 0; i < 6; i++) memcpy(out.g[i], ttt_grad(c, p[i]), p[i]->n * sizeof(float));
    tu_tape_fx_free(&fx);
    return out;
}

static void free32(grads32 *g) {
    for (int i = 0; i < 6; i++) free(g->g[i]);
}

/* The worst ratio error / bound over the six gradients (bound of the header). */
static double grad_ratio(const grads32 *g, const grads64 *r, int C, int Tn, int *worst) {
    const double *ref[6] = {r->q, r->k, r->v, r->eta, r->la, r->S0};
    const size_t n[6] = {(size_t)Tn * DK, (size_t)Tn * DK, (size_t)Tn * DV, (size_t)Tn,
                         (size_t)Tn * DK, DK * DV};
    const double tol = 6 * 0x1p-24 * sqrt(2.0 * (DK + DV + C + 10) * Tn);
    double all = 0, mx[6], err[6], ratio = 0;
    for (int i = 0; i < 6; i++) {
        mx[i] = err[i] = 0;
        for (size_t j = 0; j < n[i]; j++) {
            mx[i] = fmax(mx[i], fabs(ref[i][j]));
            const double d = fabs((double)g->g[i][j] - ref[i][j]);
            err[i] = isnan(d) ? INFINITY : fmax(err[i], d);
        }
        all = fmax(all, mx[i]);
    }
    for (int i = 0; i < 6; i++) {
        const double rr = err[i] / (tol * (i == 4 ? all : mx[i]));
        if (rr > ratio || isnan(rr)) ratio = isnan(rr) ? INFINITY : rr, *worst = i;
    }
    return ratio;
}

START_TEST(gradients_match_float64_backward) {
    const int Tg = 160;
    static float Ro[TL * DV], RS[DK * DV], o_diff[TL * DV], o[TL * DV], S[DK * DV];
    ttt_rng r;
    ttt_rng_seed(&r, 77);
    ttt_rng_fill_normal(&r, Ro, (size_t)Tg * DV, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, RS, DK * DV, 0.0f, 1.0f);
    static const int gchunks[] = {1, 16, 17, 64, 150};
    for (int g = 0; g < N_GATES; g++) {
        inputs x = make(Tg, DK, DV, (gates)g, 31 + (uint64_t)g);
        for (int ci = 0; ci < 5; ci++) {
            const int C = gchunks[ci];
            const ttt_layer L = layer(C);
            grads64 ref = backward64(&x, L.lr, Ro, RS);
            grads32 got = run_grads(&L, &x, Ro, RS, o_diff);
            /* forward_diff's output is forward's, bit for bit */
            run_forward(o, S, &L, &x);
            ck_assert(memcmp(o, o_diff, sizeof(float) * (size_t)Tg * DV) == 0);
            int worst = 0;
            const double ratio = grad_ratio(&got, &ref, C, Tg, &worst);
            printf("  kda chunkwise gradients C %3d  %-18s  worst error / bound %.3f (%s)\n", C,
                   gate_names[g], ratio, grad_names[worst]);
            /* a reset's gate has the gradient 0, exactly (docs/math.md §0 "Hard resets") */
            for (int n = 0; n < Tg * DK; n++)
                ck_assert_msg(!isinf(x.la[n]) || got.g[4][n] == 0.0f,
                              "C %d: gradient %g at the reset gate %d", C, got.g[4][n], n);
            ck_assert_msg(tu_ratio(ratio, 1.0), "C %d, %s: gradient %s at %.3g of the bound", C,
                          gate_names[g], grad_names[worst], ratio);
            /* perturbed: gradients at inputs with one gate moved (a reset to −0.5, a gate below
             * −0.5 to −1e-3, another by −1) */
            if (C == 64) {
                const int n = (Tg / 2) * DK + 3;
                const float keep = x.la[n];
                x.la[n] = isinf(keep) ? -0.5f : keep < -0.5f ? -1e-3f : keep - 1.0f;
                grads32 bad = run_grads(&L, &x, Ro, RS, NULL);
                x.la[n] = keep;
                const double rb = grad_ratio(&bad, &ref, C, Tg, &worst);
                printf("  (one gate moved: worst error / bound %.3g)\n", rb);
                ck_assert_msg(rb > 10, "%s: a moved gate went unseen in the gradients (%.3g)",
                              gate_names[g], rb);
                free32(&bad);
            }
            free32(&got);
            free64(&ref);
        }
        release(&x);
    }
}
END_TEST

/* max |FD − g| over every input of x: central differences of the float64 loss, the float
 * input moved by ±h (only float steps are representable, so the steps taken are measured) */
static double fd_error(inputs *x, double theta, const float *Ro, const float *RS,
                       const grads64 *g) {
    float *p[6] = {x->q, x->k, x->v, x->eta, x->la, x->S0};
    const double *gr[6] = {g->q, g->k, g->v, g->eta, g->la, g->S0};
    const int n[6] = {x->T * x->dk, x->T * x->dk, x->T * x->dv, x->T, x->T * x->dk,
                      x->dk * x->dv};
    double worst = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < n[i]; j++) {
            const float keep = p[i][j];
            const double h = 1e-5 * fmax(1.0, fabs(keep));
            p[i][j] = (float)(keep + h);
            const double hp = (double)p[i][j] - keep, Lp = loss64(x, theta, Ro, RS);
            p[i][j] = (float)(keep - h);
            const double hm = keep - (double)p[i][j], Lm = loss64(x, theta, Ro, RS);
            p[i][j] = keep;
            worst = fmax(worst, fabs((Lp - Lm) / (hp + hm) - gr[i][j]));
        }
    return worst;
}

START_TEST(float64_backward_matches_finite_differences) {
    enum { TF = 24, KF = 4, VF = 3 };
    inputs x = make(TF, KF, VF, GATES_MODERATE, 41);
    for (int i = 0; i < TF * KF; i++) /* finite gates (a reset has no derivative), one strong */
        if (isinf(x.la[i])) x.la[i] = -30.0f;
    float Ro[TF * VF], RS[KF * VF];
    ttt_rng r;
    ttt_rng_seed(&r, 5);
    ttt_rng_fill_normal(&r, Ro, TF * VF, 0.0f, 1.0f);
    ttt_rng_fill_normal(&r, RS, KF * VF, 0.0f, 1.0f);
    const double theta = 0.7;
    grads64 g = backward64(&x, theta, Ro, RS);
    const double *gr[6] = {g.q, g.k, g.v, g.eta, g.la, g.S0};
    const int n[6] = {TF * KF, TF * KF, TF * VF, TF, TF * KF, KF * VF};
    double scale = fabs(loss64(&x, theta, Ro, RS));
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < n[i]; j++) scale = fmax(scale, fabs(gr[i][j]));
    const double err = fd_error(&x, theta, Ro, RS, &g);
    printf("  float64 backward vs finite differences: max error %.2e of scale %.2e\n", err,
           scale);
    /* unequal float steps leave a first-order term L''·(h₊ − h₋)/2 ≲ 1e-7 of the scale besides
     * the truncation and rounding of the header: bound 1e-6 of it */
    ck_assert_msg(tu_ratio(err, 1e-6 * scale), "max error %.3g, scale %.3g", err, scale);
    /* perturbed: the differences taken at inputs with one β moved by 0.05 */
    x.eta[TF / 2] += 0.05f;
    const double moved = fd_error(&x, theta, Ro, RS, &g);
    ck_assert_msg(moved > 100 * 1e-6 * scale, "a moved beta went unseen (%.3g)", moved);
    free64(&g);
    release(&x);
}
END_TEST

static Suite *kda_chunk_suite(void) {
    Suite *s = suite_create("kda_chunk");
    TCase *tc = tcase_create("kda_chunk");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, chunkwise_matches_float64_with_resets_and_strong_gates);
    tcase_add_test(tc, gradients_match_float64_backward);
    tcase_add_test(tc, float64_backward_matches_finite_differences);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(kda_chunk_suite()); }
