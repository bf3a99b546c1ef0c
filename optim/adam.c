/* Adam on the block gradient, with the layer's decay as decoupled weight decay (AdamW-style;
 * docs/math.md §3 "going further": per-coordinate second moment).
 *
 *     m ← β1 m + (1 − β1) G            v ← β2 v + (1 − β2) G²          t ← t + 1
 *     m̂ = m / (1 − β1^t)               v̂ = v / (1 − β2^t)
 *     W ← α W − θ m̂ / (sqrt(v̂) + ε)
 *
 * This file is also the worked example of adding an optimizer
 * (docs/extending.md "Adding an inner optimizer", docs/optimizers.md): one `const ttt_optim`
 * here, one line in optim/optim_list.h; a state tensor of its own shape (the step count) through
 * state_shape.
 *
 * State (optim.h state_shape): m and v of W's shape, and the step count t, a 1-element tensor
 * (every coordinate has seen the same t steps). It stays a tensor so that it travels with the rest
 * of the state (carried between calls, saved) like m and v. Stored as float it is exact up to 2^24
 * steps, far beyond where the bias corrections (1 − β^t) have reached 1 in float32. */
#include <math.h>
#include <string.h>

#include "parts.h"

typedef struct adam_cfg {
    float beta1, beta2, eps;
} adam_cfg;

static const ttt_option adam_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"beta1", TTT_OPT_FLOAT, "0.9", 0.0, 1.0, NULL,
     "decay rate of the first moment m (must be < 1)"},
    {"beta2", TTT_OPT_FLOAT, "0.999", 0.0, 1.0, NULL,
     "decay rate of the second moment v (must be < 1)"},
    /* eps > 0: with eps = 0 a coordinate whose gradients have all been exactly zero (one-hot
     * keys, zero inputs) steps by 0/0 = NaN. 1e-30 is still a normal float. */
    {"eps", TTT_OPT_FLOAT, "1e-8", 1e-30, 1.0, NULL,
     "added to sqrt(v_hat) in the denominator"},
    TTT_OPTION_END,
};

static ttt_status adam_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    adam_cfg *c = cfg;
    c->beta1 = (float)ttt_optim_arg_num(opts, "beta1");
    c->beta2 = (float)ttt_optim_arg_num(opts, "beta2");
    c->eps = (float)ttt_optim_arg_num(opts, "eps");
    /* β = 1 would make the bias correction 1 − β^t zero (a division by zero). */
    const char *bad = c->beta1 >= 1.0f ? "beta1" : c->beta2 >= 1.0f ? "beta2" : NULL;
    if (bad)
        return ttt_optim_arg_error(err, TTT_ERR_RANGE, opts, bad,
                                   "layer.optimizer.%s: 1 is out of range; expected a value in "
                                   "[0, 1) (the bias correction divides by 1 - %s^t)",
                                   bad, bad);
    return TTT_OK;
}

enum { ADAM_M, ADAM_V, ADAM_T, ADAM_N_STATE };

static int adam_n_state(const void *cfg) { return ADAM_N_STATE; }

/* m and v have W's shape; t is one number. */
static int adam_state_shape(const void *cfg, int *shape, int i, const int *w_shape, int w_ndim) {
    if (i == ADAM_T) {
        shape[0] = 1;
        return 1;
    }
    memcpy(shape, w_shape, (size_t)w_ndim * sizeof *shape);
    return w_ndim;
}

static void adam_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                      const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                      const ttt_optim_block *blk) {
    const adam_cfg *c = cfg;
    ttt_tensor *m = ttt_axpby(ctx, c->beta1, state[ADAM_M], 1.0f - c->beta1, G);
    ttt_tensor *v = ttt_axpby(ctx, c->beta2, state[ADAM_V], 1.0f - c->beta2, ttt_square(ctx, G));
    const double t = (double)state[ADAM_T]->data[0] + 1.0;
    ttt_tensor *count = ttt_tensor_zeros_like(ctx, state[ADAM_T]); /* (1) */
    count->data[0] = (float)t;
    /* bias corrections in double: 1 − β^t loses all precision in float for β near 1, small t */
    const float bc1 = (float)(1.0 - pow(c->beta1, t)), bc2 = (float)(1.0 - pow(c->beta2, t));
    ttt_tensor *m_hat = ttt_scale(ctx, m, 1.0f / bc1);
    ttt_tensor *v_hat = ttt_scale(ctx, v, 1.0f / bc2);
    ttt_tensor *dir = ttt_div(ctx, m_hat, ttt_add_scalar(ctx, ttt_sqrt(ctx, v_hat), c->eps));
    *W_out = ttt_part_update(ctx, W, blk, 1.0f, -blk->theta, dir); /* αW − θ·dir */
    state_out[ADAM_M] = m;
    state_out[ADAM_V] = v;
    state_out[ADAM_T] = count;
}

const ttt_optim ttt_optim_adam = {
    .name = "adam",
    .help =
        "Adam with bias correction and decoupled decay: W <- decay*W - lr*m_hat/(sqrt(v_hat)+eps)",
    .options = adam_options,
    .cfg_size = sizeof(adam_cfg),
    .parse = adam_parse,
    .n_state = adam_n_state,
    .state_shape = adam_state_shape,
    .init_state = NULL,
    .step = adam_step,
};
