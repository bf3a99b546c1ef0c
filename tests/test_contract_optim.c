/* The contract every inner optimizer meets (optim/optim.h, docs/optimizers.md "Contract tests"),
 * checked for every optimizer in the registry, so that a new optimizer is tested by adding it to
 * optim/optim_list.h, without editing this file.
 *
 * Each optimizer runs with its defaults and with option variants read from its own option table:
 * every boolean flipped, every other value of every choice, and every number whose default is 0
 * (an "off" switch: large_batch's momentum, muon's weight decay, sgd's l2) turned on at 0.5. For
 * each variant:
 *   (a) the outer-loop gradient through `step` (the float32 tape) agrees with central finite
 *       differences of the layer's loss (outputs, final weights and final state), w.r.t. q, k,
 *       v, η, the gates and the initial weights (through the state's init_state_ops,
 *       ttt_optim_reinit_state);
 *   (b) `step` does not modify W, the state, G or the decay (bytes compared), and returns a new
 *       W of W's shape and every state tensor with its declared shape (optim.h state_shape);
 *   (c) with mini-batch b = 1 the driver (steps per_block and per_token, both orders, scalar
 *       and per-key gates) equals a hand-written loop that calls `step` once per token, the
 *       b = 1 definition of the layer (docs/math.md §1);
 * and for every option of every optimizer:
 *   (d) `ttt list` shows it with its default and help, and an experiment YAML that sets it
 *       (both booleans, every choice, a number inside its range) validates, resolves to that
 *       value and is parsed by the optimizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

/* ============================================================================================ */
/* Variants from the option tables                                                              */

typedef struct variant {
    const ttt_optim *o;
    char opts[160]; /* extra "key: value" for the optimizer mapping ("" = defaults) */
} variant;

#define MAX_VARIANTS 256

/* The options every optimizer shares (optim.h TTT_OPTIM_COMMON_OPTIONS): the layer's, not the
 * optimizer's, except decay_placement, which changes where `step`'s gradient is taken and so is
 * varied like the optimizer's own choices. */
static int is_common(const ttt_option *opt) {
    return strcmp(opt->name, "name") == 0 || strcmp(opt->name, "lr") == 0 ||
           strcmp(opt->name, "decay") == 0;
}

/* Room for one more variant (the list is built before Check runs, so no ck_assert here). */
static void room(int n) {
    if (n >= MAX_VARIANTS) {
        fprintf(stderr, "test_contract_optim: more than %d variants\n", MAX_VARIANTS);
        abort();
    }
}

/* All variants of all registered optimizers into v (returns their number). */
static int all_variants(variant *v) {
    int n = 0;
    for (int i = 0; i < ttt_optim_count(); i++) {
        const ttt_optim *o = ttt_optim_at(i);
        room(n);
        v[n++] = (variant){.o = o, .opts = ""};
        for (const ttt_option *opt = o->options; opt->name; opt++) {
            if (is_common(opt)) continue;
            if (opt->type == TTT_OPT_BOOL) {
                room(n);
                v[n].o = o;
                snprintf(v[n++].opts, sizeof v->opts, ", %s: %s", opt->name,
                         strcmp(opt->def, "true") == 0 ? "false" : "true");
            } else if (opt->type == TTT_OPT_CHOICE) {
                char buf[256];
                snprintf(buf, sizeof buf, "%s", opt->choices);
                for (char *c = strtok(buf, "|"); c; c = strtok(NULL, "|")) {
                    if (strcmp(c, opt->def) == 0) continue;
                    room(n);
                    v[n].o = o;
                    snprintf(v[n++].opts, sizeof v->opts, ", %s: %s", opt->name, c);
                }
            } else if (opt->type == TTT_OPT_FLOAT && opt->def && strtod(opt->def, NULL) == 0.0 &&
                       opt->max >= 0.5) {
                room(n);
                v[n].o = o;
                snprintf(v[n++].opts, sizeof v->opts, ", %s: 0.5", opt->name);
            }
        }
    }
    return n;
}

/* The layer of `model`/`loss` with variant v (lr 0.3: the defaults' lr = 1 is larger than these
 * random small problems tolerate for every rule). */
static void variant_layer(ttt_layer *L, const variant *v, const char *model, const char *loss,
                          int mini_batch, const char *more, int d) {
    char text[640];
    snprintf(text, sizeof text,
             "layer: {model: %s, loss: %s, mini_batch: %d, form: generic%s, optimizer: {name: %s, "
             "lr: 0.3%s}}\n",
             model, loss, mini_batch, more, v->o->name, v->opts);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "contract.yaml", &root, &err) == TTT_OK, "%s: %s",
                  text, err.msg);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, L, &err) ==
                      TTT_OK,
                  "%s: %s", text, err.msg);
    ttt_cfg_free(root);
}

static int n_variants;
static variant variants[MAX_VARIANTS];

static void setup(void) { n_variants = all_variants(variants); }

/* The variants really come from the tables: every registered optimizer has its defaults, and
 * the tables' booleans and choices give more (muon: nesterov, coefficients, scale, ...). */
START_TEST(variants_cover_the_registry) {
    ck_assert_int_gt(ttt_optim_count(), 0);
    for (int i = 0; i < ttt_optim_count(); i++) {
        int found = 0;
        for (int j = 0; j < n_variants; j++) found += variants[j].o == ttt_optim_at(i);
        /* defaults plus decay_placement: coupled at least */
        ck_assert_msg(found >= 2, "%s: %d variants", ttt_optim_at(i)->name, found);
    }
}
END_TEST

/* Models of the b = 1 check: the linear model (one 2-D weight) with a scalar gate per token and
 * with a gate per token and key dimension, and the MLP (2-D and 1-D weights, random
 * initialization, so that renormalization has norms to keep). */
static const struct {
    const char *model, *loss;
    int per_key;
} models[] = {{"linear", "squared", 0}, {"linear", "squared", 1}, {"ttt_mlp", "recon", 0}};
#define N_MODELS 3

/* ============================================================================================ */
/* (a) gradients through step                                                                   */

/* T = 6 tokens of width 3 in blocks of b = 3: a block gradient can have full rank (min(b, d) =
 * 3), so Newton–Schulz is not evaluated at exactly-zero singular values, where its polynomial's
 * slope p'(0) = a^steps (~500 for Muon's) makes any finite difference nonlinear. */
enum { GT = 6, GD = 3, GB = 3, N_IN = 5 };

/* The leaves of the outer loss: q, k, v, η, log α, then the initial weights. */
typedef struct grad_problem {
    int per_key; /* log α per token and key dimension (GLA's gates: a decay per row of W) */
    int n_leaves;
    float *buf[N_IN + TTT_MAX_WEIGHTS];
    float *grad[N_IN + TTT_MAX_WEIGHTS];
    size_t n[N_IN + TTT_MAX_WEIGHTS];
    int ndim[N_IN + TTT_MAX_WEIGHTS];
    int shape[N_IN + TTT_MAX_WEIGHTS][TTT_MAX_DIMS];
    float *r; /* projections of the outputs: (GT·GD) for o, then 512 for weights and state */
} grad_problem;

#define R_FLOATS 512
#define MAX_LEVELS 6 /* the step ladder of the gradient check: h down to h/2^7 */

/* Σ|terms| of the last grad_loss value (Σ|r ⊙ o| + Σ|r ⊙ W| + Σ|r ⊙ state|): the scale of its
 * rounding. */
static double last_abs_loss;

/* L = Σ r ⊙ o + Σ_w r ⊙ W_final[w] + Σ_w,s r ⊙ state_final[w][s], the state rebuilt from the
 * initial-weight leaves (ttt_optim_reinit_state). Gradients into p->grad when with_grad. */
static double grad_loss(const ttt_layer *L, grad_problem *p, int with_grad) {
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = with_grad, .tape = with_grad ? &tape : NULL};
    ttt_tensor leaf[N_IN + TTT_MAX_WEIGHTS];
    for (int i = 0; i < p->n_leaves; i++) {
        leaf[i] = ttt_tensor_view(p->buf[i], p->ndim[i], p->shape[i]);
        if (with_grad) ttt_tensor_set_param(&leaf[i], p->grad[i]);
    }
    ttt_layer_state st;
    ttt_layer_state_init(&ctx, L, &st, NULL);
    for (int w = 0; w < st.n_w; w++) {
        /* a copy: without a tape the driver updates the state in place */
        st.W[w] = ttt_tensor_copy(&ctx, &leaf[N_IN + w]);
        ttt_optim_reinit_state(&ctx, L->optim, L->optim_cfg, st.opt[w], st.n_opt, st.W[w]);
    }
    ttt_tensor *o = ttt_tensor_2d(&ctx, GT, GD);
    ttt_error err = {0};
    ck_assert_msg(ttt_forward_generic(&ctx, L, o, &st, &leaf[0], &leaf[1], &leaf[2], &leaf[3],
                                      &leaf[4], p->per_key, &err) == TTT_OK,
                  "%s", err.msg);
    ttt_tensor ro = ttt_tensor_view(p->r, 2, (int[]){GT, GD});
    ttt_tensor *loss = ttt_dot(&ctx, o, &ro);
    /* The value for the difference quotients, summed in double from the float32 outputs: the
     * float32 loss tensor is rounded at every dot and every add (half an ulp of |loss| each),
     * which a quotient turns into noise of the size of the tolerance's absolute floor. */
    double val = 0, vabs = 0;
    for (size_t i = 0; i < o->n; i++)
        val += (double)o->data[i] * p->r[i], vabs += fabs((double)o->data[i] * p->r[i]);
    size_t off = (size_t)GT * GD;
    for (int w = 0; w < st.n_w; w++)
        for (int s = -1; s < st.n_opt; s++) {
            ttt_tensor *t = s < 0 ? st.W[w] : st.opt[w][s];
            ck_assert(off + t->n <= (size_t)GT * GD + R_FLOATS);
            /* the tape keeps pointers to its inputs: a constant in the arena, not a view on the
             * stack */
            ttt_tensor *rt = ttt_tensor_new(&ctx, t->ndim, t->shape);
            memcpy(rt->data, p->r + off, t->n * sizeof(float));
            for (size_t i = 0; i < t->n; i++)
                val += (double)t->data[i] * rt->data[i],
                    vabs += fabs((double)t->data[i] * rt->data[i]);
            off += t->n;
            loss = ttt_add(&ctx, loss, ttt_dot(&ctx, t, rt));
        }
    if (with_grad) ttt_backward(&ctx, loss);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    last_abs_loss = vabs;
    return val;
}

static void grad_problem_make(grad_problem *p, const ttt_layer *L, int per_key, ttt_rng *rng) {
    memset(p, 0, sizeof *p);
    p->per_key = per_key;
    const int nw = L->model->n_weights;
    p->n_leaves = N_IN + nw;
    const int in_shape[N_IN][2] = {{GT, GD}, {GT, GD}, {GT, GD}, {GT, 0}, {GT, per_key ? GD : 0}};
    for (int i = 0; i < N_IN; i++) {
        p->ndim[i] = in_shape[i][1] ? 2 : 1;
        p->shape[i][0] = in_shape[i][0], p->shape[i][1] = in_shape[i][1];
    }
    for (int w = 0; w < nw; w++)
        p->ndim[N_IN + w] = L->model->shape(w, GD, GD, p->shape[N_IN + w]);
    for (int i = 0; i < p->n_leaves; i++) {
        p->n[i] = 1;
        for (int d = 0; d < p->ndim[i]; d++) p->n[i] *= (size_t)p->shape[i][d];
        p->buf[i] = malloc(p->n[i] * sizeof(float));
        p->grad[i] = calloc(p->n[i], sizeof(float));
    }
    ttt_rng_fill_normal(rng, p->buf[0], p->n[0], 0, 0.7f);
    ttt_rng_fill_normal(rng, p->buf[1], p->n[1], 0, 0.5f);
    ttt_rng_fill_normal(rng, p->buf[2], p->n[2], 0, 1.0f);
    ttt_rng_fill_uniform(rng, p->buf[3], p->n[3], 0.2f, 0.8f);      /* η */
    ttt_rng_fill_uniform(rng, p->buf[4], p->n[4], -0.4f, -0.05f);   /* log α */
    /* initial weights: the model's own initialization, or random ones where it starts at zero
     * (the linear model), which would leave renormalization no norms to keep */
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 16);
    ttt_ctx ctx = {.arena = &arena};
    ttt_layer_state st;
    ttt_layer_state_init(&ctx, L, &st, rng);
    for (int w = 0; w < nw; w++) {
        memcpy(p->buf[N_IN + w], st.W[w]->data, p->n[N_IN + w] * sizeof(float));
        double amax = 0;
        for (size_t j = 0; j < p->n[N_IN + w]; j++) amax = fmax(amax, fabs(p->buf[N_IN + w][j]));
        if (amax == 0) ttt_rng_fill_normal(rng, p->buf[N_IN + w], p->n[N_IN + w], 0, 0.5f);
    }
    ttt_arena_free(&arena);
    p->r = malloc(((size_t)GT * GD + R_FLOATS) * sizeof(float));
    ttt_rng_fill_normal(rng, p->r, (size_t)GT * GD + R_FLOATS, 0, 1);
}

static void grad_problem_free(grad_problem *p) {
    for (int i = 0; i < p->n_leaves; i++) free(p->buf[i]), free(p->grad[i]);
    free(p->r);
}

/* Tolerance (docs/hardening.md "Portable tolerances"; the terms of tests/test_layer_grad.c). The
 * forward is float32, so the central differences D(h) are Richardson-extrapolated,
 * X = (4 D(h'/2) − D(h'))/3, which cancels the h² term, on a ladder of steps h' = h/2^k from
 * h = 4e-3. With n = 4·d + T + 10 roundings per state entry per token (d the widest dimension of
 * the weights: a d-term product, a norm's or a block's sums, a few element-wise), ε = 2^-24,
 * each term on its own:
 *   - the tape gradient: its forward and backward walk, 6ε·√(2n·T) on the largest gradient entry
 *     of the leaf;
 *   - the rounding of the differences: each float32-forward loss (summed in double) is within
 *     δL = 6ε·√(n·T)·Σ|terms of the loss| of the exact one; X at level k (steps h_k/2 and h_k/4,
 *     h_k = h/2^k) carries (4·2δL/(h_k/4) + 2δL/(h_k/2))/6 = 6δL/h_k;
 *   - X's truncation (its h⁴ term) and the rounding Newton–Schulz amplifies (slope up to
 *     a^steps near small singular values) or Adam's first step (m̂/√v̂ ≈ sign G) brings: estimated
 *     by halving the step, |X_(k−1) − X_k| (X_k has a sixteenth of X_(k−1)'s h⁴ term), and,
 *     where the differences do not follow the h² model and the extrapolation's estimate is not
 *     to be trusted, the raw differences' own halving |D(h_k/2) − D(h_k/4)|; c = 2 over the
 *     larger.
 * The ladder starts at k = 0 and halves further while the truncation estimate exceeds the
 * rounding term (at most MAX_LEVELS levels); the level with the smallest estimate is compared.
 * For smooth elements that is the first; where Newton–Schulz puts the loss outside its linear
 * range at these steps it goes down: one muon element (SwiGLU, weight decay 0.5) has D = 15.3,
 * 67.0, 70.8, 55.1, 49.2, 47.6, 47.2 at h = 4e-3 … 6.25e-5 against the tape's 47.06. (Was
 * 2e-3·max|grad| + 1e-4 + twice the largest disagreement among D(h), D(h/2), D(h/4) and the two
 * extrapolations, which passed that element only through D(h)'s distance.) A wrong backward (a
 * missing term, a dropped decay, a norm read as a constant) is off by O(max|grad|) at
 * differences that agree with each other; the gradients scaled by 1.05 are rejected for every
 * variant (perturbed_gradient_is_rejected). */
/* Models of the gradient check: the linear model with a scalar gate per token and with a gate
 * per token and key dimension (the decay scales the rows of W), and SwiGLU (random
 * initialization), whose weights are all matrices. Not the MLP: its biases are vectors, for
 * which Newton–Schulz is a normalized-gradient step g/‖g‖ (newton_schulz.h), whose curvature
 * ~1/‖g‖² for a small bias gradient puts float32 central differences out of their linear range;
 * vectors are covered by the other checks. */
static const struct {
    const char *model, *loss;
    int per_key;
} grad_models[] = {{"linear", "squared", 0}, {"linear", "squared", 1}, {"swiglu", "dot", 0}};
#define N_GRAD_MODELS 3

/* D(h) = (L(x + h) − L(x − h)) / (2h) for leaf element (i, j), by the step taken in float32. */
static double central(const ttt_layer *L, grad_problem *p, int i, size_t j, double h) {
    const float x0 = p->buf[i][j], step = (float)h;
    p->buf[i][j] = x0 + step;
    const double lp = grad_loss(L, p, 0);
    p->buf[i][j] = x0 - step;
    const double lm = grad_loss(L, p, 0);
    p->buf[i][j] = x0;
    return (lp - lm) / ((double)(x0 + step) - (double)(x0 - step));
}

/* The check of one variant; grad_scale ≠ 1 is a control: the tape's gradients are multiplied by
 * it, nothing is asserted and the number of elements that fail is returned. */
static int check_gradients(const variant *v, int vi, double grad_scale) {
    static const char *const names[N_IN] = {"q", "k", "v", "eta", "log_alpha"};
    const int control = grad_scale != 1.0;
    int fails = 0;
    tu_ratio_quiet = control;
    for (int m = 0; m < N_GRAD_MODELS; m++) {
        ttt_layer L;
        variant_layer(&L, v, grad_models[m].model, grad_models[m].loss, GB, "", GD);
        ttt_rng rng;
        ttt_rng_seed(&rng, 500 + 31 * (uint64_t)vi + (uint64_t)m);
        grad_problem p;
        grad_problem_make(&p, &L, grad_models[m].per_key, &rng);
        grad_loss(&L, &p, 1);
        for (int i = 0; i < p.n_leaves; i++)
            for (size_t j = 0; j < p.n[i]; j++) p.grad[i][j] *= (float)grad_scale;
        /* the counts of the header: the widest weight dimension, the loss's rounding */
        int dmax = GD;
        for (int i = N_IN; i < p.n_leaves; i++)
            for (int d = 0; d < p.ndim[i]; d++) dmax = p.shape[i][d] > dmax ? p.shape[i][d] : dmax;
        const double h = 4e-3, eps = 0x1p-24, n = 4.0 * dmax + GT + 10;
        grad_loss(&L, &p, 0);
        const double dL = 6 * eps * sqrt(n * GT) * last_abs_loss;
        size_t jumps = 0, total = 0;
        for (int i = 0; i < p.n_leaves; i++) total += p.n[i];
        for (int i = 0; i < p.n_leaves; i++) {
            double gmax = 0;
            for (size_t j = 0; j < p.n[i]; j++) gmax = fmax(gmax, fabs(p.grad[i][j]));
            for (size_t j = 0; j < p.n[i]; j++) {
                const double D1 = central(&L, &p, i, j, h), D2 = central(&L, &p, i, j, h / 2),
                             D4 = central(&L, &p, i, j, h / 4);
                /* A rule with a step function (lion's sign) has jumps: when one lies within
                 * h/4 of the point, every difference is J/(2h') for its own step h', so halving
                 * the step doubles it. There is no derivative to compare there (the tape's
                 * gradient of a step function is 0 by convention, src/core/ops.h); such points
                 * are counted and must stay rare (at most 10 %; lion on SwiGLU has 3 of 93),
                 * so a backward that is wrong everywhere still fails. */
                if (fabs(D4) > 10 * (gmax + 1e-3) && fabs(D4 - 2 * D2) < 0.05 * fabs(D4) &&
                    fabs(D2 - 2 * D1) < 0.05 * fabs(D2)) {
                    jumps++;
                    continue;
                }
                /* The step ladder (the header): level k extrapolates from D(h_k/2), D(h_k/4),
                 * h_k = h/2^k, with the estimate 2·halving + 6δL/h_k; the smallest estimate
                 * wins. Halving goes on while the truncation estimate exceeds the rounding
                 * term (at most MAX_LEVELS). */
                double Dk[MAX_LEVELS + 3] = {D1, D2, D4};
                double fd = 0, est = INFINITY, prev = (4 * D2 - D1) / 3;
                for (int k = 0; k < MAX_LEVELS; k++) {
                    if (k > 0) Dk[k + 2] = central(&L, &p, i, j, h / (4 << k));
                    const double X = (4 * Dk[k + 2] - Dk[k + 1]) / 3;
                    const double halving = fmax(fabs(prev - X), fabs(Dk[k + 1] - Dk[k + 2]));
                    const double hk = h / (1 << k), round = 6 * dL / hk;
                    if (2 * halving + round < est) est = 2 * halving + round, fd = X;
                    prev = X;
                    if (2 * halving <= round) break;
                }
                const double tol = 6 * eps * sqrt(2 * n * GT) * gmax + est;
                char leaf[32];
                if (i < N_IN) snprintf(leaf, sizeof leaf, "%s", names[i]);
                else snprintf(leaf, sizeof leaf, "W0[%d]", i - N_IN);
                if (control) fails += !(fabs(fd - p.grad[i][j]) <= tol);
                else
                    TU_ASSERT_LE(fabs(fd - p.grad[i][j]), tol,
                                 "%s {%s}, model %s%s: dL/d%s[%zu]: tape %.6g, finite "
                                 "difference %.6g (D %.6g, %.6g, %.6g at h, h/2, h/4; max "
                                 "|grad| %.3g)",
                                 v->o->name, v->opts, grad_models[m].model,
                                 grad_models[m].per_key ? " (gates per key)" : "", leaf, j,
                                 p.grad[i][j], fd, D1, D2, D4, gmax);
            }
        }
        ck_assert_msg(jumps * 10 <= total, "%s {%s}, model %s: %zu of %zu elements sit on a "
                      "jump of the loss; expected at most 10 %%", v->o->name, v->opts,
                      grad_models[m].model, jumps, total);
        grad_problem_free(&p);
    }
    tu_ratio_quiet = 0;
    return fails;
}

START_TEST(gradient_through_step_matches_finite_differences) {
    check_gradients(&variants[_i], _i, 1.0);
}
END_TEST

/* The control: every variant's gradients scaled by 1.05 fail somewhere. */
START_TEST(perturbed_gradient_is_rejected) {
    ck_assert_msg(check_gradients(&variants[_i], _i, 1.05) > 0,
                  "%s {%s}: the gradients scaled by 1.05 pass everywhere", variants[_i].o->name,
                  variants[_i].opts);
}
END_TEST

/* ============================================================================================ */
/* (b) step does not modify its inputs                                                          */

/* A copy of t's bytes (malloc'd). */
static float *snapshot(const ttt_tensor *t) {
    float *c = malloc(t->n * sizeof(float));
    memcpy(c, t->data, t->n * sizeof(float));
    return c;
}

static void assert_unchanged(const ttt_tensor *t, float *before, const char *what,
                             const variant *v) {
    ck_assert_msg(memcmp(t->data, before, t->n * sizeof(float)) == 0,
                  "%s {%s}: step modified its input %s", v->o->name, v->opts, what);
    free(before);
}

static ttt_tensor *randn_like(ttt_ctx *ctx, ttt_rng *rng, int ndim, const int *shape) {
    ttt_tensor *t = ttt_tensor_new(ctx, ndim, shape);
    ttt_rng_fill_normal(rng, t->data, t->n, 0, 1);
    return t;
}

START_TEST(step_leaves_its_inputs_alone) {
    const variant *v = &variants[_i];
    ttt_layer L;
    variant_layer(&L, v, "linear", "squared", 1, "", 4);
    const ttt_optim *o = L.optim;
    /* a tall and a wide matrix and a vector (a bias) */
    static const struct { int ndim, shape[2]; } weights[] = {{2, {5, 3}}, {2, {3, 6}}, {1, {7}}};
    for (int wi = 0; wi < 3; wi++)
        for (int tape = 0; tape < 2; tape++)
            for (int row_decay = 0; row_decay < (weights[wi].ndim == 2 ? 2 : 1); row_decay++) {
                ttt_arena arena;
                ttt_arena_init(&arena, 1 << 20);
                ttt_tape tp;
                ttt_tape_init(&tp);
                ttt_ctx ctx = {.arena = &arena, .grad = tape, .tape = tape ? &tp : NULL};
                ttt_rng rng;
                ttt_rng_seed(&rng, 700 + (uint64_t)(wi * 4 + tape * 2 + row_decay));
                const int nd = weights[wi].ndim, *shape = weights[wi].shape;
                ttt_tensor *W = randn_like(&ctx, &rng, nd, shape);
                ttt_tensor *S[TTT_OPTIM_MAX_STATE] = {0};
                const int ns = ttt_optim_state_new(&ctx, o, L.optim_cfg, S, W);
                ttt_tensor *decay = ttt_tensor_1d(&ctx, row_decay ? shape[0] : 1);
                ttt_rng_fill_uniform(&rng, decay->data, decay->n, 0.8f, 1.0f);
                ttt_optim_block blk = {.t0 = 0, .n = 2, .theta = 0.3f, .decay = decay};
                /* two warm-up steps, so that the state is not its initial zeros */
                for (int k = 0; k < 2; k++) {
                    ttt_tensor *G = randn_like(&ctx, &rng, nd, shape), *Wo = NULL;
                    ttt_tensor *So[TTT_OPTIM_MAX_STATE] = {0};
                    o->step(&ctx, L.optim_cfg, &Wo, So, W, (const ttt_tensor *const *)S, G, &blk);
                    W = Wo;
                    for (int s = 0; s < ns; s++) S[s] = So[s];
                }
                ttt_tensor *G = randn_like(&ctx, &rng, nd, shape);
                /* under a tape, inputs that require grad take the recording paths */
                float *gbuf = NULL;
                if (tape) {
                    W = ttt_tensor_copy(&ctx, W);
                    gbuf = calloc(W->n, sizeof(float));
                    ttt_tensor_set_param(G, gbuf);
                }
                float *bW = snapshot(W), *bG = snapshot(G), *bD = snapshot(decay);
                float *bS[TTT_OPTIM_MAX_STATE];
                for (int s = 0; s < ns; s++) bS[s] = snapshot(S[s]);
                ttt_tensor *Wo = NULL, *So[TTT_OPTIM_MAX_STATE] = {0};
                o->step(&ctx, L.optim_cfg, &Wo, So, W, (const ttt_tensor *const *)S, G, &blk);
                assert_unchanged(W, bW, "W", v);
                assert_unchanged(G, bG, "G", v);
                assert_unchanged(decay, bD, "decay", v);
                for (int s = 0; s < ns; s++) {
                    char what[32];
                    snprintf(what, sizeof what, "state[%d]", s);
                    assert_unchanged(S[s], bS[s], what, v);
                }
                /* outputs of the right shapes: W's, and each state tensor's declared one */
                ck_assert_msg(Wo && ttt_tensor_same_shape(Wo, W), "%s {%s}: W_out shape",
                              v->o->name, v->opts);
                for (int s = 0; s < ns; s++) {
                    int want[TTT_MAX_DIMS];
                    const int wnd = ttt_optim_state_shape(o, L.optim_cfg, want, s, W->shape,
                                                          W->ndim);
                    ck_assert_msg(So[s] && So[s]->ndim == wnd &&
                                      memcmp(So[s]->shape, want, (size_t)wnd * sizeof(int)) == 0,
                                  "%s {%s}: state_out[%d] is not of its declared shape",
                                  v->o->name, v->opts, s);
                    ck_assert_msg(So[s]->ndim == S[s]->ndim &&
                                      memcmp(So[s]->shape, S[s]->shape,
                                             (size_t)S[s]->ndim * sizeof(int)) == 0,
                                  "%s {%s}: state[%d] changed shape", v->o->name, v->opts, s);
                }
                free(gbuf);
                ttt_tape_free(&tp);
                ttt_arena_free(&arena);
            }
}
END_TEST

/* The layer allocates the state as declared, ttt_optim_reinit_state rebuilds it with the same
 * shapes, and the memory estimate counts exactly what was allocated (weights, state, and the
 * ratio normalizer's z when present), for every variant and model. */
START_TEST(state_is_allocated_as_declared) {
    const variant *v = &variants[_i];
    static const char *const model_names[] = {"linear", "ttt_mlp", "swiglu"};
    for (int m = 0; m < 3; m++) {
        ttt_layer L;
        variant_layer(&L, v, model_names[m], "squared", 1, "", 4);
        ttt_arena arena;
        ttt_arena_init(&arena, 1 << 16);
        ttt_ctx ctx = {.arena = &arena};
        ttt_layer_state st;
        ttt_layer_state_init(&ctx, &L, &st, NULL);
        ck_assert_int_eq(st.n_opt, ttt_optim_n_state(L.optim, L.optim_cfg));
        double floats = st.z ? (double)st.z->n : 0;
        for (int w = 0; w < st.n_w; w++) {
            floats += (double)st.W[w]->n;
            for (int pass = 0; pass < 2; pass++) {
                if (pass) /* rebuilt from the weights, as with learned initial weights */
                    ttt_optim_reinit_state(&ctx, L.optim, L.optim_cfg, st.opt[w], st.n_opt,
                                           st.W[w]);
                for (int s = 0; s < st.n_opt; s++) {
                    int want[TTT_MAX_DIMS];
                    const int nd = ttt_optim_state_shape(L.optim, L.optim_cfg, want, s,
                                                         st.W[w]->shape, st.W[w]->ndim);
                    ck_assert_msg(st.opt[w][s]->ndim == nd &&
                                      memcmp(st.opt[w][s]->shape, want, nd * sizeof(int)) == 0,
                                  "%s {%s}, model %s: state[%d][%d] not of its declared shape",
                                  v->o->name, v->opts, model_names[m], w, s);
                    if (pass) floats += (double)st.opt[w][s]->n;
                }
            }
        }
        ck_assert_msg(ttt_layer_state_bytes(&L) == floats * sizeof(float),
                      "%s {%s}, model %s: estimate %.0f bytes, allocated %.0f", v->o->name,
                      v->opts, model_names[m], ttt_layer_state_bytes(&L), floats * sizeof(float));
        ttt_arena_free(&arena);
    }
}
END_TEST

/* ============================================================================================ */
/* (c) b = 1: the driver is one step per token                                                 */

enum { CT = 7, CD = 3 };

/* ‖a − b‖∞ ≤ 1e-6 + 1e-5·‖b‖∞. Both sides run the same float32 operations today (they agree to
 * the last bit); the margin admits a driver that reorders equal sums, while a wrong rule (a
 * token's gradient at the wrong weights, a lost state tensor, a decay applied twice) is off by
 * O(‖b‖). */
static void assert_same(const ttt_tensor *a, const ttt_tensor *b, const char *what,
                        const variant *v, const char *model, const char *layer) {
    ck_assert_int_eq(a->n, b->n);
    char msg[512];
    ck_assert_msg(tu_close_f(a->data, b->data, a->n, 1e-6, 1e-5, msg, sizeof msg),
                  "%s {%s}, model %s, %s: %s: %s", v->o->name, v->opts, model, layer, what, msg);
}

START_TEST(b1_driver_is_one_step_per_token) {
    const variant *v = &variants[_i];
    static const char *const layouts[] = {
        ", order: update_then_apply, steps: per_block",
        ", order: update_then_apply, steps: per_token",
        ", order: apply_then_update, steps: per_block",
    };
    for (int m = 0; m < N_MODELS; m++)
        for (int li = 0; li < 3; li++) {
            ttt_layer L;
            variant_layer(&L, v, models[m].model, models[m].loss, 1, layouts[li], CD);
            ttt_arena arena;
            ttt_arena_init(&arena, 1 << 20);
            ttt_ctx ctx = {.arena = &arena};
            ttt_rng rng;
            ttt_rng_seed(&rng, 900 + (uint64_t)_i);
            ttt_tensor *q = randn_like(&ctx, &rng, 2, (int[]){CT, CD});
            ttt_tensor *k = randn_like(&ctx, &rng, 2, (int[]){CT, CD});
            ttt_tensor *vv = randn_like(&ctx, &rng, 2, (int[]){CT, CD});
            const int per_key = models[m].per_key;
            ttt_tensor *eta = ttt_tensor_1d(&ctx, CT);
            ttt_tensor *la = per_key ? ttt_tensor_2d(&ctx, CT, CD) : ttt_tensor_1d(&ctx, CT);
            ttt_rng_fill_uniform(&rng, eta->data, CT, 0.2f, 0.8f);
            ttt_rng_fill_uniform(&rng, la->data, la->n, -0.4f, -0.05f);
            char what[160];
            snprintf(what, sizeof what, "%s%s", layouts[li] + 2, per_key ? ", gates per key" : "");
            /* the driver */
            ttt_layer_state st;
            ttt_rng init;
            ttt_rng_seed(&init, 77);
            ttt_layer_state_init(&ctx, &L, &st, &init);
            ttt_tensor *o = ttt_tensor_2d(&ctx, CT, CD);
            ttt_error err = {0};
            ck_assert_msg(ttt_forward_generic(&ctx, &L, o, &st, q, k, vv, eta, la, per_key, &err) ==
                              TTT_OK,
                          "%s", err.msg);
            /* the definition: per token t, g = η_t ∇ℓ(f(W_g; k_t), v_t) at W_g = W_{t−1}
             * (decoupled) or α_t W_{t−1} (coupled); W_t, S_t = step(W_{t−1}, S_{t−1}, g) with
             * θ and α_t; o_t = f(W_t; q_t), or f(W_{t−1}; q_t) when applying before updating */
            ttt_layer_state ref;
            ttt_rng_seed(&init, 77);
            ttt_layer_state_init(&ctx, &L, &ref, &init);
            const int nw = ref.n_w, ns = ref.n_opt;
            ttt_tensor *o_ref = ttt_tensor_2d(&ctx, CT, CD);
            /* α_t rounded as the driver rounds it (kernels.h ttt_gate_dither: the product of
             * the retentions stays exact), so that both sides run the same float32 operations */
            double drift[CD];
            for (int j = 0; j < CD; j++) drift[j] = 1.0;
            for (int t = 0; t < CT; t++) {
                ttt_tensor *la_t = ttt_slice_rows(&ctx, la, t, t + 1);
                if (per_key) la_t = ttt_reshape(&ctx, la_t, 1, (int[]){CD});
                ttt_tensor *alpha = ttt_exp(&ctx, la_t); /* (1), or (d_k): one per row of W */
                for (size_t j = 0; j < alpha->n; j++)
                    alpha->data[j] = ttt_gate_dither(&drift[j], exp((double)la_t->data[j]));
                ttt_optim_block blk = {.t0 = t, .n = 1, .theta = L.lr, .decay = alpha};
                const ttt_tensor *Wg[TTT_MAX_WEIGHTS];
                for (int w = 0; w < nw; w++)
                    Wg[w] = L.coupled ? ttt_optim_apply_decay(&ctx, ref.W[w], &blk) : ref.W[w];
                ttt_tensor *xk = ttt_slice_rows(&ctx, k, t, t + 1);
                ttt_tensor *xv = ttt_slice_rows(&ctx, vv, t, t + 1);
                ttt_tensor *et = ttt_slice_rows(&ctx, eta, t, t + 1);
                /* the token's input and rate, for a rule that reads them (optim.h
                 * traits.inputs), where they are the input of the weight: a linear map */
                if (L.model->traits & TTT_MODEL_LINEAR_MAP) blk.x = xk, blk.x_eta = et;
                ttt_tensor *z = L.model->apply(&ctx, Wg, xk);
                ttt_tensor *g[TTT_MAX_WEIGHTS];
                L.model->grad(&ctx, g, Wg, xk, L.loss->grad(&ctx, z, xv), et);
                ttt_tensor *Wprev[TTT_MAX_WEIGHTS];
                for (int w = 0; w < nw; w++) {
                    Wprev[w] = ref.W[w];
                    ttt_tensor *So[TTT_OPTIM_MAX_STATE] = {0};
                    L.optim->step(&ctx, L.optim_cfg, &ref.W[w], So, Wprev[w],
                                  (const ttt_tensor *const *)ref.opt[w], g[w], &blk);
                    for (int s = 0; s < ns; s++) ref.opt[w][s] = So[s];
                }
                ttt_tensor *xq = ttt_slice_rows(&ctx, q, t, t + 1);
                ttt_tensor *ot = L.model->apply(
                    &ctx,
                    (const ttt_tensor *const *)(L.order == TTT_ORDER_APPLY_THEN_UPDATE ? Wprev
                                                                                       : ref.W),
                    xq);
                memcpy(o_ref->data + (size_t)t * CD, ot->data, CD * sizeof(float));
            }
            assert_same(o, o_ref, "outputs", v, models[m].model, what);
            for (int w = 0; w < nw; w++) {
                assert_same(st.W[w], ref.W[w], "final weights", v, models[m].model, what);
                for (int s = 0; s < ns; s++)
                    assert_same(st.opt[w][s], ref.opt[w][s], "final state", v, models[m].model,
                                what);
            }
            ttt_arena_free(&arena);
        }
}
END_TEST

/* ============================================================================================ */
/* (d) options round-trip: listed, and accepted from YAML                                       */

/* The lines `ttt list` prints for optimizer `name`: from its "  name " line to the next line
 * indented by exactly two spaces (malloc'd, or NULL when the optimizer is not listed). */
static char *list_block(const char *out, const char *section, const char *name) {
    const char *sec = strstr(out, section);
    if (!sec) return NULL;
    char head[64];
    snprintf(head, sizeof head, "\n  %s ", name);
    const char *a = strstr(sec, head);
    if (!a) return NULL;
    a += 1;
    const char *e = a + 1;
    while ((e = strchr(e, '\n')) && !(e[1] == ' ' && e[2] == ' ' && e[3] != ' ')) e++;
    const size_t n = e ? (size_t)(e - a) : strlen(a);
    char *b = malloc(n + 1);
    memcpy(b, a, n);
    b[n] = 0;
    return b;
}

/* Values to set an option to (YAML text): both booleans, every choice, and for a number a
 * value inside its range other than the default. Returns their number. */
static int values_of(char vals[][64], const ttt_option *opt) {
    int n = 0;
    switch (opt->type) {
    case TTT_OPT_BOOL:
        snprintf(vals[n++], 64, "true");
        snprintf(vals[n++], 64, "false");
        break;
    case TTT_OPT_CHOICE: {
        char c[256];
        snprintf(c, sizeof c, "%s", opt->choices);
        for (char *x = strtok(c, "|"); x && n < 16; x = strtok(NULL, "|"))
            snprintf(vals[n++], 64, "%s", x);
        break;
    }
    case TTT_OPT_INT: {
        const long d = strtol(opt->def, NULL, 10);
        long x = opt->min <= opt->max ? (long)((opt->min + opt->max) / 2) : d + 1;
        if (x == d) x = opt->min <= opt->max && d > opt->min ? d - 1 : d + 1;
        snprintf(vals[n++], 64, "%ld", x);
        break;
    }
    case TTT_OPT_FLOAT: {
        /* a quarter into the range (the table's ranges are inclusive; some rules refuse the
         * upper end itself: momentum 1) */
        const double d = strtod(opt->def, NULL);
        double x = opt->min <= opt->max ? opt->min + 0.25 * (opt->max - opt->min) : d + 1;
        if (x == d) x = opt->min <= opt->max ? opt->min + 0.125 * (opt->max - opt->min) : d + 2;
        snprintf(vals[n++], 64, "%.9g", x);
        break;
    }
    default:
        if (opt->def) snprintf(vals[n++], 64, "%s", opt->def);
        break;
    }
    return n;
}

START_TEST(every_option_is_listed_and_accepted) {
    char *out = NULL, *errout = NULL;
    int rc = tu_run_ttt("list", &out, &errout);
    ck_assert_msg(rc == 0 && out, "ttt list: exit %d: %s", rc, errout ? errout : "");
    for (int i = 0; i < ttt_optim_count(); i++) {
        const ttt_optim *o = ttt_optim_at(i);
        char *block = list_block(out, "Inner optimizers", o->name);
        ck_assert_msg(block, "ttt list does not show optimizer %s", o->name);
        for (const ttt_option *opt = o->options; opt->name; opt++) {
            if (strcmp(opt->name, "name") == 0) continue;
            /* listed: "      <option> default <def>" and the first words of its help */
            char line[128], help[24];
            snprintf(line, sizeof line, "\n      %s ", opt->name);
            const char *at = strstr(block, line);
            ck_assert_msg(at, "ttt list, optimizer %s: option %s not shown", o->name, opt->name);
            const char *eol = strchr(at + 1, '\n');
            char def[64];
            snprintf(def, sizeof def, "default %s ", opt->def);
            const char *d = strstr(at, def);
            ck_assert_msg(d && (!eol || d < eol), "ttt list, %s.%s: default %s not shown",
                          o->name, opt->name, opt->def);
            snprintf(help, sizeof help, "%s", opt->help);
            const char *hp = strstr(at, help);
            ck_assert_msg(hp && (!eol || hp < eol), "ttt list, %s.%s: help not shown", o->name,
                          opt->name);
            /* accepted from YAML, resolved to the value given, and parsed by the optimizer */
            char vals[16][64];
            const int nv = values_of(vals, opt);
            ck_assert_msg(nv > 0, "%s.%s: no value to try", o->name, opt->name);
            for (int k = 0; k < nv; k++) {
                const char *val = vals[k];
                char yaml[640];
                snprintf(yaml, sizeof yaml,
                         "task: {kind: memory, pairs: [4], key_dim: 4, value_dim: 4, trials: 1}\n"
                         "layer: {model: linear, loss: squared, "
                         "optimizer: {name: %s, %s: %.63s}}\n",
                         o->name, opt->name, val);
                ttt_experiment *e = NULL;
                ttt_error err = {0};
                ck_assert_msg(ttt_experiment_load_string(yaml, "contract.yaml", NULL, 0, &e,
                                                         &err) == TTT_OK,
                              "%s.%s = %s refused: %s", o->name, opt->name, val, err.msg);
                ck_assert_int_eq(e->n_points, 1);
                char path[96];
                snprintf(path, sizeof path, "layer.optimizer.%s", opt->name);
                /* the value as the run folder's config.resolved.yaml shows it */
                ttt_cfg_node *resolved = NULL;
                ck_assert_int_eq(ttt_cfg_load_string(e->plan->resolved_yaml, "resolved.yaml",
                                                     &resolved, &err),
                                 TTT_OK);
                const ttt_cfg_node *n = ttt_cfg_get_path(resolved, path);
                ck_assert_msg(n && n->scalar, "%s: not in the resolved configuration", path);
                if (opt->type == TTT_OPT_FLOAT || opt->type == TTT_OPT_INT)
                    ck_assert_msg(strtod(n->scalar, NULL) == strtod(val, NULL), "%s: %s, set %s",
                                  path, n->scalar, val);
                else
                    ck_assert_msg(strcmp(n->scalar, val) == 0, "%s: %s, set %s", path, n->scalar,
                                  val);
                ttt_layer L;
                ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(resolved, "layer"), 4,
                                              4, &L, &err) == TTT_OK,
                              "%s = %s: %s", path, val, err.msg);
                ck_assert_ptr_eq(L.optim, o);
                /* and the plan's typed point carries the same optimizer */
                const ttt_memory_cfg *mc = e->plan->points[0].cfg;
                ck_assert_ptr_eq(mc->L.optim, o);
                ttt_cfg_free(resolved);
                ttt_experiment_free(e);
            }
        }
        free(block);
    }
    free(out), free(errout);
}
END_TEST

static Suite *contract_suite(void) {
    setup();
    Suite *s = suite_create("contract_optim");
    TCase *tc = tcase_create("registry");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, variants_cover_the_registry);
    tcase_add_loop_test(tc, gradient_through_step_matches_finite_differences, 0, n_variants);
    tcase_add_loop_test(tc, perturbed_gradient_is_rejected, 0, n_variants);
    tcase_add_loop_test(tc, step_leaves_its_inputs_alone, 0, n_variants);
    tcase_add_loop_test(tc, state_is_allocated_as_declared, 0, n_variants);
    tcase_add_loop_test(tc, b1_driver_is_one_step_per_token, 0, n_variants);
    tcase_add_test(tc, every_option_is_listed_and_accepted);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(contract_suite()); }
