/* Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an
 * interpolation between the momentum and the fresh gradient, so every coordinate moves by
 * exactly θ (docs/math.md §3.7):
 *
 *     c = β₁ M + (1 − β₁) G           W ← (1 − λ) α W − θ sign(c)
 *     M ← β₂ M + (1 − β₂) G
 *
 * α is the block's retention (`decay`), λ a decoupled weight decay. Written from the ops for
 * optimizer rules (src/core/ops.h: sign has gradient 0, so the outer loop learns through the
 * weights and the state, not through the step's direction — as in PyTorch). */
#include "parts.h"

typedef struct lion_cfg {
    float beta1, beta2, weight_decay;
} lion_cfg;

static const ttt_option lion_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"beta1", TTT_OPT_FLOAT, "0.9", 0.0, 1.0, NULL,
     "interpolation of the step's direction: sign(beta1*M + (1-beta1)*G)"},
    {"beta2", TTT_OPT_FLOAT, "0.99", 0.0, 1.0, NULL,
     "decay rate of the momentum M <- beta2*M + (1-beta2)*G (must be < 1)"},
    {"weight_decay", TTT_OPT_FLOAT, "0.0", 0.0, 1.0, NULL,
     "decoupled weight decay lambda: W <- (1 - lambda)*decay*W - lr*sign(c)"},
    TTT_OPTION_END,
};

static ttt_status lion_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    lion_cfg *c = cfg;
    c->beta1 = (float)ttt_optim_arg_num(opts, "beta1");
    c->beta2 = (float)ttt_optim_arg_num(opts, "beta2");
    c->weight_decay = (float)ttt_optim_arg_num(opts, "weight_decay");
    if (c->beta2 >= 1.0f)
        return ttt_optim_arg_error(err, TTT_ERR_RANGE, opts, "beta2",
                                   "layer.optimizer.beta2: %g is out of range; expected a value "
                                   "in [0, 1) (beta2 = 1 never lets a gradient into M)",
                                   (double)c->beta2);
    return TTT_OK;
}

static int lion_n_state(const void *cfg) { return 1; /* M */ }

static void lion_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                      const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                      const ttt_optim_block *blk) {
    const lion_cfg *c = cfg;
    ttt_tensor *dir = ttt_sign(ctx, ttt_axpby(ctx, c->beta1, state[0], 1.0f - c->beta1, G));
    state_out[0] = ttt_axpby(ctx, c->beta2, state[0], 1.0f - c->beta2, G);
    *W_out = ttt_part_update(ctx, W, blk, 1.0f - c->weight_decay, -blk->theta, dir);
}

const ttt_optim ttt_optim_lion = {
    .name = "lion",
    .help = "Lion: W <- (1-weight_decay)*decay*W - lr*sign(beta1*M + (1-beta1)*G); "
            "M <- beta2*M + (1-beta2)*G",
    .options = lion_options,
    .cfg_size = sizeof(lion_cfg),
    .parse = lion_parse,
    .n_state = lion_n_state,
    .step = lion_step,
};
