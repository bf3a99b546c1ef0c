/* Large-chunk test-time training, the LaCT recipe (MATH.md §3 "large_batch").
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
 * compute x·W with W of shape (fan_in, fan_out) (MATH.md §0), so LaCT's rows are our COLUMNS:
 * `renormalize_axis: columns` (default) is LaCT's rule; `rows` is the literal reading of
 * MATH.md §3 in our layout (one norm per input dimension). A 1-D weight is one vector (one norm).
 *
 * The initial norms are taken by init_state, which ttt_layer_state_init calls after the model
 * has initialized the weights. Code that overwrites the weights afterwards rebuilds the state
 * from them (ttt_optim_reinit_state, optim.h), which here runs init_state_ops: the same norms
 * through recorded ops (row_norms, then broadcast), so that with learned initial weights (the
 * sequence model's w0 parameters) the target is ‖W_0‖ of the learned W_0 and the outer loop's
 * gradient flows through it, as in LaCT, where w0 is a parameter and its norm a graph node.
 * Either call fully (re)sets the state (momentum to zero).
 * State: [M if μ > 0] then [N if renormalize], both of W's shape; every element of N holds the
 * initial norm of its channel (so the rule needs no pass over W_init later). The step reads N
 * through ops (one row or column of it), so N's gradient, when it has one, reaches W_0.
 *
 * Renormalization needs a randomly initialized model. A channel whose initial norm is zero (the
 * linear model starts at S = 0) has no norm to return to: the literal rule would pin it to zero
 * forever, so such a channel is left as the plain step produced it (renormalization is a no-op
 * for a zero-initialized model, which then runs the plain rule above). */
#include <math.h>
#include <string.h>

#include "newton_schulz.h"
#include "optim.h"

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

static ttt_status large_batch_parse(void *cfg, const ttt_cfg_node *opts, ttt_error *err) {
    large_batch_cfg *c = cfg;
    TTT_TRY(ttt_optim_read_momentum(opts, &c->mu, err));
    c->muon = ttt_cfg_bool(opts, "muon");
    ttt_ns_parse(&c->ns, opts);
    c->renormalize = ttt_cfg_bool(opts, "renormalize");
    c->axis_rows = strcmp(ttt_cfg_str(opts, "renormalize_axis"), "rows") == 0;
    return TTT_OK;
}

static int has_momentum(const large_batch_cfg *c) { return c->mu > 0.0f; }

static int large_batch_n_state(const void *cfg) {
    const large_batch_cfg *c = cfg;
    return has_momentum(c) + (c->renormalize ? 1 : 0);
}

/* The matrix view of a weight for renormalization: (rows, cols), and whether the norms run per
 * row. A 1-D weight is a single row with a single norm. */
static void norm_layout(const large_batch_cfg *c, const ttt_tensor *W, int *rows, int *cols,
                        int *per_row) {
    if (W->ndim == 1) {
        *rows = 1, *cols = W->shape[0], *per_row = 1;
    } else {
        *rows = W->shape[0], *cols = (int)(W->n / (size_t)W->shape[0]), *per_row = c->axis_rows;
    }
}

static void large_batch_init_state(const void *cfg, ttt_tensor **state, const ttt_tensor *W) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    if (has_momentum(c)) ttt_tensor_fill(state[s++], 0.0f);
    if (!c->renormalize) return;
    int rows, cols, per_row;
    norm_layout(c, W, &rows, &cols, &per_row);
    float *N = state[s]->data; /* (rows, cols): the initial norm of each element's channel */
    if (per_row) {
        for (int i = 0; i < rows; i++) {
            const float *w = W->data + (size_t)i * cols; /* (cols) */
            double acc = 0;
            for (int j = 0; j < cols; j++) acc += (double)w[j] * w[j];
            for (int j = 0; j < cols; j++) N[(size_t)i * cols + j] = (float)sqrt(acc);
        }
    } else {
        for (int j = 0; j < cols; j++) {
            double acc = 0;
            for (int i = 0; i < rows; i++) {
                double w = W->data[(size_t)i * cols + j];
                acc += w * w;
            }
            for (int i = 0; i < rows; i++) N[(size_t)i * cols + j] = (float)sqrt(acc);
        }
    }
}

/* t as a (rows, cols) matrix: t itself when it already is one (no tape entry), else a recorded
 * reshape. */
static ttt_tensor *as_matrix(ttt_ctx *ctx, const ttt_tensor *t, int rows, int cols) {
    if (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) return (ttt_tensor *)t;
    return ttt_reshape(ctx, t, 2, (int[]){rows, cols});
}

/* init_state through ops: N = the channel norms of W broadcast to W's shape. */
static void large_batch_init_state_ops(ttt_ctx *ctx, const void *cfg, ttt_tensor **state,
                                       const ttt_tensor *W) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    if (has_momentum(c)) state[s++] = ttt_tensor_zeros_like(ctx, W);
    if (!c->renormalize) return;
    int rows, cols, per_row;
    norm_layout(c, W, &rows, &cols, &per_row);
    ttt_tensor *Wm = as_matrix(ctx, W, rows, cols); /* (rows, cols) */
    ttt_tensor *nrm = per_row ? ttt_row_norms(ctx, Wm)
                              : ttt_row_norms(ctx, ttt_transpose(ctx, Wm)); /* (nch) */
    ttt_tensor *ones = ttt_tensor_2d(ctx, rows, cols);
    ttt_tensor_fill(ones, 1.0f);
    ttt_tensor *N = per_row ? ttt_scale_rows(ctx, ones, nrm) : ttt_scale_cols(ctx, ones, nrm);
    state[s] = W->ndim == 2 ? N : ttt_reshape(ctx, N, W->ndim, W->shape);
}

static void large_batch_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out,
                             ttt_tensor **state_out, const ttt_tensor *W,
                             const ttt_tensor *const *state, const ttt_tensor *G,
                             const ttt_optim_block *blk) {
    const large_batch_cfg *c = cfg;
    int s = 0;
    const ttt_tensor *U = G;
    if (has_momentum(c)) {
        ttt_tensor *M = ttt_axpby(ctx, c->mu, state[0], 1.0f, G); /* μM + G */
        state_out[s++] = M;
        U = M;
    }
    if (c->muon) U = ttt_newton_schulz(ctx, U, c->ns.set, c->ns.steps);
    ttt_tensor *Wd = ttt_optim_apply_decay(ctx, W, blk);      /* αW */
    ttt_tensor *Wn = ttt_axpby(ctx, 1.0f, Wd, -blk->theta, U); /* αW − θU */
    if (!c->renormalize) {
        *W_out = Wn;
        return;
    }
    const ttt_tensor *N = state[s];
    /* the initial norms never change: the same tensor goes on (ops never modify their inputs,
     * so sharing is safe, as ttt_optim_apply_decay's W) */
    state_out[s] = (ttt_tensor *)N;
    int rows, cols, per_row;
    norm_layout(c, W, &rows, &cols, &per_row);
    const int nch = per_row ? rows : cols;
    /* factor per channel ‖W_init‖/(‖W‖ + 1e-5), in ops so that the outer loop differentiates
     * through the current norms, and through the initial norms when N is a graph node (learned
     * initial weights, init_state_ops); one row (or column) of N holds them all */
    ttt_tensor *Wm = as_matrix(ctx, Wn, rows, cols); /* (rows, cols) */
    ttt_tensor *nrm = per_row ? ttt_row_norms(ctx, Wm) : ttt_row_norms(ctx, ttt_transpose(ctx, Wm));
    ttt_tensor *Nm = as_matrix(ctx, N, rows, cols);
    ttt_tensor *n0 = per_row ? ttt_reshape(ctx, ttt_slice_cols(ctx, Nm, 0, 1), 1, (int[]){nch})
                             : ttt_slice_rows(ctx, Nm, 0, 1); /* (nch), or (1, nch) */
    ttt_tensor *keep = ttt_tensor_1d(ctx, nch), *pass = ttt_tensor_1d(ctx, nch);
    for (int ch = 0; ch < nch; ch++) {
        /* a channel that started at zero has no norm to return to: leave it (factor 1; its
         * target's gradient is then 0, as row_norms' is at a zero row) */
        keep->data[ch] = n0->data[ch] > 0.0f ? 1.0f : 0.0f;
        pass->data[ch] = n0->data[ch] > 0.0f ? 0.0f : 1.0f;
    }
    ttt_tensor *ratio = ttt_div(ctx, n0, ttt_add_scalar(ctx, nrm, 1e-5f));
    ttt_tensor *f = ttt_add(ctx, ttt_mul(ctx, ratio, keep), pass); /* (nch) */
    ttt_tensor *R = per_row ? ttt_scale_rows(ctx, Wm, f) : ttt_scale_cols(ctx, Wm, f);
    *W_out = W->ndim == 2 ? R : ttt_reshape(ctx, R, W->ndim, W->shape);
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
    .init_state = large_batch_init_state,
    .init_state_ops = large_batch_init_state_ops,
    .step = large_batch_step,
    .traits = large_batch_traits,
};
