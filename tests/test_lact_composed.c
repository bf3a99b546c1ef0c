/* LaCT's closed form (layers/forms/lact/block.c, ttt_lact_composed: the chunkwise form of the LaCT
 * family) against its definitions.
 *
 * What ties what:
 *   (a) forward: the closed form = the generic driver (layers/layer.c, docs/math.md §1 with
 *       apply_then_update, large_batch §3) on outputs, final weights and optimizer state, without
 *       and with a tape, over sizes with T not a multiple of b, b > T, muon on and off, momentum,
 *       both renormalization axes and none, the lact coefficients, per-token η, per-token and
 *       constant decay, the squared loss and position_scale: inverse; a sequence split at a
 *       block boundary continues from the carried state;
 *   (b) gradients: of L = Σ R ⊙ (outputs, final weights, final momentum) with fixed random R,
 *       w.r.t. q, k, v, η, log α and the initial weights W0, W1, W2 (a block at a time: see
 *       Tolerances): the closed form through the
 *       tape = the generic driver through the tape; and = central finite differences of a float64
 *       LaCT written here from docs/math.md (SwiGLU §2, large_batch and Newton–Schulz §3), whose
 *       forward also equals the closed form's;
 *   (c) a deliberately wrong variant fails: the float64 reference with the block reading its own
 *       update, with the other renormalization axis, or without the in-block decay weights; the
 *       generic driver with b − 1; a gradient off by 5e-2 in one element;
 *   and: unsupported options give "use form: generic" errors, `form: auto` picks the closed form
 *   for the LaCT preset and the generic driver where the closed form does not apply.
 *
 * Tolerances. Newton–Schulz makes this layer ill-conditioned at float32 resolution: each step
 * maps a singular value σ/‖G‖ through a quintic with slope a = 3.4445 at 0, so over 5 steps
 * directions with small singular values (always present when a block has fewer tokens than
 * the weight's side) are amplified up to a^5 ≈ 490× (ns_rtol_gain, tests/ns_bound.h), and the
 * next block's gradient is made from that output: a worst-case bound on a whole run compounds
 * from block to block past the size of the weights. So every comparison is made a block at a
 * time (as tests/test_optim.c compares large_batch runs with Newton–Schulz): each block is a
 * problem of its own (block_of) that starts from the float32 run's own state at the block start
 * (its weights and momentum; the renormalization keeps the norms of the layer's first weights),
 * with the block's inputs and the loss weights of its outputs and of the final state; its
 * gradients are those w.r.t. the block's inputs and its initial weights. A block is held to
 *     |got − want| ≤ atol + rtol·max|want|,
 *   the walk where the layer is well conditioned, rtol = g_rtol (floor_for below;
 *     docs/hardening.md "Portable tolerances"): a float32 path rounds every weight entry through
 *     n = (4 + 15·muon)·d + T + 10 operations per token, d = max(d_k, d_v) (the SwiGLU's d-term
 *     products and element-wise steps, the block's sums over at most T terms, and with muon five
 *     Newton–Schulz steps of three d-term products per block, at most one block per token), and a
 *     backward repeats each transposed: m·n roundings (m = 1 forward, 2 gradients), independent
 *     from token to token, a walk of deviation ε·√(m·n·T); c = 6 covers the largest entry; T
 *     here is the block's length. One such bound against float64 (the reference, the finite
 *     differences), the sum of two against the generic driver. (It was 2e-5 relative and 1e-6
 *     absolute, fixed; measured no-muon closed vs generic and vs float64 ≤ 2e-6 forward, ≤ 1e-6
 *     gradients.)
 *   plus the block's Newton–Schulz, from the float64 block's NS input G (ns_terms_of): the final
 *     weights get θ·ns_rtol(G)·max|NS(G)| times the renormalization's largest factor as their
 *     absolute term (one NS evaluation, as tests/test_optim.c); the gradients get
 *     ns_rtol(G, backward) times that factor (the largest over the weights) as a relative term
 *     (the adjoint leaves NS through the block gradient, a sum of products of the block's keys,
 *     values and weights on the scale of the gradients compared; η's and log α's gradients are
 *     bounded on the largest gradient entry, slot_tol); per float32 path. The outputs read the
 *     block-start weights and the momentum is taken before NS: the walk alone.
 *     (It replaces 8× the change of the float32 paths under a 2e-7 relative perturbation of the
 *     inputs, measured per case, which the whole runs needed.)
 *   Finite differences: float64 central differences D(h), h = 1e-6·max(1, |x|), bounded on
 *     their own (fd_grad_err; docs/hardening.md "Portable tolerances"): the truncation c·h²,
 *     estimated by halving the step (D(h) − D(h/2) = ¾c·h², so 4/3·|D(h) − D(h/2)|, which also
 *     carries both quotients' rounding), plus the two float64 losses' rounding, each within
 *     6ε₆₄·√(n·T)·Σ|R ⊙ outputs| (ε₆₄ = 2^-53, n as above), over 2h; the largest over the
 *     elements is added to the comparison's absolute term.
 * Controls, per block: the closed form's outputs and state scaled by 1.05 (forward), its
 * gradients scaled by 1.05 (against the finite differences in every block; against the driver
 * in some block of each case, since a block whose NS term exceeds 2.5 % cannot tell them) and,
 * with Newton–Schulz, the driver's gradients without it (every block). The wrong variants (c)
 * must fail these same comparisons in some block. With TTT_TEST_VERBOSE set every comparison
 * prints its error as a fraction of the largest value and of the tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "composed.h"
#include "lact_ref.h"
#include "ns_bound.h"
#include "testutil.h"
#include "internal.h"


/* the relative walk of close_to for the comparison in progress (floor_for) */
static double g_rtol;
/* the finite differences' own error (fd_grad_err), added to close_to's absolute term while a
 * comparison with them is in progress; 0 otherwise */
static double g_fd_err;

/* paths float32 paths (1 against float64, 2 against the generic driver), m = 1 forward, 2
 * gradients: paths·6ε·√(m·n·T) with n = (4 + 15·muon)·max(d_k, d_v) + T + 10 (the top of the
 * file). */
static void floor_for(const lcase *c, int paths, int m) {
    const double eps = 0x1p-24, d = c->d_k > c->d_v ? c->d_k : c->d_v;
    const double n = (4 + 15 * (c->muon != 0)) * d + c->T + 10;
    g_rtol = paths * 6 * eps * sqrt(m * n * c->T);
}

static tu_tape_fixture g_fx;
static ttt_ctx *ctx = &g_fx.ctx;

static void setup(void) { tu_tape_fx_init(&g_fx); }
static void teardown(void) { tu_tape_fx_free(&g_fx); }
static void *zalloc(size_t bytes) { return tu_zalloc(ctx, bytes); }

/* ------------------------------------------------------------------------------------------ */
/* cases */

static const lcase fwd_cases[] = {
    {"muon, T 13, b 4", 13, 4, 4, 4, 0.5f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_NONE},
    {"no muon, d_v 3", 13, 5, 4, 3, 0.3f, 0, 0, 0, RENORM_COLS, 0, 0, 1, GATE_NONE},
    {"b > T", 7, 16, 4, 4, 1.0f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_NONE},
    {"no eta, b 3, d_v 5", 10, 3, 3, 5, 0.7f, 0, 1, 0, RENORM_COLS, 0, 0, 0, GATE_NONE},
    {"momentum, lact, rows", 13, 4, 4, 4, 0.3f, 0.7f, 1, 1, RENORM_ROWS, 0, 0, 1, GATE_NONE},
    {"per-token gates", 13, 4, 4, 3, 0.5f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_TOKEN},
    {"squared, inverse, no renorm", 11, 4, 4, 4, 0.2f, 0, 0, 0, RENORM_OFF, 1, 1, 1, GATE_NONE},
    {"constant decay", 12, 4, 4, 4, 0.5f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_CONST},
    {"squared, muon, momentum, gates", 9, 3, 3, 3, 0.4f, 0.5f, 1, 0, RENORM_COLS, 1, 0, 1,
     GATE_TOKEN},
    {"mqar size", 64, 16, 8, 8, 1.0f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_NONE},
};
#define N_FWD ((int)(sizeof fwd_cases / sizeof fwd_cases[0]))

/* small sizes for finite differences (T = 7 with b = 3: a short last block) */
static const lcase fd_cases[] = {
    {"fd muon", 7, 3, 3, 2, 0.5f, 0, 1, 0, RENORM_COLS, 0, 0, 1, GATE_NONE},
    {"fd momentum, lact, rows, gates", 7, 3, 3, 3, 0.4f, 0.6f, 1, 1, RENORM_ROWS, 0, 0, 1,
     GATE_TOKEN},
    {"fd squared, inverse, plain", 7, 3, 3, 2, 0.3f, 0, 0, 0, RENORM_OFF, 1, 1, 1, GATE_NONE},
    {"fd b > T, no eta", 5, 8, 2, 3, 0.8f, 0, 1, 0, RENORM_COLS, 0, 0, 0, GATE_NONE},
};
#define N_FD ((int)(sizeof fd_cases / sizeof fd_cases[0]))

/* The case as a layer with form generic (the closed form is set on a copy). */
static void case_layer(const lcase *c, ttt_layer *L) {
    char text[768];
    snprintf(text, sizeof text,
             "layer: {preset: lact, mini_batch: %d, loss: %s, position_scale: %s, form: generic, "
             "optimizer: {name: large_batch, lr: %g, momentum: %g, muon: %s, coefficients: %s, "
             "renormalize: %s, renormalize_axis: %s, decay: %g}}\n",
             c->b, c->squared ? "squared" : "dot", c->pos_inverse ? "inverse" : "none",
             (double)c->lr, (double)c->mu, c->muon ? "true" : "false",
             c->ns_lact ? "lact" : "muon", c->renorm ? "true" : "false",
             c->renorm == RENORM_ROWS ? "rows" : "columns",
             c->gate == GATE_CONST ? (double)CONST_DECAY : 1.0);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_status s =
        ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), c->d_k, c->d_v, L, &err);
    ttt_cfg_free(root);
    ck_assert_msg(s == TTT_OK, "%s: %s", c->name, err.msg);
    ck_assert_msg(ttt_lact_available(L, NULL) == NULL, "%s", c->name);
    ck_assert_msg(tu_form_unavailable(L, "chunkwise") == NULL, "%s", c->name);
}

/* parameters of a run */
enum { P_Q, P_K, P_V, P_ETA, P_LA, P_W0, P_W1, P_W2, N_P };
_Static_assert((int)P_Q == (int)LR_Q && (int)P_LA == (int)LR_LA && (int)P_W0 == (int)LR_W0 &&
                   (int)N_P == (int)LR_N,
               "the inputs are indexed as ref_lact's (lact_ref.h)");
static const char *const p_names[N_P] = {"q", "k", "v", "eta", "log_alpha", "W0", "W1", "W2"};

typedef struct problem {
    const lcase *c;
    size_t n[N_P];  /* element counts (0 = absent) */
    float *f[N_P];  /* values */
    double *x[N_P]; /* the same in double */
    float *R[7];    /* loss weights: o, W0..W2 final, M0..M2 final */
    size_t nR[7];
    /* a block of a longer run (block_of): the layer's first weights, whose norms the
     * renormalization keeps, and the momentum the block starts from (NULL: f[P_W0 + w]'s
     * norms, zero momentum) */
    float *W_norm[3], *M0[3];
    double *Wx_norm[3], *Mx0[3];
} problem;

static void draw(problem *p, const lcase *c, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->c = c;
    const int T = c->T, dk = c->d_k, dv = c->d_v, dh = dk;
    const size_t n[N_P] = {(size_t)T * dk, (size_t)T * dk, (size_t)T * dv,
                           c->eta ? (size_t)T : 0, c->gate == GATE_TOKEN ? (size_t)T : 0,
                           (size_t)dk * dh, (size_t)dh * dv, (size_t)dk * dh};
    ttt_rng rng;
    ttt_rng_seed(&rng, seed);
    for (int i = 0; i < N_P; i++) {
        p->n[i] = n[i];
        if (!n[i]) continue;
        p->f[i] = zalloc(n[i] * sizeof(float));
        p->x[i] = zalloc(n[i] * sizeof(double));
        /* weights at the model's scale N(0, 1/d) */
        const double sw = i == P_W1 ? 1.0 / sqrt((double)dh) : 1.0 / sqrt((double)dk);
        for (size_t e = 0; e < n[i]; e++) {
            const double u = ttt_rng_uniform(&rng), z = ttt_rng_normal(&rng);
            p->f[i][e] = (float)(i == P_ETA  ? 0.3 + 0.7 * u
                                 : i == P_LA ? -0.02 - 0.4 * u
                                 : i == P_Q  ? 0.7 * z
                                 : i == P_K  ? 0.6 * z
                                 : i >= P_W0 ? sw * z
                                             : z);
            p->x[i][e] = p->f[i][e];
        }
    }
    const size_t nR[7] = {(size_t)T * dv, n[P_W0], n[P_W1], n[P_W2],
                          c->mu > 0 ? n[P_W0] : 0, c->mu > 0 ? n[P_W1] : 0,
                          c->mu > 0 ? n[P_W2] : 0};
    for (int i = 0; i < 7; i++) {
        p->nR[i] = nR[i];
        if (!nR[i]) continue;
        p->R[i] = zalloc(nR[i] * sizeof(float));
        for (size_t e = 0; e < nR[i]; e++) p->R[i][e] = (float)ttt_rng_normal(&rng);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* runs of the library: generic driver or closed form, with or without a tape */

typedef struct run_out {
    float *o;           /* (T, d_v) */
    float *W[3], *M[3]; /* final weights, final momentum (or NULL) */
    float *g[N_P];      /* gradients (tape runs) */
} run_out;

static float *keep_copy(const ttt_tensor *t) {
    float *r = zalloc(t->n * sizeof(float));
    memcpy(r, t->data, t->n * sizeof(float));
    return r;
}

/* One forward of the layer through ttt_layer_forward in form `form`; with tape != 0 every
 * parameter requires grad and L = Σ R ⊙ outputs is differentiated. */
static void run(run_out *r, const ttt_layer *L0, const char *form, const problem *p, int tape) {
    const lcase *c = p->c;
    ttt_layer L = *L0;
    L.form = form;
    ttt_ctx ng = {.arena = ctx->arena};
    ttt_ctx *cx = tape ? ctx : &ng;
    if (tape) ttt_tape_reset(ctx->tape);
    memset(r, 0, sizeof *r);
    ttt_layer_state st;
    ttt_layer_state_init(cx, &L, &st, NULL);
    ttt_tensor *t[N_P] = {0};
    for (int i = 0; i < N_P; i++) {
        if (!p->n[i]) continue;
        if (i >= P_W0) {
            const int w = i - P_W0;
            t[i] = st.W[w];
            /* the initial norms of renormalization belong to the layer's first weights */
            memcpy(t[i]->data, p->W_norm[w] ? p->W_norm[w] : p->f[i], p->n[i] * sizeof(float));
            L.optim->init_state(L.optim_cfg, st.opt[w], t[i]);
            memcpy(t[i]->data, p->f[i], p->n[i] * sizeof(float));
            if (p->M0[w] && c->mu > 0)
                memcpy(st.opt[w][0]->data, p->M0[w], p->n[i] * sizeof(float));
        } else {
            t[i] = i == P_Q || i == P_K ? ttt_tensor_2d(cx, c->T, c->d_k)
                   : i == P_V         ? ttt_tensor_2d(cx, c->T, c->d_v)
                                      : ttt_tensor_1d(cx, c->T);
            memcpy(t[i]->data, p->f[i], p->n[i] * sizeof(float));
        }
        if (tape) {
            r->g[i] = zalloc(p->n[i] * sizeof(float));
            ttt_tensor_set_param(t[i], r->g[i]);
        }
    }
    ttt_tensor *W_in[3] = {st.W[0], st.W[1], st.W[2]};
    ttt_tensor *o = ttt_tensor_2d(cx, c->T, c->d_v);
    ttt_error err = {0};
    ttt_status s = ttt_layer_forward(cx, &L, o, &st, t[P_Q], t[P_K], t[P_V], t[P_ETA], t[P_LA],
                                     &err);
    ck_assert_msg(s == TTT_OK, "%s (%s): %s", c->name, form, err.msg);
    const int mom = c->mu > 0;
    if (!tape) /* without a tape the state is updated in place */
        for (int w = 0; w < 3; w++) ck_assert_ptr_eq(st.W[w], W_in[w]);
    r->o = keep_copy(o);
    for (int w = 0; w < 3; w++) {
        r->W[w] = keep_copy(st.W[w]);
        if (mom) r->M[w] = keep_copy(st.opt[w][0]);
    }
    if (!tape) return;
    ttt_tensor *outs[7] = {o,
                           st.W[0],
                           st.W[1],
                           st.W[2],
                           mom ? st.opt[0][0] : NULL,
                           mom ? st.opt[1][0] : NULL,
                           mom ? st.opt[2][0] : NULL};
    ttt_tensor *loss = NULL;
    for (int i = 0; i < 7; i++) {
        if (!outs[i]) continue;
        ck_assert(outs[i]->n == p->nR[i]);
        ttt_tensor Rv = ttt_tensor_view(p->R[i], outs[i]->ndim, outs[i]->shape);
        ttt_tensor *term = ttt_sum(ctx, ttt_mul(ctx, outs[i], ttt_tensor_copy(ctx, &Rv)));
        loss = loss ? ttt_add(ctx, loss, term) : term;
    }
    ttt_backward(ctx, loss);
}

/* ------------------------------------------------------------------------------------------ */
/* comparisons a block at a time (see the header) */

/* The compared tensors of a run: 0 the output, 1–3 the final weights, 4–6 the final momentum,
 * 7 + i the gradient w.r.t. parameter i. NULL when absent. */
enum { S_O = 0, S_W = 1, S_M = 4, S_G = 7, N_S = S_G + N_P };

static const float *slot(const run_out *r, const problem *p, int s, size_t *n) {
    if (s == S_O) *n = (size_t)p->c->T * p->c->d_v;
    else if (s < S_G) *n = p->n[P_W0 + (s - S_W) % 3];
    else *n = p->n[s - S_G];
    return s == S_O ? r->o : s < S_M ? r->W[s - S_W] : s < S_G ? r->M[s - S_M] : r->g[s - S_G];
}

static const char *slot_name(int s, char *buf, size_t len) {
    if (s == S_O) snprintf(buf, len, "output");
    else if (s < S_M) snprintf(buf, len, "final W%d", s - S_W);
    else if (s < S_G) snprintf(buf, len, "final momentum of W%d", s - S_M);
    else snprintf(buf, len, "d/d%s", p_names[s - S_G]);
    return buf;
}

/* The block of p at tokens [t0, t0 + nb) as a problem of its own (its case, with T = nb, in
 * *lc), starting from the float32 state `from` (a run's final weights and momentum; NULL: p's
 * initial state). Its loss weights: p's on the block's outputs, p's on the final state. */
static void block_of(problem *bp, lcase *lc, const problem *p, int t0, int nb,
                     const run_out *from) {
    *lc = *p->c;
    lc->T = nb;
    memset(bp, 0, sizeof *bp);
    bp->c = lc;
    const size_t per[P_W0] = {(size_t)lc->d_k, (size_t)lc->d_k, (size_t)lc->d_v, 1, 1};
    for (int i = 0; i < N_P; i++) {
        if (!p->n[i]) continue;
        const int w = i - P_W0;
        bp->n[i] = i < P_W0 ? (size_t)nb * per[i] : p->n[i];
        bp->f[i] = zalloc(bp->n[i] * sizeof(float));
        bp->x[i] = zalloc(bp->n[i] * sizeof(double));
        const float *src = i < P_W0 ? p->f[i] + (size_t)t0 * per[i] : from ? from->W[w] : p->f[i];
        memcpy(bp->f[i], src, bp->n[i] * sizeof(float));
        for (size_t e = 0; e < bp->n[i]; e++) bp->x[i][e] = bp->f[i][e];
        if (i < P_W0) continue;
        bp->W_norm[w] = p->f[i];
        bp->Wx_norm[w] = p->x[i];
        if (from && from->M[w]) {
            bp->M0[w] = from->M[w];
            bp->Mx0[w] = zalloc(p->n[i] * sizeof(double));
            for (size_t e = 0; e < p->n[i]; e++) bp->Mx0[w][e] = from->M[w][e];
        }
    }
    for (int i = 0; i < 7; i++) {
        bp->nR[i] = i ? p->nR[i] : (size_t)nb * lc->d_v;
        bp->R[i] = i ? p->R[i] : p->R[0] + (size_t)t0 * lc->d_v;
    }
}

/* ref_lact (tests/lact_ref.h) on the problem: its inputs x (p->x, or copies moved by a step), its
 * initial momentum and the layer's first weights' norms */
static void ref_run(const problem *p, double *const *x, double *O, double **W, double **M,
                    ref_block *last, int var) {
    ref_lact(p->c, x, p->Wx_norm[0] ? p->Wx_norm : &p->x[P_W0],
                  p->Mx0[0] ? p->Mx0 : NULL, O, W, M, last, var);
}

/* The Newton–Schulz terms of a block's bound (the top of the file), from the float64 block:
 * per weight, θ·ns_rtol(G)·max|NS(G)| times the renormalization's largest factor (the weights'
 * absolute term), and the largest ns_rtol(G, backward) times that factor (the gradients'
 * relative term); G the block's NS input. Zero without Newton–Schulz. */
typedef struct ns_terms {
    double atol_w[3], rtol_g;
} ns_terms;

static void ns_terms_of(ns_terms *t, const problem *bp) {
    const lcase *c = bp->c;
    memset(t, 0, sizeof *t);
    if (!c->muon) return;
    const int dk = c->d_k, dv = c->d_v, dh = dk;
    const int rows[3] = {dk, dh, dk}, cols[3] = {dh, dv, dh};
    double *O = zalloc(sizeof(double) * (size_t)c->T * dv), *W[3], *M[3], abc[5][3];
    ref_block last;
    for (int w = 0; w < 3; w++) {
        W[w] = zalloc(sizeof(double) * bp->n[P_W0 + w]);
        M[w] = zalloc(sizeof(double) * bp->n[P_W0 + w]);
        last.G[w] = zalloc(sizeof(double) * bp->n[P_W0 + w]);
    }
    ck_assert_int_le(c->T, c->b); /* one block */
    ref_run(bp, bp->x, O, W, M, &last, VAR_OK);
    for (int s = 0; s < 5; s++) memcpy(abc[s], c->ns_lact ? NS_LACT[s] : NS_MUON, sizeof abc[s]);
    const double theta = c->pos_inverse ? (double)c->lr / c->T : (double)c->lr;
    for (int w = 0; w < 3; w++) {
        const size_t n = bp->n[P_W0 + w];
        double *U = zalloc(sizeof(double) * n), umax = 0;
        memcpy(U, last.G[w], sizeof(double) * n);
        ref_ns(U, rows[w], cols[w], c->ns_lact);
        for (size_t e = 0; e < n; e++) umax = fmax(umax, fabs(U[e]));
        const double(*tab)[3] = (const double(*)[3])abc;
        t->atol_w[w] = theta * ns_rtol(last.G[w], rows[w], cols[w], tab, 5, 0) * umax *
                       last.rmax[w];
        t->rtol_g = fmax(t->rtol_g, ns_rtol(last.G[w], rows[w], cols[w], tab, 5, 1) *
                                        last.rmax[w]);
    }
}

/* the control in progress: got multiplied by g_scale before it is compared (1: none) */
static double g_scale = 1.0;

/* got ≈ want (float or double reference) within atol + g_fd_err + rtol·max|want|. With
 * TTT_TEST_VERBOSE set, prints the error as a fraction of max|want| and of the tolerance. */
static int close_to(const float *got, const float *want_f, const double *want_d, size_t n,
                    double atol, double rtol, char *msg, size_t len) {
    float *g = (float *)got;
    if (g_scale != 1.0) {
        g = zalloc(n * sizeof(float));
        for (size_t e = 0; e < n; e++) g[e] = (float)(g_scale * got[e]);
    }
    atol += g_fd_err;
    if (getenv("TTT_TEST_VERBOSE")) {
        double mx = 0, mr = 0;
        for (size_t e = 0; e < n; e++) {
            const double w = want_d ? want_d[e] : (double)want_f[e];
            mx = fmax(mx, fabs((double)g[e] - w));
            mr = fmax(mr, fabs(w));
        }
        printf("error/max %.2e error/tolerance %.3f%s\n", mx / mr, mx / (atol + rtol * mr),
               tu_ratio_quiet ? " (control)" : "");
    }
    return want_d ? tu_close(g, want_d, n, atol, rtol, msg, len)
                  : tu_close_f(g, want_f, n, atol, rtol, msg, len);
}

/* slot s's bound for `paths` float32 paths: g_rtol (floor_for) plus the Newton–Schulz terms,
 * relative to the compared tensor's largest entry; for the gradients of η and log α, relative to
 * the largest gradient entry g_max over every parameter: they enter through the block gradient's
 * weights w_t = η_t·Π α, so dL/dη_t = ⟨dL/dG, ∇ℓ_t⟩ is a sum of terms on the scale of the other
 * gradients (for the dot loss η_t·dL/dη_t = Σ_j v_tj·dL/dv_tj), which Newton–Schulz's
 * invariance to the scale of G cancels to about zero (in a block of one token, exactly but for
 * the 1e-7 of its norm). */
static void slot_tol(int s, const ns_terms *t, int paths, double g_max, double *atol,
                     double *rtol) {
    *atol = s >= S_W && s < S_M ? paths * t->atol_w[s - S_W] : 0.0;
    *rtol = g_rtol + (s >= S_G ? paths * t->rtol_g : 0.0);
    if (s == S_G + P_ETA || s == S_G + P_LA) *atol += *rtol * g_max;
}

/* the largest gradient entry over every parameter of a run */
static double grad_max(const run_out *r, const problem *p) {
    double m = 0;
    for (int i = 0; i < N_P; i++)
        for (size_t e = 0; r->g[i] && e < p->n[i]; e++) m = fmax(m, fabs(r->g[i][e]));
    return m;
}

/* every slot in [s0, s1) of got against want, two float32 paths */
static int runs_close(const run_out *got, const run_out *want, const problem *p,
                      const ns_terms *t, int s0, int s1, char *msg, size_t len) {
    for (int s = s0; s < s1; s++) {
        size_t n;
        const float *g = slot(got, p, s, &n), *w = slot(want, p, s, &n);
        if (!g || !w) continue;
        char m[400], nm[48];
        double atol, rtol;
        slot_tol(s, t, 2, grad_max(want, p), &atol, &rtol);
        if (!close_to(g, w, NULL, n, atol, rtol, m, sizeof m)) {
            if (msg) snprintf(msg, len, "%s: %s", slot_name(s, nm, sizeof nm), m);
            return 0;
        }
    }
    return 1;
}

/* the first token of the block after the one at t0 … (blocks of c->b) */
#define EACH_BLOCK(c, t0, nb)                                                                    \
    for (int t0 = 0, nb = (c)->b < (c)->T ? (c)->b : (c)->T; t0 < (c)->T;                       \
         t0 += (c)->b, nb = t0 + (c)->b <= (c)->T ? (c)->b : (c)->T - t0)

/* ------------------------------------------------------------------------------------------ */
/* (a) forward = the generic driver */

START_TEST(test_forward_matches_generic) {
    const lcase *c = &fwd_cases[_i];
    if (getenv("TTT_TEST_VERBOSE")) printf("forward: %s\n", c->name);
    ttt_layer L;
    case_layer(c, &L);
    problem p;
    draw(&p, c, 500 + (uint64_t)_i);
    run_out gen;
    const run_out *from = NULL;
    char msg[512];
    EACH_BLOCK(c, t0, nb) { /* each block from the driver's float32 state (the top of the file) */
        problem bp;
        lcase lc;
        block_of(&bp, &lc, &p, t0, nb, from);
        run_out clo, clo_tape;
        run(&gen, &L, "generic", &bp, 0);
        run(&clo, &L, "chunkwise", &bp, 0);
        run(&clo_tape, &L, "chunkwise", &bp, 1);
        ns_terms nt;
        ns_terms_of(&nt, &bp);
        floor_for(&lc, 2, 1);
        ck_assert_msg(runs_close(&clo, &gen, &bp, &nt, S_O, S_G, msg, sizeof msg),
                      "%s, block at %d: %s", c->name, t0, msg);
        ck_assert_msg(runs_close(&clo_tape, &gen, &bp, &nt, S_O, S_G, msg, sizeof msg),
                      "%s (tape), block at %d: %s", c->name, t0, msg);
        /* control: the closed form's results scaled by 1.05 */
        g_scale = 1.05, tu_ratio_quiet = 1;
        const int passes = runs_close(&clo, &gen, &bp, &nt, S_O, S_G, NULL, 0);
        g_scale = 1.0, tu_ratio_quiet = 0;
        ck_assert_msg(!passes, "%s, block at %d: the results scaled by 1.05 pass", c->name, t0);
        from = &gen;
    }
}
END_TEST

/* A sequence split at a block boundary: the second call continues from the carried weights and
 * optimizer state (both in place without a tape) and gives the one-call result: the same float
 * operations on the same values, held to the forward floor of two float32 paths. */
START_TEST(test_split_continues) {
    const lcase *c = &fwd_cases[4]; /* momentum: the optimizer state matters */
    ttt_layer L;
    case_layer(c, &L);
    L.form = "chunkwise";
    problem p;
    draw(&p, c, 41);
    run_out one;
    run(&one, &L, "chunkwise", &p, 0);
    ttt_ctx ng = {.arena = ctx->arena};
    ttt_layer_state st;
    ttt_layer_state_init(&ng, &L, &st, NULL);
    for (int w = 0; w < 3; w++) {
        memcpy(st.W[w]->data, p.f[P_W0 + w], p.n[P_W0 + w] * sizeof(float));
        L.optim->init_state(L.optim_cfg, st.opt[w], st.W[w]);
    }
    const int T1 = 2 * c->b, dk = c->d_k, dv = c->d_v;
    ttt_tensor *o = ttt_tensor_2d(&ng, c->T, dv);
    for (int part = 0; part < 2; part++) {
        const int a = part ? T1 : 0, e = part ? c->T : T1, n = e - a;
        ttt_tensor *q = ttt_tensor_2d(&ng, n, dk), *k = ttt_tensor_2d(&ng, n, dk);
        ttt_tensor *v = ttt_tensor_2d(&ng, n, dv), *eta = ttt_tensor_1d(&ng, n);
        memcpy(q->data, p.f[P_Q] + (size_t)a * dk, q->n * sizeof(float));
        memcpy(k->data, p.f[P_K] + (size_t)a * dk, k->n * sizeof(float));
        memcpy(v->data, p.f[P_V] + (size_t)a * dv, v->n * sizeof(float));
        memcpy(eta->data, p.f[P_ETA] + a, eta->n * sizeof(float));
        ttt_tensor *os = ttt_tensor_2d(&ng, n, dv);
        ttt_error err = {0};
        ck_assert_msg(ttt_layer_forward(&ng, &L, os, &st, q, k, v, eta, NULL, &err) == TTT_OK,
                      "%s", err.msg);
        memcpy(o->data + (size_t)a * dv, os->data, os->n * sizeof(float));
    }
    floor_for(c, 2, 1); /* two float32 runs (here the same operations: 0 measured) */
    TU_ASSERT_CLOSE_F(o->data, one.o, o->n, 0, g_rtol);
    for (int w = 0; w < 3; w++) {
        TU_ASSERT_CLOSE_F(st.W[w]->data, one.W[w], st.W[w]->n, 0, g_rtol);
        TU_ASSERT_CLOSE_F(st.opt[w][0]->data, one.M[w], st.W[w]->n, 0, g_rtol);
    }
    /* control: the one-call run with the third key 1 % larger is rejected */
    problem pk = p;
    pk.f[P_K] = zalloc(p.n[P_K] * sizeof(float));
    memcpy(pk.f[P_K], p.f[P_K], p.n[P_K] * sizeof(float));
    for (int j = 0; j < dk; j++) pk.f[P_K][2 * dk + j] *= 1.01f;
    run_out onek;
    run(&onek, &L, "chunkwise", &pk, 0);
    tu_ratio_quiet = 1;
    ck_assert(!tu_close_f(o->data, onek.o, o->n, 0, g_rtol, NULL, 0));
    tu_ratio_quiet = 0;
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (b) gradients = the generic driver's through the tape */

START_TEST(test_grads_match_generic) {
    const lcase *c = &fwd_cases[_i];
    if (getenv("TTT_TEST_VERBOSE")) printf("gradients vs generic: %s\n", c->name);
    ttt_layer L;
    case_layer(c, &L);
    /* the control of the Newton–Schulz cases: the driver without Newton–Schulz */
    ttt_layer Lx;
    lcase cx = *c;
    cx.muon = 0;
    case_layer(&cx, &Lx);
    problem p;
    draw(&p, c, 700 + (uint64_t)_i);
    run_out gen;
    const run_out *from = NULL;
    char msg[512];
    int scaled_rejected = 0;
    EACH_BLOCK(c, t0, nb) { /* each block from the driver's float32 state (the top of the file) */
        problem bp;
        lcase lc;
        block_of(&bp, &lc, &p, t0, nb, from);
        run_out clo;
        run(&gen, &L, "generic", &bp, 1);
        run(&clo, &L, "chunkwise", &bp, 1);
        ns_terms nt;
        ns_terms_of(&nt, &bp);
        floor_for(&lc, 2, 2);
        ck_assert_msg(runs_close(&clo, &gen, &bp, &nt, S_G, N_S, msg, sizeof msg),
                      "%s, block at %d: %s", c->name, t0, msg);
        /* controls: the gradients scaled by 1.05, rejected in some block (where Newton–Schulz's
         * term is above 2.5 % the bound cannot tell them), and with Newton–Schulz the driver's
         * without it, in every block */
        g_scale = 1.05, tu_ratio_quiet = 1;
        scaled_rejected += !runs_close(&clo, &gen, &bp, &nt, S_G, N_S, NULL, 0);
        g_scale = 1.0;
        if (c->muon) {
            run_out gx;
            run(&gx, &Lx, "generic", &bp, 1);
            if (getenv("TTT_TEST_VERBOSE")) printf("control without Newton–Schulz\n");
            ck_assert_msg(!runs_close(&clo, &gx, &bp, &nt, S_G, N_S, NULL, 0),
                          "%s, block at %d: the gradients without Newton–Schulz pass", c->name,
                          t0);
        }
        tu_ratio_quiet = 0;
        from = &gen;
    }
    ck_assert_msg(scaled_rejected > 0, "%s: the gradients scaled by 1.05 pass", c->name);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* the float64 reference: tests/lact_ref.h */

typedef struct ref_out {
    double *O, *W[3], *M[3];
} ref_out;

static void ref_alloc(ref_out *r, const problem *p) {
    r->O = zalloc(sizeof(double) * (size_t)p->c->T * p->c->d_v);
    for (int w = 0; w < 3; w++) {
        r->W[w] = zalloc(sizeof(double) * p->n[P_W0 + w]);
        r->M[w] = zalloc(sizeof(double) * p->n[P_W0 + w]);
    }
}

static double ref_loss(const problem *p, double *const *x, const ref_out *r) {
    ref_run(p, x, r->O, (double **)r->W, (double **)r->M, NULL, VAR_OK);
    double L = 0;
    for (size_t e = 0; e < p->nR[0]; e++) L += p->R[0][e] * r->O[e];
    for (int w = 0; w < 3; w++) {
        for (size_t e = 0; e < p->nR[1 + w]; e++) L += p->R[1 + w][e] * r->W[w][e];
        for (size_t e = 0; e < p->nR[4 + w]; e++) L += p->R[4 + w][e] * r->M[w][e];
    }
    return L;
}

/* Central differences D(h) of ref_loss w.r.t. parameter i; *err gets their largest error
 * estimate (the top of the file): 4/3·|D(h) − D(h/2)| + 2·6ε₆₄·√(n·T)·Σ|R ⊙ outputs| / (2h). */
static double *fd_grad_err(const problem *p, int i, double *err) {
    double *g = zalloc(sizeof(double) * p->n[i]);
    double *x[N_P];
    for (int j = 0; j < N_P; j++) {
        x[j] = NULL;
        if (!p->n[j]) continue;
        x[j] = zalloc(sizeof(double) * p->n[j]);
        memcpy(x[j], p->x[j], sizeof(double) * p->n[j]);
    }
    ref_out r;
    ref_alloc(&r, p);
    /* Σ|R ⊙ outputs| at x: the scale of a float64 loss's rounding */
    ref_loss(p, x, &r);
    double labs = 0;
    for (size_t e = 0; e < p->nR[0]; e++) labs += fabs(p->R[0][e] * r.O[e]);
    for (int w = 0; w < 3; w++) {
        for (size_t e = 0; e < p->nR[1 + w]; e++) labs += fabs(p->R[1 + w][e] * r.W[w][e]);
        for (size_t e = 0; e < p->nR[4 + w]; e++) labs += fabs(p->R[4 + w][e] * r.M[w][e]);
    }
    const lcase *c = p->c;
    const double d = c->d_k > c->d_v ? c->d_k : c->d_v;
    const double n = (4 + 15 * (c->muon != 0)) * d + c->T + 10;
    const double lround = 6 * 0x1p-53 * sqrt(n * c->T) * labs;
    double worst = 0;
    for (size_t e = 0; e < p->n[i]; e++) {
        const double x0 = x[i][e], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
        double D[2];
        for (int k = 0; k < 2; k++) {
            const double hk = k ? h / 2 : h;
            x[i][e] = x0 + hk;
            const double lp = ref_loss(p, x, &r);
            x[i][e] = x0 - hk;
            const double lm = ref_loss(p, x, &r);
            D[k] = (lp - lm) / (2 * hk);
        }
        x[i][e] = x0;
        g[e] = D[0];
        worst = fmax(worst, 4.0 / 3.0 * fabs(D[0] - D[1]) + 2 * lround / (2 * h));
    }
    *err = worst;
    return g;
}

/* The closed form's forward (outputs, final weights and momentum) of a block = the float64
 * reference run as `var`, one float32 path (the top of the file). */
static int ref_forward_close(const problem *p, const run_out *clo, const ns_terms *t, int var,
                             char *msg, size_t len) {
    ref_out r;
    ref_alloc(&r, p);
    ref_run(p, p->x, r.O, r.W, r.M, NULL, var);
    for (int s = S_O; s < S_G; s++) {
        size_t n;
        const float *g = slot(clo, p, s, &n);
        if (!g) continue;
        const double *want = s == S_O ? r.O : s < S_M ? r.W[s - S_W] : r.M[s - S_M];
        char m[400], nm[48];
        double atol, rtol;
        slot_tol(s, t, 1, 0.0, &atol, &rtol);
        if (!close_to(g, NULL, want, n, atol, rtol, m, sizeof m)) {
            if (msg) snprintf(msg, len, "%s: %s", slot_name(s, nm, sizeof nm), m);
            return 0;
        }
    }
    return 1;
}

/* The closed form's gradient w.r.t. parameter i of a block = the float64 differences fd, one
 * float32 path plus the differences' own error g_fd_err; g_max: the largest difference over
 * every parameter. */
static int fd_close(const problem *p, const run_out *clo, const ns_terms *t, int i,
                    const double *fd, double g_max, char *msg, size_t len) {
    double atol, rtol;
    slot_tol(S_G + i, t, 1, g_max, &atol, &rtol);
    return close_to(clo->g[i], NULL, fd, p->n[i], atol, rtol, msg, len);
}

START_TEST(test_reference_forward_and_fd) {
    const lcase *c = &fd_cases[_i];
    if (getenv("TTT_TEST_VERBOSE")) printf("float64 reference and FD: %s\n", c->name);
    ttt_layer L;
    case_layer(c, &L);
    problem p;
    draw(&p, c, 900 + (uint64_t)_i);
    run_out clo;
    const run_out *from = NULL;
    char msg[512];
    EACH_BLOCK(c, t0, nb) { /* each block from the closed form's float32 state */
        problem bp;
        lcase lc;
        block_of(&bp, &lc, &p, t0, nb, from);
        run(&clo, &L, "chunkwise", &bp, 1);
        ns_terms nt;
        ns_terms_of(&nt, &bp);
        floor_for(&lc, 1, 1); /* one float32 path against float64 */
        ck_assert_msg(ref_forward_close(&bp, &clo, &nt, VAR_OK, msg, sizeof msg),
                      "%s, block at %d: %s", c->name, t0, msg);
        floor_for(&lc, 1, 2);
        int scaled_rejected = 0;
        double *fd[N_P] = {0}, fd_err[N_P] = {0}, g_max = 0;
        for (int i = 0; i < N_P; i++) {
            if (!bp.n[i]) continue;
            fd[i] = fd_grad_err(&bp, i, &fd_err[i]);
            for (size_t e = 0; e < bp.n[i]; e++) g_max = fmax(g_max, fabs(fd[i][e]));
        }
        for (int i = 0; i < N_P; i++) {
            if (!bp.n[i]) continue;
            g_fd_err = fd_err[i];
            ck_assert_msg(fd_close(&bp, &clo, &nt, i, fd[i], g_max, msg, sizeof msg),
                          "%s, block at %d: d/d%s vs finite differences: %s (differences' error "
                          "%.3e)", c->name, t0, p_names[i], msg, g_fd_err);
            g_scale = 1.05, tu_ratio_quiet = 1; /* control: the gradients scaled by 1.05 */
            scaled_rejected += !fd_close(&bp, &clo, &nt, i, fd[i], g_max, NULL, 0);
            g_scale = 1.0, tu_ratio_quiet = 0;
            g_fd_err = 0;
        }
        ck_assert_msg(scaled_rejected > 0, "%s, block at %d: the gradients scaled by 1.05 pass",
                      c->name, t0);
        from = &clo;
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (c) wrong variants fail */

START_TEST(test_wrong_variants_fail) {
    if (getenv("TTT_TEST_VERBOSE")) printf("wrong variants\n");
    /* momentum, rows and per-token gates, so every variant changes something */
    const lcase *c = &fd_cases[1];
    ttt_layer L, Lb;
    case_layer(c, &L);
    /* the generic driver with a smaller block (a block of the case is one call, so b + 1 would
     * be the same call) */
    lcase cb = *c;
    cb.b = c->b - 1;
    case_layer(&cb, &Lb);
    problem p;
    draw(&p, c, 31);
    run_out clo;
    const run_out *from = NULL;
    char msg[512];
    int rejected[5] = {0}, fd_rejected = 0;
    EACH_BLOCK(c, t0, nb) {
        problem bp;
        lcase lc;
        block_of(&bp, &lc, &p, t0, nb, from);
        run(&clo, &L, "chunkwise", &bp, 1);
        ns_terms nt;
        ns_terms_of(&nt, &bp);
        floor_for(&lc, 1, 1);
        ck_assert_msg(ref_forward_close(&bp, &clo, &nt, VAR_OK, msg, sizeof msg), "%s", msg);
        tu_ratio_quiet = 1;
        rejected[0] += !ref_forward_close(&bp, &clo, &nt, VAR_READ_AFTER, NULL, 0);
        rejected[1] += !ref_forward_close(&bp, &clo, &nt, VAR_AXIS_SWAP, NULL, 0);
        rejected[2] += !ref_forward_close(&bp, &clo, &nt, VAR_NO_DECAY_WEIGHTS, NULL, 0);
        run_out gen;
        run(&gen, &Lb, "generic", &bp, 1);
        floor_for(&lc, 2, 1);
        rejected[3] += !runs_close(&clo, &gen, &bp, &nt, S_O, S_G, NULL, 0);
        floor_for(&lc, 2, 2);
        rejected[4] += !runs_close(&clo, &gen, &bp, &nt, S_G, N_S, NULL, 0);
        tu_ratio_quiet = 0;
        if (t0 == 0) {
            /* one gradient element off by a relative 5e-2 fails the finite-difference
             * comparison (1e-2 lands at 1.2 tolerances: the block's NS term is 1.6e-2 of the
             * largest entry here) */
            floor_for(&lc, 1, 2);
            double *fd = fd_grad_err(&bp, P_K, &g_fd_err);
            ck_assert(fd_close(&bp, &clo, &nt, P_K, fd, 0.0, NULL, 0));
            size_t big = 0;
            for (size_t e = 1; e < bp.n[P_K]; e++)
                if (fabs(fd[e]) > fabs(fd[big])) big = e;
            clo.g[P_K][big] *= 1.05f;
            tu_ratio_quiet = 1;
            fd_rejected = !fd_close(&bp, &clo, &nt, P_K, fd, 0.0, NULL, 0);
            tu_ratio_quiet = 0;
            clo.g[P_K][big] /= 1.05f;
            g_fd_err = 0;
        }
        from = &clo;
    }
    for (int v = 0; v < 5; v++) ck_assert_msg(rejected[v] > 0, "wrong variant %d passes", v);
    ck_assert_msg(fd_rejected, "a gradient element 5 %% off passes");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* form selection and errors */

static ttt_status try_parse(const char *text, ttt_layer *L, ttt_error *err) {
    ttt_cfg_node *root = NULL;
    ck_assert(ttt_cfg_load_string(text, "<test>", &root, err) == TTT_OK);
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 4, 4, L, err);
    ttt_cfg_free(root);
    return s;
}

START_TEST(test_auto_form_and_errors) {
    ttt_layer L;
    ttt_error err = {0};
    /* auto: the closed form for the preset and for the options it implements */
    const char *closed[] = {
        "layer: {preset: lact}\n",
        "layer: {preset: lact, mini_batch: 16, loss: squared}\n",
        "layer: {preset: lact, optimizer: {momentum: 0.5, decay: 0.9, coefficients: lact}}\n",
        "layer: {preset: lact, position_scale: inverse, optimizer: {renormalize: false}}\n",
    };
    for (size_t i = 0; i < sizeof closed / sizeof closed[0]; i++) {
        ck_assert_msg(try_parse(closed[i], &L, &err) == TTT_OK, "%s", err.msg);
        ck_assert_msg(strcmp(tu_form_used(&L), "chunkwise") == 0, "%s", closed[i]);
    }
    /* auto: the generic driver where the closed form does not apply; asking for the closed
     * form there is a configuration error that names form: generic */
    const char *generic[] = {
        "layer: {preset: lact, steps: per_token",
        "layer: {preset: lact, optimizer: {decay: 0.9, decay_placement: coupled}",
        "layer: {preset: lact, optimizer: {lr: 0.0}",
        "layer: {preset: lact, order: update_then_apply",
        "layer: {preset: lact, optimizer: {name: muon}",
        "layer: {preset: lact, model: ttt_mlp",
    };
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s}\n", generic[i]);
        ck_assert_msg(try_parse(text, &L, &err) == TTT_OK, "%s", err.msg);
        ck_assert_msg(strcmp(tu_form_used(&L), "generic") == 0, "%s", text);
        snprintf(text, sizeof text, "%s, form: chunkwise}\n", generic[i]);
        ck_assert_int_eq(try_parse(text, &L, &err), TTT_ERR_CONFIG);
        ck_assert_msg(strstr(err.msg, "form: generic") != NULL, "%s", err.msg);
    }
    /* options only known at run time: per-token gates with coupled placement, a vector gate.
     * Asked for by name, the form refuses them and says why; auto runs the generic driver
     * (test_contract_forms.c compares the two). */
    ck_assert(try_parse("layer: {preset: lact, mini_batch: 2, form: chunkwise, optimizer: "
                        "{decay_placement: coupled}}\n",
                        &L, &err) == TTT_OK);
    ck_assert_str_eq(tu_form_used(&L), "chunkwise");
    ttt_ctx ng = {.arena = ctx->arena};
    const int T = 5;
    ttt_tensor *q = ttt_tensor_2d(&ng, T, 4), *o = ttt_tensor_2d(&ng, T, 4);
    ttt_tensor *la = ttt_tensor_1d(&ng, T), *lav = ttt_tensor_2d(&ng, T, 4);
    ttt_tensor_fill(q, 0.1f);
    ttt_tensor_fill(la, -0.1f);
    ttt_tensor_fill(lav, -0.1f);
    ttt_layer_state st;
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ck_assert_int_eq(ttt_layer_forward(&ng, &L, o, &st, q, q, q, NULL, la, &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "form: generic") && strstr(err.msg, "coupled"), "%s", err.msg);
    ck_assert_int_eq(ttt_layer_forward_diff(&ng, &L, o, &st, q, q, q, NULL, la, 0, &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "form: generic"), "%s", err.msg);
    ck_assert(try_parse("layer: {preset: lact, mini_batch: 2}\n", &L, &err) == TTT_OK);
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ck_assert_int_eq(ttt_lact_composed(&ng, &L, o, &st, q, q, q, NULL, lav, &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "form: generic") && strstr(err.msg, "vector"), "%s", err.msg);
    /* the generic form of the same layer runs (the per-token gates, coupled) */
    ck_assert(try_parse("layer: {preset: lact, mini_batch: 2, form: generic, optimizer: "
                        "{decay_placement: coupled}}\n",
                        &L, &err) == TTT_OK);
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ck_assert_msg(ttt_layer_forward(&ng, &L, o, &st, q, q, q, NULL, la, &err) == TTT_OK, "%s",
                  err.msg);
    /* a tuple outside the family */
    ck_assert(try_parse("layer: {preset: deltanet}\n", &L, &err) == TTT_OK);
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ck_assert_int_eq(ttt_lact_composed(&ng, &L, o, &st, q, q, q, NULL, NULL, &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "form: generic"), "%s", err.msg);
}
END_TEST

static Suite *lact_suite(void) {
    Suite *s = suite_create("lact_composed");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_forward_matches_generic, 0, N_FWD);
    tcase_add_test(tc, test_split_continues);
    tcase_add_loop_test(tc, test_grads_match_generic, 0, N_FWD);
    tcase_add_loop_test(tc, test_reference_forward_and_fd, 0, N_FD);
    tcase_add_test(tc, test_wrong_variants_fail);
    tcase_add_test(tc, test_auto_form_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(lact_suite()); }
