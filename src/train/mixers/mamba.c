/* Mamba(1) (model.mixer: mamba; Gu & Dao 2023, docs/math.md §8.2): the selective-scan block.
 *     [x | z] = h W_in,  x' = SiLU(conv_K(x) + b),  [δ | B | C] = x' W_x,
 *     Δ = softplus(δ W_dt + b_dt),  y = selective_scan(x', Δ, A = −exp(A_log), B, C, D),
 *     o = y ⊙ SiLU(z)                                         (B·T, d_inner), d_inner = H·D
 * and the block's W_o is Mamba's output projection (no output norm, no second gate). With
 * model.head_dim 0, d_inner = mamba_expand · d_model (the paper's E = 2); otherwise
 * heads × head_dim. The kernels and their backward: layers/diagonal/. */
#include "mixer.h"

#include <math.h>
#include <string.h>

#include "diagonal.h"
#include "ops.h"

enum { W_IN, CONV_W, CONV_B, W_X, W_DT, B_DT, A_LOG, D_SKIP, N_OWN }; /* ids->own */
enum { STATE, EXPAND, DT_RANK, CONV_K };                             /* cfg->own */
_Static_assert(N_OWN <= TTT_MIXER_MAX_IDS, "the mamba mixer's ids fit in ttt_block_ids.own");

static const ttt_option options[] = {
    {"mamba_state", TTT_OPT_INT, "16", 1, 1024, NULL,
     "mamba mixer: state size N per channel (the paper's 16)"},
    {"mamba_expand", TTT_OPT_INT, "2", 1, 16, NULL,
     "mamba mixer: inner width d_inner = expand x d_model when model.head_dim is 0"},
    {"mamba_dt_rank", TTT_OPT_INT, "0", 0, 65536, NULL,
     "mamba mixer: rank of the step's projection; 0 = ceil(d_model / 16)"},
    {"mamba_conv", TTT_OPT_INT, "4", 1, 64, NULL,
     "mamba mixer: width of the causal depthwise convolution on the x branch"},
    TTT_OPTION_END,
};

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    c->own[STATE] = (double)ttt_cfg_int(map, "mamba_state");
    c->own[EXPAND] = (double)ttt_cfg_int(map, "mamba_expand");
    const int r = (int)ttt_cfg_int(map, "mamba_dt_rank");
    c->own[DT_RANK] = r > 0 ? r : (c->d_model + 15) / 16;
    c->own[CONV_K] = (double)ttt_cfg_int(map, "mamba_conv");
    if (ttt_cfg_int(map, "head_dim") == 0) { /* d_inner = E · d_model over the heads */
        const int di = (int)c->own[EXPAND] * c->d_model;
        if (di % c->n_heads != 0)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "heads"),
                                 "model.heads: mamba's inner width %d (mamba_expand x d_model) "
                                 "is not a multiple of heads = %d; set head_dim explicitly",
                                 di, c->n_heads);
        c->head_dim = di / c->n_heads;
    }
    if (c->positions == TTT_POS_ROPE)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                             "model.positions: rope applies to softmax attention; mamba's "
                             "recurrence and convolution know positions (use auto or none)");
    const int eta = ttt_mixer_tri(map, "eta");
    if (eta > 0 || strcmp(ttt_cfg_str(map, "eta"), "dt") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: mamba's step is its own Δ, not an inner learning rate");
    /* no q/k/v projections: their convolution and activation do not apply (resolved off) */
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = 0;
    c->eta = TTT_ETA_NONE;
    c->gate = TTT_GATE_NONE;
    c->learn_init = 0;
    c->out_norm = ttt_mixer_tri(map, "out_norm") > 0; /* auto: off (Mamba has none) */
    c->out_gate = ttt_mixer_tri(map, "out_gate") > 0; /* auto: off (SiLU(z) is the gate) */
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    (void)l;
    const int d = c->d_model, di = c->n_heads * c->head_dim, N = (int)c->own[STATE];
    const int r = (int)c->own[DT_RANK], K = (int)c->own[CONV_K];
    k->own[W_IN] = ttt_mixer_add(b, "w_in", 2, (int[]){d, 2 * di}, 1, TTT_INIT_NORMAL,
                                 c->init_std);
    k->own[CONV_W] = ttt_mixer_add(b, "conv_w", 2, (int[]){K, di}, 0, TTT_INIT_NORMAL,
                                   1.0f / sqrtf((float)K));
    k->own[CONV_B] = ttt_mixer_add(b, "conv_b", 1, (int[]){di}, 0, TTT_INIT_ZEROS, 0);
    k->own[W_X] = ttt_mixer_add(b, "w_x", 2, (int[]){di, r + 2 * N}, 1, TTT_INIT_NORMAL,
                                c->init_std);
    /* Mamba's dt projection: std r^−1/2, so δ W_dt starts O(1) around the bias */
    k->own[W_DT] = ttt_mixer_add(b, "w_dt", 2, (int[]){r, di}, 1, TTT_INIT_NORMAL,
                                 1.0f / sqrtf((float)r));
    /* softplus⁻¹ of dt log-uniform in [model.dt_min, model.dt_max] (1e-3, 0.1: the paper's) */
    k->own[B_DT] = ttt_mixer_add(b, "dt_bias", 1, (int[]){di}, 0, TTT_INIT_DT_BIAS, 0);
    k->own[A_LOG] = ttt_mixer_add(b, "a_log", 2, (int[]){di, N}, 0, TTT_INIT_ZEROS, 0);
    if (!ttt_mixer_failed(b)) /* S4D-real: A_{i,n} = −(n + 1) */
        ttt_mamba_init_a_log(ttt_mixer_param(b, k->own[A_LOG])->data, di, N);
    k->own[D_SKIP] = ttt_mixer_add(b, "d", 1, (int[]){di}, 0, TTT_INIT_ONES, 0);
}

static double param_bound(const ttt_seq_model_config *c) {
    const double d = c->d_model, di = (double)c->n_heads * c->head_dim, N = c->own[STATE];
    const double r = c->own[DT_RANK], K = c->own[CONV_K];
    return d * 2 * di + K * di + di + di * (r + 2 * N) + r * di + di + di * N + di;
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    const int *own = call->ids->own;
    const ttt_mamba_weights w = {
        ttt_mixer_p(call, own[W_IN]), ttt_mixer_p(call, own[CONV_W]),
        ttt_mixer_p(call, own[CONV_B]), ttt_mixer_p(call, own[W_X]),
        ttt_mixer_p(call, own[W_DT]), ttt_mixer_p(call, own[B_DT]),
        ttt_mixer_p(call, own[A_LOG]), ttt_mixer_p(call, own[D_SKIP])};
    /* the recurrence (1 block): one short training sequence per call, nothing to split */
    *out = ttt_mamba_block(call->ctx, &w, call->h, call->B, call->T, 1);
    return TTT_OK;
}

/* Every step of the block has a device implementation (docs/device_ops.md): the projections,
 * the causal convolution, SiLU, softplus and the selective scan ("Recurrences" there, one per
 * sequence). */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    (void)c, (void)buf, (void)len;
    return NULL;
}

const ttt_mixer ttt_mixer_mamba = {
    .name = "mamba",
    .help = "Mamba(1): selective scan h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t in Mamba's block "
            "(in-projection, causal conv + SiLU, SiLU(z) gate; docs/math.md §8.2)",
    .positions = TTT_POS_NONE,
    .options = options,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .device_refuse = device_refuse,
};
