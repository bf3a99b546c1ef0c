/* Outer-loop gradients through the inner loop: the generic driver recorded on the tape, for every
 * registered optimizer (including Muon's Newton–Schulz iterations and momentum state) and every
 * fast-weight model, against central finite differences of the same float32 forward.
 *
 * Tolerance (docs/hardening.md "Portable tolerances"): the differences are of the float32 forward,
 * so each term is bounded on its own, with n = 4D + T + 10 roundings per state entry per token (a
 * D-term product, a norm's or a block's sums over at most T terms, a few element-wise; the count
 * of tests/test_layer.c), ε = 2^-24:
 *   - the tape gradient against the exact one: its forward and backward repeat those n roundings,
 *     independent from token to token over non-expanding steps, a walk of deviation ε·√(2n·T),
 *     c = 6, on the scale of the largest gradient entry over all the leaves (as
 *     closed_form_case below says why): 6ε·√(2n·T)·max|g| (6.5e-6·max|g| at T = 6, D = 3);
 *   - the rounding of the differences: each float32-forward loss (summed in double from the
 *     float32 outputs, so the loss tensor's own roundings are not part of it) is within
 *     δL = 6ε·√(n·T)·(Σ|r⊙o| + Σ|r2⊙W|) of the exact one, the same walk on the loss's scale. The
 *     Richardson-extrapolated difference D* = (4 D(h/2) − D(h))/3 with h = 4e-3 (it cancels the
 *     h² term: Newton–Schulz and Adam's first steps are strongly curved; with h = 1e-2, 3e-3,
 *     1e-3 the plain central difference for Muon misses the tape value by 0.32, 0.03, 0.003,
 *     while h = 3e-4 is already lost in float32 rounding) carries (4·2δL/h + δL/h)/3 = 3δL/h;
 *   - what the walk does not count: D*'s truncation (its h⁴ term) and the rounding that
 *     Newton–Schulz amplifies (a^steps near small singular values, ~4^5 for LaCT's
 *     coefficients), estimated by halving the step: D*' = (4 D(h/4) − D(h/2))/3 has a
 *     sixteenth of D*'s h⁴ term and twice its rounding, so |D* − D*'| is of their size; c = 2
 *     over that estimate.
 * A wrong backward (a missing term, a transposed matrix, a dropped decay) is off by
 * O(max|grad|), and the test is checked to fail on such a bug (see
 * perturbed_backward_is_detected). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

typedef struct grad_case {
    const char *yaml; /* the layer */
    int gates;        /* 0 none, 1 scalar log_alpha */
} grad_case;

typedef struct inputs {
    ttt_tensor q, k, v, eta, la; /* views over the buffers below (leaves of the graph) */
    float *buf[5];
    float *grad[5];
    size_t n[5];
} inputs;

enum { T = 6, D = 3 };

/* Σ|r⊙o| + Σ|r2⊙W_final[0]| of the last run_loss: the loss's conditioning. */
static double last_abs_loss;

/* L = Σ r ⊙ o + Σ r2 ⊙ W_final[0], computed with a fresh tape; fills input gradients when
 * with_grad. Returns L. */
static double run_loss(const ttt_layer *L, inputs *in, int gates, const float *r, const float *r2,
                       int with_grad) {
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = with_grad, .tape = with_grad ? &tape : NULL};
    ttt_tensor *leaves[5] = {&in->q, &in->k, &in->v, &in->eta, &in->la};
    for (int i = 0; i < 5; i++) {
        int nd = leaves[i]->ndim;
        int shape[2] = {leaves[i]->shape[0], leaves[i]->shape[1]};
        *leaves[i] = ttt_tensor_view(in->buf[i], nd, shape);
        if (with_grad) ttt_tensor_set_param(leaves[i], in->grad[i]);
    }
    ttt_rng rng;
    ttt_rng_seed(&rng, 5);
    ttt_layer_state st;
    ttt_layer_state_init(&ctx, L, &st, &rng);
    ttt_tensor *o = ttt_tensor_2d(&ctx, T, L->d_v);
    ttt_error err = {0};
    ttt_status s = ttt_layer_forward(&ctx, L, o, &st, &in->q, &in->k, &in->v, &in->eta,
                                     gates ? &in->la : NULL, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ttt_tensor *rt = ttt_tensor_2d(&ctx, T, L->d_v);
    memcpy(rt->data, r, rt->n * sizeof(float));
    ttt_tensor *r2t = ttt_tensor_zeros_like(&ctx, st.W[0]);
    memcpy(r2t->data, r2, r2t->n * sizeof(float));
    ttt_tensor *loss = ttt_add(&ctx, ttt_dot(&ctx, o, rt), ttt_dot(&ctx, st.W[0], r2t));
    /* The value for the difference quotients, summed in double from the float32 outputs: the
     * float32 loss tensor is rounded twice (each dot, then their sum), half an ulp of |loss| each,
     * which a quotient at h = 4e-3 turns into ~1e-4, the size of the tolerance's absolute floor. */
    double val = 0, abs_val = 0;
    for (size_t i = 0; i < o->n; i++)
        val += (double)o->data[i] * r[i], abs_val += fabs((double)o->data[i] * r[i]);
    for (size_t i = 0; i < st.W[0]->n; i++)
        val += (double)st.W[0]->data[i] * r2[i], abs_val += fabs((double)st.W[0]->data[i] * r2[i]);
    last_abs_loss = abs_val;
    if (with_grad) ttt_backward(&ctx, loss);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    return val;
}

/* The layer of a YAML text (one `layer:` mapping). */
static void layer_from(const char *yaml, ttt_layer *L) {
    ttt_cfg_node *root;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(yaml, "g.yaml", &root, &err) == TTT_OK);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), D, D, L, &err) ==
                      TTT_OK,
                  "%s: %s", yaml, err.msg);
    ttt_cfg_free(root);
}

/* Random q, k, v, η, log α (leaves with gradient buffers) and the loss's projections r, r2. */
static void make_inputs(inputs *in, ttt_rng *rng, float *r /* (T·D) */, float *r2 /* (64) */) {
    const int shapes[5][2] = {{T, D}, {T, D}, {T, D}, {T, 1}, {T, 1}};
    for (int i = 0; i < 5; i++) {
        in->n[i] = (size_t)shapes[i][0] * shapes[i][1];
        in->buf[i] = malloc(in->n[i] * sizeof(float));
        in->grad[i] = calloc(in->n[i], sizeof(float));
    }
    ttt_rng_fill_normal(rng, in->buf[0], in->n[0], 0, 0.7f);
    ttt_rng_fill_normal(rng, in->buf[1], in->n[1], 0, 0.5f);
    ttt_rng_fill_normal(rng, in->buf[2], in->n[2], 0, 1.0f);
    ttt_rng_fill_uniform(rng, in->buf[3], in->n[3], 0.2f, 0.8f);
    ttt_rng_fill_uniform(rng, in->buf[4], in->n[4], -0.4f, -0.05f);
    in->q = ttt_tensor_view(in->buf[0], 2, (int[]){T, D});
    in->k = ttt_tensor_view(in->buf[1], 2, (int[]){T, D});
    in->v = ttt_tensor_view(in->buf[2], 2, (int[]){T, D});
    in->eta = ttt_tensor_view(in->buf[3], 1, (int[]){T});
    in->la = ttt_tensor_view(in->buf[4], 1, (int[]){T});
    ttt_rng_fill_normal(rng, r, T * D, 0, 1);
    ttt_rng_fill_normal(rng, r2, 64, 0, 1);
}

/* grad_scale ≠ 1: a control; the tape's gradients are multiplied by it, nothing is asserted and
 * the number of elements that fail is returned. */
static int check_case(const grad_case *c, uint64_t seed, double grad_scale) {
    const int control = grad_scale != 1.0;
    int fails = 0;
    tu_ratio_quiet = control;
    ttt_layer L;
    layer_from(c->yaml, &L);
    ck_assert_str_eq(tu_form_used(&L), "generic");
    ttt_rng rng;
    ttt_rng_seed(&rng, seed);
    inputs in;
    float r[T * D], r2[64];
    make_inputs(&in, &rng, r, r2);
    run_loss(&L, &in, c->gates, r, r2, 1);
    for (int i = 0; i < 5; i++)
        for (size_t j = 0; j < in.n[i]; j++) in.grad[i][j] *= (float)grad_scale;
    const double h = 4e-3, eps = 0x1p-24, n = 4 * D + T + 10;
    run_loss(&L, &in, c->gates, r, r2, 0);
    const double dL = 6 * eps * sqrt(n * T) * last_abs_loss; /* a loss's rounding */
    const char *names[5] = {"q", "k", "v", "eta", "log_alpha"};
    double gmax = 0; /* the largest gradient entry over the leaves */
    for (int i = 0; i < (c->gates ? 5 : 4); i++)
        for (size_t j = 0; j < in.n[i]; j++) gmax = fmax(gmax, fabs(in.grad[i][j]));
    for (int i = 0; i < (c->gates ? 5 : 4); i++) {
        for (size_t j = 0; j < in.n[i]; j++) {
            float x0 = in.buf[i][j];
            double D[3];
            for (int e = 0; e < 3; e++) {
                const float step = (float)(h / (1 << e));
                in.buf[i][j] = x0 + step;
                double lp = run_loss(&L, &in, c->gates, r, r2, 0);
                in.buf[i][j] = x0 - step;
                double lm = run_loss(&L, &in, c->gates, r, r2, 0);
                /* divide by the step actually taken in float32 */
                D[e] = (lp - lm) / ((double)(x0 + step) - (double)(x0 - step));
            }
            in.buf[i][j] = x0;
            const double fd = (4 * D[1] - D[0]) / 3, fd2 = (4 * D[2] - D[1]) / 3;
            const double tol = 6 * eps * sqrt(2 * n * T) * gmax + 3 * dL / h + 2 * fabs(fd - fd2);
            if (control) fails += !(fabs(fd - in.grad[i][j]) <= tol);
            else
                TU_ASSERT_LE(fabs(fd - in.grad[i][j]), tol,
                             "%s: dL/d%s[%zu]: tape %.6g, finite difference %.6g (max |grad| "
                             "%.3g)",
                             c->yaml, names[i], j, in.grad[i][j], fd, gmax);
        }
    }
    for (int i = 0; i < 5; i++) free(in.buf[i]), free(in.grad[i]);
    tu_ratio_quiet = 0;
    return fails;
}

static const grad_case cases[] = {
    {"layer: {model: linear, loss: squared, mini_batch: 1, form: generic}", 0},
    {"layer: {model: linear, loss: squared, form: generic, optimizer: {name: sgd, "
     "decay_placement: coupled}}", 1},
    {"layer: {model: linear, loss: dot, mini_batch: 4, form: generic}", 1},
    {"layer: {model: linear, loss: squared, mini_batch: 4, form: generic, optimizer: {name: "
     "momentum, lr: 0.5, momentum: 0.8}}", 1},
    {"layer: {model: linear, loss: squared, mini_batch: 3, steps: per_token, form: generic, "
     "optimizer: {name: momentum, lr: 0.5, momentum: 0.8, nesterov: true}}", 1},
    {"layer: {model: linear, loss: squared, mini_batch: 3, form: generic, optimizer: {name: muon, "
     "lr: 0.3, momentum: 0.9}}", 0},
    {"layer: {model: linear, loss: squared, mini_batch: 3, form: generic, optimizer: {name: muon, "
     "lr: 0.3, coefficients: lact, nesterov: false}}", 0},
    {"layer: {model: swiglu, loss: dot, mini_batch: 6, order: apply_then_update, form: generic, "
     "optimizer: {name: large_batch, lr: 0.5, muon: true, momentum: 0.5}}", 0},
    {"layer: {model: linear, loss: squared, mini_batch: 2, form: generic, optimizer: {name: "
     "adam, lr: 0.1}}", 0},
    {"layer: {model: ttt_linear, loss: recon, mini_batch: 4, position_scale: inverse, form: "
     "generic}", 0},
    {"layer: {model: ttt_mlp, loss: recon, mini_batch: 3, form: generic, optimizer: {lr: 0.1}}", 0},
    {"layer: {model: linear, loss: squared, form: generic, normalize: rms}", 0},
};

START_TEST(gradients_through_the_inner_loop) {
    check_case(&cases[_i], 1000 + (uint64_t)_i, 1.0);
}
END_TEST

/* The tolerance, with its measured-uncertainty term, still rejects a backward that is 5 % off:
 * every case's gradients scaled by 1.05 fail somewhere. */
START_TEST(perturbed_backward_is_detected) {
    ck_assert_int_gt(check_case(&cases[_i], 1000 + (uint64_t)_i, 1.05), 0);
}
END_TEST

/* The closed forms under the tape, reached through ttt_layer_forward (β = θ·η recorded, gates,
 * RoPE as a recorded op), give the generic driver's gradients. Two float32 paths, each bounded
 * against the exact gradient and the sum of the two bounds accepted (docs/hardening.md "Portable
 * tolerances"). A path's forward rounds every state entry through n = 4D + T + 10 operations per
 * token (a D-term product, a norm's or a block's sums over at most T terms, a few element-wise;
 * the count of tests/test_layer.c), and its backward repeats each of them transposed, so 2n
 * roundings per entry per token, independent from token to token and carried by non-expanding
 * steps (β‖k‖² ≤ 2, gates ≤ 1): a walk of deviation ε·√(2n·T), and c = 6 for the largest of the
 * entries (2·6ε·√(2n·T) = 1.3e-5 for both paths at T = 6, D = 3). Its scale is the conditioning
 * of the sums over tokens a gradient is made of, taken as the largest gradient entry over all the
 * leaves (max|g|, from the generic path), not the entry compared: the inputs are unit-scale
 * (|q|, |k|, |v| ≲ 1, η ≤ 0.8, T = 6), so no sum's Σ|terms| exceeds that by more than the few
 * tokens it spans, and an entry that is a cancelling sum is held to the largest's bound. The loss
 * is a double sum of the outputs against r, r2, scaled by its Σ|r⊙o| + Σ|r2⊙W|.
 * Control: the closed form run again with one token's η 1 % larger must be rejected. */
static int closed_form_case(const char *yaml, int gates, uint64_t seed, int control) {
    ttt_layer L;
    layer_from(yaml, &L);
    ttt_rng rng;
    ttt_rng_seed(&rng, seed);
    inputs in;
    float r[T * D], r2[64];
    float *g_form[5];
    make_inputs(&in, &rng, r, r2);
    float eta_saved = in.buf[3][2];
    if (control) in.buf[3][2] *= 1.01f;
    double l_form = run_loss(&L, &in, gates, r, r2, 1);
    in.buf[3][2] = eta_saved;
    for (int i = 0; i < 5; i++) {
        g_form[i] = in.grad[i];
        in.grad[i] = calloc(in.n[i], sizeof(float));
    }
    L.form = "generic";
    double l_gen = run_loss(&L, &in, gates, r, r2, 1);
    const double eps = 0x1p-24, n = 4 * D + T + 10;
    const double walk = 2 * 6 * eps * sqrt(2 * n * T); /* two paths, 6ε·√(2n·T) each */
    double gmax = 0;
    for (int i = 0; i < (gates ? 5 : 4); i++)
        for (size_t j = 0; j < in.n[i]; j++) gmax = fmax(gmax, fabs(in.grad[i][j]));
    int fails = 0;
    tu_ratio_quiet = control;
    const double lscale = last_abs_loss; /* Σ|r⊙o| + Σ|r2⊙W| of the generic run */
    if (control) {
        fails += !(fabs(l_form - l_gen) <= walk * lscale);
    } else {
        TU_ASSERT_LE(fabs(l_form - l_gen), walk * lscale, "%s: loss %g vs %g", yaml, l_form,
                     l_gen);
    }
    for (int i = 0; i < (gates ? 5 : 4); i++)
        for (size_t j = 0; j < in.n[i]; j++) {
            const double err = fabs((double)g_form[i][j] - in.grad[i][j]), tol = walk * gmax;
            if (control)
                fails += !(err <= tol);
            else
                TU_ASSERT_LE(err, tol, "%s: input %d[%zu]: %g vs %g (tolerance %g)", yaml, i, j,
                             g_form[i][j], in.grad[i][j], tol);
        }
    tu_ratio_quiet = 0;
    for (int i = 0; i < 5; i++) free(in.buf[i]), free(in.grad[i]), free(g_form[i]);
    return fails;
}

static const struct {
    const char *yaml;
    int gates;
} closed_cases[] = {
    {"layer: {preset: linear_attention, form: chunkwise, chunk: 4, optimizer: {lr: 0.7}}", 1},
    {"layer: {preset: gated_deltanet, form: chunkwise, chunk: 4, optimizer: {lr: 0.7}}", 1},
    {"layer: {preset: deltanet, form: recurrent, chunk: 4, rope: true}", 0},
    {"layer: {preset: titans, form: chunkwise, mini_batch: 4}", 1},
    {"layer: {preset: ttt_linear, form: dual, mini_batch: 4, optimizer: {lr: 0.5}}", 0},
    {"layer: {preset: linear_attention, form: parallel, normalize: ratio}", 0},
};

START_TEST(closed_forms_under_the_tape_match_generic) {
    closed_form_case(closed_cases[_i].yaml, closed_cases[_i].gates, 300 + (uint64_t)_i, 0);
}
END_TEST

START_TEST(closed_form_with_a_perturbed_step_is_rejected) {
    ck_assert_int_gt(
        closed_form_case(closed_cases[_i].yaml, closed_cases[_i].gates, 300 + (uint64_t)_i, 1), 0);
}
END_TEST

static Suite *layer_grad_suite(void) {
    Suite *s = suite_create("layer_grad");
    TCase *tc = tcase_create("optimizers");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, gradients_through_the_inner_loop, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, perturbed_backward_is_detected, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, closed_forms_under_the_tape_match_generic, 0,
                        (int)(sizeof closed_cases / sizeof closed_cases[0]));
    tcase_add_loop_test(tc, closed_form_with_a_perturbed_step_is_rejected, 0,
                        (int)(sizeof closed_cases / sizeof closed_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(layer_grad_suite()); }
