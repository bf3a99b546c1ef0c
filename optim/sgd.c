/* Plain SGD with optional decay (MATH.md §3):  W ← α·W − θ·G.
 * With the dot loss this is (gated) linear attention; with the squared loss, the delta rule. */
#include "optim.h"

static const ttt_option sgd_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    TTT_OPTION_END,
};

static int sgd_n_state(const void *cfg) { return 0; }

static void sgd_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                     const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                     const ttt_optim_block *blk) {
    ttt_tensor *Wd = ttt_optim_apply_decay(ctx, W, blk); /* α·W */
    *W_out = ttt_axpby(ctx, 1.0f, Wd, -blk->theta, G);   /* α·W − θ·G */
}

const ttt_optim ttt_optim_sgd = {
    .name = "sgd",
    .help = "stochastic gradient descent: W <- decay*W - lr*G",
    .options = sgd_options,
    .cfg_size = 0,
    .parse = NULL,
    .n_state = sgd_n_state,
    .init_state = NULL,
    .step = sgd_step,
};
