/* A learned inner optimizer: the update is a small network over per-coordinate features, whose
 * weights are outer-loop parameters (docs/math.md §3.8; docs/optimizers.md
 * "Outer parameters").
 *
 * Optimizers are recurrent networks over parameters: momentum is a linear RNN whose hidden state
 * is the buffer M. Following Ravi & Larochelle ("Optimization as a model for few-shot
 * learning"), whose meta-learner outputs a learning rate and a forget gate per coordinate, and
 * Andrychowicz et al. ("Learning to learn by gradient descent by gradient descent") for the
 * inputs, the rule keeps that recurrence and learns per-coordinate coefficients of the gradient
 * and of the buffer, with the same small network for every coordinate of every weight tensor:
 *
 *     M ← μ M + G                                              (state, W's shape)
 *     x = (ℓ(G), s(G), ℓ(M), s(M), W)                          (5 features per coordinate)
 *     z = σ(x W1 + b1),  σ(a) = a / sqrt(1 + a²)               (hidden units)
 *     d = (c_g + z·w2[:,0]) G + (c_m + z·w2[:,1]) M
 *     W ← α W − θ d
 *
 * The network modulates the step of each coordinate (its output multiplies G and M) instead of
 * adding a step of its own: an additive output is independent of the gradient's scale and, once
 * w2 ≠ 0, pushed every coordinate of every fast weight at every token (measured on MQAR: the
 * model stayed at chance). The inputs are the log-magnitude and sign preprocessing of
 * Andrychowicz et al. (their appendix on preprocessing) made smooth, so that the rule is
 * differentiable everywhere (the outer loop differentiates through it):
 *
 *     ℓ(x) = log(x² + ε²) / (2 log(1/ε))     ≈ log|x| / log(1/ε), and ≥ −1
 *     s(x) = x / sqrt(x² + ε²)               ≈ sign x
 *
 * Outer parameters: c = (c_g, c_m), W1 (5, hidden), b1 (hidden), w2 (hidden, 2): 8·hidden + 2.
 * At initialization w2 = 0, so the network changes nothing, and c makes the rule a hand-written
 * one it contains: `init: momentum` sets c = (0, 1), which is the `momentum` optimizer with the
 * same μ (W ← αW − θ(μM + G) with M in gradient units, M_momentum = −θ M); `init: sgd` sets
 * c = (1, 0), plain SGD (tests/test_learned_optim.c checks both). W1 starts from a fixed
 * pseudo-random draw (it must not be zero, or w2 would get no gradient through σ(b1) = 0 alone),
 * b1 at 0.
 *
 * Only the network's read-out is learned, not a coordinatewise LSTM: the recurrence is the
 * momentum buffer, which keeps the hand-written rules representable exactly.
 *
 * The network is one fused op with a hand-written backward (the tape entry covers G, M, W and
 * the four parameters), since composing it from per-feature ops would make ~20 weight-sized
 * temporaries per token. */
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "parts.h"
#include "rng.h"

extern const ttt_optim ttt_optim_learned;

enum { N_FEAT = 5, MAX_HIDDEN = 64 };
enum { P_C, P_W1, P_B1, P_W2, N_OUTER };

typedef struct learned_cfg {
    float mu;
    int hidden;
    int init_sgd; /* init: sgd (else momentum) */
    float eps;
} learned_cfg;

static const ttt_option learned_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"momentum", TTT_OPT_FLOAT, "0.9", 0.0, 1.0, NULL,
     "decay mu of the buffer M <- mu*M + G the network reads (must be < 1)"},
    {"hidden", TTT_OPT_INT, "8", 1, MAX_HIDDEN, NULL,
     "hidden width of the per-coordinate network (outer-loop parameters: 8*hidden + 2)"},
    {"init", TTT_OPT_CHOICE, "momentum", TTT_NO_RANGE, "momentum|sgd",
     "the hand-written rule it equals at initialization (momentum with this mu, or sgd)"},
    {"eps", TTT_OPT_FLOAT, "1e-4", 1e-8, 1.0, NULL,
     "smoothing of the log-magnitude and sign features (their scale: log(1/eps))"},
    TTT_OPTION_END,
};

static ttt_status learned_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    learned_cfg *c = cfg;
    TTT_TRY(ttt_optim_read_momentum(opts, &c->mu, err));
    c->hidden = (int)ttt_optim_arg_num(opts, "hidden");
    c->init_sgd = strcmp(ttt_optim_arg_text(opts, "init"), "sgd") == 0;
    c->eps = (float)ttt_optim_arg_num(opts, "eps");
    return TTT_OK;
}

static int learned_n_state(const void *cfg) { return 1; /* M */ }

static int learned_outer(const void *cfg, ttt_optim_param *decl) {
    const learned_cfg *c = cfg;
    decl[P_C] = (ttt_optim_param){.name = "c", .ndim = 1, .shape = {2}};
    decl[P_W1] = (ttt_optim_param){.name = "w1", .ndim = 2, .shape = {N_FEAT, c->hidden}};
    decl[P_B1] = (ttt_optim_param){.name = "b1", .ndim = 1, .shape = {c->hidden}};
    decl[P_W2] = (ttt_optim_param){.name = "w2", .ndim = 2, .shape = {c->hidden, 2}};
    return N_OUTER;
}

static void learned_outer_init(const void *cfg, ttt_tensor **P) {
    const learned_cfg *c = cfg;
    P[P_C]->data[0] = c->init_sgd ? 1.0f : 0.0f; /* c_g */
    P[P_C]->data[1] = c->init_sgd ? 0.0f : 1.0f; /* c_m */
    ttt_rng rng;
    ttt_rng_seed(&rng, 0x6c6561726e6564ull); /* fixed: the initialization depends on cfg only */
    ttt_rng_fill_normal(&rng, P[P_W1]->data, P[P_W1]->n, 0.0f, 1.0f / sqrtf((float)N_FEAT));
    /* b1 = 0 and w2 = 0 (allocated zeroed): the network's output is 0 */
}

/* The smooth log-magnitude and sign features and their derivatives (see the top of the file). */
typedef struct feat_consts {
    float eps2, inv2p; /* ε², 1/(2 log(1/ε)) */
} feat_consts;

static inline float f_log(const feat_consts *k, float x) {
    return logf(x * x + k->eps2) * k->inv2p;
}
static inline float f_sign(const feat_consts *k, float x) { return x / sqrtf(x * x + k->eps2); }
static inline float f_log_d(const feat_consts *k, float x) {
    return 2.0f * x * k->inv2p / (x * x + k->eps2);
}
static inline float f_sign_d(const feat_consts *k, float x) {
    const float r = x * x + k->eps2;
    return k->eps2 / (r * sqrtf(r));
}

static void features(const feat_consts *k, float *x, float g, float m, float w) {
    x[0] = f_log(k, g), x[1] = f_sign(k, g), x[2] = f_log(k, m), x[3] = f_sign(k, m), x[4] = w;
}

/* z_h = σ(Σ_f x_f W1_fh + b1_h) for one coordinate, with the squashing σ(a) = a/sqrt(1 + a²)
 * (smooth, odd, bounded by 1 like tanh, but one square root instead of tanh's exponential, which
 * took two thirds of a training step); r_h = 1/sqrt(1 + a²), so that σ'(a) = r_h³. */
static void hidden_layer(float *z, float *r, const float *x, const float *w1, const float *b1,
                         int H) {
    for (int h = 0; h < H; h++) {
        float a = b1[h];
        for (int f = 0; f < N_FEAT; f++) a += x[f] * w1[f * H + h];
        r[h] = 1.0f / sqrtf(1.0f + a * a);
        z[h] = a * r[h];
    }
}

static feat_consts feat_of(float eps) {
    return (feat_consts){.eps2 = eps * eps, .inv2p = 0.5f / logf(1.0f / eps)};
}

/* in: G, M, W, c, w1, b1, w2 */
static void direction_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dd) {
    const ttt_tensor *G = e->in[0], *M = e->in[1], *W = e->in[2];
    const float *c = e->in[3]->data, *w1 = e->in[4]->data, *b1 = e->in[5]->data,
                *w2 = e->in[6]->data;
    const int H = e->iarg[0];
    const feat_consts k = feat_of(e->farg[0]);
    float *gG = ttt_grad(ctx, G), *gM = ttt_grad(ctx, M), *gW = ttt_grad(ctx, W);
    float *gc = ttt_grad(ctx, e->in[3]), *gw1 = ttt_grad(ctx, e->in[4]),
          *gb1 = ttt_grad(ctx, e->in[5]), *gw2 = ttt_grad(ctx, e->in[6]);
    /* parameter gradients summed in double over the coordinates (thousands of terms) */
    double acc_c[2] = {0}, acc_w1[N_FEAT * MAX_HIDDEN] = {0}, acc_b1[MAX_HIDDEN] = {0},
           acc_w2[2 * MAX_HIDDEN] = {0};
    for (size_t j = 0; j < G->n; j++) {
        const float g = G->data[j], m = M->data[j], dj = dd[j];
        if (dj == 0.0f) continue;
        float x[N_FEAT], z[MAX_HIDDEN], r[MAX_HIDDEN], da[MAX_HIDDEN], dx[N_FEAT] = {0};
        features(&k, x, g, m, W->data[j]);
        hidden_layer(z, r, x, w1, b1, H);
        /* d = (c_g + n_g) g + (c_m + n_m) m with n_g, n_m the network's two outputs */
        float ng = 0, nm = 0;
        for (int h = 0; h < H; h++) ng += w2[2 * h] * z[h], nm += w2[2 * h + 1] * z[h];
        const float dng = dj * g, dnm = dj * m; /* ∂L/∂n_g, ∂L/∂n_m */
        acc_c[0] += dng;
        acc_c[1] += dnm;
        for (int h = 0; h < H; h++) {
            acc_w2[2 * h] += (double)dng * z[h];
            acc_w2[2 * h + 1] += (double)dnm * z[h];
            /* σ'(a) = (1 + a²)^(−3/2) */
            da[h] = (dng * w2[2 * h] + dnm * w2[2 * h + 1]) * (r[h] * r[h] * r[h]);
            acc_b1[h] += da[h];
            for (int f = 0; f < N_FEAT; f++) {
                acc_w1[f * H + h] += (double)x[f] * da[h];
                dx[f] += w1[f * H + h] * da[h];
            }
        }
        if (gG) gG[j] += dj * (c[0] + ng) + dx[0] * f_log_d(&k, g) + dx[1] * f_sign_d(&k, g);
        if (gM) gM[j] += dj * (c[1] + nm) + dx[2] * f_log_d(&k, m) + dx[3] * f_sign_d(&k, m);
        if (gW) gW[j] += dx[4];
    }
    if (gc) gc[0] += (float)acc_c[0], gc[1] += (float)acc_c[1];
    for (int h = 0; h < H; h++) {
        if (gb1) gb1[h] += (float)acc_b1[h];
        if (gw2) gw2[2 * h] += (float)acc_w2[2 * h], gw2[2 * h + 1] += (float)acc_w2[2 * h + 1];
        for (int f = 0; f < N_FEAT && gw1; f++) gw1[f * H + h] += (float)acc_w1[f * H + h];
    }
}

/* d = (c_g + z·w2[:,0]) G + (c_m + z·w2[:,1]) M, z = σ(x·W1 + b1), coordinatewise; a new
 * tensor of G's shape. */
static ttt_tensor *direction(ttt_ctx *ctx, const learned_cfg *cf, const ttt_tensor *G,
                             const ttt_tensor *M, const ttt_tensor *W,
                             const ttt_tensor *const *P) {
    const int H = cf->hidden;
    TTT_ASSERT(P[P_W1]->n == (size_t)N_FEAT * H && P[P_W2]->n == (size_t)2 * H);
    const float *c = P[P_C]->data, *w1 = P[P_W1]->data, *b1 = P[P_B1]->data,
                *w2 = P[P_W2]->data;
    int net = 0; /* with w2 = 0 (the initialization) the network adds exactly nothing */
    for (int h = 0; h < 2 * H; h++) net |= w2[h] != 0.0f;
    const feat_consts k = feat_of(cf->eps);
    ttt_tensor *d = ttt_tensor_new(ctx, G->ndim, G->shape);
    for (size_t j = 0; j < G->n; j++) {
        float ag = c[0], am = c[1]; /* the coordinate's coefficients of g and m */
        if (net) {
            float x[N_FEAT], z[MAX_HIDDEN], r[MAX_HIDDEN];
            features(&k, x, G->data[j], M->data[j], W->data[j]);
            hidden_layer(z, r, x, w1, b1, H);
            for (int h = 0; h < H; h++) ag += w2[2 * h] * z[h], am += w2[2 * h + 1] * z[h];
        }
        d->data[j] = ag * G->data[j] + am * M->data[j];
    }
    ttt_tape_entry *e = ttt_tape_record(
        ctx, direction_backward, d,
        (const ttt_tensor *const[]){G, M, W, P[P_C], P[P_W1], P[P_B1], P[P_W2]}, 7);
    if (e) {
        e->iarg[0] = H;
        e->farg[0] = cf->eps;
        e->name = "learned_direction";
    }
    return d;
}

static void learned_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out,
                         ttt_tensor **state_out, const ttt_tensor *W,
                         const ttt_tensor *const *state, const ttt_tensor *G,
                         const ttt_optim_block *blk) {
    const learned_cfg *c = cfg;
    const ttt_tensor *const *P = blk->outer;
    ttt_tensor *init[N_OUTER];
    if (!P) { /* no outer parameters given: their initial values, as constants */
        ttt_optim_outer_new(ctx, &ttt_optim_learned, cfg, init);
        P = (const ttt_tensor *const *)init;
    }
    ttt_tensor *M = ttt_axpby(ctx, c->mu, state[0], 1.0f, G); /* μM + G */
    state_out[0] = M;
    *W_out = ttt_part_update(ctx, W, blk, 1.0f, -blk->theta, direction(ctx, c, G, M, W, P));
}

const ttt_optim ttt_optim_learned = {
    .name = "learned",
    .help = "learned per-coordinate rule (outer-trained network over g, momentum, w): "
            "W <- decay*W - lr*((c_g + n_g)*G + (c_m + n_m)*M), n = mlp(features); starts as "
            "momentum or sgd",
    .options = learned_options,
    .cfg_size = sizeof(learned_cfg),
    .parse = learned_parse,
    .n_state = learned_n_state,
    .init_state = NULL,
    .step = learned_step,
    .traits = NULL,
    .outer = learned_outer,
    .outer_init = learned_outer_init,
};
