/* Large-chunk test-time training, the LaCT recipe (docs/math.md §3 "large_batch").
 *
 * Meant for `order: apply_then_update` with a huge mini_batch b (2K … 1M tokens): the driver hands
 * over the block gradient G = Σ_s η_s ∇ℓ_s(W_0) once per block, and
 *
 *     M ← μ M + G                        (momentum over blocks; μ = 0: M is G, nothing is kept)
 *     U = NS(M)  if muon, else M          (Newton–Schulz, newton_schulz.h; no shape factor)
 *     W ← α W − θ U
 *     W ← W / (‖W‖ + 1e-5) · ‖W_init‖     per output channel (renormalize)
 *
 * Renormalization axis. LaCT stores a fast weight as (fan_out, fan_in) and applies it as W·x; it
 * rescales every stored row, i.e. every output channel, to its norm at initialization. Our models
 * compute x·W with W of shape (fan_in, fan_out) (docs/math.md §0), so LaCT's rows are our COLUMNS:
 * `renormalize_axis: columns` (default) is LaCT's rule; `rows` is the literal reading of
 * docs/math.md §3 in our layout (one norm per input dimension). A 1-D weight is one vector (one norm).
 *
 * The initial norms are taken by init_state, which ttt_layer_state_init calls after the model
 * has initialized the weights. Code that overwrites the weights afterwards rebuilds the state
 * from them (ttt_optim_reinit_state, optim.h), which here runs init_state_ops: the same norms
 * through recorded ops (row_norms, then broadcast), so that with learned initial weights (the
 * sequence model's w0 parameters) the target is ‖W_0‖ of the learned W_0 and the outer loop's
 * gradient flows through it, as in LaCT, where w0 is a parameter and its norm a graph node.
 * Either call fully (re)sets the state (momentum to zero).
 * State (optim.h state_shape): [M if μ > 0, W's shape] then [N if renormalize, one initial norm
 * per channel, a vector], so the rule needs no pass over W_init later. The step reads N through
 * ops, so N's gradient, when it has one, reaches W_0. Built from optim/parts.h (momentum,
 * orthogonalize, update, renormalize; docs/optimizers.md "Parts").
 *
 * Renormalization needs a randomly initialized model. A channel whose initial norm is zero (the
 * linear model starts at S = 0) has no norm to return to: the literal rule would pin it to zero
 * forever, so such a channel is left as the plain step produced it (renormalization is a no-op
 * for a zero-initialized model, which then runs the plain rule above). */
#include <string.h>

#include "parts.h"

typedef struct large_batch_cfg {
    float mu;
    int muon;
    ttt_ns_cfg ns;
    int renormalize;
    int axis_rows; /* 1: one norm per row; 0: per column (output channel) */
} large_batch_cfg;

static const ttt_option large_batch_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"momentum", TTT_OPT_FLOAT, "0.0", 0.0, 1.0, NULL,
     "momentum over blocks mu (must be < 1): M <- mu*M + G (0 = none)"},
    {"muon", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "orthogonalize the update with Newton-Schulz (coefficients, steps below)"},
    TTT_NS_OPTIONS,
    {"renormalize", TTT_OPT_BOOL, "true", TTT_NO_RANGE, NULL,
     "after each step rescale every channel to its norm at initialization (channels that start "
     "at zero are left alone; needs a randomly initialized model to matter)"},
    {"renormalize_axis", TTT_OPT_CHOICE, "columns", TTT_NO_RANGE, "columns|rows",
     "columns: one norm per output channel (LaCT; our weights are (fan_in, fan_out)); rows: one "
     "norm per input dimension"},
    TTT_OPTION_END,
};

static ttt_status large_batch_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    large_batch_cfg *c = cfg;
    TTT_TRY(ttt_optim_read_momentum(opts, &c->mu, err));
    c->muon = ttt_optim_arg_num(opts, "muon") != 0.0;
    ttt_ns_parse(&c->ns, opts);
    c->renormalize = ttt_optim_arg_num(opts, "renormalize") != 0.0;
    c->axis_rows = strcmp(ttt_optim_arg_text(opts, "renormalize_axis"), "rows") == 0;
    return TTT_OK;
}

static int has_momentum(const large_batch_cfg *c) { return c->mu > 0.0f; }

static ttt_renorm_axis renorm_axis(const large_batch_cfg *c) {
    return c->axis_rows ? TTT_RENORM_ROWS : TTT_RENORM_COLUMNS;
}

static int large_batch_n_state(const void *cfg) {
    const large_batch_cfg *c = cfg;
    return has_momentum(c) + (c->renormalize ? 1 : 0);
}

/* [M: W's shape if μ > 0] then [N: one target norm per channel if renormalize]. */
static int large_batch_state_shape(const void *cfg, int *shape, int i, const int *w_shape,
                                   int w_ndim) {
    const large_batch_cfg *c = cfg;
    if (i == 0 && has_momentum(c)) {
        memcpy(shape, w_shape, (size_t)w_ndim * sizeof *shape);
        return w_ndim;
    }
    return ttt_part_renorm_shape(shape, renorm_axis(c), w_shape, w_ndim);
}

static void large_batch_init_state(const void *cfg, ttt_tensor **state, const ttt_tensor *W) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    if (has_momentum(c)) ttt_tensor_fill(state[s++], 0.0f);
    if (c->renormalize) ttt_part_renorm_init(state[s], renorm_axis(c), W);
}

/* init_state through ops: N = the channel norms of W. */
static void large_batch_init_state_ops(ttt_ctx *ctx, const void *cfg, ttt_tensor **state,
                                       const ttt_tensor *W) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    if (has_momentum(c)) state[s++] = ttt_tensor_zeros_like(ctx, W);
    if (c->renormalize) state[s] = ttt_part_renorm_init_ops(ctx, renorm_axis(c), W);
}

/* momentum → (orthogonalize) → update → renormalize, from optim/parts.h. */
static void large_batch_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out,
                             ttt_tensor **state_out, const ttt_tensor *W,
                             const ttt_tensor *const *state, const ttt_tensor *G,
                             const ttt_optim_block *blk) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    const ttt_tensor *U = G;
    if (has_momentum(c)) U = ttt_part_momentum(ctx, &state_out[s++], state[0], G, c->mu, 1.0f, 0);
    if (c->muon) U = ttt_part_orthogonalize(ctx, U, &c->ns);
    ttt_tensor *Wn = ttt_part_update(ctx, W, blk, 1.0f, -blk->theta, U); /* αW − θU */
    if (!c->renormalize) {
        *W_out = Wn;
        return;
    }
    /* the initial norms never change: the same tensor goes on (ops never modify their inputs,
     * so sharing is safe, as ttt_optim_apply_decay's W) */
    state_out[s] = (ttt_tensor *)state[s];
    *W_out = ttt_part_renormalize(ctx, Wn, state[s], renorm_axis(c));
}

/* One update per large block from its start weights (LaCT): the per-block form applies. */
static ttt_optim_traits large_batch_traits(const void *cfg) {
    (void)cfg;
    return (ttt_optim_traits){.block_step = 1};
}

const ttt_optim ttt_optim_large_batch = {
    .name = "large_batch",
    .help = "LaCT's large-chunk update: optional momentum and Newton-Schulz, W <- decay*W - lr*U, "
            "then each channel rescaled to its initial norm (use with apply_then_update, huge b)",
    .options = large_batch_options,
    .cfg_size = sizeof(large_batch_cfg),
    .parse = large_batch_parse,
    .n_state = large_batch_n_state,
    .state_shape = large_batch_state_shape,
    .init_state = large_batch_init_state,
    .init_state_ops = large_batch_init_state_ops,
    .step = large_batch_step,
    .traits = large_batch_traits,
};
