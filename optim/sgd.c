/* Plain SGD with optional decay and L2 regularization (docs/math.md §3):
 *     W ← α·W − θ·(G + l2·W).
 * With the dot loss this is (gated) linear attention; with the squared loss, the delta rule.
 * `l2` is the gradient of the regularizer (l2/2)‖W‖² taken at the undecayed weights; with
 * l2 = (1 − γ)/θ and no decay it reproduces decoupled decay γ exactly (docs/math.md §3, a test). */
#include "optim.h"

typedef struct sgd_cfg {
    float l2;
} sgd_cfg;

static const ttt_option sgd_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"l2", TTT_OPT_FLOAT, "0.0", 0.0, 1e6, NULL,
     "L2 regularization: adds l2*W to the gradient (l2 = (1-g)/lr acts as decay g)"},
    TTT_OPTION_END,
};

static ttt_status sgd_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    ((sgd_cfg *)cfg)->l2 = (float)ttt_optim_arg_num(opts, "l2");
    return TTT_OK;
}

static int sgd_n_state(const void *cfg) { return 0; }

static void sgd_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                     const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                     const ttt_optim_block *blk) {
    const sgd_cfg *c = cfg;
    ttt_tensor *Wd = ttt_optim_apply_decay(ctx, W, blk); /* α·W */
    if (c->l2 != 0.0f) G = ttt_axpby(ctx, 1.0f, G, c->l2, W); /* G + l2·W */
    *W_out = ttt_axpby(ctx, 1.0f, Wd, -blk->theta, G);   /* α·W − θ·G */
}

/* Plain SGD when nothing is added to the gradient: the closed forms' W ← α·W − θ·G. */
static ttt_optim_traits sgd_traits(const void *cfg) {
    const sgd_cfg *c = cfg;
    return (ttt_optim_traits){.plain_sgd = c->l2 == 0.0f, .linear_in_G = 1};
}

const ttt_optim ttt_optim_sgd = {
    .name = "sgd",
    .help = "stochastic gradient descent: W <- decay*W - lr*(G + l2*W)",
    .options = sgd_options,
    .cfg_size = sizeof(sgd_cfg),
    .parse = sgd_parse,
    .n_state = sgd_n_state,
    .init_state = NULL,
    .step = sgd_step,
    .traits = sgd_traits,
};
