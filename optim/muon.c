/* Muon: momentum, then Newton–Schulz orthogonalization of the update (docs/math.md §3 "muon").
 *
 *     M ← μ M + G
 *     U = NS(M)                  (nesterov: U = NS(G + μ M) with the updated M)
 *     W ← (1 − λ) α W − θ s U
 *
 * α is the block's retention (`decay`), λ the decoupled weight decay (`weight_decay`), and the
 * shape factor s (`scale`):
 *   muon — s = sqrt(max(1, rows/cols)) of the weight as stored (docs/math.md §3; Keller Jordan's
 *          formula applied to our layout);
 *   fan  — s = sqrt(max(1, cols/rows)). Our weights are (fan_in, fan_out) because models compute
 *          x·W (docs/math.md §0), while PyTorch stores (fan_out, fan_in): this is Muon's
 *          sqrt(max(1, fan_out/fan_in)) as meant for PyTorch weights;
 *   none — s = 1.
 * For square weights (the linear model with d_k = d_v) all three agree.
 *
 * Muon is for matrices. A 1-D weight (a bias, a LayerNorm gain) is treated as one row, so NS
 * returns p(1)·G/‖G‖ (a normalized-gradient step of fixed length, see newton_schulz.h) and s = 1.
 * A zero G gives a zero update (NS(0) = 0). Defaults follow Muon: μ = 0.95, Nesterov, the muon
 * quintic for 5 steps.
 *
 * Built from optim/parts.h (docs/optimizers.md "Parts"): the momentum accumulator with g = 1,
 * the orthogonalization, and the update with keep = 1 − λ, scale = −θs. */
#include <math.h>
#include <string.h>

#include "parts.h"

typedef enum muon_scale { SCALE_MUON, SCALE_FAN, SCALE_NONE } muon_scale;

typedef struct muon_cfg {
    float mu;
    int nesterov;
    float weight_decay;
    muon_scale scale;
    ttt_ns_cfg ns;
} muon_cfg;

static const ttt_option muon_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"momentum", TTT_OPT_FLOAT, "0.95", 0.0, 1.0, NULL,
     "momentum mu (must be < 1): M <- mu*M + G (0 = orthogonalize the block gradient itself)"},
    {"nesterov", TTT_OPT_BOOL, "true", TTT_NO_RANGE, NULL,
     "orthogonalize G + mu*M (with the updated M) instead of M"},
    TTT_NS_OPTIONS,
    {"scale", TTT_OPT_CHOICE, "muon", TTT_NO_RANGE, "muon|fan|none",
     "update factor s: muon = sqrt(max(1, rows/cols)) (docs/math.md), fan = sqrt(max(1, cols/rows)) "
     "(Muon's fan_out/fan_in for our (fan_in, fan_out) weights), none = 1"},
    {"weight_decay", TTT_OPT_FLOAT, "0.0", 0.0, 1.0, NULL,
     "decoupled weight decay lambda: W <- (1 - lambda)*decay*W - lr*s*U"},
    TTT_OPTION_END,
};

static ttt_status muon_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    muon_cfg *c = cfg;
    TTT_TRY(ttt_optim_read_momentum(opts, &c->mu, err));
    c->nesterov = ttt_optim_arg_num(opts, "nesterov") != 0.0;
    c->weight_decay = (float)ttt_optim_arg_num(opts, "weight_decay");
    const char *s = ttt_optim_arg_text(opts, "scale");
    c->scale = strcmp(s, "fan") == 0 ? SCALE_FAN : strcmp(s, "none") == 0 ? SCALE_NONE : SCALE_MUON;
    ttt_ns_parse(&c->ns, opts);
    return TTT_OK;
}

/* The momentum buffer is only kept when there is momentum. */
static int muon_n_state(const void *cfg) { return ((const muon_cfg *)cfg)->mu > 0.0f ? 1 : 0; }

static float muon_shape_factor(muon_scale scale, const ttt_tensor *W) {
    int r, c;
    ttt_ns_matrix_dims(W, &r, &c);
    if (W->ndim == 1 || scale == SCALE_NONE) return 1.0f;
    double ratio = scale == SCALE_MUON ? (double)r / c : (double)c / r;
    return (float)sqrt(ratio > 1.0 ? ratio : 1.0);
}

/* momentum → orthogonalize → update, from optim/parts.h. */
static void muon_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                      const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                      const ttt_optim_block *blk) {
    const muon_cfg *c = cfg;
    const ttt_tensor *A = G; /* what gets orthogonalized: M_new, G + μM_new, or G itself */
    if (c->mu > 0.0f) A = ttt_part_momentum(ctx, &state_out[0], state[0], G, c->mu, 1.0f,
                                            c->nesterov);
    ttt_tensor *U = ttt_part_orthogonalize(ctx, A, &c->ns);
    const float s = muon_shape_factor(c->scale, W);
    *W_out = ttt_part_update(ctx, W, blk, 1.0f - c->weight_decay, -blk->theta * s, U);
}

const ttt_optim ttt_optim_muon = {
    .name = "muon",
    .help = "Muon: M <- mu*M + G; W <- (1-weight_decay)*decay*W - lr*s*NS(M) (Newton-Schulz "
            "orthogonalized momentum)",
    .options = muon_options,
    .cfg_size = sizeof(muon_cfg),
    .parse = muon_parse,
    .n_state = muon_n_state,
    .init_state = NULL,
    .step = muon_step,
};
