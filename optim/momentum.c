/* Momentum with decoupled decay: Titans' memory update (docs/math.md §3 "momentum").
 *
 *     M ← μ M − θ G            W ← α W + M                       (heavy ball)
 *     M ← μ M − θ G            W ← α W + μ M − θ G                (nesterov: true)
 *
 * α is the block's retention (`decay`; Titans writes it as 1 − a_t with the forget rate a_t).
 * With μ = 0 both reduce to decoupled-decay SGD, W ← αW − θG, to the last bit.
 *
 * Nesterov is the look-ahead form of Sutskever et al.: the step taken is the updated velocity
 * continued for one more step, μ M_new, plus the fresh gradient step −θG. It is the rewriting of
 * "evaluate the gradient at W + μM" in variables where the stored weights are the look-ahead
 * point, the same convention as torch.optim.SGD(nesterov=True); for a constant gradient g it
 * moves −θ g (1 + μ + μ² + …) like heavy ball, only one step earlier.
 *
 * Under `steps: per_token` with mini_batch C (gradients at the chunk start) this is Titans'
 * chunked momentum; layers/forms/titans/chunked.c computes the same thing with matmuls per chunk
 * (ttt_momentum_chunked) and tests/test_optim.c ties the two together. */
#include "parts.h"

typedef struct momentum_cfg {
    float mu;
    int nesterov;
} momentum_cfg;

static const ttt_option momentum_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"momentum", TTT_OPT_FLOAT, "0.9", 0.0, 1.0, NULL,
     "momentum mu (must be < 1): M <- mu*M - lr*G (0 = decoupled-decay SGD)"},
    {"nesterov", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "look-ahead step: W <- decay*W + mu*M - lr*G with the updated M"},
    TTT_OPTION_END,
};

static ttt_status momentum_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    momentum_cfg *c = cfg;
    TTT_TRY(ttt_optim_read_momentum(opts, &c->mu, err));
    c->nesterov = ttt_optim_arg_num(opts, "nesterov") != 0.0;
    return TTT_OK;
}

static int momentum_n_state(const void *cfg) { return 1; /* M */ }

/* The momentum accumulator with g = −θ (M in weight units), then W ← αW + d (optim/parts.h). */
static void momentum_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out,
                          ttt_tensor **state_out, const ttt_tensor *W,
                          const ttt_tensor *const *state, const ttt_tensor *G,
                          const ttt_optim_block *blk) {
    const momentum_cfg *c = cfg;
    /* d = M_new = μM − θG (heavy ball) or μM_new − θG (nesterov) */
    ttt_tensor *d = ttt_part_momentum(ctx, &state_out[0], state[0], G, c->mu, -blk->theta,
                                      c->nesterov);
    *W_out = ttt_part_update(ctx, W, blk, 1.0f, 1.0f, d); /* αW + d */
}

/* Heavy-ball momentum (not Nesterov's look-ahead): Titans' chunked form applies. */
static ttt_optim_traits momentum_traits(const void *cfg) {
    const momentum_cfg *c = cfg;
    return (ttt_optim_traits){.momentum = !c->nesterov, .mu = c->mu, .linear_in_G = 1};
}

const ttt_optim ttt_optim_momentum = {
    .name = "momentum",
    .help = "momentum with decoupled decay (Titans): M <- mu*M - lr*G; W <- decay*W + M",
    .options = momentum_options,
    .cfg_size = sizeof(momentum_cfg),
    .parse = momentum_parse,
    .n_state = momentum_n_state,
    .init_state = NULL,
    .step = momentum_step,
    .traits = momentum_traits,
};
