/* The contract of every computation form (layers/forms/form.h), checked by looping over the
 * registry: no list of forms here, so a new entry (one file + one line in form_list.h) is tested
 * as soon as it exists. For every entry × every preset it accepts (asked through `available` for
 * each gate shape, with and without per-token rates η):
 *   (a) forward equals the generic driver (the definition, docs/math.md §1): output and every
 *       state tensor;
 *   (b) forward_diff's gradients (w.r.t. q, k, v, η, the gates and the whole initial state) equal
 *       the generic driver's under the tape, fused and composed paths;
 *   (c) scratch_bytes is at least the arena's measured peak during forward;
 *   (d) forward_strided, where present, gives forward's bits on rows inside a (T, H, D) array;
 *   (e) device entries (CUDA): batched forward and backward equal the generic driver, where a
 *       GPU is present (the block (e) below).
 * Every gated call runs twice: with the gates drawn below and with hard resets among them
 * (is_reset, docs/math.md §0 "Hard resets"); with resets (a) and (b) also require the same call
 * without its resets to be rejected, and (b) requires the gradient of every reset gate to be 0.
 * Every entry must be exercised by at least one preset (a new entry that no preset reaches fails
 * here and needs a preset or a case).
 *
 * Sizes: d_k = d_v = 4 (square models need equal dims), chunk 3, b = 4 for presets with b > 1,
 * T = 13 (four blocks, the last partial) and T = 40. Inputs: q ~ N(0, 0.5²), unit keys (the
 * squared loss's step is stable for β‖k‖² ≤ 2), v ~ N(0, 1), η ~ U[0.1, 1), log α ~ U[−0.2, −0.01).
 *
 * Tolerances. Both sides are float32 evaluations of the same function in a different order (chunk
 * matrices vs token-by-token updates).
 *   Forward: |got − want| ≤ 1e-5 + FWD_RTOL_T(T)·max |want| (the sum of the two evaluations'
 *   derived bounds, below: 2.9e-5 at T = 40). A wrong term (e.g. a gate applied once too often,
 *   θ off by 1 %) moves outputs by ≥ 1e-2.
 *   Gradients: max |g − g_ref| ≤ grad_rtol·max |g_ref| per tensor (log α's: the largest gradient
 *   entry over every tensor; below; was 1e-4 · max |g_ref| + 1e-6 per tensor). A wrong
 *   backward term is off by O(1); with resets, the driver's gradients without them are rejected.
 *   Layers whose optimizer takes LaCT's block step (trait block_step; Newton–Schulz with muon):
 *   the function is ill-conditioned at float32 resolution — outputs and gradients move by up to
 *   8e-3 of their size when the inputs change by one rounding (tests/test_lact_composed.c
 *   measures this floor per case). Two float32 evaluations (the entry and the generic driver)
 *   are then not compared with each other: each is compared with a float64 LaCT
 *   (tests/lact_ref.h) on the same inputs and initial weights, |got − truth| ≤ max(1e-2 ·
 *   max |truth|, TRUTH_FLOORS · floor) + 1e-5, where floor is the case's own: the largest change
 *   of the driver's output (and of each state tensor) when every input moves by one float32
 *   rounding (six directions). TRUTH_FLOORS = 2: the floor rounds only the inputs, an
 *   evaluation rounds every intermediate value as well. Measured (TTT_TEST_VERBOSE prints each):
 *   ≤ 0.80 floors for every LaCT case on both sides with GCC; with clang (which contracts
 *   a·b + c into one rounding) ≤ 1.39 but for one case, the chunkwise entry at T = 40 with
 *   per-token gates, state 1, at 1.83 floors (the driver 0.30) — the case where the two, compared
 *   with each other, were 2.1 floors apart: the sum of their errors. Wrong variants of the
 *   reference (no in-block decay weights, LaCT's coefficients instead of Muon's) miss by
 *   2·10³–9·10⁴ floors. Gradients keep 3e-2 · max |g_ref| against the driver (docs/forms.md
 *   "The contract every entry meets"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_maps.h"
#include "lact_ref.h"
#include "internal.h"
#include "testutil.h"

#define D 4
#define CHUNK 3
#define FWD_ATOL 1e-5
/* Both sides are float32 evaluations: each is within c·ε·√(n·T) of max |exact| (the random walk
 * of n roundings of at most ε = 2^-24 per token, carried over T tokens by a non-expansive step:
 * unit keys, β‖k‖² ≤ 2, gates ≤ 1), so they differ by at most twice that. n = 8D + 10: the widest
 * step, TTT-MLP's, has 4D-term products forward and backward, the norm's two D-term sums and
 * some ten element-wise operations. c = 6: the largest of the ≤ 40·4 entries lies within
 * √(2 ln 160) ≈ 3.2 deviations, with room for the optimizers' divisions (Adam's √v). */
#define FWD_RTOL_T(T) (2 * 6 * 0x1p-24 * sqrt((8.0 * D + 10) * (double)(T)))
#define fwd_close(got, want, n, L, floor, msg, len)                                             \
    fwd_close_at((got), (want), (n), (L), (floor), T, (msg), (len))
#define GRAD_RTOL_NS 3e-2
#define FWD_TOL_NS 1e-2
#define TRUTH_FLOORS 2.0

/* Newton–Schulz amplifies float32 rounding (see the header). */
static int ill_conditioned(const ttt_layer *L) { return ttt_layer_optim_traits(L).block_step; }

/* The gradients' tolerance relative to the largest gradient entry (docs/hardening.md "Portable
 * tolerances"; the bound of tests/test_layer_grad.c and tests/test_form_grads.c), ε = 2^-24:
 *   - each path's backward repeats the forward's roundings transposed: 2n per state entry per
 *     token, n = 8D + T + 10 (the forward's count above, plus a block's or chunk's sums over at
 *     most T terms), a walk of 6ε·√(2n·T) on the scale of the compared gradient's largest entry
 *     (for log α's, the largest gradient entry over every input and state: it is a reverse
 *     cumulative sum of terms on the scale of the others, and may cancel far below them); two
 *     float32 paths, twice that (2.7e-5 at T = 13);
 *   - the chunked forms keep the cumulative log gates G = Σ max(log α, −104) in float32, so a
 *     factor exp(G_i − G_j) carries a relative 2ε·G_max; G_max ≤ Σ_t |max(log α_t, −104)| over
 *     the sequence (104 a hard reset), taken whole since the forms chunk by their own sizes:
 *     + 2·2ε·G_max (one path sums gates).
 * Not for LaCT's block step (GRAD_RTOL_NS; see the header). */
static double grad_rtol(int T, double G_max) {
    const double eps = 0x1p-24, n = 8.0 * D + T + 10;
    return 2 * 6 * eps * sqrt(2 * n * T) + 2 * 2 * eps * G_max;
}

/* G_max of grad_rtol for n_la gates of T tokens (one or D per token; la NULL: none) */
static double gate_span(int T, const float *la, size_t n_la) {
    const size_t per = n_la > (size_t)T ? n_la / (size_t)T : 1; /* gates per token */
    double G = 0; /* the largest over the key dimensions of a gate per key */
    for (size_t j = 0; la && j < per; j++) {
        double Gj = 0;
        for (size_t t = 0; t < (size_t)T; t++)
            Gj += fabs(fmax((double)la[t * per + j], (double)TTT_GATE_RESET));
        G = fmax(G, Gj);
    }
    return G;
}

/* The forward tolerance for want: elementwise, or relative to max |want| and at least twice
 * the case's floor (ill-conditioned; see the header). */
static int fwd_close_at(const float *got, const float *want, size_t n, const ttt_layer *L,
                        double floor, int T, char *msg, size_t len) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    if (!ill_conditioned(L)) return tu_close_f(got, want, n, FWD_ATOL, FWD_RTOL_T(T), msg, len);
    return tu_close_f(got, want, n, fmax(FWD_TOL_NS * mx, 2.0 * floor) + FWD_ATOL, 0.0, msg, len);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Every element one float32 step up or down, in a copy: pattern 0 all up, 1 all down, 2…
 * a pseudo-random sign per element. */
static ttt_tensor *one_rounding(ttt_ctx *c, const ttt_tensor *x, int pattern) {
    if (!x) return NULL;
    ttt_tensor *y = ttt_tensor_new(c, x->ndim, x->shape);
    for (size_t i = 0; i < x->n; i++) {
        const unsigned h = (unsigned)(i * 2654435761u) >> (pattern + 3);
        const int up = pattern == 0 ? 1 : pattern == 1 ? 0 : (int)(h & 1);
        y->data[i] = nextafterf(x->data[i], up ? INFINITY : -INFINITY);
    }
    return y;
}
#define FLOOR_PATTERNS 6

static const int Ts[] = {13, 40};

static void parse_preset(ttt_layer *L, const ttt_preset *p, int features) {
    char text[256];
    snprintf(text, sizeof text,
             "layer: {preset: %s, chunk: %d, mini_batch: %d, features: %d, form: generic}\n",
             p->name, CHUNK, p->mini_batch > 1 ? 4 : 1, features);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), D, D, L, &err);
    ttt_cfg_free(root);
    ck_assert_msg(s == TTT_OK, "%s: %s", p->name, err.msg);
}

/* Presets with a feature map (normalize: ratio) run their forms on φ(q), φ(k) of the map's
 * width: the number of features is chosen so that the width is D, and the forms, which see
 * features as keys, are called here on inputs of that width (the maps themselves are tested in
 * tests/test_feature_maps.c). */
static int build_layer(ttt_layer *L, const ttt_preset *p) {
    parse_preset(L, p, 64);
    if (L->d_phi == D) return 1;
    for (int m = 1; m <= D && L->d_phi != D; m++)
        if (L->fmap->width(D, m) == D) parse_preset(L, p, m);
    ck_assert_msg(L->d_phi == D, "%s: no number of features gives width %d", p->name, D);
    return 1;
}

static const char *gate_name(ttt_gate_shape g) {
    return g == TTT_FORM_GATE_NONE    ? "no gate"
           : g == TTT_FORM_GATE_TOKEN ? "gate (T)"
                                      : "gate (T, d_k)";
}

/* The inputs a layer call makes: with a constant decay a "no gate" call passes log α per token,
 * so that shape does not occur. */
static int call_possible(const ttt_layer *L, ttt_gate_shape g) {
    return !(g == TTT_FORM_GATE_NONE && L->decay != 1.0f);
}

typedef struct inputs {
    ttt_tensor *q, *k, *v, *eta, *la;
} inputs;

/* Hard resets (docs/math.md §0 "Hard resets"): the tokens whose gate is a reset, in a call of T
 * tokens — the first token, one inside a chunk of CHUNK = 3 (token 4), the first and the last
 * token of a chunk (6 and 8), and a run of resets covering a whole chunk of 3 and of 4 (the
 * block of the b = 4 presets): tokens 8…12 for T = 13, which end at the last token; tokens
 * 20…25 and two more (33, 34) for T = 40, which end 5 tokens before it so that the final
 * state still depends on the tokens after them. */
static int is_reset(int t, int T) {
    if (t == 0 || t == 4 || t == 6 || t == 8) return 1;
    if (T <= 13) return t >= 8;
    return (t >= 20 && t <= 25) || t == 33 || t == 34;
}
/* The values a reset takes, in turn: −inf, and finite gates whose retention underflows (−1e30
 * also swallows every small gate after it in a float64 cumulative sum). */
static const float reset_values[] = {-INFINITY, -1e30f, -1e4f, -200.0f};

/* resets: the gates of is_reset's tokens replaced by reset_values (with a vector gate on every
 * key dimension at every other reset, on the first half of them at the others); the other
 * inputs are those of the same call without resets. */
static inputs make_inputs(ttt_ctx *c, ttt_rng *rng, const ttt_layer *L, int T, ttt_gate_shape g,
                          int with_eta, int resets) {
    inputs in = {0};
    in.q = ttt_tensor_2d(c, T, D);
    in.k = ttt_tensor_2d(c, T, D);
    in.v = ttt_tensor_2d(c, T, D);
    ttt_rng_fill_normal(rng, in.q->data, in.q->n, 0.0f, 0.5f);
    ttt_rng_fill_normal(rng, in.k->data, in.k->n, 0.0f, 1.0f);
    for (int t = 0; t < T; t++) { /* unit keys */
        float *kt = in.k->data + (size_t)t * D;
        double s = 0;
        for (int j = 0; j < D; j++) s += (double)kt[j] * kt[j];
        for (int j = 0; j < D; j++) kt[j] = (float)(kt[j] / sqrt(s));
    }
    ttt_rng_fill_normal(rng, in.v->data, in.v->n, 0.0f, 1.0f);
    if (with_eta) {
        in.eta = ttt_tensor_1d(c, T);
        ttt_rng_fill_uniform(rng, in.eta->data, in.eta->n, 0.1f, 1.0f);
    }
    if (g == TTT_FORM_GATE_KEY) {
        in.la = ttt_tensor_2d(c, T, D);
        ttt_rng_fill_uniform(rng, in.la->data, in.la->n, -0.2f, -0.01f);
    } else if (g == TTT_FORM_GATE_TOKEN) {
        in.la = ttt_tensor_1d(c, T);
        if (L->decay != 1.0f) /* the constant decay, as ttt_layer_forward passes it */
            ttt_tensor_fill(in.la, logf(L->decay));
        else
            ttt_rng_fill_uniform(rng, in.la->data, in.la->n, -0.2f, -0.01f);
    }
    if (resets && in.la) {
        const int gk = g == TTT_FORM_GATE_KEY ? D : 1;
        for (int t = 0, r = 0; t < T; t++) {
            if (!is_reset(t, T)) continue;
            const float x = reset_values[r % 4];
            for (int j = 0; j < (gk > 1 && r % 2 ? gk / 2 : gk); j++) in.la->data[(size_t)t * gk + j] = x;
            r++;
        }
    }
    return in;
}

/* Every state tensor of st, in ttt_layer_state_info order. */
static int state_tensors(const ttt_layer_state *st, ttt_tensor **out) {
    int n = 0;
    for (int w = 0; w < st->n_w; w++) out[n++] = st->W[w];
    for (int w = 0; w < st->n_w; w++)
        for (int s = 0; s < st->n_opt; s++) out[n++] = st->opt[w][s];
    if (st->z) out[n++] = st->z;
    return n;
}

/* The same initial state for every run (models with random initial weights draw from rng 7). */
static void init_state(ttt_ctx *c, const ttt_layer *L, ttt_layer_state *st) {
    ttt_rng r;
    ttt_rng_seed(&r, 7);
    ttt_layer_state_init(c, L, st, &r);
}

/* Calls f(entry, layer, preset, T, gate, eta, resets) for every entry × preset × call shape the
 * entry accepts, the gated ones with and without hard resets; returns how many; counts per entry
 * in covered[]. */
typedef void (*case_fn)(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                        ttt_gate_shape g, int with_eta, int resets, void *arg);

static int each_case(case_fn f, void *arg, int *covered) {
    int n = 0;
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        if (e->device != TTT_DEVICE_HOST) continue; /* device entries: device_entries_* below */
        for (int j = 0; j < ttt_preset_count(); j++) {
            const ttt_preset *p = ttt_preset_at(j);
            ttt_layer L;
            build_layer(&L, p);
            L.form = e->form;
            if (e->available(&L, NULL)) continue;
            for (int ti = 0; ti < (int)(sizeof Ts / sizeof Ts[0]); ti++)
                for (int g = TTT_FORM_GATE_NONE; g <= TTT_FORM_GATE_KEY; g++)
                    for (int with_eta = 0; with_eta < 2; with_eta++)
                        for (int resets = 0; resets < (g == TTT_FORM_GATE_NONE ? 1 : 2);
                             resets++) {
                            if (!call_possible(&L, (ttt_gate_shape)g)) continue;
                            const ttt_form_inputs in = {.T = Ts[ti], .eta = with_eta,
                                                        .gate = (ttt_gate_shape)g, .tape = 0};
                            if (e->available(&L, &in)) continue;
                            f(e, &L, p, Ts[ti], (ttt_gate_shape)g, with_eta, resets, arg);
                            n++;
                            covered[i]++;
                        }
        }
    }
    return n;
}

static void check_covered(const int *covered) {
    for (int i = 0; i < ttt_form_count(); i++)
        ck_assert_msg(covered[i] > 0 || ttt_form_at(i)->device != TTT_DEVICE_HOST,
                      "form %s/%s: no preset reaches it", ttt_form_at(i)->family,
                      ttt_form_at(i)->form);
}

/* ---- the float64 truth of the ill-conditioned (LaCT) cases ---- */

typedef struct lact_truth {
    double *O, *W[3], *M[3]; /* (T, D) outputs; final weights and momentum */
} lact_truth;

static double *to_f64(const ttt_tensor *t) {
    if (!t) return NULL;
    double *x = malloc(sizeof(double) * t->n);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < t->n; i++) x[i] = t->data[i];
    return x;
}

/* The float64 LaCT (tests/lact_ref.h) of this case: the lact preset's tuple (SwiGLU, dot loss,
 * large_batch with Newton–Schulz at the muon coefficients, renormalized columns, no momentum,
 * apply_then_update, per-block steps), here with b = 4 and the inputs and initial weights of
 * the float32 runs. A block_step preset with other options needs its own case here. */
static void lact_reference(lact_truth *r, const ttt_layer *L, const ttt_preset *p, int T,
                           ttt_gate_shape g, const inputs *in, const ttt_layer_state *s0) {
    char opt[256];
    ttt_preset_optimizer_text(p, opt, sizeof opt);
    ck_assert_msg(strcmp(p->name, "lact") == 0 && strcmp(L->optim->name, "large_batch") == 0 &&
                      strcmp(L->model->name, "swiglu") == 0 && strcmp(L->loss->name, "dot") == 0 &&
                      !L->pos_inverse && L->decay == 1.0f && L->order == TTT_ORDER_APPLY_THEN_UPDATE,
                  "no float64 reference for preset %s (%s)", p->name, opt);
    ck_assert_msg(ttt_layer_optim_traits(L).mu == 0.0, "%s: momentum", p->name);
    const lcase c = {.name = p->name, .T = T, .b = L->mini_batch, .d_k = D, .d_v = D,
                     .lr = L->lr, .mu = 0.0f, .muon = 1, .ns_lact = 0, .renorm = RENORM_COLS,
                     .squared = 0, .pos_inverse = 0, .eta = in->eta != NULL,
                     .gate = g == TTT_FORM_GATE_TOKEN ? GATE_TOKEN : GATE_NONE};
    ck_assert_int_eq(s0->n_w, 3);
    double *x[LR_N] = {to_f64(in->q), to_f64(in->k), to_f64(in->v), to_f64(in->eta),
                       to_f64(in->la), to_f64(s0->W[0]), to_f64(s0->W[1]), to_f64(s0->W[2])};
    r->O = calloc((size_t)T * D, sizeof(double));
    for (int w = 0; w < 3; w++) {
        r->W[w] = calloc(s0->W[w]->n, sizeof(double));
        r->M[w] = calloc(s0->W[w]->n, sizeof(double));
    }
    ref_lact(&c, x, &x[LR_W0], r->O, r->W, r->M, VAR_OK);
    for (int i = 0; i < LR_N; i++) free(x[i]);
}

/* A float32 evaluation of an ill-conditioned case against the float64 truth: within
 * FWD_TOL_NS of the largest value or TRUTH_FLOORS times the case's floor, whichever is larger
 * (see the header). */
static int f64_close(const float *got, const double *want, size_t n, double floor, char *msg,
                     size_t len) {
    double mx = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (d > worst) worst = d, at = i;
    }
    const double tol = fmax(FWD_TOL_NS * mx, TRUTH_FLOORS * floor) + FWD_ATOL;
    if (getenv("TTT_TEST_VERBOSE"))
        printf("float64: error %.3e = %.3f floors (floor %.3e, max %.3e)\n", worst,
               floor > 0 ? worst / floor : 0.0, floor, mx);
    if (worst <= tol) return 1;
    snprintf(msg, len, "element %zu: %.9g vs %.9g, error %.3e > %.3e (floor %.3e)", at,
             (double)got[at], want[at], worst, tol, floor);
    return 0;
}

/* ---- (a) forward = the generic driver ---- */

static void forward_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                         ttt_gate_shape g, int with_eta, int resets, void *arg) {
    (void)arg;
    tu_fixture f;
    tu_fx_init(&f, 1000 + (uint64_t)T);
    ttt_rng rng0 = f.rng; /* the same draws again: the call without its resets */
    inputs in = make_inputs(&f.ctx, &f.rng, L, T, g, with_eta, resets);
    /* with resets, the perturbed input each comparison must reject: the same call with the
     * reset gates back at their drawn values (a form that ignored the resets) */
    const inputs in0 = resets ? make_inputs(&f.ctx, &rng0, L, T, g, with_eta, 0) : in;
    const char *rs = resets ? ", resets" : "";
    ttt_layer_state s_ref, s_got, s_ref_init;
    init_state(&f.ctx, L, &s_ref);
    init_state(&f.ctx, L, &s_got);
    init_state(&f.ctx, L, &s_ref_init); /* the initial weights, for the float64 reference */
    ttt_tensor *o_ref = ttt_tensor_2d(&f.ctx, T, D), *o = ttt_tensor_2d(&f.ctx, T, D);
    ttt_error err = {0};
    const int vec = g == TTT_FORM_GATE_KEY;
    ck_assert_msg(ttt_forward_generic(&f.ctx, L, o_ref, &s_ref, in.q, in.k, in.v, in.eta, in.la,
                                      vec, &err) == TTT_OK,
                  "%s", err.msg);
    const ttt_form_args a = {.q = in.q, .k = in.k, .v = in.v, .eta = in.eta,
                             .log_alpha = in.la, .alpha_vec = vec, .fused = 1};
    ck_assert_msg(e->forward(&f.ctx, L, o, &s_got, &a, &err) == TTT_OK, "%s/%s %s: %s",
                  e->family, e->form, p->name, err.msg);
    ttt_tensor *sr[TTT_BATCH_MAX_STATE], *sg[TTT_BATCH_MAX_STATE], *sp[TTT_BATCH_MAX_STATE];
    const int n = state_tensors(&s_ref, sr);
    ck_assert_int_eq(state_tensors(&s_got, sg), n);
    /* the floor of an ill-conditioned case: the driver on inputs one rounding away, in
     * FLOOR_PATTERNS directions */
    double floor_o = 0, floor_s[TTT_BATCH_MAX_STATE] = {0};
    for (int pat = 0; ill_conditioned(L) && pat < FLOOR_PATTERNS; pat++) {
        ttt_layer_state s_p;
        init_state(&f.ctx, L, &s_p);
        ttt_tensor *o_p = ttt_tensor_2d(&f.ctx, T, D);
        ck_assert_msg(ttt_forward_generic(&f.ctx, L, o_p, &s_p, one_rounding(&f.ctx, in.q, pat),
                                          one_rounding(&f.ctx, in.k, pat),
                                          one_rounding(&f.ctx, in.v, pat),
                                          one_rounding(&f.ctx, in.eta, pat),
                                          one_rounding(&f.ctx, in.la, pat), vec, &err) == TTT_OK,
                      "%s", err.msg);
        floor_o = fmax(floor_o, max_abs_diff(o_p->data, o_ref->data, o->n));
        ck_assert_int_eq(state_tensors(&s_p, sp), n);
        for (int i = 0; i < n; i++)
            floor_s[i] = fmax(floor_s[i], max_abs_diff(sp[i]->data, sr[i]->data, sr[i]->n));
    }
    char msg[256];
    if (ill_conditioned(L)) {
        /* each float32 evaluation, the entry's and the driver's, against the float64 truth */
        lact_truth truth;
        lact_reference(&truth, L, p, T, g, &in, &s_ref_init);
        const ttt_tensor *outs[2][1 + TTT_BATCH_MAX_STATE] = {{o}, {o_ref}};
        for (int i = 0; i < n; i++) outs[0][1 + i] = sg[i], outs[1][1 + i] = sr[i];
        for (int side = 0; side < 2; side++)
            for (int i = 0; i < 1 + n; i++) {
                const double *want = i == 0 ? truth.O : i <= 3 ? truth.W[i - 1] : NULL;
                const double fl = i == 0 ? floor_o : floor_s[i - 1];
                /* the optimizer's state (the renormalization norms, constants of the layer):
                 * the same on both sides */
                const ttt_tensor *t = outs[side][i];
                const int ok = want ? f64_close(t->data, want, t->n, fl, msg, sizeof msg)
                                    : fwd_close(t->data, sr[i - 1]->data, t->n, L, fl, msg,
                                                sizeof msg);
                char what[32];
                snprintf(what, sizeof what, i ? "state %d" : "o", i - 1);
                ck_assert_msg(ok, "%s/%s, preset %s, T %d, %s%s%s: %s, %s against %s: %s",
                              e->family, e->form, p->name, T, gate_name(g),
                              with_eta ? ", eta" : "", rs, side ? "generic driver" : "entry",
                              what, want ? "float64" : "the driver", msg);
            }
        if (resets) { /* the truth without the resets is rejected */
            lact_truth t0;
            lact_reference(&t0, L, p, T, g, &in0, &s_ref_init);
            ck_assert_msg(!f64_close(o->data, t0.O, o->n, floor_o, msg, sizeof msg),
                          "%s/%s, preset %s, T %d, %s%s: o is as close to the float64 truth "
                          "without the resets",
                          e->family, e->form, p->name, T, gate_name(g), with_eta ? ", eta" : "");
            free(t0.O);
            for (int w = 0; w < 3; w++) free(t0.W[w]), free(t0.M[w]);
        }
        free(truth.O);
        for (int w = 0; w < 3; w++) free(truth.W[w]), free(truth.M[w]);
        tu_fx_free(&f);
        return;
    }
    ck_assert_msg(fwd_close(o->data, o_ref->data, o->n, L, floor_o, msg, sizeof msg),
                  "%s/%s, preset %s, T %d, %s%s%s: o: %s", e->family, e->form, p->name, T,
                  gate_name(g), with_eta ? ", eta" : "", rs, msg);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fwd_close(sg[i]->data, sr[i]->data, sr[i]->n, L, floor_s[i], msg, sizeof msg),
                      "%s/%s, preset %s, T %d, %s%s%s: state %d: %s", e->family, e->form,
                      p->name, T, gate_name(g), with_eta ? ", eta" : "", rs, i, msg);
    if (resets) { /* the driver without the resets is rejected */
        ttt_layer_state s0;
        init_state(&f.ctx, L, &s0);
        ttt_tensor *o0 = ttt_tensor_2d(&f.ctx, T, D);
        ck_assert_msg(ttt_forward_generic(&f.ctx, L, o0, &s0, in0.q, in0.k, in0.v, in0.eta,
                                          in0.la, vec, &err) == TTT_OK,
                      "%s", err.msg);
        ck_assert_msg(!fwd_close(o->data, o0->data, o->n, L, floor_o, msg, sizeof msg),
                      "%s/%s, preset %s, T %d, %s%s: o is as close to the driver without the "
                      "resets",
                      e->family, e->form, p->name, T, gate_name(g), with_eta ? ", eta" : "");
    }
    tu_fx_free(&f);
}

START_TEST(forward_equals_generic_driver) {
    int covered[64] = {0};
    ck_assert_int_le(ttt_form_count(), 64);
    const int n = each_case(forward_case, NULL, covered);
    ck_assert_int_gt(n, 0);
    check_covered(covered);
}
END_TEST

/* ---- (b) forward_diff's gradients = the generic driver's ---- */

enum { P_Q, P_K, P_V, P_ETA, P_LA, P_STATE }; /* then one per state tensor */
#define N_P (P_STATE + TTT_BATCH_MAX_STATE)

typedef struct grads {
    float *g[N_P];
    size_t n[N_P];
    float *la; /* a copy of the gates (n[P_LA] of them), or NULL */
} grads;

/* One recorded forward (e NULL: the generic driver) and the backward of
 * Σ R_o ⊙ o + Σ R_i ⊙ final state_i; the gradients of every input and initial state tensor. */
static void run_grads(grads *out, tu_tape_fixture *fx, const ttt_form_entry *e, int fused,
                      const ttt_layer *L, int T, ttt_gate_shape g, int with_eta, int resets) {
    ttt_ctx *c = &fx->ctx;
    ttt_tape_reset(c->tape);
    ttt_rng rng;
    ttt_rng_seed(&rng, 4242 + (uint64_t)T);
    inputs in = make_inputs(c, &rng, L, T, g, with_eta, resets);
    ttt_layer_state st;
    init_state(c, L, &st);
    ttt_tensor *p[N_P] = {in.q, in.k, in.v, in.eta, in.la};
    ttt_tensor *s0[TTT_BATCH_MAX_STATE];
    const int ns = state_tensors(&st, s0);
    for (int i = 0; i < ns; i++) p[P_STATE + i] = s0[i];
    memset(out, 0, sizeof *out);
    if (in.la) {
        out->la = tu_zalloc(c, in.la->n * sizeof(float));
        memcpy(out->la, in.la->data, in.la->n * sizeof(float));
    }
    for (int i = 0; i < P_STATE + ns; i++) {
        if (!p[i]) continue;
        out->n[i] = p[i]->n;
        out->g[i] = tu_zalloc(c, p[i]->n * sizeof(float));
        ttt_tensor_set_param(p[i], out->g[i]);
    }
    ttt_tensor *o = ttt_tensor_2d(c, T, D);
    ttt_error err = {0};
    const int vec = g == TTT_FORM_GATE_KEY;
    ttt_status s;
    if (!e) {
        s = ttt_forward_generic(c, L, o, &st, in.q, in.k, in.v, in.eta, in.la, vec, &err);
    } else {
        const ttt_form_args a = {.q = in.q, .k = in.k, .v = in.v, .eta = in.eta,
                                 .beta = in.eta ? ttt_scale(c, in.eta, L->lr) : NULL,
                                 .log_alpha = in.la, .alpha_vec = vec, .fused = fused};
        s = e->forward_diff(c, L, o, &st, &a, &err);
    }
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ttt_tensor *outs[1 + TTT_BATCH_MAX_STATE];
    outs[0] = o;
    const int n_out = 1 + state_tensors(&st, outs + 1);
    ttt_rng rr;
    ttt_rng_seed(&rr, 99);
    ttt_tensor *loss = NULL;
    for (int i = 0; i < n_out; i++) {
        ttt_tensor *R = ttt_tensor_new(c, outs[i]->ndim, outs[i]->shape);
        ttt_rng_fill_normal(&rr, R->data, R->n, 0.0f, 1.0f);
        ttt_tensor *term = ttt_sum(c, ttt_mul(c, outs[i], R));
        loss = loss ? ttt_add(c, loss, term) : term;
    }
    ttt_backward(c, loss);
}

/* max |got − ref| (NaN counts as infinitely far) and max |ref| of one gradient tensor */
static double grad_err(const float *got, const float *ref, size_t n, double *mx) {
    double err = 0;
    *mx = 0;
    for (size_t j = 0; j < n; j++) {
        *mx = fmax(*mx, fabs(ref[j]));
        const double d = fabs((double)got[j] - ref[j]);
        if (d > err || isnan(d)) err = isnan(d) ? INFINITY : d;
    }
    return err;
}

static void diff_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                      ttt_gate_shape g, int with_eta, int resets, void *arg) {
    (void)arg;
    /* gradients at the small size only (the tape of the driver is long), but for the resets,
     * whose pattern at T = 40 keeps tokens after them (make_inputs); not at T = 40 for the
     * ill-conditioned LaCT, whose gradients at that length leave GRAD_RTOL_NS without resets
     * too (Newton–Schulz, see the header) */
    if (T > Ts[0] && (!resets || ill_conditioned(L))) return;
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    grads ref, got, ref0;
    run_grads(&ref, &fx, NULL, 0, L, T, g, with_eta, resets);
    /* with resets, the perturbed input the comparison must reject: the driver's gradients of the
     * same call with the reset gates back at their drawn values */
    if (resets) run_grads(&ref0, &fx, NULL, 0, L, T, g, with_eta, 0);
    /* Newton–Schulz amplifies rounding (see the header); elsewhere relative to the largest entry
     * of the compared gradient, but for log α's: the largest gradient entry G over the inputs
     * and states (grad_rtol) */
    double G = 0;
    for (int i = 0; i < N_P; i++)
        for (size_t j = 0; ref.g[i] && j < ref.n[i]; j++) G = fmax(G, fabs(ref.g[i][j]));
    const double tol_ns = ill_conditioned(L) ? GRAD_RTOL_NS : 0;
    const double rtol_walk = grad_rtol(T, gate_span(T, ref.la, ref.n[P_LA]));
    const char *rs = resets ? ", resets" : "";
    for (int fused = 0; fused < 2; fused++) {
        run_grads(&got, &fx, e, fused, L, T, g, with_eta, resets);
        int rejected = 0, scaled_rejected = 0;
        for (int i = 0; i < N_P; i++) {
            if (!ref.g[i]) continue;
            ck_assert_uint_eq(got.n[i], ref.n[i]);
            double mx;
            const double err = grad_err(got.g[i], ref.g[i], ref.n[i], &mx);
            const double tol = ill_conditioned(L) ? tol_ns * mx + 1e-6
                               : rtol_walk * (i == P_LA ? G : mx);
            /* two sites, so that the margin report tells the derived bound from LaCT's */
            if (ill_conditioned(L))
                TU_ASSERT_LE(err, tol, "%s/%s (%s), preset %s, T %d, %s%s%s: gradient %d: max "
                             "error %.3g, max |g| %.3g", e->family, e->form,
                             fused ? "fused" : "composed", p->name, T, gate_name(g),
                             with_eta ? ", eta" : "", rs, i, err, mx);
            else
                TU_ASSERT_LE(err, tol, "%s/%s (%s), preset %s, T %d, %s%s%s: gradient %d: max "
                             "error %.3g, max |g| %.3g", e->family, e->form,
                             fused ? "fused" : "composed", p->name, T, gate_name(g),
                             with_eta ? ", eta" : "", rs, i, err, mx);
            /* the control of every case: the entry's gradients scaled by 1.05 */
            double scaled = 0;
            for (size_t j = 0; j < ref.n[i]; j++)
                scaled = fmax(scaled, fabs(1.05 * got.g[i][j] - ref.g[i][j]));
            scaled_rejected += !(scaled <= tol);
            if (resets) {
                double mx0;
                if (i < P_STATE) {
                    const double e0 = grad_err(got.g[i], ref0.g[i], ref.n[i], &mx0);
                    rejected += e0 > tol;
                    if (getenv("TTT_TEST_VERBOSE"))
                        fprintf(stderr, "%s %s T %d resets: input %d: %.3g tolerances\n",
                                e->form, p->name, T, i, e0 / tol);
                }
            }
        }
        ck_assert_msg(scaled_rejected > 0,
                      "%s/%s (%s), preset %s, T %d, %s%s%s: the gradients scaled by 1.05 pass",
                      e->family, e->form, fused ? "fused" : "composed", p->name, T,
                      gate_name(g), with_eta ? ", eta" : "", rs);
        if (!resets) continue;
        /* the gradient of a reset gate is 0 (docs/math.md §0 "Hard resets"), not a rounding */
        for (size_t j = 0; j < got.n[P_LA]; j++)
            ck_assert_msg(!(got.la[j] < TTT_GATE_RESET) || got.g[P_LA][j] == 0.0f,
                          "%s/%s (%s), preset %s, T %d, %s%s: gate %zu (%g) has gradient %g",
                          e->family, e->form, fused ? "fused" : "composed", p->name, T,
                          gate_name(g), with_eta ? ", eta" : "", j, (double)got.la[j],
                          (double)got.g[P_LA][j]);
        /* every input's gradient, the gates' included, tells the resets from their absence (the
         * initial state's need not: a state the gates do not reach, the ratio normalizer z, has
         * the same gradient either way) */
        int n_grads = 0;
        for (int i = 0; i < P_STATE; i++) n_grads += ref.g[i] != NULL;
        ck_assert_msg(rejected == n_grads,
                      "%s/%s (%s), preset %s, T %d, %s%s: only %d of %d gradients tell the "
                      "driver without the resets from the one with them",
                      e->family, e->form, fused ? "fused" : "composed", p->name, T, gate_name(g),
                      with_eta ? ", eta" : "", rejected, n_grads);
    }
    tu_tape_fx_free(&fx);
}

START_TEST(forward_diff_gradients_equal_generic_driver) {
    int covered[64] = {0};
    each_case(diff_case, NULL, covered);
    check_covered(covered);
}
END_TEST

/* ---- (c) scratch_bytes ≥ the measured peak ---- */

static void scratch_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                         ttt_gate_shape g, int with_eta, int resets, void *arg) {
    (void)arg;
    tu_fixture f;
    tu_fx_init(&f, 5);
    inputs in = make_inputs(&f.ctx, &f.rng, L, T, g, with_eta, resets);
    ttt_layer_state st;
    init_state(&f.ctx, L, &st);
    ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, D);
    /* the form's own allocations, alone in a fresh arena */
    ttt_arena a;
    ttt_arena_init(&a, 1 << 16);
    ttt_ctx c = {.arena = &a};
    const ttt_form_args args = {.q = in.q, .k = in.k, .v = in.v, .eta = in.eta,
                                .log_alpha = in.la, .alpha_vec = g == TTT_FORM_GATE_KEY,
                                .fused = 1};
    ttt_error err = {0};
    ck_assert_msg(e->forward(&c, L, o, &st, &args, &err) == TTT_OK, "%s", err.msg);
    const double est = e->scratch_bytes(L, T);
    ck_assert_msg(est >= (double)a.peak,
                  "%s/%s, preset %s, T %d, %s: scratch_bytes %.0f < measured peak %zu",
                  e->family, e->form, p->name, T, gate_name(g), est, a.peak);
    /* and the layer's whole estimate covers the layer's whole forward */
    ttt_layer La = *L;
    ttt_arena_reset(&a);
    a.peak = 0;
    init_state(&f.ctx, &La, &st);
    ck_assert_msg(ttt_layer_forward(&c, &La, o, &st, in.q, in.k, in.v, in.eta, in.la, &err) ==
                      TTT_OK,
                  "%s", err.msg);
    ck_assert_msg(ttt_layer_forward_bytes(&La, T) >= (double)a.peak,
                  "%s/%s, preset %s, T %d: ttt_layer_forward_bytes %.0f < measured peak %zu",
                  e->family, e->form, p->name, T, ttt_layer_forward_bytes(&La, T), a.peak);
    ttt_arena_free(&a);
    tu_fx_free(&f);
}

START_TEST(scratch_covers_measured_peak) {
    int covered[64] = {0};
    each_case(scratch_case, NULL, covered);
    check_covered(covered);
}
END_TEST

/* ---- (d) forward_strided = forward, bit for bit ---- */

#define H 3   /* rows of the sequence are H·D floats apart, like one head of (T, H, D) */
#define HEAD 1

/* rows (T, cols) into head HEAD of a (T, H, cols) array */
static float *spread(const float *x, int T, int cols) {
    float *y = calloc((size_t)T * H * cols, sizeof(float));
    for (int t = 0; t < T; t++)
        memcpy(y + ((size_t)t * H + HEAD) * cols, x + (size_t)t * cols, cols * sizeof(float));
    return y;
}

static void strided_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                         ttt_gate_shape g, int with_eta, int resets, void *arg) {
    int *n_strided = arg;
    if (!e->forward_strided || L->model->n_weights != 1 || ttt_layer_opt_state_count(L) != 0)
        return;
    ++*n_strided;
    tu_fixture f;
    tu_fx_init(&f, 31);
    inputs in = make_inputs(&f.ctx, &f.rng, L, T, g, with_eta, resets);
    ttt_layer_state st;
    init_state(&f.ctx, L, &st);
    ttt_tensor *S = ttt_tensor_copy(&f.ctx, st.W[0]);
    ttt_tensor *o = ttt_tensor_2d(&f.ctx, T, D);
    const int vec = g == TTT_FORM_GATE_KEY, gk = vec ? D : 1;
    const ttt_form_args a = {.q = in.q, .k = in.k, .v = in.v, .eta = in.eta, .log_alpha = in.la,
                             .alpha_vec = vec, .fused = 1};
    ttt_error err = {0};
    ck_assert(e->forward(&f.ctx, L, o, &st, &a, &err) == TTT_OK);
    /* β = θ·η as the entries form it */
    float *beta = malloc(sizeof(float) * (size_t)(T ? T : 1));
    for (int t = 0; t < T; t++) beta[t] = L->lr * (in.eta ? in.eta->data[t] : 1.0f);
    float *qs = spread(in.q->data, T, D), *ks = spread(in.k->data, T, D);
    float *vs = spread(in.v->data, T, D), *bs = spread(beta, T, 1);
    float *ls = in.la ? spread(in.la->data, T, gk) : NULL;
    float *os = calloc((size_t)T * H * D, sizeof(float));
    const ttt_form_strided sa = {
        .o = os + HEAD * D, .q = qs + HEAD * D, .k = ks + HEAD * D, .v = vs + HEAD * D,
        .beta = bs + HEAD, .log_alpha = ls ? ls + HEAD * gk : NULL, .alpha_vec = vec, .T = T,
        .ld = {.o = H * D, .q = H * D, .k = H * D, .v = H * D, .beta = H, .la = H * gk}};
    e->forward_strided(&f.ctx, L, S->data, &sa);
    for (int t = 0; t < T; t++)
        ck_assert_msg(memcmp(os + ((size_t)t * H + HEAD) * D, o->data + (size_t)t * D,
                             D * sizeof(float)) == 0,
                      "%s/%s, preset %s, T %d, %s: strided output row %d differs", e->family,
                      e->form, p->name, T, gate_name(g), t);
    ck_assert_msg(memcmp(S->data, st.W[0]->data, S->n * sizeof(float)) == 0,
                  "%s/%s, preset %s: strided state differs", e->family, e->form, p->name);
    free(beta), free(qs), free(ks), free(vs), free(bs), free(ls), free(os);
    tu_fx_free(&f);
}

START_TEST(forward_strided_equals_forward_bits) {
    int covered[64] = {0}, n_strided = 0;
    each_case(strided_case, &n_strided, covered);
    ck_assert_int_gt(n_strided, 0);
}
END_TEST

/* ---- (e) device entries (form.h `device`) against the generic driver ----
 *
 * Every entry that computes on a CUDA device, for every preset it accepts, gate shape and with
 * and without η, on a (B, T, H, D) batch with a random initial state: its batched forward (output
 * and final state) and batched backward (gradients of q, k, v, η, the given gates and the initial
 * state) against the host's generic driver through the C API (form: generic) on the same inputs.
 * Tolerances: those of (a) and (b) above (both sides are float32 evaluations of the same function
 * in a different order). Each case then changes one value of v and checks that the device's
 * output no longer passes, so that a device entry returning the reference cannot pass. Without a
 * GPU (or a CUDA build) the case says why and checks nothing. */

#undef H /* (d)'s head stride: the batched calls below have a field named H */
enum { DEV_B = 2, DEV_H = 3 };

typedef struct dev_case_buf {
    float *host;
    ttt_device_buffer dev;
    size_t n;
} dev_case_buf;

static void dev_buf(dev_case_buf *b, size_t n, ttt_rng *rng, float lo, float hi, int normal) {
    ttt_error err = {0};
    b->n = n;
    b->host = calloc(n ? n : 1, sizeof(float));
    if (rng && normal) ttt_rng_fill_normal(rng, b->host, n, lo, hi);
    else if (rng) ttt_rng_fill_uniform(rng, b->host, n, lo, hi);
    ck_assert_msg(ttt_device_alloc(&b->dev, ttt_device_cuda(0), n * sizeof(float), NULL,
                                   "test buffer", &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_device_copy(b->dev.ptr, ttt_device_cuda(0), b->host, ttt_device_host(),
                                  n * sizeof(float), NULL, &err) == TTT_OK, "%s", err.msg);
}

static void dev_back(float *dst, const dev_case_buf *b) {
    ttt_error err = {0};
    ck_assert_msg(ttt_device_sync(ttt_device_cuda(0), NULL, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_device_copy(dst, ttt_device_host(), b->dev.ptr, ttt_device_cuda(0),
                                  b->n * sizeof(float), NULL, &err) == TTT_OK, "%s", err.msg);
}

static void dev_free(dev_case_buf *b) {
    free(b->host);
    ttt_device_free(&b->dev);
}

/* got within tol of want (grad_rtol times the largest gradient entry; see device_case) */
static int grad_close(const float *got, const float *want, size_t n, double tol, char *msg,
                      size_t len) {
    return tu_close_f(got, want, n, tol, 0.0, msg, len);
}

static void device_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                        ttt_gate_shape g, int with_eta) {
    const size_t nx = (size_t)DEV_B * T * DEV_H * D, nt = (size_t)DEV_B * T * DEV_H;
    const size_t ns = (size_t)DEV_B * DEV_H * D * D;
    ttt_rng rng;
    ttt_rng_seed(&rng, 99 + (uint64_t)T * 7 + (uint64_t)g * 3 + (uint64_t)with_eta);
    /* gates given as inputs, except a constant decay with per-token gates: then none is given
     * and the entry forms log(decay) per token itself */
    const int given_la = g == TTT_FORM_GATE_KEY || (g == TTT_FORM_GATE_TOKEN && L->decay == 1.0f);
    dev_case_buf q, k, v, eta, la, h0, o, ht, d_o, d_ht, dq, dk, dv, deta, dla, dh0;
    dev_buf(&q, nx, &rng, 0.0f, 0.5f, 1);
    dev_buf(&k, nx, &rng, 0.0f, 0.5f, 1);
    dev_buf(&v, nx, &rng, 0.0f, 1.0f, 1);
    dev_buf(&eta, with_eta ? nt : 0, &rng, 0.1f, 1.0f, 0);
    dev_buf(&la, given_la ? nt * (g == TTT_FORM_GATE_KEY ? D : 1) : 0, &rng, -0.2f, -0.01f, 0);
    dev_buf(&h0, ns, &rng, 0.0f, 0.3f, 1);
    dev_buf(&d_o, nx, &rng, 0.0f, 1.0f, 1);
    dev_buf(&d_ht, ns, &rng, 0.0f, 1.0f, 1);
    dev_buf(&o, nx, NULL, 0, 0, 0);
    dev_buf(&ht, ns, NULL, 0, 0, 0);
    dev_buf(&dq, nx, NULL, 0, 0, 0);
    dev_buf(&dk, nx, NULL, 0, 0, 0);
    dev_buf(&dv, nx, NULL, 0, 0, 0);
    dev_buf(&deta, eta.n, NULL, 0, 0, 0);
    dev_buf(&dla, la.n, NULL, 0, 0, 0);
    dev_buf(&dh0, ns, NULL, 0, 0, 0);
    /* the reference: the same preset through the C API with form: generic on the host */
    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = p->name;
    desc.chunk = CHUNK;
    desc.mini_batch = p->mini_batch > 1 ? 4 : 1;
    desc.form = "generic";
    ttt_layer_handle *ref = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_new(&ref, &desc, D, D, &err) == TTT_OK, "%s", err.msg);
    float *r_o = calloc(nx, 4), *r_ht = calloc(ns, 4), *r_dq = calloc(nx, 4);
    float *r_dk = calloc(nx, 4), *r_dv = calloc(nx, 4), *r_dh0 = calloc(ns, 4);
    float *r_deta = calloc(nt + 1, 4), *r_dla = calloc(la.n + 1, 4);
    const float *h_in[1] = {h0.host}, *h_dout[1] = {d_ht.host};
    float *h_out[1] = {r_ht}, *h_din[1] = {r_dh0};
    const ttt_batch_io hio = {.size = sizeof hio,
                              .B = DEV_B, .T = T, .H = DEV_H, .o = r_o, .q = q.host,
                              .k = k.host, .v = v.host, .eta = with_eta ? eta.host : NULL,
                              .log_alpha = given_la ? la.host : NULL,
                              .alpha_vec = g == TTT_FORM_GATE_KEY, .state_in = h_in,
                              .state_out = h_out};
    const ttt_batch_grad hg = {.size = sizeof hg,
                               .d_o = d_o.host, .d_state_out = h_dout, .d_q = r_dq, .d_k = r_dk,
                               .d_v = r_dv, .d_eta = with_eta ? r_deta : NULL,
                               .d_log_alpha = given_la ? r_dla : NULL, .d_state_in = h_din};
    ck_assert_msg(ttt_layer_backward_run(ref, &hio, &hg, &err) == TTT_OK, "%s", err.msg);
    /* the device entry, forward then backward */
    const float *d_in[1] = {h0.dev.ptr}, *d_dout[1] = {d_ht.dev.ptr};
    float *d_out[1] = {ht.dev.ptr}, *d_din[1] = {dh0.dev.ptr};
    const ttt_form_batch fb = {
        .B = DEV_B, .T = T, .H = DEV_H, .device = ttt_device_cuda(0), .stream = NULL,
        .dtype = TTT_DTYPE_F32, .o = o.dev.ptr, .q = q.dev.ptr, .k = k.dev.ptr, .v = v.dev.ptr,
        .eta = eta.dev.ptr, .log_alpha = la.dev.ptr, .alpha_vec = g == TTT_FORM_GATE_KEY,
        .state_in = d_in, .state_out = d_out};
    const ttt_form_batch_grad fg = {
        .d_o = d_o.dev.ptr, .d_state_out = d_dout, .d_q = dq.dev.ptr, .d_k = dk.dev.ptr,
        .d_v = dv.dev.ptr, .d_eta = deta.dev.ptr, .d_log_alpha = dla.dev.ptr,
        .d_state_in = d_din};
    char what[256], msg[512];
    snprintf(what, sizeof what, "%s/%s (cuda), preset %s, T %d, %s%s", e->family, e->form,
             p->name, T, gate_name(g), with_eta ? ", eta" : "");
    ck_assert_msg(e->forward_batched(L, &fb, &err) == TTT_OK, "%s: %s", what, err.msg);
    float *got = calloc(nx, 4), *got_s = calloc(ns, 4);
    dev_back(got, &o);
    dev_back(got_s, &ht);
    ck_assert_msg(tu_close_f(got, r_o, nx, FWD_ATOL, FWD_RTOL_T(T), msg, sizeof msg), "%s: o: %s",
                  what, msg);
    ck_assert_msg(tu_close_f(got_s, r_ht, ns, FWD_ATOL, FWD_RTOL_T(T), msg, sizeof msg),
                  "%s: state: %s", what, msg);
    ck_assert_msg(e->backward_batched(L, &fb, &fg, &err) == TTT_OK, "%s: %s", what, err.msg);
    const struct {
        const char *name;
        const dev_case_buf *b;
        const float *want;
    } grads_of[] = {{"d_q", &dq, r_dq}, {"d_k", &dk, r_dk}, {"d_v", &dv, r_dv},
                    {"d_eta", &deta, r_deta}, {"d_log_alpha", &dla, r_dla},
                    {"d_state_in", &dh0, r_dh0}};
    /* grad_rtol's bound on the largest gradient entry of the host's run; its gate term from
     * the gates' range, |Σ_t log α_t| ≤ 0.2·T (drawn in [−0.2, −0.01)) */
    double G = 0;
    for (size_t i = 0; i < sizeof grads_of / sizeof grads_of[0]; i++)
        for (size_t j = 0; j < grads_of[i].b->n; j++) G = fmax(G, fabs(grads_of[i].want[j]));
    const double gtol = grad_rtol(T, given_la ? 0.2 * T : 0) * G;
    for (size_t i = 0; i < sizeof grads_of / sizeof grads_of[0]; i++) {
        if (!grads_of[i].b->n) continue;
        float *gg = calloc(grads_of[i].b->n, 4);
        dev_back(gg, grads_of[i].b);
        ck_assert_msg(grad_close(gg, grads_of[i].want, grads_of[i].b->n, gtol, msg, sizeof msg),
                      "%s: %s: %s", what, grads_of[i].name, msg);
        free(gg);
    }
    /* the negative control: one value of v changed, the output must no longer pass */
    v.host[0] += 1.0f;
    ck_assert(ttt_device_copy(v.dev.ptr, ttt_device_cuda(0), v.host, ttt_device_host(),
                              sizeof(float), NULL, &err) == TTT_OK);
    ck_assert_msg(e->forward_batched(L, &fb, &err) == TTT_OK, "%s: %s", what, err.msg);
    dev_back(got, &o);
    ck_assert_msg(!tu_close_f(got, r_o, nx, FWD_ATOL, FWD_RTOL_T(T), msg, sizeof msg),
                  "%s: a changed v still passes", what);
    free(got), free(got_s), free(r_o), free(r_ht), free(r_dq), free(r_dk), free(r_dv);
    free(r_dh0), free(r_deta), free(r_dla);
    ttt_layer_free(ref);
    dev_case_buf *all[] = {&q, &k, &v, &eta, &la, &h0, &o, &ht, &d_o, &d_ht,
                           &dq, &dk, &dv, &deta, &dla, &dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dev_free(all[i]);
}

START_TEST(device_entries_equal_generic_driver) {
    int n_entries = 0, n_cases = 0;
    for (int i = 0; i < ttt_form_count(); i++) n_entries += ttt_form_at(i)->device != TTT_DEVICE_HOST;
    ttt_error err = {0};
    if (n_entries == 0) {
        printf("device entries: none in this build (configure with -DTTT_CUDA=ON): skipped\n");
        return;
    }
    if (ttt_cuda_device_count(&err) == 0) {
        printf("device entries: %d, skipped: %s\n", n_entries, err.msg);
        return;
    }
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        if (e->device != TTT_DEVICE_CUDA) continue;
        int covered = 0;
        for (int j = 0; j < ttt_preset_count(); j++) {
            const ttt_preset *p = ttt_preset_at(j);
            ttt_layer L;
            build_layer(&L, p);
            L.form = e->form;
            if (e->available(&L, NULL)) continue;
            for (int ti = 0; ti < (int)(sizeof Ts / sizeof Ts[0]); ti++)
                for (int g = TTT_FORM_GATE_NONE; g <= TTT_FORM_GATE_KEY; g++)
                    for (int with_eta = 0; with_eta < 2; with_eta++) {
                        if (!call_possible(&L, (ttt_gate_shape)g)) continue;
                        const ttt_form_inputs in = {.T = Ts[ti], .eta = with_eta,
                                                    .gate = (ttt_gate_shape)g, .tape = 0,
                                                    .device = TTT_DEVICE_CUDA};
                        if (e->available(&L, &in)) continue;
                        device_case(e, &L, p, Ts[ti], (ttt_gate_shape)g, with_eta);
                        covered++;
                    }
        }
        ck_assert_msg(covered > 0, "%s/%s (cuda): no preset reaches it", e->family, e->form);
        n_cases += covered;
    }
    printf("device entries: %d, %d cases against the generic driver\n", n_entries, n_cases);
}
END_TEST

static Suite *contract_suite(void) {
    Suite *s = suite_create("contract_forms");
    TCase *tc = tcase_create("forms");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_equals_generic_driver);
    tcase_add_test(tc, forward_diff_gradients_equal_generic_driver);
    tcase_add_test(tc, scratch_covers_measured_peak);
    tcase_add_test(tc, forward_strided_equals_forward_bits);
    suite_add_tcase(s, tc);
    TCase *dev = tcase_create("device_entries");
    tcase_set_timeout(dev, 120);
    tcase_add_test(dev, device_entries_equal_generic_driver);
    suite_add_tcase(s, dev);
    return s;
}

int main(void) { return tu_run(contract_suite()); }
