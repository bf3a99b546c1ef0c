/* The learned inner optimizer (optim/learned.c, docs/math.md §3.8):
 *   - at its initialization it is the hand-written rule it was initialized as: `init: sgd` is
 *     the sgd optimizer to the last bit, `init: momentum` the momentum optimizer with the same μ
 *     up to float32 rounding of a reordered product;
 *   - the gradients of an outer loss w.r.t. its outer parameters (and, with the network active,
 *     w.r.t. q, k, v) agree with finite differences;
 *   - the layer carries the parameters: replacing them in the state changes the outputs, and the
 *     batch runner (which starts from the initialization) equals the layer at its init;
 *   - the sequence model registers them as its own parameters (the `ttt` mixer, which asks the
 *     optimizer for them without knowing its name), one set per block, and the gradients of its
 *     training loss reach them (compared with finite differences).
 * The optimizer contract (tests/test_contract_optim.c) covers it through the registry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "internal.h"
#include "seqmodel.h"
#include "testutil.h"

static void make_layer(ttt_layer *L, const char *body, int d) {
    char text[1024];
    snprintf(text, sizeof text, "layer: {model: linear, loss: squared, form: generic, %s}\n",
             body);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "learned.yaml", &root, &err) == TTT_OK, "%s",
                  err.msg);
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, L, &err) ==
                      TTT_OK,
                  "%s: %s", text, err.msg);
    ttt_cfg_free(root);
}

enum { T = 24, D = 6 };

typedef struct inputs {
    ttt_tensor *q, *k, *v, *eta, *la;
} inputs;

static inputs make_inputs(tu_fixture *f, int per_key) {
    inputs in;
    in.q = tu_randn(f, T, D, 0.7f);
    in.k = tu_unit_rows(f, T, D);
    in.v = tu_randn(f, T, D, 1.0f);
    in.eta = tu_uniform(f, T, 0.3f, 1.0f);
    if (per_key) {
        in.la = ttt_tensor_2d(&f->ctx, T, D);
        ttt_rng_fill_uniform(&f->rng, in.la->data, in.la->n, -0.3f, -0.01f);
    } else {
        in.la = tu_uniform(f, T, -0.3f, -0.01f);
    }
    return in;
}

/* Outputs and final state of L on `in`, from the layer's initial state. */
static ttt_tensor *run(tu_fixture *f, const ttt_layer *L, const inputs *in, ttt_layer_state *st) {
    ttt_layer_state_init(&f->ctx, L, st, NULL);
    ttt_tensor *o = ttt_tensor_2d(&f->ctx, T, D);
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward(&f->ctx, L, o, st, in->q, in->k, in->v, in->eta, in->la,
                                    &err) == TTT_OK,
                  "%s", err.msg);
    return o;
}

/* init: sgd is sgd. The step computes d = 1·G + 0·M (exactly G) and then the same
 * W ← αW − θd as sgd, so equality is bitwise; a wrong initial coefficient (c_g ≠ 1, c_m ≠ 0) or a
 * network output that is not zero at init changes the weights at O(θ‖G‖). */
START_TEST(init_sgd_is_sgd) {
    static const char *const layouts[] = {"mini_batch: 1", "mini_batch: 4",
                                          "mini_batch: 4, steps: per_token"};
    for (int per_key = 0; per_key < 2; per_key++)
        for (int li = 0; li < 3; li++) {
            tu_fixture f;
            tu_fx_init(&f, 11 + (uint64_t)li);
            const inputs in = make_inputs(&f, per_key);
            char a[256], b[256];
            snprintf(a, sizeof a, "%s, optimizer: {name: sgd, lr: 0.4}", layouts[li]);
            snprintf(b, sizeof b, "%s, optimizer: {name: learned, lr: 0.4, init: sgd}",
                     layouts[li]);
            ttt_layer La, Lb;
            make_layer(&La, a, D);
            make_layer(&Lb, b, D);
            ttt_layer_state sa, sb;
            ttt_tensor *oa = run(&f, &La, &in, &sa), *ob = run(&f, &Lb, &in, &sb);
            ck_assert_msg(memcmp(oa->data, ob->data, oa->n * sizeof(float)) == 0,
                          "%s, gates per key %d: outputs differ", layouts[li], per_key);
            ck_assert(memcmp(sa.W[0]->data, sb.W[0]->data, sa.W[0]->n * sizeof(float)) == 0);
            tu_fx_free(&f);
        }
}
END_TEST

/* init: momentum is momentum with the same μ: both give W_t = αW − θ(μM + G) with M in gradient
 * units here and in weight units (−θM) there, so they differ by the rounding of θ·(μM + G)
 * against μ(θM) + θG. Two float32 paths, each bounded against the exact recurrence
 * (docs/hardening.md "Portable tolerances"): a token rounds each state entry through
 * n = 4D + T + 10 operations of at most ε = 2^-24 of its scale (the D-term product, a block's sums
 * of ≤ T terms, some ten element-wise; the count of tests/test_optim.c), independent from token
 * to token over non-expanding steps (unit keys, θη ≤ 0.3, μ = 0.5, gates ≤ 1), a walk of
 * deviation ε·√(n·T), c = 6 for the largest entry: the sum of the two paths' bounds is
 * 2·6ε·√(n·T) = 2.7e-5 of the largest entry at T = 24, D = 6 (was a fixed 1e-5). Control: the
 * learned rule with μ = 0.45 must be rejected. */
START_TEST(init_momentum_is_momentum) {
    static const char *const layouts[] = {"mini_batch: 1", "mini_batch: 4",
                                          "mini_batch: 4, steps: per_token"};
    for (int per_key = 0; per_key < 2; per_key++)
        for (int li = 0; li < 3; li++) {
            tu_fixture f;
            tu_fx_init(&f, 21 + (uint64_t)li);
            const inputs in = make_inputs(&f, per_key);
            char a[256], b[256];
            snprintf(a, sizeof a, "%s, optimizer: {name: momentum, lr: 0.3, momentum: 0.5}",
                     layouts[li]);
            snprintf(b, sizeof b,
                     "%s, optimizer: {name: learned, lr: 0.3, momentum: 0.5, init: momentum}",
                     layouts[li]);
            ttt_layer La, Lb;
            make_layer(&La, a, D);
            make_layer(&Lb, b, D);
            ttt_layer_state sa, sb;
            ttt_tensor *oa = run(&f, &La, &in, &sa), *ob = run(&f, &Lb, &in, &sb);
            const double rtol = 2 * 6 * 0x1p-24 * sqrt((4.0 * D + T + 10) * T);
            char msg[512];
            ck_assert_msg(tu_close_f(ob->data, oa->data, oa->n, 0, rtol, msg, sizeof msg),
                          "%s, gates per key %d: outputs: %s", layouts[li], per_key, msg);
            ck_assert_msg(tu_close_f(sb.W[0]->data, sa.W[0]->data, sa.W[0]->n, 0, rtol, msg,
                                     sizeof msg),
                          "%s, gates per key %d: final W: %s", layouts[li], per_key, msg);
            /* the buffers: momentum's M is −θ times the learned rule's (one more rounding) */
            ttt_tensor *Mb = ttt_scale(&f.ctx, sb.opt[0][0], -0.3f);
            ck_assert_msg(tu_close_f(Mb->data, sa.opt[0][0]->data, Mb->n, 0, rtol, msg,
                                     sizeof msg),
                          "%s: buffers: %s", layouts[li], msg);
            /* the control: another μ */
            snprintf(b, sizeof b,
                     "%s, optimizer: {name: learned, lr: 0.3, momentum: 0.45, init: momentum}",
                     layouts[li]);
            ttt_layer Lx;
            make_layer(&Lx, b, D);
            ttt_layer_state sx;
            ttt_tensor *ox = run(&f, &Lx, &in, &sx);
            tu_ratio_quiet = 1;
            ck_assert_msg(!tu_close_f(ox->data, oa->data, oa->n, 0, rtol, NULL, 0),
                          "%s: the learned rule with mu = 0.45 passes as momentum 0.5",
                          layouts[li]);
            tu_ratio_quiet = 0;
            tu_fx_free(&f);
        }
}
END_TEST

/* ---- gradients w.r.t. the outer parameters ---- */

enum { GT = 8, GD = 3 };

typedef struct gproblem {
    ttt_layer L;
    int n_leaf;
    float *buf[16], *grad[16];
    size_t n[16];
    int ndim[16], shape[16][TTT_MAX_DIMS];
    float r[GT * GD + GD * GD + GD * GD];
} gproblem;

/* Σ|r ⊙ (o, W_T, M_T)| of the last gloss: the loss's scale. */
static double gloss_abs;

/* Leaves: q, k, v (GT, GD), η (GT), then the n_outer parameters. Loss: Σ r ⊙ (o, W_T, M_T). */
static double gloss(gproblem *p, int with_grad) {
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = with_grad, .tape = with_grad ? &tape : NULL};
    ttt_tensor leaf[16];
    for (int i = 0; i < p->n_leaf; i++) {
        leaf[i] = ttt_tensor_view(p->buf[i], p->ndim[i], p->shape[i]);
        if (with_grad) ttt_tensor_set_param(&leaf[i], p->grad[i]);
    }
    ttt_layer_state st;
    ttt_layer_state_init(&ctx, &p->L, &st, NULL);
    ck_assert_int_eq(st.n_outer, p->n_leaf - 4);
    for (int i = 0; i < st.n_outer; i++) st.outer[i] = &leaf[4 + i];
    ttt_tensor *o = ttt_tensor_2d(&ctx, GT, GD);
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_forward(&ctx, &p->L, o, &st, &leaf[0], &leaf[1], &leaf[2], &leaf[3],
                                    NULL, &err) == TTT_OK,
                  "%s", err.msg);
    ttt_tensor *ro = ttt_tensor_2d(&ctx, GT, GD), *rw = ttt_tensor_2d(&ctx, GD, GD),
               *rm = ttt_tensor_2d(&ctx, GD, GD);
    memcpy(ro->data, p->r, sizeof(float) * GT * GD);
    memcpy(rw->data, p->r + GT * GD, sizeof(float) * GD * GD);
    memcpy(rm->data, p->r + GT * GD + GD * GD, sizeof(float) * GD * GD);
    ttt_tensor *loss = ttt_add(&ctx, ttt_dot(&ctx, o, ro),
                               ttt_add(&ctx, ttt_dot(&ctx, st.W[0], rw),
                                       ttt_dot(&ctx, st.opt[0][0], rm)));
    const double val = loss->data[0];
    const ttt_tensor *parts[3] = {o, st.W[0], st.opt[0][0]};
    const float *rs[3] = {p->r, p->r + GT * GD, p->r + GT * GD + GD * GD};
    gloss_abs = 0.0;
    for (int k = 0; k < 3; k++)
        for (size_t e = 0; e < parts[k]->n; e++)
            gloss_abs += fabs((double)parts[k]->data[e] * rs[k][e]);
    if (with_grad) ttt_backward(&ctx, loss);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    return val;
}

static double central(gproblem *p, int i, size_t j, double h) {
    const float x0 = p->buf[i][j];
    p->buf[i][j] = x0 + (float)h;
    const double lp = gloss(p, 0);
    p->buf[i][j] = x0 - (float)h;
    const double lm = gloss(p, 0);
    p->buf[i][j] = x0;
    return (lp - lm) / ((double)(x0 + (float)h) - (double)(x0 - (float)h));
}

/* With the network switched on (random outer parameters, w2 ≠ 0), the tape's gradients w.r.t. c,
 * W1, b1, w2 and q, k, v, η agree with Richardson-extrapolated central differences of the float32
 * forward (D*(h) = (4 D(h/2) − D(h))/3, cancelling the h² term; compared at h/2 = 2e-3). eps =
 * 0.05 keeps the log-magnitude and sign features smooth on the scale of the steps (their
 * curvature ~1/ε²). Tolerance, each term bounded on its own (docs/hardening.md "Portable
 * tolerances"; as tests/test_layer_grad.c), with n = 4·GD + GT + 10 + 4·hidden roundings per
 * state entry per token (the D-term product, a block's sums, some ten element-wise, and the
 * rule's network: a hidden layer of 4 units over a few features of each entry), ε = 2^-24:
 *   - the tape gradient: the forward and backward walk, 6ε·√(2n·T) of the largest gradient entry
 *     over all leaves (the sums a gradient is made of are on that scale);
 *   - the differences' rounding: the float32 loss (its outputs, states and the float32 dots
 *     against r) is within δL = 6ε·√(n·T)·Σ|r ⊙ (o, W, M)|; a central quotient at step s
 *     carries δL/s, so D*(h/2) = (4 D(h/4) − D(h/2))/3 carries (4·4 + 2)/3·δL/h = 6δL/h;
 *   - its truncation (the h⁴ term) and the rounding the walk does not count, estimated by the
 *     step above it: |D*(h) − D*(h/2)| (D*(h) has sixteen times the h⁴ term), c = 2.
 * Control: every gradient scaled by 1.05 fails somewhere (a dropped term of the hand-written
 * backward, the tanh derivative, the W1 gradient or a feature's chain rule, is off by
 * O(max|grad|)). Returns the number of failing elements when grad_scale ≠ 1 (asserting
 * nothing). */
static int check_outer(int b, double grad_scale) {
    const int control = grad_scale != 1.0;
    gproblem p;
    memset(&p, 0, sizeof p);
    char body[200];
    snprintf(body, sizeof body,
             "mini_batch: %d, optimizer: {name: learned, lr: 0.5, momentum: 0.6, hidden: 4, "
             "eps: 0.05, decay: 0.9}",
             b);
    make_layer(&p.L, body, GD);
    ttt_rng rng;
    ttt_rng_seed(&rng, 300 + (uint64_t)b);
    ttt_optim_param decl[TTT_OPTIM_MAX_OUTER];
    const int no = ttt_optim_n_outer(p.L.optim, p.L.optim_cfg, decl);
    ck_assert_int_eq(no, 4);
    p.n_leaf = 4 + no;
    const int dims[4][2] = {{GT, GD}, {GT, GD}, {GT, GD}, {GT, 0}};
    for (int i = 0; i < p.n_leaf; i++) {
        if (i < 4) {
            p.ndim[i] = dims[i][1] ? 2 : 1;
            p.shape[i][0] = dims[i][0], p.shape[i][1] = dims[i][1];
        } else {
            p.ndim[i] = decl[i - 4].ndim;
            memcpy(p.shape[i], decl[i - 4].shape, sizeof decl[i - 4].shape);
        }
        p.n[i] = 1;
        for (int d = 0; d < p.ndim[i]; d++) p.n[i] *= (size_t)p.shape[i][d];
        p.buf[i] = malloc(p.n[i] * sizeof(float));
        p.grad[i] = calloc(p.n[i], sizeof(float));
        ttt_rng_fill_normal(&rng, p.buf[i], p.n[i], 0, i < 4 ? 0.6f : 0.5f);
    }
    ttt_rng_fill_uniform(&rng, p.buf[3], GT, 0.3f, 1.0f); /* η */
    ttt_rng_fill_normal(&rng, p.r, sizeof p.r / sizeof *p.r, 0, 1);
    gloss(&p, 1);
    const double eps = 0x1p-24, n = 4.0 * GD + GT + 10 + 4 * 4;
    const double dL = 6 * eps * sqrt(n * GT) * gloss_abs;
    double gall = 0;
    for (int i = 0; i < p.n_leaf; i++)
        for (size_t j = 0; j < p.n[i]; j++) {
            p.grad[i][j] *= (float)grad_scale;
            gall = fmax(gall, fabs(p.grad[i][j]));
        }
    static const char *const names[] = {"q", "k", "v", "eta", "c", "w1", "b1", "w2"};
    int fails = 0;
    tu_ratio_quiet = control;
    for (int i = 0; i < p.n_leaf; i++) {
        double gmax = 0;
        for (size_t j = 0; j < p.n[i]; j++) gmax = fmax(gmax, fabs(p.grad[i][j]));
        ck_assert_msg(gmax > 0, "b %d: no gradient reaches %s", b, names[i]);
        for (size_t j = 0; j < p.n[i]; j++) {
            const double h = 4e-3;
            const double D1 = central(&p, i, j, h), D2 = central(&p, i, j, h / 2),
                         D4 = central(&p, i, j, h / 4);
            const double fd = (4 * D2 - D1) / 3, fd2 = (4 * D4 - D2) / 3;
            const double tol =
                6 * eps * sqrt(2 * n * GT) * gall + 6 * dL / h + 2 * fabs(fd - fd2);
            if (control)
                fails += !(fabs(fd2 - p.grad[i][j]) <= tol);
            else
                TU_ASSERT_LE(fabs(fd2 - p.grad[i][j]), tol,
                             "b %d: dL/d%s[%zu]: tape %.6g, finite difference %.6g (max %.3g)",
                             b, names[i], j, p.grad[i][j], fd2, gmax);
        }
    }
    tu_ratio_quiet = 0;
    for (int i = 0; i < p.n_leaf; i++) free(p.buf[i]), free(p.grad[i]);
    return fails;
}

START_TEST(outer_gradients_match_finite_differences) {
    for (int b = 1; b <= 4; b += 3) check_outer(b, 1.0);
}
END_TEST

START_TEST(perturbed_outer_gradients_are_rejected) {
    for (int b = 1; b <= 4; b += 3) ck_assert_int_gt(check_outer(b, 1.05), 0);
}
END_TEST

/* The parameters the state carries are the ones used: other values change the outputs (so a
 * trained network takes effect), and the batch runner, which starts every sequence from the
 * layer's initialization, gives the outputs of the layer with its initial parameters. */
START_TEST(state_carries_the_outer_parameters) {
    tu_fixture f;
    tu_fx_init(&f, 5);
    const inputs in = make_inputs(&f, 0);
    ttt_layer L;
    make_layer(&L, "optimizer: {name: learned, lr: 0.3}", D);
    ttt_layer_state s0, s1;
    ttt_tensor *o0 = run(&f, &L, &in, &s0);
    ttt_layer_state_init(&f.ctx, &L, &s1, NULL);
    ck_assert_int_eq(s1.n_outer, 4);
    ttt_tensor *w2 = ttt_tensor_copy(&f.ctx, s1.outer[3]);
    ttt_tensor_fill(w2, 0.1f);
    s1.outer[3] = w2;
    ttt_tensor *o1 = ttt_tensor_2d(&f.ctx, T, D);
    ttt_error err = {0};
    ck_assert(ttt_layer_forward(&f.ctx, &L, o1, &s1, in.q, in.k, in.v, in.eta, in.la, &err) ==
              TTT_OK);
    double diff = 0;
    for (size_t j = 0; j < o0->n; j++) diff = fmax(diff, fabs(o0->data[j] - o1->data[j]));
    ck_assert_msg(diff > 1e-3, "the network's parameters did not reach the step (%g)", diff);
    /* the batch runner: B = 1, H = 1 */
    float *ob = calloc(o0->n, sizeof(float));
    ttt_layer_io io = {.B = 1, .T = T, .H = 1, .o = ob, .q = in.q->data, .k = in.k->data,
                       .v = in.v->data, .eta = in.eta->data, .log_alpha = in.la->data};
    ck_assert_msg(ttt_layer_forward_batch(&L, &io, 1, &err) == TTT_OK, "%s", err.msg);
    char msg[512];
    ck_assert_msg(tu_close_f(ob, o0->data, o0->n, 0, 0, msg, sizeof msg), "%s", msg);
    free(ob);
    tu_fx_free(&f);
}
END_TEST

/* ---- in the sequence model ---- */

enum { SV = 11, ST = 7, SB = 2 };

/* The mean loss, from the cross-entropy's double sum (stats.loss_sum) rather than the float32
 * loss tensor: a difference quotient of the rounded mean carries its half-ulp (~1.2e-7 at a loss
 * of ~2.4, 1.8e-4 in a 4-point quotient at h = 1e-3), which is the size of the tolerance's
 * absolute floor; the double sum leaves only the logits' own rounding. */
static double seq_loss(ttt_seq_model *m, ttt_ctx *ctx, const ttt_seq_batch *b, int grad) {
    ttt_tensor *loss;
    ttt_seq_stats st;
    ttt_error err = {0};
    ctx->grad = grad;
    ck_assert_msg(ttt_seq_model_loss(ctx, m, NULL, b, 0, &loss, &st, NULL, &err) == TTT_OK, "%s",
                  err.msg);
    const double v = st.count > 0 ? st.loss_sum / (double)st.count : loss->data[0];
    if (grad) ttt_backward(ctx, loss);
    ttt_tape_reset(ctx->tape);
    ttt_arena_reset(ctx->arena);
    ctx->grad = 0;
    return v;
}

/* A two-block model whose TTT layers use the learned rule: every block has the four declared
 * tensors as parameters "layer<l>.mixer.opt_<name>" of the declared shapes, starting at the
 * rule's initialization, excluded from weight decay (decay would pull the rule away from the one
 * it starts as); and the derivative of the training loss along a random direction of each
 * agrees with a 4-point difference quotient of the float32 model, h = 1e-3. Tolerance, each term
 * on its own (docs/hardening.md "Portable tolerances"), ε = 2^-24:
 *   - the tape's directional derivative Σ_j g_j·dir_j: the model's forward and backward walk,
 *     6ε·√(2n·T) of Σ_j|g_j·dir_j| (its terms' scale), n = layers·(8·d_model + T + 10) +
 *     d_model + 10 roundings per entry per token (each block's projections, 4·d_model, and its
 *     mixer, 4·d_model + T + 10 as in tests/test_layer.c; the head and the cross-entropy);
 *   - the quotient's rounding: the loss (the mean cross-entropy summed in double from the float32
 *     logits) to a relative ε, ε·|L|, which the quotient's weights (1 + 8 + 8 + 1)/12 turn into
 *     1.5·ε·|L|/h;
 *   - its truncation (O(h⁴)) and any rounding beyond that, estimated by halving the step: the
 *     quotient at h/2 has a sixteenth of the h⁴ term and twice the rounding; c = 2 over
 *     |q(h) − q(h/2)|.
 * The network is switched on first (w2 = 0.3) so that W1 and b1 get gradients too. A mixer that
 * registered the tensors but did not put them into the layer's state would give them no
 * gradient at all (checked: nonzero). Control: the tape's derivatives scaled by 1.05 fail for
 * some of the tensors. */
START_TEST(sequence_model_trains_the_outer_parameters) {
    const char *text = "model: {d_model: 8, layers: 2, heads: 2, mlp: 0, conv: 0, init_std: 0.3}\n"
                       "layer: {model: linear, loss: squared, form: generic, mini_batch: 2, "
                       "optimizer: {name: learned, lr: 0.5, momentum: 0.5, hidden: 3, "
                       "eps: 0.05}}\n";
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(text, "seq.yaml", &root, &err) == TTT_OK);
    ttt_seq_model_io io = {.vocab = SV, .seq_len = ST};
    ttt_seq_model_config c;
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c,
                                      &err) == TTT_OK,
                  "%s", err.msg);
    ttt_cfg_free(root);
    ttt_seq_model m;
    ck_assert_msg(ttt_seq_model_init(&m, &c, 7, &err) == TTT_OK, "%s", err.msg);
    ttt_optim_param decl[TTT_OPTIM_MAX_OUTER];
    const int no = ttt_optim_n_outer(c.layer.optim, c.layer.optim_cfg, decl);
    ck_assert_int_eq(no, 4);
    ttt_arena arena;
    ttt_arena_init(&arena, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .tape = &tape};
    ttt_tensor *init[TTT_OPTIM_MAX_OUTER];
    ttt_optim_outer_new(&ctx, c.layer.optim, c.layer.optim_cfg, init);
    ttt_param *P[2][TTT_OPTIM_MAX_OUTER];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < no; i++) {
            char name[TTT_PARAM_NAME_LEN];
            snprintf(name, sizeof name, "layer%d.mixer.opt_%s", l, decl[i].name);
            P[l][i] = ttt_params_find(&m.params, name);
            ck_assert_msg(P[l][i], "no parameter %s", name);
            ck_assert_int_eq(P[l][i]->ndim, decl[i].ndim);
            ck_assert(memcmp(P[l][i]->shape, decl[i].shape, decl[i].ndim * sizeof(int)) == 0);
            ck_assert_msg(memcmp(P[l][i]->data, init[i]->data, init[i]->n * sizeof(float)) == 0,
                          "%s does not start at the rule's initialization", name);
            ck_assert_int_eq(P[l][i]->decay, 0);
        }
    ttt_arena_reset(&arena);
    for (int l = 0; l < 2; l++)
        for (size_t j = 0; j < P[l][3]->n; j++) P[l][3]->data[j] = 0.3f; /* w2: network on */
    int tokens[SB * ST], labels[SB * ST];
    ttt_rng r;
    ttt_rng_seed(&r, 77);
    for (int i = 0; i < SB * ST; i++) {
        tokens[i] = (int)ttt_rng_below(&r, SV);
        labels[i] = (int)ttt_rng_below(&r, SV);
    }
    const ttt_seq_batch b = {.B = SB, .T = ST, .tokens = tokens, .labels = labels};
    ttt_params_zero_grad(&m.params);
    const double L0 = seq_loss(&m, &ctx, &b, 1);
    const double eps = 0x1p-24, n = 2 * (8.0 * 8 + ST + 10) + 8 + 10;
    int control_fails = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < no; i++) {
            ttt_param *p = P[l][i];
            float *dir = malloc(p->n * sizeof(float)), *save = malloc(p->n * sizeof(float));
            ttt_rng_fill_normal(&r, dir, p->n, 0, 1);
            memcpy(save, p->data, p->n * sizeof(float));
            double gdot = 0, gabs = 0;
            for (size_t j = 0; j < p->n; j++)
                gdot += (double)p->grad[j] * dir[j], gabs += fabs((double)p->grad[j] * dir[j]);
            double q[2]; /* the quotients at h and h/2 */
            for (int half = 0; half < 2; half++) {
                const double h = half ? 5e-4 : 1e-3, steps[4] = {2 * h, h, -h, -2 * h};
                double v[4];
                for (int k = 0; k < 4; k++) {
                    for (size_t j = 0; j < p->n; j++)
                        p->data[j] = save[j] + (float)(steps[k] * dir[j]);
                    v[k] = seq_loss(&m, &ctx, &b, 0);
                }
                q[half] = (-v[0] + 8 * v[1] - 8 * v[2] + v[3]) / (12 * h);
            }
            memcpy(p->data, save, p->n * sizeof(float));
            const double fd = q[0];
            const double tol = 6 * eps * sqrt(2 * n * ST) * gabs + 1.5 * eps * fabs(L0) / 1e-3 +
                               2 * fabs(q[0] - q[1]);
            ck_assert_msg(fabs(gdot) > 1e-6, "%s: no gradient", p->name);
            TU_ASSERT_LE(fabs(fd - gdot), tol, "%s: tape %.6g, finite difference %.6g", p->name,
                         gdot, fd);
            control_fails += !(fabs(fd - 1.05 * gdot) <= tol);
            free(dir), free(save);
        }
    ck_assert_msg(control_fails > 0, "the derivatives scaled by 1.05 pass everywhere");
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    ttt_seq_model_free(&m);
}
END_TEST

static Suite *learned_suite(void) {
    Suite *s = suite_create("learned_optim");
    TCase *tc = tcase_create("learned");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, init_sgd_is_sgd);
    tcase_add_test(tc, init_momentum_is_momentum);
    tcase_add_test(tc, outer_gradients_match_finite_differences);
    tcase_add_test(tc, perturbed_outer_gradients_are_rejected);
    tcase_add_test(tc, state_carries_the_outer_parameters);
    tcase_add_test(tc, sequence_model_trains_the_outer_parameters);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(learned_suite()); }
