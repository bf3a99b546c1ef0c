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
 *   the function is ill-conditioned at float32 resolution — Newton–Schulz carries a change of its
 *   input with a gain of up to a^5 ≈ 490, and the next block's step is made from its output, so
 *   a worst-case bound on a whole run compounds from block to block past the size of the
 *   weights. They are compared a block at a time (lact_block_forward_case,
 *   lact_block_diff_case): each block from the generic driver's float32 state at its start, the
 *   entry's and the driver's forward each against a float64 LaCT (tests/lact_ref.h) run from that
 *   state, within one path's walk plus the block's Newton–Schulz bound (ns_rtol,
 *   tests/ns_bound.h, from the float64 singular values of the block's NS input); the gradients
 *   against the driver's, within twice the walk plus the Newton–Schulz bound of the backward.
 *   (They were: the forward within max(1e-2 · max |truth|, twice the driver's change under one
 *   rounding of every input) of the whole run's float64 truth, the gradients within 3e-2 ·
 *   max |g_ref| of the driver's over the whole run.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_maps.h"
#include "lact_ref.h"
#include "ns_bound.h"
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
#define fwd_close(got, want, n, msg, len) fwd_close_at((got), (want), (n), T, (msg), (len))

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
 * LaCT's block step adds Newton–Schulz's term, a block at a time (lact_block_diff_case). */
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

/* The forward tolerance of two float32 evaluations (above). */
static int fwd_close_at(const float *got, const float *want, size_t n, int T, char *msg,
                        size_t len) {
    return tu_close_f(got, want, n, FWD_ATOL, FWD_RTOL_T(T), msg, len);
}

static const int Ts[] = {13, 40};

static void parse_preset(ttt_layer *L, const ttt_preset *p, int features) {
    char text[256];
    /* several levels of state (log-linear attention) have no generic form: form auto */
    snprintf(text, sizeof text,
             "layer: {preset: %s, chunk: %d, mini_batch: %d, features: %d, form: %s}\n",
             p->name, CHUNK, p->mini_batch > 1 ? 4 : 1, features,
             p->levels > 1 ? "auto" : "generic");
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
    /* steps_per_token n_h (docs/math.md §4.7): n_h keys, values and rates per token */
    const int nh = L->substeps > 1 ? L->substeps : 1;
    /* levels Λ (docs/math.md §4.8): one query per level of state */
    in.q = ttt_tensor_2d(c, T, (L->levels > 1 ? L->levels : 1) * D);
    in.k = ttt_tensor_2d(c, nh * T, D);
    in.v = ttt_tensor_2d(c, nh * T, D);
    ttt_rng_fill_normal(rng, in.q->data, in.q->n, 0.0f, 0.5f);
    ttt_rng_fill_normal(rng, in.k->data, in.k->n, 0.0f, 1.0f);
    for (int t = 0; t < nh * T; t++) { /* unit keys */
        float *kt = in.k->data + (size_t)t * D;
        double s = 0;
        for (int j = 0; j < D; j++) s += (double)kt[j] * kt[j];
        for (int j = 0; j < D; j++) kt[j] = (float)(kt[j] / sqrt(s));
    }
    ttt_rng_fill_normal(rng, in.v->data, in.v->n, 0.0f, 1.0f);
    if (with_eta) {
        in.eta = ttt_tensor_1d(c, nh * T);
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
 * in covered[]. generic: the checks compare with the generic driver, which computes one level of
 * state: the presets of several levels (log-linear attention, docs/math.md §4.8) are left out,
 * and tests/test_loglinear.c and tests/test_hard_inputs.c hold their forms to float64. */
typedef void (*case_fn)(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                        ttt_gate_shape g, int with_eta, int resets, void *arg);

static int each_case(case_fn f, void *arg, int *covered, int generic) {
    int n = 0;
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        if (e->device != TTT_DEVICE_HOST) continue; /* device entries: device_entries_* below */
        for (int j = 0; j < ttt_preset_count(); j++) {
            const ttt_preset *p = ttt_preset_at(j);
            if (generic && p->levels > 1) continue;
            ttt_layer L;
            build_layer(&L, p);
            L.form = e->form;
            if (ttt_form_entry_available(e, &L, NULL)) continue;
            for (int ti = 0; ti < (int)(sizeof Ts / sizeof Ts[0]); ti++)
                for (int g = TTT_FORM_GATE_NONE; g <= TTT_FORM_GATE_KEY; g++)
                    for (int with_eta = 0; with_eta < 2; with_eta++)
                        for (int resets = 0; resets < (g == TTT_FORM_GATE_NONE ? 1 : 2);
                             resets++) {
                            if (!call_possible(&L, (ttt_gate_shape)g)) continue;
                            const ttt_form_inputs in = {.T = Ts[ti], .eta = with_eta,
                                                        .gate = (ttt_gate_shape)g, .tape = 0};
                            if (ttt_form_entry_available(e, &L, &in)) continue;
                            f(e, &L, p, Ts[ti], (ttt_gate_shape)g, with_eta, resets, arg);
                            n++;
                            covered[i]++;
                        }
        }
    }
    return n;
}

static void check_covered(const int *covered, int generic) {
    for (int i = 0; i < ttt_form_count(); i++)
        ck_assert_msg(covered[i] > 0 || ttt_form_at(i)->device != TTT_DEVICE_HOST ||
                          (generic && ttt_form_at(i)->levels),
                      "form %s/%s: no preset reaches it", ttt_form_at(i)->family,
                      ttt_form_at(i)->form);
}

/* ---- LaCT's block step: a block at a time against float64 ----
 * Newton–Schulz carries a change of its input to its output with a gain of up to a^5 ≈ 490
 * along small singular values (ns_rtol_gain, tests/ns_bound.h), and the next block's step is made
 * from that output, so a worst-case bound on a whole run compounds from block to block past the
 * size of the weights and gradients. LaCT is compared a block at a time instead, as
 * tests/test_optim.c compares the large_batch runs: each block starts from the generic driver's
 * own float32 state at its start (weights and optimizer state), and the entry and the driver run
 * it from there; the float64 LaCT of tests/lact_ref.h runs it from the same state (the
 * renormalization keeps the norms of the layer's first weights). The block's Newton–Schulz bound
 * comes from the float64 singular values of its NS input G (lact_block_ref). */

static double *to_f64(const ttt_tensor *t) {
    if (!t) return NULL;
    double *x = malloc(sizeof(double) * t->n);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < t->n; i++) x[i] = t->data[i];
    return x;
}

/* the tokens [t0, t0 + nb) of in (T tokens), as tensors of their own */
static inputs slice_inputs(ttt_ctx *c, const inputs *in, int T, int t0, int nb) {
    inputs r = {0};
    const ttt_tensor *from[5] = {in->q, in->k, in->v, in->eta, in->la};
    ttt_tensor **to[5] = {&r.q, &r.k, &r.v, &r.eta, &r.la};
    for (int i = 0; i < 5; i++) {
        if (!from[i]) continue;
        const size_t per = from[i]->n / (size_t)T;
        *to[i] = from[i]->ndim == 1 ? ttt_tensor_1d(c, nb) : ttt_tensor_2d(c, nb, (int)per);
        memcpy((*to[i])->data, from[i]->data + (size_t)t0 * per, (*to[i])->n * sizeof(float));
    }
    return r;
}

/* every state tensor of `to` = `from`'s (both from init_state of the same layer) */
static void copy_state(ttt_layer_state *to, const ttt_layer_state *from) {
    ttt_tensor *a[TTT_BATCH_MAX_STATE], *b[TTT_BATCH_MAX_STATE];
    const int n = state_tensors(to, a);
    ck_assert_int_eq(state_tensors(from, b), n);
    for (int i = 0; i < n; i++) memcpy(a[i]->data, b[i]->data, a[i]->n * sizeof(float));
}

/* The float64 LaCT block and its Newton–Schulz terms: O (nb, D) and the final weights W[3];
 * ns_w[w] = θ·ns_rtol(G_w)·max|NS(G_w)| times the renormalization's largest factor (one float32
 * NS evaluation on the weights, as tests/test_optim.c), ns_g = the largest ns_rtol(G_w,
 * backward) times that factor (relative to the gradients). */
typedef struct lact_block {
    double *O, *W[3];
    double ns_w[3], ns_g;
} lact_block;

/* The block of the lact preset's tuple (SwiGLU, dot loss, large_batch with Newton–Schulz at the
 * muon coefficients, renormalized columns, no momentum, apply_then_update), here with b = 4, on
 * the block's inputs blk (nb tokens) from the float32 state `from`; first: the layer's initial
 * state. A block_step preset with other options needs its own case here. Free with
 * lact_block_free. */
static void lact_block_ref(lact_block *r, const ttt_layer *L, const ttt_preset *p,
                           ttt_gate_shape g, const inputs *blk, int nb,
                           const ttt_layer_state *from, const ttt_layer_state *first) {
    char opt[256];
    ttt_preset_optimizer_text(p, opt, sizeof opt);
    ck_assert_msg(strcmp(p->name, "lact") == 0 && strcmp(L->optim->name, "large_batch") == 0 &&
                      strcmp(L->model->name, "swiglu") == 0 && strcmp(L->loss->name, "dot") == 0 &&
                      !L->pos_inverse && L->decay == 1.0f && L->order == TTT_ORDER_APPLY_THEN_UPDATE,
                  "no float64 reference for preset %s (%s)", p->name, opt);
    ck_assert_msg(ttt_layer_optim_traits(L).mu == 0.0, "%s: momentum", p->name);
    ck_assert_int_eq(from->n_w, 3);
    ck_assert_int_le(nb, L->mini_batch); /* one block */
    const lcase c = {.name = p->name, .T = nb, .b = L->mini_batch, .d_k = D, .d_v = D,
                     .lr = L->lr, .mu = 0.0f, .muon = 1, .ns_lact = 0, .renorm = RENORM_COLS,
                     .squared = 0, .pos_inverse = 0, .eta = blk->eta != NULL,
                     .gate = g == TTT_FORM_GATE_TOKEN ? GATE_TOKEN : GATE_NONE};
    double *x[LR_N] = {to_f64(blk->q), to_f64(blk->k), to_f64(blk->v), to_f64(blk->eta),
                       to_f64(blk->la)};
    double *Wi[3], *M[3], abc[5][3];
    ref_block last;
    r->O = calloc((size_t)nb * D, sizeof(double));
    for (int w = 0; w < 3; w++) {
        x[LR_W0 + w] = to_f64(from->W[w]);
        Wi[w] = to_f64(first->W[w]);
        r->W[w] = calloc(from->W[w]->n, sizeof(double));
        M[w] = calloc(from->W[w]->n, sizeof(double));
        last.G[w] = calloc(from->W[w]->n, sizeof(double));
    }
    ref_lact(&c, x, Wi, NULL, r->O, r->W, M, &last, VAR_OK);
    for (int s = 0; s < 5; s++) memcpy(abc[s], NS_MUON, sizeof abc[s]);
    r->ns_g = 0;
    for (int w = 0; w < 3; w++) {
        const ttt_tensor *W = from->W[w];
        const int rows = W->shape[0], cols = W->shape[1];
        double *U = malloc(sizeof(double) * W->n), umax = 0;
        memcpy(U, last.G[w], sizeof(double) * W->n);
        ref_ns(U, rows, cols, 0);
        for (size_t i = 0; i < W->n; i++) umax = fmax(umax, fabs(U[i]));
        const double(*tab)[3] = (const double(*)[3])abc;
        r->ns_w[w] = (double)L->lr * ns_rtol(last.G[w], rows, cols, tab, 5, 0) * umax *
                     last.rmax[w];
        r->ns_g = fmax(r->ns_g, ns_rtol(last.G[w], rows, cols, tab, 5, 1) * last.rmax[w]);
        free(U), free(Wi[w]), free(M[w]), free(last.G[w]);
    }
    for (int i = 0; i < LR_N; i++) free(x[i]);
}

static void lact_block_free(lact_block *r) {
    free(r->O);
    for (int w = 0; w < 3; w++) free(r->W[w]);
}

/* The forward, a block at a time: the entry's and the driver's block each against the float64
 * block, the outputs (which read the block-start weights) within one path's walk
 * 6ε·√((8D + 10)·nb) of the largest (FWD_RTOL_T's, for one path and the block's length), the
 * final weights within that plus the block's one NS evaluation ns_w; the optimizer's other state
 * (the renormalization's norms, constants of the layer) against the driver's. Controls: the
 * entry's outputs scaled by 1.05, every block; with resets, the float64 block without them, on
 * the final weights, in some block. */
static void lact_block_forward_case(const ttt_form_entry *e, const ttt_layer *L,
                                    const ttt_preset *p, int T, ttt_gate_shape g, int with_eta,
                                    int resets) {
    tu_fixture f;
    tu_fx_init(&f, 1000 + (uint64_t)T);
    ttt_rng rng0 = f.rng;
    const inputs in = make_inputs(&f.ctx, &f.rng, L, T, g, with_eta, resets);
    const inputs in0 = resets ? make_inputs(&f.ctx, &rng0, L, T, g, with_eta, 0) : in;
    ttt_layer_state st, first;
    init_state(&f.ctx, L, &st);
    init_state(&f.ctx, L, &first);
    const int b = L->mini_batch, vec = g == TTT_FORM_GATE_KEY;
    const char *rs = resets ? ", resets" : "";
    int rejected = 0;
    char msg[256];
    for (int t0 = 0; t0 < T; t0 += b) {
        const int nb = t0 + b <= T ? b : T - t0;
        const inputs bi = slice_inputs(&f.ctx, &in, T, t0, nb);
        ttt_layer_state se, sd;
        init_state(&f.ctx, L, &se);
        init_state(&f.ctx, L, &sd);
        copy_state(&se, &st);
        copy_state(&sd, &st);
        ttt_tensor *o_e = ttt_tensor_2d(&f.ctx, nb, D), *o_d = ttt_tensor_2d(&f.ctx, nb, D);
        ttt_error err = {0};
        ck_assert_msg(ttt_forward_generic(&f.ctx, L, o_d, &sd, bi.q, bi.k, bi.v, bi.eta, bi.la,
                                          vec, &err) == TTT_OK,
                      "%s", err.msg);
        const ttt_form_args a = {.q = bi.q, .k = bi.k, .v = bi.v, .eta = bi.eta,
                                 .log_alpha = bi.la, .alpha_vec = vec, .fused = 1};
        ck_assert_msg(e->forward(&f.ctx, L, o_e, &se, &a, &err) == TTT_OK, "%s/%s %s: %s",
                      e->family, e->form, p->name, err.msg);
        lact_block r;
        lact_block_ref(&r, L, p, g, &bi, nb, &st, &first);
        const double rtol = FWD_RTOL_T(nb) / 2;
        ttt_tensor *se_t[TTT_BATCH_MAX_STATE], *sd_t[TTT_BATCH_MAX_STATE];
        const int n = state_tensors(&se, se_t);
        ck_assert_int_eq(state_tensors(&sd, sd_t), n);
        for (int side = 0; side < 2; side++) {
            ttt_tensor *const *s_t = side ? sd_t : se_t;
            const ttt_tensor *o = side ? o_d : o_e;
            for (int i = -1; i < n; i++) {
                int ok;
                if (i < 0) ok = tu_close(o->data, r.O, o->n, 0.0, rtol, msg, sizeof msg);
                else if (i < 3)
                    ok = tu_close(s_t[i]->data, r.W[i], s_t[i]->n, r.ns_w[i], rtol, msg,
                                  sizeof msg);
                else if (side) continue;
                else ok = tu_close_f(s_t[i]->data, sd_t[i]->data, s_t[i]->n, 0.0, 2 * rtol, msg,
                                     sizeof msg);
                char what[32];
                snprintf(what, sizeof what, i < 0 ? "o" : "state %d", i);
                ck_assert_msg(ok, "%s/%s, preset %s, T %d, %s%s%s, block at %d: %s, %s against "
                              "%s: %s", e->family, e->form, p->name, T, gate_name(g),
                              with_eta ? ", eta" : "", rs, t0, side ? "generic driver" : "entry",
                              what, i < 3 ? "float64" : "the driver", msg);
            }
        }
        /* control: the entry's outputs scaled by 1.05 */
        double worst = 0, mx = 0;
        for (size_t j = 0; j < o_e->n; j++) {
            worst = fmax(worst, fabs(1.05 * o_e->data[j] - r.O[j]));
            mx = fmax(mx, fabs(r.O[j]));
        }
        ck_assert_msg(worst > rtol * mx, "%s/%s, preset %s, T %d, block at %d: the outputs "
                      "scaled by 1.05 pass", e->family, e->form, p->name, T, t0);
        if (getenv("TTT_TEST_VERBOSE"))
            printf("%s T %d block %d: outputs scaled by 1.05 at %.3g tolerances\n", e->form, T,
                   t0, worst / (rtol * mx));
        if (resets) { /* the float64 block without the resets */
            const inputs b0 = slice_inputs(&f.ctx, &in0, T, t0, nb);
            lact_block r0;
            lact_block_ref(&r0, L, p, g, &b0, nb, &st, &first);
            tu_ratio_quiet = 1;
            for (int w = 0; w < 3; w++)
                rejected += !tu_close(se_t[w]->data, r0.W[w], se_t[w]->n, r.ns_w[w], rtol, NULL,
                                      0);
            tu_ratio_quiet = 0;
            lact_block_free(&r0);
        }
        lact_block_free(&r);
        copy_state(&st, &sd); /* the next block from the driver's float32 state */
    }
    ck_assert_msg(!resets || rejected > 0, "%s/%s, preset %s, T %d, %s%s: the weights are as "
                  "close to the float64 blocks without the resets", e->family, e->form, p->name,
                  T, gate_name(g), with_eta ? ", eta" : "");
    tu_fx_free(&f);
}

/* ---- (a) forward = the generic driver ---- */

static void forward_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                         ttt_gate_shape g, int with_eta, int resets, void *arg) {
    (void)arg;
    if (ill_conditioned(L)) { /* a block at a time against float64 (above) */
        lact_block_forward_case(e, L, p, T, g, with_eta, resets);
        return;
    }
    tu_fixture f;
    tu_fx_init(&f, 1000 + (uint64_t)T);
    ttt_rng rng0 = f.rng; /* the same draws again: the call without its resets */
    inputs in = make_inputs(&f.ctx, &f.rng, L, T, g, with_eta, resets);
    /* with resets, the perturbed input each comparison must reject: the same call with the
     * reset gates back at their drawn values (a form that ignored the resets) */
    const inputs in0 = resets ? make_inputs(&f.ctx, &rng0, L, T, g, with_eta, 0) : in;
    const char *rs = resets ? ", resets" : "";
    ttt_layer_state s_ref, s_got;
    init_state(&f.ctx, L, &s_ref);
    init_state(&f.ctx, L, &s_got);
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
    ttt_tensor *sr[TTT_BATCH_MAX_STATE], *sg[TTT_BATCH_MAX_STATE];
    const int n = state_tensors(&s_ref, sr);
    ck_assert_int_eq(state_tensors(&s_got, sg), n);
    char msg[256];
    ck_assert_msg(fwd_close(o->data, o_ref->data, o->n, msg, sizeof msg),
                  "%s/%s, preset %s, T %d, %s%s%s: o: %s", e->family, e->form, p->name, T,
                  gate_name(g), with_eta ? ", eta" : "", rs, msg);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fwd_close(sg[i]->data, sr[i]->data, sr[i]->n, msg, sizeof msg),
                      "%s/%s, preset %s, T %d, %s%s%s: state %d: %s", e->family, e->form,
                      p->name, T, gate_name(g), with_eta ? ", eta" : "", rs, i, msg);
    if (resets) { /* the driver without the resets is rejected */
        ttt_layer_state s0;
        init_state(&f.ctx, L, &s0);
        ttt_tensor *o0 = ttt_tensor_2d(&f.ctx, T, D);
        ck_assert_msg(ttt_forward_generic(&f.ctx, L, o0, &s0, in0.q, in0.k, in0.v, in0.eta,
                                          in0.la, vec, &err) == TTT_OK,
                      "%s", err.msg);
        ck_assert_msg(!fwd_close(o->data, o0->data, o->n, msg, sizeof msg),
                      "%s/%s, preset %s, T %d, %s%s: o is as close to the driver without the "
                      "resets",
                      e->family, e->form, p->name, T, gate_name(g), with_eta ? ", eta" : "");
    }
    tu_fx_free(&f);
}

START_TEST(forward_equals_generic_driver) {
    int covered[64] = {0};
    ck_assert_int_le(ttt_form_count(), 64);
    const int n = each_case(forward_case, NULL, covered, 1);
    ck_assert_int_gt(n, 0);
    check_covered(covered, 1);
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

/* ---- (b) for LaCT's block step: a block at a time ----
 * Newton–Schulz carries a change of its input to its output with a gain of up to a^5 ≈ 490
 * along small singular values (ns_rtol_gain, tests/ns_bound.h), and the next block's gradient is
 * made from that output, so a worst-case bound on a whole run compounds from block to block to
 * more than the gradients themselves (the whole runs were held to a measured 3e-2 of max|g|).
 * The gradients are compared a block at a time instead, as tests/test_optim.c compares the
 * large_batch weights: each block from the generic driver's own float32 state at its start (the
 * weights and the optimizer's state), both paths differentiating
 * L_b = Σ R ⊙ (the block's outputs, its final state) w.r.t. the block's inputs and its initial
 * state. Per tensor, relative to its largest entry (log α's: the largest gradient entry):
 *   - the walk of grad_rtol over the block's tokens (its gates' G_max), and
 *   - the block step's Newton–Schulz, `ns_rtol` (backward: the forward's roundings and the
 *     adjoint's transposed, from the float64 singular values of the block's NS input, which the
 *     float64 LaCT of tests/lact_ref.h computes from the same state) of the weight with the
 *     largest one, times the renormalization's largest factor (it scales the adjoint that enters
 *     Newton–Schulz); the adjoint leaves NS through the block gradient, a sum of products of
 *     the block's keys, values and weights on the scale of the gradients compared;
 * twice the sum: two float32 paths. Controls: the entry's gradients scaled by 1.05, and with
 * resets the driver's gradients of the block without them, each rejected. */
static void block_grads(grads *out, tu_tape_fixture *fx, const ttt_form_entry *e, int fused,
                        const ttt_layer *L, const inputs *in, int T, int t0, int nb,
                        ttt_gate_shape g, const ttt_layer_state *from) {
    ttt_ctx *c = &fx->ctx;
    ttt_tape_reset(c->tape);
    const inputs bi = slice_inputs(c, in, T, t0, nb);
    ttt_tensor *p[N_P] = {bi.q, bi.k, bi.v, bi.eta, bi.la};
    ttt_layer_state st;
    init_state(c, L, &st);
    ttt_tensor *s0[TTT_BATCH_MAX_STATE], *sf[TTT_BATCH_MAX_STATE];
    const int ns = state_tensors(&st, s0);
    ck_assert_int_eq(state_tensors((ttt_layer_state *)from, sf), ns);
    for (int i = 0; i < ns; i++) {
        memcpy(s0[i]->data, sf[i]->data, s0[i]->n * sizeof(float));
        p[P_STATE + i] = s0[i];
    }
    memset(out, 0, sizeof *out);
    if (p[P_LA]) {
        out->la = tu_zalloc(c, p[P_LA]->n * sizeof(float));
        memcpy(out->la, p[P_LA]->data, p[P_LA]->n * sizeof(float));
    }
    for (int i = 0; i < P_STATE + ns; i++) {
        if (!p[i]) continue;
        out->n[i] = p[i]->n;
        out->g[i] = tu_zalloc(c, p[i]->n * sizeof(float));
        ttt_tensor_set_param(p[i], out->g[i]);
    }
    ttt_tensor *o = ttt_tensor_2d(c, nb, D);
    ttt_error err = {0};
    const int vec = g == TTT_FORM_GATE_KEY;
    ttt_status s;
    if (!e) {
        s = ttt_forward_generic(c, L, o, &st, p[P_Q], p[P_K], p[P_V], p[P_ETA], p[P_LA], vec,
                                &err);
    } else {
        const ttt_form_args a = {.q = p[P_Q], .k = p[P_K], .v = p[P_V], .eta = p[P_ETA],
                                 .beta = p[P_ETA] ? ttt_scale(c, p[P_ETA], L->lr) : NULL,
                                 .log_alpha = p[P_LA], .alpha_vec = vec, .fused = fused};
        s = e->forward_diff(c, L, o, &st, &a, &err);
    }
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ttt_tensor *outs[1 + TTT_BATCH_MAX_STATE];
    outs[0] = o;
    const int n_out = 1 + state_tensors(&st, outs + 1);
    ttt_rng rr;
    ttt_rng_seed(&rr, 99 + (uint64_t)t0);
    ttt_tensor *loss = NULL;
    for (int i = 0; i < n_out; i++) {
        ttt_tensor *R = ttt_tensor_new(c, outs[i]->ndim, outs[i]->shape);
        ttt_rng_fill_normal(&rr, R->data, R->n, 0.0f, 1.0f);
        ttt_tensor *term = ttt_sum(c, ttt_mul(c, outs[i], R));
        loss = loss ? ttt_add(c, loss, term) : term;
    }
    ttt_backward(c, loss);
}

static void lact_block_diff_case(const ttt_form_entry *e, const ttt_layer *L,
                                 const ttt_preset *p, int T, ttt_gate_shape g, int with_eta,
                                 int resets) {
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx, ng = {.arena = fx.ctx.arena};
    ttt_rng rng, rng0;
    ttt_rng_seed(&rng, 4242 + (uint64_t)T);
    rng0 = rng;
    const inputs in = make_inputs(c, &rng, L, T, g, with_eta, resets);
    /* with resets, the perturbed input the comparison must reject: the block without them */
    const inputs in0 = resets ? make_inputs(c, &rng0, L, T, g, with_eta, 0) : in;
    ttt_layer_state st, first;
    init_state(c, L, &st);
    init_state(c, L, &first);
    const char *rs = resets ? ", resets" : "";
    const int b = L->mini_batch, vec = g == TTT_FORM_GATE_KEY;
    int rejected[P_STATE] = {0}, scaled_rejected[2] = {0};
    for (int t0 = 0; t0 < T; t0 += b) {
        const int nb = t0 + b <= T ? b : T - t0;
        grads ref, got, ref0;
        block_grads(&ref, &fx, NULL, 0, L, &in, T, t0, nb, g, &st);
        if (resets) block_grads(&ref0, &fx, NULL, 0, L, &in0, T, t0, nb, g, &st);
        double G = 0;
        for (int i = 0; i < N_P; i++)
            for (size_t j = 0; ref.g[i] && j < ref.n[i]; j++) G = fmax(G, fabs(ref.g[i][j]));
        lact_block r;
        const inputs bi = slice_inputs(c, &in, T, t0, nb);
        lact_block_ref(&r, L, p, g, &bi, nb, &st, &first);
        const double rtol = 2 * (grad_rtol(nb, gate_span(nb, ref.la, ref.n[P_LA])) + r.ns_g);
        lact_block_free(&r);
        for (int fused = 0; fused < 2; fused++) {
            block_grads(&got, &fx, e, fused, L, &in, T, t0, nb, g, &st);
            for (int i = 0; i < N_P; i++) {
                if (!ref.g[i]) continue;
                ck_assert_uint_eq(got.n[i], ref.n[i]);
                double mx;
                const double err = grad_err(got.g[i], ref.g[i], ref.n[i], &mx);
                const double tol = rtol * (i == P_LA || i == P_ETA ? G : mx);
                TU_ASSERT_LE(err, tol, "%s/%s (%s), preset %s, T %d, %s%s%s: block at %d: "
                             "gradient %d: max error %.3g, max |g| %.3g", e->family, e->form,
                             fused ? "fused" : "composed", p->name, T, gate_name(g),
                             with_eta ? ", eta" : "", rs, t0, i, err, mx);
                double scaled = 0;
                for (size_t j = 0; j < ref.n[i]; j++)
                    scaled = fmax(scaled, fabs(1.05 * got.g[i][j] - ref.g[i][j]));
                scaled_rejected[fused] += !(scaled <= tol);
                double e0 = 0, mx0;
                if (resets && i < P_STATE) {
                    e0 = grad_err(got.g[i], ref0.g[i], ref.n[i], &mx0);
                    rejected[i] += e0 > tol;
                }
                if (getenv("TTT_TEST_VERBOSE"))
                    printf("%s %s T %d block %d gradient %d: %.3g tolerances, scaled %.3g, "
                           "without the resets %.3g\n", e->form, fused ? "fused" : "composed",
                           T, t0, i, err / tol, scaled / tol, e0 / tol);
            }
            for (size_t j = 0; resets && j < got.n[P_LA]; j++) /* a reset gate's gradient is 0 */
                ck_assert_msg(!(got.la[j] < TTT_GATE_RESET) || got.g[P_LA][j] == 0.0f,
                              "%s/%s (%s), preset %s, T %d: block at %d: gate %zu has gradient "
                              "%g", e->family, e->form, fused ? "fused" : "composed", p->name,
                              T, t0, j, (double)got.g[P_LA][j]);
        }
        /* the next block starts from the driver's float32 state */
        const inputs bn = slice_inputs(&ng, &in, T, t0, nb);
        ttt_tensor *o = ttt_tensor_2d(&ng, nb, D);
        ttt_error err = {0};
        ck_assert_msg(ttt_forward_generic(&ng, L, o, &st, bn.q, bn.k, bn.v, bn.eta, bn.la, vec,
                                          &err) == TTT_OK,
                      "%s", err.msg);
    }
    for (int fused = 0; fused < 2; fused++)
        ck_assert_msg(scaled_rejected[fused] > 0,
                      "%s/%s (%s), preset %s, T %d, %s%s%s: the gradients scaled by 1.05 pass",
                      e->family, e->form, fused ? "fused" : "composed", p->name, T,
                      gate_name(g), with_eta ? ", eta" : "", rs);
    /* every input the gates reach within a block tells the resets from their absence (q's
     * gradient does not: a block's outputs read its start state, which is the same for both) */
    for (int i = P_K; resets && i < P_STATE; i++)
        ck_assert_msg((i == P_ETA && !in.eta) || rejected[i] > 0,
                      "%s/%s, preset %s, T %d, %s%s: the gradient %d does not tell the driver "
                      "without the resets from the one with them in any block",
                      e->family, e->form, p->name, T, gate_name(g), with_eta ? ", eta" : "", i);
    tu_tape_fx_free(&fx);
}

static void diff_case(const ttt_form_entry *e, const ttt_layer *L, const ttt_preset *p, int T,
                      ttt_gate_shape g, int with_eta, int resets, void *arg) {
    (void)arg;
    /* gradients at the small size only (the tape of the driver is long), but for the resets,
     * whose pattern at T = 40 keeps tokens after them (make_inputs) */
    if (T > Ts[0] && !resets) return;
    if (ill_conditioned(L)) { /* a block at a time (above) */
        lact_block_diff_case(e, L, p, T, g, with_eta, resets);
        return;
    }
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    grads ref, got, ref0;
    run_grads(&ref, &fx, NULL, 0, L, T, g, with_eta, resets);
    /* with resets, the perturbed input the comparison must reject: the driver's gradients of the
     * same call with the reset gates back at their drawn values */
    if (resets) run_grads(&ref0, &fx, NULL, 0, L, T, g, with_eta, 0);
    /* relative to the largest entry of the compared gradient, but for log α's: the largest
     * gradient entry G over the inputs and states (grad_rtol) */
    double G = 0;
    for (int i = 0; i < N_P; i++)
        for (size_t j = 0; ref.g[i] && j < ref.n[i]; j++) G = fmax(G, fabs(ref.g[i][j]));
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
            /* an initial state tensor the function does not read (MesaNet's weights, which it
             * solves for afresh from its statistics: the entry's gradient is exactly 0) gets
             * from the driver two terms that cancel exactly, each on the scale of the others:
             * scaled by G as log α's */
            int zero = i >= P_STATE;
            for (size_t j = 0; zero && j < got.n[i]; j++) zero = got.g[i][j] == 0.0f;
            const double tol = rtol_walk * (i == P_LA || zero ? G : mx);
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
    each_case(diff_case, NULL, covered, 1);
    check_covered(covered, 1);
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
    each_case(scratch_case, NULL, covered, 0);
    check_covered(covered, 0);
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
    ck_assert_msg(e->forward_strided(&f.ctx, L, S->data, &sa, &err) == TTT_OK, "%s", err.msg);
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
    each_case(strided_case, &n_strided, covered, 0);
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
            if (ttt_form_entry_available(e, &L, NULL)) continue;
            for (int ti = 0; ti < (int)(sizeof Ts / sizeof Ts[0]); ti++)
                for (int g = TTT_FORM_GATE_NONE; g <= TTT_FORM_GATE_KEY; g++)
                    for (int with_eta = 0; with_eta < 2; with_eta++) {
                        if (!call_possible(&L, (ttt_gate_shape)g)) continue;
                        const ttt_form_inputs in = {.T = Ts[ti], .eta = with_eta,
                                                    .gate = (ttt_gate_shape)g, .tape = 0,
                                                    .device = TTT_DEVICE_CUDA};
                        if (ttt_form_entry_available(e, &L, &in)) continue;
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
